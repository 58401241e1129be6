//! Scenario `smoke`: one runtime node, ten agents with random timer intervals, 24 simulated
//! hours. During the first 23 hours the node is killed at random instants or by a power cut in
//! the middle of a commit (and restarted on its surviving disk after a random downtime), and its
//! wall clock jumps forward and backward; the last hour is quiet, and liveness is judged there.

use std::net::{IpAddr, Ipv4Addr};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vigil_faults::plan::{log_uniform, FaultKind};
use vigil_faults::{plan, stream, Fault, FaultRate};
use vigil_world::disk::lying_fsync_from_env;
use vigil_world::harness::{elapsed_ms, sleep_until_ms, RuntimeNode};
use vigil_world::recorder::Recorder;
use vigil_world::trace::TraceEvent;
use vigil_world::workload::{AgentToCreate, Workload};

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
/// Largest initial offset of the node's wall clock from true time.
const SKEW_MS_MAX: i64 = 5_000;
const PROBE_EVERY_MS: u64 = 10 * 60_000;
const TAIL_EVERY_MS: u64 = 5 * 60_000;

/// The simulated addresses (virtual: nothing leaves the process).
const RUNTIME_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1));
const WORKLOAD_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 100));

/// Longest the harness waits for an armed power cut's operation to come (the node writes at
/// least once per agent interval, so with agents registered this is never reached).
const POWER_CUT_WAIT_MS: u64 = 2 * INTERVAL_MS_MAX;

fn fault_rates() -> [FaultRate; 3] {
    [
        FaultRate {
            kind: FaultKind::Crash,
            per_hour: 0.15,
            after_ms: 0,
            max_triggers: 64,
        },
        FaultRate {
            kind: FaultKind::PowerCut,
            per_hour: 0.15,
            after_ms: 0,
            max_triggers: 64,
        },
        FaultRate {
            kind: FaultKind::ClockJump,
            per_hour: 0.2,
            after_ms: 0,
            max_triggers: 32,
        },
    ]
}

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "smoke");
    let injections = plan(seed, SAFETY_MS, &fault_rates());
    let skew_ms = rng.gen_range(-SKEW_MS_MAX..=SKEW_MS_MAX);
    let count = |kind: &str| injections.iter().filter(|i| i.fault.kind() == kind).count();
    let lying_fsync = lying_fsync_from_env();
    recorder.record(
        "sim",
        TraceEvent::RunStarted {
            seed,
            scenario: "smoke".into(),
            plan: format!(
                "skew_ms={skew_ms} crashes={} power_cuts={} clock_jumps={} lying_fsync={lying_fsync}",
                count("crash"),
                count("power_cut"),
                count("clock_jump")
            ),
        },
    );
    let mut node = RuntimeNode::start(&recorder, "vigil-1", RUNTIME_IP, skew_ms, lying_fsync);

    let mut agents: Vec<AgentToCreate> = (0..AGENTS)
        .map(|i| AgentToCreate {
            at_ms: rng.gen_range(0..CREATE_WINDOW_MS),
            name: format!("agent-{i}"),
            interval_ms: log_uniform(&mut rng, INTERVAL_MS_MIN, INTERVAL_MS_MAX),
        })
        .collect();
    agents.sort_by_key(|a| a.at_ms);
    let workload = Workload {
        target: node.name,
        addr: node.addr,
        agents,
        probe_every_ms: PROBE_EVERY_MS,
        tail_every_ms: TAIL_EVERY_MS,
        until_ms: SAFETY_MS + QUIET_MS,
    };
    let workload_recorder = recorder.clone();
    madsim::runtime::Handle::current()
        .create_node()
        .name("workload")
        .ip(WORKLOAD_IP)
        .init(move || workload.clone().run(workload_recorder.clone()))
        .build();

    let mut disk_rng = stream(seed, "crash_disk");
    let mut restart_at_ms: Option<u64> = None;
    let mut injections = injections.into_iter().peekable();
    loop {
        let next_injection_ms = injections.peek().map(|i| i.at_ms);
        let Some(next_ms) = [next_injection_ms, restart_at_ms]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        if !sleep_until_ms(&recorder, next_ms).await {
            return;
        }
        if restart_at_ms == Some(next_ms) {
            node.restart(&recorder);
            restart_at_ms = None;
            continue;
        }
        let injection = injections.next().expect("peeked");
        match injection.fault {
            // A crash while the node is already down has nothing to kill.
            Fault::Crash { downtime_ms } if node.is_up() => {
                recorder.record(
                    node.name,
                    TraceEvent::Fault {
                        description: format!("crash downtime_ms={downtime_ms}"),
                    },
                );
                node.crash(&recorder, &mut disk_rng);
                restart_at_ms = Some((next_ms + downtime_ms).min(SAFETY_MS));
            }
            Fault::PowerCut {
                after_ops,
                downtime_ms,
            } if node.is_up() => {
                recorder.record(
                    node.name,
                    TraceEvent::Fault {
                        description: format!(
                            "power_cut after_ops={after_ops} downtime_ms={downtime_ms}"
                        ),
                    },
                );
                let cut_rng = ChaCha8Rng::seed_from_u64(disk_rng.gen());
                if node
                    .power_cut(&recorder, after_ops, cut_rng, POWER_CUT_WAIT_MS)
                    .await
                {
                    restart_at_ms =
                        Some((elapsed_ms() + downtime_ms).min(SAFETY_MS.max(elapsed_ms())));
                }
            }
            Fault::Crash { .. } | Fault::PowerCut { .. } => {}
            Fault::ClockJump { delta_ms } => node.jump_clock(&recorder, delta_ms),
        }
    }
    if !node.is_up() {
        node.restart(&recorder);
    }
    if !sleep_until_ms(&recorder, SAFETY_MS).await {
        return;
    }
    recorder.record("sim", TraceEvent::QuietPhase);
    sleep_until_ms(&recorder, SAFETY_MS + QUIET_MS).await;
}
