//! The agent loop: one run of an `llm` agent. Build the context (system prompt, the agent's
//! bounded history, the wakeup), call the model, run the tool calls it asks for, append their
//! results, and repeat until the model ends its turn, at most `max_iterations` model calls and
//! `tool_calls_max` tool calls. Every way out is a typed [`StopReason`].
//!
//! Spend is recorded after every model call (an event per call, through the run host), and the
//! daily budget is checked before every call, so one run can overshoot its budget by at most the
//! one call that crossed it. The last call's spend (the model ended its turn) rides with the
//! run's end instead: its `usage_recorded` and the `run_finished` are one commit.

use std::time::Duration;

use crate::engine::breaker::FailureCause;
use crate::engine::history::{HistoryMessage, Role};
use crate::engine::llm_spec::LlmSpec;
use crate::engine::run::{RunReport, RunStatus, StopReason};
use crate::engine::wakeup::WakeupSource;
use crate::exec::adapter::{AdapterOutcome, RunContext};
use crate::exec::model::{send_request, write_request, ChatMessage, ModelRequest, ModelTurn};
use crate::exec::tools::{ToolCall, ToolContext, ToolSignal, Toolbox};
use crate::transcript::{EntryBody, ToolCallSummary};

/// The answer that makes a timer or idle run a ghost run (trimmed, with no tool calls).
pub const IDLE_ANSWER: &str = "[IDLE]";
/// Longest final-answer excerpt kept with a run.
pub const ANSWER_EXCERPT_BYTES_MAX: usize = 32 * 1024;
/// Marks an excerpt cut at [`ANSWER_EXCERPT_BYTES_MAX`].
pub const EXCERPT_CUT_MARK: &str = "[...truncated]";

/// The prompts of one run, already rendered.
#[derive(Debug, Clone)]
pub struct Prompts {
    pub system: String,
    pub wakeup: String,
}

/// What the loop saw, for the transcript and the run's end.
struct Loop<'a> {
    spec: &'a LlmSpec,
    context: &'a RunContext,
    tools: &'a Toolbox,
    iteration: u32,
    wakeup: String,
    messages: Vec<ChatMessage>,
    tool_calls: u64,
    tool_failure: Option<String>,
    budget_left_micro_usd: Option<u64>,
}

/// Runs the loop to its end.
pub async fn run_loop(
    spec: &LlmSpec,
    context: &RunContext,
    prompts: Prompts,
    tools: &Toolbox,
) -> AdapterOutcome {
    context.record_wakeup().await;
    let mut messages: Vec<ChatMessage> = context.history.iter().map(from_history).collect();
    messages.push(ChatMessage::User {
        text: prompts.wakeup.clone(),
    });
    let mut state = Loop {
        spec,
        context,
        tools,
        iteration: 0,
        wakeup: prompts.wakeup,
        messages,
        tool_calls: 0,
        tool_failure: None,
        budget_left_micro_usd: context.budget_left_micro_usd,
    };
    let api_key = spec
        .api_key_env
        .as_deref()
        .and_then(|name| context.host.secret(name));
    if let (Some(name), None) = (&spec.api_key_env, &api_key) {
        return failed(
            StopReason::LlmError,
            format!("the environment variable {name} named by adapter.api_key_env is not set on this node"),
        );
    }
    let schemas = tools.defs();
    let poster = context.host.poster();
    for iteration in 1..=spec.max_iterations {
        state.iteration = iteration;
        if state.budget_left_micro_usd == Some(0) {
            return stop_for_budget();
        }
        let request = ModelRequest {
            model: &spec.model,
            system: &prompts.system,
            messages: &state.messages,
            tools: schemas,
            max_output_tokens: spec.max_output_tokens,
        };
        let turn = match write_request(spec, api_key.as_deref(), request) {
            Ok(written) => {
                state.log_request(&request, written.body_bytes()).await;
                let sent_at = tokio::time::Instant::now();
                send_request(&*poster, spec, api_key.as_deref(), written)
                    .await
                    .map(|turn| (turn, sent_at))
            }
            Err(error) => Err(error),
        };
        let (turn, sent_at) = match turn {
            Ok(turn) => turn,
            Err(error) => {
                let detail = context.transcript.redactor().redact(&error.to_string()).into_owned();
                return failed(StopReason::LlmError, detail);
            }
        };
        state.log_response(&turn, sent_at.elapsed()).await;
        if turn.tool_calls.is_empty() {
            // The run's last call: its spend is committed with the run's end, one commit
            // instead of two (no budget check is left to make before another call).
            let last_call = state.usage_of(&turn);
            return AdapterOutcome {
                last_call: Some(last_call),
                ..state.final_answer(turn.text)
            };
        }
        if let Err(outcome) = state.record(&turn).await {
            return outcome;
        }
        if let Some(outcome) = state.step(turn).await {
            return outcome;
        }
    }
    state.end(
        RunStatus::Failed,
        StopReason::MaxIterations,
        format!(
            "the model did not end its turn within adapter.max_iterations = {} model calls",
            spec.max_iterations
        ),
        None,
    )
}

fn from_history(message: &HistoryMessage) -> ChatMessage {
    match message.role {
        Role::User => ChatMessage::User {
            text: message.text.clone(),
        },
        Role::Assistant => ChatMessage::Assistant {
            text: message.text.clone(),
            tool_calls: Vec::new(),
        },
    }
}

fn failed(stop: StopReason, detail: String) -> AdapterOutcome {
    AdapterOutcome {
        stop_reason: Some(stop),
        ..AdapterOutcome::new(RunStatus::Failed, detail, Some(FailureCause::Llm))
    }
}

fn stop_for_budget() -> AdapterOutcome {
    AdapterOutcome {
        stop_reason: Some(StopReason::Budget),
        ..AdapterOutcome::new(
            RunStatus::Failed,
            "the daily budget (limits.daily_budget_usd) is spent; stopped before the next model call",
            None,
        )
    }
}

impl Loop<'_> {
    /// Why the body's size and not the messages' own: the body is written once, for the wire;
    /// writing the messages again only to count them was a second serialization of the whole
    /// history per call.
    async fn log_request(&self, request: &ModelRequest<'_>, bytes: u64) {
        let entry = EntryBody::ModelRequest {
            iteration: self.iteration,
            model: request.model.to_string(),
            messages: request.messages.len() as u32,
            bytes,
        };
        self.context.transcript.write(entry).await;
    }

    async fn log_response(&self, turn: &ModelTurn, latency: Duration) {
        let entry = EntryBody::ModelResponse {
            iteration: self.iteration,
            text: turn.text.clone(),
            tool_calls: turn
                .tool_calls
                .iter()
                .map(|c| ToolCallSummary {
                    id: c.id.clone(),
                    name: c.name.clone(),
                })
                .collect(),
            usage: crate::transcript::Usage {
                input: turn.usage.input_tokens,
                cached_input: turn.usage.cached_input_tokens,
                output: turn.usage.output_tokens,
            },
            latency_ms: latency.as_millis() as u64,
        };
        self.context.transcript.write(entry).await;
    }

    /// Carries out one tool call through the toolbox, both sides written to the transcript.
    async fn call_tool(&self, call: &crate::exec::model::ModelToolCall) -> crate::exec::tools::ToolResult {
        let transcript = &self.context.transcript;
        transcript
            .write(EntryBody::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            })
            .await;
        let started = tokio::time::Instant::now();
        let tool_call = ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        };
        let context = ToolContext {
            agent_id: self.context.agent,
            agent_name: self.context.agent_name.clone(),
            run_id: self.context.run,
        };
        let result = self.tools.call(&tool_call, &context).await;
        transcript
            .write(EntryBody::ToolResult {
                id: call.id.clone(),
                name: call.name.clone(),
                output: result.output.clone(),
                is_error: result.is_error,
                latency_ms: started.elapsed().as_millis() as u64,
            })
            .await;
        result
    }

    /// The spend of the call that answered `turn`, priced.
    fn usage_of(&self, turn: &ModelTurn) -> crate::engine::usage::Usage {
        self.context
            .host
            .prices()
            .usage_of(&self.spec.model, &turn.usage)
    }

    /// Records the call's spend; `Err` ends the run (it was ended meanwhile, or the node
    /// stopped: the report is refused either way).
    async fn record(&mut self, turn: &ModelTurn) -> Result<(), AdapterOutcome> {
        let usage = self.usage_of(turn);
        match self.context.host.record_usage(self.context.run, usage).await {
            Ok(left) => {
                self.budget_left_micro_usd = left;
                Ok(())
            }
            Err(error) => Err(AdapterOutcome::new(
                RunStatus::Failed,
                format!("could not record the model call's usage: {error}"),
                None,
            )),
        }
    }

    /// Runs the tool calls of an answer that asked for some; returns `None` to go on, or the
    /// run's end (the tool cap, a pause the agent asked for).
    async fn step(&mut self, turn: ModelTurn) -> Option<AdapterOutcome> {
        self.messages.push(ChatMessage::Assistant {
            text: turn.text.clone(),
            tool_calls: turn.tool_calls.clone(),
        });
        for call in &turn.tool_calls {
            if self.tool_calls >= u64::from(self.spec.tool_calls_max) {
                let detail = format!(
                    "the model asked for more than adapter.tool_calls_max = {} tool calls",
                    self.spec.tool_calls_max
                );
                return Some(self.end(RunStatus::Failed, StopReason::ToolCap, detail, None));
            }
            self.tool_calls += 1;
            let outcome = self.call_tool(call).await;
            if outcome.failed && self.tool_failure.is_none() {
                self.tool_failure = Some(format!("tool {} failed: {}", call.name, outcome.output));
            }
            self.messages.push(ChatMessage::Tool {
                call_id: call.id.clone(),
                name: call.name.clone(),
                output: outcome.output,
                is_error: outcome.is_error,
            });
            if let Some(ToolSignal::PauseHeartbeats { minutes }) = outcome.signal {
                let detail = format!("the agent paused its heartbeats for {minutes} minutes");
                let text = if turn.text.is_empty() { detail.clone() } else { turn.text.clone() };
                return Some(self.end_with_answer(
                    RunStatus::Succeeded,
                    StopReason::PauseHeartbeats,
                    detail,
                    &text,
                    Some(minutes),
                ));
            }
        }
        None
    }

    /// The model ended its turn with `text`: a ghost run, or an ended turn.
    fn final_answer(&mut self, text: String) -> AdapterOutcome {
        let ghost_source = matches!(self.context.source, WakeupSource::Timer | WakeupSource::Idle);
        if ghost_source && self.tool_calls == 0 && text.trim() == IDLE_ANSWER {
            let (answer_excerpt, excerpt_truncated) = excerpt(&text);
            let report = RunReport {
                answer_excerpt: Some(answer_excerpt),
                excerpt_truncated,
                ..RunReport::default()
            };
            return AdapterOutcome {
                stop_reason: Some(StopReason::Ghost),
                report: Some(report),
                ..AdapterOutcome::new(RunStatus::Succeeded, "ghost: the agent had nothing to do", None)
            };
        }
        let detail = format!("the model ended its turn: {}", crate::exec::model::excerpt(&text));
        self.end_with_answer(RunStatus::Succeeded, StopReason::EndTurn, detail, &text, None)
    }

    /// A run that ends with an answer the history keeps.
    fn end_with_answer(
        &mut self,
        status: RunStatus,
        stop: StopReason,
        detail: String,
        answer: &str,
        pause_minutes: Option<u64>,
    ) -> AdapterOutcome {
        self.end(status, stop, detail, Some((answer, pause_minutes)))
    }

    /// The run's end. A tool that failed during the run fails it for the breaker's tool
    /// trigger, whatever the model made of the failure.
    fn end(
        &mut self,
        status: RunStatus,
        stop: StopReason,
        detail: String,
        answer: Option<(&str, Option<u64>)>,
    ) -> AdapterOutcome {
        let (status, cause, detail) = match (&self.tool_failure, stop) {
            (Some(failure), StopReason::EndTurn | StopReason::MaxIterations | StopReason::ToolCap) => {
                (RunStatus::Failed, Some(FailureCause::Tool), format!("{failure}; {detail}"))
            }
            _ => (status, None, detail),
        };
        let mut report = RunReport {
            tool_calls: self.tool_calls,
            ..RunReport::default()
        };
        if let Some((answer, pause_minutes)) = answer {
            let (answer_excerpt, excerpt_truncated) = excerpt(answer);
            report.pause_minutes = pause_minutes;
            report.answer_excerpt = Some(answer_excerpt);
            report.excerpt_truncated = excerpt_truncated;
            report.history_append = vec![
                HistoryMessage::new(Role::User, &self.wakeup),
                HistoryMessage::new(Role::Assistant, answer),
            ];
        }
        AdapterOutcome {
            stop_reason: Some(stop),
            report: Some(report),
            ..AdapterOutcome::new(status, detail, cause)
        }
    }
}

/// The start of `text`, at most [`ANSWER_EXCERPT_BYTES_MAX`] bytes (a cut one marked), and
/// whether it was cut.
pub fn excerpt(text: &str) -> (String, bool) {
    if text.len() <= ANSWER_EXCERPT_BYTES_MAX {
        return (text.to_string(), false);
    }
    let mut end = ANSWER_EXCERPT_BYTES_MAX - EXCERPT_CUT_MARK.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}{EXCERPT_CUT_MARK}", &text[..end]), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_keep_their_bound_at_char_boundaries() {
        let exact = "x".repeat(ANSWER_EXCERPT_BYTES_MAX);
        assert_eq!(excerpt(&exact), (exact.clone(), false));
        let (cut, truncated) = excerpt(&format!("{exact}y"));
        assert!(truncated);
        assert!(cut.len() <= ANSWER_EXCERPT_BYTES_MAX);
        assert!(cut.ends_with(EXCERPT_CUT_MARK));
        let (cut, _) = excerpt(&"é".repeat(ANSWER_EXCERPT_BYTES_MAX));
        assert!(cut.len() <= ANSWER_EXCERPT_BYTES_MAX);
    }
}
