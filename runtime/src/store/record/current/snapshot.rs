//! Snapshot records (format 4): one agent's whole state, and one tenant, as a snapshot stores
//! them (ADR 0014, ADR 0016). Recovery is the newest snapshot plus the log after it, so these
//! must give back exactly the state the engine held: `decode(encode(state)) == state` for every
//! state the engine can reach.
//!
//! Like the event records these are the database's own types, mirroring the engine's field for
//! field with explicit conversions, so a change to the engine fails to compile here until
//! someone decides how it is stored. They reuse the event records' values (the spec, usage,
//! run reports, the named states).
//!
//! What is stored is what cannot be derived. The engine's indexes are rebuilt on decode, each
//! from the fields it indexes: the start queue, the queued run of each task key and the running
//! run (from the live runs' status, priority and task key), the map of finished runs (from their
//! finish order), the keys' ages (from each key's first use), the history's byte count (from its
//! messages), and fields that always equal another (a run's agent, a key's own name in its
//! wakeup record, a session's task key).
//!
//! Size: a million idle agents are stored, so everything empty, zero, `None` or at its usual
//! value is left out, and each such absence has the one meaning written beside the field (never
//! an engine default, which may change). Enums are plain or externally tagged, never
//! internally tagged: serde buffers an internally tagged enum before reading it, which is slow
//! at a million agents (the reused spec's adapter is the one exception, as `agent_created`
//! stores it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::spec::AgentSpec;
use super::values::{
    AgentErrorReason, AgentStatus, ErrorClass, HistoryMessage, LivenessStatus, PausedBy, Priority,
    RefusalReason, RunReport, RunStatus, StopReason, Usage, WakeupSource,
};
use super::{instant, optional_instant, token_hash, Problem};
use crate::engine::agent::{self, AgentId};
use crate::engine::agent_state::{self, RestoreError};
use crate::engine::coordinator::Coordinator;
use crate::engine::daily_cap::{DayCount, LocalDay};
use crate::engine::history::{self, History};
use crate::engine::run::{self, RunId};
use crate::engine::session::{Sessions, TaskSession};
use crate::engine::predicate::Heartbeats;
use crate::engine::tenant;
use crate::engine::usage::{self, MicroUsd};
use crate::engine::wakeup::{self, WakeupId};
use crate::engine::{agent_error, breaker, liveness};

fn is_zero_u64(value: &u64) -> bool {
    *value == 0
}

fn is_zero_u32(value: &u32) -> bool {
    *value == 0
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

// ---- the records ----

/// One agent's whole state. Absent fields mean: `status` active; every count 0; every
/// optional instant, pause, cooldown and error none; `breaker` closed with no failures;
/// `liveness` unknown since never; `day_count` and `day_spend` no day counted yet; usage zero;
/// every list empty.
///
/// The spec is either in the record (`spec`) or in the snapshot's spec table (`spec_ref`, from
/// format 6), never both; an absent `spec_ref` means the spec is in the record.
///
/// `S` is how an inline spec is held: parsed ([`AgentSpec`], the default), or as its raw JSON
/// text, which [`crate::store::record::AgentDecoder`] parses only when it differs from the
/// previous agent's by more than the name (the stored bytes are the same either way).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Why the bound by hand: serde's own would ask `S: Default` for `spec`'s default, which is
// `None` whatever `S` is.
#[serde(bound(deserialize = "S: Deserialize<'de>"))]
pub struct AgentRecord<S = AgentSpec> {
    pub id: u64,
    pub tenant: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<S>,
    /// Format 6: the number of this agent's spec in the snapshot's spec table, where it is
    /// stored with an empty name (the agent's `name` is its name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_ref: Option<u32>,
    #[serde(default = "active", skip_serializing_if = "is_active")]
    pub status: AgentStatus,
    pub token_hash: String,
    pub created_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fire_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub timer_fires: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_due_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub runs_started: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_until_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_by: Option<PausedBy>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub day_count: DayCountRecord,
    #[serde(default, skip_serializing_if = "is_default")]
    pub day_spend: DaySpendRecord,
    #[serde(default, skip_serializing_if = "is_default")]
    pub usage_total: Usage,
    #[serde(default, skip_serializing_if = "is_default")]
    pub breaker: BreakerRecord,
    #[serde(default, skip_serializing_if = "is_default")]
    pub liveness: LivenessRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_input_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_idle_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<CooldownRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AgentErrorRecord>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub error_counts: ErrorCountsRecord,
    /// Queued and running runs, in id order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live: Vec<RunRecord>,
    /// The run that finished last (none: no run finished yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_finished: Option<LastFinishedRecord>,
    /// Finished runs held, in the order they finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finished: Vec<FinishedRecord>,
    /// Idempotency keys held, by key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<KeyRecord>,
    /// The latest wall time of a keyed wakeup (0: none yet).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub keys_clock_ms: u64,
    /// The conversation history, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryMessage>,
    /// Coding-CLI sessions, by task key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<SessionRecord>,
    /// Predicate heartbeats, by id (format 5; absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heartbeats: Vec<super::heartbeat::HeartbeatRecord>,
}

fn active() -> AgentStatus {
    AgentStatus::Active
}

fn is_active(status: &AgentStatus) -> bool {
    *status == AgentStatus::Active
}

/// Runs started on the latest counted local day (days since 1970-01-01 in the agent's zone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayCountRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<i32>,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub started: u32,
}

/// Model usage on the latest local day that saw any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaySpendRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<i32>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub usage: Usage,
}

/// The circuit breaker (externally tagged: `{"open": {...}}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerRecord {
    Closed {
        #[serde(default, skip_serializing_if = "is_zero_u32")]
        llm_failures: u32,
        #[serde(default, skip_serializing_if = "is_zero_u32")]
        tool_failures: u32,
    },
    Open {
        until_ms: u64,
        cooldown_ms: u64,
    },
    HalfOpen {
        cooldown_ms: u64,
        /// None: no probe admitted yet.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probe: Option<u64>,
    },
}

impl Default for BreakerRecord {
    fn default() -> Self {
        BreakerRecord::Closed {
            llm_failures: 0,
            tool_failures: 0,
        }
    }
}

/// The durable part of an agent's liveness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivenessRecord {
    pub status: LivenessStatus,
    /// Wall time of the last transition (none: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
}

impl Default for LivenessRecord {
    fn default() -> Self {
        LivenessRecord {
            status: LivenessStatus::Unknown,
            since_ms: None,
        }
    }
}

/// The wait after the last run's end: from its end to the end plus the cooldown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CooldownRecord {
    pub from_ms: u64,
    pub until_ms: u64,
}

/// The error state: why, and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentErrorRecord {
    pub reason: AgentErrorReason,
    pub since_ms: u64,
}

/// The counts that lead to the error state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCountsRecord {
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub restart_ends: u32,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub openings_at_cap: u32,
}

/// A run. Absent fields mean: `priority` the class format 4 gives its source
/// ([`pinned_priority`]); `task_key`, every instant, `run_number`, `retry_of`, `stop_reason`,
/// `report`, `error_class` and `process_group` none; `reason` and `detail` empty; `payload`
/// null; `coalesced_count` 0; `usage` zero. Its agent is the agent whose record holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: u64,
    pub source: WakeupSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_key: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub payload: Value,
    pub wakeup: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub coalesced_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<u64>,
    pub status: RunStatus,
    pub queued_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_number: Option<u64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Box<RunReport>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<ErrorClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_group: Option<u32>,
}

/// The priority class a run takes from its source when its record names none. Format 4's
/// mapping, written out here (never the engine's, which may change).
pub fn pinned_priority(source: WakeupSource) -> Priority {
    match source {
        WakeupSource::OnDemand => Priority::OnDemand,
        WakeupSource::Assignment => Priority::Assignment,
        WakeupSource::Timer
        | WakeupSource::Idle
        | WakeupSource::Automation
        | WakeupSource::Predicate => Priority::Routine,
    }
}

/// The run that finished last, which a `run_requeued` right after copies whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LastFinishedRecord {
    /// The finished run `run` exactly as `finished` holds it, but with `payload` (absent:
    /// null): the engine drops payloads from the runs it keeps for the API, not from this copy.
    Held {
        run: u64,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        payload: Value,
    },
    /// Stored whole: no finished run held matches it any more (evicted, or its answer excerpt
    /// dropped since).
    Whole(Box<RunRecord>),
}

/// A finished run held, with the seq of the `run_finished` that ended it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishedRecord {
    pub seq: u64,
    pub run: RunRecord,
}

/// A wakeup that carried idempotency key `key`, as it is answered again. Its agent is the agent
/// whose record holds it; its `idempotency_key` is `key`. Absent: `reason` empty, `task_key`
/// none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub key: String,
    pub wakeup: u64,
    pub source: WakeupSource,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_key: Option<String>,
    /// Wall time of the key's first use.
    pub at_ms: u64,
    pub outcome: OutcomeRecord,
}

/// What became of a keyed wakeup (externally tagged: `{"queued": {"run": 7}}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeRecord {
    Queued { run: u64 },
    Coalesced { run: u64, coalesced_count: u64 },
    Refused { refusal: RefusalReason },
}

/// One task's coding-CLI session: the run that last worked in it, and when that run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub task_key: String,
    pub session_id: String,
    pub run: u64,
    pub updated_at_ms: u64,
}

/// One tenant. Absent: no daily budget; no day's spend counted yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRecord {
    pub name: String,
    pub operator_token_hash: String,
    pub configured_token_hash: String,
    /// Micro-dollars, exactly (unlike the events' dollars: snapshots are new in format 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_budget_micro_usd: Option<u64>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub day_spend: DaySpendRecord,
}

// ---- engine -> stored ----

impl From<&agent_state::AgentState> for AgentRecord {
    fn from(state: &agent_state::AgentState) -> Self {
        let agent::Agent {
            id,
            tenant,
            name,
            spec,
            status,
            token_hash,
            created_at_ms,
            next_fire_at_ms,
            timer_fires,
            last_due_at_ms,
            runs_started,
            paused_until_ms,
            paused_by,
            day_count,
            day_spend,
            usage_total,
            breaker,
            liveness,
            last_input_at_ms,
            next_idle_at_ms,
            cooldown,
            error,
            error_counts,
        } = state.agent();
        let finished: Vec<FinishedRecord> = state
            .finished_in_order()
            .map(|(seq, run)| FinishedRecord {
                seq,
                run: run.into(),
            })
            .collect();
        AgentRecord {
            id: id.0,
            tenant: tenant.clone(),
            name: name.clone(),
            spec: Some((&**spec).into()),
            spec_ref: None,
            status: (*status).into(),
            token_hash: token_hash.to_hex(),
            created_at_ms: *created_at_ms,
            next_fire_at_ms: *next_fire_at_ms,
            timer_fires: *timer_fires,
            last_due_at_ms: *last_due_at_ms,
            runs_started: *runs_started,
            paused_until_ms: *paused_until_ms,
            paused_by: paused_by.map(Into::into),
            day_count: DayCountRecord {
                day: day_count.day.map(|day| day.0),
                started: day_count.started,
            },
            day_spend: day_spend.into(),
            usage_total: usage_total.into(),
            breaker: (*breaker).into(),
            liveness: LivenessRecord {
                status: liveness.status.into(),
                since_ms: liveness.since_ms,
            },
            last_input_at_ms: *last_input_at_ms,
            next_idle_at_ms: *next_idle_at_ms,
            cooldown: cooldown.map(|c| CooldownRecord {
                from_ms: c.from_ms,
                until_ms: c.until_ms,
            }),
            error: error.map(|e| AgentErrorRecord {
                reason: e.reason.into(),
                since_ms: e.since_ms,
            }),
            error_counts: ErrorCountsRecord {
                restart_ends: error_counts.restart_ends,
                openings_at_cap: error_counts.openings_at_cap,
            },
            live: state.coordinator.live_runs().map(Into::into).collect(),
            last_finished: state
                .coordinator
                .last_finished()
                .map(|last| last_finished_record(state, last)),
            finished,
            keys: state
                .idempotency_keys()
                .map(|(key, record)| key_record(key, record))
                .collect(),
            keys_clock_ms: state.keys_clock_ms(),
            history: state
                .history()
                .messages()
                .map(|message| HistoryMessage {
                    role: message.role.into(),
                    text: message.text.clone(),
                })
                .collect(),
            sessions: state
                .sessions()
                .iter()
                .map(|session| SessionRecord {
                    task_key: session.task_key.clone(),
                    session_id: session.session_id.clone(),
                    run: session.run.0,
                    updated_at_ms: session.updated_at_ms,
                })
                .collect(),
            heartbeats: state.heartbeats().iter().map(Into::into).collect(),
        }
    }
}

/// The last finished run by reference when a held finished run is it but for the payload (the
/// usual case), whole otherwise.
fn last_finished_record(state: &agent_state::AgentState, last: &run::Run) -> LastFinishedRecord {
    let held = state
        .finished_in_order()
        .rev()
        .find(|(_, run)| run.id == last.id)
        .map(|(_, run)| run);
    match held {
        Some(run)
            if run::Run {
                payload: last.payload.clone(),
                ..run.clone()
            } == *last =>
        {
            LastFinishedRecord::Held {
                run: last.id.0,
                payload: last.payload.clone(),
            }
        }
        _ => LastFinishedRecord::Whole(Box::new(last.into())),
    }
}

fn key_record(key: &str, record: &wakeup::WakeupRecord) -> KeyRecord {
    let wakeup::WakeupRecord {
        wakeup,
        // Why not stored: always the agent whose record holds it, and `key`.
        agent: _,
        idempotency_key: _,
        source,
        reason,
        task_key,
        at_ms,
        outcome,
    } = record;
    KeyRecord {
        key: key.to_string(),
        wakeup: wakeup.0,
        source: (*source).into(),
        reason: reason.clone(),
        task_key: task_key.clone(),
        at_ms: *at_ms,
        outcome: match outcome {
            wakeup::WakeupOutcome::Queued { run } => OutcomeRecord::Queued { run: run.0 },
            wakeup::WakeupOutcome::Coalesced {
                run,
                coalesced_count,
            } => OutcomeRecord::Coalesced {
                run: run.0,
                coalesced_count: *coalesced_count,
            },
            wakeup::WakeupOutcome::Refused { refusal } => OutcomeRecord::Refused {
                refusal: (*refusal).into(),
            },
        },
    }
}

impl From<&run::Run> for RunRecord {
    fn from(run: &run::Run) -> Self {
        let run::Run {
            id,
            // Why not stored: always the agent whose record holds the run.
            agent: _,
            source,
            priority,
            task_key,
            reason,
            payload,
            wakeup,
            coalesced_count,
            retry_of,
            status,
            queued_at_ms,
            started_at_ms,
            finished_at_ms,
            run_number,
            detail,
            stop_reason,
            usage,
            report,
            error_class,
            process_group,
        } = run;
        let source: WakeupSource = (*source).into();
        let priority: Priority = (*priority).into();
        RunRecord {
            id: id.0,
            source,
            priority: (priority != pinned_priority(source)).then_some(priority),
            task_key: task_key.clone(),
            reason: reason.clone(),
            payload: payload.clone(),
            wakeup: wakeup.0,
            coalesced_count: *coalesced_count,
            retry_of: retry_of.map(|r| r.0),
            status: (*status).into(),
            queued_at_ms: *queued_at_ms,
            started_at_ms: *started_at_ms,
            finished_at_ms: *finished_at_ms,
            run_number: *run_number,
            detail: detail.clone(),
            stop_reason: stop_reason.map(Into::into),
            usage: usage.into(),
            report: report.as_deref().map(|r| Box::new(r.into())),
            error_class: error_class.map(Into::into),
            process_group: *process_group,
        }
    }
}

impl From<breaker::BreakerState> for BreakerRecord {
    fn from(state: breaker::BreakerState) -> Self {
        match state {
            breaker::BreakerState::Closed {
                llm_failures,
                tool_failures,
            } => BreakerRecord::Closed {
                llm_failures,
                tool_failures,
            },
            breaker::BreakerState::Open {
                until_ms,
                cooldown_ms,
            } => BreakerRecord::Open {
                until_ms,
                cooldown_ms,
            },
            breaker::BreakerState::HalfOpen { cooldown_ms, probe } => BreakerRecord::HalfOpen {
                cooldown_ms,
                probe: probe.map(|p| p.0),
            },
        }
    }
}

impl From<&usage::DaySpend> for DaySpendRecord {
    fn from(spend: &usage::DaySpend) -> Self {
        DaySpendRecord {
            day: spend.day.map(|day| day.0),
            usage: (&spend.usage).into(),
        }
    }
}

impl From<&tenant::Tenant> for TenantRecord {
    fn from(tenant: &tenant::Tenant) -> Self {
        let tenant::Tenant {
            name,
            operator_token_hash,
            configured_token_hash,
            daily_budget_usd,
            day_spend,
        } = tenant;
        TenantRecord {
            name: name.clone(),
            operator_token_hash: operator_token_hash.to_hex(),
            configured_token_hash: configured_token_hash.to_hex(),
            daily_budget_micro_usd: daily_budget_usd.map(|b| b.0),
            day_spend: day_spend.into(),
        }
    }
}

// ---- stored -> engine (checked: a value or a state the engine cannot hold is refused) ----

fn restored(error: RestoreError) -> Problem {
    Problem::new(error.field, error.message)
}

/// Where a snapshot agent record's spec is.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredSpec<S> {
    /// In the record itself: every snapshot before format 6, and from format 6 an agent whose
    /// spec the writer did not share ([`crate::store::record::SnapshotSpecs`]).
    Inline(S),
    /// Spec number `n` of the snapshot's spec table (format 6), named after the agent.
    Shared(u32),
}

impl AgentRecord {
    /// The engine's agent state, or the first field that cannot be one. A record alone: one
    /// whose spec is in its snapshot's spec table is refused (decode it with
    /// [`crate::store::record::AgentDecoder`] and that table).
    pub fn into_engine(self) -> Result<agent_state::AgentState, Problem> {
        self.into_engine_with(|stored, _| match stored {
            StoredSpec::Inline(spec) => spec
                .into_engine()
                .map(std::sync::Arc::new)
                .map_err(|(field, message)| Problem::new(field, message)),
            StoredSpec::Shared(number) => Err(Problem::new(
                "spec_ref",
                format!("spec {number} of the snapshot's spec table, which a lone record lacks"),
            )),
        })
    }
}

impl<S> AgentRecord<S> {
    /// The engine's agent state, its spec made by `spec` from where the record's is and the
    /// agent's name, or the first field that cannot be one.
    pub fn into_engine_with(
        self,
        spec: impl FnOnce(StoredSpec<S>, &str) -> Result<std::sync::Arc<agent::AgentSpec>, Problem>,
    ) -> Result<agent_state::AgentState, Problem> {
        let id = AgentId(self.id);
        let stored = match (self.spec, self.spec_ref) {
            (Some(inline), None) => StoredSpec::Inline(inline),
            (None, Some(number)) => StoredSpec::Shared(number),
            (Some(_), Some(_)) => {
                return Err(Problem::new(
                    "spec_ref",
                    "the record holds a spec and refers to one; it may do one only",
                ))
            }
            (None, None) => {
                return Err(Problem::new(
                    "spec",
                    "missing: the record neither holds a spec nor refers to one",
                ))
            }
        };
        let spec = spec(stored, &self.name)?;
        let cooldown = self
            .cooldown
            .map(|c| {
                instant("cooldown.from_ms", c.from_ms)?;
                // Why no instant check on `until_ms`: it is the end plus up to a day, and may
                // pass the last instant when the end is near it.
                if c.until_ms < c.from_ms {
                    return Err(Problem::new(
                        "cooldown.until_ms",
                        format!("{} is before from_ms {}", c.until_ms, c.from_ms),
                    ));
                }
                Ok(agent::Cooldown {
                    from_ms: c.from_ms,
                    until_ms: c.until_ms,
                })
            })
            .transpose()?;
        let agent = agent::Agent {
            id,
            tenant: self.tenant,
            name: self.name,
            spec,
            status: self.status.into(),
            token_hash: token_hash("token_hash", &self.token_hash)?,
            created_at_ms: instant("created_at_ms", self.created_at_ms)?,
            next_fire_at_ms: optional_instant("next_fire_at_ms", self.next_fire_at_ms)?,
            timer_fires: self.timer_fires,
            last_due_at_ms: optional_instant("last_due_at_ms", self.last_due_at_ms)?,
            runs_started: self.runs_started,
            paused_until_ms: optional_instant("paused_until_ms", self.paused_until_ms)?,
            paused_by: self.paused_by.map(Into::into),
            day_count: DayCount {
                day: self.day_count.day.map(LocalDay),
                started: self.day_count.started,
            },
            day_spend: self.day_spend.into(),
            usage_total: self.usage_total.into(),
            breaker: self.breaker.into_engine()?,
            liveness: liveness::Liveness {
                status: self.liveness.status.into(),
                since_ms: optional_instant("liveness.since_ms", self.liveness.since_ms)?,
            },
            last_input_at_ms: optional_instant("last_input_at_ms", self.last_input_at_ms)?,
            next_idle_at_ms: optional_instant("next_idle_at_ms", self.next_idle_at_ms)?,
            cooldown,
            error: self
                .error
                .map(|e| {
                    Ok::<_, Problem>(agent_error::AgentError {
                        reason: e.reason.into(),
                        since_ms: instant("error.since_ms", e.since_ms)?,
                    })
                })
                .transpose()?,
            error_counts: agent_error::ErrorCounts {
                restart_ends: self.error_counts.restart_ends,
                openings_at_cap: self.error_counts.openings_at_cap,
            },
        };
        let live = self
            .live
            .into_iter()
            .enumerate()
            .map(|(i, run)| run.into_engine(id, &format!("live[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let finished = self
            .finished
            .into_iter()
            .enumerate()
            .map(|(i, held)| {
                Ok((
                    held.seq,
                    held.run.into_engine(id, &format!("finished[{i}]"))?,
                ))
            })
            .collect::<Result<Vec<_>, Problem>>()?;
        let last_finished = match self.last_finished {
            None => None,
            Some(LastFinishedRecord::Whole(run)) => Some(run.into_engine(id, "last_finished")?),
            Some(LastFinishedRecord::Held { run, payload }) => {
                let held = finished
                    .iter()
                    .rev()
                    .find(|(_, held)| held.id == RunId(run))
                    .ok_or_else(|| {
                        Problem::new(
                            "last_finished",
                            format!("names run {run}, which is not among the finished runs"),
                        )
                    })?;
                Some(run::Run {
                    payload,
                    ..held.1.clone()
                })
            }
        };
        let mut keys = BTreeMap::new();
        for (i, key) in self.keys.into_iter().enumerate() {
            let name = key.key.clone();
            let record = key.into_engine(id, &format!("keys[{i}]"))?;
            if keys.insert(name.clone(), record).is_some() {
                return Err(Problem::new(
                    "keys",
                    format!("idempotency key {name:?} is held twice"),
                ));
            }
        }
        let sessions = self
            .sessions
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                Ok(TaskSession {
                    updated_at_ms: instant(
                        &format!("sessions[{i}].updated_at_ms"),
                        s.updated_at_ms,
                    )?,
                    task_key: s.task_key,
                    session_id: s.session_id,
                    run: RunId(s.run),
                })
            })
            .collect::<Result<Vec<_>, Problem>>()?;
        let history = History::restore(
            self.history
                .into_iter()
                .map(|message| history::HistoryMessage {
                    role: message.role.into(),
                    text: message.text,
                })
                .collect(),
        );
        let heartbeats = self
            .heartbeats
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                h.into_engine(id, &format!("heartbeats[{i}]"))
            })
            .collect::<Result<Vec<_>, Problem>>()?;
        let coordinator = Coordinator::restore(agent, live, last_finished).map_err(restored)?;
        agent_state::AgentState::restore(
            coordinator,
            finished,
            keys,
            instant("keys_clock_ms", self.keys_clock_ms)?,
            history,
            Sessions::restore(sessions).map_err(restored)?,
            Heartbeats::restore(heartbeats).map_err(restored)?,
        )
        .map_err(restored)
    }
}

impl BreakerRecord {
    fn into_engine(self) -> Result<breaker::BreakerState, Problem> {
        Ok(match self {
            BreakerRecord::Closed {
                llm_failures,
                tool_failures,
            } => breaker::BreakerState::Closed {
                llm_failures,
                tool_failures,
            },
            BreakerRecord::Open {
                until_ms,
                cooldown_ms,
            } => breaker::BreakerState::Open {
                until_ms: instant("breaker.open.until_ms", until_ms)?,
                cooldown_ms,
            },
            BreakerRecord::HalfOpen { cooldown_ms, probe } => breaker::BreakerState::HalfOpen {
                cooldown_ms,
                probe: probe.map(RunId),
            },
        })
    }
}

impl From<DaySpendRecord> for usage::DaySpend {
    fn from(spend: DaySpendRecord) -> Self {
        usage::DaySpend {
            day: spend.day.map(LocalDay),
            usage: spend.usage.into(),
        }
    }
}

impl RunRecord {
    /// The engine's run of agent `agent`; `at` is where the record sits, for errors.
    fn into_engine(self, agent: AgentId, at: &str) -> Result<run::Run, Problem> {
        let field = |name: &str| format!("{at}.{name}");
        Ok(run::Run {
            id: RunId(self.id),
            agent,
            source: self.source.into(),
            priority: self.priority.unwrap_or(pinned_priority(self.source)).into(),
            task_key: self.task_key,
            reason: self.reason,
            payload: self.payload,
            wakeup: WakeupId(self.wakeup),
            coalesced_count: self.coalesced_count,
            retry_of: self.retry_of.map(RunId),
            status: self.status.into(),
            queued_at_ms: instant(&field("queued_at_ms"), self.queued_at_ms)?,
            started_at_ms: optional_instant(&field("started_at_ms"), self.started_at_ms)?,
            finished_at_ms: optional_instant(&field("finished_at_ms"), self.finished_at_ms)?,
            run_number: self.run_number,
            detail: self.detail,
            stop_reason: self.stop_reason.map(Into::into),
            usage: self.usage.into(),
            report: self.report.map(|report| Box::new((*report).into())),
            error_class: self.error_class.map(Into::into),
            process_group: self.process_group,
        })
    }
}

impl KeyRecord {
    fn into_engine(self, agent: AgentId, at: &str) -> Result<wakeup::WakeupRecord, Problem> {
        Ok(wakeup::WakeupRecord {
            wakeup: WakeupId(self.wakeup),
            agent,
            source: self.source.into(),
            reason: self.reason,
            task_key: self.task_key,
            idempotency_key: Some(self.key),
            at_ms: instant(&format!("{at}.at_ms"), self.at_ms)?,
            outcome: match self.outcome {
                OutcomeRecord::Queued { run } => wakeup::WakeupOutcome::Queued { run: RunId(run) },
                OutcomeRecord::Coalesced {
                    run,
                    coalesced_count,
                } => wakeup::WakeupOutcome::Coalesced {
                    run: RunId(run),
                    coalesced_count,
                },
                OutcomeRecord::Refused { refusal } => wakeup::WakeupOutcome::Refused {
                    refusal: refusal.into(),
                },
            },
        })
    }
}

impl TenantRecord {
    /// The engine's tenant.
    pub fn into_engine(self) -> Result<tenant::Tenant, Problem> {
        Ok(tenant::Tenant {
            name: self.name,
            operator_token_hash: token_hash("operator_token_hash", &self.operator_token_hash)?,
            configured_token_hash: token_hash(
                "configured_token_hash",
                &self.configured_token_hash,
            )?,
            daily_budget_usd: self.daily_budget_micro_usd.map(MicroUsd),
            day_spend: self.day_spend.into(),
        })
    }
}
