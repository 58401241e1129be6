//! Scenario `coalesce_burst`: four agents take bursts of hundreds of on-demand wakeups for a
//! handful of task keys, each burst inside one second, while the node crashes, loses power
//! mid-commit, has its clock jump and its disk fail writes and syncs (it stops itself and is
//! restarted), and the network is cut, slowed or lossy. Duplicates must coalesce onto the queued
//! run of their task key (invariant 6), each agent runs one run at a time (1), every accepted
//! wakeup ends once (5), and nothing acknowledged is lost (4). Two of the agents have a cooldown
//! between runs: no run of theirs starts within it (`no_run_within_cooldown`). The first agent
//! takes `on_demand` and `assignment` only, is sent a few `automation` wakeups and queues at most
//! two runs (its bursts over four task keys fill the queue), and the second is terminated
//! part-way through: their refusals must name the documented reason, first in the documented
//! order (`refusal_reason_holds`).

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_faults::{StorageFilter, StorageOps};
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 90 * MINUTE_MS;
pub const QUIET_MS: u64 = 30 * MINUTE_MS;
const MINUTE_MS: u64 = 60_000;
const AGENTS: usize = 4;
const TASK_KEYS: [Option<&str>; 4] = [None, Some("inbox"), Some("triage"), Some("report")];
const BURSTS_MIN: usize = 2;
const BURSTS_MAX: usize = 5;
const BURST_WAKEUPS_MIN: usize = 100;
const BURST_WAKEUPS_MAX: usize = 200;
/// The last agents have a cooldown between runs (`no_run_within_cooldown`): their bursts wait
/// out each cooldown while their queued runs coalesce.
const COOLDOWN_AGENTS: usize = 2;
const COOLDOWN_MS_RANGE: std::ops::Range<u64> = 5_000..60_000;
/// The sources the first agent takes; the `automation` wakeups it is sent are refused.
const GATED_SOURCES: [&str; 2] = ["on_demand", "assignment"];
const UNLISTED_WAKEUPS: std::ops::Range<usize> = 3..10;
/// The first agent queues at most this many runs: a burst over more task keys than this fills
/// its queue, and the wakeups that would start a new queued run are refused `queue_full`.
const GATED_QUEUED_RUNS_MAX: usize = 2;
/// The agent terminated part-way through the safety phase.
const TERMINATED_AGENT: usize = 1;
/// Every wakeup of a burst arrives within this window.
const BURST_WINDOW_MS: u64 = 1_000;

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "coalesce_burst");
    // Its own stream, so that the rest of the scenario draws what it drew before cooldowns.
    let mut cooldowns = stream(seed, "coalesce_burst/cooldown");
    // And the refusals' draws (sources, termination) theirs.
    let mut gates = stream(seed, "coalesce_burst/gates");
    let mut steps = Vec::new();
    for i in 0..AGENTS {
        let at_ms = rng.gen_range(0..MINUTE_MS);
        let mut spec = serde_json::json!({
            "name": format!("agent-{i}"),
            "adapter": { "type": "scripted", "steps": [
                { "duration_ms": rng.gen_range(2_000..30_000), "outcome": "succeeded" },
                { "duration_ms": rng.gen_range(2_000..30_000), "outcome": "failed" },
            ]},
        });
        if i == 0 {
            spec["heartbeat"] = serde_json::json!({ "sources": GATED_SOURCES });
            spec["limits"] = serde_json::json!({ "queued_runs_max": GATED_QUEUED_RUNS_MAX });
        }
        if i >= AGENTS - COOLDOWN_AGENTS {
            spec["limits"] = serde_json::json!({
                "cooldown_ms": cooldowns.gen_range(COOLDOWN_MS_RANGE),
            });
        }
        steps.push(Step {
            at_ms,
            action: Action::CreateAgent { spec },
        });
    }
    let bursts = rng.gen_range(BURSTS_MIN..=BURSTS_MAX);
    let mut wakeups = 0;
    for burst in 0..bursts {
        let start_ms = rng.gen_range(2 * MINUTE_MS..SAFETY_MS);
        let size = rng.gen_range(BURST_WAKEUPS_MIN..=BURST_WAKEUPS_MAX);
        wakeups += size;
        for i in 0..size {
            let task_key = TASK_KEYS[rng.gen_range(0..TASK_KEYS.len())];
            steps.push(Step {
                at_ms: start_ms + rng.gen_range(0..BURST_WINDOW_MS),
                action: Action::Wake {
                    agent: format!("agent-{}", rng.gen_range(0..AGENTS)),
                    request: serde_json::json!({
                        "source": "on_demand",
                        "reason": format!("burst {burst} wake {i}"),
                        "task_key": task_key,
                    }),
                },
            });
        }
    }
    for i in 0..gates.gen_range(UNLISTED_WAKEUPS) {
        steps.push(Step {
            at_ms: gates.gen_range(2 * MINUTE_MS..SAFETY_MS),
            action: Action::Wake {
                agent: "agent-0".into(),
                request: serde_json::json!({ "source": "automation", "reason": format!("unlisted {i}") }),
            },
        });
    }
    steps.push(Step {
        at_ms: gates.gen_range(SAFETY_MS / 2..SAFETY_MS),
        action: Action::Terminate {
            agent: format!("agent-{TERMINATED_AGENT}"),
        },
    });
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: Default::default(),
        pinned: Vec::new(),
        scenario: "coalesce_burst",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 1.0, 16),
            rate(FaultKind::PowerCut, 1.0, 16),
            rate(FaultKind::ClockJump, 0.5, 8),
            rate(
                FaultKind::StorageIoError(StorageFilter::always(StorageOps::Any)),
                0.5,
                4,
            ),
            rate(
                FaultKind::DiskFull(StorageFilter {
                    ops: StorageOps::Write,
                    probability_permille: 500,
                }),
                0.3,
                4,
            ),
            rate(FaultKind::Partition, 0.5, 4),
            rate(FaultKind::NetDelay, 0.5, 4),
            rate(FaultKind::PacketLoss, 0.5, 4),
        ],
        downtime_ms_max: 5 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 10 * MINUTE_MS,
        steps,
        probe_every_ms: 5 * MINUTE_MS,
        tail_every_ms: 2 * MINUTE_MS,
        sse_readers: 0,
        describe: format!("bursts={bursts} wakeups={wakeups}"),
    };
    phases::run(setup, recorder).await;
}
