//! Scenario `alerts` (docs/operations.md "Alerts", ADR 0018): the node has one alert sink, a
//! simulated receiver that refuses a seeded 30% of attempts during the safety phase. Agents whose
//! runs fail (their breakers open), one that reaches its daily cap, and one that pulses for a
//! while and then goes silent (marked offline) raise all the kinds but `budget_reached`, while
//! crashes and power cuts mid-commit strike. The oracle's `every_alert_delivered` holds every
//! committed event that calls for an alert to have been delivered by the end, after the quiet
//! phase. 30 simulated minutes: short and cheap, below the default catch-up bound of an hour, no
//! clock jumps (so no alert may be skipped).

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, AgentWorld, Setup};
use crate::smoke::rate;

const MINUTE_MS: u64 = 60_000;
/// Faults strike during this first part of the run...
pub const SAFETY_MS: u64 = 20 * MINUTE_MS;
/// ...and this last part is quiet: long past the longest retry wait (60 s), so every alert
/// still pending at the healing is delivered within it.
pub const QUIET_MS: u64 = 10 * MINUTE_MS;
/// Share of delivery attempts the receiver refuses (503) in the safety phase, per mille.
const REFUSE_PERMILLE: u32 = 300;
/// When the pulsing agent falls silent for good.
const SILENT_FROM_MS: u64 = 8 * MINUTE_MS;

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "alerts");
    let mut steps = Vec::new();
    for i in 0..2 {
        let at_ms = rng.gen_range(0..MINUTE_MS);
        let spec = serde_json::json!({
            "name": format!("failing-{i}"),
            "heartbeat": { "interval_ms": rng.gen_range(30_000..90_000) },
            // Two failures of one cause in a row open the breaker (`failures_to_open` 2),
            // whenever the agent's first slot falls (its jitter may be most of an interval).
            "adapter": { "type": "scripted", "steps": [
                { "duration_ms": rng.gen_range(100..5_000), "outcome": "failed" },
                { "duration_ms": rng.gen_range(100..5_000), "outcome": "failed" },
                { "duration_ms": rng.gen_range(100..5_000), "outcome": "tool_failed" },
                { "duration_ms": rng.gen_range(100..5_000), "outcome": "succeeded" },
            ]},
            "breaker": { "failures_to_open": 2, "cooldown_ms": 120_000 },
        });
        steps.push(Step {
            at_ms,
            action: Action::CreateAgent { spec },
        });
    }
    steps.push(Step {
        at_ms: rng.gen_range(0..MINUTE_MS),
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": "capped",
                "heartbeat": { "interval_ms": 30_000 },
                "limits": { "daily_cap": rng.gen_range(2..6) },
                "adapter": { "type": "scripted", "steps": [{ "duration_ms": 1_000, "outcome": "succeeded" }] },
            }),
        },
    });
    steps.push(Step {
        at_ms: 0,
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": "pulser",
                "liveness": { "pulse_interval_ms": 5_000, "offline_after_misses": 2 },
            }),
        },
    });
    let mut at_ms = MINUTE_MS / 2;
    while at_ms < SILENT_FROM_MS {
        steps.push(Step {
            at_ms,
            action: Action::Pulse {
                agent: "pulser".into(),
            },
        });
        at_ms += 4_000 + rng.gen_range(0..2_000);
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: AgentWorld {
            alert_refuse_permille: Some(REFUSE_PERMILLE),
            ..AgentWorld::default()
        },
        pinned: Vec::new(),
        scenario: "alerts",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 6.0, 3),
            rate(FaultKind::PowerCut, 3.0, 2),
        ],
        downtime_ms_max: 2 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 5 * MINUTE_MS,
        steps,
        probe_every_ms: MINUTE_MS,
        tail_every_ms: MINUTE_MS,
        sse_readers: 0,
        describe: String::new(),
    };
    phases::run(setup, recorder).await;
}
