//! The honest operator's API client: the production `ApiClient` with the operator's token, which
//! in scenarios that judge the operator's answers (`hostile`) records each request it sends and
//! the answer it got (`operator_asked`, `operator_answered`), so the oracle can hold the node to
//! answering its operator in time whatever other principals do (check/operator.rs). Elsewhere it
//! records nothing, and those scenarios' traces are unchanged.
//!
//! Its requests each open a connection, as the CLI's do, so that a lossy network (which refuses
//! some connections) slows them as it slows an operator. The workload's pulse sender is the
//! exception ([`OperatorClient::keeping_connections`]).

use std::cell::Cell;
use std::net::SocketAddr;

use hyper::Method;
use vigil::api::client::{Answer, ApiClient, ClientError};

use crate::harness::SIM_OPERATOR_TOKEN;
use crate::recorder::Recorder;
use crate::trace::TraceEvent;

thread_local! {
    /// The number of the next recorded operator request, or `None` when this run records none.
    /// Per thread, hence per run: each seed runs on its own thread (`harness::simulate`), and
    /// madsim runs every node of the world on it.
    static NEXT_REQUEST: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Makes this run record the operator's requests and answers (called by a scenario before its
/// world starts).
pub fn record_operator_requests() {
    NEXT_REQUEST.with(|next| next.set(Some(1)));
}

/// Takes the next request number, if this run records requests.
fn next_request() -> Option<u64> {
    NEXT_REQUEST.with(|next| {
        let number = next.get()?;
        next.set(Some(number + 1));
        Some(number)
    })
}

/// Records that the operator sent a request (if this run records them); the number to answer.
pub fn asked(recorder: &Recorder, method: &str, path: &str) -> Option<u64> {
    let request = next_request()?;
    recorder.record(
        "workload",
        TraceEvent::OperatorAsked {
            request,
            method: method.to_string(),
            path: path.to_string(),
        },
    );
    Some(request)
}

/// Records the answer to request `request` (from [`asked`]): its status and error code, or none.
pub fn answered(recorder: &Recorder, request: Option<u64>, status: Option<u16>, body: &[u8]) {
    let Some(request) = request else {
        return;
    };
    let code = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|json| json["error"]["code"].as_str().map(str::to_string));
    recorder.record(
        "workload",
        TraceEvent::OperatorAnswered {
            request,
            status,
            code,
        },
    );
}

/// The operator's client. Cheap to clone.
#[derive(Debug, Clone)]
pub struct OperatorClient {
    api: ApiClient,
    recorder: Recorder,
}

impl OperatorClient {
    /// A client for the node at `addr` with the simulated operator's token.
    pub fn new(addr: SocketAddr, recorder: Recorder) -> Self {
        OperatorClient {
            api: ApiClient::with_token(addr, SIM_OPERATOR_TOKEN),
            recorder,
        }
    }

    /// The same client, keeping its connections open between requests
    /// (`ApiClient::keeping_connections`), as a host that pulses every few seconds does: the
    /// node's keep-alive path is exercised, and a fleet's day spends a tenth less on opening
    /// connections. A connection the node closed (a crash, a restart, its idle timeout) is
    /// replaced, never reused.
    pub fn keeping_connections(mut self) -> Self {
        self.api = self.api.keeping_connections();
        self
    }

    /// The same node, asked with `token` in place of the operator's (an agent's token); its
    /// requests are recorded as the operator's are.
    pub fn with_bearer(&self, token: &str) -> Self {
        OperatorClient {
            api: ApiClient::with_token(self.api.addr(), token),
            recorder: self.recorder.clone(),
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Answer, ClientError> {
        self.request(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Answer, ClientError> {
        self.request(Method::POST, path, Some(body.to_string().into_bytes()))
            .await
    }

    /// Any request, recorded with its answer when the run asks for it.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ClientError> {
        let request = asked(&self.recorder, method.as_str(), path);
        let answer = self.api.request(method, path, body).await;
        match &answer {
            Ok(a) => answered(&self.recorder, request, Some(a.status.as_u16()), &a.body),
            Err(_) => answered(&self.recorder, request, None, &[]),
        }
        answer
    }
}
