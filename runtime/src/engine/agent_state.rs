//! Everything the engine keeps about one agent: its coordinator (what decisions need), the
//! latest finished runs (for the API) and its idempotency keys.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::agent::Agent;
use super::coordinator::Coordinator;
use super::history::History;
use super::node_bounds::{FinishedAt, KeySummary};
use super::predicate::{Heartbeat, Heartbeats};
use super::session::Sessions;
use super::event::{Event, EventKind};
use super::run::{Run, RunId, FINISHED_RUNS_KEPT_PER_AGENT};
use super::wakeup::{WakeupOutcome, WakeupRecord, IDEMPOTENCY_TTL_MS};

/// Why a stored agent state (a snapshot) cannot be restored: the part at fault and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RestoreError {
    pub field: &'static str,
    pub message: String,
}

impl RestoreError {
    pub(crate) fn new(field: &'static str, message: impl Into<String>) -> Self {
        RestoreError {
            field,
            message: message.into(),
        }
    }
}

/// One agent's whole state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentState {
    pub coordinator: Coordinator,
    /// Finished runs still held in memory, by id...
    finished: BTreeMap<RunId, Run>,
    /// ...and in the order they finished, oldest first, with their `run_finished`'s seq.
    finished_order: VecDeque<FinishedAt>,
    /// Wakeups that carried an idempotency key, by key.
    keys: BTreeMap<String, WakeupRecord>,
    /// The same keys ordered by the wall time they were first seen, for expiry.
    key_ages: BTreeSet<(u64, String)>,
    /// The latest wall time of a keyed wakeup of this agent: a key expires once this passes
    /// its first use + TTL, and a later backward clock jump does not revive it.
    keys_clock_ms: u64,
    /// The conversation the model sees again at the next wakeup (`run_finished` appends).
    history: History,
    /// Coding-CLI sessions by task key.
    sessions: Sessions,
    /// Predicate heartbeats, by id.
    heartbeats: Heartbeats,
}

impl AgentState {
    /// The state right after `AgentCreated`.
    pub fn new(agent: Agent) -> Self {
        AgentState {
            coordinator: Coordinator::new(agent),
            finished: BTreeMap::new(),
            finished_order: VecDeque::new(),
            keys: BTreeMap::new(),
            key_ages: BTreeSet::new(),
            keys_clock_ms: 0,
            history: History::default(),
            sessions: Sessions::default(),
            heartbeats: Heartbeats::default(),
        }
    }

    /// The agent's predicate heartbeats.
    pub fn heartbeats(&self) -> &Heartbeats {
        &self.heartbeats
    }

    /// The agent's coding-CLI sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The agent.
    pub fn agent(&self) -> &Agent {
        &self.coordinator.agent
    }

    /// A run this agent still holds in memory (live, or among its latest finished).
    pub fn run(&self, id: RunId) -> Option<&Run> {
        self.coordinator
            .live_run(id)
            .or_else(|| self.finished.get(&id))
    }

    /// Every run held in memory, in id order.
    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        let mut runs: Vec<&Run> = self
            .coordinator
            .live_runs()
            .chain(self.finished.values())
            .collect();
        runs.sort_by_key(|r| r.id);
        runs.into_iter()
    }

    /// The agent's conversation history.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Micro-dollars the agent may still spend today (`None`: no budget).
    pub fn budget_left(&self, now_ms: u64) -> Option<u64> {
        self.coordinator.budget_left(now_ms)
    }

    /// The running run, if any.
    pub fn active_run(&self) -> Option<RunId> {
        self.coordinator.active_run()
    }

    /// Queued runs in the order they will start.
    pub fn queued_runs(&self) -> impl Iterator<Item = RunId> + '_ {
        self.coordinator.queued_runs()
    }

    /// The earlier wakeup with this idempotency key, if it is still honoured at `now_ms`: until
    /// the wall clock (now, or any keyed wakeup of this agent since) passes its first use + TTL.
    /// A wall clock that went back keeps a key honoured, but never revives an expired one.
    pub fn idempotent_wakeup(&self, key: &str, now_ms: u64) -> Option<&WakeupRecord> {
        let clock_ms = now_ms.max(self.keys_clock_ms);
        self.keys
            .get(key)
            .filter(|w| clock_ms < w.at_ms.saturating_add(IDEMPOTENCY_TTL_MS))
    }

    /// Keys still honoured at `now_ms`.
    pub fn live_keys(&self, now_ms: u64) -> usize {
        let clock_ms = now_ms.max(self.keys_clock_ms);
        let expired = self
            .key_ages
            .iter()
            .take_while(|(at_ms, _)| at_ms.saturating_add(IDEMPOTENCY_TTL_MS) <= clock_ms)
            .count();
        self.keys.len() - expired
    }

    /// How many idempotency keys the agent holds (expired ones not yet forgotten included), and
    /// the first use of its oldest.
    pub fn key_summary(&self) -> KeySummary {
        KeySummary {
            held: self.keys.len(),
            oldest_at_ms: self.key_ages.first().map(|(at_ms, _)| *at_ms),
        }
    }

    /// The agent's finished runs held, in the order they finished.
    pub(super) fn finished_order(&self) -> impl Iterator<Item = &FinishedAt> {
        self.finished_order.iter()
    }

    /// Forgets the agent's oldest idempotency key (the node is over its node-wide cap).
    pub(super) fn evict_oldest_key(&mut self) {
        let (_, key) = self.key_ages.pop_first().expect("an agent evicted has keys");
        self.keys.remove(&key);
    }

    /// Evicts the agent's oldest finished run (the node is over its node-wide cap).
    pub(super) fn evict_oldest_finished(&mut self) -> FinishedAt {
        let oldest = self
            .finished_order
            .pop_front()
            .expect("an agent evicted holds finished runs");
        self.finished.remove(&oldest.1);
        oldest
    }

    /// Whether finished run `run` still carries an answer excerpt.
    pub(super) fn has_answer_excerpt(&self, run: RunId) -> bool {
        self.finished
            .get(&run)
            .and_then(|r| r.report.as_ref())
            .is_some_and(|r| r.answer_excerpt.is_some())
    }

    /// Drops finished run `run`'s answer excerpt (the node keeps excerpts on its newest runs
    /// only); `excerpt_truncated` tells readers it was cut.
    pub(super) fn drop_answer_excerpt(&mut self, run: RunId) {
        let report = self
            .finished
            .get_mut(&run)
            .and_then(|r| r.report.as_mut())
            .expect("a run counted with an excerpt has a report");
        report.answer_excerpt = None;
        report.excerpt_truncated = true;
    }

    // ---- snapshots (store/record/current/snapshot.rs): what is stored, and the way back ----

    /// The finished runs held, in the order they finished, each with its `run_finished`'s seq.
    pub(crate) fn finished_in_order(&self) -> impl DoubleEndedIterator<Item = (u64, &Run)> {
        self.finished_order
            .iter()
            .map(|(seq, id)| (*seq, &self.finished[id]))
    }

    /// The idempotency keys held (expired ones not yet forgotten included), by key.
    pub(crate) fn idempotency_keys(&self) -> impl Iterator<Item = (&str, &WakeupRecord)> {
        self.keys.iter().map(|(key, record)| (key.as_str(), record))
    }

    /// The latest wall time of a keyed wakeup of this agent (0: none yet).
    pub(crate) fn keys_clock_ms(&self) -> u64 {
        self.keys_clock_ms
    }

    /// An agent's state from its stored parts (a snapshot): `finished` in the order the runs
    /// finished, with their `run_finished`'s seq; `keys` by idempotency key. The indexes
    /// derived from them (the finish order's map, the keys' ages) are rebuilt here. Refuses,
    /// naming the part, a state the engine could not have reached: a run both live and
    /// finished, a finished run held twice or not ended, seqs out of order.
    pub(crate) fn restore(
        coordinator: Coordinator,
        finished: Vec<(u64, Run)>,
        keys: BTreeMap<String, WakeupRecord>,
        keys_clock_ms: u64,
        history: History,
        sessions: Sessions,
        heartbeats: Heartbeats,
    ) -> Result<AgentState, RestoreError> {
        let mut state = AgentState {
            coordinator,
            finished: BTreeMap::new(),
            finished_order: VecDeque::with_capacity(finished.len()),
            key_ages: keys
                .iter()
                .map(|(key, record)| (record.at_ms, key.clone()))
                .collect(),
            keys,
            keys_clock_ms,
            history,
            sessions,
            heartbeats,
        };
        for (seq, run) in finished {
            let id = run.id;
            if !run.status.is_terminal() {
                return Err(RestoreError::new(
                    "finished",
                    format!(
                        "run {id} is held as finished but is {}",
                        run.status.as_str()
                    ),
                ));
            }
            if state.coordinator.live_run(id).is_some() {
                return Err(RestoreError::new(
                    "finished",
                    format!("run {id} is both live and finished"),
                ));
            }
            if state
                .finished_order
                .back()
                .is_some_and(|(last, _)| *last >= seq)
            {
                return Err(RestoreError::new(
                    "finished",
                    format!("run {id} finished at seq {seq}, not after the run before it"),
                ));
            }
            if state.finished.insert(id, run).is_some() {
                return Err(RestoreError::new(
                    "finished",
                    format!("run {id} is held twice"),
                ));
            }
            state.finished_order.push_back((seq, id));
        }
        Ok(state)
    }

    /// Folds one persisted event about this agent into its state. Returns the finished run that
    /// fell out of the agent's own in-memory history, if one did.
    pub fn apply(&mut self, event: &Event) -> Option<FinishedAt> {
        if let EventKind::RunFinished {
            report: Some(report),
            ..
        } = &event.kind
        {
            self.history.append(&report.history_append);
        }
        self.apply_sessions(event);
        // Why: a session reset changes the sessions only; the coordinator has no such state.
        if matches!(event.kind, EventKind::SessionReset { .. }) {
            return None;
        }
        // Nor does a heartbeat's event; the wakeup a transition enqueues is its own event.
        if self.apply_heartbeats(event) {
            return None;
        }
        let ended = self.coordinator.apply(event);
        self.remember_key(event);
        let ended = ended?;
        let id = ended.id;
        self.finished.insert(id, ended);
        self.finished_order.push_back((event.seq, id));
        if self.finished_order.len() > FINISHED_RUNS_KEPT_PER_AGENT {
            return Some(self.evict_oldest_finished());
        }
        None
    }

    /// A run's end sets or clears its task's session; an operator reset forgets one.
    fn apply_sessions(&mut self, event: &Event) {
        match &event.kind {
            EventKind::RunFinished {
                run,
                report: Some(report),
                ..
            } => {
                let Some(change) = &report.session else {
                    return;
                };
                let Some(ended) = self.coordinator.live_run(*run) else {
                    return;
                };
                let key = Sessions::key_of(ended.task_key.as_deref()).to_string();
                self.sessions.apply_change(&key, change, *run, event.at_ms);
            }
            EventKind::SessionReset { task_key, .. } => {
                self.sessions.reset(task_key);
            }
            _ => {}
        }
    }

    /// Folds a heartbeat's event in; false for every other event.
    fn apply_heartbeats(&mut self, event: &Event) -> bool {
        match &event.kind {
            EventKind::HeartbeatCreated {
                agent,
                heartbeat,
                spec,
            } => self.heartbeats.insert(Heartbeat {
                id: heartbeat.clone(),
                agent: *agent,
                spec: (**spec).clone(),
                state: None,
                emission_paused: false,
                created_at_ms: event.at_ms,
                changed_at_ms: None,
                transitions: 0,
            }),
            EventKind::HeartbeatDeleted { heartbeat, .. } => self.heartbeats.remove(heartbeat),
            EventKind::HeartbeatStateChanged { heartbeat, to, .. } => {
                self.heartbeats.changed(heartbeat, to, event.at_ms)
            }
            EventKind::HeartbeatEmissionPaused { heartbeat, .. } => {
                self.heartbeats.paused(heartbeat)
            }
            _ => return false,
        }
        true
    }

    fn remember_key(&mut self, event: &Event) {
        let agent = self.coordinator.agent.id;
        let at_ms = event.at_ms;
        let record =
            |wakeup, source, reason: &String, task_key: &Option<String>, key: &String, outcome| {
                WakeupRecord {
                    wakeup,
                    agent,
                    source,
                    reason: reason.clone(),
                    task_key: task_key.clone(),
                    idempotency_key: Some(key.clone()),
                    at_ms,
                    outcome,
                }
            };
        let (key, record) = match &event.kind {
            EventKind::WakeupQueued {
                wakeup,
                source,
                reason,
                task_key,
                idempotency_key: Some(key),
                run,
                ..
            } => (
                key,
                record(
                    *wakeup,
                    *source,
                    reason,
                    task_key,
                    key,
                    WakeupOutcome::Queued { run: *run },
                ),
            ),
            EventKind::WakeupCoalesced {
                wakeup,
                source,
                reason,
                idempotency_key: Some(key),
                run,
                coalesced_count,
                ..
            } => {
                let task_key = self.run(*run).and_then(|r| r.task_key.clone());
                let outcome = WakeupOutcome::Coalesced {
                    run: *run,
                    coalesced_count: *coalesced_count,
                };
                (
                    key,
                    record(*wakeup, *source, reason, &task_key, key, outcome),
                )
            }
            EventKind::WakeupRefused {
                wakeup,
                source,
                reason,
                task_key,
                idempotency_key: Some(key),
                refusal,
                ..
            } => {
                let outcome = WakeupOutcome::Refused { refusal: *refusal };
                (
                    key,
                    record(*wakeup, *source, reason, task_key, key, outcome),
                )
            }
            _ => return,
        };
        // Forget keys whose time is up, as of the latest wall time seen.
        self.keys_clock_ms = self.keys_clock_ms.max(at_ms);
        while let Some((first_at_ms, _)) = self.key_ages.first() {
            if first_at_ms.saturating_add(IDEMPOTENCY_TTL_MS) > self.keys_clock_ms {
                break;
            }
            let (_, old) = self.key_ages.pop_first().expect("non-empty");
            self.keys.remove(&old);
        }
        if let Some(previous) = self.keys.insert(key.clone(), record) {
            self.key_ages.remove(&(previous.at_ms, key.clone()));
        }
        self.key_ages.insert((at_ms, key.clone()));
    }
}
