//! `/v1/agents/{id}/sessions`: the coding-CLI session of each of an agent's tasks, and the
//! operator's reset of one (the next run on that task starts a fresh session).

use axum::extract::Path;
use super::json::Json;
use serde::Serialize;

use super::auth::{parse_id, Caller};
use super::error::ApiError;
use crate::engine::agent::AgentId;
use crate::engine::session::TaskSession;
use crate::engine::spec_error::echo;
use crate::engine::wakeup::KEY_CHARS_MAX;
use crate::engine::Command;

/// `GET /v1/agents/{id}/sessions`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionList {
    pub agent: AgentId,
    /// By task key.
    pub sessions: Vec<TaskSession>,
}

/// `POST /v1/agents/{id}/sessions/{task_key}/reset`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionReset {
    pub agent: AgentId,
    pub task_key: String,
    /// Whether the task had a session (false: nothing to forget, nothing recorded).
    pub reset: bool,
}

/// The agent's task sessions (its operator, or the agent itself).
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/sessions",
    operation_id = "list_sessions",
    tag = "agents",
    params(super::openapi::AgentPath),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The agent's task sessions", body = SessionList),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn list(caller: Caller, Path(id): Path<String>) -> Result<Json<SessionList>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.agent(agent)?;
    let engine = caller.shell.engine();
    let state = engine
        .agent_state(agent)
        .ok_or_else(|| ApiError::not_found(format!("no agent with id {agent}")))?;
    Ok(Json(SessionList {
        agent,
        sessions: state.sessions().iter().cloned().collect(),
    }))
}

/// Forgets the session of one task (operator only).
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/sessions/{task_key}/reset",
    operation_id = "reset_session",
    tag = "agents",
    params(super::openapi::SessionPath),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "Whether there was a session to forget", body = SessionReset),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn reset(
    caller: Caller,
    Path((id, task_key)): Path<(String, String)>,
) -> Result<Json<SessionReset>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    if task_key.is_empty() || task_key.chars().count() > KEY_CHARS_MAX {
        return Err(ApiError::invalid_field(
            "task_key",
            format!(
                "task_key must be 1 to {KEY_CHARS_MAX} characters, got {}",
                echo(&task_key)
            ),
        ));
    }
    caller.operated_agent(agent)?;
    let decision = caller
        .execute(Command::ResetSession {
            agent,
            task_key: task_key.clone(),
        })
        .await?;
    Ok(Json(SessionReset {
        agent,
        task_key,
        reset: !decision.events.is_empty(),
    }))
}
