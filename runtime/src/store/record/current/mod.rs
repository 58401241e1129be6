//! The event log's records in the current storage format (3), which reads formats 1 and 2 too:
//! format 2 only added `agent_token_rotated`, format 3 `agent_updated`, `agent_deleted` and
//! `operator_token_set`'s `by` (absent: `configuration`, the only source before format 3).
//!
//! Snapshots (format 4) store one agent's whole state and one tenant as [`snapshot`]'s records.
//!
//! The JSON of a record is exactly what the log held before the format was recorded (the
//! engine's own encoding of that time), so a database from then reads as format 1.

pub mod heartbeat;
pub mod manifest;
pub mod read;
pub mod snapshot;
#[cfg(test)]
mod snapshot_tests;
pub mod spec;
pub mod values;

use serde::{Deserialize, Serialize};

use self::values::{
    micro_usd_of, usd_of, AgentErrorReason, ErrorClass, FailureCause, PausedBy, PulseReport,
    RefusalReason, RequestedBy, RunReport, RunStatus, StopReason, TokenSetBy, Usage,
    WakeupSource,
};
use crate::engine::agent::AgentId;
use crate::engine::daily_cap::LocalDay;
use crate::engine::event::{Event, EventKind};
use crate::engine::run::RunId;
use crate::engine::tenant::TokenHash;
use crate::engine::wakeup::WakeupId;

/// Latest wall instant a record may hold, in Unix ms: 9999-12-30T22:00:00Z, the last instant the
/// calendar library (jiff) represents, so that a local day exists for it in every time zone. A
/// later one is refused when the record is read, rather than panicking wherever it is first
/// shown or counted.
pub const INSTANT_MS_MAX: u64 = 253_402_207_200_000;

/// One stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub seq: u64,
    pub at_ms: u64,
    pub tenant: String,
    #[serde(flatten)]
    pub kind: KindRecord,
}

/// What a stored event says happened; one variant per event type, named as on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum KindRecord {
    TenantCreated {
        operator_token_hash: String,
    },
    OperatorTokenSet {
        operator_token_hash: String,
        /// Format 3; absent before, when configuration was the only source, and still absent for
        /// that source (so older records re-encode to their own bytes).
        #[serde(default = "pinned_token_set_by", skip_serializing_if = "by_configuration")]
        by: TokenSetBy,
    },
    AgentCreated {
        agent: u64,
        name: String,
        spec: Box<spec::AgentSpec>,
        token_hash: String,
        first_fire_at_ms: Option<u64>,
    },
    AgentPaused {
        agent: u64,
        until_ms: Option<u64>,
        by: PausedBy,
    },
    AgentResumed {
        agent: u64,
    },
    AgentTerminated {
        agent: u64,
    },
    TimerFired {
        agent: u64,
        due_at_ms: u64,
        missed_slots: u64,
        next_fire_at_ms: u64,
    },
    WakeupQueued {
        wakeup: u64,
        agent: u64,
        source: WakeupSource,
        reason: String,
        payload: serde_json::Value,
        task_key: Option<String>,
        idempotency_key: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<RequestedBy>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger_detail: Option<serde_json::Value>,
        run: u64,
    },
    WakeupCoalesced {
        wakeup: u64,
        agent: u64,
        source: WakeupSource,
        reason: String,
        payload: serde_json::Value,
        idempotency_key: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<RequestedBy>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger_detail: Option<serde_json::Value>,
        run: u64,
        coalesced_count: u64,
    },
    WakeupRefused {
        wakeup: u64,
        agent: u64,
        source: WakeupSource,
        reason: String,
        task_key: Option<String>,
        idempotency_key: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<RequestedBy>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger_detail: Option<serde_json::Value>,
        refusal: RefusalReason,
    },
    RunRequeued {
        run: u64,
        agent: u64,
        retry_of: u64,
        coalesced: bool,
    },
    RunStarted {
        run: u64,
        agent: u64,
        run_number: u64,
        day: i32,
    },
    RunFinished {
        run: u64,
        agent: u64,
        status: RunStatus,
        detail: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<FailureCause>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<Box<RunReport>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_class: Option<ErrorClass>,
    },
    RunProcessStarted {
        run: u64,
        agent: u64,
        pgid: u32,
    },
    SessionReset {
        agent: u64,
        task_key: String,
    },
    TenantBudgetSet {
        /// Dollars, as format 1 writes money.
        #[serde(default)]
        daily_budget_usd: Option<f64>,
    },
    UsageRecorded {
        run: u64,
        agent: u64,
        call: u64,
        usage: Usage,
        day: i32,
    },
    BreakerOpened {
        agent: u64,
        trigger: FailureCause,
        until_ms: u64,
        cooldown_ms: u64,
    },
    BreakerHalfOpened {
        agent: u64,
    },
    BreakerClosed {
        agent: u64,
    },
    BreakerReset {
        agent: u64,
    },
    AgentErrored {
        agent: u64,
        reason: AgentErrorReason,
        count: u32,
    },
    AgentErrorReset {
        agent: u64,
    },
    AgentOnline {
        agent: u64,
        #[serde(default, skip_serializing_if = "PulseReport::is_empty")]
        report: PulseReport,
    },
    AgentOffline {
        agent: u64,
        silent_ms: u64,
        #[serde(default, skip_serializing_if = "PulseReport::is_empty")]
        report: PulseReport,
    },
    InputReceived {
        agent: u64,
        next_idle_at_ms: Option<u64>,
    },
    IdleFired {
        agent: u64,
        next_idle_at_ms: u64,
    },
    /// Format 2.
    AgentTokenRotated {
        agent: u64,
        token_hash: String,
    },
    AgentUpdated {
        agent: u64,
        spec: Box<spec::AgentSpec>,
        changed: Vec<String>,
        first_fire_at_ms: Option<u64>,
    },
    AgentDeleted {
        agent: u64,
        name: String,
    },
    /// Format 5: predicate heartbeats (`heartbeat.rs`).
    HeartbeatCreated {
        agent: u64,
        heartbeat: String,
        spec: Box<heartbeat::HeartbeatSpecRecord>,
    },
    HeartbeatDeleted {
        agent: u64,
        heartbeat: String,
    },
    HeartbeatStateChanged {
        agent: u64,
        heartbeat: String,
        from: Option<String>,
        to: String,
    },
    HeartbeatEmissionPaused {
        agent: u64,
        heartbeat: String,
        pending: u64,
    },
}

/// What an `operator_token_set` without `by` (formats 1 and 2) meant: set from configuration.
fn pinned_token_set_by() -> TokenSetBy {
    TokenSetBy::Configuration
}

fn by_configuration(by: &TokenSetBy) -> bool {
    *by == TokenSetBy::Configuration
}

impl KindRecord {
    /// The event type's wire name.
    pub fn type_name(&self) -> &'static str {
        match self {
            KindRecord::TenantCreated { .. } => "tenant_created",
            KindRecord::OperatorTokenSet { .. } => "operator_token_set",
            KindRecord::TenantBudgetSet { .. } => "tenant_budget_set",
            KindRecord::AgentCreated { .. } => "agent_created",
            KindRecord::AgentPaused { .. } => "agent_paused",
            KindRecord::AgentResumed { .. } => "agent_resumed",
            KindRecord::AgentTerminated { .. } => "agent_terminated",
            KindRecord::TimerFired { .. } => "timer_fired",
            KindRecord::WakeupQueued { .. } => "wakeup_queued",
            KindRecord::WakeupCoalesced { .. } => "wakeup_coalesced",
            KindRecord::WakeupRefused { .. } => "wakeup_refused",
            KindRecord::RunRequeued { .. } => "run_requeued",
            KindRecord::RunStarted { .. } => "run_started",
            KindRecord::RunFinished { .. } => "run_finished",
            KindRecord::RunProcessStarted { .. } => "run_process_started",
            KindRecord::SessionReset { .. } => "session_reset",
            KindRecord::UsageRecorded { .. } => "usage_recorded",
            KindRecord::BreakerOpened { .. } => "breaker_opened",
            KindRecord::BreakerHalfOpened { .. } => "breaker_half_opened",
            KindRecord::BreakerClosed { .. } => "breaker_closed",
            KindRecord::BreakerReset { .. } => "breaker_reset",
            KindRecord::AgentErrored { .. } => "agent_errored",
            KindRecord::AgentErrorReset { .. } => "agent_error_reset",
            KindRecord::AgentOnline { .. } => "agent_online",
            KindRecord::AgentOffline { .. } => "agent_offline",
            KindRecord::InputReceived { .. } => "input_received",
            KindRecord::IdleFired { .. } => "idle_fired",
            KindRecord::AgentTokenRotated { .. } => "agent_token_rotated",
            KindRecord::AgentUpdated { .. } => "agent_updated",
            KindRecord::AgentDeleted { .. } => "agent_deleted",
            KindRecord::HeartbeatCreated { .. } => "heartbeat_created",
            KindRecord::HeartbeatDeleted { .. } => "heartbeat_deleted",
            KindRecord::HeartbeatStateChanged { .. } => "heartbeat_state_changed",
            KindRecord::HeartbeatEmissionPaused { .. } => "heartbeat_emission_paused",
        }
    }
}

/// Why a stored record cannot become an engine event: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: String,
    pub message: String,
}

impl Problem {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            field: field.into(),
            message: message.into(),
        }
    }
}

fn instant(field: &str, ms: u64) -> Result<u64, Problem> {
    if ms > INSTANT_MS_MAX {
        return Err(Problem::new(
            field,
            format!("instant {ms} ms is past 9999-12-30T22:00:00Z, the last one Vigil can show"),
        ));
    }
    Ok(ms)
}

/// The token hash a record holds as hex.
pub(crate) fn token_hash(field: &str, hex: &str) -> Result<TokenHash, Problem> {
    TokenHash::from_hex(hex).ok_or_else(|| {
        Problem::new(
            field,
            "a token hash is 64 lowercase hex characters (SHA-256 of the token)",
        )
    })
}

fn optional_instant(field: &str, ms: Option<u64>) -> Result<Option<u64>, Problem> {
    ms.map(|ms| instant(field, ms)).transpose()
}

impl From<&Event> for EventRecord {
    fn from(event: &Event) -> Self {
        EventRecord {
            seq: event.seq,
            at_ms: event.at_ms,
            tenant: event.tenant.clone(),
            kind: KindRecord::from(&event.kind),
        }
    }
}

impl EventRecord {
    /// The engine's event, or the first field that cannot be one.
    pub fn into_engine(self) -> Result<Event, Problem> {
        Ok(Event {
            seq: self.seq,
            at_ms: instant("at_ms", self.at_ms)?,
            tenant: self.tenant,
            kind: self.kind.into_engine()?,
        })
    }
}

impl From<&EventKind> for KindRecord {
    fn from(kind: &EventKind) -> Self {
        match kind {
            EventKind::TenantCreated { .. }
            | EventKind::OperatorTokenSet { .. }
            | EventKind::TenantBudgetSet { .. } => tenant_record(kind),
            EventKind::AgentCreated { .. }
            | EventKind::AgentPaused { .. }
            | EventKind::AgentResumed { .. }
            | EventKind::AgentTerminated { .. }
            | EventKind::TimerFired { .. }
            | EventKind::SessionReset { .. }
            | EventKind::InputReceived { .. }
            | EventKind::IdleFired { .. }
            | EventKind::AgentTokenRotated { .. }
            | EventKind::AgentUpdated { .. }
            | EventKind::AgentDeleted { .. } => agent_record(kind),
            EventKind::HeartbeatCreated { .. }
            | EventKind::HeartbeatDeleted { .. }
            | EventKind::HeartbeatStateChanged { .. }
            | EventKind::HeartbeatEmissionPaused { .. } => heartbeat::heartbeat_record(kind),
            EventKind::RunRequeued { .. }
            | EventKind::RunStarted { .. }
            | EventKind::RunFinished { .. }
            | EventKind::RunProcessStarted { .. }
            | EventKind::UsageRecorded { .. } => run_record(kind),
            EventKind::BreakerOpened { .. }
            | EventKind::BreakerHalfOpened { .. }
            | EventKind::BreakerClosed { .. }
            | EventKind::BreakerReset { .. }
            | EventKind::AgentErrored { .. }
            | EventKind::AgentErrorReset { .. }
            | EventKind::AgentOnline { .. }
            | EventKind::AgentOffline { .. } => health_record(kind),
            EventKind::WakeupQueued { .. }
            | EventKind::WakeupCoalesced { .. }
            | EventKind::WakeupRefused { .. } => wakeup_record(kind),
        }
    }
}

/// Tenant facts.
fn tenant_record(kind: &EventKind) -> KindRecord {
    match kind {
        EventKind::TenantCreated {
            operator_token_hash,
        } => KindRecord::TenantCreated {
            operator_token_hash: operator_token_hash.to_hex(),
        },
        EventKind::OperatorTokenSet {
            operator_token_hash,
            by,
        } => KindRecord::OperatorTokenSet {
            operator_token_hash: operator_token_hash.to_hex(),
            by: (*by).into(),
        },
        EventKind::TenantBudgetSet { daily_budget_usd } => KindRecord::TenantBudgetSet {
            daily_budget_usd: daily_budget_usd.map(usd_of),
        },
        other => unreachable!("{} is not in this group", other.type_name()),
    }
}

/// An agent's lifecycle, its timers and its idle chamber.
fn agent_record(kind: &EventKind) -> KindRecord {
    match kind {
        EventKind::AgentCreated {
            agent,
            name,
            spec,
            token_hash,
            first_fire_at_ms,
        } => KindRecord::AgentCreated {
            agent: agent.0,
            name: name.clone(),
            spec: Box::new(spec.as_ref().into()),
            token_hash: token_hash.to_hex(),
            first_fire_at_ms: *first_fire_at_ms,
        },
        EventKind::AgentPaused {
            agent,
            until_ms,
            by,
        } => KindRecord::AgentPaused {
            agent: agent.0,
            until_ms: *until_ms,
            by: (*by).into(),
        },
        EventKind::AgentResumed { agent } => KindRecord::AgentResumed { agent: agent.0 },
        EventKind::AgentTerminated { agent } => KindRecord::AgentTerminated { agent: agent.0 },
        EventKind::TimerFired {
            agent,
            due_at_ms,
            missed_slots,
            next_fire_at_ms,
        } => KindRecord::TimerFired {
            agent: agent.0,
            due_at_ms: *due_at_ms,
            missed_slots: *missed_slots,
            next_fire_at_ms: *next_fire_at_ms,
        },
        EventKind::SessionReset { agent, task_key } => KindRecord::SessionReset {
            agent: agent.0,
            task_key: task_key.clone(),
        },
        EventKind::InputReceived {
            agent,
            next_idle_at_ms,
        } => KindRecord::InputReceived {
            agent: agent.0,
            next_idle_at_ms: *next_idle_at_ms,
        },
        EventKind::IdleFired {
            agent,
            next_idle_at_ms,
        } => KindRecord::IdleFired {
            agent: agent.0,
            next_idle_at_ms: *next_idle_at_ms,
        },
        EventKind::AgentTokenRotated { agent, token_hash } => KindRecord::AgentTokenRotated {
            agent: agent.0,
            token_hash: token_hash.to_hex(),
        },
        EventKind::AgentUpdated {
            agent,
            spec,
            changed,
            first_fire_at_ms,
        } => KindRecord::AgentUpdated {
            agent: agent.0,
            spec: Box::new(spec.as_ref().into()),
            changed: changed.clone(),
            first_fire_at_ms: *first_fire_at_ms,
        },
        EventKind::AgentDeleted { agent, name } => KindRecord::AgentDeleted {
            agent: agent.0,
            name: name.clone(),
        },
        other => unreachable!("{} is not in this group", other.type_name()),
    }
}

/// Runs: their starts, ends, children and spend.
fn run_record(kind: &EventKind) -> KindRecord {
    match kind {
        EventKind::RunRequeued {
            run,
            agent,
            retry_of,
            coalesced,
        } => KindRecord::RunRequeued {
            run: run.0,
            agent: agent.0,
            retry_of: retry_of.0,
            coalesced: *coalesced,
        },
        EventKind::RunStarted {
            run,
            agent,
            run_number,
            day,
        } => KindRecord::RunStarted {
            run: run.0,
            agent: agent.0,
            run_number: *run_number,
            day: day.0,
        },
        EventKind::RunFinished {
            run,
            agent,
            status,
            detail,
            cause,
            stop_reason,
            report,
            error_class,
        } => KindRecord::RunFinished {
            run: run.0,
            agent: agent.0,
            status: (*status).into(),
            detail: detail.clone(),
            cause: cause.map(Into::into),
            stop_reason: stop_reason.map(Into::into),
            report: report.as_deref().map(|report| Box::new(report.into())),
            error_class: error_class.map(Into::into),
        },
        EventKind::RunProcessStarted { run, agent, pgid } => KindRecord::RunProcessStarted {
            run: run.0,
            agent: agent.0,
            pgid: *pgid,
        },
        EventKind::UsageRecorded {
            run,
            agent,
            call,
            usage,
            day,
        } => KindRecord::UsageRecorded {
            run: run.0,
            agent: agent.0,
            call: *call,
            usage: usage.into(),
            day: day.0,
        },
        other => unreachable!("{} is not in this group", other.type_name()),
    }
}

/// The breaker, the error state and liveness.
fn health_record(kind: &EventKind) -> KindRecord {
    match kind {
        EventKind::BreakerOpened {
            agent,
            trigger,
            until_ms,
            cooldown_ms,
        } => KindRecord::BreakerOpened {
            agent: agent.0,
            trigger: (*trigger).into(),
            until_ms: *until_ms,
            cooldown_ms: *cooldown_ms,
        },
        EventKind::BreakerHalfOpened { agent } => KindRecord::BreakerHalfOpened { agent: agent.0 },
        EventKind::BreakerClosed { agent } => KindRecord::BreakerClosed { agent: agent.0 },
        EventKind::BreakerReset { agent } => KindRecord::BreakerReset { agent: agent.0 },
        EventKind::AgentErrored {
            agent,
            reason,
            count,
        } => KindRecord::AgentErrored {
            agent: agent.0,
            reason: (*reason).into(),
            count: *count,
        },
        EventKind::AgentErrorReset { agent } => KindRecord::AgentErrorReset { agent: agent.0 },
        EventKind::AgentOnline { agent, report } => KindRecord::AgentOnline {
            agent: agent.0,
            report: report.into(),
        },
        EventKind::AgentOffline {
            agent,
            silent_ms,
            report,
        } => KindRecord::AgentOffline {
            agent: agent.0,
            silent_ms: *silent_ms,
            report: report.into(),
        },
        other => unreachable!("{} is not in this group", other.type_name()),
    }
}

/// The three wakeup outcomes, which share most of their fields.
fn wakeup_record(kind: &EventKind) -> KindRecord {
    match kind {
        EventKind::WakeupQueued {
            wakeup,
            agent,
            source,
            reason,
            payload,
            task_key,
            idempotency_key,
            requested_by,
            trigger_detail,
            run,
        } => KindRecord::WakeupQueued {
            wakeup: wakeup.0,
            agent: agent.0,
            source: (*source).into(),
            reason: reason.clone(),
            payload: payload.clone(),
            task_key: task_key.clone(),
            idempotency_key: idempotency_key.clone(),
            requested_by: requested_by.map(Into::into),
            trigger_detail: trigger_detail.clone(),
            run: run.0,
        },
        EventKind::WakeupCoalesced {
            wakeup,
            agent,
            source,
            reason,
            payload,
            idempotency_key,
            requested_by,
            trigger_detail,
            run,
            coalesced_count,
        } => KindRecord::WakeupCoalesced {
            wakeup: wakeup.0,
            agent: agent.0,
            source: (*source).into(),
            reason: reason.clone(),
            payload: payload.clone(),
            idempotency_key: idempotency_key.clone(),
            requested_by: requested_by.map(Into::into),
            trigger_detail: trigger_detail.clone(),
            run: run.0,
            coalesced_count: *coalesced_count,
        },
        EventKind::WakeupRefused {
            wakeup,
            agent,
            source,
            reason,
            task_key,
            idempotency_key,
            requested_by,
            trigger_detail,
            refusal,
        } => KindRecord::WakeupRefused {
            wakeup: wakeup.0,
            agent: agent.0,
            source: (*source).into(),
            reason: reason.clone(),
            task_key: task_key.clone(),
            idempotency_key: idempotency_key.clone(),
            requested_by: requested_by.map(Into::into),
            trigger_detail: trigger_detail.clone(),
            refusal: (*refusal).into(),
        },
        other => unreachable!("{} is not a wakeup outcome", other.type_name()),
    }
}

impl KindRecord {
    /// The engine's event kind, or the first field that cannot be one.
    pub fn into_engine(self) -> Result<EventKind, Problem> {
        match self {
            record @ (KindRecord::TenantCreated { .. }
            | KindRecord::OperatorTokenSet { .. }
            | KindRecord::TenantBudgetSet { .. }) => tenant_event(record),
            record @ (KindRecord::AgentCreated { .. }
            | KindRecord::AgentPaused { .. }
            | KindRecord::AgentResumed { .. }
            | KindRecord::AgentTerminated { .. }
            | KindRecord::TimerFired { .. }
            | KindRecord::SessionReset { .. }
            | KindRecord::InputReceived { .. }
            | KindRecord::IdleFired { .. }
            | KindRecord::AgentTokenRotated { .. }
            | KindRecord::AgentUpdated { .. }
            | KindRecord::AgentDeleted { .. }) => agent_event(record),
            record @ (KindRecord::HeartbeatCreated { .. }
            | KindRecord::HeartbeatDeleted { .. }
            | KindRecord::HeartbeatStateChanged { .. }
            | KindRecord::HeartbeatEmissionPaused { .. }) => heartbeat::heartbeat_event(record),
            record @ (KindRecord::RunRequeued { .. }
            | KindRecord::RunStarted { .. }
            | KindRecord::RunFinished { .. }
            | KindRecord::RunProcessStarted { .. }
            | KindRecord::UsageRecorded { .. }) => run_event(record),
            record @ (KindRecord::BreakerOpened { .. }
            | KindRecord::BreakerHalfOpened { .. }
            | KindRecord::BreakerClosed { .. }
            | KindRecord::BreakerReset { .. }
            | KindRecord::AgentErrored { .. }
            | KindRecord::AgentErrorReset { .. }
            | KindRecord::AgentOnline { .. }
            | KindRecord::AgentOffline { .. }) => health_event(record),
            record @ (KindRecord::WakeupQueued { .. }
            | KindRecord::WakeupCoalesced { .. }
            | KindRecord::WakeupRefused { .. }) => Ok(wakeup_event(record)),
        }
    }
}

/// Tenant facts.
fn tenant_event(record: KindRecord) -> Result<EventKind, Problem> {
    Ok(match record {
        KindRecord::TenantCreated {
            operator_token_hash,
        } => EventKind::TenantCreated {
            operator_token_hash: token_hash("operator_token_hash", &operator_token_hash)?,
        },
        KindRecord::OperatorTokenSet {
            operator_token_hash,
            by,
        } => EventKind::OperatorTokenSet {
            operator_token_hash: token_hash("operator_token_hash", &operator_token_hash)?,
            by: by.into(),
        },
        KindRecord::TenantBudgetSet { daily_budget_usd } => EventKind::TenantBudgetSet {
            daily_budget_usd: daily_budget_usd
                .map(micro_usd_of)
                .transpose()
                .map_err(|message| Problem::new("daily_budget_usd", message))?,
        },
        other => unreachable!("{} is not in this group", other.type_name()),
    })
}

/// An agent's lifecycle, its timers and its idle chamber.
fn agent_event(record: KindRecord) -> Result<EventKind, Problem> {
    Ok(match record {
        KindRecord::AgentCreated {
            agent,
            name,
            spec,
            token_hash,
            first_fire_at_ms,
        } => EventKind::AgentCreated {
            agent: AgentId(agent),
            name,
            spec: Box::new(
                spec.into_engine()
                    .map_err(|(field, message)| Problem::new(field, message))?,
            ),
            token_hash: self::token_hash("token_hash", &token_hash)?,
            first_fire_at_ms: optional_instant("first_fire_at_ms", first_fire_at_ms)?,
        },
        KindRecord::AgentPaused {
            agent,
            until_ms,
            by,
        } => EventKind::AgentPaused {
            agent: AgentId(agent),
            until_ms: optional_instant("until_ms", until_ms)?,
            by: by.into(),
        },
        KindRecord::AgentResumed { agent } => EventKind::AgentResumed {
            agent: AgentId(agent),
        },
        KindRecord::AgentTerminated { agent } => EventKind::AgentTerminated {
            agent: AgentId(agent),
        },
        KindRecord::TimerFired {
            agent,
            due_at_ms,
            missed_slots,
            next_fire_at_ms,
        } => EventKind::TimerFired {
            agent: AgentId(agent),
            due_at_ms: instant("due_at_ms", due_at_ms)?,
            missed_slots,
            next_fire_at_ms: instant("next_fire_at_ms", next_fire_at_ms)?,
        },
        KindRecord::SessionReset { agent, task_key } => EventKind::SessionReset {
            agent: AgentId(agent),
            task_key,
        },
        KindRecord::InputReceived {
            agent,
            next_idle_at_ms,
        } => EventKind::InputReceived {
            agent: AgentId(agent),
            next_idle_at_ms: optional_instant("next_idle_at_ms", next_idle_at_ms)?,
        },
        KindRecord::IdleFired {
            agent,
            next_idle_at_ms,
        } => EventKind::IdleFired {
            agent: AgentId(agent),
            next_idle_at_ms: instant("next_idle_at_ms", next_idle_at_ms)?,
        },
        KindRecord::AgentTokenRotated { agent, token_hash } => EventKind::AgentTokenRotated {
            agent: AgentId(agent),
            token_hash: self::token_hash("token_hash", &token_hash)?,
        },
        KindRecord::AgentUpdated {
            agent,
            spec,
            changed,
            first_fire_at_ms,
        } => EventKind::AgentUpdated {
            agent: AgentId(agent),
            spec: Box::new(
                spec.into_engine()
                    .map_err(|(field, message)| Problem::new(field, message))?,
            ),
            changed,
            first_fire_at_ms: optional_instant("first_fire_at_ms", first_fire_at_ms)?,
        },
        KindRecord::AgentDeleted { agent, name } => EventKind::AgentDeleted {
            agent: AgentId(agent),
            name,
        },
        other => unreachable!("{} is not in this group", other.type_name()),
    })
}

/// Runs: their starts, ends, children and spend.
fn run_event(record: KindRecord) -> Result<EventKind, Problem> {
    Ok(match record {
        KindRecord::RunRequeued {
            run,
            agent,
            retry_of,
            coalesced,
        } => EventKind::RunRequeued {
            run: RunId(run),
            agent: AgentId(agent),
            retry_of: RunId(retry_of),
            coalesced,
        },
        KindRecord::RunStarted {
            run,
            agent,
            run_number,
            day,
        } => EventKind::RunStarted {
            run: RunId(run),
            agent: AgentId(agent),
            run_number,
            day: LocalDay(day),
        },
        KindRecord::RunFinished {
            run,
            agent,
            status,
            detail,
            cause,
            stop_reason,
            report,
            error_class,
        } => EventKind::RunFinished {
            run: RunId(run),
            agent: AgentId(agent),
            status: status.into(),
            detail,
            cause: cause.map(Into::into),
            stop_reason: stop_reason.map(Into::into),
            report: report.map(|report| Box::new((*report).into())),
            error_class: error_class.map(Into::into),
        },
        KindRecord::RunProcessStarted { run, agent, pgid } => EventKind::RunProcessStarted {
            run: RunId(run),
            agent: AgentId(agent),
            pgid,
        },
        KindRecord::UsageRecorded {
            run,
            agent,
            call,
            usage,
            day,
        } => EventKind::UsageRecorded {
            run: RunId(run),
            agent: AgentId(agent),
            call,
            usage: usage.into(),
            day: LocalDay(day),
        },
        other => unreachable!("{} is not in this group", other.type_name()),
    })
}

/// The breaker, the error state and liveness.
fn health_event(record: KindRecord) -> Result<EventKind, Problem> {
    Ok(match record {
        KindRecord::BreakerOpened {
            agent,
            trigger,
            until_ms,
            cooldown_ms,
        } => EventKind::BreakerOpened {
            agent: AgentId(agent),
            trigger: trigger.into(),
            until_ms: instant("until_ms", until_ms)?,
            cooldown_ms,
        },
        KindRecord::BreakerHalfOpened { agent } => EventKind::BreakerHalfOpened {
            agent: AgentId(agent),
        },
        KindRecord::BreakerClosed { agent } => EventKind::BreakerClosed {
            agent: AgentId(agent),
        },
        KindRecord::BreakerReset { agent } => EventKind::BreakerReset {
            agent: AgentId(agent),
        },
        KindRecord::AgentErrored {
            agent,
            reason,
            count,
        } => EventKind::AgentErrored {
            agent: AgentId(agent),
            reason: reason.into(),
            count,
        },
        KindRecord::AgentErrorReset { agent } => EventKind::AgentErrorReset {
            agent: AgentId(agent),
        },
        KindRecord::AgentOnline { agent, report } => EventKind::AgentOnline {
            agent: AgentId(agent),
            report: report.into(),
        },
        KindRecord::AgentOffline {
            agent,
            silent_ms,
            report,
        } => EventKind::AgentOffline {
            agent: AgentId(agent),
            silent_ms,
            report: report.into(),
        },
        other => unreachable!("{} is not in this group", other.type_name()),
    })
}

fn wakeup_event(record: KindRecord) -> EventKind {
    match record {
        KindRecord::WakeupQueued {
            wakeup,
            agent,
            source,
            reason,
            payload,
            task_key,
            idempotency_key,
            requested_by,
            trigger_detail,
            run,
        } => EventKind::WakeupQueued {
            wakeup: WakeupId(wakeup),
            agent: AgentId(agent),
            source: source.into(),
            reason,
            payload,
            task_key,
            idempotency_key,
            requested_by: requested_by.map(Into::into),
            trigger_detail,
            run: RunId(run),
        },
        KindRecord::WakeupCoalesced {
            wakeup,
            agent,
            source,
            reason,
            payload,
            idempotency_key,
            requested_by,
            trigger_detail,
            run,
            coalesced_count,
        } => EventKind::WakeupCoalesced {
            wakeup: WakeupId(wakeup),
            agent: AgentId(agent),
            source: source.into(),
            reason,
            payload,
            idempotency_key,
            requested_by: requested_by.map(Into::into),
            trigger_detail,
            run: RunId(run),
            coalesced_count,
        },
        KindRecord::WakeupRefused {
            wakeup,
            agent,
            source,
            reason,
            task_key,
            idempotency_key,
            requested_by,
            trigger_detail,
            refusal,
        } => EventKind::WakeupRefused {
            wakeup: WakeupId(wakeup),
            agent: AgentId(agent),
            source: source.into(),
            reason,
            task_key,
            idempotency_key,
            requested_by: requested_by.map(Into::into),
            trigger_detail,
            refusal: refusal.into(),
        },
        other => unreachable!("{} is not a wakeup outcome", other.type_name()),
    }
}
