//! The `process` adapter: each run starts the spec's `command` (no shell) with its rendered
//! `args` and `stdin`, in its own process group, and ends with the child: exit 0 succeeds (the
//! tail of stdout is the run's answer excerpt), anything else fails with its exit recorded.
//! Termination and transcripts are the shared child runner's (`child.rs`).

use std::collections::VecDeque;

use super::adapter::{Adapter, AdapterFuture, AdapterOutcome, RunContext};
use super::child::{child_request, run_child, ChildEnd, ChildLimits, ChildRun};
use super::prompt::{render_template, PromptVars};
use super::spawn::{OutputLine, SpawnError, Stream};
use crate::engine::breaker::FailureCause;
use crate::engine::cli_spec::ProcessSpec;
use crate::engine::run::{ChildExit, ErrorClass, RunReport, RunStatus, StopReason};
use crate::redact::Redactor;
use crate::transcript::FINAL_ANSWER_EXCERPT_BYTES_MAX;

/// Runs a command.
#[derive(Debug, Clone)]
pub struct Process {
    spec: ProcessSpec,
}

impl Process {
    pub fn new(spec: ProcessSpec) -> Self {
        Process { spec }
    }
}

impl Adapter for Process {
    fn execute(&self, run: RunContext) -> AdapterFuture {
        let spec = self.spec.clone();
        Box::pin(async move {
            run.record_wakeup().await;
            let (args, stdin) = match rendered(&spec, &run) {
                Ok(rendered) => rendered,
                Err(error) => return failed(ErrorClass::AdapterError, error, None),
            };
            let stdin = stdin.map(String::into_bytes);
            let request = match child_request(&run, &spec.command, args, stdin, &spec.child) {
                Ok(request) => request,
                Err(error) => return failed(ErrorClass::SpawnFailed, error, None),
            };
            let mut tail = StdoutTail::new(run.transcript.redactor().clone());
            let limits = ChildLimits::of(&spec.child);
            let ran = run_child(&run, request, limits, &mut |line| tail.push(line)).await;
            outcome(&spec, ran, tail)
        })
    }
}

/// The arguments and stdin, rendered with the run's prompt variables.
fn rendered(spec: &ProcessSpec, run: &RunContext) -> Result<(Vec<String>, Option<String>), String> {
    let vars = PromptVars::of_run(run);
    let args = spec
        .args
        .iter()
        .enumerate()
        .map(|(i, arg)| render_template(&format!("adapter.args[{i}]"), arg, &vars))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| error.to_string())?;
    let stdin = spec
        .stdin
        .as_deref()
        .map(|stdin| render_template("adapter.stdin", stdin, &vars))
        .transpose()
        .map_err(|error| error.to_string())?;
    Ok((args, stdin))
}

fn outcome(spec: &ProcessSpec, ran: ChildRun, tail: StdoutTail) -> AdapterOutcome {
    let command = &spec.command;
    match ran {
        ChildRun::NotStarted(error @ SpawnError::NotFound { .. }) => {
            failed(ErrorClass::AdapterNotInstalled, error.to_string(), None)
        }
        ChildRun::NotStarted(error) => failed(ErrorClass::SpawnFailed, error.to_string(), None),
        ChildRun::NotRecorded(error) => failed(
            ErrorClass::SpawnFailed,
            format!("{command} was stopped: its process group could not be recorded ({error})"),
            None,
        ),
        ChildRun::Ended(end) if end.timed_out => AdapterOutcome {
            stop_reason: Some(StopReason::TimedOut),
            report: Some(exit_report(&end, None)),
            error_class: Some(ErrorClass::TimedOut),
            ..AdapterOutcome::new(
                RunStatus::TimedOut,
                format!(
                    "{command} was still running after timeout_sec = {}; its process group got \
                     SIGTERM{}",
                    spec.child.timeout_sec,
                    killed_note(&end, spec.child.grace_sec),
                ),
                Some(FailureCause::Tool),
            )
        },
        ChildRun::Ended(end) if end.status.success() => {
            let detail = format!("{command} exited 0{}", killed_note(&end, spec.child.grace_sec));
            AdapterOutcome {
                stop_reason: Some(StopReason::EndTurn),
                report: Some(exit_report(&end, Some(tail))),
                ..AdapterOutcome::new(RunStatus::Succeeded, detail, None)
            }
        }
        ChildRun::Ended(end) => AdapterOutcome {
            report: Some(exit_report(&end, Some(tail))),
            ..failed(
                ErrorClass::ExitNonzero,
                format!("{command} {}", exit_words(&end)),
                Some(FailureCause::Tool),
            )
        },
    }
}

/// A failed outcome of `class`.
fn failed(class: ErrorClass, detail: String, cause: Option<FailureCause>) -> AdapterOutcome {
    AdapterOutcome {
        stop_reason: Some(StopReason::ToolError),
        error_class: Some(class),
        ..AdapterOutcome::new(RunStatus::Failed, detail, cause)
    }
}

fn exit_words(end: &ChildEnd) -> String {
    match (end.status.code, end.status.signal) {
        (Some(code), _) => format!("exited {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended without an exit status".to_string(),
    }
}

/// What the run says about a group that had to be SIGKILLed.
fn killed_note(end: &ChildEnd, grace_sec: u64) -> String {
    match end.killed {
        true => format!(", then SIGKILL after grace_sec = {grace_sec}"),
        false => String::new(),
    }
}

fn exit_report(end: &ChildEnd, tail: Option<StdoutTail>) -> RunReport {
    let (answer_excerpt, excerpt_truncated) = match tail {
        Some(tail) => {
            let (text, truncated) = tail.into_text();
            (Some(text), truncated)
        }
        None => (None, false),
    };
    RunReport {
        answer_excerpt,
        excerpt_truncated,
        exit: Some(ChildExit {
            code: end.status.code,
            signal: end.status.signal,
        }),
        ..RunReport::default()
    }
}

/// The last lines of stdout, at most [`FINAL_ANSWER_EXCERPT_BYTES_MAX`] bytes with their
/// newlines, each redacted as it arrives (so that a cut never splits a secret).
struct StdoutTail {
    redactor: Redactor,
    lines: VecDeque<String>,
    bytes: usize,
    dropped: bool,
}

impl StdoutTail {
    fn new(redactor: Redactor) -> Self {
        StdoutTail {
            redactor,
            lines: VecDeque::new(),
            bytes: 0,
            dropped: false,
        }
    }

    fn push(&mut self, line: &OutputLine) {
        if line.stream != Stream::Stdout {
            return;
        }
        let mut text = self.redactor.redact(&line.text).into_owned();
        if text.len() > FINAL_ANSWER_EXCERPT_BYTES_MAX {
            text = tail_of(&text, FINAL_ANSWER_EXCERPT_BYTES_MAX).to_string();
            self.dropped = true;
        }
        self.bytes += text.len() + usize::from(!self.lines.is_empty());
        self.lines.push_back(text);
        while self.bytes > FINAL_ANSWER_EXCERPT_BYTES_MAX {
            let first = self.lines.pop_front().expect("over budget means a line is held");
            self.bytes -= first.len() + usize::from(!self.lines.is_empty());
            self.dropped = true;
        }
    }

    /// The tail as text, and whether anything before it was left out.
    fn into_text(self) -> (String, bool) {
        (Vec::from(self.lines).join("\n"), self.dropped)
    }
}

/// The longest suffix of `text` of at most `bytes_max` bytes that starts at a character.
fn tail_of(text: &str, bytes_max: usize) -> &str {
    let mut at = text.len().saturating_sub(bytes_max);
    while !text.is_char_boundary(at) {
        at += 1;
    }
    &text[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(text: &str) -> OutputLine {
        OutputLine {
            stream: Stream::Stdout,
            text: text.to_string(),
        }
    }

    #[test]
    fn the_tail_keeps_the_last_lines_within_the_excerpt_cap() {
        let mut tail = StdoutTail::new(Redactor::new(["sk-hidden"]));
        tail.push(&out("first"));
        tail.push(&OutputLine {
            stream: Stream::Stderr,
            text: "not stdout".into(),
        });
        tail.push(&out("key sk-hidden"));
        assert_eq!(tail.into_text(), ("first\nkey [REDACTED]".to_string(), false));

        // Exactly at the cap with the newline: kept whole; one byte more drops the first line.
        let half = FINAL_ANSWER_EXCERPT_BYTES_MAX / 2;
        let mut tail = StdoutTail::new(Redactor::new(Vec::<String>::new()));
        tail.push(&out(&"a".repeat(half)));
        tail.push(&out(&"b".repeat(FINAL_ANSWER_EXCERPT_BYTES_MAX - half - 1)));
        let (text, dropped) = tail.into_text();
        assert_eq!((text.len(), dropped), (FINAL_ANSWER_EXCERPT_BYTES_MAX, false));
        let mut tail = StdoutTail::new(Redactor::new(Vec::<String>::new()));
        tail.push(&out(&"a".repeat(half)));
        tail.push(&out(&"b".repeat(FINAL_ANSWER_EXCERPT_BYTES_MAX - half)));
        let (text, dropped) = tail.into_text();
        assert!(dropped && text.starts_with('b') && text.len() < FINAL_ANSWER_EXCERPT_BYTES_MAX);
    }

    #[test]
    fn one_line_past_the_cap_keeps_its_end_at_a_character_boundary() {
        let mut tail = StdoutTail::new(Redactor::new(Vec::<String>::new()));
        tail.push(&out(&format!("x{}", "é".repeat(FINAL_ANSWER_EXCERPT_BYTES_MAX))));
        let (text, dropped) = tail.into_text();
        assert!(dropped && text.len() <= FINAL_ANSWER_EXCERPT_BYTES_MAX);
        assert!(text.chars().all(|c| c == 'é'));
    }
}
