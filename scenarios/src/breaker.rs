//! Scenario `breaker`: a provider that rate-limits for a while. Each agent's scripted runs
//! succeed, then fail as LLM failures (or tool failures) for a stretch of consecutive runs,
//! then succeed again; timers and on-demand wakes keep coming, with crashes and clock jumps.
//! The breaker must open after `failures_to_open` failures, admit exactly one probe per cooldown
//! (doubling up to the cap) and close once a probe succeeds (invariant 8); nothing starts while
//! it is open.
//!
//! The failing stretch is counted in runs, not wall time: the scripted adapter picks its step by
//! run number. A simulated LLM provider with a rate-limit window in time comes with the real
//! adapters.

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 4 * HOUR_MS;
pub const QUIET_MS: u64 = HOUR_MS;
const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const AGENTS: usize = 3;
const SCRIPT_STEPS: usize = 40;

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "breaker");
    let mut steps = Vec::new();
    for i in 0..AGENTS {
        let name = format!("agent-{i}");
        let ok_before = rng.gen_range(1..5);
        let failing = rng.gen_range(3..12);
        let outcome = if rng.gen_bool(0.7) {
            "failed"
        } else {
            "tool_failed"
        };
        let script: Vec<serde_json::Value> = (0..SCRIPT_STEPS)
            .map(|n| {
                let fails = n >= ok_before && n < ok_before + failing;
                serde_json::json!({
                    "duration_ms": rng.gen_range(1_000..20_000),
                    "outcome": if fails { outcome } else { "succeeded" },
                })
            })
            .collect();
        steps.push(Step {
            at_ms: rng.gen_range(0..MINUTE_MS),
            action: Action::CreateAgent {
                spec: serde_json::json!({
                    "name": name,
                    "heartbeat": { "interval_ms": rng.gen_range(MINUTE_MS..3 * MINUTE_MS) },
                    "adapter": { "type": "scripted", "steps": script },
                    "breaker": {
                        "failures_to_open": rng.gen_range(1..=3),
                        "cooldown_ms": rng.gen_range(2 * MINUTE_MS..5 * MINUTE_MS),
                        "cooldown_ms_max": 20 * MINUTE_MS,
                    },
                }),
            },
        });
        for w in 0..rng.gen_range(0..20) {
            steps.push(Step {
                at_ms: rng.gen_range(2 * MINUTE_MS..SAFETY_MS),
                action: Action::Wake {
                    agent: name.clone(),
                    request: serde_json::json!({ "source": "on_demand", "reason": format!("user {w}") }),
                },
            });
        }
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        pinned: Vec::new(),
        scenario: "breaker",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 0.3, 8),
            rate(FaultKind::PowerCut, 0.3, 8),
            rate(FaultKind::ClockJump, 0.3, 4),
        ],
        downtime_ms_max: 10 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 10 * MINUTE_MS,
        steps,
        probe_every_ms: 10 * MINUTE_MS,
        tail_every_ms: 10 * MINUTE_MS,
        describe: String::new(),
    };
    phases::run(setup, recorder).await;
}
