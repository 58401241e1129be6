//! [`TranscriptEntry`]: one line of a transcript.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::excerpt::{excerpt, FINAL_ANSWER_EXCERPT_BYTES_MAX};
use super::TRANSCRIPT_FIELD_BYTES_MAX;
use crate::engine::run::RunId;
use crate::redact::Redactor;

/// One line of a run's transcript: `{"run":7,"seq":0,"at_ms":…,"kind":"wakeup",…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    pub run: RunId,
    /// Position within the run, from 0, given by the writer.
    pub seq: u64,
    /// The node's wall clock when it happened (Unix ms), as the writer read it.
    pub at_ms: u64,
    #[serde(flatten)]
    pub body: EntryBody,
}

/// What happened, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryBody {
    /// Why the run was woken.
    Wakeup {
        source: String,
        reason: Option<String>,
        payload: Option<Value>,
    },
    /// A request to the model (its size, not its text: the messages are the earlier entries).
    ModelRequest {
        iteration: u32,
        model: String,
        messages: u32,
        bytes: u64,
    },
    /// The model's answer.
    ModelResponse {
        iteration: u32,
        text: String,
        tool_calls: Vec<ToolCallSummary>,
        usage: Usage,
        latency_ms: u64,
    },
    /// A tool the model asked for.
    ToolCall {
        id: String,
        name: String,
        arguments: Value,
    },
    /// What the tool answered (its output capped).
    ToolResult {
        id: String,
        name: String,
        output: String,
        is_error: bool,
        latency_ms: u64,
    },
    /// Why the run's loop stopped.
    Stop {
        stop_reason: String,
        detail: Option<String>,
    },
    /// One line a run's child process wrote (`stream`: `stdout` or `stderr`), cut at the
    /// child's line cap and then at [`TRANSCRIPT_FIELD_BYTES_MAX`].
    ChildOutput { stream: String, text: String },
    /// Anything else worth a line (the store's own truncation note among them).
    Note { text: String },
}

/// A tool call as the model response lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallSummary {
    pub id: String,
    pub name: String,
}

/// Tokens of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub cached_input: u64,
    pub output: u64,
}

impl EntryBody {
    /// The `kind` tag, as written.
    pub fn kind(&self) -> &'static str {
        match self {
            EntryBody::Wakeup { .. } => "wakeup",
            EntryBody::ModelRequest { .. } => "model_request",
            EntryBody::ModelResponse { .. } => "model_response",
            EntryBody::ToolCall { .. } => "tool_call",
            EntryBody::ToolResult { .. } => "tool_result",
            EntryBody::Stop { .. } => "stop",
            EntryBody::ChildOutput { .. } => "child_output",
            EntryBody::Note { .. } => "note",
        }
    }
}

impl TranscriptEntry {
    /// A `note` entry.
    pub fn note(run: RunId, seq: u64, at_ms: u64, text: impl Into<String>) -> Self {
        TranscriptEntry {
            run,
            seq,
            at_ms,
            body: EntryBody::Note { text: text.into() },
        }
    }

    /// This entry with every string in it (text, names, ids, JSON) passed through `redactor`.
    pub fn redacted(&self, redactor: &Redactor) -> TranscriptEntry {
        let text = |s: &String| redactor.redact(s).into_owned();
        let json = |v: &Value| {
            let mut v = v.clone();
            redactor.redact_json(&mut v);
            v
        };
        let body = match &self.body {
            EntryBody::Wakeup {
                source,
                reason,
                payload,
            } => EntryBody::Wakeup {
                source: text(source),
                reason: reason.as_ref().map(text),
                payload: payload.as_ref().map(json),
            },
            EntryBody::ModelRequest {
                iteration,
                model,
                messages,
                bytes,
            } => EntryBody::ModelRequest {
                iteration: *iteration,
                model: text(model),
                messages: *messages,
                bytes: *bytes,
            },
            EntryBody::ModelResponse {
                iteration,
                text: answer,
                tool_calls,
                usage,
                latency_ms,
            } => EntryBody::ModelResponse {
                iteration: *iteration,
                text: text(answer),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| ToolCallSummary {
                        id: text(&c.id),
                        name: text(&c.name),
                    })
                    .collect(),
                usage: *usage,
                latency_ms: *latency_ms,
            },
            EntryBody::ToolCall {
                id,
                name,
                arguments,
            } => EntryBody::ToolCall {
                id: text(id),
                name: text(name),
                arguments: json(arguments),
            },
            EntryBody::ToolResult {
                id,
                name,
                output,
                is_error,
                latency_ms,
            } => EntryBody::ToolResult {
                id: text(id),
                name: text(name),
                output: text(output),
                is_error: *is_error,
                latency_ms: *latency_ms,
            },
            EntryBody::Stop {
                stop_reason,
                detail,
            } => EntryBody::Stop {
                stop_reason: text(stop_reason),
                detail: detail.as_ref().map(text),
            },
            EntryBody::ChildOutput { stream, text: line } => EntryBody::ChildOutput {
                stream: stream.clone(),
                text: text(line),
            },
            EntryBody::Note { text: note } => EntryBody::Note { text: text(note) },
        };
        TranscriptEntry { body, ..*self }
    }

    /// This entry with its bulky fields cut: model text to
    /// [`FINAL_ANSWER_EXCERPT_BYTES_MAX`], the rest to [`TRANSCRIPT_FIELD_BYTES_MAX`]; JSON
    /// too large becomes its cut text. Apply after redaction, so that a cut never splits a
    /// secret into an unrecognisable piece.
    pub fn capped(mut self) -> TranscriptEntry {
        let field = |s: &mut String| cap_text(s, TRANSCRIPT_FIELD_BYTES_MAX);
        match &mut self.body {
            EntryBody::Wakeup {
                reason, payload, ..
            } => {
                reason.iter_mut().for_each(field);
                payload.iter_mut().for_each(cap_json);
            }
            EntryBody::ModelResponse { text, .. } => cap_text(text, FINAL_ANSWER_EXCERPT_BYTES_MAX),
            EntryBody::ToolCall { arguments, .. } => cap_json(arguments),
            EntryBody::ToolResult { output, .. } => field(output),
            EntryBody::Stop { detail, .. } => detail.iter_mut().for_each(field),
            EntryBody::Note { text } | EntryBody::ChildOutput { text, .. } => field(text),
            EntryBody::ModelRequest { .. } => {}
        }
        self
    }
}

fn cap_text(text: &mut String, bytes_max: usize) {
    if text.len() > bytes_max {
        *text = excerpt(text, bytes_max).text;
    }
}

/// JSON whose encoding exceeds [`TRANSCRIPT_FIELD_BYTES_MAX`] becomes a string: the cut
/// encoding (no longer JSON, but still readable).
fn cap_json(value: &mut Value) {
    let encoded = value.to_string();
    if encoded.len() > TRANSCRIPT_FIELD_BYTES_MAX {
        *value = Value::String(excerpt(&encoded, TRANSCRIPT_FIELD_BYTES_MAX).text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(body: EntryBody) -> TranscriptEntry {
        TranscriptEntry {
            run: RunId(7),
            seq: 3,
            at_ms: 1_000,
            body,
        }
    }

    #[test]
    fn entries_are_one_flat_object_tagged_by_kind() {
        let entry = at(EntryBody::ToolResult {
            id: "c1".into(),
            name: "search".into(),
            output: "ok".into(),
            is_error: false,
            latency_ms: 12,
        });
        let line = serde_json::to_value(&entry).unwrap();
        assert_eq!(
            line,
            json!({"run": 7, "seq": 3, "at_ms": 1000, "kind": "tool_result", "id": "c1",
                   "name": "search", "output": "ok", "is_error": false, "latency_ms": 12})
        );
        let back: TranscriptEntry = serde_json::from_value(line).unwrap();
        assert_eq!(back, entry);
        let usage = at(EntryBody::ModelResponse {
            iteration: 1,
            text: "hi".into(),
            tool_calls: vec![ToolCallSummary {
                id: "c1".into(),
                name: "search".into(),
            }],
            usage: Usage {
                input: 10,
                cached_input: 4,
                output: 2,
            },
            latency_ms: 900,
        });
        let line = serde_json::to_value(&usage).unwrap();
        assert_eq!(line["kind"], "model_response");
        assert_eq!(
            line["usage"],
            json!({"input": 10, "cached_input": 4, "output": 2})
        );
        assert_eq!(usage.body.kind(), "model_response");
    }

    #[test]
    fn redaction_reaches_every_string_field() {
        let redactor = Redactor::new(["sk-secret-value"]);
        let entry = at(EntryBody::ToolCall {
            id: "sk-secret-value".into(),
            name: "http".into(),
            arguments: json!({"headers": {"x": "sk-secret-value"}}),
        });
        let line = serde_json::to_string(&entry.redacted(&redactor)).unwrap();
        assert!(!line.contains("sk-secret-value"), "{line}");
        assert_eq!(line.matches("[REDACTED]").count(), 2);
        let wake = at(EntryBody::Wakeup {
            source: "on_demand".into(),
            reason: Some("use sk-secret-value".into()),
            payload: Some(json!(["sk-secret-value"])),
        });
        let line = serde_json::to_string(&wake.redacted(&redactor)).unwrap();
        assert!(!line.contains("sk-secret-value"), "{line}");
    }

    #[test]
    fn caps_apply_at_their_boundaries() {
        let exact = at(EntryBody::Note {
            text: "n".repeat(TRANSCRIPT_FIELD_BYTES_MAX),
        })
        .capped();
        assert!(
            matches!(&exact.body, EntryBody::Note { text } if text.len() == TRANSCRIPT_FIELD_BYTES_MAX && !text.ends_with(super::super::TRUNCATION_MARK))
        );
        let over = at(EntryBody::ToolResult {
            id: "c".into(),
            name: "t".into(),
            output: "o".repeat(TRANSCRIPT_FIELD_BYTES_MAX + 1),
            is_error: false,
            latency_ms: 0,
        })
        .capped();
        assert!(
            matches!(&over.body, EntryBody::ToolResult { output, .. } if output.len() == TRANSCRIPT_FIELD_BYTES_MAX && output.ends_with(super::super::TRUNCATION_MARK))
        );
        let answer = at(EntryBody::ModelResponse {
            iteration: 0,
            text: "a".repeat(FINAL_ANSWER_EXCERPT_BYTES_MAX + 1),
            tool_calls: vec![],
            usage: Usage::default(),
            latency_ms: 0,
        })
        .capped();
        assert!(
            matches!(&answer.body, EntryBody::ModelResponse { text, .. } if text.len() == FINAL_ANSWER_EXCERPT_BYTES_MAX)
        );
        // JSON: exactly at the cap stays JSON; one byte more becomes cut text.
        let fitting = "x".repeat(TRANSCRIPT_FIELD_BYTES_MAX - 2); // two quotes
        let call = |s: &str| {
            at(EntryBody::ToolCall {
                id: "c".into(),
                name: "t".into(),
                arguments: json!(s),
            })
            .capped()
        };
        assert!(
            matches!(call(&fitting).body, EntryBody::ToolCall { arguments, .. } if arguments == json!(fitting))
        );
        let too_big = format!("{fitting}x");
        assert!(
            matches!(call(&too_big).body, EntryBody::ToolCall { arguments: Value::String(s), .. } if s.len() == TRANSCRIPT_FIELD_BYTES_MAX && s.starts_with('"'))
        );
    }
}
