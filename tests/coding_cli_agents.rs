//! The coding-CLI adapters end to end (real tokio, real disk, real processes): a node whose
//! `claude_local` and `codex_local` agents run the fake CLIs under `tests/fixtures/cli/`
//! (shell scripts printing Claude-style JSON and Codex-style JSONL, reading the prompt from
//! stdin, logging every invocation's arguments and prompt). Sessions and usage parsed, the
//! task's session resumed on its next run, an unknown session retried fresh exactly once,
//! garbage output, a missing binary, the warning when such an agent is saved, and the sessions
//! API and CLI.
//!
//! The fakes are driven by the prompt (each agent's prompt template is `{{ run.reason }}`):
//! `new-session=ID` names the session a fresh run reports, `mode=garbage` prints no JSON,
//! `always-refuse` refuses every run as an unknown session; a session named `expired-*` is one
//! the fake does not know.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use vigil::api::client::ApiClient;
use vigil::exec::host::RunServices;
use vigil::exec::pricing::{ModelPrice, PriceTable};
use vigil::io::clock::SystemClock;
use vigil::io::entropy::SeededEntropy;
use vigil::io::storage::StorageLocation;
use vigil::net::TlsOptions;
use vigil::node::{Node, NodeConfig, TenantToken};
use vigil::transcript::FileTranscripts;

const ACME: &str = "acme-operator-token";
/// Longest a test waits for a run to end; a bound on waiting, never a timing goal.
const WAIT_MS_MAX: u64 = 30_000;
const POLL_MS: u64 = 25;
/// Every agent's run timeout: bounds a hung fake should every other bound fail.
const RUN_TIMEOUT_MS: u64 = 60_000;
/// What the fake Claude reports per run: tokens (new, cache-written, cache-read, output) and
/// its own cost in dollars.
const CLAUDE_INPUT: u64 = 10 + 20 + 30;
const CLAUDE_CACHED: u64 = 30;
const CLAUDE_OUTPUT: u64 = 5;
const CLAUDE_COST_MICRO_USD: u64 = 1_500;
/// What the fake Codex reports per run (no cost: the node prices it).
const CODEX_INPUT: u64 = 100;
const CODEX_CACHED: u64 = 40;
const CODEX_OUTPUT: u64 = 7;
/// The model the Codex agents name, priced at $1,000 per million tokens (cached input $100).
const CODEX_MODEL: &str = "stub-codex";
/// The node variable holding the secret a leak test's agent gets as `FAKE_SECRET`, and its value
/// (distinctive, so finding it anywhere is no accident).
const SECRET_SOURCE_ENV: &str = "VIGIL_FAKE_CLI_SECRET";
const SECRET: &str = "fake-cli-secret-Qm4vT8zR2pW6";
const CODEX_COST_MICRO_USD: u64 = (CODEX_INPUT - CODEX_CACHED) * 1_000 + CODEX_CACHED * 100 + CODEX_OUTPUT * 1_000;

/// Which fake CLI an agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cli {
    Claude,
    Codex,
}

impl Cli {
    fn adapter(self) -> &'static str {
        match self {
            Cli::Claude => "claude_local",
            Cli::Codex => "codex_local",
        }
    }

    fn fake(self) -> PathBuf {
        let name = match self {
            Cli::Claude => "fake_claude",
            Cli::Codex => "fake_codex",
        };
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cli").join(name)
    }

    /// How an invocation's logged arguments say it resumed `session`.
    fn resumed(self, session: &str) -> String {
        match self {
            Cli::Claude => format!("--resume {session}"),
            Cli::Codex => format!("resume {session} -"),
        }
    }

    /// Whether an invocation resumed anything.
    fn resumes_any(self, args: &str) -> bool {
        match self {
            Cli::Claude => args.contains("--resume"),
            Cli::Codex => args.contains(" resume "),
        }
    }
}

// ---- the world -------------------------------------------------------------------------------

struct World {
    dir: PathBuf,
}

struct Running {
    node: Node,
    api: ApiClient,
}

impl World {
    fn new(test: &str) -> World {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("coding_cli_agents")
            .join(test);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        World { dir }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The file the fakes of agent `name` log their invocations to.
    fn log_file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// The invocations the fake of agent `name` logged: (arguments, prompt).
    fn invocations(&self, name: &str) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(self.log_file(name)).unwrap_or_default();
        text.lines()
            .map(|line| {
                let rest = line.strip_prefix("args: ").expect("a logged invocation");
                let (args, prompt) = rest.split_once(" | prompt: ").expect("args then prompt");
                (args.to_string(), prompt.to_string())
            })
            .collect()
    }

    async fn node(&self) -> Running {
        let mut node = Node::start(self.config()).await.expect("node starts");
        node.ready().await.expect("node recovers");
        let api = ApiClient::with_token(node.local_addr(), ACME);
        Running { node, api }
    }

    fn config(&self) -> NodeConfig {
        let mut services = RunServices::production(&TlsOptions::default(), prices())
            .expect("the standard roots load")
            .with_work_dir(self.data_dir());
        services.secrets =
            std::sync::Arc::new(|name: &str| (name == SECRET_SOURCE_ENV).then(|| SECRET.to_string()));
        NodeConfig {
            listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            storage: StorageLocation::File(self.data_dir().join("vigil.redb")),
            clock: SystemClock::shared(),
            entropy: SeededEntropy::shared(11),
            tenants: vec![TenantToken {
                tenant: "acme".into(),
                token: ACME.into(),
            }],
            on_commit: None,
            on_replayed: None,
            adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
            run_services: services,
            transcripts: FileTranscripts::shared(&self.data_dir()),
        }
    }

    /// An agent of `cli` named `name` running its fake, the prompt being the wakeup's reason.
    fn agent(&self, cli: Cli, name: &str) -> Value {
        let mut adapter = json!({
            "type": cli.adapter(),
            "binary": cli.fake().to_str().unwrap(),
            "prompt": "{{ run.reason }}",
            "env": {"FAKE_CLI_LOG": self.log_file(name).to_str().unwrap()},
            "timeout_sec": 30,
            "grace_sec": 1,
        });
        if cli == Cli::Codex {
            adapter["model"] = json!(CODEX_MODEL);
        }
        json!({"name": name, "limits": {"run_timeout_ms": RUN_TIMEOUT_MS}, "adapter": adapter})
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
        input_usd_per_mtok: 1_000.0,
        cached_input_usd_per_mtok: Some(100.0),
        output_usd_per_mtok: 1_000.0,
    };
    PriceTable {
        models: BTreeMap::from([(CODEX_MODEL.to_string(), price)]),
    }
}

// ---- the API -------------------------------------------------------------------------------------

async fn get(api: &ApiClient, path: &str) -> Value {
    let answer = api.get(path).await.unwrap();
    let body = answer.json().unwrap();
    assert_eq!(answer.status.as_u16(), 200, "GET {path}: {body}");
    body
}

async fn post(api: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = api.post_json(path, &body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

/// Creates an agent; answers its id and the create answer.
async fn create(api: &ApiClient, spec: Value) -> (u64, Value) {
    let (status, created) = post(api, "/v1/agents", spec).await;
    assert_eq!(status, 201, "{created}");
    (created["agent"]["id"].as_u64().unwrap(), created)
}

/// Wakes `agent` on demand on `task_key` with `reason` (its prompt); answers the run once over.
async fn run_once(api: &ApiClient, agent: u64, task_key: &str, reason: &str) -> Value {
    let body = json!({"source": "on_demand", "reason": reason, "task_key": task_key});
    let (status, answer) = post(api, &format!("/v1/agents/{agent}/wakeup"), body).await;
    assert!(status == 200 || status == 202, "{status} {answer}");
    let run = answer["run"].as_u64().unwrap_or_else(|| panic!("no run: {answer}"));
    for _ in 0..WAIT_MS_MAX / POLL_MS {
        let seen = get(api, &format!("/v1/runs/{run}")).await;
        if !matches!(seen["status"].as_str(), Some("queued" | "running")) {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    panic!("run {run} never ended");
}

/// The agent's task sessions, by task key: (session id, run).
async fn sessions(api: &ApiClient, agent: u64) -> BTreeMap<String, (String, u64)> {
    let listing = get(api, &format!("/v1/agents/{agent}/sessions")).await;
    listing["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let key = s["task_key"].as_str().unwrap().to_string();
            let run = s["run"].as_u64().unwrap();
            assert!(s["updated_at_ms"].as_u64().unwrap() > 0, "{s}");
            (key, (s["session_id"].as_str().unwrap().to_string(), run))
        })
        .collect()
}

fn session_of(id: &str, run: &Value) -> (String, u64) {
    (id.to_string(), run["id"].as_u64().unwrap())
}

/// Every entry of a finished run's transcript.
async fn log_text(api: &ApiClient, run: &Value) -> String {
    let id = run["id"].as_u64().unwrap();
    let page = get(api, &format!("/v1/runs/{id}/log?limit=1000")).await;
    page["entries"].to_string()
}

async fn usage_total(api: &ApiClient, agent: u64) -> Value {
    let usage = get(api, "/v1/usage").await;
    let line = usage["agents"].as_array().unwrap().iter().find(|a| a["agent"] == agent).cloned();
    line.unwrap_or_else(|| panic!("agent {agent} not in {usage}"))["total"].clone()
}

fn assert_succeeded(run: &Value) {
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(run.get("error_class").is_none(), "{run}");
}

fn assert_failed(run: &Value, class: &str) {
    assert_ne!(run["status"], "succeeded", "{run}");
    assert_eq!(run["error_class"], class, "{run}");
}

// ---- the tests -------------------------------------------------------------------------------------

/// A run reports its session and usage; the next run on the task resumes the session (the fake
/// saw it), another task starts its own.
async fn session_and_usage_are_read_and_the_next_run_resumes(cli: Cli) {
    let world = World::new(&format!("resume-{}", cli.adapter()));
    let Running { node, api } = world.node().await;
    let (agent, created) = create(&api, world.agent(cli, "coder")).await;
    assert_eq!(created["warnings"], json!([]), "the fake is installed: {created}");

    let first = run_once(&api, agent, "t1", "new-session=sess-a fix the build").await;
    assert_succeeded(&first);
    let answer = first["report"]["answer_excerpt"].as_str().unwrap();
    assert!(answer.starts_with("fake "), "{first}");
    assert_eq!(first["report"]["session"], json!({"op": "set", "session_id": "sess-a"}));
    assert_eq!(first["report"]["exit"], json!({"code": 0}));
    assert_eq!(sessions(&api, agent).await["t1"], session_of("sess-a", &first));
    let log = log_text(&api, &first).await;
    assert!(log.starts_with(r#"[{"#) && log.contains(r#""kind":"wakeup""#), "{log}");
    assert!(log.contains(r#""kind":"child_output""#), "the CLI's output is in the transcript: {log}");

    let invocations = world.invocations("coder");
    assert_eq!(invocations.len(), 1, "{invocations:?}");
    assert!(!cli.resumes_any(&invocations[0].0), "a first run resumes nothing: {invocations:?}");
    assert_eq!(invocations[0].1, "new-session=sess-a fix the build", "the prompt came on stdin");

    let second = run_once(&api, agent, "t1", "and now the tests").await;
    assert_succeeded(&second);
    let invocations = world.invocations("coder");
    assert_eq!(invocations.len(), 2);
    assert!(invocations[1].0.contains(&cli.resumed("sess-a")), "{invocations:?}");
    assert_eq!(sessions(&api, agent).await["t1"], session_of("sess-a", &second));

    let other = run_once(&api, agent, "t2", "new-session=sess-b other task").await;
    assert_succeeded(&other);
    assert!(!cli.resumes_any(&world.invocations("coder")[2].0), "another task starts fresh");
    let all = sessions(&api, agent).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all["t2"], session_of("sess-b", &other));

    let (input, cached, output, cost) = match cli {
        Cli::Claude => (CLAUDE_INPUT, CLAUDE_CACHED, CLAUDE_OUTPUT, CLAUDE_COST_MICRO_USD),
        Cli::Codex => (CODEX_INPUT, CODEX_CACHED, CODEX_OUTPUT, CODEX_COST_MICRO_USD),
    };
    assert_eq!(first["usage"]["input_tokens"], input, "{first}");
    assert_eq!(first["usage"]["cached_input_tokens"], cached, "{first}");
    assert_eq!(first["usage"]["output_tokens"], output, "{first}");
    let total = usage_total(&api, agent).await;
    assert_eq!(total["input_tokens"], 3 * input, "{total}");
    assert_eq!(total["output_tokens"], 3 * output, "{total}");
    assert_eq!(total["cost_micro_usd"], 3 * cost, "{total}");
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_session_and_usage_are_read_and_the_next_run_resumes() {
    session_and_usage_are_read_and_the_next_run_resumes(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_session_and_usage_are_read_and_the_next_run_resumes() {
    session_and_usage_are_read_and_the_next_run_resumes(Cli::Codex).await;
}

/// The stored session is unknown to the CLI: the run is retried once without it and the fresh
/// session is stored. A CLI that refuses the fresh run too ends it `session_invalid` after
/// exactly two invocations, and the stored session is gone.
async fn an_unknown_session_is_retried_fresh_exactly_once(cli: Cli) {
    let world = World::new(&format!("retry-{}", cli.adapter()));
    let Running { node, api } = world.node().await;
    let (agent, _) = create(&api, world.agent(cli, "coder")).await;
    let planted = run_once(&api, agent, "t", "new-session=expired-1").await;
    assert_succeeded(&planted);
    assert_eq!(sessions(&api, agent).await["t"].0, "expired-1");

    let retried = run_once(&api, agent, "t", "new-session=fresh-2 go on").await;
    assert_succeeded(&retried);
    assert_eq!(retried["report"]["session"], json!({"op": "set", "session_id": "fresh-2"}));
    assert_eq!(sessions(&api, agent).await["t"], session_of("fresh-2", &retried));
    let invocations = world.invocations("coder");
    assert_eq!(invocations.len(), 3, "the planting run, the refused one, the fresh one: {invocations:?}");
    assert!(invocations[1].0.contains(&cli.resumed("expired-1")), "{invocations:?}");
    assert!(!cli.resumes_any(&invocations[2].0), "the retry resumes nothing: {invocations:?}");
    let log = log_text(&api, &retried).await;
    assert!(log.contains("refused session") && log.contains("retried once"), "{log}");

    // Plant an unknown session again, then have the CLI refuse even the fresh run.
    assert_succeeded(&run_once(&api, agent, "u", "new-session=expired-3").await);
    let before = world.invocations("coder").len();
    let refused = run_once(&api, agent, "u", "always-refuse").await;
    assert_failed(&refused, "session_invalid");
    assert_eq!(refused["report"]["session"], json!({"op": "clear"}), "{refused}");
    assert_eq!(world.invocations("coder").len(), before + 2, "never more than one retry");
    assert!(!sessions(&api, agent).await.contains_key("u"), "the refused session is dropped");
    // The next run on the task starts fresh, once.
    assert_succeeded(&run_once(&api, agent, "u", "new-session=fresh-4").await);
    let last = world.invocations("coder");
    assert_eq!(last.len(), before + 3);
    assert!(!cli.resumes_any(&last[before + 2].0), "{last:?}");
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_an_unknown_session_is_retried_fresh_exactly_once() {
    an_unknown_session_is_retried_fresh_exactly_once(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_an_unknown_session_is_retried_fresh_exactly_once() {
    an_unknown_session_is_retried_fresh_exactly_once(Cli::Codex).await;
}

/// Output that is not the CLI's format fails the run `parse_error`; nothing is stored.
async fn garbage_output_is_a_parse_error(cli: Cli) {
    let world = World::new(&format!("garbage-{}", cli.adapter()));
    let Running { node, api } = world.node().await;
    let (agent, _) = create(&api, world.agent(cli, "coder")).await;
    let run = run_once(&api, agent, "t", "mode=garbage").await;
    assert_failed(&run, "parse_error");
    assert_eq!(run["status"], "failed");
    assert!(run["detail"].as_str().unwrap().contains("printed no"), "{run}");
    assert!(sessions(&api, agent).await.is_empty());
    let log = log_text(&api, &run).await;
    assert!(log.contains("not { json") || log.contains("is { not json"), "the output is in the transcript: {log}");
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_garbage_output_is_a_parse_error() {
    garbage_output_is_a_parse_error(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_garbage_output_is_a_parse_error() {
    garbage_output_is_a_parse_error(Cli::Codex).await;
}

/// A Claude error result with a nonzero exit is `exit_nonzero`, its reason in the detail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_error_result_fails_the_run_with_its_reason() {
    let world = World::new("error-result");
    let Running { node, api } = world.node().await;
    let (agent, _) = create(&api, world.agent(Cli::Claude, "coder")).await;
    let run = run_once(&api, agent, "t", "mode=fail new-session=s-9").await;
    assert_failed(&run, "exit_nonzero");
    assert!(run["detail"].as_str().unwrap().contains("error_max_turns"), "{run}");
    assert_eq!(run["report"]["exit"], json!({"code": 1}));
    node.stop();
}

/// A CLI still running after `timeout_sec` is terminated and its run ends `timed_out`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_past_its_time_limit_times_out() {
    let world = World::new("timeout");
    let Running { node, api } = world.node().await;
    let mut spec = world.agent(Cli::Claude, "coder");
    spec["adapter"]["timeout_sec"] = json!(1);
    let (agent, _) = create(&api, spec).await;
    let run = run_once(&api, agent, "t", "mode=hang").await;
    assert_eq!(run["status"], "timed_out", "{run}");
    assert_failed(&run, "timed_out");
    assert!(sessions(&api, agent).await.is_empty());
    node.stop();
}

/// A secret the CLI gets through `secret_env` and prints is in nothing the node stores or
/// serves: not the answer, the transcript, the events, nor any file of the data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_cli_prints_is_redacted_everywhere() {
    let world = World::new("secret");
    let Running { node, api } = world.node().await;
    let mut spec = world.agent(Cli::Claude, "coder");
    spec["adapter"]["secret_env"] = json!({"FAKE_SECRET": SECRET_SOURCE_ENV});
    let (agent, created) = create(&api, spec).await;
    assert!(!created.to_string().contains(SECRET));
    let run = run_once(&api, agent, "t", "mode=leak").await;
    assert_succeeded(&run);
    let answer = run["report"]["answer_excerpt"].as_str().unwrap();
    assert!(answer.starts_with("the secret is ") && !answer.contains(SECRET), "{answer}");
    let log = log_text(&api, &run).await;
    assert!(log.contains("the secret is") && !log.contains(SECRET), "{log}");
    let events = get(&api, "/v1/events?limit=1000").await;
    assert!(!events.to_string().contains(SECRET));
    node.stop();
    drop(api);
    for file in files_under(&world.data_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
        assert!(!found, "the secret is in {}", file.display());
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// A binary that is not there: the agent is saved with a warning, and its runs fail
/// `adapter_not_installed` saying what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_binary_warns_at_save_and_fails_runs_as_not_installed() {
    let world = World::new("missing");
    let Running { node, api } = world.node().await;
    for cli in [Cli::Claude, Cli::Codex] {
        let mut spec = world.agent(cli, &format!("missing-{}", cli.adapter()));
        let missing = world.dir.join("no-such-cli");
        spec["adapter"]["binary"] = json!(missing.to_str().unwrap());
        let (agent, created) = create(&api, spec).await;
        let warnings = created["warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), 1, "{created}");
        let warning = warnings[0].as_str().unwrap();
        assert!(warning.contains("no-such-cli") && warning.contains(cli.adapter()), "{warning}");
        let run = run_once(&api, agent, "t", "hello").await;
        assert_failed(&run, "adapter_not_installed");
        let detail = run["detail"].as_str().unwrap();
        assert!(detail.contains("not installed") && detail.contains("adapter.binary"), "{detail}");
    }
    node.stop();
}

/// `GET /v1/agents/{id}/sessions` lists, `POST …/sessions/{task_key}/reset` forgets (operator
/// only, the task key checked), and the next run on the task starts fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_api_lists_and_resets() {
    let world = World::new("api");
    let Running { node, api } = world.node().await;
    let (agent, created) = create(&api, world.agent(Cli::Claude, "coder")).await;
    let first = run_once(&api, agent, "ticket/7", "new-session=sess-x").await;
    assert_eq!(sessions(&api, agent).await["ticket/7"], session_of("sess-x", &first));

    // The agent may read its own sessions but not reset them.
    let token = created["token"].as_str().unwrap();
    let own = ApiClient::with_token(node.local_addr(), token);
    assert_eq!(sessions(&own, agent).await.len(), 1);
    let (status, refused) = post(&own, &format!("/v1/agents/{agent}/sessions/x/reset"), json!({})).await;
    assert_eq!(status, 403, "{refused}");

    let too_long = "k".repeat(vigil::engine::wakeup::KEY_CHARS_MAX + 1);
    let (status, bad) = post(&api, &format!("/v1/agents/{agent}/sessions/{too_long}/reset"), json!({})).await;
    assert_eq!((status, bad["error"]["field"].as_str()), (400, Some("task_key")), "{bad}");
    let (status, missing) = post(&api, "/v1/agents/999/sessions/t/reset", json!({})).await;
    assert_eq!(status, 404, "{missing}");

    let reset_path = format!("/v1/agents/{agent}/sessions/ticket%2F7/reset");
    let (status, reset) = post(&api, &reset_path, json!({})).await;
    assert_eq!(status, 200, "{reset}");
    assert_eq!(reset, json!({"agent": agent, "task_key": "ticket/7", "reset": true}));
    assert!(sessions(&api, agent).await.is_empty());
    let (_, again) = post(&api, &reset_path, json!({})).await;
    assert_eq!(again["reset"], false, "nothing left to reset: {again}");

    assert_succeeded(&run_once(&api, agent, "ticket/7", "new-session=sess-y").await);
    let invocations = world.invocations("coder");
    assert!(!Cli::Claude.resumes_any(&invocations[1].0), "after a reset the task starts fresh: {invocations:?}");
    assert_eq!(sessions(&api, agent).await["ticket/7"].0, "sess-y");
    node.stop();
}

/// `vigil agent sessions` and `vigil agent session-reset`, the real binary against the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_and_resets_sessions() {
    let world = World::new("cli");
    let Running { node, api } = world.node().await;
    let (agent, _) = create(&api, world.agent(Cli::Codex, "coder")).await;
    assert_succeeded(&run_once(&api, agent, "t 1", "new-session=thread-q").await);
    let server = format!("http://{}", node.local_addr());
    let vigil = |args: Vec<String>| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
                .args(&args)
                .env("VIGIL_SERVER", &server)
                .env("VIGIL_TOKEN", ACME)
                .output()
                .expect("vigil runs");
            let stderr = String::from_utf8_lossy(&output.stderr).to_string();
            assert!(output.status.success(), "vigil {args:?}: {stderr}");
            String::from_utf8(output.stdout).unwrap()
        })
    };
    let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let listed = vigil(args(&["agent", "sessions", "coder"])).await.unwrap();
    assert!(listed.contains("TASK KEY") && listed.contains("t 1") && listed.contains("thread-q"), "{listed}");
    let reset = vigil(args(&["agent", "session-reset", "coder", "t 1"])).await.unwrap();
    assert!(reset.contains("session forgotten"), "{reset}");
    let empty = vigil(args(&["agent", "sessions", &agent.to_string()])).await.unwrap();
    assert!(empty.contains("no task sessions"), "{empty}");
    let json_reset = vigil(args(&["agent", "session-reset", "coder", "t 1", "--json"])).await.unwrap();
    let answer: Value = serde_json::from_str(&json_reset).unwrap();
    assert_eq!(answer["reset"], false);
    node.stop();
}
