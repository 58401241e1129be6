//! `refusal_reason_holds` (23): docs/api.md's refusal reasons and their order, restated from the
//! document rather than taken from the runtime.
//!
//! The documented order is `terminated`, `agent_error`, `paused`, `disabled_source`,
//! `breaker_open`, then `daily_cap`, `budget` and `queue_full`; the last three never refuse a
//! wakeup that joins a queued run of its task key. For every `wakeup_refused`, its reason must
//! hold and no earlier reason may hold; a `wakeup_queued` or `wakeup_coalesced` must have had no
//! reason to be refused, and a `wakeup_queued` found room in the queue.
//!
//! Each reason's condition is kept from the committed events: exactly for `terminated`,
//! `agent_error`, `paused` (until resumed; or a timed pause in force at the decision's wall time
//! for a `timer`/`idle` source, any source under `while_paused: refuse_all`), `disabled_source`
//! and `queue_full` (the queued runs and their task keys); for `breaker_open`, an open breaker
//! before its `until_ms` refuses for certain, a half-open one may (the oracle does not track
//! which run is the probe); `daily_cap` and `budget` only need a cap or a budget to exist (their
//! counts are invariants 2 and `budget_overshoot_bounded`).

use std::collections::{BTreeMap, BTreeSet};

use vigil::engine::event::{Event, EventKind};
use vigil::engine::pause::WhilePaused;
use vigil::engine::wakeup::{RefusalReason, WakeupSource};

use super::{violation, Violation};

const INVARIANT: &str = "refusal_reason_holds";

/// The documented order: the first reason that holds is the one given.
const ORDER: [RefusalReason; 8] = [
    RefusalReason::Terminated,
    RefusalReason::AgentError,
    RefusalReason::Paused,
    RefusalReason::DisabledSource,
    RefusalReason::BreakerOpen,
    RefusalReason::DailyCap,
    RefusalReason::Budget,
    RefusalReason::QueueFull,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaker {
    Closed,
    Open { until_ms: u64 },
    HalfOpen,
}

#[derive(Debug, Clone)]
struct Gate {
    tenant: String,
    sources: Vec<WakeupSource>,
    while_paused: WhilePaused,
    queued_runs_max: usize,
    has_cap: bool,
    has_budget: bool,
    terminated: bool,
    in_error: bool,
    paused_until_resumed: bool,
    timed_until_ms: Option<u64>,
    breaker: Breaker,
    /// Queued runs and their task keys.
    queued: BTreeMap<u64, Option<String>>,
}

/// A wakeup as the check sees it.
struct Asked<'a> {
    at_ms: u64,
    wakeup: u64,
    source: WakeupSource,
    task_key: Option<&'a Option<String>>,
}

#[derive(Debug, Default)]
pub struct RefusalOracle {
    agents: BTreeMap<u64, Gate>,
    /// The task key of every run queued so far (a re-queued run takes its original's).
    run_keys: BTreeMap<u64, Option<String>>,
    /// Tenants with a daily budget.
    budgeted_tenants: BTreeSet<String>,
    /// Wakeups judged, by what became of them (coverage).
    judged: BTreeMap<&'static str, u64>,
}

impl RefusalOracle {
    /// How many refusals (by reason) and acceptances were judged.
    pub fn judged(&self) -> &BTreeMap<&'static str, u64> {
        &self.judged
    }

    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        if let EventKind::TenantBudgetSet { daily_budget_usd } = &event.kind {
            match daily_budget_usd {
                Some(_) => self.budgeted_tenants.insert(event.tenant.to_string()),
                None => self.budgeted_tenants.remove(&event.tenant.to_string()),
            };
            return Ok(());
        }
        let Some(agent) = event.kind.agent() else {
            return Ok(());
        };
        if let EventKind::AgentCreated { spec, .. } = &event.kind {
            let gate = Gate {
                tenant: event.tenant.to_string(),
                sources: spec.heartbeat.sources.clone(),
                while_paused: spec.heartbeat.while_paused,
                queued_runs_max: spec.limits.queued_runs_max,
                has_cap: spec.limits.daily_cap.is_some(),
                has_budget: spec.limits.daily_budget_usd.is_some(),
                terminated: false,
                in_error: false,
                paused_until_resumed: false,
                timed_until_ms: None,
                breaker: Breaker::Closed,
                queued: BTreeMap::new(),
            };
            self.agents.insert(agent.0, gate);
            return Ok(());
        }
        if !self.agents.contains_key(&agent.0) {
            return Ok(());
        }
        if let EventKind::AgentUpdated { spec, .. } = &event.kind {
            // A changed spec's gates apply from the next decision (docs/api.md, PATCH).
            let gate = self.agents.get_mut(&agent.0).expect("checked above");
            gate.sources = spec.heartbeat.sources.clone();
            gate.while_paused = spec.heartbeat.while_paused;
            gate.queued_runs_max = spec.limits.queued_runs_max;
            gate.has_cap = spec.limits.daily_cap.is_some();
            gate.has_budget = spec.limits.daily_budget_usd.is_some();
            return Ok(());
        }
        self.judge(agent.0, event)?;
        self.fold(agent.0, event);
        Ok(())
    }

    /// Judges a wakeup event against the agent's state before it.
    fn judge(&mut self, agent: u64, event: &Event) -> Result<(), Violation> {
        let at_ms = event.at_ms;
        let (asked, given) = match &event.kind {
            EventKind::WakeupRefused {
                wakeup,
                source,
                task_key,
                refusal,
                ..
            } => {
                let asked = Asked {
                    at_ms,
                    wakeup: wakeup.0,
                    source: *source,
                    task_key: Some(task_key),
                };
                (asked, Some(*refusal))
            }
            EventKind::WakeupQueued {
                wakeup,
                source,
                task_key,
                ..
            } => {
                let asked = Asked {
                    at_ms,
                    wakeup: wakeup.0,
                    source: *source,
                    task_key: Some(task_key),
                };
                (asked, None)
            }
            // A coalesced wakeup joined a queued run of its key: the last three reasons never
            // apply to it.
            EventKind::WakeupCoalesced { wakeup, source, .. } => {
                let asked = Asked {
                    at_ms,
                    wakeup: wakeup.0,
                    source: *source,
                    task_key: None,
                };
                (asked, None)
            }
            _ => return Ok(()),
        };
        let gate = &self.agents[&agent];
        let holds = |reason| self.holds(gate, reason, &asked);
        let outcome = match given {
            Some(reason) => {
                if holds(reason) == Some(false) {
                    Err(format!("its condition does not hold"))
                } else if let Some(earlier) = ORDER
                    .iter()
                    .take_while(|r| **r != reason)
                    .find(|r| holds(**r) == Some(true))
                {
                    Err(format!("{earlier:?} holds and comes first"))
                } else {
                    Ok(())
                }
            }
            None => match ORDER.iter().find(|r| holds(**r) == Some(true)) {
                Some(reason) => Err(format!("{reason:?} holds")),
                None => Ok(()),
            },
        };
        let label = match given {
            Some(reason) => refusal_label(reason),
            None => "accepted",
        };
        *self.judged.entry(label).or_default() += 1;
        match outcome {
            Ok(()) => Ok(()),
            Err(why) => violation(
                INVARIANT,
                format!(
                    "wakeup {} ({:?}) of agent {agent} was {}, but {why}",
                    asked.wakeup,
                    asked.source,
                    given.map_or("accepted".to_string(), |r| format!("refused {r:?}"))
                ),
            ),
        }
    }

    /// Whether `reason` holds for `asked`: `None` when the oracle cannot tell.
    fn holds(&self, gate: &Gate, reason: RefusalReason, asked: &Asked) -> Option<bool> {
        // A wakeup whose task key has a queued run joins it: the last three never apply.
        let joins = match asked.task_key {
            None => true,
            Some(key) => gate.queued.values().any(|k| k == key),
        };
        match reason {
            RefusalReason::Terminated => Some(gate.terminated),
            RefusalReason::AgentError => Some(gate.in_error),
            RefusalReason::Paused => {
                let routine = matches!(asked.source, WakeupSource::Timer | WakeupSource::Idle);
                let refuses = routine || gate.while_paused == WhilePaused::RefuseAll;
                let timed = gate.timed_until_ms.is_some_and(|until| asked.at_ms < until);
                Some(gate.paused_until_resumed || (timed && refuses))
            }
            RefusalReason::DisabledSource => Some(!gate.sources.contains(&asked.source)),
            RefusalReason::BreakerOpen => match gate.breaker {
                Breaker::Closed => Some(false),
                Breaker::Open { until_ms } => Some(asked.at_ms < until_ms),
                Breaker::HalfOpen => None,
            },
            RefusalReason::DailyCap if !joins && gate.has_cap => None,
            RefusalReason::Budget
                if !joins && (gate.has_budget || self.budgeted_tenants.contains(&gate.tenant)) =>
            {
                None
            }
            RefusalReason::QueueFull if !joins => Some(gate.queued.len() >= gate.queued_runs_max),
            RefusalReason::DailyCap | RefusalReason::Budget | RefusalReason::QueueFull => {
                Some(false)
            }
        }
    }

    /// Folds what the event changes in the agent's gate.
    fn fold(&mut self, agent: u64, event: &Event) {
        let gate = self
            .agents
            .get_mut(&agent)
            .expect("judged agents are known");
        match &event.kind {
            EventKind::AgentPaused { until_ms: None, .. } => gate.paused_until_resumed = true,
            EventKind::AgentPaused {
                until_ms: Some(until),
                ..
            } => gate.timed_until_ms = Some(*until),
            EventKind::AgentResumed { .. } => {
                gate.paused_until_resumed = false;
                gate.timed_until_ms = None;
            }
            EventKind::AgentTerminated { .. } => gate.terminated = true,
            EventKind::AgentErrored { .. } => gate.in_error = true,
            EventKind::AgentErrorReset { .. } => gate.in_error = false,
            EventKind::BreakerOpened { until_ms, .. } => {
                gate.breaker = Breaker::Open {
                    until_ms: *until_ms,
                }
            }
            EventKind::BreakerHalfOpened { .. } => gate.breaker = Breaker::HalfOpen,
            EventKind::BreakerClosed { .. } | EventKind::BreakerReset { .. } => {
                gate.breaker = Breaker::Closed
            }
            EventKind::WakeupQueued { run, task_key, .. } => {
                gate.queued.insert(run.0, task_key.clone());
                self.run_keys.insert(run.0, task_key.clone());
            }
            EventKind::RunRequeued {
                run,
                retry_of,
                coalesced: false,
                ..
            } => {
                let key = self.run_keys.get(&retry_of.0).cloned().flatten();
                gate.queued.insert(run.0, key.clone());
                self.run_keys.insert(run.0, key);
            }
            EventKind::RunStarted { run, .. } | EventKind::RunFinished { run, .. } => {
                gate.queued.remove(&run.0);
            }
            _ => {}
        }
    }
}

fn refusal_label(reason: RefusalReason) -> &'static str {
    match reason {
        RefusalReason::Terminated => "refused_terminated",
        RefusalReason::AgentError => "refused_agent_error",
        RefusalReason::Paused => "refused_paused",
        RefusalReason::DisabledSource => "refused_disabled_source",
        RefusalReason::BreakerOpen => "refused_breaker_open",
        RefusalReason::DailyCap => "refused_daily_cap",
        RefusalReason::Budget => "refused_budget",
        RefusalReason::QueueFull => "refused_queue_full",
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::run::RunId;
    use vigil::engine::tenant::TokenHash;
    use vigil::engine::wakeup::WakeupId;

    use super::super::test_events::{event, run_started};
    use super::*;
    use RefusalReason::*;
    use WakeupSource::{Automation, OnDemand, Timer};

    fn created(sources: Vec<WakeupSource>, queued_runs_max: usize) -> Event {
        let mut spec = AgentSpec::with_interval("a", None);
        spec.heartbeat.sources = sources;
        spec.limits.queued_runs_max = queued_runs_max;
        event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "a".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::of("a"),
                first_fire_at_ms: None,
            },
        )
    }

    fn refused(
        at_ms: u64,
        source: WakeupSource,
        key: Option<&str>,
        refusal: RefusalReason,
    ) -> Event {
        event(
            at_ms,
            EventKind::WakeupRefused {
                wakeup: WakeupId(at_ms),
                agent: AgentId(1),
                source,
                requested_by: None,
                trigger_detail: None,
                reason: String::new(),
                task_key: key.map(str::to_string),
                idempotency_key: None,
                refusal,
            },
        )
    }

    fn queued(at_ms: u64, source: WakeupSource, key: Option<&str>, run: u64) -> Event {
        event(
            at_ms,
            EventKind::WakeupQueued {
                wakeup: WakeupId(at_ms),
                agent: AgentId(1),
                source,
                requested_by: None,
                trigger_detail: None,
                reason: String::new(),
                payload: serde_json::Value::Null,
                task_key: key.map(str::to_string),
                idempotency_key: None,
                run: RunId(run),
            },
        )
    }

    fn agent_event(at_ms: u64, kind: EventKind) -> Event {
        event(at_ms, kind)
    }

    /// An agent that takes `on_demand` and `timer` and queues at most one run, then `events`.
    fn judge(events: &[Event]) -> Result<(), Violation> {
        let mut oracle = RefusalOracle::default();
        oracle.committed(&created(vec![OnDemand, Timer], 1))?;
        events.iter().try_for_each(|e| oracle.committed(e))
    }

    fn broken(result: Result<(), Violation>) -> &'static str {
        result.expect_err("a violation").invariant
    }

    #[test]
    fn the_queue_the_source_and_termination() {
        // One run runs, one is queued for key k: the queue is full for another key, not for k.
        let busy = [
            queued(1, OnDemand, None, 1),
            run_started(1, 1, 1),
            queued(2, OnDemand, Some("k"), 2),
        ];
        let with = |more: Event| busy.iter().cloned().chain([more]).collect::<Vec<_>>();
        assert!(judge(&with(refused(3, OnDemand, Some("j"), QueueFull))).is_ok());
        assert_eq!(
            broken(judge(&with(refused(3, OnDemand, Some("k"), QueueFull)))),
            INVARIANT
        );
        assert_eq!(
            broken(judge(&with(queued(3, OnDemand, Some("j"), 3)))),
            INVARIANT
        );
        assert_eq!(
            broken(judge(&[refused(1, OnDemand, None, QueueFull)])),
            INVARIANT
        );
        // An unlisted source comes before the queue, and only an unlisted one.
        assert!(judge(&with(refused(3, Automation, Some("j"), DisabledSource))).is_ok());
        assert_eq!(
            broken(judge(&with(refused(3, Automation, Some("j"), QueueFull)))),
            INVARIANT
        );
        assert_eq!(
            broken(judge(&[refused(1, OnDemand, None, DisabledSource)])),
            INVARIANT
        );
        assert_eq!(broken(judge(&[queued(1, Automation, None, 1)])), INVARIANT);
        // Terminated first, and only when terminated.
        let terminated = agent_event(1, EventKind::AgentTerminated { agent: AgentId(1) });
        assert!(judge(&[terminated.clone(), refused(2, Automation, None, Terminated)]).is_ok());
        assert_eq!(
            broken(judge(&[
                terminated,
                refused(2, Automation, None, DisabledSource)
            ])),
            INVARIANT
        );
        assert_eq!(
            broken(judge(&[refused(1, OnDemand, None, Terminated)])),
            INVARIANT
        );
    }

    #[test]
    fn pauses_the_error_state_and_the_breaker_in_their_order() {
        use vigil::engine::agent_error::AgentErrorReason;
        use vigil::engine::breaker::FailureCause;
        use vigil::engine::pause::PausedBy;
        let timed = agent_event(
            1,
            EventKind::AgentPaused {
                agent: AgentId(1),
                until_ms: Some(100),
                by: PausedBy::Agent,
            },
        );
        // A timed pause refuses timer wakeups while in force, and on-demand ones not at all.
        assert!(judge(&[timed.clone(), refused(50, Timer, None, Paused)]).is_ok());
        assert_eq!(
            broken(judge(&[timed.clone(), refused(100, Timer, None, Paused)])),
            INVARIANT
        );
        assert_eq!(
            broken(judge(&[timed.clone(), refused(50, OnDemand, None, Paused)])),
            INVARIANT
        );
        assert_eq!(
            broken(judge(&[timed.clone(), queued(50, Timer, None, 1)])),
            INVARIANT
        );
        assert!(judge(&[timed.clone(), queued(50, OnDemand, None, 1)]).is_ok());
        // The paused agent's unlisted source says `paused`: it comes first.
        assert_eq!(
            broken(judge(&[timed, refused(50, Timer, None, DisabledSource)])),
            INVARIANT
        );
        // The error state before the pause; not outside it.
        let errored = agent_event(
            1,
            EventKind::AgentErrored {
                agent: AgentId(1),
                reason: AgentErrorReason::RestartLoop,
                count: 3,
            },
        );
        assert!(judge(&[errored.clone(), refused(2, OnDemand, None, AgentError)]).is_ok());
        assert_eq!(
            broken(judge(&[
                errored,
                refused(2, Automation, None, DisabledSource)
            ])),
            INVARIANT
        );
        assert_eq!(
            broken(judge(&[refused(2, OnDemand, None, AgentError)])),
            INVARIANT
        );
        // An open breaker refuses until its instant; a closed one never.
        let open = agent_event(
            1,
            EventKind::BreakerOpened {
                agent: AgentId(1),
                trigger: FailureCause::Llm,
                until_ms: 100,
                cooldown_ms: 99,
            },
        );
        assert!(judge(&[open.clone(), refused(50, OnDemand, None, BreakerOpen)]).is_ok());
        assert_eq!(
            broken(judge(&[open.clone(), queued(50, OnDemand, None, 1)])),
            INVARIANT
        );
        assert_eq!(
            broken(judge(&[open, refused(150, OnDemand, None, BreakerOpen)])),
            INVARIANT
        );
        assert_eq!(
            broken(judge(&[refused(1, OnDemand, None, BreakerOpen)])),
            INVARIANT
        );
    }
}
