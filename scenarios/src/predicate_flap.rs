//! Scenario `predicate_flap` (issue 12, docs/api.md "Predicate heartbeats"): predicate
//! heartbeats watch a simulated state server whose answer flaps every 10-60 s (sometimes back to
//! the value before), while the node crashes, loses power in the middle of commits and has its
//! wall clock jump. The server answers some checks slowly (within the heartbeat's budget), some
//! late (past it) and some never, and pads a few states so that their canonical JSON lies near
//! the documented 4 KiB limit: well below it, just under or at it, or just over it (the node
//! must record the first two and report the last an `error`, keeping the prior state).
//!
//! - `quick-*`: scripted runs of 0.2-2 s, so their queues drain; each has a `wake` heartbeat and
//!   one more (`event`, or a second `wake`).
//! - `busy-0`: runs of 30-60 s, slower than its heartbeat flaps, so its runs pile up to the
//!   pending cap and emission pauses.
//! - `deaf-0`: does not accept `predicate` wakeups, so its transitions' wakeups are refused.
//!
//! The oracle (`sim/src/check/predicate.rs`) holds each transition to its one wakeup in its
//! commit, the chain of states, one check of a heartbeat at a time, the pending cap, and, after
//! a quiet phase in which the truth holds still, every heartbeat recording that truth.

use std::collections::BTreeMap;

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::check::REDETECT_BOUND_MS;
use vigil_world::recorder::Recorder;
use vigil_world::state_server::{state_url, StateScript};
use vigil_world::workload::{Action, Step};

use crate::phases::{self, AgentWorld, Setup};
use crate::smoke::rate;

const MINUTE_MS: u64 = 60_000;
/// Faults strike during this first part of the run...
pub const SAFETY_MS: u64 = 20 * MINUTE_MS;
/// ...and this last part is quiet: the truth holds still, so every heartbeat must end up
/// recording it (the oracle's bound, plus a minute).
pub const QUIET_MS: u64 = REDETECT_BOUND_MS + MINUTE_MS;
/// Heartbeats tick this often, in seconds (the runtime's minimum).
const INTERVAL_SEC: u64 = 5;
/// Shortest and longest evaluation budget drawn for a heartbeat, ms.
const BUDGET_MS: (u64, u64) = (300, 3_000);
/// The state server's answers in the safety phase, per mille: never, past the budget, slowly.
const HANG_PERMILLE: u32 = 50;
const LATE_PERMILLE: u32 = 80;
const SLOW_PERMILLE: u32 = 150;
/// Answers padded near the state limit in the safety phase, per mille: about 40 of a seed's
/// 1,400 checks, each accepted one a transition there and another back.
const PADDED_PERMILLE: u32 = 30;

/// One agent of the scenario: its name, its run length range (ms), whether it takes
/// `predicate` wakeups, and its heartbeats' `on_change`.
struct Agent {
    name: &'static str,
    run_ms: (u64, u64),
    takes_predicate: bool,
    heartbeats: &'static [&'static str],
}

const AGENTS: [Agent; 4] = [
    Agent {
        name: "quick-0",
        run_ms: (200, 2_000),
        takes_predicate: true,
        heartbeats: &["wake", "event"],
    },
    Agent {
        name: "quick-1",
        run_ms: (200, 2_000),
        takes_predicate: true,
        heartbeats: &["wake", "wake"],
    },
    Agent {
        name: "busy-0",
        run_ms: (30_000, 60_000),
        takes_predicate: true,
        heartbeats: &["wake"],
    },
    Agent {
        name: "deaf-0",
        run_ms: (200, 2_000),
        takes_predicate: false,
        heartbeats: &["wake"],
    },
];

fn agent_spec(agent: &Agent, rng: &mut impl Rng) -> serde_json::Value {
    let steps: Vec<serde_json::Value> = (0..3)
        .map(|_| {
            serde_json::json!({ "duration_ms": rng.gen_range(agent.run_ms.0..=agent.run_ms.1), "outcome": "succeeded" })
        })
        .collect();
    let mut spec = serde_json::json!({
        "name": agent.name,
        "adapter": { "type": "scripted", "steps": steps },
    });
    if !agent.takes_predicate {
        spec["heartbeat"] = serde_json::json!({ "sources": ["on_demand", "timer"] });
    }
    spec
}

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "predicate_flap");
    let mut steps = Vec::new();
    let mut budgets_ms = BTreeMap::new();
    for agent in &AGENTS {
        steps.push(Step {
            at_ms: rng.gen_range(0..10_000),
            action: Action::CreateAgent {
                spec: agent_spec(agent, &mut rng),
            },
        });
        for (i, on_change) in agent.heartbeats.iter().enumerate() {
            let id = format!("{}-h{i}", agent.name);
            let budget_ms = rng.gen_range(BUDGET_MS.0..=BUDGET_MS.1);
            budgets_ms.insert(id.clone(), budget_ms);
            let definition = serde_json::json!({
                "id": id,
                "interval_sec": INTERVAL_SEC,
                "check": { "kind": "http", "url": state_url(&id) },
                "on_change": on_change,
                "max_runtime_ms": budget_ms,
            });
            steps.push(Step {
                at_ms: rng.gen_range(15_000..30_000),
                action: Action::DefineHeartbeat {
                    agent: agent.name.into(),
                    definition,
                },
            });
        }
    }
    steps.sort_by_key(|s| s.at_ms);
    let heartbeats = budgets_ms.len();
    let setup = Setup {
        agents: AgentWorld {
            state: Some(StateScript {
                budgets_ms,
                hang_permille: HANG_PERMILLE,
                late_permille: LATE_PERMILLE,
                slow_permille: SLOW_PERMILLE,
                padded_permille: PADDED_PERMILLE,
            }),
            ..AgentWorld::default()
        },
        pinned: Vec::new(),
        scenario: "predicate_flap",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 6.0, 3),
            rate(FaultKind::PowerCut, 9.0, 4),
            rate(FaultKind::ClockJump, 6.0, 4),
        ],
        downtime_ms_max: MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 2 * MINUTE_MS,
        steps,
        probe_every_ms: MINUTE_MS,
        tail_every_ms: 2 * MINUTE_MS,
        sse_readers: 0,
        describe: format!("heartbeats={heartbeats}"),
    };
    phases::run(setup, recorder).await;
}
