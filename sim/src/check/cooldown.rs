//! `no_run_within_cooldown`: a run of an agent with `limits.cooldown_ms` starts no sooner than
//! that after the agent's previous run (one that ran) ended. Judged on the committed events'
//! own wall times (`at_ms`), the clock the engine decides by. A start whose wall time reads
//! before the end (the clock went back since) is the documented exception: the engine cannot
//! measure the wait across a backward jump and ends the cooldown (docs/api.md). The wait is the
//! cooldown in force when the previous run ended: a spec change keeps a cooldown in progress (or
//! its absence) as it is, and its new length holds from the next end (docs/api.md, PATCH).

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};

use super::{violation, Violation};

#[derive(Debug, Default)]
pub struct CooldownOracle {
    /// Each agent's cooldown, if it has one.
    cooldown_ms: BTreeMap<u64, u64>,
    /// Runs that started and have not ended.
    running: BTreeMap<u64, u64>,
    /// Each agent's last end of a run that ran: (wall ms, run, the cooldown it began).
    last_end: BTreeMap<u64, (u64, u64, u64)>,
    /// Starts that came after a cooldown (a coverage figure).
    held_starts: u64,
}

impl CooldownOracle {
    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. } if spec.limits.cooldown_ms > 0 => {
                self.cooldown_ms.insert(agent.0, spec.limits.cooldown_ms);
            }
            // A changed cooldown holds the next start (docs/api.md, PATCH).
            EventKind::AgentUpdated { agent, spec, .. } => {
                match spec.limits.cooldown_ms {
                    0 => self.cooldown_ms.remove(&agent.0),
                    ms => self.cooldown_ms.insert(agent.0, ms),
                };
            }
            EventKind::RunStarted { run, agent, .. } => {
                self.running.insert(run.0, agent.0);
                let Some((ended_ms, previous, cooldown_ms)) = self.last_end.get(&agent.0).copied()
                else {
                    return Ok(());
                };
                if cooldown_ms == 0 {
                    return Ok(());
                }
                let until_ms = ended_ms.saturating_add(cooldown_ms);
                if (ended_ms..until_ms).contains(&event.at_ms) {
                    return violation(
                        "no_run_within_cooldown",
                        format!(
                            "run {run} of agent {agent} started at wall {} ms, {} ms after run {previous} ended at {ended_ms} ms (limits.cooldown_ms = {cooldown_ms})",
                            event.at_ms,
                            event.at_ms.saturating_sub(ended_ms)
                        ),
                    );
                }
                self.held_starts += 1;
            }
            EventKind::RunFinished { run, agent, .. } => {
                if self.running.remove(&run.0).is_some() {
                    let cooldown_ms = self.cooldown_ms.get(&agent.0).copied().unwrap_or(0);
                    self.last_end.insert(agent.0, (event.at_ms, run.0, cooldown_ms));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Starts that followed a run of an agent with a cooldown.
    pub fn starts_after_a_cooldown(&self) -> u64 {
        self.held_starts
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::tenant::TokenHash;

    use super::super::test_events::{event, run_finished, run_started};
    use super::*;

    const COOLDOWN_MS: u64 = 60_000;

    fn created() -> Event {
        let mut spec = AgentSpec::with_interval("cool", None);
        spec.limits.cooldown_ms = COOLDOWN_MS;
        event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "cool".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::of("cool"),
                first_fire_at_ms: None,
            },
        )
    }

    fn started(at_ms: u64, run: u64) -> Event {
        run_started(at_ms, run, 1)
    }

    fn finished(at_ms: u64, run: u64) -> Event {
        run_finished(at_ms, run, 1)
    }

    fn oracle_after_one_run() -> CooldownOracle {
        let mut oracle = CooldownOracle::default();
        for e in [created(), started(1_000, 1), finished(5_000, 1)] {
            oracle.committed(&e).unwrap();
        }
        oracle
    }

    #[test]
    fn a_start_within_the_cooldown_is_reported() {
        let mut oracle = oracle_after_one_run();
        let broken = oracle.committed(&started(5_000 + COOLDOWN_MS - 1, 2));
        assert_eq!(broken.unwrap_err().invariant, "no_run_within_cooldown");
    }

    #[test]
    fn a_start_once_the_cooldown_is_over_is_silent() {
        let mut oracle = oracle_after_one_run();
        oracle.committed(&started(5_000 + COOLDOWN_MS, 2)).unwrap();
        assert_eq!(oracle.starts_after_a_cooldown(), 1);
    }

    #[test]
    fn a_start_after_the_clock_went_back_past_the_end_is_the_documented_exception() {
        let mut oracle = oracle_after_one_run();
        oracle.committed(&started(4_999, 2)).unwrap();
    }

    #[test]
    fn a_queued_run_that_never_ran_starts_no_cooldown() {
        let mut oracle = oracle_after_one_run();
        oracle.committed(&started(5_000 + COOLDOWN_MS, 2)).unwrap();
        oracle.committed(&finished(70_000, 2)).unwrap();
        // Run 3 is cancelled while queued: the last end stays run 2's.
        oracle.committed(&finished(100_000, 3)).unwrap();
        oracle.committed(&started(70_000 + COOLDOWN_MS, 4)).unwrap();
    }
}
