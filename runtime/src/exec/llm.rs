//! The `llm` adapter: runs the agent loop (`agent_loop.rs`) against the provider an agent's
//! spec names, in the wire shape it speaks, with the agent's rendered prompts and its tools.

use super::adapter::{Adapter, AdapterFuture, AdapterOutcome, RunContext};
use super::agent_loop::{run_loop, Prompts};
use super::host::PosterToolHttp;
use super::prompt::{render_system, render_wakeup, PromptVars};
use std::sync::Arc;

use super::tools::{CompiledTools, Toolbox};
use crate::engine::breaker::FailureCause;
use crate::engine::llm_spec::LlmSpec;
use crate::engine::run::{RunStatus, StopReason};

/// Runs the agent loop.
#[derive(Debug, Clone)]
pub struct Llm {
    spec: Arc<LlmSpec>,
    /// The node's compiled tool lists (shared by every run of the node).
    tools: Arc<CompiledTools>,
}

impl Llm {
    pub fn new(spec: Arc<LlmSpec>, tools: Arc<CompiledTools>) -> Self {
        Llm { spec, tools }
    }
}

fn prompts(spec: &LlmSpec, run: &RunContext) -> Result<Prompts, String> {
    let vars = PromptVars::of_run(run);
    let templates = spec.prompt_spec();
    Ok(Prompts {
        system: render_system(&templates, &vars).map_err(|e| e.to_string())?,
        wakeup: render_wakeup(&templates, &vars).map_err(|e| e.to_string())?,
    })
}

/// A run that could not start its loop: a configuration problem, not the model's fault, so
/// the breaker does not count it.
fn not_started(detail: String) -> AdapterOutcome {
    AdapterOutcome {
        stop_reason: Some(StopReason::LlmError),
        ..AdapterOutcome::new(RunStatus::Failed, detail, None::<FailureCause>)
    }
}

impl Adapter for Llm {
    fn execute(&self, run: RunContext) -> AdapterFuture {
        let spec = self.spec.clone();
        let compiled = self.tools.clone();
        Box::pin(async move {
            let prompts = match prompts(&spec, &run) {
                Ok(prompts) => prompts,
                Err(error) => return not_started(error),
            };
            let redactor = run.transcript.redactor().clone();
            let http = Arc::new(PosterToolHttp(run.host.poster(), redactor));
            let tools = match Toolbox::cached(&spec.tools, http, &compiled) {
                Ok(tools) => tools,
                Err(error) => return not_started(error.to_string()),
            };
            run_loop(&spec, &run, prompts, &tools).await
        })
    }
}
