//! `GET /v1/agents/{id}/timeline`: one agent's state changes since an instant, read from the
//! durable log.
//!
//! Pauses, liveness, the breaker and runs each leave events, so the log already is the agent's
//! timeline: this view seeks the log by time (a binary search, `Store::seq_before_ms`, so a
//! long log is not read from its start), then scans it as `/v1/events` does and keeps this
//! agent's changes. Nothing new is stored, and the timeline reaches as far back as the log does.
//! The log is read on the blocking pool, never on an async worker.

use axum::extract::{Path, RawQuery};
use super::json::Json;
use serde::Serialize;

use super::auth::{parse_id, Caller};
use super::error::ApiError;
use super::events::scan_visible;
use super::query::Query;
use crate::engine::agent::AgentId;
use crate::engine::event::{Event, EventKind};
use crate::engine::run::{RunId, RunStatus};
use crate::store::record::current::INSTANT_MS_MAX;
use crate::store::EVENTS_PAGE_MAX;

/// Timeline entries per page when `limit` is not given.
pub const TIMELINE_PAGE_DEFAULT: usize = 100;
/// Largest page of timeline entries (one log page).
pub const TIMELINE_PAGE_MAX: usize = EVENTS_PAGE_MAX;

/// Which change an entry is: the name of the event it was read from (docs/api.md, Events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimelineType {
    AgentPaused,
    AgentResumed,
    AgentOnline,
    AgentOffline,
    BreakerOpened,
    BreakerHalfOpened,
    BreakerClosed,
    BreakerReset,
    RunStarted,
    RunFinished,
}

/// One state change of the agent, with the fields of its event that the timeline draws.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TimelineEntry {
    /// The log position of its event: `GET /v1/events` has its whole payload.
    pub seq: u64,
    pub at_ms: u64,
    #[serde(rename = "type")]
    pub kind: TimelineType,
    /// `agent_paused`: the wall instant a timed pause ends on its own (absent: until resumed).
    /// `breaker_opened`: the end of its cooldown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// `agent_paused`: `operator` or `agent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// `breaker_opened`: the kind of failure that opened it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// `run_started`, `run_finished`: the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunId>,
    /// `run_finished`: how it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
}

/// A page of one agent's timeline.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TimelinePage {
    pub agent: AgentId,
    /// The instant asked for: every entry is at or after it.
    pub since_ms: u64,
    /// Oldest first.
    pub entries: Vec<TimelineEntry>,
    /// The log's head when the page was read.
    pub head_seq: u64,
    /// Where the next page starts: pass it back as `after` (with the same `since_ms`). The
    /// timeline is read up to the head once `next_after` ≥ `head_seq`.
    pub next_after: u64,
}

/// The query of `GET /v1/agents/{id}/timeline`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Why: describes the query only.
pub struct TimelineQuery {
    /// Required: the wall instant (Unix ms) the timeline starts at.
    since_ms: u64,
    /// Entries logged after this sequence number (the previous page's `next_after`).
    after: Option<u64>,
    /// Page size, 1 to `TIMELINE_PAGE_MAX` (default `TIMELINE_PAGE_DEFAULT`).
    limit: Option<u64>,
}

/// `GET /v1/agents/{id}/timeline?since_ms=&after=&limit=`: the agent's pauses and resumes,
/// online and offline changes, breaker changes and run starts and ends at or after `since_ms`,
/// oldest first.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/timeline",
    operation_id = "agent_timeline",
    tag = "history",
    params(super::openapi::AgentPath, TimelineQuery),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The agent's state changes since `since_ms`, oldest first",
            body = TimelinePage),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn show(
    caller: Caller,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<TimelinePage>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    let mut query = Query::parse(query.as_deref(), &["since_ms", "after", "limit"])?;
    let since_ms = query.number("since_ms")?.ok_or_else(|| {
        ApiError::invalid_field(
            "since_ms",
            "since_ms is required: a wall instant in Unix ms",
        )
    })?;
    if since_ms > INSTANT_MS_MAX {
        return Err(ApiError::invalid_field(
            "since_ms",
            format!("since_ms must be at most {INSTANT_MS_MAX} (the year 9999), got {since_ms}"),
        ));
    }
    let after = query.number("after")?;
    let limit = query.limit(TIMELINE_PAGE_DEFAULT, TIMELINE_PAGE_MAX)?;
    // 404 for an agent of another tenant (or none), 403 for another agent's token.
    caller.with_agent(agent, |_| ())?;
    // A blocking thread, as for backups (madsim marks it deprecated).
    #[allow(deprecated)]
    let read = tokio::task::spawn_blocking(move || {
        let page = read_page(&caller, agent, since_ms, after, limit);
        (caller, page)
    })
    .await;
    match read {
        Ok((_caller, page)) => page.map(Json),
        // Only a panic of the read (or the runtime stopping) ends the task early.
        Err(error) => Err(ApiError {
            status: axum::http::StatusCode::SERVICE_UNAVAILABLE,
            code: "storage_unavailable",
            message: format!("the log read did not complete ({error}); retry later"),
            field: None,
            retry_after_s: None,
        }),
    }
}

/// The page, read from the log (blocking).
fn read_page(
    caller: &Caller,
    agent: AgentId,
    since_ms: u64,
    after: Option<u64>,
    limit: usize,
) -> Result<TimelinePage, ApiError> {
    let from = caller.shell.seq_before_ms(since_ms)?;
    let start = after.map_or(from, |after| after.max(from));
    let (entries, next_after, head_seq) = scan_visible(caller, start, limit, |event| {
        (event.at_ms >= since_ms)
            .then(|| entry_of(agent, event))
            .flatten()
    })?;
    Ok(TimelinePage {
        agent,
        since_ms,
        entries,
        head_seq,
        next_after,
    })
}

/// The timeline's entry for `event` if it is a state change of `agent`.
fn entry_of(agent: AgentId, event: Event) -> Option<TimelineEntry> {
    if event.kind.agent() != Some(agent) {
        return None;
    }
    let mut entry = TimelineEntry {
        seq: event.seq,
        at_ms: event.at_ms,
        kind: TimelineType::AgentResumed,
        until_ms: None,
        by: None,
        trigger: None,
        run: None,
        status: None,
    };
    entry.kind = match event.kind {
        EventKind::AgentPaused { until_ms, by, .. } => {
            entry.until_ms = until_ms;
            entry.by = wire_name(&by);
            TimelineType::AgentPaused
        }
        EventKind::AgentResumed { .. } => TimelineType::AgentResumed,
        EventKind::AgentOnline { .. } => TimelineType::AgentOnline,
        EventKind::AgentOffline { .. } => TimelineType::AgentOffline,
        EventKind::BreakerOpened {
            trigger, until_ms, ..
        } => {
            entry.until_ms = Some(until_ms);
            entry.trigger = wire_name(&trigger);
            TimelineType::BreakerOpened
        }
        EventKind::BreakerHalfOpened { .. } => TimelineType::BreakerHalfOpened,
        EventKind::BreakerClosed { .. } => TimelineType::BreakerClosed,
        EventKind::BreakerReset { .. } => TimelineType::BreakerReset,
        EventKind::RunStarted { run, .. } => {
            entry.run = Some(run);
            TimelineType::RunStarted
        }
        EventKind::RunFinished { run, status, .. } => {
            entry.run = Some(run);
            entry.status = Some(status);
            TimelineType::RunFinished
        }
        _ => return None,
    };
    Some(entry)
}

/// A unit enum's name on the wire, as its event carries it.
fn wire_name(value: &impl Serialize) -> Option<String> {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
}
