//! The wakeup coordinator of one agent: the ONE place where wakeups become runs.
//!
//! Rules (docs/api.md, invariants 1, 5 and 6):
//! - an idempotency key seen within `IDEMPOTENCY_TTL_MS` gets the original answer (the engine
//!   looks it up before calling in here; nothing is recorded for a replay);
//! - a wakeup for a task key that already has a queued run coalesces onto it;
//! - a refused wakeup is recorded with its reason, never dropped;
//! - at most one run is active; queued runs start in priority order, FIFO within a class, and
//!   the next one starts as soon as the active one ends.
//!
//! Decisions run on a scratch copy of the agent's state: every event is applied to the copy as
//! it is emitted (through the same `apply` the real state uses), so each step sees the effect of
//! the previous one and the two can never disagree.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::agent::{Agent, AgentStatus};
use super::draft::Draft;
use super::event::{Event, EventKind};
use super::run::{Run, RunEnd, RunId, RunStatus, CONTROL_PLANE_RESTART, FINISHED_RUNS_KEPT_PER_AGENT};
use super::schedule;
use super::wakeup::{
    Priority, RefusalReason, WakeupOutcome, WakeupRecord, WakeupRequest, WakeupSource,
    IDEMPOTENCY_TTL_MS,
};
use super::Refusal;

/// One agent and everything the coordinator keeps about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentState {
    pub agent: Agent,
    /// Queued and running runs, and the latest finished ones.
    runs: BTreeMap<RunId, Run>,
    /// Queued runs in start order.
    queue: BTreeSet<(Priority, RunId)>,
    /// The queued run of each task key (`None` is a key too).
    queued_by_key: BTreeMap<Option<String>, RunId>,
    /// The one running run (invariant 1).
    active: Option<RunId>,
    /// Finished runs still in `runs`, oldest first.
    finished: VecDeque<RunId>,
    /// Wakeups that carried an idempotency key, by key.
    keys: BTreeMap<String, WakeupRecord>,
    /// The same keys ordered by the wall time they were first seen, for expiry.
    key_ages: BTreeSet<(u64, String)>,
}

impl AgentState {
    /// The state right after `AgentCreated`.
    pub fn new(agent: Agent) -> Self {
        AgentState {
            agent,
            runs: BTreeMap::new(),
            queue: BTreeSet::new(),
            queued_by_key: BTreeMap::new(),
            active: None,
            finished: VecDeque::new(),
            keys: BTreeMap::new(),
            key_ages: BTreeSet::new(),
        }
    }

    /// A run this agent still holds in memory.
    pub fn run(&self, id: RunId) -> Option<&Run> {
        self.runs.get(&id)
    }

    /// Every run held in memory, in id order.
    pub fn runs(&self) -> impl DoubleEndedIterator<Item = &Run> {
        self.runs.values()
    }

    /// The running run, if any.
    pub fn active_run(&self) -> Option<RunId> {
        self.active
    }

    /// Queued runs in the order they will start.
    pub fn queued_runs(&self) -> impl Iterator<Item = RunId> + '_ {
        self.queue.iter().map(|(_, id)| *id)
    }

    /// The earlier wakeup with this idempotency key, if it is still honoured at `now_ms`.
    /// A key first seen "in the future" (the wall clock went back since) is still honoured.
    pub fn idempotent_wakeup(&self, key: &str, now_ms: u64) -> Option<&WakeupRecord> {
        self.keys
            .get(key)
            .filter(|w| now_ms < w.at_ms.saturating_add(IDEMPOTENCY_TTL_MS))
    }

    /// Keys still honoured at `now_ms`.
    pub fn live_keys(&self, now_ms: u64) -> usize {
        let expired = self
            .key_ages
            .iter()
            .take_while(|(at_ms, _)| at_ms.saturating_add(IDEMPOTENCY_TTL_MS) <= now_ms)
            .count();
        self.keys.len() - expired
    }

    // ---- decisions: each emits events through the draft, which applies them to `self` ----

    /// Takes one wakeup: refuse, coalesce or queue, then start a run if the agent is free.
    pub fn wake(&mut self, draft: &mut Draft, request: &WakeupRequest) -> WakeupRecord {
        let wakeup = draft.wakeup_id();
        let agent = self.agent.id;
        let refusal = match self.agent.status {
            AgentStatus::Terminated => Some(RefusalReason::Terminated),
            AgentStatus::Paused => Some(RefusalReason::Paused),
            AgentStatus::Active if !self.agent.spec.heartbeat.sources.contains(&request.source) => {
                Some(RefusalReason::DisabledSource)
            }
            AgentStatus::Active => None,
        };
        let coalesce_onto = self.queued_by_key.get(&request.task_key).copied();
        let refusal = refusal.or_else(|| {
            let full = self.queue.len() >= self.agent.spec.limits.queued_runs_max;
            (coalesce_onto.is_none() && full).then_some(RefusalReason::QueueFull)
        });
        let outcome = if let Some(refusal) = refusal {
            draft.emit(
                self,
                EventKind::WakeupRefused {
                    wakeup,
                    agent,
                    source: request.source,
                    reason: request.reason.clone(),
                    task_key: request.task_key.clone(),
                    idempotency_key: request.idempotency_key.clone(),
                    refusal,
                },
            );
            WakeupOutcome::Refused { refusal }
        } else if let Some(run) = coalesce_onto {
            let coalesced_count = self.runs[&run].coalesced_count + 1;
            draft.emit(
                self,
                EventKind::WakeupCoalesced {
                    wakeup,
                    agent,
                    source: request.source,
                    reason: request.reason.clone(),
                    payload: request.payload.clone(),
                    idempotency_key: request.idempotency_key.clone(),
                    run,
                    coalesced_count,
                },
            );
            WakeupOutcome::Coalesced {
                run,
                coalesced_count,
            }
        } else {
            let run = draft.run_id();
            draft.emit(
                self,
                EventKind::WakeupQueued {
                    wakeup,
                    agent,
                    source: request.source,
                    reason: request.reason.clone(),
                    payload: request.payload.clone(),
                    task_key: request.task_key.clone(),
                    idempotency_key: request.idempotency_key.clone(),
                    run,
                },
            );
            WakeupOutcome::Queued { run }
        };
        self.start_next(draft);
        WakeupRecord {
            wakeup,
            agent,
            source: request.source,
            reason: request.reason.clone(),
            task_key: request.task_key.clone(),
            idempotency_key: request.idempotency_key.clone(),
            at_ms: draft.now_ms(),
            outcome,
        }
    }

    /// Fires the timer if its slot has come: the fire, then a `timer` wakeup through `wake`.
    pub fn fire_timer(&mut self, draft: &mut Draft) {
        let Some(interval_ms) = self.agent.spec.heartbeat.interval_ms else {
            return;
        };
        let Some(next_fire_at_ms) = self.agent.next_fire_at_ms else {
            return;
        };
        let Some(fire) = schedule::fire_due(next_fire_at_ms, interval_ms, draft.now_ms()) else {
            return;
        };
        draft.emit(
            self,
            EventKind::TimerFired {
                agent: self.agent.id,
                due_at_ms: fire.due_at_ms,
                missed_slots: fire.missed_slots,
                next_fire_at_ms: fire.next_fire_at_ms,
            },
        );
        let reason = if fire.missed_slots == 0 {
            format!("timer slot {}", fire.due_at_ms)
        } else {
            format!(
                "timer slot {} ({} missed slots skipped)",
                fire.due_at_ms, fire.missed_slots
            )
        };
        self.wake(draft, &WakeupRequest::new(WakeupSource::Timer, reason));
    }

    /// Ends the running run `run` (reported by the executor), then starts the next.
    pub fn finish(&mut self, draft: &mut Draft, run: RunId, end: &RunEnd) -> Result<(), Refusal> {
        if self.active != Some(run) {
            return Err(Refusal::RunNotRunning(run));
        }
        self.end_run(draft, run, end.clone());
        self.start_next(draft);
        Ok(())
    }

    /// Cancels a queued or running run, then starts the next.
    pub fn cancel(&mut self, draft: &mut Draft, run: RunId, detail: &str) -> Result<(), Refusal> {
        let status = self.runs.get(&run).map(|r| r.status);
        match status {
            Some(status) if status.is_terminal() => Err(Refusal::RunAlreadyFinished(run, status)),
            Some(_) => {
                self.end_run(draft, run, RunEnd::new(RunStatus::Cancelled, detail));
                self.start_next(draft);
                Ok(())
            }
            None => Err(Refusal::UnknownRun(run)),
        }
    }

    /// Stops taking wakeups and cancels every queued and running run. Pausing a paused agent
    /// changes nothing.
    pub fn pause(&mut self, draft: &mut Draft) -> Result<(), Refusal> {
        match self.agent.status {
            AgentStatus::Paused => Ok(()),
            AgentStatus::Terminated => Err(Refusal::AgentTerminated(self.agent.id)),
            AgentStatus::Active => {
                draft.emit(self, EventKind::AgentPaused { agent: self.agent.id });
                self.cancel_all(draft, "agent paused");
                Ok(())
            }
        }
    }

    /// Takes wakeups again. Resuming an active agent changes nothing.
    pub fn resume(&mut self, draft: &mut Draft) -> Result<(), Refusal> {
        match self.agent.status {
            AgentStatus::Active => Ok(()),
            AgentStatus::Terminated => Err(Refusal::AgentTerminated(self.agent.id)),
            AgentStatus::Paused => {
                draft.emit(self, EventKind::AgentResumed { agent: self.agent.id });
                self.start_next(draft);
                Ok(())
            }
        }
    }

    /// Stops the agent for good, cancelling its runs. Terminating twice changes nothing.
    pub fn terminate(&mut self, draft: &mut Draft) {
        if self.agent.status == AgentStatus::Terminated {
            return;
        }
        draft.emit(self, EventKind::AgentTerminated { agent: self.agent.id });
        self.cancel_all(draft, "agent terminated");
    }

    /// After a restart: the run that was running failed with `control_plane_restart` and is
    /// queued again once (a run that was itself a retry is not); then the agent starts its next.
    pub fn recover(&mut self, draft: &mut Draft) {
        if let Some(run) = self.active {
            let retry_of = self.runs[&run].retry_of;
            self.end_run(draft, run, RunEnd::new(RunStatus::Failed, CONTROL_PLANE_RESTART));
            if retry_of.is_none() {
                let task_key = self.runs[&run].task_key.clone();
                let coalesce_onto = self.queued_by_key.get(&task_key).copied();
                let (requeued, coalesced) = match coalesce_onto {
                    Some(existing) => (existing, true),
                    None => (draft.run_id(), false),
                };
                draft.emit(
                    self,
                    EventKind::RunRequeued {
                        run: requeued,
                        agent: self.agent.id,
                        retry_of: run,
                        coalesced,
                    },
                );
            }
        }
        self.start_next(draft);
    }

    fn cancel_all(&mut self, draft: &mut Draft, detail: &str) {
        let doomed: Vec<RunId> = self.active.into_iter().chain(self.queued_runs()).collect();
        for run in doomed {
            self.end_run(draft, run, RunEnd::new(RunStatus::Cancelled, detail));
        }
    }

    fn end_run(&mut self, draft: &mut Draft, run: RunId, end: RunEnd) {
        draft.emit(
            self,
            EventKind::RunFinished {
                run,
                agent: self.agent.id,
                status: end.status,
                detail: end.detail,
            },
        );
    }

    /// Starts the first queued run if the agent is active and nothing runs (invariant 1).
    fn start_next(&mut self, draft: &mut Draft) {
        if self.active.is_some() || self.agent.status != AgentStatus::Active {
            return;
        }
        let Some(&(_, run)) = self.queue.first() else {
            return;
        };
        draft.emit(
            self,
            EventKind::RunStarted {
                run,
                agent: self.agent.id,
                run_number: self.agent.runs_started,
            },
        );
    }

    // ---- apply: the only code that changes an agent's state ----

    /// Folds one persisted event about this agent into its state. Returns the finished run that
    /// fell out of the in-memory history, if one did.
    pub fn apply(&mut self, event: &Event) -> Option<RunId> {
        let at_ms = event.at_ms;
        let agent_id = self.agent.id;
        match &event.kind {
            EventKind::TenantCreated { .. }
            | EventKind::OperatorTokenSet { .. }
            | EventKind::AgentCreated { .. } => {
                unreachable!("{} is not an agent event", event.kind.type_name())
            }
            EventKind::AgentPaused { .. } => self.agent.status = AgentStatus::Paused,
            EventKind::AgentResumed { .. } => self.agent.status = AgentStatus::Active,
            EventKind::AgentTerminated { .. } => {
                self.agent.status = AgentStatus::Terminated;
                self.agent.next_fire_at_ms = None;
            }
            EventKind::TimerFired {
                due_at_ms,
                next_fire_at_ms,
                ..
            } => {
                assert!(
                    self.agent.last_due_at_ms.is_none_or(|last| last < *due_at_ms),
                    "timer slot {due_at_ms} of agent {} fired twice",
                    self.agent.id
                );
                self.agent.last_due_at_ms = Some(*due_at_ms);
                self.agent.next_fire_at_ms = Some(*next_fire_at_ms);
                self.agent.timer_fires += 1;
            }
            EventKind::WakeupQueued {
                wakeup,
                source,
                reason,
                payload,
                task_key,
                idempotency_key,
                run,
                ..
            } => {
                assert!(
                    !self.queued_by_key.contains_key(task_key),
                    "agent {} queued a second run for task key {task_key:?} (invariant 6)",
                    self.agent.id
                );
                let new = Run {
                    id: *run,
                    agent: self.agent.id,
                    source: *source,
                    priority: source.priority(),
                    task_key: task_key.clone(),
                    reason: reason.clone(),
                    payload: payload.clone(),
                    wakeup: *wakeup,
                    coalesced_count: 0,
                    retry_of: None,
                    status: RunStatus::Queued,
                    queued_at_ms: at_ms,
                    started_at_ms: None,
                    finished_at_ms: None,
                    run_number: None,
                    detail: String::new(),
                };
                self.enqueue(new);
                self.remember_key(idempotency_key, || WakeupRecord {
                    wakeup: *wakeup,
                    agent: agent_id,
                    source: *source,
                    reason: reason.clone(),
                    task_key: task_key.clone(),
                    idempotency_key: idempotency_key.clone(),
                    at_ms,
                    outcome: WakeupOutcome::Queued { run: *run },
                });
            }
            EventKind::WakeupCoalesced {
                wakeup,
                source,
                reason,
                payload,
                idempotency_key,
                run,
                coalesced_count,
                ..
            } => {
                let target = self.runs.get_mut(run).expect("coalesced onto a known run");
                assert_eq!(target.status, RunStatus::Queued, "coalesced onto run {run} that is not queued");
                assert_eq!(*coalesced_count, target.coalesced_count + 1);
                target.coalesced_count = *coalesced_count;
                target.reason = reason.clone();
                target.payload = payload.clone();
                let task_key = target.task_key.clone();
                self.raise_priority(*run, source.priority());
                self.remember_key(idempotency_key, || WakeupRecord {
                    wakeup: *wakeup,
                    agent: agent_id,
                    source: *source,
                    reason: reason.clone(),
                    task_key,
                    idempotency_key: idempotency_key.clone(),
                    at_ms,
                    outcome: WakeupOutcome::Coalesced {
                        run: *run,
                        coalesced_count: *coalesced_count,
                    },
                });
            }
            EventKind::WakeupRefused {
                wakeup,
                source,
                reason,
                task_key,
                idempotency_key,
                refusal,
                ..
            } => {
                self.remember_key(idempotency_key, || WakeupRecord {
                    wakeup: *wakeup,
                    agent: agent_id,
                    source: *source,
                    reason: reason.clone(),
                    task_key: task_key.clone(),
                    idempotency_key: idempotency_key.clone(),
                    at_ms,
                    outcome: WakeupOutcome::Refused { refusal: *refusal },
                });
            }
            EventKind::RunRequeued {
                run,
                retry_of,
                coalesced,
                ..
            } => {
                let old = self.runs.get(retry_of).expect("requeue of a known run").clone();
                assert_eq!(old.status, RunStatus::Failed, "requeue of run {retry_of} that did not fail");
                assert!(old.retry_of.is_none(), "run {retry_of} re-queued a second time");
                if *coalesced {
                    let target = self.runs.get_mut(run).expect("requeue onto a known run");
                    assert_eq!(target.status, RunStatus::Queued);
                    target.coalesced_count += 1;
                    self.raise_priority(*run, old.priority);
                } else {
                    let new = Run {
                        id: *run,
                        retry_of: Some(*retry_of),
                        status: RunStatus::Queued,
                        queued_at_ms: at_ms,
                        started_at_ms: None,
                        finished_at_ms: None,
                        run_number: None,
                        detail: String::new(),
                        ..old
                    };
                    self.enqueue(new);
                }
            }
            EventKind::RunStarted {
                run, run_number, ..
            } => {
                assert!(
                    self.active.is_none(),
                    "agent {} started run {run} while run {:?} is active (invariant 1)",
                    self.agent.id,
                    self.active
                );
                assert_eq!(*run_number, self.agent.runs_started);
                let started = self.runs.get_mut(run).expect("start of a known run");
                assert_eq!(started.status, RunStatus::Queued, "run {run} started twice (invariant 5)");
                assert!(self.queue.remove(&(started.priority, *run)));
                self.queued_by_key.remove(&started.task_key);
                started.status = RunStatus::Running;
                started.started_at_ms = Some(at_ms);
                started.run_number = Some(*run_number);
                self.active = Some(*run);
                self.agent.runs_started += 1;
            }
            EventKind::RunFinished {
                run, status, detail, ..
            } => {
                assert!(status.is_terminal(), "run {run} finished as {status:?}");
                let ended = self.runs.get_mut(run).expect("end of a known run");
                match ended.status {
                    RunStatus::Running => {
                        assert_eq!(self.active, Some(*run));
                        self.active = None;
                    }
                    RunStatus::Queued => {
                        assert!(self.queue.remove(&(ended.priority, *run)));
                        self.queued_by_key.remove(&ended.task_key);
                    }
                    terminal => panic!("run {run} ended twice: {terminal:?} then {status:?} (invariant 5)"),
                }
                ended.status = *status;
                ended.finished_at_ms = Some(at_ms);
                ended.detail = detail.clone();
                ended.payload = serde_json::Value::Null;
                self.finished.push_back(*run);
                if self.finished.len() > FINISHED_RUNS_KEPT_PER_AGENT {
                    let evicted = self.finished.pop_front().expect("non-empty");
                    self.runs.remove(&evicted);
                    return Some(evicted);
                }
            }
        }
        None
    }

    fn enqueue(&mut self, run: Run) {
        let previous = self.queued_by_key.insert(run.task_key.clone(), run.id);
        assert!(previous.is_none(), "two queued runs for one task key (invariant 6)");
        self.queue.insert((run.priority, run.id));
        let existed = self.runs.insert(run.id, run);
        assert!(existed.is_none(), "run id reused");
    }

    fn raise_priority(&mut self, run: RunId, priority: Priority) {
        let target = self.runs.get_mut(&run).expect("known run");
        if priority < target.priority {
            assert!(self.queue.remove(&(target.priority, run)));
            target.priority = priority;
            self.queue.insert((priority, run));
        }
    }

    fn remember_key(&mut self, key: &Option<String>, record: impl FnOnce() -> WakeupRecord) {
        let Some(key) = key else {
            return;
        };
        let record = record();
        // Forget keys whose time is up, as of this event's wall time.
        while let Some((at_ms, _)) = self.key_ages.first() {
            if at_ms.saturating_add(IDEMPOTENCY_TTL_MS) > record.at_ms {
                break;
            }
            let (_, old) = self.key_ages.pop_first().expect("non-empty");
            self.keys.remove(&old);
        }
        if let Some(previous) = self.keys.insert(key.clone(), record.clone()) {
            self.key_ages.remove(&(previous.at_ms, key.clone()));
        }
        self.key_ages.insert((record.at_ms, key.clone()));
    }
}
