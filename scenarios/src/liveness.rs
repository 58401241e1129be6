//! Scenario `liveness` (invariant 10): a fleet whose agents pulse over a lossy, slow network
//! while the node crashes, loses power mid-commit and has its wall clock jump. Agents pulse on
//! their own interval with jitter, lose pulses at the source in `pulse_loss` windows, fall silent
//! for a while and come back, and in the quiet phase some stop for good. Fixed-threshold and
//! phi-accrual agents side by side. No agent whose answered pulses came within its bound is
//! marked offline; in the quiet phase a silent one is marked offline within its threshold plus
//! the sweep interval; every answered pulse finds its agent online.

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 45 * MINUTE_MS;
pub const QUIET_MS: u64 = 15 * MINUTE_MS;
const MINUTE_MS: u64 = 60_000;
const AGENTS: usize = 8;
/// Longest stretch an agent falls silent in the safety phase.
const SILENCE_MS_MAX: u64 = 3 * MINUTE_MS;

/// The liveness policy of agent `i`: fixed defaults, a fast fixed one, phi-accrual ones.
fn policy(i: usize) -> serde_json::Value {
    match i % 4 {
        0 => serde_json::json!({}),
        1 => serde_json::json!({ "pulse_interval_ms": 5_000, "offline_after_misses": 2 }),
        2 => serde_json::json!({ "detector": "phi_accrual" }),
        _ => {
            serde_json::json!({ "pulse_interval_ms": 4_000, "offline_after_misses": 4, "detector": "phi_accrual", "phi_threshold": 4 })
        }
    }
}

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "liveness");
    let end_ms = SAFETY_MS + QUIET_MS;
    let mut steps = Vec::new();
    let (mut pulses, mut stopped) = (0, 0);
    for i in 0..AGENTS {
        let name = format!("agent-{i}");
        let policy = policy(i);
        let interval_ms = policy["pulse_interval_ms"].as_u64().unwrap_or(10_000);
        steps.push(Step {
            at_ms: rng.gen_range(0..30_000),
            action: Action::CreateAgent {
                spec: serde_json::json!({ "name": name, "liveness": policy }),
            },
        });
        // Silences in the safety phase, then perhaps a silence for good in the quiet phase.
        let mut silences: Vec<(u64, u64)> = (0..rng.gen_range(0..=2))
            .map(|_| {
                let from = rng.gen_range(MINUTE_MS..SAFETY_MS);
                (from, from + rng.gen_range(interval_ms..SILENCE_MS_MAX))
            })
            .collect();
        if rng.gen_bool(0.5) {
            stopped += 1;
            silences.push((
                rng.gen_range(SAFETY_MS + MINUTE_MS..end_ms - 5 * MINUTE_MS),
                end_ms,
            ));
        }
        let mut at_ms = MINUTE_MS / 2 + rng.gen_range(0..interval_ms);
        while at_ms < end_ms {
            let silent = silences
                .iter()
                .any(|(from, to)| (*from..*to).contains(&at_ms));
            if !silent {
                pulses += 1;
                steps.push(Step {
                    at_ms,
                    action: Action::Pulse {
                        agent: name.clone(),
                    },
                });
            }
            // Jitter of up to a fifth of the interval either way.
            at_ms += interval_ms - interval_ms / 5 + rng.gen_range(0..=2 * interval_ms / 5);
        }
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: Default::default(),
        pinned: Vec::new(),
        scenario: "liveness",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 1.0, 4),
            rate(FaultKind::PowerCut, 1.0, 4),
            rate(FaultKind::ClockJump, 3.0, 6),
            rate(FaultKind::NetDelay, 2.0, 4),
            rate(FaultKind::PacketLoss, 2.0, 4),
            rate(FaultKind::PulseLoss, 4.0, 8),
        ],
        downtime_ms_max: 2 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 5 * MINUTE_MS,
        steps,
        probe_every_ms: MINUTE_MS,
        tail_every_ms: 5 * MINUTE_MS,
        sse_readers: 0,
        describe: format!("pulses={pulses} stop_in_quiet={stopped}"),
    };
    phases::run(setup, recorder).await;
}
