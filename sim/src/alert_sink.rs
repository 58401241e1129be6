//! A simulated alert receiver (docs/operations.md "Alerts") on its own node of the simulated
//! network (`10.77.0.4`, [`ALERT_SINK_HOST`] in madsim's DNS table). It checks each alert's
//! signature with the world's key, refuses a seeded share of attempts with 503 while the safety
//! phase lasts (drawn per alert id and attempt from the stream `alert_sink/<id>/<attempt>`),
//! and records each alert it accepts ([`TraceEvent::AlertDelivered`]); it records
//! [`TraceEvent::AlertSinkUp`] when it starts, which turns the oracle's alert check on.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use rand::Rng;
use serde_json::Value;

use crate::recorder::Recorder;
use crate::trace::TraceEvent;

/// Where the sink listens.
pub const ALERT_SINK_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 4));
pub const ALERT_SINK_PORT: u16 = 9191;
/// Its host name in madsim's DNS table.
pub const ALERT_SINK_HOST: &str = "alerts.sim.internal";
/// The sink's name in the node's configuration (the first part of every alert id).
pub const ALERT_SINK_NAME: &str = "sim";
/// The variable the node reads the key from, and the key (the simulated world's only secret).
pub const ALERT_SECRET_ENV: &str = "SIM_ALERT_KEY";
pub const ALERT_SECRET: &str = "sim-alert-signing-key-3f9c";

/// The node's sink configuration: every kind, every tenant, the default catch-up bound.
pub fn sink() -> vigil::alerts::AlertSink {
    let spec = vigil::alerts::AlertSinkSpec {
        name: ALERT_SINK_NAME.into(),
        url: format!("http://{ALERT_SINK_HOST}:{ALERT_SINK_PORT}/alerts"),
        secret_env: ALERT_SECRET_ENV.into(),
        tenants: None,
        kinds: None,
        catch_up_s: None,
    };
    vigil::alerts::validate_sinks(&[spec])
        .expect("the simulated sink is valid")
        .remove(0)
}

/// The sink's behaviour and what it has seen.
#[derive(Debug, Default)]
pub struct AlertSinkState {
    pub seed: u64,
    /// Share of attempts refused with 503 (per mille) until [`AlertSinkState::heal`].
    pub refuse_permille: u32,
    /// Attempts per alert id so far (the draw's input; bounded by the alerts of one run).
    attempts: BTreeMap<String, u32>,
}

impl AlertSinkState {
    pub fn new(seed: u64, refuse_permille: u32) -> Self {
        AlertSinkState {
            seed,
            refuse_permille,
            attempts: BTreeMap::new(),
        }
    }

    /// The quiet phase: every attempt from now on is accepted.
    pub fn heal(&mut self) {
        self.refuse_permille = 0;
    }
}

pub type SharedAlertSink = Arc<Mutex<AlertSinkState>>;

/// Serves `/alerts` on this node forever.
pub async fn serve(state: SharedAlertSink, recorder: Recorder) {
    recorder.record("alert-sink", TraceEvent::AlertSinkUp);
    let router = axum::Router::new().route(
        "/alerts",
        post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (state, recorder) = (state.clone(), recorder.clone());
            async move { answer(&state, &recorder, &headers, &body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        ALERT_SINK_PORT,
    ))
    .await
    .expect("the alert sink's port is free on its own node");
    vigil::api::serve(listener, router).await;
}

fn answer(
    state: &SharedAlertSink,
    recorder: &Recorder,
    headers: &HeaderMap,
    body: &[u8],
) -> StatusCode {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let timestamp = header(vigil::exec::webhook::TIMESTAMP_HEADER);
    let expected = timestamp
        .parse()
        .map(|ts| vigil::exec::webhook::signature(ALERT_SECRET.as_bytes(), ts, body));
    if expected.as_deref() != Ok(header(vigil::exec::webhook::SIGNATURE_HEADER)) {
        return StatusCode::UNAUTHORIZED;
    }
    let id = header(vigil::alerts::ALERT_ID_HEADER).to_string();
    let refused = {
        let mut state = state.lock().expect("alert sink lock");
        let attempt = state.attempts.entry(id.clone()).or_default();
        *attempt += 1;
        let attempt = *attempt;
        let mut rng = vigil_faults::stream(state.seed, &format!("alert_sink/{id}/{attempt}"));
        rng.gen_range(0..1_000) < state.refuse_permille
    };
    if refused {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let alert: Value = serde_json::from_slice(body).unwrap_or_default();
    recorder.record(
        "alert-sink",
        TraceEvent::AlertDelivered {
            id,
            seq: alert["seq"].as_u64().unwrap_or(0),
            kind: alert["kind"].as_str().unwrap_or_default().to_string(),
        },
    );
    StatusCode::OK
}
