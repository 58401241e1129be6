//! Contract checks: the numbers docs/api.md promises, restated here from the documents rather
//! than taken from the runtime's constants or helpers, so that a wrong constant or a slip in a
//! helper cannot loosen the runtime and its check at once (docs/invariants.md, 20–22).
//!
//! - `breaker_cooldown_as_documented` (20): a breaker that opens from closed waits its
//!   `breaker.cooldown_ms`; one that opens again after a failed probe waits twice its previous
//!   cooldown, at most `breaker.cooldown_ms_max`; `until_ms` is the opening instant plus the
//!   cooldown; a probe (`breaker_half_opened`) never comes before `until_ms`.
//! - `rest_as_asked` (21): a run that ends resting for m minutes asked the model's
//!   `pause_heartbeats` for a value that clamps to m (default 2, clamped to 1..=60), as the
//!   simulated provider recorded it.
//! - `start_counts_on_its_local_day` (22): a run start counts on the calendar date of its
//!   instant in the agent's time zone, or on the latest day already counted when the clock went
//!   back (a day once left is never counted again).
//!
//! Invariant 23, the refusal reasons and their order, is `refusals.rs`.

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};

use super::documented::local_day;
use super::{violation, Violation};

/// `pause_heartbeats` without `minutes` rests this long (docs/agents.md).
const REST_MINUTES_DEFAULT: u64 = 2;
/// `pause_heartbeats` minutes are clamped into this range (docs/agents.md).
const REST_MINUTES_MIN: u64 = 1;
const REST_MINUTES_MAX: u64 = 60;
/// Seconds in a civil day: for the day count since 1970-01-01.

/// The breaker as the contract describes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Breaker {
    #[default]
    Closed,
    Open {
        until_ms: u64,
        cooldown_ms: u64,
    },
    /// The cooldown was over; a failure of the probe opens it with the cooldown doubled.
    HalfOpen {
        cooldown_ms: u64,
    },
}

#[derive(Debug, Clone, Default)]
struct AgentContract {
    time_zone: String,
    cooldown_ms: u64,
    cooldown_ms_max: u64,
    breaker: Breaker,
    /// The latest local day (days since 1970-01-01) a start counted on.
    counted_day: Option<i64>,
}

#[derive(Debug, Default)]
pub struct ContractOracle {
    agents: BTreeMap<u64, AgentContract>,
    /// The minutes each run last asked `pause_heartbeats` for (`None`: asked without minutes).
    asked_rest: BTreeMap<u64, Option<u64>>,
    /// How often each contract had something to judge (coverage).
    judged: BTreeMap<&'static str, u64>,
}

impl ContractOracle {
    /// The simulated provider answered run `run` with a rest of `minutes`.
    pub fn rest_asked(&mut self, run: u64, minutes: Option<u64>) {
        self.asked_rest.insert(run, minutes);
    }

    /// How often each contract had something to judge.
    pub fn judged(&self) -> &BTreeMap<&'static str, u64> {
        &self.judged
    }

    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. } => {
                self.agents.insert(
                    agent.0,
                    AgentContract {
                        time_zone: spec.time_zone.clone(),
                        cooldown_ms: spec.breaker.cooldown_ms,
                        cooldown_ms_max: spec.breaker.cooldown_ms_max,
                        ..AgentContract::default()
                    },
                );
            }
            EventKind::AgentUpdated { agent, spec, .. } => {
                // A new zone moves the local day; a new breaker policy applies from the next
                // opening (docs/api.md, PATCH).
                if let Some(a) = self.agents.get_mut(&agent.0) {
                    a.time_zone = spec.time_zone.clone();
                    a.cooldown_ms = spec.breaker.cooldown_ms;
                    a.cooldown_ms_max = spec.breaker.cooldown_ms_max;
                }
            }
            EventKind::BreakerOpened {
                agent,
                until_ms,
                cooldown_ms,
                ..
            } => return self.breaker_opened(event.at_ms, agent.0, *until_ms, *cooldown_ms),
            EventKind::BreakerHalfOpened { agent } => {
                return self.breaker_half_opened(event.at_ms, agent.0)
            }
            EventKind::BreakerClosed { agent } | EventKind::BreakerReset { agent } => {
                if let Some(a) = self.agents.get_mut(&agent.0) {
                    a.breaker = Breaker::Closed;
                }
            }
            EventKind::RunStarted {
                agent, run, day, ..
            } => {
                let day = serde_json::to_value(day).ok().and_then(|d| d.as_i64());
                return self.run_started(event.at_ms, agent.0, run.0, day);
            }
            EventKind::RunFinished { run, report, .. } => {
                let rested = report.as_ref().and_then(|r| r.pause_minutes);
                let asked = self.asked_rest.remove(&run.0);
                if let Some(minutes) = rested {
                    return self.rest_as_asked(run.0, minutes, asked);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn count(&mut self, contract: &'static str) {
        *self.judged.entry(contract).or_default() += 1;
    }

    fn breaker_opened(
        &mut self,
        at_ms: u64,
        agent: u64,
        until_ms: u64,
        cooldown_ms: u64,
    ) -> Result<(), Violation> {
        let Some(a) = self.agents.get_mut(&agent) else {
            return Ok(());
        };
        let expected = match a.breaker {
            Breaker::HalfOpen {
                cooldown_ms: previous,
            } => previous.saturating_mul(2).min(a.cooldown_ms_max),
            Breaker::Closed | Breaker::Open { .. } => a.cooldown_ms,
        };
        let was = a.breaker;
        a.breaker = Breaker::Open {
            until_ms,
            cooldown_ms,
        };
        self.count("breaker_cooldown_as_documented");
        if cooldown_ms != expected {
            return violation(
                "breaker_cooldown_as_documented",
                format!("agent {agent}'s breaker opened ({was:?} before) with a cooldown of {cooldown_ms} ms; the contract says {expected} ms"),
            );
        }
        if until_ms != at_ms.saturating_add(cooldown_ms) {
            return violation(
                "breaker_cooldown_as_documented",
                format!("agent {agent}'s breaker opened at {at_ms} with a {cooldown_ms} ms cooldown until {until_ms}, not {}", at_ms + cooldown_ms),
            );
        }
        Ok(())
    }

    fn breaker_half_opened(&mut self, at_ms: u64, agent: u64) -> Result<(), Violation> {
        let Some(a) = self.agents.get_mut(&agent) else {
            return Ok(());
        };
        let Breaker::Open {
            until_ms,
            cooldown_ms,
        } = a.breaker
        else {
            return Ok(());
        };
        a.breaker = Breaker::HalfOpen { cooldown_ms };
        if at_ms < until_ms {
            return violation(
                "breaker_cooldown_as_documented",
                format!("agent {agent}'s breaker let a probe through at {at_ms}, before its cooldown ended at {until_ms}"),
            );
        }
        Ok(())
    }

    fn rest_as_asked(
        &mut self,
        run: u64,
        minutes: u64,
        asked: Option<Option<u64>>,
    ) -> Result<(), Violation> {
        // A rest asked through the API rather than by the simulated model is not this
        // contract's to judge.
        let Some(asked) = asked else {
            return Ok(());
        };
        self.count("rest_as_asked");
        let expected = asked
            .unwrap_or(REST_MINUTES_DEFAULT)
            .clamp(REST_MINUTES_MIN, REST_MINUTES_MAX);
        if minutes != expected {
            return violation(
                "rest_as_asked",
                format!("run {run} rests {minutes} minutes; the model asked for {asked:?}, which the contract makes {expected}"),
            );
        }
        Ok(())
    }

    fn run_started(
        &mut self,
        at_ms: u64,
        agent: u64,
        run: u64,
        day: Option<i64>,
    ) -> Result<(), Violation> {
        let Some(a) = self.agents.get_mut(&agent) else {
            return Ok(());
        };
        let Some(today) = local_day(at_ms, &a.time_zone) else {
            return Ok(());
        };
        let expected = a.counted_day.map_or(today, |counted| counted.max(today));
        a.counted_day = Some(expected);
        self.count("start_counts_on_its_local_day");
        if day != Some(expected) {
            return violation(
                "start_counts_on_its_local_day",
                format!("run {run} of agent {agent} started at {at_ms} counts on day {day:?}; in {} that is day {expected}", self.agents[&agent].time_zone),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_events::{event, run_finished, run_started};
    use super::*;
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::breaker::FailureCause;
    use vigil::engine::daily_cap::LocalDay;
    use vigil::engine::run::RunReport;

    fn created(time_zone: &str) -> Event {
        let mut spec: AgentSpec =
            serde_json::from_value(serde_json::json!({ "name": "a" })).unwrap();
        spec.time_zone = time_zone.into();
        spec.breaker.cooldown_ms = 60_000;
        spec.breaker.cooldown_ms_max = 200_000;
        event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "a".into(),
                spec: Box::new(spec),
                token_hash: Default::default(),
                first_fire_at_ms: None,
            },
        )
    }

    fn opened(at_ms: u64, cooldown_ms: u64) -> Event {
        event(
            at_ms,
            EventKind::BreakerOpened {
                agent: AgentId(1),
                trigger: FailureCause::Llm,
                until_ms: at_ms + cooldown_ms,
                cooldown_ms,
            },
        )
    }

    fn half_opened(at_ms: u64) -> Event {
        event(at_ms, EventKind::BreakerHalfOpened { agent: AgentId(1) })
    }

    fn oracle(time_zone: &str) -> ContractOracle {
        let mut oracle = ContractOracle::default();
        oracle.committed(&created(time_zone)).unwrap();
        oracle
    }

    fn broken(result: Result<(), Violation>) -> &'static str {
        result.expect_err("the contract is broken").invariant
    }

    #[test]
    fn breaker_cooldowns_start_at_the_spec_double_after_failed_probes_and_stop_at_the_cap() {
        let mut o = oracle("UTC");
        o.committed(&opened(1_000, 60_000)).unwrap();
        o.committed(&half_opened(61_000)).unwrap();
        o.committed(&opened(62_000, 120_000)).unwrap();
        o.committed(&half_opened(182_000)).unwrap();
        // Doubling 120 s would be 240 s: the cap of 200 s holds.
        o.committed(&opened(183_000, 200_000)).unwrap();
        o.committed(&event(
            400_000,
            EventKind::BreakerReset { agent: AgentId(1) },
        ))
        .unwrap();
        // After a reset the sequence starts again.
        o.committed(&opened(500_000, 60_000)).unwrap();
        assert_eq!(o.judged()["breaker_cooldown_as_documented"], 4);
    }

    #[test]
    fn a_cooldown_that_does_not_double_or_a_probe_before_its_end_is_reported() {
        let mut o = oracle("UTC");
        o.committed(&opened(1_000, 60_000)).unwrap();
        o.committed(&half_opened(61_000)).unwrap();
        assert_eq!(
            broken(o.committed(&opened(62_000, 60_000))),
            "breaker_cooldown_as_documented"
        );
        let mut o = oracle("UTC");
        assert_eq!(
            broken(o.committed(&opened(1_000, 30_000))),
            "breaker_cooldown_as_documented"
        );
        let mut o = oracle("UTC");
        o.committed(&opened(1_000, 60_000)).unwrap();
        assert_eq!(
            broken(o.committed(&half_opened(60_999))),
            "breaker_cooldown_as_documented"
        );
        let mut o = oracle("UTC");
        let mut wrong_end = opened(1_000, 60_000);
        if let EventKind::BreakerOpened { until_ms, .. } = &mut wrong_end.kind {
            *until_ms += 1;
        }
        assert_eq!(
            broken(o.committed(&wrong_end)),
            "breaker_cooldown_as_documented"
        );
    }

    fn rested(run: u64, minutes: u64) -> Event {
        let mut finished = run_finished(0, run, 1);
        if let EventKind::RunFinished { report, .. } = &mut finished.kind {
            *report = Some(Box::new(RunReport {
                pause_minutes: Some(minutes),
                ..RunReport::default()
            }));
        }
        finished
    }

    #[test]
    fn a_rest_is_the_asked_minutes_clamped_or_the_default() {
        let mut o = oracle("UTC");
        for (run, asked, rests) in [
            (1, Some(0), 1),
            (2, Some(70), 60),
            (3, Some(17), 17),
            (4, None, 2),
        ] {
            o.rest_asked(run, asked);
            o.committed(&rested(run, rests)).unwrap();
        }
        // A rest nobody asked the simulated model for (the API's) is not judged.
        o.committed(&rested(5, 30)).unwrap();
        assert_eq!(o.judged()["rest_as_asked"], 4);
        o.rest_asked(6, Some(70));
        assert_eq!(broken(o.committed(&rested(6, 61))), "rest_as_asked");
        o.rest_asked(7, Some(10));
        assert_eq!(broken(o.committed(&rested(7, 2))), "rest_as_asked");
    }

    fn started_on(at_ms: u64, run: u64, day: i32) -> Event {
        let mut started = run_started(at_ms, run, 1);
        if let EventKind::RunStarted { day: d, .. } = &mut started.kind {
            *d = LocalDay(day);
        }
        started
    }

    #[test]
    fn a_start_counts_on_its_local_date_and_never_on_a_day_already_left() {
        // 2026-11-22T23:30:00Z is 2026-11-23 in Paris (UTC+1): day 20780, not 20779.
        let at_ms = 1_795_390_200_000;
        let mut o = oracle("Europe/Paris");
        assert_eq!(
            broken(o.committed(&started_on(at_ms, 1, 20_779))),
            "start_counts_on_its_local_day"
        );
        let mut o = oracle("Europe/Paris");
        o.committed(&started_on(at_ms, 1, 20_780)).unwrap();
        // The clock goes back an hour, to the 22nd in Paris: the start still counts on the 23rd.
        o.committed(&started_on(at_ms - 3_600_000, 2, 20_780))
            .unwrap();
        let mut back = oracle("Europe/Paris");
        back.committed(&started_on(at_ms, 1, 20_780)).unwrap();
        assert_eq!(
            broken(back.committed(&started_on(at_ms - 3_600_000, 2, 20_779))),
            "start_counts_on_its_local_day"
        );
        assert_eq!(o.judged()["start_counts_on_its_local_day"], 2);
    }
}
