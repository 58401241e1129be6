//! The coordinator's scenarios under the simulator (docs/invariants.md, invariants 1, 4, 5, 6 and 11):
//! 500 seeds of each pass, each scenario really exercises what it is named for, and the event
//! stream of one pinned seed is a reviewed snapshot.
#![cfg(madsim)]

mod sim_support;

use vigil::engine::event::EventKind;
use vigil::engine::run::CONTROL_PLANE_RESTART;
use vigil_scenarios::run::{find, run_seed};
use vigil_world::trace::{TraceEvent, TraceRecord};

/// Seeds each coordinator scenario must pass in CI.
const SEEDS: u64 = 500;
/// Seeds looked at to prove a scenario exercises its subject.
const COVERAGE_SEEDS: u64 = 10;

fn sweep_passes(name: &str) {
    sim_support::sweep_passes(name, SEEDS);
}

/// Every committed event of the first `COVERAGE_SEEDS` seeds of `name`, all passing.
fn committed(name: &str) -> Vec<EventKind> {
    let scenario = find(name).expect("scenario exists");
    let mut kinds = Vec::new();
    for seed in 0..COVERAGE_SEEDS {
        let outcome = run_seed(scenario, seed);
        assert!(
            outcome.passed(),
            "{}",
            outcome.failure_report().unwrap_or_default()
        );
        kinds.extend(outcome.records.into_iter().filter_map(|r| match r.event {
            TraceEvent::Committed { event } => Some(event.kind),
            _ => None,
        }));
    }
    kinds
}

fn acks(name: &str) -> Vec<TraceRecord> {
    let scenario = find(name).expect("scenario exists");
    (0..COVERAGE_SEEDS)
        .flat_map(|seed| run_seed(scenario, seed).records)
        .filter(|r| matches!(r.event, TraceEvent::AckedWakeup { .. }))
        .collect()
}

#[test]
fn coalesce_burst_passes_500_seeds() {
    sweep_passes("coalesce_burst");
}

#[test]
fn idempotency_passes_500_seeds() {
    sweep_passes("idempotency");
}

#[test]
fn crash_mid_run_passes_500_seeds() {
    sweep_passes("crash_mid_run");
}

#[test]
fn coalesce_burst_really_coalesces() {
    let kinds = committed("coalesce_burst");
    let coalesced = kinds
        .iter()
        .filter(|k| matches!(k, EventKind::WakeupCoalesced { .. }))
        .count();
    let queued = kinds
        .iter()
        .filter(|k| matches!(k, EventKind::WakeupQueued { .. }))
        .count();
    // Hundreds of wakeups per burst over four task keys: most of them must coalesce.
    assert!(
        coalesced > 5 * queued,
        "coalesced={coalesced} queued={queued}"
    );
}

#[test]
fn idempotency_really_replays_retries() {
    let acks = acks("idempotency");
    let replayed = acks
        .iter()
        .filter(|r| matches!(r.event, TraceEvent::AckedWakeup { replayed: true, .. }))
        .count();
    assert!(
        replayed > acks.len() / 3,
        "replayed={replayed} of {} answers",
        acks.len()
    );
}

#[test]
fn crash_mid_run_really_interrupts_runs_and_requeues_them() {
    let kinds = committed("crash_mid_run");
    let interrupted = kinds
        .iter()
        .filter(|k| matches!(k, EventKind::RunFinished { detail, .. } if detail == CONTROL_PLANE_RESTART))
        .count();
    let requeued = kinds
        .iter()
        .filter(|k| matches!(k, EventKind::RunRequeued { .. }))
        .count();
    assert!(
        interrupted >= COVERAGE_SEEDS as usize,
        "interrupted={interrupted}"
    );
    assert!(
        requeued > 0 && requeued <= interrupted,
        "requeued={requeued} interrupted={interrupted}"
    );
}

/// The event stream of `crash_mid_run` seed 7, one event per line. A change in the runtime's
/// behaviour shows up here in review; accept it with `cargo insta review` (or delete the
/// snapshot and re-run) only if it is intended.
#[test]
fn event_stream_of_a_pinned_seed() {
    let outcome = run_seed(find("crash_mid_run").expect("scenario exists"), 7);
    assert!(
        outcome.passed(),
        "{}",
        outcome.failure_report().unwrap_or_default()
    );
    let stream: Vec<String> = outcome
        .records
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::Committed { event } => {
                Some(serde_json::to_string(event).expect("events serialize"))
            }
            _ => None,
        })
        .collect();
    insta::assert_snapshot!("crash_mid_run_seed_7_event_stream", stream.join("\n"));
}
