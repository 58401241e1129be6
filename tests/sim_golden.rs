//! Golden traces: the whole trace of three pinned seeds, as reviewed snapshots. Any change in the
//! runtime's behaviour, the faults or the workload shows up in review as a diff of these files;
//! accept an intended change with `cargo insta review` (or delete the snapshot and re-run).
#![cfg(madsim)]

use vigil_scenarios::run::{find, run_seed};

fn golden(scenario: &str, seed: u64) -> String {
    let outcome = run_seed(find(scenario).expect("scenario exists"), seed);
    assert!(
        outcome.passed(),
        "{}",
        outcome.failure_report().unwrap_or_default()
    );
    let mut text: Vec<String> = outcome.records.iter().map(|r| r.line()).collect();
    text.push(format!("trace_hash={}", outcome.trace_hash()));
    text.join("\n")
}

#[test]
fn crash_mid_run_seed_1() {
    insta::assert_snapshot!("golden_crash_mid_run_seed_1", golden("crash_mid_run", 1));
}

#[test]
fn crash_mid_run_seed_2() {
    insta::assert_snapshot!("golden_crash_mid_run_seed_2", golden("crash_mid_run", 2));
}

#[test]
fn idempotency_seed_2() {
    insta::assert_snapshot!("golden_idempotency_seed_2", golden("idempotency", 2));
}
