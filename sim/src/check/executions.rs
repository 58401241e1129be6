//! Invariants 15–17, judged on the execution side: what the simulated provider, tool server and
//! machine *served*, not what the log says. The log can look clean while an adapter call of an
//! ended run is still going out, or while two runs of one agent execute at once; these checks
//! see the calls themselves (docs/invariants.md, "Executions").
//!
//! An execution is a model call (from its arrival at the provider to its answer, or to the
//! moment the runtime dropped the connection), a tool call (the same at the tool server), or a
//! run's process group (from its spawn to its last process's exit). Which run an execution
//! belongs to comes from the request itself (the system prompt's marker, the tool call's body)
//! or from the spawn; which agent a run belongs to, and when it ended, from the committed log.

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};

use super::{violation, Violation};

/// How long after its run's terminal event an execution of that run may still *arrive*: a
/// request already on the wire when the run ended (the simulated network's latency, raised by a
/// `net_delay` fault up to a few seconds) is not the runtime's doing.
pub const EXECUTION_AFTER_END_SLACK_MS: u64 = 5_000;

/// Where an execution was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Service {
    Model,
    Tool,
    Process,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Model => "model call",
            Service::Tool => "tool call",
            Service::Process => "process group",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct RunState {
    agent: u64,
    /// Virtual ms at which its terminal event committed.
    ended_ms: Option<u64>,
}

#[derive(Debug, Default)]
pub struct ExecutionsOracle {
    /// Every run the log started: its agent, and when it ended.
    runs: BTreeMap<u64, RunState>,
    /// Executions in flight, by agent, then run: how many of each service.
    in_flight: BTreeMap<u64, BTreeMap<u64, BTreeMap<Service, u32>>>,
    /// Live process groups: their run.
    groups: BTreeMap<u32, u64>,
    /// Executions seen (a coverage figure: a sweep that saw none checked nothing).
    started: u64,
}

/// Whether an earlier run's open executions still count against its agent's next run. A
/// network call of a run that has *ended* does not: the runtime dropped its connection before
/// it committed the end, and the server learns of the close one network hop later (a provider
/// holding a call for an hour under `llm_timeout` notices only then). A call the runtime really
/// kept going past the end would send more: `no_execution_after_run_end` judges those. A
/// process group is different: the machine runs it whatever the network does, and the runtime
/// must see it gone before the agent's next child starts, so it counts until it is gone.
fn still_executing(run: Option<&RunState>, services: &BTreeMap<Service, u32>) -> bool {
    let ended = run.is_some_and(|r| r.ended_ms.is_some());
    services
        .iter()
        .any(|(service, n)| *n > 0 && (!ended || *service == Service::Process))
}

impl ExecutionsOracle {
    pub fn committed(&mut self, t_ms: u64, event: &Event) {
        match &event.kind {
            EventKind::RunStarted { run, agent, .. } => {
                self.runs.insert(
                    run.0,
                    RunState {
                        agent: agent.0,
                        ended_ms: None,
                    },
                );
            }
            EventKind::RunFinished { run, .. } => {
                if let Some(state) = self.runs.get_mut(&run.0) {
                    state.ended_ms.get_or_insert(t_ms);
                }
            }
            _ => {}
        }
    }

    /// An execution of `run` arrived at `t_ms`; `agent` is who the request says it is (`None`
    /// for a process, which only knows its run).
    pub fn started(
        &mut self,
        t_ms: u64,
        service: Service,
        agent: Option<u64>,
        run: u64,
    ) -> Result<(), Violation> {
        self.started += 1;
        let what = service.name();
        let Some(state) = self.runs.get(&run).copied() else {
            return violation(
                "execution_belongs_to_started_run",
                format!("a {what} of run {run} was served, but no run {run} had started"),
            );
        };
        if let Some(claimed) = agent.filter(|claimed| *claimed != state.agent) {
            return violation(
                "execution_belongs_to_started_run",
                format!(
                    "a {what} named agent {claimed} and run {run}, but run {run} is agent {}'s",
                    state.agent
                ),
            );
        }
        if let Some(ended_ms) = state.ended_ms {
            if t_ms > ended_ms + EXECUTION_AFTER_END_SLACK_MS {
                return violation(
                    "no_execution_after_run_end",
                    format!(
                        "a {what} of run {run} (agent {}) arrived at {t_ms} ms, {} ms after the run ended at {ended_ms} ms (slack {EXECUTION_AFTER_END_SLACK_MS} ms)",
                        state.agent,
                        t_ms - ended_ms
                    ),
                );
            }
        }
        let runs = &self.runs;
        let agent_runs = self.in_flight.entry(state.agent).or_default();
        if let Some((other, services)) = agent_runs.iter().find(|(other, services)| {
            **other != run && still_executing(runs.get(other), services)
        }) {
            let kinds: Vec<&str> = services.keys().map(|s| s.name()).collect();
            return violation(
                "one_execution_per_agent",
                format!(
                    "a {what} of run {run} of agent {} arrived at {t_ms} ms while its run {other} still had a {} in flight",
                    state.agent,
                    kinds.join(" and a ")
                ),
            );
        }
        *agent_runs
            .entry(run)
            .or_default()
            .entry(service)
            .or_default() += 1;
        Ok(())
    }

    /// An execution of `run` ended (answered, dropped, or its group gone).
    pub fn ended(&mut self, service: Service, run: u64) {
        let Some(state) = self.runs.get(&run) else {
            return;
        };
        let Some(runs) = self.in_flight.get_mut(&state.agent) else {
            return;
        };
        if let Some(services) = runs.get_mut(&run) {
            if let Some(count) = services.get_mut(&service) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    services.remove(&service);
                }
            }
            if services.is_empty() {
                runs.remove(&run);
            }
        }
    }

    /// The machine spawned `run`'s group `pgid`.
    pub fn process_spawned(&mut self, t_ms: u64, run: u64, pgid: u32) -> Result<(), Violation> {
        self.groups.insert(pgid, run);
        self.started(t_ms, Service::Process, None, run)
    }

    /// The last process of group `pgid` is gone.
    pub fn group_gone(&mut self, pgid: u32) {
        if let Some(run) = self.groups.remove(&pgid) {
            self.ended(Service::Process, run);
        }
    }

    /// How many executions were checked.
    pub fn executions(&self) -> u64 {
        self.started
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_events::{run_finished as finished_at, run_started as started_at};
    use super::*;

    fn run_started(run: u64, agent: u64) -> Event {
        started_at(0, run, agent)
    }

    fn run_finished(run: u64, agent: u64) -> Event {
        finished_at(0, run, agent)
    }

    fn oracle_with_runs(runs: &[(u64, u64)]) -> ExecutionsOracle {
        let mut oracle = ExecutionsOracle::default();
        for (run, agent) in runs {
            oracle.committed(0, &run_started(*run, *agent));
        }
        oracle
    }

    fn broken(result: Result<(), Violation>) -> &'static str {
        result.expect_err("the rule is broken").invariant
    }

    #[test]
    fn a_call_of_a_run_that_never_started_is_reported() {
        let mut oracle = oracle_with_runs(&[(1, 7)]);
        assert_eq!(
            broken(oracle.started(10, Service::Model, Some(7), 2)),
            "execution_belongs_to_started_run"
        );
    }

    #[test]
    fn a_call_naming_another_agent_s_run_is_reported() {
        let mut oracle = oracle_with_runs(&[(1, 7)]);
        assert_eq!(
            broken(oracle.started(10, Service::Tool, Some(8), 1)),
            "execution_belongs_to_started_run"
        );
    }

    #[test]
    fn a_call_arriving_past_the_slack_after_its_run_ended_is_reported() {
        let mut oracle = oracle_with_runs(&[(1, 7)]);
        oracle.committed(1_000, &run_finished(1, 7));
        let last_ok = 1_000 + EXECUTION_AFTER_END_SLACK_MS;
        oracle
            .started(last_ok, Service::Model, Some(7), 1)
            .expect("a call still on the wire at the end is allowed");
        assert_eq!(
            broken(oracle.started(last_ok + 1, Service::Model, Some(7), 1)),
            "no_execution_after_run_end"
        );
    }

    #[test]
    fn two_runs_of_one_agent_executing_at_once_are_reported() {
        let mut oracle = oracle_with_runs(&[(1, 7), (2, 7)]);
        oracle.started(10, Service::Model, Some(7), 1).unwrap();
        assert_eq!(
            broken(oracle.started(20, Service::Tool, Some(7), 2)),
            "one_execution_per_agent"
        );
    }

    #[test]
    fn a_live_process_group_of_an_earlier_run_counts_as_in_flight() {
        let mut oracle = oracle_with_runs(&[(1, 7), (2, 7)]);
        oracle.process_spawned(10, 1, 4_000).unwrap();
        oracle.committed(50, &run_finished(1, 7));
        assert_eq!(
            broken(oracle.process_spawned(60, 2, 4_001)),
            "one_execution_per_agent"
        );
    }

    #[test]
    fn a_call_the_server_still_holds_after_its_run_ended_does_not_count_against_the_next_run() {
        // The runtime gave up on run 1's model call (its timeout) and committed the end; the
        // provider learns of the closed connection a hop later, after run 2's first call.
        let mut oracle = oracle_with_runs(&[(1, 7), (2, 7)]);
        oracle.started(10, Service::Model, Some(7), 1).unwrap();
        oracle.started(12, Service::Tool, Some(7), 1).unwrap();
        // While run 1 has not ended, its open call still counts.
        assert_eq!(
            broken(oracle.started(20, Service::Model, Some(7), 2)),
            "one_execution_per_agent"
        );
        oracle.committed(30, &run_finished(1, 7));
        oracle
            .started(34, Service::Model, Some(7), 2)
            .expect("run 1's calls ended with it on the runtime's side");
        oracle.ended(Service::Model, 1);
    }

    #[test]
    fn executions_one_after_another_and_of_other_agents_are_silent() {
        let mut oracle = oracle_with_runs(&[(1, 7), (2, 7), (3, 8)]);
        oracle.started(10, Service::Model, Some(7), 1).unwrap();
        // Another agent's run may execute meanwhile; the same run may call a tool.
        oracle.started(11, Service::Model, Some(8), 3).unwrap();
        oracle.started(12, Service::Tool, Some(7), 1).unwrap();
        oracle.ended(Service::Tool, 1);
        oracle.ended(Service::Model, 1);
        oracle.committed(20, &run_finished(1, 7));
        oracle.process_spawned(30, 2, 4_000).unwrap();
        oracle.group_gone(4_000);
        oracle.started(40, Service::Model, None, 2).unwrap();
        assert_eq!(oracle.executions(), 5);
    }
}
