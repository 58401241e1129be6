//! The Anthropic Messages wire shape: a top-level system prompt, content blocks, `tool_use`
//! blocks answered by `tool_result` blocks in the next user message, and a required
//! `max_tokens`.

use serde::Serialize;
use serde_json::Value;

use super::{
    excerpt, ChatMessage, Header, ModelError, ModelRequest, ModelToolCall, ModelTurn, TokenUsage,
    ToolSchema,
};

/// Below the spec's `base_url`.
pub const MESSAGES_PATH: &str = "/v1/messages";
/// The API version this shape follows.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
const SHAPE: &str = "Anthropic Messages";

/// Path, headers and body of one call. The body borrows the conversation: it is written
/// straight to bytes (`super::write_request`), never built as a `Value` first.
pub fn request<'a>(
    request: ModelRequest<'a>,
    api_key: Option<&str>,
) -> (&'static str, Vec<Header>, impl Serialize + 'a) {
    let body = Body {
        model: request.model,
        max_tokens: request.max_output_tokens,
        system: request.system,
        messages: turns(request.messages),
        tools: request.tools.iter().map(Tool::of).collect(),
    };
    let mut headers = vec![Header {
        name: "anthropic-version".into(),
        value: ANTHROPIC_VERSION.into(),
        sensitive: false,
    }];
    if let Some(key) = api_key {
        headers.push(Header {
            name: "x-api-key".into(),
            value: key.into(),
            sensitive: true,
        });
    }
    (MESSAGES_PATH, headers, body)
}

/// A Messages request.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    system: &'a str,
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
}

/// One message: a role and its content blocks.
#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        is_error: bool,
    },
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

impl<'a> Tool<'a> {
    fn of(tool: &'a ToolSchema) -> Self {
        Tool {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.parameters,
        }
    }
}

/// The conversation as alternating user and assistant messages of content blocks: tool
/// results are user content, and consecutive blocks of one role share a message.
fn turns(conversation: &[ChatMessage]) -> Vec<Turn<'_>> {
    let mut out: Vec<Turn<'_>> = Vec::new();
    for message in conversation {
        let (role, blocks) = blocks(message);
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(Turn {
                role,
                content: blocks,
            }),
        }
    }
    out
}

fn blocks(message: &ChatMessage) -> (&'static str, Vec<Block<'_>>) {
    match message {
        ChatMessage::User { text } => ("user", vec![Block::Text { text }]),
        ChatMessage::Assistant { text, tool_calls } => {
            let text = (!text.is_empty()).then_some(Block::Text { text });
            let calls = tool_calls.iter().map(|call| Block::ToolUse {
                id: &call.id,
                name: &call.name,
                input: &call.arguments,
            });
            ("assistant", text.into_iter().chain(calls).collect())
        }
        ChatMessage::Tool {
            call_id,
            output,
            is_error,
            ..
        } => (
            "user",
            vec![Block::ToolResult {
                tool_use_id: call_id,
                content: output,
                is_error: *is_error,
            }],
        ),
    }
}

/// Reads a Messages answer back.
pub fn answer(body: &[u8]) -> Result<ModelTurn, ModelError> {
    let malformed = |detail: String| ModelError::Malformed {
        shape: SHAPE,
        detail,
    };
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("{e}: {}", excerpt(&String::from_utf8_lossy(body)))))?;
    let Some(content) = value["content"].as_array() else {
        return Err(malformed(format!(
            "no content list: {}",
            excerpt(&value.to_string())
        )));
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block["type"].as_str() {
            Some("text") => text.push_str(
                block["text"]
                    .as_str()
                    .ok_or_else(|| malformed("a text block without text".into()))?,
            ),
            Some("tool_use") => tool_calls.push(tool_use(block).ok_or_else(|| {
                malformed("a tool_use block lacks id, name or input".into())
            })?),
            // Thinking and other blocks carry nothing the loop acts on.
            _ => {}
        }
    }
    let usage = &value["usage"];
    let cached = usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
    let uncached = usage["input_tokens"].as_u64().unwrap_or(0)
        + usage["cache_creation_input_tokens"].as_u64().unwrap_or(0);
    Ok(ModelTurn {
        text,
        tool_calls,
        usage: TokenUsage {
            input_tokens: uncached + cached,
            cached_input_tokens: cached,
            output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
        },
    })
}

fn tool_use(block: &Value) -> Option<ModelToolCall> {
    let input = block.get("input")?;
    Some(ModelToolCall {
        id: block["id"].as_str()?.to_string(),
        name: block["name"].as_str()?.to_string(),
        arguments: input.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_message_with_text_tool_use_and_cache_usage_is_read() {
        let body = br#"{"type":"message","role":"assistant","content":[
            {"type":"text","text":"resting"},
            {"type":"tool_use","id":"tu1","name":"pause_heartbeats","input":{"minutes":3}}],
            "stop_reason":"tool_use",
            "usage":{"input_tokens":20,"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":9}}"#;
        let turn = answer(body).unwrap();
        assert_eq!(turn.text, "resting");
        assert_eq!(turn.tool_calls[0].arguments, json!({"minutes": 3}));
        assert_eq!(turn.usage.input_tokens, 125);
        assert_eq!(turn.usage.cached_input_tokens, 100);
        assert_eq!(turn.usage.output_tokens, 9);
    }

    #[test]
    fn anything_else_is_malformed() {
        for bad in [
            &b"{\"content\":"[..],
            b"{}",
            br#"{"content":"text"}"#,
            br#"{"content":[{"type":"tool_use","id":"x"}]}"#,
            br#"{"content":[{"type":"text"}]}"#,
        ] {
            assert!(
                matches!(answer(bad), Err(ModelError::Malformed { .. })),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn tool_results_join_one_user_message_and_the_key_is_a_hidden_header() {
        let conversation = [
            ChatMessage::User { text: "wake".into() },
            ChatMessage::Assistant {
                text: String::new(),
                tool_calls: vec![
                    ModelToolCall { id: "a".into(), name: "t".into(), arguments: json!({}) },
                    ModelToolCall { id: "b".into(), name: "t".into(), arguments: json!({}) },
                ],
            },
            ChatMessage::Tool { call_id: "a".into(), name: "t".into(), output: "1".into(), is_error: false },
            ChatMessage::Tool { call_id: "b".into(), name: "t".into(), output: "2".into(), is_error: true },
        ];
        let (path, headers, body) = request(
            ModelRequest {
                model: "claude",
                system: "sys",
                messages: &conversation,
                tools: &[],
                max_output_tokens: 64,
            },
            Some("sk-ant-secret"),
        );
        let body = serde_json::to_value(&body).unwrap();
        assert_eq!(path, "/v1/messages");
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[2]["role"], "user");
        assert_eq!(messages[2]["content"].as_array().unwrap().len(), 2);
        assert_eq!(messages[2]["content"][1]["is_error"], true);
        assert_eq!(body["system"], "sys");
        assert!(headers.iter().any(|h| h.name == "x-api-key" && h.sensitive));
        assert!(!body.to_string().contains("sk-ant-secret"));
    }
}
