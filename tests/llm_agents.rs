//! The LLM agent loop end to end (real tokio, real disk, loopback only): a node whose runs reach
//! a stub provider over real HTTPS (a throwaway rcgen CA for `localhost`, trusted through
//! `RunServices::production`'s extra CA file) speaking both wire shapes, and a stub HTTP tool
//! server. Tool loops, `pause_heartbeats`, ghost runs, the iteration and tool caps, the daily
//! budget, schema-invalid tool calls, the API key kept out of everything the node stores or
//! serves, and every failure ending its run with a stop reason.
//!
//! The stub provider answers from a per-test script (a queue of replies: text, tool calls,
//! status codes, delays; every reply reports 60 input and 40 output tokens) and records every
//! request it got, headers and body, so tests assert on what the runtime sent.

#[path = "support/test_ca.rs"]
mod test_ca;

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use test_ca::{acceptor_for, make_ca as make_test_ca, TestCa};
use tokio_rustls::TlsAcceptor;
use vigil::api::client::ApiClient;
use vigil::exec::host::RunServices;
use vigil::net::OutboundPolicy;
use vigil::exec::pricing::{ModelPrice, PriceTable};
use vigil::exec::tools::TOOL_ERROR_OUTPUT_CHARS_MAX;
use vigil::io::clock::Clock;
use vigil::io::entropy::SeededEntropy;
use vigil::io::storage::StorageLocation;
use vigil::net::TlsOptions;
use vigil::node::{Node, NodeConfig, TenantToken};
use vigil::transcript::FileTranscripts;

const ACME: &str = "acme-operator-token";
/// The environment variable the agents name; only the node's secret source knows it.
const KEY_ENV: &str = "VIGIL_LLM_TEST_KEY";
/// The planted API key: distinctive, so finding it (or its first [`KEY_FRAGMENT_CHARS`]
/// characters) anywhere is no accident.
const API_KEY: &str = "sk-planted-Zq7w3KxV9mB2nL5t";
const KEY_FRAGMENT_CHARS: usize = 14;
const MODEL: &str = "stub-model";
const START_MS: u64 = 1_800_000_000_000;
/// Longest a test waits for something asynchronous (a run to end, a timer to fire); a bound on
/// waiting, never a timing goal.
const WAIT_MS_MAX: u64 = 30_000;
/// Every agent's run timeout: bounds a hung run should every other bound fail.
const RUN_TIMEOUT_MS: u64 = 60_000;
/// How long a hanging stub waits before answering: past every timeout a test sets, so only the
/// timeout can end the wait.
const HANG_MS: u64 = 120_000;
/// Tokens every scripted reply reports.
const INPUT_TOKENS: u64 = 60;
const OUTPUT_TOKENS: u64 = 40;
/// The price table: $1,000 per million tokens, so a reply's 100 tokens cost $0.1.
const USD_PER_MTOK: f64 = 1_000.0;
const CALL_COST_MICRO_USD: u64 = 100_000;
const MINUTE_MS: u64 = 60_000;

// ---- the clock -------------------------------------------------------------------------------

/// Wall time the test sets by hand; monotonic time is real enough for latencies.
#[derive(Debug)]
struct ManualClock(AtomicU64);

impl Clock for ManualClock {
    fn wall_now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn mono_now(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::SeqCst) - START_MS)
    }
}

// ---- wire shapes -------------------------------------------------------------------------------

/// The provider's wire shape; most tests run in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Openai,
    Anthropic,
}

/// A tool call a scripted reply makes: (call id, tool name, arguments).
type Call<'a> = (&'a str, &'a str, Value);

/// A tool result as a request carried it back to the model.
#[derive(Debug)]
struct ResultSeen {
    id: String,
    output: String,
    /// Anthropic says it on the wire; OpenAI has only the text.
    is_error: Option<bool>,
}

impl Shape {
    fn api(self) -> &'static str {
        match self {
            Shape::Openai => "openai",
            Shape::Anthropic => "anthropic",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Shape::Openai => "/v1/chat/completions",
            Shape::Anthropic => "/v1/messages",
        }
    }

    /// The model's answer: `text`, then `calls`.
    fn turn(self, text: &str, calls: &[Call<'_>]) -> Reply {
        let body = match self {
            Shape::Openai => openai_turn(text, calls),
            Shape::Anthropic => anthropic_turn(text, calls),
        };
        Reply::json(body)
    }

    fn text(self, text: &str) -> Reply {
        self.turn(text, &[])
    }

    fn calls(self, calls: &[Call<'_>]) -> Reply {
        self.turn("", calls)
    }

    /// The provider got the key in this shape's header, and nowhere else in the request.
    fn assert_key_sent(self, seen: &Seen) {
        match self {
            Shape::Openai => {
                assert_eq!(
                    seen.headers.get("authorization"),
                    Some(&format!("Bearer {API_KEY}"))
                );
                assert!(!seen.headers.contains_key("x-api-key"));
            }
            Shape::Anthropic => {
                assert_eq!(
                    seen.headers.get("x-api-key").map(String::as_str),
                    Some(API_KEY)
                );
                assert_eq!(
                    seen.headers.get("anthropic-version").map(String::as_str),
                    Some("2023-06-01")
                );
                assert!(!seen.headers.contains_key("authorization"));
            }
        }
        assert_eq!(seen.path, self.path());
        assert_eq!(seen.body["model"], MODEL);
    }

    /// Ids of the tool calls the request's assistant messages carry.
    fn call_ids(self, body: &Value) -> Vec<String> {
        let messages = body["messages"].as_array().expect("messages");
        let ids = messages.iter().filter(|m| m["role"] == "assistant");
        let ids: Vec<&Value> = match self {
            Shape::Openai => ids
                .flat_map(|m| array(&m["tool_calls"]))
                .map(|c| &c["id"])
                .collect(),
            Shape::Anthropic => ids
                .flat_map(|m| array(&m["content"]))
                .filter(|b| b["type"] == "tool_use")
                .map(|b| &b["id"])
                .collect(),
        };
        ids.into_iter()
            .map(|id| id.as_str().unwrap().to_string())
            .collect()
    }

    /// The tool results the request carries, in order.
    fn tool_results(self, body: &Value) -> Vec<ResultSeen> {
        let messages = body["messages"].as_array().expect("messages");
        match self {
            Shape::Openai => messages
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| ResultSeen {
                    id: m["tool_call_id"].as_str().unwrap().into(),
                    output: m["content"].as_str().unwrap().into(),
                    is_error: None,
                })
                .collect(),
            Shape::Anthropic => messages
                .iter()
                .filter(|m| m["role"] == "user")
                .flat_map(|m| array(&m["content"]))
                .filter(|b| b["type"] == "tool_result")
                .map(|b| ResultSeen {
                    id: b["tool_use_id"].as_str().unwrap().into(),
                    output: b["content"].as_str().unwrap().into(),
                    is_error: b["is_error"].as_bool(),
                })
                .collect(),
        }
    }
}

fn array(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

fn openai_turn(text: &str, calls: &[Call<'_>]) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { json!(text) },
    });
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|(id, name, arguments)| {
                json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments.to_string()}})
            })
            .collect();
    }
    json!({
        "id": "chatcmpl-stub", "object": "chat.completion", "model": MODEL,
        "choices": [{"index": 0, "message": message,
            "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
        "usage": {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS},
    })
}

fn anthropic_turn(text: &str, calls: &[Call<'_>]) -> Value {
    let text = (!text.is_empty()).then(|| json!({"type": "text", "text": text}));
    let uses = calls.iter().map(
        |(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}),
    );
    let content: Vec<Value> = text.into_iter().chain(uses).collect();
    json!({
        "id": "msg_stub", "type": "message", "role": "assistant", "model": MODEL,
        "content": content,
        "stop_reason": if calls.is_empty() { "end_turn" } else { "tool_use" },
        "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
    })
}

/// `count` replies that each call `lookup` once (ids `c1`, `c2`, ...): a model that never ends
/// its turn.
fn lookups_forever(shape: Shape, count: usize) -> Vec<Reply> {
    (1..=count)
        .map(|n| shape.calls(&[(&format!("c{n}"), "lookup", json!({"q": format!("q{n}")}))]))
        .collect()
}

// ---- the throwaway CA ----------------------------------------------------------------------------

fn localhost_acceptor(ca: &TestCa) -> TlsAcceptor {
    acceptor_for(ca, "localhost")
}

// ---- the stub provider -------------------------------------------------------------------------

/// One scripted answer of the stub provider.
#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    body: String,
    delay_ms: u64,
}

impl Reply {
    fn json(body: Value) -> Reply {
        Reply {
            status: 200,
            body: body.to_string(),
            delay_ms: 0,
        }
    }

    fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            body: body.into(),
            delay_ms: 0,
        }
    }

    /// Answers only after [`HANG_MS`].
    fn hang() -> Reply {
        Reply {
            delay_ms: HANG_MS,
            ..Reply::status(200, "{}")
        }
    }
}

/// What the provider saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: BTreeMap<String, String>,
    body: Value,
    /// The body's size as it arrived.
    body_bytes: usize,
}

#[derive(Default)]
struct Script {
    replies: VecDeque<Reply>,
    seen: Vec<Seen>,
}

/// The stub provider: HTTPS on 127.0.0.1 with a certificate for `localhost`; answers every
/// request with the next scripted reply (a 500 once the script is spent).
#[derive(Clone)]
struct Provider {
    port: u16,
    script: Arc<Mutex<Script>>,
}

impl Provider {
    async fn start(ca: &TestCa) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = Arc::new(Mutex::new(Script::default()));
        tokio::spawn(serve_provider(
            listener,
            localhost_acceptor(ca),
            script.clone(),
        ));
        Provider { port, script }
    }

    fn base_url(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().unwrap().replies.extend(replies);
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.lock().unwrap().seen.clone()
    }
}

async fn serve_provider(listener: TcpListener, acceptor: TlsAcceptor, script: Arc<Mutex<Script>>) {
    while let Ok((tcp, _)) = listener.accept().await {
        let (acceptor, script) = (acceptor.clone(), script.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service =
                hyper::service::service_fn(move |request| provider_answer(script.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

async fn provider_answer(
    script: Arc<Mutex<Script>>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_string();
    let headers = request
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body_bytes = body.len();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = {
        let mut script = script.lock().unwrap();
        script.seen.push(Seen {
            path,
            headers,
            body,
            body_bytes,
        });
        let spent = || Reply::status(500, r#"{"error":"the stub's script is spent"}"#);
        script.replies.pop_front().unwrap_or_else(spent)
    };
    tokio::time::sleep(Duration::from_millis(reply.delay_ms)).await;
    let response = Response::builder()
        .status(reply.status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(reply.body)))
        .unwrap();
    Ok(response)
}

// ---- the stub tool server ------------------------------------------------------------------------

/// Plain HTTP on 127.0.0.1. `/lookup` answers `{"answer":42,"q":…}`, `/slow` hangs, `/leak`
/// answers 200 echoing the key, `/leak500` 500 echoing it. Records (path, body) of every call.
#[derive(Clone)]
struct Tools {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Tools {
    async fn start() -> Tools {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = calls.clone();
        let router = axum::Router::new().fallback(move |uri: Uri, body: Bytes| {
            let seen = seen.clone();
            async move {
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                seen.lock()
                    .unwrap()
                    .push((uri.path().to_string(), body.clone()));
                tool_answer(uri.path(), &body).await
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(vigil::api::serve(listener, router));
        Tools { addr, calls }
    }

    fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().unwrap().clone()
    }

    /// A tool named `name` at `/name`, taking `{"q": string}`.
    fn spec(&self, name: &str, timeout_ms: u64) -> Value {
        json!({
            "name": name,
            "description": format!("the {name} tool"),
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                "required": ["q"], "additionalProperties": false},
            "url": format!("http://{}/{name}", self.addr),
            "timeout_ms": timeout_ms,
        })
    }
}

async fn tool_answer(path: &str, body: &Value) -> (StatusCode, String) {
    match path {
        "/lookup" => (
            StatusCode::OK,
            json!({"answer": 42, "q": body["arguments"]["q"]}).to_string(),
        ),
        "/slow" => {
            tokio::time::sleep(Duration::from_millis(HANG_MS)).await;
            (StatusCode::OK, "too late".into())
        }
        "/leak" => (
            StatusCode::OK,
            format!("your key is {API_KEY}, keep it safe"),
        ),
        "/leakcut" => (StatusCode::INTERNAL_SERVER_ERROR, key_across_the_tool_cut()),
        "/leak500" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("denied for key {API_KEY}"),
        ),
        _ => (StatusCode::NOT_FOUND, "no such tool".into()),
    }
}

/// An error body that puts the key across the cut of a tool's error output (its first
/// [`KEY_FRAGMENT_CHARS`] characters before the cut, the rest after).
fn key_across_the_tool_cut() -> String {
    let prefix = "tool leakcut answered HTTP 500: ".chars().count();
    let padding = TOOL_ERROR_OUTPUT_CHARS_MAX - KEY_FRAGMENT_CHARS - prefix;
    format!("{}{API_KEY}", "y".repeat(padding))
}

// ---- the node -------------------------------------------------------------------------------------

/// One test's world: its directory (the CA file beside the data directory), the CA, the clock.
struct World {
    dir: PathBuf,
    ca: TestCa,
    clock: Arc<ManualClock>,
}

/// A ready node and an operator client.
struct Running {
    node: Node,
    api: ApiClient,
}

impl World {
    fn new(test: &str, shape: Shape) -> World {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("llm_agents")
            .join(format!("{test}-{}", shape.api()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        World {
            ca: make_test_ca(&dir),
            dir,
            clock: Arc::new(ManualClock(AtomicU64::new(START_MS))),
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn set_clock(&self, wall_ms: u64) {
        self.clock.0.store(wall_ms, Ordering::SeqCst);
    }

    /// A node on the world's data directory (the same file every time: a restart). A stopped
    /// node's aborted tasks let go of the file a moment later, so opening it is retried while
    /// it is still held (bounded).
    async fn node(&self) -> Running {
        for _ in 0..WAIT_MS_MAX / 25 {
            let mut node = Node::start(self.config()).await.expect("node starts");
            match node.ready().await {
                Ok(_) => {
                    let api = ApiClient::with_token(node.local_addr(), ACME);
                    return Running { node, api };
                }
                Err(error) if format!("{error:?}").contains("DatabaseAlreadyOpen") => {
                    node.stop();
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Err(error) => panic!("node recovers: {error}"),
            }
        }
        panic!("the previous node never let go of its database file");
    }

    fn config(&self) -> NodeConfig {
        NodeConfig {
            listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            storage: StorageLocation::File(self.data_dir().join("vigil.redb")),
            clock: self.clock.clone(),
            entropy: SeededEntropy::shared(7),
            tenants: vec![TenantToken {
                tenant: "acme".into(),
                token: ACME.into(),
            }],
            on_commit: None,
            on_replayed: None,
            adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
            run_services: self.services(),
            transcripts: FileTranscripts::shared(&self.data_dir()),
            alert_sinks: Vec::new(),
            snapshots: Default::default(),
            heartbeat_test_seam: false,
        }
    }

    /// Production's services trusting the test CA, the test's prices, and one planted secret.
    fn services(&self) -> RunServices {
        let tls = TlsOptions {
            extra_ca_file: Some(self.ca.pem_file.clone()),
        };
        // The stubs listen on loopback, which the address policy keeps from tenant acme
        // unless the node allows it (as `[outbound] allow` does).
        let loopback = OutboundPolicy {
            allow: vec!["127.0.0.1/32".parse().unwrap(), "::1/128".parse().unwrap()],
        };
        let mut services =
            RunServices::guarded(&tls, prices(), loopback).expect("the test CA loads");
        services.secrets = Arc::new(|name: &str| (name == KEY_ENV).then(|| API_KEY.to_string()));
        services
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn prices() -> PriceTable {
    let price = ModelPrice {
        input_usd_per_mtok: USD_PER_MTOK,
        cached_input_usd_per_mtok: None,
        output_usd_per_mtok: USD_PER_MTOK,
    };
    PriceTable {
        models: BTreeMap::from([(MODEL.to_string(), price)]),
    }
}

/// An `llm` agent calling `base_url` in `shape`, with `tools`; tests adjust the rest.
fn llm_agent(name: &str, shape: Shape, base_url: &str, tools: Vec<Value>) -> Value {
    json!({
        "name": name,
        "limits": {"run_timeout_ms": RUN_TIMEOUT_MS},
        "adapter": {
            "type": "llm", "api": shape.api(), "base_url": base_url, "model": MODEL,
            "api_key_env": KEY_ENV, "tools": tools,
        },
    })
}

// ---- the API -------------------------------------------------------------------------------------

async fn get(api: &ApiClient, path: &str) -> Value {
    let answer = api.get(path).await.unwrap();
    let body = answer.json().unwrap();
    assert_eq!(answer.status.as_u16(), 200, "GET {path}: {body}");
    body
}

/// The raw text of a GET's answer (for searching it).
async fn get_text(api: &ApiClient, path: &str) -> String {
    let answer = api.get(path).await.unwrap();
    assert_eq!(answer.status.as_u16(), 200, "GET {path}");
    String::from_utf8(answer.body.to_vec()).unwrap()
}

async fn post(api: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = api.post_json(path, &body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

async fn create(api: &ApiClient, spec: Value) -> u64 {
    let (status, created) = post(api, "/v1/agents", spec).await;
    assert_eq!(status, 201, "{created}");
    created["agent"]["id"].as_u64().unwrap()
}

async fn wake_answer(api: &ApiClient, agent: u64, source: &str, reason: &str) -> Value {
    let body = json!({"source": source, "reason": reason});
    let (status, answer) = post(api, &format!("/v1/agents/{agent}/wakeup"), body).await;
    assert!(status == 200 || status == 202, "{status} {answer}");
    answer
}

/// Wakes `agent` and returns the run it queued.
async fn wake(api: &ApiClient, agent: u64, source: &str, reason: &str) -> u64 {
    let answer = wake_answer(api, agent, source, reason).await;
    answer["run"]
        .as_u64()
        .unwrap_or_else(|| panic!("no run queued: {answer}"))
}

/// Polls `path` until `done` holds of its answer (bounded).
async fn wait_for(api: &ApiClient, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..WAIT_MS_MAX / 25 {
        last = get(api, path).await;
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{path} never reached the expected state: {last}");
}

/// The run once it is over and its `run_finished` is in the event feed. A run's state may lead
/// the durable log by the commit in progress (docs/api.md, "Durability and what a read sees"),
/// so the tests that read the log after a run ended wait for its end there too.
async fn finished(api: &ApiClient, run: u64) -> Value {
    let over = wait_for(api, &format!("/v1/runs/{run}"), |r| {
        !matches!(r["status"].as_str(), Some("queued" | "running"))
    })
    .await;
    for _ in 0..WAIT_MS_MAX / 25 {
        let logged = events(api)
            .await
            .iter()
            .any(|e| e["type"] == "run_finished" && e["run"] == run);
        if logged {
            return over;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("run {run} ended but its run_finished never reached the event feed");
}

/// Wakes `agent` on demand and returns its run once over.
async fn run_once(api: &ApiClient, agent: u64, reason: &str) -> Value {
    let run = wake(api, agent, "on_demand", reason).await;
    finished(api, run).await
}

fn assert_stopped(run: &Value, status: &str, stop: &str) {
    assert_eq!(run["status"], status, "{run}");
    assert_eq!(run["stop_reason"], stop, "{run}");
}

/// Every entry of a run's transcript.
async fn log_entries(api: &ApiClient, run: u64) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut offset = 0;
    for _ in 0..100 {
        let page = get(
            api,
            &format!("/v1/runs/{run}/log?offset={offset}&limit=1000"),
        )
        .await;
        entries.extend(array(&page["entries"]).cloned());
        if page["complete"] == true {
            return entries;
        }
        offset = page["next_offset"].as_u64().unwrap();
    }
    panic!("the transcript of run {run} never completed");
}

fn kinds(entries: &[Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect()
}

/// Every event the operator sees, in order.
async fn events(api: &ApiClient) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = 0;
    for _ in 0..100 {
        let page = get(api, &format!("/v1/events?after={after}&limit=1000")).await;
        events.extend(array(&page["events"]).cloned());
        after = page["next_after"].as_u64().unwrap();
        if after >= page["head_seq"].as_u64().unwrap() {
            return events;
        }
    }
    panic!("the event feed never ended");
}

async fn history(api: &ApiClient, agent: u64) -> Value {
    get(api, &format!("/v1/agents/{agent}/history")).await
}

/// The agent's line of `/v1/usage`.
async fn usage_of(api: &ApiClient, agent: u64) -> Value {
    let usage = get(api, "/v1/usage").await;
    let line = array(&usage["agents"])
        .find(|a| a["agent"] == agent)
        .cloned();
    line.unwrap_or_else(|| panic!("agent {agent} not in {usage}"))
}

// ---- the tests -------------------------------------------------------------------------------------

/// Runs an async test body once per wire shape, each as its own test.
macro_rules! both_shapes {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            #[tokio::test]
            async fn openai() {
                super::$test(super::Shape::Openai).await
            }
            #[tokio::test]
            async fn anthropic() {
                super::$test(super::Shape::Anthropic).await
            }
        }
    )*};
}

both_shapes!(
    a_tool_loop_sees_its_result_and_ends_its_turn,
    pause_heartbeats_ends_the_loop_in_the_same_commit_and_survives_a_restart,
    pause_heartbeats_clamps_to_an_hour,
    an_idle_timer_wakeup_is_a_ghost_but_an_idle_on_demand_one_is_not,
    a_model_that_never_ends_its_turn_stops_at_max_iterations,
    more_tool_calls_than_the_cap_stop_at_tool_cap,
    a_budget_crossed_mid_run_stops_the_loop_and_refuses_the_next_wakeup,
    schema_invalid_arguments_never_reach_the_tool,
    the_api_key_appears_nowhere_but_in_the_provider_header,
    a_tool_past_its_timeout_is_an_error_result_and_fails_the_run_for_the_tool_trigger,
    provider_failures_end_the_run_with_llm_error,
);

async fn a_tool_loop_sees_its_result_and_ends_its_turn(shape: Shape) {
    let world = World::new("tool-loop", shape);
    let (provider, tools) = (Provider::start(&world.ca).await, Tools::start().await);
    let Running { node, api } = world.node().await;
    let spec = llm_agent(
        "looper",
        shape,
        &provider.base_url(),
        vec![tools.spec("lookup", 10_000)],
    );
    let agent = create(&api, spec).await;
    provider.push([
        shape.calls(&[("call_1", "lookup", json!({"q": "weather"}))]),
        shape.text("It is sunny."),
    ]);
    let before = history(&api, agent).await;
    assert_eq!(before["messages"], json!([]));

    let run = run_once(&api, agent, "check the weather").await;
    assert_stopped(&run, "succeeded", "end_turn");
    assert_eq!(run["report"]["tool_calls"], 1, "{run}");
    assert_eq!(run["usage"]["llm_calls"], 2, "{run}");
    assert_eq!(run["usage"]["input_tokens"], 2 * INPUT_TOKENS, "{run}");
    assert_eq!(run["usage"]["output_tokens"], 2 * OUTPUT_TOKENS, "{run}");
    assert_eq!(
        run["usage"]["cost_micro_usd"],
        2 * CALL_COST_MICRO_USD,
        "{run}"
    );

    let called = tools.calls();
    assert_eq!(called.len(), 1, "{called:?}");
    assert_eq!(called[0].0, "/lookup");
    assert_eq!(called[0].1["arguments"], json!({"q": "weather"}));
    assert_eq!(called[0].1["run"]["id"], run["id"]);

    let seen = provider.seen();
    assert_eq!(seen.len(), 2);
    seen.iter().for_each(|s| shape.assert_key_sent(s));
    assert!(shape.tool_results(&seen[0].body).is_empty());
    let results = shape.tool_results(&seen[1].body);
    assert_eq!(results.len(), 1, "{}", seen[1].body);
    assert_eq!(results[0].id, "call_1");
    assert_eq!(
        serde_json::from_str::<Value>(&results[0].output).unwrap()["answer"],
        42
    );
    assert_ne!(results[0].is_error, Some(true));
    assert_eq!(shape.call_ids(&seen[1].body), ["call_1"]);

    let after = history(&api, agent).await;
    let messages = after["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{after}");
    assert_eq!(messages[0]["role"], "user");
    assert!(
        messages[0]["text"]
            .as_str()
            .unwrap()
            .contains("check the weather"),
        "{after}"
    );
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "text": "It is sunny."})
    );
    assert_ne!(after["hash"], before["hash"]);

    let entries = log_entries(&api, run["id"].as_u64().unwrap()).await;
    let expected = [
        "wakeup",
        "model_request",
        "model_response",
        "tool_call",
        "tool_result",
        "model_request",
        "model_response",
        "stop",
    ];
    assert_eq!(kinds(&entries), expected, "{entries:?}");
    assert_eq!(entries[7]["stop_reason"], "end_turn");
    // Each request entry's `bytes` is the body the provider received (docs/api.md).
    for (entry, sent) in [(&entries[1], &seen[0]), (&entries[5], &seen[1])] {
        assert_eq!(entry["bytes"], sent.body_bytes as u64, "{entry}");
    }
    node.stop();
}

/// An agent with a timer (so a pause has something to hold back), paused by its model asking
/// for `minutes`; returns (api, node, agent, run).
async fn paused_by_model(
    world: &World,
    provider: &Provider,
    shape: Shape,
    minutes: u64,
) -> (Running, u64, Value) {
    let running = world.node().await;
    let mut spec = llm_agent("rester", shape, &provider.base_url(), vec![]);
    spec["heartbeat"] = json!({"interval_ms": 10 * MINUTE_MS});
    let agent = create(&running.api, spec).await;
    provider.push([shape.turn(
        "Resting.",
        &[("p1", "pause_heartbeats", json!({"minutes": minutes}))],
    )]);
    let run = run_once(&running.api, agent, "rest a while").await;
    assert_stopped(&run, "succeeded", "pause_heartbeats");
    (running, agent, run)
}

async fn pause_heartbeats_ends_the_loop_in_the_same_commit_and_survives_a_restart(shape: Shape) {
    let world = World::new("pause", shape);
    let provider = Provider::start(&world.ca).await;
    let (Running { node, api }, agent, run) = paused_by_model(&world, &provider, shape, 5).await;
    assert_eq!(run["report"]["pause_minutes"], 5, "{run}");
    assert_eq!(
        provider.seen().len(),
        1,
        "the pause ends the loop: no further model call"
    );
    let until_ms = START_MS + 5 * MINUTE_MS;
    let check = |agent_view: &Value, events: &[Value]| {
        assert_eq!(agent_view["paused_until_ms"], until_ms, "{agent_view}");
        assert_eq!(agent_view["paused_by"], "agent", "{agent_view}");
        let finished = events
            .iter()
            .find(|e| e["type"] == "run_finished" && e["run"] == run["id"])
            .expect("run_finished");
        let paused = events
            .iter()
            .find(|e| e["type"] == "agent_paused")
            .expect("agent_paused");
        assert_eq!(
            paused["seq"],
            finished["seq"].as_u64().unwrap() + 1,
            "{events:?}"
        );
        assert_eq!(
            (paused["until_ms"].as_u64(), &paused["by"]),
            (Some(until_ms), &json!("agent"))
        );
    };
    check(
        &get(&api, &format!("/v1/agents/{agent}")).await,
        &events(&api).await,
    );
    node.stop();

    let Running { node, api } = world.node().await;
    check(
        &get(&api, &format!("/v1/agents/{agent}")).await,
        &events(&api).await,
    );
    let refused = wake_answer(&api, agent, "timer", "tick").await;
    assert_eq!(refused["refusal"], "paused", "{refused}");
    node.stop();
}

async fn pause_heartbeats_clamps_to_an_hour(shape: Shape) {
    let world = World::new("pause-clamp", shape);
    let provider = Provider::start(&world.ca).await;
    let (Running { node, api }, agent, run) = paused_by_model(&world, &provider, shape, 500).await;
    assert_eq!(run["report"]["pause_minutes"], 60, "{run}");
    let view = get(&api, &format!("/v1/agents/{agent}")).await;
    assert_eq!(view["paused_until_ms"], START_MS + 60 * MINUTE_MS, "{view}");
    node.stop();
}

async fn an_idle_timer_wakeup_is_a_ghost_but_an_idle_on_demand_one_is_not(shape: Shape) {
    let world = World::new("ghost", shape);
    let provider = Provider::start(&world.ca).await;
    let Running { node, api } = world.node().await;
    let mut spec = llm_agent("ghost", shape, &provider.base_url(), vec![]);
    spec["heartbeat"] = json!({"interval_ms": MINUTE_MS});
    spec["limits"]["daily_cap"] = json!(10);
    let agent = create(&api, spec).await;
    provider.push([shape.text("[IDLE]"), shape.text("  [IDLE]\n")]);

    // On demand, [IDLE] is an answer like any other: the history keeps it.
    let asked = run_once(&api, agent, "anything to do?").await;
    assert_stopped(&asked, "succeeded", "end_turn");
    let before = history(&api, agent).await;
    assert_eq!(before["messages"].as_array().unwrap().len(), 2, "{before}");

    // The timer fires: a routine wakeup answered [IDLE] is a ghost.
    let view = get(&api, &format!("/v1/agents/{agent}")).await;
    world.set_clock(view["next_fire_at_ms"].as_u64().unwrap() + 1);
    let runs_path = format!("/v1/runs?agent={agent}");
    let listing = wait_for(&api, &runs_path, |l| {
        array(&l["runs"]).any(|r| r["source"] == "timer" && r["status"] == "succeeded")
    })
    .await;
    let ghost = array(&listing["runs"])
        .find(|r| r["source"] == "timer")
        .unwrap()
        .clone();
    assert_stopped(&ghost, "succeeded", "ghost");
    assert_eq!(ghost["usage"]["llm_calls"], 1, "{ghost}");
    assert_eq!(
        history(&api, agent).await,
        before,
        "a ghost run leaves the history as it was"
    );
    let sent = &provider.seen()[1].body;
    assert!(
        sent.to_string().contains("anything to do?"),
        "the history reached the model: {sent}"
    );

    let line = usage_of(&api, agent).await;
    assert_eq!(line["today"]["llm_calls"], 2, "{line}");
    assert_eq!(line["total"]["llm_calls"], 2, "{line}");
    let view = get(&api, &format!("/v1/agents/{agent}")).await;
    assert_eq!(
        view["day_count"]["started"], 2,
        "the ghost run counts on the daily cap: {view}"
    );
    node.stop();
}

async fn a_model_that_never_ends_its_turn_stops_at_max_iterations(shape: Shape) {
    let world = World::new("max-iterations", shape);
    let (provider, tools) = (Provider::start(&world.ca).await, Tools::start().await);
    let Running { node, api } = world.node().await;
    let mut spec = llm_agent(
        "looper",
        shape,
        &provider.base_url(),
        vec![tools.spec("lookup", 10_000)],
    );
    spec["adapter"]["max_iterations"] = json!(3);
    let agent = create(&api, spec).await;
    provider.push(lookups_forever(shape, 10));

    let run = run_once(&api, agent, "loop").await;
    assert_stopped(&run, "failed", "max_iterations");
    assert_eq!(
        provider.seen().len(),
        3,
        "exactly max_iterations model calls"
    );
    assert_eq!(tools.calls().len(), 3);
    assert_eq!(run["report"]["tool_calls"], 3, "{run}");
    assert_eq!(run["usage"]["llm_calls"], 3, "{run}");
    assert!(
        run["detail"]
            .as_str()
            .unwrap()
            .contains("adapter.max_iterations = 3"),
        "{run}"
    );
    node.stop();
}

async fn more_tool_calls_than_the_cap_stop_at_tool_cap(shape: Shape) {
    let world = World::new("tool-cap", shape);
    let (provider, tools) = (Provider::start(&world.ca).await, Tools::start().await);
    let Running { node, api } = world.node().await;
    let mut spec = llm_agent(
        "greedy",
        shape,
        &provider.base_url(),
        vec![tools.spec("lookup", 10_000)],
    );
    spec["adapter"]["tool_calls_max"] = json!(2);
    spec["adapter"]["max_iterations"] = json!(10);
    let agent = create(&api, spec).await;
    let lookup = |id: &'static str| (id, "lookup", json!({"q": id}));
    provider.push([
        shape.calls(&[lookup("a")]),
        shape.calls(&[lookup("b"), lookup("c")]),
        shape.text("never asked for"),
    ]);

    let run = run_once(&api, agent, "greedy").await;
    assert_stopped(&run, "failed", "tool_cap");
    assert_eq!(
        tools.calls().len(),
        2,
        "the tool server saw exactly tool_calls_max calls"
    );
    assert_eq!(run["report"]["tool_calls"], 2, "{run}");
    assert_eq!(provider.seen().len(), 2);
    node.stop();
}

async fn a_budget_crossed_mid_run_stops_the_loop_and_refuses_the_next_wakeup(shape: Shape) {
    let world = World::new("budget", shape);
    let (provider, tools) = (Provider::start(&world.ca).await, Tools::start().await);
    let Running { node, api } = world.node().await;
    let mut spec = llm_agent(
        "spender",
        shape,
        &provider.base_url(),
        vec![tools.spec("lookup", 10_000)],
    );
    // Each call costs $0.10, more than half of $0.15: the second call crosses the budget.
    spec["limits"]["daily_budget_usd"] = json!(0.15);
    spec["adapter"]["max_iterations"] = json!(10);
    let agent = create(&api, spec).await;
    provider.push(lookups_forever(shape, 10));

    let run = run_once(&api, agent, "spend").await;
    assert_stopped(&run, "failed", "budget");
    assert_eq!(
        provider.seen().len(),
        2,
        "no model call after the one that crossed the budget"
    );
    assert_eq!(
        run["usage"]["cost_micro_usd"],
        2 * CALL_COST_MICRO_USD,
        "{run}"
    );
    let line = usage_of(&api, agent).await;
    assert_eq!(
        line["today"]["cost_micro_usd"],
        2 * CALL_COST_MICRO_USD,
        "{line}"
    );
    assert_eq!(line["today"]["llm_calls"], 2, "{line}");
    assert_eq!(line["budget_left_usd"], 0.0, "{line}");

    let refused = wake_answer(&api, agent, "on_demand", "more").await;
    assert_eq!(refused["outcome"], "refused", "{refused}");
    assert_eq!(refused["refusal"], "budget", "{refused}");
    assert_eq!(provider.seen().len(), 2);
    node.stop();
}

async fn schema_invalid_arguments_never_reach_the_tool(shape: Shape) {
    let world = World::new("schema", shape);
    let (provider, tools) = (Provider::start(&world.ca).await, Tools::start().await);
    let Running { node, api } = world.node().await;
    let spec = llm_agent(
        "sloppy",
        shape,
        &provider.base_url(),
        vec![tools.spec("lookup", 10_000)],
    );
    let agent = create(&api, spec).await;
    provider.push([
        shape.calls(&[("bad_1", "lookup", json!({"q": 7}))]),
        shape.text("Sorry, I will send a string next time."),
    ]);

    let run = run_once(&api, agent, "look it up").await;
    assert_stopped(&run, "succeeded", "end_turn");
    assert!(tools.calls().is_empty(), "{:?}", tools.calls());
    let seen = provider.seen();
    assert_eq!(seen.len(), 2, "the loop went on after the error result");
    let results = shape.tool_results(&seen[1].body);
    assert_eq!(results.len(), 1, "{}", seen[1].body);
    assert_eq!(results[0].id, "bad_1");
    assert!(
        results[0]
            .output
            .contains("do not match its parameters schema"),
        "{results:?}"
    );
    if shape == Shape::Anthropic {
        assert_eq!(results[0].is_error, Some(true));
    }
    let view = get(&api, &format!("/v1/agents/{agent}")).await;
    assert_eq!(
        view["breaker"]["tool_failures"], 0,
        "a bad call is the model's, not the tool's: {view}"
    );
    node.stop();
}

/// Every API answer the operator can fetch about the tenant, concatenated.
async fn every_api_answer(api: &ApiClient) -> String {
    let mut text = get_text(api, "/v1/agents").await;
    text += &get_text(api, "/v1/usage").await;
    text += &get_text(api, "/v1/runs?limit=1000").await;
    for event in events(api).await {
        text += &event.to_string();
    }
    for agent in array(&get(api, "/v1/agents").await["agents"]) {
        let id = agent["id"].as_u64().unwrap();
        text += &get_text(api, &format!("/v1/agents/{id}")).await;
        text += &get_text(api, &format!("/v1/agents/{id}/history")).await;
    }
    for run in array(&get(api, "/v1/runs?limit=1000").await["runs"]) {
        let id = run["id"].as_u64().unwrap();
        text += &get_text(api, &format!("/v1/runs/{id}")).await;
        for entry in log_entries(api, id).await {
            text += &entry.to_string();
        }
    }
    text
}

/// Every file under `dir`, its bytes.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    files
}

/// The text around the first `needle` in `haystack`, if there is one.
fn around(haystack: &str, needle: &str) -> Option<String> {
    let at = haystack.find(needle)?;
    let before: String = haystack[..at].chars().rev().take(300).collect();
    let after: String = haystack[at..].chars().take(300).collect();
    Some(before.chars().rev().chain(after.chars()).collect())
}

async fn the_api_key_appears_nowhere_but_in_the_provider_header(shape: Shape) {
    let world = World::new("secret", shape);
    let (provider, tools) = (Provider::start(&world.ca).await, Tools::start().await);
    let Running { node, api } = world.node().await;
    let names = ["leak", "leak500", "leakcut"];
    let leaky = names.iter().map(|name| tools.spec(name, 10_000)).collect();
    let agent = create(&api, llm_agent("leaky", shape, &provider.base_url(), leaky)).await;
    provider.push([
        shape.calls(&[("l1", "leak", json!({"q": "key?"}))]),
        shape.calls(&[("l2", "leak500", json!({"q": "key!"}))]),
        shape.calls(&[("l3", "leakcut", json!({"q": "key…"}))]),
        shape.text(&format!("The tool told me the key: {API_KEY}.")),
    ]);
    let run = run_once(&api, agent, "find the key").await;
    assert_stopped(&run, "failed", "end_turn");
    let results = shape.tool_results(&provider.seen()[3].body);
    let cut = &results.iter().find(|r| r.id == "l3").unwrap().output;
    // The body put the key across the cut of the tool's error output (the output is that long)...
    let near_the_cut = TOOL_ERROR_OUTPUT_CHARS_MAX - KEY_FRAGMENT_CHARS;
    assert!(cut.chars().count() >= near_the_cut, "{} chars", cut.len());
    // ...and none of it reached the model: the body lost the key before it was cut.
    assert_eq!(around(cut, &API_KEY[..KEY_FRAGMENT_CHARS]), None);

    // A 401 whose body echoes the key twice: whole, and cut by the error excerpt's bound.
    let padding = "x".repeat(200 - KEY_FRAGMENT_CHARS);
    let body = format!(r#"{{"error":"invalid key {API_KEY}"}}"#);
    let straddling = format!("{body}{}{API_KEY}", &padding[body.len()..]);
    provider.push([Reply::status(401, &straddling)]);
    let refused = run_once(&api, agent, "again").await;
    assert_stopped(&refused, "failed", "llm_error");

    let seen = provider.seen();
    assert_eq!(seen.len(), 5);
    seen.iter().for_each(|s| shape.assert_key_sent(s));
    assert_eq!(tools.calls().len(), 3);
    let fragment = &API_KEY[..KEY_FRAGMENT_CHARS];
    let served = every_api_answer(&api).await;
    assert!(
        served.contains("[REDACTED]"),
        "the key was met, and redacted"
    );
    assert_eq!(
        around(&served, fragment),
        None,
        "the key leaked through the API"
    );
    node.stop();
    for (path, bytes) in files_under(&world.data_dir()) {
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(
            around(&text, fragment),
            None,
            "the key is on disk in {}",
            path.display()
        );
    }
}

async fn a_tool_past_its_timeout_is_an_error_result_and_fails_the_run_for_the_tool_trigger(
    shape: Shape,
) {
    let world = World::new("tool-timeout", shape);
    let (provider, tools) = (Provider::start(&world.ca).await, Tools::start().await);
    let Running { node, api } = world.node().await;
    let spec = llm_agent(
        "waiter",
        shape,
        &provider.base_url(),
        vec![tools.spec("slow", 300)],
    );
    let agent = create(&api, spec).await;
    provider.push([
        shape.calls(&[("s1", "slow", json!({"q": "now"}))]),
        shape.text("The tool is down."),
    ]);

    let run = run_once(&api, agent, "try the slow tool").await;
    assert_stopped(&run, "failed", "end_turn");
    assert!(
        run["detail"]
            .as_str()
            .unwrap()
            .starts_with("tool slow failed"),
        "{run}"
    );
    let seen = provider.seen();
    assert_eq!(seen.len(), 2, "the loop went on after the timeout");
    let results = shape.tool_results(&seen[1].body);
    assert!(
        results[0]
            .output
            .contains("did not answer within its timeout_ms = 300"),
        "{results:?}"
    );
    if shape == Shape::Anthropic {
        assert_eq!(results[0].is_error, Some(true));
    }
    let view = get(&api, &format!("/v1/agents/{agent}")).await;
    assert_eq!(
        view["breaker"],
        json!({"state": "closed", "llm_failures": 0, "tool_failures": 1})
    );
    let all = events(&api).await;
    let end = all
        .iter()
        .find(|e| e["type"] == "run_finished" && e["run"] == run["id"])
        .unwrap();
    assert_eq!(end["cause"], "tool", "{end}");
    assert_eq!(
        history(&api, agent).await["messages"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    node.stop();
}

/// An agent calling `base_url`, woken once on demand; its run once over.
async fn one_run(
    api: &ApiClient,
    shape: Shape,
    name: &str,
    base_url: &str,
    timeout_ms: u64,
) -> Value {
    let mut spec = llm_agent(name, shape, base_url, vec![]);
    spec["adapter"]["request_timeout_ms"] = json!(timeout_ms);
    let agent = create(api, spec).await;
    let run = run_once(api, agent, "hello").await;
    assert_stopped(&run, "failed", "llm_error");
    let view = get(api, &format!("/v1/agents/{agent}")).await;
    assert_eq!(view["breaker"]["llm_failures"], 1, "{view}");
    assert!(history(api, agent).await["messages"]
        .as_array()
        .unwrap()
        .is_empty());
    run
}

async fn provider_failures_end_the_run_with_llm_error(shape: Shape) {
    let world = World::new("provider-failures", shape);
    let provider = Provider::start(&world.ca).await;
    let Running { node, api } = world.node().await;

    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = one_run(
        &api,
        shape,
        "nowhere",
        &format!("https://localhost:{closed}"),
        10_000,
    )
    .await;
    assert!(
        unreachable["detail"]
            .as_str()
            .unwrap()
            .contains("could not reach"),
        "{unreachable}"
    );

    provider.push([Reply::status(401, r#"{"error":"invalid api key"}"#)]);
    let wrong_key = one_run(&api, shape, "wrong-key", &provider.base_url(), 10_000).await;
    assert!(
        wrong_key["detail"]
            .as_str()
            .unwrap()
            .contains("api_key_env"),
        "{wrong_key}"
    );

    provider.push([Reply::hang()]);
    let hung = one_run(&api, shape, "hung", &provider.base_url(), 1_000).await;
    assert!(
        hung["detail"]
            .as_str()
            .unwrap()
            .contains("request_timeout_ms = 1000"),
        "{hung}"
    );
    assert_eq!(provider.seen().len(), 2);
    node.stop();
}

#[tokio::test]
async fn bad_llm_fields_are_refused_naming_the_field() {
    let world = World::new("bad-fields", Shape::Openai);
    let Running { node, api } = world.node().await;
    let base = llm_agent("bad", Shape::Openai, "https://localhost:1", vec![]);
    let tool = json!({"name": "t", "description": "d", "parameters": {"type": "string"},
        "url": "http://127.0.0.1:1/t"});
    let cases: [(&str, (&str, &str), Value); 5] = [
        (
            "adapter.api_key_env",
            ("adapter", "api_key_env"),
            json!("sk-not-a-name"),
        ),
        (
            "adapter.max_iterations",
            ("adapter", "max_iterations"),
            json!(0),
        ),
        (
            "adapter.tools[0].parameters",
            ("adapter", "tools"),
            json!([tool]),
        ),
        (
            "adapter.prompts.wakeup.timer",
            ("adapter", "prompts"),
            json!({"wakeup": {"timer": "{{ weather }}"}}),
        ),
        (
            "limits.daily_budget_usd",
            ("limits", "daily_budget_usd"),
            json!(-1.0),
        ),
    ];
    for (field, (outer, inner), value) in cases {
        let mut spec = base.clone();
        spec[outer][inner] = value;
        let (status, answer) = post(&api, "/v1/agents", spec).await;
        assert_eq!(status, 400, "{field}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    assert!(array(&get(&api, "/v1/agents").await["agents"])
        .next()
        .is_none());
    node.stop();
}
