//! Committed events for the oracle's unit tests: the envelope and the run lifecycle, with only
//! what a check reads filled in.

use vigil::engine::agent::AgentId;
use vigil::engine::daily_cap::LocalDay;
use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::{RunId, RunStatus};

/// `kind` committed at wall time `at_ms` in tenant `default`.
pub fn event(at_ms: u64, kind: EventKind) -> Event {
    Event {
        seq: 0,
        at_ms,
        tenant: "default".into(),
        kind,
    }
}

/// Run `run` of `agent` started at `at_ms`.
pub fn run_started(at_ms: u64, run: u64, agent: u64) -> Event {
    event(
        at_ms,
        EventKind::RunStarted {
            run: RunId(run),
            agent: AgentId(agent),
            run_number: run,
            day: LocalDay(0),
        },
    )
}

/// Run `run` of `agent` succeeded at `at_ms`.
pub fn run_finished(at_ms: u64, run: u64, agent: u64) -> Event {
    event(
        at_ms,
        EventKind::RunFinished {
            run: RunId(run),
            agent: AgentId(agent),
            status: RunStatus::Succeeded,
            detail: String::new(),
            cause: None,
            stop_reason: None,
            report: None,
            error_class: None,
        },
    )
}
