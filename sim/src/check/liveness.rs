//! Invariant 10, judged from committed events and the workload's acknowledged pulses:
//! - `pulsing_agent_not_offline`: no agent is marked offline while a pulse it sent within its
//!   bound had already been answered (the node held that pulse, so the silence it saw was shorter
//!   than the bound). The bound is the fixed threshold (`pulse_interval_ms * offline_after_misses`)
//!   for the fixed detector, one pulse interval for phi-accrual (its floor);
//! - `answered_pulse_means_online`: a pulse's 2xx answer comes after the agent is online in the
//!   log (the node writes `agent_online` before it answers);
//! - `silent_agent_goes_offline`: in the quiet phase, an online agent that stopped pulsing is
//!   marked offline within its threshold plus the sweep interval (plus the network's slack),
//!   counted from its last pulse, the node's last start or the start of the quiet phase,
//!   whichever is last. A terminated agent is no longer watched (docs/api.md, pulses): its
//!   liveness stays as its termination found it.

use std::collections::{BTreeMap, VecDeque};

use vigil::engine::event::{Event, EventKind};
use vigil::engine::liveness::Detector;

use super::documented::{fixed_threshold_ms, LIVENESS_SWEEP_MS};
use super::{violation, Violation};

/// A pulse's answer and the commit it follows cross the simulated network and the node's
/// scheduler; this covers both (the simulated network's latency is milliseconds).
pub const PULSE_SLACK_MS: u64 = 1_000;
/// Answered pulses remembered per agent (only the recent ones can matter to a bound).
const PULSES_KEPT: usize = 64;

#[derive(Debug, Clone, Default)]
struct Watched {
    /// An offline mark with an answered pulse sent within this long before it is a violation.
    floor_ms: u64,
    /// The fixed threshold: the ceiling of both detectors.
    threshold_ms: u64,
    online: bool,
    /// Terminated: no longer watched.
    terminated: bool,
    /// When the agent last came online: a pulse reached the node then.
    online_since_ms: u64,
    /// When the agent was last marked offline.
    offline_since_ms: Option<u64>,
    /// Answered pulses as (sent, answered) virtual ms, newest last.
    pulses: VecDeque<(u64, u64)>,
}

/// What the oracle has seen of agents' pulses and liveness transitions.
#[derive(Debug, Default)]
pub struct LivenessOracle {
    agents: BTreeMap<u64, Watched>,
    /// Offline marks seen, for coverage reports.
    offline_marks: u64,
    /// The last `check_silence` that passed, as (`t_ms`, `since_ms`). Within one virtual
    /// instant nothing the oracle learns brings a deadline earlier (a pulse, an agent coming
    /// online or going offline, a later `since_ms` all push it later or remove it), so a
    /// passing check stays passed until time moves: a batch of 75 pulses is judged once, not
    /// 75 times over every agent.
    silence_passed: Option<(u64, u64)>,
}

impl LivenessOracle {
    /// Checks one durable event, committed at virtual `t_ms`.
    pub fn committed(&mut self, t_ms: u64, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. } => {
                let policy = &spec.liveness;
                let floor_ms = match policy.detector {
                    Detector::Fixed => fixed_threshold_ms(policy),
                    Detector::PhiAccrual => policy.pulse_interval_ms,
                };
                self.agents.insert(
                    agent.0,
                    Watched {
                        floor_ms,
                        threshold_ms: fixed_threshold_ms(policy),
                        ..Watched::default()
                    },
                );
            }
            EventKind::AgentUpdated { agent, spec, .. } => {
                // A new liveness policy applies from the next judgement (docs/api.md, PATCH).
                let watched = self.agents.entry(agent.0).or_default();
                let policy = &spec.liveness;
                watched.floor_ms = match policy.detector {
                    Detector::Fixed => fixed_threshold_ms(policy),
                    Detector::PhiAccrual => policy.pulse_interval_ms,
                };
                watched.threshold_ms = fixed_threshold_ms(policy);
            }
            EventKind::AgentTerminated { agent } => {
                self.agents.entry(agent.0).or_default().terminated = true;
            }
            EventKind::AgentOnline { agent, .. } => {
                let watched = self.agents.entry(agent.0).or_default();
                watched.online = true;
                watched.online_since_ms = t_ms;
            }
            EventKind::AgentOffline { agent, silent_ms, .. } => {
                let watched = self.agents.entry(agent.0).or_default();
                watched.online = false;
                watched.offline_since_ms = Some(t_ms);
                self.offline_marks += 1;
                let held =
                    watched.pulses.iter().rev().find(|(sent, answered)| {
                        *answered < t_ms && sent + watched.floor_ms > t_ms
                    });
                if let Some((sent, answered)) = held {
                    return violation(
                        "pulsing_agent_not_offline",
                        format!(
                            "agent {agent} was marked offline at {t_ms} ms (silent {silent_ms} ms, it said), but its pulse sent at {sent} ms was answered at {answered} ms, within its bound of {} ms",
                            watched.floor_ms
                        ),
                    );
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The workload got a 2xx for a pulse of `agent` sent at `sent_ms`, at virtual `t_ms`.
    pub fn answered_pulse(&mut self, t_ms: u64, agent: u64, sent_ms: u64) -> Result<(), Violation> {
        let Some(watched) = self.agents.get_mut(&agent) else {
            return violation(
                "answered_pulse_means_online",
                format!("a pulse of agent {agent}, never created, was answered"),
            );
        };
        // The node answers after `agent_online` is durable; the answer may then travel slowly
        // enough for the agent to go silent and offline again meanwhile, but it was online at
        // some instant after the pulse was sent.
        let online_since_sent = watched.online || watched.offline_since_ms >= Some(sent_ms);
        if !online_since_sent {
            return violation(
                "answered_pulse_means_online",
                format!("a pulse of agent {agent} sent at {sent_ms} ms was answered at {t_ms} ms, but the log does not show it online at any time since"),
            );
        }
        watched.pulses.push_back((sent_ms, t_ms));
        if watched.pulses.len() > PULSES_KEPT {
            watched.pulses.pop_front();
        }
        Ok(())
    }

    /// In the quiet phase: every online agent silent for longer than its threshold plus the
    /// sweep interval must have been marked offline by `t_ms`. Silence counts from the last
    /// answered pulse's sending, the agent's coming online, or `since_ms` (the later of the
    /// quiet phase's start and the node's last start), whichever is last.
    pub fn check_silence(&mut self, t_ms: u64, since_ms: u64) -> Result<(), Violation> {
        if let Some((passed_t_ms, passed_since_ms)) = self.silence_passed {
            if passed_t_ms == t_ms && since_ms >= passed_since_ms {
                return Ok(());
            }
        }
        for (agent, watched) in &self.agents {
            if !watched.online || watched.terminated {
                continue;
            }
            let last_sent = watched.pulses.back().map_or(0, |(sent, _)| *sent);
            let from_ms = last_sent.max(watched.online_since_ms).max(since_ms);
            let deadline_ms = from_ms + watched.threshold_ms + LIVENESS_SWEEP_MS + PULSE_SLACK_MS;
            if t_ms > deadline_ms {
                return violation(
                    "silent_agent_goes_offline",
                    format!(
                        "agent {agent} has sent no pulse since {from_ms} ms, yet at {t_ms} ms it is still online (threshold {} ms, sweep {LIVENESS_SWEEP_MS} ms)",
                        watched.threshold_ms
                    ),
                );
            }
        }
        self.silence_passed = Some((t_ms, since_ms));
        Ok(())
    }

    /// How many offline marks the run made.
    pub fn offline_marks(&self) -> u64 {
        self.offline_marks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::liveness::LivenessPolicy;
    use vigil::engine::tenant::TokenHash;

    fn event(seq: u64, kind: EventKind) -> Event {
        Event {
            seq,
            at_ms: 0,
            tenant: "default".into(),
            kind,
        }
    }

    fn oracle_with(detector: Detector) -> LivenessOracle {
        let mut spec = AgentSpec::with_interval("a", None);
        spec.liveness = LivenessPolicy {
            detector,
            ..LivenessPolicy::default()
        };
        let mut oracle = LivenessOracle::default();
        oracle
            .committed(
                0,
                &event(
                    1,
                    EventKind::AgentCreated {
                        agent: AgentId(1),
                        name: "a".into(),
                        spec: Box::new(spec),
                        token_hash: TokenHash::of("t"),
                        first_fire_at_ms: None,
                    },
                ),
            )
            .unwrap();
        oracle
            .committed(
                1_000,
                &event(2, EventKind::AgentOnline { agent: AgentId(1), report: Default::default() }),
            )
            .unwrap();
        oracle
    }

    fn offline(oracle: &mut LivenessOracle, t_ms: u64) -> Result<(), Violation> {
        oracle.committed(
            t_ms,
            &event(
                3,
                EventKind::AgentOffline {
                    agent: AgentId(1),
                    silent_ms: 0,
                    report: Default::default(),
                },
            ),
        )
    }

    #[test]
    fn an_offline_mark_within_the_bound_of_an_answered_pulse_is_caught() {
        let mut oracle = oracle_with(Detector::Fixed);
        oracle.answered_pulse(10_010, 1, 10_000).unwrap();
        let caught = offline(&mut oracle, 39_000).unwrap_err();
        assert_eq!(caught.invariant, "pulsing_agent_not_offline");
        let mut oracle = oracle_with(Detector::Fixed);
        oracle.answered_pulse(10_010, 1, 10_000).unwrap();
        assert!(
            offline(&mut oracle, 40_001).is_ok(),
            "past the 30 s threshold"
        );
        // Phi-accrual's floor is one interval.
        let mut oracle = oracle_with(Detector::PhiAccrual);
        oracle.answered_pulse(10_010, 1, 10_000).unwrap();
        assert!(offline(&mut oracle, 19_000).is_err());
        let mut oracle = oracle_with(Detector::PhiAccrual);
        oracle.answered_pulse(10_010, 1, 10_000).unwrap();
        assert!(offline(&mut oracle, 25_000).is_ok());
    }

    #[test]
    fn a_pulse_answered_while_offline_must_have_found_the_agent_online_since_it_was_sent() {
        // Online when sent, offline by the time the slow answer arrives: fine.
        let mut oracle = oracle_with(Detector::Fixed);
        assert!(offline(&mut oracle, 39_000).is_ok());
        assert!(oracle.answered_pulse(39_500, 1, 38_000).is_ok());
        // Offline before it was sent and still offline when answered: the node answered a
        // pulse without bringing the agent online.
        let mut oracle = oracle_with(Detector::Fixed);
        assert!(offline(&mut oracle, 39_000).is_ok());
        let caught = oracle.answered_pulse(39_500, 1, 39_100).unwrap_err();
        assert_eq!(caught.invariant, "answered_pulse_means_online");
    }

    #[test]
    fn a_silent_online_agent_must_go_offline_in_time() {
        let mut oracle = oracle_with(Detector::Fixed);
        oracle.answered_pulse(100_010, 1, 100_000).unwrap();
        let deadline = 100_000 + 30_000 + LIVENESS_SWEEP_MS + PULSE_SLACK_MS;
        assert!(oracle.check_silence(deadline, 0).is_ok());
        let caught = oracle.check_silence(deadline + 1, 0).unwrap_err();
        assert_eq!(caught.invariant, "silent_agent_goes_offline");
        // Counted from a later restart or quiet phase start.
        assert!(oracle.check_silence(deadline + 1, 110_000).is_ok());
        offline(&mut oracle, deadline).unwrap();
        assert!(oracle.check_silence(deadline + 100_000, 0).is_ok());
    }

    #[test]
    fn a_terminated_agent_is_no_longer_watched() {
        let mut oracle = oracle_with(Detector::Fixed);
        oracle.answered_pulse(100_010, 1, 100_000).unwrap();
        let late = 100_000 + 30_000 + LIVENESS_SWEEP_MS + PULSE_SLACK_MS + 1;
        assert!(oracle.check_silence(late, 0).is_err());
        let terminated = event(3, EventKind::AgentTerminated { agent: AgentId(1) });
        oracle.committed(120_000, &terminated).unwrap();
        assert!(oracle.check_silence(late, 0).is_ok());
    }
}
