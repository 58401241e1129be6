//! The world of `tests/coding_cli_agents.rs`: a node running the fake coding CLIs of
//! `tests/fixtures/cli/`, the log the fakes keep of their invocations, and the API calls the
//! tests make.

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

pub const ACME: &str = "acme-operator-token";
/// Longest a test waits for a run to end; a bound on waiting, never a timing goal.
pub const WAIT_MS_MAX: u64 = 30_000;
pub const POLL_MS: u64 = 25;
/// Every agent's run timeout: bounds a hung fake should every other bound fail.
pub const RUN_TIMEOUT_MS: u64 = 60_000;
/// What the fake Claude reports per run: tokens (new, cache-written, cache-read, output) and
/// its own cost in dollars.
pub const CLAUDE_INPUT: u64 = 10 + 20 + 30;
pub const CLAUDE_CACHED: u64 = 30;
pub const CLAUDE_OUTPUT: u64 = 5;
pub const CLAUDE_COST_MICRO_USD: u64 = 1_500;
/// What the fake Codex reports per run (no cost: the node prices it).
pub const CODEX_INPUT: u64 = 100;
pub const CODEX_CACHED: u64 = 40;
pub const CODEX_OUTPUT: u64 = 7;
/// The model the Codex agents name, priced at $1,000 per million tokens (cached input $100).
pub const CODEX_MODEL: &str = "stub-codex";
/// The node variable holding the secret a leak test's agent gets as `FAKE_SECRET`, and its value
/// (distinctive, so finding it anywhere is no accident).
pub const SECRET_SOURCE_ENV: &str = "VIGIL_FAKE_CLI_SECRET";
pub const SECRET: &str = "fake-cli-secret-Qm4vT8zR2pW6";
pub const CODEX_COST_MICRO_USD: u64 = (CODEX_INPUT - CODEX_CACHED) * 1_000 + CODEX_CACHED * 100 + CODEX_OUTPUT * 1_000;

/// Which fake CLI an agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    Claude,
    Codex,
}

impl Cli {
    pub fn adapter(self) -> &'static str {
        match self {
            Cli::Claude => "claude_local",
            Cli::Codex => "codex_local",
        }
    }

    pub fn fake(self) -> PathBuf {
        let name = match self {
            Cli::Claude => "fake_claude",
            Cli::Codex => "fake_codex",
        };
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cli").join(name)
    }

    /// How an invocation's logged arguments say it resumed `session`.
    pub fn resumed(self, session: &str) -> String {
        match self {
            Cli::Claude => format!("--resume {session}"),
            Cli::Codex => format!("resume {session} -"),
        }
    }

    /// Whether an invocation resumed anything.
    pub fn resumes_any(self, args: &str) -> bool {
        match self {
            Cli::Claude => args.contains("--resume"),
            Cli::Codex => args.contains(" resume "),
        }
    }
}

// ---- the world -------------------------------------------------------------------------------

pub struct World {
    pub dir: PathBuf,
}

pub struct Running {
    pub node: Node,
    pub api: ApiClient,
}

impl World {
    pub fn new(test: &str) -> World {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("coding_cli_agents")
            .join(test);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        World { dir }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The file the fakes of agent `name` log their invocations to.
    pub fn log_file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// The invocations the fake of agent `name` logged: (arguments, prompt).
    pub fn invocations(&self, name: &str) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(self.log_file(name)).unwrap_or_default();
        text.lines()
            .map(|line| {
                let rest = line.strip_prefix("args: ").expect("a logged invocation");
                let (args, prompt) = rest.split_once(" | prompt: ").expect("args then prompt");
                (args.to_string(), prompt.to_string())
            })
            .collect()
    }

    pub async fn node(&self) -> Running {
        let mut node = Node::start(self.config()).await.expect("node starts");
        node.ready().await.expect("node recovers");
        let api = ApiClient::with_token(node.local_addr(), ACME);
        Running { node, api }
    }

    pub fn config(&self) -> NodeConfig {
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
            alert_sinks: Vec::new(),
            snapshots: Default::default(),
            heartbeat_test_seam: false,
        }
    }

    /// An agent of `cli` named `name` running its fake, the prompt being the wakeup's reason.
    pub fn agent(&self, cli: Cli, name: &str) -> Value {
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

pub fn prices() -> PriceTable {
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

pub async fn get(api: &ApiClient, path: &str) -> Value {
    let answer = api.get(path).await.unwrap();
    let body = answer.json().unwrap();
    assert_eq!(answer.status.as_u16(), 200, "GET {path}: {body}");
    body
}

pub async fn post(api: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = api.post_json(path, &body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

/// Creates an agent; answers its id and the create answer.
pub async fn create(api: &ApiClient, spec: Value) -> (u64, Value) {
    let (status, created) = post(api, "/v1/agents", spec).await;
    assert_eq!(status, 201, "{created}");
    (created["agent"]["id"].as_u64().unwrap(), created)
}

/// Wakes `agent` on demand on `task_key` with `reason` (its prompt); answers the run once over.
pub async fn run_once(api: &ApiClient, agent: u64, task_key: &str, reason: &str) -> Value {
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
pub async fn sessions(api: &ApiClient, agent: u64) -> BTreeMap<String, (String, u64)> {
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

pub fn session_of(id: &str, run: &Value) -> (String, u64) {
    (id.to_string(), run["id"].as_u64().unwrap())
}

/// Every entry of a finished run's transcript.
pub async fn log_text(api: &ApiClient, run: &Value) -> String {
    let id = run["id"].as_u64().unwrap();
    let page = get(api, &format!("/v1/runs/{id}/log?limit=1000")).await;
    page["entries"].to_string()
}

pub async fn usage_total(api: &ApiClient, agent: u64) -> Value {
    let usage = get(api, "/v1/usage").await;
    let line = usage["agents"].as_array().unwrap().iter().find(|a| a["agent"] == agent).cloned();
    line.unwrap_or_else(|| panic!("agent {agent} not in {usage}"))["total"].clone()
}

pub fn assert_succeeded(run: &Value) {
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(run.get("error_class").is_none(), "{run}");
}

pub fn assert_failed(run: &Value, class: &str) {
    assert_ne!(run["status"], "succeeded", "{run}");
    assert_eq!(run["error_class"], class, "{run}");
}

