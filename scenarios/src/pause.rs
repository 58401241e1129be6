//! Scenario `pause` (Kelpie ADR-010's pause table, in one seeded world): agents on short timers
//! ask for rests with `pause_heartbeats(minutes)` (minutes drawn across the clamp boundaries
//! 0, 1, 60, 61 and between), independently of each other, on a node with an initial clock skew
//! of up to 5 s, forward and backward clock jumps, crashes and power cuts mid-commit
//! (CrashAfterWrite). No timer run may start while a pause is in force on the node's clock
//! (invariant 3), a timer wakeup refused as paused must really fall inside a pause (a forward
//! jump past `pause_until` ends it), and the rest of the oracle holds throughout.

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 150 * MINUTE_MS;
pub const QUIET_MS: u64 = 30 * MINUTE_MS;
const MINUTE_MS: u64 = 60_000;
const AGENTS: usize = 6;
const PAUSES_PER_AGENT_MAX: usize = 8;
/// Requested pause lengths: the clamp's boundaries and values between (0 and 61 are clamped).
const MINUTES: [Option<u64>; 7] = [
    None,
    Some(0),
    Some(1),
    Some(5),
    Some(20),
    Some(60),
    Some(61),
];

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "pause");
    let mut steps = Vec::new();
    let mut pauses = 0;
    for i in 0..AGENTS {
        let name = format!("agent-{i}");
        steps.push(Step {
            at_ms: rng.gen_range(0..MINUTE_MS),
            action: Action::CreateAgent {
                spec: serde_json::json!({
                    "name": name,
                    "heartbeat": { "interval_ms": rng.gen_range(30_000..3 * MINUTE_MS) },
                    "adapter": { "type": "scripted", "steps": [
                        { "duration_ms": rng.gen_range(1_000..10_000), "outcome": "succeeded" },
                    ]},
                }),
            },
        });
        for _ in 0..rng.gen_range(1..=PAUSES_PER_AGENT_MAX) {
            pauses += 1;
            steps.push(Step {
                at_ms: rng.gen_range(2 * MINUTE_MS..SAFETY_MS),
                action: Action::PauseHeartbeats {
                    agent: name.clone(),
                    minutes: MINUTES[rng.gen_range(0..MINUTES.len())],
                },
            });
        }
        // A user writes to the agent now and then: on-demand wakes go through a pause.
        for w in 0..rng.gen_range(0..4) {
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
        agents: Default::default(),
        pinned: Vec::new(),
        scenario: "pause",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 0.8, 8),
            rate(FaultKind::PowerCut, 0.8, 8),
            rate(FaultKind::ClockJump, 1.5, 8),
        ],
        downtime_ms_max: 10 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 10 * MINUTE_MS,
        steps,
        probe_every_ms: 5 * MINUTE_MS,
        tail_every_ms: 5 * MINUTE_MS,
        sse_readers: 1,
        describe: format!("pauses={pauses}"),
    };
    phases::run(setup, recorder).await;
}
