//! Predicate heartbeats over real HTTP and a real database file (real tokio): RFC 0060's
//! conformance behaviours through its test seam (capability shape, one evaluation per tick and an
//! overlapping tick skipped, no spam, the runtime bound, the state cap), the definitions' bad
//! input and tenancy, durability across a restart, and an HTTP check against a local server
//! whose answer changes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use vigil::api::client::ApiClient;
use vigil::engine::predicate::{HEARTBEAT_MAX_STATE_BYTES, HEARTBEAT_MIN_INTERVAL_SEC};
use vigil::io::clock::SystemClock;
use vigil::io::entropy::SeededEntropy;
use vigil::io::storage::StorageLocation;
use vigil::node::{Node, NodeConfig, TenantToken};

const ACME: &str = "acme-operator-token";
const GLOBEX: &str = "globex-operator-token";
/// Tenant `default`'s: the node's metrics are its.
const NODE_OPERATOR: &str = "default-operator-token";
/// Longest a test waits for a tick of a real interval before it fails: a bound on waiting,
/// never a timing goal.
const WAIT_MS_MAX: u64 = 30_000;

fn data_file(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-heartbeats-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("vigil.redb")
}

fn config(path: &std::path::Path, seam: bool) -> NodeConfig {
    NodeConfig {
        listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        storage: StorageLocation::File(path.to_path_buf()),
        clock: SystemClock::shared(),
        entropy: SeededEntropy::shared(11),
        tenants: vec![
            TenantToken {
                tenant: "acme".into(),
                token: ACME.into(),
            },
            TenantToken {
                tenant: "globex".into(),
                token: GLOBEX.into(),
            },
            TenantToken {
                tenant: "default".into(),
                token: NODE_OPERATOR.into(),
            },
        ],
        on_commit: None,
        on_replayed: None,
        adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
        // The local inbox server listens on loopback, which the default address policy keeps
        // from tenant acme: allow it, as `[outbound] allow` in a node config does.
        run_services: vigil::exec::host::RunServices::guarded(
            &vigil::net::TlsOptions::default(),
            Default::default(),
            vigil::net::OutboundPolicy {
                allow: vec!["127.0.0.1/32".parse().unwrap()],
            },
        )
        .unwrap(),
        transcripts: Arc::new(vigil::transcript::MemoryTranscripts::new()),
        alert_sinks: Vec::new(),
        snapshots: Default::default(),
        heartbeat_test_seam: seam,
    }
}

async fn start(path: &std::path::Path, seam: bool) -> (Node, ApiClient) {
    let mut node = Node::start(config(path, seam)).await.expect("node starts");
    node.ready().await.expect("node recovers");
    let client = ApiClient::with_token(node.local_addr(), ACME);
    (node, client)
}

async fn post(client: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = client.post_json(path, &body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

async fn get(client: &ApiClient, path: &str) -> (u16, Value) {
    let answer = client.get(path).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

/// A scripted agent of acme (no timer) and its heartbeat `id` with `extra` fields.
async fn agent_with_heartbeat(client: &ApiClient, id: &str, extra: Value) -> u64 {
    let (status, created) =
        post(client, "/v1/agents", json!({"name": format!("agent-{id}")})).await;
    assert_eq!(status, 201, "{created}");
    let agent = created["agent"]["id"].as_u64().unwrap();
    let mut body =
        json!({"id": id, "agent": agent, "interval_sec": 3600, "check": {"kind": "sample"}});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    let (status, answer) = post(client, "/v1/heartbeats", body).await;
    assert_eq!(status, 201, "{answer}");
    agent
}

async fn tick(client: &ApiClient, id: &str, state: Value, slow_ms: u64) -> Value {
    let body = json!({"heartbeatId": id, "observedState": state, "simulateSlowMs": slow_ms});
    let (status, answer) = post(client, "/v1/host/sample/heartbeat/tick", body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The tenant's events of `kind` so far.
async fn events(client: &ApiClient, kind: &str) -> Vec<Value> {
    let (status, page) = get(client, "/v1/events?limit=1000").await;
    assert_eq!(status, 200, "{page}");
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == kind)
        .cloned()
        .collect()
}

/// The tenant's queued wakeups from heartbeats so far.
async fn predicate_wakeups(client: &ApiClient) -> Vec<Value> {
    let mut queued = events(client, "wakeup_queued").await;
    queued.retain(|e| e["source"] == "predicate");
    queued
}

#[tokio::test]
async fn the_capability_block_has_the_rfcs_shape_with_positive_integers() {
    let path = data_file("capabilities");
    let (node, client) = start(&path, false).await;
    let anonymous = ApiClient::new(node.local_addr());
    let (status, caps) = get(&anonymous, "/v1/capabilities").await;
    assert_eq!(status, 200, "unauthenticated, like health");
    let heartbeat = &caps["host"]["heartbeat"];
    assert_eq!(heartbeat["supported"], true);
    for field in [
        "minIntervalSec",
        "maxRuntimeMs",
        "maxStateBytes",
        "maxPendingEnqueued",
    ] {
        assert!(
            heartbeat[field].as_u64().is_some_and(|n| n >= 1),
            "{field}: {heartbeat}"
        );
    }
    assert_eq!(heartbeat["minIntervalSec"], HEARTBEAT_MIN_INTERVAL_SEC);
    assert_eq!(caps["host"]["scheduling"]["supported"], true);
    assert_eq!(caps["host"]["scheduling"]["missedTickPolicy"], "skip");
    // The seam is off unless the node file turns it on.
    let body = json!({"heartbeatId": "x", "observedState": 1});
    let (status, answer) = post(&client, "/v1/host/sample/heartbeat/tick", body).await;
    assert_eq!(status, 404, "{answer}");
    node.stop();
}

#[tokio::test]
async fn unchanged_ticks_enqueue_nothing_and_a_transition_exactly_one_run() {
    let path = data_file("no-spam");
    let (node, client) = start(&path, true).await;
    let agent = agent_with_heartbeat(&client, "inbox", json!({})).await;
    let unread = |n: u64| json!({"unread": n});
    // The first observation is the baseline: recorded, nothing enqueued.
    let first = tick(&client, "inbox", unread(0), 0).await;
    assert_eq!(
        first,
        json!({"evaluated": true, "status": "ok", "stateChanged": false, "enqueuedRuns": 0})
    );
    for _ in 0..2 {
        let same = tick(&client, "inbox", unread(0), 0).await;
        assert_eq!(
            (same["stateChanged"].clone(), same["enqueuedRuns"].clone()),
            (json!(false), json!(0))
        );
    }
    let changed = tick(&client, "inbox", unread(3), 0).await;
    assert_eq!(
        changed,
        json!({"evaluated": true, "status": "ok", "stateChanged": true, "enqueuedRuns": 1})
    );
    let again = tick(&client, "inbox", unread(3), 0).await;
    assert_eq!(
        (again["stateChanged"].clone(), again["enqueuedRuns"].clone()),
        (json!(false), json!(0))
    );
    // The log holds the baseline and the one transition; one wakeup from the heartbeat.
    let changes = events(&client, "heartbeat_state_changed").await;
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(changes[0]["from"], Value::Null);
    assert_eq!(changes[1]["from"], r#"{"unread":0}"#);
    assert_eq!(changes[1]["to"], r#"{"unread":3}"#);
    let queued = predicate_wakeups(&client).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!(queued[0]["agent"], agent);
    assert_eq!(queued[0]["task_key"], "heartbeat:inbox:1");
    // Every tick is in the heartbeat's evaluations, none in the log.
    let (_, shown) = get(&client, "/v1/heartbeats/inbox").await;
    assert_eq!(shown["evaluations"].as_array().unwrap().len(), 5, "{shown}");
    assert_eq!(shown["counts"]["ok"], 5);
    assert_eq!(shown["state"], unread(3));
    assert_eq!(shown["transitions"], 1);
    // The node's metrics count the same ticks and the one transition.
    let metrics = ApiClient::with_token(node.local_addr(), NODE_OPERATOR);
    let scraped = metrics.get("/metrics").await.unwrap();
    let text = String::from_utf8(scraped.body.to_vec()).unwrap();
    assert!(
        text.contains("vigil_heartbeat_evaluations_total{status=\"ok\"} 5\n"),
        "{text}"
    );
    assert!(
        text.contains("vigil_heartbeat_transitions_total 1\n"),
        "{text}"
    );
    node.stop();
}

#[tokio::test]
async fn a_tick_while_the_last_evaluation_runs_is_skipped_not_queued() {
    let path = data_file("overlap");
    let (node, client) = start(&path, true).await;
    agent_with_heartbeat(&client, "slow", json!({})).await;
    let slow = tick(&client, "slow", json!("a"), 1_500);
    let overlapping = async {
        // Sent once the slow tick is surely under way (a bound on ordering, not a timing goal:
        // the slow one pretends to work for 1.5 s).
        tokio::time::sleep(Duration::from_millis(300)).await;
        tick(&client, "slow", json!("b"), 0).await
    };
    let (slow, overlapping) = tokio::join!(slow, overlapping);
    assert_eq!(slow["evaluated"], true);
    assert_eq!(overlapping["evaluated"], false);
    assert_eq!(overlapping["status"], "skipped");
    let (_, shown) = get(&client, "/v1/heartbeats/slow").await;
    assert_eq!(
        shown["counts"],
        json!({"ok": 1, "timeout": 0, "error": 0, "skipped": 1})
    );
    assert_eq!(shown["state"], "a", "the skipped tick observed nothing");
    node.stop();
}

#[tokio::test]
async fn an_over_budget_evaluation_is_a_timeout_and_an_oversized_state_an_error_keeping_the_prior()
{
    let path = data_file("bounds");
    let (node, client) = start(&path, true).await;
    agent_with_heartbeat(&client, "bounded", json!({"max_runtime_ms": 100})).await;
    tick(&client, "bounded", json!({"unread": 1}), 0).await;
    let late = tick(&client, "bounded", json!({"unread": 2}), 400).await;
    assert_eq!(
        late,
        json!({"evaluated": true, "status": "timeout", "stateChanged": false, "enqueuedRuns": 0})
    );
    // A state whose JSON is exactly the cap is kept; one byte more is an error.
    let fits = json!("x".repeat(HEARTBEAT_MAX_STATE_BYTES - 2));
    assert_eq!(
        tick(&client, "bounded", fits.clone(), 0).await["status"],
        "ok"
    );
    let over = json!("y".repeat(HEARTBEAT_MAX_STATE_BYTES - 1));
    let refused = tick(&client, "bounded", over, 0).await;
    assert_eq!(refused["status"], "error");
    assert_eq!(refused["stateChanged"], false);
    let (_, shown) = get(&client, "/v1/heartbeats/bounded").await;
    assert_eq!(shown["state"], fits, "the prior state is kept");
    let last = shown["evaluations"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["detail"].as_str().unwrap().contains("larger than"),
        "{last}"
    );
    assert_eq!(shown["counts"]["timeout"], 1);
    node.stop();
}

#[tokio::test]
async fn definitions_name_the_bad_field_stay_in_their_tenant_and_survive_a_restart() {
    let path = data_file("definitions");
    let (node, client) = start(&path, true).await;
    let agent = agent_with_heartbeat(&client, "inbox", json!({"interval_sec": 1})).await;
    let (_, shown) = get(&client, "/v1/heartbeats/inbox").await;
    assert_eq!(
        shown["interval_sec"], HEARTBEAT_MIN_INTERVAL_SEC,
        "raised, not refused"
    );
    let base = json!({"id": "h2", "agent": agent, "interval_sec": 60, "check": {"kind": "sample"}});
    let with = |key: &str, value: Value| {
        let mut body = base.clone();
        body[key] = value;
        body
    };
    for (body, field) in [
        (with("id", json!("Bad Id")), "id"),
        (with("interval_sec", json!(0)), "interval_sec"),
        (with("max_runtime_ms", json!(999_999)), "max_runtime_ms"),
        (
            with(
                "check",
                json!({"kind": "http", "url": "file:///etc/passwd"}),
            ),
            "check.url",
        ),
    ] {
        let (status, answer) = post(&client, "/v1/heartbeats", body).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    let (status, answer) = post(&client, "/v1/heartbeats", with("id", json!("inbox"))).await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (409, json!("id_taken"))
    );
    let (status, _) = post(&client, "/v1/heartbeats", with("agent", json!(999))).await;
    assert_eq!(status, 404);
    // Another tenant sees nothing of acme's, and cannot put a heartbeat on acme's agent.
    let globex = ApiClient::with_token(node.local_addr(), GLOBEX);
    assert_eq!(get(&globex, "/v1/heartbeats/inbox").await.0, 404);
    assert_eq!(
        get(&globex, "/v1/heartbeats").await.1["heartbeats"],
        json!([])
    );
    assert_eq!(post(&globex, "/v1/heartbeats", base.clone()).await.0, 404);
    // Durable: a restarted node holds the definition and its recorded state.
    tick(&client, "inbox", json!({"unread": 7}), 0).await;
    node.stop();
    // The stopped node's tasks let go of the database as the runtime drops them.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (node, client) = start(&path, true).await;
    let (status, shown) = get(&client, "/v1/heartbeats/inbox").await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["state"], json!({"unread": 7}));
    assert_eq!(
        shown["evaluations"],
        json!([]),
        "ticks are this process's, not the log's"
    );
    let listed = get(&client, &format!("/v1/heartbeats?agent={agent}"))
        .await
        .1;
    assert_eq!(listed["heartbeats"].as_array().unwrap().len(), 1);
    let deleted = client
        .request(hyper::Method::DELETE, "/v1/heartbeats/inbox", None)
        .await
        .unwrap();
    assert_eq!(deleted.status.as_u16(), 200);
    assert_eq!(get(&client, "/v1/heartbeats/inbox").await.0, 404);
    node.stop();
}

/// A loopback HTTP server answering every GET with `{"inbox": {"unread": N}}`, N as the test
/// sets it; with `auth`, only to requests carrying `authorization: <auth>` (401 to others).
fn inbox_server(auth: Option<&'static str>) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let unread = Arc::new(AtomicU64::new(0));
    let shared = unread.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = [0u8; 4096];
            let read = stream.read(&mut head).unwrap_or(0);
            let head = String::from_utf8_lossy(&head[..read]).to_ascii_lowercase();
            let allowed = auth.is_none_or(|auth| {
                head.contains(&format!("authorization: {}\r\n", auth.to_ascii_lowercase()))
            });
            let (status, body) = match allowed {
                true => (
                    "200 OK",
                    format!(
                        r#"{{"inbox": {{"unread": {}}}}}"#,
                        shared.load(Ordering::SeqCst)
                    ),
                ),
                false => (
                    "401 Unauthorized",
                    r#"{"error": "who are you?"}"#.to_string(),
                ),
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (addr, unread)
}

#[tokio::test]
async fn an_http_check_wakes_the_agent_once_when_its_answer_changes() {
    let (inbox, unread) = inbox_server(None);
    let path = data_file("http-check");
    let (node, client) = start(&path, false).await;
    let check = json!({"kind": "http", "url": format!("http://{inbox}/api/inbox"), "pointer": "/inbox/unread"});
    let agent =
        agent_with_heartbeat(&client, "mail", json!({"interval_sec": 1, "check": check})).await;
    let ticks = |shown: &Value| shown["counts"]["ok"].as_u64().unwrap_or(0);
    // The first tick records the baseline (0).
    let shown = wait_for(&client, "mail", |shown| ticks(shown) >= 1).await;
    assert_eq!(shown["state"], 0);
    unread.store(4, Ordering::SeqCst);
    let shown = wait_for(&client, "mail", |shown| shown["transitions"] == 1).await;
    assert_eq!(shown["state"], 4);
    let woken = predicate_wakeups(&client).await;
    assert_eq!(woken.len(), 1, "{woken:?}");
    assert_eq!(woken[0]["agent"], agent);
    // Unchanged from here on: more ticks, no more wakeups.
    let seen = ticks(&shown);
    wait_for(&client, "mail", |shown| ticks(shown) > seen).await;
    assert_eq!(predicate_wakeups(&client).await.len(), 1);
    node.stop();
}

/// The inbox's token, as the node's environment variable `INBOX_AUTH` holds it.
const INBOX_AUTH: &str = "Bearer inbox-secret-7f3a";

#[tokio::test]
async fn secret_headers_come_from_the_environment_and_are_never_shown() {
    let (inbox, _) = inbox_server(Some(INBOX_AUTH));
    let path = data_file("secret-headers");
    let mut config = config(&path, false);
    config.run_services.secrets =
        Arc::new(|name: &str| (name == "INBOX_AUTH").then(|| INBOX_AUTH.to_string()));
    let mut node = Node::start(config).await.expect("node starts");
    node.ready().await.expect("node recovers");
    let client = ApiClient::with_token(node.local_addr(), ACME);
    let url = format!("http://{inbox}/api/inbox");
    let check = json!({"kind": "http", "url": url, "pointer": "/inbox/unread", "secret_headers": {"Authorization": "INBOX_AUTH"}});
    agent_with_heartbeat(&client, "mail", json!({"interval_sec": 1, "check": check})).await;
    let shown = wait_for(&client, "mail", |shown| {
        shown["counts"]["ok"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(shown["state"], 0, "the server let the check in: {shown}");
    // Without the variable set, the check says which one is missing, and the server refuses it.
    let unset = json!({"kind": "http", "url": url, "secret_headers": {"authorization": "NOT_SET_ANYWHERE"}});
    agent_with_heartbeat(&client, "unset", json!({"interval_sec": 1, "check": unset})).await;
    let shown = wait_for(&client, "unset", |shown| {
        shown["counts"]["error"].as_u64() >= Some(1)
    })
    .await;
    let detail = shown["evaluations"][0]["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        detail.contains("NOT_SET_ANYWHERE") && detail.contains("not set"),
        "{detail}"
    );
    // The value is in no answer and no event.
    let (_, listed) = get(&client, "/v1/heartbeats").await;
    let (_, events) = get(&client, "/v1/events?limit=1000").await;
    for text in [listed.to_string(), events.to_string(), shown.to_string()] {
        assert!(!text.contains("inbox-secret"), "{text}");
    }
    assert!(
        listed.to_string().contains("INBOX_AUTH"),
        "the variable's name is the definition"
    );
    node.stop();
}

/// Polls the heartbeat until `done` holds of it (at most `WAIT_MS_MAX`).
async fn wait_for(client: &ApiClient, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let (status, shown) = get(client, &format!("/v1/heartbeats/{id}")).await;
        assert_eq!(status, 200, "{shown}");
        if done(&shown) {
            return shown;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Processes whose command line holds `marker` as an argument (read from `/proc`).
fn processes_with(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .filter(|cmdline| {
            cmdline
                .split(|b| *b == 0)
                .any(|arg| arg == marker.as_bytes())
        })
        .count()
}

#[tokio::test]
async fn a_command_check_reads_stdout_and_a_hanging_one_is_killed_with_its_group() {
    let path = data_file("command-check");
    let state_file = path.with_file_name("unread");
    std::fs::write(&state_file, "0\n").unwrap();
    let (node, client) = start(&path, false).await;
    let check =
        json!({"kind": "command", "command": "cat", "args": [state_file.to_str().unwrap()]});
    agent_with_heartbeat(&client, "count", json!({"interval_sec": 1, "check": check})).await;
    let shown = wait_for(&client, "count", |shown| {
        shown["counts"]["ok"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(shown["state"], 0, "stdout parsed as JSON: {shown}");
    std::fs::write(&state_file, "new mail\n").unwrap();
    let shown = wait_for(&client, "count", |shown| shown["transitions"] == 1).await;
    assert_eq!(shown["state"], "new mail", "not JSON: the text");
    // A check that never ends: a timeout at its budget, and no process of it left.
    let marker = format!("31.{}", std::process::id());
    let hang = json!({"kind": "command", "command": "sleep", "args": [marker]});
    agent_with_heartbeat(
        &client,
        "hang",
        json!({"interval_sec": 1, "check": hang, "max_runtime_ms": 300}),
    )
    .await;
    let shown = wait_for(&client, "hang", |shown| {
        shown["counts"]["timeout"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(shown["state"], Value::Null, "nothing observed: {shown}");
    let deadline = std::time::Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    // Between ticks (every 5 s, each killed after 300 ms) no `sleep` of it may be left for long.
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if processes_with(&marker) == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hanging check outlived its budget"
        );
    }
    // A command that fails is an error, the prior state kept.
    std::fs::remove_file(&state_file).unwrap();
    let errors = |shown: &Value| shown["counts"]["error"].as_u64().unwrap_or(0);
    let shown = wait_for(&client, "count", |shown| errors(shown) >= 1).await;
    assert_eq!(shown["state"], "new mail");
    let last = shown["evaluations"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["detail"]
            .as_str()
            .unwrap()
            .contains("exited with code"),
        "{last}"
    );
    node.stop();
}

#[tokio::test]
async fn a_heartbeat_deleted_and_defined_again_ticks_on_its_new_interval_at_once() {
    let path = data_file("redefine");
    let state_file = path.with_file_name("state");
    std::fs::write(&state_file, "7\n").unwrap();
    let (node, client) = start(&path, false).await;
    let check =
        json!({"kind": "command", "command": "cat", "args": [state_file.to_str().unwrap()]});
    let agent = agent_with_heartbeat(&client, "slow", json!({"check": check.clone()})).await;
    let deleted = client
        .request(hyper::Method::DELETE, "/v1/heartbeats/slow", None)
        .await
        .unwrap();
    assert_eq!(deleted.status.as_u16(), 200);
    // The same id, every 5 s now: it must not wait out the old definition's hour.
    let body = json!({"id": "slow", "agent": agent, "interval_sec": 1, "check": check});
    assert_eq!(post(&client, "/v1/heartbeats", body).await.0, 201);
    let shown = wait_for(&client, "slow", |shown| {
        shown["counts"]["ok"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(shown["state"], 7);
    node.stop();
}
