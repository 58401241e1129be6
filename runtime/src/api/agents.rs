//! `/v1/agents`: register agents and read their state.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;

use super::body::parse_json;
use super::error::ApiError;
use crate::engine::agent::{Agent, AgentId, AgentSpec};
use crate::engine::event::EventKind;
use crate::engine::Command;
use crate::shell::Shell;

/// Answer to a successful create: the agent and the seq of the event that recorded it.
#[derive(Debug, Serialize)]
pub struct Created {
    pub agent: Agent,
    pub seq: u64,
}

/// Answer to a list: the agents and the node's wall clock when it was read.
#[derive(Debug, Serialize)]
pub struct Listing {
    pub now_ms: u64,
    pub agents: Vec<Agent>,
}

pub async fn create(
    State(shell): State<Arc<Shell>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let spec: AgentSpec = parse_json(body)?;
    let events = shell.execute(Command::CreateAgent(spec))?;
    let event = events.first().expect("a create always records one event");
    let EventKind::AgentCreated { agent, .. } = &event.kind else {
        unreachable!("create recorded {:?}", event.kind);
    };
    let agent = shell
        .agent(*agent)
        .expect("agent exists after its creation was applied");
    Ok((
        StatusCode::CREATED,
        Json(Created {
            agent,
            seq: event.seq,
        }),
    ))
}

pub async fn list(State(shell): State<Arc<Shell>>) -> Json<Listing> {
    let (now_ms, agents) = shell.agents();
    Json(Listing { now_ms, agents })
}

pub async fn show(
    State(shell): State<Arc<Shell>>,
    Path(id): Path<String>,
) -> Result<Json<Agent>, ApiError> {
    let id: u64 = id.parse().map_err(|_| {
        ApiError::invalid_field("id", format!("agent id must be a number, got {id:?}"))
    })?;
    shell
        .agent(AgentId(id))
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no agent with id {id}")))
}
