//! Events: every durable fact the runtime knows. The log of events is the source of truth for
//! recovery, the audit trail, the API's event feed and the simulator's trace (invariant 11).

use serde::{Deserialize, Serialize};

use super::agent::{AgentId, AgentSpec};
use super::agent_error::AgentErrorReason;
use super::breaker::FailureCause;
use super::daily_cap::LocalDay;
use super::pause::PausedBy;
use super::predicate::{HeartbeatId, HeartbeatSpec};
use super::pulse_report::PulseReport;
use super::run::{ErrorClass, RunId, RunReport, RunStatus, StopReason};
use super::tenant::{TenantName, TokenHash, TokenSetBy};
use super::usage::{MicroUsd, Usage};
use super::wakeup::{RefusalReason, RequestedBy, WakeupId, WakeupSource};

/// One durable fact with its place in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the log: starts at 1, gap-free, strictly increasing (invariant 11).
    pub seq: u64,
    /// Wall-clock time of the node that decided it, Unix ms. Informational: it may jump.
    pub at_ms: u64,
    /// The tenant the fact belongs to; only that tenant's callers see it.
    pub tenant: TenantName,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What an event says happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A tenant came into being with its operator token.
    TenantCreated {
        operator_token_hash: TokenHash,
    },
    /// A tenant's operator token was replaced: from configuration (a token configured anew at
    /// start), or by the tenant's operator (`POST /v1/operator/token`).
    OperatorTokenSet {
        operator_token_hash: TokenHash,
        by: TokenSetBy,
    },
    /// An agent was registered.
    AgentCreated {
        agent: AgentId,
        name: String,
        /// Boxed: a spec is several hundred bytes, and every event (in the writer's batches, the
        /// feed, the simulator's traces) would otherwise be the size of this one variant.
        spec: Box<AgentSpec>,
        token_hash: TokenHash,
        /// The first timer slot, when the agent has a timer; the schedule grid is
        /// `first_fire_at_ms + k * interval_ms`.
        first_fire_at_ms: Option<u64>,
    },
    /// The agent was paused: until resumed (`until_ms` none: every wakeup refused, every run
    /// cancelled), or until the wall instant `until_ms` (timer and idle wakeups refused; the
    /// running run and queued timer/idle runs cancelled by the events that follow).
    AgentPaused {
        agent: AgentId,
        until_ms: Option<u64>,
        by: PausedBy,
    },
    AgentResumed {
        agent: AgentId,
    },
    /// The agent stopped taking wakeups for good.
    AgentTerminated {
        agent: AgentId,
    },
    /// A timer slot came. One event covers every slot missed since the previous fire
    /// (downtime, forward clock jump): the schedule fires once, never the backlog.
    TimerFired {
        agent: AgentId,
        /// The latest grid slot at or before the fire: the slot this wakeup stands for.
        due_at_ms: u64,
        /// Slots of the grid skipped because they were missed (0 when on time).
        missed_slots: u64,
        /// The next grid slot strictly after the fire time.
        next_fire_at_ms: u64,
    },
    /// A wakeup was accepted and queued a new run.
    WakeupQueued {
        wakeup: WakeupId,
        agent: AgentId,
        source: WakeupSource,
        reason: String,
        payload: serde_json::Value,
        task_key: Option<String>,
        idempotency_key: Option<String>,
        /// Who asked (absent in logs written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<RequestedBy>,
        /// What caused it, as the caller described it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger_detail: Option<serde_json::Value>,
        run: RunId,
    },
    /// A wakeup was accepted and joined the run already queued for its agent and task key.
    WakeupCoalesced {
        wakeup: WakeupId,
        agent: AgentId,
        source: WakeupSource,
        reason: String,
        payload: serde_json::Value,
        idempotency_key: Option<String>,
        /// Who asked (absent in logs written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<RequestedBy>,
        /// What caused it, as the caller described it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger_detail: Option<serde_json::Value>,
        run: RunId,
        /// The run's count of coalesced wakeups, this one included.
        coalesced_count: u64,
    },
    /// A wakeup was refused; nothing was queued.
    WakeupRefused {
        wakeup: WakeupId,
        agent: AgentId,
        source: WakeupSource,
        reason: String,
        task_key: Option<String>,
        idempotency_key: Option<String>,
        /// Who asked (absent in logs written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<RequestedBy>,
        /// What caused it, as the caller described it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger_detail: Option<serde_json::Value>,
        refusal: RefusalReason,
    },
    /// A run that was running when the control plane stopped is queued again, once, as `run`
    /// (or, when `coalesced`, joins `run`, already queued for the same task key).
    RunRequeued {
        run: RunId,
        agent: AgentId,
        retry_of: RunId,
        coalesced: bool,
    },
    /// A queued run started. This event is the run's daily-cap reservation.
    RunStarted {
        run: RunId,
        agent: AgentId,
        /// The agent's n-th run start (from 0); picks the scripted adapter's step.
        run_number: u64,
        /// The local day (agent's time zone) the start counts against.
        day: LocalDay,
    },
    /// A run reached its terminal state.
    RunFinished {
        run: RunId,
        agent: AgentId,
        status: RunStatus,
        detail: String,
        /// For a failure the breaker counts: which kind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<FailureCause>,
        /// Why it stopped (absent only in logs written before stop reasons existed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        /// What an agent loop adds: a pause it asked for, history turns, the answer's excerpt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<Box<RunReport>>,
        /// Why an unsuccessful run failed (absent for successes, and in older logs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_class: Option<ErrorClass>,
    },
    /// A running run's child was spawned in its own process group `pgid`: recorded before the
    /// run's work is read, so that a restart can kill any member of the group still alive.
    RunProcessStarted {
        run: RunId,
        agent: AgentId,
        pgid: u32,
    },
    /// An operator reset an agent's CLI session for `task_key`: the next run starts fresh.
    SessionReset {
        agent: AgentId,
        task_key: String,
    },
    /// The tenant's daily budget was set (or removed).
    TenantBudgetSet {
        #[serde(default)]
        daily_budget_usd: Option<MicroUsd>,
    },
    /// A running run's model call was made and cost this much. Recorded per call, while the
    /// run goes on, so the daily budget sees spend before the run ends and a crash mid-run
    /// loses no spend already made.
    UsageRecorded {
        run: RunId,
        agent: AgentId,
        /// The model call's number within the run, from 1.
        call: u64,
        usage: Usage,
        /// The local day (agent's time zone) the spend counts against.
        day: LocalDay,
    },
    /// The breaker opened (after `failures_to_open` failures of kind `trigger` in a row, or a
    /// failed probe): wakeups are refused until `until_ms`.
    BreakerOpened {
        agent: AgentId,
        trigger: FailureCause,
        until_ms: u64,
        cooldown_ms: u64,
    },
    /// The cooldown is over and a wakeup came: it is admitted as the one probe.
    BreakerHalfOpened {
        agent: AgentId,
    },
    /// The probe succeeded.
    BreakerClosed {
        agent: AgentId,
    },
    /// An operator closed the breaker.
    BreakerReset {
        agent: AgentId,
    },
    /// The agent entered the error state: `count` runs in a row ended by a control-plane
    /// restart, or breaker openings in a row at its longest cooldown. Its queued runs are
    /// cancelled by the events that follow; wakeups are refused `agent_error` until reset.
    AgentErrored {
        agent: AgentId,
        reason: AgentErrorReason,
        count: u32,
    },
    /// An operator took the agent out of the error state.
    AgentErrorReset {
        agent: AgentId,
    },
    /// A pulse came from an agent that was not online (never pulsed, or offline).
    AgentOnline {
        agent: AgentId,
        /// What its pulses said (status, metadata), this one's parts over earlier ones'.
        #[serde(default, skip_serializing_if = "PulseReport::is_empty")]
        report: PulseReport,
    },
    /// The stale sweep found the agent silent past its detector's judgement.
    AgentOffline {
        agent: AgentId,
        /// How long it had been silent, on the node's monotonic clock.
        silent_ms: u64,
        /// What its last pulses said (an agent that reported `shutting_down` left on purpose).
        #[serde(default, skip_serializing_if = "PulseReport::is_empty")]
        report: PulseReport,
    },
    /// A user wrote to the agent: the idle chamber starts counting again. The on-demand
    /// wakeup the input brings follows as its own event.
    InputReceived {
        agent: AgentId,
        /// The next idle wakeup, if the agent has an idle chamber.
        next_idle_at_ms: Option<u64>,
    },
    /// The idle chamber fired: `idle_after_ms` passed without user input. One event covers any
    /// length of silence (downtime, forward clock jump): never a backlog.
    IdleFired {
        agent: AgentId,
        /// The next idle wakeup: `idle_after_ms` from this fire.
        next_idle_at_ms: u64,
    },
    /// An operator replaced the agent's token: the old one stops working at once. (Storage
    /// format 2.)
    AgentTokenRotated {
        agent: AgentId,
        token_hash: TokenHash,
    },
    /// An operator changed the agent's spec (storage format 3). `spec` is the whole new spec,
    /// `changed` the dotted paths of what changed; when `heartbeat.interval_ms` changed, the
    /// grid starts again at `first_fire_at_ms` (none: the timer was removed) (ADR 0019).
    AgentUpdated {
        agent: AgentId,
        /// Boxed, as in `AgentCreated`.
        spec: Box<AgentSpec>,
        changed: Vec<String>,
        first_fire_at_ms: Option<u64>,
    },
    /// An operator deleted the (terminated) agent: the node forgets it, its name is free again
    /// and its id is never reused; its events stay in the log (storage format 3).
    AgentDeleted {
        agent: AgentId,
        name: String,
    },
    /// An operator defined a predicate heartbeat of the agent (storage format 5): its effective
    /// interval and budget (docs/api.md, "Predicate heartbeats").
    HeartbeatCreated {
        agent: AgentId,
        heartbeat: HeartbeatId,
        /// Boxed: the check's URL would make every event larger.
        spec: Box<HeartbeatSpec>,
    },
    /// An operator deleted the heartbeat (format 5).
    HeartbeatDeleted {
        agent: AgentId,
        heartbeat: HeartbeatId,
    },
    /// The heartbeat observed a state other than the one recorded (format 5): `from` none is
    /// its first observation, which enqueues nothing. A wakeup it enqueues is decided with it,
    /// in the same commit.
    HeartbeatStateChanged {
        agent: AgentId,
        heartbeat: HeartbeatId,
        from: Option<String>,
        to: String,
    },
    /// A transition found `pending` runs of this heartbeat still waiting, at the cap: it was
    /// not recorded (the next tick after the queue drains sees it again) and emission pauses
    /// until then (format 5). Recorded once per pause.
    HeartbeatEmissionPaused {
        agent: AgentId,
        heartbeat: HeartbeatId,
        pending: u64,
    },
}

impl EventKind {
    /// The event type's wire name, as in the JSON `type` field.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::TenantCreated { .. } => "tenant_created",
            EventKind::OperatorTokenSet { .. } => "operator_token_set",
            EventKind::TenantBudgetSet { .. } => "tenant_budget_set",
            EventKind::AgentCreated { .. } => "agent_created",
            EventKind::AgentPaused { .. } => "agent_paused",
            EventKind::AgentResumed { .. } => "agent_resumed",
            EventKind::AgentTerminated { .. } => "agent_terminated",
            EventKind::TimerFired { .. } => "timer_fired",
            EventKind::WakeupQueued { .. } => "wakeup_queued",
            EventKind::WakeupCoalesced { .. } => "wakeup_coalesced",
            EventKind::WakeupRefused { .. } => "wakeup_refused",
            EventKind::RunRequeued { .. } => "run_requeued",
            EventKind::RunStarted { .. } => "run_started",
            EventKind::RunFinished { .. } => "run_finished",
            EventKind::RunProcessStarted { .. } => "run_process_started",
            EventKind::SessionReset { .. } => "session_reset",
            EventKind::UsageRecorded { .. } => "usage_recorded",
            EventKind::BreakerOpened { .. } => "breaker_opened",
            EventKind::BreakerHalfOpened { .. } => "breaker_half_opened",
            EventKind::BreakerClosed { .. } => "breaker_closed",
            EventKind::BreakerReset { .. } => "breaker_reset",
            EventKind::AgentErrored { .. } => "agent_errored",
            EventKind::AgentErrorReset { .. } => "agent_error_reset",
            EventKind::AgentOnline { .. } => "agent_online",
            EventKind::AgentOffline { .. } => "agent_offline",
            EventKind::InputReceived { .. } => "input_received",
            EventKind::IdleFired { .. } => "idle_fired",
            EventKind::AgentTokenRotated { .. } => "agent_token_rotated",
            EventKind::AgentUpdated { .. } => "agent_updated",
            EventKind::AgentDeleted { .. } => "agent_deleted",
            EventKind::HeartbeatCreated { .. } => "heartbeat_created",
            EventKind::HeartbeatDeleted { .. } => "heartbeat_deleted",
            EventKind::HeartbeatStateChanged { .. } => "heartbeat_state_changed",
            EventKind::HeartbeatEmissionPaused { .. } => "heartbeat_emission_paused",
        }
    }

    /// The agent the fact is about, if it is about one.
    pub fn agent(&self) -> Option<AgentId> {
        match self {
            EventKind::TenantCreated { .. }
            | EventKind::OperatorTokenSet { .. }
            | EventKind::TenantBudgetSet { .. } => None,
            EventKind::AgentCreated { agent, .. }
            | EventKind::AgentPaused { agent, .. }
            | EventKind::AgentResumed { agent }
            | EventKind::AgentTerminated { agent }
            | EventKind::TimerFired { agent, .. }
            | EventKind::WakeupQueued { agent, .. }
            | EventKind::WakeupCoalesced { agent, .. }
            | EventKind::WakeupRefused { agent, .. }
            | EventKind::RunRequeued { agent, .. }
            | EventKind::RunStarted { agent, .. }
            | EventKind::RunFinished { agent, .. }
            | EventKind::RunProcessStarted { agent, .. }
            | EventKind::SessionReset { agent, .. }
            | EventKind::UsageRecorded { agent, .. }
            | EventKind::BreakerOpened { agent, .. }
            | EventKind::BreakerHalfOpened { agent }
            | EventKind::BreakerClosed { agent }
            | EventKind::BreakerReset { agent }
            | EventKind::AgentErrored { agent, .. }
            | EventKind::AgentErrorReset { agent }
            | EventKind::AgentOnline { agent, .. }
            | EventKind::AgentOffline { agent, .. }
            | EventKind::InputReceived { agent, .. }
            | EventKind::IdleFired { agent, .. }
            | EventKind::AgentTokenRotated { agent, .. }
            | EventKind::AgentUpdated { agent, .. }
            | EventKind::AgentDeleted { agent, .. }
            | EventKind::HeartbeatCreated { agent, .. }
            | EventKind::HeartbeatDeleted { agent, .. }
            | EventKind::HeartbeatStateChanged { agent, .. }
            | EventKind::HeartbeatEmissionPaused { agent, .. } => Some(*agent),
        }
    }
}
