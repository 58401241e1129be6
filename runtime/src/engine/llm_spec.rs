//! The `llm` adapter's spec: which provider and model an agent's runs call, how (wire shape,
//! key, timeouts), and the agent loop's bounds. Validated when the agent is saved, each field
//! named in its error, so nothing here can surprise a run.

use serde::{Deserialize, Serialize};

use super::agent::FieldError;
use super::prompt::{validate_template, PromptSpec};
use super::tool_spec::{validate_tools, HttpToolSpec};

/// Longest `system_prompt` accepted.
pub const SYSTEM_PROMPT_CHARS_MAX: usize = 8_192;
/// Longest `model` name accepted.
pub const MODEL_CHARS_MAX: usize = 200;
/// Bounds of one model call.
pub const LLM_REQUEST_TIMEOUT_MS_MIN: u64 = 1_000;
pub const LLM_REQUEST_TIMEOUT_MS_MAX: u64 = 10 * 60 * 1_000;
pub const LLM_REQUEST_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Longest environment variable name for the API key.
pub const API_KEY_ENV_CHARS_MAX: usize = 128;
/// Model calls per run: the default and the accepted range.
pub const MAX_ITERATIONS_DEFAULT: u32 = 5;
pub const MAX_ITERATIONS_MIN: u32 = 1;
pub const MAX_ITERATIONS_MAX: u32 = 50;
/// Tool calls per wakeup (the Heart's seed tool cap): the default and the largest accepted.
pub const TOOL_CALLS_MAX_DEFAULT: u32 = 5;
pub const TOOL_CALLS_MAX_LIMIT: u32 = 50;
/// Output tokens one model call may produce (Anthropic requires the bound).
pub const MAX_OUTPUT_TOKENS_DEFAULT: u32 = 1_024;
pub const MAX_OUTPUT_TOKENS_MAX: u32 = 128_000;

/// The wire shape the provider speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireShape {
    /// OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, llama.cpp, ...).
    #[default]
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

impl WireShape {
    pub fn as_str(self) -> &'static str {
        match self {
            WireShape::Openai => "openai",
            WireShape::Anthropic => "anthropic",
        }
    }
}

/// Where and how an `llm` run calls its model, and the agent loop's bounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSpec {
    /// The wire shape: `openai` (default) or `anthropic`.
    #[serde(default)]
    pub api: WireShape,
    /// `https://host[:port][/base]`, or `http://` for a local server. The call goes to
    /// `/v1/chat/completions` (openai) or `/v1/messages` (anthropic) below it.
    pub base_url: String,
    pub model: String,
    /// The environment variable of `vigil serve` that holds the API key. The key itself is
    /// never stored, logged or returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// One call longer than this fails the run (an LLM failure for the breaker).
    #[serde(default = "llm_request_timeout_default")]
    pub request_timeout_ms: u64,
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Most model calls in one run.
    #[serde(default = "max_iterations_default")]
    pub max_iterations: u32,
    /// Most tool calls in one run (per wakeup).
    #[serde(default = "tool_calls_max_default")]
    pub tool_calls_max: u32,
    /// Most output tokens one call may produce.
    #[serde(default = "max_output_tokens_default")]
    pub max_output_tokens: u32,
    /// Prompt templates: the system prompt and one per wakeup source (docs/agents.md).
    #[serde(default, skip_serializing_if = "PromptSpec::is_default")]
    pub prompts: PromptSpec,
    /// The agent's HTTP tools, beside the built-in `pause_heartbeats`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<HttpToolSpec>,
}

fn llm_request_timeout_default() -> u64 {
    LLM_REQUEST_TIMEOUT_MS_DEFAULT
}
fn max_iterations_default() -> u32 {
    MAX_ITERATIONS_DEFAULT
}
fn tool_calls_max_default() -> u32 {
    TOOL_CALLS_MAX_DEFAULT
}
fn max_output_tokens_default() -> u32 {
    MAX_OUTPUT_TOKENS_DEFAULT
}

impl LlmSpec {
    /// A spec with every default.
    pub fn new(base_url: &str, model: &str) -> Self {
        LlmSpec {
            api: WireShape::default(),
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            request_timeout_ms: LLM_REQUEST_TIMEOUT_MS_DEFAULT,
            system_prompt: None,
            max_iterations: MAX_ITERATIONS_DEFAULT,
            tool_calls_max: TOOL_CALLS_MAX_DEFAULT,
            max_output_tokens: MAX_OUTPUT_TOKENS_DEFAULT,
            prompts: PromptSpec::default(),
            tools: Vec::new(),
        }
    }

    /// The prompts a run renders: `system_prompt` is shorthand for `prompts.system`.
    pub fn prompt_spec(&self) -> PromptSpec {
        let mut prompts = self.prompts.clone();
        if prompts.system.is_none() {
            prompts.system = self.system_prompt.clone();
        }
        prompts
    }

    pub(crate) fn validate(&self) -> Result<(), FieldError> {
        validate_base_url(&self.base_url)?;
        if self.model.is_empty() || self.model.chars().count() > MODEL_CHARS_MAX {
            return Err(FieldError::new(
                "adapter.model",
                format!("adapter.model must be 1 to {MODEL_CHARS_MAX} characters"),
            ));
        }
        if let Some(name) = &self.api_key_env {
            validate_env_name(name)?;
        }
        in_range(
            "adapter.request_timeout_ms",
            self.request_timeout_ms,
            LLM_REQUEST_TIMEOUT_MS_MIN,
            LLM_REQUEST_TIMEOUT_MS_MAX,
        )?;
        in_range(
            "adapter.max_iterations",
            self.max_iterations.into(),
            MAX_ITERATIONS_MIN.into(),
            MAX_ITERATIONS_MAX.into(),
        )?;
        in_range(
            "adapter.tool_calls_max",
            self.tool_calls_max.into(),
            0,
            TOOL_CALLS_MAX_LIMIT.into(),
        )?;
        in_range(
            "adapter.max_output_tokens",
            self.max_output_tokens.into(),
            1,
            MAX_OUTPUT_TOKENS_MAX.into(),
        )?;
        if self
            .system_prompt
            .as_ref()
            .is_some_and(|p| p.chars().count() > SYSTEM_PROMPT_CHARS_MAX)
        {
            return Err(FieldError::new(
                "adapter.system_prompt",
                format!("adapter.system_prompt is at most {SYSTEM_PROMPT_CHARS_MAX} characters"),
            ));
        }
        if let Some(system) = &self.system_prompt {
            if self.prompts.system.is_some() {
                return Err(FieldError::new(
                    "adapter.system_prompt",
                    "give the system prompt once: adapter.system_prompt or adapter.prompts.system",
                ));
            }
            validate_template("adapter.system_prompt", system)?;
        }
        self.prompts.validate("adapter.prompts")?;
        validate_tools(&self.tools, "adapter.tools")
    }
}

fn in_range(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), FieldError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("{field} must be between {min} and {max} (got {value})"),
        ))
    }
}

/// `http(s)://host[:port][/path]`, parsed as the transport will parse it (a pure function).
fn validate_base_url(url: &str) -> Result<(), FieldError> {
    crate::net::Endpoint::parse(url).map(|_| ()).map_err(|error| {
        FieldError::new(
            "adapter.base_url",
            format!("adapter.base_url: {error}"),
        )
    })
}

/// An environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
fn validate_env_name(name: &str) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.len() <= API_KEY_ENV_CHARS_MAX
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            "adapter.api_key_env",
            format!("adapter.api_key_env must name an environment variable (letters, digits, _; at most {API_KEY_ENV_CHARS_MAX}), e.g. \"OPENAI_API_KEY\"; put the key itself in that variable, never in the spec"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(spec: &LlmSpec) -> Option<String> {
        spec.validate().err().map(|e| e.field.into_owned())
    }

    #[test]
    fn base_urls_with_host_names_and_tls_are_accepted() {
        for ok in [
            "https://api.openai.com",
            "https://api.anthropic.com/",
            "http://127.0.0.1:11434",
            "http://localhost:8080/v1beta",
            "http://[::1]:8080",
        ] {
            assert_eq!(field(&LlmSpec::new(ok, "m")), None, "{ok}");
        }
        for bad in [
            "",
            "ftp://x",
            "api.openai.com",
            "https://",
            "https://:80",
            "https://u:p@host",
            "https://host/?q=1",
            "https://host/#f",
        ] {
            assert_eq!(field(&LlmSpec::new(bad, "m")).as_deref(), Some("adapter.base_url"), "{bad}");
        }
        let long = format!("https://h/{}", "x".repeat(crate::net::URL_CHARS_MAX));
        assert_eq!(field(&LlmSpec::new(&long, "m")).as_deref(), Some("adapter.base_url"));
    }

    #[test]
    fn every_bound_names_its_field_at_its_boundary() {
        let base = LlmSpec::new("https://h", "m");
        let cases: Vec<(&str, Box<dyn Fn(&mut LlmSpec, u64)>, u64, u64)> = vec![
            ("adapter.request_timeout_ms", Box::new(|s, v| s.request_timeout_ms = v), LLM_REQUEST_TIMEOUT_MS_MIN, LLM_REQUEST_TIMEOUT_MS_MAX),
            ("adapter.max_iterations", Box::new(|s, v| s.max_iterations = v as u32), MAX_ITERATIONS_MIN.into(), MAX_ITERATIONS_MAX.into()),
            ("adapter.tool_calls_max", Box::new(|s, v| s.tool_calls_max = v as u32), 0, TOOL_CALLS_MAX_LIMIT.into()),
            ("adapter.max_output_tokens", Box::new(|s, v| s.max_output_tokens = v as u32), 1, MAX_OUTPUT_TOKENS_MAX.into()),
        ];
        for (name, set, min, max) in cases {
            for (value, ok) in [(min, true), (max, true), (max + 1, false)] {
                let mut spec = base.clone();
                set(&mut spec, value);
                assert_eq!(field(&spec), (!ok).then(|| name.to_string()), "{name}={value}");
            }
            if min > 0 {
                let mut spec = base.clone();
                set(&mut spec, min - 1);
                assert_eq!(field(&spec).as_deref(), Some(name));
            }
        }
        let mut spec = base.clone();
        spec.model = String::new();
        assert_eq!(field(&spec).as_deref(), Some("adapter.model"));
        spec.model = "x".repeat(MODEL_CHARS_MAX);
        assert_eq!(field(&spec), None);
        spec.system_prompt = Some("x".repeat(SYSTEM_PROMPT_CHARS_MAX + 1));
        assert_eq!(field(&spec).as_deref(), Some("adapter.system_prompt"));
    }

    #[test]
    fn the_key_is_named_by_its_environment_variable_only() {
        let mut spec = LlmSpec::new("https://h", "m");
        for (name, ok) in [("OPENAI_API_KEY", true), ("_K1", true), ("1KEY", false), ("sk-abc", false), ("", false)] {
            spec.api_key_env = Some(name.into());
            assert_eq!(field(&spec).is_none(), ok, "{name}");
        }
        let parsed: Result<LlmSpec, _> = serde_json::from_str(
            r#"{"base_url":"https://h","model":"m","api_key":"sk-1"}"#,
        );
        assert!(parsed.is_err(), "a key in the spec itself is refused as an unknown field");
        let parsed: LlmSpec = serde_json::from_str(
            r#"{"api":"anthropic","base_url":"https://h","model":"m","api_key_env":"ANTHROPIC_API_KEY"}"#,
        )
        .unwrap();
        assert_eq!(parsed.api, WireShape::Anthropic);
        assert_eq!(parsed.max_iterations, MAX_ITERATIONS_DEFAULT);
    }

    /// The step-by-step guide's agent spec is a valid agent: the guide cannot drift.
    #[test]
    fn the_guides_agent_in_docs_agents_md_validates() {
        let doc = include_str!("../../../docs/agents.md");
        let start = doc.find("cat > scout.toml <<'TOML'").expect("the guide's spec");
        let body = &doc[start..];
        let body = &body[body.find('\n').unwrap() + 1..body.find("\n   TOML").unwrap()];
        let text: String = body.lines().map(|l| l.strip_prefix("   ").unwrap_or(l)).collect::<Vec<_>>().join("\n");
        let spec: crate::engine::agent::AgentSpec = toml::from_str(&text).unwrap();
        spec.validate().unwrap();
        assert!(matches!(spec.adapter, crate::engine::agent::AdapterSpec::Llm(_)));
        assert!(spec.limits.daily_budget_usd.is_some());
    }
}
