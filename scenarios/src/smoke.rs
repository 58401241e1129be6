//! Scenario `smoke`: one runtime node, ten agents with random timer intervals whose runs take a
//! few seconds, 24 simulated hours. During the first 23 hours the node is killed at random
//! instants or by a power cut in the middle of a commit (and restarted on its surviving disk
//! after a random downtime), and its wall clock jumps forward and backward; the last hour is
//! quiet, and liveness is judged there.

use rand::Rng;
use vigil_faults::plan::{log_uniform, FaultKind};
use vigil_faults::{stream, FaultRate};
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};

/// Faults strike during this first part of the run...
pub const SAFETY_MS: u64 = 23 * HOUR_MS;
/// ...and this last part is quiet, for liveness.
pub const QUIET_MS: u64 = HOUR_MS;
const HOUR_MS: u64 = 3_600_000;
const AGENTS: usize = 10;
/// Agents are registered at random instants of the first hour, so that some registrations meet
/// a crash.
const CREATE_WINDOW_MS: u64 = HOUR_MS;
const INTERVAL_MS_MIN: u64 = 30_000;
const INTERVAL_MS_MAX: u64 = 30 * 60_000;
/// Longest a scripted run of this scenario takes.
const RUN_MS_MAX: u64 = 20_000;

pub(crate) fn rate(kind: FaultKind, per_hour: f64, max_triggers: u32) -> FaultRate {
    FaultRate {
        kind,
        per_hour,
        after_ms: 0,
        max_triggers,
    }
}

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "smoke");
    let mut steps: Vec<Step> = (0..AGENTS)
        .map(|i| {
            let interval_ms = log_uniform(&mut rng, INTERVAL_MS_MIN, INTERVAL_MS_MAX);
            let duration_ms = rng.gen_range(100..=RUN_MS_MAX);
            Step {
                at_ms: rng.gen_range(0..CREATE_WINDOW_MS),
                action: Action::CreateAgent {
                    spec: serde_json::json!({
                        "name": format!("agent-{i}"),
                        "heartbeat": { "interval_ms": interval_ms },
                        "adapter": { "type": "scripted", "steps": [
                            { "duration_ms": duration_ms, "outcome": "succeeded" },
                            { "duration_ms": duration_ms / 2, "outcome": "failed" },
                        ]},
                    }),
                },
            }
        })
        .collect();
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: Default::default(),
        pinned: Vec::new(),
        scenario: "smoke",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 0.15, 64),
            rate(FaultKind::PowerCut, 0.15, 64),
            rate(FaultKind::ClockJump, 0.2, 32),
        ],
        downtime_ms_max: u64::MAX,
        skew_ms_max: 5_000,
        // The node writes at least once per agent interval, so with agents registered this is
        // never reached.
        power_cut_wait_ms: 2 * INTERVAL_MS_MAX,
        steps,
        probe_every_ms: 10 * 60_000,
        tail_every_ms: 5 * 60_000,
        sse_readers: 0,
        describe: String::new(),
    };
    phases::run(setup, recorder).await;
}
