//! The `llm` adapter: one call to an OpenAI-compatible chat-completions API per run, over the
//! same hyper client as the CLI (so under `--cfg madsim` it crosses the simulated network to a
//! simulated provider). Every way the call can go wrong fails the run as an LLM failure, which
//! the breaker counts: the provider rate-limiting (429), failing (5xx), refusing the request
//! (other 4xx), not answering within `request_timeout_ms`, being unreachable, or answering
//! something that is not a chat completion. (The agent loop with tools, ghost mode and cost
//! accounting come with the adapters issue.)

use serde_json::json;

use super::adapter::{Adapter, AdapterFuture, AdapterOutcome, RunContext};
use crate::api::client::{ApiClient, ClientError};
use crate::engine::agent::LlmSpec;
use crate::engine::breaker::FailureCause;
use crate::engine::run::RunStatus;

/// The path the call is POSTed to, below `base_url`.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";
/// How much of an answer a run's detail keeps.
pub const EXCERPT_CHARS_MAX: usize = 200;
/// The system prompt when the spec gives none.
const SYSTEM_PROMPT_DEFAULT: &str = "You are an autonomous agent woken by Vigil. Do what the wakeup asks; answer [IDLE] if there is nothing to do.";

/// Calls the model once per run.
#[derive(Debug, Clone)]
pub struct Llm {
    spec: LlmSpec,
}

impl Llm {
    pub fn new(spec: LlmSpec) -> Self {
        Llm { spec }
    }
}

fn failed(detail: String) -> AdapterOutcome {
    AdapterOutcome {
        status: RunStatus::Failed,
        detail,
        cause: Some(FailureCause::Llm),
    }
}

fn excerpt(text: &str) -> String {
    let mut cut: String = text.chars().take(EXCERPT_CHARS_MAX).collect();
    if text.chars().count() > EXCERPT_CHARS_MAX {
        cut.push('…');
    }
    cut
}

/// The reply's text, if the body is a chat completion.
fn completion_text(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value["choices"][0]["message"]["content"]
        .as_str()
        .map(str::to_string)
}

impl Adapter for Llm {
    fn execute(&self, run: RunContext) -> AdapterFuture {
        let spec = self.spec.clone();
        Box::pin(async move {
            let addr = match spec.provider_addr() {
                Ok(addr) => addr,
                Err(error) => return failed(error.message),
            };
            let client = ApiClient::new(addr).with_timeout_ms(spec.request_timeout_ms);
            let user = if run.payload.is_null() {
                run.reason.clone()
            } else {
                format!("{}\n\n{}", run.reason, run.payload)
            };
            let body = json!({
                "model": spec.model,
                "messages": [
                    { "role": "system", "content": spec.system_prompt.as_deref().unwrap_or(SYSTEM_PROMPT_DEFAULT) },
                    { "role": "user", "content": user },
                ],
            });
            let answer = match client.post_json(CHAT_COMPLETIONS_PATH, &body).await {
                Ok(answer) => answer,
                Err(ClientError::Timeout { timeout_ms, .. }) => {
                    return failed(format!(
                    "the provider did not answer within adapter.request_timeout_ms = {timeout_ms}"
                ))
                }
                Err(error) => return failed(format!("could not reach the provider: {error}")),
            };
            let status = answer.status;
            let text = String::from_utf8_lossy(&answer.body);
            if status.as_u16() == 429 {
                return failed(format!(
                    "the provider answered 429 Too Many Requests (rate limited): {}",
                    excerpt(&text)
                ));
            }
            if status.is_server_error() {
                return failed(format!(
                    "the provider answered {status}: {}",
                    excerpt(&text)
                ));
            }
            if !status.is_success() {
                return failed(format!(
                    "the provider refused the request with {status}: {}",
                    excerpt(&text)
                ));
            }
            match completion_text(&answer.body) {
                Some(reply) => AdapterOutcome {
                    status: RunStatus::Succeeded,
                    detail: format!("the model answered: {}", excerpt(&reply)),
                    cause: None,
                },
                None => failed(format!(
                    "the provider's answer is not a chat completion (no choices[0].message.content): {}",
                    excerpt(&text)
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_is_read_and_anything_else_is_not() {
        let ok = br#"{"choices":[{"message":{"role":"assistant","content":"done"}}]}"#;
        assert_eq!(completion_text(ok).as_deref(), Some("done"));
        for bad in [
            &b"{\"choices\":\"garbled"[..],
            b"{}",
            br#"{"choices":[]}"#,
            br#"{"choices":[{"message":{"content":7}}]}"#,
            b"<html>502</html>",
        ] {
            assert_eq!(
                completion_text(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn excerpts_are_cut_at_the_limit() {
        assert_eq!(excerpt("short"), "short");
        let long = "x".repeat(EXCERPT_CHARS_MAX + 5);
        assert_eq!(excerpt(&long).chars().count(), EXCERPT_CHARS_MAX + 1);
    }
}
