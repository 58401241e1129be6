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

use std::collections::{BTreeMap, BTreeSet};

use super::agent::{Agent, AgentStatus, Cooldown};
use super::agent_error::AgentError;
use super::agent_state::RestoreError;
use super::breaker::{BreakerState, FailureCause};
use super::draft::Draft;
use super::event::{Event, EventKind};
use super::liveness::{Liveness, LivenessStatus};
use super::pulse_report::PulseReport;
use super::pause::{self, PausedBy};
use super::daily_cap::LocalDay;
use super::run::{Run, RunEnd, RunId, RunReport, RunStatus, StopReason, CONTROL_PLANE_RESTART};
use super::usage::{self, Usage};
use super::schedule;
use super::wakeup::{
    Priority, RefusalReason, RequestedBy, WakeupOutcome, WakeupRecord, WakeupRequest,
    WakeupSource,
};
use super::Refusal;

/// What the coordinator needs to decide for one agent: the agent and its live (queued and
/// running) runs. Small on purpose: a decision works on a clone of it. Finished runs and
/// idempotency keys live beside it in [`super::agent_state::AgentState`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    pub agent: Agent,
    /// Queued and running runs.
    live: BTreeMap<RunId, Run>,
    /// Queued runs in start order.
    queue: BTreeSet<(Priority, RunId)>,
    /// The queued run of each task key (`None` is a key too).
    queued_by_key: BTreeMap<Option<String>, RunId>,
    /// The one running run (invariant 1).
    active: Option<RunId>,
    /// The run that finished last, which a `run_requeued` right after it copies.
    /// Boxed: absent for most agents most of the time, and a `Run` is ~270 bytes inline.
    last_finished: Option<Box<Run>>,
}

impl Coordinator {
    /// The state right after `AgentCreated`.
    pub fn new(agent: Agent) -> Self {
        Coordinator {
            agent,
            live: BTreeMap::new(),
            queue: BTreeSet::new(),
            queued_by_key: BTreeMap::new(),
            active: None,
            last_finished: None,
        }
    }

    /// The coordinator of a snapshot: the agent, its live runs and the run that finished last.
    /// The indexes (the start queue, the queued run of each task key, the running run) are
    /// rebuilt from the runs' own status, priority and task key. Refuses, naming the part, a
    /// set of runs the engine could not have reached: a run held twice or already ended, two
    /// running runs, two queued runs for one task key (invariants 1, 5 and 6).
    pub(crate) fn restore(
        agent: Agent,
        live: Vec<Run>,
        last_finished: Option<Run>,
    ) -> Result<Coordinator, RestoreError> {
        let mut coordinator = Coordinator::new(agent);
        for run in live {
            let id = run.id;
            if coordinator.live.contains_key(&id) {
                return Err(RestoreError::new("live", format!("run {id} is held twice")));
            }
            match run.status {
                RunStatus::Queued => {
                    if let Some(other) = coordinator.queued_by_key.insert(run.task_key.clone(), id)
                    {
                        return Err(RestoreError::new(
                            "live",
                            format!(
                                "runs {other} and {id} are both queued for task key {:?} (invariant 6)",
                                run.task_key
                            ),
                        ));
                    }
                    coordinator.queue.insert((run.priority, id));
                }
                RunStatus::Running => {
                    if let Some(other) = coordinator.active.replace(id) {
                        return Err(RestoreError::new(
                            "live",
                            format!("runs {other} and {id} are both running (invariant 1)"),
                        ));
                    }
                }
                ended => {
                    return Err(RestoreError::new(
                        "live",
                        format!("run {id} is live but {}", ended.as_str()),
                    ))
                }
            }
            coordinator.live.insert(id, run);
        }
        coordinator.last_finished = last_finished.map(Box::new);
        Ok(coordinator)
    }

    /// The run that finished last, as a `run_requeued` right after would copy it (payload
    /// included).
    pub(crate) fn last_finished(&self) -> Option<&Run> {
        self.last_finished.as_deref()
    }

    /// A queued or running run.
    pub fn live_run(&self, id: RunId) -> Option<&Run> {
        self.live.get(&id)
    }

    /// Queued and running runs, in id order.
    pub fn live_runs(&self) -> impl DoubleEndedIterator<Item = &Run> {
        self.live.values()
    }

    /// The running run, if any.
    pub fn active_run(&self) -> Option<RunId> {
        self.active
    }

    /// Queued runs in the order they will start.
    pub fn queued_runs(&self) -> impl Iterator<Item = RunId> + '_ {
        self.queue.iter().map(|(_, id)| *id)
    }

    // ---- decisions: each emits events through the draft, which applies them to `self` ----

    /// Takes one wakeup: refuse, coalesce or queue, then start a run if the agent is free.
    pub fn wake(&mut self, draft: &mut Draft, request: &WakeupRequest) -> WakeupRecord {
        let wakeup = draft.wakeup_id();
        let agent = self.agent.id;
        let now_ms = draft.now_ms();
        let heartbeat = &self.agent.spec.heartbeat;
        let paused = pause::in_force(self.agent.paused_until_ms, now_ms)
            && pause::refuses(request.source, heartbeat.while_paused);
        let refusal = match self.agent.status {
            AgentStatus::Terminated => Some(RefusalReason::Terminated),
            _ if self.agent.error.is_some() => Some(RefusalReason::AgentError),
            AgentStatus::Paused => Some(RefusalReason::Paused),
            AgentStatus::Active if paused => Some(RefusalReason::Paused),
            AgentStatus::Active if !heartbeat.sources.contains(&request.source) => {
                Some(RefusalReason::DisabledSource)
            }
            AgentStatus::Active => None,
        };
        let refusal = match refusal {
            None if !self.breaker_admits(draft) => Some(RefusalReason::BreakerOpen),
            other => other,
        };
        let coalesce_onto = self.queued_by_key.get(&request.task_key).copied();
        // Joining a queued run costs no invocation and no queue slot.
        let refusal = refusal.or_else(|| {
            if coalesce_onto.is_some() {
                return None;
            }
            if self.daily_cap_reached(now_ms, self.queue.len() as u32) {
                return Some(RefusalReason::DailyCap);
            }
            if self.budget_spent(draft) {
                return Some(RefusalReason::Budget);
            }
            let full = self.queue.len() >= self.agent.spec.limits.queued_runs_max;
            full.then_some(RefusalReason::QueueFull)
        });
        let outcome = if let Some(refusal) = refusal {
            draft.emit(
                self,
                EventKind::WakeupRefused {
                    wakeup,
                    agent,
                    source: request.source,
                    requested_by: Some(request.asker()),
                    trigger_detail: request.trigger_detail.clone(),
                    reason: request.reason.clone(),
                    task_key: request.task_key.clone(),
                    idempotency_key: request.idempotency_key.clone(),
                    refusal,
                },
            );
            WakeupOutcome::Refused { refusal }
        } else if let Some(run) = coalesce_onto {
            let coalesced_count = self.live[&run].coalesced_count + 1;
            draft.emit(
                self,
                EventKind::WakeupCoalesced {
                    wakeup,
                    agent,
                    source: request.source,
                    requested_by: Some(request.asker()),
                    trigger_detail: request.trigger_detail.clone(),
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
                    requested_by: Some(request.asker()),
                    trigger_detail: request.trigger_detail.clone(),
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
        let mut request = WakeupRequest::new(WakeupSource::Timer, reason);
        request.trigger_detail = Some(serde_json::json!({
            "due_at_ms": fire.due_at_ms,
            "missed_slots": fire.missed_slots,
        }));
        self.wake(draft, &request.requested_by(RequestedBy::Timer));
    }

    /// Fires the idle chamber if `idle_after_ms` passed without user input: the fire, then an
    /// `idle` wakeup through `wake` (which applies pauses and the daily cap like any other).
    pub fn fire_idle(&mut self, draft: &mut Draft) {
        let Some(idle_after_ms) = self.agent.spec.heartbeat.idle_after_ms else {
            return;
        };
        let now_ms = draft.now_ms();
        if self.agent.next_idle_at_ms.is_none_or(|due| due > now_ms) {
            return;
        }
        draft.emit(
            self,
            EventKind::IdleFired {
                agent: self.agent.id,
                next_idle_at_ms: now_ms.saturating_add(idle_after_ms),
            },
        );
        let since = self
            .agent
            .last_input_at_ms
            .map_or_else(|| "creation".to_string(), |at| format!("input at {at}"));
        let request = WakeupRequest::new(WakeupSource::Idle, format!("idle since {since}"));
        self.wake(draft, &request.requested_by(RequestedBy::Idle));
    }

    /// A pulse came while the agent was not online; its pulses say `report`.
    pub fn mark_online(&mut self, draft: &mut Draft, report: &PulseReport) {
        draft.emit(
            self,
            EventKind::AgentOnline {
                agent: self.agent.id,
                report: report.clone(),
            },
        );
    }

    /// The stale sweep found the agent silent for `silent_ms`; its last pulses said `report`.
    pub fn mark_offline(&mut self, draft: &mut Draft, silent_ms: u64, report: &PulseReport) {
        draft.emit(
            self,
            EventKind::AgentOffline {
                agent: self.agent.id,
                silent_ms,
                report: report.clone(),
            },
        );
    }

    /// Records user input: the idle chamber counts again from now, and the input wakes the
    /// agent on demand.
    pub fn input(&mut self, draft: &mut Draft, request: &WakeupRequest) -> WakeupRecord {
        let next_idle_at_ms = self
            .agent
            .spec
            .heartbeat
            .idle_after_ms
            .filter(|_| self.agent.status != AgentStatus::Terminated)
            .map(|after| draft.now_ms().saturating_add(after));
        draft.emit(
            self,
            EventKind::InputReceived {
                agent: self.agent.id,
                next_idle_at_ms,
            },
        );
        self.wake(draft, request)
    }

    /// Ends the running run `run` (reported by the executor), then starts the next.
    pub fn finish(&mut self, draft: &mut Draft, run: RunId, end: &RunEnd) -> Result<(), Refusal> {
        if self.active != Some(run) {
            return Err(Refusal::RunNotRunning(run));
        }
        if let Some(usage) = &end.last_call {
            self.record_usage(draft, run, usage)?;
        }
        let probe =
            matches!(self.agent.breaker, BreakerState::HalfOpen { probe: Some(p), .. } if p == run);
        let cooldown_ms = match self.agent.breaker {
            BreakerState::HalfOpen { cooldown_ms, .. } => cooldown_ms,
            _ => 0,
        };
        self.end_run(draft, run, end.clone());
        let policy = self.agent.spec.breaker.clone();
        let now_ms = draft.now_ms();
        let trip = match (self.agent.breaker, end.cause) {
            // The apply above counted the failure.
            (BreakerState::Closed { llm_failures, .. }, Some(FailureCause::Llm))
                if llm_failures >= policy.failures_to_open =>
            {
                Some((FailureCause::Llm, policy.cooldown_ms))
            }
            (BreakerState::Closed { tool_failures, .. }, Some(FailureCause::Tool))
                if tool_failures >= policy.failures_to_open =>
            {
                Some((FailureCause::Tool, policy.cooldown_ms))
            }
            (_, Some(cause)) if probe => Some((cause, policy.next_cooldown_ms(cooldown_ms))),
            _ => None,
        };
        if let Some((trigger, cooldown_ms)) = trip {
            draft.emit(
                self,
                EventKind::BreakerOpened {
                    agent: self.agent.id,
                    trigger,
                    until_ms: now_ms.saturating_add(cooldown_ms),
                    cooldown_ms,
                },
            );
            let queued: Vec<RunId> = self.queued_runs().collect();
            for run in queued {
                self.end_run(
                    draft,
                    run,
                    RunEnd::new(RunStatus::Cancelled, "breaker_open"),
                );
            }
            self.enter_error_if_due(draft);
        } else if probe && end.status == RunStatus::Succeeded {
            draft.emit(
                self,
                EventKind::BreakerClosed {
                    agent: self.agent.id,
                },
            );
        }
        // The agent's own rest, asked from inside the run: committed in this same decision as
        // the run's end, after it, so it never cancels the run that asked for it.
        let rest = end.report.as_ref().and_then(|r| r.pause_minutes);
        if let (Some(minutes), RunStatus::Succeeded) = (rest, end.status) {
            let until_ms = pause::pause_until_ms(now_ms, minutes);
            // Refused only for a terminated agent, which cannot have a running run.
            self.pause(draft, Some(until_ms), PausedBy::Agent)?;
        }
        self.start_next(draft);
        Ok(())
    }

    /// Enters the error state when a count reached its limit (`engine/agent_error.rs`): the
    /// event, then every queued run cancelled. Returns whether it did.
    fn enter_error_if_due(&mut self, draft: &mut Draft) -> bool {
        if self.agent.error.is_some() {
            return false;
        }
        let Some(reason) = self.agent.error_counts.reached() else {
            return false;
        };
        let count = self.agent.error_counts.count_of(reason);
        draft.emit(
            self,
            EventKind::AgentErrored {
                agent: self.agent.id,
                reason,
                count,
            },
        );
        let queued: Vec<RunId> = self.queued_runs().collect();
        for run in queued {
            self.end_run(draft, run, RunEnd::new(RunStatus::Cancelled, "agent_error"));
        }
        true
    }

    /// An operator takes the agent out of the error state, and its queue may start again;
    /// resetting an agent not in error changes nothing.
    pub fn reset_error(&mut self, draft: &mut Draft) {
        if self.agent.error.is_some() {
            draft.emit(
                self,
                EventKind::AgentErrorReset {
                    agent: self.agent.id,
                },
            );
            self.start_next(draft);
        }
    }

    /// An operator closes the breaker; closing a closed breaker changes nothing.
    pub fn reset_breaker(&mut self, draft: &mut Draft) {
        if !matches!(self.agent.breaker, BreakerState::Closed { .. }) {
            draft.emit(
                self,
                EventKind::BreakerReset {
                    agent: self.agent.id,
                },
            );
            self.start_next(draft);
        }
    }

    /// Refuses a wakeup the breaker does not let through; moves an open breaker whose cooldown
    /// is over to half-open, letting this wakeup through as its probe.
    fn breaker_admits(&mut self, draft: &mut Draft) -> bool {
        match self.agent.breaker {
            BreakerState::Closed { .. } | BreakerState::HalfOpen { probe: None, .. } => true,
            BreakerState::HalfOpen { probe: Some(_), .. } => false,
            BreakerState::Open { until_ms, .. } if draft.now_ms() < until_ms => false,
            BreakerState::Open { .. } => {
                draft.emit(
                    self,
                    EventKind::BreakerHalfOpened {
                        agent: self.agent.id,
                    },
                );
                true
            }
        }
    }

    /// Cancels a queued or running run, then starts the next. (The engine answers for runs
    /// that already finished, which the coordinator no longer holds.)
    pub fn cancel(&mut self, draft: &mut Draft, run: RunId, detail: &str) -> Result<(), Refusal> {
        if !self.live.contains_key(&run) {
            return Err(Refusal::UnknownRun(run));
        }
        self.end_run(draft, run, RunEnd::new(RunStatus::Cancelled, detail));
        self.start_next(draft);
        Ok(())
    }

    /// Pauses the agent. Without `until_ms`: until resumed, every run cancelled, every wakeup
    /// refused (pausing such an agent again changes nothing). With `until_ms`: a timed pause (it
    /// replaces any earlier one) that cancels the running run and every queued timer or idle
    /// run (every queued run when the policy refuses on-demand wakes too).
    pub fn pause(
        &mut self,
        draft: &mut Draft,
        until_ms: Option<u64>,
        by: PausedBy,
    ) -> Result<(), Refusal> {
        let agent = self.agent.id;
        match (self.agent.status, until_ms) {
            (AgentStatus::Terminated, _) => Err(Refusal::AgentTerminated(agent)),
            // Paused until resumed already: a shorter pause adds nothing.
            (AgentStatus::Paused, _) => Ok(()),
            (AgentStatus::Active, None) => {
                draft.emit(
                    self,
                    EventKind::AgentPaused {
                        agent,
                        until_ms,
                        by,
                    },
                );
                self.cancel_all(draft, "agent paused");
                Ok(())
            }
            // A pause already in force that lasts at least as long stays as it is: an agent's
            // short rest never cuts an operator's longer pause.
            (AgentStatus::Active, Some(until))
                if self
                    .agent
                    .paused_until_ms
                    .is_some_and(|current| current >= until && draft.now_ms() < current) =>
            {
                Ok(())
            }
            (AgentStatus::Active, Some(_)) => {
                draft.emit(
                    self,
                    EventKind::AgentPaused {
                        agent,
                        until_ms,
                        by,
                    },
                );
                let while_paused = self.agent.spec.heartbeat.while_paused;
                let doomed: Vec<RunId> = self
                    .active
                    .into_iter()
                    .chain(
                        self.queued_runs()
                            .filter(|id| pause::refuses(self.live[id].source, while_paused)),
                    )
                    .collect();
                for run in doomed {
                    self.end_run(
                        draft,
                        run,
                        RunEnd::new(RunStatus::Cancelled, "agent paused"),
                    );
                }
                self.start_next(draft);
                Ok(())
            }
        }
    }

    /// Ends any pause. Resuming an agent that is not paused changes nothing.
    pub fn resume(&mut self, draft: &mut Draft) -> Result<(), Refusal> {
        let timed = pause::in_force(self.agent.paused_until_ms, draft.now_ms());
        match self.agent.status {
            AgentStatus::Terminated => Err(Refusal::AgentTerminated(self.agent.id)),
            AgentStatus::Active if !timed => Ok(()),
            AgentStatus::Active | AgentStatus::Paused => {
                draft.emit(
                    self,
                    EventKind::AgentResumed {
                        agent: self.agent.id,
                    },
                );
                self.start_next(draft);
                Ok(())
            }
        }
    }

    /// Whether `extra` more starts today would pass the agent's daily cap.
    fn daily_cap_reached(&self, now_ms: u64, extra: u32) -> bool {
        let Some(cap) = self.agent.spec.limits.daily_cap else {
            return false;
        };
        let count = &self.agent.day_count;
        let day = count.day_for(now_ms, &self.agent.spec.time_zone);
        count.started_on(day).saturating_add(extra) >= cap
    }

    /// Stops the agent for good, cancelling its runs. Terminating twice changes nothing.
    pub fn terminate(&mut self, draft: &mut Draft) {
        if self.agent.status == AgentStatus::Terminated {
            return;
        }
        draft.emit(
            self,
            EventKind::AgentTerminated {
                agent: self.agent.id,
            },
        );
        self.cancel_all(draft, "agent terminated");
    }

    /// After a restart: the run that was running failed with `control_plane_restart` and is
    /// queued again once (a run that was itself a retry is not); then the agent starts its next.
    pub fn recover(&mut self, draft: &mut Draft) {
        if let Some(run) = self.active {
            let retry_of = self.live[&run].retry_of;
            let task_key = self.live[&run].task_key.clone();
            self.end_run(
                draft,
                run,
                RunEnd::new(RunStatus::Failed, CONTROL_PLANE_RESTART)
                    .stopped(StopReason::ControlPlaneRestart),
            );
            // A restart loop puts the agent in error instead of running it again.
            let errored = self.enter_error_if_due(draft);
            if retry_of.is_none() && !errored {
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
        let stop_reason = Some(end.stop_reason());
        let error_class = end.error_class();
        draft.emit(
            self,
            EventKind::RunFinished {
                run,
                agent: self.agent.id,
                status: end.status,
                detail: end.detail,
                cause: end.cause,
                stop_reason,
                report: end.report,
                error_class,
            },
        );
    }

    /// Records that the running run `run` spawned its child in process group `pgid`.
    pub fn record_process_group(
        &mut self,
        draft: &mut Draft,
        run: RunId,
        pgid: u32,
    ) -> Result<(), Refusal> {
        if self.active != Some(run) {
            return Err(Refusal::RunNotRunning(run));
        }
        draft.emit(
            self,
            EventKind::RunProcessStarted {
                run,
                agent: self.agent.id,
                pgid,
            },
        );
        Ok(())
    }

    /// Records one model call of the running run `run` and what it cost.
    pub fn record_usage(
        &mut self,
        draft: &mut Draft,
        run: RunId,
        usage: &Usage,
    ) -> Result<(), Refusal> {
        if self.active != Some(run) {
            return Err(Refusal::RunNotRunning(run));
        }
        let today = LocalDay::of(draft.now_ms(), &self.agent.spec.time_zone);
        let call = self.live[&run].usage.llm_calls + 1;
        draft.emit(
            self,
            EventKind::UsageRecorded {
                run,
                agent: self.agent.id,
                call,
                usage: *usage,
                day: self.agent.day_spend.day_for(today),
            },
        );
        Ok(())
    }

    /// Dollars the agent may still spend today, in micro-dollars (`None`: no budget).
    pub fn budget_left(&self, now_ms: u64) -> Option<u64> {
        let budget = self.agent.spec.limits.daily_budget_usd?;
        Some(budget.0.saturating_sub(self.spent_today(now_ms)))
    }

    /// Micro-dollars spent on the local day `now_ms` counts against.
    fn spent_today(&self, now_ms: u64) -> u64 {
        let today = LocalDay::of(now_ms, &self.agent.spec.time_zone);
        let day = self.agent.day_spend.day_for(today);
        self.agent.day_spend.on(day).cost_micro_usd
    }

    /// Whether the agent's daily budget, or its tenant's, is spent.
    fn budget_spent(&self, draft: &Draft) -> bool {
        draft.tenant_budget_spent(&self.agent.tenant)
            || usage::budget_spent(
                self.agent.spec.limits.daily_budget_usd,
                self.spent_today(draft.now_ms()),
            )
    }

    /// Starts the first queued run if the agent is active and nothing runs (invariant 1). A
    /// queued run that may not start now (a timer or idle run during a timed pause, invariant 3;
    /// any run once the daily cap is used up, invariant 2) is cancelled instead, and the next
    /// one is tried.
    fn start_next(&mut self, draft: &mut Draft) {
        if self.active.is_some()
            || self.agent.status != AgentStatus::Active
            || self.agent.error.is_some()
            || draft.starts_held()
        {
            return;
        }
        let now_ms = draft.now_ms();
        // Within the cooldown the queue waits (`FireDueTimers` starts it once it is over).
        if self.agent.cooldown.is_some_and(|c| c.holds(now_ms)) {
            return;
        }
        while let Some(&(_, run)) = self.queue.first() {
            // Only a half-open breaker's probe (or a closed breaker) lets a run start.
            let blocked = match self.agent.breaker {
                BreakerState::Closed { .. } => false,
                BreakerState::HalfOpen { probe, .. } => probe.is_some_and(|p| p != run),
                BreakerState::Open { .. } => true,
            };
            if blocked {
                self.end_run(
                    draft,
                    run,
                    RunEnd::new(RunStatus::Cancelled, "breaker_open"),
                );
                continue;
            }
            let source = self.live[&run].source;
            let while_paused = self.agent.spec.heartbeat.while_paused;
            if pause::in_force(self.agent.paused_until_ms, now_ms)
                && pause::refuses(source, while_paused)
            {
                self.end_run(
                    draft,
                    run,
                    RunEnd::new(RunStatus::Cancelled, "agent paused"),
                );
                continue;
            }
            if self.daily_cap_reached(now_ms, 0) {
                self.end_run(draft, run, RunEnd::new(RunStatus::Cancelled, "daily_cap"));
                continue;
            }
            if self.budget_spent(draft) {
                self.end_run(draft, run, RunEnd::new(RunStatus::Cancelled, "budget"));
                continue;
            }
            let day = self
                .agent
                .day_count
                .day_for(now_ms, &self.agent.spec.time_zone);
            draft.emit(
                self,
                EventKind::RunStarted {
                    run,
                    agent: self.agent.id,
                    run_number: self.agent.runs_started,
                    day,
                },
            );
            return;
        }
    }

    /// When a queued run waits only for the agent's cooldown: when to look again, if so.
    pub fn cooldown_deadline_ms(&self, now_ms: u64) -> Option<u64> {
        self.waiting_cooldown().map(|c| c.due_at_ms(now_ms))
    }

    /// The cooldown a queued run waits out, if it waits only for that.
    pub fn waiting_cooldown(&self) -> Option<&Cooldown> {
        // Only an active agent's queue can start: anything else would be a deadline that
        // decides nothing when due, and the timer loop would spin on it.
        let waiting = self.active.is_none()
            && !self.queue.is_empty()
            && self.agent.status == AgentStatus::Active
            && self.agent.error.is_none();
        self.agent.cooldown.as_ref().filter(|_| waiting)
    }

    /// The cooldown is over: the next queued run may start (`FireDueTimers`).
    pub fn start_after_cooldown(&mut self, draft: &mut Draft) {
        self.start_next(draft);
    }

    // ---- apply: the only code that changes the coordinator's state ----

    /// Folds one persisted event about this agent into the coordinator. Returns the run that
    /// finished, when the event ended one. Idempotency keys and finished runs are kept by the
    /// caller ([`super::agent_state::AgentState`]).
    pub fn apply(&mut self, event: &Event) -> Option<Run> {
        let at_ms = event.at_ms;
        match &event.kind {
            EventKind::TenantCreated { .. }
            | EventKind::OperatorTokenSet { .. }
            | EventKind::TenantBudgetSet { .. }
            | EventKind::SessionReset { .. }
            | EventKind::AgentTokenRotated { .. }
            | EventKind::AgentUpdated { .. }
            | EventKind::AgentDeleted { .. }
            | EventKind::HeartbeatCreated { .. }
            | EventKind::HeartbeatDeleted { .. }
            | EventKind::HeartbeatStateChanged { .. }
            | EventKind::HeartbeatEmissionPaused { .. }
            | EventKind::AgentCreated { .. } => {
                unreachable!("{} is not an agent event", event.kind.type_name())
            }
            EventKind::AgentPaused { until_ms, by, .. } => {
                match until_ms {
                    None => self.agent.status = AgentStatus::Paused,
                    Some(until) => self.agent.paused_until_ms = Some(*until),
                }
                self.agent.paused_by = Some(*by);
            }
            EventKind::AgentResumed { .. } => {
                self.agent.status = AgentStatus::Active;
                self.agent.paused_until_ms = None;
                self.agent.paused_by = None;
            }
            EventKind::AgentTerminated { .. } => {
                self.agent.status = AgentStatus::Terminated;
                self.agent.next_fire_at_ms = None;
                self.agent.next_idle_at_ms = None;
            }
            EventKind::TimerFired {
                due_at_ms,
                next_fire_at_ms,
                ..
            } => {
                assert!(
                    self.agent
                        .last_due_at_ms
                        .is_none_or(|last| last < *due_at_ms),
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
                run,
                ..
            } => {
                assert!(
                    !self.queued_by_key.contains_key(task_key),
                    "agent {} queued a second run for task key {task_key:?} (invariant 6)",
                    self.agent.id
                );
                self.enqueue(Run {
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
                    stop_reason: None,
                    usage: Usage::default(),
                    report: None,
                    error_class: None,
                    process_group: None,
                });
            }
            EventKind::WakeupCoalesced {
                source,
                reason,
                payload,
                run,
                coalesced_count,
                ..
            } => {
                let target = self.live.get_mut(run).expect("coalesced onto a live run");
                assert_eq!(
                    target.status,
                    RunStatus::Queued,
                    "coalesced onto run {run} that is not queued"
                );
                assert_eq!(*coalesced_count, target.coalesced_count + 1);
                target.coalesced_count = *coalesced_count;
                target.reason = reason.clone();
                target.payload = payload.clone();
                self.raise_priority(*run, source.priority());
                self.take_as_probe(*run);
            }
            EventKind::WakeupRefused { .. } => {}
            EventKind::BreakerOpened {
                until_ms,
                cooldown_ms,
                ..
            } => {
                self.agent.breaker = BreakerState::Open {
                    until_ms: *until_ms,
                    cooldown_ms: *cooldown_ms,
                };
                if *cooldown_ms >= self.agent.spec.breaker.cooldown_ms_max {
                    self.agent.error_counts.openings_at_cap += 1;
                }
            }
            EventKind::BreakerHalfOpened { .. } => {
                let BreakerState::Open { cooldown_ms, .. } = self.agent.breaker else {
                    panic!(
                        "breaker of agent {} half-opened while not open",
                        self.agent.id
                    );
                };
                self.agent.breaker = BreakerState::HalfOpen {
                    cooldown_ms,
                    probe: None,
                };
            }
            EventKind::BreakerClosed { .. } | EventKind::BreakerReset { .. } => {
                self.agent.breaker = BreakerState::default();
                self.agent.error_counts.openings_at_cap = 0;
            }
            EventKind::AgentErrored { reason, .. } => {
                self.agent.error = Some(AgentError {
                    reason: *reason,
                    since_ms: at_ms,
                });
                self.agent.error_counts = Default::default();
            }
            EventKind::AgentErrorReset { .. } => {
                self.agent.error = None;
            }
            EventKind::AgentOnline { .. } => {
                self.agent.liveness = Liveness {
                    status: LivenessStatus::Online,
                    since_ms: Some(at_ms),
                };
            }
            EventKind::AgentOffline { .. } => {
                self.agent.liveness = Liveness {
                    status: LivenessStatus::Offline,
                    since_ms: Some(at_ms),
                };
            }
            EventKind::InputReceived {
                next_idle_at_ms, ..
            } => {
                self.agent.last_input_at_ms = Some(at_ms);
                self.agent.next_idle_at_ms = *next_idle_at_ms;
            }
            EventKind::IdleFired {
                next_idle_at_ms, ..
            } => {
                self.agent.next_idle_at_ms = Some(*next_idle_at_ms);
            }
            EventKind::RunRequeued {
                run,
                retry_of,
                coalesced,
                ..
            } => {
                let old = self
                    .last_finished
                    .as_deref()
                    .filter(|r| r.id == *retry_of)
                    .cloned()
                    .unwrap_or_else(|| {
                        panic!("run_requeued of run {retry_of}, which did not just finish")
                    });
                assert_eq!(
                    old.status,
                    RunStatus::Failed,
                    "requeue of run {retry_of} that did not fail"
                );
                assert!(
                    old.retry_of.is_none(),
                    "run {retry_of} re-queued a second time"
                );
                if *coalesced {
                    let target = self.live.get_mut(run).expect("requeue onto a live run");
                    assert_eq!(target.status, RunStatus::Queued);
                    target.coalesced_count += 1;
                    self.raise_priority(*run, old.priority);
                } else {
                    self.enqueue(Run {
                        id: *run,
                        retry_of: Some(*retry_of),
                        status: RunStatus::Queued,
                        queued_at_ms: at_ms,
                        started_at_ms: None,
                        finished_at_ms: None,
                        run_number: None,
                        detail: String::new(),
                        coalesced_count: 0,
                        stop_reason: None,
                        usage: Usage::default(),
                        report: None,
                        error_class: None,
                        process_group: None,
                        ..old
                    });
                }
            }
            EventKind::RunStarted {
                run,
                run_number,
                day,
                ..
            } => {
                self.agent.day_count.count(*day);
                assert!(
                    self.active.is_none(),
                    "agent {} started run {run} while run {:?} is active (invariant 1)",
                    self.agent.id,
                    self.active
                );
                assert_eq!(*run_number, self.agent.runs_started);
                let started = self
                    .live
                    .get_mut(run)
                    .unwrap_or_else(|| panic!("run {run} started but is not queued (invariant 5)"));
                assert_eq!(
                    started.status,
                    RunStatus::Queued,
                    "run {run} started twice (invariant 5)"
                );
                assert!(self.queue.remove(&(started.priority, *run)));
                self.queued_by_key.remove(&started.task_key);
                started.status = RunStatus::Running;
                started.started_at_ms = Some(at_ms);
                started.run_number = Some(*run_number);
                self.active = Some(*run);
                self.agent.runs_started += 1;
                self.agent.cooldown = None;
            }
            EventKind::UsageRecorded {
                run, usage, day, ..
            } => {
                let running = self
                    .live
                    .get_mut(run)
                    .unwrap_or_else(|| panic!("usage recorded for run {run}, which is not live"));
                running.usage.add(usage);
                self.agent.day_spend.count(*day, usage);
                self.agent.usage_total.add(usage);
            }
            EventKind::RunProcessStarted { run, pgid, .. } => {
                let running = self.live.get_mut(run).unwrap_or_else(|| {
                    panic!("process group recorded for run {run}, which is not live")
                });
                running.process_group = Some(*pgid);
            }
            EventKind::RunFinished {
                run,
                status,
                detail,
                cause,
                stop_reason,
                report,
                error_class,
                ..
            } => {
                assert!(status.is_terminal(), "run {run} finished as {status:?}");
                match &mut self.agent.breaker {
                    BreakerState::Closed {
                        llm_failures,
                        tool_failures,
                    } => match (status, cause) {
                        (RunStatus::Succeeded, _) => (*llm_failures, *tool_failures) = (0, 0),
                        (_, Some(FailureCause::Llm)) => *llm_failures += 1,
                        (_, Some(FailureCause::Tool)) => *tool_failures += 1,
                        _ => {}
                    },
                    // A probe that was cancelled or cut off proves nothing: await another.
                    BreakerState::HalfOpen { probe, .. }
                        if *probe == Some(*run)
                            && cause.is_none()
                            && *status != RunStatus::Succeeded =>
                    {
                        *probe = None;
                    }
                    _ => {}
                }
                let mut ended = self
                    .live
                    .remove(run)
                    .unwrap_or_else(|| panic!("run {run} ended but is not live (invariant 5)"));
                match ended.status {
                    RunStatus::Running => {
                        assert_eq!(self.active, Some(*run));
                        self.active = None;
                        let counts = &mut self.agent.error_counts;
                        counts.restart_ends = match stop_reason {
                            Some(StopReason::ControlPlaneRestart) => counts.restart_ends + 1,
                            _ => 0,
                        };
                        // Only the end of a run that ran starts a cooldown.
                        let cooldown_ms = self.agent.spec.limits.cooldown_ms;
                        self.agent.cooldown = (cooldown_ms > 0).then(|| Cooldown {
                            from_ms: at_ms,
                            until_ms: at_ms.saturating_add(cooldown_ms),
                        });
                    }
                    RunStatus::Queued => {
                        assert!(self.queue.remove(&(ended.priority, *run)));
                        self.queued_by_key.remove(&ended.task_key);
                    }
                    terminal => unreachable!("live run {run} was {terminal:?}"),
                }
                ended.status = *status;
                ended.finished_at_ms = Some(at_ms);
                ended.detail = detail.clone();
                ended.stop_reason = *stop_reason;
                ended.error_class = *error_class;
                ended.report = report.as_ref().map(|r| {
                    Box::new(RunReport {
                        history_append: Vec::new(),
                        ..(**r).clone()
                    })
                });
                // A re-queue right after copies the run whole, payload included; the history
                // kept for the API drops payloads (they live on in the wakeup events).
                self.last_finished = Some(Box::new(ended.clone()));
                ended.payload = serde_json::Value::Null;
                return Some(ended);
            }
        }
        None
    }

    /// A half-open breaker takes the first run admitted as its one probe.
    fn take_as_probe(&mut self, run: RunId) {
        if let BreakerState::HalfOpen {
            probe: probe @ None,
            ..
        } = &mut self.agent.breaker
        {
            *probe = Some(run);
        }
    }

    fn enqueue(&mut self, run: Run) {
        let previous = self.queued_by_key.insert(run.task_key.clone(), run.id);
        assert!(
            previous.is_none(),
            "two queued runs for one task key (invariant 6)"
        );
        self.queue.insert((run.priority, run.id));
        self.take_as_probe(run.id);
        let existed = self.live.insert(run.id, run);
        assert!(existed.is_none(), "run id reused");
    }

    fn raise_priority(&mut self, run: RunId, priority: Priority) {
        let target = self.live.get_mut(&run).expect("live run");
        if priority < target.priority {
            assert!(self.queue.remove(&(target.priority, run)));
            target.priority = priority;
            self.queue.insert((priority, run));
        }
    }
}
