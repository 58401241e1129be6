//! Pulses (`POST /v1/agents/{id}/pulse`, `POST /v1/pulses`) and user input
//! (`POST /v1/agents/{id}/input`): the signals of the Heart that come from outside.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::Path;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::agents::{optional_body, WakeAnswer};
use super::auth::{parse_id, Caller};
use super::body::parse_json;
use super::error::ApiError;
use crate::engine::agent::AgentId;
use crate::engine::liveness::{LivenessStatus, PULSE_BATCH_MAX};
use crate::engine::wakeup::{WakeupRequest, WakeupSource};

/// A single pulse takes no fields; an empty body or `{}` will do.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PulseRequest {}

/// The answer to a pulse: the agent's liveness after it.
#[derive(Debug, Serialize)]
pub struct PulseAnswer {
    pub agent: AgentId,
    pub liveness: LivenessStatus,
    /// The log head after the pulse (a pulse writes only when the agent comes online).
    pub seq: u64,
}

/// `POST /v1/agents/{id}/pulse`, by the agent itself or its tenant's operator.
pub async fn pulse(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PulseAnswer>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.with_agent(agent, |_| ())?;
    let PulseRequest {} = optional_body(body)?;
    caller.shell.pulse(&[agent])?;
    let liveness = caller.with_agent(agent, |a| a.liveness.status)?;
    Ok(Json(PulseAnswer {
        agent,
        liveness,
        seq: caller.shell.head_seq(),
    }))
}

/// A host's batch: the agents it runs that are alive.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub agents: Vec<u64>,
}

/// The answer to a batch.
#[derive(Debug, Serialize)]
pub struct BatchAnswer {
    /// Pulses taken (one per distinct agent).
    pub accepted: usize,
    /// Agents that came online with this batch.
    pub came_online: Vec<AgentId>,
    pub seq: u64,
}

/// `POST /v1/pulses` (operator only): `{"agents": [id, ...]}`, 1 to `PULSE_BATCH_MAX` agents of
/// the caller's tenant. All or nothing: one unknown or terminated agent refuses the batch and
/// names it.
pub async fn batch(
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<BatchAnswer>, ApiError> {
    caller.operator()?;
    let request: BatchRequest = parse_json(body)?;
    if request.agents.is_empty() || request.agents.len() > PULSE_BATCH_MAX {
        return Err(ApiError::invalid_field(
            "agents",
            format!(
                "agents must list 1 to {PULSE_BATCH_MAX} agent ids (got {})",
                request.agents.len()
            ),
        ));
    }
    let mut agents: Vec<AgentId> = request.agents.iter().map(|id| AgentId(*id)).collect();
    agents.sort();
    agents.dedup();
    let mut was_online = Vec::with_capacity(agents.len());
    for (i, id) in request.agents.iter().enumerate() {
        let named = |mut e: ApiError| {
            e.field = Some(format!("agents[{i}]"));
            e
        };
        let online = caller
            .with_agent(AgentId(*id), |a| a.liveness.status == LivenessStatus::Online)
            .map_err(named)?;
        was_online.push((AgentId(*id), online));
    }
    caller.shell.pulse(&agents).map_err(|error| {
        let mut e = ApiError::from(error);
        if e.field.is_none() {
            e.field = Some("agents".into());
        }
        e
    })?;
    was_online.sort();
    was_online.dedup();
    Ok(Json(BatchAnswer {
        accepted: agents.len(),
        came_online: was_online
            .into_iter()
            .filter(|(_, online)| !online)
            .map(|(agent, _)| agent)
            .collect(),
        seq: caller.shell.head_seq(),
    }))
}

/// User input for an agent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputRequest {
    /// What the user wrote; handed to the run as `payload.text`.
    pub text: String,
    #[serde(default)]
    pub task_key: Option<String>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// `POST /v1/agents/{id}/input`: records user input (the idle chamber counts again from now)
/// and wakes the agent on demand. Answers like a wakeup.
pub async fn input(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<WakeAnswer>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.agent(agent)?;
    let request: InputRequest = parse_json(body)?;
    let wake = WakeupRequest {
        source: WakeupSource::OnDemand,
        reason: "user input".into(),
        payload: serde_json::json!({ "text": request.text }),
        task_key: request.task_key,
        idempotency_key: request.idempotency_key,
    };
    // The text travels as the payload, so the payload's limit is the text's: name the field
    // the caller sent.
    let answer = caller.shell.input(agent, wake).map_err(|error| {
        let mut e = ApiError::from(error);
        if e.field.as_deref() == Some("payload") {
            e.field = Some("text".into());
            e.message = e.message.replace("payload", "text");
        }
        e
    })?;
    Ok(Json(WakeAnswer {
        wakeup: answer.wakeup,
        replayed: answer.replayed,
        seq: answer.seq,
    }))
}
