//! `error_state_as_documented` (24): the agent error state, restated from docs/api.md ("The
//! agent error state") rather than taken from the runtime.
//!
//! - An agent enters `error` (`agent_errored`) only when a count reached its documented limit,
//!   with that count's reason and number: 3 started runs in a row ended `control_plane_restart`
//!   (`restart_loop`), or 3 breaker openings in a row at `breaker.cooldown_ms_max`
//!   (`breaker_at_cap`).
//! - Once a count reached its limit, the agent starts, queues and re-queues nothing before its
//!   `agent_errored` (which the same decision carries).
//! - In `error`, until `agent_error_reset`: no run starts, no wakeup is queued or coalesced, and
//!   a refusal says `agent_error` (or `terminated`); `agent_error` is never given outside it.

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::StopReason;
use vigil::engine::wakeup::RefusalReason;

use super::{violation, Violation};

/// Started runs in a row ended by a control-plane restart that put an agent in `error`.
const RESTART_ENDS_TO_ERROR: u32 = 3;
/// Breaker openings in a row at the longest cooldown that put an agent in `error`.
const OPENINGS_AT_CAP_TO_ERROR: u32 = 3;
const INVARIANT: &str = "error_state_as_documented";

#[derive(Debug, Default, Clone)]
struct AgentCounts {
    cooldown_ms_max: u64,
    running: Option<u64>,
    restart_ends: u32,
    openings_at_cap: u32,
    in_error: bool,
    terminated: bool,
}

impl AgentCounts {
    /// The reason and count a limit was reached with, if one was.
    fn due(&self) -> Option<(&'static str, u32)> {
        if self.restart_ends >= RESTART_ENDS_TO_ERROR {
            Some(("restart_loop", self.restart_ends))
        } else if self.openings_at_cap >= OPENINGS_AT_CAP_TO_ERROR {
            Some(("breaker_at_cap", self.openings_at_cap))
        } else {
            None
        }
    }
}

#[derive(Debug, Default)]
pub struct AgentErrorOracle {
    agents: BTreeMap<u64, AgentCounts>,
    /// Agents that entered the error state, and refusals judged while in it (coverage).
    entered: u64,
    refused_in_error: u64,
}

impl AgentErrorOracle {
    /// Times an agent entered the error state.
    pub fn entered(&self) -> u64 {
        self.entered
    }

    /// Wakeups refused while their agent was in the error state.
    pub fn refused_in_error(&self) -> u64 {
        self.refused_in_error
    }

    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        let Some(agent) = event.kind.agent() else {
            return Ok(());
        };
        if let EventKind::AgentCreated { spec, .. } = &event.kind {
            let counts = AgentCounts {
                cooldown_ms_max: spec.breaker.cooldown_ms_max,
                ..AgentCounts::default()
            };
            self.agents.insert(agent.0, counts);
            return Ok(());
        }
        let Some(a) = self.agents.get_mut(&agent.0) else {
            return Ok(());
        };
        if let EventKind::AgentUpdated { spec, .. } = &event.kind {
            a.cooldown_ms_max = spec.breaker.cooldown_ms_max;
            return Ok(());
        }
        let what = match &event.kind {
            EventKind::RunStarted { run, .. } => {
                a.running = Some(run.0);
                Some(format!("started run {run}"))
            }
            EventKind::WakeupQueued { wakeup, .. } | EventKind::WakeupCoalesced { wakeup, .. } => {
                Some(format!("accepted wakeup {wakeup}"))
            }
            EventKind::RunRequeued { run, .. } => Some(format!("re-queued run {run}")),
            _ => None,
        };
        if let Some(what) = what {
            let state = if a.in_error {
                "while in the error state".to_string()
            } else if let Some((reason, count)) = a.due() {
                format!(
                    "after {count} ({reason}) reached its limit, before entering the error state"
                )
            } else {
                return Ok(());
            };
            return violation(INVARIANT, format!("agent {agent} {what} {state}"));
        }
        match &event.kind {
            EventKind::RunFinished {
                run, stop_reason, ..
            } if a.running == Some(run.0) => {
                a.running = None;
                a.restart_ends = match stop_reason {
                    Some(StopReason::ControlPlaneRestart) => a.restart_ends + 1,
                    _ => 0,
                };
            }
            EventKind::BreakerOpened { cooldown_ms, .. } if *cooldown_ms >= a.cooldown_ms_max => {
                a.openings_at_cap += 1;
            }
            EventKind::BreakerClosed { .. } | EventKind::BreakerReset { .. } => {
                a.openings_at_cap = 0;
            }
            EventKind::AgentTerminated { .. } => a.terminated = true,
            EventKind::AgentErrorReset { .. } => a.in_error = false,
            EventKind::AgentErrored { reason, count, .. } => {
                let expected = a.due();
                let got = (reason.as_str(), *count);
                if a.in_error || expected != Some(got) {
                    return violation(
                        INVARIANT,
                        format!(
                            "agent {agent} entered the error state as {got:?}{}; the documented counts say {expected:?} (restart ends {}, openings at the cap {})",
                            if a.in_error { " while already in it" } else { "" },
                            a.restart_ends,
                            a.openings_at_cap
                        ),
                    );
                }
                a.in_error = true;
                a.restart_ends = 0;
                a.openings_at_cap = 0;
                self.entered += 1;
            }
            EventKind::WakeupRefused {
                wakeup, refusal, ..
            } => {
                let expected = a.in_error && !a.terminated;
                let is_error = *refusal == RefusalReason::AgentError;
                if expected && !is_error && *refusal != RefusalReason::Terminated {
                    return violation(
                        INVARIANT,
                        format!("wakeup {wakeup} of agent {agent}, which is in the error state, was refused {refusal:?}, not agent_error"),
                    );
                }
                if is_error && !expected {
                    return violation(
                        INVARIANT,
                        format!("wakeup {wakeup} of agent {agent} was refused agent_error, though the agent is not in the error state"),
                    );
                }
                self.refused_in_error += u64::from(is_error);
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::agent_error::AgentErrorReason;
    use vigil::engine::run::{RunId, RunStatus};
    use vigil::engine::tenant::TokenHash;
    use vigil::engine::wakeup::{WakeupId, WakeupSource};

    use super::super::test_events::{event, run_started};
    use super::*;

    fn created() -> Event {
        event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "a".into(),
                spec: Box::new(AgentSpec::with_interval("a", None)),
                token_hash: TokenHash::of("a"),
                first_fire_at_ms: None,
            },
        )
    }

    fn restart_end(run: u64) -> Event {
        event(
            1,
            EventKind::RunFinished {
                run: RunId(run),
                agent: AgentId(1),
                status: RunStatus::Failed,
                detail: "control_plane_restart".into(),
                cause: None,
                stop_reason: Some(StopReason::ControlPlaneRestart),
                report: None,
                error_class: None,
            },
        )
    }

    fn errored(count: u32) -> Event {
        event(
            2,
            EventKind::AgentErrored {
                agent: AgentId(1),
                reason: AgentErrorReason::RestartLoop,
                count,
            },
        )
    }

    fn refused(refusal: RefusalReason) -> Event {
        event(
            3,
            EventKind::WakeupRefused {
                wakeup: WakeupId(9),
                agent: AgentId(1),
                source: WakeupSource::OnDemand,
                requested_by: None,
                trigger_detail: None,
                reason: String::new(),
                task_key: None,
                idempotency_key: None,
                refusal,
            },
        )
    }

    /// Three restart ends, then `next`.
    fn after_a_loop(next: &[Event]) -> Result<(), Violation> {
        let mut oracle = AgentErrorOracle::default();
        oracle.committed(&created())?;
        for run in 1..=3 {
            oracle.committed(&run_started(1, run, 1))?;
            oracle.committed(&restart_end(run))?;
        }
        next.iter().try_for_each(|e| oracle.committed(e))
    }

    #[test]
    fn the_documented_loop_enters_the_error_state_and_starts_nothing_after() {
        assert!(after_a_loop(&[errored(3), refused(RefusalReason::AgentError)]).is_ok());
        // Entering with the wrong count, or not entering and starting a run, is caught.
        assert!(after_a_loop(&[errored(2)]).is_err());
        assert!(after_a_loop(&[run_started(5, 4, 1)]).is_err());
        // In error: a start, or a refusal for another reason, is caught; after a reset, fine.
        assert!(after_a_loop(&[errored(3), run_started(5, 4, 1)]).is_err());
        assert!(after_a_loop(&[errored(3), refused(RefusalReason::QueueFull)]).is_err());
        let reset = event(4, EventKind::AgentErrorReset { agent: AgentId(1) });
        assert!(after_a_loop(&[errored(3), reset, run_started(5, 4, 1)]).is_ok());
    }

    #[test]
    fn entering_early_or_refusing_agent_error_outside_it_is_caught() {
        let mut oracle = AgentErrorOracle::default();
        oracle.committed(&created()).unwrap();
        oracle.committed(&run_started(1, 1, 1)).unwrap();
        oracle.committed(&restart_end(1)).unwrap();
        assert!(oracle.committed(&errored(1)).is_err());
        let mut oracle = AgentErrorOracle::default();
        oracle.committed(&created()).unwrap();
        assert!(oracle
            .committed(&refused(RefusalReason::AgentError))
            .is_err());
    }
}
