//! Invariant 40, `cli_run_as_printed`: a coding-CLI agent's run (`claude_local`, `codex_local`)
//! is judged against what the simulated CLI printed (sim/src/coding_clis.rs), by the rules of
//! docs/adapters/coding-cli.md restated here:
//!
//! - **Sessions.** A run's first invocation resumes the session its task holds in the log (the
//!   last `session` a run of that agent and task key reported, none after a `Clear` or a
//!   `session_reset`; task key `default` without one), or none. A second invocation follows
//!   only a refusal of the stored session, and resumes nothing; there is never a third.
//! - **The end.** A run that ended by its CLI (succeeded, or failed `exit_nonzero`, `llm_error`,
//!   `parse_error`, `session_invalid`) ended as its last invocation says: a success exits 0
//!   with a result that is no error; a reported failure is `llm_error` after exit 0 and
//!   `exit_nonzero` otherwise; unreadable output after exit 0 is `parse_error`; any other exit
//!   is `exit_nonzero`. A success's answer excerpt is the final text.
//! - **The detail** names the CLI as documented ("The run's detail"): `{type}: {product} …`
//!   with the product name (Claude Code, Codex) for a success, a crash without a report, output
//!   it could not read, a session refused twice, and a hang past `timeout_sec`; a reported
//!   failure's detail starts with the adapter's type.
//! - **The task's session after it**: the session the last invocation reported; else, after a
//!   refusal, cleared; else unchanged.
//! - **Usage**: the run's `usage_recorded` sum what its invocations printed. Claude Code: input
//!   is its three input counts together, cached the cache reads, one model call at least when
//!   any token was used (else `num_turns`), the cost as printed. Codex: each completed turn's
//!   counts, one model call per turn, no cost without a priced model.

use std::collections::BTreeMap;

use vigil::engine::agent::AdapterSpec;
use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::{ErrorClass, RunReport, RunStatus, SessionChange};
use vigil::engine::usage::Usage;

use super::queued_runs::QueuedRuns;
use super::{violation, Violation};
use crate::trace::{CliDrawn, CliName, CliOutcome};

/// Task key of a run woken without one (docs/adapters/coding-cli.md).
const DEFAULT_TASK: &str = "default";
/// How far a printed cost may read back from its micro-dollars (a decimal's rounding).
const COST_SLACK_MICRO_USD: u64 = 1;

#[derive(Debug, Default)]
pub struct CodingOracle {
    /// Coding-CLI agents: whether their spec names a model.
    agents: BTreeMap<u64, bool>,
    /// Queued and running runs of those agents: their agent and task key.
    runs: QueuedRuns<(u64, String)>,
    /// Each task's session, as the log leaves it.
    sessions: BTreeMap<(u64, String), String>,
    /// Invocations of each unfinished run, in order.
    invocations: BTreeMap<u64, Vec<CliDrawn>>,
    /// Usage recorded for each unfinished run.
    usage: BTreeMap<u64, Usage>,
    /// Runs whose end was judged.
    judged: u64,
}

impl CodingOracle {
    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. }
            | EventKind::AgentUpdated { agent, spec, .. } => match &spec.adapter {
                AdapterSpec::ClaudeLocal(cli) | AdapterSpec::CodexLocal(cli) => {
                    self.agents.insert(agent.0, cli.model.is_some());
                }
                _ => {
                    self.agents.remove(&agent.0);
                }
            },
            EventKind::WakeupQueued {
                run,
                agent,
                task_key,
                ..
            } if self.agents.contains_key(&agent.0) => {
                let task = task_key.as_deref().unwrap_or(DEFAULT_TASK).to_string();
                self.runs.queued(run.0, (agent.0, task));
            }
            EventKind::RunRequeued {
                run,
                agent,
                retry_of,
                coalesced: false,
            } => self.runs.requeued(run.0, agent.0, retry_of.0),
            EventKind::SessionReset { agent, task_key } => {
                self.sessions.remove(&(agent.0, task_key.clone()));
            }
            EventKind::UsageRecorded { run, usage, .. } => {
                if self.runs.get(run.0).is_some() {
                    self.usage.entry(run.0).or_default().add(usage);
                }
            }
            EventKind::RunFinished {
                run,
                agent,
                status,
                report,
                error_class,
                detail,
                ..
            } => {
                let Some((_, task)) = self.runs.finished(run.0, agent.0) else {
                    return Ok(());
                };
                let invocations = self.invocations.remove(&run.0).unwrap_or_default();
                let usage = self.usage.remove(&run.0).unwrap_or_default();
                let model = self.agents.get(&agent.0).copied().unwrap_or(false);
                let end = End {
                    run: run.0,
                    status: *status,
                    class: *error_class,
                    report: report.as_deref(),
                    detail,
                };
                let judged = judge_end(&end, &invocations, &usage, model)?;
                self.judged += u64::from(judged);
                let key = (agent.0, task.clone());
                match report.as_ref().and_then(|r| r.session.as_ref()) {
                    Some(SessionChange::Set { session_id }) => {
                        self.sessions.insert(key, session_id.clone());
                    }
                    Some(SessionChange::Clear) => {
                        self.sessions.remove(&key);
                    }
                    None => {}
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The simulated machine started an invocation of a coding CLI for `run`.
    pub fn invoked(&mut self, run: u64, drawn: &CliDrawn) -> Result<(), Violation> {
        let Some((agent, task)) = self.runs.get(run) else {
            return Ok(());
        };
        let earlier = self.invocations.entry(run).or_default();
        let stored = self.sessions.get(&(*agent, task.clone()));
        let expected = match earlier.as_slice() {
            [] => stored.cloned(),
            [first] if first.outcome == CliOutcome::Refused => None,
            _ => {
                return violation(
                    "cli_run_as_printed",
                    format!("run {run}: invocation {} of its CLI, after {:?}; a run invokes its CLI once, and again only after a refused session", earlier.len() + 1, earlier.iter().map(|i| i.outcome).collect::<Vec<_>>()),
                )
            }
        };
        if drawn.resume != expected {
            return violation(
                "cli_run_as_printed",
                format!("run {run} (agent {agent}, task {task:?}), invocation {}: it resumed {:?}; it should resume {expected:?} (the task's session in the log: {stored:?})", earlier.len() + 1, drawn.resume),
            );
        }
        earlier.push(drawn.clone());
        Ok(())
    }
}

/// A run's end as committed.
struct End<'a> {
    run: u64,
    status: RunStatus,
    class: Option<ErrorClass>,
    report: Option<&'a RunReport>,
    detail: &'a str,
}

/// A CLI's adapter type and product name, as a run's detail names them
/// (docs/adapters/coding-cli.md, "The run's detail").
fn names(cli: CliName) -> (&'static str, &'static str) {
    match cli {
        CliName::Claude => ("claude_local", "Claude Code"),
        CliName::Codex => ("codex_local", "Codex"),
    }
}

/// How the detail of a run that `last` ended with status `status` starts, as documented; none
/// when the docs leave it to an ending the simulated CLIs never draw.
fn documented_start(last: &CliDrawn, status: RunStatus) -> Option<String> {
    let (kind, product) = names(last.cli);
    let parse_error = match last.cli {
        CliName::Claude => "Claude Code printed no result object (",
        CliName::Codex => "Codex printed no turn.completed, turn.failed or error event (",
    };
    let start = match (last.outcome, status) {
        (CliOutcome::Succeeded, _) => format!("{product} finished ("),
        (CliOutcome::Crashed { code }, _) => format!("{product} ended with exit code {code}"),
        (CliOutcome::Garbage, _) => parse_error.to_string(),
        (CliOutcome::Refused, _) => format!("{product} refused the stored session, and the fresh retry failed the same way (exit code 1)"),
        (CliOutcome::Hangs, RunStatus::TimedOut) => {
            format!("{product} was still running after timeout_sec = ")
        }
        // The CLI's own error follows: its words, not Vigil's.
        (CliOutcome::Failed { .. }, _) => String::new(),
        (CliOutcome::Hangs, _) => return None,
    };
    Some(format!("{kind}: {start}"))
}

/// The run's detail starts as documented for the way its CLI ended it.
fn detail_as_documented(end: &End, last: &CliDrawn) -> Result<(), Violation> {
    let Some(start) = documented_start(last, end.status) else {
        return Ok(());
    };
    // A number at the start's end is whole: exit code 2 is not exit code 27.
    let number_goes_on = start.ends_with(|c: char| c.is_ascii_digit())
        && end.detail[start.len().min(end.detail.len())..].starts_with(|c: char| c.is_ascii_digit());
    if end.detail.starts_with(&start) && !number_goes_on {
        return Ok(());
    }
    cli_violation(format!(
        "run {} ended {:?} {:?} after its CLI's {:?}, with the detail {:?}; it should start {start:?}",
        end.run, end.status, end.class, last.outcome, end.detail
    ))
    .map(|_| ())
}

/// Invariant 40 for one run's end; whether it was judged (it ended by its CLI).
fn judge_end(
    end: &End,
    invocations: &[CliDrawn],
    recorded: &Usage,
    model: bool,
) -> Result<bool, Violation> {
    let Some(last) = invocations.last() else {
        return Ok(false);
    };
    let by_the_cli = match end.status {
        RunStatus::Succeeded => true,
        RunStatus::Failed => matches!(
            end.class,
            Some(
                ErrorClass::ExitNonzero
                    | ErrorClass::LlmError
                    | ErrorClass::ParseError
                    | ErrorClass::SessionInvalid
            )
        ),
        _ => false,
    };
    if !by_the_cli {
        let timed_out = (end.status, end.class) == (RunStatus::TimedOut, Some(ErrorClass::TimedOut));
        if timed_out && last.outcome == CliOutcome::Hangs {
            detail_as_documented(end, last)?;
        }
        return Ok(false);
    }
    let run = end.run;
    detail_as_documented(end, last)?;
    let expected = match last.outcome {
        CliOutcome::Succeeded => Some((RunStatus::Succeeded, None)),
        CliOutcome::Failed { code: 0 } => Some((RunStatus::Failed, Some(ErrorClass::LlmError))),
        CliOutcome::Failed { .. } | CliOutcome::Crashed { .. } => {
            Some((RunStatus::Failed, Some(ErrorClass::ExitNonzero)))
        }
        CliOutcome::Garbage => Some((RunStatus::Failed, Some(ErrorClass::ParseError))),
        CliOutcome::Refused | CliOutcome::Hangs => None,
    };
    if expected != Some((end.status, end.class)) {
        return cli_violation(format!("run {run} ended {:?} {:?}; its CLI's last invocation was {:?}, which should end it {expected:?}", end.status, end.class, last.outcome));
    }
    let report = end.report;
    if end.status == RunStatus::Succeeded {
        let excerpt = report.and_then(|r| r.answer_excerpt.as_deref());
        if excerpt != last.text.as_deref() {
            return cli_violation(format!("run {run} succeeded with the answer excerpt {excerpt:?}; its CLI's final text was {:?}", last.text));
        }
    }
    let session = match (&last.session, invocations.len()) {
        (Some(session_id), _) => Some(SessionChange::Set {
            session_id: session_id.clone(),
        }),
        (None, 2) => Some(SessionChange::Clear),
        (None, _) => None,
    };
    let reported = report.and_then(|r| r.session.clone());
    if reported != session {
        return cli_violation(format!("run {run} left its task's session as {reported:?}; its CLI reported {:?} after {} invocations, so it should be {session:?}", last.session, invocations.len()));
    }
    // Codex with a model is priced by the node's table: its cost is not restated here, so its
    // usage is not judged.
    if model && last.cli == CliName::Codex {
        return Ok(true);
    }
    let printed =
        invocations
            .iter()
            .filter_map(printed_usage)
            .fold(Usage::default(), |mut sum, usage| {
                sum.add(&usage);
                sum
            });
    let cost_close = recorded.cost_micro_usd.abs_diff(printed.cost_micro_usd)
        <= COST_SLACK_MICRO_USD * invocations.len() as u64;
    let same = (
        recorded.llm_calls,
        recorded.input_tokens,
        recorded.cached_input_tokens,
        recorded.output_tokens,
    ) == (
        printed.llm_calls,
        printed.input_tokens,
        printed.cached_input_tokens,
        printed.output_tokens,
    );
    if !(same && cost_close) {
        return cli_violation(format!("run {run} recorded usage {recorded:?}; its CLI printed {printed:?} over {} invocations", invocations.len()));
    }
    Ok(true)
}

/// What one invocation spent, as Vigil reads its output (none when it printed no usage).
fn printed_usage(invocation: &CliDrawn) -> Option<Usage> {
    match invocation.cli {
        CliName::Claude => {
            let printed = invocation.usage.first()?;
            let input = printed.input + printed.cache_creation + printed.cache_read;
            let used = input > 0 || printed.output > 0;
            Some(Usage {
                llm_calls: invocation.num_turns.unwrap_or(0).max(u64::from(used)),
                input_tokens: input,
                cached_input_tokens: printed.cache_read,
                output_tokens: printed.output,
                cost_micro_usd: invocation.cost_micro_usd.unwrap_or(0),
            })
        }
        CliName::Codex => {
            let mut usage = Usage::default();
            for turn in &invocation.usage {
                usage.llm_calls += 1;
                usage.input_tokens += turn.input;
                usage.cached_input_tokens += turn.cache_read;
                usage.output_tokens += turn.output;
            }
            // Without a model the price table prices nothing.
            let spent = usage.input_tokens > 0 || usage.output_tokens > 0;
            spent.then_some(usage)
        }
    }
}

fn cli_violation(detail: String) -> Result<bool, Violation> {
    violation("cli_run_as_printed", detail).map(|()| false)
}

#[cfg(test)]
mod tests {
    use crate::trace::PrintedUsage;

    use super::*;

    fn drawn(cli: CliName, outcome: CliOutcome, resume: Option<&str>) -> CliDrawn {
        let printed = matches!(outcome, CliOutcome::Succeeded | CliOutcome::Failed { .. });
        CliDrawn {
            cli,
            resume: resume.map(str::to_string),
            outcome,
            session: printed.then(|| "s2".to_string()),
            usage: if printed {
                vec![PrintedUsage {
                    input: 10,
                    cache_creation: 5,
                    cache_read: 20,
                    output: 7,
                }]
            } else {
                Vec::new()
            },
            num_turns: Some(0),
            cost_micro_usd: printed.then_some(40_000),
            text: (outcome == CliOutcome::Succeeded).then(|| "done".to_string()),
        }
    }

    fn report(excerpt: Option<&str>, session: Option<SessionChange>) -> RunReport {
        RunReport {
            answer_excerpt: excerpt.map(str::to_string),
            session,
            ..RunReport::default()
        }
    }

    fn set(id: &str) -> Option<SessionChange> {
        Some(SessionChange::Set {
            session_id: id.into(),
        })
    }

    fn claude_usage() -> Usage {
        Usage {
            llm_calls: 1,
            input_tokens: 35,
            cached_input_tokens: 20,
            output_tokens: 7,
            cost_micro_usd: 40_000,
        }
    }

    const CLAUDE_FINISHED: &str = "claude_local: Claude Code finished (1 turns)";
    const CODEX_GARBAGE: &str = "codex_local: Codex printed no turn.completed, turn.failed or error event (2 lines on stdout; expected exec --json)";

    /// A failed run of `cli` whose last invocation ended `outcome`, with `detail`.
    fn judge_detail(cli: CliName, outcome: CliOutcome, status: RunStatus, class: ErrorClass, detail: &str) -> Result<bool, Violation> {
        let last = drawn(cli, outcome, None);
        let report = report(None, last.session.as_deref().and_then(set));
        let end = End {
            run: 1,
            status,
            class: Some(class),
            report: Some(&report),
            detail,
        };
        // Usage is judged after the detail: a failure's printed usage is irrelevant here.
        let usage = printed_usage(&last).unwrap_or_default();
        judge_end(&end, &[last], &usage, false)
    }

    #[test]
    fn a_failed_runs_detail_names_its_cli_as_documented() {
        let (failed, timed_out) = (RunStatus::Failed, RunStatus::TimedOut);
        let cases = [
            (CliName::Claude, CliOutcome::Crashed { code: 9 }, failed, ErrorClass::ExitNonzero, "claude_local: Claude Code ended with exit code 9; stderr: fatal"),
            (CliName::Codex, CliOutcome::Crashed { code: 2 }, failed, ErrorClass::ExitNonzero, "codex_local: Codex ended with exit code 2"),
            (CliName::Codex, CliOutcome::Garbage, failed, ErrorClass::ParseError, CODEX_GARBAGE),
            (CliName::Claude, CliOutcome::Garbage, failed, ErrorClass::ParseError, "claude_local: Claude Code printed no result object (2 lines on stdout; expected --output-format json)"),
            (CliName::Claude, CliOutcome::Failed { code: 1 }, failed, ErrorClass::ExitNonzero, "claude_local: rate limited (exit code 1)"),
            (CliName::Codex, CliOutcome::Hangs, timed_out, ErrorClass::TimedOut, "codex_local: Codex was still running after timeout_sec = 60; its process group was terminated"),
        ];
        for (cli, outcome, status, class, detail) in cases {
            assert!(judge_detail(cli, outcome, status, class, detail).is_ok(), "{detail}");
            // The product's name left out, or the other CLI's: reported.
            let (kind, product) = names(cli);
            let other = if cli == CliName::Claude { "Codex" } else { "Claude Code" };
            for wrong in [detail.replace(product, ""), detail.replace(product, other), detail.replace(kind, "process")] {
                if wrong == detail || matches!(outcome, CliOutcome::Failed { .. }) && wrong.starts_with(kind) {
                    continue;
                }
                let error = judge_detail(cli, outcome, status, class, &wrong).unwrap_err();
                assert_eq!(error.invariant, "cli_run_as_printed", "{wrong}");
            }
        }
        // A session refused by the fresh retry too (the simulated CLIs never refuse a fresh
        // invocation, so only the detail's form is judged here).
        let refused = drawn(CliName::Claude, CliOutcome::Refused, None);
        let invalid = |detail| End {
            run: 1,
            status: RunStatus::Failed,
            class: Some(ErrorClass::SessionInvalid),
            report: None,
            detail,
        };
        let documented = "claude_local: Claude Code refused the stored session, and the fresh retry failed the same way (exit code 1); stderr: No conversation found";
        assert_eq!(detail_as_documented(&invalid(documented), &refused), Ok(()));
        let unnamed = documented.replace("Claude Code", "");
        assert!(detail_as_documented(&invalid(&unnamed), &refused).is_err());
        // Exit code 2 is not exit code 27.
        let crash = drawn(CliName::Codex, CliOutcome::Crashed { code: 2 }, None);
        let longer = End { detail: "codex_local: Codex ended with exit code 27", ..invalid("") };
        assert!(detail_as_documented(&longer, &crash).is_err());
    }

    #[test]
    fn a_run_ended_otherwise_than_its_cli_printed_is_reported() {
        let success = [drawn(CliName::Claude, CliOutcome::Succeeded, None)];
        let good = report(Some("done"), set("s2"));
        let end = |status, class, report| End {
            run: 1,
            status,
            class,
            report,
            detail: match class {
                Some(ErrorClass::ParseError) => CODEX_GARBAGE,
                _ => CLAUDE_FINISHED,
            },
        };
        let ok = end(RunStatus::Succeeded, None, Some(&good));
        assert_eq!(judge_end(&ok, &success, &claude_usage(), false), Ok(true));
        // Ended by something else than its CLI: not judged.
        let cancelled = end(RunStatus::Cancelled, None, None);
        assert_eq!(
            judge_end(&cancelled, &success, &Usage::default(), false),
            Ok(false)
        );
        let wrong_text = report(Some("other"), set("s2"));
        let wrong_session = report(Some("done"), set("s1"));
        let mut one_call_short = claude_usage();
        one_call_short.llm_calls = 0;
        let failed = end(
            RunStatus::Failed,
            Some(ErrorClass::ExitNonzero),
            Some(&good),
        );
        let broken: [(End, Usage); 4] = [
            (
                end(RunStatus::Succeeded, None, Some(&wrong_text)),
                claude_usage(),
            ),
            (
                end(RunStatus::Succeeded, None, Some(&wrong_session)),
                claude_usage(),
            ),
            (end(RunStatus::Succeeded, None, Some(&good)), one_call_short),
            (failed, claude_usage()),
        ];
        for (end, usage) in &broken {
            let error = judge_end(end, &success, usage, false).unwrap_err();
            assert_eq!(error.invariant, "cli_run_as_printed");
        }
        // A refusal, then a fresh run that printed garbage: parse_error, the session cleared.
        let retried = [
            drawn(CliName::Codex, CliOutcome::Refused, Some("s1")),
            drawn(CliName::Codex, CliOutcome::Garbage, None),
        ];
        let cleared = report(None, Some(SessionChange::Clear));
        let parse = end(
            RunStatus::Failed,
            Some(ErrorClass::ParseError),
            Some(&cleared),
        );
        assert_eq!(
            judge_end(&parse, &retried, &Usage::default(), false),
            Ok(true)
        );
        let kept = report(None, None);
        let parse_kept = end(RunStatus::Failed, Some(ErrorClass::ParseError), Some(&kept));
        assert!(judge_end(&parse_kept, &retried, &Usage::default(), false).is_err());
    }

    #[test]
    fn an_invocation_resuming_another_session_or_a_third_one_is_reported() {
        let mut oracle = CodingOracle::default();
        oracle.agents.insert(1, false);
        oracle.runs.queued(5, (1, "pr-1".into()));
        oracle.sessions.insert((1, "pr-1".into()), "s1".into());
        let fresh = drawn(CliName::Claude, CliOutcome::Succeeded, None);
        assert!(
            oracle.invoked(5, &fresh).is_err(),
            "the stored session was not resumed"
        );
        let refused = drawn(CliName::Claude, CliOutcome::Refused, Some("s1"));
        oracle
            .invoked(5, &refused)
            .expect("the stored session resumed");
        let again = drawn(CliName::Claude, CliOutcome::Refused, Some("s1"));
        assert!(
            oracle.invoked(5, &again).is_err(),
            "the retry resumes nothing"
        );
        oracle.invoked(5, &fresh).expect("the fresh retry");
        assert!(
            oracle.invoked(5, &fresh).is_err(),
            "never a third invocation"
        );
    }
}
