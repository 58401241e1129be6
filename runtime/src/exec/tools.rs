//! Carrying out the tool calls a model asks for: the built-in `pause_heartbeats`, and the
//! agent's HTTP tools over a [`ToolHttp`] transport.
//!
//! Every call ends in a [`ToolResult`] for the model; nothing here fails the run. What the loop
//! must act on travels typed, in [`ToolResult::signal`] (never parsed back out of the text), and
//! a failed HTTP tool call is `is_error` (the loop counts it on the breaker's tool trigger).
//! Arguments are checked against the tool's schema before anything is sent: a call with bad
//! arguments never reaches the transport.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};

use crate::engine::agent::AgentId;
use crate::engine::pause::heartbeat_pause_minutes;
use crate::engine::run::RunId;
use crate::engine::spec_error::SpecError;
use crate::engine::tool_spec::{
    compile_parameters, pause_heartbeats_def, tool_defs, validate_tools, HttpToolSpec, ToolDef,
    PAUSE_HEARTBEATS_TOOL,
};

/// Most schema errors listed back to the model for one call.
pub const ARGUMENT_ERRORS_LISTED_MAX: usize = 8;
/// Longest error text given back to the model, in characters (a schema error or an HTTP
/// error's body excerpt could otherwise be as large as what caused it).
pub const TOOL_ERROR_OUTPUT_CHARS_MAX: usize = 2_000;
/// Longest single schema error, in characters.
const ARGUMENT_ERROR_CHARS_MAX: usize = 200;

/// One call the model asked for. `arguments` may be a JSON object, or the JSON text of one
/// (OpenAI-compatible APIs send a string); an empty string or null means no arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// Something the agent loop must do because of a call, beyond telling the model the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSignal {
    /// Pause routine wakeups for `minutes` (already defaulted and clamped).
    PauseHeartbeats { minutes: u64 },
}

/// What a call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The text the model is given.
    pub output: String,
    /// Control flow for the loop; only `pause_heartbeats` sets it.
    pub signal: Option<ToolSignal>,
    /// The call failed (unknown tool, bad arguments, HTTP failure).
    pub is_error: bool,
    /// The tool itself failed (unreachable, non-2xx, timeout), as opposed to the model calling
    /// it wrong: the run counts on the breaker's tool trigger.
    pub failed: bool,
}

impl ToolResult {
    fn error(output: String) -> Self {
        ToolResult {
            output: cut_chars(&output, TOOL_ERROR_OUTPUT_CHARS_MAX),
            signal: None,
            is_error: true,
            failed: false,
        }
    }

    fn failure(output: String) -> Self {
        ToolResult {
            failed: true,
            ..ToolResult::error(output)
        }
    }
}

/// The answer of an HTTP tool's server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolHttpAnswer {
    pub status: u16,
    pub body: Bytes,
}

/// Why an HTTP tool call got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolHttpError {
    #[error("no answer within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("{0}")]
    Transport(String),
}

/// The future of one POST.
pub type ToolHttpFuture =
    Pin<Box<dyn Future<Output = Result<ToolHttpAnswer, ToolHttpError>> + Send>>;

/// How HTTP tools are reached: POST `body` as JSON to `url`, within `timeout_ms`, reading at
/// most about `response_bytes_max` of the answer. Production puts the HTTPS client behind it;
/// tests a recording fake. (The tool box also enforces both bounds, so a transport that does
/// not cannot hang a run or flood the model.)
pub trait ToolHttp: Send + Sync {
    fn post(
        &self,
        url: &str,
        body: Value,
        timeout_ms: u64,
        response_bytes_max: u64,
    ) -> ToolHttpFuture;
}

/// Who is calling: sent to HTTP tools with the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolContext {
    pub agent_id: AgentId,
    pub agent_name: String,
    pub run_id: RunId,
}

/// The built-in `pause_heartbeats` schema, compiled once per process: it never changes, and
/// every `llm` run used to compile it again (a few percent of a simulated fleet's time).
static PAUSE_VALIDATOR: std::sync::LazyLock<jsonschema::Validator> =
    std::sync::LazyLock::new(|| {
        compile_parameters(&pause_heartbeats_def().parameters)
            .expect("the built-in schema compiles")
    });

/// Compiles the built-in schemas now. The simulator calls it before a seed starts, so that
/// no first use inside a seed draws the process-wide hash seeds from that seed's randomness.
pub fn warm_builtin_schemas() {
    std::sync::LazyLock::force(&PAUSE_VALIDATOR);
}

/// Most distinct tool lists a node keeps compiled ([`CompiledTools`]); past it the cache is
/// emptied and refills from the runs that follow.
pub const COMPILED_TOOL_LISTS_MAX: usize = 1_024;

/// The tool lists a node's runs used, validated and with their schemas compiled, by the list's
/// JSON text. An agent's tools change only with its spec, yet every `llm` run used to validate
/// and compile each schema twice (about 5 % of a simulated fleet's time). One per node (the
/// adapter source holds it), so a simulated seed never sees another seed's compilations;
/// compiling is pure and offline, so a hit and a miss give the same tool box.
#[derive(Default)]
pub struct CompiledTools {
    lists: std::sync::Mutex<std::collections::BTreeMap<String, Arc<CompiledList>>>,
}

impl std::fmt::Debug for CompiledTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledTools").finish_non_exhaustive()
    }
}

impl CompiledTools {
    /// `specs` validated (as `adapter.tools`) and compiled, from the cache when it has them.
    /// The lock is never held while compiling.
    fn get(&self, specs: &[HttpToolSpec]) -> Result<Arc<CompiledList>, SpecError> {
        let key = serde_json::to_string(specs).expect("tool specs serialize");
        if let Some(hit) = self.lists.lock().expect("cache lock").get(&key) {
            return Ok(hit.clone());
        }
        let compiled = Arc::new(compile_tools(specs)?);
        let mut lists = self.lists.lock().expect("cache lock");
        if lists.len() >= COMPILED_TOOL_LISTS_MAX {
            lists.clear();
        }
        lists.insert(key, compiled.clone());
        Ok(compiled)
    }

    /// How many tool lists are kept. Tests only: nothing else reads the count (its `is_empty`
    /// twin, which clippy asks for beside a `len`, was a mutant no test could catch).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lists.lock().expect("cache lock").len()
    }
}

/// Validates `specs` (as `adapter.tools`) and compiles their schemas.
fn compile_tools(specs: &[HttpToolSpec]) -> Result<CompiledList, SpecError> {
    validate_tools(specs, "adapter.tools")?;
    let compile =
        |schema: &Value| compile_parameters(schema).expect("validated schemas compile");
    Ok(CompiledList {
        tools: specs
            .iter()
            .map(|spec| HttpTool {
                validator: compile(&spec.parameters),
                spec: spec.clone(),
            })
            .collect(),
        defs: tool_defs(specs),
    })
}

/// One agent's tool list, compiled, with the definitions sent to the model (written once: a
/// run's every model call sends them).
struct CompiledList {
    tools: Vec<HttpTool>,
    defs: Vec<ToolDef>,
}

/// An agent's tools, schemas compiled, ready to carry out calls.
pub struct Toolbox {
    pause: &'static jsonschema::Validator,
    tools: Arc<CompiledList>,
    http: Arc<dyn ToolHttp>,
}

struct HttpTool {
    spec: HttpToolSpec,
    validator: jsonschema::Validator,
}

impl Toolbox {
    /// Validates `specs` (as `adapter.tools`) and compiles their schemas.
    pub fn new(specs: &[HttpToolSpec], http: Arc<dyn ToolHttp>) -> Result<Self, SpecError> {
        Ok(Toolbox {
            pause: &PAUSE_VALIDATOR,
            tools: Arc::new(compile_tools(specs)?),
            http,
        })
    }

    /// Like [`Toolbox::new`], with the compiled tools taken from (or kept in) `cache`.
    pub fn cached(
        specs: &[HttpToolSpec],
        http: Arc<dyn ToolHttp>,
        cache: &CompiledTools,
    ) -> Result<Self, SpecError> {
        Ok(Toolbox {
            pause: &PAUSE_VALIDATOR,
            tools: cache.get(specs)?,
            http,
        })
    }

    /// The definitions sent to the model: the built-in first, then the HTTP tools.
    pub fn defs(&self) -> &[ToolDef] {
        &self.tools.defs
    }

    /// Carries out one call. Never fails: every problem is an `is_error` result for the model.
    pub async fn call(&self, call: &ToolCall, context: &ToolContext) -> ToolResult {
        let arguments = match parse_arguments(&call.arguments) {
            Ok(arguments) => arguments,
            Err(error) => {
                return ToolResult::error(format!(
                    "the arguments of {} are not JSON ({error}); send a JSON object matching its parameters schema",
                    call.name
                ))
            }
        };
        if call.name == PAUSE_HEARTBEATS_TOOL {
            return match schema_errors(self.pause, &call.name, &arguments) {
                Some(errors) => ToolResult::error(errors),
                None => pause_heartbeats(&arguments),
            };
        }
        let Some(tool) = self.tools.tools.iter().find(|t| t.spec.name == call.name) else {
            return ToolResult::error(self.unknown_tool(&call.name));
        };
        if let Some(errors) = schema_errors(&tool.validator, &call.name, &arguments) {
            return ToolResult::error(errors);
        }
        self.post(&tool.spec, call, arguments, context).await
    }

    fn unknown_tool(&self, name: &str) -> String {
        let names: Vec<&str> = self.defs().iter().map(|d| d.name.as_str()).collect();
        format!(
            "there is no tool named {name:?}; the tools are: {}",
            names.join(", ")
        )
    }

    async fn post(
        &self,
        spec: &HttpToolSpec,
        call: &ToolCall,
        arguments: Value,
        context: &ToolContext,
    ) -> ToolResult {
        let body = json!({
            "tool": spec.name,
            "call_id": call.id,
            "arguments": arguments,
            "agent": { "id": context.agent_id.0, "name": context.agent_name },
            "run": { "id": context.run_id.0 },
        });
        let sent = self
            .http
            .post(&spec.url, body, spec.timeout_ms, spec.response_bytes_max);
        let answer = tokio::time::timeout(Duration::from_millis(spec.timeout_ms), sent)
            .await
            .unwrap_or(Err(ToolHttpError::Timeout {
                timeout_ms: spec.timeout_ms,
            }));
        http_result(spec, answer)
    }
}

/// The arguments as a JSON value: text is parsed, nothing at all is `{}`.
fn parse_arguments(raw: &Value) -> Result<Value, serde_json::Error> {
    match raw {
        Value::Null => Ok(json!({})),
        Value::String(text) if text.trim().is_empty() => Ok(json!({})),
        Value::String(text) => serde_json::from_str(text),
        other => Ok(other.clone()),
    }
}

/// The schema errors of `arguments`, as a message for the model, or none if they conform.
/// Sorted, so the message does not depend on the validator's internal map order; values are
/// masked, so a huge argument does not come back whole.
fn schema_errors(
    validator: &jsonschema::Validator,
    tool: &str,
    arguments: &Value,
) -> Option<String> {
    let errors: std::collections::BTreeSet<String> = validator
        .iter_errors(arguments)
        .map(|error| {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() {
                "(arguments)".to_string()
            } else {
                path
            };
            cut_chars(
                &format!("{at}: {}", error.masked()),
                ARGUMENT_ERROR_CHARS_MAX,
            )
        })
        .collect();
    if errors.is_empty() {
        return None;
    }
    let listed: Vec<&str> = errors
        .iter()
        .take(ARGUMENT_ERRORS_LISTED_MAX)
        .map(String::as_str)
        .collect();
    let more = errors.len() - listed.len();
    let tail = if more > 0 {
        format!("\n- … and {more} more")
    } else {
        String::new()
    };
    Some(format!(
        "the arguments of {tool} do not match its parameters schema; nothing was done:\n- {}{tail}",
        listed.join("\n- ")
    ))
}

/// `pause_heartbeats` with conforming arguments: the signal carries the clamped minutes.
fn pause_heartbeats(arguments: &Value) -> ToolResult {
    // The schema admits integers only (2.0 counts as one); negative ones saturate to 0 and
    // clamp up, huge ones clamp down.
    let requested = arguments.get("minutes").filter(|m| !m.is_null()).map(|m| {
        m.as_u64()
            .unwrap_or_else(|| m.as_f64().unwrap_or(0.0) as u64)
    });
    let minutes = heartbeat_pause_minutes(requested);
    ToolResult {
        output: format!("Routine wakeups are paused for {minutes} minutes."),
        signal: Some(ToolSignal::PauseHeartbeats { minutes }),
        is_error: false,
        failed: false,
    }
}

fn http_result(spec: &HttpToolSpec, answer: Result<ToolHttpAnswer, ToolHttpError>) -> ToolResult {
    let name = &spec.name;
    match answer {
        Err(ToolHttpError::Timeout { .. }) => ToolResult::failure(format!(
            "tool {name} did not answer within its timeout_ms = {}",
            spec.timeout_ms
        )),
        Err(ToolHttpError::Transport(error)) => {
            ToolResult::failure(format!("could not reach tool {name}: {error}"))
        }
        Ok(answer) if !(200..300).contains(&answer.status) => ToolResult::failure(format!(
            "tool {name} answered HTTP {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        )),
        Ok(answer) => ToolResult {
            output: capped_body(&answer.body, spec.response_bytes_max),
            signal: None,
            is_error: false,
            failed: false,
        },
    }
}

/// The body as text, at most `cap` bytes of it (cut at a character boundary), with a note when
/// it was cut so the model knows it saw only part.
fn capped_body(body: &[u8], cap: u64) -> String {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    if body.len() <= cap {
        return String::from_utf8_lossy(body).into_owned();
    }
    let mut kept = &body[..cap];
    if let Err(error) = std::str::from_utf8(kept) {
        if error.error_len().is_none() {
            // The cut split a character: keep the whole characters before it.
            kept = &kept[..error.valid_up_to()];
        }
    }
    format!(
        "{}\n[cut: the answer was {} bytes; only the first {cap} are shown]",
        String::from_utf8_lossy(kept),
        body.len()
    )
}

fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::engine::pause::{
        PAUSE_HEARTBEATS_MINUTES_DEFAULT, PAUSE_HEARTBEATS_MINUTES_MAX,
        PAUSE_HEARTBEATS_MINUTES_MIN,
    };
    use crate::engine::tool_spec::{TOOL_RESPONSE_BYTES_DEFAULT, TOOL_TIMEOUT_MS_MIN};

    /// What the fake transport answers.
    #[derive(Clone)]
    enum Reply {
        Answer(u16, &'static [u8]),
        Owned(u16, Vec<u8>),
        Fail(ToolHttpError),
        Never,
    }

    /// Records every POST and answers with `reply`.
    struct FakeHttp {
        posts: Mutex<Vec<(String, Value, u64, u64)>>,
        reply: Reply,
    }

    impl FakeHttp {
        fn new(reply: Reply) -> Arc<Self> {
            Arc::new(FakeHttp {
                posts: Mutex::default(),
                reply,
            })
        }
        fn posts(&self) -> Vec<(String, Value, u64, u64)> {
            self.posts.lock().unwrap().clone()
        }
    }

    impl ToolHttp for FakeHttp {
        fn post(&self, url: &str, body: Value, timeout_ms: u64, cap: u64) -> ToolHttpFuture {
            self.posts
                .lock()
                .unwrap()
                .push((url.to_string(), body, timeout_ms, cap));
            let reply = self.reply.clone();
            Box::pin(async move {
                match reply {
                    Reply::Answer(status, body) => Ok(ToolHttpAnswer {
                        status,
                        body: Bytes::from_static(body),
                    }),
                    Reply::Owned(status, body) => Ok(ToolHttpAnswer {
                        status,
                        body: Bytes::from(body),
                    }),
                    Reply::Fail(error) => Err(error),
                    Reply::Never => std::future::pending().await,
                }
            })
        }
    }

    fn search() -> HttpToolSpec {
        HttpToolSpec {
            name: "search".into(),
            description: "Looks things up.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"q": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
                "required": ["q"],
                "additionalProperties": false,
            }),
            url: "http://127.0.0.1:9/search".into(),
            timeout_ms: TOOL_TIMEOUT_MS_MIN,
            response_bytes_max: TOOL_RESPONSE_BYTES_DEFAULT,
        }
    }

    fn toolbox(http: Arc<FakeHttp>) -> Toolbox {
        Toolbox::new(&[search()], http).unwrap()
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "call_1".into(),
            name: name.into(),
            arguments,
        }
    }

    fn context() -> ToolContext {
        ToolContext {
            agent_id: AgentId(3),
            agent_name: "scout".into(),
            run_id: RunId(11),
        }
    }

    async fn pause_with(arguments: Value) -> ToolResult {
        let http = FakeHttp::new(Reply::Never);
        let result = toolbox(http.clone())
            .call(&call(PAUSE_HEARTBEATS_TOOL, arguments), &context())
            .await;
        assert!(http.posts().is_empty(), "pause_heartbeats never posts");
        result
    }

    fn paused(minutes: u64) -> Option<ToolSignal> {
        Some(ToolSignal::PauseHeartbeats { minutes })
    }

    #[tokio::test]
    async fn pause_heartbeats_defaults_and_clamps() {
        let min = PAUSE_HEARTBEATS_MINUTES_MIN;
        let max = PAUSE_HEARTBEATS_MINUTES_MAX;
        for (arguments, minutes) in [
            (json!({}), PAUSE_HEARTBEATS_MINUTES_DEFAULT),
            (json!({"minutes": null}), PAUSE_HEARTBEATS_MINUTES_DEFAULT),
            (Value::Null, PAUSE_HEARTBEATS_MINUTES_DEFAULT),
            (json!(""), PAUSE_HEARTBEATS_MINUTES_DEFAULT),
            (json!({"minutes": 0}), min),
            (json!({"minutes": -5}), min),
            (json!({"minutes": min}), min),
            (json!({"minutes": 7}), 7),
            (json!({"minutes": max}), max),
            (json!({"minutes": max + 1}), max),
            (json!({"minutes": u64::MAX}), max),
            (json!({"minutes": 3.0}), 3),
            (json!("{\"minutes\": 61}"), max),
        ] {
            let result = pause_with(arguments.clone()).await;
            assert!(!result.is_error, "{arguments}: {}", result.output);
            assert_eq!(result.signal, paused(minutes), "{arguments}");
        }
    }

    #[tokio::test]
    async fn pause_heartbeats_refuses_non_integer_minutes_without_a_signal() {
        for arguments in [
            json!({"minutes": 2.5}),
            json!({"minutes": "ten"}),
            json!({"minutes": [1]}),
            json!({"minutes": 1, "seconds": 5}),
            json!([1]),
            json!("{not json"),
        ] {
            let result = pause_with(arguments.clone()).await;
            assert!(result.is_error, "{arguments}");
            assert_eq!(result.signal, None, "{arguments}");
        }
    }

    #[tokio::test]
    async fn an_unknown_tool_lists_the_tools_that_exist() {
        let http = FakeHttp::new(Reply::Answer(200, b"ok"));
        let result = toolbox(http.clone())
            .call(&call("serch", json!({})), &context())
            .await;
        assert!(result.is_error);
        assert_eq!(result.signal, None);
        assert!(result.output.contains("\"serch\""), "{}", result.output);
        assert!(
            result.output.contains("pause_heartbeats, search"),
            "{}",
            result.output
        );
        assert!(http.posts().is_empty());
    }

    #[tokio::test]
    async fn bad_arguments_never_reach_the_transport() {
        let http = FakeHttp::new(Reply::Answer(200, b"ok"));
        let tools = toolbox(http.clone());
        for arguments in [
            json!({}),
            json!({"q": 5}),
            json!({"q": "x", "limit": 0}),
            json!({"q": "x", "extra": true}),
            json!("not json"),
            json!("{\"q\": 5}"),
            json!(42),
            json!(["q"]),
        ] {
            let result = tools
                .call(&call("search", arguments.clone()), &context())
                .await;
            assert!(result.is_error, "{arguments}");
            assert!(!result.failed, "the model erred, not the tool: {arguments}");
            assert!(result.output.contains("search"), "{}", result.output);
        }
        assert!(http.posts().is_empty(), "{:?}", http.posts());
    }

    #[tokio::test]
    async fn schema_errors_are_listed_sorted_masked_and_capped() {
        let many: serde_json::Map<String, Value> = (0..ARGUMENT_ERRORS_LISTED_MAX + 3)
            .map(|i| (format!("p{i:02}"), json!({"type": "integer"})))
            .collect();
        let mut spec = search();
        spec.parameters = json!({"type": "object", "properties": many});
        let tools = Toolbox::new(&[spec], FakeHttp::new(Reply::Never)).unwrap();
        let huge = "v".repeat(100_000);
        let arguments: serde_json::Map<String, Value> = (0..ARGUMENT_ERRORS_LISTED_MAX + 3)
            .map(|i| (format!("p{i:02}"), json!(huge)))
            .collect();
        let result = tools
            .call(&call("search", Value::Object(arguments)), &context())
            .await;
        assert!(result.is_error);
        assert!(result.output.chars().count() <= TOOL_ERROR_OUTPUT_CHARS_MAX + 1);
        assert!(!result.output.contains("vvvv"), "values are masked");
        assert!(result.output.contains("/p00:"), "{}", result.output);
        assert!(!result.output.contains("/p10:"), "{}", result.output);
        assert!(result.output.contains("and 3 more"), "{}", result.output);
    }

    #[tokio::test]
    async fn a_valid_call_posts_tool_call_agent_and_run() {
        let http = FakeHttp::new(Reply::Answer(200, b"found 3"));
        let result = toolbox(http.clone())
            .call(
                &call("search", json!("{\"q\": \"vigil\", \"limit\": 3}")),
                &context(),
            )
            .await;
        assert_eq!(
            result,
            ToolResult {
                output: "found 3".into(),
                signal: None,
                is_error: false,
                failed: false,
            }
        );
        let posts = http.posts();
        assert_eq!(posts.len(), 1);
        let (url, body, timeout_ms, cap) = &posts[0];
        assert_eq!(url, "http://127.0.0.1:9/search");
        assert_eq!(
            (*timeout_ms, *cap),
            (TOOL_TIMEOUT_MS_MIN, TOOL_RESPONSE_BYTES_DEFAULT)
        );
        assert_eq!(
            body,
            &json!({
                "tool": "search", "call_id": "call_1",
                "arguments": {"q": "vigil", "limit": 3},
                "agent": {"id": 3, "name": "scout"}, "run": {"id": 11},
            })
        );
    }

    #[tokio::test]
    async fn http_failures_are_errors_for_the_model() {
        let long_body: Vec<u8> = vec![b'e'; 10 * TOOL_ERROR_OUTPUT_CHARS_MAX];
        for (reply, expect) in [
            (Reply::Answer(500, b"boom"), "answered HTTP 500: boom"),
            (Reply::Answer(404, b""), "answered HTTP 404"),
            (Reply::Answer(302, b""), "answered HTTP 302"),
            (Reply::Owned(503, long_body), "answered HTTP 503"),
            (
                Reply::Fail(ToolHttpError::Timeout { timeout_ms: 100 }),
                "did not answer within",
            ),
            (
                Reply::Fail(ToolHttpError::Transport("refused".into())),
                "could not reach tool search: refused",
            ),
            (Reply::Never, "did not answer within its timeout_ms = 100"),
        ] {
            let http = FakeHttp::new(reply);
            let result = toolbox(http.clone())
                .call(&call("search", json!({"q": "x"})), &context())
                .await;
            assert!(result.is_error, "{expect}");
            assert!(result.failed, "a failing tool counts for the breaker: {expect}");
            assert_eq!(result.signal, None);
            assert!(
                result.output.contains(expect),
                "{expect} in {}",
                result.output
            );
            assert!(result.output.chars().count() <= TOOL_ERROR_OUTPUT_CHARS_MAX + 1);
            assert_eq!(http.posts().len(), 1);
        }
    }

    #[test]
    fn bodies_are_capped_at_the_boundary_on_a_character_boundary() {
        assert_eq!(capped_body(b"abc", 3), "abc");
        let cut = capped_body(b"abcd", 3);
        assert!(
            cut.starts_with("abc\n[cut: the answer was 4 bytes"),
            "{cut}"
        );
        // "é" is two bytes: a cap of 2 falls inside the second one.
        let cut = capped_body("aéb".as_bytes(), 2);
        assert!(cut.starts_with("a\n[cut"), "{cut}");
        assert_eq!(capped_body(&[0xff, b'a'], 2), "\u{fffd}a");
    }

    #[tokio::test]
    async fn a_large_answer_is_capped_at_response_bytes_max() {
        let mut spec = search();
        spec.response_bytes_max = 10;
        let http = FakeHttp::new(Reply::Answer(200, b"0123456789ABCDEF"));
        let tools = Toolbox::new(&[spec], http).unwrap();
        let result = tools
            .call(&call("search", json!({"q": "x"})), &context())
            .await;
        assert!(!result.is_error);
        assert!(
            result.output.starts_with("0123456789\n[cut"),
            "{}",
            result.output
        );
    }

    #[test]
    fn a_toolbox_refuses_invalid_specs_and_lists_the_built_in_first() {
        let mut bad = search();
        bad.parameters = json!({"type": "array"});
        let error = Toolbox::new(&[search(), bad], FakeHttp::new(Reply::Never))
            .err()
            .unwrap();
        assert_eq!(error.field, "adapter.tools[1].parameters");
        let names: Vec<String> = toolbox(FakeHttp::new(Reply::Never))
            .defs()
            .iter()
            .map(|d| d.name.clone())
            .collect();
        assert_eq!(names, [PAUSE_HEARTBEATS_TOOL, "search"]);
    }

    #[test]
    fn error_text_is_cut_at_the_boundary() {
        let at_max = "x".repeat(TOOL_ERROR_OUTPUT_CHARS_MAX);
        assert_eq!(ToolResult::error(at_max.clone()).output, at_max);
        let over = ToolResult::error(format!("{at_max}y")).output;
        assert_eq!(over, format!("{at_max}…"));
    }

    #[tokio::test]
    async fn a_node_compiles_a_tool_list_once_and_its_cache_is_bounded() {
        let cache = CompiledTools::default();
        let named = |name: &str| HttpToolSpec {
            name: name.into(),
            ..search()
        };
        let first = Toolbox::cached(&[search()], FakeHttp::new(Reply::Never), &cache).unwrap();
        let again = Toolbox::cached(&[search()], FakeHttp::new(Reply::Never), &cache).unwrap();
        assert!(Arc::ptr_eq(&first.tools, &again.tools), "the same list compiled twice");
        assert_eq!(cache.len(), 1);
        // A cached tool box checks arguments like a fresh one.
        let http = FakeHttp::new(Reply::Answer(200, b"{}"));
        let cached = Toolbox::cached(&[search()], http.clone(), &cache).unwrap();
        let refused = cached
            .call(&call("search", json!({"q": 1})), &context())
            .await;
        assert!(refused.is_error && http.posts().is_empty(), "{}", refused.output);

        // A list that fails validation is an error every time and never kept.
        let twice = [search(), search()];
        assert!(Toolbox::cached(&twice, FakeHttp::new(Reply::Never), &cache).is_err());
        assert_eq!(cache.len(), 1);

        // At COMPILED_TOOL_LISTS_MAX lists kept, the next new one empties the cache first.
        for i in 1..COMPILED_TOOL_LISTS_MAX {
            Toolbox::cached(&[named(&format!("t{i}"))], FakeHttp::new(Reply::Never), &cache)
                .unwrap();
        }
        assert_eq!(cache.len(), COMPILED_TOOL_LISTS_MAX);
        Toolbox::cached(&[search()], FakeHttp::new(Reply::Never), &cache).unwrap();
        assert_eq!(cache.len(), COMPILED_TOOL_LISTS_MAX, "a hit adds nothing");
        Toolbox::cached(&[named("new")], FakeHttp::new(Reply::Never), &cache).unwrap();
        assert_eq!(cache.len(), 1);
    }
}
