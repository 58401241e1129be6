//! Talking to a model: one neutral conversation shape, two wire shapes (OpenAI-compatible chat
//! completions and Anthropic Messages), and what every way a call can go wrong means.
//!
//! The loop (`exec::agent_loop`) speaks only the neutral shape; `openai.rs` and `anthropic.rs`
//! turn it into request bodies and turn answers back, and [`Poster`] carries the bytes (real
//! HTTPS in production, simulated TCP under `--cfg madsim`).

pub mod anthropic;
pub mod openai;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::engine::llm_spec::{LlmSpec, WireShape};
use crate::net::JsonBody;

/// Most bytes of a model's answer read; a longer answer is malformed for the loop.
pub const MODEL_ANSWER_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// How much of an error answer a run's detail keeps.
pub const ERROR_EXCERPT_CHARS_MAX: usize = 200;

pub use crate::engine::tool_spec::ToolDef as ToolSchema;

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelToolCall {
    /// The provider's id for the call, echoed with its result.
    pub id: String,
    pub name: String,
    /// The arguments as the model sent them (OpenAI sends a JSON string, Anthropic an object).
    pub arguments: serde_json::Value,
}

/// One message of the conversation sent to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    User {
        text: String,
    },
    Assistant {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ModelToolCall>,
    },
    /// The result of one tool call, answered to the model.
    Tool {
        call_id: String,
        name: String,
        output: String,
        is_error: bool,
    },
}

/// What the loop asks of the model in one call.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub model: &'a str,
    pub system: &'a str,
    pub messages: &'a [ChatMessage],
    pub tools: &'a [ToolSchema],
    pub max_output_tokens: u32,
}

/// Tokens one call used, as the provider reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Every input token, cached ones included.
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
}

/// The model's answer to one call.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTurn {
    pub text: String,
    pub tool_calls: Vec<ModelToolCall>,
    pub usage: TokenUsage,
}

/// Why a model call gave no usable answer. Every kind fails the run as an LLM failure the
/// breaker counts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("the provider answered 429 Too Many Requests (rate limited{}): {excerpt}", retry_after_ms.map(|ms| format!(", retry after {ms} ms")).unwrap_or_default())]
    RateLimited {
        retry_after_ms: Option<u64>,
        excerpt: String,
    },
    #[error("the provider answered {}: {excerpt}", status_text(*status))]
    Server { status: u16, excerpt: String },
    #[error("the provider refused the request with {}{}: {excerpt}", status_text(*status), if *status == 401 || *status == 403 { " (is the API key in the environment variable adapter.api_key_env right?)" } else { "" })]
    Refused { status: u16, excerpt: String },
    #[error("the provider did not answer within adapter.request_timeout_ms = {timeout_ms}")]
    Timeout { timeout_ms: u64 },
    #[error("could not reach the provider: {0}")]
    Unreachable(String),
    #[error("the provider's answer is not a {shape} answer: {detail}")]
    Malformed { shape: &'static str, detail: String },
    #[error("{0}")]
    Config(String),
}

/// `502 Bad Gateway`: the code and, when it has one, its reason phrase.
fn status_text(status: u16) -> String {
    let reason = hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason());
    match reason {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}

/// A header of an outbound request; a sensitive one (an API key) never appears in any error,
/// log or transcript.
#[derive(Clone)]
pub struct Header {
    pub name: std::borrow::Cow<'static, str>,
    pub value: String,
    pub sensitive: bool,
}

impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = if self.sensitive { "[REDACTED]" } else { &self.value };
        write!(f, "{}: {value}", self.name)
    }
}

/// One JSON POST to a URL.
#[derive(Debug, Clone)]
pub struct PostRequest<'a> {
    /// The provider's base URL (`https://host[:port][/base]`).
    pub base_url: &'a str,
    /// Appended to the base URL's path.
    pub path: &'a str,
    pub headers: Vec<Header>,
    pub body: crate::net::JsonBody,
    /// Bounds the whole exchange.
    pub timeout_ms: u64,
    pub response_bytes_max: u64,
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct PostAnswer {
    pub status: u16,
    /// The `retry-after` header, in ms, if the answer had one.
    pub retry_after_ms: Option<u64>,
    pub body: Bytes,
}

/// Why a POST got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    #[error("no answer within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("the answer is larger than {limit_bytes} bytes")]
    TooLarge { limit_bytes: u64 },
    #[error("{0}")]
    Failed(String),
}

/// The future a [`Poster`] returns.
pub type PostFuture<'a> = Pin<Box<dyn Future<Output = Result<PostAnswer, PostError>> + Send + 'a>>;

/// One GET of a URL whose answer is read whole (a predicate heartbeat's HTTP check).
#[derive(Debug, Clone)]
pub struct GetRequest<'a> {
    /// `https://host[:port]/path[?query]`.
    pub url: &'a str,
    pub headers: Vec<Header>,
    /// Bounds the whole exchange.
    pub timeout_ms: u64,
    pub response_bytes_max: u64,
}

/// Carries one JSON POST (and a GET): the seam between the node and the network.
pub trait Poster: Send + Sync {
    fn post<'a>(&'a self, request: PostRequest<'a>) -> PostFuture<'a>;

    /// GETs a URL. Transports that only ever carry POSTs (a test's stand-in) keep this
    /// refusal.
    fn get<'a>(&'a self, request: GetRequest<'a>) -> PostFuture<'a> {
        let url = request.url.to_string();
        Box::pin(async move { Err(PostError::Failed(format!("this transport cannot GET {url}"))) })
    }
}

/// A model call's request in `spec`'s wire shape, written to bytes and ready to send.
#[derive(Debug)]
pub struct WrittenRequest {
    path: &'static str,
    headers: Vec<Header>,
    body: JsonBody,
}

impl WrittenRequest {
    /// The body's size in bytes, as it goes on the wire.
    pub fn body_bytes(&self) -> u64 {
        self.body.bytes().len() as u64
    }
}

/// Writes `request` in `spec`'s wire shape (the whole conversation, once). One model call is
/// this, then [`send_request`]; the loop logs the body's size between the two.
pub fn write_request(
    spec: &LlmSpec,
    api_key: Option<&str>,
    request: ModelRequest<'_>,
) -> Result<WrittenRequest, ModelError> {
    let written = match spec.api {
        WireShape::Openai => {
            let (path, headers, body) = openai::request(request, api_key);
            JsonBody::of(&body).map(|body| (path, headers, body))
        }
        WireShape::Anthropic => {
            let (path, headers, body) = anthropic::request(request, api_key);
            JsonBody::of(&body).map(|body| (path, headers, body))
        }
    };
    // Only a map with non-string keys fails to write, and a request has none: kept as an
    // error rather than a panic all the same.
    let (path, headers, body) = written
        .map_err(|error| ModelError::Config(format!("the request could not be written: {error}")))?;
    Ok(WrittenRequest {
        path,
        headers,
        body,
    })
}

/// POSTs a written request and reads the model's answer back.
pub async fn send_request(
    poster: &dyn Poster,
    spec: &LlmSpec,
    api_key: Option<&str>,
    written: WrittenRequest,
) -> Result<ModelTurn, ModelError> {
    let WrittenRequest {
        path,
        headers,
        body,
    } = written;
    let post = PostRequest {
        base_url: &spec.base_url,
        path,
        headers,
        body,
        timeout_ms: spec.request_timeout_ms,
        response_bytes_max: MODEL_ANSWER_BYTES_MAX,
    };
    let answer = match poster.post(post).await {
        Ok(answer) => answer,
        Err(PostError::Timeout { timeout_ms }) => return Err(ModelError::Timeout { timeout_ms }),
        Err(error @ PostError::TooLarge { .. }) => {
            return Err(ModelError::Malformed {
                shape: spec.api.as_str(),
                detail: error.to_string(),
            })
        }
        Err(PostError::Failed(error)) => return Err(ModelError::Unreachable(error)),
    };
    // Why: an error's excerpt of the body is cut before the run's redactor sees it, so a key the
    // provider echoed across the cut would survive as a fragment no redactor recognises (a 401
    // body quoting the key is common). The key leaves the whole body before any excerpt is made.
    let redactor = crate::redact::Redactor::new(api_key);
    let without_key = || {
        let text = String::from_utf8_lossy(&answer.body);
        Bytes::from(redactor.redact(&text).into_owned())
    };
    if !(200..=299).contains(&answer.status) {
        let body = without_key();
        refusal(&PostAnswer {
            body,
            ..answer.clone()
        })?;
    }
    let parse = |body: &[u8]| match spec.api {
        WireShape::Openai => openai::answer(body),
        WireShape::Anthropic => anthropic::answer(body),
    };
    parse(&answer.body).map_err(|error| parse(&without_key()).err().unwrap_or(error))
}

/// The error an answer's status means, if it is not a success.
fn refusal(answer: &PostAnswer) -> Result<(), ModelError> {
    let excerpt = excerpt(&String::from_utf8_lossy(&answer.body));
    match answer.status {
        200..=299 => Ok(()),
        429 => Err(ModelError::RateLimited {
            retry_after_ms: answer.retry_after_ms,
            excerpt,
        }),
        status @ 500..=599 => Err(ModelError::Server { status, excerpt }),
        status => Err(ModelError::Refused { status, excerpt }),
    }
}

/// The start of `text`, cut to [`ERROR_EXCERPT_CHARS_MAX`] characters.
pub fn excerpt(text: &str) -> String {
    let mut cut: String = text.chars().take(ERROR_EXCERPT_CHARS_MAX).collect();
    if text.chars().count() > ERROR_EXCERPT_CHARS_MAX {
        cut.push('…');
    }
    cut
}

/// A tool call's arguments as an object: a JSON string is parsed (OpenAI), an object kept.
pub fn arguments_value(raw: &serde_json::Value) -> serde_json::Value {
    match raw {
        serde_json::Value::String(text) => {
            serde_json::from_str(text).unwrap_or_else(|_| raw.clone())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At the limit a text is quoted whole; one character past it is cut there and marked.
    /// Characters, not bytes: a multi-byte character counts once.
    #[test]
    fn an_excerpt_is_cut_past_its_limit_and_marked() {
        let at_limit = "é".repeat(ERROR_EXCERPT_CHARS_MAX);
        assert_eq!(excerpt(&at_limit), at_limit);
        let past = format!("{at_limit}x");
        assert_eq!(excerpt(&past), format!("{at_limit}…"));
        assert_eq!(
            excerpt(&"y".repeat(3 * ERROR_EXCERPT_CHARS_MAX)),
            format!("{}…", "y".repeat(ERROR_EXCERPT_CHARS_MAX))
        );
        assert_eq!(excerpt(""), "");
    }

    #[test]
    fn statuses_map_to_the_errors_the_breaker_counts() {
        let answer = |status, retry_after_ms| PostAnswer {
            status,
            retry_after_ms,
            body: Bytes::from_static(b"nope"),
        };
        assert!(refusal(&answer(200, None)).is_ok());
        assert_eq!(
            refusal(&answer(429, Some(2_000))),
            Err(ModelError::RateLimited {
                retry_after_ms: Some(2_000),
                excerpt: "nope".into()
            })
        );
        assert!(matches!(
            refusal(&answer(503, None)),
            Err(ModelError::Server { status: 503, .. })
        ));
        let wrong_key = refusal(&answer(401, None)).unwrap_err();
        assert!(wrong_key.to_string().contains("api_key_env"), "{wrong_key}");
    }

    #[test]
    fn sensitive_headers_do_not_print() {
        let header = Header {
            name: "authorization".into(),
            value: "Bearer sk-secret-value".into(),
            sensitive: true,
        };
        assert!(!format!("{header:?}").contains("sk-secret"));
    }
}
