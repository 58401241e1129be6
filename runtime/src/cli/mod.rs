//! The operator CLI (`vigil agent|runs|events|top …`): HTTP calls to a running node and the text
//! they print. `main.rs` parses arguments and prints; everything it prints is built here.
//!
//! Every command answers with a [`Printed`] text or a [`CliError`] whose message says what to do
//! next; `--json` swaps the human text for the server's JSON, unchanged.

mod agents;
mod events;
mod format;
mod fleet;
mod heartbeats;
mod interval;
mod lifecycle;
mod runs;
mod runs_log;
mod sessions;
mod top;
mod wakeups;

pub use heartbeats::HeartbeatCreate;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use hyper::Method;
use serde_json::Value;

use crate::api::client::{ApiClient, ClientError, REQUEST_TIMEOUT_MS};

pub use agents::{AgentCreate, SpecSource, Wake};
pub use events::EVENTS_RECONNECTS_MAX;
pub use format::{escape_controls, safe_json_line};
pub use fleet::FleetFile;
pub use interval::{format_interval, parse_interval};
pub use lifecycle::AgentUpdate;
pub use runs::RunFilter;
pub use wakeups::WakeupFilter;
pub use runs_log::{entry_line, RUN_LOG_POLL_MS, RUN_LOG_TEXT_CHARS_MAX};
pub use top::{render_fleet, ActiveRun, AgentRow, FleetSnapshot, Liveness, LivenessStatus};

/// Server address when neither `--server` nor `VIGIL_SERVER` is given.
pub const SERVER_DEFAULT: &str = "http://127.0.0.1:7070";
/// File in the data directory where `vigil serve` keeps tenant `default`'s generated token.
pub const OPERATOR_TOKEN_FILE: &str = "operator-token";

/// Why a CLI command failed. Each message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("the server is not reachable at {url} ({reason}); start it with `vigil serve` (from the source tree: `cargo xtask run`), or point --server / VIGIL_SERVER at it")]
    Unreachable { url: String, reason: String },
    #[error(
        "no answer from {url} within {REQUEST_TIMEOUT_MS} ms; is the server overloaded or stuck?"
    )]
    Timeout { url: String },
    #[error("HTTP error talking to {url}: {detail}")]
    Http { url: String, detail: String },
    /// The server answered with its error shape.
    #[error("{message}{}", field_suffix(field))]
    Server {
        status: u16,
        code: String,
        message: String,
        field: Option<String>,
    },
    #[error("the server answered {status} with a body that is not Vigil's JSON: {body}")]
    UnexpectedAnswer { status: u16, body: String },
    #[error("no operator token: pass --token or set VIGIL_TOKEN, or point --data-dir (VIGIL_DATA_DIR) at the server's data directory, where `vigil serve` writes tenant default's token to {OPERATOR_TOKEN_FILE} on first start (looked for {})", tried.display())]
    NoToken { tried: PathBuf },
    /// The server refused the token (401): says which one was sent and where it came from.
    #[error("{url} refused the token from {token_from}: {message}; pass the operator token of that server with --token / VIGIL_TOKEN, or point --data-dir (VIGIL_DATA_DIR) at its data directory")]
    Unauthenticated {
        url: String,
        token_from: TokenSource,
        message: String,
    },
    #[error("could not read the operator token from {}: {source}", path.display())]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--server {url:?}: {reason}")]
    BadServer { url: String, reason: String },
    /// A mistake in the command's own input, caught before asking the server.
    #[error("{message} (field: {field})")]
    Input { field: String, message: String },
}

fn field_suffix(field: &Option<String>) -> String {
    field
        .as_deref()
        .map_or(String::new(), |f| format!(" (field: {f})"))
}

impl CliError {
    fn input(field: &str, message: impl Into<String>) -> Self {
        CliError::Input {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

/// How a command's result is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Aligned tables, one line per item.
    Human,
    /// The server's JSON as received (one JSON document per line for event tails).
    Json,
}

/// Text for stdout, and notes for stderr (warnings that must not pollute piped output).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Printed {
    pub stdout: String,
    pub stderr: String,
}

impl Printed {
    fn out(stdout: String) -> Self {
        Printed {
            stdout,
            stderr: String::new(),
        }
    }
}

/// Where the CLI found the token it sends, so that a refusal can say which one was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `--token` or `VIGIL_TOKEN` (clap merges the two).
    Flag,
    /// The operator-token file `vigil serve` wrote in its data directory.
    File(PathBuf),
    /// The environment variable a fleet file names for a tenant's token.
    Variable(String),
}

impl std::fmt::Display for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::Flag => write!(f, "--token / VIGIL_TOKEN"),
            TokenSource::File(path) => write!(f, "{}", path.display()),
            TokenSource::Variable(name) => write!(f, "environment variable {name}"),
        }
    }
}

/// A bearer token and where it came from.
#[derive(Debug, Clone)]
pub struct Token {
    pub secret: String,
    pub source: TokenSource,
}

/// The token to send: `token` if given (and not blank), else the one `vigil serve` wrote to
/// `<data_dir>/operator-token`.
pub fn resolve_token(token: Option<&str>, data_dir: &Path) -> Result<Token, CliError> {
    if let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(Token {
            secret: token.to_string(),
            source: TokenSource::Flag,
        });
    }
    let path = data_dir.join(OPERATOR_TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => Ok(Token {
            secret: text.trim().to_string(),
            source: TokenSource::File(path),
        }),
        Ok(_) => Err(CliError::NoToken { tried: path }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(CliError::NoToken { tried: path })
        }
        Err(source) => Err(CliError::TokenFile { path, source }),
    }
}

/// Mode of the operator-token file: the owner only.
#[cfg(unix)]
const TOKEN_FILE_MODE: u32 = 0o600;

/// Writes an operator token where the CLI looks for it (`vigil serve` on first start, `vigil
/// operator rotate-token` after a rotation), readable by the owner only.
pub fn write_token_file(path: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, TOKEN_FILE_MODE);
    let mut file = options.open(path)?;
    // An older file keeps its mode through `open`; tighten it before the token goes in.
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(TOKEN_FILE_MODE))?;
    file.write_all(format!("{token}\n").as_bytes())
}

/// One node, as the operator named it, with the token the CLI sends it.
#[derive(Debug, Clone)]
pub struct Session {
    url: String,
    addr: SocketAddr,
    token: Token,
    output: Output,
}

impl Session {
    /// `server` is `http://host:port` (a trailing `/` is fine; `https` is not served).
    pub fn new(server: &str, token: Token, output: Output) -> Result<Session, CliError> {
        let (url, addr) = resolve_server(server)?;
        Ok(Session {
            url,
            addr,
            token,
            output,
        })
    }

    /// The same node, with another token (a fleet file's other tenants).
    fn with_token(&self, token: Token) -> Session {
        Session {
            token,
            ..self.clone()
        }
    }

    fn client(&self) -> ApiClient {
        ApiClient::with_token(self.addr, self.token.secret.clone())
    }

    fn json(&self) -> bool {
        self.output == Output::Json
    }

    /// `GET path`, expecting a 2xx JSON answer.
    async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.call(Method::GET, path, None).await
    }

    /// `PATCH path` with a JSON body, expecting a 2xx JSON answer.
    async fn patch(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.call(Method::PATCH, path, Some(body.to_string().into_bytes()))
            .await
    }

    /// `DELETE path`, expecting a 2xx JSON answer.
    async fn delete(&self, path: &str) -> Result<Value, CliError> {
        self.call(Method::DELETE, path, None).await
    }

    /// `POST path` with a JSON body (or none), expecting a 2xx JSON answer.
    async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, CliError> {
        let body = body.map(|b| b.to_string().into_bytes());
        self.call(Method::POST, path, body).await
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Value, CliError> {
        debug_assert!(
            path.starts_with('/') && !path.contains(' '),
            "paths are built, never raw input"
        );
        let answer = self
            .client()
            .request(method, path, body)
            .await
            .map_err(|e| self.client_error(e))?;
        answer_json(answer.status.as_u16(), &answer.body).map_err(|e| self.refused(e))
    }

    /// A 401 names the token that was refused and where it came from; other errors pass.
    fn refused(&self, error: CliError) -> CliError {
        match error {
            CliError::Server {
                status: 401,
                message,
                ..
            } => CliError::Unauthenticated {
                url: self.url.clone(),
                token_from: self.token.source.clone(),
                message,
            },
            other => other,
        }
    }

    fn client_error(&self, error: ClientError) -> CliError {
        let url = self.url.clone();
        match error {
            ClientError::Connect { source, .. } => CliError::Unreachable {
                url,
                reason: source.to_string(),
            },
            ClientError::Timeout { .. } => CliError::Timeout { url },
            ClientError::Http { source, .. } => CliError::Http {
                url,
                detail: source.to_string(),
            },
        }
    }
}

/// A 2xx body as JSON, or the server's error as a [`CliError`].
fn answer_json(status: u16, body: &[u8]) -> Result<Value, CliError> {
    let unexpected = || CliError::UnexpectedAnswer {
        status,
        body: String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned(),
    };
    let json: Value = serde_json::from_slice(body).map_err(|_| unexpected())?;
    if (200..300).contains(&status) {
        return Ok(json);
    }
    let error = json.get("error").ok_or_else(unexpected)?;
    let text = |key: &str| error.get(key).and_then(Value::as_str).map(str::to_string);
    Err(CliError::Server {
        status,
        code: text("code").unwrap_or_default(),
        message: text("message").ok_or_else(unexpected)?,
        field: text("field"),
    })
}

/// `http://host:port[/]` → (URL as shown in messages, socket address).
fn resolve_server(server: &str) -> Result<(String, SocketAddr), CliError> {
    let bad = |reason: &str| CliError::BadServer {
        url: server.to_string(),
        reason: reason.to_string(),
    };
    if server.starts_with("https://") {
        return Err(bad(
            "vigil serves plain HTTP; use http:// (put TLS in a proxy in front)",
        ));
    }
    let rest = server.strip_prefix("http://").unwrap_or(server);
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        return Err(bad("expected http://HOST:PORT, e.g. http://127.0.0.1:7070"));
    }
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| bad(&format!("cannot resolve it: {e}")))?
        .next()
        .ok_or_else(|| bad("the host name resolves to no address"))?;
    Ok((format!("http://{authority}"), addr))
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode_query(value: &str) -> String {
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        let (url, addr) = resolve_server("http://127.0.0.1:7070/").unwrap();
        assert_eq!(url, "http://127.0.0.1:7070");
        assert_eq!(addr, "127.0.0.1:7070".parse().unwrap());
        assert_eq!(resolve_server("127.0.0.1:9").unwrap().1.port(), 9);
        assert_eq!(resolve_server("http://127.0.0.1").unwrap().1.port(), 80);
        assert!(matches!(
            resolve_server("https://x:1"),
            Err(CliError::BadServer { .. })
        ));
        assert!(matches!(
            resolve_server("http://x:1/api"),
            Err(CliError::BadServer { .. })
        ));
    }

    #[test]
    fn server_errors_keep_message_and_field() {
        let body = br#"{"error":{"code":"invalid_field","message":"too small","field":"heartbeat.interval_ms"}}"#;
        let err = answer_json(400, body).unwrap_err();
        assert_eq!(err.to_string(), "too small (field: heartbeat.interval_ms)");
        let err = answer_json(
            404,
            br#"{"error":{"code":"not_found","message":"no agent with id 9"}}"#,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "no agent with id 9");
        assert!(matches!(
            answer_json(502, b"<html>"),
            Err(CliError::UnexpectedAnswer { status: 502, .. })
        ));
        assert_eq!(answer_json(200, b"{\"a\":1}").unwrap()["a"], 1);
    }

    #[test]
    fn tokens_come_from_the_flag_or_the_data_dir() {
        let dir = std::env::temp_dir().join(format!("vigil-cli-token-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let flag = resolve_token(Some(" t1 "), &dir).unwrap();
        assert_eq!(
            (flag.secret.as_str(), flag.source),
            ("t1", TokenSource::Flag)
        );
        let err = resolve_token(Some(""), &dir).unwrap_err();
        assert!(err.to_string().contains("operator-token"), "{err}");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(OPERATOR_TOKEN_FILE), "vgl_op_x\n").unwrap();
        let file = resolve_token(None, &dir).unwrap();
        assert_eq!(file.secret, "vgl_op_x");
        assert_eq!(
            file.source,
            TokenSource::File(dir.join(OPERATOR_TOKEN_FILE))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode_query("timed_out"), "timed_out");
        assert_eq!(encode_query("a b&c"), "a%20b%26c");
    }
}
