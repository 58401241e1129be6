//! Liveness under the simulator (docs/invariants.md, invariant 10): 500 seeds of `liveness` pass, and the
//! scenario really marks silent agents offline (under both detectors), brings them back with
//! their next pulse, and judges agents that stop for good in the quiet phase.
#![cfg(madsim)]

mod sim_support;

use std::collections::BTreeMap;

use vigil::engine::event::EventKind;
use vigil::engine::liveness::Detector;
use vigil_scenarios::run::{find, run_seed};
use vigil_world::trace::TraceEvent;

const SEEDS: u64 = 500;
const COVERAGE_SEEDS: u64 = 5;

#[test]
fn liveness_passes_500_seeds() {
    sim_support::sweep_passes("liveness", SEEDS);
}

#[test]
fn liveness_really_marks_silent_agents_offline_and_back() {
    let scenario = find("liveness").expect("scenario exists");
    let quiet_from_ms = vigil_scenarios::liveness::SAFETY_MS;
    // (detector, came back online after an offline mark), offline marks in the quiet phase.
    let mut offline_by_detector: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut back_online, mut quiet_offline, mut answered) = (0, 0, 0);
    for seed in 0..COVERAGE_SEEDS {
        let outcome = run_seed(scenario, seed);
        assert!(
            outcome.passed(),
            "{}",
            outcome.failure_report().unwrap_or_default()
        );
        let mut detector = BTreeMap::new();
        let mut offline = BTreeMap::new();
        for record in &outcome.records {
            match &record.event {
                TraceEvent::AckedPulse { .. } => answered += 1,
                TraceEvent::Committed { event } => match &event.kind {
                    EventKind::AgentCreated { agent, spec, .. } => {
                        detector.insert(*agent, spec.liveness.detector);
                    }
                    EventKind::AgentOffline { agent, .. } => {
                        let name = match detector[agent] {
                            Detector::Fixed => "fixed",
                            Detector::PhiAccrual => "phi_accrual",
                        };
                        *offline_by_detector.entry(name).or_default() += 1;
                        offline.insert(*agent, true);
                        if record.t_ms >= quiet_from_ms {
                            quiet_offline += 1;
                        }
                    }
                    EventKind::AgentOnline { agent, .. } => {
                        if offline.insert(*agent, false) == Some(true) {
                            back_online += 1;
                        }
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    assert!(
        offline_by_detector.get("fixed").copied().unwrap_or(0) > 5
            && offline_by_detector.get("phi_accrual").copied().unwrap_or(0) > 5,
        "offline marks by detector: {offline_by_detector:?}"
    );
    assert!(
        back_online > 5,
        "agents back online after a mark: {back_online}"
    );
    assert!(
        quiet_offline > 0,
        "agents that stopped in the quiet phase marked offline: {quiet_offline}"
    );
    assert!(answered > 1_000, "answered pulses: {answered}");
}
