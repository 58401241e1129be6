//! The OpenAI-compatible chat-completions wire shape (OpenAI, and the local servers that speak
//! it: Ollama, vLLM, llama.cpp). Tool calls carry their arguments as a JSON string.

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::Value;

use super::{
    arguments_value, excerpt, ChatMessage, Header, ModelError, ModelRequest, ModelToolCall,
    ModelTurn, TokenUsage, ToolSchema,
};

/// Below the spec's `base_url`.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";
const SHAPE: &str = "chat completion";

/// Path, headers and body of one call. The body borrows the conversation: it is written
/// straight to bytes (`super::write_request`), never built as a `Value` first.
pub fn request<'a>(
    request: ModelRequest<'a>,
    api_key: Option<&str>,
) -> (&'static str, Vec<Header>, impl Serialize + 'a) {
    let body = Body {
        model: request.model,
        messages: Messages {
            system: request.system,
            conversation: request.messages,
        },
        max_tokens: request.max_output_tokens,
        tools: request.tools.iter().map(Tool::of).collect(),
    };
    let headers = api_key
        .map(|key| Header {
            name: "authorization".into(),
            value: format!("Bearer {key}"),
            sensitive: true,
        })
        .into_iter()
        .collect();
    (CHAT_COMPLETIONS_PATH, headers, body)
}

/// A chat completion request.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Messages<'a>,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
}

/// The system prompt as the first message, then the conversation.
struct Messages<'a> {
    system: &'a str,
    conversation: &'a [ChatMessage],
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.conversation.len() + 1))?;
        seq.serialize_element(&Message::System {
            content: self.system,
        })?;
        for message in self.conversation {
            seq.serialize_element(&Message::of(message))?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum Message<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    /// `content` is null when the model only called tools.
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<Call<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

impl<'a> Message<'a> {
    fn of(message: &'a ChatMessage) -> Self {
        match message {
            ChatMessage::User { text } => Message::User { content: text },
            ChatMessage::Assistant { text, tool_calls } => Message::Assistant {
                content: (tool_calls.is_empty() || !text.is_empty()).then_some(text.as_str()),
                tool_calls: tool_calls.iter().map(Call::of).collect(),
            },
            ChatMessage::Tool {
                call_id, output, ..
            } => Message::Tool {
                tool_call_id: call_id,
                content: output,
            },
        }
    }
}

/// A tool call as the model made it; its arguments go back as a JSON string.
#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: String,
}

impl<'a> Call<'a> {
    fn of(call: &'a ModelToolCall) -> Self {
        Call {
            id: &call.id,
            kind: "function",
            function: CallFunction {
                name: &call.name,
                arguments: call.arguments.to_string(),
            },
        }
    }
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> Tool<'a> {
    fn of(tool: &'a ToolSchema) -> Self {
        Tool {
            kind: "function",
            function: Function {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        }
    }
}

/// Reads a chat completion back.
pub fn answer(body: &[u8]) -> Result<ModelTurn, ModelError> {
    let malformed = |detail: String| ModelError::Malformed {
        shape: SHAPE,
        detail,
    };
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("{e}: {}", excerpt(&String::from_utf8_lossy(body)))))?;
    let message = &value["choices"][0]["message"];
    if !message.is_object() {
        return Err(malformed(format!(
            "no choices[0].message: {}",
            excerpt(&value.to_string())
        )));
    }
    let text = match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => return Err(malformed(format!("content is {other}, not text"))),
    };
    let tool_calls = match &message["tool_calls"] {
        Value::Null => Vec::new(),
        Value::Array(calls) => calls.iter().map(tool_call).collect::<Option<Vec<_>>>().ok_or_else(|| {
            malformed("a tool call lacks id, function.name or function.arguments".into())
        })?,
        other => return Err(malformed(format!("tool_calls is {other}, not a list"))),
    };
    if text.is_empty() && tool_calls.is_empty() && message["content"].is_null() {
        return Err(malformed("neither content nor tool_calls".into()));
    }
    let usage = &value["usage"];
    Ok(ModelTurn {
        text,
        tool_calls,
        usage: TokenUsage {
            input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
            cached_input_tokens: usage["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0),
            output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
        },
    })
}

fn tool_call(call: &Value) -> Option<ModelToolCall> {
    Some(ModelToolCall {
        id: call["id"].as_str()?.to_string(),
        name: call["function"]["name"].as_str()?.to_string(),
        arguments: arguments_value(call["function"].get("arguments")?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_completion_with_tool_calls_and_usage_is_read() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"c1","type":"function","function":{"name":"pause_heartbeats","arguments":"{\"minutes\":5}"}}]}}],
            "usage":{"prompt_tokens":120,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":100}}}"#;
        let turn = answer(body).unwrap();
        assert_eq!(turn.text, "");
        assert_eq!(turn.tool_calls[0].name, "pause_heartbeats");
        assert_eq!(turn.tool_calls[0].arguments, json!({"minutes": 5}));
        assert_eq!(
            turn.usage,
            TokenUsage {
                input_tokens: 120,
                cached_input_tokens: 100,
                output_tokens: 7
            }
        );
    }

    #[test]
    fn anything_else_is_malformed() {
        for bad in [
            &b"{\"choices\":\"garbled"[..],
            b"{}",
            br#"{"choices":[]}"#,
            br#"{"choices":[{"message":{"content":7}}]}"#,
            br#"{"choices":[{"message":{"content":null}}]}"#,
            br#"{"choices":[{"message":{"content":"x","tool_calls":[{"id":"a"}]}}]}"#,
            b"<html>502</html>",
        ] {
            assert!(
                matches!(answer(bad), Err(ModelError::Malformed { .. })),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_request_carries_system_history_tools_and_a_hidden_key() {
        let messages = [
            ChatMessage::User { text: "wake".into() },
            ChatMessage::Assistant {
                text: String::new(),
                tool_calls: vec![ModelToolCall {
                    id: "c1".into(),
                    name: "lookup".into(),
                    arguments: json!({"q": 1}),
                }],
            },
            ChatMessage::Tool {
                call_id: "c1".into(),
                name: "lookup".into(),
                output: "found".into(),
                is_error: false,
            },
        ];
        let tools = [ToolSchema {
            name: "lookup".into(),
            description: "looks up".into(),
            parameters: json!({"type": "object"}),
        }];
        let (path, headers, body) = request(
            ModelRequest {
                model: "m",
                system: "sys",
                messages: &messages,
                tools: &tools,
                max_output_tokens: 100,
            },
            Some("sk-key"),
        );
        let body = serde_json::to_value(&body).unwrap();
        assert_eq!(path, "/v1/chat/completions");
        assert!(headers[0].sensitive);
        assert_eq!(body["messages"][0]["content"], "sys");
        assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"q\":1}");
        assert_eq!(body["messages"][3]["role"], "tool");
        assert_eq!(body["tools"][0]["function"]["name"], "lookup");
        assert!(!body.to_string().contains("sk-key"));
    }
}
