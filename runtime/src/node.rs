//! A running Vigil node: the production start-up path, used unchanged by `vigil serve`, the
//! integration tests and the simulator (which restarts it on a surviving simulated disk).
//!
//! Start-up order: listen first (answering `503 recovering` meanwhile), then open the store,
//! replay the log, make sure the configured tenants exist, fail the runs the previous process
//! left running, and only then serve requests and fire timers.
//!
//! Crash-only (ADR 0008): a write to the event log that fails stops the node (its listener,
//! timer loop and runs end at once); [`Node::failed`] tells the host, which exits so that a
//! supervisor restarts it and recovery reads what really reached the disk.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::alerts::{self, AlertSink, Alerting};
use crate::api::{self, Gate};
use crate::engine::event::{Event, EventKind};
use crate::engine::run::RunId;
use crate::engine::tenant::DEFAULT_TENANT;
use crate::engine::Command;
use crate::exec::adapter::SharedAdapterSource;
use crate::exec::host::RunServices;
use crate::heartbeats::HeartbeatRunner;
use crate::io::clock::SharedClock;
use crate::io::entropy::SharedEntropy;
use crate::io::storage::StorageLocation;
use crate::shell::{CommitObserver, ExecuteError, Shell};
use crate::store::recovery::CheckedReplay;
use crate::store::{Store, StoreError};
use crate::transcript::SharedTranscriptStore;
use crate::writer::WhenFull;

/// Longest the timer loop sleeps without looking at the wall clock again: a jump of the wall
/// clock is noticed within this, so a due timer fires at most this late (docs/invariants.md).
pub const WALL_RECHECK_MS: u64 = 1_000;

/// How long a stopping node lets its running runs finish by default (`vigil serve
/// --drain-grace-s`): most LLM turns and webhook calls end well within it, and it fits inside
/// the usual stop timeouts of service managers (Kubernetes waits 30 s before SIGKILL).
pub const DRAIN_GRACE_DEFAULT_S: u64 = 25;
/// Longest drain grace accepted.
pub const DRAIN_GRACE_MAX_S: u64 = 24 * 60 * 60;
/// Most async worker threads `vigil serve --workers` accepts (the default is one per CPU core).
/// Past this, threads only add switching: the node's work is a single writer and short requests.
pub const WORKERS_MAX: u64 = 256;
/// How often a draining node looks whether its runs have ended.
pub const DRAIN_POLL_MS: u64 = 50;

/// A tenant and the operator token it answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantToken {
    pub tenant: String,
    pub token: String,
}

/// Everything a node needs from the outside.
pub struct NodeConfig {
    /// Address for the HTTP API; port 0 picks a free port (see [`Node::local_addr`]).
    pub listen_addr: SocketAddr,
    /// Where the database lives.
    pub storage: StorageLocation,
    /// The node's clock.
    pub clock: SharedClock,
    /// Where tokens come from.
    pub entropy: SharedEntropy,
    /// Tenants to make sure of at start. When empty and the log has no tenant yet, the node
    /// creates tenant `default` with a generated token (see [`Recovered::generated_token`]).
    pub tenants: Vec<TenantToken>,
    /// Optional observer of committed events (the simulator's trace).
    pub on_commit: Option<CommitObserver>,
    /// Where runs get their adapters: [`crate::exec::adapter::BuiltinAdapters::shared`] but in
    /// the simulator.
    pub adapters: SharedAdapterSource,
    /// What runs get from the node: the outbound network, the price table, secrets.
    pub run_services: RunServices,
    /// Optional observer of the whole replayed log: handed each page as recovery reads it,
    /// then told once recovery is over, before start-up commits anything (the simulator checks
    /// the recovered log here). Only when it is set is the whole log replayed beside the
    /// snapshot's recovery.
    pub on_replayed: Option<ReplayObserver>,
    /// Where run transcripts go: [`crate::transcript::FileTranscripts`] in the data directory,
    /// a [`crate::transcript::MemoryTranscripts`] that outlives restarts in the simulator.
    pub transcripts: SharedTranscriptStore,
    /// Where alerts go (the node file's `[[alerts]]`); reached through `run_services`' poster
    /// with its secrets.
    pub alert_sinks: Vec<AlertSink>,
    /// When the node snapshots its engine (ADR 0016); the default but in tests and the
    /// simulator, which take them far more often.
    pub snapshots: crate::snapshots::SnapshotPolicy,
    /// Whether `POST /v1/host/sample/heartbeat/tick` (the RFC 0060 test seam) answers; 404
    /// when not (the node file's `[heartbeats] test_seam`, off by default).
    pub heartbeat_test_seam: bool,
}

/// Watches the start-up's replay of the whole log (the simulator's check of the recovered log).
/// Why pages and not the whole log at once: the log was kept in memory for it, a copy of every
/// event of a week's log at each restart of a simulated fleet.
pub trait ReplayWatch: Send + Sync {
    /// The replay the last start's check of this log ended with, if the watch kept it: this
    /// start's goes on from it when the log still begins with the bytes it read
    /// ([`Store::recover_observed`]). Called on the blocking pool, before the
    /// first page.
    fn resume_from(&self) -> Option<CheckedReplay>;
    /// The next page of replayed events, in order. Called on the blocking pool, during
    /// recovery.
    fn page(&self, events: &[Event]);
    /// Recovery has read the whole log. `resumed_through` is the last event of the replay it
    /// went on from, whose events were not handed to [`ReplayWatch::page`] again (`None`: every
    /// event was); `replay` is the whole log's, for the next start. Called from the start-up
    /// task before it commits anything.
    fn done(&self, resumed_through: Option<u64>, replay: CheckedReplay);
}

/// A shared [`ReplayWatch`].
pub type ReplayObserver = Arc<dyn ReplayWatch>;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("could not listen on {addr}: {source}; is another vigil already running there?")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("could not set up tenant {tenant:?}: {source}")]
    Tenant {
        tenant: String,
        #[source]
        source: ExecuteError,
    },
    #[error("could not recover runs: {0}")]
    Recovery(#[source] ExecuteError),
}

/// What recovery found, once it is done.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// Events replayed from the log.
    pub events: u64,
    /// Runs that were running when the previous process stopped, now failed.
    pub interrupted_runs: usize,
    /// The operator token of tenant `default`, when this start created it (shown once).
    pub generated_token: Option<String>,
}

/// What the background recovery task yields.
type RecoveryOutcome = Result<(Arc<Shell>, Recovered), StartError>;

/// A node that is listening; recovery may still be going on (see [`Node::ready`]).
pub struct Node {
    local_addr: SocketAddr,
    gate: Gate,
    recovery: Option<JoinHandle<RecoveryOutcome>>,
    ready: Option<(Arc<Shell>, Recovered)>,
    tasks: Vec<JoinHandle<()>>,
    transcripts: SharedTranscriptStore,
    alerting: Alerting,
    /// What heartbeats' checks reach the world through (the runs' poster source and spawner).
    checks: crate::heartbeats::CheckServices,
    heartbeats: Option<Arc<HeartbeatRunner>>,
}

impl Node {
    /// Binds the API address and starts serving (`503 recovering` until ready), then starts
    /// recovery in the background. Await [`Node::ready`] for its outcome.
    pub async fn start(config: NodeConfig) -> Result<Node, StartError> {
        let listener = TcpListener::bind(config.listen_addr)
            .await
            .map_err(|source| StartError::Listen {
                addr: config.listen_addr,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen_addr,
            source,
        })?;
        let transcripts = config.transcripts.clone();
        config.run_services.run_tokens.default_base_url(local_addr);
        let alerting = Alerting {
            sinks: config.alert_sinks.clone(),
            poster: config.run_services.poster.clone(),
            secrets: config.run_services.secrets.clone(),
        };
        let gate = Gate::new(transcripts.clone()).with_heartbeat_seam(config.heartbeat_test_seam);
        let checks = crate::heartbeats::CheckServices {
            poster: config.run_services.poster.clone(),
            secrets: config.run_services.secrets.clone(),
            spawner: config.run_services.spawner.clone(),
            work_dir: config.run_services.work_dir.clone(),
        };
        let server = tokio::spawn(api::serve(listener, api::router(gate.clone())));
        let recovery = tokio::spawn(recover(config));
        Ok(Node {
            local_addr,
            gate,
            recovery: Some(recovery),
            ready: None,
            tasks: vec![server],
            transcripts,
            alerting,
            checks,
            heartbeats: None,
        })
    }

    /// Waits for recovery to finish, then opens the gate and starts the timers and the alert
    /// sinks. Idempotent.
    pub async fn ready(&mut self) -> Result<&Recovered, StartError> {
        if let Some(recovery) = self.recovery.take() {
            let (shell, recovered) = recovery.await.expect("recovery task does not panic")?;
            self.tasks.push(tokio::spawn(run_timers(shell.clone())));
            self.tasks.push(tokio::spawn(sweep_liveness(shell.clone())));
            if let Some(every_ms) = self.transcripts.prune_every_ms() {
                let (transcripts, clock) = (self.transcripts.clone(), shell.clock().clone());
                self.tasks.push(tokio::spawn(prune_transcripts(
                    transcripts,
                    clock,
                    every_ms,
                )));
            }
            self.tasks.extend(alerts::spawn_sinks(&shell, &self.alerting));
            shell.stop_with_failure(self.tasks.iter().map(JoinHandle::abort_handle));
            let heartbeats = HeartbeatRunner::new(shell.clone(), self.checks.clone());
            heartbeats.start_all();
            self.gate.open_heartbeats(heartbeats.clone());
            self.heartbeats = Some(heartbeats);
            self.gate.open(shell.clone());
            self.ready = Some((shell, recovered));
        }
        Ok(&self.ready.as_ref().expect("ready after recovery").1)
    }

    /// Starts ticking every heartbeat the node holds that does not tick yet (after something
    /// other than the API defined some: the fleet file). Idempotent.
    pub fn start_heartbeats(&self) {
        if let Some(heartbeats) = &self.heartbeats {
            heartbeats.start_all();
        }
    }

    /// The address the API listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The node's shell, once ready (for in-process callers: the CLI's fleet file, tests, the
    /// simulator).
    pub fn shell(&self) -> &Arc<Shell> {
        &self
            .ready
            .as_ref()
            .expect("Node::shell before Node::ready")
            .0
    }

    /// Where the node's run transcripts go (for the executor and in-process callers).
    pub fn transcripts(&self) -> &SharedTranscriptStore {
        &self.transcripts
    }

    /// Why the node stopped itself: `None` while it runs; the failed write's error once one
    /// failed, the node's tasks have ended and the process should exit (ADR 0008). Before
    /// [`Node::ready`] a failed write shows up as its error instead.
    pub fn failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.shell().failure()
    }

    /// Resolves once a write has failed and the node has stopped itself (see
    /// [`Node::failure`]), with the failed write's error.
    pub async fn failed(&self) -> String {
        let mut failure = self.failure();
        let failed = failure
            .wait_for(Option::is_some)
            .await
            .expect("the shell outlives its node");
        failed.clone().expect("waited for a failure")
    }

    /// The first step of [`Node::drain`], on its own: from now on no run starts. Returns the
    /// log position of the last event decided before (every event after it was decided with
    /// starts held), or `None` before [`Node::ready`]. Holding twice is holding once.
    pub fn hold_starts(&self) -> Option<u64> {
        let (shell, _) = self.ready.as_ref()?;
        shell.hold_starts();
        Some(shell.engine().last_seq())
    }

    /// Drains (ADR 0015): from now on no run starts (wakeups are answered as usual and queue),
    /// and the runs already going may finish, for at most `grace`. Returns how many were still
    /// going when the grace ran out (0: every run ended and its end is durable). The caller then
    /// stops the node: runs still going are aborted, and the next start re-queues those alone.
    pub async fn drain(&self, grace: Duration) -> usize {
        let Some((shell, _)) = &self.ready else {
            return 0;
        };
        self.hold_starts();
        let all_ended = async {
            while shell.runs_in_progress() > 0 {
                tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
            }
        };
        match tokio::time::timeout(grace, all_ended).await {
            Ok(()) => 0,
            Err(_) => shell.runs_in_progress(),
        }
    }

    /// [`Node::stop`], then waits until the process groups of the runs it stopped are gone:
    /// each got SIGTERM, then SIGKILL after its grace (`vigil serve` exits only then, so that
    /// no child outlives it). Waits at most the largest grace and a settling time.
    pub async fn stop_and_reap(self) {
        let groups = self
            .ready
            .as_ref()
            .map(|(shell, _)| shell.executor.live_groups());
        self.stop();
        let Some(groups) = groups else {
            return;
        };
        let alive = groups.pgids();
        if alive.is_empty() {
            return;
        }
        tracing::info!(groups = alive.len(), "stopping the runs' child processes");
        if !groups.drained().await {
            tracing::warn!(pgids = ?groups.pgids(), "child process groups still alive at exit");
        }
    }

    /// Stops the timer loop, the runs and the listener. Open connections finish their
    /// current request. Runs that were going are failed by the next start's recovery.
    pub fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        if let Some(recovery) = &self.recovery {
            recovery.abort();
        }
        if let Some(heartbeats) = &self.heartbeats {
            heartbeats.stop();
        }
        if let Some((shell, _)) = &self.ready {
            shell.stop_runs();
        }
    }
}

/// The slow part of start-up: replay the log, set up tenants, recover runs.
async fn recover(config: NodeConfig) -> RecoveryOutcome {
    // Why on the blocking pool: opening the database and rebuilding the engine read the disk
    // and take seconds at a million agents (docs/benchmarks.md); on an async worker they would
    // hold it from every other task meanwhile (the API answering `503 recovering` among them).
    let storage = config.storage;
    let watch = config.on_replayed.clone();
    // madsim deprecates it (no thread blocks in its world); there it is a task, as for the
    // writer's commits.
    #[allow(deprecated)]
    let (store, engine, checked) = tokio::task::spawn_blocking(move || {
        // Recovery allocates the whole fleet's state at once (runtime/src/heap.rs).
        let _growth = crate::heap::BulkGrowth::begin();
        let store = Store::open(storage)?;
        let Some(watch) = &watch else {
            let engine = store.recover()?;
            return Ok::<_, StoreError>((store, engine, None));
        };
        let recovered =
            store.recover_observed(watch.resume_from(), &mut |page| watch.page(page))?;
        let checked = (recovered.resumed_through, recovered.replay);
        Ok((store, recovered.engine, Some(checked)))
    })
    .await
    .expect("recovery does not panic")?;
    crate::heap::keep_free_tops();
    if let (Some(watch), Some((resumed_through, replay))) = (&config.on_replayed, checked) {
        watch.done(resumed_through, replay);
    }
    let events = engine.last_seq();
    tracing::info!(
        events,
        agents = engine.agents().count(),
        "recovered state from the event log"
    );
    let had_tenants = engine.tenants().next().is_some();
    let shell = Shell::new(
        engine,
        store,
        config.clock,
        config.entropy,
        config.on_commit,
        config.adapters,
        config.run_services,
        config.transcripts.clone(),
    );
    shell.set_snapshot_policy(config.snapshots);
    let tenant_error = |tenant: &str| {
        let tenant = tenant.to_string();
        move |source| StartError::Tenant { tenant, source }
    };
    for TenantToken { tenant, token } in &config.tenants {
        shell
            .ensure_tenant(tenant, token)
            .await
            .map_err(tenant_error(tenant))?;
    }
    let mut generated_token = None;
    if config.tenants.is_empty() && !had_tenants {
        let token = shell.new_operator_token();
        shell
            .ensure_tenant(DEFAULT_TENANT, &token)
            .await
            .map_err(tenant_error(DEFAULT_TENANT))?;
        generated_token = Some(token);
    }
    kill_orphaned_groups(&shell);
    let decision = shell
        .execute(Command::RecoverRuns, WhenFull::Wait)
        .await
        .map_err(StartError::Recovery)?;
    let interrupted_runs = decision
        .events
        .iter()
        .filter(|e| is_restart_failure(&e.kind))
        .count();
    if interrupted_runs > 0 {
        tracing::warn!(
            interrupted_runs,
            "runs interrupted by the last stop failed; each is re-queued once"
        );
    }
    Ok((
        shell,
        Recovered {
            events,
            interrupted_runs,
            generated_token,
        },
    ))
}

/// Before the interrupted runs are failed: every process group a run still held recorded
/// (running, or finished while its group was being terminated when the node stopped) gets
/// SIGKILL, if a process of it still carries the run's marker (a group id reused since by
/// something else is left alone). PR_SET_PDEATHSIG already killed the leaders; this reaches
/// what they left behind. The new node has started no child yet, so nothing of its own is hit.
fn kill_orphaned_groups(shell: &Shell) {
    let groups: Vec<(u32, RunId)> = {
        let engine = shell.engine();
        engine
            .agent_states()
            .flat_map(|state| state.runs())
            .filter_map(|run| Some((run.process_group?, run.id)))
            .collect()
    };
    if groups.is_empty() {
        return;
    }
    let killed = shell.executor.spawner().kill_orphan_groups(&groups);
    for pgid in &killed {
        tracing::warn!(
            pgid,
            "killed a process group a run of the previous start left"
        );
    }
    tracing::info!(
        recorded = groups.len(),
        killed = killed.len(),
        "looked for process groups left by the previous start"
    );
}

fn is_restart_failure(kind: &EventKind) -> bool {
    matches!(kind, EventKind::RunFinished { detail, .. } if detail == crate::engine::run::CONTROL_PLANE_RESTART)
}

/// Runs the stale sweep forever: whenever an online agent's silence passes its floor (then every
/// `LIVENESS_SWEEP_MS` while it is suspected), and whenever an agent comes online. Sleeps on
/// monotonic time, so a wall-clock jump changes nothing; idle when no agent pulses.
async fn sweep_liveness(shell: Arc<Shell>) {
    loop {
        match shell.sweep_liveness().await {
            Ok(0) => {}
            Ok(marked) => tracing::info!(marked, "stale sweep marked agents offline"),
            Err(error @ ExecuteError::Refused(_)) => {
                tracing::warn!(%error, "the engine refused the stale sweep; retrying");
            }
            // The failed write stopped the node (ADR 0008), or it is stopping; this task ends.
            Err(error) => {
                tracing::warn!(%error, "could not record the stale sweep; the node stops");
                return;
            }
        }
        let wait_ms = shell.next_liveness_check_in_ms().unwrap_or(u64::MAX).max(1);
        tokio::select! {
            biased;
            _ = shell.liveness_changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(wait_ms.min(LIVENESS_IDLE_WAIT_MS))) => {}
        }
    }
}

/// Applies transcript retention every `every_ms`, from the start on. A failed prune is logged
/// and retried at the next period: transcripts are diagnostics, never a reason to stop.
async fn prune_transcripts(transcripts: SharedTranscriptStore, clock: SharedClock, every_ms: u64) {
    loop {
        match transcripts.prune(clock.wall_now_ms()).await {
            Ok(pruned) if pruned.runs > 0 => {
                tracing::info!(
                    runs = pruned.runs,
                    bytes = pruned.bytes,
                    "pruned transcripts"
                )
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "could not prune transcripts; retrying later"),
        }
        tokio::time::sleep(Duration::from_millis(every_ms)).await;
    }
}

/// Longest the stale sweep sleeps when nothing is watched (it is woken when something is).
const LIVENESS_IDLE_WAIT_MS: u64 = 60 * 60 * 1_000;

/// Fires due timers forever. Sleeps until the next slot, but never longer than
/// `WALL_RECHECK_MS`, because the wall clock may jump while it sleeps.
async fn run_timers(shell: Arc<Shell>) {
    loop {
        let (now_ms, deadline_ms) = shell.timer_deadline().await;
        if deadline_ms.is_some_and(|d| d <= now_ms) {
            match shell.execute(Command::FireDueTimers, WhenFull::Wait).await {
                Ok(decision) => {
                    for event in &decision.events {
                        if let EventKind::TimerFired {
                            agent,
                            due_at_ms,
                            missed_slots,
                            ..
                        } = &event.kind
                        {
                            tracing::debug!(seq = event.seq, %agent, due_at_ms, missed_slots, "timer fired");
                        }
                    }
                    continue;
                }
                Err(error @ ExecuteError::Refused(_)) => {
                    tracing::warn!(%error, "the engine refused to fire due timers; retrying");
                    tokio::time::sleep(Duration::from_millis(WALL_RECHECK_MS)).await;
                    continue;
                }
                // The failed write stopped the node (ADR 0008), or it is stopping; this task
                // ends with it.
                Err(error) => {
                    tracing::warn!(%error, "could not record due timers; the node stops");
                    return;
                }
            }
        }
        let wait_ms = deadline_ms.map_or(WALL_RECHECK_MS, |d| (d - now_ms).min(WALL_RECHECK_MS));
        tokio::select! {
            biased;
            _ = shell.schedule_changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
        }
    }
}
