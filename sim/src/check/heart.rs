//! The Heart's invariants, judged from committed events alone (docs/invariants.md, 2 and 3):
//! no run starts past the agent's daily cap in a local day, and no timer or idle run starts
//! while the agent's persisted pause is in force on its node's clock.

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};
use vigil::engine::wakeup::{RefusalReason, WakeupSource};

use super::documented::agents_local_day;
use super::{violation, Violation};

#[derive(Debug, Clone, Default)]
struct AgentSeen {
    time_zone: String,
    daily_cap: Option<u32>,
    /// Paused until resumed.
    paused: bool,
    /// A timed pause's end, on the node's wall clock.
    paused_until_ms: Option<u64>,
    /// The latest local day a start counted against, and the starts on it.
    /// The local day counted (days since 1970-01-01) and the runs started on it.
    day: Option<(i64, u32)>,
    breaker: Breaker,
    idle_after_ms: Option<u64>,
    /// When the idle chamber may fire next, on the node's wall clock.
    idle_due_ms: Option<u64>,
}

/// The breaker as the events describe it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Breaker {
    #[default]
    Closed,
    Open,
    /// Half-open, with its one probe once it started.
    HalfOpen {
        probe: Option<u64>,
    },
}

/// What the oracle has seen of agents' pauses and daily starts.
#[derive(Debug, Default)]
pub struct HeartOracle {
    agents: BTreeMap<u64, AgentSeen>,
    /// The source of every run (a re-queued run keeps its original's).
    run_sources: BTreeMap<u64, WakeupSource>,
}

impl HeartOracle {
    /// Checks one durable event.
    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. } => {
                self.agents.insert(
                    agent.0,
                    AgentSeen {
                        time_zone: spec.time_zone.clone(),
                        daily_cap: spec.limits.daily_cap,
                        idle_after_ms: spec.heartbeat.idle_after_ms,
                        idle_due_ms: spec
                            .heartbeat
                            .idle_after_ms
                            .map(|after| event.at_ms + after),
                        ..AgentSeen::default()
                    },
                );
            }
            EventKind::AgentUpdated { agent, spec, .. } => {
                // A changed spec: the cap and the zone apply from the next start; a new idle
                // period restarts the chamber from the change (docs/api.md, PATCH).
                let seen = self.agents.entry(agent.0).or_default();
                seen.time_zone = spec.time_zone.clone();
                seen.daily_cap = spec.limits.daily_cap;
                if seen.idle_after_ms != spec.heartbeat.idle_after_ms {
                    seen.idle_after_ms = spec.heartbeat.idle_after_ms;
                    seen.idle_due_ms = spec.heartbeat.idle_after_ms.map(|after| event.at_ms + after);
                }
            }
            EventKind::AgentPaused {
                agent, until_ms, ..
            } => {
                let seen = self.agents.entry(agent.0).or_default();
                match until_ms {
                    None => seen.paused = true,
                    Some(until) => seen.paused_until_ms = Some(*until),
                }
            }
            EventKind::AgentResumed { agent } => {
                let seen = self.agents.entry(agent.0).or_default();
                seen.paused = false;
                seen.paused_until_ms = None;
            }
            EventKind::WakeupRefused {
                agent,
                source,
                refusal: RefusalReason::Paused,
                ..
            } => {
                let seen = self.agents.entry(agent.0).or_default();
                let routine = matches!(source, WakeupSource::Timer | WakeupSource::Idle);
                let timed = seen
                    .paused_until_ms
                    .is_some_and(|until| event.at_ms < until);
                if routine && !seen.paused && !timed {
                    return violation(
                        "pause_ends",
                        format!(
                            "agent {agent}'s {source:?} wakeup was refused as paused at wall {}, but its pause ended at {:?}",
                            event.at_ms, seen.paused_until_ms
                        ),
                    );
                }
            }
            EventKind::InputReceived {
                agent,
                next_idle_at_ms,
            } => {
                let seen = self.agents.entry(agent.0).or_default();
                let expected = seen.idle_after_ms.map(|after| event.at_ms + after);
                if seen.idle_due_ms.is_some() && *next_idle_at_ms != expected {
                    return violation(
                        "idle_fires_once_per_silence",
                        format!("input to agent {agent} at wall {} set the next idle fire to {next_idle_at_ms:?}, not {expected:?}", event.at_ms),
                    );
                }
                seen.idle_due_ms = *next_idle_at_ms;
            }
            EventKind::IdleFired {
                agent,
                next_idle_at_ms,
            } => {
                let seen = self.agents.entry(agent.0).or_default();
                let early = seen.idle_due_ms.is_none_or(|due| event.at_ms < due);
                let next_ok = seen
                    .idle_after_ms
                    .is_some_and(|after| *next_idle_at_ms == event.at_ms + after);
                if early || !next_ok {
                    return violation(
                        "idle_fires_once_per_silence",
                        format!(
                            "agent {agent}'s idle chamber fired at wall {} (due {:?}, next {next_idle_at_ms}, idle_after {:?}): early, twice, or off its count",
                            event.at_ms, seen.idle_due_ms, seen.idle_after_ms
                        ),
                    );
                }
                seen.idle_due_ms = Some(*next_idle_at_ms);
            }
            EventKind::AgentTerminated { agent } => {
                self.agents.entry(agent.0).or_default().idle_due_ms = None;
            }
            EventKind::WakeupQueued { run, source, .. } => {
                self.run_sources.insert(run.0, *source);
            }
            EventKind::RunRequeued {
                run,
                retry_of,
                coalesced: false,
                ..
            } => {
                if let Some(source) = self.run_sources.get(&retry_of.0).copied() {
                    self.run_sources.insert(run.0, source);
                }
            }
            EventKind::BreakerOpened { agent, .. } => {
                self.agents.entry(agent.0).or_default().breaker = Breaker::Open;
            }
            EventKind::BreakerHalfOpened { agent } => {
                let seen = self.agents.entry(agent.0).or_default();
                if seen.breaker != Breaker::Open {
                    return violation(
                        "breaker_single_probe",
                        format!(
                            "agent {agent}'s breaker half-opened from {:?}, not from open",
                            seen.breaker
                        ),
                    );
                }
                seen.breaker = Breaker::HalfOpen { probe: None };
            }
            // A probe cancelled or cut off by a restart proves nothing: another may start.
            EventKind::RunFinished {
                run,
                agent,
                status,
                cause: None,
                ..
            } if *status != vigil::engine::run::RunStatus::Succeeded => {
                let seen = self.agents.entry(agent.0).or_default();
                if seen.breaker == (Breaker::HalfOpen { probe: Some(run.0) }) {
                    seen.breaker = Breaker::HalfOpen { probe: None };
                }
            }
            EventKind::BreakerClosed { agent } | EventKind::BreakerReset { agent } => {
                self.agents.entry(agent.0).or_default().breaker = Breaker::Closed;
            }
            EventKind::RunStarted { run, agent, .. } => {
                let source = self.run_sources.get(&run.0).copied();
                let Some(seen) = self.agents.get_mut(&agent.0) else {
                    return violation(
                        "events_gap_free",
                        format!("run {run} started for unknown agent {agent}"),
                    );
                };
                match seen.breaker {
                    Breaker::Closed => {}
                    Breaker::HalfOpen { probe: None } => {
                        seen.breaker = Breaker::HalfOpen { probe: Some(run.0) };
                    }
                    state => {
                        return violation(
                            "breaker_single_probe",
                            format!(
                            "run {run} of agent {agent} started while its breaker was {state:?}"
                        ),
                        )
                    }
                }
                let routine = matches!(source, Some(WakeupSource::Timer | WakeupSource::Idle));
                let timed = seen
                    .paused_until_ms
                    .is_some_and(|until| event.at_ms < until);
                if seen.paused || (routine && timed) {
                    return violation(
                        "no_routine_wakeup_while_paused",
                        format!(
                            "run {run} ({source:?}) of agent {agent} started at wall {} while paused (until resumed: {}, until: {:?})",
                            event.at_ms, seen.paused, seen.paused_until_ms
                        ),
                    );
                }
                let today = agents_local_day(event.at_ms, &seen.time_zone);
                // A day once counted is never re-opened: after a backward jump, starts count
                // against the latest counted day.
                let day = seen.day.map_or(today, |(counted, _)| counted.max(today));
                let started = match seen.day {
                    Some((counted, n)) if counted == day => n + 1,
                    _ => 1,
                };
                seen.day = Some((day, started));
                if let Some(cap) = seen.daily_cap {
                    if started > cap {
                        return violation(
                            "daily_cap_respected",
                            format!("agent {agent} started run {run}, its run {started} of local day {day:?}, over its cap of {cap}"),
                        );
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests_support {
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::daily_cap::LocalDay;
    use vigil::engine::run::RunId;
    use vigil::engine::tenant::TokenHash;
    use vigil::engine::wakeup::WakeupId;

    use super::*;

    pub fn event(at_ms: u64, kind: EventKind) -> Event {
        Event {
            seq: 0,
            at_ms,
            tenant: "default".into(),
            kind,
        }
    }

    pub fn created(cap: Option<u32>) -> Event {
        let mut spec = AgentSpec::with_interval("a", Some(60_000));
        spec.limits.daily_cap = cap;
        event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "a".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::of("a"),
                first_fire_at_ms: Some(60_000),
            },
        )
    }

    pub fn queued(run: u64, source: WakeupSource) -> Event {
        event(
            0,
            EventKind::WakeupQueued {
                requested_by: None,
                trigger_detail: None,
                wakeup: WakeupId(run),
                agent: AgentId(1),
                source,
                reason: String::new(),
                payload: serde_json::Value::Null,
                task_key: None,
                idempotency_key: None,
                run: RunId(run),
            },
        )
    }

    pub fn started(run: u64, at_ms: u64) -> Event {
        event(
            at_ms,
            EventKind::RunStarted {
                run: RunId(run),
                agent: AgentId(1),
                run_number: run,
                day: LocalDay(agents_local_day(at_ms, "UTC") as i32),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::AgentId;
    use vigil::engine::pause::PausedBy;

    use super::tests_support::*;
    use super::*;

    #[test]
    fn a_timer_run_starting_inside_a_pause_is_caught_but_not_an_on_demand_one() {
        let mut oracle = HeartOracle::default();
        oracle.committed(&created(None)).unwrap();
        oracle
            .committed(&event(
                1_000,
                EventKind::AgentPaused {
                    agent: AgentId(1),
                    until_ms: Some(120_000),
                    by: PausedBy::Agent,
                },
            ))
            .unwrap();
        oracle
            .committed(&queued(1, WakeupSource::OnDemand))
            .unwrap();
        oracle.committed(&started(1, 2_000)).unwrap();
        oracle.committed(&queued(2, WakeupSource::Timer)).unwrap();
        let err = oracle.committed(&started(2, 119_999)).unwrap_err();
        assert_eq!(err.invariant, "no_routine_wakeup_while_paused");
        // At the pause's end instant it may start.
        oracle.committed(&started(2, 120_000)).unwrap();
    }

    #[test]
    fn starts_over_the_daily_cap_are_caught_and_a_backward_jump_does_not_reopen_a_day() {
        let day_ms = 86_400_000;
        let mut oracle = HeartOracle::default();
        oracle.committed(&created(Some(2))).unwrap();
        for run in 1..=4 {
            oracle
                .committed(&queued(run, WakeupSource::OnDemand))
                .unwrap();
        }
        oracle.committed(&started(1, 10 * day_ms + 1)).unwrap();
        oracle.committed(&started(2, 10 * day_ms + 2)).unwrap();
        // Next day: one more is fine...
        oracle.committed(&started(3, 11 * day_ms)).unwrap();
        // ...and a start stamped back on day 10 counts against day 11: 2 of 2, fine; a third
        // would not be.
        oracle.committed(&started(4, 10 * day_ms + 3)).unwrap();
        oracle
            .committed(&queued(5, WakeupSource::OnDemand))
            .unwrap();
        let err = oracle.committed(&started(5, 10 * day_ms + 4)).unwrap_err();
        assert_eq!(err.invariant, "daily_cap_respected");
    }
}

#[cfg(test)]
mod breaker_tests {
    use vigil::engine::agent::AgentId;
    use vigil::engine::breaker::FailureCause;

    use super::tests_support::*;
    use super::*;

    #[test]
    fn an_open_breaker_admits_nothing_and_a_half_open_one_a_single_probe() {
        let mut oracle = HeartOracle::default();
        oracle.committed(&created(None)).unwrap();
        for run in 1..=3 {
            oracle
                .committed(&queued(run, WakeupSource::OnDemand))
                .unwrap();
        }
        let opened = event(
            0,
            EventKind::BreakerOpened {
                agent: AgentId(1),
                trigger: FailureCause::Llm,
                until_ms: 10,
                cooldown_ms: 10,
            },
        );
        oracle.committed(&opened).unwrap();
        assert_eq!(
            oracle.committed(&started(1, 5)).unwrap_err().invariant,
            "breaker_single_probe"
        );

        let mut oracle = HeartOracle::default();
        oracle.committed(&created(None)).unwrap();
        for run in 1..=3 {
            oracle
                .committed(&queued(run, WakeupSource::OnDemand))
                .unwrap();
        }
        oracle.committed(&opened).unwrap();
        oracle
            .committed(&event(
                10,
                EventKind::BreakerHalfOpened { agent: AgentId(1) },
            ))
            .unwrap();
        oracle.committed(&started(1, 11)).unwrap();
        assert_eq!(
            oracle.committed(&started(2, 12)).unwrap_err().invariant,
            "breaker_single_probe"
        );
    }

    #[test]
    fn an_idle_fire_before_its_due_time_is_caught() {
        use vigil::engine::agent::{AgentId, AgentSpec};
        use vigil::engine::tenant::TokenHash;
        let mut spec = AgentSpec::with_interval("a", None);
        spec.heartbeat.idle_after_ms = Some(1_000);
        let create = event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "a".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::of("a"),
                first_fire_at_ms: None,
            },
        );
        let fired = |at_ms: u64, next: u64| {
            event(
                at_ms,
                EventKind::IdleFired {
                    agent: AgentId(1),
                    next_idle_at_ms: next,
                },
            )
        };
        let mut oracle = HeartOracle::default();
        oracle.committed(&create).unwrap();
        oracle.committed(&fired(5_000, 6_000)).unwrap();
        // A second fire for the same silence (a backlog) is caught...
        assert_eq!(
            oracle
                .committed(&fired(5_500, 6_500))
                .unwrap_err()
                .invariant,
            "idle_fires_once_per_silence"
        );
        // ...and so is a fire that does not count again from itself.
        let mut oracle = HeartOracle::default();
        oracle.committed(&create).unwrap();
        assert!(oracle.committed(&fired(5_000, 9_000)).is_err());
        // Input pushes the due time back.
        let mut oracle = HeartOracle::default();
        oracle.committed(&create).unwrap();
        let input = event(
            900,
            EventKind::InputReceived {
                agent: AgentId(1),
                next_idle_at_ms: Some(1_900),
            },
        );
        oracle.committed(&input).unwrap();
        assert!(oracle.committed(&fired(1_500, 2_500)).is_err());
    }
}
