//! Invariant 14: no run's process group outlives its run by more than the run's grace plus
//! [`GROUP_EXIT_SLACK_MS`]. Judged from committed `run_process_started` and `run_finished`
//! events and the simulated machine's `process_group_gone` records. While the node is down it
//! can signal nothing, so a deadline that falls then moves to its recovery plus the slack
//! (recovery kills the groups of runs it finds, docs/adapters/process.md).

use std::collections::BTreeMap;

use vigil::engine::agent::AdapterSpec;
use vigil::engine::event::{Event, EventKind};

use super::{violation, Violation};

/// How long after its grace a run's group may take to be gone: the termination task's own
/// scheduling and the kill's delivery.
pub const GROUP_EXIT_SLACK_MS: u64 = 2_000;

#[derive(Debug, Default)]
pub struct ProcessesOracle {
    /// Grace of each agent that spawns children.
    grace_ms: BTreeMap<u64, u64>,
    /// Each run's recorded group, and its agent.
    groups: BTreeMap<u64, (u32, u64)>,
    /// Groups still alive, by pgid: their run, and the deadline once the run ended.
    alive: BTreeMap<u32, (u64, Option<u64>)>,
    /// Groups the machine reported gone before (or without) their run's record.
    gone: BTreeMap<u32, u64>,
}

impl ProcessesOracle {
    pub fn committed(&mut self, t_ms: u64, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. } => {
                let grace_sec = match &spec.adapter {
                    AdapterSpec::Process(process) => Some(process.child.grace_sec),
                    AdapterSpec::ClaudeLocal(cli) | AdapterSpec::CodexLocal(cli) => {
                        Some(cli.child.grace_sec)
                    }
                    _ => None,
                };
                if let Some(grace_sec) = grace_sec {
                    self.grace_ms.insert(agent.0, grace_sec * 1_000);
                }
            }
            EventKind::RunProcessStarted { run, agent, pgid } => {
                self.groups.insert(run.0, (*pgid, agent.0));
                if !self.gone.contains_key(pgid) {
                    self.alive.insert(*pgid, (run.0, None));
                }
            }
            EventKind::RunFinished { run, agent, .. } => {
                let Some((pgid, _)) = self.groups.get(&run.0) else {
                    return Ok(());
                };
                let grace_ms = self.grace_ms.get(&agent.0).copied().unwrap_or(0);
                if let Some((_, deadline)) = self.alive.get_mut(pgid) {
                    *deadline = Some(t_ms + grace_ms + GROUP_EXIT_SLACK_MS);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The machine says group `pgid` has no process left.
    pub fn group_gone(&mut self, t_ms: u64, pgid: u32) {
        self.alive.remove(&pgid);
        self.gone.insert(pgid, t_ms);
    }

    /// The node recovered at `t_ms`: deadlines that fell while it was down move to now plus
    /// the slack.
    pub fn recovered(&mut self, t_ms: u64) {
        for (_, deadline) in self.alive.values_mut() {
            if let Some(deadline) = deadline {
                *deadline = (*deadline).max(t_ms + GROUP_EXIT_SLACK_MS);
            }
        }
    }

    /// Judged at every record while the node is up.
    pub fn check(&self, t_ms: u64) -> Result<(), Violation> {
        match self
            .alive
            .iter()
            .find(|(_, (_, deadline))| deadline.is_some_and(|d| d < t_ms))
        {
            Some((pgid, (run, Some(deadline)))) => violation(
                "process_group_ends_with_run",
                format!(
                    "process group {pgid} of run {run} is still alive at {t_ms} ms; its run ended and the group should have been gone by {deadline} ms (grace + {GROUP_EXIT_SLACK_MS} ms)"
                ),
            ),
            _ => Ok(()),
        }
    }

    /// Groups spawned, and groups still alive.
    pub fn counts(&self) -> (usize, usize) {
        (self.groups.len(), self.alive.len())
    }
}
