//! The `edges` scenario under the simulator (issue 16, contract checks): every documented limit
//! of an agent's spec (each adapter type's own fields too), a spec change, a wakeup and a pause, sent at its edge and just past it
//! across crashes, power cuts and clock jumps. Seeds pass invariants 33–35 (check/edges.rs),
//! give the same whole trace twice, and really reach both sides of the limits: requests taken
//! right at an edge, requests refused naming many different fields, every kind of request, and
//! specs read back after recoveries.
#![cfg(madsim)]

// Shared with the other simulation tests; this file uses part of it.
#[allow(dead_code)]
mod sim_support;

use std::collections::{BTreeMap, BTreeSet};

use vigil_scenarios::run::{find, run_seed};
use vigil_world::trace::TraceEvent;

#[test]
fn edges_sweep_of_200_seeds_passes() {
    sim_support::sweep_passes("edges", 200);
}

#[test]
fn edges_are_deterministic() {
    sim_support::same_trace_twice("edges", 5_000, 10);
}

#[test]
fn edges_reach_both_sides_of_the_limits() {
    let scenario = find("edges").expect("scenario exists");
    // (kind, taken) -> answers; the fields refusals named.
    let mut answers: BTreeMap<(String, bool), u64> = BTreeMap::new();
    let mut fields = BTreeSet::new();
    let mut shown = 0;
    for seed in 0..10 {
        let outcome = run_seed(scenario, seed);
        assert!(
            outcome.passed(),
            "{}",
            outcome.failure_report().unwrap_or_default()
        );
        for record in &outcome.records {
            match &record.event {
                TraceEvent::EdgeAnswered {
                    kind,
                    status,
                    field,
                    ..
                } => {
                    let taken = *status < 300 || *status == 409;
                    *answers.entry((format!("{kind:?}"), taken)).or_default() += 1;
                    fields.extend(field.clone());
                }
                TraceEvent::SpecShown { .. } => shown += 1,
                _ => {}
            }
        }
    }
    println!("edges: answers {answers:?}\nfields refused: {fields:?}\nspecs shown: {shown}");
    for kind in ["Create", "Patch", "Wake", "Pause", "PauseHeartbeats"] {
        for taken in [true, false] {
            assert!(
                answers.contains_key(&(kind.to_string(), taken)),
                "no {kind} was {}",
                if taken { "taken" } else { "refused" }
            );
        }
    }
    // Every group of the spec and every field of a wakeup was refused at least once.
    for field in [
        "name",
        "time_zone",
        "adapter.steps",
        "heartbeat.interval_ms",
        "limits.daily_cap",
        "breaker.cooldown_ms_max",
        "liveness.phi_threshold",
        "source",
        "reason",
        "payload",
        "task_key",
        "idempotency_key",
        "trigger_detail",
        "minutes",
        "adapter.base_url",
        "adapter.model",
        "adapter.command",
        "adapter.max_turns",
        "adapter.url",
        "adapter.secret_env",
        "adapter.timeout_sec",
        "adapter.grace_sec",
    ] {
        assert!(fields.contains(field), "no refusal named {field}");
    }
    assert!(shown > 100, "only {shown} specs read back");
}
