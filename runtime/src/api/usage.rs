//! An agent's conversation history and the tenant's model usage: what the agent loop keeps
//! between runs, and what it spends.

use axum::extract::Path;
use super::json::Json;
use serde::Serialize;

use super::auth::{parse_id, Caller};
use super::error::ApiError;
use crate::engine::agent::AgentId;
use crate::engine::daily_cap::LocalDay;
use crate::engine::history::HistoryMessage;
use crate::engine::tenant::TENANT_BUDGET_TIME_ZONE;
use crate::engine::usage::Usage;

/// `GET /v1/agents/{id}/history`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HistoryView {
    pub agent: AgentId,
    pub messages: Vec<HistoryMessage>,
    pub bytes: usize,
    /// SHA-256 of the history: equal before and after a ghost run.
    pub hash: String,
}

/// The agent's history (its operator, or the agent itself).
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/history",
    tag = "agents",
    params(super::openapi::AgentPath),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The agent's conversation history", body = HistoryView),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn history(caller: Caller, Path(id): Path<String>) -> Result<Json<HistoryView>, ApiError> {
    let id = AgentId(parse_id("id", &id)?);
    caller.agent(id)?;
    let engine = caller.shell.engine();
    let state = engine.agent_state(id).ok_or_else(|| ApiError::not_found("no such agent"))?;
    let history = state.history();
    Ok(Json(HistoryView {
        agent: id,
        messages: history.messages().cloned().collect(),
        bytes: history.bytes(),
        hash: history.hash(),
    }))
}

/// One agent's line of `GET /v1/usage`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentUsage {
    pub agent: AgentId,
    pub name: String,
    /// Usage on the agent's current local day (its time zone), and that day.
    pub today: Usage,
    pub day: LocalDay,
    pub total: Usage,
    /// The agent's daily budget in dollars, and what is left of it today.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_budget_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_left_usd: Option<f64>,
}

/// `GET /v1/usage`: the tenant's model usage, per agent and summed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantUsage {
    pub tenant: String,
    /// Sum of the agents' `today` (each on its own local day).
    pub today: Usage,
    pub total: Usage,
    /// The tenant's own daily budget (UTC days), its spend today and what is left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_budget_usd: Option<f64>,
    pub today_utc: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_left_usd: Option<f64>,
    pub agents: Vec<AgentUsage>,
}

/// The tenant's usage (operator only).
#[utoipa::path(
    get,
    path = "/v1/usage",
    operation_id = "tenant_usage",
    tag = "agents",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The tenant's model usage", body = TenantUsage),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn tenant(caller: Caller) -> Result<Json<TenantUsage>, ApiError> {
    let tenant = caller.operator()?;
    let engine = caller.shell.engine();
    let now_ms = caller.shell.clock().wall_now_ms();
    let record = engine
        .tenants()
        .find(|t| t.name == tenant)
        .ok_or_else(|| ApiError::not_found("no such tenant"))?;
    let utc_today = LocalDay::of(now_ms, TENANT_BUDGET_TIME_ZONE);
    let mut answer = TenantUsage {
        tenant: tenant.to_string(),
        today: Usage::default(),
        total: Usage::default(),
        daily_budget_usd: record.daily_budget_usd.map(|b| b.usd()),
        today_utc: record.day_spend.on(record.day_spend.day_for(utc_today)),
        budget_left_usd: record.budget_left(now_ms).map(|m| m as f64 / 1e6),
        agents: Vec::new(),
    };
    for agent in engine.agents().filter(|a| a.tenant == tenant) {
        let state = engine.agent_state(agent.id).expect("listed agents have state");
        let today = LocalDay::of(now_ms, &agent.spec.time_zone);
        let day = agent.day_spend.day_for(today);
        let line = AgentUsage {
            agent: agent.id,
            name: agent.name.clone(),
            today: agent.day_spend.on(day),
            day,
            total: agent.usage_total,
            daily_budget_usd: agent.spec.limits.daily_budget_usd.map(|b| b.usd()),
            budget_left_usd: state.budget_left(now_ms).map(|m| m as f64 / 1e6),
        };
        answer.today.add(&line.today);
        answer.total.add(&line.total);
        answer.agents.push(line);
    }
    Ok(Json(answer))
}
