//! `/v1/agents`: register agents, read, change and delete them, pause/resume/terminate them,
//! and wake them; `/v1/operator/token`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use super::json::Json;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::auth::{parse_id, Caller};
use super::body::parse_json;
use super::error::ApiError;
use super::pulses::PulseView;
use super::query::Query;
use crate::engine::agent::{Agent, AgentId, AgentSpec, AgentStatus};
use crate::engine::breaker::BreakerState;
use crate::engine::liveness::LivenessStatus;
use crate::engine::agent_update::SpecChange;
use crate::engine::event::EventKind;
use crate::engine::spec_error::echo;
use crate::engine::wakeup::{WakeupRecord, WakeupRequest};
use crate::engine::Command;

/// Answer to a successful create: the agent, its token (shown only here) and the event's seq.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Created {
    pub agent: Agent,
    pub token: String,
    pub seq: u64,
    /// What may stop its runs though the spec is valid (a coding CLI not installed).
    pub warnings: Vec<String>,
}

/// Answer to a list: the agents and the node's wall clock when it was read.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = AgentList)]
pub struct Listing {
    pub now_ms: u64,
    /// Whole agents, or their brief form with `view=brief`.
    pub agents: Vec<Listed>,
    /// More agents follow this page: ask again with `after` set to this id. Absent on the last
    /// page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<AgentId>,
}

/// One agent of a listing.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Listed {
    Whole(AgentView),
    Brief(AgentBrief),
}

/// An agent in brief (`GET /v1/agents?view=brief`): what a fleet view reads every few seconds,
/// without the spec (prompts, tool schemas), which is most of an agent's bytes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentBrief {
    pub id: AgentId,
    pub name: String,
    #[schema(value_type = String)]
    pub status: AgentStatus,
    pub next_fire_at_ms: Option<u64>,
    pub paused_until_ms: Option<u64>,
    pub liveness: LivenessStatus,
    #[schema(value_type = Object)]
    pub breaker: BreakerState,
}

impl AgentBrief {
    fn of(agent: &Agent) -> AgentBrief {
        AgentBrief {
            id: agent.id,
            name: agent.name.clone(),
            status: agent.status,
            next_fire_at_ms: agent.next_fire_at_ms,
            paused_until_ms: agent.paused_until_ms,
            liveness: agent.liveness.status,
            breaker: agent.breaker,
        }
    }
}

/// The query of `GET /v1/agents` (the handler parses it with `Query`, refusing any other key).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Why: describes the query only.
pub struct AgentsQuery {
    /// Agents with ids above this one (the previous page's `next_after`).
    after: Option<u64>,
    /// Page size, 1 to `AGENTS_PAGE_MAX` (default `AGENTS_PAGE_DEFAULT`).
    limit: Option<u64>,
    /// Only the agent of this name (at most one).
    name: Option<String>,
    /// `whole` (the default): each agent as `GET /v1/agents/{id}` shows it; `brief`: its id,
    /// name, status, next fire, pause, liveness and breaker only.
    view: Option<String>,
}

/// Agents per page of `GET /v1/agents` when `limit` is not given.
pub const AGENTS_PAGE_DEFAULT: usize = 1_000;
/// Largest page of `GET /v1/agents`.
pub const AGENTS_PAGE_MAX: usize = 1_000;

/// An agent as `GET /v1/agents[/{id}]` shows it: the agent, and its latest pulse since the node
/// started (memory only: absent before the first pulse after a restart).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentView {
    #[serde(flatten)]
    pub agent: Agent,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pulse: Option<PulseView>,
}

impl AgentView {
    fn of(agent: Agent, caller: &Caller) -> AgentView {
        let pulse = caller
            .shell
            .last_pulse(agent.id)
            .map(|last| PulseView::of(last, &agent.spec.liveness));
        AgentView { agent, pulse }
    }
}

/// Answer to a wakeup.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WakeAnswer {
    #[serde(flatten)]
    pub wakeup: WakeupRecord,
    /// True when an earlier wakeup with the same idempotency key is being replayed.
    pub replayed: bool,
    pub seq: u64,
}

/// `POST /v1/agents` (operator only): registers an agent from its spec; the answer holds its
/// token, shown this once.
#[utoipa::path(
    post,
    path = "/v1/agents",
    tag = "agents",
    request_body(content = AgentSpec, description = "The agent's spec; only `name` is required"),
    security(("operator_token" = [])),
    responses(
        (status = 201, description = "Created; the token is shown only here", body = Created),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn create(
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let tenant = caller.operator()?.to_string();
    let spec: AgentSpec = parse_json(body)?;
    let warnings = crate::exec::coding_cli::save_warnings(&spec.adapter).await;
    let created = caller
        .shell
        .create_agent(&tenant, spec, crate::writer::WhenFull::Refuse)
        .await?;
    let agent = caller.agent(created.agent)?;
    Ok((
        StatusCode::CREATED,
        Json(Created {
            agent,
            token: created.token,
            seq: created.seq,
            warnings,
        }),
    ))
}

/// `GET /v1/agents` (operator only): the tenant's agents by id, in pages, or the one named.
#[utoipa::path(
    get,
    path = "/v1/agents",
    tag = "agents",
    params(AgentsQuery),
    operation_id = "list_agents",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "A page of the tenant's agents, by id", body = Listing),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn list(caller: Caller, RawQuery(query): RawQuery) -> Result<Json<Listing>, ApiError> {
    let tenant = caller.operator()?;
    let mut query = Query::parse(query.as_deref(), &["after", "limit", "name", "view"])?;
    let after = AgentId(query.number("after")?.unwrap_or(0));
    let limit = query.limit(AGENTS_PAGE_DEFAULT, AGENTS_PAGE_MAX)?;
    let name = query.take("name");
    let brief = match query.take("view").as_deref() {
        None | Some("whole") => false,
        Some("brief") => true,
        Some(other) => {
            return Err(ApiError::invalid_field(
                "view",
                format!("view must be whole or brief, got {}", echo(other)),
            ))
        }
    };
    // Clones one page under the engine lock, never the whole fleet: the writer waits on that
    // lock, and a node may hold a million agents.
    let (agents, more): (Vec<Agent>, bool) = {
        let engine = caller.shell.engine();
        match &name {
            Some(name) => (
                engine
                    .agent_named(tenant, name)
                    .filter(|a| a.id > after)
                    .cloned()
                    .into_iter()
                    .collect(),
                false,
            ),
            None => {
                let mut page = engine.agents_after(after).filter(|a| a.tenant == tenant);
                let agents: Vec<Agent> = page.by_ref().take(limit).cloned().collect();
                (agents, page.next().is_some())
            }
        }
    };
    let next_after = more.then(|| agents.last().map(|a| a.id)).flatten();
    let agents = agents
        .into_iter()
        .map(|agent| {
            if brief {
                Listed::Brief(AgentBrief::of(&agent))
            } else {
                Listed::Whole(AgentView::of(agent, &caller))
            }
        })
        .collect();
    let now_ms = caller.shell.clock().wall_now_ms();
    Ok(Json(Listing {
        now_ms,
        agents,
        next_after,
    }))
}

/// `GET /v1/agents/{id}` (its operator, or the agent itself): the agent and its latest pulse.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}",
    operation_id = "show_agent",
    tag = "agents",
    params(super::openapi::AgentPath),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The agent", body = AgentView),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn show(caller: Caller, Path(id): Path<String>) -> Result<Json<AgentView>, ApiError> {
    let id = AgentId(parse_id("id", &id)?);
    let agent = caller.agent(id)?;
    Ok(Json(AgentView::of(agent, &caller)))
}

/// `POST /v1/agents/{id}/resume` (operator only): ends any pause.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/resume",
    tag = "agents",
    params(super::openapi::AgentPath),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The agent", body = Agent),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn resume(caller: Caller, id: Path<String>) -> Result<Json<Agent>, ApiError> {
    control(caller, id, Control::Resume).await
}

/// `POST /v1/agents/{id}/terminate` (operator only): stops the agent for good.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/terminate",
    tag = "agents",
    params(super::openapi::AgentPath),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The agent", body = Agent),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn terminate(caller: Caller, id: Path<String>) -> Result<Json<Agent>, ApiError> {
    control(caller, id, Control::Terminate).await
}

/// `POST /v1/agents/{id}/breaker/reset` (operator only): closes the circuit breaker.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/breaker/reset",
    tag = "agents",
    params(super::openapi::AgentPath),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The agent", body = Agent),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn reset_breaker(caller: Caller, id: Path<String>) -> Result<Json<Agent>, ApiError> {
    control(caller, id, Control::ResetBreaker).await
}

/// `POST /v1/agents/{id}/error/reset` (operator only): takes the agent out of the error state.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/error/reset",
    tag = "agents",
    params(super::openapi::AgentPath),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The agent", body = Agent),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn reset_error(caller: Caller, id: Path<String>) -> Result<Json<Agent>, ApiError> {
    control(caller, id, Control::ResetError).await
}

/// What `POST /v1/agents/{id}/{resume|terminate|breaker/reset|error/reset}` does.
#[derive(Debug, Clone, Copy)]
enum Control {
    Resume,
    Terminate,
    ResetBreaker,
    ResetError,
}

/// Resumes or terminates an agent, or resets its breaker or its error state (operator only);
/// answers with the
/// agent.
async fn control(
    caller: Caller,
    Path(id): Path<String>,
    action: Control,
) -> Result<Json<Agent>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.operated_agent(agent)?;
    let command = match action {
        Control::Resume => Command::ResumeAgent { agent },
        Control::Terminate => Command::TerminateAgent { agent },
        Control::ResetBreaker => Command::ResetBreaker { agent },
        Control::ResetError => Command::ResetAgentError { agent },
    };
    caller.execute(command).await?;
    caller.agent(agent).map(Json)
}

/// The answer to a token rotation: the agent's new token, shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RotatedToken {
    pub agent: AgentId,
    pub token: String,
    pub seq: u64,
}

/// `POST /v1/agents/{id}/token` (operator only): replaces the agent's token. The old token stops
/// working at once; the new one is in this answer only (the node keeps its hash).
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/token",
    tag = "agents",
    params(super::openapi::AgentPath),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The new token, shown only here", body = RotatedToken),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn rotate_token(
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<RotatedToken>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.operated_agent(agent)?;
    let (token, seq) = caller
        .shell
        .rotate_agent_token(agent, crate::writer::WhenFull::Refuse)
        .await?;
    Ok(Json(RotatedToken { agent, token, seq }))
}

/// The answer to a change: the agent as it is now, what changed, and the change's seq (absent
/// when the change left the spec as it was: nothing was recorded).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Updated {
    pub agent: Agent,
    pub changed: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// What may stop its runs though the spec is valid (a coding CLI not installed).
    pub warnings: Vec<String>,
}

/// `PATCH /v1/agents/{id}` (operator only): a JSON merge patch on the agent's spec, validated
/// like a create; see docs/api.md, "Changing an agent", for what it does to timers, queued runs,
/// pause, cap and breaker.
#[utoipa::path(
    patch,
    path = "/v1/agents/{id}",
    tag = "agents",
    operation_id = "update_agent",
    params(super::openapi::AgentPath),
    request_body(
        content = serde_json::Value,
        description = "A JSON merge patch (RFC 7396) on the agent's spec (docs/api.md, Changing an agent)"
    ),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The agent as it is now and what changed", body = Updated),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn update(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Updated>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.operated_agent(agent)?;
    let patch: serde_json::Value = parse_json(body)?;
    let event = caller
        .shell
        .update_agent(
            agent,
            SpecChange::Merge(patch),
            crate::writer::WhenFull::Refuse,
        )
        .await?;
    let agent = caller.agent(agent)?;
    let warnings = crate::exec::coding_cli::save_warnings(&agent.spec.adapter).await;
    let (changed, seq) = match event {
        Some(event) => match event.kind {
            EventKind::AgentUpdated { changed, .. } => (changed, Some(event.seq)),
            other => unreachable!("an update records agent_updated, not {}", other.type_name()),
        },
        None => (Vec::new(), None),
    };
    Ok(Json(Updated {
        agent,
        changed,
        seq,
        warnings,
    }))
}

/// The answer to a delete.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Deleted {
    pub agent: AgentId,
    pub name: String,
    pub seq: u64,
}

/// `DELETE /v1/agents/{id}` (operator only): terminates the agent if it is not, then forgets
/// it; its events stay in the log, its name is free again, its id is never reused.
#[utoipa::path(
    delete,
    path = "/v1/agents/{id}",
    tag = "agents",
    operation_id = "delete_agent",
    params(super::openapi::AgentPath),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "Terminated (if it was not) and forgotten", body = Deleted),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn delete(caller: Caller, Path(id): Path<String>) -> Result<Json<Deleted>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    let name = caller.operated_agent(agent)?.name;
    let seq = caller
        .shell
        .delete_agent(agent, crate::writer::WhenFull::Refuse)
        .await?;
    Ok(Json(Deleted { agent, name, seq }))
}

/// The answer to an operator token rotation: the tenant's new token, shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RotatedOperatorToken {
    pub tenant: String,
    pub token: String,
    pub seq: u64,
}

/// `POST /v1/operator/token` (operator only): replaces the caller's own operator token. The old
/// one stops working at once; a restart with the same configuration keeps the new one.
#[utoipa::path(
    post,
    path = "/v1/operator/token",
    tag = "agents",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The new operator token, shown only here", body = RotatedOperatorToken),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn rotate_operator_token(caller: Caller) -> Result<Json<RotatedOperatorToken>, ApiError> {
    let tenant = caller.operator()?.to_string();
    let (token, seq) = caller
        .shell
        .rotate_operator_token(&tenant, crate::writer::WhenFull::Refuse)
        .await?;
    Ok(Json(RotatedOperatorToken { tenant, token, seq }))
}

/// The optional body of the pause endpoints.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    #[serde(default)]
    pub minutes: Option<u64>,
}

/// An empty body means "no fields given".
pub(super) fn optional_body<T: DeserializeOwned + Default>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    match &body {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(T::default()),
        _ => parse_json(body),
    }
}

/// `POST /v1/agents/{id}/pause` (operator only): `{"minutes": N}` pauses for N minutes
/// (1..=10080); no body pauses until resumed. Answers with the agent.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/pause",
    tag = "agents",
    params(super::openapi::AgentPath),
    request_body(
        content = Option<PauseRequest>,
        description = "`{\"minutes\": N}` (1..=10080), or no body: until resumed"
    ),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The agent", body = Agent),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn pause(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Agent>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.operated_agent(agent)?;
    let request: PauseRequest = optional_body(body)?;
    caller
        .execute(Command::PauseAgent {
            agent,
            minutes: request.minutes,
        })
        .await?;
    caller.agent(agent).map(Json)
}

/// `POST /v1/agents/{id}/pause_heartbeats` (the agent itself, or an operator): the agent's own
/// rest, `{"minutes": N}` clamped to 1..=60, 2 when absent. Answers with the agent.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/pause_heartbeats",
    tag = "agents",
    params(super::openapi::AgentPath),
    request_body(
        content = Option<PauseRequest>,
        description = "`{\"minutes\": N}`, clamped to 1..=60; 2 when absent"
    ),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The agent", body = Agent),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn pause_heartbeats(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Agent>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.agent(agent)?;
    let request: PauseRequest = optional_body(body)?;
    caller
        .execute(Command::PauseHeartbeats {
            agent,
            minutes: request.minutes,
        })
        .await?;
    caller.agent(agent).map(Json)
}

/// `POST /v1/agents/{id}/wakeup` (its operator, or the agent itself): the one wakeup entry
/// point; the answer says whether it queued, coalesced, was refused, or is a replay.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/wakeup",
    tag = "agents",
    params(super::openapi::AgentPath),
    request_body(content = WakeupRequest),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "Queued, coalesced, refused, or replayed", body = WakeAnswer),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn wakeup(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<WakeAnswer>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.agent(agent)?;
    let request: WakeupRequest = parse_json(body)?;
    let request = request.requested_by(caller.requested_by());
    let answer = caller
        .shell
        .wake(agent, request, crate::writer::WhenFull::Refuse)
        .await?;
    Ok(Json(WakeAnswer {
        wakeup: answer.wakeup,
        replayed: answer.replayed,
        seq: answer.seq,
    }))
}
