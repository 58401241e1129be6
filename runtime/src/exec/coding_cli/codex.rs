//! Codex non-interactive mode: `codex exec --json`, the prompt on stdin (`-`), one JSON event
//! per stdout line (docs/adapters/coding-cli.md describes the events read).

use serde_json::Value;

use super::report::{count, session_id, CliReport};
use crate::engine::cli_spec::CodingCliSpec;

/// The program run when the spec names no `binary`.
pub const DEFAULT_BINARY: &str = "codex";

/// What Codex says (on stderr, or in an error event) when `exec resume` names a session it does
/// not have: lower-case, matched case-insensitively.
pub const SESSION_UNKNOWN_SIGNALS: &[&str] =
    &["no saved session found with id", "no rollout found for thread id"];

/// The positional prompt that makes Codex read the prompt from stdin.
const PROMPT_FROM_STDIN: &str = "-";

/// The arguments of one run: `exec --json`, the model, the spec's `extra_args` verbatim, then
/// `resume <session>` when there is one, and `-` (the prompt comes on stdin).
pub fn args(spec: &CodingCliSpec, resume: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = ["exec", "--json"].map(String::from).into();
    if let Some(model) = &spec.model {
        args.extend(["--model".to_string(), model.clone()]);
    }
    args.extend(spec.extra_args.iter().cloned());
    if let Some(session) = resume {
        args.extend(["resume".to_string(), session.to_string()]);
    }
    args.push(PROMPT_FROM_STDIN.to_string());
    args
}

/// Reads Codex's stdout line by line, folding its events: `thread.started` (the session),
/// `turn.completed` (usage, summed), `item.completed` of an `agent_message` (the final text:
/// the last one), `turn.failed` and `error` (why it failed). Lines that are not JSON objects are
/// skipped; nothing but the report so far is kept.
#[derive(Debug, Default)]
pub struct Reader {
    report: CliReport,
    /// A `turn.completed`, `turn.failed` or `error` was seen: the run's end is known.
    ended: bool,
    completed: bool,
    stream_error: Option<String>,
    lines: u64,
}

impl Reader {
    /// One stdout line.
    pub fn push(&mut self, line: &str) {
        self.lines += 1;
        if let Some(event) = super::report::json_line(line) {
            fold(self, &event);
        }
    }

    /// The run's report, or why there is none (no turn completed or failed, no error).
    pub fn finish(self) -> Result<CliReport, String> {
        if !self.ended {
            return Err(format!(
                "Codex printed no turn.completed, turn.failed or error event ({} lines on stdout; expected exec --json)",
                self.lines
            ));
        }
        let mut report = self.report;
        // An `error` event is unrecoverable unless a turn still completed after it.
        if report.error.is_none() && !self.completed {
            report.error = self.stream_error;
        }
        Ok(report)
    }
}

/// Reads whole output at once.
pub fn parse(stdout: &[String]) -> Result<CliReport, String> {
    let mut reader = Reader::default();
    stdout.iter().for_each(|line| reader.push(line));
    reader.finish()
}

fn fold(reading: &mut Reader, event: &Value) {
    let report = &mut reading.report;
    match event["type"].as_str() {
        Some("thread.started") => {
            report.session_id = session_id(&event["thread_id"]);
        }
        Some("turn.completed") => {
            let usage = &event["usage"];
            let tokens = &mut report.tokens;
            tokens.input_tokens = tokens.input_tokens.saturating_add(count(&usage["input_tokens"]));
            tokens.cached_input_tokens = tokens
                .cached_input_tokens
                .saturating_add(count(&usage["cached_input_tokens"]));
            tokens.output_tokens = tokens.output_tokens.saturating_add(count(&usage["output_tokens"]));
            report.turns += 1;
            reading.ended = true;
            reading.completed = true;
        }
        Some("item.completed") if event["item"]["type"] == "agent_message" => {
            if let Some(text) = event["item"]["text"].as_str() {
                report.final_text = Some(text.to_string());
            }
        }
        Some("turn.failed") => {
            let message = event["error"]["message"].as_str().unwrap_or("no message");
            report.error = Some(format!("Codex turn failed: {message}"));
            reading.ended = true;
        }
        Some("error") => {
            let message = event["message"].as_str().unwrap_or("no message");
            reading.stream_error = Some(format!("Codex error: {message}"));
            reading.ended = true;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::coding_cli::report::mentions;
    use crate::exec::model::TokenUsage;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    const SUCCESS: &str = r#"{"type":"thread.started","thread_id":"0199a213-81c0"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Looking**"}}
{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"first"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"All tests pass."}}
{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}"#;

    #[test]
    fn a_success_gives_thread_usage_and_the_last_message() {
        let report = parse(&lines(SUCCESS)).unwrap();
        assert_eq!(report.session_id.as_deref(), Some("0199a213-81c0"));
        assert_eq!(
            report.tokens,
            TokenUsage {
                input_tokens: 24_763,
                cached_input_tokens: 24_448,
                output_tokens: 122
            }
        );
        assert_eq!(report.turns, 1);
        assert_eq!(report.cost_micro_usd, None, "codex reports no cost");
        assert_eq!(report.final_text.as_deref(), Some("All tests pass."));
        assert_eq!(report.error, None);
    }

    #[test]
    fn usage_of_several_turns_adds_up() {
        let two = format!("{SUCCESS}\n{{\"type\":\"turn.completed\",\"usage\":{{\"input_tokens\":1,\"cached_input_tokens\":0,\"output_tokens\":2}}}}");
        let report = parse(&lines(&two)).unwrap();
        assert_eq!(report.tokens.input_tokens, 24_764);
        assert_eq!(report.tokens.output_tokens, 124);
        assert_eq!(report.turns, 2);
    }

    #[test]
    fn failures_say_why() {
        let failed = r#"{"type":"thread.started","thread_id":"t"}
{"type":"turn.failed","error":{"message":"model overloaded"}}"#;
        let report = parse(&lines(failed)).unwrap();
        assert_eq!(report.error.as_deref(), Some("Codex turn failed: model overloaded"));
        let error = r#"{"type":"error","message":"No saved session found with ID x"}"#;
        let report = parse(&lines(error)).unwrap();
        assert!(mentions([report.error.as_deref().unwrap()], SESSION_UNKNOWN_SIGNALS));
        let recovered = r#"{"type":"error","message":"stream reconnecting"}
{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}"#;
        assert_eq!(parse(&lines(recovered)).unwrap().error, None);
    }

    #[test]
    fn garbage_or_no_end_is_a_parse_error() {
        assert!(parse(&lines("garbage\n{not json")).is_err());
        assert!(parse(&[]).is_err());
        assert!(parse(&lines(r#"{"type":"thread.started","thread_id":"t"}"#)).is_err());
    }

    #[test]
    fn arguments_resume_as_a_subcommand_and_read_the_prompt_from_stdin() {
        let spec = CodingCliSpec {
            model: Some("gpt-5-codex".into()),
            extra_args: vec!["--skip-git-repo-check".into()],
            ..CodingCliSpec::default()
        };
        assert_eq!(
            args(&spec, Some("t-1")),
            ["exec", "--json", "--model", "gpt-5-codex", "--skip-git-repo-check", "resume", "t-1", "-"]
        );
        assert_eq!(args(&CodingCliSpec::default(), None), ["exec", "--json", "-"]);
    }
}
