//! The world of the `http` adapter's tests: a node on loopback whose runs may reach the local
//! webhook (`webhook_server.rs`), the planted secrets, and the API calls the tests make.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use serde_json::{json, Value};
use vigil::api::client::ApiClient;
use vigil::exec::host::RunServices;
use vigil::exec::pricing::PriceTable;
use vigil::io::clock::Clock;
use vigil::io::entropy::SeededEntropy;
use vigil::io::storage::StorageLocation;
use vigil::net::{OutboundPolicy, TlsOptions};
use vigil::node::{Node, NodeConfig, TenantToken};
use vigil::transcript::FileTranscripts;

pub const ACME: &str = "acme-operator-token";
/// The variable the agents name, and the key it holds (the webhook verifies with a copy).
pub const SECRET_ENV: &str = "VIGIL_WEBHOOK_TEST_KEY";
pub const SECRET: &str = "whsec-planted-R8t2Lm5Qx9Vb";
/// A variable holding another key: the webhook refuses what it signs.
pub const WRONG_ENV: &str = "VIGIL_WEBHOOK_WRONG_KEY";
pub const WRONG_SECRET: &str = "whsec-wrong-Hq3Zp6Nc1Kd4";
/// The node's wall clock, fixed: the signed timestamp must be this, not the OS's time.
pub const START_MS: u64 = 1_800_000_000_000;
/// Longest a test polls for something; a hang guard, never a timing goal.
pub const WAIT_MS_MAX: u64 = 30_000;

/// Wall time fixed at `START_MS`; monotonic time real.
#[derive(Debug)]
pub struct FixedClock(std::time::Instant);

impl Clock for FixedClock {
    fn wall_now_ms(&self) -> u64 {
        START_MS
    }
    fn mono_now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A ready node, an operator client, and where its files are.
pub struct Running {
    _node: Node,
    pub api: ApiClient,
    pub addr: std::net::SocketAddr,
    pub dir: PathBuf,
}

pub async fn node(test: &str) -> Running {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("webhook_agents")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The webhook listens on loopback, which the address policy keeps from tenant acme unless
    // the node allows it (as `[outbound] allow` does).
    let loopback = OutboundPolicy {
        allow: vec!["127.0.0.1/32".parse().unwrap()],
    };
    let mut services =
        RunServices::guarded(&TlsOptions::default(), PriceTable::default(), loopback).unwrap();
    services.secrets = Arc::new(|name: &str| match name {
        SECRET_ENV => Some(SECRET.to_string()),
        WRONG_ENV => Some(WRONG_SECRET.to_string()),
        _ => None,
    });
    let config = NodeConfig {
        listen_addr: "127.0.0.1:0".parse().unwrap(),
        storage: StorageLocation::File(dir.join("vigil.redb")),
        clock: Arc::new(FixedClock(std::time::Instant::now())),
        entropy: SeededEntropy::shared(11),
        tenants: vec![TenantToken {
            tenant: "acme".into(),
            token: ACME.into(),
        }],
        on_commit: None,
        on_replayed: None,
        adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
        run_services: services,
        transcripts: FileTranscripts::shared(&dir),
        alert_sinks: Vec::new(),
        snapshots: Default::default(),
        heartbeat_test_seam: false,
    };
    let mut node = Node::start(config).await.expect("node starts");
    node.ready().await.expect("node recovers");
    let addr = node.local_addr();
    Running {
        _node: node,
        api: ApiClient::with_token(addr, ACME),
        addr,
        dir,
    }
}

pub fn hook(name: &str, url: &str, extra: Value) -> Value {
    let mut adapter = json!({"type": "http", "url": url, "secret_env": SECRET_ENV});
    for (k, v) in extra.as_object().unwrap() {
        adapter[k] = v.clone();
    }
    json!({"name": name, "limits": {"run_timeout_ms": 60_000}, "adapter": adapter})
}

pub async fn post(api: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = api.post_json(path, &body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap_or(Value::Null))
}

pub async fn get(api: &ApiClient, path: &str) -> Value {
    let answer = api.get(path).await.unwrap();
    assert_eq!(answer.status.as_u16(), 200, "GET {path}");
    answer.json().unwrap()
}

pub async fn create(api: &ApiClient, spec: Value) -> u64 {
    let (status, created) = post(api, "/v1/agents", spec).await;
    assert_eq!(status, 201, "{created}");
    created["agent"]["id"].as_u64().unwrap()
}

/// Wakes `agent` on demand with a task key and a payload; answers the run queued.
pub async fn wake(api: &ApiClient, agent: u64, reason: &str) -> u64 {
    let body =
        json!({"source": "on_demand", "reason": reason, "task_key": "t-1", "payload": {"n": 3}});
    let (status, answer) = post(api, &format!("/v1/agents/{agent}/wakeup"), body).await;
    assert!(status == 200 || status == 202, "{status} {answer}");
    answer["run"]
        .as_u64()
        .unwrap_or_else(|| panic!("no run: {answer}"))
}

pub async fn finished(api: &ApiClient, run: u64) -> Value {
    let mut last = Value::Null;
    for _ in 0..WAIT_MS_MAX / 25 {
        last = get(api, &format!("/v1/runs/{run}")).await;
        if !matches!(last["status"].as_str(), Some("queued" | "running")) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("run {run} never ended: {last}");
}

pub async fn run_once(api: &ApiClient, agent: u64) -> Value {
    let run = wake(api, agent, "go").await;
    finished(api, run).await
}

pub fn assert_failed(run: &Value, class: &str, detail_has: &str) {
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error_class"], class, "{run}");
    assert!(
        run["detail"].as_str().unwrap().contains(detail_has),
        "{run}"
    );
}

/// The run's transcript as text (one page is enough for these short runs).
pub async fn transcript(api: &ApiClient, run: u64) -> String {
    get(api, &format!("/v1/runs/{run}/log?limit=1000"))
        .await
        .to_string()
}

pub async fn report(
    addr: std::net::SocketAddr,
    token: Option<&str>,
    run: u64,
    body: &[u8],
) -> (u16, Value) {
    let client = match token {
        Some(token) => ApiClient::with_token(addr, token),
        None => ApiClient::new(addr),
    };
    let path = format!("/v1/runs/{run}/result");
    let answer = client
        .request(Method::POST, &path, Some(body.to_vec()))
        .await
        .unwrap();
    (answer.status.as_u16(), answer.json().unwrap_or(Value::Null))
}

pub fn breaker_tool_failures(agent: &Value) -> u64 {
    agent["breaker"]["tool_failures"]
        .as_u64()
        .unwrap_or_else(|| panic!("no breaker count: {agent}"))
}

/// Neither the signing key nor `tokens` appear in the event feed, any run's transcript or run
/// view, or any file the node wrote.
pub async fn assert_secret_nowhere(node: &Running, tokens: &[&str]) {
    let events = get(&node.api, "/v1/events?limit=1000").await.to_string();
    let runs = get(&node.api, "/v1/runs?limit=1000").await;
    let mut served = format!("{events}{runs}");
    for run in runs["runs"].as_array().unwrap() {
        served.push_str(&transcript(&node.api, run["id"].as_u64().unwrap()).await);
    }
    let mut files = String::new();
    for entry in walk(&node.dir) {
        files.push_str(&String::from_utf8_lossy(&std::fs::read(entry).unwrap()));
    }
    for secret in [SECRET, WRONG_SECRET].iter().chain(tokens) {
        assert!(!served.contains(secret), "{secret} served");
        assert!(!files.contains(secret), "{secret} on disk");
    }
}

pub fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

