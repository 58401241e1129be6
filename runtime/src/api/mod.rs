//! The HTTP API. Handlers translate HTTP to shell calls and back; no business rule lives here.
//!
//! Served by hyper's HTTP/1 connection builder over accepted `tokio::net` streams (not
//! `axum::serve`), so that under `--cfg madsim` the same bytes cross the simulated network.

mod agents;
mod auth;
pub(crate) mod body;
pub(crate) mod body_deadline;
pub mod client;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod in_flight;
mod pulses;
mod query;
pub(crate) mod rate_limit;
mod run_result;
pub(crate) mod runs;
mod sessions;
mod slots;
pub(crate) mod streams;
mod usage;
pub(crate) mod wakeups;
mod timer;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use crate::net::WrittenFlush;

pub use agents::{AGENTS_PAGE_DEFAULT, AGENTS_PAGE_MAX};
pub use auth::Gate;
pub use body::BODY_BYTES_MAX;
pub use body_deadline::{BODY_READ_TIMEOUT_MS, BODY_STALL_TIMEOUT_MS};
pub use error::{ERROR_FIELD_CHARS_MAX, ERROR_MESSAGE_CHARS_MAX, RETRY_AFTER_DEFAULT_S};
pub use error::ApiError;
pub use events::SSE_KEEPALIVE_MS;
pub use in_flight::{
    REQUESTS_IN_FLIGHT_MAX, REQUESTS_IN_FLIGHT_NODE_OPERATOR_RESERVE,
    REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX, REQUESTS_IN_FLIGHT_PER_OPERATOR_TOKEN_MAX,
    REQUESTS_IN_FLIGHT_PER_TENANT_MAX, REQUESTS_IN_FLIGHT_TENANT_OPERATOR_RESERVE,
};
pub use rate_limit::{
    RATE_LIMITED_TOKENS_MAX, REQUESTS_PER_SECOND_PER_TOKEN, REQUEST_BURST_PER_TOKEN,
};
pub use streams::{
    SSE_RETRY_AFTER_S, SSE_STREAMS_MAX, SSE_STREAMS_NODE_OPERATOR_RESERVE,
    SSE_STREAMS_PER_TENANT_MAX, SSE_STREAMS_PER_TOKEN_MAX, SSE_STREAMS_TENANT_OPERATOR_RESERVE,
};
pub use runs::{RUN_LOG_PAGE_DEFAULT, RUN_LOG_PAGE_MAX};

/// Most connections served at once; further clients wait in the listen backlog.
pub const CONNECTIONS_MAX: usize = 1_024;
/// A connection that has not sent a complete request head within this long is closed, so idle
/// and slow clients cannot hold the `CONNECTIONS_MAX` slots. (The body has its own timers:
/// `BODY_READ_TIMEOUT_MS`, `BODY_STALL_TIMEOUT_MS`.)
pub const HEADER_READ_TIMEOUT_MS: u64 = 30_000;
/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY_MS: u64 = 100;

/// All routes of the API.
pub fn router(gate: Gate) -> Router {
    use agents::Control;
    Router::new()
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/backup", post(backup))
        .route("/v1/agents", get(agents::list).post(agents::create))
        .route(
            "/v1/agents/{id}",
            get(agents::show)
                .patch(agents::update)
                .delete(agents::delete),
        )
        .route("/v1/operator/token", post(agents::rotate_operator_token))
        .route("/v1/agents/{id}/pause", post(agents::pause))
        .route(
            "/v1/agents/{id}/pause_heartbeats",
            post(agents::pause_heartbeats),
        )
        .route(
            "/v1/agents/{id}/resume",
            post(|c, p| agents::control(c, p, Control::Resume)),
        )
        .route(
            "/v1/agents/{id}/terminate",
            post(|c, p| agents::control(c, p, Control::Terminate)),
        )
        .route("/v1/agents/{id}/wakeup", post(agents::wakeup))
        .route("/v1/agents/{id}/token", post(agents::rotate_token))
        .route("/v1/agents/{id}/input", post(pulses::input))
        .route("/v1/agents/{id}/pulse", post(pulses::pulse))
        .route("/v1/pulses", post(pulses::batch))
        .route(
            "/v1/agents/{id}/breaker/reset",
            post(|c, p| agents::control(c, p, Control::ResetBreaker)),
        )
        .route(
            "/v1/agents/{id}/error/reset",
            post(|c, p| agents::control(c, p, Control::ResetError)),
        )
        .route("/v1/agents/{id}/history", get(usage::history))
        .route("/v1/agents/{id}/sessions", get(sessions::list))
        .route("/v1/agents/{id}/sessions/{task_key}/reset", post(sessions::reset))
        .route("/v1/usage", get(usage::tenant))
        .route("/v1/runs", get(runs::list))
        .route("/v1/runs/{id}", get(runs::show))
        .route("/v1/runs/{id}/log", get(runs::log))
        .route("/v1/runs/{id}/cancel", post(runs::cancel))
        .route("/v1/runs/{id}/result", post(run_result::report))
        .route("/v1/events", get(events::list))
        .route("/v1/wakeups", get(wakeups::list))
        .fallback(|| async { ApiError::not_found("no such route; see docs/api.md") })
        .method_not_allowed_fallback(|| async {
            ApiError {
                status: StatusCode::METHOD_NOT_ALLOWED,
                code: "method_not_allowed",
                message: "this route does not take that method; see docs/api.md".into(),
                field: None,
                retry_after_s: None,
            }
        })
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        // Why: the header-read timeout stops at the request head; this bounds the body.
        .layer(axum::middleware::from_fn(body_deadline::enforce))
        .with_state(gate)
}

/// Unauthenticated: `recovering` (503) before the node is ready, `ok` once it is, `draining`
/// (503) once it is stopping: it still answers, but a load balancer's readiness check should
/// send new work elsewhere. Every 503 carries `Retry-After`.
async fn health(State(gate): State<Gate>) -> Response {
    match gate.shell() {
        Ok(shell) if shell.draining() => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_DEFAULT_S))],
            Json(serde_json::json!({ "status": "draining", "head_seq": shell.head_seq() })),
        )
            .into_response(),
        Ok(shell) => (
            StatusCode::OK,
            Json(serde_json::json!({ "status": "ok", "head_seq": shell.head_seq() })),
        )
            .into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_DEFAULT_S))],
            Json(serde_json::json!({ "status": "recovering" })),
        )
            .into_response(),
    }
}

/// `GET /metrics`: the node's metrics in the OpenMetrics text format (docs/operations.md,
/// "Metrics"). They count every tenant's agents, so only the operator of tenant `default` (the
/// node's own) may read them.
async fn metrics(caller: auth::Caller) -> Result<Response, ApiError> {
    node_operator(&caller, "the node's metrics count every tenant")?;
    let text = caller.shell.scrape_metrics();
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        )],
        text,
    )
        .into_response())
}

/// Refuses every caller but tenant `default`'s operator: what the node does for all tenants at
/// once (`why` says what) is the node operator's.
fn node_operator(caller: &auth::Caller, why: &str) -> Result<(), ApiError> {
    let tenant = caller.operator()?;
    if tenant != crate::engine::tenant::DEFAULT_TENANT {
        return Err(ApiError::forbidden(format!(
            "{why}: it needs the operator token of tenant \"default\""
        )));
    }
    Ok(())
}

/// `POST /v1/backup` (operator of tenant `default`): a consistent copy of the database, written
/// beside it while the node serves (docs/operations.md, "Backup and restore").
async fn backup(
    caller: auth::Caller,
) -> Result<axum::Json<crate::store::backup::Backup>, ApiError> {
    node_operator(&caller, "a backup holds every tenant's data")?;
    match caller.shell.backup().await {
        Ok(backup) => Ok(axum::Json(backup)),
        Err(crate::shell::BackupRefused::InProgress) => Err(ApiError {
            status: StatusCode::CONFLICT,
            code: "backup_in_progress",
            message: crate::shell::BackupRefused::InProgress.to_string(),
            field: None,
            retry_after_s: None,
        }),
        Err(failed) => Err(ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "backup_failed",
            message: failed.to_string(),
            field: None,
            retry_after_s: None,
        }),
    }
}

/// Accepts connections forever, one task per connection.
pub async fn serve(listener: TcpListener, router: Router) {
    let permits = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            Err(error) => {
                tracing::warn!(%error, "accept failed; retrying");
                tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(timer::TokioTimer)
                .header_read_timeout(Duration::from_millis(HEADER_READ_TIMEOUT_MS))
                .serve_connection(TokioIo::new(WrittenFlush::new(stream)), service);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(permit);
        });
    }
}
