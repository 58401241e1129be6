//! Tools an LLM agent may call: the built-in `pause_heartbeats`, and the agent's HTTP tools
//! (declared in its spec, validated when it is saved). Execution is `exec::tools`.
//!
//! A tool's `parameters` is a JSON Schema, compiled by the `jsonschema` crate with no retriever
//! (`offline()`, and the crate built without its HTTP and file resolvers): a schema can never
//! make the runtime fetch anything, and one whose `$ref` points outside itself is refused.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::pause::{
    PAUSE_HEARTBEATS_MINUTES_DEFAULT, PAUSE_HEARTBEATS_MINUTES_MAX, PAUSE_HEARTBEATS_MINUTES_MIN,
};
use super::spec_error::SpecError;

/// Most HTTP tools one agent declares (models choose worse among many tools, and every call
/// sends all their definitions).
pub const TOOLS_PER_AGENT_MAX: usize = 32;
/// Longest tool name, in characters (OpenAI-compatible APIs accept 64).
pub const TOOL_NAME_CHARS_MAX: usize = 64;
/// Longest tool description, in characters.
pub const TOOL_DESCRIPTION_CHARS_MAX: usize = 1_024;
/// Largest `parameters` schema, in bytes of compact JSON (it is sent on every model call).
pub const TOOL_PARAMETERS_BYTES_MAX: usize = 16 * 1024;
/// Longest tool URL, in characters.
pub const TOOL_URL_CHARS_MAX: usize = 2_048;
/// Bounds and default of one HTTP tool call's timeout, in milliseconds.
pub const TOOL_TIMEOUT_MS_MIN: u64 = 100;
pub const TOOL_TIMEOUT_MS_MAX: u64 = 120_000;
pub const TOOL_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Bounds and default of how much of a tool's answer reaches the model, in bytes.
pub const TOOL_RESPONSE_BYTES_MIN: u64 = 1;
pub const TOOL_RESPONSE_BYTES_MAX: u64 = 1024 * 1024;
pub const TOOL_RESPONSE_BYTES_DEFAULT: u64 = 64 * 1024;
/// Longest schema error kept in a validation message, in characters.
const SCHEMA_ERROR_CHARS_MAX: usize = 500;

/// Name of the built-in tool that pauses the agent's routine wakeups.
pub const PAUSE_HEARTBEATS_TOOL: &str = "pause_heartbeats";

/// One HTTP tool: the model calls it by `name`, Vigil checks the arguments against
/// `parameters` and POSTs them to `url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpToolSpec {
    /// 1..=64 of `[a-zA-Z0-9_-]`, unique within the agent, not `pause_heartbeats`.
    pub name: String,
    /// What the tool does, for the model: 1..=1024 characters.
    pub description: String,
    /// A JSON Schema of the arguments, with `"type": "object"`.
    pub parameters: Value,
    /// `http://` or `https://` address the call is POSTed to.
    pub url: String,
    /// A call not answered within this fails (a tool failure for the breaker).
    #[serde(default = "timeout_default")]
    pub timeout_ms: u64,
    /// How much of the answer's body the model sees; the rest is cut off.
    #[serde(default = "response_bytes_default")]
    pub response_bytes_max: u64,
}

fn timeout_default() -> u64 {
    TOOL_TIMEOUT_MS_DEFAULT
}

fn response_bytes_default() -> u64 {
    TOOL_RESPONSE_BYTES_DEFAULT
}

/// A tool as the model is told about it (OpenAI's `function` object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// The built-in `pause_heartbeats` tool's definition. Its limits come from `engine::pause`.
pub fn pause_heartbeats_def() -> ToolDef {
    ToolDef {
        name: PAUSE_HEARTBEATS_TOOL.into(),
        description: format!(
            "Pause your routine wakeups (timer and idle) for a while; messages from users still \
             wake you. `minutes` defaults to {PAUSE_HEARTBEATS_MINUTES_DEFAULT} and is clamped \
             to {PAUSE_HEARTBEATS_MINUTES_MIN}..={PAUSE_HEARTBEATS_MINUTES_MAX}."
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "minutes": {
                    "type": ["integer", "null"],
                    "description": format!(
                        "How long to pause, in minutes ({PAUSE_HEARTBEATS_MINUTES_MIN} to \
                         {PAUSE_HEARTBEATS_MINUTES_MAX}; default {PAUSE_HEARTBEATS_MINUTES_DEFAULT})"
                    ),
                }
            },
            "additionalProperties": false,
        }),
    }
}

/// Every tool an agent has, in the order the model is told: the built-in first, then the
/// agent's HTTP tools as declared.
pub fn tool_defs(tools: &[HttpToolSpec]) -> Vec<ToolDef> {
    std::iter::once(pause_heartbeats_def())
        .chain(tools.iter().map(|tool| ToolDef {
            name: tool.name.clone(),
            description: tool.description.clone(),
            parameters: tool.parameters.clone(),
        }))
        .collect()
}

/// Compiles a `parameters` schema, refusing anything but an object schema that needs nothing
/// from outside itself.
pub fn compile_parameters(schema: &Value) -> Result<jsonschema::Validator, String> {
    if schema.get("type") != Some(&json!("object")) {
        return Err(
            "must be a JSON Schema object with \"type\": \"object\" (tool arguments are a JSON object)"
                .into(),
        );
    }
    jsonschema::options()
        .offline()
        .build(schema)
        .map_err(|error| {
            let text: String = error
                .to_string()
                .chars()
                .take(SCHEMA_ERROR_CHARS_MAX)
                .collect();
            format!("is not a valid JSON Schema: {text}")
        })
}

/// Checks an agent's HTTP tools; `field` is where the list sits (e.g. `adapter.tools`), and
/// errors name the tool's field (`adapter.tools[2].parameters`).
pub fn validate_tools(tools: &[HttpToolSpec], field: &str) -> Result<(), SpecError> {
    if tools.len() > TOOLS_PER_AGENT_MAX {
        return Err(SpecError::new(
            field.to_string(),
            format!(
                "an agent has at most {TOOLS_PER_AGENT_MAX} tools (got {})",
                tools.len()
            ),
        ));
    }
    for (index, tool) in tools.iter().enumerate() {
        let at = format!("{field}[{index}]");
        tool.validate(&at)?;
        if tools[..index]
            .iter()
            .any(|earlier| earlier.name == tool.name)
        {
            return Err(SpecError::new(
                format!("{at}.name"),
                format!("two tools are named {:?}; tool names are unique", tool.name),
            ));
        }
    }
    Ok(())
}

impl HttpToolSpec {
    /// Checks one tool; `at` is its path (`adapter.tools[2]`).
    pub fn validate(&self, at: &str) -> Result<(), SpecError> {
        let fail =
            |name: &str, message: String| Err(SpecError::new(format!("{at}.{name}"), message));
        if let Err(message) = check_name(&self.name) {
            return fail("name", message);
        }
        let description_chars = self.description.chars().count();
        if !(1..=TOOL_DESCRIPTION_CHARS_MAX).contains(&description_chars) {
            return fail(
                "description",
                format!("must be 1 to {TOOL_DESCRIPTION_CHARS_MAX} characters (got {description_chars})"),
            );
        }
        if let Err(message) = check_parameters(&self.parameters) {
            return fail("parameters", message);
        }
        if let Err(message) = check_url(&self.url) {
            return fail("url", message);
        }
        if !(TOOL_TIMEOUT_MS_MIN..=TOOL_TIMEOUT_MS_MAX).contains(&self.timeout_ms) {
            return fail(
                "timeout_ms",
                format!(
                    "must be between {TOOL_TIMEOUT_MS_MIN} and {TOOL_TIMEOUT_MS_MAX} (got {})",
                    self.timeout_ms
                ),
            );
        }
        if !(TOOL_RESPONSE_BYTES_MIN..=TOOL_RESPONSE_BYTES_MAX).contains(&self.response_bytes_max) {
            return fail(
                "response_bytes_max",
                format!(
                    "must be between {TOOL_RESPONSE_BYTES_MIN} and {TOOL_RESPONSE_BYTES_MAX} (got {})",
                    self.response_bytes_max
                ),
            );
        }
        Ok(())
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let chars = name.chars().count();
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !(1..=TOOL_NAME_CHARS_MAX).contains(&chars) || !name.chars().all(allowed) {
        return Err(format!(
            "must be 1 to {TOOL_NAME_CHARS_MAX} of [a-zA-Z0-9_-] (got {})",
            super::spec_error::echo(name)
        ));
    }
    if name == PAUSE_HEARTBEATS_TOOL {
        return Err(format!(
            "{PAUSE_HEARTBEATS_TOOL:?} is the built-in tool's name; choose another"
        ));
    }
    Ok(())
}

fn check_parameters(schema: &Value) -> Result<(), String> {
    let bytes = serde_json::to_vec(schema)
        .expect("JSON values serialize")
        .len();
    if bytes > TOOL_PARAMETERS_BYTES_MAX {
        return Err(format!(
            "is at most {TOOL_PARAMETERS_BYTES_MAX} bytes of JSON (got {bytes})"
        ));
    }
    compile_parameters(schema).map(|_| ())
}

/// Parsed as the transport will parse it, so a saved tool can always be reached by address.
fn check_url(url: &str) -> Result<(), String> {
    let chars = url.chars().count();
    if chars > TOOL_URL_CHARS_MAX {
        return Err(format!(
            "is at most {TOOL_URL_CHARS_MAX} characters (got {chars})"
        ));
    }
    crate::net::Endpoint::parse(url)
        .map(|_| ())
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> HttpToolSpec {
        HttpToolSpec {
            name: name.into(),
            description: "Looks things up.".into(),
            parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
            url: "http://127.0.0.1:9000/search".into(),
            timeout_ms: TOOL_TIMEOUT_MS_DEFAULT,
            response_bytes_max: TOOL_RESPONSE_BYTES_DEFAULT,
        }
    }

    /// The field of the error validating `[tool]` under `adapter.tools`, if any.
    fn refused(t: HttpToolSpec) -> Option<String> {
        validate_tools(&[t], "adapter.tools").err().map(|e| e.field.into_owned())
    }

    fn field(name: &str) -> Option<String> {
        Some(format!("adapter.tools[0].{name}"))
    }

    #[test]
    fn a_plain_tool_validates() {
        assert_eq!(validate_tools(&[tool("search")], "adapter.tools"), Ok(()));
        assert_eq!(validate_tools(&[], "adapter.tools"), Ok(()));
    }

    #[test]
    fn names_are_checked_at_their_bounds() {
        assert_eq!(refused(tool(&"n".repeat(TOOL_NAME_CHARS_MAX))), None);
        assert_eq!(refused(tool("a-Z_09")), None);
        assert_eq!(
            refused(tool(&"n".repeat(TOOL_NAME_CHARS_MAX + 1))),
            field("name")
        );
        assert_eq!(refused(tool("")), field("name"));
        assert_eq!(refused(tool("has space")), field("name"));
        assert_eq!(refused(tool("dot.ted")), field("name"));
        assert_eq!(refused(tool("é")), field("name"));
        assert_eq!(refused(tool(PAUSE_HEARTBEATS_TOOL)), field("name"));
    }

    #[test]
    fn names_are_unique_and_the_error_names_the_second() {
        let error =
            validate_tools(&[tool("a"), tool("b"), tool("a")], "adapter.tools").unwrap_err();
        assert_eq!(error.field, "adapter.tools[2].name");
    }

    #[test]
    fn tool_count_is_capped_at_the_boundary() {
        let at_max: Vec<_> = (0..TOOLS_PER_AGENT_MAX)
            .map(|i| tool(&format!("t{i}")))
            .collect();
        assert_eq!(validate_tools(&at_max, "adapter.tools"), Ok(()));
        let over: Vec<_> = (0..=TOOLS_PER_AGENT_MAX)
            .map(|i| tool(&format!("t{i}")))
            .collect();
        assert_eq!(
            validate_tools(&over, "adapter.tools").unwrap_err().field,
            "adapter.tools"
        );
    }

    #[test]
    fn descriptions_are_checked_at_their_bounds() {
        let with = |d: String| HttpToolSpec {
            description: d,
            ..tool("t")
        };
        assert_eq!(refused(with("d".repeat(TOOL_DESCRIPTION_CHARS_MAX))), None);
        assert_eq!(
            refused(with("d".repeat(TOOL_DESCRIPTION_CHARS_MAX + 1))),
            field("description")
        );
        assert_eq!(refused(with(String::new())), field("description"));
    }

    #[test]
    fn parameters_must_be_a_compilable_object_schema() {
        let with = |p: Value| HttpToolSpec {
            parameters: p,
            ..tool("t")
        };
        assert_eq!(refused(with(json!({"type": "object"}))), None);
        for bad in [
            json!({"type": "string"}),
            json!({"properties": {}}),
            json!("object"),
            json!({"type": ["object", "null"]}),
            json!({"type": "object", "properties": {"n": {"type": "integr"}}}),
            json!({"type": "object", "properties": {"n": {"minimum": "three"}}}),
            json!({"type": "object", "properties": {"n": {"$ref": "https://example.com/s.json"}}}),
            json!({"type": "object", "properties": {"n": {"$ref": "#/$defs/missing"}}}),
        ] {
            assert_eq!(refused(with(bad.clone())), field("parameters"), "{bad}");
        }
        // A local $ref is fine.
        let local = json!({"type": "object", "$defs": {"q": {"type": "string"}},
            "properties": {"q": {"$ref": "#/$defs/q"}}});
        assert_eq!(refused(with(local)), None);
    }

    #[test]
    fn parameters_size_is_capped_at_the_boundary() {
        let with_description =
            |len: usize| json!({"type": "object", "description": "d".repeat(len)});
        let overhead = serde_json::to_vec(&with_description(0)).unwrap().len();
        let at_max = with_description(TOOL_PARAMETERS_BYTES_MAX - overhead);
        assert_eq!(
            serde_json::to_vec(&at_max).unwrap().len(),
            TOOL_PARAMETERS_BYTES_MAX
        );
        assert_eq!(
            refused(HttpToolSpec {
                parameters: at_max,
                ..tool("t")
            }),
            None
        );
        let over = with_description(TOOL_PARAMETERS_BYTES_MAX - overhead + 1);
        assert_eq!(
            refused(HttpToolSpec {
                parameters: over,
                ..tool("t")
            }),
            field("parameters")
        );
    }

    #[test]
    fn urls_need_an_http_scheme_and_a_bounded_length() {
        let with = |u: String| HttpToolSpec {
            url: u,
            ..tool("t")
        };
        assert_eq!(refused(with("https://tools.example/x".into())), None);
        let prefix = "http://h/";
        let at_max = format!("{prefix}{}", "p".repeat(TOOL_URL_CHARS_MAX - prefix.len()));
        assert_eq!(refused(with(at_max.clone())), None);
        assert_eq!(refused(with(format!("{at_max}p"))), field("url"));
        for bad in [
            "ftp://h/x",
            "http://",
            "https://",
            "tools.example/x",
            "",
            "https://u:p@h/x",
        ] {
            assert_eq!(refused(with(bad.into())), field("url"), "{bad}");
        }
    }

    #[test]
    fn timeouts_and_response_caps_are_checked_at_their_bounds() {
        let timeout = |ms: u64| HttpToolSpec {
            timeout_ms: ms,
            ..tool("t")
        };
        assert_eq!(refused(timeout(TOOL_TIMEOUT_MS_MIN)), None);
        assert_eq!(refused(timeout(TOOL_TIMEOUT_MS_MAX)), None);
        assert_eq!(
            refused(timeout(TOOL_TIMEOUT_MS_MIN - 1)),
            field("timeout_ms")
        );
        assert_eq!(
            refused(timeout(TOOL_TIMEOUT_MS_MAX + 1)),
            field("timeout_ms")
        );
        let cap = |bytes: u64| HttpToolSpec {
            response_bytes_max: bytes,
            ..tool("t")
        };
        assert_eq!(refused(cap(TOOL_RESPONSE_BYTES_MIN)), None);
        assert_eq!(refused(cap(TOOL_RESPONSE_BYTES_MAX)), None);
        assert_eq!(
            refused(cap(TOOL_RESPONSE_BYTES_MIN - 1)),
            field("response_bytes_max")
        );
        assert_eq!(
            refused(cap(TOOL_RESPONSE_BYTES_MAX + 1)),
            field("response_bytes_max")
        );
    }

    #[test]
    fn definitions_list_the_built_in_first() {
        let defs = tool_defs(&[tool("b"), tool("a")]);
        let names: Vec<_> = defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, [PAUSE_HEARTBEATS_TOOL, "b", "a"]);
        compile_parameters(&defs[0].parameters).expect("the built-in schema compiles");
    }

    #[test]
    fn specs_parse_from_json_and_toml_with_defaults() {
        let toml_spec: HttpToolSpec = toml::from_str(
            r#"
            name = "search"
            description = "Looks things up."
            url = "http://127.0.0.1:9000/search"
            [parameters]
            type = "object"
            required = ["q"]
            [parameters.properties.q]
            type = "string"
            "#,
        )
        .unwrap();
        assert_eq!(toml_spec, tool("search"));
        let json_spec: HttpToolSpec = serde_json::from_value(json!({
            "name": "search", "description": "Looks things up.",
            "url": "http://127.0.0.1:9000/search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
        }))
        .unwrap();
        assert_eq!(json_spec, tool("search"));
        assert!(serde_json::from_value::<HttpToolSpec>(json!({
            "name": "s", "description": "d", "url": "http://h/", "parameters": {"type": "object"},
            "method": "GET"
        }))
        .is_err());
    }

    #[test]
    fn the_example_in_docs_agents_md_validates() {
        // The tools example continues the prompts example's agent: read them as one file.
        let doc = include_str!("../../../docs/agents.md");
        let doc = &doc[doc.find("### Prompt templates").expect("the templates section")..];
        let doc = &doc[..doc.find("\n## ").expect("the next adapter's section")];
        let blocks: Vec<&str> = doc
            .split("```toml")
            .skip(1)
            .map(|b| b.split("```").next().unwrap())
            .collect();
        assert_eq!(blocks.len(), 2);
        let file: toml::Table = toml::from_str(&blocks.concat()).unwrap();
        let tools: Vec<HttpToolSpec> = file["agents"][0]["adapter"]["tools"]
            .clone()
            .try_into()
            .unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(validate_tools(&tools, "adapter.tools"), Ok(()));
    }
}
