//! Scenario `wakeup_storm`: the Heart paper's travel_rescue agent, on a 5-minute timer with
//! `daily_cap = 48` in New York time, for two simulated days, with bursts of on-demand wakes,
//! forward clock jumps and crashes with long downtimes. Never more than 48 runs start in one
//! local day (invariant 2, under jumps both ways), and after downtime or a forward jump the timer
//! fires once for everything it missed, never the backlog (the schedule invariants). A second
//! agent without a cap on the same interval shows the timer itself keeps firing. A third,
//! `concierge`, has only an idle chamber (20 min without user input, `daily_cap = 12` in Paris
//! time) and a user who writes now and then: its idle and input wakeups share the cap, and after
//! downtime or a jump its idle chamber fires once, never a backlog.

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 2 * DAY_MS - QUIET_MS;
pub const QUIET_MS: u64 = HOUR_MS;
const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const DAY_MS: u64 = 24 * HOUR_MS;
const DAILY_CAP: u32 = 48;
const CONCIERGE_CAP: u32 = 12;
const CONCIERGE_IDLE_MS: u64 = 20 * MINUTE_MS;
const INPUTS_MAX: usize = 30;
const BURSTS_MAX: usize = 12;
const BURST_WAKES_MAX: usize = 40;

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "wakeup_storm");
    let mut steps = vec![
        Step {
            at_ms: 0,
            action: Action::CreateAgent {
                spec: serde_json::json!({
                    "name": "travel_rescue",
                    "heartbeat": { "interval_ms": 5 * MINUTE_MS },
                    "time_zone": "America/New_York",
                    "limits": { "daily_cap": DAILY_CAP },
                    "adapter": { "type": "scripted", "steps": [
                        { "duration_ms": 30_000, "outcome": "succeeded" },
                    ]},
                }),
            },
        },
        Step {
            at_ms: 1_000,
            action: Action::CreateAgent {
                spec: serde_json::json!({
                    "name": "uncapped",
                    "heartbeat": { "interval_ms": 5 * MINUTE_MS },
                    "adapter": { "type": "scripted", "steps": [
                        { "duration_ms": 10_000, "outcome": "succeeded" },
                    ]},
                }),
            },
        },
    ];
    steps.push(Step {
        at_ms: 2_000,
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": "concierge",
                "heartbeat": { "idle_after_ms": CONCIERGE_IDLE_MS },
                "time_zone": "Europe/Paris",
                "limits": { "daily_cap": CONCIERGE_CAP },
                "adapter": { "type": "scripted", "steps": [
                    { "duration_ms": 20_000, "outcome": "succeeded" },
                ]},
            }),
        },
    });
    let inputs = rng.gen_range(0..=INPUTS_MAX);
    for i in 0..inputs {
        steps.push(Step {
            at_ms: rng.gen_range(MINUTE_MS..SAFETY_MS),
            action: Action::Input {
                agent: "concierge".into(),
                text: format!("message {i}"),
            },
        });
    }
    let bursts = rng.gen_range(1..=BURSTS_MAX);
    for b in 0..bursts {
        let at_ms = rng.gen_range(MINUTE_MS..SAFETY_MS);
        for w in 0..rng.gen_range(1..=BURST_WAKES_MAX) {
            steps.push(Step {
                at_ms: at_ms + rng.gen_range(0..1_000),
                action: Action::Wake {
                    agent: "travel_rescue".into(),
                    request: serde_json::json!({
                        "source": "on_demand",
                        "reason": format!("storm {b} wake {w}"),
                        "task_key": format!("trip-{}", rng.gen_range(0..6)),
                    }),
                },
            });
        }
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: Default::default(),
        pinned: Vec::new(),
        scenario: "wakeup_storm",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 0.1, 8),
            rate(FaultKind::PowerCut, 0.05, 4),
            rate(FaultKind::ClockJump, 0.1, 8),
        ],
        downtime_ms_max: 6 * HOUR_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: HOUR_MS,
        steps,
        probe_every_ms: 20 * MINUTE_MS,
        tail_every_ms: 30 * MINUTE_MS,
        sse_readers: 0,
        describe: format!("bursts={bursts} inputs={inputs}"),
    };
    phases::run(setup, recorder).await;
}
