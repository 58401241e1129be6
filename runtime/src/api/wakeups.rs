//! `GET /v1/wakeups`: the wakeup history, read from the durable log.
//!
//! Every wakeup leaves one event (`wakeup_queued`, `wakeup_coalesced` or `wakeup_refused`), so
//! the log already is the history: this view filters it and adds what became of each wakeup's
//! run, looked up in the engine when the page is read. Nothing new is stored, and the history
//! reaches as far back as the log does.

use axum::extract::RawQuery;
use super::json::Json;
use serde::Serialize;

use super::auth::Caller;
use super::error::ApiError;
use super::events::scan_visible;
use super::query::Query;
use crate::engine::agent::AgentId;
use crate::engine::event::{Event, EventKind};
use crate::engine::run::{ErrorClass, RunId, RunStatus, StopReason};
use crate::engine::spec_error::echo;
use crate::engine::tenant::Principal;
use crate::engine::wakeup::{RefusalReason, RequestedBy, WakeupId, WakeupSource};
use crate::engine::Engine;
use crate::store::EVENTS_PAGE_MAX;

/// Wakeups per page when `limit` is not given.
pub const WAKEUPS_PAGE_DEFAULT: usize = 100;
/// Largest page of wakeups (one log page).
pub const WAKEUPS_PAGE_MAX: usize = EVENTS_PAGE_MAX;

/// Where a wakeup stands now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WakeupStatus {
    /// Refused; nothing was queued (`refusal` says why).
    Refused,
    /// It queued its own run, which has not started.
    Queued,
    /// It joined a run another wakeup queued, which has not started.
    Coalesced,
    /// Its run is running.
    Started,
    /// Its run is over (`run_status` says how, while the node still holds the run).
    Finished,
}

impl WakeupStatus {
    const ALL: [WakeupStatus; 5] = [
        WakeupStatus::Refused,
        WakeupStatus::Queued,
        WakeupStatus::Coalesced,
        WakeupStatus::Started,
        WakeupStatus::Finished,
    ];

    fn as_str(self) -> &'static str {
        match self {
            WakeupStatus::Refused => "refused",
            WakeupStatus::Queued => "queued",
            WakeupStatus::Coalesced => "coalesced",
            WakeupStatus::Started => "started",
            WakeupStatus::Finished => "finished",
        }
    }
}

/// One wakeup as the history shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WakeupView {
    /// The log position of its event: `GET /v1/events` has its payload.
    pub seq: u64,
    pub at_ms: u64,
    pub wakeup: WakeupId,
    pub agent: AgentId,
    pub source: WakeupSource,
    /// Who asked (absent for wakeups logged before it was recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<RequestedBy>,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_detail: Option<serde_json::Value>,
    pub status: WakeupStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<RefusalReason>,
    /// The run it queued or joined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_status: Option<RunStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_class: Option<ErrorClass>,
}

/// A page of the wakeup history.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WakeupPage {
    pub wakeups: Vec<WakeupView>,
    /// The log's head when the page was read.
    pub head_seq: u64,
    /// Where the next page starts: pass it back as `after`.
    pub next_after: u64,
}

/// The query of `GET /v1/wakeups`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Why: describes the query only.
pub struct WakeupsQuery {
    /// Only this agent's wakeups (an agent token: its own only).
    agent: Option<u64>,
    source: Option<WakeupSource>,
    status: Option<WakeupStatus>,
    requested_by: Option<RequestedBy>,
    /// Wakeups logged after this sequence number (the previous page's `next_after`).
    after: Option<u64>,
    /// Page size, 1 to `WAKEUPS_PAGE_MAX` (default `WAKEUPS_PAGE_DEFAULT`).
    limit: Option<u64>,
}

/// What the caller asked to see.
#[derive(Debug, Default)]
struct Filter {
    agent: Option<AgentId>,
    source: Option<WakeupSource>,
    status: Option<WakeupStatus>,
    requested_by: Option<RequestedBy>,
}

impl Filter {
    fn keeps(&self, view: &WakeupView) -> bool {
        self.agent.is_none_or(|a| a == view.agent)
            && self.source.is_none_or(|s| s == view.source)
            && self.status.is_none_or(|s| s == view.status)
            && self
                .requested_by
                .is_none_or(|r| Some(r) == view.requested_by)
    }
}

/// `GET /v1/wakeups?agent=&source=&status=&requested_by=&after=&limit=`: the caller's
/// wakeups after log position `after`, oldest first.
#[utoipa::path(
    get,
    path = "/v1/wakeups",
    operation_id = "list_wakeups",
    tag = "history",
    params(WakeupsQuery),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The caller's wakeups, oldest first", body = WakeupPage),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn list(caller: Caller, RawQuery(query): RawQuery) -> Result<Json<WakeupPage>, ApiError> {
    let mut query = Query::parse(
        query.as_deref(),
        &[
            "agent",
            "source",
            "status",
            "requested_by",
            "after",
            "limit",
        ],
    )?;
    let filter = Filter {
        agent: own_agent(&caller, query.number("agent")?.map(AgentId))?,
        source: parse_named(query.take("source"), "source", &WakeupSource::all(), |s| {
            s.as_str()
        })?,
        status: parse_named(query.take("status"), "status", &WakeupStatus::ALL, |s| {
            s.as_str()
        })?,
        requested_by: parse_named(
            query.take("requested_by"),
            "requested_by",
            &RequestedBy::ALL,
            |r| r.as_str(),
        )?,
    };
    let after = query.number("after")?.unwrap_or(0);
    let limit = match query.number("limit")? {
        None => WAKEUPS_PAGE_DEFAULT,
        Some(l) => usize::try_from(l)
            .ok()
            .filter(|l| (1..=WAKEUPS_PAGE_MAX).contains(l))
            .ok_or_else(|| {
                ApiError::invalid_field(
                    "limit",
                    format!("limit must be between 1 and {WAKEUPS_PAGE_MAX}, got {l}"),
                )
            })?,
    };
    if let Some(agent) = filter.agent {
        caller.agent(agent)?;
    }
    let (wakeups, next_after, head_seq) = scan_visible(&caller, after, limit, |event| {
        let view = view_of(&caller.shell.engine(), event)?;
        filter.keeps(&view).then_some(view)
    })?;
    Ok(Json(WakeupPage {
        wakeups,
        head_seq,
        next_after,
    }))
}

/// The agent filter as it applies to the caller: an agent token sees only itself.
fn own_agent(caller: &Caller, asked: Option<AgentId>) -> Result<Option<AgentId>, ApiError> {
    match (&caller.principal, asked) {
        (Principal::Agent { agent: own, .. }, Some(asked)) if asked != *own => {
            Err(ApiError::forbidden(format!(
                "an agent token reads only its own wakeups (agent {own})"
            )))
        }
        (Principal::Agent { agent: own, .. }, _) => Ok(Some(*own)),
        (Principal::Operator { .. }, asked) => Ok(asked),
    }
}

/// `raw` as one of `values` by wire name, the error naming `field` and the accepted names.
fn parse_named<T: Copy>(
    raw: Option<String>,
    field: &str,
    values: &[T],
    name: impl Fn(T) -> &'static str,
) -> Result<Option<T>, ApiError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    values
        .iter()
        .copied()
        .find(|v| name(*v) == raw)
        .map(Some)
        .ok_or_else(|| {
            let names: Vec<&str> = values.iter().map(|v| name(*v)).collect();
            ApiError::invalid_field(
                field,
                format!(
                    "unknown {field} {}; one of: {}",
                    echo(&raw),
                    names.join(", ")
                ),
            )
        })
}

/// The history's view of a wakeup event, with its run as the engine holds it now; `None` for
/// any other event.
fn view_of(engine: &Engine, event: Event) -> Option<WakeupView> {
    let mut view = match event.kind {
        EventKind::WakeupQueued {
            wakeup,
            agent,
            source,
            requested_by,
            trigger_detail,
            reason,
            task_key,
            idempotency_key,
            run,
            ..
        } => WakeupView {
            task_key,
            run: Some(run),
            status: WakeupStatus::Queued,
            ..WakeupView::new(event.seq, event.at_ms, wakeup, agent, source, reason).asked(
                requested_by,
                idempotency_key,
                trigger_detail,
            )
        },
        EventKind::WakeupCoalesced {
            wakeup,
            agent,
            source,
            requested_by,
            trigger_detail,
            reason,
            idempotency_key,
            run,
            ..
        } => WakeupView {
            run: Some(run),
            status: WakeupStatus::Coalesced,
            ..WakeupView::new(event.seq, event.at_ms, wakeup, agent, source, reason).asked(
                requested_by,
                idempotency_key,
                trigger_detail,
            )
        },
        EventKind::WakeupRefused {
            wakeup,
            agent,
            source,
            requested_by,
            trigger_detail,
            reason,
            task_key,
            idempotency_key,
            refusal,
        } => WakeupView {
            task_key,
            refusal: Some(refusal),
            ..WakeupView::new(event.seq, event.at_ms, wakeup, agent, source, reason).asked(
                requested_by,
                idempotency_key,
                trigger_detail,
            )
        },
        _ => return None,
    };
    if let Some(run) = view.run {
        view.follow_run(engine, run);
    }
    Some(view)
}

impl WakeupView {
    /// A refused wakeup with these facts; the callers fill in the rest.
    fn new(
        seq: u64,
        at_ms: u64,
        wakeup: WakeupId,
        agent: AgentId,
        source: WakeupSource,
        reason: String,
    ) -> Self {
        WakeupView {
            seq,
            at_ms,
            wakeup,
            agent,
            source,
            requested_by: None,
            reason,
            task_key: None,
            idempotency_key: None,
            trigger_detail: None,
            status: WakeupStatus::Refused,
            refusal: None,
            run: None,
            run_status: None,
            stop_reason: None,
            error_class: None,
        }
    }

    fn asked(
        mut self,
        requested_by: Option<RequestedBy>,
        idempotency_key: Option<String>,
        trigger_detail: Option<serde_json::Value>,
    ) -> Self {
        self.requested_by = requested_by;
        self.idempotency_key = idempotency_key;
        self.trigger_detail = trigger_detail;
        self
    }

    /// Takes the status of `run` as the engine holds it. A run the engine no longer holds was
    /// finished and evicted (the node keeps a bounded number of finished runs): `finished`,
    /// without its outcome.
    fn follow_run(&mut self, engine: &Engine, run: RunId) {
        let Some(found) = engine.run(run) else {
            self.status = WakeupStatus::Finished;
            return;
        };
        if self.task_key.is_none() {
            self.task_key = found.task_key.clone();
        }
        self.run_status = Some(found.status);
        self.status = match found.status {
            RunStatus::Queued => self.status,
            RunStatus::Running => WakeupStatus::Started,
            _ => WakeupStatus::Finished,
        };
        self.stop_reason = found.stop_reason;
        self.error_class = found.error_class;
    }
}
