//! The shape every scenario shares: one runtime node and one workload node; a safety phase in
//! which the node is killed, has its power cut mid-commit, and has its wall clock jump, each at
//! instants drawn from the seed; then a quiet phase (faults healed, node up, clock steady) in
//! which liveness is judged. A scenario only says which agents, which wakeups and which faults.

use std::net::{IpAddr, Ipv4Addr};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vigil_faults::{plan, stream, Fault, FaultRate};
use vigil_world::disk::lying_fsync_from_env;
use vigil_world::harness::{elapsed_ms, sleep_until_ms, RuntimeNode};
use vigil_world::recorder::Recorder;
use vigil_world::trace::TraceEvent;
use vigil_world::workload::{Step, Workload};

/// The simulated addresses (virtual: nothing leaves the process).
const RUNTIME_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1));
const WORKLOAD_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 100));

/// What a scenario asks of the shared runner.
#[derive(Debug, Clone)]
pub struct Setup {
    pub scenario: &'static str,
    pub seed: u64,
    /// Faults strike during `[0, safety_ms)`...
    pub safety_ms: u64,
    /// ...and `[safety_ms, safety_ms + quiet_ms)` is quiet, for liveness.
    pub quiet_ms: u64,
    pub rates: Vec<FaultRate>,
    /// A crashed node stays down at most this long.
    pub downtime_ms_max: u64,
    /// Largest initial offset of the node's wall clock from true time.
    pub skew_ms_max: i64,
    /// Longest the harness waits for an armed power cut's storage operation to come.
    pub power_cut_wait_ms: u64,
    /// What the workload does, in time order.
    pub steps: Vec<Step>,
    pub probe_every_ms: u64,
    pub tail_every_ms: u64,
    /// Extra words for the run's first trace record.
    pub describe: String,
}

/// Runs `setup` to its end, recording into `recorder`.
pub async fn run(setup: Setup, recorder: Recorder) {
    let Setup { seed, .. } = setup;
    let mut rng = stream(seed, "skew");
    let injections = plan(seed, setup.safety_ms, &setup.rates);
    let skew_ms = rng.gen_range(-setup.skew_ms_max..=setup.skew_ms_max);
    let count = |kind: &str| injections.iter().filter(|i| i.fault.kind() == kind).count();
    let lying_fsync = lying_fsync_from_env();
    recorder.record(
        "sim",
        TraceEvent::RunStarted {
            seed,
            scenario: setup.scenario.into(),
            plan: format!(
                "skew_ms={skew_ms} crashes={} power_cuts={} clock_jumps={} lying_fsync={lying_fsync} {}",
                count("crash"),
                count("power_cut"),
                count("clock_jump"),
                setup.describe
            ),
        },
    );
    let entropy_seed = stream(seed, "entropy").gen();
    let mut node = RuntimeNode::start(
        &recorder,
        "vigil-1",
        RUNTIME_IP,
        skew_ms,
        lying_fsync,
        entropy_seed,
    );
    let end_ms = setup.safety_ms + setup.quiet_ms;
    let workload = Workload {
        target: node.name,
        addr: node.addr,
        steps: setup.steps.clone(),
        probe_every_ms: setup.probe_every_ms,
        tail_every_ms: setup.tail_every_ms,
        until_ms: end_ms,
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
    let safety_ms = setup.safety_ms;
    let restart_after = |now_ms: u64, downtime_ms: u64| {
        (now_ms + downtime_ms.min(setup.downtime_ms_max)).min(safety_ms.max(now_ms))
    };
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
                restart_at_ms = Some(restart_after(next_ms, downtime_ms));
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
                    .power_cut(&recorder, after_ops, cut_rng, setup.power_cut_wait_ms)
                    .await
                {
                    restart_at_ms = Some(restart_after(elapsed_ms(), downtime_ms));
                }
            }
            Fault::Crash { .. } | Fault::PowerCut { .. } => {}
            Fault::ClockJump { delta_ms } => node.jump_clock(&recorder, delta_ms),
        }
    }
    if !node.is_up() {
        node.restart(&recorder);
    }
    if !sleep_until_ms(&recorder, safety_ms).await {
        return;
    }
    recorder.record("sim", TraceEvent::QuietPhase);
    sleep_until_ms(&recorder, end_ms).await;
}
