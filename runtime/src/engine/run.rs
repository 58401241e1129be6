//! Runs: one execution of an agent, born from one or more wakeups.
//!
//! Lifecycle: `queued → running → succeeded | failed | cancelled | timed_out`, and
//! `queued → cancelled`. A run reaches exactly one terminal state (invariant 5).

use serde::{Deserialize, Serialize};

use super::agent::AgentId;
use super::breaker::FailureCause;
use super::history::HistoryMessage;
use super::usage::Usage;
use super::wakeup::{Priority, WakeupId, WakeupSource};

/// Finished runs each agent keeps in memory for the API; older ones live on in the event log.
pub const FINISHED_RUNS_KEPT_PER_AGENT: usize = 100;
/// Longest `detail` of a finished run.
pub const DETAIL_CHARS_MAX: usize = 1_000;
/// The detail of runs that were running when the control plane stopped.
pub const CONTROL_PLANE_RESTART: &str = "control_plane_restart";

/// Identifies a run within one runtime, in creation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(transparent)]
pub struct RunId(pub u64);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a run is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
}

impl RunStatus {
    /// Whether the run is over.
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }

    /// The status's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::TimedOut => "timed_out",
        }
    }
}

/// Why a run stopped, typed: control flow and the oracle read this, never the detail text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model ended its turn (or a non-LLM adapter finished its work).
    EndTurn,
    /// The agent called `pause_heartbeats`: the run succeeded and the pause is in force.
    PauseHeartbeats,
    /// The loop made `max_iterations` model calls without the model ending its turn.
    MaxIterations,
    /// The model asked for more than `tool_calls_max` tool calls in one wakeup.
    ToolCap,
    /// The agent's (or its tenant's) daily budget was spent before the next model call.
    Budget,
    /// The model call failed: rate limit, 5xx, refusal, timeout, unreachable, malformed.
    LlmError,
    /// A tool failed and the adapter could not go on (non-LLM adapters' failures).
    ToolError,
    /// A timer or idle wakeup answered `[IDLE]`: nothing to do, history left untouched.
    Ghost,
    /// Cancelled: by an operator, a pause, termination, the breaker or the daily cap.
    Cancelled,
    /// Still running after `limits.run_timeout_ms`.
    TimedOut,
    /// The node stopped while the run was running.
    ControlPlaneRestart,
}

impl StopReason {
    /// The reason's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::PauseHeartbeats => "pause_heartbeats",
            StopReason::MaxIterations => "max_iterations",
            StopReason::ToolCap => "tool_cap",
            StopReason::Budget => "budget",
            StopReason::LlmError => "llm_error",
            StopReason::ToolError => "tool_error",
            StopReason::Ghost => "ghost",
            StopReason::Cancelled => "cancelled",
            StopReason::TimedOut => "timed_out",
            StopReason::ControlPlaneRestart => "control_plane_restart",
        }
    }

    /// The reason an adapter-less end implies (cancellations, timeouts, recovery), or a
    /// non-LLM adapter's: success ends its turn, a failure is the model's or a tool's.
    pub fn implied(status: RunStatus, cause: Option<FailureCause>) -> StopReason {
        match (status, cause) {
            (RunStatus::Cancelled, _) => StopReason::Cancelled,
            (RunStatus::TimedOut, _) => StopReason::TimedOut,
            (_, Some(FailureCause::Tool)) => StopReason::ToolError,
            (RunStatus::Failed, _) => StopReason::LlmError,
            _ => StopReason::EndTurn,
        }
    }
}

/// Why a run that did not succeed failed, as a class a dashboard or an alert can group by.
/// Recorded on every unsuccessful `run_finished` (the adapter's word, or what the stop implies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The adapter's program (a coding CLI, a process's command) is not installed.
    AdapterNotInstalled,
    /// The child could not be started (permissions, a missing `cwd`, too many processes).
    SpawnFailed,
    /// The child exited with a nonzero status or was killed by a signal.
    ExitNonzero,
    TimedOut,
    Cancelled,
    /// The CLI refused the task's session (unknown or expired) even after one fresh retry.
    SessionInvalid,
    /// The child's or webhook's answer could not be read.
    ParseError,
    Budget,
    ControlPlaneRestart,
    /// The model call failed (the `llm` adapter).
    LlmError,
    /// A tool failed.
    ToolError,
    /// The webhook failed: unreachable, a timeout, 5xx, a refused signature, no report in time.
    WebhookError,
    /// The adapter itself failed before or while starting the work (a panic, a template that
    /// would not render).
    AdapterError,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::AdapterNotInstalled => "adapter_not_installed",
            ErrorClass::SpawnFailed => "spawn_failed",
            ErrorClass::ExitNonzero => "exit_nonzero",
            ErrorClass::TimedOut => "timed_out",
            ErrorClass::Cancelled => "cancelled",
            ErrorClass::SessionInvalid => "session_invalid",
            ErrorClass::ParseError => "parse_error",
            ErrorClass::Budget => "budget",
            ErrorClass::ControlPlaneRestart => "control_plane_restart",
            ErrorClass::LlmError => "llm_error",
            ErrorClass::ToolError => "tool_error",
            ErrorClass::WebhookError => "webhook_error",
            ErrorClass::AdapterError => "adapter_error",
        }
    }

    /// The class a stop implies when the adapter named none.
    pub fn implied(stop: StopReason) -> ErrorClass {
        match stop {
            StopReason::TimedOut => ErrorClass::TimedOut,
            StopReason::Cancelled => ErrorClass::Cancelled,
            StopReason::ControlPlaneRestart => ErrorClass::ControlPlaneRestart,
            StopReason::Budget => ErrorClass::Budget,
            StopReason::LlmError => ErrorClass::LlmError,
            StopReason::ToolError => ErrorClass::ToolError,
            _ => ErrorClass::AdapterError,
        }
    }
}

/// What a run says about its task's CLI session (applied with the run's end, so a session id
/// is durable exactly when the run that produced it ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SessionChange {
    /// The run worked in this session; the next run on the task resumes it.
    Set { session_id: String },
    /// The CLI refused the stored session; it is forgotten.
    Clear,
}

/// What an agent loop adds to a run's end beyond its status: kept with the run and applied in
/// the same event that ends it, so none of it can be durable without the end or vice versa.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// The agent asked to rest this many minutes (already clamped); the pause is committed
    /// with the run's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_minutes: Option<u64>,
    /// Messages the run adds to the agent's history (none for a ghost run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history_append: Vec<HistoryMessage>,
    /// The start of the model's final answer (at most 32 KiB; `excerpt_truncated` says if cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_excerpt: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub excerpt_truncated: bool,
    /// Tool calls the run made.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_calls: u64,
    /// A coding CLI's session for the run's task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionChange>,
    /// A child's exit: its code, or the signal that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ChildExit>,
}

/// How a run's child process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildExit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How a run ended: a terminal status, a short explanation, for a failure the kind the
/// circuit breaker counts, why it stopped, and what an agent loop adds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEnd {
    pub status: RunStatus,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub cause: Option<FailureCause>,
    /// Set by adapters that know better than [`StopReason::implied`].
    #[serde(default)]
    pub stop_reason: Option<StopReason>,
    #[serde(default)]
    pub report: Option<Box<RunReport>>,
    /// Set by adapters that know better than [`ErrorClass::implied`].
    #[serde(default)]
    pub error_class: Option<ErrorClass>,
    /// The spend of the run's last model call, not yet recorded: its `usage_recorded` is
    /// committed with the `run_finished`, in one commit (ADR 0010). Calls followed by another
    /// call are recorded at once, so the budget is checked before the next.
    #[serde(default)]
    pub last_call: Option<Usage>,
}

impl RunEnd {
    /// An end with `status` (which must be terminal) and `detail`, cut to `DETAIL_CHARS_MAX`.
    pub fn new(status: RunStatus, detail: impl Into<String>) -> Self {
        assert!(status.is_terminal(), "a run cannot end {status:?}");
        let detail: String = detail.into();
        RunEnd {
            status,
            detail: detail.chars().take(DETAIL_CHARS_MAX).collect(),
            cause: None,
            stop_reason: None,
            report: None,
            error_class: None,
            last_call: None,
        }
    }

    /// The same end, failed of class `class`.
    pub fn classed(self, class: ErrorClass) -> Self {
        RunEnd {
            error_class: Some(class),
            ..self
        }
    }

    /// The class of an unsuccessful end (none for a success).
    pub fn error_class(&self) -> Option<ErrorClass> {
        if self.status == RunStatus::Succeeded {
            return None;
        }
        Some(
            self.error_class
                .unwrap_or_else(|| ErrorClass::implied(self.stop_reason())),
        )
    }

    /// The same end, stopped for `reason`.
    pub fn stopped(self, reason: StopReason) -> Self {
        RunEnd {
            stop_reason: Some(reason),
            ..self
        }
    }

    /// The same end, with what the agent loop reports.
    pub fn with_report(self, report: RunReport) -> Self {
        RunEnd {
            report: Some(Box::new(report)),
            ..self
        }
    }

    /// Why the run stopped: the adapter's word, or what the status implies.
    pub fn stop_reason(&self) -> StopReason {
        self.stop_reason
            .unwrap_or_else(|| StopReason::implied(self.status, self.cause))
    }

    /// The same end, counted by the breaker as a failure of kind `cause`.
    pub fn caused_by(self, cause: FailureCause) -> Self {
        RunEnd {
            cause: Some(cause),
            ..self
        }
    }
}

/// A run as the engine holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub id: RunId,
    pub agent: AgentId,
    /// Source of the wakeup that created the run.
    pub source: WakeupSource,
    /// Best priority class among its wakeups.
    pub priority: Priority,
    pub task_key: Option<String>,
    /// Reason of the latest wakeup it absorbed.
    pub reason: String,
    /// Payload of the latest wakeup it absorbed.
    pub payload: serde_json::Value,
    /// The wakeup that created it.
    pub wakeup: WakeupId,
    /// Wakeups that coalesced onto it after the first.
    pub coalesced_count: u64,
    /// The run this one re-queues after a control-plane restart (each run is re-queued once).
    pub retry_of: Option<RunId>,
    pub status: RunStatus,
    pub queued_at_ms: u64,
    pub started_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
    /// The agent's run number (its n-th start), once started.
    pub run_number: Option<u64>,
    pub detail: String,
    /// Why it stopped, once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Tokens and money its model calls used so far.
    #[serde(default)]
    pub usage: Usage,
    /// The agent loop's report, once finished (history messages dropped: the history has them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Box<RunReport>>,
    /// Why it failed, for a run that did not succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<ErrorClass>,
    /// The process group of its child, while one may be alive (recovery kills it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_group: Option<u32>,
}
