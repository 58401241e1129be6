//! Claude Code in print mode: `claude -p --output-format json`, the prompt on stdin, one JSON
//! result object printed when the run ends (docs/adapters/coding-cli.md describes the fields
//! read).

use serde_json::Value;

use super::report::{count, micro_usd, session_id, CliReport};
use crate::engine::cli_spec::CodingCliSpec;
use crate::exec::model::TokenUsage;

/// The program run when the spec names no `binary`.
pub const DEFAULT_BINARY: &str = "claude";

/// What Claude Code says (on stderr, and in its error result) when `--resume` names a session
/// it does not have: lower-case, matched case-insensitively.
pub const SESSION_UNKNOWN_SIGNALS: &[&str] = &["no conversation found with session id"];

/// The result object's `type`, and the `subtype` of a successful run.
const RESULT_TYPE: &str = "result";
const SUCCESS_SUBTYPE: &str = "success";

/// The arguments of one run: Vigil's own, then the spec's `extra_args` verbatim.
pub fn args(spec: &CodingCliSpec, resume: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = ["-p", "--output-format", "json"].map(String::from).into();
    if let Some(session) = resume {
        args.extend(["--resume".to_string(), session.to_string()]);
    }
    if let Some(model) = &spec.model {
        args.extend(["--model".to_string(), model.clone()]);
    }
    if let Some(turns) = spec.max_turns {
        args.extend(["--max-turns".to_string(), turns.to_string()]);
    }
    args.extend(spec.extra_args.iter().cloned());
    args
}

/// Reads Claude Code's stdout line by line, keeping only the last result object (the lines
/// before it, e.g. a `stream-json` run's events, are not kept).
#[derive(Debug, Default)]
pub struct Reader {
    result: Option<Value>,
    lines: u64,
}

impl Reader {
    /// One stdout line.
    pub fn push(&mut self, line: &str) {
        self.lines += 1;
        if let Some(value) = super::report::json_line(line) {
            if value["type"] == RESULT_TYPE {
                self.result = Some(value);
            }
        }
    }

    /// The run's report, or why there is none (no result object: garbage, or the wrong format).
    pub fn finish(self) -> Result<CliReport, String> {
        let result = self.result.ok_or_else(|| {
            format!(
                "Claude Code printed no result object ({} lines on stdout; expected --output-format json)",
                self.lines
            )
        })?;
        Ok(report_of(&result))
    }
}

/// Reads whole output at once (the last JSON object of type `result` wins).
pub fn parse(stdout: &[String]) -> Result<CliReport, String> {
    let mut reader = Reader::default();
    stdout.iter().for_each(|line| reader.push(line));
    reader.finish()
}

fn report_of(result: &Value) -> CliReport {
    let usage = &result["usage"];
    // Claude counts new, cache-written and cache-read input apart; Vigil's input is all three.
    let cached = count(&usage["cache_read_input_tokens"]);
    let input = count(&usage["input_tokens"])
        .saturating_add(count(&usage["cache_creation_input_tokens"]))
        .saturating_add(cached);
    let tokens = TokenUsage {
        input_tokens: input,
        cached_input_tokens: cached,
        output_tokens: count(&usage["output_tokens"]),
    };
    let used = input > 0 || tokens.output_tokens > 0;
    CliReport {
        session_id: session_id(&result["session_id"]),
        tokens,
        turns: count(&result["num_turns"]).max(u64::from(used)),
        cost_micro_usd: micro_usd(&result["total_cost_usd"]),
        final_text: text(&result["result"]),
        error: error_of(result),
    }
}

/// Why the run failed, if it did: `is_error`, or a subtype other than `success`.
fn error_of(result: &Value) -> Option<String> {
    let subtype = result["subtype"].as_str().unwrap_or(SUCCESS_SUBTYPE);
    let failed = result["is_error"] == Value::Bool(true) || subtype != SUCCESS_SUBTYPE;
    if !failed {
        return None;
    }
    let errors: Vec<&str> = result["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let why = if !errors.is_empty() {
        errors.join("; ")
    } else {
        text(&result["result"]).unwrap_or_default()
    };
    Some(if why.is_empty() {
        format!("Claude Code ended with {subtype}")
    } else {
        format!("Claude Code ended with {subtype}: {why}")
    })
}

/// A non-empty string field.
fn text(value: &Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::coding_cli::report::mentions;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    const SUCCESS: &str = r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":2100,"num_turns":3,"result":"Done: 2 files fixed.","session_id":"0b6c5f0e-1","total_cost_usd":0.0123456,"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":45}}"#;

    #[test]
    fn a_success_gives_session_usage_cost_and_text() {
        let report = parse(&lines(&format!("some banner\n{SUCCESS}\n"))).unwrap();
        assert_eq!(report.session_id.as_deref(), Some("0b6c5f0e-1"));
        assert_eq!(
            report.tokens,
            TokenUsage {
                input_tokens: 3_210,
                cached_input_tokens: 3_000,
                output_tokens: 45
            }
        );
        assert_eq!(report.turns, 3);
        assert_eq!(report.cost_micro_usd, Some(12_346));
        assert_eq!(report.final_text.as_deref(), Some("Done: 2 files fixed."));
        assert_eq!(report.error, None);
    }

    #[test]
    fn error_results_say_why() {
        let turns = r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":5,"session_id":"s"}"#;
        let report = parse(&lines(turns)).unwrap();
        assert_eq!(report.error.as_deref(), Some("Claude Code ended with error_max_turns"));
        assert_eq!(report.session_id.as_deref(), Some("s"));
        let unknown = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,"session_id":"x","total_cost_usd":0,"errors":["No conversation found with session ID: x"]}"#;
        let report = parse(&lines(unknown)).unwrap();
        let error = report.error.unwrap();
        assert!(error.contains("No conversation found"), "{error}");
        assert!(mentions([error.as_str()], SESSION_UNKNOWN_SIGNALS));
        assert_eq!(report.turns, 0, "no tokens, no turns");
    }

    #[test]
    fn a_result_that_spent_tokens_counts_one_turn_when_it_says_none() {
        // Input alone is a model call too: `num_turns` absent, no output.
        let input_only = r#"{"type":"result","subtype":"success","result":"","usage":{"input_tokens":12,"output_tokens":0}}"#;
        assert_eq!(parse(&lines(input_only)).unwrap().turns, 1);
        let output_only = r#"{"type":"result","subtype":"success","result":"","usage":{"output_tokens":3}}"#;
        assert_eq!(parse(&lines(output_only)).unwrap().turns, 1);
        let nothing = r#"{"type":"result","subtype":"success","result":"","usage":{}}"#;
        assert_eq!(parse(&lines(nothing)).unwrap().turns, 0);
    }

    #[test]
    fn garbage_or_no_result_is_a_parse_error() {
        assert!(parse(&lines("hello\nnot json {")).is_err());
        assert!(parse(&[]).is_err());
        assert!(parse(&lines(r#"{"type":"assistant","message":{}}"#)).is_err());
    }

    #[test]
    fn missing_or_odd_numbers_count_as_zero() {
        let odd = r#"{"type":"result","subtype":"success","result":"ok","usage":{"input_tokens":-4,"output_tokens":"9"},"total_cost_usd":"x"}"#;
        let report = parse(&lines(odd)).unwrap();
        assert_eq!(report.tokens, TokenUsage::default());
        assert_eq!(report.cost_micro_usd, None);
        assert_eq!(report.session_id, None);
    }

    #[test]
    fn arguments_put_vigils_own_first_then_extra_args() {
        let spec = CodingCliSpec {
            model: Some("sonnet".into()),
            max_turns: Some(7),
            extra_args: vec!["--permission-mode".into(), "acceptEdits".into()],
            ..CodingCliSpec::default()
        };
        assert_eq!(
            args(&spec, Some("s-1")),
            [
                "-p", "--output-format", "json", "--resume", "s-1", "--model", "sonnet",
                "--max-turns", "7", "--permission-mode", "acceptEdits"
            ]
        );
        assert_eq!(args(&CodingCliSpec::default(), None), ["-p", "--output-format", "json"]);
    }
}
