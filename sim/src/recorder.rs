//! The recorder: appends to the trace and runs the oracle on every record, so the first broken
//! invariant stops the run at the virtual instant it broke.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::check::{Checker, Violation};
use crate::trace::{TraceEvent, TraceRecord};

#[derive(Debug)]
struct Inner {
    records: Vec<TraceRecord>,
    /// Records written so far, kept or streamed, and the virtual instant of the last one.
    written: usize,
    last_t_ms: u64,
    /// Where records go instead of `records`, once [`Recorder::stream_to`] is called.
    sink: Option<Sink>,
    checker: Checker,
    violation: Option<(u64, Violation)>,
    /// The run replaces its scenario's designed faults by a swarm choice (faults/src/swarm.rs).
    swarm: bool,
    /// Set by [`Recorder::finish`]: the trace is complete, and whatever the world does while it
    /// is torn down is not part of it.
    sealed: bool,
}

/// Most records one run may keep. A run past it is stopped with a violation (a runaway loop
/// somewhere), rather than growing until the machine runs out of memory. The longest designed
/// run (a 2-day swarm seed with storms) writes under a million. A streamed trace
/// ([`Recorder::stream_to`]) keeps nothing, so it has no such bound: its run's time limit stops
/// a runaway.
pub const TRACE_RECORDS_MAX: usize = 3_000_000;

/// A consumer of trace records as they are written.
struct Sink(Box<dyn FnMut(&TraceRecord) + Send>);

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sink")
    }
}

impl Inner {
    /// Appends `record` to the trace: kept, or handed to the sink.
    fn push(&mut self, record: TraceRecord) {
        self.written += 1;
        self.last_t_ms = record.t_ms;
        match self.sink.as_mut() {
            Some(Sink(sink)) => sink(&record),
            None => self.records.push(record),
        }
    }
}

/// Shared by every node and the harness of one run. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Recorder {
    inner: Arc<Mutex<Inner>>,
    elapsed: fn() -> Duration,
}

impl Recorder {
    /// An empty trace; `elapsed` reads virtual time since the start of the run.
    pub fn new(elapsed: fn() -> Duration) -> Self {
        Recorder {
            inner: Arc::new(Mutex::new(Inner {
                records: Vec::new(),
                written: 0,
                last_t_ms: 0,
                sink: None,
                checker: Checker::new(),
                violation: None,
                swarm: false,
                sealed: false,
            })),
            elapsed,
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // A panic inside the simulated world may poison the lock; the trace up to it is still
        // the best evidence there is, so keep reading it.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes this run a swarm run (set before the scenario starts).
    pub fn set_swarm(&self, swarm: bool) {
        self.inner().swarm = swarm;
    }

    /// Whether this run uses a swarm choice of faults instead of its scenario's own.
    pub fn swarm(&self) -> bool {
        self.inner().swarm
    }

    /// Records in the trace so far.
    pub fn records_len(&self) -> usize {
        self.inner().written
    }

    /// The virtual instant of the last record written (0 before any).
    pub fn last_t_ms(&self) -> u64 {
        self.inner().last_t_ms
    }

    /// From now on every record goes to `sink` as it is written (after the oracle saw it) and
    /// none is kept: a run whose trace is reduced as it goes (`vigil-sim fleet`) keeps memory
    /// that follows its world, not its length. `take_records` then answers only what was kept
    /// before. The sink runs under the recorder's lock: it must not record.
    pub fn stream_to(&self, sink: impl FnMut(&TraceRecord) + Send + 'static) {
        self.inner().sink = Some(Sink(Box::new(sink)));
    }

    /// Appends one record and checks it. After the first violation nothing more is recorded.
    pub fn record(&self, node: &'static str, event: TraceEvent) {
        let t_ms = (self.elapsed)().as_millis() as u64;
        let mut inner = self.inner();
        if inner.violation.is_some() || inner.sealed {
            return;
        }
        let record = TraceRecord { t_ms, node, event };
        let verdict = if inner.records.len() >= TRACE_RECORDS_MAX {
            Err(Violation {
                invariant: "trace_bounded",
                detail: format!(
                    "the run wrote {TRACE_RECORDS_MAX} trace records by {t_ms} ms: a runaway loop (last: {})",
                    record.line()
                ),
            })
        } else {
            inner.checker.observe(&record)
        };
        inner.push(record);
        if let Err(violation) = verdict {
            inner.push(TraceRecord {
                t_ms,
                node,
                event: TraceEvent::Violation {
                    invariant: violation.invariant,
                    detail: violation.detail.clone(),
                },
            });
            inner.violation = Some((t_ms, violation));
        }
    }

    /// Runs the end-of-run checks (liveness) and records their verdict.
    pub fn finish(&self) {
        let t_ms = (self.elapsed)().as_millis() as u64;
        let mut inner = self.inner();
        if inner.violation.is_some() || inner.sealed {
            return;
        }
        inner.sealed = true;
        if let Err(violation) = inner.checker.finish(t_ms) {
            inner.push(TraceRecord {
                t_ms,
                node: "sim",
                event: TraceEvent::Violation {
                    invariant: violation.invariant,
                    detail: violation.detail.clone(),
                },
            });
            inner.violation = Some((t_ms, violation));
        }
    }

    /// The first violation and its virtual time, if any.
    pub fn violation(&self) -> Option<(u64, Violation)> {
        self.inner().violation.clone()
    }

    /// Whether the run must stop.
    pub fn failed(&self) -> bool {
        self.inner().violation.is_some()
    }

    /// Durable runtime events known to the oracle.
    pub fn durable_events(&self) -> u64 {
        self.inner().checker.durable_events()
    }

    /// The whole trace so far.
    pub fn records(&self) -> Vec<TraceRecord> {
        self.inner().records.clone()
    }

    /// The whole trace, moved out (the run is over; no second copy of a long trace).
    pub fn take_records(&self) -> Vec<TraceRecord> {
        std::mem::take(&mut self.inner().records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runaway_trace_stops_at_its_bound_with_a_violation() {
        let recorder = Recorder::new(|| Duration::ZERO);
        for _ in 0..TRACE_RECORDS_MAX {
            recorder.record("sim", TraceEvent::QuietPhase);
        }
        assert!(!recorder.failed(), "the bound itself is allowed");
        recorder.record("sim", TraceEvent::QuietPhase);
        let (_, violation) = recorder.violation().expect("stopped");
        assert_eq!(violation.invariant, "trace_bounded");
        assert_eq!(recorder.records_len(), TRACE_RECORDS_MAX + 2);
        recorder.record("sim", TraceEvent::QuietPhase);
        assert_eq!(
            recorder.records_len(),
            TRACE_RECORDS_MAX + 2,
            "nothing after"
        );
    }

    #[test]
    fn a_streamed_trace_goes_to_its_sink_in_order_and_is_not_kept_nor_bounded() {
        let recorder = Recorder::new(|| Duration::ZERO);
        recorder.record("sim", TraceEvent::QuietPhase);
        // (count, first line): a streamed trace's sink sees every record in order.
        let seen = Arc::new(Mutex::new((0_usize, None::<String>)));
        let sink = seen.clone();
        recorder.stream_to(move |record| {
            let mut seen = sink.lock().unwrap();
            seen.0 += 1;
            seen.1.get_or_insert_with(|| record.line());
        });
        for _ in 0..TRACE_RECORDS_MAX + 10 {
            recorder.record("workload", TraceEvent::QuietPhase);
        }
        assert!(!recorder.failed(), "a streamed trace keeps nothing, so it is not bounded");
        assert_eq!(recorder.records_len(), TRACE_RECORDS_MAX + 11, "every record counts");
        let kept = recorder.take_records();
        assert_eq!(kept.len(), 1, "only what came before the sink is kept");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.0, TRACE_RECORDS_MAX + 10);
        let first = seen.1.as_deref().unwrap();
        assert!(first.contains("\"node\":\"workload\""), "{first}");
    }
}

/// Records [`TraceEvent::CallEnded`] for a served call when dropped: when its handler answers,
/// or when the runtime drops the connection and the server drops the handler with it.
pub struct CallGuard {
    recorder: Recorder,
    node: &'static str,
    agent: Option<u64>,
    run: Option<u64>,
}

impl CallGuard {
    pub fn new(
        recorder: &Recorder,
        node: &'static str,
        agent: Option<u64>,
        run: Option<u64>,
    ) -> Self {
        Self {
            recorder: recorder.clone(),
            node,
            agent,
            run,
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.recorder.record(
            self.node,
            TraceEvent::CallEnded {
                agent: self.agent,
                run: self.run,
            },
        );
    }
}
