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

use tokio::sync::watch;
use vigil::engine::agent::AdapterSpec;
use vigil::engine::breaker::FailureCause;
use vigil::engine::run::RunStatus;
use vigil::exec::adapter::{
    adapter_for, Adapter, AdapterFuture, AdapterOutcome, AdapterSource, RunContext,
    SharedAdapterSource,
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
#[derive(Debug, Clone)]
pub struct RunFaults {
    failures_open: Arc<Mutex<u32>>,
    /// Open `run_hang` windows; hung runs wait for it to reach zero.
    hangs_open: Arc<watch::Sender<u32>>,
}

impl Default for RunFaults {
    fn default() -> Self {
        RunFaults {
            failures_open: Arc::default(),
            hangs_open: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl RunFaults {
    /// Opens one window of `fault`.
    pub fn open(&self, fault: RunFault) {
        match fault {
            RunFault::Failure => *self.failures_open.lock().expect("run faults lock") += 1,
            RunFault::Hang => self.hangs_open.send_modify(|n| *n += 1),
        }
    }

    /// Closes one window of `fault` (opened before).
    pub fn close(&self, fault: RunFault) {
        match fault {
            RunFault::Failure => {
                let mut open = self.failures_open.lock().expect("run faults lock");
                *open = open.checked_sub(1).expect("a closed window was opened");
            }
            RunFault::Hang => self.hangs_open.send_modify(|n| {
                *n = n.checked_sub(1).expect("a closed window was opened");
            }),
        }
    }

    /// Closes every window (the quiet phase); hung runs error out now.
    pub fn heal(&self) {
        *self.failures_open.lock().expect("run faults lock") = 0;
        self.hangs_open.send_replace(0);
    }

    /// The fault a run starting now meets; a hang wins over a failure.
    pub fn striking(&self) -> Option<RunFault> {
        if *self.hangs_open.borrow() > 0 {
            Some(RunFault::Hang)
        } else if *self.failures_open.lock().expect("run faults lock") > 0 {
            Some(RunFault::Failure)
        } else {
            None
        }
    }

    /// The adapter source for a node whose runs these windows strike.
    pub fn adapters(&self) -> SharedAdapterSource {
        Arc::new(FaultyAdapters {
            faults: self.clone(),
        })
    }
}

/// The production adapters, with the run faults in front of them.
struct FaultyAdapters {
    faults: RunFaults,
}

impl AdapterSource for FaultyAdapters {
    fn adapter_for(&self, spec: &AdapterSpec) -> Box<dyn Adapter> {
        Box::new(FaultyAdapter {
            inner: adapter_for(spec),
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
                AdapterOutcome {
                    status: RunStatus::Failed,
                    detail: FAILURE_DETAIL.into(),
                    cause: Some(FailureCause::Tool),
                }
            }),
            Some(RunFault::Hang) => {
                let mut hangs_open = self.faults.hangs_open.subscribe();
                Box::pin(async move {
                    // The sender lives as long as the world; an error cannot happen but would
                    // only end the hang.
                    let _ = hangs_open.wait_for(|open| *open == 0).await;
                    AdapterOutcome {
                        status: RunStatus::Failed,
                        detail: HANG_HEALED_DETAIL.into(),
                        cause: Some(FailureCause::Tool),
                    }
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
