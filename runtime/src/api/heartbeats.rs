//! Predicate heartbeats over HTTP (docs/api.md, "Predicate heartbeats"): `/v1/heartbeats`
//! (define, list, show with its recent evaluations, delete), `GET /v1/capabilities` (the RFC
//! 0060 `host.heartbeat` block) and the RFC's test seam `POST /v1/host/sample/heartbeat/tick`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use super::json::Json;
use serde::{Deserialize, Serialize};

use super::auth::{Caller, Gate};
use super::body::parse_json;
use super::error::ApiError;
use super::query::Query;
use crate::engine::agent::AgentId;
use crate::engine::predicate::{
    Check, Heartbeat, HeartbeatId, HeartbeatRequest, OnChange, HEARTBEAT_MAX_PENDING_ENQUEUED,
    HEARTBEAT_MAX_RUNTIME_MS, HEARTBEAT_MAX_STATE_BYTES, HEARTBEAT_MIN_INTERVAL_SEC,
};
use crate::engine::spec_error::echo;
use crate::engine::Command;
use crate::heartbeats::{
    Evaluation, EvaluationCounts, EvaluationStatus, HeartbeatRunner, Observation,
};

/// Heartbeats in one page of `GET /v1/heartbeats` when `limit` is not given.
pub const HEARTBEATS_PAGE_DEFAULT: usize = 100;
/// Most heartbeats in one page.
pub const HEARTBEATS_PAGE_MAX: usize = 1_000;
/// Longest `simulateSlowMs` the test seam takes, in ms.
pub const HEARTBEAT_SEAM_SLOW_MS_MAX: u64 = 60_000;

/// A heartbeat as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HeartbeatView {
    pub id: HeartbeatId,
    pub agent: AgentId,
    /// The effective interval (a shorter one asked for is raised to the minimum).
    pub interval_sec: u64,
    pub check: Check,
    pub on_change: OnChange,
    pub max_runtime_ms: u64,
    /// The recorded state, as the JSON observed (none: nothing observed yet).
    #[schema(value_type = Object)]
    pub state: Option<serde_json::Value>,
    /// Paused now: `max_pending_enqueued` of its runs wait, and a transition found them so;
    /// transitions wait until the queue drains.
    pub emission_paused: bool,
    pub transitions: u64,
    pub created_at_ms: u64,
    pub changed_at_ms: Option<u64>,
}

impl HeartbeatView {
    /// The view of `heartbeat` of `tenant`, as `engine` holds it.
    fn of(engine: &crate::engine::Engine, tenant: &str, heartbeat: &Heartbeat) -> Self {
        HeartbeatView {
            id: heartbeat.id.clone(),
            agent: heartbeat.agent,
            interval_sec: heartbeat.spec.interval_sec,
            check: heartbeat.spec.check.clone(),
            on_change: heartbeat.spec.on_change,
            max_runtime_ms: heartbeat.spec.max_runtime_ms,
            state: heartbeat
                .state
                .as_deref()
                .map(|token| serde_json::from_str(token).expect("a state token is JSON")),
            emission_paused: engine.heartbeat_paused_now(tenant, &heartbeat.id),
            transitions: heartbeat.transitions,
            created_at_ms: heartbeat.created_at_ms,
            changed_at_ms: heartbeat.changed_at_ms,
        }
    }
}

/// `POST /v1/heartbeats`'s answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Created {
    pub heartbeat: HeartbeatView,
    pub seq: u64,
}

/// `GET /v1/heartbeats`'s answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Listing {
    pub heartbeats: Vec<HeartbeatView>,
    /// The `after` of the next page (none: this is the last).
    pub next_after: Option<String>,
}

/// `GET /v1/heartbeats/{id}`'s answer: the heartbeat and its ticks on this node since it
/// started (`heartbeat_evaluated`, kept in memory: ADR 0022).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Shown {
    #[serde(flatten)]
    pub heartbeat: HeartbeatView,
    /// The newest `HEARTBEAT_EVALUATIONS_KEPT` ticks, oldest first.
    pub evaluations: Vec<Evaluation>,
    pub counts: EvaluationCounts,
}

/// `DELETE /v1/heartbeats/{id}`'s answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Deleted {
    pub id: HeartbeatId,
    pub deleted: bool,
    pub seq: u64,
}

/// Defines a heartbeat (operator only). An interval under the minimum is raised to it and the
/// effective interval answered, as RFC 0060 says, not refused.
#[utoipa::path(
    post,
    path = "/v1/heartbeats",
    tag = "heartbeats",
    operation_id = "create_heartbeat",
    request_body = HeartbeatRequest,
    security(("operator_token" = [])),
    responses(
        (status = 201, description = "Defined; ticking from now", body = Created),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn create(
    State(gate): State<Gate>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let tenant = caller.operator()?.to_string();
    let request: HeartbeatRequest = parse_json(body)?;
    let id = HeartbeatId(request.id.clone());
    let decision = caller
        .execute(Command::CreateHeartbeat {
            tenant: tenant.clone(),
            request,
        })
        .await?;
    if let Some(runner) = gate.heartbeats() {
        runner.start(&tenant, &id);
    }
    let heartbeat = view(&caller, &tenant, &id)?;
    let seq = decision.events.last().map_or(0, |e| e.seq);
    Ok((StatusCode::CREATED, Json(Created { heartbeat, seq })))
}

fn view(caller: &Caller, tenant: &str, id: &HeartbeatId) -> Result<HeartbeatView, ApiError> {
    let engine = caller.shell.engine();
    let heartbeat = engine
        .heartbeat(tenant, id)
        .ok_or_else(|| ApiError::not_found(format!("no heartbeat with id {}", echo(&id.0))))?;
    Ok(HeartbeatView::of(&engine, tenant, heartbeat))
}

/// The tenant's heartbeats by id, in pages; `agent` keeps one agent's.
#[utoipa::path(
    get,
    path = "/v1/heartbeats",
    tag = "heartbeats",
    operation_id = "list_heartbeats",
    params(
        ("agent" = Option<u64>, Query, description = "Only this agent's heartbeats"),
        ("after" = Option<String>, Query, description = "Heartbeats with an id after this one"),
        ("limit" = Option<usize>, Query, description = "At most this many (default 100, at most 1000)"),
    ),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "A page of the tenant's heartbeats, by id", body = Listing),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn list(caller: Caller, RawQuery(query): RawQuery) -> Result<Json<Listing>, ApiError> {
    let tenant = caller.operator()?.to_string();
    let mut query = Query::parse(query.as_deref(), &["agent", "after", "limit"])?;
    let agent = query.number("agent")?.map(AgentId);
    let after = query.take("after").unwrap_or_default();
    let limit = query.limit(HEARTBEATS_PAGE_DEFAULT, HEARTBEATS_PAGE_MAX)?;
    let engine = caller.shell.engine();
    let mut heartbeats: Vec<HeartbeatView> = engine
        .tenant_heartbeats(&tenant)
        .filter(|h| h.id.0 > after && agent.is_none_or(|a| h.agent == a))
        .take(limit + 1)
        .map(|heartbeat| HeartbeatView::of(&engine, &tenant, heartbeat))
        .collect();
    let next_after = (heartbeats.len() > limit).then(|| {
        heartbeats.truncate(limit);
        heartbeats.last().expect("a full page").id.0.clone()
    });
    Ok(Json(Listing {
        heartbeats,
        next_after,
    }))
}

/// One heartbeat and its recent ticks.
#[utoipa::path(
    get,
    path = "/v1/heartbeats/{id}",
    tag = "heartbeats",
    operation_id = "show_heartbeat",
    params(("id" = String, Path, description = "The heartbeat's id")),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The heartbeat, its recent evaluations and their counts", body = Shown),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn show(
    State(gate): State<Gate>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Shown>, ApiError> {
    let tenant = caller.operator()?.to_string();
    let id = HeartbeatId(id);
    let heartbeat = view(&caller, &tenant, &id)?;
    let (evaluations, counts) = gate
        .heartbeats()
        .map(|runner| runner.evaluations(&tenant, &id))
        .unwrap_or_default();
    Ok(Json(Shown {
        heartbeat,
        evaluations,
        counts,
    }))
}

/// Deletes a heartbeat: it ticks no more.
#[utoipa::path(
    delete,
    path = "/v1/heartbeats/{id}",
    tag = "heartbeats",
    operation_id = "delete_heartbeat",
    params(("id" = String, Path, description = "The heartbeat's id")),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "Deleted", body = Deleted),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn delete(
    State(gate): State<Gate>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    let tenant = caller.operator()?.to_string();
    let id = HeartbeatId(id);
    let decision = caller
        .execute(Command::DeleteHeartbeat {
            tenant: tenant.clone(),
            heartbeat: id.clone(),
        })
        .await?;
    if let Some(runner) = gate.heartbeats() {
        runner.forget(&tenant, &id);
    }
    let seq = decision.events.last().map_or(0, |e| e.seq);
    Ok(Json(Deleted {
        id,
        deleted: true,
        seq,
    }))
}

/// `GET /v1/capabilities`: what this host supports, with RFC 0060's camelCase names (this
/// endpoint only).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Capabilities {
    pub host: HostCapabilities,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HostCapabilities {
    pub heartbeat: HeartbeatCapability,
    pub scheduling: SchedulingCapability,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatCapability {
    pub supported: bool,
    pub min_interval_sec: u64,
    pub max_runtime_ms: u64,
    pub max_state_bytes: u64,
    pub max_pending_enqueued: u64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingCapability {
    pub supported: bool,
    /// `skip`: a tick due while the previous evaluation still runs is skipped, never queued,
    /// and ticks missed while the node was down are not made up.
    pub missed_tick_policy: &'static str,
}

/// Unauthenticated, like `/v1/health`: it says what the host can do, nothing about any tenant.
#[utoipa::path(
    get,
    path = "/v1/capabilities",
    tag = "heartbeats",
    operation_id = "capabilities",
    security(()),
    responses((status = 200, description = "The host's capabilities", body = Capabilities))
)]
pub async fn capabilities() -> Json<Capabilities> {
    Json(Capabilities {
        host: HostCapabilities {
            heartbeat: HeartbeatCapability {
                supported: true,
                min_interval_sec: HEARTBEAT_MIN_INTERVAL_SEC,
                max_runtime_ms: HEARTBEAT_MAX_RUNTIME_MS,
                max_state_bytes: HEARTBEAT_MAX_STATE_BYTES as u64,
                max_pending_enqueued: HEARTBEAT_MAX_PENDING_ENQUEUED as u64,
            },
            scheduling: SchedulingCapability {
                supported: true,
                missed_tick_policy: "skip",
            },
        },
    })
}

/// The test seam's request (RFC 0060's names).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TickRequest {
    pub heartbeat_id: String,
    #[schema(value_type = Object)]
    pub observed_state: serde_json::Value,
    #[serde(default)]
    pub simulate_slow_ms: Option<u64>,
}

/// The test seam's answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TickAnswer {
    /// False when the tick was skipped (an evaluation of the heartbeat was still going).
    pub evaluated: bool,
    pub status: EvaluationStatus,
    pub state_changed: bool,
    pub enqueued_runs: u32,
}

/// The RFC 0060 test seam (operator only; 404 unless the node file's `[heartbeats] test_seam`
/// is on): one tick of the heartbeat through the real machinery (in-flight skip, budget,
/// state cap, the writer), observing `observedState` after `simulateSlowMs` of pretended work.
#[utoipa::path(
    post,
    path = "/v1/host/sample/heartbeat/tick",
    tag = "heartbeats",
    operation_id = "heartbeat_tick",
    request_body = TickRequest,
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The tick's outcome", body = TickAnswer),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn tick(
    State(gate): State<Gate>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<TickAnswer>, ApiError> {
    if !gate.heartbeat_seam() {
        return Err(ApiError::not_found(
            "the heartbeat test seam is off; the node file's [heartbeats] test_seam turns it on",
        ));
    }
    let tenant = caller.operator()?.to_string();
    let request: TickRequest = parse_json(body)?;
    let slow_ms = request.simulate_slow_ms.unwrap_or(0);
    if slow_ms > HEARTBEAT_SEAM_SLOW_MS_MAX {
        return Err(ApiError::invalid_field(
            "simulateSlowMs",
            format!("simulateSlowMs must be at most {HEARTBEAT_SEAM_SLOW_MS_MAX}, got {slow_ms}"),
        ));
    }
    let id = HeartbeatId(request.heartbeat_id);
    view(&caller, &tenant, &id)?;
    let runner: &HeartbeatRunner = gate
        .heartbeats()
        .expect("the runner is set before the gate opens");
    let observation = Observation::Injected {
        state: request.observed_state,
        slow_ms,
    };
    let evaluation = runner.tick(&tenant, &id, observation).await;
    Ok(Json(TickAnswer {
        evaluated: evaluation.status != EvaluationStatus::Skipped,
        status: evaluation.status,
        state_changed: evaluation.changed,
        enqueued_runs: evaluation.enqueued_runs,
    }))
}
