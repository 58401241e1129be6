//! The shape every scenario shares: one runtime node and one workload node; a safety phase in
//! which faults strike at instants drawn from the seed (the node is killed, has its power cut
//! mid-commit, has its wall clock jump, has its disk fail writes or syncs, is cut off from the
//! workload or slowed down or loses packets); then a quiet phase (every fault healed, node up,
//! clock steady) in which liveness is judged. A scenario only says which agents, which wakeups
//! and which faults. docs/faults.md describes each fault.

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;
use std::time::Duration;

use madsim::net::NetSim;
use madsim::task::NodeId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vigil_faults::{plan, stream, Fault, FaultRate, Injection};
use vigil_world::disk::lying_fsync_from_env;
use vigil_world::harness::{elapsed_ms, sleep_until_ms, RuntimeNode};
use vigil_world::recorder::Recorder;
use vigil_world::run_faults::{RunFault, RunFaults};
use vigil_world::trace::{FaultRecord, TraceEvent};
use vigil_world::workload::{Step, Workload};

/// The simulated addresses (virtual: nothing leaves the process).
pub(crate) const RUNTIME_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1));
const WORKLOAD_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 100));
/// A supervisor (systemd `Restart=on-failure`, a Kubernetes pod) restarts a node that stopped
/// itself after this long.
pub const SUPERVISOR_RESTART_MS: u64 = 1_000;
/// After its disk failed an operation, a node has this long to stop itself before the harness
/// decides the failure did not reach it.
const NODE_STOP_WAIT_MS: u64 = 2_000;
/// The quiet phase spans at least this many probe periods. A probe right after the healing
/// finds a node that was just restarted or whose clock was just set right, which is not yet
/// steady; liveness needs later probes, even when faults made earlier ones late (a probe
/// delayed by a lossy network pushes the next one back).
pub const QUIET_PROBE_PERIODS_MIN: u64 = 3;
/// The fault kinds that open a window, in the order the run's first record counts them.
const WINDOW_KINDS: [&str; 5] = [
    "storage_io_error",
    "disk_full",
    "partition",
    "net_delay",
    "packet_loss",
];

/// The world `llm` agents act in: how the simulated model answers, and whether a simulated
/// tool server is up (and how its endpoints behave).
#[derive(Debug, Clone, Default)]
pub struct AgentWorld {
    pub provider: vigil_world::provider::ProviderScript,
    pub tools: Option<vigil_world::tool_server::ToolScript>,
    /// How the simulated machine's children behave, for scenarios whose agents spawn them.
    pub processes: Option<vigil_world::processes::ProcessScript>,
    /// A simulated alert receiver refusing this share of attempts (per mille) in the safety
    /// phase, for scenarios that judge alerts (`every_alert_delivered`).
    pub alert_refuse_permille: Option<u32>,
    /// A simulated state server for predicate heartbeats to observe, answering as this script
    /// says in the safety phase; its truth freezes at the quiet phase.
    pub state: Option<vigil_world::state_server::StateScript>,
    /// How often the node snapshots, and whether it compacts its log.
    pub snapshots: SnapshotMix,
}

/// How often a scenario's node snapshots. Why frequent by default: a snapshot is checked only
/// when a node recovers from it, and most scenarios run a few hours of a small fleet, in which
/// production's pace ([`SnapshotMix::Rare`]) takes none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SnapshotMix {
    /// `vigil_world::harness::frequent_snapshots`: every recovery starts from a recent snapshot
    /// and is compared with a replay of the whole log.
    #[default]
    Frequent,
    /// `vigil_world::harness::SIM_SNAPSHOTS`: for large fleets and long days, where a snapshot
    /// of every agent is costly.
    Rare,
    /// `vigil_world::harness::compacting_snapshots`: the node compacts its log, so that its
    /// recoveries start from compacted logs.
    Compacting,
}

impl SnapshotMix {
    fn policy(self) -> vigil::snapshots::SnapshotPolicy {
        match self {
            SnapshotMix::Frequent => vigil_world::harness::frequent_snapshots(),
            SnapshotMix::Rare => vigil_world::harness::SIM_SNAPSHOTS,
            SnapshotMix::Compacting => vigil_world::harness::compacting_snapshots(),
        }
    }
}

/// What a scenario asks of the shared runner.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The model's and the tools' behaviour, for scenarios with `llm` agents.
    pub agents: AgentWorld,
    pub scenario: &'static str,
    pub seed: u64,
    /// Faults strike during `[0, safety_ms)`...
    pub safety_ms: u64,
    /// ...and `[safety_ms, safety_ms + quiet_ms)` is quiet, for liveness.
    pub quiet_ms: u64,
    pub rates: Vec<FaultRate>,
    /// Faults at fixed instants, beside the drawn ones (a scenario that must show one fault
    /// at one moment: a jump while a pause is in force, a power cut right after a write).
    pub pinned: Vec<Injection>,
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
    /// Readers of the live event stream (Server-Sent Events), each dropping and resuming it at
    /// seeded moments: invariant 11 then judges the SSE path too.
    pub sse_readers: u32,
    /// Extra words for the run's first trace record.
    pub describe: String,
}

/// Runs `setup` to its end, recording into `recorder`.
pub async fn run(mut setup: Setup, recorder: Recorder) {
    let Setup { seed, .. } = setup;
    assert!(
        setup.quiet_ms >= QUIET_PROBE_PERIODS_MIN * setup.probe_every_ms,
        "{}: a quiet phase of {} ms holds fewer than {QUIET_PROBE_PERIODS_MIN} probes every {} ms",
        setup.scenario,
        setup.quiet_ms,
        setup.probe_every_ms
    );
    let mut rng = stream(seed, "skew");
    // A simulated LLM provider, for scenarios whose agents call one (or whose faults hit it).
    let uses_llm = setup.steps.iter().any(|s| {
        matches!(&s.action, vigil_world::workload::Action::CreateAgent { spec } if spec["adapter"]["type"] == "llm")
    });
    let pulses = setup.steps.iter().any(|s| {
        matches!(
            s.action,
            vigil_world::workload::Action::Pulse { .. }
                | vigil_world::workload::Action::PulseBatch { .. }
        )
    });
    let world = vigil_faults::swarm::World {
        llm: uses_llm,
        pulses,
        tools: setup.agents.tools.is_some(),
    };
    // Swarm mode: the seed's own choice of faults instead of the scenario's designed mix.
    let swarm = recorder
        .swarm()
        .then(|| vigil_faults::swarm::choose(seed, world));
    let rates = swarm.clone().unwrap_or_else(|| setup.rates.clone());
    let mut planned = plan(seed, setup.safety_ms, &rates);
    planned.extend(setup.pinned.iter().copied());
    // Stable: a pinned fault comes after a drawn one of the same instant.
    planned.sort_by_key(|i| i.at_ms);
    let (windows, injections): (Vec<Injection>, Vec<Injection>) =
        planned.into_iter().partition(|i| i.fault.duration_ms() > 0);
    let skew_ms = rng.gen_range(-setup.skew_ms_max..=setup.skew_ms_max);
    let count = |kind: &str| injections.iter().filter(|i| i.fault.kind() == kind).count();
    // Window faults are counted only when the scenario lists them, so the first record of a
    // scenario without them reads as it always has.
    let window_counts: String = WINDOW_KINDS
        .iter()
        .filter(|kind| rates.iter().any(|r| r.kind.name() == **kind))
        .map(|kind| {
            let n = windows.iter().filter(|i| i.fault.kind() == *kind).count();
            format!(" {kind}={n}")
        })
        .collect();
    let lying_fsync = lying_fsync_from_env();
    let swarm_words = swarm.map_or(String::new(), |rates| {
        format!(" swarm={}", vigil_faults::swarm::describe(&rates))
    });
    recorder.record(
        "sim",
        TraceEvent::RunStarted {
            seed,
            scenario: setup.scenario.into(),
            plan: format!(
                "skew_ms={skew_ms} crashes={} power_cuts={} clock_jumps={}{window_counts} lying_fsync={lying_fsync} {}{swarm_words}",
                count("crash"),
                count("power_cut"),
                count("clock_jump"),
                setup.describe
            ),
        },
    );
    let entropy_seed = stream(seed, "entropy").gen();
    let processes = setup.agents.processes.map(|script| {
        vigil_world::processes::SimProcesses::new(&recorder, script, stream(seed, "processes"))
    });
    let mut node = RuntimeNode::start(
        &recorder,
        "vigil-1",
        RUNTIME_IP,
        skew_ms,
        lying_fsync,
        entropy_seed,
        processes,
        setup
            .agents
            .alert_refuse_permille
            .map_or_else(Vec::new, |_| vec![vigil_world::alert_sink::sink()]),
        setup.agents.snapshots.policy(),
    );
    let end_ms = setup.safety_ms + setup.quiet_ms;
    // Pulse loss (a window fault) drops pulses at the workload, its source.
    let pulse_loss = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(0));
    let workload = Workload {
        target: node.name,
        addr: node.addr,
        // Moved, not copied: a fleet's day is tens of thousands of steps.
        steps: std::mem::take(&mut setup.steps).into(),
        probe_every_ms: setup.probe_every_ms,
        tail_every_ms: setup.tail_every_ms,
        until_ms: end_ms,
        pulse_loss: pulse_loss.clone(),
        pulse_drop_seed: stream(seed, "pulse_drops").gen(),
        // Each reader's own stream, so that adding readers moves no other draw.
        sse_readers: (0..setup.sse_readers)
            .map(|i| stream(seed, &format!("sse_reader/{i}")).gen())
            .collect(),
    };
    let provider = uses_llm.then(|| {
        let state = std::sync::Arc::new(std::sync::Mutex::new(
            vigil_world::provider::ProviderState::new(seed, setup.agents.provider.clone()),
        ));
        let (serving, recorder) = (state.clone(), recorder.clone());
        let node = vigil_world::harness::build_node(
            madsim::runtime::Handle::current()
                .create_node()
                .name("llm-provider")
                .ip(vigil_world::provider::PROVIDER_IP)
                .init(move || vigil_world::provider::serve(serving.clone(), recorder.clone())),
        );
        // Agents may reach it by name, through the outbound client's resolver.
        NetSim::current().add_dns_record(
            vigil_world::provider::PROVIDER_HOST,
            vigil_world::provider::PROVIDER_IP,
        );
        (state, node.id())
    });
    // A simulated tool server, for scenarios whose agents call HTTP tools.
    let tool_server = setup.agents.tools.clone().map(|script| {
        let state = std::sync::Arc::new(std::sync::Mutex::new(
            vigil_world::tool_server::ToolServerState::new(seed, script),
        ));
        let (serving, recorder) = (state.clone(), recorder.clone());
        vigil_world::harness::build_node(
            madsim::runtime::Handle::current()
                .create_node()
                .name("tool-server")
                .ip(vigil_world::tool_server::TOOL_SERVER_IP)
                .init(move || vigil_world::tool_server::serve(serving.clone(), recorder.clone())),
        );
        NetSim::current().add_dns_record(
            vigil_world::tool_server::TOOL_SERVER_HOST,
            vigil_world::tool_server::TOOL_SERVER_IP,
        );
        state
    });
    // A simulated alert receiver, for scenarios that judge alerts.
    let alert_sink = setup.agents.alert_refuse_permille.map(|permille| {
        let state = std::sync::Arc::new(std::sync::Mutex::new(
            vigil_world::alert_sink::AlertSinkState::new(seed, permille),
        ));
        let (serving, recorder) = (state.clone(), recorder.clone());
        vigil_world::harness::build_node(
            madsim::runtime::Handle::current()
                .create_node()
                .name("alert-sink")
                .ip(vigil_world::alert_sink::ALERT_SINK_IP)
                .init(move || vigil_world::alert_sink::serve(serving.clone(), recorder.clone())),
        );
        NetSim::current().add_dns_record(
            vigil_world::alert_sink::ALERT_SINK_HOST,
            vigil_world::alert_sink::ALERT_SINK_IP,
        );
        state
    });
    let state_server = setup
        .agents
        .state
        .clone()
        .map(|script| start_state_server(seed, script, &recorder));
    let provider_node = provider.as_ref().map(|(_, id)| *id);
    let provider = provider.map(|(state, _)| state);
    let workload_recorder = recorder.clone();
    let workload_node = vigil_world::harness::build_node(
        madsim::runtime::Handle::current()
            .create_node()
            .name("workload")
            .ip(WORKLOAD_IP)
            .init(move || workload.clone().run(workload_recorder.clone())),
    );

    // Window faults run on their own timeline, so that a long wait for a power cut never
    // delays a partition or its healing.
    let window_faults = (!windows.is_empty()).then(|| {
        let faults = Rc::new(RefCell::new(Windows::new(
            workload_node.id(),
            node.id(),
            provider_node,
            pulse_loss.clone(),
        )));
        let task = madsim::task::spawn_local(run_windows(
            windows,
            faults.clone(),
            node.disk.clone(),
            Services {
                provider: provider.clone(),
                tools: tool_server.clone(),
            },
            node.run_faults.clone(),
            node.clock.clone(),
            node.name,
            recorder.clone(),
            seed,
        ));
        (faults, task)
    });

    let mut disk_rng = stream(seed, "crash_disk");
    let mut disk_failures = node.disk.injected_errors();
    let mut restart_at_ms: Option<u64> = None;
    let mut injections = injections.into_iter().peekable();
    let safety_ms = setup.safety_ms;
    let restart_after = |now_ms: u64, downtime_ms: u64| {
        (now_ms + downtime_ms.min(setup.downtime_ms_max)).min(safety_ms.max(now_ms))
    };
    loop {
        let next_injection_ms = injections.peek().map(|i| i.at_ms);
        let next_ms = [next_injection_ms, restart_at_ms]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(safety_ms);
        // Waiting on the disk's failure counter wakes this task only when a storage fault
        // bites, so scenarios without one keep their schedule.
        let disk_failed = tokio::select! {
            biased;
            changed = disk_failures.changed() => changed.is_ok(),
            on_time = sleep_until_ms(&recorder, next_ms) => {
                if !on_time {
                    return;
                }
                false
            }
        };
        if disk_failed {
            if node.is_up() {
                // The oracle holds the node to stopping: nothing may commit after this.
                let injected_errors = *disk_failures.borrow();
                recorder.record(
                    node.name,
                    TraceEvent::Fault {
                        fault: FaultRecord::StorageOpFailed { injected_errors },
                    },
                );
                if let Some(cause) = node.wait_for_stop(&recorder, NODE_STOP_WAIT_MS).await {
                    node.exited(&recorder, &cause);
                    restart_at_ms = Some(restart_after(elapsed_ms(), SUPERVISOR_RESTART_MS));
                }
            }
            continue;
        }
        if next_injection_ms.is_none() && restart_at_ms.is_none() {
            break;
        }
        if restart_at_ms == Some(next_ms) {
            node.restart(&recorder);
            restart_at_ms = None;
            continue;
        }
        // A fault whose turn comes after the safety phase (an earlier power cut waited long for
        // its operation) is dropped: faults never strike into the quiet phase, and the quiet
        // phase keeps its length (idempotency seed 960 once lost it whole this way).
        if elapsed_ms() >= safety_ms {
            break;
        }
        let injection = injections.next().expect("peeked");
        match injection.fault {
            // A crash while the node is already down has nothing to kill.
            Fault::Crash { downtime_ms } if node.is_up() => {
                recorder.record(
                    node.name,
                    TraceEvent::Fault {
                        fault: FaultRecord::Struck(injection.fault),
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
                        fault: FaultRecord::Struck(injection.fault),
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
            Fault::GracefulStop {
                grace_ms,
                downtime_ms,
            } if node.is_up() => {
                recorder.record(
                    node.name,
                    TraceEvent::Fault {
                        fault: FaultRecord::Struck(injection.fault),
                    },
                );
                if node.graceful_stop(&recorder, grace_ms).await {
                    restart_at_ms = Some(restart_after(elapsed_ms(), downtime_ms));
                }
            }
            Fault::Crash { .. } | Fault::PowerCut { .. } | Fault::GracefulStop { .. } => {}
            Fault::ClockJump { delta_ms } => node.jump_clock(&recorder, delta_ms),
            Fault::CatchUp { delta_ms } => {
                recorder.record(
                    node.name,
                    TraceEvent::Fault {
                        fault: FaultRecord::Struck(injection.fault),
                    },
                );
                node.jump_clock(&recorder, delta_ms as i64);
            }
            Fault::WakeupBurst {
                wakes,
                task_keys,
                pick,
            } => {
                recorder.record(
                    "workload",
                    TraceEvent::Fault {
                        fault: FaultRecord::Struck(injection.fault),
                    },
                );
                let (addr, recorder) = (node.addr, recorder.clone());
                // The storm runs on the workload node, as its own (local) tasks.
                workload_node.spawn(async move {
                    madsim::task::spawn_local(vigil_world::workload::wakeup_burst(
                        addr, recorder, wakes, task_keys, pick, end_ms,
                    ));
                });
            }
            Fault::AlignedTimers {
                agents,
                interval_ms,
            } => {
                recorder.record(
                    "workload",
                    TraceEvent::Fault {
                        fault: FaultRecord::Struck(injection.fault),
                    },
                );
                let (name, addr, recorder) = (node.name, node.addr, recorder.clone());
                workload_node.spawn(async move {
                    madsim::task::spawn_local(vigil_world::workload::aligned_timers(
                        name,
                        addr,
                        recorder,
                        agents,
                        interval_ms,
                        next_ms,
                        end_ms,
                    ));
                });
            }
            Fault::StorageError { .. }
            | Fault::Partition { .. }
            | Fault::NetDelay { .. }
            | Fault::PacketLoss { .. }
            | Fault::Llm { .. }
            | Fault::ProviderPartition { .. }
            | Fault::PulseLoss { .. }
            | Fault::ClockSkew { .. }
            | Fault::RunHang { .. }
            | Fault::RunFailure { .. }
            | Fault::ToolFailure { .. }
            | Fault::ToolHang { .. } => unreachable!("window faults run on their own task"),
        }
    }
    // The quiet phase: heal every window, and restart a node that stopped itself just now.
    if let Some((faults, task)) = window_faults {
        task.abort();
        node.disk.disarm_errors();
        // Hung runs error out now; runs that start from here on are left alone.
        node.run_faults.heal();
        if let Some(provider) = &provider {
            provider.lock().expect("provider lock").heal();
        }
        if let Some(tools) = &tool_server {
            tools.lock().expect("tool server lock").heal();
        }
        let healed = faults.borrow_mut().heal_all();
        let skew_back_ms = faults.borrow_mut().skew_delta();
        jump_clock(&node.clock, node.name, &recorder, skew_back_ms);
        if healed {
            recorder.record(
                "sim",
                TraceEvent::Fault {
                    fault: FaultRecord::HealedAll,
                },
            );
        }
        if let Some(cause) = node.stopped_cause() {
            node.exited(&recorder, &cause);
        }
    }
    if !node.is_up() {
        node.restart(&recorder);
    }
    if !sleep_until_ms(&recorder, safety_ms).await {
        return;
    }
    if let Some(sink) = &alert_sink {
        sink.lock().expect("alert sink lock").heal();
    }
    recorder.record("sim", TraceEvent::QuietPhase);
    if let Some(state) = &state_server {
        // At the very instant of the record: the oracle restates the truth as of it.
        state.lock().expect("state server lock").freeze(elapsed_ms());
    }
    sleep_until_ms(&recorder, end_ms).await;
}

/// Starts the simulated state server on its own node, reachable by its host name.
fn start_state_server(
    seed: u64,
    script: vigil_world::state_server::StateScript,
    recorder: &Recorder,
) -> vigil_world::state_server::SharedStateServer {
    use vigil_world::state_server as server;
    let state = std::sync::Arc::new(std::sync::Mutex::new(server::StateServerState::new(
        seed, script,
    )));
    let (serving, recorder) = (state.clone(), recorder.clone());
    vigil_world::harness::build_node(
        madsim::runtime::Handle::current()
            .create_node()
            .name(server::STATE_SERVER_NODE)
            .ip(server::STATE_SERVER_IP)
            .init(move || server::serve(serving.clone(), recorder.clone())),
    );
    NetSim::current().add_dns_record(server::STATE_SERVER_HOST, server::STATE_SERVER_IP);
    state
}

/// The world's outside services that window faults make sick, when the world has them.
struct Services {
    provider: Option<vigil_world::provider::SharedProvider>,
    tools: Option<vigil_world::tool_server::SharedToolServer>,
}

/// Opens each window fault at its instant and heals it when its duration is over.
#[allow(clippy::too_many_arguments)]
async fn run_windows(
    windows: Vec<Injection>,
    faults: Rc<RefCell<Windows>>,
    disk: std::sync::Arc<vigil_world::disk::SimDisk>,
    services: Services,
    run_faults: RunFaults,
    clock: std::sync::Arc<vigil_world::clock::SimClock>,
    node_name: &'static str,
    recorder: Recorder,
    seed: u64,
) {
    // (instant, opens?, fault): closings sort before openings at the same instant.
    let mut timeline: Vec<(u64, bool, Fault)> = windows
        .iter()
        .flat_map(|w| {
            [
                (w.at_ms, true, w.fault),
                (w.at_ms + w.fault.duration_ms(), false, w.fault),
            ]
        })
        .collect();
    timeline.sort_by_key(|(at_ms, opens, _)| (*at_ms, *opens));
    let mut storage_rng = stream(seed, "storage_error_ops");
    let mut storage_until_ms = 0;
    for (at_ms, opens, fault) in timeline {
        if !sleep_until_ms(&recorder, at_ms).await {
            return;
        }
        let node = match fault {
            Fault::StorageError { .. } | Fault::RunHang { .. } | Fault::RunFailure { .. } => {
                node_name
            }
            Fault::Llm { .. } => "llm-provider",
            Fault::ToolFailure { .. } | Fault::ToolHang { .. } => "tool-server",
            _ => "sim",
        };
        let record = if opens {
            match fault {
                Fault::StorageError {
                    error,
                    filter,
                    errors_max,
                    duration_ms,
                } => {
                    let ops_rng = ChaCha8Rng::seed_from_u64(storage_rng.gen());
                    disk.arm_errors(error, filter, errors_max, ops_rng);
                    storage_until_ms = storage_until_ms.max(at_ms + duration_ms);
                }
                Fault::Llm { llm, .. } => {
                    // Without a provider in the world (no agent calls one) there is nothing to
                    // make sick; the record says so.
                    let Some(provider) = &services.provider else {
                        recorder.record(
                            "sim",
                            TraceEvent::Fault {
                                fault: FaultRecord::SkippedNoProvider(fault),
                            },
                        );
                        continue;
                    };
                    provider.lock().expect("provider lock").open(llm);
                }
                Fault::RunHang { .. } | Fault::RunFailure { .. } => {
                    run_faults.open(run_fault(fault));
                }
                Fault::ToolFailure { .. } | Fault::ToolHang { .. } => {
                    // Only worlds with a tool server draw these (swarm) or list them (designed).
                    let Some(tools) = &services.tools else {
                        recorder.record(
                            "sim",
                            TraceEvent::Fault {
                                fault: FaultRecord::SkippedNoProvider(fault),
                            },
                        );
                        continue;
                    };
                    set_tool_fault(tools, fault, true);
                }
                _ => faults.borrow_mut().open(at_ms, fault),
            }
            FaultRecord::Struck(fault)
        } else {
            match fault {
                Fault::StorageError { .. } if at_ms >= storage_until_ms => disk.disarm_errors(),
                Fault::StorageError { .. } => {}
                Fault::Llm { llm, .. } => match &services.provider {
                    Some(provider) => provider.lock().expect("provider lock").close(llm),
                    None => continue,
                },
                Fault::RunHang { .. } | Fault::RunFailure { .. } => {
                    run_faults.close(run_fault(fault))
                }
                Fault::ToolFailure { .. } | Fault::ToolHang { .. } => match &services.tools {
                    Some(tools) => set_tool_fault(tools, fault, false),
                    None => continue,
                },
                _ => faults.borrow_mut().close(at_ms),
            }
            FaultRecord::Healed(fault)
        };
        recorder.record(node, TraceEvent::Fault { fault: record });
        if matches!(fault, Fault::ClockSkew { .. }) {
            let delta_ms = faults.borrow_mut().skew_delta();
            jump_clock(&clock, node_name, &recorder, delta_ms);
        }
    }
}

/// Opens or closes a tool server fault's window.
fn set_tool_fault(tools: &vigil_world::tool_server::SharedToolServer, fault: Fault, open: bool) {
    let mut tools = tools.lock().expect("tool server lock");
    match fault {
        Fault::ToolFailure { .. } => tools.set_failing(open),
        Fault::ToolHang { .. } => tools.set_hanging(open),
        other => unreachable!("{other:?} is not a tool server fault"),
    }
}

/// What a run fault does to the runs it strikes.
fn run_fault(fault: Fault) -> RunFault {
    match fault {
        Fault::RunHang { .. } => RunFault::Hang,
        Fault::RunFailure { .. } => RunFault::Failure,
        other => unreachable!("{other:?} is not a run fault"),
    }
}

/// Moves the node's wall clock by `delta_ms` for a skew window, recorded as the jump it is.
fn jump_clock(
    clock: &vigil_world::clock::SimClock,
    node_name: &'static str,
    recorder: &Recorder,
    delta_ms: i64,
) {
    if delta_ms == 0 {
        return;
    }
    let offset_ms = clock.jump(delta_ms);
    recorder.record(
        node_name,
        TraceEvent::Fault {
            fault: FaultRecord::ClockJump {
                delta_ms,
                offset_ms,
            },
        },
    );
}

/// The network faults in force between the workload and the runtime node. Windows may
/// overlap: the network always shows the worst of the open ones, and returns to its normal
/// configuration when the last one closes. madsim's latency and loss settings are global; the
/// workload and the runtime node are the only nodes that talk, so they apply to that link.
struct Windows {
    workload: NodeId,
    runtime: NodeId,
    /// The LLM provider's node, when the world has one (`provider_partition`).
    provider: Option<NodeId>,
    /// The workload's pulse-drop rate in thousandths (`pulse_loss`).
    pulse_loss: std::sync::Arc<std::sync::atomic::AtomicU16>,
    /// How far open `clock_skew` windows have set the node's wall clock off, as applied.
    skew_applied_ms: i64,
    normal_latency: std::ops::Range<Duration>,
    normal_loss_rate: f64,
    /// (closes at, fault) of each open window.
    open: Vec<(u64, Fault)>,
}

impl Windows {
    fn new(
        workload: NodeId,
        runtime: NodeId,
        provider: Option<NodeId>,
        pulse_loss: std::sync::Arc<std::sync::atomic::AtomicU16>,
    ) -> Self {
        let mut normal = None;
        NetSim::current().update_config(|config| normal = Some(config.clone()));
        let normal = normal.expect("update_config calls back");
        Windows {
            workload,
            runtime,
            provider,
            pulse_loss,
            skew_applied_ms: 0,
            normal_latency: normal.send_latency,
            normal_loss_rate: normal.packet_loss_rate,
            open: Vec::new(),
        }
    }

    fn open(&mut self, now_ms: u64, fault: Fault) {
        self.open.push((now_ms + fault.duration_ms(), fault));
        self.apply();
    }

    /// Closes the windows that are over at `now_ms`.
    fn close(&mut self, now_ms: u64) {
        self.open.retain(|(closes_ms, _)| *closes_ms > now_ms);
        self.apply();
    }

    /// How much the node's wall clock must move for the open `clock_skew` windows (their sum)
    /// to be in force; counts it as applied.
    fn skew_delta(&mut self) -> i64 {
        let wanted: i64 = self
            .open
            .iter()
            .filter_map(|(_, f)| match f {
                Fault::ClockSkew { skew_ms, .. } => Some(*skew_ms),
                _ => None,
            })
            .sum();
        let delta = wanted - self.skew_applied_ms;
        self.skew_applied_ms = wanted;
        delta
    }

    /// Heals everything; returns whether anything was open.
    fn heal_all(&mut self) -> bool {
        let any = !self.open.is_empty();
        self.open.clear();
        self.apply();
        any
    }

    fn apply(&self) {
        let net = NetSim::current();
        let partitioned = self
            .open
            .iter()
            .any(|(_, f)| matches!(f, Fault::Partition { .. }));
        for (src, dst) in [(self.workload, self.runtime), (self.runtime, self.workload)] {
            if partitioned {
                net.clog_link(src, dst);
            } else {
                net.unclog_link(src, dst);
            }
        }
        if let Some(provider) = self.provider {
            let cut = self
                .open
                .iter()
                .any(|(_, f)| matches!(f, Fault::ProviderPartition { .. }));
            for (src, dst) in [(self.runtime, provider), (provider, self.runtime)] {
                if cut {
                    net.clog_link(src, dst);
                } else {
                    net.unclog_link(src, dst);
                }
            }
        }
        let pulse_loss = self
            .open
            .iter()
            .filter_map(|(_, f)| match f {
                Fault::PulseLoss { loss_permille, .. } => Some(*loss_permille),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        self.pulse_loss
            .store(pulse_loss, std::sync::atomic::Ordering::SeqCst);
        let delay_ms = self
            .open
            .iter()
            .filter_map(|(_, f)| match f {
                Fault::NetDelay { latency_ms, .. } => Some(*latency_ms),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let loss_permille = self
            .open
            .iter()
            .filter_map(|(_, f)| match f {
                Fault::PacketLoss { loss_permille, .. } => Some(*loss_permille),
                _ => None,
            })
            .max();
        let delay = Duration::from_millis(delay_ms);
        let latency = self.normal_latency.start + delay..self.normal_latency.end + delay;
        let loss_rate = loss_permille.map_or(self.normal_loss_rate, |p| {
            f64::from(p) / f64::from(vigil_faults::plan::PERMILLE)
        });
        net.update_config(|config| {
            config.send_latency = latency;
            config.packet_loss_rate = loss_rate;
        });
    }
}
