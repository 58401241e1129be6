//! Run faults: `run_hang` and `run_failure` (docs/faults.md). The node's executor gets its
//! adapters through [`FaultyAdapters`], which wraps the production adapters: a run that starts
//! while a `run_failure` window is open fails at once as a failed tool call; one that starts
//! while a `run_hang` window is open never answers, so the executor's run timeout ends it
//! (`timed_out`), or, if the window heals first, the stuck call errors out then. Everything
//! after the adapter (timeouts, the breaker, the next queued run) is the production code.
//!
//! The windows outlive restarts of the node: the runner opens and closes them on a
//! [`RunFaults`] the node's every start shares.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use vigil::engine::agent::AdapterSpec;
use vigil::engine::breaker::FailureCause;
use vigil::engine::run::RunStatus;
use vigil::exec::adapter::{
    Adapter, AdapterFuture, AdapterOutcome, AdapterSource, RunContext,
    BuiltinAdapters, SharedAdapterSource,
};

/// What a run fault does to a run that starts while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunFault {
    /// The run's call never answers.
    Hang,
    /// The run fails at once: a tool call failed.
    Failure,
}

/// Detail of a run failed by `run_failure`.
pub const FAILURE_DETAIL: &str = "run_failure fault: a tool call failed";
/// Detail of a hung run whose window healed before the executor's timeout ended it.
pub const HANG_HEALED_DETAIL: &str = "run_hang fault: the hung call failed when the fault healed";

/// The open run-fault windows of one node, counted per kind (windows of a kind may overlap).
///
/// Hung runs wait on a `Notify`, never on a `tokio::sync::watch`: a watch channel spreads its
/// waiters over several queues picked by tokio's own thread-local random numbers, so the order
/// in which hung runs woke (and so the order of their `run_finished` events) would differ from
/// one run of a seed to the next. `Notify::notify_waiters` wakes in the order they waited.
#[derive(Debug, Clone, Default)]
pub struct RunFaults {
    open: Arc<Mutex<Open>>,
    /// Notified when the last open `run_hang` window closes.
    hangs_healed: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Open {
    hangs: u32,
    failures: u32,
}

impl RunFaults {
    fn open_windows(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().expect("run faults lock")
    }

    /// Opens one window of `fault`.
    pub fn open(&self, fault: RunFault) {
        let mut open = self.open_windows();
        match fault {
            RunFault::Failure => open.failures += 1,
            RunFault::Hang => open.hangs += 1,
        }
    }

    /// Closes one window of `fault` (opened before).
    pub fn close(&self, fault: RunFault) {
        let mut open = self.open_windows();
        let count = match fault {
            RunFault::Failure => &mut open.failures,
            RunFault::Hang => &mut open.hangs,
        };
        *count = count.checked_sub(1).expect("a closed window was opened");
        if fault == RunFault::Hang && open.hangs == 0 {
            self.hangs_healed.notify_waiters();
        }
    }

    /// Closes every window (the quiet phase); hung runs error out now.
    pub fn heal(&self) {
        *self.open_windows() = Open::default();
        self.hangs_healed.notify_waiters();
    }

    /// The fault a run starting now meets; a hang wins over a failure.
    pub fn striking(&self) -> Option<RunFault> {
        let open = self.open_windows();
        if open.hangs > 0 {
            Some(RunFault::Hang)
        } else if open.failures > 0 {
            Some(RunFault::Failure)
        } else {
            None
        }
    }

    /// Waits until no `run_hang` window is open.
    async fn hangs_closed(&self) {
        loop {
            let healed = self.hangs_healed.notified();
            tokio::pin!(healed);
            // Registered before looking, so a heal between the look and the wait is not missed.
            healed.as_mut().enable();
            if self.open_windows().hangs == 0 {
                return;
            }
            healed.await;
        }
    }

    /// The adapter source for a node whose runs these windows strike.
    pub fn adapters(&self) -> SharedAdapterSource {
        Arc::new(FaultyAdapters {
            builtin: BuiltinAdapters::default(),
            faults: self.clone(),
        })
    }
}

/// The production adapters, with the run faults in front of them.
struct FaultyAdapters {
    builtin: BuiltinAdapters,
    faults: RunFaults,
}

impl AdapterSource for FaultyAdapters {
    fn adapter_for(&self, spec: &AdapterSpec) -> Box<dyn Adapter> {
        Box::new(FaultyAdapter {
            inner: self.builtin.adapter(spec),
            faults: self.faults.clone(),
        })
    }
}

struct FaultyAdapter {
    inner: Box<dyn Adapter>,
    faults: RunFaults,
}

impl Adapter for FaultyAdapter {
    fn execute(&self, run: RunContext) -> AdapterFuture {
        match self.faults.striking() {
            None => self.inner.execute(run),
            Some(RunFault::Failure) => Box::pin(async {
                AdapterOutcome::new(RunStatus::Failed, FAILURE_DETAIL, Some(FailureCause::Tool))
            }),
            Some(RunFault::Hang) => {
                let faults = self.faults.clone();
                Box::pin(async move {
                    faults.hangs_closed().await;
                    AdapterOutcome::new(
                        RunStatus::Failed,
                        HANG_HEALED_DETAIL,
                        Some(FailureCause::Tool),
                    )
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_count_per_kind_and_a_hang_wins() {
        let faults = RunFaults::default();
        assert_eq!(faults.striking(), None);
        faults.open(RunFault::Failure);
        assert_eq!(faults.striking(), Some(RunFault::Failure));
        faults.open(RunFault::Hang);
        faults.open(RunFault::Hang);
        assert_eq!(faults.striking(), Some(RunFault::Hang));
        faults.close(RunFault::Hang);
        assert_eq!(faults.striking(), Some(RunFault::Hang), "one hang is still open");
        faults.close(RunFault::Hang);
        assert_eq!(faults.striking(), Some(RunFault::Failure));
        faults.heal();
        assert_eq!(faults.striking(), None);
    }

    #[test]
    #[should_panic(expected = "a closed window was opened")]
    fn closing_a_window_never_opened_is_a_bug() {
        RunFaults::default().close(RunFault::Failure);
    }
}
