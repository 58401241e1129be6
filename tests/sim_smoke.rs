//! The `smoke` scenario under the simulator: a 300-seed sweep with zero failures, and the whole
//! trace identical when a seed runs twice (invariant 13), on 50 seeds.
#![cfg(madsim)]

use vigil_scenarios::run::{find, sweep, Outcome, SweepOptions, SweepSummary};

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
fn smoke_sweep_of_300_seeds_passes() {
    let smoke = find("smoke").expect("smoke scenario");
    let summary = sweep(
        smoke,
        SweepOptions {
            start: 0,
            seeds: 300,
            jobs: jobs(),
            check_determinism: false,
        },
        &quiet,
    );
    assert_no_failures(&summary);
    assert_eq!(summary.seeds, 300);
    // Crashes, interrupted commits, resumed streams, timers and backward jumps all happened.
    println!("{}", summary.coverage_table());
    assert!(summary.coverage_gaps().is_empty(), "{}", summary.coverage_table());
    // 24 simulated hours each: a run that stopped early would have failed above, but make sure
    // the sweep really simulated the days it claims.
    assert_eq!(summary.virtual_ms_total, 300 * smoke.virtual_ms);
}

#[test]
fn same_seed_gives_the_same_whole_trace_on_50_seeds() {
    let smoke = find("smoke").expect("smoke scenario");
    let summary = sweep(
        smoke,
        SweepOptions {
            start: 10_000,
            seeds: 50,
            jobs: jobs(),
            check_determinism: true,
        },
        &quiet,
    );
    assert_no_failures(&summary);
}
