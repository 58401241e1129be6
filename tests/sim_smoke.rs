//! The `smoke` scenario under the simulator: a 100-seed sweep with zero failures, and the whole
//! trace identical when a seed runs twice (invariant 13), on 20 more seeds.
//!
//! Why these counts: a smoke seed is a simulated day of ten agents, about 2 CPU-seconds (10,000
//! commits, nine recoveries), the costliest seed of the suite; at 300 + 50 seeds the two tests took
//! 7 of CI's 30 minutes on 2 cores (docs/simulation.md, "How long it takes"). The swarm sweep
//! runs smoke's seeds with other faults beside these; `cargo xtask sweep smoke N` sweeps more.
#![cfg(madsim)]

use vigil_scenarios::run::{find, sweep, Outcome, SweepOptions, SweepSummary};

/// Seeds the sweep runs.
const SWEEP_SEEDS: u64 = 100;
/// Further seeds each run twice and compared whole.
const DETERMINISM_SEEDS: u64 = 12;

fn jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn assert_no_failures(summary: &SweepSummary) {
    for outcome in &summary.failed {
        eprintln!("{}", outcome.failure_report().unwrap_or_default());
        eprintln!("{}", outcome.result_line());
    }
    println!("{}", summary.result_line());
    assert!(
        summary.failed.is_empty(),
        "{} seeds failed: {}",
        summary.failed.len(),
        summary.result_line()
    );
}

fn quiet(_: u64, _: u64, _: &Outcome) {}

#[test]
fn smoke_sweep_of_100_seeds_passes() {
    let smoke = find("smoke").expect("smoke scenario");
    let summary = sweep(
        smoke,
        SweepOptions {
            start: 0,
            seeds: SWEEP_SEEDS,
            jobs: jobs(),
            check_determinism: false,
        },
        &quiet,
    );
    assert_no_failures(&summary);
    assert_eq!(summary.seeds, SWEEP_SEEDS);
    // Crashes, interrupted commits, resumed streams, timers and backward jumps all happened.
    println!("{}", summary.coverage_table());
    assert!(summary.coverage_gaps().is_empty(), "{}", summary.coverage_table());
    // 24 simulated hours each: a run that stopped early would have failed above, but make sure
    // the sweep really simulated the days it claims.
    assert_eq!(summary.virtual_ms_total, SWEEP_SEEDS * smoke.virtual_ms);
}

#[test]
fn same_seed_gives_the_same_whole_trace_on_12_seeds() {
    let smoke = find("smoke").expect("smoke scenario");
    let summary = sweep(
        smoke,
        SweepOptions {
            start: 10_000,
            seeds: DETERMINISM_SEEDS,
            jobs: jobs(),
            check_determinism: true,
        },
        &quiet,
    );
    assert_no_failures(&summary);
}
