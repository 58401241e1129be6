//! Invariant 14: no run's process group outlives its run by more than the run's grace plus
//! [`GROUP_EXIT_SLACK_MS`]. Judged from committed `run_process_started` and `run_finished`
//! events and the simulated machine's `process_group_gone` records. While the node is down it
//! can signal nothing, so a deadline that falls then moves to its recovery plus the slack
//! (recovery kills the groups of runs it finds, docs/adapters/process.md).
//!
//! Invariant 39, `run_ends_as_child_did`: a process agent's run that succeeded had a child
//! whose leader exited 0 on its own, and its report holds exit code 0 and, as its answer
//! excerpt, the lines the child wrote to stdout joined by newlines (docs/adapters/process.md);
//! a run that failed `exit_nonzero` reports the code or signal its child's leader really ended
//! with, and the same excerpt. Judged against what the simulated machine drew for the child
//! (`process_spawned`), never against the runtime's reading of it.

use std::collections::BTreeMap;

use vigil::engine::agent::AdapterSpec;
use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::{ErrorClass, RunReport, RunStatus};

use super::{violation, Violation};
use crate::trace::PlannedEnd;

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
    /// What each run's child was drawn to write to stdout and how its leader ends, until the
    /// run's end is judged.
    drawn: BTreeMap<u64, (Vec<String>, PlannedEnd)>,
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
            EventKind::RunFinished {
                run,
                agent,
                status,
                report,
                error_class,
                ..
            } => {
                if let Some(drawn) = self.drawn.remove(&run.0) {
                    judge_end(run.0, *status, *error_class, report.as_deref(), &drawn)?;
                }
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

    /// The machine started run `run`'s child, drawn to write `stdout` and end as `end`.
    pub fn spawned(&mut self, run: u64, stdout: &[String], end: PlannedEnd) {
        self.drawn.insert(run, (stdout.to_vec(), end));
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

/// Invariant 39 for one run's end, against what its child was drawn to do.
fn judge_end(
    run: u64,
    status: RunStatus,
    error_class: Option<ErrorClass>,
    report: Option<&RunReport>,
    (stdout, end): &(Vec<String>, PlannedEnd),
) -> Result<(), Violation> {
    let judged = match status {
        RunStatus::Succeeded => true,
        RunStatus::Failed => error_class == Some(ErrorClass::ExitNonzero),
        _ => false,
    };
    if !judged {
        return Ok(());
    }
    let exit = report.and_then(|r| r.exit);
    let as_drawn = match (end, exit) {
        (PlannedEnd::Exit { code }, Some(exit)) => exit.code == Some(*code) && exit.signal.is_none(),
        (PlannedEnd::Signal { signal }, Some(exit)) => {
            exit.signal == Some(*signal) && exit.code.is_none()
        }
        _ => false,
    };
    let succeeded_as_drawn = (status == RunStatus::Succeeded) == (*end == PlannedEnd::Exit { code: 0 });
    let excerpt = stdout.join("\n");
    let excerpt_as_written = report.and_then(|r| r.answer_excerpt.as_deref()) == Some(excerpt.as_str());
    if !(as_drawn && succeeded_as_drawn && excerpt_as_written) {
        return violation(
            "run_ends_as_child_did",
            format!("run {run} ended {status:?} ({error_class:?}) with report {report:?}; its child's leader was drawn to end {end:?} after writing {excerpt:?} to stdout"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use vigil::engine::run::ChildExit;

    use super::*;

    fn report(code: Option<i32>, signal: Option<i32>, excerpt: &str) -> RunReport {
        RunReport {
            answer_excerpt: Some(excerpt.into()),
            exit: Some(ChildExit { code, signal }),
            ..RunReport::default()
        }
    }

    #[test]
    fn a_run_ending_otherwise_than_its_child_is_reported() {
        let lines = vec!["step 0 of 2".to_string(), "step 1 of 2".to_string()];
        let exit0 = (lines.clone(), PlannedEnd::Exit { code: 0 });
        let exit3 = (lines.clone(), PlannedEnd::Exit { code: 3 });
        let segv = (lines.clone(), PlannedEnd::Signal { signal: 11 });
        let hang = (lines.clone(), PlannedEnd::Never);
        let text = "step 0 of 2\nstep 1 of 2";
        let nonzero = Some(ErrorClass::ExitNonzero);
        let ok = RunStatus::Succeeded;
        let failed = RunStatus::Failed;
        let kept = [
            (ok, None, Some(report(Some(0), None, text)), &exit0),
            (failed, nonzero, Some(report(Some(3), None, text)), &exit3),
            (failed, nonzero, Some(report(None, Some(11), text)), &segv),
            // Ended by the runtime (a timeout, a cancel): not judged here.
            (RunStatus::TimedOut, None, None, &hang),
            (failed, Some(ErrorClass::ControlPlaneRestart), None, &exit0),
        ];
        for (status, class, report, drawn) in &kept {
            judge_end(1, *status, *class, report.as_ref(), drawn).expect("as the child ended");
        }
        let broken = [
            (ok, None, None, &exit0),
            (ok, None, Some(report(Some(0), None, "step 1 of 2")), &exit0),
            (ok, None, Some(report(Some(0), None, text)), &exit3),
            (failed, nonzero, Some(report(Some(0), None, text)), &exit0),
            (failed, nonzero, Some(report(Some(3), None, text)), &segv),
            (failed, nonzero, Some(report(None, Some(15), text)), &hang),
        ];
        for (status, class, report, drawn) in &broken {
            let error = judge_end(1, *status, *class, report.as_ref(), drawn).unwrap_err();
            assert_eq!(error.invariant, "run_ends_as_child_did", "{status:?} {report:?} {drawn:?}");
        }
    }
}
