//! `vigil-sim fleet FILE` (issue 19): a user's own fleet file, simulated for days over many
//! seeds on the same runtime code, reported from each seed's trace, and judged against the
//! file's `[expect]` section and every runtime invariant. docs/fleet-simulation.md is the
//! user's guide.
//!
//! - [`config`]: the `[simulation]` and `[expect]` sections, fault profiles;
//! - [`world`]: the fleet made a simulation (agents, provider, tools, workload);
//! - [`reduce`]: one seed's trace to its per-day counts and first breaches (the trace is then
//!   dropped: memory does not grow with the seeds);
//! - [`report`]: the seeds' counts to a [`FleetReport`].

pub mod config;
pub mod reduce;
pub mod report;
pub mod world;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vigil_world::harness::simulate;

use crate::fleet_report::FleetReport;
pub use world::FleetPlan;

/// A seed that needs more than this many times its simulated length is stuck.
const TIME_LIMIT_FACTOR: u64 = 2;

/// Runs `seed` of `plan`; writes its whole trace to `trace` if given; returns its summary. The
/// trace is reduced (and written) record by record as the simulation goes, never kept whole:
/// a seed's memory follows its fleet's size, not its number of events.
pub fn run_seed(
    plan: &Arc<FleetPlan>,
    checks: &Arc<[reduce::Check]>,
    seed: u64,
    timelines: bool,
    trace: Option<&Path>,
) -> Result<reduce::SeedSummary, String> {
    // Day 1 starts at most a day after the simulation does (the lead to a local midnight).
    let time_limit = Duration::from_millis((plan.virtual_ms() + config::DAY_MS) * TIME_LIMIT_FACTOR);
    let out = match trace {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path).map_err(
            |e| format!("could not write the trace to {}: {e}", path.display()),
        )?)),
        None => None,
    };
    let stream: Arc<Mutex<Option<Stream>>> = Arc::default();
    let (for_seed, checks_of_seed, stream_of_seed) = (plan.clone(), checks.clone(), stream.clone());
    crate::keep_freed_memory();
    let result = simulate(seed, time_limit, move |recorder| async move {
        let lead_ms = for_seed.lead_ms(vigil_world::harness::epoch_wall_ms());
        let reducer = reduce::Reducer::new(for_seed.clone(), checks_of_seed, lead_ms, timelines);
        *stream_of_seed.lock().expect("fleet lock") = Some(Stream {
            reducer,
            out,
            error: None,
        });
        let sink = stream_of_seed.clone();
        recorder.stream_to(move |record| {
            if let Some(stream) = sink.lock().expect("fleet lock").as_mut() {
                stream.observe(record);
            }
        });
        let setup = for_seed.setup(seed, lead_ms);
        crate::phases::run(setup, recorder).await;
    });
    let stream = stream
        .lock()
        .expect("fleet lock")
        .take()
        .ok_or_else(|| format!("seed {seed}: the simulation ended before it started"))?;
    let violation = result
        .violation
        .map(|(t_ms, v)| (t_ms, v.invariant.to_string(), v.detail));
    stream.finish(seed, violation, trace)
}

/// Where one seed's trace goes as it is written: its reducer, and the trace file if asked for.
struct Stream {
    reducer: reduce::Reducer,
    out: Option<std::io::BufWriter<std::fs::File>>,
    /// The first failed write to the trace file (the file is then left as it is).
    error: Option<std::io::Error>,
}

impl Stream {
    fn observe(&mut self, record: &vigil_world::trace::TraceRecord) {
        self.reducer.observe(record);
        if let (Some(out), None) = (self.out.as_mut(), &self.error) {
            let line = record.line();
            if let Err(e) = out
                .write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
            {
                self.error = Some(e);
            }
        }
    }

    fn finish(
        self,
        seed: u64,
        violation: Option<(u64, String, String)>,
        trace: Option<&Path>,
    ) -> Result<reduce::SeedSummary, String> {
        let written = match (self.error, self.out) {
            (Some(e), _) => Err(e),
            (None, Some(mut out)) => out.flush(),
            (None, None) => Ok(()),
        };
        if let (Err(e), Some(path)) = (written, trace) {
            return Err(format!("could not write the trace to {}: {e}", path.display()));
        }
        Ok(self.reducer.summary(seed, violation))
    }
}

/// Runs every seed of `seeds` on `jobs` threads (each seed alone in its own simulation, its
/// trace reduced and dropped as it ends) and builds the report. `progress` is called after
/// each seed with the count done. `trace` (one seed only) receives the whole trace.
pub fn simulate_fleet(
    plan: FleetPlan,
    world: Option<&str>,
    seeds: &[u64],
    jobs: usize,
    trace: Option<&Path>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<FleetReport, String> {
    if trace.is_some() && seeds.len() != 1 {
        return Err("--trace writes one seed's trace: give --seed S".into());
    }
    let plan = Arc::new(plan);
    let checks: Arc<[reduce::Check]> = reduce::checks(&plan).into();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let summaries = Mutex::new(Vec::new());
    let error = Mutex::new(None);
    let first_seed = seeds.iter().copied().min();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(&seed) = seeds.get(index) else {
                    return;
                };
                match run_seed(&plan, &checks, seed, Some(seed) == first_seed, trace) {
                    Ok(summary) => summaries.lock().expect("fleet lock").push(summary),
                    Err(e) => *error.lock().expect("fleet lock") = Some(e),
                }
                progress(done.fetch_add(1, Ordering::SeqCst) + 1);
            });
        }
    });
    if let Some(e) = error.into_inner().expect("fleet lock") {
        return Err(e);
    }
    let summaries = summaries.into_inner().expect("fleet lock");
    Ok(report::build(&plan, world, &checks, summaries))
}

/// The lines printed on stderr for each broken expectation and invariant.
pub fn failure_lines(report: &FleetReport) -> String {
    let mut text = String::new();
    let mut breach = |what: String, b: &crate::fleet_report::Breach| {
        text.push_str(&format!(
            "FAILED {what}: seed {} at t={}.{:03}s (day {}){}\n  expected: {}\n  actual:   {}\n  replay:   {}\n",
            b.seed,
            b.at_ms / 1_000,
            b.at_ms % 1_000,
            b.day,
            b.agent.as_ref().map_or(String::new(), |a| format!(", agent {a}")),
            b.expected,
            b.actual,
            b.replay
        ));
    };
    for e in &report.expectations {
        if let Some(b) = &e.breach {
            breach(format!("expectation `{}` ({})", e.expectation, e.scope), b);
        }
    }
    for b in &report.invariant_violations {
        breach("runtime invariant".into(), b);
    }
    text
}
