//! Scenario `idempotency`: clients retry keyed wakeups, several times each and across crashes,
//! power cuts mid-commit, failing disks (the node stops itself and is restarted) and a network
//! that is cut, slow or lossy (answers lost, requests retried). Every answer for a key names the
//! same wakeup, the log records at most one wakeup per key within its 24 h TTL (invariant 6), and
//! every acknowledged wakeup is in the durable log (invariant 4).

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
const AGENTS: usize = 3;
const KEYS_MIN: usize = 20;
const KEYS_MAX: usize = 60;
/// Each key is sent this many times in all (the first send and its retries).
const SENDS_MIN: usize = 2;
const SENDS_MAX: usize = 6;
/// Retries come this long after the first send, at most.
const RETRY_SPREAD_MS: u64 = 20 * MINUTE_MS;
const SOURCES: [&str; 3] = ["on_demand", "assignment", "automation"];

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "idempotency");
    let mut steps = Vec::new();
    for i in 0..AGENTS {
        steps.push(Step {
            at_ms: rng.gen_range(0..MINUTE_MS),
            action: Action::CreateAgent {
                spec: serde_json::json!({
                    "name": format!("agent-{i}"),
                    "adapter": { "type": "scripted", "steps": [
                        { "duration_ms": rng.gen_range(1_000..20_000), "outcome": "succeeded" },
                    ]},
                }),
            },
        });
    }
    let keys = rng.gen_range(KEYS_MIN..=KEYS_MAX);
    let mut sends = 0;
    for k in 0..keys {
        // Key names repeat across agents on purpose: keys are scoped to their agent.
        let key = format!("key-{}", k % (keys / 2).max(1));
        let agent = format!("agent-{}", rng.gen_range(0..AGENTS));
        let source = SOURCES[rng.gen_range(0..SOURCES.len())];
        let task_key = (rng.gen_bool(0.5)).then(|| format!("task-{}", rng.gen_range(0..4)));
        let first_ms = rng.gen_range(2 * MINUTE_MS..SAFETY_MS - RETRY_SPREAD_MS);
        let times = rng.gen_range(SENDS_MIN..=SENDS_MAX);
        for send in 0..times {
            let at_ms = if send == 0 {
                first_ms
            } else {
                first_ms + rng.gen_range(0..RETRY_SPREAD_MS)
            };
            sends += 1;
            steps.push(Step {
                at_ms,
                action: Action::Wake {
                    agent: agent.clone(),
                    request: serde_json::json!({
                        "source": source,
                        "reason": format!("{key} for {agent}"),
                        "task_key": task_key,
                        "idempotency_key": key,
                    }),
                },
            });
        }
    }
    // Equal instants keep their order (a stable sort), so the plan is fully determined.
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: Default::default(),
        pinned: Vec::new(),
        scenario: "idempotency",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 1.5, 16),
            rate(FaultKind::PowerCut, 1.5, 16),
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
        describe: format!("keys={keys} sends={sends}"),
    };
    phases::run(setup, recorder).await;
}
