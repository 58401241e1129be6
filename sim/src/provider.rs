//! A simulated LLM provider on its own node of the simulated network, served by the same
//! hyper/axum stack as the runtime. It speaks both wire shapes the runtime's `llm` adapter
//! speaks: OpenAI-compatible `/v1/chat/completions` and Anthropic Messages `/v1/messages`. The
//! runtime calls it over simulated TCP exactly as it would call a real one, by IP
//! ([`base_url`]) or by host name through madsim's DNS table ([`host_base_url`]).
//!
//! What it answers is a deterministic function of the seed and the request, never of the order
//! calls arrive in: a call of agent `a`'s run `r` at round `k` (the model calls that run already
//! made with tool calls) draws from the ChaCha stream `provider/a/r/k` of the seed. The
//! [`ProviderScript`] the scenario sets says how often a run's first call answers `[IDLE]`,
//! asks for a rest (`pause_heartbeats` with a minutes argument), or calls the agent's HTTP
//! tools, and for how many rounds (a "looping" agent calls tools far past any cap). Every
//! answer carries usage (prompt, completion and cached prompt tokens) derived from the request's
//! size.
//!
//! Which agent and run is calling: the scenarios give their `llm` agents a system prompt that
//! starts with the marker [`ID_MARKER_TEMPLATE`] (rendered by the runtime as
//! `[vigil-sim agent=3 run=17 name=fleet-2]`), which the provider reads back from the system
//! message. It is part of the request the runtime really sends, so it needs no side channel,
//! and works for both wire shapes (OpenAI's first `system` message, Anthropic's top-level
//! `system`). A request without it is served too; its record names no agent or run.
//!
//! Every call served is a typed trace record ([`TraceEvent::ModelCallServed`]). The fault plan
//! changes the provider's behaviour in virtual time (faults `llm_rate_limit`,
//! `llm_server_error`, `llm_timeout`, `llm_malformed`): while a window is open every call is
//! answered that way.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use rand::Rng;
use serde_json::{json, Value};
use vigil_faults::LlmFault;

use crate::recorder::{CallGuard, Recorder};
use crate::trace::{BrokenCall, ModelReply, ToolResultSeen, TraceEvent, WakeSeen, WireApi};

/// Where the provider listens.
pub const PROVIDER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));
pub const PROVIDER_PORT: u16 = 8080;
/// The provider's host name in madsim's DNS table.
pub const PROVIDER_HOST: &str = "llm.sim.internal";
/// The model name the scenarios give their `llm` agents.
pub const SIM_MODEL: &str = "sim-model-1";
/// Under `llm_timeout` a call is answered only after this long: far past any request timeout
/// a scenario gives its agents.
pub const SLOW_REPLY_MS: u64 = 60 * 60 * 1_000;
/// The answer that makes a timer or idle run a ghost run (restated, not imported).
pub const IDLE_ANSWER: &str = "[IDLE]";
/// Start of a system prompt template that lets the provider tell who calls.
pub const ID_MARKER_TEMPLATE: &str =
    "[vigil-sim agent={{ agent.id }} run={{ run.id }} name={{ agent.name }}]";
/// Name of the built-in rest tool, as the runtime offers it to the model.
pub const PAUSE_TOOL: &str = "pause_heartbeats";
/// How the simulated model marks the id of a call whose arguments it broke on purpose: so that
/// reading a request keeps only those calls' results (the model knows what it sent).
pub const BROKEN_CALL_SUFFIX: &str = "_broken";
/// Bytes of request per prompt token (a rough tokenizer: deterministic, proportional).
const BYTES_PER_TOKEN: u64 = 4;

/// The provider's address as an `llm` adapter's `base_url`.
pub fn base_url() -> String {
    format!("http://{}", SocketAddr::new(PROVIDER_IP, PROVIDER_PORT))
}

/// The provider's address by host name (resolved by the runtime's outbound client through
/// madsim's DNS table).
pub fn host_base_url() -> String {
    format!("http://{PROVIDER_HOST}:{PROVIDER_PORT}")
}

/// How the model behaves for one kind of agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Behaviour {
    /// Chance (thousandths) that a run's first call answers exactly `[IDLE]`.
    pub idle_permille: u32,
    /// Chance (thousandths) that a run that is not idle asks for a rest at its end.
    pub pause_permille: u32,
    /// The `minutes` argument of a rest, drawn uniformly (0 and past 60 test the clamp).
    pub pause_minutes: (u64, u64),
    /// Chance (thousandths) that a run that is not idle calls the agent's HTTP tools first.
    pub tool_permille: u32,
    /// Rounds of tool calls such a run makes before it ends its turn (drawn uniformly).
    pub tool_rounds: (u32, u32),
    /// Tool calls in one round (drawn uniformly).
    pub calls_per_round: (u32, u32),
    /// Completion tokens of a final answer (drawn uniformly).
    pub answer_tokens: (u64, u64),
    /// How long the model takes to answer one call, in ms (drawn uniformly from the call's own
    /// stream, so a latency never moves another draw; `(0, 0)`: at once, without a sleep).
    pub latency_ms: (u64, u64),
    /// Chance (thousandths) that a tool call's arguments break the tool's parameters schema
    /// on purpose (the node must refuse it without calling the tool; 0: never, and nothing
    /// is drawn for it).
    pub broken_permille: u32,
    /// How many schema errors such arguments carry (drawn uniformly; each is a value of a
    /// wrong type). Fewer than the schema allows are made when it has too few places to break.
    pub broken_errors: (u32, u32),
    /// Chance (thousandths) that a final answer runs past what a run keeps of it: findings of
    /// [`LONG_ANSWER_BYTES`] in multi-byte text, so that the cut must fall on a character
    /// boundary. When not 0, every final answer's text goes into the trace (`answer`), for
    /// `answer_excerpt_as_documented`; 0: nothing is drawn and nothing recorded.
    pub long_answer_permille: u32,
}

/// The length a long final answer reaches, in bytes: past the 32 KiB a run keeps.
pub const LONG_ANSWER_BYTES: usize = 40_000;
/// What a long answer's findings repeat: one-, two- and three-byte characters.
const LONG_ANSWER_LINE: &str = "naïve résumé · ok → ";

impl Default for Behaviour {
    /// Always a plain answer: no idle, no rest, no tools.
    fn default() -> Self {
        Behaviour {
            idle_permille: 0,
            pause_permille: 0,
            pause_minutes: (1, 5),
            tool_permille: 0,
            tool_rounds: (1, 1),
            calls_per_round: (1, 1),
            answer_tokens: (20, 200),
            latency_ms: (0, 0),
            broken_permille: 0,
            broken_errors: (1, 1),
            long_answer_permille: 0,
        }
    }
}

/// What the scenario asks of the model: a default behaviour and overrides by agent-name
/// prefix (the first matching prefix wins).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderScript {
    pub default: Behaviour,
    pub by_name_prefix: Vec<(String, Behaviour)>,
}

impl ProviderScript {
    fn behaviour(&self, name: Option<&str>) -> &Behaviour {
        name.and_then(|name| {
            self.by_name_prefix
                .iter()
                .find(|(prefix, _)| name.starts_with(prefix.as_str()))
                .map(|(_, b)| b)
        })
        .unwrap_or(&self.default)
    }
}

/// Which faults are open (counted, as windows of one kind may overlap), the calls served, and
/// what the model does.
#[derive(Debug, Default)]
pub struct ProviderState {
    open: [u32; 4],
    pub calls: u64,
    pub script: ProviderScript,
    /// The run's seed: every answer's draws come from streams of it.
    pub seed: u64,
}

fn slot(fault: LlmFault) -> usize {
    match fault {
        LlmFault::RateLimit => 0,
        LlmFault::ServerError => 1,
        LlmFault::Timeout => 2,
        LlmFault::Malformed => 3,
    }
}

impl ProviderState {
    /// A provider for `seed` that answers as `script` says.
    pub fn new(seed: u64, script: ProviderScript) -> Self {
        ProviderState {
            seed,
            script,
            ..ProviderState::default()
        }
    }

    pub fn open(&mut self, fault: LlmFault) {
        self.open[slot(fault)] += 1;
    }

    pub fn close(&mut self, fault: LlmFault) {
        self.open[slot(fault)] = self.open[slot(fault)].saturating_sub(1);
    }

    /// Heals every fault (the quiet phase).
    pub fn heal(&mut self) {
        self.open = [0; 4];
    }

    /// The fault calls suffer now, if any (the first open in this order).
    fn current(&self) -> Option<LlmFault> {
        [
            LlmFault::RateLimit,
            LlmFault::ServerError,
            LlmFault::Timeout,
            LlmFault::Malformed,
        ]
        .into_iter()
        .find(|f| self.open[slot(*f)] > 0)
    }
}

/// Shared between the provider node and the fault runner (madsim runs every node on one thread).
pub type SharedProvider = Arc<Mutex<ProviderState>>;

/// Serves both endpoints on this node forever, recording every call into `recorder`.
pub async fn serve(state: SharedProvider, recorder: Recorder) {
    let route = |api: WireApi| {
        let (state, recorder) = (state.clone(), recorder.clone());
        post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (state, recorder) = (state.clone(), recorder.clone());
            async move { answer(&state, &recorder, api, &headers, &body).await }
        })
    };
    let router = axum::Router::new()
        .route("/v1/chat/completions", route(WireApi::Openai))
        .route("/v1/messages", route(WireApi::Anthropic));
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        PROVIDER_PORT,
    ))
    .await
    .expect("the provider's port is free on its own node");
    vigil::api::serve(listener, router).await;
}

/// Who is calling, read from the marker at the start of the system prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub agent: Option<u64>,
    pub run: Option<u64>,
    pub name: Option<String>,
}

/// Reads `[vigil-sim agent=A run=R name=N]` from the start of `system`.
pub fn parse_marker(system: &str) -> Caller {
    let Some(rest) = system.strip_prefix("[vigil-sim ") else {
        return Caller::default();
    };
    let Some(inner) = rest.split(']').next() else {
        return Caller::default();
    };
    let mut caller = Caller::default();
    for word in inner.split_whitespace() {
        if let Some(v) = word.strip_prefix("agent=") {
            caller.agent = v.parse().ok();
        } else if let Some(v) = word.strip_prefix("run=") {
            caller.run = v.parse().ok();
        } else if let Some(v) = word.strip_prefix("name=") {
            caller.name = Some(v.to_string());
        }
    }
    caller
}

/// What the provider reads of a request, in either shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub caller: Caller,
    pub model: String,
    /// Model calls of this run so far that asked for tools (counted from the conversation: the
    /// assistant turns with tool calls after the last user text).
    pub round: u32,
    /// The agent's HTTP tools offered (not the built-in rest), with their parameter schemas.
    pub tools: Vec<(String, Value)>,
    /// Messages in the conversation (history included).
    pub messages: u64,
    pub bytes: u64,
    /// What the run's wakeup message says, when it is the built-in wakeup prompt: the last
    /// user text of the conversation that reads as one ([`parse_wake`]).
    pub wake: Option<WakeSeen>,
    /// The results of the last round's calls whose arguments the model broke on purpose
    /// (their ids end in [`BROKEN_CALL_SUFFIX`]), whole.
    pub results_seen: Vec<ToolResultSeen>,
}

/// Reads a request body of `api`'s shape. Typed: only the fields read are decoded (a body
/// carries the whole bounded history and every tool's schema).
pub fn read_request(api: WireApi, body: &[u8]) -> Request {
    let ReadBody {
        model,
        system,
        tools,
        round,
        messages,
        wake,
        results,
    } = match api {
        WireApi::Openai => read_openai(body),
        WireApi::Anthropic => read_anthropic(body),
    };
    let tools: Vec<(String, Value)> = tools
        .into_iter()
        .filter(|(name, _)| name != PAUSE_TOOL)
        .collect();
    Request {
        caller: parse_marker(&system),
        model: model.unwrap_or_else(|| "unknown".to_string()),
        round,
        tools,
        messages,
        bytes: body.len() as u64,
        wake: wake.as_deref().and_then(parse_wake),
        results_seen: results,
    }
}

/// What is read of a request body, in either shape.
struct ReadBody {
    model: Option<String>,
    system: String,
    tools: Vec<(String, Value)>,
    /// Tool rounds since the last user text.
    round: u32,
    messages: u64,
    /// The last user text that starts as the built-in wakeup prompt does.
    wake: Option<String>,
    /// The last round's results of broken calls.
    results: Vec<ToolResultSeen>,
}

/// Whether a result's call id is known and is not one the model broke (its text is not kept).
fn plain_call(id: &Option<MaybeText>) -> bool {
    matches!(id, Some(MaybeText::Text(id)) if !id.ends_with(BROKEN_CALL_SUFFIX))
}

/// A broken call's result, when `id` and `text` make one.
fn broken_result(id: &Option<MaybeText>, text: &Option<MaybeText>) -> Option<ToolResultSeen> {
    match (id, text) {
        (Some(MaybeText::Text(id)), Some(MaybeText::Text(text)))
            if id.ends_with(BROKEN_CALL_SUFFIX) =>
        {
            Some(ToolResultSeen {
                call_id: id.clone(),
                text: text.clone(),
            })
        }
        _ => None,
    }
}

/// Start of the runtime's built-in wakeup prompt (restated from docs/agents.md, not imported),
/// then its reason line and the line after it.
const WAKE_SOURCE_LINE: &str = "Wakeup source: ";
const WAKE_REASON_LINE: &str = "\nReason: ";
const WAKE_TIME_LINE: &str = "\nLocal time: ";

/// The source and reason a built-in wakeup prompt names; none for any other text.
pub fn parse_wake(text: &str) -> Option<WakeSeen> {
    let rest = text.strip_prefix(WAKE_SOURCE_LINE)?;
    let (source, rest) = rest.split_once(WAKE_REASON_LINE)?;
    let (reason, _) = rest.split_once(WAKE_TIME_LINE)?;
    Some(WakeSeen {
        source: source.to_string(),
        reason: reason.to_string(),
    })
}

/// A string field that may hold another JSON type (then read as absent).
enum MaybeText {
    Text(String),
    Other,
}

/// A field's shape, read without buffering: serde's untagged enums copy the whole value
/// (every message's content, every tool call) before choosing a variant, which was most of
/// what reading a request cost. Anything not asked for is skipped.
trait Shape: Sized {
    const EXPECTING: &'static str;
    fn other() -> Self;
    fn text(_text: String) -> Self {
        Self::other()
    }
    /// A string the deserializer lends (no escapes in it): copied only if kept.
    fn borrowed_text(text: &str) -> Self {
        Self::text(text.to_owned())
    }
    fn seq<'de, A: serde::de::SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Self::other())
    }
    fn map<'de, A: serde::de::MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Self::other())
    }
}

/// Reads any JSON value into a [`Shape`].
struct ShapeVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: Shape> serde::de::Visitor<'de> for ShapeVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(T::EXPECTING)
    }
    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
        Ok(T::borrowed_text(text))
    }
    fn visit_string<E: serde::de::Error>(self, text: String) -> Result<T, E> {
        Ok(T::text(text))
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
}

macro_rules! deserialize_shape {
    ($($shape:ty),*) => {$(
        impl<'de> serde::Deserialize<'de> for $shape {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(ShapeVisitor::<$shape>(std::marker::PhantomData))
            }
        }
    )*};
}

deserialize_shape!(MaybeText, MaybeArray, Blocks, BlockKind, OpenaiMessage, WakeText);

impl Shape for MaybeText {
    const EXPECTING: &'static str = "any JSON value (a string is read)";
    fn other() -> Self {
        MaybeText::Other
    }
    fn text(text: String) -> Self {
        MaybeText::Text(text)
    }
}

impl MaybeText {
    fn text(value: Option<MaybeText>) -> Option<String> {
        match value {
            Some(MaybeText::Text(text)) => Some(text),
            _ => None,
        }
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct OpenaiBody {
    model: Option<MaybeText>,
    messages: Vec<OpenaiMessage>,
    tools: Vec<OpenaiTool>,
}

/// A message: its role, whether it called tools, and its content only while it may be the
/// system prompt, a user's text or a broken call's result (a `system` or `user` message, a
/// `tool` one whose call id is not known to be plain, or one whose role has not come yet).
/// Why not every content: the history's answers are most of a request's bytes, and only the
/// system prompt's marker, the wakeup prompt and broken calls' results are read.
#[derive(Default)]
struct OpenaiMessage {
    role: Option<MaybeText>,
    content: Option<MaybeText>,
    tool_calls: Option<MaybeArray>,
    call_id: Option<MaybeText>,
}

impl Shape for OpenaiMessage {
    const EXPECTING: &'static str = "any JSON value (a message object is read)";
    fn other() -> Self {
        OpenaiMessage::default()
    }
    fn map<'de, A: serde::de::MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut message = OpenaiMessage::default();
        while let Some(key) = map.next_key::<MaybeText>()? {
            let MaybeText::Text(key) = key else {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            };
            let maybe_read = match &message.role {
                Some(MaybeText::Text(role)) => {
                    role == "system"
                        || role == "user"
                        || (role == "tool" && !plain_call(&message.call_id))
                }
                _ => true,
            };
            match key.as_str() {
                "role" => message.role = map.next_value()?,
                "tool_calls" => message.tool_calls = map.next_value()?,
                "tool_call_id" => message.call_id = map.next_value()?,
                "content" if maybe_read => message.content = map.next_value()?,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(message)
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct OpenaiTool {
    function: OpenaiFunction,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct OpenaiFunction {
    name: Option<MaybeText>,
    parameters: Value,
}

/// Whether a field holds an array (its items are not read).
enum MaybeArray {
    Array,
    Other,
}

impl Shape for MaybeArray {
    const EXPECTING: &'static str = "any JSON value (an array is noted)";
    fn other() -> Self {
        MaybeArray::Other
    }
    fn seq<'de, A: serde::de::SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(MaybeArray::Array)
    }
}

fn read_openai(body: &[u8]) -> ReadBody {
    let body: OpenaiBody = serde_json::from_slice(body).unwrap_or_default();
    let mut system = None;
    let mut wake = None;
    let mut round = 0;
    let mut results = Vec::new();
    let count = body.messages.len() as u64;
    for m in body.messages {
        let role = MaybeText::text(m.role);
        if system.is_none() && role.as_deref() == Some("system") {
            system = Some(MaybeText::text(m.content).unwrap_or_default());
            continue;
        }
        match role.as_deref() {
            Some("user") => {
                round = 0;
                results.clear();
                if let Some(text) = MaybeText::text(m.content) {
                    if text.starts_with(WAKE_SOURCE_LINE) {
                        wake = Some(text);
                    }
                }
            }
            Some("assistant") if matches!(m.tool_calls, Some(MaybeArray::Array)) => {
                round += 1;
                results.clear();
            }
            Some("tool") => results.extend(broken_result(&m.call_id, &m.content)),
            _ => {}
        }
    }
    let tools = body
        .tools
        .into_iter()
        .map(|t| {
            let name = MaybeText::text(t.function.name).unwrap_or_default();
            (name, t.function.parameters)
        })
        .collect();
    ReadBody {
        model: MaybeText::text(body.model),
        system: system.unwrap_or_default(),
        tools,
        round,
        messages: count,
        wake,
        results,
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct AnthropicBody {
    model: Option<MaybeText>,
    system: Option<MaybeText>,
    messages: Vec<AnthropicMessage>,
    tools: Vec<AnthropicTool>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct AnthropicMessage {
    role: Option<MaybeText>,
    content: Option<Blocks>,
}

/// A message's content: blocks (only their types read), or anything else.
enum Blocks {
    Blocks(Vec<BlockKind>),
    Other,
}

impl Shape for Blocks {
    const EXPECTING: &'static str = "any JSON value (an array of blocks is read)";
    fn other() -> Self {
        Blocks::Other
    }
    fn seq<'de, A: serde::de::SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut blocks = Vec::new();
        while let Some(block) = seq.next_element::<BlockKind>()? {
            blocks.push(block);
        }
        Ok(Blocks::Blocks(blocks))
    }
}

/// A content block: its `type`, its `text` when that starts as the built-in wakeup prompt
/// does (other texts are skipped: an answer's text is not read), and a tool result's call id
/// and `content` (read unless the id, when it comes first, is known to be plain).
struct BlockKind {
    kind: Option<MaybeText>,
    wake: Option<WakeText>,
    call_id: Option<MaybeText>,
    content: Option<MaybeText>,
}

impl Shape for BlockKind {
    const EXPECTING: &'static str = "any JSON value (a block's `type` and `text` are read)";
    fn other() -> Self {
        BlockKind {
            kind: None,
            wake: None,
            call_id: None,
            content: None,
        }
    }
    fn map<'de, A: serde::de::MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut block = BlockKind::other();
        while let Some(key) = map.next_key::<MaybeText>()? {
            match key {
                MaybeText::Text(key) if key == "type" => block.kind = map.next_value()?,
                MaybeText::Text(key) if key == "text" => block.wake = map.next_value()?,
                MaybeText::Text(key) if key == "tool_use_id" => {
                    block.call_id = map.next_value()?
                }
                MaybeText::Text(key) if key == "content" && !plain_call(&block.call_id) => {
                    block.content = map.next_value()?
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(block)
    }
}

/// A text kept only when it starts as the built-in wakeup prompt does.
struct WakeText(Option<String>);

impl Shape for WakeText {
    const EXPECTING: &'static str = "any JSON value (a wakeup prompt's text is kept)";
    fn other() -> Self {
        WakeText(None)
    }
    fn text(text: String) -> Self {
        WakeText(text.starts_with(WAKE_SOURCE_LINE).then_some(text))
    }
    fn borrowed_text(text: &str) -> Self {
        WakeText(text.starts_with(WAKE_SOURCE_LINE).then(|| text.to_owned()))
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct AnthropicTool {
    name: Option<MaybeText>,
    input_schema: Value,
}

fn read_anthropic(body: &[u8]) -> ReadBody {
    let body: AnthropicBody = serde_json::from_slice(body).unwrap_or_default();
    let has_block = |content: &Option<Blocks>, kind: &str| match content {
        Some(Blocks::Blocks(blocks)) => blocks
            .iter()
            .any(|b| matches!(&b.kind, Some(MaybeText::Text(k)) if k == kind)),
        _ => false,
    };
    let mut round = 0;
    let mut wake = None;
    let mut results = Vec::new();
    for m in &body.messages {
        // Tool results are user content (blocks `tool_result`, one user message per round).
        if let (Some(MaybeText::Text(role)), Some(Blocks::Blocks(blocks))) = (&m.role, &m.content) {
            if role == "user" {
                results.extend(blocks.iter().filter_map(|b| match &b.kind {
                    Some(MaybeText::Text(k)) if k == "tool_result" => {
                        broken_result(&b.call_id, &b.content)
                    }
                    _ => None,
                }));
            }
        }
        match &m.role {
            Some(MaybeText::Text(role)) if role == "user" && has_block(&m.content, "text") => {
                round = 0;
                results.clear();
                if let Some(Blocks::Blocks(blocks)) = &m.content {
                    if let Some(text) = blocks.iter().rev().find_map(|b| match &b.wake {
                        Some(WakeText(Some(text))) => Some(text),
                        _ => None,
                    }) {
                        wake = Some(text.clone());
                    }
                }
            }
            Some(MaybeText::Text(role)) if role == "assistant" && has_block(&m.content, "tool_use") => {
                round += 1;
                results.clear();
            }
            _ => {}
        }
    }
    let tools = body
        .tools
        .into_iter()
        .map(|t| (MaybeText::text(t.name).unwrap_or_default(), t.input_schema))
        .collect();
    ReadBody {
        model: MaybeText::text(body.model),
        system: MaybeText::text(body.system).unwrap_or_default(),
        tools,
        round,
        messages: body.messages.len() as u64,
        wake,
        results,
    }
}

/// A tool call the model asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct AskedCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    /// Schema errors the model put in the arguments on purpose (0: they conform).
    pub errors: u32,
}

/// The model's answer to one call: a text, tool calls, and token usage.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub text: String,
    pub calls: Vec<AskedCall>,
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub output_tokens: u64,
    /// How long the model takes to give it, in ms.
    pub latency_ms: u64,
    /// The scenario judges final answers' excerpts: the trace carries the answer's text.
    pub answer_judged: bool,
}

impl Turn {
    /// The calls whose arguments break their tool's schema, for the trace.
    fn broken(&self) -> Vec<BrokenCall> {
        self.calls
            .iter()
            .filter(|c| c.errors > 0)
            .map(|c| BrokenCall {
                id: c.id.clone(),
                tool: c.name.clone(),
                errors: c.errors,
            })
            .collect()
    }

    fn reply(&self) -> ModelReply {
        if self.calls.is_empty() && self.text == IDLE_ANSWER {
            ModelReply::Idle
        } else if self.calls.is_empty() {
            ModelReply::Answer
        } else {
            ModelReply::ToolCalls {
                tools: self.calls.iter().map(|c| c.name.clone()).collect(),
                rest_minutes: self
                    .calls
                    .iter()
                    .find(|c| c.name == PAUSE_TOOL)
                    .and_then(|c| c.arguments["minutes"].as_u64()),
            }
        }
    }
}

/// Items a conforming array argument holds, at most.
const ARRAY_ITEMS_MAX: usize = 2;

/// The JSON type a schema names (the first of a list; a string when it names none).
fn kind_of(schema: &Value) -> &str {
    match &schema["type"] {
        Value::String(kind) => kind,
        Value::Array(kinds) => kinds.first().and_then(Value::as_str).unwrap_or("string"),
        _ => "string",
    }
}

/// A value of `schema`'s type (an array's items of its items' type).
fn value_for(schema: &Value, rng: &mut impl Rng) -> Value {
    match kind_of(schema) {
        "integer" | "number" => json!(rng.gen_range(1..100)),
        "boolean" => json!(rng.gen_bool(0.5)),
        "array" => {
            let items = rng.gen_range(0..=ARRAY_ITEMS_MAX);
            Value::Array((0..items).map(|_| value_for(&schema["items"], rng)).collect())
        }
        _ => json!(format!("q{}", rng.gen_range(0..1_000))),
    }
}

/// A value no schema of plain type `kind` admits: a string for a number or a boolean, a
/// number for a string; none for other types.
fn wrong_value(kind: &str) -> Option<Value> {
    match kind {
        "integer" | "number" | "boolean" => Some(json!("seven")),
        "string" => Some(json!(7)),
        _ => None,
    }
}

/// Arguments that satisfy a simple object schema: a value of each property's type.
fn arguments_for(schema: &Value, rng: &mut impl Rng) -> Value {
    let mut args = serde_json::Map::new();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            args.insert(name.clone(), value_for(property, rng));
        }
    }
    Value::Object(args)
}

/// Arguments that break a simple object schema with `errors` schema errors, and how many it
/// made: the plain-typed properties first get a value of a wrong type (one error each), then
/// the first array of plain-typed items gets the rest as items of a wrong type (one error
/// each). Fewer when the schema has too few places to break.
fn broken_arguments(schema: &Value, errors: u32, rng: &mut impl Rng) -> (Value, u32) {
    let mut args = arguments_for(schema, rng);
    let Some(properties) = schema["properties"].as_object() else {
        return (args, 0);
    };
    let mut made = 0;
    for (name, property) in properties {
        if made == errors {
            break;
        }
        if let Some(wrong) = property["type"].as_str().and_then(wrong_value) {
            args[name] = wrong;
            made += 1;
        }
    }
    let array = properties.iter().find_map(|(name, property)| {
        let items = property["items"]["type"].as_str().filter(|_| kind_of(property) == "array");
        Some((name, wrong_value(items?)?))
    });
    if let (Some((name, wrong)), true) = (array, made < errors) {
        args[name] = Value::Array(vec![wrong; (errors - made) as usize]);
        made = errors;
    }
    (args, made)
}

/// The model's turn for `request`: a pure function of the seed, the script and the request.
pub fn decide(seed: u64, script: &ProviderScript, request: &Request, call_number: u64) -> Turn {
    let behaviour = script.behaviour(request.caller.name.as_deref());
    let who = match (request.caller.agent, request.caller.run) {
        (Some(agent), Some(run)) => format!("{agent}/{run}"),
        // Without the marker the order of calls is all there is to draw by.
        _ => format!("call/{call_number}"),
    };
    // The run's plan (idle? tools? how many rounds? a rest at the end?) comes from the run's
    // own stream, the same at every round; each round draws its details from its own.
    let mut plan = vigil_faults::stream(seed, &format!("provider/{who}/plan"));
    let idle = plan.gen_range(0..1_000) < behaviour.idle_permille;
    let pause = plan.gen_range(0..1_000) < behaviour.pause_permille;
    let pause_minutes = plan.gen_range(behaviour.pause_minutes.0..=behaviour.pause_minutes.1);
    let with_tools =
        !request.tools.is_empty() && plan.gen_range(0..1_000) < behaviour.tool_permille;
    let rounds = plan.gen_range(behaviour.tool_rounds.0..=behaviour.tool_rounds.1);
    let mut rng = vigil_faults::stream(seed, &format!("provider/{who}/{}", request.round));
    let input_tokens = request.bytes / BYTES_PER_TOKEN + 1;
    // Everything but the newest message was sent before: a provider's prompt cache holds it.
    let cached_tokens = if request.messages > 1 {
        input_tokens * (request.messages - 1) / request.messages / 64 * 64
    } else {
        0
    };
    let latency_ms = match behaviour.latency_ms {
        (0, 0) => 0,
        (low, high) => vigil_faults::stream(seed, &format!("provider/{who}/{}/latency", request.round))
            .gen_range(low..=high.max(low)),
    };
    let mut turn = Turn {
        text: String::new(),
        calls: Vec::new(),
        input_tokens,
        cached_tokens,
        output_tokens: 0,
        latency_ms,
        answer_judged: false,
    };
    let call_id = |n: u32| {
        format!(
            "call_{}_{}_{n}",
            request.caller.run.unwrap_or(call_number),
            request.round
        )
    };
    if request.round == 0 && idle {
        turn.text = IDLE_ANSWER.into();
        turn.output_tokens = 3;
    } else if with_tools && request.round < rounds {
        let n = rng.gen_range(behaviour.calls_per_round.0..=behaviour.calls_per_round.1);
        for i in 0..n {
            let (name, schema) = &request.tools[rng.gen_range(0..request.tools.len())];
            // Nothing is drawn for it unless the script asks: other scenarios draw as before.
            let broken = behaviour.broken_permille > 0
                && rng.gen_range(0..1_000) < behaviour.broken_permille;
            let (arguments, errors) = if broken {
                let asked = rng.gen_range(behaviour.broken_errors.0..=behaviour.broken_errors.1);
                broken_arguments(schema, asked, &mut rng)
            } else {
                (arguments_for(schema, &mut rng), 0)
            };
            let id = match errors {
                0 => call_id(i),
                _ => format!("{}{BROKEN_CALL_SUFFIX}", call_id(i)),
            };
            turn.calls.push(AskedCall {
                id,
                name: name.clone(),
                arguments,
                errors,
            });
        }
        turn.output_tokens = 15 + 25 * u64::from(n);
    } else if pause {
        turn.text = format!("Resting for {pause_minutes} minutes.");
        turn.calls.push(AskedCall {
            id: call_id(0),
            name: PAUSE_TOOL.into(),
            arguments: json!({ "minutes": pause_minutes }),
            errors: 0,
        });
        turn.output_tokens = 30;
    } else {
        let tokens = rng.gen_range(behaviour.answer_tokens.0..=behaviour.answer_tokens.1);
        turn.text = format!("done ({}): {tokens} tokens of findings", request.model);
        turn.output_tokens = tokens;
        if behaviour.long_answer_permille > 0 {
            turn.answer_judged = true;
            if rng.gen_range(0..1_000) < behaviour.long_answer_permille {
                // Started at a drawn place in the line, so that the cut meets every width.
                let skip = rng.gen_range(0..LONG_ANSWER_LINE.chars().count());
                let findings = LONG_ANSWER_LINE.chars().cycle().skip(skip);
                turn.text.push(' ');
                for c in findings {
                    if turn.text.len() >= LONG_ANSWER_BYTES {
                        break;
                    }
                    turn.text.push(c);
                }
            }
        }
    }
    turn
}

async fn answer(
    state: &SharedProvider,
    recorder: &Recorder,
    api: WireApi,
    headers: &HeaderMap,
    body: &[u8],
) -> (StatusCode, String) {
    let request = read_request(api, body);
    let (fault, turn, call) = {
        let mut state = state.lock().expect("provider lock");
        state.calls += 1;
        let turn = decide(state.seed, &state.script, &request, state.calls);
        (state.current(), turn, state.calls)
    };
    let refusal = error_answer(fault, api, call);
    let reply = match fault {
        Some(LlmFault::RateLimit) => ModelReply::RateLimited,
        Some(LlmFault::ServerError) => ModelReply::ServerError,
        Some(LlmFault::Timeout) => ModelReply::Timeout,
        Some(LlmFault::Malformed) => ModelReply::Malformed,
        None => turn.reply(),
    };
    if fault.is_none() && turn.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(turn.latency_ms)).await;
    }
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let _in_flight = CallGuard::new(
        recorder,
        "llm-provider",
        request.caller.agent,
        request.caller.run,
    );
    recorder.record(
        "llm-provider",
        TraceEvent::ModelCallServed {
            api,
            host,
            agent: request.caller.agent,
            run: request.caller.run,
            round: request.round,
            reply,
            wake: request.wake.clone(),
            // A fault's answer carries none of the turn's calls.
            broken: if fault.is_none() { turn.broken() } else { Vec::new() },
            results_seen: request.results_seen.clone(),
            error_body: refusal.as_ref().map(|(_, body)| body.clone()),
            answer: (fault.is_none() && turn.answer_judged).then(|| turn.text.clone()),
        },
    );
    if let Some(refusal) = refusal {
        return refusal;
    }
    match (fault, api) {
        (Some(LlmFault::Timeout), _) => {
            tokio::time::sleep(Duration::from_millis(SLOW_REPLY_MS)).await;
            (StatusCode::OK, render(api, &request.model, &turn))
        }
        (Some(LlmFault::Malformed), WireApi::Openai) => {
            (StatusCode::OK, r#"{"choices":[{"mess"#.into())
        }
        (Some(LlmFault::Malformed), WireApi::Anthropic) => {
            (StatusCode::OK, r#"{"type":"message","content":"#.into())
        }
        (None, _) => (StatusCode::OK, render(api, &request.model, &turn)),
        (Some(LlmFault::RateLimit | LlmFault::ServerError), _) => {
            unreachable!("answered by error_answer above")
        }
    }
}

/// A 5xx page from a proxy in front of the provider: longer than the 200 characters a run's
/// detail quotes (docs/api.md, `ERROR_EXCERPT_CHARS_MAX`), with characters of several bytes.
const PROXY_PAGE: &str = "<html><head><title>503 Service Unavailable</title></head><body><h1>503 Service Unavailable</h1><p>No healthy upstream is available for this request — the model servers are being restarted. Please retry in a few seconds; if the problem persists, contact your provider’s support with request id 7f3c9a.</p></body></html>";

/// The answer of a rate limit (429) or a server error (5xx) fault, by wire shape; `None` for
/// any other call. Server errors take turns, by the provider's call count, between the shape's
/// own JSON error, a proxy's HTML page past the length a run's detail quotes, and a JSON error
/// exactly that long (200 characters, more bytes): so the cut and its edge are both met.
fn error_answer(fault: Option<LlmFault>, api: WireApi, call: u64) -> Option<(StatusCode, String)> {
    let body = match (fault?, api) {
        (LlmFault::RateLimit, WireApi::Openai) => {
            r#"{"error":{"type":"rate_limit_exceeded","message":"Rate limit reached; retry later"}}"#
                .to_string()
        }
        (LlmFault::RateLimit, WireApi::Anthropic) => {
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}"#
                .to_string()
        }
        (LlmFault::ServerError, _) if call % 3 == 1 => PROXY_PAGE.to_string(),
        (LlmFault::ServerError, _) if call % 3 == 2 => exactly_quoted_error(),
        (LlmFault::ServerError, WireApi::Openai) => {
            r#"{"error":{"type":"server_error","message":"The server is overloaded"}}"#.to_string()
        }
        (LlmFault::ServerError, WireApi::Anthropic) => {
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
                .to_string()
        }
        _ => return None,
    };
    let status = match fault? {
        LlmFault::RateLimit => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    Some((status, body))
}

/// A JSON error of exactly [`QUOTED_CHARS_MAX`] characters, its message padded with `é` (two bytes
/// each): quoted whole, without a cut mark.
fn exactly_quoted_error() -> String {
    use crate::check::QUOTED_CHARS_MAX;
    let head = r#"{"error":{"type":"server_error","message":"overloaded "#;
    let tail = r#""}}"#;
    let pad = QUOTED_CHARS_MAX - head.chars().count() - tail.chars().count();
    format!("{head}{}{tail}", "é".repeat(pad))
}


/// The turn as a body of `api`'s shape.
pub fn render(api: WireApi, model: &str, turn: &Turn) -> String {
    match api {
        WireApi::Openai => {
            let mut message = json!({
                "role": "assistant",
                "content": if turn.text.is_empty() { Value::Null } else { json!(turn.text) },
            });
            if !turn.calls.is_empty() {
                message["tool_calls"] = turn
                    .calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": { "name": c.name, "arguments": c.arguments.to_string() },
                        })
                    })
                    .collect();
            }
            json!({
                "id": "chatcmpl-sim",
                "object": "chat.completion",
                "model": model,
                "choices": [{
                    "index": 0,
                    "message": message,
                    "finish_reason": if turn.calls.is_empty() { "stop" } else { "tool_calls" },
                }],
                "usage": {
                    "prompt_tokens": turn.input_tokens,
                    "completion_tokens": turn.output_tokens,
                    "total_tokens": turn.input_tokens + turn.output_tokens,
                    "prompt_tokens_details": { "cached_tokens": turn.cached_tokens },
                },
            })
            .to_string()
        }
        WireApi::Anthropic => {
            let mut content = Vec::new();
            if !turn.text.is_empty() {
                content.push(json!({ "type": "text", "text": turn.text }));
            }
            content.extend(turn.calls.iter().map(
                |c| json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments }),
            ));
            json!({
                "id": "msg_sim",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": if turn.calls.is_empty() { "end_turn" } else { "tool_use" },
                "usage": {
                    "input_tokens": turn.input_tokens - turn.cached_tokens,
                    "cache_read_input_tokens": turn.cached_tokens,
                    "cache_creation_input_tokens": 0,
                    "output_tokens": turn.output_tokens,
                },
            })
            .to_string()
        }
    }
}

/// The simulated provider's price list, as a node's price table: what the scenarios' models
/// cost, so budgets have something to count.
pub fn prices() -> vigil::exec::pricing::PriceTable {
    let mut table = vigil::exec::pricing::PriceTable::default();
    table.models.insert(
        SIM_MODEL.to_string(),
        vigil::exec::pricing::ModelPrice {
            input_usd_per_mtok: 3.0,
            cached_input_usd_per_mtok: Some(0.3),
            output_usd_per_mtok: 15.0,
        },
    );
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil::exec::model::{ChatMessage, ModelRequest, ModelToolCall, ToolSchema};

    /// A tool round in progress: the marker, a user wake, an assistant turn calling a tool and
    /// its result, with one HTTP tool and the built-in rest offered.
    fn conversation() -> (Vec<ChatMessage>, Vec<ToolSchema>) {
        let messages = vec![
            ChatMessage::User { text: "Wakeup source: on_demand\nReason: earlier\nLocal time: x".into() },
            ChatMessage::Assistant {
                text: "Wakeup source: timer\nReason: an answer, not read\nLocal time: y".into(),
                tool_calls: Vec::new(),
            },
            ChatMessage::User { text: "Wakeup source: timer\nReason: two\nlines \"quoted\"\nLocal time: 2026-11-27 09:00 UTC\nPayload: {}".into() },
            ChatMessage::Assistant {
                text: String::new(),
                tool_calls: vec![ModelToolCall {
                    id: "c1".into(),
                    name: "lookup".into(),
                    arguments: json!({"q": "x"}),
                }],
            },
            ChatMessage::Tool {
                call_id: "c1".into(),
                name: "lookup".into(),
                output: "found".into(),
                is_error: false,
            },
        ];
        let schema = |name: &str| ToolSchema {
            name: name.into(),
            description: "d".into(),
            parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        };
        (messages, vec![schema("lookup"), schema(PAUSE_TOOL)])
    }

    #[test]
    fn both_shapes_as_the_runtime_writes_them_are_read_alike() {
        let (messages, tools) = conversation();
        let request = ModelRequest {
            model: "m-1",
            system: "[vigil-sim agent=3 run=7 name=a] be brief",
            messages: &messages,
            tools: &tools,
            max_output_tokens: 100,
        };
        let openai = serde_json::to_vec(&vigil::exec::model::openai::request(request, None).2);
        let anthropic =
            serde_json::to_vec(&vigil::exec::model::anthropic::request(request, None).2);
        for (api, body) in [(WireApi::Openai, openai), (WireApi::Anthropic, anthropic)] {
            let body = body.unwrap();
            let read = read_request(api, &body);
            let caller = Caller {
                agent: Some(3),
                run: Some(7),
                name: Some("a".into()),
            };
            assert_eq!(read.caller, caller, "{api:?}");
            assert_eq!(read.model, "m-1");
            assert_eq!(read.round, 1, "{api:?}: one tool round since the user's text");
            assert_eq!(read.tools, vec![("lookup".to_string(), tools[0].parameters.clone())]);
            assert_eq!(read.bytes, body.len() as u64);
            let wake = WakeSeen {
                source: "timer".into(),
                reason: "two\nlines \"quoted\"".into(),
            };
            assert_eq!(read.wake, Some(wake), "{api:?}: the last user text, whole reason");
        }
    }

    #[test]
    fn the_last_rounds_results_of_broken_calls_are_read_in_both_shapes() {
        let (mut messages, tools) = conversation();
        let broken = format!("c2{BROKEN_CALL_SUFFIX}");
        let asked = |id: &str| ModelToolCall { id: id.into(), name: "lookup".into(), arguments: json!({"q": 7}) };
        messages.push(ChatMessage::Assistant { text: String::new(), tool_calls: vec![asked("c3"), asked(&broken)] });
        let result = |id: &str, output: &str| ChatMessage::Tool { call_id: id.into(), name: "lookup".into(), output: output.into(), is_error: true };
        messages.push(result("c3", "plain, not kept"));
        messages.push(result(&broken, "the arguments of lookup do not match"));
        let request = ModelRequest { model: "m-1", system: "[vigil-sim agent=3 run=7 name=a]", messages: &messages, tools: &tools, max_output_tokens: 100 };
        let openai = serde_json::to_vec(&vigil::exec::model::openai::request(request, None).2);
        let anthropic = serde_json::to_vec(&vigil::exec::model::anthropic::request(request, None).2);
        for (api, body) in [(WireApi::Openai, openai), (WireApi::Anthropic, anthropic)] {
            let read = read_request(api, &body.unwrap());
            let seen = ToolResultSeen { call_id: broken.clone(), text: "the arguments of lookup do not match".into() };
            assert_eq!(read.results_seen, vec![seen], "{api:?}");
            assert_eq!(read.round, 2, "{api:?}");
        }
    }

    #[test]
    fn only_the_built_in_wakeup_prompt_is_read_as_one() {
        assert_eq!(parse_wake("Wakeup source: idle\nReason: (none given)\nLocal time: "), Some(WakeSeen { source: "idle".into(), reason: "(none given)".into() }));
        for text in ["Woken by timer: x", "Wakeup source: idle\nLocal time: t", "Wakeup source: idle\nReason: r"] {
            assert_eq!(parse_wake(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_system_prompt_is_read_whatever_the_order_of_its_fields() {
        let body = br#"{"messages":[
            {"content":"[vigil-sim agent=1 run=2 name=z]","role":"system"},
            {"role":"user","content":"[vigil-sim agent=9 run=9 name=y]"},
            {"content":"hi","role":"assistant","tool_calls":[{"id":"c"}]}]}"#;
        let read = read_request(WireApi::Openai, body);
        assert_eq!(read.caller.agent, Some(1));
        assert_eq!(read.caller.name.as_deref(), Some("z"));
        assert_eq!(read.round, 1);
        assert_eq!(read.messages, 3);
    }
}
