//! What the caller hands the outbound client (`OutboundRequest`, `OutboundHeader`), what comes
//! back (`OutboundAnswer`), and why no answer came (`OutboundError`).

use std::fmt;
use std::net::SocketAddr;

use bytes::Bytes;
use hyper::StatusCode;

use super::endpoint::Endpoint;

/// The bound on a whole exchange when the caller sets none: long, because a model can think for
/// a while before its first byte.
pub const TIMEOUT_MS_DEFAULT: u64 = 120_000;
/// The cap on an answer's body when the caller sets none: a chat completion with a long answer
/// and tool calls is far smaller.
pub const RESPONSE_BYTES_MAX_DEFAULT: usize = 4 * 1024 * 1024;

/// One request header. A sensitive one (an API key, a bearer token) is sent marked
/// `HeaderValue::set_sensitive(true)` and its value is never printed: not by `Debug`, not in an
/// error, not in a log.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OutboundHeader<'a> {
    pub name: &'a str,
    pub value: &'a str,
    pub sensitive: bool,
}

impl<'a> OutboundHeader<'a> {
    /// A header whose value may be printed (`content-type`, `anthropic-version`).
    pub fn plain(name: &'a str, value: &'a str) -> Self {
        OutboundHeader {
            name,
            value,
            sensitive: false,
        }
    }

    /// A header whose value is a secret (`authorization`, `x-api-key`).
    pub fn sensitive(name: &'a str, value: &'a str) -> Self {
        OutboundHeader {
            name,
            value,
            sensitive: true,
        }
    }
}

impl fmt::Debug for OutboundHeader<'_> {
    /// Prints the name, and the value only when it is not sensitive.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value: &dyn fmt::Debug = if self.sensitive {
            &"<redacted>"
        } else {
            &self.value
        };
        f.debug_struct("OutboundHeader")
            .field("name", &self.name)
            .field("value", value)
            .field("sensitive", &self.sensitive)
            .finish()
    }
}

/// A request body written as JSON once, when the request is made, and sent as those bytes.
/// Why bytes rather than a `serde_json::Value`: a model call's body carries the whole
/// conversation and every tool schema, and building a `Value` of it copied each message before
/// the client wrote it out again; bytes also reach hyper without another copy, and a signed
/// body (webhooks, alerts) is signed over exactly what is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonBody(Bytes);

impl JsonBody {
    /// `value` written as JSON; fails only for a type serde_json cannot write (a map with
    /// non-string keys).
    pub fn of<T: serde::Serialize + ?Sized>(value: &T) -> Result<JsonBody, serde_json::Error> {
        serde_json::to_vec(value).map(|bytes| JsonBody(Bytes::from(bytes)))
    }

    /// The body's bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }
}

impl From<&serde_json::Value> for JsonBody {
    /// A `Value` always writes: its maps have string keys.
    fn from(value: &serde_json::Value) -> Self {
        JsonBody(Bytes::from(value.to_string()))
    }
}

/// One POST of a JSON body. Borrowed, so secrets in headers are not copied around.
#[derive(Debug, Clone, Copy)]
pub struct OutboundRequest<'a> {
    /// Where to: scheme, host, port and base path.
    pub endpoint: &'a Endpoint,
    /// Appended to the endpoint's base path: empty, or `/segment…`, optionally with `?query`.
    pub path: &'a str,
    /// Sent in this order, after `host`, `content-type` and `content-length`, which the client
    /// sets itself (a header of one of those names is refused).
    pub headers: &'a [OutboundHeader<'a>],
    /// The body, sent as `application/json`.
    pub body: &'a JsonBody,
    /// Bounds the whole exchange: resolve, connect, TLS, send and read the full answer.
    pub timeout_ms: u64,
    /// A body longer than this many bytes fails with `TooLarge`; read incrementally, never
    /// buffered past this cap.
    pub response_bytes_max: usize,
}

impl<'a> OutboundRequest<'a> {
    /// A request without headers, bounded by the default timeout and body cap.
    pub fn new(endpoint: &'a Endpoint, path: &'a str, body: &'a JsonBody) -> Self {
        OutboundRequest {
            endpoint,
            path,
            headers: &[],
            body,
            timeout_ms: TIMEOUT_MS_DEFAULT,
            response_bytes_max: RESPONSE_BYTES_MAX_DEFAULT,
        }
    }
}

/// An HTTP answer, whatever its status: the caller decides what a 429 or a 500 means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundAnswer {
    pub status: StatusCode,
    /// The `retry-after` header in milliseconds, when it is a number of seconds (see
    /// `retry_after_ms`); `None` when absent or an HTTP-date.
    pub retry_after_ms: Option<u64>,
    /// The whole body, at most the request's `response_bytes_max` bytes.
    pub body: Bytes,
}

/// Why a request got no HTTP answer. No variant carries a header value.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error("the request could not be built: {detail}")]
    Request { detail: String },
    #[error("could not resolve the host name `{host}`: {detail}; check the host in the URL and this machine's DNS")]
    Resolve { host: String, detail: String },
    #[error("the address policy refused to connect to `{host}` at {addr}: {reason}")]
    AddressRefused {
        host: String,
        addr: SocketAddr,
        reason: String,
    },
    #[error("could not connect to {addr}: {source}; check that the server runs there and the port is right")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the TLS handshake with `{host}` failed: {detail}; check the URL's host, and if the server's certificate comes from a private CA, give that CA in the extra CA file")]
    Tls { host: String, detail: String },
    #[error("the HTTP exchange failed: {detail}; check that the server speaks HTTP/1.1 and that the URL's scheme (http or https) is the one it expects")]
    Http { detail: String },
    #[error("no complete answer within {timeout_ms} ms (resolve, connect, TLS, send and read together); raise the timeout or check the server")]
    Timeout { timeout_ms: u64 },
    #[error("the answer's body is larger than {limit_bytes} bytes; raise the response size cap or ask for a shorter answer")]
    TooLarge { limit_bytes: usize },
}
