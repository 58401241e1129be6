//! The shell: the one place where engine decisions meet the disk.
//!
//! Every command goes decide → persist → apply → observe, under one lock, so the in-memory
//! engine is never ahead of the durable log and observers see events in log order. The executor
//! is told about committed run events under the same lock, so it starts and stops runs in log
//! order too.
//!
//! A write that fails stops the node (ADR 0008): the shell latches the failure, writes nothing
//! more, and ends the node's tasks at once; the host learns it from `Node::failed` and exits, so
//! a supervisor restarts the process and recovery reads what really reached the disk.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::engine::agent::{AgentId, AgentSpec};
use crate::engine::event::{Event, EventKind};
use crate::engine::liveness::{LastPulse, LivenessStatus, PulseBook};
use crate::engine::pulse_report::PulseReport;
use crate::engine::tenant::{Principal, TokenHash};
use crate::engine::wakeup::{WakeupRecord, WakeupRequest};
use crate::engine::{Command, Decision, Engine, Refusal};
use crate::exec::adapter::SharedAdapterSource;
use crate::exec::host::RunServices;
use crate::transcript::SharedTranscriptStore;
use crate::exec::Executor;
use crate::io::clock::SharedClock;
use crate::io::entropy::{new_token, SharedEntropy};
use crate::store::{Store, StoreError};

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
    engine: Mutex<Engine>,
    store: Store,
    clock: SharedClock,
    entropy: SharedEntropy,
    on_commit: Option<CommitObserver>,
    pub(crate) executor: Executor,
    /// Wakes the timer loop when the schedule may have changed.
    pub(crate) schedule_changed: tokio::sync::Notify,
    /// The log head.
    head: tokio::sync::watch::Sender<u64>,
    /// Wakes every live reader of the event stream when the head moves. A `Notify`, not
    /// receivers of `head`: a watch channel with several waiters wakes them in an order drawn
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
}

impl Shell {
    /// Wraps a store and the engine recovered from it.
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
        let head = tokio::sync::watch::Sender::new(engine.last_seq());
        // The previous process's pulses are gone: every agent the log says is online gets a
        // whole threshold from now before it can be found silent.
        let mut pulses = PulseBook::new();
        let mono_ms = mono_ms(&clock);
        for agent in engine.agents() {
            if agent.liveness.status == LivenessStatus::Online {
                pulses.grant(agent.id, mono_ms);
            }
        }
        Arc::new(Shell {
            engine: Mutex::new(engine),
            store,
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
        })
    }

    /// Where the node's tokens come from (run tokens are minted from it too).
    pub(crate) fn entropy(&self) -> &SharedEntropy {
        &self.entropy
    }

    /// The engine, read-only, under the shell's lock. Keep the guard short.
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock means an engine invariant broke; nothing after it can
        // be trusted, so every later caller fails loudly too.
        self.engine
            .lock()
            .expect("engine lock poisoned by an earlier invariant failure")
    }

    /// The node's clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Runs `command` at the current wall time: decide, persist durably, apply, observe.
    pub fn execute(self: &Arc<Self>, command: Command) -> Result<Decision, ExecuteError> {
        let mut engine = self.engine();
        let now_ms = self.clock.wall_now_ms();
        let decision = engine.decide(&command, now_ms)?;
        self.commit(&mut engine, &decision.events)?;
        Ok(decision)
    }

    fn commit(self: &Arc<Self>, engine: &mut Engine, events: &[Event]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        if self.failure.borrow().is_some() {
            // Crash-only: after a failed write the database must be reopened before it is
            // trusted again, and only a restart does that.
            return Err(StoreError::Storage(redb::Error::PreviousIo));
        }
        if let Some(observe) = &self.on_commit {
            observe(CommitStage::Attempted, events);
        }
        if let Err(error) = self.store.append(events) {
            self.fail(&error);
            return Err(error);
        }
        for event in events {
            engine.apply(event);
            log_notable(event);
        }
        if let Some(observe) = &self.on_commit {
            observe(CommitStage::Durable, events);
        }
        self.executor.on_commit(self, engine, events);
        self.head.send_replace(engine.last_seq());
        self.head_moved.notify_waiters();
        self.schedule_changed.notify_one();
        Ok(())
    }

    /// Registers an agent in `tenant`, issuing its token.
    pub fn create_agent(
        self: &Arc<Self>,
        tenant: &str,
        spec: AgentSpec,
    ) -> Result<CreatedAgent, ExecuteError> {
        let token = new_token(&*self.entropy, AGENT_TOKEN_PREFIX);
        let decision = self.execute(Command::CreateAgent {
            tenant: tenant.to_string(),
            spec,
            token_hash: TokenHash::of(&token),
        })?;
        let event = decision.events.first().expect("a create records one event");
        let agent = event.kind.agent().expect("agent_created names its agent");
        Ok(CreatedAgent {
            agent,
            token,
            seq: event.seq,
        })
    }

    /// The one entry point for wakeups from outside the engine.
    pub fn wake(
        self: &Arc<Self>,
        agent: AgentId,
        request: WakeupRequest,
    ) -> Result<WakeAnswer, ExecuteError> {
        self.answer_wake(Command::Wake { agent, request })
    }

    /// User input for `agent`: restarts its idle chamber and wakes it on demand (`request`).
    pub fn input(
        self: &Arc<Self>,
        agent: AgentId,
        request: WakeupRequest,
    ) -> Result<WakeAnswer, ExecuteError> {
        self.answer_wake(Command::Input { agent, request })
    }

    /// Runs a command that answers with a wakeup (`Wake`, `Input`).
    fn answer_wake(self: &Arc<Self>, command: Command) -> Result<WakeAnswer, ExecuteError> {
        let mut engine = self.engine();
        let now_ms = self.clock.wall_now_ms();
        let decision = engine.decide(&command, now_ms)?;
        self.commit(&mut engine, &decision.events)?;
        Ok(WakeAnswer {
            wakeup: decision.wakeup.expect("wake and input always answer"),
            replayed: decision.replayed,
            seq: engine.last_seq(),
        })
    }

    /// Pulses from `agents` (one agent, or a host's batch), each with what it says: remembered
    /// in memory only; the agents that were not online become online, durably, with what their
    /// pulses say. All or nothing: an unknown or terminated agent refuses the whole batch.
    /// Returns the pulse's instant on the node's wall clock.
    pub fn pulse(self: &Arc<Self>, agents: &[(AgentId, PulseReport)]) -> Result<u64, ExecuteError> {
        let mut engine = self.engine();
        let now_ms = self.clock.wall_now_ms();
        let mut pulses = self.pulses();
        // What each agent's pulses will say once these are taken (a later entry of the same
        // agent over an earlier one), for the events; the book changes only if the batch is.
        let mut merged: BTreeMap<AgentId, PulseReport> = BTreeMap::new();
        for (agent, report) in agents {
            merged
                .entry(*agent)
                .or_insert_with(|| pulses.last(*agent).map(|l| l.report.clone()).unwrap_or_default())
                .update(report);
        }
        let decision = engine.decide(
            &Command::MarkOnline {
                agents: merged.into_iter().collect(),
            },
            now_ms,
        )?;
        let mono_ms = mono_ms(&self.clock);
        for (agent, report) in agents {
            pulses.pulse(*agent, mono_ms);
            pulses.report(*agent, now_ms, report);
        }
        drop(pulses);
        self.commit(&mut engine, &decision.events)?;
        if !decision.events.is_empty() {
            self.liveness_changed.notify_one();
        }
        Ok(now_ms)
    }

    /// A run of `agent` showed activity: a passive pulse (`liveness.passive_pulses`) if the
    /// agent is watched; never a write, never an agent brought online.
    pub fn passive_pulse(&self, agent: AgentId) {
        let mono_ms = mono_ms(&self.clock);
        self.pulses().touch(agent, mono_ms);
    }

    /// The latest pulse of `agent` since this node started (memory only).
    pub fn last_pulse(&self, agent: AgentId) -> Option<LastPulse> {
        self.pulses().last(agent).cloned()
    }

    /// The stale sweep: marks offline every online agent silent past its detector's judgement.
    /// Returns how many it marked.
    pub fn sweep_liveness(self: &Arc<Self>) -> Result<usize, ExecuteError> {
        let mut engine = self.engine();
        let mono_ms = mono_ms(&self.clock);
        let mut pulses = self.pulses();
        let stale = pulses.stale(watched(&engine), mono_ms);
        if stale.is_empty() {
            return Ok(0);
        }
        let stale: Vec<(AgentId, u64, PulseReport)> = stale
            .into_iter()
            .map(|(agent, silent_ms)| {
                pulses.forget(agent);
                let said = pulses.last(agent).map(|l| l.report.clone()).unwrap_or_default();
                (agent, silent_ms, said)
            })
            .collect();
        drop(pulses);
        let now_ms = self.clock.wall_now_ms();
        let decision = engine.decide(&Command::MarkOffline { agents: stale }, now_ms)?;
        self.commit(&mut engine, &decision.events)?;
        Ok(decision.events.len())
    }

    /// How long from now (monotonic) the stale sweep next needs to look, if anything is watched.
    pub fn next_liveness_check_in_ms(&self) -> Option<u64> {
        let engine = self.engine();
        let mono_ms = mono_ms(&self.clock);
        let next = self.pulses().next_check_ms(watched(&engine), mono_ms)?;
        Some(next.saturating_sub(mono_ms))
    }

    /// How long `agent` has been silent, if it is watched (memory only).
    pub fn silent_ms(&self, agent: AgentId) -> Option<u64> {
        self.pulses().silent_ms(agent, mono_ms(&self.clock))
    }

    fn pulses(&self) -> MutexGuard<'_, PulseBook> {
        self.pulses.lock().expect("pulse book lock")
    }

    /// Makes sure `tenant` exists with `operator_token`. Returns whether anything changed.
    pub fn ensure_tenant(
        self: &Arc<Self>,
        tenant: &str,
        operator_token: &str,
    ) -> Result<bool, ExecuteError> {
        let decision = self.execute(Command::EnsureTenant {
            tenant: tenant.to_string(),
            operator_token_hash: TokenHash::of(operator_token),
        })?;
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

    /// The earliest wall time at which a timer is due.
    pub fn next_deadline_ms(&self, now_ms: u64) -> Option<u64> {
        self.engine().next_deadline_ms(now_ms)
    }

    /// Seq of the last durable event.
    pub fn head_seq(&self) -> u64 {
        *self.head.borrow()
    }

    /// Notified whenever the log head moves (register with `Notified::enable` before reading
    /// `head_seq`, so that no move is missed).
    pub fn head_moved(&self) -> &tokio::sync::Notify {
        &self.head_moved
    }

    /// A page of the durable log after `after`, and the log's head at the time of reading.
    pub fn events_after(&self, after: u64, limit: usize) -> Result<(Vec<Event>, u64), StoreError> {
        // Head first: a page may then contain events newer than `head`, never the reverse.
        let head = self.engine().last_seq();
        let events = self.store.events_after(after, limit)?;
        Ok((events, head))
    }

    /// Runs the executor holds right now (for tests and the status endpoint).
    pub fn executing_runs(&self) -> usize {
        self.executor.executing()
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
        assert_eq!(lines.len(), 2, "an operator's pause is not the agent's: {text}");
        let errored = logged(&[event(EventKind::AgentErrored {
            agent: AgentId(3),
            reason: crate::engine::agent_error::AgentErrorReason::RestartLoop,
            count: 3,
        })]);
        assert!(errored.contains("WARN") && errored.contains("reason=\"restart_loop\""), "{errored}");
        assert!(lines[0].contains("INFO") && lines[0].contains("agent paused its own heartbeats"));
        assert!(lines[0].contains("minutes=Some(5)"), "{text}");
        assert!(lines[1].contains("DEBUG") && lines[1].contains("wakeup refused"));
        assert!(lines[1].contains("refusal=Paused") && lines[1].contains("source=\"timer\""), "{text}");
        assert!(!text.contains("pwned"), "a client's reason never reaches the log: {text}");
    }
}
