//! Runs: one execution of an agent, born from one or more wakeups.
//!
//! Lifecycle: `queued → running → succeeded | failed | cancelled | timed_out`, and
//! `queued → cancelled`. A run reaches exactly one terminal state (invariant 5).

use serde::{Deserialize, Serialize};

use super::agent::AgentId;
use super::breaker::FailureCause;
use super::wakeup::{Priority, WakeupId, WakeupSource};

/// Finished runs each agent keeps in memory for the API; older ones live on in the event log.
pub const FINISHED_RUNS_KEPT_PER_AGENT: usize = 100;
/// Longest `detail` of a finished run.
pub const DETAIL_CHARS_MAX: usize = 1_000;
/// The detail of runs that were running when the control plane stopped.
pub const CONTROL_PLANE_RESTART: &str = "control_plane_restart";

/// Identifies a run within one runtime, in creation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub u64);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a run is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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

/// How a run ended: a terminal status, a short explanation, and for a failure the kind the
/// circuit breaker counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEnd {
    pub status: RunStatus,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub cause: Option<FailureCause>,
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
        }
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
}
