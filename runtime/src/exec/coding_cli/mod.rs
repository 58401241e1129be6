//! The coding-CLI adapters: `claude_local` runs Claude Code in print mode with JSON output,
//! `codex_local` runs `codex exec --json`. Each run renders the prompt (the spec's template or
//! the built-in wakeup prompt), runs the CLI through the shared child runner (`exec/child.rs`:
//! process group, transcript, timeout), reads the session, usage, cost and final text from its
//! output, and resumes the task's session on the next run. A session the CLI refuses is dropped
//! and the run retried fresh exactly once (docs/adapters/coding-cli.md).

mod attempt;
pub mod claude;
pub mod codex;
mod install;
mod outcome;
pub mod report;

pub use install::{missing_binary_warning, save_warnings};

use super::adapter::{Adapter, AdapterFuture, AdapterOutcome, RunContext};
use super::prompt::{render_template, render_wakeup, PromptVars};
use crate::engine::cli_spec::CodingCliSpec;
use crate::engine::prompt::PromptSpec;
use crate::engine::run::{ErrorClass, RunStatus};
use report::CliReport;

/// Which CLI an adapter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliKind {
    Claude,
    Codex,
}

impl CliKind {
    /// The adapter's `type` in a spec.
    pub fn adapter_name(self) -> &'static str {
        match self {
            CliKind::Claude => "claude_local",
            CliKind::Codex => "codex_local",
        }
    }

    /// The product, for messages.
    pub fn product(self) -> &'static str {
        match self {
            CliKind::Claude => "Claude Code",
            CliKind::Codex => "Codex",
        }
    }

    /// The program a spec runs (`binary`, else the CLI's usual name).
    pub fn binary(self, spec: &CodingCliSpec) -> &str {
        let default = match self {
            CliKind::Claude => claude::DEFAULT_BINARY,
            CliKind::Codex => codex::DEFAULT_BINARY,
        };
        install::binary_of(spec, default)
    }

    /// The arguments of one invocation, resuming `resume` if given.
    pub fn args(self, spec: &CodingCliSpec, resume: Option<&str>) -> Vec<String> {
        match self {
            CliKind::Claude => claude::args(spec, resume),
            CliKind::Codex => codex::args(spec, resume),
        }
    }

    /// What the CLI says when it does not know a session it was asked to resume.
    pub fn session_unknown_signals(self) -> &'static [&'static str] {
        match self {
            CliKind::Claude => claude::SESSION_UNKNOWN_SIGNALS,
            CliKind::Codex => codex::SESSION_UNKNOWN_SIGNALS,
        }
    }

    /// A reader of the CLI's stdout.
    fn reader(self) -> OutputReader {
        match self {
            CliKind::Claude => OutputReader::Claude(claude::Reader::default()),
            CliKind::Codex => OutputReader::Codex(codex::Reader::default()),
        }
    }
}

/// A stdout reader of either CLI.
enum OutputReader {
    Claude(claude::Reader),
    Codex(codex::Reader),
}

impl OutputReader {
    fn push(&mut self, line: &str) {
        match self {
            OutputReader::Claude(reader) => reader.push(line),
            OutputReader::Codex(reader) => reader.push(line),
        }
    }

    fn finish(self) -> Result<CliReport, String> {
        match self {
            OutputReader::Claude(reader) => reader.finish(),
            OutputReader::Codex(reader) => reader.finish(),
        }
    }
}

/// The `claude_local` or `codex_local` adapter.
#[derive(Debug, Clone)]
pub struct CodingCli {
    kind: CliKind,
    spec: CodingCliSpec,
}

impl CodingCli {
    pub fn new(kind: CliKind, spec: CodingCliSpec) -> Self {
        CodingCli { kind, spec }
    }
}

impl Adapter for CodingCli {
    fn execute(&self, run: RunContext) -> AdapterFuture {
        let (kind, spec) = (self.kind, self.spec.clone());
        Box::pin(async move {
            // The transcript opens with why the run was woken, as every adapter's does.
            run.record_wakeup().await;
            let prompt = match render_prompt(&spec, &run) {
                Ok(prompt) => prompt,
                Err(error) => {
                    let detail = format!("{}: the prompt did not render: {error}", kind.adapter_name());
                    return AdapterOutcome {
                        error_class: Some(ErrorClass::AdapterError),
                        ..AdapterOutcome::new(RunStatus::Failed, detail, None)
                    };
                }
            };
            attempt::run_with_one_retry(kind, &spec, &run, prompt).await
        })
    }
}

/// The prompt the CLI gets on stdin: the spec's `prompt` template, else the built-in wakeup
/// prompt, rendered by the same renderer as an LLM agent's prompts.
fn render_prompt(spec: &CodingCliSpec, run: &RunContext) -> Result<String, String> {
    let vars = PromptVars::of_run(run);
    let rendered = match &spec.prompt {
        Some(template) => render_template("prompt", template, &vars),
        None => render_wakeup(&PromptSpec::default(), &vars),
    };
    rendered.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use crate::engine::agent::AdapterSpec;

    /// The fleet file of docs/adapters/coding-cli.md: it must load, validated, as documented.
    #[test]
    fn the_documented_fleet_file_is_valid() {
        let doc = include_str!("../../../../docs/adapters/coding-cli.md");
        let start = doc.find("```toml\n").expect("a TOML example") + "```toml\n".len();
        let text = &doc[start..start + doc[start..].find("```").expect("closed")];
        let fleet = crate::fleet::Fleet::parse("coding-cli.md", text).expect("the example loads");
        assert_eq!(fleet.agent_count(), 2);
        let mut kinds = Vec::new();
        for tenant in &fleet.tenants {
            for agent in &tenant.agents {
                agent.validate().expect("the example is valid");
                kinds.push(match &agent.adapter {
                    AdapterSpec::ClaudeLocal(cli) => ("claude_local", cli.max_turns),
                    AdapterSpec::CodexLocal(cli) => ("codex_local", cli.max_turns),
                    _ => ("other", None),
                });
            }
        }
        assert_eq!(kinds, [("claude_local", Some(20)), ("codex_local", None)]);
    }
}
