//! Prompt templates of an LLM agent: the system prompt and one wakeup prompt per wakeup source,
//! in Jinja syntax (minijinja), and their validation when the agent is saved.
//!
//! Validation and rendering share one [`environment`], so a template accepted here is parsed the
//! same way when a run renders it (`exec::prompt`). Validation refuses, naming the field:
//! templates over [`PROMPT_TEMPLATE_CHARS_MAX`], syntax errors (with their line), and any
//! variable outside [`PROMPT_VARIABLES`] (found by minijinja's own static analysis,
//! `undeclared_variables`). Undefined values are strict at render time, so a typo that slipped
//! through would fail loudly instead of rendering an empty string into the prompt.

use std::collections::{BTreeMap, BTreeSet};

use minijinja::{Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};

use super::spec_error::SpecError;
use super::wakeup::WakeupSource;

/// Longest template accepted, per template (the same bound as a plain `system_prompt`).
pub const PROMPT_TEMPLATE_CHARS_MAX: usize = 8_192;
/// The work one render may do, in minijinja fuel units (about one per instruction). A template
/// is short, but a loop over a large payload inside another could run for minutes; this bounds
/// it. The default templates with the largest payload use a few hundred units.
pub const PROMPT_RENDER_FUEL: u64 = 100_000;
/// Key of the wakeup template used for a source that has none of its own.
pub const WAKEUP_DEFAULT_KEY: &str = "default";

/// Every variable a template may use. `agent` and `run` alone are the objects holding the
/// others. (`run.payload` is data: its fields may be absent, so templates print it whole, e.g.
/// `{{ run.payload | tojson }}`, or guard a lookup with `default`.)
pub const PROMPT_VARIABLES: &[&str] = &[
    "agent",
    "agent.name",
    "agent.id",
    "run",
    "run.id",
    "run.source",
    "run.reason",
    "run.payload",
    "now_local",
    "daily_cap_remaining",
];

/// The system prompt when the spec gives none.
pub const SYSTEM_TEMPLATE_DEFAULT: &str = "\
You are {{ agent.name }}, an autonomous agent kept alive by Vigil. Vigil has just woken you \
(wakeup source: {{ run.source }}). Do what the wakeup asks, using your tools when you need them; \
call pause_heartbeats if you want no routine wakeups for a few minutes. \
When there is nothing to do, answer exactly [IDLE] and nothing else.";

/// The wakeup prompt when the spec gives none for the source and no `default`.
pub const WAKEUP_TEMPLATE_DEFAULT: &str = "\
Wakeup source: {{ run.source }}
Reason: {{ run.reason if run.reason else \"(none given)\" }}
Local time: {{ now_local }}
{% if daily_cap_remaining is not none %}Runs left today: {{ daily_cap_remaining }}
{% endif %}{% if run.payload is not none %}Payload: {{ run.payload | tojson }}{% endif %}";

/// The prompts of an LLM agent. Both parts are optional: an absent template falls back to the
/// built-in default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptSpec {
    /// The system prompt's template.
    #[serde(default)]
    pub system: Option<String>,
    /// The user message of a run, by wakeup source (`timer`, `idle`, `assignment`, `on_demand`,
    /// `automation`, `predicate`), or `default` for every source without its own.
    #[serde(default)]
    pub wakeup: BTreeMap<String, String>,
}

impl PromptSpec {
    /// The system template in force.
    pub fn system_template(&self) -> &str {
        self.system.as_deref().unwrap_or(SYSTEM_TEMPLATE_DEFAULT)
    }

    /// The wakeup template in force for `source`: its own, else `default`, else the built-in.
    pub fn wakeup_template(&self, source: WakeupSource) -> &str {
        self.wakeup
            .get(source.as_str())
            .or_else(|| self.wakeup.get(WAKEUP_DEFAULT_KEY))
            .map_or(WAKEUP_TEMPLATE_DEFAULT, String::as_str)
    }

    /// Checks every template; `field` is where the spec sits (e.g. `adapter.prompts`), and
    /// errors name the template within it (`adapter.prompts.wakeup.timer`).
    /// Whether nothing was set (the built-in prompts apply).
    pub fn is_default(&self) -> bool {
        *self == PromptSpec::default()
    }

    pub fn validate(&self, field: &str) -> Result<(), SpecError> {
        if let Some(system) = &self.system {
            validate_template(&format!("{field}.system"), system)?;
        }
        for (key, template) in &self.wakeup {
            let key_field = format!("{field}.wakeup.{key}");
            if !wakeup_keys().contains(key.as_str()) {
                return Err(SpecError::new(
                    key_field,
                    format!(
                        "{key:?} is not a wakeup source; the keys are {}",
                        join(wakeup_keys())
                    ),
                ));
            }
            validate_template(&key_field, template)?;
        }
        Ok(())
    }
}

/// The environment every prompt template is parsed and rendered in: strict undefined values,
/// a fuel budget, no loader (so no `include`/`extends`: a prompt is one template).
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(PROMPT_RENDER_FUEL));
    env
}

/// Keys accepted in `wakeup`: every source's wire name, and `default`.
fn wakeup_keys() -> BTreeSet<&'static str> {
    WakeupSource::all()
        .into_iter()
        .map(WakeupSource::as_str)
        .chain([WAKEUP_DEFAULT_KEY])
        .collect()
}

fn join<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names.into_iter().collect::<Vec<_>>().join(", ")
}

/// Checks one template: its size, its syntax, and the variables it reads.
pub fn validate_template(field: &str, source: &str) -> Result<(), SpecError> {
    let chars = source.chars().count();
    if chars > PROMPT_TEMPLATE_CHARS_MAX {
        return Err(SpecError::new(
            field.to_string(),
            format!(
                "a prompt template is at most {PROMPT_TEMPLATE_CHARS_MAX} characters (got {chars})"
            ),
        ));
    }
    validate_template_syntax(field, source)
}

/// The template's syntax and variables, whatever its length: a process' `stdin` and a coding
/// CLI's `prompt` have a limit of their own (`STDIN_TEMPLATE_CHARS_MAX`), checked by their spec.
pub fn validate_template_syntax(field: &str, source: &str) -> Result<(), SpecError> {
    let env = environment();
    let template = env
        .template_from_str(source)
        .map_err(|error| SpecError::new(field.to_string(), syntax_message(&error)))?;
    let used: BTreeSet<String> = template.undeclared_variables(true).into_iter().collect();
    match used
        .iter()
        .find(|name| !PROMPT_VARIABLES.contains(&name.as_str()))
    {
        Some(unknown) => Err(SpecError::new(field.to_string(), unknown_variable_message(unknown))),
        None => Ok(()),
    }
}

fn syntax_message(error: &minijinja::Error) -> String {
    let what = error
        .detail()
        .map_or_else(|| error.kind().to_string(), str::to_string);
    match error.line() {
        Some(line) => format!("template syntax error on line {line}: {what}"),
        None => format!("template syntax error: {what}"),
    }
}

fn unknown_variable_message(name: &str) -> String {
    let hint = if name.starts_with("run.payload.") {
        " (payload fields may be absent: print the payload with `{{ run.payload | tojson }}`, or \
         read a field with `{{ run.payload[\"field\"] | default(\"\") }}`)"
    } else {
        ""
    };
    format!(
        "the template uses `{name}`, which is not a prompt variable{hint}; the variables are {}",
        join(PROMPT_VARIABLES.iter().copied())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_with(key: &str, template: &str) -> PromptSpec {
        PromptSpec {
            system: None,
            wakeup: BTreeMap::from([(key.to_string(), template.to_string())]),
        }
    }

    #[test]
    fn the_defaults_validate() {
        assert_eq!(PromptSpec::default().validate("adapter.prompts"), Ok(()));
        for template in [SYSTEM_TEMPLATE_DEFAULT, WAKEUP_TEMPLATE_DEFAULT] {
            assert_eq!(validate_template("t", template), Ok(()));
        }
    }

    #[test]
    fn every_variable_is_accepted() {
        for name in PROMPT_VARIABLES {
            let template = format!("{{{{ {name} }}}}");
            assert_eq!(validate_template("t", &template), Ok(()), "{name}");
        }
    }

    #[test]
    fn an_unknown_variable_is_refused_naming_field_and_variable() {
        let spec = spec_with("timer", "Hello {{ agent.nmae }}");
        let error = spec.validate("adapter.prompts").unwrap_err();
        assert_eq!(error.field, "adapter.prompts.wakeup.timer");
        assert!(error.message.contains("`agent.nmae`"), "{}", error.message);

        let spec = PromptSpec {
            system: Some("{{ user }}".into()),
            wakeup: BTreeMap::new(),
        };
        let error = spec.validate("adapter.prompts").unwrap_err();
        assert_eq!(error.field, "adapter.prompts.system");
        assert!(error.message.contains("`user`"), "{}", error.message);
    }

    #[test]
    fn payload_fields_and_global_functions_are_refused() {
        let error = validate_template("t", "{{ run.payload.ticket }}").unwrap_err();
        assert!(error.message.contains("tojson"), "{}", error.message);
        let error =
            validate_template("t", "{% for i in range(3) %}{{ i }}{% endfor %}").unwrap_err();
        assert!(error.message.contains("`range`"), "{}", error.message);
        // Locals a template sets itself are not prompt variables and are fine.
        assert_eq!(
            validate_template("t", "{% set who = agent.name %}{{ who }}"),
            Ok(())
        );
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let error =
            validate_template("adapter.prompts.system", "one\ntwo\n{{ agent.name ").unwrap_err();
        assert_eq!(error.field, "adapter.prompts.system");
        assert!(error.message.contains("line 3"), "{}", error.message);
        // Multi-template statements are not compiled in: a prompt is one template.
        let error = validate_template("t", "{% include \"other\" %}").unwrap_err();
        assert!(error.message.contains("syntax error"), "{}", error.message);
    }

    #[test]
    fn wakeup_keys_are_sources_or_default() {
        for key in [
            "timer",
            "idle",
            "assignment",
            "on_demand",
            "automation",
            "predicate",
            "default",
        ] {
            assert_eq!(spec_with(key, "x").validate("p"), Ok(()), "{key}");
        }
        let error = spec_with("cron", "x").validate("p").unwrap_err();
        assert_eq!(error.field, "p.wakeup.cron");
        assert!(error.message.contains("on_demand"), "{}", error.message);
    }

    #[test]
    fn template_size_is_capped_at_the_boundary() {
        let at_max = "x".repeat(PROMPT_TEMPLATE_CHARS_MAX);
        assert_eq!(validate_template("t", &at_max), Ok(()));
        let over = "é".repeat(PROMPT_TEMPLATE_CHARS_MAX + 1);
        let error = spec_with("idle", &over).validate("p").unwrap_err();
        assert_eq!(error.field, "p.wakeup.idle");
        assert!(error
            .message
            .contains(&PROMPT_TEMPLATE_CHARS_MAX.to_string()));
        let spec = PromptSpec {
            system: Some(over),
            wakeup: BTreeMap::new(),
        };
        assert_eq!(spec.validate("p").unwrap_err().field, "p.system");
    }

    #[test]
    fn the_template_for_a_source_falls_back_to_default_then_built_in() {
        let mut spec = PromptSpec::default();
        assert_eq!(
            spec.wakeup_template(WakeupSource::Timer),
            WAKEUP_TEMPLATE_DEFAULT
        );
        assert_eq!(spec.system_template(), SYSTEM_TEMPLATE_DEFAULT);
        spec.wakeup.insert("default".into(), "D".into());
        spec.wakeup.insert("timer".into(), "T".into());
        assert_eq!(spec.wakeup_template(WakeupSource::Timer), "T");
        assert_eq!(spec.wakeup_template(WakeupSource::Idle), "D");
    }

    #[test]
    fn specs_parse_from_json_and_toml_and_refuse_unknown_fields() {
        let json: PromptSpec =
            serde_json::from_str(r#"{"system":"S","wakeup":{"timer":"T"}}"#).unwrap();
        let toml: PromptSpec = toml::from_str("system = \"S\"\n[wakeup]\ntimer = \"T\"\n").unwrap();
        assert_eq!(json, toml);
        assert_eq!(
            serde_json::from_str::<PromptSpec>("{}").unwrap(),
            PromptSpec::default()
        );
        assert!(serde_json::from_str::<PromptSpec>(r#"{"sytem":"S"}"#).is_err());
    }

    #[test]
    fn the_example_in_docs_agents_md_validates() {
        let doc = include_str!("../../../docs/agents.md");
        let doc = &doc[doc.find("## Prompt templates").expect("the templates section")..];
        let block = doc
            .split("```toml")
            .nth(1)
            .expect("a TOML example")
            .split("```")
            .next()
            .unwrap();
        let file: toml::Table = toml::from_str(block).unwrap();
        let prompts = file["agents"][0]["adapter"]["prompts"].clone();
        let spec: PromptSpec = prompts.try_into().unwrap();
        assert_eq!(spec.wakeup.len(), 3);
        assert_eq!(spec.validate("adapter.prompts"), Ok(()));
    }
}
