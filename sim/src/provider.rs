//! A simulated LLM provider: an OpenAI-compatible `/v1/chat/completions` endpoint on its own
//! node of the simulated network, served by the same hyper/axum stack as the runtime. The
//! runtime's `llm` adapter calls it over simulated TCP exactly as it would call a real one. The
//! fault plan changes its behaviour in virtual time (faults `llm_rate_limit`,
//! `llm_server_error`, `llm_timeout`, `llm_malformed`): while a window is open every call is
//! answered that way.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::post;
use vigil_faults::LlmFault;

/// Where the provider listens.
pub const PROVIDER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));
pub const PROVIDER_PORT: u16 = 8080;
/// The model name the scenarios give their `llm` agents.
pub const SIM_MODEL: &str = "sim-model-1";
/// Under `llm_timeout` a call is answered only after this long: far past any request timeout
/// a scenario gives its agents.
pub const SLOW_REPLY_MS: u64 = 60 * 60 * 1_000;

/// The provider's address as an `llm` adapter's `base_url`.
pub fn base_url() -> String {
    format!("http://{}", SocketAddr::new(PROVIDER_IP, PROVIDER_PORT))
}

/// Which faults are open (counted, as windows of one kind may overlap), and the calls served.
#[derive(Debug, Default)]
pub struct ProviderState {
    open: [u32; 4],
    pub calls: u64,
}

fn slot(fault: LlmFault) -> usize {
    match fault {
        LlmFault::RateLimit => 0,
        LlmFault::ServerError => 1,
        LlmFault::Timeout => 2,
        LlmFault::Malformed => 3,
    }
}

impl ProviderState {
    pub fn open(&mut self, fault: LlmFault) {
        self.open[slot(fault)] += 1;
    }

    pub fn close(&mut self, fault: LlmFault) {
        self.open[slot(fault)] = self.open[slot(fault)].saturating_sub(1);
    }

    /// Heals every fault (the quiet phase).
    pub fn heal(&mut self) {
        self.open = [0; 4];
    }

    /// The fault calls suffer now, if any (the first open in this order).
    fn current(&self) -> Option<LlmFault> {
        [
            LlmFault::RateLimit,
            LlmFault::ServerError,
            LlmFault::Timeout,
            LlmFault::Malformed,
        ]
        .into_iter()
        .find(|f| self.open[slot(*f)] > 0)
    }
}

/// Shared between the provider node and the fault runner (madsim runs every node on one thread).
pub type SharedProvider = Arc<Mutex<ProviderState>>;

/// Serves the endpoint on this node forever.
pub async fn serve(state: SharedProvider) {
    let router = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |body: axum::body::Bytes| {
            let state = state.clone();
            async move { answer(&state, &body).await }
        }),
    );
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        PROVIDER_PORT,
    ))
    .await
    .expect("the provider's port is free on its own node");
    vigil::api::serve(listener, router).await;
}

async fn answer(state: &SharedProvider, body: &[u8]) -> (StatusCode, String) {
    let fault = {
        let mut state = state.lock().expect("provider lock");
        state.calls += 1;
        state.current()
    };
    match fault {
        Some(LlmFault::RateLimit) => (
            StatusCode::TOO_MANY_REQUESTS,
            r#"{"error":{"type":"rate_limit_exceeded","message":"Rate limit reached; retry later"}}"#.into(),
        ),
        Some(LlmFault::ServerError) => (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"error":{"type":"server_error","message":"The server is overloaded"}}"#.into(),
        ),
        Some(LlmFault::Timeout) => {
            tokio::time::sleep(Duration::from_millis(SLOW_REPLY_MS)).await;
            (StatusCode::OK, completion("late"))
        }
        Some(LlmFault::Malformed) => (StatusCode::OK, r#"{"choices":[{"mess"#.into()),
        None => {
            let request: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            let model = request["model"].as_str().unwrap_or("unknown");
            (StatusCode::OK, completion(&format!("done ({model})")))
        }
    }
}

fn completion(content: &str) -> String {
    serde_json::json!({
        "object": "chat.completion",
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": content }, "finish_reason": "stop" }],
    })
    .to_string()
}

/// The simulated provider's price list, as a node's price table: what the scenarios' models
/// cost, so budgets have something to count.
pub fn prices() -> vigil::exec::pricing::PriceTable {
    let mut table = vigil::exec::pricing::PriceTable::default();
    table.models.insert(
        SIM_MODEL.to_string(),
        vigil::exec::pricing::ModelPrice {
            input_usd_per_mtok: 3.0,
            cached_input_usd_per_mtok: Some(0.3),
            output_usd_per_mtok: 15.0,
        },
    );
    table
}
