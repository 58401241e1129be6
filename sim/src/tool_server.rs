//! A simulated tool server: the HTTP tools `llm` agents call, on their own node of the simulated
//! network (reachable by IP or by the host name [`TOOL_SERVER_HOST`] in madsim's DNS table).
//! Each endpoint `/tools/{endpoint}` behaves as its name says, as the scenario's [`ToolScript`]
//! tunes it:
//!
//! | endpoint | answer |
//! |---|---|
//! | `ok` | 200 with a small JSON result |
//! | `slow` | 200 after `slow_ms` (past a tool's `timeout_ms` if the scenario makes it so) |
//! | `fail` | 500, always |
//! | `flaky` | 500 with chance `flaky_permille` (drawn per call from the stream `tool/<run>/<call id>`), else 200 |
//! | `partial` | 200 with a partial result that asks to be called again (a model that obeys loops) |
//! | `hang` | no answer, ever (the tool's `timeout_ms` ends the call) |
//!
//! While a `tool_failure` window is open every endpoint answers 500; while a `tool_hang` window
//! is open none answers. Every call served is a typed trace record
//! ([`TraceEvent::ToolCallServed`]) naming the agent and run the runtime put in the POST body
//! (`agent.id`, `run.id`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::post;
use rand::Rng;
use serde_json::{json, Value};

use crate::recorder::{CallGuard, Recorder};
use crate::trace::{ToolOutcome, TraceEvent};

/// Where the tool server listens.
pub const TOOL_SERVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3));
pub const TOOL_SERVER_PORT: u16 = 9090;
/// Its host name in madsim's DNS table.
pub const TOOL_SERVER_HOST: &str = "tools.sim.internal";

/// The URL of `endpoint`, by IP or by host name.
pub fn tool_url(endpoint: &str, by_name: bool) -> String {
    if by_name {
        format!("http://{TOOL_SERVER_HOST}:{TOOL_SERVER_PORT}/tools/{endpoint}")
    } else {
        format!(
            "http://{}/tools/{endpoint}",
            SocketAddr::new(TOOL_SERVER_IP, TOOL_SERVER_PORT)
        )
    }
}

/// How the endpoints behave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolScript {
    pub slow_ms: u64,
    pub flaky_permille: u32,
}

impl Default for ToolScript {
    fn default() -> Self {
        ToolScript {
            slow_ms: 2_000,
            flaky_permille: 300,
        }
    }
}

/// The server's script, its open fault windows, and the calls served.
#[derive(Debug, Default)]
pub struct ToolServerState {
    pub script: ToolScript,
    pub seed: u64,
    pub calls: u64,
    /// Open `tool_failure` windows.
    failing: u32,
    /// Open `tool_hang` windows.
    hanging: u32,
}

impl ToolServerState {
    pub fn new(seed: u64, script: ToolScript) -> Self {
        ToolServerState {
            seed,
            script,
            ..ToolServerState::default()
        }
    }

    /// Opens (or closes) a window in which every call fails.
    pub fn set_failing(&mut self, open: bool) {
        self.failing = if open {
            self.failing + 1
        } else {
            self.failing.saturating_sub(1)
        };
    }

    /// Opens (or closes) a window in which no call is answered.
    pub fn set_hanging(&mut self, open: bool) {
        self.hanging = if open {
            self.hanging + 1
        } else {
            self.hanging.saturating_sub(1)
        };
    }

    /// Heals every window (the quiet phase).
    pub fn heal(&mut self) {
        self.failing = 0;
        self.hanging = 0;
    }
}

pub type SharedToolServer = Arc<Mutex<ToolServerState>>;

/// Serves the endpoints on this node forever.
pub async fn serve(state: SharedToolServer, recorder: Recorder) {
    let router = axum::Router::new().route(
        "/tools/{endpoint}",
        post(
            move |Path(endpoint): Path<String>, body: axum::body::Bytes| {
                let (state, recorder) = (state.clone(), recorder.clone());
                async move { answer(&state, &recorder, &endpoint, &body).await }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        TOOL_SERVER_PORT,
    ))
    .await
    .expect("the tool server's port is free on its own node");
    vigil::api::serve(listener, router).await;
}

async fn answer(
    state: &SharedToolServer,
    recorder: &Recorder,
    endpoint: &str,
    body: &[u8],
) -> (StatusCode, String) {
    let request: Value = serde_json::from_slice(body).unwrap_or_default();
    let agent = request["agent"]["id"].as_u64().unwrap_or(0);
    let run = request["run"]["id"].as_u64().unwrap_or(0);
    let tool = request["tool"].as_str().unwrap_or_default().to_string();
    let call_id = request["call_id"].as_str().unwrap_or_default();
    let (script, seed, failing, hanging) = {
        let mut state = state.lock().expect("tool server lock");
        state.calls += 1;
        (
            state.script.clone(),
            state.seed,
            state.failing > 0,
            state.hanging > 0,
        )
    };
    let outcome = if hanging {
        ToolOutcome::Hung
    } else if failing {
        ToolOutcome::Failed
    } else {
        match endpoint {
            "ok" => ToolOutcome::Ok,
            "slow" => ToolOutcome::Slow,
            "fail" => ToolOutcome::Failed,
            "partial" => ToolOutcome::Partial,
            "hang" => ToolOutcome::Hung,
            "flaky" => {
                let mut rng = vigil_faults::stream(seed, &format!("tool/{run}/{call_id}"));
                if rng.gen_range(0..1_000) < script.flaky_permille {
                    ToolOutcome::Failed
                } else {
                    ToolOutcome::Ok
                }
            }
            _ => ToolOutcome::Failed,
        }
    };
    let _in_flight = CallGuard::new(recorder, "tool-server", Some(agent), Some(run));
    recorder.record(
        "tool-server",
        TraceEvent::ToolCallServed {
            agent,
            run,
            call_id: call_id.to_string(),
            tool: tool.clone(),
            endpoint: endpoint.to_string(),
            outcome,
        },
    );
    match outcome {
        ToolOutcome::Ok => (StatusCode::OK, json!({ "result": format!("{tool}: 3 items") }).to_string()),
        ToolOutcome::Slow => {
            tokio::time::sleep(Duration::from_millis(script.slow_ms)).await;
            (StatusCode::OK, json!({ "result": format!("{tool}: slow answer") }).to_string())
        }
        ToolOutcome::Failed => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": "upstream API failed" }).to_string(),
        ),
        ToolOutcome::Partial => (
            StatusCode::OK,
            json!({ "result": "page 1 of many", "more": true, "hint": "call again for the next page" })
                .to_string(),
        ),
        // A hung call is never answered: the runtime's tool timeout ends it. (Answering late
        // would send bytes to a socket the runtime already closed, which madsim retries every
        // 10 s for the rest of the run.)
        ToolOutcome::Hung => std::future::pending().await,
    }
}
