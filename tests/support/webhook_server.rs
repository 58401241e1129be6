//! A local webhook for the `http` adapter's tests: a real HTTP server on 127.0.0.1 that checks
//! every call's signature with its own HMAC-SHA256 (the `hmac` crate, keyed with the test's copy
//! of the secret) over the exact bytes it received, refuses a bad one with 401, and answers by
//! path. Every call is recorded (path, timestamp, body, whether it verified).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// One call the webhook received.
#[derive(Debug, Clone)]
pub struct Call {
    pub path: String,
    pub timestamp_ms: Option<u64>,
    pub body: Value,
    /// The signature header matched the webhook's own HMAC of `"<timestamp>.<body bytes>"`.
    pub verified: bool,
}

/// The running webhook.
#[derive(Clone)]
pub struct Webhook {
    pub addr: SocketAddr,
    calls: Arc<Mutex<Vec<Call>>>,
}

/// How long `/hang` waits: past any timeout a test sets.
pub const HANG_MS: u64 = 120_000;

impl Webhook {
    /// Starts a webhook that verifies with `secret`.
    pub async fn start(secret: &'static str) -> Webhook {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = calls.clone();
        let router =
            axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
                let seen = seen.clone();
                async move {
                    let call = record(secret, &uri, &headers, &body);
                    let (verified, sent) = (call.verified, call.body.clone());
                    seen.lock().unwrap().push(call);
                    if !verified {
                        return (StatusCode::UNAUTHORIZED, "bad signature".to_string());
                    }
                    answer(uri.path(), sent).await
                }
            });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(vigil::api::serve(listener, router));
        Webhook { addr, calls }
    }

    /// The URL of `path` on this webhook.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The call for run `run`, once it came (bounded wait).
    pub async fn call_of(&self, run: u64) -> Call {
        for _ in 0..1_200 {
            let found = self
                .calls()
                .into_iter()
                .find(|c| c.body["run"]["id"] == run);
            if let Some(call) = found {
                return call;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the webhook never got run {run}");
    }
}

fn record(secret: &str, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Call {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let timestamp = header("x-vigil-timestamp");
    let verified = match (&timestamp, header("x-vigil-signature")) {
        (Some(timestamp), Some(signature)) => verify(secret, timestamp, body, &signature),
        _ => false,
    };
    Call {
        path: uri.path().to_string(),
        timestamp_ms: timestamp.and_then(|t| t.parse().ok()),
        body: serde_json::from_slice(body).unwrap_or(Value::Null),
        verified,
    }
}

/// What a receiver does: HMAC-SHA256 of `"<timestamp>.<raw body>"` with the shared secret,
/// compared in constant time with the hex after `sha256=`.
fn verify(secret: &str, timestamp: &str, body: &[u8], signature: &str) -> bool {
    let Some(hex) = signature.strip_prefix("sha256=") else {
        return false;
    };
    let Some(expected) = decode_hex(hex) else {
        return false;
    };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The answer by path; `/async` echoes the call (run token included), as careless services do.
async fn answer(path: &str, sent: Value) -> (StatusCode, String) {
    match path {
        "/ok" => (
            StatusCode::OK,
            json!({"status": "succeeded", "output": "done by the webhook",
                "usage": {"input_tokens": 5, "cached_input_tokens": 1, "output_tokens": 7, "cost_usd": 0.25}})
            .to_string(),
        ),
        "/reported_failure" => (StatusCode::OK, json!({"status": "failed", "output": "could not"}).to_string()),
        "/garbage" => (StatusCode::OK, "certainly not json".into()),
        "/fail500" => (StatusCode::INTERNAL_SERVER_ERROR, "boom".into()),
        "/hang" => {
            tokio::time::sleep(Duration::from_millis(HANG_MS)).await;
            (StatusCode::OK, "{}".into())
        }
        "/async" => (StatusCode::ACCEPTED, json!({"accepted": true, "echo": sent}).to_string()),
        _ => (StatusCode::NOT_FOUND, "no such hook".into()),
    }
}
