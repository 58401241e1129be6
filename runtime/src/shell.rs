//! The shell: the one place where engine decisions meet the disk.
//!
//! Every command that may write goes through the single writer (`crate::writer`, ADR 0012):
//! one task decides a batch of commands and applies their events under the engine's lock, writes
//! the batch in one durable transaction with no lock held, then tells the executor and the
//! observers and answers each command. An answer therefore always means durable; the in-memory
//! engine may run ahead of the disk by the one batch being written, which readers may see
//! (ADR 0012 says why that is safe). The executor is told about committed run events in log order,
//! after they are durable, so it starts and stops runs in log order too.
//!
//! A write that fails stops the node (ADR 0008): the shell latches the failure, writes nothing
//! more, and ends the node's tasks at once; the host learns it from `Node::failed` and exits, so
//! a supervisor restarts the process and recovery reads what really reached the disk.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::engine::agent::{AgentId, AgentSpec};
use crate::engine::agent_update::SpecChange;
use crate::engine::event::{Event, EventKind};
use crate::engine::liveness::{LastPulse, LivenessStatus, PulseBook};
use crate::engine::pulse_report::PulseReport;
use crate::engine::tenant::{Principal, TokenHash};
use crate::engine::wakeup::{WakeupRecord, WakeupRequest};
use crate::engine::{Command, Decision, Engine, Refusal};
use crate::exec::adapter::SharedAdapterSource;
use crate::exec::host::RunServices;
use crate::exec::Executor;
use crate::io::clock::SharedClock;
use crate::io::entropy::{new_token, SharedEntropy};
use crate::store::{Store, StoreError};
use crate::transcript::SharedTranscriptStore;
use crate::snapshots::{SnapshotPolicy, Snapshots};
use crate::event_tail::EventTail;
use crate::writer::{Committed, Decide, Job, WhenFull, WriterQueue, GROUP_COMMIT_COMMANDS_MAX};

/// Prefix of the tokens issued to agents.
pub const AGENT_TOKEN_PREFIX: &str = "vgl_agent_";
/// Prefix of generated operator tokens.
pub const OPERATOR_TOKEN_PREFIX: &str = "vgl_op_";

/// Called with each batch of events twice, in log order: right before its one store transaction
/// is written ([`CommitStage::Attempted`]) and right after it became durable
/// ([`CommitStage::Durable`]). A batch attempted but never reported durable failed, or its
/// process died during the write. The simulator records its trace through this (its oracle holds
/// a crash to leaving all of such a batch on disk or none of it); production leaves it unset.
pub type CommitObserver = Arc<dyn Fn(CommitStage, &[Event]) + Send + Sync>;

/// Which side of its write a batch of events is observed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitStage {
    /// About to be written.
    Attempted,
    /// Written and synced.
    Durable,
}

/// Why a command did not take effect.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The writer's queue is full ([`crate::writer::WRITER_QUEUE_CAPACITY`]); nothing was
    /// queued.
    #[error(
        "the node is busy: {} commands are waiting to be written; retry shortly",
        crate::writer::WRITER_QUEUE_CAPACITY
    )]
    Busy,
    /// The node is stopping; the command may or may not have been written.
    #[error("the node is stopping")]
    Stopped,
}

/// An agent just created, with the token issued to it (shown this once).
#[derive(Debug, Clone)]
pub struct CreatedAgent {
    pub agent: AgentId,
    pub token: String,
    pub seq: u64,
}

/// The answer to a wakeup.
#[derive(Debug, Clone)]
pub struct WakeAnswer {
    pub wakeup: WakeupRecord,
    /// An earlier wakeup with the same idempotency key; nothing new was recorded.
    pub replayed: bool,
    /// Seq of the last event recorded (the log head for a replay).
    pub seq: u64,
}

/// Shared by the API handlers, the timer loop and the executor of one node.
pub struct Shell {
    /// Written only by the writer task, while it decides a batch; read by everyone, briefly.
    engine: Mutex<Engine>,
    /// Shared with the blocking thread a batch is written on.
    store: Arc<Store>,
    /// Where every command that may write is queued for the writer (ADR 0012).
    queue: WriterQueue,
    clock: SharedClock,
    entropy: SharedEntropy,
    on_commit: Option<CommitObserver>,
    pub(crate) executor: Executor,
    /// Wakes the timer loop when the schedule may have changed.
    pub(crate) schedule_changed: tokio::sync::Notify,
    /// The durable log head (the engine may be one batch ahead while it is written). An atomic,
    /// read with one load: every pulse and page reads it, and the watch channel it was took a
    /// read lock for each read (a write to a line every core shares); only the writer's commit
    /// stores it.
    head: std::sync::atomic::AtomicU64,
    /// Wakes every live reader of the event stream when the head moves. A `Notify`, not a
    /// watch channel of the head: one with several waiters wakes them in an order drawn
    /// from tokio's thread-local random numbers, which differ between runs of a seed in the
    /// simulator; `notify_waiters` wakes them in the order they waited.
    head_moved: tokio::sync::Notify,
    /// Why the node stopped: set by the first append that failed, never cleared (ADR 0008).
    failure: tokio::sync::watch::Sender<Option<String>>,
    /// The node's own tasks (listener, timer loop), ended when a write fails.
    node_tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// Last pulses, in memory only. Locked after `engine`, never before.
    pulses: Mutex<PulseBook>,
    /// Wakes the stale sweep when an agent came online (it may have nothing else to wait for).
    pub(crate) liveness_changed: tokio::sync::Notify,
    /// Set once the node drains (ADR 0015): no run starts from then on.
    draining: std::sync::atomic::AtomicBool,
    /// What `GET /metrics` shows (docs/operations.md, "Metrics").
    metrics: crate::metrics::Metrics,
    /// Set while a backup is being written: one at a time.
    backing_up: std::sync::atomic::AtomicBool,
    /// When the next snapshot is due, and whether one is being written (ADR 0016).
    snapshots: Mutex<Snapshots>,
    /// The newest durable events, for readers of the log's tail. A leaf lock: nothing else is
    /// locked while it is held.
    tail: Mutex<EventTail>,
}

/// Why no backup was written.
#[derive(Debug, thiserror::Error)]
pub enum BackupRefused {
    #[error("a backup is already being written; retry when it is done")]
    InProgress,
    #[error(transparent)]
    Failed(#[from] StoreError),
}

impl Shell {
    /// Wraps a store and the engine recovered from it, and starts the writer.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        engine: Engine,
        store: Store,
        clock: SharedClock,
        entropy: SharedEntropy,
        on_commit: Option<CommitObserver>,
        adapters: SharedAdapterSource,
        services: RunServices,
        transcripts: SharedTranscriptStore,
    ) -> Arc<Self> {
        let head = std::sync::atomic::AtomicU64::new(engine.last_seq());
        // The previous process's pulses are gone: every agent the log says is online gets a
        // whole threshold from now before it can be found silent.
        let mut pulses = PulseBook::new();
        let mono_ms = mono_ms(&clock);
        for agent in engine.agents() {
            if agent.liveness.status == LivenessStatus::Online {
                pulses.grant(agent.id, mono_ms);
            }
        }
        let (queue, jobs) = WriterQueue::new();
        // A database that cannot say is treated as holding none: the first snapshot comes
        // sooner, nothing else changes.
        let current_snapshot = store.current_snapshot_seq().ok().flatten().unwrap_or(0);
        let shell = Arc::new(Shell {
            engine: Mutex::new(engine),
            store: Arc::new(store),
            queue,
            clock,
            entropy,
            on_commit,
            executor: Executor::new(adapters, services, transcripts),
            schedule_changed: tokio::sync::Notify::new(),
            head,
            head_moved: tokio::sync::Notify::new(),
            failure: tokio::sync::watch::Sender::new(None),
            node_tasks: Mutex::default(),
            pulses: Mutex::new(pulses),
            liveness_changed: tokio::sync::Notify::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
            metrics: crate::metrics::Metrics::new(),
            backing_up: std::sync::atomic::AtomicBool::new(false),
            tail: Mutex::new(EventTail::default()),
            snapshots: Mutex::new(Snapshots::new(
                SnapshotPolicy::default(),
                current_snapshot,
                mono_ms,
            )),
        });
        // Why weak: the writer must not keep a stopped node's shell (and its database) alive;
        // it ends when the shell is dropped and its queue closes.
        tokio::spawn(write_loop(Arc::downgrade(&shell), jobs));
        shell
    }

    /// Where the node's tokens come from (run tokens are minted from it too).
    pub(crate) fn entropy(&self) -> &SharedEntropy {
        &self.entropy
    }

    /// The engine, read-only, under the shell's lock. Keep the guard short. It may hold the
    /// decisions of the batch being written (ADR 0012).
    ///
    /// A wait for the lock is measured (`vigil_engine_lock_wait_seconds`), and one of
    /// [`ENGINE_LOCK_WAIT_LOGGED_MS`] or more logged at debug with the waiting call's place:
    /// a request that waits for a writer stalled mid-decision is part of the reads' tail (ADR 0030).
    /// An acquisition that does not wait reads no clock.
    #[track_caller]
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        let at = std::panic::Location::caller();
        lock_timed(&self.engine, &self.clock, |waited| {
            self.metrics.engine_lock_waited(waited.as_secs_f64());
            if waited >= Duration::from_millis(ENGINE_LOCK_WAIT_LOGGED_MS) {
                tracing::debug!(
                    waited_us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX),
                    at = %format_args!("{}:{}", at.file(), at.line()),
                    "waited for the engine's lock"
                );
            }
        })
    }

    /// The node's clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Runs `command` through the writer at the current wall time: decided, persisted durably,
    /// applied, observed; answered once durable.
    pub async fn execute(
        self: &Arc<Self>,
        command: Command,
        when_full: WhenFull,
    ) -> Result<Decision, ExecuteError> {
        Ok(self.submit_command(command, when_full).await?.decision)
    }

    async fn submit_command(
        &self,
        command: Command,
        when_full: WhenFull,
    ) -> Result<Committed, ExecuteError> {
        let decide: Decide = Box::new(move |_, engine, now_ms| engine.decide(&command, now_ms));
        self.queue.submit(decide, when_full).await
    }

    /// Registers an agent in `tenant`, issuing its token.
    pub async fn create_agent(
        self: &Arc<Self>,
        tenant: &str,
        spec: AgentSpec,
        when_full: WhenFull,
    ) -> Result<CreatedAgent, ExecuteError> {
        let token = new_token(&*self.entropy, AGENT_TOKEN_PREFIX);
        let command = Command::CreateAgent {
            tenant: tenant.to_string(),
            spec,
            token_hash: TokenHash::of(&token),
        };
        let decision = self.execute(command, when_full).await?;
        Ok(created_agent(token, decision))
    }

    /// Replaces `agent`'s token: the old one stops working once this is durable. Returns the new
    /// token (never stored; only its hash) and the rotation's seq.
    pub async fn rotate_agent_token(
        self: &Arc<Self>,
        agent: AgentId,
        when_full: WhenFull,
    ) -> Result<(String, u64), ExecuteError> {
        let token = new_token(&*self.entropy, AGENT_TOKEN_PREFIX);
        let command = Command::RotateAgentToken {
            agent,
            token_hash: TokenHash::of(&token),
        };
        let committed = self.submit_command(command, when_full).await?;
        Ok((token, committed.seq))
    }

    /// Replaces `tenant`'s operator token (asked by that tenant's operator): the old one stops
    /// working once this is durable. Returns the new token (never stored; only its hash) and
    /// the change's seq. A restart configuring the same token as before keeps this one.
    pub async fn rotate_operator_token(
        self: &Arc<Self>,
        tenant: &str,
        when_full: WhenFull,
    ) -> Result<(String, u64), ExecuteError> {
        let token = self.new_operator_token();
        let command = Command::RotateOperatorToken {
            tenant: tenant.to_string(),
            token_hash: TokenHash::of(&token),
        };
        let committed = self.submit_command(command, when_full).await?;
        Ok((token, committed.seq))
    }

    /// Changes `agent`'s spec; answers with the `agent_updated` event, or `None` when the change
    /// left the spec as it was (nothing recorded).
    pub async fn update_agent(
        self: &Arc<Self>,
        agent: AgentId,
        change: SpecChange,
        when_full: WhenFull,
    ) -> Result<Option<Event>, ExecuteError> {
        let decision = self
            .execute(Command::UpdateAgent { agent, change }, when_full)
            .await?;
        Ok(decision.events.into_iter().next())
    }

    /// Changes several agents' specs, all queued before any is awaited so that they share
    /// fsyncs (a fleet file changing 10,000 agents at start). The first refusal is the answer
    /// (the changes before it are made).
    pub async fn update_agents(
        self: &Arc<Self>,
        changes: Vec<(AgentId, SpecChange)>,
    ) -> Result<(), ExecuteError> {
        let mut pending = Vec::with_capacity(changes.len());
        for (agent, change) in changes {
            let command = Command::UpdateAgent { agent, change };
            let decide: Decide = Box::new(move |_, engine, now_ms| engine.decide(&command, now_ms));
            pending.push(self.queue.enqueue(decide, WhenFull::Wait).await?);
        }
        for answer in pending {
            answer.answer().await?;
        }
        Ok(())
    }

    /// Writes a consistent copy of the database beside it (`store::backup`), on a blocking
    /// thread, while the node goes on serving and writing. One at a time.
    pub async fn backup(&self) -> Result<crate::store::backup::Backup, BackupRefused> {
        use std::sync::atomic::Ordering;
        if self.backing_up.swap(true, Ordering::AcqRel) {
            return Err(BackupRefused::InProgress);
        }
        let store = self.store.clone();
        // A blocking thread, as for the writer's fsyncs (madsim marks it deprecated).
        #[allow(deprecated)]
        let written = tokio::task::spawn_blocking(move || store.backup()).await;
        self.backing_up.store(false, Ordering::Release);
        match written {
            Ok(backup) => Ok(backup?),
            Err(join) => Err(StoreError::Backup(format!("the copy stopped: {join}")).into()),
        }
    }

    /// Deletes `agent` (terminating it first if it is not); answers with the `agent_deleted`
    /// event's seq.
    pub async fn delete_agent(
        self: &Arc<Self>,
        agent: AgentId,
        when_full: WhenFull,
    ) -> Result<u64, ExecuteError> {
        let decision = self
            .execute(Command::DeleteAgent { agent }, when_full)
            .await?;
        let deleted = decision
            .events
            .last()
            .expect("a delete records agent_deleted");
        self.pulses().forget(agent);
        Ok(deleted.seq)
    }

    /// Registers agents in `tenant`, all queued before any is awaited so that they share
    /// fsyncs (a fleet file of 10,000 agents is about 20 commits, not 10,000). In `specs`'
    /// order; the first refusal is the answer (the agents before it exist).
    pub async fn create_agents(
        self: &Arc<Self>,
        tenant: &str,
        specs: Vec<AgentSpec>,
    ) -> Result<Vec<CreatedAgent>, ExecuteError> {
        let mut pending = Vec::with_capacity(specs.len());
        for spec in specs {
            let token = new_token(&*self.entropy, AGENT_TOKEN_PREFIX);
            let command = Command::CreateAgent {
                tenant: tenant.to_string(),
                spec,
                token_hash: TokenHash::of(&token),
            };
            let decide: Decide = Box::new(move |_, engine, now_ms| engine.decide(&command, now_ms));
            pending.push((token, self.queue.enqueue(decide, WhenFull::Wait).await?));
        }
        let mut created = Vec::with_capacity(pending.len());
        for (token, answer) in pending {
            created.push(created_agent(token, answer.answer().await?.decision));
        }
        Ok(created)
    }

    /// The one entry point for wakeups from outside the engine.
    pub async fn wake(
        self: &Arc<Self>,
        agent: AgentId,
        request: WakeupRequest,
        when_full: WhenFull,
    ) -> Result<WakeAnswer, ExecuteError> {
        self.answer_wake(Command::Wake { agent, request }, when_full)
            .await
    }

    /// User input for `agent`: restarts its idle chamber and wakes it on demand (`request`).
    pub async fn input(
        self: &Arc<Self>,
        agent: AgentId,
        request: WakeupRequest,
        when_full: WhenFull,
    ) -> Result<WakeAnswer, ExecuteError> {
        self.answer_wake(Command::Input { agent, request }, when_full)
            .await
    }

    /// Runs a command that answers with a wakeup (`Wake`, `Input`).
    async fn answer_wake(
        &self,
        command: Command,
        when_full: WhenFull,
    ) -> Result<WakeAnswer, ExecuteError> {
        let committed = self.submit_command(command, when_full).await?;
        Ok(WakeAnswer {
            wakeup: committed
                .decision
                .wakeup
                .expect("wake and input always answer"),
            replayed: committed.decision.replayed,
            seq: committed.seq,
        })
    }

    /// Pulses from `agents` (one agent, or a host's batch), each with what it says: remembered
    /// in memory only; the agents that were not online become online, durably, with what their
    /// pulses say. All or nothing: an unknown or terminated agent refuses the whole batch.
    /// Returns the pulse's instant on the node's wall clock.
    ///
    /// Why a path around the writer: a pulse of agents already online writes nothing, and pulses
    /// are the node's most frequent request. It is taken only when no batch is being written
    /// (the engine is not ahead of the disk), so it never answers on a state that could be lost.
    pub async fn pulse(
        self: &Arc<Self>,
        agents: &[(AgentId, PulseReport)],
        when_full: WhenFull,
    ) -> Result<u64, ExecuteError> {
        if let Some(now_ms) = self.pulse_in_memory(agents)? {
            self.metrics.pulsed(agents.len());
            return Ok(now_ms);
        }
        let taken = agents.to_vec();
        let decide: Decide = Box::new(move |shell, engine, now_ms| {
            let decision = shell.decide_pulse(engine, now_ms, &taken)?;
            shell.take_pulses(now_ms, &taken);
            Ok(decision)
        });
        let committed = self.queue.submit(decide, when_full).await?;
        self.metrics.pulsed(agents.len());
        if !committed.decision.events.is_empty() {
            self.liveness_changed.notify_one();
        }
        Ok(committed.now_ms)
    }

    /// A pulse that writes nothing, taken at once: `Some(instant)`; `None` when it must go
    /// through the writer (an agent comes online, or a batch is being written).
    fn pulse_in_memory(&self, agents: &[(AgentId, PulseReport)]) -> Result<Option<u64>, Refusal> {
        let engine = self.engine();
        if engine.last_seq() != self.head_seq() {
            return Ok(None);
        }
        let now_ms = self.clock.wall_now_ms();
        // The common case, a host's batch of agents all online already, decides nothing: it
        // is seen without building the decision (the engine would emit no event for it).
        if !all_online(&engine, agents)
            && !self
                .decide_pulse(&engine, now_ms, agents)?
                .events
                .is_empty()
        {
            return Ok(None);
        }
        self.take_pulses(now_ms, agents);
        Ok(Some(now_ms))
    }

    /// What `agents`' pulses decide (`agent_online` for those not online), the book unchanged.
    fn decide_pulse(
        &self,
        engine: &Engine,
        now_ms: u64,
        agents: &[(AgentId, PulseReport)],
    ) -> Result<Decision, Refusal> {
        let pulses = self.pulses();
        // What each agent's pulses will say once these are taken (a later entry of the same
        // agent over an earlier one), for the events; the book changes only if the batch is.
        let mut merged: BTreeMap<AgentId, PulseReport> = BTreeMap::new();
        for (agent, report) in agents {
            merged
                .entry(*agent)
                .or_insert_with(|| {
                    pulses
                        .last(*agent)
                        .map(|l| l.report.clone())
                        .unwrap_or_default()
                })
                .update(report);
        }
        drop(pulses);
        engine.decide(
            &Command::MarkOnline {
                agents: merged.into_iter().collect(),
            },
            now_ms,
        )
    }

    /// Remembers `agents`' pulses (memory only), once the engine took them.
    fn take_pulses(&self, now_ms: u64, agents: &[(AgentId, PulseReport)]) {
        let mono_ms = mono_ms(&self.clock);
        let mut pulses = self.pulses();
        for (agent, report) in agents {
            pulses.pulse(*agent, mono_ms);
            pulses.report(*agent, now_ms, report);
        }
    }

    /// A run of `agent` showed activity: a passive pulse (`liveness.passive_pulses`) if the
    /// agent is watched; never a write, never an agent brought online.
    pub fn passive_pulse(&self, agent: AgentId) {
        let mono_ms = mono_ms(&self.clock);
        self.pulses().touch(agent, mono_ms);
        self.metrics.pulsed(1);
    }

    /// The latest pulse of `agent` since this node started (memory only).
    pub fn last_pulse(&self, agent: AgentId) -> Option<LastPulse> {
        self.pulses().last(agent).cloned()
    }

    /// The status each of `agents` last reported (none: no pulse since this node started, or
    /// none said), in order, under one hold of the pulse book's lock.
    pub fn last_statuses(
        &self,
        agents: impl IntoIterator<Item = AgentId>,
    ) -> Vec<Option<crate::engine::pulse_report::ReportedStatus>> {
        let pulses = self.pulses();
        agents
            .into_iter()
            .map(|agent| pulses.last(agent).and_then(|last| last.report.status))
            .collect()
    }

    /// The stale sweep: marks offline every online agent silent past its detector's judgement.
    /// Returns how many it marked.
    pub async fn sweep_liveness(self: &Arc<Self>) -> Result<usize, ExecuteError> {
        if self.stale_agents(&self.engine()) == 0 {
            return Ok(0);
        }
        let decide: Decide = Box::new(|shell, engine, now_ms| shell.decide_offline(engine, now_ms));
        let committed = self.queue.submit(decide, WhenFull::Wait).await?;
        Ok(committed.decision.events.len())
    }

    /// How many watched agents the stale sweep would mark now (the pulse book unchanged).
    fn stale_agents(&self, engine: &Engine) -> usize {
        let mono_ms = mono_ms(&self.clock);
        self.pulses().stale(watched(engine), mono_ms).len()
    }

    /// `agent_offline` for every watched agent found silent now; they leave the pulse book.
    fn decide_offline(&self, engine: &Engine, now_ms: u64) -> Result<Decision, Refusal> {
        let mono_ms = mono_ms(&self.clock);
        let mut pulses = self.pulses();
        let stale: Vec<(AgentId, u64, PulseReport)> = pulses
            .stale(watched(engine), mono_ms)
            .into_iter()
            .map(|(agent, silent_ms)| {
                pulses.forget(agent);
                let said = pulses
                    .last(agent)
                    .map(|l| l.report.clone())
                    .unwrap_or_default();
                (agent, silent_ms, said)
            })
            .collect();
        drop(pulses);
        if stale.is_empty() {
            return Ok(Decision::default());
        }
        engine.decide(&Command::MarkOffline { agents: stale }, now_ms)
    }

    /// How long from now (monotonic) the stale sweep next needs to look, if anything is watched.
    pub fn next_liveness_check_in_ms(&self) -> Option<u64> {
        let engine = self.engine();
        let mono_ms = mono_ms(&self.clock);
        let next = self.pulses().next_check_ms(watched(&engine), mono_ms)?;
        Some(next.saturating_sub(mono_ms))
    }

    fn pulses(&self) -> MutexGuard<'_, PulseBook> {
        self.pulses.lock().expect("pulse book lock")
    }

    /// Makes sure `tenant` exists with `operator_token`. Returns whether anything changed.
    pub async fn ensure_tenant(
        self: &Arc<Self>,
        tenant: &str,
        operator_token: &str,
    ) -> Result<bool, ExecuteError> {
        let command = Command::EnsureTenant {
            tenant: tenant.to_string(),
            operator_token_hash: TokenHash::of(operator_token),
        };
        let decision = self.execute(command, WhenFull::Wait).await?;
        Ok(!decision.events.is_empty())
    }

    /// A fresh operator token (for a tenant created without one configured).
    pub fn new_operator_token(&self) -> String {
        new_token(&*self.entropy, OPERATOR_TOKEN_PREFIX)
    }

    /// Who holds `token`, if anyone.
    pub fn authenticate(&self, token: &str) -> Option<Principal> {
        self.engine().principal(&TokenHash::of(token)).cloned()
    }

    /// The wall clock's now and the earliest wall time at which a timer is due, read once the
    /// engine's lock is free.
    ///
    /// Why not [`Shell::engine`]: the timer loop asks after every commit, just when the writer
    /// is deciding the next batch, and a worker blocked on the lock behind a writer stalled
    /// mid-decision takes a second async worker out with the writer's own: on two cores, every
    /// request then waited for the stall, lock or no lock (ADR 0030). So while the lock is held
    /// the loop waits [`TIMER_LOCK_RETRY_MS`] on the timer, leaving its worker free, and tries
    /// again. Under the simulator (one thread) the lock is never held when asked.
    pub async fn timer_deadline(&self) -> (u64, Option<u64>) {
        loop {
            // The guard is gone before the await: the lock is never held across it.
            let read = match self.engine.try_lock() {
                Ok(engine) => {
                    let now_ms = self.clock.wall_now_ms();
                    Some((now_ms, engine.next_deadline_ms(now_ms)))
                }
                Err(std::sync::TryLockError::Poisoned(_)) => panic!("{ENGINE_POISONED}"),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            match read {
                Some(read) => return read,
                None => tokio::time::sleep(Duration::from_millis(TIMER_LOCK_RETRY_MS)).await,
            }
        }
    }

    /// Seq of the last durable event.
    pub fn head_seq(&self) -> u64 {
        // Acquire pairs with the commit's release: a reader that sees a head sees the tail
        // pushed before it.
        self.head.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Notified whenever the log head moves (register with `Notified::enable` before reading
    /// `head_seq`, so that no move is missed).
    pub fn head_moved(&self) -> &tokio::sync::Notify {
        &self.head_moved
    }

    /// The store, for the alert sinks' cursors (`crate::alerts`); blocking, so only from a
    /// blocking thread.
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The oldest event the log still holds (events before it were compacted, ADR 0016).
    pub fn oldest_seq(&self) -> Result<u64, StoreError> {
        self.store.oldest_seq()
    }

    /// The log position just before the first event at or after the wall instant `since_ms`
    /// (a binary search of the log; blocking, so only from a blocking thread).
    pub fn seq_before_ms(&self, since_ms: u64) -> Result<u64, StoreError> {
        self.store.seq_before_ms(since_ms)
    }

    /// A page of the durable log after `after`, and the log's head at the time of reading.
    pub fn events_after(&self, after: u64, limit: usize) -> Result<(Vec<Event>, u64), StoreError> {
        // Head first: a page may then contain events newer than `head`, never the reverse. The
        // durable head, not the engine's: the engine may hold a batch still being written.
        let head = self.head_seq();
        let limit = limit.min(crate::store::EVENTS_PAGE_MAX);
        let held = self.tail.lock().expect("event tail lock").page(after, limit);
        let events = match held {
            Some(events) => events,
            None => self.store.events_after(after, limit)?,
        };
        Ok((events, head))
    }

    /// Commands queued for the writer and not yet taken (ADR 0012).
    pub fn commands_waiting(&self) -> usize {
        self.queue.waiting()
    }

    /// Runs the executor holds right now (for tests and the status endpoint).
    pub fn executing_runs(&self) -> usize {
        self.executor.executing()
    }

    /// The node's metrics.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// The metrics' text for a scrape, read from the engine now.
    pub fn scrape_metrics(&self) -> String {
        let waiting = self.commands_waiting();
        let now_ms = self.clock.wall_now_ms();
        let engine = self.engine();
        self.metrics.scrape(&engine, now_ms, waiting)
    }

    /// Starts draining: from the next decision on, no run starts (wakeups queue as usual).
    pub(crate) fn hold_starts(&self) {
        self.engine().hold_starts();
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the node is draining.
    pub fn draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs that have started and whose end is not yet durable. Zero only once every run the
    /// executor held has reported its end and the writer has committed it.
    pub fn runs_in_progress(&self) -> usize {
        let executing = self.executor.executing();
        if executing > 0 {
            return executing;
        }
        // The executor forgets a run just before it reports the end; until that commit the
        // engine still holds it running. (A scan, only once the executor is empty.)
        self.engine().running_runs()
    }

    /// Aborts every run task (the node is stopping).
    pub(crate) fn stop_runs(&self) {
        self.executor.abort_all();
    }

    /// Latches a failed write and stops the node: its tasks and runs end now, nothing is
    /// written again. redb must be reopened after an I/O error (it answers `PreviousIo` until
    /// then), and whether the failed commit landed is only known after a restart (ADR 0008).
    fn fail(&self, error: &StoreError) {
        let first = self.failure.send_if_modified(|failure| {
            let first = failure.is_none();
            failure.get_or_insert_with(|| error.to_string());
            first
        });
        if first {
            tracing::error!(%error, "a write to the event log failed; the node stops (ADR 0008)");
        }
        for task in self.node_tasks.lock().expect("node tasks lock").drain(..) {
            task.abort();
        }
        self.executor.abort_all();
    }

    /// Hands the shell the node's own tasks, to end when a write fails (at once if one has).
    pub(crate) fn stop_with_failure(
        &self,
        tasks: impl IntoIterator<Item = tokio::task::AbortHandle>,
    ) {
        let mut node_tasks = self.node_tasks.lock().expect("node tasks lock");
        node_tasks.extend(tasks);
        if self.failure.borrow().is_some() {
            node_tasks.drain(..).for_each(|task| task.abort());
        }
    }

    /// Why the node stopped itself, once a write has failed (`None` while it runs).
    pub fn failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.failure.subscribe()
    }

    /// Sets when snapshots are taken (the node's configuration; the default until then).
    pub(crate) fn set_snapshot_policy(&self, policy: SnapshotPolicy) {
        let mut snapshots = self.snapshots.lock().expect("snapshots lock");
        *snapshots = Snapshots::new(policy, snapshots.current_seq(), mono_ms(&self.clock));
    }

    /// Called by the writer between batches, when everything the engine holds is durable:
    /// if a snapshot is due, captures the engine's image (pointer clones, under the lock) and
    /// writes it on a blocking thread while the writer goes on (ADR 0016).
    fn snapshot_if_due(self: &Arc<Self>) {
        if self.failure.borrow().is_some() {
            return;
        }
        let now_ms = mono_ms(&self.clock);
        let (image, keep_events_ms) = {
            let engine = self.engine();
            let mut snapshots = self.snapshots.lock().expect("snapshots lock");
            if !snapshots.due(engine.last_seq(), engine.agent_count(), now_ms) {
                return;
            }
            snapshots.started();
            // Compaction after this snapshot may remove events up to its position: from now
            // on the store answers for them.
            self.tail
                .lock()
                .expect("event tail lock")
                .forget_through(engine.last_seq());
            (engine.image(), snapshots.keep_events_ms())
        };
        let cutoff_at_ms = self.clock.wall_now_ms().saturating_sub(keep_events_ms);
        let started_ms = now_ms;
        let store = self.store.clone();
        // Why weak: a snapshot being written must not keep a stopped node's shell alive.
        let shell = Arc::downgrade(self);
        tokio::spawn(async move {
            // The snapshot, then the events it holds that are past the retention window.
            #[allow(deprecated)]
            let written = tokio::task::spawn_blocking(move || {
                tracing::debug!(seq = image.seq, agents = image.agents.len(), "snapshot started");
                let written = store.write_snapshot(&image)?;
                let compacted = store.compact(cutoff_at_ms)?;
                Ok::<_, StoreError>((written, compacted))
            })
            .await;
            let Some(shell) = shell.upgrade() else {
                return;
            };
            let written = match written {
                Ok(result) => result,
                Err(join) => Err(StoreError::Storage(redb::Error::Io(std::io::Error::other(
                    format!("the snapshot was lost with its thread: {join}"),
                )))),
            };
            let now_ms = mono_ms(&shell.clock);
            match written {
                Ok((written, compacted)) => {
                    tracing::info!(
                        seq = written.seq,
                        agents = written.agents,
                        bytes = written.bytes,
                        compacted,
                        took_ms = now_ms.saturating_sub(started_ms),
                        "snapshot written"
                    );
                    shell.metrics.snapshot_written(written.seq);
                    let mut snapshots = shell.snapshots.lock().expect("snapshots lock");
                    snapshots.ended(Some(written.seq), now_ms);
                }
                Err(error) => {
                    shell
                        .snapshots
                        .lock()
                        .expect("snapshots lock")
                        .ended(None, now_ms);
                    // A failed write leaves redb to be reopened before it is trusted (ADR 0008).
                    shell.fail(&error);
                }
            }
        });
    }
}

/// How long the timer loop waits on the timer before it asks again for the engine's lock, when
/// it found it held ([`Shell::timer_deadline`]): at most this much added to a fire's lateness.
pub const TIMER_LOCK_RETRY_MS: u64 = 1;

/// A wait for the engine's lock this long or longer is logged (debug), with where it waited.
pub const ENGINE_LOCK_WAIT_LOGGED_MS: u64 = 1;

/// A panic while holding the engine's lock means an engine invariant broke; nothing after it can
/// be trusted, so every later caller fails loudly too.
const ENGINE_POISONED: &str = "engine lock poisoned by an earlier invariant failure";

/// `lock`'s guard; when another holder made the caller wait, `waited` is told for how long, on
/// `clock`. Why `try_lock` first: the uncontended acquisition, nearly all of them, stays one
/// atomic operation with no clock read (and under the simulator, one thread, it never waits).
fn lock_timed<'a, T>(
    lock: &'a Mutex<T>,
    clock: &SharedClock,
    waited: impl FnOnce(Duration),
) -> MutexGuard<'a, T> {
    match lock.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(_)) => panic!("{ENGINE_POISONED}"),
        Err(std::sync::TryLockError::WouldBlock) => {
            let asked = clock.mono_now();
            let guard = lock.lock().expect(ENGINE_POISONED);
            waited(clock.mono_now().saturating_sub(asked));
            guard
        }
    }
}

/// The writer (ADR 0012): takes every command waiting, up to [`GROUP_COMMIT_COMMANDS_MAX`], and
/// commits them as one batch; ends when the shell is gone.
async fn write_loop(shell: Weak<Shell>, mut jobs: tokio::sync::mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(GROUP_COMMIT_COMMANDS_MAX);
    while jobs.recv_many(&mut batch, GROUP_COMMIT_COMMANDS_MAX).await > 0 {
        let Some(shell) = shell.upgrade() else {
            return;
        };
        shell.commit_batch(std::mem::take(&mut batch)).await;
        shell.snapshot_if_due();
    }
}

/// A command of the batch being written and its answer, sent once the batch is durable.
type Answer = (
    tokio::sync::oneshot::Sender<Result<Committed, ExecuteError>>,
    Result<Committed, Refusal>,
);

impl Shell {
    /// One group commit: decide and apply every job under the engine's lock, write all their
    /// events in one durable transaction with no lock held, tell the executor and the observers,
    /// then answer each job. A failed write answers every job with the error and stops the node.
    async fn commit_batch(self: &Arc<Self>, jobs: Vec<Job>) {
        if self.failure.borrow().is_some() {
            // Crash-only: after a failed write the database must be reopened before it is
            // trusted again, and only a restart does that.
            return answer_failed(jobs.into_iter().map(|job| job.reply));
        }
        let commands = jobs.len();
        let (events, answers) = self.decide_batch(jobs);
        let written = events.len();
        let started = self.clock.mono_now();
        if !events.is_empty() {
            if let Err(error) = self.write(events).await {
                self.fail(&error);
                return answer_failed(answers.into_iter().map(|(reply, _)| reply));
            }
        }
        let seconds = self.clock.mono_now().saturating_sub(started).as_secs_f64();
        self.metrics.group_commit(commands, written, seconds);
        for (reply, answer) in answers {
            // A caller that gave up waiting (its request dropped) no longer listens: fine.
            let _ = reply.send(answer.map_err(ExecuteError::Refused));
        }
    }

    /// Decides each job on the engine as the jobs before it left it, applying its events at once.
    fn decide_batch(&self, jobs: Vec<Job>) -> (Vec<Event>, Vec<Answer>) {
        let mut engine = self.engine();
        let mut events = Vec::new();
        let mut answers = Vec::with_capacity(jobs.len());
        for Job { decide, reply } in jobs {
            let now_ms = self.clock.wall_now_ms();
            let answer = decide(self, &engine, now_ms).map(|decision| {
                for event in &decision.events {
                    engine.apply(event);
                }
                events.extend_from_slice(&decision.events);
                Committed {
                    decision,
                    seq: engine.last_seq(),
                    now_ms,
                }
            });
            answers.push((reply, answer));
        }
        (events, answers)
    }

    /// Writes a decided batch durably, off the async workers, then makes it visible: observers,
    /// the executor, the head, the timer loop.
    async fn write(self: &Arc<Self>, events: Vec<Event>) -> Result<(), StoreError> {
        if let Some(observe) = &self.on_commit {
            observe(CommitStage::Attempted, &events);
        }
        let store = self.store.clone();
        // Why a blocking thread: the fsync takes milliseconds, and an async worker parked on it
        // would stall accepts, streams and timers (under the simulator it is one more task).
        #[allow(deprecated)]
        let written = tokio::task::spawn_blocking(move || {
            let result = store.append_sized(&events);
            (events, result)
        })
        .await;
        let (events, sizes) = match written {
            Ok((events, Ok(sizes))) => (events, sizes),
            Ok((_, Err(error))) => return Err(error),
            Err(join) => {
                return Err(StoreError::Storage(redb::Error::Io(std::io::Error::other(
                    format!("the write was lost with its thread: {join}"),
                ))))
            }
        };
        events.iter().for_each(log_notable);
        self.metrics.committed(&events);
        if let Some(observe) = &self.on_commit {
            observe(CommitStage::Durable, &events);
        }
        let engine = self.engine();
        self.executor.on_commit(self, &engine, &events);
        let head = events.last().map_or(engine.last_seq(), |event| event.seq);
        drop(engine);
        if events.iter().any(changes_liveness) {
            self.liveness_changed.notify_one();
        }
        self.tail
            .lock()
            .expect("event tail lock")
            .push(events, &sizes);
        self.head.store(head, std::sync::atomic::Ordering::Release);
        self.head_moved.notify_waiters();
        self.schedule_changed.notify_one();
        Ok(())
    }
}

/// Answers jobs whose batch could not be written: the node has stopped itself (ADR 0008).
fn answer_failed(
    replies: impl Iterator<Item = tokio::sync::oneshot::Sender<Result<Committed, ExecuteError>>>,
) {
    for reply in replies {
        let _ = reply.send(Err(ExecuteError::Store(StoreError::Storage(
            redb::Error::PreviousIo,
        ))));
    }
}

/// The agent a create decided, with the token issued to it.
fn created_agent(token: String, decision: Decision) -> CreatedAgent {
    let event = decision.events.first().expect("a create records one event");
    let agent = event.kind.agent().expect("agent_created names its agent");
    CreatedAgent {
        agent,
        token,
        seq: event.seq,
    }
}

/// The clock's monotonic reading in whole milliseconds.
fn mono_ms(clock: &SharedClock) -> u64 {
    u64::try_from(clock.mono_now().as_millis()).unwrap_or(u64::MAX)
}

/// Online, not terminated agents with their liveness policies: what the stale sweep watches.
fn watched(
    engine: &Engine,
) -> impl Iterator<Item = (AgentId, &crate::engine::liveness::LivenessPolicy)> {
    engine
        .agents()
        .filter(|a| {
            a.liveness.status == LivenessStatus::Online
                && a.status != crate::engine::agent::AgentStatus::Terminated
        })
        .map(|a| (a.id, &a.spec.liveness))
}

/// The log lines operators grep for (Kelpie ADR-010's): an agent resting itself, at info; every
/// refused wakeup, at debug; an agent entering the error state, at warn (the alert until
/// metrics and alerts exist), and its reset, at info. Only ids and codes: a reason or payload came from a client and
/// stays in the event log (docs/api.md).
fn log_notable(event: &Event) {
    match &event.kind {
        EventKind::AgentPaused {
            agent,
            until_ms,
            by: crate::engine::pause::PausedBy::Agent,
        } => {
            let minutes = until_ms.map(|until| until.saturating_sub(event.at_ms) / 60_000);
            tracing::info!(seq = event.seq, %agent, ?minutes, ?until_ms, "agent paused its own heartbeats");
        }
        EventKind::WakeupRefused {
            wakeup,
            agent,
            source,
            refusal,
            ..
        } => {
            tracing::debug!(seq = event.seq, %agent, %wakeup, source = source.as_str(), refusal = ?refusal, "wakeup refused");
        }
        EventKind::AgentErrored {
            agent,
            reason,
            count,
        } => {
            tracing::warn!(seq = event.seq, %agent, reason = reason.as_str(), count, "agent entered the error state; it takes no wakeups until an operator resets it (POST /v1/agents/{{id}}/error/reset)");
        }
        EventKind::AgentErrorReset { agent } => {
            tracing::info!(seq = event.seq, %agent, "agent error state reset by an operator");
        }
        _ => {}
    }
}

/// Whether every agent of a pulse is known, not terminated and online: its pulse then changes
/// nothing durable ([`Command::MarkOnline`] emits events only for agents not online, and refuses
/// unknown or terminated ones).
fn all_online(engine: &Engine, agents: &[(AgentId, PulseReport)]) -> bool {
    agents.iter().all(|(agent, _)| {
        engine
            .pulse_card(*agent)
            .is_some_and(|card| !card.terminated && card.online)
    })
}

/// Whether `event` changes an agent's liveness policy: the stale sweep, asleep until the old
/// policy's next check, must look again (a threshold lowered from an hour to ten seconds would
/// otherwise wait out the hour; found by the `edges` scenario's pulses).
fn changes_liveness(event: &Event) -> bool {
    match &event.kind {
        EventKind::AgentUpdated { changed, .. } => {
            changed.iter().any(|field| field.starts_with("liveness."))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::engine::pause::PausedBy;
    use crate::engine::wakeup::{RefusalReason, WakeupId, WakeupSource};

    /// Collects what the fmt layer writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(events: &[Event]) -> String {
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || events.iter().for_each(log_notable));
        let bytes = captured.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    fn event(kind: EventKind) -> Event {
        Event {
            seq: 7,
            at_ms: 1_000_000,
            tenant: "default".into(),
            kind,
        }
    }

    /// A clock that counts its readings, each 5 ms after the one before, and at its first
    /// reading tells `first_read` (the waiter has found the lock held).
    struct CountingClock {
        reads: std::sync::atomic::AtomicU64,
        first_read: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    }

    impl crate::io::clock::Clock for CountingClock {
        fn wall_now_ms(&self) -> u64 {
            0
        }
        fn mono_now(&self) -> Duration {
            let n = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Some(tell) = self.first_read.lock().unwrap().take() {
                tell.send(()).unwrap();
            }
            Duration::from_millis(5 * n)
        }
    }

    fn counting_clock(first_read: Option<std::sync::mpsc::Sender<()>>) -> Arc<CountingClock> {
        Arc::new(CountingClock {
            reads: 0.into(),
            first_read: Mutex::new(first_read),
        })
    }

    #[test]
    fn a_free_lock_is_taken_with_no_clock_read_and_no_wait_told() {
        let lock = Mutex::new(7);
        let clock = counting_clock(None);
        let shared: SharedClock = clock.clone();
        let mut told = Vec::new();
        let guard = lock_timed(&lock, &shared, |waited| told.push(waited));
        assert_eq!(*guard, 7);
        drop(guard);
        assert!(told.is_empty());
        assert_eq!(clock.reads.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[test]
    fn a_held_lock_is_waited_for_and_the_wait_told_once_on_the_clock() {
        let lock = Arc::new(Mutex::new(0u32));
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel();
        let holder = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                let mut guard = lock.lock().unwrap();
                held_tx.send(()).unwrap();
                // Released only once the waiter has found the lock held and read the clock.
                release_rx.recv().unwrap();
                *guard = 1;
            })
        };
        held_rx.recv().unwrap();
        let clock = counting_clock(Some(release_tx));
        let shared: SharedClock = clock.clone();
        let mut told = Vec::new();
        let guard = lock_timed(&lock, &shared, |waited| told.push(waited));
        assert_eq!(*guard, 1, "the guard is taken after the holder's change");
        drop(guard);
        holder.join().unwrap();
        assert_eq!(told, [Duration::from_millis(5)]);
        assert_eq!(clock.reads.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn a_self_pause_is_logged_with_its_minutes_and_a_refusal_without_its_reason() {
        let text = logged(&[
            event(EventKind::AgentPaused {
                agent: AgentId(3),
                until_ms: Some(1_000_000 + 5 * 60_000),
                by: PausedBy::Agent,
            }),
            event(EventKind::AgentPaused {
                agent: AgentId(4),
                until_ms: None,
                by: PausedBy::Operator,
            }),
            event(EventKind::WakeupRefused {
                wakeup: WakeupId(9),
                agent: AgentId(3),
                source: WakeupSource::Timer,
                reason: "\u{1b}]0;pwned\u{7}".into(),
                requested_by: None,
                trigger_detail: None,
                task_key: None,
                idempotency_key: None,
                refusal: RefusalReason::Paused,
            }),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.len(),
            2,
            "an operator's pause is not the agent's: {text}"
        );
        let errored = logged(&[event(EventKind::AgentErrored {
            agent: AgentId(3),
            reason: crate::engine::agent_error::AgentErrorReason::RestartLoop,
            count: 3,
        })]);
        assert!(
            errored.contains("WARN") && errored.contains("reason=\"restart_loop\""),
            "{errored}"
        );
        assert!(lines[0].contains("INFO") && lines[0].contains("agent paused its own heartbeats"));
        assert!(lines[0].contains("minutes=Some(5)"), "{text}");
        assert!(lines[1].contains("DEBUG") && lines[1].contains("wakeup refused"));
        assert!(
            lines[1].contains("refusal=Paused") && lines[1].contains("source=\"timer\""),
            "{text}"
        );
        assert!(
            !text.contains("pwned"),
            "a client's reason never reaches the log: {text}"
        );
    }
}
