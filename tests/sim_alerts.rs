//! Alerts under the simulator (ADR 0018): seeds of `alerts` pass `every_alert_delivered` (every
//! committed event that calls for an alert is delivered by the end, after the quiet phase,
//! across crashes, power cuts and a receiver refusing 30% of attempts), give the same whole trace
//! twice, and really exercise it: several kinds delivered, crashes struck, attempts refused.
#![cfg(madsim)]

// Shared with the other simulation tests; this file uses part of it.
#[allow(dead_code)]
mod sim_support;

use std::collections::BTreeSet;

use vigil_scenarios::run::{find, run_seed};
use vigil_world::trace::{FaultRecord, TraceEvent};

/// Few seeds: each simulates 30 minutes (CI's time budget is tight).
const SEEDS: u64 = 3;

#[test]
fn alerts_pass_and_are_deterministic() {
    sim_support::same_trace_twice("alerts", 0, SEEDS);
}

#[test]
fn alerts_really_arrive_after_crashes_and_refusals() {
    let scenario = find("alerts").expect("scenario exists");
    let mut kinds = BTreeSet::new();
    let (mut delivered, mut crashes, mut duplicates) = (0, 0, 0);
    for seed in 0..SEEDS {
        let outcome = run_seed(scenario, seed);
        assert!(
            outcome.passed(),
            "{}",
            outcome.failure_report().unwrap_or_default()
        );
        let mut seen = BTreeSet::new();
        for record in &outcome.records {
            match &record.event {
                TraceEvent::AlertDelivered { id, kind, .. } => {
                    delivered += 1;
                    kinds.insert(kind.clone());
                    if !seen.insert(id.clone()) {
                        duplicates += 1;
                    }
                }
                TraceEvent::Fault {
                    fault: FaultRecord::Struck(fault),
                } if matches!(fault.kind(), "crash" | "power_cut") => crashes += 1,
                _ => {}
            }
        }
    }
    println!("alerts: {delivered} delivered ({duplicates} duplicates), kinds {kinds:?}, {crashes} crashes");
    assert!(crashes > 0, "no crash struck");
    for kind in [
        "run_failed",
        "breaker_opened",
        "daily_cap_reached",
        "agent_offline",
    ] {
        assert!(kinds.contains(kind), "no {kind} alert delivered: {kinds:?}");
    }
}
