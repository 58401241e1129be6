//! A graceful stop (ADR 0015; fault `graceful_stop`): `vigil serve` on SIGTERM drains, then
//! stops its runs and waits for their process groups, then exits. Three promises, each judged
//! from the trace:
//!
//! - `drain_starts_no_run` (43): once the drain has begun, no run starts on that node until
//!   it is started again. Every event after the drain's `after_seq` was decided with starts
//!   held, so a `run_started` past it breaks the promise.
//! - `drained_means_ended` (44): a drain that reports no run left (`left == 0`) ended with
//!   every run that had started finished, its `run_finished` durable (docs/operations.md:
//!   "every run that was going has finished").
//! - `no_child_outlives_a_stop` (45): when the stopped process exits, no process group it
//!   started is alive on the machine ("so that no child outlives it").

use std::collections::BTreeSet;

use vigil::engine::event::{Event, EventKind};

use super::{violation, Violation};

/// What the oracle knows of a node's drains and of the runs that are going.
#[derive(Debug, Default)]
pub struct DrainOracle {
    /// The drain under way on the node, if any: its `after_seq`.
    held_after: Option<u64>,
    /// Runs whose start is durable and whose end is not (for every node: seqs are global).
    going: BTreeSet<u64>,
}

impl DrainOracle {
    /// A drain began: starts are held past `after_seq`.
    pub fn drain_started(&mut self, after_seq: u64) {
        self.held_after = Some(after_seq);
    }

    /// The node was started again: its starts are no longer held.
    pub fn restarted(&mut self) {
        self.held_after = None;
    }

    /// An event became durable (or was found on disk at recovery).
    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::RunStarted { run, agent, .. } => {
                if let Some(after_seq) = self.held_after.filter(|after| event.seq > *after) {
                    return violation(
                        "drain_starts_no_run",
                        format!(
                            "run {run} of agent {agent} started at seq {}, after the drain that held starts past seq {after_seq} (ADR 0015: once a drain begins, no run starts until the node is started again)",
                            event.seq
                        ),
                    );
                }
                self.going.insert(run.0);
            }
            EventKind::RunFinished { run, .. } | EventKind::RunRequeued { retry_of: run, .. } => {
                self.going.remove(&run.0);
            }
            _ => {}
        }
        Ok(())
    }

    /// The drain ended with `left` runs still going.
    pub fn drained(&self, left: usize) -> Result<(), Violation> {
        if left > 0 || self.going.is_empty() {
            return Ok(());
        }
        violation(
            "drained_means_ended",
            format!(
                "the drain reported every run ended, yet runs {:?} have a durable start and no durable end",
                self.going
            ),
        )
    }

    /// The stopped process exits; `live_groups` are the machine's process groups still alive.
    pub fn stopped(&self, live_groups: &[u32]) -> Result<(), Violation> {
        if live_groups.is_empty() {
            return Ok(());
        }
        violation(
            "no_child_outlives_a_stop",
            format!(
                "the node's process exits after its graceful stop with process groups {live_groups:?} still alive (a stop ends every run's group, SIGKILL after its grace, before the process exits)"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_events::{run_finished, run_started};

    fn started(seq: u64, run: u64) -> Event {
        Event {
            seq,
            ..run_started(seq * 1_000, run, 1)
        }
    }

    fn finished(seq: u64, run: u64) -> Event {
        Event {
            seq,
            ..run_finished(seq * 1_000, run, 1)
        }
    }

    #[test]
    fn a_start_past_the_drain_is_reported_and_one_before_it_or_after_a_restart_is_not() {
        let mut oracle = DrainOracle::default();
        oracle.committed(&started(1, 1)).unwrap();
        oracle.drain_started(2);
        // Decided before the hold, durable after it: allowed.
        oracle.committed(&started(2, 2)).unwrap();
        let err = oracle.committed(&started(3, 3)).unwrap_err();
        assert_eq!(err.invariant, "drain_starts_no_run");
        assert!(err.detail.contains("seq 3"), "{}", err.detail);

        let mut oracle = DrainOracle::default();
        oracle.drain_started(1);
        oracle.restarted();
        oracle.committed(&started(5, 5)).unwrap();
    }

    #[test]
    fn a_drain_that_left_nothing_must_see_every_start_ended() {
        let mut oracle = DrainOracle::default();
        oracle.committed(&started(1, 1)).unwrap();
        oracle.committed(&started(2, 2)).unwrap();
        oracle.committed(&finished(3, 1)).unwrap();
        let err = oracle.drained(0).unwrap_err();
        assert_eq!(err.invariant, "drained_means_ended");
        assert!(err.detail.contains("{2}"), "{}", err.detail);
        // Runs still going are what `left` admits.
        oracle.drained(1).unwrap();
        oracle.committed(&finished(4, 2)).unwrap();
        oracle.drained(0).unwrap();
    }

    #[test]
    fn a_process_group_alive_when_the_stopped_process_exits_is_reported() {
        let oracle = DrainOracle::default();
        oracle.stopped(&[]).unwrap();
        let err = oracle.stopped(&[1007]).unwrap_err();
        assert_eq!(err.invariant, "no_child_outlives_a_stop");
        assert!(err.detail.contains("1007"), "{}", err.detail);
    }
}
