//! How a coding CLI's run ends, from its last invocation: status, error class, the session it
//! leaves for its task, and what it answered. Pure: the unit tests feed it invocations.

use super::report::CliReport;
use super::CliKind;
use crate::engine::breaker::FailureCause;
use crate::engine::cli_spec::CodingCliSpec;
use crate::engine::run::{ChildExit, ErrorClass, RunReport, RunStatus, SessionChange, StopReason};
use crate::exec::adapter::AdapterOutcome;
use crate::exec::spawn::ExitStatus;
use crate::transcript::{excerpt, FINAL_ANSWER_EXCERPT_BYTES_MAX};

/// How one invocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptEnd {
    /// The binary does not exist.
    NotInstalled(String),
    /// It could not be started (or its environment could not be built).
    SpawnFailed(String),
    /// It started but the run was ended before its process group was recorded.
    NotRecorded(String),
    /// It ran; `timed_out`: past the spec's `timeout_sec`, it was terminated.
    Exited { status: ExitStatus, timed_out: bool },
}

/// What one invocation gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub end: AttemptEnd,
    /// Its stdout's report, or why there is none.
    pub parsed: Result<CliReport, String>,
    /// The CLI said it does not know the session it was asked to resume (on stderr, or in its
    /// error report).
    pub session_unknown: bool,
    pub stderr_tail: Vec<String>,
}

impl Attempt {
    /// Exited 0 in time with a report that is not an error.
    pub fn succeeded(&self) -> bool {
        let exited_ok = matches!(self.end, AttemptEnd::Exited { status, timed_out: false } if status.success());
        exited_ok && matches!(&self.parsed, Ok(report) if report.error.is_none())
    }

    /// The CLI refused the session: it said so, and the invocation failed.
    pub fn session_refused(&self) -> bool {
        self.session_unknown && !self.succeeded()
    }

    /// An invocation that never ran.
    pub fn without_output(end: AttemptEnd) -> Attempt {
        Attempt {
            end,
            parsed: Err("the CLI did not run".into()),
            session_unknown: false,
            stderr_tail: Vec::new(),
        }
    }
}

/// Whether the invocation concluded is a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The first invocation (it resumed the stored session, if any, which the CLI accepted).
    None,
    /// The fresh invocation after the CLI refused the stored session.
    AfterRefusal,
}

/// The run's outcome from its last invocation.
pub fn conclude(kind: CliKind, spec: &CodingCliSpec, attempt: &Attempt, retry: Retry) -> AdapterOutcome {
    let name = kind.adapter_name();
    let product = kind.product();
    let refused = retry == Retry::AfterRefusal;
    let (status, class, detail) = match &attempt.end {
        AttemptEnd::NotInstalled(why) => (
            RunStatus::Failed,
            Some(ErrorClass::AdapterNotInstalled),
            format!(
                "{name}: {product} is not installed: {:?} was not found ({why}); install it on the node or set adapter.binary to its path",
                kind.binary(spec)
            ),
        ),
        AttemptEnd::SpawnFailed(why) => (
            RunStatus::Failed,
            Some(ErrorClass::SpawnFailed),
            format!("{name}: could not start {product}: {why}"),
        ),
        AttemptEnd::NotRecorded(why) => (
            RunStatus::Failed,
            Some(ErrorClass::AdapterError),
            format!("{name}: the run ended before its process group was recorded: {why}"),
        ),
        AttemptEnd::Exited { timed_out: true, .. } => (
            RunStatus::TimedOut,
            Some(ErrorClass::TimedOut),
            format!(
                "{name}: {product} was still running after timeout_sec = {}; its process group was terminated",
                spec.child.timeout_sec
            ),
        ),
        AttemptEnd::Exited { status, .. } => exited(kind, attempt, *status, refused),
    };
    let mut report = RunReport {
        session: session_change(attempt, refused),
        exit: match attempt.end {
            AttemptEnd::Exited { status, .. } => Some(ChildExit {
                code: status.code,
                signal: status.signal,
            }),
            _ => None,
        },
        ..RunReport::default()
    };
    if let Ok(Some(text)) = attempt.parsed.as_ref().map(|r| r.final_text.as_deref()) {
        let cut = excerpt(text, FINAL_ANSWER_EXCERPT_BYTES_MAX);
        report.answer_excerpt = Some(cut.text);
        report.excerpt_truncated = cut.truncated;
    }
    let failed_in_the_cli = matches!(
        class,
        Some(ErrorClass::ExitNonzero | ErrorClass::ParseError | ErrorClass::TimedOut | ErrorClass::SessionInvalid | ErrorClass::LlmError)
    );
    AdapterOutcome {
        stop_reason: match (status, class) {
            (RunStatus::Succeeded, _) => Some(StopReason::EndTurn),
            (RunStatus::TimedOut, _) => Some(StopReason::TimedOut),
            _ => Some(StopReason::LlmError),
        },
        report: Some(report),
        error_class: class,
        // Why only these count for the breaker: a missing binary or a bad environment is a
        // configuration mistake no retry fixes, not a failing agent.
        cause: failed_in_the_cli.then_some(FailureCause::Llm),
        status,
        detail,
        // Set by `attempt.rs` from the last invocation's report.
        last_call: None,
    }
}

/// The end of an invocation that ran to its exit.
fn exited(
    kind: CliKind,
    attempt: &Attempt,
    status: ExitStatus,
    refused: bool,
) -> (RunStatus, Option<ErrorClass>, String) {
    let (name, product) = (kind.adapter_name(), kind.product());
    let exit = match (status.code, status.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "an unknown status".to_string(),
    };
    let stderr = match attempt.stderr_tail.as_slice() {
        [] => String::new(),
        lines => format!("; stderr: {}", lines.join(" | ")),
    };
    if refused && attempt.session_refused() {
        return (
            RunStatus::Failed,
            Some(ErrorClass::SessionInvalid),
            format!("{name}: {product} refused the stored session, and the fresh retry failed the same way ({exit}){stderr}"),
        );
    }
    match &attempt.parsed {
        Ok(report) => match (&report.error, status.success()) {
            (None, true) => (
                RunStatus::Succeeded,
                None,
                format!("{name}: {product} finished ({} turns)", report.turns),
            ),
            (Some(error), true) => (RunStatus::Failed, Some(ErrorClass::LlmError), format!("{name}: {error}")),
            (Some(error), false) => (
                RunStatus::Failed,
                Some(ErrorClass::ExitNonzero),
                format!("{name}: {error} ({exit}){stderr}"),
            ),
            (None, false) => (
                RunStatus::Failed,
                Some(ErrorClass::ExitNonzero),
                format!("{name}: {product} ended with {exit}{stderr}"),
            ),
        },
        // A CLI that failed says why on stderr; its stdout is beside the point.
        Err(_) if !status.success() => (
            RunStatus::Failed,
            Some(ErrorClass::ExitNonzero),
            format!("{name}: {product} ended with {exit}{stderr}"),
        ),
        Err(why) => (RunStatus::Failed, Some(ErrorClass::ParseError), format!("{name}: {why}")),
    }
}

/// The task's session after the run: the one the CLI reported; else, when the stored one was
/// refused, none.
fn session_change(attempt: &Attempt, refused: bool) -> Option<SessionChange> {
    let reported = attempt
        .parsed
        .as_ref()
        .ok()
        .and_then(|report| report.session_id.clone())
        .filter(|_| !attempt.session_refused());
    match reported {
        Some(session_id) => Some(SessionChange::Set { session_id }),
        None if refused => Some(SessionChange::Clear),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> AttemptEnd {
        AttemptEnd::Exited {
            status: ExitStatus {
                code: Some(code),
                signal: None,
            },
            timed_out: false,
        }
    }

    fn attempt(end: AttemptEnd, parsed: Result<CliReport, String>, unknown: bool) -> Attempt {
        Attempt {
            end,
            parsed,
            session_unknown: unknown,
            stderr_tail: vec!["oops".into()],
        }
    }

    fn ok(session: &str, error: Option<&str>) -> Result<CliReport, String> {
        Ok(CliReport {
            session_id: Some(session.into()),
            final_text: Some("done".into()),
            error: error.map(str::to_string),
            turns: 1,
            ..CliReport::default()
        })
    }

    fn run(attempt: &Attempt, retry: Retry) -> AdapterOutcome {
        conclude(CliKind::Claude, &CodingCliSpec::default(), attempt, retry)
    }

    #[test]
    fn a_success_sets_the_session_and_the_answer() {
        let outcome = run(&attempt(exited(0), ok("s1", None), false), Retry::None);
        assert_eq!(outcome.status, RunStatus::Succeeded);
        assert_eq!(outcome.error_class, None);
        let report = outcome.report.unwrap();
        assert_eq!(report.session, Some(SessionChange::Set { session_id: "s1".into() }));
        assert_eq!(report.answer_excerpt.as_deref(), Some("done"));
        assert_eq!(report.exit, Some(ChildExit { code: Some(0), signal: None }));
    }

    #[test]
    fn each_failure_has_its_class() {
        let class = |a: Attempt| run(&a, Retry::None).error_class;
        let missing = AttemptEnd::NotInstalled("No such file".into());
        assert_eq!(class(attempt(missing, Err("x".into()), false)), Some(ErrorClass::AdapterNotInstalled));
        let spawn = AttemptEnd::SpawnFailed("EACCES".into());
        assert_eq!(class(attempt(spawn, Err("x".into()), false)), Some(ErrorClass::SpawnFailed));
        assert_eq!(class(attempt(exited(0), Err("garbage".into()), false)), Some(ErrorClass::ParseError));
        assert_eq!(class(attempt(exited(2), Err("garbage".into()), false)), Some(ErrorClass::ExitNonzero));
        assert_eq!(class(attempt(exited(1), ok("s", Some("max turns")), false)), Some(ErrorClass::ExitNonzero));
        assert_eq!(class(attempt(exited(0), ok("s", Some("max turns")), false)), Some(ErrorClass::LlmError));
        let late = AttemptEnd::Exited { status: ExitStatus { code: None, signal: Some(15) }, timed_out: true };
        let timed_out = run(&attempt(late, Err("x".into()), false), Retry::None);
        assert_eq!((timed_out.status, timed_out.error_class), (RunStatus::TimedOut, Some(ErrorClass::TimedOut)));
    }

    #[test]
    fn a_missing_binary_is_not_counted_by_the_breaker_but_a_failing_cli_is() {
        let missing = attempt(AttemptEnd::NotInstalled("x".into()), Err("x".into()), false);
        assert_eq!(run(&missing, Retry::None).cause, None);
        let detail = run(&missing, Retry::None).detail;
        assert!(detail.contains("\"claude\""), "{detail}");
        assert!(detail.contains("Claude Code is not installed"), "names the product: {detail}");
        let codex = conclude(CliKind::Codex, &CodingCliSpec::default(), &missing, Retry::None);
        assert!(codex.detail.contains("Codex is not installed"), "{}", codex.detail);
        let failing = attempt(exited(1), Err("x".into()), false);
        assert_eq!(run(&failing, Retry::None).cause, Some(FailureCause::Llm));
    }

    #[test]
    fn after_a_refusal_a_fresh_session_is_kept_and_none_clears_the_stored_one() {
        let fresh = run(&attempt(exited(0), ok("s2", None), false), Retry::AfterRefusal);
        assert_eq!(fresh.status, RunStatus::Succeeded);
        assert_eq!(fresh.report.unwrap().session, Some(SessionChange::Set { session_id: "s2".into() }));
        let no_session = Ok(CliReport { error: Some("boom".into()), ..CliReport::default() });
        let failed = run(&attempt(exited(1), no_session, false), Retry::AfterRefusal);
        assert_eq!(failed.error_class, Some(ErrorClass::ExitNonzero));
        assert_eq!(failed.report.unwrap().session, Some(SessionChange::Clear));
    }

    #[test]
    fn a_second_refusal_is_session_invalid_and_clears() {
        let again = attempt(exited(1), ok("s-old", Some("No conversation found")), true);
        let outcome = run(&again, Retry::AfterRefusal);
        assert_eq!(outcome.error_class, Some(ErrorClass::SessionInvalid));
        assert_eq!(outcome.report.unwrap().session, Some(SessionChange::Clear));
    }
}
