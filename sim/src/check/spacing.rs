//! Contract checks on the two chambers that run on time alone, restated from docs/api.md rather
//! than taken from the runtime (docs/invariants.md, 25 and 26):
//!
//! - `idle_spacing_as_documented` (25): an agent with `heartbeat.idle_after_ms` = d has its first
//!   idle wakeup due at its creation + d; user input makes it due at the input + d; an
//!   `idle_fired` comes no earlier than the due instant on the deciding clock (its own `at_ms`)
//!   and makes the next one due at the fire + d. An agent without the chamber never fires.
//! - `offline_threshold_as_documented` (26): an `agent_offline`'s `silent_ms` exceeds the
//!   documented threshold: `pulse_interval_ms * offline_after_misses` under the `fixed`
//!   detector, and one whole `pulse_interval_ms` under `phi_accrual` ("never before one whole
//!   interval of silence").

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};
use vigil::engine::liveness::{Detector, LivenessPolicy};

use super::{violation, Violation};

const IDLE: &str = "idle_spacing_as_documented";
const OFFLINE: &str = "offline_threshold_as_documented";

#[derive(Debug, Clone, Copy)]
struct Chambers {
    idle_after_ms: Option<u64>,
    /// When the next idle wakeup is due, by the documents.
    idle_due_ms: Option<u64>,
    /// The least silence that may make the agent offline.
    offline_after_ms: u64,
}

#[derive(Debug, Default)]
pub struct SpacingOracle {
    agents: BTreeMap<u64, Chambers>,
    /// Events judged, per check (coverage).
    judged: BTreeMap<&'static str, u64>,
}

impl SpacingOracle {
    /// How often each check had something to judge.
    pub fn judged(&self) -> &BTreeMap<&'static str, u64> {
        &self.judged
    }

    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        let at_ms = event.at_ms;
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. } => {
                let offline_after_ms = offline_after_ms(&spec.liveness);
                let idle_after_ms = spec.heartbeat.idle_after_ms;
                let chambers = Chambers {
                    idle_after_ms,
                    idle_due_ms: idle_after_ms.map(|d| at_ms.saturating_add(d)),
                    offline_after_ms,
                };
                self.agents.insert(agent.0, chambers);
            }
            EventKind::AgentTerminated { agent } => {
                if let Some(a) = self.agents.get_mut(&agent.0) {
                    a.idle_due_ms = None;
                }
            }
            EventKind::AgentUpdated { agent, spec, .. } => {
                // A new idle period restarts the chamber from the change; the liveness
                // threshold applies from the next judgement (docs/api.md, PATCH).
                if let Some(a) = self.agents.get_mut(&agent.0) {
                    if a.idle_after_ms != spec.heartbeat.idle_after_ms {
                        a.idle_after_ms = spec.heartbeat.idle_after_ms;
                        a.idle_due_ms = a.idle_after_ms.map(|d| at_ms.saturating_add(d));
                    }
                    a.offline_after_ms = offline_after_ms(&spec.liveness);
                }
            }
            EventKind::InputReceived {
                agent,
                next_idle_at_ms,
            } => {
                let Some(a) = self.agents.get_mut(&agent.0) else {
                    return Ok(());
                };
                let expected = a.idle_after_ms.map(|d| at_ms.saturating_add(d));
                a.idle_due_ms = expected;
                *self.judged.entry(IDLE).or_default() += 1;
                if *next_idle_at_ms != expected {
                    return violation(
                        IDLE,
                        format!("input for agent {agent} at {at_ms} made its idle wakeup due at {next_idle_at_ms:?}; the documents say {expected:?} (idle_after_ms {:?})", a.idle_after_ms),
                    );
                }
            }
            EventKind::IdleFired {
                agent,
                next_idle_at_ms,
            } => {
                let Some(a) = self.agents.get_mut(&agent.0) else {
                    return Ok(());
                };
                let due = a.idle_due_ms;
                let expected = a.idle_after_ms.map(|d| at_ms.saturating_add(d));
                a.idle_due_ms = expected;
                *self.judged.entry(IDLE).or_default() += 1;
                if due.is_none_or(|due| at_ms < due) {
                    return violation(
                        IDLE,
                        format!("agent {agent}'s idle chamber fired at {at_ms}, though its next idle wakeup was due at {due:?}"),
                    );
                }
                if Some(*next_idle_at_ms) != expected {
                    return violation(
                        IDLE,
                        format!("agent {agent}'s idle fire at {at_ms} made the next one due at {next_idle_at_ms}; the documents say {expected:?}"),
                    );
                }
            }
            EventKind::AgentOffline {
                agent, silent_ms, ..
            } => {
                let Some(a) = self.agents.get(&agent.0) else {
                    return Ok(());
                };
                *self.judged.entry(OFFLINE).or_default() += 1;
                if *silent_ms <= a.offline_after_ms {
                    return violation(
                        OFFLINE,
                        format!("agent {agent} was marked offline after {silent_ms} ms of silence; the documented threshold is more than {} ms", a.offline_after_ms),
                    );
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The least silence that may make an agent offline, by the documents.
fn offline_after_ms(liveness: &LivenessPolicy) -> u64 {
    match liveness.detector {
        Detector::Fixed => super::documented::fixed_threshold_ms(liveness),
        Detector::PhiAccrual => liveness.pulse_interval_ms,
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::pulse_report::PulseReport;
    use vigil::engine::tenant::TokenHash;

    use super::super::test_events::event;
    use super::*;

    const IDLE_AFTER_MS: u64 = 60_000;

    fn created(detector: Detector) -> Event {
        let mut spec = AgentSpec::with_interval("a", None);
        spec.heartbeat.idle_after_ms = Some(IDLE_AFTER_MS);
        spec.liveness.pulse_interval_ms = 1_000;
        spec.liveness.offline_after_misses = 3;
        spec.liveness.detector = detector;
        event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "a".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::of("a"),
                first_fire_at_ms: None,
            },
        )
    }

    fn idle_fired(at_ms: u64, next_idle_at_ms: u64) -> Event {
        event(
            at_ms,
            EventKind::IdleFired {
                agent: AgentId(1),
                next_idle_at_ms,
            },
        )
    }

    fn input(at_ms: u64, next_idle_at_ms: Option<u64>) -> Event {
        event(
            at_ms,
            EventKind::InputReceived {
                agent: AgentId(1),
                next_idle_at_ms,
            },
        )
    }

    fn offline(silent_ms: u64) -> Event {
        event(
            9,
            EventKind::AgentOffline {
                agent: AgentId(1),
                silent_ms,
                report: PulseReport::default(),
            },
        )
    }

    fn judge(events: &[Event]) -> Result<(), Violation> {
        let mut oracle = SpacingOracle::default();
        events.iter().try_for_each(|e| oracle.committed(e))
    }

    #[test]
    fn idle_fires_when_due_and_input_restarts_the_count() {
        let d = IDLE_AFTER_MS;
        let created = created(Detector::Fixed);
        assert!(judge(&[created.clone(), idle_fired(d, 2 * d)]).is_ok());
        assert!(judge(&[
            created.clone(),
            input(10, Some(10 + d)),
            idle_fired(10 + d, 10 + 2 * d)
        ])
        .is_ok());
        // Early, a wrong next instant, an input that does not restart the count: caught.
        let early = judge(&[created.clone(), idle_fired(d - 1, 2 * d - 1)]).unwrap_err();
        assert_eq!(early.invariant, IDLE);
        assert!(judge(&[created.clone(), idle_fired(d, 2 * d + 1)]).is_err());
        assert!(judge(&[created.clone(), input(10, Some(d))]).is_err());
        assert!(judge(&[created, input(10, Some(10 + d)), idle_fired(d, 2 * d)]).is_err());
    }

    #[test]
    fn offline_only_past_the_documented_threshold() {
        assert!(judge(&[created(Detector::Fixed), offline(3_001)]).is_ok());
        let early = judge(&[created(Detector::Fixed), offline(3_000)]).unwrap_err();
        assert_eq!(early.invariant, OFFLINE);
        assert!(judge(&[created(Detector::PhiAccrual), offline(1_001)]).is_ok());
        assert!(judge(&[created(Detector::PhiAccrual), offline(1_000)]).is_err());
    }
}
