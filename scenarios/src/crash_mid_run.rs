//! Scenario `crash_mid_run`: agents whose runs take minutes, on timers and on demand, on a node
//! that crashes and loses power often, so that many runs are cut off while running. After each
//! restart the interrupted run must end `failed (control_plane_restart)` and its wakeup be
//! re-queued once (invariant 5), never two runs at once (1), nothing acknowledged lost (4), and
//! every run queued before the quiet phase must end within it.

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 150 * MINUTE_MS;
pub const QUIET_MS: u64 = 45 * MINUTE_MS;
const MINUTE_MS: u64 = 60_000;
const AGENTS: usize = 3;
const RUN_MS_MIN: u64 = MINUTE_MS;
const RUN_MS_MAX: u64 = 6 * MINUTE_MS;
const ON_DEMAND_WAKES_MAX: usize = 20;

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "crash_mid_run");
    let mut steps = Vec::new();
    for i in 0..AGENTS {
        steps.push(Step {
            at_ms: rng.gen_range(0..MINUTE_MS),
            action: Action::CreateAgent {
                spec: serde_json::json!({
                    "name": format!("agent-{i}"),
                    "heartbeat": { "interval_ms": rng.gen_range(10 * MINUTE_MS..30 * MINUTE_MS) },
                    "adapter": { "type": "scripted", "steps": [
                        { "duration_ms": rng.gen_range(RUN_MS_MIN..RUN_MS_MAX), "outcome": "succeeded" },
                        { "duration_ms": rng.gen_range(RUN_MS_MIN..RUN_MS_MAX), "outcome": "failed" },
                    ]},
                }),
            },
        });
    }
    let wakes = rng.gen_range(0..=ON_DEMAND_WAKES_MAX);
    for i in 0..wakes {
        steps.push(Step {
            at_ms: rng.gen_range(2 * MINUTE_MS..SAFETY_MS),
            action: Action::Wake {
                agent: format!("agent-{}", rng.gen_range(0..AGENTS)),
                request: serde_json::json!({
                    "source": if rng.gen_bool(0.5) { "on_demand" } else { "assignment" },
                    "reason": format!("wake {i}"),
                    "task_key": format!("task-{}", rng.gen_range(0..2)),
                }),
            },
        });
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: Default::default(),
        pinned: Vec::new(),
        scenario: "crash_mid_run",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 2.0, 16),
            rate(FaultKind::PowerCut, 1.0, 16),
            rate(FaultKind::ClockJump, 0.3, 4),
        ],
        downtime_ms_max: 10 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 30 * MINUTE_MS,
        steps,
        probe_every_ms: 5 * MINUTE_MS,
        tail_every_ms: 5 * MINUTE_MS,
        sse_readers: 0,
        describe: format!("on_demand_wakes={wakes}"),
    };
    phases::run(setup, recorder).await;
}
