//! Invariant 38, `run_told_as_queued`, judged on what the simulated world *received*: what a
//! run is told names the run as the log queued it.
//!
//! - A model call of a run whose agent has no wakeup template of its own carries the built-in
//!   wakeup prompt (docs/agents.md), naming the run's source and reason. An empty reason reads
//!   `(none given)`. Only those two lines are judged: the local time, the runs left and the
//!   payload are the runtime's to format.
//! - A process agent's child gets one argument per `adapter.args` template, and stdin exactly
//!   when `adapter.stdin` is set (docs/adapters/process.md), each rendered for its run: a
//!   template without markup is passed as written; one that is exactly `{{ agent.name }}`,
//!   `{{ agent.id }}`, `{{ run.id }}`, `{{ run.source }}` or `{{ run.reason }}` renders to that
//!   value; any other keeps the text before its first markup as its start.
//! - A coding-CLI agent's invocation gets on stdin its spec's `prompt` rendered for its run
//!   (judged as a template above), or without one the built-in wakeup prompt, read and judged
//!   as a model call's (docs/adapters/coding-cli.md).
//!
//! The run's source is that of the wakeup that queued it; its reason that of the latest wakeup
//! it absorbed (docs/api.md, the run's fields); a run re-queued after a restart keeps its
//! original's. Source names and the rendering of those few forms are restated here, not taken
//! from the runtime.

use std::collections::{BTreeMap, BTreeSet};

use vigil::engine::agent::AdapterSpec;
use vigil::engine::event::{Event, EventKind};
use vigil::engine::wakeup::WakeupSource;

use super::queued_runs::QueuedRuns;
use super::{violation, Violation};
use crate::trace::WakeSeen;

/// What the built-in wakeup prompt says for an empty reason (docs/agents.md).
const NO_REASON: &str = "(none given)";

/// A wakeup source's name on the wire and in prompts (docs/api.md).
fn source_name(source: WakeupSource) -> &'static str {
    match source {
        WakeupSource::Timer => "timer",
        WakeupSource::Idle => "idle",
        WakeupSource::Assignment => "assignment",
        WakeupSource::OnDemand => "on_demand",
        WakeupSource::Automation => "automation",
        WakeupSource::Predicate => "predicate",
    }
}

/// A run as the log queued it.
#[derive(Debug, Clone)]
struct Queued {
    agent: u64,
    source: WakeupSource,
    reason: String,
}

/// A process agent's templates: its arguments and stdin.
#[derive(Debug, Clone)]
struct ProcessTemplates {
    args: Vec<String>,
    stdin: Option<String>,
}

#[derive(Debug, Default)]
pub struct PromptsOracle {
    /// Runs not yet finished.
    runs: QueuedRuns<Queued>,
    /// Agents whose spec has wakeup templates of its own (their prompts are not judged).
    own_templates: BTreeSet<u64>,
    /// Agents' names.
    names: BTreeMap<u64, String>,
    /// Process agents' templates.
    processes: BTreeMap<u64, ProcessTemplates>,
    /// Coding-CLI agents' `prompt` templates (none: the built-in wakeup prompt).
    coding: BTreeMap<u64, Option<String>>,
    /// Model calls judged.
    judged: u64,
}

impl PromptsOracle {
    /// Follows the committed events that set a run's source and reason, and agents' specs.
    pub fn committed(&mut self, event: &Event) {
        match &event.kind {
            EventKind::AgentCreated {
                agent, name, spec, ..
            } => {
                self.names.insert(agent.0, name.clone());
                self.follow_spec(agent.0, &spec.adapter);
            }
            EventKind::AgentUpdated { agent, spec, .. } => {
                self.follow_spec(agent.0, &spec.adapter);
            }
            EventKind::WakeupQueued {
                run,
                agent,
                source,
                reason,
                ..
            } => {
                let queued = Queued {
                    agent: agent.0,
                    source: *source,
                    reason: reason.clone(),
                };
                self.runs.queued(run.0, queued);
            }
            EventKind::WakeupCoalesced { run, reason, .. } => {
                if let Some(queued) = self.runs.get_mut(run.0) {
                    queued.reason.clone_from(reason);
                }
            }
            EventKind::RunRequeued {
                run,
                agent,
                retry_of,
                coalesced: false,
            } => self.runs.requeued(run.0, agent.0, retry_of.0),
            EventKind::RunFinished { run, agent, .. } => {
                self.runs.finished(run.0, agent.0);
            }
            _ => {}
        }
    }

    fn follow_spec(&mut self, agent: u64, adapter: &AdapterSpec) {
        let own = matches!(adapter, AdapterSpec::Llm(llm) if !llm.prompts.wakeup.is_empty());
        if own {
            self.own_templates.insert(agent);
        } else {
            self.own_templates.remove(&agent);
        }
        match adapter {
            AdapterSpec::ClaudeLocal(cli) | AdapterSpec::CodexLocal(cli) => {
                self.coding.insert(agent, cli.prompt.clone());
            }
            _ => {
                self.coding.remove(&agent);
            }
        }
        match adapter {
            AdapterSpec::Process(process) => {
                let templates = ProcessTemplates {
                    args: process.args.clone(),
                    stdin: process.stdin.clone(),
                };
                self.processes.insert(agent, templates);
            }
            _ => {
                self.processes.remove(&agent);
            }
        }
    }

    /// Judges the arguments and stdin the simulated machine's child of `run` was started with.
    pub fn spawned(
        &mut self,
        run: u64,
        args: &[String],
        stdin: Option<&str>,
    ) -> Result<(), Violation> {
        let Some(queued) = self.runs.get(run) else {
            return Ok(());
        };
        if let Some(prompt) = self.coding.get(&queued.agent) {
            let prompt = prompt.clone();
            return self.coding_stdin(run, prompt.as_deref(), stdin);
        }
        let Some(templates) = self.processes.get(&queued.agent) else {
            return Ok(());
        };
        self.judged += 1;
        let name = self.names.get(&queued.agent).map_or("", String::as_str);
        let vars = Vars { run, queued, name };
        let args_as_rendered = args.len() == templates.args.len()
            && templates
                .args
                .iter()
                .zip(args)
                .all(|(template, arg)| vars.renders(template, arg));
        let stdin_as_rendered = match (&templates.stdin, stdin) {
            (Some(template), Some(stdin)) => vars.renders(template, stdin),
            (None, None) => true,
            _ => false,
        };
        if args_as_rendered && stdin_as_rendered {
            return Ok(());
        }
        violation(
            "run_told_as_queued",
            format!("agent {} run {run}: the child was started with args {args:?} and stdin {stdin:?}; its spec's templates are {templates:?}, to render for source {} and reason {:?}", queued.agent, source_name(queued.source), queued.reason),
        )
    }

    /// A coding CLI's stdin: its spec's prompt, or the built-in wakeup prompt.
    fn coding_stdin(
        &mut self,
        run: u64,
        prompt: Option<&str>,
        stdin: Option<&str>,
    ) -> Result<(), Violation> {
        let queued = self.runs.get(run).expect("judged for a known run").clone();
        let name = self.names.get(&queued.agent).cloned().unwrap_or_default();
        match prompt {
            Some(template) => {
                self.judged += 1;
                let vars = Vars {
                    run,
                    queued: &queued,
                    name: &name,
                };
                if stdin.is_some_and(|stdin| vars.renders(template, stdin)) {
                    return Ok(());
                }
                violation(
                    "run_told_as_queued",
                    format!("agent {} run {run}: the CLI got {stdin:?} on stdin; its prompt template {template:?} renders otherwise for it", queued.agent),
                )
            }
            None => {
                let wake = stdin.and_then(crate::provider::parse_wake);
                self.served(Some(queued.agent), Some(run), wake.as_ref())
            }
        }
    }

    /// Judges one model call the provider served for `agent`'s `run` (from the system prompt's
    /// marker), whose wakeup message it read as `wake`.
    pub fn served(
        &mut self,
        agent: Option<u64>,
        run: Option<u64>,
        wake: Option<&WakeSeen>,
    ) -> Result<(), Violation> {
        let (Some(agent), Some(run)) = (agent, run) else {
            return Ok(());
        };
        if self.own_templates.contains(&agent) {
            return Ok(());
        }
        // A call that arrives after its run ended (the executions checks bound how late) has
        // nothing left to compare with.
        let Some(Queued { source, reason, .. }) = self.runs.get(run) else {
            return Ok(());
        };
        self.judged += 1;
        let expected_reason = if reason.is_empty() { NO_REASON } else { reason };
        match wake {
            Some(seen) if seen.source == source_name(*source) && seen.reason == expected_reason => {
                Ok(())
            }
            _ => violation(
                "run_told_as_queued",
                format!("agent {agent} run {run}: the model was sent {wake:?} as the built-in wakeup prompt; the run was queued by source {} with reason {expected_reason:?}", source_name(*source)),
            ),
        }
    }
}

/// The variables of one run, as far as the forms judged here read them.
struct Vars<'a> {
    run: u64,
    queued: &'a Queued,
    name: &'a str,
}

impl Vars<'_> {
    /// Whether `template` may have rendered to `text` for this run.
    fn renders(&self, template: &str, text: &str) -> bool {
        let value = match template {
            "{{ agent.name }}" => Some(self.name.to_string()),
            "{{ agent.id }}" => Some(self.queued.agent.to_string()),
            "{{ run.id }}" => Some(self.run.to_string()),
            "{{ run.source }}" => Some(source_name(self.queued.source).to_string()),
            "{{ run.reason }}" => Some(self.queued.reason.clone()),
            _ => None,
        };
        if let Some(value) = value {
            return text == value;
        }
        // Markup starts with `{{`, `{%` or `{#`; a template without any is its own text (a
        // trailing newline aside, which rendering drops).
        match template.find('{') {
            None if !template.ends_with('\n') => text == template,
            None => true,
            Some(start) => text.starts_with(&template[..start]),
        }
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::AgentId;
    use vigil::engine::run::{RunId, RunStatus};
    use vigil::engine::wakeup::WakeupId;

    use super::*;
    use crate::check::test_events::event;

    fn queued(run: u64, source: WakeupSource, reason: &str) -> Event {
        event(
            0,
            EventKind::WakeupQueued {
                wakeup: WakeupId(run),
                agent: AgentId(1),
                source,
                reason: reason.into(),
                payload: serde_json::Value::Null,
                task_key: None,
                idempotency_key: None,
                requested_by: None,
                trigger_detail: None,
                run: RunId(run),
            },
        )
    }

    fn seen(source: &str, reason: &str) -> WakeSeen {
        WakeSeen {
            source: source.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn a_prompt_naming_another_source_or_reason_or_none_is_reported() {
        let mut oracle = PromptsOracle::default();
        oracle.committed(&queued(5, WakeupSource::OnDemand, "look at ticket 8"));
        oracle.committed(&queued(6, WakeupSource::Timer, ""));
        let kept = [
            (5, seen("on_demand", "look at ticket 8")),
            (6, seen("timer", NO_REASON)),
        ];
        for (run, wake) in &kept {
            oracle
                .served(Some(1), Some(*run), Some(wake))
                .expect("as queued");
        }
        let broken = [
            (5, Some(seen("timer", "look at ticket 8"))),
            (5, Some(seen("on_demand", "look at ticket"))),
            (6, Some(seen("timer", ""))),
            (6, None),
        ];
        for (run, wake) in &broken {
            let error = oracle
                .served(Some(1), Some(*run), wake.as_ref())
                .unwrap_err();
            assert_eq!(error.invariant, "run_told_as_queued", "{run} {wake:?}");
        }
        assert_eq!(oracle.judged, 6);
    }

    #[test]
    fn a_coalesced_reason_and_a_requeued_run_are_followed() {
        let mut oracle = PromptsOracle::default();
        oracle.committed(&queued(5, WakeupSource::Automation, "first"));
        oracle.committed(&event(
            0,
            EventKind::WakeupCoalesced {
                wakeup: WakeupId(9),
                agent: AgentId(1),
                source: WakeupSource::OnDemand,
                reason: "second".into(),
                payload: serde_json::Value::Null,
                idempotency_key: None,
                requested_by: None,
                trigger_detail: None,
                run: RunId(5),
                coalesced_count: 1,
            },
        ));
        let first = seen("automation", "first");
        assert!(oracle.served(Some(1), Some(5), Some(&first)).is_err());
        let second = seen("automation", "second");
        oracle
            .served(Some(1), Some(5), Some(&second))
            .expect("the latest reason, the first source");
        let mut finished = crate::check::test_events::run_finished(0, 5, 1);
        if let EventKind::RunFinished { status, .. } = &mut finished.kind {
            *status = RunStatus::Failed;
        }
        oracle.committed(&finished);
        oracle.committed(&event(
            0,
            EventKind::RunRequeued {
                run: RunId(7),
                agent: AgentId(1),
                retry_of: RunId(5),
                coalesced: false,
            },
        ));
        oracle
            .served(Some(1), Some(7), Some(&second))
            .expect("the re-queued run keeps its original's");
        assert!(oracle.served(Some(1), Some(7), None).is_err());
    }

    #[test]
    fn a_child_started_otherwise_than_its_templates_render_is_reported() {
        use vigil::engine::agent::AgentSpec;
        use vigil::engine::cli_spec::{ChildSpec, ProcessSpec};
        use vigil::engine::tenant::TokenHash;
        let mut spec = AgentSpec::with_interval("worker", None);
        spec.adapter = AdapterSpec::Process(ProcessSpec {
            command: "sim-agent".into(),
            args: vec![
                "--run".into(),
                "{{ run.id }}".into(),
                "{{ agent.name }}".into(),
                "{{ run.reason }}".into(),
                "src={{ run.source }}".into(),
            ],
            stdin: Some("wakeup {{ run.source }}: {{ run.payload }}".into()),
            child: ChildSpec::default(),
        });
        let mut oracle = PromptsOracle::default();
        oracle.committed(&event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "worker".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::of("t"),
                first_fire_at_ms: None,
            },
        ));
        oracle.committed(&queued(5, WakeupSource::OnDemand, "why"));
        let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let good = args(&["--run", "5", "worker", "why", "src=on_demand"]);
        oracle
            .spawned(5, &good, Some("wakeup on_demand: null"))
            .expect("as rendered");
        let broken = [
            (args(&[]), Some("")),
            (args(&["--run", "6", "worker", "why", "src=on_demand"]), Some("wakeup x")),
            (args(&["--run", "5", "worker", "", "src=on_demand"]), Some("wakeup x")),
            (args(&["--run", "5", "worker", "why", "on_demand"]), Some("wakeup x")),
            (good.clone(), Some("on_demand")),
            (good.clone(), None),
        ];
        for (args, stdin) in &broken {
            let error = oracle.spawned(5, args, *stdin).unwrap_err();
            assert_eq!(error.invariant, "run_told_as_queued", "{args:?} {stdin:?}");
        }
        // Runs of agents without process templates, and unknown runs, are not judged.
        oracle.spawned(9, &[], None).expect("an unknown run");
    }
}
