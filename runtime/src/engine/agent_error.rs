//! The agent error state: an agent whose runs keep dying with the control plane, or whose
//! breaker keeps reopening at its longest cooldown, stops taking wakeups until an operator looks
//! (`POST /v1/agents/{id}/error/reset`). Without it a crash loop retries forever, unnoticed.
//!
//! Counted by `Coordinator::apply` from events only, so recovery rebuilds the counts exactly:
//! - a run that had started and ends `control_plane_restart` adds one to `restart_ends`; any
//!   other end of a started run sets it back to 0 (a queued run cancelled never ran: no change);
//! - `breaker_opened` at the policy's `cooldown_ms_max` adds one to `openings_at_cap`; the
//!   breaker closing (a probe succeeded, or an operator reset it) sets it back to 0.
//! Entering the error state sets both back to 0, so a reset agent gets the full allowance again.

use serde::{Deserialize, Serialize};

/// Runs in a row ended by a control-plane restart that put the agent in `error`. Three: one
/// restart mid-run is routine, two is bad luck, three in a row with no run in between finishing
/// is a loop (the runtime itself, or this agent's runs, bring the node down).
pub const RESTART_ENDS_TO_ERROR: u32 = 3;
/// Breaker openings in a row at its longest cooldown (`breaker.cooldown_ms_max`) that put the
/// agent in `error`. With the default policy that is three failed probes an hour apart after the
/// doubling reached its cap: the failure is not passing by itself.
pub const OPENINGS_AT_CAP_TO_ERROR: u32 = 3;

/// Why an agent entered `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentErrorReason {
    /// `RESTART_ENDS_TO_ERROR` runs in a row ended by `control_plane_restart`.
    RestartLoop,
    /// The breaker opened at its longest cooldown `OPENINGS_AT_CAP_TO_ERROR` times in a row.
    BreakerAtCap,
}

impl AgentErrorReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentErrorReason::RestartLoop => "restart_loop",
            AgentErrorReason::BreakerAtCap => "breaker_at_cap",
        }
    }
}

/// An agent in the error state: why, and since when (wall ms of the decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentError {
    pub reason: AgentErrorReason,
    pub since_ms: u64,
}

/// The counts that lead to the error state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    /// Started runs in a row that ended `control_plane_restart`.
    pub restart_ends: u32,
    /// Breaker openings in a row at the longest cooldown.
    pub openings_at_cap: u32,
}

impl ErrorCounts {
    /// The reason to enter `error` now, if a count reached its limit.
    pub fn reached(&self) -> Option<AgentErrorReason> {
        if self.restart_ends >= RESTART_ENDS_TO_ERROR {
            Some(AgentErrorReason::RestartLoop)
        } else if self.openings_at_cap >= OPENINGS_AT_CAP_TO_ERROR {
            Some(AgentErrorReason::BreakerAtCap)
        } else {
            None
        }
    }

    /// The count `reason` stands on.
    pub fn count_of(&self, reason: AgentErrorReason) -> u32 {
        match reason {
            AgentErrorReason::RestartLoop => self.restart_ends,
            AgentErrorReason::BreakerAtCap => self.openings_at_cap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_count_reaches_its_limit_exactly() {
        let mut counts = ErrorCounts::default();
        counts.restart_ends = RESTART_ENDS_TO_ERROR - 1;
        counts.openings_at_cap = OPENINGS_AT_CAP_TO_ERROR - 1;
        assert_eq!(counts.reached(), None);
        counts.restart_ends += 1;
        assert_eq!(counts.reached(), Some(AgentErrorReason::RestartLoop));
        assert_eq!(
            counts.count_of(AgentErrorReason::RestartLoop),
            RESTART_ENDS_TO_ERROR
        );
        counts.restart_ends = 0;
        counts.openings_at_cap += 1;
        assert_eq!(counts.reached(), Some(AgentErrorReason::BreakerAtCap));
    }
}
