//! Runs followed from their queueing to their end, each with what one check keeps of it (its
//! agent, source, reason, task): the bookkeeping the checks of invariants 38 and 40 share. A run
//! re-queued after a restart (`run_requeued`, not coalesced) keeps its original's (docs/api.md,
//! the run's `retry_of`); one re-queued onto a queued run adds nothing to it.

use std::collections::BTreeMap;

/// Unfinished runs, and the run each agent finished last (the only one a re-queue may copy).
#[derive(Debug)]
pub struct QueuedRuns<T> {
    live: BTreeMap<u64, T>,
    last_finished: BTreeMap<u64, (u64, T)>,
}

impl<T> Default for QueuedRuns<T> {
    fn default() -> Self {
        QueuedRuns {
            live: BTreeMap::new(),
            last_finished: BTreeMap::new(),
        }
    }
}

impl<T: Clone> QueuedRuns<T> {
    /// `run` was queued (`wakeup_queued`).
    pub fn queued(&mut self, run: u64, value: T) {
        self.live.insert(run, value);
    }

    pub fn get(&self, run: u64) -> Option<&T> {
        self.live.get(&run)
    }

    pub fn get_mut(&mut self, run: u64) -> Option<&mut T> {
        self.live.get_mut(&run)
    }

    /// `run` of `agent` was re-queued as a retry of `retry_of` (not coalesced).
    pub fn requeued(&mut self, run: u64, agent: u64, retry_of: u64) {
        if let Some((finished, original)) = self.last_finished.get(&agent) {
            if *finished == retry_of {
                self.live.insert(run, original.clone());
            }
        }
    }

    /// `run` of `agent` finished: what was kept of it, if it was followed.
    pub fn finished(&mut self, run: u64, agent: u64) -> Option<T> {
        let value = self.live.remove(&run)?;
        self.last_finished.insert(agent, (run, value.clone()));
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requeued_run_keeps_its_originals_only_when_retrying_the_run_just_finished() {
        let mut runs = QueuedRuns::default();
        runs.queued(5, "five");
        runs.queued(6, "six");
        assert_eq!(runs.finished(5, 1), Some("five"));
        assert_eq!(runs.get(5), None);
        runs.requeued(7, 1, 5);
        assert_eq!(runs.get(7), Some(&"five"));
        runs.requeued(8, 1, 4);
        assert_eq!(runs.get(8), None, "not the run that just finished");
        runs.requeued(9, 2, 5);
        assert_eq!(runs.get(9), None, "another agent's");
        assert_eq!(runs.finished(10, 1), None, "never queued");
    }
}
