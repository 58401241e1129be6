//! The built-in `scripted` adapter: no external service, outcomes and durations from the agent's
//! policy. Run number `n` plays step `n % steps.len()`, so a script is deterministic across
//! restarts (the run number is in the `run_started` event).

use std::time::Duration;

use super::adapter::{Adapter, AdapterFuture, AdapterOutcome, RunContext};
use crate::engine::agent::{ScriptOutcome, ScriptedSpec};
use crate::engine::breaker::FailureCause;
use crate::engine::run::RunStatus;

/// Plays a script.
#[derive(Debug, Clone)]
pub struct Scripted {
    script: ScriptedSpec,
}

impl Scripted {
    pub fn new(script: ScriptedSpec) -> Self {
        assert!(!script.steps.is_empty(), "validated specs have steps");
        Scripted { script }
    }
}

impl Adapter for Scripted {
    fn execute(&self, run: RunContext) -> AdapterFuture {
        let index = (run.run_number % self.script.steps.len() as u64) as usize;
        let step = self.script.steps[index].clone();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(step.duration_ms)).await;
            let (status, cause) = match step.outcome {
                ScriptOutcome::Succeeded => (RunStatus::Succeeded, None),
                ScriptOutcome::Failed => (RunStatus::Failed, Some(FailureCause::Llm)),
                ScriptOutcome::ToolFailed => (RunStatus::Failed, Some(FailureCause::Tool)),
                ScriptOutcome::Hang => std::future::pending().await,
            };
            let detail = format!(
                "scripted step {index}: {:?} after {} ms",
                step.outcome, step.duration_ms
            );
            AdapterOutcome::new(status, detail, cause)
        })
    }
}
