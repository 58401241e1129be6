//! The OpenAI-compatible chat-completions wire shape (OpenAI, and the local servers that speak
//! it: Ollama, vLLM, llama.cpp). Tool calls carry their arguments as a JSON string.

use serde_json::{json, Value};

use super::{
    arguments_value, excerpt, ChatMessage, Header, ModelError, ModelRequest, ModelToolCall,
    ModelTurn, TokenUsage,
};

/// Below the spec's `base_url`.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";
const SHAPE: &str = "chat completion";

/// Path, headers and body of one call.
pub fn request(
    request: ModelRequest<'_>,
    api_key: Option<&str>,
) -> (&'static str, Vec<Header>, Value) {
    let mut messages = vec![json!({ "role": "system", "content": request.system })];
    messages.extend(request.messages.iter().map(message));
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "max_tokens": request.max_output_tokens,
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({ "type": "function", "function": {
                    "name": tool.name, "description": tool.description, "parameters": tool.parameters,
                }})
            })
            .collect();
    }
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

fn message(message: &ChatMessage) -> Value {
    match message {
        ChatMessage::User { text } => json!({ "role": "user", "content": text }),
        ChatMessage::Assistant { text, tool_calls } if tool_calls.is_empty() => {
            json!({ "role": "assistant", "content": text })
        }
        ChatMessage::Assistant { text, tool_calls } => json!({
            "role": "assistant",
            "content": if text.is_empty() { Value::Null } else { json!(text) },
            "tool_calls": tool_calls.iter().map(|call| json!({
                "id": call.id,
                "type": "function",
                "function": { "name": call.name, "arguments": call.arguments.to_string() },
            })).collect::<Vec<_>>(),
        }),
        ChatMessage::Tool {
            call_id, output, ..
        } => json!({ "role": "tool", "tool_call_id": call_id, "content": output }),
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
    use crate::exec::model::ToolSchema;

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
        assert_eq!(path, "/v1/chat/completions");
        assert!(headers[0].sensitive);
        assert_eq!(body["messages"][0]["content"], "sys");
        assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"q\":1}");
        assert_eq!(body["messages"][3]["role"], "tool");
        assert_eq!(body["tools"][0]["function"]["name"], "lookup");
        assert!(!body.to_string().contains("sk-key"));
    }
}
