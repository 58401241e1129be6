//! Scenario `cli_agents`: agents whose runs spawn children (the `process` adapter) on a machine
//! whose processes misbehave, while the operator cancels runs and pauses agents and the node
//! crashes and loses power in the middle of runs.
//!
//! - `worker-*`: `sim-agent` with argument templates, 30 s to 3 min time limits, 0-20 s grace.
//!   What each child does is drawn by the simulated machine (sim/src/processes.rs): quick or
//!   slow output, a hang, SIGTERM ignored, garbage bytes, a nonzero exit, death by SIGSEGV
//!   mid-output, or a grandchild left in the group after the leader exits.
//! - `missing-*`: a program the machine does not have: every run fails `adapter_not_installed`,
//!   and the breaker opens.
//! - `coder-*`: the coding CLIs, `claude_local` and `codex_local`, woken on a few task keys.
//!   The machine's simulated CLIs (sim/src/coding_clis.rs) print their real output formats,
//!   keep the sessions they reported, expire some and refuse those, fail, print garbage, crash
//!   or hang; each run is judged against what its CLI printed (invariant 40), and each
//!   invocation's prompt against its run (invariant 38).
//!
//! Invariant 14 is the point: no run's process group outlives its run by more than the grace
//! plus a slack, whether the run ended by itself, by its timeout, by a cancel, a pause, or a
//! crash of the node (recovery kills the recorded groups it finds).

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::processes::ProcessScript;
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, AgentWorld, Setup};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 2 * HOUR_MS;
/// Long enough for a wakeup burst's queue of minutes-long runs to drain: every accepted wakeup
/// must reach a terminal state by the end (invariant 5).
pub const QUIET_MS: u64 = HOUR_MS;
const SECOND_MS: u64 = 1_000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const WORKERS: usize = 6;
const MISSING: usize = 2;
const CODERS: usize = 4;
/// Task keys the coders are woken on (besides none: the `default` task).
const TASKS: [&str; 3] = ["pr-1", "pr-2", "issue-7"];

fn worker_spec(i: usize, rng: &mut impl Rng) -> serde_json::Value {
    serde_json::json!({
        "name": format!("worker-{i}"),
        "heartbeat": { "interval_ms": rng.gen_range(2 * MINUTE_MS..8 * MINUTE_MS) },
        "limits": { "run_timeout_ms": 10 * MINUTE_MS },
        "breaker": { "failures_to_open": rng.gen_range(3..=6), "cooldown_ms": 2 * MINUTE_MS, "cooldown_ms_max": 10 * MINUTE_MS },
        "adapter": {
            "type": "process",
            "command": if i % 2 == 0 { "sim-agent" } else { "/usr/bin/sim-agent" },
            "args": ["--agent", "{{ agent.name }}", "--run", "{{ run.id }}", "--why", "{{ run.reason }}"],
            "stdin": "wakeup {{ run.source }}: {{ run.payload }}",
            "env": { "MODE": "work" },
            // At most 3 minutes (plus the grace) a run, so that a swarm's wakeup burst drains
            // in the quiet phase; slow children (minutes between lines) still meet the limit.
            "timeout_sec": rng.gen_range(30..=180),
            "grace_sec": rng.gen_range(0..=20),
        },
    })
}

fn missing_spec(i: usize, rng: &mut impl Rng) -> serde_json::Value {
    serde_json::json!({
        "name": format!("missing-{i}"),
        "heartbeat": { "interval_ms": rng.gen_range(3 * MINUTE_MS..6 * MINUTE_MS) },
        "breaker": { "failures_to_open": 3, "cooldown_ms": 5 * MINUTE_MS, "cooldown_ms_max": 20 * MINUTE_MS },
        "adapter": { "type": "process", "command": "not-installed-cli", "timeout_sec": 60, "grace_sec": 5 },
    })
}

/// Coder `i`: Claude Code for even `i`, Codex for odd; the first two with the built-in prompt,
/// the others with a template of their own.
fn coder_spec(i: usize, rng: &mut impl Rng) -> serde_json::Value {
    let mut adapter = serde_json::json!({
        "type": if i % 2 == 0 { "claude_local" } else { "codex_local" },
        "timeout_sec": rng.gen_range(60..=240),
        "grace_sec": rng.gen_range(0..=10),
    });
    if i >= 2 {
        adapter["prompt"] = "Task for {{ agent.name }}: {{ run.reason }}".into();
    }
    if i % 2 == 0 {
        adapter["max_turns"] = rng.gen_range(1..=30).into();
    }
    serde_json::json!({
        "name": format!("coder-{i}"),
        "heartbeat": { "interval_ms": rng.gen_range(10 * MINUTE_MS..30 * MINUTE_MS) },
        "breaker": { "failures_to_open": 5, "cooldown_ms": MINUTE_MS, "cooldown_ms_max": 5 * MINUTE_MS },
        "adapter": adapter,
    })
}

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "cli_agents");
    let mut steps = Vec::new();
    let mut workers = Vec::new();
    for i in 0..WORKERS {
        let spec = worker_spec(i, &mut rng);
        steps.push(create(rng.gen_range(0..MINUTE_MS), spec));
        workers.push(format!("worker-{i}"));
    }
    for i in 0..MISSING {
        let spec = missing_spec(i, &mut rng);
        steps.push(create(rng.gen_range(0..MINUTE_MS), spec));
    }
    for name in &workers {
        for w in 0..rng.gen_range(2..10) {
            let at_ms = rng.gen_range(2 * MINUTE_MS..SAFETY_MS);
            steps.push(Step {
                at_ms,
                action: Action::Wake {
                    agent: name.clone(),
                    request: serde_json::json!({ "source": "on_demand", "reason": format!("task {w}"), "payload": { "n": w } }),
                },
            });
        }
        for _ in 0..rng.gen_range(0..4) {
            let at_ms = rng.gen_range(2 * MINUTE_MS..SAFETY_MS);
            let action = Action::CancelRunning {
                agent: name.clone(),
            };
            steps.push(Step { at_ms, action });
        }
        if rng.gen_bool(0.5) {
            let at_ms = rng.gen_range(5 * MINUTE_MS..SAFETY_MS);
            let action = Action::Pause {
                agent: name.clone(),
                minutes: rng.gen_range(1..=20),
            };
            steps.push(Step { at_ms, action });
        }
    }
    for i in 0..CODERS {
        let spec = coder_spec(i, &mut rng);
        steps.push(create(rng.gen_range(0..MINUTE_MS), spec));
        for w in 0..rng.gen_range(6..16) {
            let mut request = serde_json::json!({ "source": "on_demand", "reason": format!("change {w}") });
            if let Some(task) = TASKS.get(rng.gen_range(0..TASKS.len() + 1)) {
                request["task_key"] = (*task).into();
            }
            steps.push(Step {
                at_ms: rng.gen_range(2 * MINUTE_MS..SAFETY_MS),
                action: Action::Wake {
                    agent: format!("coder-{i}"),
                    request,
                },
            });
        }
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: AgentWorld {
            processes: Some(ProcessScript::default()),
            ..AgentWorld::default()
        },
        pinned: Vec::new(),
        scenario: "cli_agents",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 1.5, 6),
            rate(FaultKind::PowerCut, 1.0, 4),
            rate(FaultKind::GracefulStop, 0.5, 3),
            rate(FaultKind::ClockJump, 0.5, 3),
        ],
        downtime_ms_max: 5 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 10 * MINUTE_MS,
        steps,
        probe_every_ms: 10 * MINUTE_MS,
        tail_every_ms: 10 * MINUTE_MS,
        sse_readers: 0,
        describe: format!("agents={}", WORKERS + MISSING + CODERS),
    };
    phases::run(setup, recorder).await;
}

fn create(at_ms: u64, spec: serde_json::Value) -> Step {
    Step {
        at_ms,
        action: Action::CreateAgent { spec },
    }
}
