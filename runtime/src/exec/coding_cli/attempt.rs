//! One run of a coding CLI: at most two invocations. The first resumes the task's stored
//! session; only when the CLI refuses that session is the run retried, once, without it. There
//! is no loop: a second refusal ends the run `session_invalid`.

use std::collections::VecDeque;

use super::outcome::{conclude, Attempt, AttemptEnd, Retry};
use super::report::{mentions, CliReport};
use super::CliKind;
use crate::engine::cli_spec::CodingCliSpec;
use crate::engine::run::{ErrorClass, RunStatus};
use crate::engine::usage::Usage;
use crate::exec::adapter::{AdapterOutcome, RunContext};
use crate::exec::child::{child_request, run_child, ChildLimits, ChildRun};
use crate::exec::pricing::PriceTable;
use crate::exec::spawn::{OutputLine, SpawnError, Stream};
use crate::transcript::EntryBody;

/// Most stderr lines kept (the last ones) to explain a failed invocation.
pub const STDERR_TAIL_LINES_MAX: usize = 8;

/// The whole run: the stored session resumed, and at most one fresh retry.
pub async fn run_with_one_retry(
    kind: CliKind,
    spec: &CodingCliSpec,
    run: &RunContext,
    prompt: String,
) -> AdapterOutcome {
    let stored = run.session_id.clone();
    let first = invoke(kind, spec, run, &prompt, stored.as_deref()).await;
    let Some(stored) = stored.filter(|_| first.session_refused()) else {
        // The run's only invocation: its spend is committed with the run's end.
        return with_last_call(conclude(kind, spec, &first, Retry::None), spec, run, &first);
    };
    // Another invocation follows: this one's spend is committed first, on its own.
    if let Err(error) = record_usage(spec, run, &first).await {
        return unrecorded(kind, error);
    }
    note(run, format!(
        "{} refused session {stored:?} (unknown or expired); it is dropped and the run retried once with a fresh session",
        kind.product()
    ))
    .await;
    let fresh = invoke(kind, spec, run, &prompt, None).await;
    with_last_call(conclude(kind, spec, &fresh, Retry::AfterRefusal), spec, run, &fresh)
}

/// `outcome` carrying the spend of the run's last invocation, committed with the run's end in
/// one commit (`RunEnd::last_call`, as the agent loop's last model call).
fn with_last_call(
    outcome: AdapterOutcome,
    spec: &CodingCliSpec,
    run: &RunContext,
    attempt: &Attempt,
) -> AdapterOutcome {
    AdapterOutcome {
        last_call: spent(spec, run, attempt),
        ..outcome
    }
}

/// What the invocation spent, when it reported anything.
fn spent(spec: &CodingCliSpec, run: &RunContext, attempt: &Attempt) -> Option<Usage> {
    let report = attempt.parsed.as_ref().ok()?;
    usage_of(report, spec.model.as_deref(), run.host.prices())
}

/// Runs the CLI once through the shared child runner, reading its output as it comes.
async fn invoke(
    kind: CliKind,
    spec: &CodingCliSpec,
    run: &RunContext,
    prompt: &str,
    resume: Option<&str>,
) -> Attempt {
    let binary = kind.binary(spec);
    let args = kind.args(spec, resume);
    note(
        run,
        format!("{}: {binary} {}", kind.adapter_name(), args.join(" ")),
    )
    .await;
    let request = match child_request(
        run,
        binary,
        args,
        Some(prompt.as_bytes().to_vec()),
        &spec.child,
    ) {
        Ok(request) => request,
        Err(error) => return Attempt::without_output(AttemptEnd::SpawnFailed(error)),
    };
    let signals = kind.session_unknown_signals();
    let mut reader = kind.reader();
    let mut stderr_tail = VecDeque::with_capacity(STDERR_TAIL_LINES_MAX);
    let mut session_unknown = false;
    let mut on_line = |line: &OutputLine| match line.stream {
        Stream::Stdout => reader.push(&line.text),
        Stream::Stderr => {
            session_unknown |= mentions([line.text.as_str()], signals);
            if stderr_tail.len() == STDERR_TAIL_LINES_MAX {
                stderr_tail.pop_front();
            }
            stderr_tail.push_back(line.text.clone());
        }
    };
    let child = run_child(run, request, ChildLimits::of(&spec.child), &mut on_line).await;
    let end = match child {
        ChildRun::NotStarted(SpawnError::NotFound { program, detail }) => {
            AttemptEnd::NotInstalled(format!("{program}: {detail}"))
        }
        ChildRun::NotStarted(error @ SpawnError::Failed { .. }) => {
            AttemptEnd::SpawnFailed(error.to_string())
        }
        ChildRun::NotRecorded(error) => AttemptEnd::NotRecorded(error),
        ChildRun::Ended(end) => AttemptEnd::Exited {
            status: end.status,
            timed_out: end.timed_out,
        },
    };
    let parsed = reader.finish();
    if let Ok(report) = &parsed {
        session_unknown |= report
            .error
            .as_deref()
            .is_some_and(|e| mentions([e], signals));
    }
    Attempt {
        end,
        parsed,
        session_unknown,
        stderr_tail: stderr_tail.into(),
    }
}

/// Records what the invocation spent, when it reported anything. `Err`: the run was ended
/// meanwhile (or the node stopped).
async fn record_usage(
    spec: &CodingCliSpec,
    run: &RunContext,
    attempt: &Attempt,
) -> Result<(), String> {
    match spent(spec, run, attempt) {
        Some(usage) => run.host.record_usage(run.run, usage).await.map(|_| ()),
        None => Ok(()),
    }
}

/// A run whose usage could not be recorded: it was ended meanwhile, so its outcome no longer
/// matters, but it is still no success.
fn unrecorded(kind: CliKind, error: String) -> AdapterOutcome {
    AdapterOutcome {
        error_class: Some(ErrorClass::AdapterError),
        ..AdapterOutcome::new(
            RunStatus::Failed,
            format!(
                "{}: could not record the run's usage: {error}",
                kind.adapter_name()
            ),
            None,
        )
    }
}

/// The usage to record: the CLI's tokens, and its own cost when it reports one (Claude Code),
/// else the node's price for the spec's `model` (nothing for a model the table does not list).
pub fn usage_of(report: &CliReport, model: Option<&str>, prices: &PriceTable) -> Option<Usage> {
    let tokens = &report.tokens;
    let spent =
        tokens.input_tokens > 0 || tokens.output_tokens > 0 || report.cost_micro_usd.is_some();
    if !spent {
        return None;
    }
    let priced = model.map(|model| prices.usage_of(model, tokens));
    Some(Usage {
        llm_calls: report.turns,
        input_tokens: tokens.input_tokens,
        cached_input_tokens: tokens.cached_input_tokens.min(tokens.input_tokens),
        output_tokens: tokens.output_tokens,
        cost_micro_usd: report
            .cost_micro_usd
            .or(priced.map(|usage| usage.cost_micro_usd))
            .unwrap_or(0),
    })
}

async fn note(run: &RunContext, text: String) {
    run.transcript.write(EntryBody::Note { text }).await;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::exec::model::TokenUsage;
    use crate::exec::pricing::ModelPrice;

    fn report(cost: Option<u64>) -> CliReport {
        CliReport {
            tokens: TokenUsage {
                input_tokens: 1_000_000,
                cached_input_tokens: 2_000_000,
                output_tokens: 1_000_000,
            },
            turns: 2,
            cost_micro_usd: cost,
            ..CliReport::default()
        }
    }

    fn prices() -> PriceTable {
        let mut models = BTreeMap::new();
        let price = ModelPrice {
            input_usd_per_mtok: 1.0,
            cached_input_usd_per_mtok: None,
            output_usd_per_mtok: 2.0,
        };
        models.insert("m".to_string(), price);
        PriceTable { models }
    }

    #[test]
    fn a_reported_cost_wins_over_the_price_table() {
        let usage = usage_of(&report(Some(7)), Some("m"), &prices()).unwrap();
        assert_eq!(usage.cost_micro_usd, 7);
        assert_eq!(usage.llm_calls, 2);
        assert_eq!(
            usage.cached_input_tokens, 1_000_000,
            "cached never exceeds input"
        );
    }

    #[test]
    fn without_a_reported_cost_a_known_model_is_priced_and_an_unknown_one_is_free() {
        let priced = usage_of(&report(None), Some("m"), &prices()).unwrap();
        assert_eq!(priced.cost_micro_usd, 3_000_000);
        assert_eq!(
            usage_of(&report(None), Some("other"), &prices())
                .unwrap()
                .cost_micro_usd,
            0
        );
        assert_eq!(
            usage_of(&report(None), None, &prices())
                .unwrap()
                .cost_micro_usd,
            0
        );
        assert_eq!(
            usage_of(&CliReport::default(), Some("m"), &prices()),
            None,
            "nothing spent"
        );
    }
}
