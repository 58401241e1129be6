//! The harness: runs one seed of a scenario on madsim, with runtime nodes that are the
//! production `Node` on a `SimClock` and a `SimDisk`, killed and restarted on their surviving
//! disk. Only built under `--cfg madsim`. A node that stops itself after a failed write
//! (ADR 0008) is noticed here and restarted by the scenario, as a supervisor would.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use madsim::runtime::{Handle, NodeHandle, Runtime};
use madsim::task::NodeId;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use vigil::engine::event::Event;
use vigil::io::clock::SharedClock;
use vigil::io::entropy::SeededEntropy;
use vigil::node::{Node, NodeConfig, TenantToken};
use vigil::shell::{CommitObserver, CommitStage};
use vigil::transcript::MemoryTranscripts;

use crate::check::Violation;
use crate::clock::SimClock;
use crate::disk::SimDisk;
use crate::recorder::Recorder;
use crate::processes::SimProcesses;
use crate::run_faults::RunFaults;
use vigil::exec::spawn::{NoSpawner, SharedSpawner};
use crate::trace::{event_digest, FaultRecord, TraceEvent, TraceRecord};

/// Port every simulated runtime node serves its API on.
pub const RUNTIME_PORT: u16 = 7070;
/// The operator token of tenant `default` on every simulated node (configured, so the workload
/// knows it; the agent tokens are drawn from the seed).
pub const SIM_OPERATOR_TOKEN: &str = "vgl_op_simulated-operator";
/// Stack of the thread that runs one seed (redb and hyper nest deeply in debug builds).
const SEED_THREAD_STACK_BYTES: usize = 16 * 1024 * 1024;
/// How often the harness looks whether an armed power cut struck. The runtime meets I/O errors
/// for at most this long before its process dies.
const POWER_CUT_POLL_MS: u64 = 10;
/// How often a waiting supervisor looks whether an invariant broke, so a failing run stops soon.
const STOP_CHECK_MS: u64 = 60_000;
/// How often the harness looks whether a node whose disk just failed an operation has stopped.
const NODE_STOP_POLL_MS: u64 = 10;
/// How long past its drain's grace a gracefully stopping node may take to exit: its stop waits
/// for the runs' process groups (their largest grace, at most 60 s in any scenario, plus the
/// executor's settling time). A node still up after it is hung in its stop.
const GRACEFUL_STOP_EXIT_MS_MAX: u64 = 5 * 60_000;
/// Name of the random stream that decides what a crash leaves of a node's unsynced transcript
/// tails: its own stream, so that transcripts never shift the draws of the disk or the faults.
const TRANSCRIPT_CRASH_STREAM: &str = "transcript_crash";

thread_local! {
    /// Every node this seed's world created (each seed runs on its own thread), so that the end
    /// of the run can kill them all: madsim does not drop a node's pending tasks when its
    /// runtime is dropped, and each seed would otherwise keep its whole world (nodes, engines,
    /// simulated disks: ~36 MB a smoke seed) until the sweep ends.
    static WORLD_NODES: std::cell::RefCell<Vec<NodeId>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Builds a node of the simulated world and remembers it for [`end_world`]. Every node a
/// scenario or test creates goes through here.
pub fn build_node(builder: madsim::runtime::NodeBuilder<'_>) -> NodeHandle {
    let node = builder.build();
    WORLD_NODES.with(|nodes| nodes.borrow_mut().push(node.id()));
    node
}

/// Kills every node of the world and lets the executor drop their tasks, so that the seed's
/// memory is returned when its runtime goes (see [`WORLD_NODES`]). After the trace is sealed:
/// nothing here reaches it.
async fn end_world() {
    let nodes = WORLD_NODES.with(|nodes| std::mem::take(&mut *nodes.borrow_mut()));
    let handle = Handle::current();
    for node in nodes {
        handle.kill(node);
    }
    // Killed tasks are dropped when the executor next polls them.
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// What the harness knows of the process running on a runtime node.
#[derive(Debug)]
enum Process {
    /// Killed, or exited and noticed.
    Down,
    /// Started; recovery not finished.
    Starting,
    /// Serving; the receiver says whether it has stopped itself after a failed write.
    Running(tokio::sync::watch::Receiver<Option<String>>),
    /// Start-up failed on an injected storage error: the process exited with this error.
    Exited(String),
    /// Stopped gracefully (a drain, then a stop): the process exits.
    Stopped,
}

/// The harness's SIGTERM to a node's process: the drain's grace, and the wake-up. One per
/// node, for all its starts: the harness sends it only to a serving process, and restarts the
/// node only after that process has stopped, so no start sees an earlier one's request.
#[derive(Debug, Default)]
struct StopSignal {
    grace_ms: Mutex<Option<u64>>,
    sent: tokio::sync::Notify,
}

impl StopSignal {
    fn send(&self, grace_ms: u64) {
        *self.grace_ms.lock().expect("stop signal lock") = Some(grace_ms);
        self.sent.notify_one();
    }

    /// Waits for the signal; its grace.
    async fn received(&self) -> u64 {
        loop {
            if let Some(grace_ms) = self.grace_ms.lock().expect("stop signal lock").take() {
                return grace_ms;
            }
            self.sent.notified().await;
        }
    }
}
/// Virtual time since the start of the current simulation.
pub fn elapsed() -> Duration {
    madsim::time::TimeHandle::current().elapsed()
}

/// Virtual time since the start of the current simulation, in ms.
pub fn elapsed_ms() -> u64 {
    elapsed().as_millis() as u64
}

/// Virtual wall time at the start of the run (madsim picks it from the seed), Unix ms: a
/// scenario may place its workload around a wall-clock moment (a local midnight) with it.
pub fn epoch_wall_ms() -> u64 {
    let now = madsim::time::TimeHandle::current().now_time();
    let since_epoch = now
        .duration_since(UNIX_EPOCH)
        .expect("virtual time is after 1970");
    since_epoch.as_millis() as u64 - elapsed_ms()
}

/// Sleeps until virtual `t_ms`, waking early (returning `false`) if an invariant broke.
pub async fn sleep_until_ms(recorder: &Recorder, t_ms: u64) -> bool {
    loop {
        if recorder.failed() {
            return false;
        }
        let now_ms = elapsed_ms();
        if now_ms >= t_ms {
            return true;
        }
        let step_ms = (t_ms - now_ms).min(STOP_CHECK_MS);
        tokio::time::sleep(Duration::from_millis(step_ms)).await;
    }
}

/// One runtime node: the production start-up path on this node's clock and disk.
pub struct RuntimeNode {
    pub name: &'static str,
    pub addr: SocketAddr,
    pub clock: Arc<SimClock>,
    pub disk: Arc<SimDisk>,
    /// The run-fault windows every start of the node's runtime meets (`run_hang`, `run_failure`).
    pub run_faults: RunFaults,
    /// The node's run transcripts: like its disk, they outlive restarts, and a crash or power
    /// cut keeps what was synced plus a seeded prefix of each unsynced tail.
    pub transcripts: Arc<MemoryTranscripts>,
    /// The machine's processes (for scenarios whose agents spawn children): they outlive the
    /// node's restarts, and a crash kills only their leaders.
    pub processes: Option<SimProcesses>,
    /// Draws for [`MemoryTranscripts::crash`].
    transcript_rng: ChaCha8Rng,
    handle: NodeHandle,
    up: bool,
    process: Arc<Mutex<Process>>,
    stop: Arc<StopSignal>,
}

impl RuntimeNode {
    /// Creates the node and starts the runtime on it (an empty disk on first start).
    pub fn start(
        recorder: &Recorder,
        name: &'static str,
        ip: IpAddr,
        skew_ms: i64,
        lying_fsync: bool,
        entropy_seed: u64,
        processes: Option<SimProcesses>,
        alert_sinks: Vec<vigil::alerts::AlertSink>,
        snapshots: vigil::snapshots::SnapshotPolicy,
    ) -> Self {
        if compacts(&snapshots) {
            recorder.record(
                name,
                TraceEvent::LogRetention {
                    keep_events_ms: snapshots.keep_events_ms,
                },
            );
        }
        let clock = SimClock::new(epoch_wall_ms(), skew_ms, elapsed);
        let disk = Arc::new(SimDisk::new(lying_fsync));
        let addr = SocketAddr::new(ip, RUNTIME_PORT);
        let process = Arc::new(Mutex::new(Process::Starting));
        let stop = Arc::new(StopSignal::default());
        let run_faults = RunFaults::default();
        let transcripts = Arc::new(MemoryTranscripts::new());
        let checked = Arc::new(Mutex::new(CheckedLog::default()));
        let init = {
            let (clock, disk, recorder) = (clock.clone(), disk.clone(), recorder.clone());
            let (process, run_faults) = (process.clone(), run_faults.clone());
            let (transcripts, stop) = (transcripts.clone(), stop.clone());
            let checked = checked.clone();
            let machine = processes.clone();
            let spawner: SharedSpawner = match &processes {
                Some(processes) => Arc::new(processes.clone()),
                None => Arc::new(NoSpawner),
            };
            move || {
                run_node(
                    name,
                    addr,
                    clock.clone(),
                    NodeWorld {
                        disk: disk.clone(),
                        transcripts: transcripts.clone(),
                        run_faults: run_faults.clone(),
                        spawner: spawner.clone(),
                        alert_sinks: alert_sinks.clone(),
                        snapshots,
                        processes: machine.clone(),
                        checked: checked.clone(),
                    },
                    recorder.clone(),
                    entropy_seed,
                    (process.clone(), stop.clone()),
                )
            }
        };
        let handle = build_node(Handle::current().create_node().name(name).ip(ip).init(init));
        RuntimeNode {
            name,
            addr,
            clock,
            disk,
            run_faults,
            transcripts,
            processes,
            transcript_rng: vigil_faults::stream::stream(entropy_seed, TRANSCRIPT_CRASH_STREAM),
            handle,
            up: true,
            process,
            stop,
        }
    }

    /// Whether the node is running.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// The node's id on the simulated network (for partitions).
    pub fn id(&self) -> NodeId {
        self.handle.id()
    }

    fn set_process(&self, process: Process) {
        *self.process.lock().expect("process lock") = process;
    }

    /// Why the node's process stopped itself, if it has and the harness has not yet noticed:
    /// a failed write (ADR 0008), or a start-up that failed on an injected storage error. A
    /// power cut's errors are the cut's, not a stop.
    pub fn stopped_cause(&self) -> Option<String> {
        if !self.up || self.disk.power_is_cut() {
            return None;
        }
        match &*self.process.lock().expect("process lock") {
            Process::Running(failure) => failure.borrow().clone(),
            Process::Exited(error) => Some(error.clone()),
            Process::Down | Process::Starting | Process::Stopped => None,
        }
    }

    /// After the disk failed an operation: waits up to `wait_ms_max` of virtual time for the
    /// node to stop itself and returns why. `None` if it kept running (the failure did not
    /// reach an append, e.g. redb retried a best-effort write) or a power cut is under way.
    pub async fn wait_for_stop(&self, recorder: &Recorder, wait_ms_max: u64) -> Option<String> {
        let give_up_ms = elapsed_ms() + wait_ms_max;
        loop {
            let cause = self.stopped_cause();
            if cause.is_some() || elapsed_ms() >= give_up_ms || recorder.failed() {
                return cause;
            }
            tokio::time::sleep(Duration::from_millis(NODE_STOP_POLL_MS)).await;
        }
    }

    /// The node stopped itself (see [`RuntimeNode::stopped_cause`]): its process is gone, as
    /// when it exits and the supervisor has not yet restarted it. The page cache survives a
    /// process exit, so the disk keeps its image and unsynced writes; the failed commit may
    /// have landed there, hence `during_write`.
    pub fn exited(&mut self, recorder: &Recorder, cause: &str) {
        assert!(self.up, "a node that is down cannot stop itself");
        recorder.record(
            self.name,
            TraceEvent::Fault {
                fault: FaultRecord::NodeStopped {
                    cause: cause.to_string(),
                },
            },
        );
        self.process_gone(recorder);
    }

    /// The node's process is gone on its own (it exited): the page cache keeps what it wrote,
    /// its last commit possibly among it, hence `during_write`.
    fn process_gone(&mut self, recorder: &Recorder) {
        Handle::current().kill(self.handle.id());
        let pending_ops = self.disk.fence();
        self.up = false;
        self.set_process(Process::Down);
        recorder.record(
            self.name,
            TraceEvent::Crashed {
                during_write: true,
                pending_ops,
                kept_ops: pending_ops,
                torn_ops: 0,
                lost_bytes: 0,
            },
        );
    }

    /// Kills the node: every task and all memory gone, the disk keeps its synced image plus a
    /// seeded subset of unsynced writes, possibly torn.
    pub fn crash(&mut self, recorder: &Recorder, rng: &mut impl Rng) {
        assert!(self.up, "crashing a node that is down");
        Handle::current().kill(self.handle.id());
        let report = self.disk.crash(rng);
        self.transcripts.crash(&mut self.transcript_rng);
        self.parent_died();
        self.up = false;
        self.set_process(Process::Down);
        recorder.record(
            self.name,
            TraceEvent::Crashed {
                during_write: false,
                pending_ops: report.pending_ops,
                kept_ops: report.kept_ops,
                torn_ops: report.torn_ops,
                lost_bytes: report.lost_bytes,
            },
        );
    }

    /// Stops the node as a service manager does (SIGTERM, ADR 0015): it drains for
    /// `grace_ms`, stops its runs and their process groups, and exits; the page cache keeps
    /// what it wrote. Returns whether the node went down: not if it was not serving (still
    /// recovering, or stopped itself already), when nothing is sent. A node that stops itself
    /// on a failed write meanwhile is taken down as [`RuntimeNode::exited`] says.
    pub async fn graceful_stop(&mut self, recorder: &Recorder, grace_ms: u64) -> bool {
        assert!(self.up, "stopping a node that is down");
        let serving = matches!(&*self.process.lock().expect("process lock"), Process::Running(_));
        if !serving || self.stopped_cause().is_some() {
            return false;
        }
        self.stop.send(grace_ms);
        let give_up_ms = elapsed_ms() + grace_ms + GRACEFUL_STOP_EXIT_MS_MAX;
        loop {
            if matches!(&*self.process.lock().expect("process lock"), Process::Stopped) {
                self.went_down(recorder);
                return true;
            }
            if let Some(cause) = self.stopped_cause() {
                self.exited(recorder, &cause);
                return true;
            }
            if recorder.failed() {
                return false;
            }
            assert!(
                elapsed_ms() < give_up_ms,
                "node {} did not exit within {GRACEFUL_STOP_EXIT_MS_MAX} ms of its {grace_ms} ms drain",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(NODE_STOP_POLL_MS)).await;
        }
    }

    /// The process exited after a graceful stop: as [`RuntimeNode::exited`], without a cause;
    /// any child leader still alive dies with it (none should be: invariant 45).
    fn went_down(&mut self, recorder: &Recorder) {
        self.process_gone(recorder);
        self.parent_died();
    }

    /// Cuts the node's power at its `after_ops`-th storage operation from now, mid-commit, then
    /// kills it. Waits at most `wait_ms_max` of virtual time for that operation to come; returns
    /// `false` (and disarms) if it never did, leaving the node up.
    pub async fn power_cut(
        &mut self,
        recorder: &Recorder,
        after_ops: u64,
        rng: ChaCha8Rng,
        wait_ms_max: u64,
    ) -> bool {
        assert!(self.up, "cutting the power of a node that is down");
        self.disk.arm_power_cut(after_ops, rng);
        let give_up_ms = elapsed_ms() + wait_ms_max;
        loop {
            if let Some(report) = self.disk.take_power_cut() {
                // The process dies with its disk; until this instant it saw I/O errors.
                Handle::current().kill(self.handle.id());
                self.transcripts.crash(&mut self.transcript_rng);
                self.parent_died();
                self.up = false;
                self.set_process(Process::Down);
                recorder.record(
                    self.name,
                    TraceEvent::Crashed {
                        during_write: true,
                        pending_ops: report.pending_ops,
                        kept_ops: report.kept_ops,
                        torn_ops: report.torn_ops,
                        lost_bytes: report.lost_bytes,
                    },
                );
                return true;
            }
            // A node that stopped itself (a storage fault) will never reach the operation.
            if elapsed_ms() >= give_up_ms || recorder.failed() || self.stopped_cause().is_some() {
                self.disk.disarm_power_cut();
                return false;
            }
            tokio::time::sleep(Duration::from_millis(POWER_CUT_POLL_MS)).await;
        }
    }

    /// The node's process died: its children's leaders die with it.
    fn parent_died(&self) {
        if let Some(processes) = &self.processes {
            processes.parent_died();
        }
    }

    /// Starts the runtime again on the surviving disk.
    pub fn restart(&mut self, recorder: &Recorder) {
        assert!(!self.up, "restarting a node that is up");
        recorder.record(self.name, TraceEvent::Restarted);
        self.set_process(Process::Starting);
        Handle::current().restart(self.handle.id());
        self.up = true;
    }

    /// Moves the node's wall clock.
    pub fn jump_clock(&self, recorder: &Recorder, delta_ms: i64) {
        let offset_ms = self.clock.jump(delta_ms);
        recorder.record(
            self.name,
            TraceEvent::Fault {
                fault: FaultRecord::ClockJump {
                    delta_ms,
                    offset_ms,
                },
            },
        );
    }
}

/// What of a node's world outlives its restarts.
struct NodeWorld {
    disk: Arc<SimDisk>,
    transcripts: Arc<MemoryTranscripts>,
    run_faults: RunFaults,
    spawner: SharedSpawner,
    /// The simulated alert receiver, in scenarios that have one (crate::alert_sink).
    alert_sinks: Vec<vigil::alerts::AlertSink>,
    /// When the node snapshots, and whether it compacts ([`SIM_SNAPSHOTS`] unless the scenario
    /// asks for [`compacting_snapshots`]).
    snapshots: vigil::snapshots::SnapshotPolicy,
    /// The machine's processes, whose live groups a graceful stop reports.
    processes: Option<SimProcesses>,
    /// What the last start's check of the recovered log read: like the disk, it outlives
    /// restarts, so the next check goes on from it ([`RecoveryWatch`]).
    checked: Arc<Mutex<CheckedLog>>,
}

/// The body of a runtime node: start the production node, report what it recovered, run until
/// killed.
async fn run_node(
    name: &'static str,
    addr: SocketAddr,
    clock: Arc<SimClock>,
    world: NodeWorld,
    recorder: Recorder,
    entropy_seed: u64,
    (process, stop): (Arc<Mutex<Process>>, Arc<StopSignal>),
) {
    let NodeWorld {
        disk,
        transcripts,
        run_faults,
        spawner,
        alert_sinks,
        snapshots,
        processes,
        checked,
    } = world;
    let injected_before_start = disk.stats().injected_errors;
    let observer: CommitObserver = {
        let recorder = recorder.clone();
        Arc::new(move |stage: CommitStage, events: &[Event]| {
            let (Some(first), Some(last)) = (events.first(), events.last()) else {
                return;
            };
            if stage == CommitStage::Attempted {
                // Before the write: if the process dies in it, the oracle knows the whole batch
                // that may have landed, and holds the disk to all of it or none.
                recorder.record(
                    name,
                    TraceEvent::CommitAttempted {
                        first_seq: first.seq,
                        last_seq: last.seq,
                    },
                );
                return;
            }
            for event in events {
                recorder.record(
                    name,
                    TraceEvent::Committed {
                        event: event.clone(),
                    },
                );
            }
            // The oracle must know which events share a run end's commit (a rest asked from
            // inside a run is durable exactly with the run's end); marked only after commits
            // that hold an agent loop's report, so other traces read as they always have.
            if events.iter().any(ends_with_report) {
                recorder.record(
                    name,
                    TraceEvent::CommitEnd {
                        first_seq: first.seq,
                        last_seq: last.seq,
                    },
                );
            }
        })
    };
    let config = NodeConfig {
        listen_addr: addr,
        storage: disk.storage(),
        clock: clock as SharedClock,
        // Each start draws fresh tokens, as a real restart would; the seed fixes them all.
        entropy: SeededEntropy::shared(entropy_seed ^ recorder.records_len() as u64),
        tenants: vec![TenantToken {
            tenant: "default".into(),
            token: SIM_OPERATOR_TOKEN.into(),
        }],
        on_commit: Some(observer),
        adapters: run_faults.adapters(),
        run_services: vigil::exec::host::RunServices {
            // The production client behind production's address guard (the default policy, as
            // `vigil serve` has without a node file): resolves names through madsim's DNS,
            // checks each resolved address, crosses simulated TCP.
            poster: Arc::new(vigil::exec::host::GuardedOutbound {
                client: vigil::net::OutboundClient::new(&vigil::net::TlsOptions::default())
                    .expect("the built-in roots load"),
                policy: Arc::new(vigil::net::OutboundPolicy::default()),
            }),
            prices: crate::provider::prices(),
            // The simulated world's secrets: only the alert receiver's key.
            secrets: Arc::new(|name: &str| {
                (name == crate::alert_sink::ALERT_SECRET_ENV)
                    .then(|| crate::alert_sink::ALERT_SECRET.to_string())
            }),
            spawner,
            work_dir: None,
            run_tokens: vigil::exec::run_tokens::RunTokens::shared(),
        },
        transcripts,
        alert_sinks,
        snapshots,
        heartbeat_test_seam: false,
        // A node that keeps its whole log is recovered twice and the two compared (from the
        // snapshot, and by replaying every event); a compacting one has no whole log to replay,
        // so the harness reads what it kept before it starts (`report_kept_log`).
        on_replayed: (!compacts(&snapshots)).then(|| {
            Arc::new(RecoveryWatch::new(name, recorder.clone(), checked))
                as vigil::node::ReplayObserver
        }),
    };
    if compacts(&snapshots) {
        // A fresh disk holds no log (and opening a store on it here would create one).
        if disk.stats().writes > 0 {
            report_kept_log(name, &recorder, &disk);
        } else {
            report_recovery(name, &recorder, 0, &[]);
        }
    } else if disk.stats().writes > 0 {
        report_snapshot_on_disk(name, &recorder, &disk);
    }
    let started = match Node::start(config).await {
        Ok(mut node) => node.ready().await.map(|_| ()).map(|()| node),
        Err(error) => Err(error),
    };
    match started {
        // Keep the node (and its tasks) alive until the harness kills it. Its failure latch is
        // read by the harness, never awaited here: a power cut fails a write too, and must not
        // pass for a stop (ADR 0008).
        Ok(node) => {
            *process.lock().expect("process lock") = Process::Running(node.failure());
            let grace_ms = stop.received().await;
            if stop_gracefully(name, node, grace_ms, &recorder, processes.as_ref()).await {
                *process.lock().expect("process lock") = Process::Stopped;
            }
            std::future::pending::<()>().await
        }
        // The power went during start-up: the harness is about to kill this process, and what
        // the disk kept is judged at the next recovery.
        Err(_) if disk.power_is_cut() => std::future::pending::<()>().await,
        // A storage fault failed the start-up: the process exits; the supervisor restarts it.
        Err(error) if disk.stats().injected_errors > injected_before_start => {
            *process.lock().expect("process lock") = Process::Exited(error.to_string());
        }
        Err(error) => recorder.record(
            name,
            TraceEvent::RecoveryFailed {
                error: error.to_string(),
            },
        ),
    }
}

/// What `vigil serve` does on SIGTERM (ADR 0015): drain for `grace_ms`, then stop the runs and
/// wait for their process groups; each step recorded. Returns `false` if a write failed during
/// the drain: the node stopped itself, and the harness sees that instead.
async fn stop_gracefully(
    name: &'static str,
    node: Node,
    grace_ms: u64,
    recorder: &Recorder,
    processes: Option<&SimProcesses>,
) -> bool {
    let after_seq = node.hold_starts().expect("a serving node is ready");
    recorder.record(
        name,
        TraceEvent::DrainStarted {
            grace_ms,
            after_seq,
            going: node.shell().runs_in_progress(),
            groups: processes.map_or(0, |p| p.live_groups().len()),
        },
    );
    let left = tokio::select! {
        left = node.drain(Duration::from_millis(grace_ms)) => left,
        _ = node.failed() => return false,
    };
    recorder.record(name, TraceEvent::Drained { left });
    node.stop_and_reap().await;
    let live_groups = processes.map_or_else(Vec::new, SimProcesses::live_groups);
    recorder.record(name, TraceEvent::StoppedGracefully { live_groups });
    true
}

/// Whether `event` ends a run with an agent loop's report.
pub fn ends_with_report(event: &Event) -> bool {
    matches!(
        &event.kind,
        vigil::engine::event::EventKind::RunFinished {
            report: Some(_),
            ..
        }
    )
}

/// How often simulated nodes snapshot (unless a scenario asks for [`frequent_snapshots`] or
/// [`compacting_snapshots`]):
/// every 10,000 events, five times as often as production's
/// `vigil::snapshots::SNAPSHOT_EVERY_EVENTS`, and on production's clock
/// (`vigil::snapshots::SNAPSHOT_EVERY_MS`), so that a long scenario's crashes and power cuts
/// recover from snapshots. Why not more often: a busy LLM agent's record is tens of kilobytes
/// (its history and finished runs); a snapshot every thousand events made the 75-agent Heart
/// fleet's tests markedly slower, and hourly ones took 15 % of a simulated fleet week. Each
/// recovery is checked against a replay of the whole log (`Store::recover_observed`), which
/// needs the whole log: nothing is compacted (a scenario's days are well inside production's
/// retention window anyway). Power cuts at every disk operation of a snapshot are tested on
/// their own (`snapshot_cut_tests.rs`).
pub const SIM_SNAPSHOTS: vigil::snapshots::SnapshotPolicy = vigil::snapshots::SnapshotPolicy {
    every_events: 10_000,
    every_ms: vigil::snapshots::SNAPSHOT_EVERY_MS,
    keep_events_ms: u64::MAX,
};

/// How often nodes snapshot in the scenarios that check their snapshots hardest: every 500
/// events or 20 minutes, the whole log kept. Each of a scenario's crashes, power cuts and
/// failed-disk restarts then recovers from a snapshot a few events old, and
/// `Store::recover_observed` compares that recovery with a replay of the whole log: a field the
/// snapshot drops or decodes wrong (a cooldown, an idempotency key, a pulse report) makes the
/// two engines differ and stops the node with a message. Under [`SIM_SNAPSHOTS`] a scenario of a
/// few hours takes no snapshot at all, and this check never runs. Scenarios with small fleets
/// only: a snapshot rewrites every agent (see [`SIM_SNAPSHOTS`] for what that costs a large one).
pub const fn frequent_snapshots() -> vigil::snapshots::SnapshotPolicy {
    vigil::snapshots::SnapshotPolicy {
        // Why not every 100, as `compacting_snapshots`: writing them was 12 % of a `smoke`
        // sweep's CPU (perf), and a quiet agent's state is caught by the 20 minutes anyway.
        every_events: 500,
        every_ms: 20 * 60 * 1_000,
        keep_events_ms: u64::MAX,
    }
}

/// A policy under which nodes compact: snapshots every 100 events or 20 minutes, and events a
/// snapshot holds leave the log after 45 minutes, so that a few hours' scenario recovers from
/// compacted logs after its crashes and power cuts (production keeps them 7 days). The retention
/// stays longer than any gap in the scenarios' feed readers (a crash's downtime plus a read
/// period), which would otherwise meet `410 compacted`.
pub const fn compacting_snapshots() -> vigil::snapshots::SnapshotPolicy {
    vigil::snapshots::SnapshotPolicy {
        every_events: 100,
        every_ms: 20 * 60 * 1_000,
        keep_events_ms: 45 * 60 * 1_000,
    }
}

/// Whether a node under `policy` ever removes events from its log.
fn compacts(policy: &vigil::snapshots::SnapshotPolicy) -> bool {
    policy.keep_events_ms != u64::MAX
}

/// Events read per page when the harness reads a compacting node's kept log.
const KEPT_LOG_PAGE_EVENTS: usize = 1_000;

/// Records what a compacting node's disk holds, read by the harness through the production
/// store before the node starts on it (from a copy of the disk, so the node meets its disk,
/// and any fault in force, exactly as it was): the log from its oldest kept event. The node then
/// recovers from its snapshot alone (as production does), and a recovery that ignores the
/// snapshot meets a log that no longer begins at seq 1. If the disk cannot be read here, the
/// node's own start meets the same and reports it.
fn report_kept_log(name: &'static str, recorder: &Recorder, disk: &Arc<SimDisk>) {
    let copy = Arc::new(disk.read_copy());
    let read = || -> Result<(u64, Vec<Event>), vigil::store::StoreError> {
        let store = vigil::store::Store::open(copy.storage())?;
        let head_seq = store.head_seq()?;
        let mut events: Vec<Event> = Vec::new();
        let mut after = store.oldest_seq()?.saturating_sub(1);
        loop {
            let page = store.events_after(after, KEPT_LOG_PAGE_EVENTS)?;
            let Some(last) = page.last() else {
                return Ok((head_seq, events));
            };
            after = last.seq;
            events.extend(page);
        }
    };
    if let Ok((head_seq, events)) = read() {
        report_recovery(name, recorder, head_seq, &events);
    }
}

/// Records the snapshot a node that keeps its whole log is about to recover from, if its disk
/// holds one (read from a copy, as [`report_kept_log`] does): the coverage of the check that
/// compares that recovery with a replay of the log.
fn report_snapshot_on_disk(name: &'static str, recorder: &Recorder, disk: &Arc<SimDisk>) {
    let copy = Arc::new(disk.read_copy());
    let read =
        vigil::store::Store::open(copy.storage()).and_then(|store| store.current_snapshot_seq());
    if let Ok(Some(seq)) = read {
        recorder.record(name, TraceEvent::SnapshotOnDisk { seq });
    }
}

/// Records what the node recovered (its log from the oldest kept event: the whole log unless it
/// compacts), before start-up commits anything new.
fn report_recovery(name: &'static str, recorder: &Recorder, head_seq: u64, events: &[Event]) {
    let mut read = RecoveredLog::default();
    read.add(recorder.durable_events(), events);
    read.report(name, recorder, head_seq);
}

/// The log a node's recovery read, as the oracle is told of it: each event's digest, and whole
/// only the events the oracle never saw committed.
#[derive(Default, Clone)]
struct RecoveredLog {
    digests: Vec<(u64, u64)>,
    /// Events past what the oracle knew durable when they were read.
    unreported: Vec<Event>,
}

impl RecoveredLog {
    fn add(&mut self, known: u64, events: &[Event]) {
        self.digests
            .extend(events.iter().map(|e| (e.seq, event_digest(e))));
        // Events on disk the oracle never saw committed: the tail of a commit a power cut
        // interrupted, which may or may not have landed. Recorded whole so it can judge them.
        self.unreported
            .extend(events.iter().filter(|e| e.seq > known).cloned());
    }

    /// `later`'s events after these.
    fn append(&mut self, later: RecoveredLog) {
        self.digests.extend(later.digests);
        self.unreported.extend(later.unreported);
    }

    fn report(mut self, name: &'static str, recorder: &Recorder, head_seq: u64) {
        // Nothing this node commits before its report; filtered again all the same, so the
        // record is what it would be had the whole log been read at this instant.
        let known = recorder.durable_events();
        self.unreported.retain(|e| e.seq > known);
        recorder.record(
            name,
            TraceEvent::Recovered {
                head_seq,
                digests: self.digests,
                unreported: self.unreported,
            },
        );
    }
}

/// What a node's last recovery check read: the replay it ended with, and the log as the oracle
/// was told of it. The next start's check goes on from the replay when the log still begins
/// with the same bytes (`vigil::store::Store::recover_observed`), and then reports these
/// digests for the events it did not read again: the same report a replay of the whole log
/// gives, since reading, folding and digesting an event depend on its bytes alone.
#[derive(Default)]
struct CheckedLog {
    /// Taken by a start's recovery; left empty if that recovery fails.
    replay: Option<vigil::store::recovery::CheckedReplay>,
    /// The log read through the replay's last event.
    read: RecoveredLog,
}

/// Reports a node's replay of its whole log page by page as recovery reads it (digests only,
/// not a copy of every event), then at the end of recovery (`vigil::node::ReplayWatch`).
struct RecoveryWatch {
    name: &'static str,
    recorder: Recorder,
    read: Mutex<RecoveredLog>,
    checked: Arc<Mutex<CheckedLog>>,
}

impl RecoveryWatch {
    fn new(
        name: &'static str,
        recorder: Recorder,
        checked: Arc<Mutex<CheckedLog>>,
    ) -> RecoveryWatch {
        RecoveryWatch {
            name,
            recorder,
            read: Mutex::default(),
            checked,
        }
    }
}

impl vigil::node::ReplayWatch for RecoveryWatch {
    fn resume_from(&self) -> Option<vigil::store::recovery::CheckedReplay> {
        self.checked.lock().expect("checked log lock").replay.take()
    }

    fn page(&self, events: &[Event]) {
        let known = self.recorder.durable_events();
        self.read.lock().expect("recovery lock").add(known, events);
    }

    fn done(&self, resumed_through: Option<u64>, replay: vigil::store::recovery::CheckedReplay) {
        let pages = std::mem::take(&mut *self.read.lock().expect("recovery lock"));
        let mut checked = self.checked.lock().expect("checked log lock");
        let read = match resumed_through {
            Some(through) => {
                let mut read = std::mem::take(&mut checked.read);
                assert_eq!(
                    read.digests.last().map_or(0, |&(seq, _)| seq),
                    through,
                    "a check goes on from the replay whose log it kept"
                );
                read.append(pages);
                read
            }
            None => pages,
        };
        checked.replay = Some(replay);
        checked.read = read.clone();
        drop(checked);
        let head_seq = read.digests.last().map_or(0, |&(seq, _)| seq);
        read.report(self.name, &self.recorder, head_seq);
    }
}

/// Initializes, outside any simulation, the process-wide state that libraries the runtime uses
/// seed from OS randomness on first use. Inside a madsim runtime that first use would draw from
/// the seed's own random stream (madsim answers `getrandom` from it), in the first run of a
/// process only, so a seed run twice in one process would give two traces. Known: `jsonschema`
/// (through `ahash`'s process-wide seeds), used for tool schemas on every `llm` run.
fn warm_process_globals() {
    vigil::exec::tools::warm_builtin_schemas();
    let schema = vigil::engine::tool_spec::pause_heartbeats_def().parameters;
    let validator = vigil::engine::tool_spec::compile_parameters(&schema)
        .expect("the built-in schema compiles");
    let _ = validator.is_valid(&serde_json::json!({ "minutes": 5 }));
}

/// What one simulated run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub seed: u64,
    pub records: Vec<TraceRecord>,
    /// The first broken invariant and its virtual time (a panic counts as one).
    pub violation: Option<(u64, Violation)>,
    pub virtual_ms: u64,
}

/// Runs `scenario` for `seed` on a fresh madsim runtime in a fresh thread (so no thread-local
/// state leaks between runs: the determinism check relies on it). Panics become violations.
pub fn simulate<F, Fut>(seed: u64, time_limit: Duration, scenario: F) -> RunResult
where
    F: FnOnce(Recorder) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    // A fresh OS thread per run: madsim's runtime is thread-bound, and std keeps per-thread
    // state (hash keys, RNG seeds) that would otherwise carry from one run into the next.
    let thread = std::thread::Builder::new()
        .name(format!("seed-{seed}"))
        .stack_size(SEED_THREAD_STACK_BYTES)
        .spawn(move || {
            warm_process_globals();
            let mut runtime = Runtime::with_seed_and_config(seed, madsim::Config::default());
            runtime.set_time_limit(time_limit);
            let recorder = Recorder::new(elapsed);
            let body = {
                let recorder = recorder.clone();
                async move {
                    scenario(recorder.clone()).await;
                    recorder.finish();
                    let virtual_ms = elapsed_ms();
                    end_world().await;
                    virtual_ms
                }
            };
            // A panic anywhere in the simulated world (runtime code included) is a failed run
            // with its trace kept, not a crashed sweep.
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(body)));
            let records = recorder.take_records();
            match outcome {
                Ok(virtual_ms) => RunResult {
                    seed,
                    records,
                    violation: recorder.violation(),
                    virtual_ms,
                },
                Err(payload) => {
                    // The last record written, kept or streamed.
                    let virtual_ms = recorder.last_t_ms();
                    let detail = payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "panic with a non-string payload".into());
                    let violation = Violation {
                        invariant: "no_panic",
                        detail,
                    };
                    RunResult {
                        seed,
                        records,
                        violation: Some((virtual_ms, violation)),
                        virtual_ms,
                    }
                }
            }
        })
        .expect("could not spawn a simulation thread");
    thread
        .join()
        .expect("the simulation thread catches its own panics")
}
