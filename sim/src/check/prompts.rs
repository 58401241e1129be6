//! Invariant 38, `wakeup_prompt_as_queued`, judged on what the simulated provider *received*:
//! a model call of a run whose agent has no wakeup template of its own carries the built-in
//! wakeup prompt (docs/agents.md), naming the run's source and reason as the log recorded them.
//! The run's source is that of the wakeup that queued it; its reason that of the latest wakeup
//! it absorbed (docs/api.md, the run's fields); a run re-queued after a restart keeps its
//! original's. An empty reason reads `(none given)`.
//!
//! Only what the prompt's first two lines say is judged: the local time, the runs left and the
//! payload are the runtime's to format. Source names are restated here from docs/api.md, not
//! taken from the runtime.

use std::collections::{BTreeMap, BTreeSet};

use vigil::engine::agent::AdapterSpec;
use vigil::engine::event::{Event, EventKind};
use vigil::engine::wakeup::WakeupSource;

use super::{violation, Violation};
use crate::trace::WakeSeen;

/// What the built-in wakeup prompt says for an empty reason (docs/agents.md).
const NO_REASON: &str = "(none given)";

/// A wakeup source's name on the wire and in prompts (docs/api.md).
fn source_name(source: WakeupSource) -> &'static str {
    match source {
        WakeupSource::Timer => "timer",
        WakeupSource::Idle => "idle",
        WakeupSource::Assignment => "assignment",
        WakeupSource::OnDemand => "on_demand",
        WakeupSource::Automation => "automation",
        WakeupSource::Predicate => "predicate",
    }
}

#[derive(Debug, Default)]
pub struct PromptsOracle {
    /// Runs not yet finished: their source and current reason.
    runs: BTreeMap<u64, (WakeupSource, String)>,
    /// Finished runs' source and reason, kept only until a re-queue may ask for them (the run
    /// that just finished, per agent).
    last_finished: BTreeMap<u64, (u64, (WakeupSource, String))>,
    /// Agents whose spec has wakeup templates of its own (their prompts are not judged).
    own_templates: BTreeSet<u64>,
    /// Model calls judged.
    judged: u64,
}

impl PromptsOracle {
    /// Follows the committed events that set a run's source and reason, and agents' specs.
    pub fn committed(&mut self, event: &Event) {
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. }
            | EventKind::AgentUpdated { agent, spec, .. } => {
                let own = matches!(&spec.adapter, AdapterSpec::Llm(llm) if !llm.prompts.wakeup.is_empty());
                if own {
                    self.own_templates.insert(agent.0);
                } else {
                    self.own_templates.remove(&agent.0);
                }
            }
            EventKind::WakeupQueued {
                run,
                source,
                reason,
                ..
            } => {
                self.runs.insert(run.0, (*source, reason.clone()));
            }
            EventKind::WakeupCoalesced { run, reason, .. } => {
                if let Some((_, current)) = self.runs.get_mut(&run.0) {
                    current.clone_from(reason);
                }
            }
            EventKind::RunRequeued {
                run,
                agent,
                retry_of,
                coalesced: false,
            } => {
                if let Some((finished, original)) = self.last_finished.get(&agent.0) {
                    if *finished == retry_of.0 {
                        self.runs.insert(run.0, original.clone());
                    }
                }
            }
            EventKind::RunFinished { run, agent, .. } => {
                if let Some(info) = self.runs.remove(&run.0) {
                    self.last_finished.insert(agent.0, (run.0, info));
                }
            }
            _ => {}
        }
    }

    /// Judges one model call the provider served for `agent`'s `run` (from the system prompt's
    /// marker), whose wakeup message it read as `wake`.
    pub fn served(
        &mut self,
        agent: Option<u64>,
        run: Option<u64>,
        wake: Option<&WakeSeen>,
    ) -> Result<(), Violation> {
        let (Some(agent), Some(run)) = (agent, run) else {
            return Ok(());
        };
        if self.own_templates.contains(&agent) {
            return Ok(());
        }
        // A call that arrives after its run ended (the executions checks bound how late) has
        // nothing left to compare with.
        let Some((source, reason)) = self.runs.get(&run) else {
            return Ok(());
        };
        self.judged += 1;
        let expected_reason = if reason.is_empty() { NO_REASON } else { reason };
        match wake {
            Some(seen) if seen.source == source_name(*source) && seen.reason == expected_reason => {
                Ok(())
            }
            _ => violation(
                "wakeup_prompt_as_queued",
                format!("agent {agent} run {run}: the model was sent {wake:?} as the built-in wakeup prompt; the run was queued by source {} with reason {expected_reason:?}", source_name(*source)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::AgentId;
    use vigil::engine::run::{RunId, RunStatus};
    use vigil::engine::wakeup::WakeupId;

    use super::*;
    use crate::check::test_events::event;

    fn queued(run: u64, source: WakeupSource, reason: &str) -> Event {
        event(
            0,
            EventKind::WakeupQueued {
                wakeup: WakeupId(run),
                agent: AgentId(1),
                source,
                reason: reason.into(),
                payload: serde_json::Value::Null,
                task_key: None,
                idempotency_key: None,
                requested_by: None,
                trigger_detail: None,
                run: RunId(run),
            },
        )
    }

    fn seen(source: &str, reason: &str) -> WakeSeen {
        WakeSeen {
            source: source.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn a_prompt_naming_another_source_or_reason_or_none_is_reported() {
        let mut oracle = PromptsOracle::default();
        oracle.committed(&queued(5, WakeupSource::OnDemand, "look at ticket 8"));
        oracle.committed(&queued(6, WakeupSource::Timer, ""));
        let kept = [
            (5, seen("on_demand", "look at ticket 8")),
            (6, seen("timer", NO_REASON)),
        ];
        for (run, wake) in &kept {
            oracle
                .served(Some(1), Some(*run), Some(wake))
                .expect("as queued");
        }
        let broken = [
            (5, Some(seen("timer", "look at ticket 8"))),
            (5, Some(seen("on_demand", "look at ticket"))),
            (6, Some(seen("timer", ""))),
            (6, None),
        ];
        for (run, wake) in &broken {
            let error = oracle
                .served(Some(1), Some(*run), wake.as_ref())
                .unwrap_err();
            assert_eq!(error.invariant, "wakeup_prompt_as_queued", "{run} {wake:?}");
        }
        assert_eq!(oracle.judged, 6);
    }

    #[test]
    fn a_coalesced_reason_and_a_requeued_run_are_followed() {
        let mut oracle = PromptsOracle::default();
        oracle.committed(&queued(5, WakeupSource::Automation, "first"));
        oracle.committed(&event(
            0,
            EventKind::WakeupCoalesced {
                wakeup: WakeupId(9),
                agent: AgentId(1),
                source: WakeupSource::OnDemand,
                reason: "second".into(),
                payload: serde_json::Value::Null,
                idempotency_key: None,
                requested_by: None,
                trigger_detail: None,
                run: RunId(5),
                coalesced_count: 1,
            },
        ));
        let first = seen("automation", "first");
        assert!(oracle.served(Some(1), Some(5), Some(&first)).is_err());
        let second = seen("automation", "second");
        oracle
            .served(Some(1), Some(5), Some(&second))
            .expect("the latest reason, the first source");
        let mut finished = crate::check::test_events::run_finished(0, 5, 1);
        if let EventKind::RunFinished { status, .. } = &mut finished.kind {
            *status = RunStatus::Failed;
        }
        oracle.committed(&finished);
        oracle.committed(&event(
            0,
            EventKind::RunRequeued {
                run: RunId(7),
                agent: AgentId(1),
                retry_of: RunId(5),
                coalesced: false,
            },
        ));
        oracle
            .served(Some(1), Some(7), Some(&second))
            .expect("the re-queued run keeps its original's");
        assert!(oracle.served(Some(1), Some(7), None).is_err());
    }
}
