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
pub(crate) mod heartbeats;
pub(crate) mod in_flight;
mod json;
mod openapi;
mod pulses;
mod query;
pub(crate) mod rate_limit;
mod run_result;
pub(crate) mod runs;
mod sessions;
mod slots;
pub(crate) mod streams;
mod usage;
pub(crate) mod timeline;
pub(crate) mod wakeups;
mod timer;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use json::Json;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::net::WrittenFlush;

pub use agents::{AGENTS_PAGE_DEFAULT, AGENTS_PAGE_MAX};
pub use auth::Gate;
pub use body::BODY_BYTES_MAX;
pub use body_deadline::{BODY_READ_TIMEOUT_MS, BODY_STALL_TIMEOUT_MS};
pub use error::{ERROR_FIELD_CHARS_MAX, ERROR_MESSAGE_CHARS_MAX, RETRY_AFTER_DEFAULT_S};
pub use error::ApiError;
pub use events::SSE_KEEPALIVE_MS;
pub use heartbeats::{HEARTBEATS_PAGE_DEFAULT, HEARTBEATS_PAGE_MAX, HEARTBEAT_SEAM_SLOW_MS_MAX};
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
pub use timeline::{TIMELINE_PAGE_DEFAULT, TIMELINE_PAGE_MAX};

/// Most connections served at once; further clients wait in the listen backlog.
pub const CONNECTIONS_MAX: usize = 1_024;
/// A connection that has not sent a complete request head within this long is closed, so idle
/// and slow clients cannot hold the `CONNECTIONS_MAX` slots. (The body has its own timers:
/// `BODY_READ_TIMEOUT_MS`, `BODY_STALL_TIMEOUT_MS`.)
pub const HEADER_READ_TIMEOUT_MS: u64 = 30_000;
/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY_MS: u64 = 100;

/// All routes of the API, each registered once for both the router and the OpenAPI document
/// (`openapi.rs`, ADR 0017): a handler's `#[utoipa::path]` says its method and path, `routes!`
/// serves it there. Handlers on one path go in one `routes!`.
fn routes() -> OpenApiRouter<Gate> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(health))
        .routes(routes!(openapi::openapi_json))
        .routes(routes!(metrics))
        .routes(routes!(backup))
        .routes(routes!(agents::list, agents::create))
        .routes(routes!(agents::show, agents::update, agents::delete))
        .routes(routes!(agents::rotate_operator_token))
        .routes(routes!(agents::pause))
        .routes(routes!(agents::pause_heartbeats))
        .routes(routes!(agents::resume))
        .routes(routes!(agents::terminate))
        .routes(routes!(agents::wakeup))
        .routes(routes!(agents::rotate_token))
        .routes(routes!(pulses::input))
        .routes(routes!(pulses::pulse))
        .routes(routes!(pulses::batch))
        .routes(routes!(agents::reset_breaker))
        .routes(routes!(agents::reset_error))
        .routes(routes!(usage::history))
        .routes(routes!(sessions::list))
        .routes(routes!(sessions::reset))
        .routes(routes!(usage::tenant))
        .routes(routes!(runs::list))
        .routes(routes!(runs::show))
        .routes(routes!(runs::log))
        .routes(routes!(runs::cancel))
        .routes(routes!(run_result::report))
        .routes(routes!(events::list))
        .routes(routes!(wakeups::list))
        .routes(routes!(timeline::show))
        .routes(routes!(heartbeats::list, heartbeats::create))
        .routes(routes!(heartbeats::show, heartbeats::delete))
        .routes(routes!(heartbeats::capabilities))
        .routes(routes!(heartbeats::tick))
}

/// The router serving `routes()`, with the fallbacks and the body limits.
pub fn router(gate: Gate) -> Router {
    // Why once per process: the routes, fallbacks and layers are the same for every node of
    // this build, and `routes()` builds the whole OpenAPI document (every schema and path) on
    // the way. The simulator starts nodes thousands of times a sweep (every seed, every
    // restart): that document was 5 % of a `midnight` sweep.
    static ROUTER: OnceLock<Router<Gate>> = OnceLock::new();
    ROUTER.get_or_init(stateless_router).clone().with_state(gate)
}

/// The router without its state: the routes of `routes()`, the fallbacks, the body limits.
fn stateless_router() -> Router<Gate> {
    let (router, _document) = routes().split_for_parts();
    router
        // Why the fallback: the dashboard's files are not API routes (no token, not in the
        // document); every other unrouted path is the API's 404.
        .fallback(|method: Method, uri: Uri, headers: HeaderMap| async move {
            crate::dashboard::answer(&method, uri.path(), &headers).unwrap_or_else(|| {
                ApiError::not_found("no such route; see docs/api.md").into_response()
            })
        })
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
}

/// Unauthenticated: `recovering` (503) before the node is ready, `ok` once it is, `draining`
/// (503) once it is stopping: it still answers, but a load balancer's readiness check should
/// send new work elsewhere. Every 503 carries `Retry-After`.
#[utoipa::path(
    get,
    path = "/v1/health",
    tag = "node",
    security(()),
    responses(
        (status = 200, description = "Ready", body = openapi::Health),
        (status = 503, description = "Recovering or draining", body = openapi::Health),
    )
)]
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
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "node",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "OpenMetrics text (docs/operations.md, Metrics)",
            body = String, content_type = "application/openmetrics-text"),
        openapi::ErrorAnswers,
    )
)]
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
#[utoipa::path(
    post,
    path = "/v1/backup",
    tag = "node",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "Where the copy is and what it holds", body = crate::store::backup::Backup),
        openapi::ErrorAnswers,
    )
)]
async fn backup(
    caller: auth::Caller,
) -> Result<Json<crate::store::backup::Backup>, ApiError> {
    node_operator(&caller, "a backup holds every tenant's data")?;
    match caller.shell.backup().await {
        Ok(backup) => Ok(Json(backup)),
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
