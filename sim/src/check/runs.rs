//! The coordinator's invariants, judged from committed events and API answers alone
//! (docs/invariants.md, invariants 1, 4, 5 and 6).

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::RunStatus;

use super::documented::{CONTROL_PLANE_RESTART, IDEMPOTENCY_TTL_MS};
use super::{violation, Violation};

#[derive(Debug, Clone, PartialEq, Eq)]
enum RunState {
    Queued,
    Running,
    Ended { status: RunStatus, detail: String },
}

#[derive(Debug, Clone)]
struct RunSeen {
    agent: u64,
    task_key: Option<String>,
    state: RunState,
    /// Virtual ms at which the run was queued.
    queued_t_ms: u64,
    retry_of: Option<u64>,
}

/// What the oracle has seen of wakeups and runs.
#[derive(Debug, Default)]
pub struct RunsOracle {
    runs: BTreeMap<u64, RunSeen>,
    /// The running run of each agent (invariant 1).
    running: BTreeMap<u64, u64>,
    /// The queued run of each (agent, task key) (invariant 6).
    queued_by_key: BTreeMap<(u64, Option<String>), u64>,
    /// (agent, idempotency key) -> (wakeup, node wall ms when first recorded).
    keys: BTreeMap<(u64, String), (u64, u64)>,
    /// Per agent, the latest node wall ms of a keyed wakeup: a key expires for good once this
    /// passes its first use + TTL (a backward clock jump does not revive it).
    keys_clock: BTreeMap<u64, u64>,
    /// Every wakeup id in the durable log, with its idempotency key and the node's wall ms
    /// when it was recorded.
    wakeups: BTreeMap<u64, (Option<String>, u64)>,
    /// (agent, idempotency key) -> the wakeup the API answered with last, and the node's wall ms
    /// when that wakeup was recorded.
    acked_keys: BTreeMap<(u64, String), (u64, u64)>,
}

impl RunsOracle {
    /// Checks one durable event at virtual `t_ms`.
    pub fn committed(&mut self, t_ms: u64, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::WakeupQueued {
                wakeup,
                agent,
                task_key,
                idempotency_key,
                run,
                ..
            } => {
                self.wakeup(agent.0, wakeup.0, idempotency_key, event.at_ms)?;
                if let Some(other) = self.queued_by_key.get(&(agent.0, task_key.clone())) {
                    return violation(
                        "duplicates_coalesce",
                        format!(
                            "wakeup {wakeup} queued run {run} for agent {agent} task key {task_key:?} while run {other} was queued for it"
                        ),
                    );
                }
                self.queue(t_ms, agent.0, run.0, task_key.clone(), None)
            }
            EventKind::WakeupCoalesced {
                wakeup,
                agent,
                idempotency_key,
                run,
                ..
            } => {
                self.wakeup(agent.0, wakeup.0, idempotency_key, event.at_ms)?;
                self.expect_queued(run.0, "coalesced onto")
            }
            EventKind::WakeupRefused {
                wakeup,
                agent,
                idempotency_key,
                ..
            } => self.wakeup(agent.0, wakeup.0, idempotency_key, event.at_ms),
            EventKind::RunRequeued {
                run,
                agent,
                retry_of,
                coalesced,
            } => {
                let Some(old) = self.runs.get(&retry_of.0) else {
                    return violation(
                        "wakeup_reaches_one_terminal",
                        format!("run {retry_of} re-queued but never seen"),
                    );
                };
                let restarted = matches!(&old.state, RunState::Ended { status: RunStatus::Failed, detail } if detail == CONTROL_PLANE_RESTART);
                if !restarted || old.retry_of.is_some() {
                    return violation(
                        "wakeup_reaches_one_terminal",
                        format!("run {retry_of} re-queued as {run} but it {:?} (retry of {:?}): a wakeup runs again only once, after a control-plane restart", old.state, old.retry_of),
                    );
                }
                if *coalesced {
                    self.expect_queued(run.0, "re-queued onto")
                } else {
                    let task_key = old.task_key.clone();
                    if self
                        .queued_by_key
                        .contains_key(&(agent.0, task_key.clone()))
                    {
                        return violation("duplicates_coalesce", format!("re-queue of run {retry_of} made a second queued run for task key {task_key:?}"));
                    }
                    self.queue(t_ms, agent.0, run.0, task_key, Some(retry_of.0))
                }
            }
            EventKind::RunStarted { run, agent, .. } => {
                if let Some(other) = self.running.get(&agent.0) {
                    return violation(
                        "one_active_run",
                        format!("agent {agent} started run {run} while run {other} was running"),
                    );
                }
                let Some(seen) = self.runs.get_mut(&run.0) else {
                    return violation(
                        "wakeup_reaches_one_terminal",
                        format!("run {run} started but was never queued"),
                    );
                };
                if seen.state != RunState::Queued {
                    return violation(
                        "wakeup_reaches_one_terminal",
                        format!(
                            "run {run} started from state {:?}: a run executes once",
                            seen.state
                        ),
                    );
                }
                seen.state = RunState::Running;
                self.queued_by_key
                    .remove(&(seen.agent, seen.task_key.clone()));
                self.running.insert(agent.0, run.0);
                Ok(())
            }
            EventKind::RunFinished {
                run,
                agent,
                status,
                detail,
                ..
            } => {
                let Some(seen) = self.runs.get_mut(&run.0) else {
                    return violation(
                        "wakeup_reaches_one_terminal",
                        format!("run {run} finished but was never queued"),
                    );
                };
                match seen.state {
                    RunState::Running => {
                        self.running.remove(&agent.0);
                    }
                    RunState::Queued => {
                        self.queued_by_key
                            .remove(&(seen.agent, seen.task_key.clone()));
                    }
                    RunState::Ended { .. } => {
                        return violation(
                            "wakeup_reaches_one_terminal",
                            format!(
                                "run {run} reached a second terminal state {status:?} after {:?}",
                                seen.state
                            ),
                        )
                    }
                }
                seen.state = RunState::Ended {
                    status: *status,
                    detail: detail.clone(),
                };
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn wakeup(
        &mut self,
        agent: u64,
        wakeup: u64,
        key: &Option<String>,
        at_ms: u64,
    ) -> Result<(), Violation> {
        if self.wakeups.insert(wakeup, (key.clone(), at_ms)).is_some() {
            return violation(
                "wakeup_reaches_one_terminal",
                format!("wakeup id {wakeup} recorded twice"),
            );
        }
        let Some(key) = key else {
            return Ok(());
        };
        let clock_ms = self.keys_clock.entry(agent).or_default();
        let seen_ms = at_ms.max(*clock_ms);
        *clock_ms = seen_ms;
        if let Some(&(first, first_at_ms)) = self.keys.get(&(agent, key.clone())) {
            // The runtime honours a key until its wall clock has read first use + TTL.
            if seen_ms < first_at_ms.saturating_add(IDEMPOTENCY_TTL_MS) {
                return violation(
                    "idempotency_honoured",
                    format!("agent {agent} recorded wakeup {wakeup} with idempotency key {key:?}, already used by wakeup {first} at wall {first_at_ms} (now {at_ms})"),
                );
            }
        }
        self.keys.insert((agent, key.clone()), (wakeup, at_ms));
        Ok(())
    }

    fn queue(
        &mut self,
        t_ms: u64,
        agent: u64,
        run: u64,
        task_key: Option<String>,
        retry_of: Option<u64>,
    ) -> Result<(), Violation> {
        if self.runs.contains_key(&run) {
            return violation(
                "wakeup_reaches_one_terminal",
                format!("run id {run} queued twice"),
            );
        }
        self.queued_by_key.insert((agent, task_key.clone()), run);
        self.runs.insert(
            run,
            RunSeen {
                agent,
                task_key,
                state: RunState::Queued,
                queued_t_ms: t_ms,
                retry_of,
            },
        );
        Ok(())
    }

    fn expect_queued(&self, run: u64, what: &str) -> Result<(), Violation> {
        match self.runs.get(&run).map(|r| &r.state) {
            Some(RunState::Queued) => Ok(()),
            state => violation(
                "duplicates_coalesce",
                format!("a wakeup {what} run {run}, which is {state:?}, not queued"),
            ),
        }
    }

    /// Checks an API answer to a wakeup (invariants 4 and 6).
    pub fn acked_wakeup(
        &mut self,
        agent: u64,
        wakeup: u64,
        key: &Option<String>,
    ) -> Result<(), Violation> {
        let Some((recorded_key, wall_ms)) = self.wakeups.get(&wakeup).cloned() else {
            return violation(
                "acked_writes_survive",
                format!("API answered wakeup {wakeup} for agent {agent}, which is not in the durable log"),
            );
        };
        let Some(key) = key else {
            return Ok(());
        };
        if recorded_key.as_ref() != Some(key) {
            return violation(
                "idempotency_honoured",
                format!("a wakeup with idempotency key {key:?} of agent {agent} was answered with wakeup {wakeup}, recorded with key {recorded_key:?}"),
            );
        }
        // Every answer for a key names the same wakeup, until the key expired on the node's
        // wall clock: a different wakeup must have been recorded a TTL or more after the first.
        match self.acked_keys.get(&(agent, key.clone())) {
            Some(&(first, first_wall_ms))
                if first != wakeup && wall_ms < first_wall_ms + IDEMPOTENCY_TTL_MS =>
            {
                violation(
                    "idempotency_honoured",
                    format!("idempotency key {key:?} of agent {agent} was answered with wakeup {first} (recorded at wall {first_wall_ms}), now with wakeup {wakeup} (recorded at wall {wall_ms}), within the key's TTL"),
                )
            }
            Some(&(first, _)) if first != wakeup => {
                self.acked_keys
                    .insert((agent, key.clone()), (wakeup, wall_ms));
                Ok(())
            }
            Some(_) => Ok(()),
            None => {
                self.acked_keys
                    .insert((agent, key.clone()), (wakeup, wall_ms));
                Ok(())
            }
        }
    }

    /// Liveness at the end of a run: every run queued before the quiet phase began at
    /// `quiet_since_ms` reached a terminal state (invariant 5).
    pub fn finish(&self, quiet_since_ms: u64) -> Result<(), Violation> {
        let stuck = self.runs.iter().find(|(_, r)| {
            r.queued_t_ms < quiet_since_ms && !matches!(r.state, RunState::Ended { .. })
        });
        match stuck {
            Some((run, seen)) => violation(
                "wakeup_reaches_one_terminal",
                format!(
                    "run {run} of agent {} queued at t={} ms is still {:?} at the end of the quiet phase",
                    seen.agent, seen.queued_t_ms, seen.state
                ),
            ),
            None => Ok(()),
        }
    }

    /// Runs that reached a terminal state, by status name (for result summaries and tests).
    pub fn ended(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for run in self.runs.values() {
            if let RunState::Ended { status, .. } = &run.state {
                *counts.entry(status.as_str()).or_default() += 1;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::AgentId;
    use vigil::engine::run::RunId;
    use vigil::engine::wakeup::{RefusalReason, WakeupId, WakeupSource};

    use super::*;

    fn event(kind: EventKind) -> Event {
        Event {
            seq: 0,
            at_ms: 1_000,
            tenant: "default".into(),
            kind,
        }
    }

    fn queued(wakeup: u64, run: u64, task_key: Option<&str>, key: Option<&str>) -> Event {
        event(EventKind::WakeupQueued {
            requested_by: None,
            trigger_detail: None,
            wakeup: WakeupId(wakeup),
            agent: AgentId(1),
            source: WakeupSource::OnDemand,
            reason: String::new(),
            payload: serde_json::Value::Null,
            task_key: task_key.map(str::to_string),
            idempotency_key: key.map(str::to_string),
            run: RunId(run),
        })
    }

    fn started(run: u64) -> Event {
        event(EventKind::RunStarted {
            run: RunId(run),
            agent: AgentId(1),
            run_number: 0,
            day: vigil::engine::daily_cap::LocalDay(0),
        })
    }

    fn finished(run: u64, status: RunStatus, detail: &str) -> Event {
        event(EventKind::RunFinished {
            run: RunId(run),
            agent: AgentId(1),
            status,
            detail: detail.into(),
            cause: None,
            stop_reason: None,
            report: None,
            error_class: None,
        })
    }

    fn invariant(result: Result<(), Violation>) -> &'static str {
        result.expect_err("a violation").invariant
    }

    #[test]
    fn two_running_runs_of_one_agent_are_caught() {
        let mut oracle = RunsOracle::default();
        oracle.committed(0, &queued(1, 1, Some("a"), None)).unwrap();
        oracle.committed(0, &queued(2, 2, Some("b"), None)).unwrap();
        oracle.committed(0, &started(1)).unwrap();
        assert_eq!(
            invariant(oracle.committed(0, &started(2))),
            "one_active_run"
        );
    }

    #[test]
    fn a_second_queued_run_for_one_task_key_is_caught() {
        let mut oracle = RunsOracle::default();
        oracle.committed(0, &queued(1, 1, Some("a"), None)).unwrap();
        assert_eq!(
            invariant(oracle.committed(0, &queued(2, 2, Some("a"), None))),
            "duplicates_coalesce"
        );
    }

    #[test]
    fn a_key_reused_within_its_ttl_is_caught_in_the_log_and_in_answers() {
        let mut oracle = RunsOracle::default();
        oracle.committed(0, &queued(1, 1, None, Some("k"))).unwrap();
        let refused = event(EventKind::WakeupRefused {
            requested_by: None,
            trigger_detail: None,
            wakeup: WakeupId(2),
            agent: AgentId(1),
            source: WakeupSource::OnDemand,
            reason: String::new(),
            task_key: None,
            idempotency_key: Some("k".into()),
            refusal: RefusalReason::QueueFull,
        });
        assert_eq!(
            invariant(oracle.committed(0, &refused)),
            "idempotency_honoured"
        );

        let mut oracle = RunsOracle::default();
        oracle.committed(0, &queued(1, 1, None, Some("k"))).unwrap();
        oracle.committed(0, &queued(2, 2, Some("x"), None)).unwrap();
        let key = Some("k".to_string());
        oracle.acked_wakeup(1, 1, &key).unwrap();
        assert_eq!(
            invariant(oracle.acked_wakeup(1, 2, &key)),
            "idempotency_honoured"
        );
    }

    #[test]
    fn a_key_answered_anew_after_it_expired_on_the_wall_clock_is_fine() {
        let mut oracle = RunsOracle::default();
        let key = Some("k".to_string());
        let at = |wall_ms: u64, kind: EventKind| Event {
            at_ms: wall_ms,
            ..event(kind)
        };
        oracle
            .committed(0, &at(1_000, queued(1, 1, None, Some("k")).kind))
            .unwrap();
        oracle.acked_wakeup(1, 1, &key).unwrap();
        // A catch-up leap: the node's wall clock passed first use + TTL within virtual minutes.
        let later = 1_000 + IDEMPOTENCY_TTL_MS;
        oracle
            .committed(60_000, &at(later, queued(2, 2, Some("t"), Some("k")).kind))
            .unwrap();
        oracle.acked_wakeup(1, 2, &key).unwrap();
        // But an answer naming the first wakeup again, now that the key names the second, is not.
        assert_eq!(
            invariant(oracle.acked_wakeup(1, 1, &key)),
            "idempotency_honoured"
        );
    }

    #[test]
    fn an_answer_for_a_wakeup_not_in_the_log_is_caught() {
        let mut oracle = RunsOracle::default();
        assert_eq!(
            invariant(oracle.acked_wakeup(1, 9, &None)),
            "acked_writes_survive"
        );
    }

    #[test]
    fn a_run_ending_twice_or_starting_after_its_end_is_caught() {
        let mut oracle = RunsOracle::default();
        oracle.committed(0, &queued(1, 1, None, None)).unwrap();
        oracle.committed(0, &started(1)).unwrap();
        oracle
            .committed(0, &finished(1, RunStatus::Succeeded, ""))
            .unwrap();
        assert_eq!(
            invariant(oracle.committed(0, &finished(1, RunStatus::Failed, ""))),
            "wakeup_reaches_one_terminal"
        );
        assert_eq!(
            invariant(oracle.committed(0, &started(1))),
            "wakeup_reaches_one_terminal"
        );
    }

    #[test]
    fn a_requeue_is_allowed_once_and_only_after_a_restart() {
        let requeue = |run, retry_of| {
            event(EventKind::RunRequeued {
                run: RunId(run),
                agent: AgentId(1),
                retry_of: RunId(retry_of),
                coalesced: false,
            })
        };
        let mut oracle = RunsOracle::default();
        oracle.committed(0, &queued(1, 1, None, None)).unwrap();
        oracle.committed(0, &started(1)).unwrap();
        oracle
            .committed(0, &finished(1, RunStatus::Failed, "boom"))
            .unwrap();
        assert_eq!(
            invariant(oracle.committed(0, &requeue(2, 1))),
            "wakeup_reaches_one_terminal"
        );

        let mut oracle = RunsOracle::default();
        oracle.committed(0, &queued(1, 1, None, None)).unwrap();
        oracle.committed(0, &started(1)).unwrap();
        oracle
            .committed(0, &finished(1, RunStatus::Failed, CONTROL_PLANE_RESTART))
            .unwrap();
        oracle.committed(0, &requeue(2, 1)).unwrap();
        oracle.committed(0, &started(2)).unwrap();
        oracle
            .committed(0, &finished(2, RunStatus::Failed, CONTROL_PLANE_RESTART))
            .unwrap();
        assert_eq!(
            invariant(oracle.committed(0, &requeue(3, 2))),
            "wakeup_reaches_one_terminal"
        );
    }

    #[test]
    fn a_run_queued_before_the_quiet_phase_must_end_within_it() {
        let mut oracle = RunsOracle::default();
        oracle.committed(100, &queued(1, 1, None, None)).unwrap();
        oracle.committed(100, &started(1)).unwrap();
        oracle
            .committed(500, &queued(2, 2, Some("late"), None))
            .unwrap();
        // Run 2 was queued after the quiet phase began: it may still be going.
        assert_eq!(invariant(oracle.finish(200)), "wakeup_reaches_one_terminal");
        oracle
            .committed(600, &finished(1, RunStatus::Succeeded, ""))
            .unwrap();
        oracle.finish(200).unwrap();
    }
}
