//! What the simulation test files share: sweeping a scenario on every core and failing with
//! the failure reports of every seed that broke an invariant.

use vigil_scenarios::run::{find, sweep, SweepOptions};

/// Parallel runs: every core.
pub fn jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Sweeps seeds `0..seeds` of scenario `name` and fails, printing each failing seed's report,
/// unless every seed passes and really simulated the scenario's whole length.
pub fn sweep_passes(name: &str, seeds: u64) {
    sweep_from_passes(name, 0, seeds, false);
}

// Not every simulation test file checks determinism through here.
#[allow(dead_code)]
/// Runs seeds `start..start + seeds` of scenario `name` twice each and fails unless every seed
/// passes both times with the same whole trace (invariant 13).
pub fn same_trace_twice(name: &str, start: u64, seeds: u64) {
    sweep_from_passes(name, start, seeds, true);
}

fn sweep_from_passes(name: &str, start: u64, seeds: u64, check_determinism: bool) {
    let scenario = find(name).expect("scenario exists");
    let options = SweepOptions {
        start,
        seeds,
        jobs: jobs(),
        check_determinism,
    };
    let summary = sweep(scenario, options, &|_, _, _| {});
    for outcome in &summary.failed {
        eprintln!("{}", outcome.failure_report().unwrap_or_default());
        eprintln!("{}", outcome.result_line());
    }
    println!("{}", summary.coverage_table());
    println!("{}", summary.result_line());
    assert!(summary.failed.is_empty(), "{}", summary.result_line());
    assert_eq!(summary.virtual_ms_total, seeds * scenario.virtual_ms);
    // A sweep that never met a precondition the scenario is built to reach checked nothing of
    // that invariant, however green.
    let gaps = summary.coverage_gaps();
    assert!(
        gaps.is_empty(),
        "{name}: no seed met {gaps:?}\n{}",
        summary.coverage_table()
    );
}
