//! Simulated coding CLIs on the simulated machine: `claude` (Claude Code in print mode,
//! `--output-format json`: one result object on stdout when it ends) and `codex` (`codex exec
//! --json`: one event per stdout line), speaking the output formats docs/adapters/coding-cli.md
//! describes. A child whose program is one of them does not draw a process plan of the generic
//! kind (sim/src/processes.rs): it prints the lines such a CLI prints for an outcome drawn from
//! the seed.
//!
//! The machine keeps the sessions its CLIs have reported, as the real CLIs keep them on disk. An
//! invocation asked to resume a session the machine does not have (never reported, or
//! forgotten: expired) refuses it on stderr with the CLI's own words and exits 1, and the
//! runtime must retry without it exactly once. What each invocation printed is recorded whole
//! ([`CliDrawn`]) so that the oracle can hold the run's end, its usage and its task's session to
//! it (check/coding.rs).

use std::collections::BTreeSet;

use rand::Rng;
use serde_json::json;
use vigil::exec::spawn::Stream;

use crate::trace::{CliDrawn, CliName, CliOutcome, PrintedUsage};

/// Programs that play a coding CLI, and which.
pub fn cli_of(program: &str) -> Option<CliName> {
    match program.rsplit('/').next()? {
        "claude" => Some(CliName::Claude),
        "codex" => Some(CliName::Codex),
        _ => None,
    }
}

/// How often each outcome is drawn for an invocation that was not refused, per mille (the rest
/// succeed).
const FAILED_PERMILLE: u32 = 120;
const GARBAGE_PERMILLE: u32 = 50;
const CRASHED_PERMILLE: u32 = 50;
const HANGS_PERMILLE: u32 = 40;
/// Chance (per mille) that a session asked for has expired, though the machine had it.
const EXPIRED_PERMILLE: u32 = 100;
/// Chance (per mille) that a resumed Claude Code session is reported under a new id.
const FORKED_PERMILLE: u32 = 300;
/// Chance (per mille) that Claude Code leaves `num_turns` out, or prints 0.
const NO_TURNS_PERMILLE: u32 = 150;

/// The sessions the machine's CLIs have, and the next id to hand out.
#[derive(Debug, Default)]
pub struct Sessions {
    known: BTreeSet<String>,
    issued: u64,
}

impl Sessions {
    fn issue(&mut self, cli: CliName) -> String {
        self.issued += 1;
        let prefix = match cli {
            CliName::Claude => "claude-session",
            CliName::Codex => "codex-thread",
        };
        let id = format!("{prefix}-{}", self.issued);
        self.known.insert(id.clone());
        id
    }
}

/// The session an invocation's arguments ask to resume (Claude Code: `--resume S`; Codex: the
/// `resume S` subcommand).
fn resume_of(cli: CliName, args: &[String]) -> Option<String> {
    let flag = match cli {
        CliName::Claude => "--resume",
        CliName::Codex => "resume",
    };
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1).cloned()
}

/// What one invocation prints, in order, and its exit code (none: it never exits on its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Printed {
    pub lines: Vec<(Stream, String)>,
    pub exit: Option<i32>,
}

/// Draws what one invocation of `cli` with `args` does: what it prints and how it ends, and the
/// record of it.
pub fn draw(
    cli: CliName,
    args: &[String],
    sessions: &mut Sessions,
    rng: &mut impl Rng,
) -> (Printed, CliDrawn) {
    let resume = resume_of(cli, args);
    let mut drawn = CliDrawn {
        cli,
        resume: resume.clone(),
        outcome: CliOutcome::Succeeded,
        session: None,
        usage: Vec::new(),
        num_turns: None,
        cost_micro_usd: None,
        text: None,
    };
    if let Some(session) = &resume {
        let expired = rng.gen_range(0..1_000) < EXPIRED_PERMILLE;
        if expired || !sessions.known.contains(session) {
            sessions.known.remove(session);
            drawn.outcome = CliOutcome::Refused;
            let lines = vec![(Stream::Stderr, refusal(cli, session))];
            return (
                Printed {
                    lines,
                    exit: Some(1),
                },
                drawn,
            );
        }
    }
    let mut roll = rng.gen_range(0..1_000u32);
    let mut pick = |permille: u32| {
        let hit = roll < permille;
        roll = roll.saturating_sub(permille);
        hit
    };
    drawn.outcome = if pick(FAILED_PERMILLE) {
        CliOutcome::Failed {
            code: if rng.gen_bool(0.5) { 1 } else { 0 },
        }
    } else if pick(GARBAGE_PERMILLE) {
        CliOutcome::Garbage
    } else if pick(CRASHED_PERMILLE) {
        CliOutcome::Crashed {
            code: rng.gen_range(2..=127),
        }
    } else if pick(HANGS_PERMILLE) {
        CliOutcome::Hangs
    } else {
        CliOutcome::Succeeded
    };
    let (lines, end) = match drawn.outcome {
        CliOutcome::Succeeded | CliOutcome::Failed { .. } => {
            let keep = resume
                .filter(|_| cli == CliName::Codex || rng.gen_range(0..1_000) >= FORKED_PERMILLE);
            drawn.session = Some(keep.unwrap_or_else(|| sessions.issue(cli)));
            let lines = match cli {
                CliName::Claude => claude_result(&mut drawn, rng),
                CliName::Codex => codex_events(&mut drawn, rng),
            };
            let code = match drawn.outcome {
                CliOutcome::Failed { code } => code,
                _ => 0,
            };
            (lines, Some(code))
        }
        CliOutcome::Garbage => (
            vec![
                (Stream::Stdout, "Thinking…".into()),
                (Stream::Stdout, "{\"type\":\"partial\"".into()),
            ],
            Some(0),
        ),
        CliOutcome::Crashed { code } => (
            vec![(Stream::Stderr, format!("fatal: simulated crash ({code})"))],
            Some(code),
        ),
        CliOutcome::Hangs | CliOutcome::Refused => (Vec::new(), None),
    };
    (Printed { lines, exit: end }, drawn)
}

/// What the CLI says when it does not have `session` (the real CLIs' words; the runtime looks
/// for them, docs/adapters/coding-cli.md).
fn refusal(cli: CliName, session: &str) -> String {
    match cli {
        CliName::Claude => format!("No conversation found with session ID: {session}"),
        CliName::Codex => format!("Error: No saved session found with ID {session}"),
    }
}

/// Chance (per mille) that a usage object prints no input at all, and apart from it, no output.
const NO_INPUT_PERMILLE: u32 = 50;
const NO_OUTPUT_PERMILLE: u32 = 150;

/// One usage object's counts: now and then no input or no output at all (a turn cut short),
/// which is where counting a model call "when any token was used" is seen.
fn usage(rng: &mut impl Rng) -> PrintedUsage {
    let mut printed = PrintedUsage {
        input: rng.gen_range(1..5_000),
        cache_creation: rng.gen_range(0..3_000),
        cache_read: rng.gen_range(0..20_000),
        output: rng.gen_range(1..2_000),
    };
    if rng.gen_range(0..1_000) < NO_INPUT_PERMILLE {
        (printed.input, printed.cache_creation, printed.cache_read) = (0, 0, 0);
    } else if rng.gen_range(0..1_000) < NO_OUTPUT_PERMILLE {
        printed.output = 0;
    }
    printed
}

/// Claude Code's one result object, success or error.
fn claude_result(drawn: &mut CliDrawn, rng: &mut impl Rng) -> Vec<(Stream, String)> {
    let printed = usage(rng);
    drawn.usage = vec![printed];
    drawn.num_turns = match rng.gen_range(0..1_000) {
        n if n < NO_TURNS_PERMILLE / 2 => None,
        n if n < NO_TURNS_PERMILLE => Some(0),
        _ => Some(rng.gen_range(1..=12)),
    };
    // Whole cents: a cost printed as a decimal reads back to the same micro-dollars.
    drawn.cost_micro_usd = Some(rng.gen_range(0..500) * 10_000);
    let failed = matches!(drawn.outcome, CliOutcome::Failed { .. });
    let text = if failed {
        "Reached the maximum number of turns".to_string()
    } else {
        format!("Done: {} files changed", rng.gen_range(0..20))
    };
    drawn.text = (!failed).then(|| text.clone());
    let mut result = json!({
        "type": "result",
        "subtype": if failed { "error_max_turns" } else { "success" },
        "is_error": failed,
        "duration_ms": rng.gen_range(1_000..60_000),
        "result": text,
        "session_id": drawn.session,
        "total_cost_usd": drawn.cost_micro_usd.map(|m| m as f64 / 1e6),
        "usage": {
            "input_tokens": printed.input,
            "cache_creation_input_tokens": printed.cache_creation,
            "cache_read_input_tokens": printed.cache_read,
            "output_tokens": printed.output,
        },
    });
    if let Some(turns) = drawn.num_turns {
        result["num_turns"] = turns.into();
    }
    let start = json!({"type": "system", "subtype": "init", "session_id": drawn.session});
    vec![
        (Stream::Stdout, start.to_string()),
        (Stream::Stdout, result.to_string()),
    ]
}

/// Codex's events: the thread, its turns (each with its usage), agent messages; a failed turn
/// last when it fails.
fn codex_events(drawn: &mut CliDrawn, rng: &mut impl Rng) -> Vec<(Stream, String)> {
    let mut lines = vec![json!({"type": "thread.started", "thread_id": drawn.session})];
    let failed = matches!(drawn.outcome, CliOutcome::Failed { .. });
    let turns = rng.gen_range(1..=3);
    for turn in 0..turns {
        lines.push(json!({"type": "turn.started"}));
        let text = format!("turn {turn}: {} tests pass", rng.gen_range(0..200));
        let item = json!({"id": format!("item_{turn}"), "type": "agent_message", "text": text});
        lines.push(json!({"type": "item.completed", "item": item}));
        drawn.text = Some(text);
        if failed && turn + 1 == turns {
            lines.push(json!({"type": "turn.failed", "error": {"message": "the model stopped"}}));
            break;
        }
        let mut printed = usage(rng);
        printed.cache_creation = 0;
        printed.cache_read = printed.cache_read.min(printed.input);
        drawn.usage.push(printed);
        let usage = json!({"input_tokens": printed.input, "cached_input_tokens": printed.cache_read, "output_tokens": printed.output});
        lines.push(json!({"type": "turn.completed", "usage": usage}));
    }
    if failed {
        drawn.text = None;
    }
    lines
        .into_iter()
        .map(|line| (Stream::Stdout, line.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn stdout(printed: &Printed) -> Vec<String> {
        printed
            .lines
            .iter()
            .filter(|(stream, _)| *stream == Stream::Stdout)
            .map(|(_, text)| text.clone())
            .collect()
    }

    /// The runtime's own parsers read what the simulated CLIs print as the record says: the
    /// simulated output is the real format.
    #[test]
    fn the_runtime_parsers_read_the_printed_outcome() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut sessions = Sessions::default();
        let (mut claude, mut codex) = (0, 0);
        for _ in 0..400 {
            for cli in [CliName::Claude, CliName::Codex] {
                let (plan, drawn) = draw(cli, &[], &mut sessions, &mut rng);
                if !matches!(drawn.outcome, CliOutcome::Succeeded) {
                    continue;
                }
                let lines = stdout(&plan);
                let report = match cli {
                    CliName::Claude => vigil::exec::coding_cli::claude::parse(&lines),
                    CliName::Codex => vigil::exec::coding_cli::codex::parse(&lines),
                }
                .expect("a success parses");
                assert_eq!(report.session_id, drawn.session);
                assert_eq!(report.final_text, drawn.text);
                assert_eq!(report.error, None);
                match cli {
                    CliName::Claude => claude += 1,
                    CliName::Codex => codex += 1,
                }
            }
        }
        assert!(claude > 100 && codex > 100, "{claude} {codex}");
    }

    #[test]
    fn a_session_the_machine_does_not_have_is_refused_and_a_kept_one_resumed() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut sessions = Sessions::default();
        let args = |s: &str| vec!["-p".to_string(), "--resume".into(), s.into()];
        let (plan, drawn) = draw(
            CliName::Claude,
            &args("never-issued"),
            &mut sessions,
            &mut rng,
        );
        assert_eq!(drawn.outcome, CliOutcome::Refused);
        assert_eq!(plan.exit, Some(1));
        assert!(plan.lines[0]
            .1
            .to_lowercase()
            .contains("no conversation found with session id"));
        let issued = sessions.issue(CliName::Codex);
        let codex_args = vec![
            "exec".to_string(),
            "resume".into(),
            issued.clone(),
            "-".into(),
        ];
        let mut resumed = 0;
        for _ in 0..50 {
            sessions.known.insert(issued.clone());
            let (_, drawn) = draw(CliName::Codex, &codex_args, &mut sessions, &mut rng);
            assert_eq!(drawn.resume.as_deref(), Some(issued.as_str()));
            if drawn.outcome == CliOutcome::Succeeded {
                assert_eq!(
                    drawn.session.as_deref(),
                    Some(issued.as_str()),
                    "Codex keeps its thread"
                );
                resumed += 1;
            }
        }
        assert!(resumed > 20, "{resumed}");
    }
}
