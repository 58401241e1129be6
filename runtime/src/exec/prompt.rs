//! Rendering an LLM agent's prompts for one run, from its validated [`PromptSpec`].
//!
//! Deterministic: the output depends on the spec and the [`PromptVars`] only (no clock, no
//! environment; the caller gives the local time as text). Maps render in key order.

use std::cell::RefCell;

use minijinja::value::{Serde, Value};
use minijinja::{context, Environment};

use crate::engine::agent::AgentId;
use crate::engine::prompt::{environment, PromptSpec};
use crate::engine::run::RunId;
use crate::engine::wakeup::WakeupSource;

/// Largest rendered prompt, in bytes. A template is short, but one that prints the payload many
/// times could blow up the model call; past this the render fails instead. The default
/// templates with the largest payload and reason stay far below it.
pub const RENDERED_PROMPT_BYTES_MAX: usize = 256 * 1024;

/// Everything a template may read (`PROMPT_VARIABLES`), as plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptVars {
    /// `agent.name`
    pub agent_name: String,
    /// `agent.id`
    pub agent_id: AgentId,
    /// `run.id`
    pub run_id: RunId,
    /// `run.source` (its wire name); also picks the wakeup template.
    pub source: WakeupSource,
    /// `run.reason`
    pub reason: String,
    /// `run.payload`, as JSON.
    pub payload: serde_json::Value,
    /// `now_local`: the local time in the agent's time zone, formatted by the caller.
    pub now_local: String,
    /// `daily_cap_remaining`: runs left today, none without a daily cap.
    pub daily_cap_remaining: Option<u32>,
}

/// Why a prompt could not be rendered. For a validated spec only a run-time bound can cause
/// this: the fuel budget (`PROMPT_RENDER_FUEL`) or the size of the result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("the {template} prompt template failed to render: {message}")]
    Template { template: String, message: String },
    #[error("the {template} prompt rendered to {bytes} bytes, more than the {RENDERED_PROMPT_BYTES_MAX} allowed")]
    TooLong { template: String, bytes: usize },
}

/// The system prompt of a run.
pub fn render_system(spec: &PromptSpec, vars: &PromptVars) -> Result<String, RenderError> {
    render("system", spec.system_template(), vars)
}

/// The user message of a run woken by `vars.source`: the source's template, else `default`,
/// else the built-in one.
pub fn render_wakeup(spec: &PromptSpec, vars: &PromptVars) -> Result<String, RenderError> {
    render("wakeup", spec.wakeup_template(vars.source), vars)
}

/// Any template of an agent's spec (a `process` argument, its stdin, a coding CLI's prompt),
/// named `template` in errors, with the same variables and bounds as the prompts.
pub fn render_template(
    template: &str,
    source: &str,
    vars: &PromptVars,
) -> Result<String, RenderError> {
    render(template, source, vars)
}

impl PromptVars {
    /// The variables of `run`.
    pub fn of_run(run: &crate::exec::adapter::RunContext) -> Self {
        PromptVars {
            agent_name: run.agent_name.clone(),
            agent_id: run.agent,
            run_id: run.run,
            source: run.source,
            reason: run.reason.clone(),
            payload: run.payload.clone(),
            now_local: now_local(run),
            daily_cap_remaining: run.daily_cap_remaining,
        }
    }
}

/// The local time of the run's start in the agent's zone, as templates read it.
fn now_local(run: &crate::exec::adapter::RunContext) -> String {
    let zoned = jiff::tz::TimeZone::get(&run.time_zone).ok().and_then(|tz| {
        let ms = i64::try_from(run.started_at_ms).ok()?;
        Some(jiff::Timestamp::from_millisecond(ms).ok()?.to_zoned(tz))
    });
    zoned.map_or_else(String::new, |z| z.strftime("%Y-%m-%d %H:%M %Z").to_string())
}

/// Most templates kept compiled per thread. An agent renders the same few templates for each
/// of its runs, and compiling one costs more than rendering it; past this count the cache
/// starts over (a node with more distinct templates recompiles some, its memory never grows).
pub const COMPILED_TEMPLATES_MAX: usize = 1024;

thread_local! {
    /// Compiled templates named by their source, and how many there are.
    static COMPILED: RefCell<(Environment<'static>, usize)> = RefCell::new((environment(), 0));
}

/// Renders `source` compiled once per thread; `None` when it fails (then the uncached path
/// renders it again, so the error reads the same as without the cache).
fn render_compiled(source: &str, vars: &PromptVars) -> Option<String> {
    COMPILED.with(|cell| {
        let mut cache = cell.borrow_mut();
        if cache.0.get_template(source).is_err() {
            if cache.1 >= COMPILED_TEMPLATES_MAX {
                *cache = (environment(), 0);
            }
            cache
                .0
                .add_template_owned(source.to_string(), source.to_string())
                .ok()?;
            cache.1 += 1;
        }
        let compiled = cache.0.get_template(source).ok()?;
        compiled.render(context_of(vars)).ok()
    })
}

fn render(template: &str, source: &str, vars: &PromptVars) -> Result<String, RenderError> {
    let failed = |error: minijinja::Error| RenderError::Template {
        template: template.to_string(),
        message: error.to_string(),
    };
    let text = match render_compiled(source, vars) {
        Some(text) => text,
        None => environment()
            .template_from_str(source)
            .and_then(|compiled| compiled.render(context_of(vars)))
            .map_err(failed)?,
    };
    if text.len() > RENDERED_PROMPT_BYTES_MAX {
        return Err(RenderError::TooLong {
            template: template.to_string(),
            bytes: text.len(),
        });
    }
    Ok(text)
}

fn context_of(vars: &PromptVars) -> Value {
    context! {
        agent => context! { name => vars.agent_name.as_str(), id => vars.agent_id.0 },
        run => context! {
            id => vars.run_id.0,
            source => vars.source.as_str(),
            reason => vars.reason.as_str(),
            payload => Value::from(Serde(&vars.payload)),
        },
        now_local => vars.now_local.as_str(),
        daily_cap_remaining => vars.daily_cap_remaining,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::engine::prompt::{PromptSpec, PROMPT_VARIABLES};
    use crate::engine::wakeup::{PAYLOAD_BYTES_MAX, REASON_CHARS_MAX};

    fn vars(source: WakeupSource, payload: serde_json::Value, cap: Option<u32>) -> PromptVars {
        PromptVars {
            agent_name: "scout".into(),
            agent_id: AgentId(7),
            run_id: RunId(42),
            source,
            reason: "check the inbox".into(),
            payload,
            now_local: "2026-05-01 09:30 Europe/Paris".into(),
            daily_cap_remaining: cap,
        }
    }

    /// A template reading every variable.
    fn every_variable() -> String {
        PROMPT_VARIABLES
            .iter()
            .map(|name| format!("{name}={{{{ {name} }}}}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_default_prompts_state_source_reason_and_payload() {
        let spec = PromptSpec::default();
        let v = vars(
            WakeupSource::OnDemand,
            json!({"b": 1, "a": [true, null]}),
            Some(3),
        );
        let system = render_system(&spec, &v).unwrap();
        assert!(
            system.contains("scout") && system.contains("[IDLE]"),
            "{system}"
        );
        let wakeup = render_wakeup(&spec, &v).unwrap();
        assert!(wakeup.contains("Wakeup source: on_demand"), "{wakeup}");
        assert!(wakeup.contains("Reason: check the inbox"), "{wakeup}");
        assert!(wakeup.contains("Runs left today: 3"), "{wakeup}");
        assert!(
            wakeup.contains(r#"{"a": [true, null], "b": 1}"#),
            "{wakeup}"
        );
        let uncapped = render_wakeup(&spec, &vars(WakeupSource::Timer, json!(null), None)).unwrap();
        assert!(!uncapped.contains("Runs left"), "{uncapped}");
        assert!(!uncapped.contains("Payload"), "no payload, no line: {uncapped}");
    }

    #[test]
    fn custom_templates_see_every_variable_and_pick_by_source() {
        let spec = PromptSpec {
            system: Some("I am {{ agent.name }} ({{ agent.id }})".into()),
            wakeup: BTreeMap::from([
                ("timer".into(), every_variable()),
                ("default".into(), "other: {{ run.source }}".into()),
            ]),
        };
        spec.validate("adapter.prompts").unwrap();
        let v = vars(WakeupSource::Timer, json!({"k": "v"}), None);
        assert_eq!(render_system(&spec, &v).unwrap(), "I am scout (7)");
        let timer = render_wakeup(&spec, &v).unwrap();
        for line in [
            "agent.id=7",
            "run.id=42",
            "run.source=timer",
            "run.reason=check the inbox",
            "now_local=2026-05-01 09:30 Europe/Paris",
            "daily_cap_remaining=None",
        ] {
            assert!(timer.contains(line), "{line} in {timer}");
        }
        let idle = render_wakeup(&spec, &vars(WakeupSource::Idle, json!(1), None)).unwrap();
        assert_eq!(idle, "other: idle");
    }

    #[test]
    fn a_validated_spec_renders_for_every_source_and_payload_shape() {
        let big_payload = json!("p".repeat(PAYLOAD_BYTES_MAX - 2));
        let payloads = [
            json!(null),
            json!(0),
            json!(-1.5),
            json!("text with {{ braces }}"),
            json!([1, [2, {"x": null}]]),
            json!({"nested": {"deep": [1, 2, 3]}}),
            big_payload,
        ];
        let custom = PromptSpec {
            system: Some(every_variable()),
            wakeup: BTreeMap::from([("default".into(), every_variable())]),
        };
        custom.validate("p").unwrap();
        for spec in [PromptSpec::default(), custom] {
            for source in WakeupSource::all() {
                for payload in &payloads {
                    for cap in [None, Some(0), Some(u32::MAX)] {
                        let mut v = vars(source, payload.clone(), cap);
                        v.reason = "r".repeat(REASON_CHARS_MAX);
                        render_system(&spec, &v).unwrap();
                        render_wakeup(&spec, &v).unwrap();
                        v.reason.clear();
                        render_wakeup(&spec, &v).unwrap();
                    }
                }
            }
        }
    }

    #[test]
    fn a_guarded_payload_lookup_renders_with_or_without_the_field() {
        // The lookup the validation message suggests for payload fields.
        let spec = PromptSpec {
            system: Some(r#"ticket={{ run.payload["ticket"] | default("-") }}"#.into()),
            wakeup: BTreeMap::new(),
        };
        spec.validate("p").unwrap();
        let with = vars(WakeupSource::Assignment, json!({"ticket": "T-1"}), None);
        assert_eq!(render_system(&spec, &with).unwrap(), "ticket=T-1");
        let without = vars(WakeupSource::Assignment, json!({}), None);
        assert_eq!(render_system(&spec, &without).unwrap(), "ticket=-");
        // Unguarded, a missing field is an error (strict undefined), not an empty string.
        let strict = PromptSpec {
            system: Some(r#"{{ run.payload["ticket"] }}"#.into()),
            wakeup: BTreeMap::new(),
        };
        assert!(matches!(
            render_system(&strict, &without),
            Err(RenderError::Template { .. })
        ));
    }

    #[test]
    fn rendering_is_deterministic() {
        let spec = PromptSpec::default();
        let payload = json!({"z": 1, "a": 2, "m": {"y": 1, "b": 2}});
        let v = vars(WakeupSource::Predicate, payload, Some(1));
        let first = render_wakeup(&spec, &v).unwrap();
        for _ in 0..10 {
            assert_eq!(render_wakeup(&spec, &v).unwrap(), first);
        }
        assert!(
            first.contains(r#"{"a": 2, "m": {"b": 2, "y": 1}, "z": 1}"#),
            "{first}"
        );
    }

    #[test]
    fn runaway_templates_hit_the_fuel_or_size_bound() {
        let quadratic = PromptSpec {
            system: None,
            wakeup: BTreeMap::from([(
                "default".into(),
                "{% for a in run.payload %}{% for b in run.payload %}x{% endfor %}{% endfor %}"
                    .into(),
            )]),
        };
        quadratic.validate("p").unwrap();
        let v = vars(WakeupSource::Timer, json!(vec![0; 2_000]), None);
        let error = render_wakeup(&quadratic, &v).unwrap_err();
        assert!(matches!(error, RenderError::Template { .. }), "{error}");
        assert!(error.to_string().contains("fuel"), "{error}");

        let repeated = PromptSpec {
            system: Some("{{ run.payload | tojson }}".repeat(20)),
            wakeup: BTreeMap::new(),
        };
        repeated.validate("p").unwrap();
        let v = vars(
            WakeupSource::Timer,
            json!("p".repeat(PAYLOAD_BYTES_MAX - 2)),
            None,
        );
        let error = render_system(&repeated, &v).unwrap_err();
        assert!(matches!(error, RenderError::TooLong { .. }), "{error}");
    }

    /// How many templates this thread keeps compiled.
    fn compiled_count() -> usize {
        COMPILED.with(|cell| cell.borrow().1)
    }

    #[test]
    fn compiled_templates_are_kept_up_to_the_bound_then_start_over() {
        let v = vars(WakeupSource::Timer, json!({}), None);
        let spec = |i: usize| PromptSpec {
            system: Some(format!("template {i} of agent {{{{ agent.name }}}}")),
            wakeup: BTreeMap::new(),
        };
        // Each test runs on its own thread: the cache starts empty.
        assert_eq!(compiled_count(), 0);
        for i in 0..COMPILED_TEMPLATES_MAX {
            let text = render_system(&spec(i), &v).unwrap();
            assert_eq!(text, format!("template {i} of agent {}", v.agent_name));
        }
        assert_eq!(compiled_count(), COMPILED_TEMPLATES_MAX);
        // A template already kept renders from the cache and adds nothing.
        render_system(&spec(7), &v).unwrap();
        assert_eq!(compiled_count(), COMPILED_TEMPLATES_MAX);
        // One more distinct template starts the cache over, and still renders right.
        let text = render_system(&spec(COMPILED_TEMPLATES_MAX), &v).unwrap();
        assert_eq!(text, format!("template {COMPILED_TEMPLATES_MAX} of agent {}", v.agent_name));
        assert_eq!(compiled_count(), 1);
    }

    #[test]
    fn a_failing_template_reads_the_same_error_whether_compiled_before_or_not() {
        let spec = PromptSpec {
            system: Some("{{ run.payload.missing.deeper }}".into()),
            wakeup: BTreeMap::new(),
        };
        let v = vars(WakeupSource::Timer, json!({}), None);
        let first = render_system(&spec, &v).unwrap_err();
        let again = render_system(&spec, &v).unwrap_err();
        assert_eq!(first, again);
        assert!(first.to_string().contains("undefined"), "{first}");
    }

    #[test]
    fn rendered_size_is_bounded_at_the_boundary() {
        // A template printing `reason` verbatim renders to exactly its length.
        let spec = PromptSpec {
            system: Some("{{ run.reason }}".into()),
            wakeup: BTreeMap::new(),
        };
        let mut v = vars(WakeupSource::Timer, json!(null), None);
        v.reason = "r".repeat(RENDERED_PROMPT_BYTES_MAX);
        assert_eq!(
            render_system(&spec, &v).unwrap().len(),
            RENDERED_PROMPT_BYTES_MAX
        );
        v.reason.push('r');
        assert!(matches!(
            render_system(&spec, &v),
            Err(RenderError::TooLong { bytes, .. }) if bytes == RENDERED_PROMPT_BYTES_MAX + 1
        ));
    }
}
