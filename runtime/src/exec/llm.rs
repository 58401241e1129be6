//! The `llm` adapter: runs the agent loop (`agent_loop.rs`) against the provider an agent's
//! spec names, in the wire shape it speaks, with the agent's prompts and tools.

use super::adapter::{Adapter, AdapterFuture, RunContext};
use super::agent_loop::{run_loop, Prompts, ToolBox, ToolFuture, ToolOutcome};
use super::model::{ModelToolCall, ToolSchema};
use crate::engine::llm_spec::LlmSpec;
use crate::engine::pause;

/// The system prompt when the spec gives none.
const SYSTEM_PROMPT_DEFAULT: &str = "You are an autonomous agent woken by Vigil. Do what the wakeup asks, using your tools when they help. Call pause_heartbeats if you want to rest. Answer exactly [IDLE] if there is nothing to do.";

/// Runs the agent loop.
#[derive(Debug, Clone)]
pub struct Llm {
    spec: LlmSpec,
}

impl Llm {
    pub fn new(spec: LlmSpec) -> Self {
        Llm { spec }
    }
}

/// The wakeup as the model reads it.
fn wakeup_prompt(run: &RunContext) -> String {
    let mut text = format!("Wakeup ({}): {}", run.source.as_str(), run.reason);
    if !run.payload.is_null() {
        text.push_str(&format!("\n\nPayload: {}", run.payload));
    }
    text
}

impl Adapter for Llm {
    fn execute(&self, run: RunContext) -> AdapterFuture {
        let spec = self.spec.clone();
        Box::pin(async move {
            let prompts = Prompts {
                system: spec
                    .system_prompt
                    .clone()
                    .unwrap_or_else(|| SYSTEM_PROMPT_DEFAULT.into()),
                wakeup: wakeup_prompt(&run),
            };
            run_loop(&spec, &run, prompts, &BuiltinTools).await
        })
    }
}

/// The tools every agent has: `pause_heartbeats`.
struct BuiltinTools;

impl ToolBox for BuiltinTools {
    fn schemas(&self) -> Vec<ToolSchema> {
        vec![ToolSchema {
            name: "pause_heartbeats".into(),
            description: format!(
                "Rest: no timer or idle wakeups for `minutes` (default {}, {}..={}).",
                pause::PAUSE_HEARTBEATS_MINUTES_DEFAULT,
                pause::PAUSE_HEARTBEATS_MINUTES_MIN,
                pause::PAUSE_HEARTBEATS_MINUTES_MAX
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": { "minutes": { "type": "integer" } },
            }),
        }]
    }

    fn call<'a>(&'a self, call: &'a ModelToolCall, _: &'a RunContext) -> ToolFuture<'a> {
        Box::pin(async move {
            if call.name != "pause_heartbeats" {
                return ToolOutcome {
                    output: format!("no tool named {:?}; the tools are: pause_heartbeats", call.name),
                    is_error: true,
                    failed: false,
                    pause_minutes: None,
                };
            }
            let minutes = pause::heartbeat_pause_minutes(call.arguments["minutes"].as_u64());
            ToolOutcome {
                output: format!("paused for {minutes} minutes"),
                is_error: false,
                failed: false,
                pause_minutes: Some(minutes),
            }
        })
    }
}
