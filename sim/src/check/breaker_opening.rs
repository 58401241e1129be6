//! `breaker_opens_as_documented` (27): the breaker's counting and opening, restated from
//! docs/api.md ("The circuit breaker"), independently of the engine's counters:
//!
//! - while the breaker is closed, two counters count consecutive failures by the run's `cause`
//!   (`llm`, `tool`); a run that succeeds resets both; a run that ends without a cause (a
//!   cancellation, a control-plane restart) counts for neither;
//! - when a counter reaches the agent's `breaker.failures_to_open`, the breaker opens in that
//!   same decision, with that cause as its `trigger`: no run of the agent starts or ends, and no
//!   wakeup of it is queued, before `breaker_opened`;
//! - a closed breaker never opens otherwise.
//!
//! Invariant 20 (`breaker_cooldown_as_documented`) judges the cooldowns once it is open; this
//! judges whether and when it opens. Counters restart at zero when the breaker closes or is reset.

use std::collections::BTreeMap;

use vigil::engine::breaker::FailureCause;
use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::RunStatus;

use super::{violation, Violation};

const CHECK: &str = "breaker_opens_as_documented";

#[derive(Debug, Clone, Default)]
struct Counting {
    failures_to_open: u32,
    /// `None` while the breaker is open or half-open: nothing is counted then.
    closed: Option<(u32, u32)>,
    /// A counter reached the threshold at this run: the breaker must open, with this trigger,
    /// before anything else happens to the agent.
    due: Option<(FailureCause, u64)>,
}

#[derive(Debug, Default)]
pub struct OpeningOracle {
    agents: BTreeMap<u64, Counting>,
    /// Openings judged (a coverage figure).
    openings: u64,
}

impl OpeningOracle {
    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        if let EventKind::AgentCreated { agent, spec, .. } = &event.kind {
            let counting = Counting {
                failures_to_open: spec.breaker.failures_to_open,
                closed: Some((0, 0)),
                due: None,
            };
            self.agents.insert(agent.0, counting);
            return Ok(());
        }
        let Some(agent) = event.kind.agent() else {
            return Ok(());
        };
        let Some(a) = self.agents.get_mut(&agent.0) else {
            return Ok(());
        };
        if let EventKind::AgentUpdated { spec, .. } = &event.kind {
            // A new threshold applies from the next failure (docs/api.md, PATCH).
            a.failures_to_open = spec.breaker.failures_to_open;
            return Ok(());
        }
        if let Some((trigger, run)) = a.due {
            if overtakes_an_opening(&event.kind) {
                return violation(
                    CHECK,
                    format!(
                        "run {run} of agent {agent} was its {} {} failure in a row (breaker.failures_to_open = {}), yet {} came before the breaker opened",
                        a.failures_to_open,
                        cause_name(trigger),
                        a.failures_to_open,
                        event.kind.type_name()
                    ),
                );
            }
        }
        match &event.kind {
            EventKind::RunFinished {
                run, status, cause, ..
            } => a.run_finished(run.0, *status, *cause),
            EventKind::BreakerOpened { trigger, .. } => {
                self.openings += 1;
                return opened(agent.0, a, *trigger);
            }
            EventKind::BreakerHalfOpened { .. } => a.closed = None,
            EventKind::BreakerClosed { .. } | EventKind::BreakerReset { .. } => {
                a.closed = Some((0, 0));
                a.due = None;
            }
            _ => {}
        }
        Ok(())
    }

    /// Openings judged.
    pub fn openings(&self) -> u64 {
        self.openings
    }
}

impl Counting {
    fn run_finished(&mut self, run: u64, status: RunStatus, cause: Option<FailureCause>) {
        let Some((llm, tool)) = self.closed.as_mut() else {
            return;
        };
        let counter = match (status, cause) {
            (RunStatus::Succeeded, _) => {
                (*llm, *tool) = (0, 0);
                return;
            }
            (_, Some(FailureCause::Llm)) => llm,
            (_, Some(FailureCause::Tool)) => tool,
            (_, None) => return,
        };
        *counter += 1;
        if *counter >= self.failures_to_open {
            self.due = cause.map(|c| (c, run));
        }
    }
}

/// The breaker opened: from closed only when due, with the due trigger.
fn opened(agent: u64, a: &mut Counting, trigger: FailureCause) -> Result<(), Violation> {
    let was_closed = a.closed.is_some();
    let due = a.due.take();
    a.closed = None;
    if !was_closed {
        // A failed probe reopens it: the cooldown contract (20) judges that.
        return Ok(());
    }
    match due {
        Some((cause, _)) if cause == trigger => Ok(()),
        Some((cause, run)) => violation(
            CHECK,
            format!(
                "agent {agent}'s breaker opened on {} failures, but run {run} made {} the count that reached the threshold",
                cause_name(trigger),
                cause_name(cause)
            ),
        ),
        None => violation(
            CHECK,
            format!(
                "agent {agent}'s closed breaker opened ({} trigger) before any counter reached breaker.failures_to_open = {}",
                cause_name(trigger),
                a.failures_to_open
            ),
        ),
    }
}

/// Events that cannot come between the failure that reaches the threshold and the opening.
fn overtakes_an_opening(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::RunStarted { .. }
            | EventKind::RunFinished { .. }
            | EventKind::RunRequeued { .. }
            | EventKind::WakeupQueued { .. }
            | EventKind::WakeupCoalesced { .. }
            | EventKind::TimerFired { .. }
            | EventKind::IdleFired { .. }
    )
}

fn cause_name(cause: FailureCause) -> &'static str {
    match cause {
        FailureCause::Llm => "llm",
        FailureCause::Tool => "tool",
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::run::RunId;
    use vigil::engine::tenant::TokenHash;

    use super::super::test_events::{event, run_started};
    use super::*;

    fn created() -> Event {
        let mut spec = AgentSpec::with_interval("b", None);
        spec.breaker.failures_to_open = 2;
        event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "b".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::of("b"),
                first_fire_at_ms: None,
            },
        )
    }

    fn finished(run: u64, status: RunStatus, cause: Option<FailureCause>) -> Event {
        event(
            run * 10,
            EventKind::RunFinished {
                run: RunId(run),
                agent: AgentId(1),
                status,
                detail: String::new(),
                cause,
                stop_reason: None,
                report: None,
                error_class: None,
            },
        )
    }

    fn opened(trigger: FailureCause) -> Event {
        event(
            100,
            EventKind::BreakerOpened {
                agent: AgentId(1),
                trigger,
                until_ms: 1_000,
                cooldown_ms: 900,
            },
        )
    }

    fn run(oracle: &mut OpeningOracle, events: &[Event]) -> Result<(), Violation> {
        events.iter().try_for_each(|e| oracle.committed(e))
    }

    const LLM: Option<FailureCause> = Some(FailureCause::Llm);
    const TOOL: Option<FailureCause> = Some(FailureCause::Tool);

    #[test]
    fn an_opening_at_the_threshold_with_its_trigger_is_silent() {
        let mut oracle = OpeningOracle::default();
        let events = [
            created(),
            finished(1, RunStatus::Failed, LLM),
            finished(2, RunStatus::Failed, TOOL),
            finished(3, RunStatus::Cancelled, None),
            finished(4, RunStatus::Failed, LLM),
            opened(FailureCause::Llm),
        ];
        assert!(run(&mut oracle, &events).is_ok());
        assert_eq!(oracle.openings(), 1);
    }

    #[test]
    fn a_start_instead_of_the_due_opening_is_reported() {
        let mut oracle = OpeningOracle::default();
        let events = [
            created(),
            finished(1, RunStatus::Failed, TOOL),
            finished(2, RunStatus::TimedOut, TOOL),
            run_started(30, 3, 1),
        ];
        let broken = run(&mut oracle, &events).unwrap_err();
        assert_eq!(broken.invariant, CHECK);
    }

    #[test]
    fn an_opening_before_the_threshold_or_after_a_success_is_reported() {
        let mut oracle = OpeningOracle::default();
        let early = [
            created(),
            finished(1, RunStatus::Failed, LLM),
            opened(FailureCause::Llm),
        ];
        assert_eq!(run(&mut oracle, &early).unwrap_err().invariant, CHECK);
        let mut oracle = OpeningOracle::default();
        let reset = [
            created(),
            finished(1, RunStatus::Failed, LLM),
            finished(2, RunStatus::Succeeded, None),
            finished(3, RunStatus::Failed, LLM),
            opened(FailureCause::Llm),
        ];
        assert_eq!(run(&mut oracle, &reset).unwrap_err().invariant, CHECK);
    }

    #[test]
    fn an_opening_with_the_other_trigger_is_reported() {
        let mut oracle = OpeningOracle::default();
        let events = [
            created(),
            finished(1, RunStatus::Failed, TOOL),
            finished(2, RunStatus::Failed, TOOL),
            opened(FailureCause::Llm),
        ];
        assert_eq!(run(&mut oracle, &events).unwrap_err().invariant, CHECK);
    }

    #[test]
    fn a_failed_probe_reopens_without_counting_and_a_close_restarts_the_count() {
        let mut oracle = OpeningOracle::default();
        let half_open = event(200, EventKind::BreakerHalfOpened { agent: AgentId(1) });
        let closed = event(300, EventKind::BreakerClosed { agent: AgentId(1) });
        let events = [
            created(),
            finished(1, RunStatus::Failed, LLM),
            finished(2, RunStatus::Failed, LLM),
            opened(FailureCause::Llm),
            half_open,
            finished(3, RunStatus::Failed, TOOL),
            opened(FailureCause::Tool),
            closed,
            finished(4, RunStatus::Failed, LLM),
            run_started(50, 5, 1),
        ];
        assert!(run(&mut oracle, &events).is_ok());
    }
}
