//! `/v1/runs`: list and read runs, read a run's transcript, cancel one.

use axum::extract::{Path, RawQuery};
use super::json::Json;
use serde::Serialize;

use super::auth::{parse_id, Caller};
use super::error::ApiError;
use super::query::Query;
use crate::engine::agent::AgentId;
use crate::engine::run::{Run, RunId, RunStatus};
use crate::engine::tenant::Principal;
use crate::engine::Command;
use crate::transcript::TranscriptEntry;

/// Page size of a run list when `limit` is not given.
pub const RUNS_PAGE_DEFAULT: usize = 100;
/// Largest page of a run list.
pub const RUNS_PAGE_MAX: usize = 1_000;

/// Transcript entries per page of `GET /v1/runs/{id}/log` when `limit` is not given.
pub const RUN_LOG_PAGE_DEFAULT: usize = 100;
/// Largest page of a run's transcript.
pub const RUN_LOG_PAGE_MAX: usize = 1_000;

/// A page of a run's transcript.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LogPage {
    pub run: RunId,
    pub entries: Vec<TranscriptEntry>,
    /// Where the next page starts: pass it back as `offset`.
    pub next_offset: u64,
    /// Nothing will ever follow `next_offset`: the transcript is finished (or the run is over)
    /// and this page reaches its end. A follower stops here.
    pub complete: bool,
}

/// The query of `GET /v1/runs` (the handler parses it with `Query`, refusing any other key).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Why: describes the query only.
pub struct RunsQuery {
    /// Only this agent's runs (an agent token: its own only).
    agent: Option<u64>,
    /// Only runs in this status.
    status: Option<RunStatus>,
    /// Page size, 1 to `RUNS_PAGE_MAX` (default `RUNS_PAGE_DEFAULT`).
    limit: Option<u64>,
}

/// The query of `GET /v1/runs/{id}/log`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Why: describes the query only.
pub struct LogQuery {
    /// The first entry to read (the previous page's `next_offset`); 0 when absent.
    offset: Option<u64>,
    /// Page size, 1 to `RUN_LOG_PAGE_MAX` (default `RUN_LOG_PAGE_DEFAULT`).
    limit: Option<u64>,
}

/// A list of runs, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = RunList)]
pub struct Listing {
    pub runs: Vec<Run>,
}

/// `GET /v1/runs?agent=&status=&limit=`: the caller's runs held in memory, newest first.
#[utoipa::path(
    get,
    path = "/v1/runs",
    operation_id = "list_runs",
    tag = "runs",
    params(RunsQuery),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The caller's runs, newest first", body = Listing),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn list(caller: Caller, RawQuery(query): RawQuery) -> Result<Json<Listing>, ApiError> {
    let mut query = Query::parse(query.as_deref(), &["agent", "status", "limit"])?;
    let agent = query.number("agent")?.map(AgentId);
    let status = match query.take("status") {
        None => None,
        Some(raw) => Some(parse_status(&raw)?),
    };
    let limit = query.limit(RUNS_PAGE_DEFAULT, RUNS_PAGE_MAX)?;
    // An agent token sees its own runs only, whatever it asks for.
    let agent = match (&caller.principal, agent) {
        (Principal::Agent { agent: own, .. }, Some(asked)) if asked != *own => {
            return Err(ApiError::forbidden(format!(
                "an agent token reads only its own runs (agent {own})"
            )))
        }
        (Principal::Agent { agent: own, .. }, _) => Some(*own),
        (Principal::Operator { .. }, asked) => asked,
    };
    if let Some(agent) = agent {
        caller.agent(agent)?;
    }
    let engine = caller.shell.engine();
    let wanted = |run: &&Run| status.is_none_or(|st| st == run.status);
    let runs: Vec<Run> = match agent {
        // One agent (already checked visible): its runs, oldest first as it holds them.
        Some(agent) => {
            let held: Vec<&Run> = engine
                .agent_state(agent)
                .into_iter()
                .flat_map(|state| state.runs())
                .filter(wanted)
                .collect();
            held.into_iter().rev().take(limit).cloned().collect()
        }
        // The tenant's latest runs from the node's run index, never a scan of every agent.
        None => {
            let tenant = caller.principal.tenant();
            engine
                .runs_newest_first()
                .filter(wanted)
                .filter(|run| engine.agent(run.agent).is_some_and(|a| a.tenant == tenant))
                .take(limit)
                .cloned()
                .collect()
        }
    };
    Ok(Json(Listing { runs }))
}

/// `GET /v1/runs/{id}`.
#[utoipa::path(
    get,
    path = "/v1/runs/{id}",
    operation_id = "show_run",
    tag = "runs",
    params(super::openapi::RunPath),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The run", body = Run),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn show(caller: Caller, Path(id): Path<String>) -> Result<Json<Run>, ApiError> {
    let run = RunId(parse_id("id", &id)?);
    visible_run(&caller, run).map(Json)
}

/// `GET /v1/runs/{id}/log?offset=&limit=`: a page of the run's transcript. Visible to whoever
/// may read the run.
#[utoipa::path(
    get,
    path = "/v1/runs/{id}/log",
    tag = "runs",
    params(super::openapi::RunPath, LogQuery),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "A page of the run's transcript", body = LogPage),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn log(
    caller: Caller,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<LogPage>, ApiError> {
    let run = RunId(parse_id("id", &id)?);
    let mut query = Query::parse(query.as_deref(), &["offset", "limit"])?;
    let offset = query.number("offset")?.unwrap_or(0);
    let limit = query.limit(RUN_LOG_PAGE_DEFAULT, RUN_LOG_PAGE_MAX)?;
    let found = visible_run(&caller, run)?;
    let page = caller
        .transcripts
        .read(found.agent, run, offset, limit)
        .await?;
    // A run that is over gets no more entries, even when its writer never finished the
    // transcript (a cancelled or timed-out run's task is aborted).
    let at_end = page.next_offset >= page.total;
    Ok(Json(LogPage {
        run,
        complete: page.complete || (found.status.is_terminal() && at_end),
        entries: page.entries,
        next_offset: page.next_offset,
    }))
}

/// `POST /v1/runs/{id}/cancel` (operator only): answers with the run as it ended.
#[utoipa::path(
    post,
    path = "/v1/runs/{id}/cancel",
    tag = "runs",
    params(super::openapi::RunPath),
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The run as it ended", body = Run),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn cancel(caller: Caller, Path(id): Path<String>) -> Result<Json<Run>, ApiError> {
    let run = RunId(parse_id("id", &id)?);
    caller.operator()?;
    visible_run(&caller, run)?;
    caller.execute(Command::CancelRun { run }).await?;
    visible_run(&caller, run).map(Json)
}

fn visible_run(caller: &Caller, run: RunId) -> Result<Run, ApiError> {
    let found = caller.shell.engine().run(run).cloned();
    let found = found.ok_or_else(|| ApiError::not_found(format!("no run with id {run}")))?;
    // Another tenant's run is "not found"; another agent's run is forbidden to an agent token.
    caller.agent(found.agent).map_err(|e| {
        if e.code == "not_found" {
            ApiError::not_found(format!("no run with id {run}"))
        } else {
            e
        }
    })?;
    Ok(found)
}

fn parse_status(raw: &str) -> Result<RunStatus, ApiError> {
    serde_json::from_value(serde_json::Value::String(raw.to_string())).map_err(|_| {
        ApiError::invalid_field(
            "status",
            format!("status must be one of queued, running, succeeded, failed, cancelled, timed_out; got {}", crate::engine::spec_error::echo(raw)),
        )
    })
}
