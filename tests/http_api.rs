//! The HTTP API over real TCP and a real database file (real tokio): every endpoint, every
//! bad-input case, the cross-tenant and cross-agent refusals, the live event stream, and runs of
//! the scripted adapter ending every way a run can end.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use vigil::api::client::ApiClient;
use vigil::api::AGENTS_PAGE_MAX;
use vigil::api::BODY_BYTES_MAX;
use vigil::io::clock::Clock;
use vigil::io::entropy::SeededEntropy;
use vigil::io::storage::StorageLocation;
use vigil::node::{Node, NodeConfig, TenantToken};

/// Wall time (`.0`) and monotonic time (`.1`, ms) the test sets by hand.
#[derive(Debug)]
struct ManualClock(AtomicU64, AtomicU64);

impl ManualClock {
    fn at(wall_ms: u64) -> Arc<Self> {
        Arc::new(ManualClock(AtomicU64::new(wall_ms), AtomicU64::new(0)))
    }
}

impl Clock for ManualClock {
    fn wall_now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn mono_now(&self) -> Duration {
        Duration::from_millis(self.1.load(Ordering::SeqCst))
    }
}

const START_MS: u64 = 1_800_000_000_000;
const ACME: &str = "acme-operator-token";
const GLOBEX: &str = "globex-operator-token";
/// Longest a test waits for something asynchronous (a run to end, a timer to fire) before it
/// fails; a bound on waiting, never a timing goal.
const WAIT_MS_MAX: u64 = 10_000;

fn data_file(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-http-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("vigil.redb")
}

fn config(storage: StorageLocation, clock: Arc<ManualClock>) -> NodeConfig {
    NodeConfig {
        listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        storage,
        clock,
        entropy: SeededEntropy::shared(7),
        tenants: vec![
            TenantToken {
                tenant: "acme".into(),
                token: ACME.into(),
            },
            TenantToken {
                tenant: "globex".into(),
                token: GLOBEX.into(),
            },
        ],
        on_commit: None,
        on_replayed: None,
        adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
        // The stub provider listens on loopback, which the default address policy keeps from
        // tenant acme: allow it, as `[outbound] allow` in a node config does.
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
        heartbeat_test_seam: false,
    }
}

/// A ready node on a fresh file, and a client per tenant operator.
struct Fixture {
    node: Node,
    acme: ApiClient,
    globex: ApiClient,
    clock: Arc<ManualClock>,
    path: std::path::PathBuf,
}

async fn start(test: &str) -> Fixture {
    let path = data_file(test);
    let clock = ManualClock::at(START_MS);
    start_on(path, clock).await
}

async fn start_on(path: std::path::PathBuf, clock: Arc<ManualClock>) -> Fixture {
    let mut node = Node::start(config(StorageLocation::File(path.clone()), clock.clone()))
        .await
        .expect("node starts");
    node.ready().await.expect("node recovers");
    let addr = node.local_addr();
    Fixture {
        node,
        acme: ApiClient::with_token(addr, ACME),
        globex: ApiClient::with_token(addr, GLOBEX),
        clock,
        path,
    }
}

impl Fixture {
    fn as_token(&self, token: &str) -> ApiClient {
        ApiClient::with_token(self.node.local_addr(), token)
    }

    fn anonymous(&self) -> ApiClient {
        ApiClient::new(self.node.local_addr())
    }
}

async fn post(client: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = client.post_json(path, &body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

async fn post_empty(client: &ApiClient, path: &str) -> (u16, Value) {
    let answer = client
        .request(hyper::Method::POST, path, None)
        .await
        .unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

async fn get(client: &ApiClient, path: &str) -> (u16, Value) {
    let answer = client.get(path).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

fn assert_error(answer: &(u16, Value), status: u16, code: &str, field: Option<&str>) {
    assert_eq!(answer.0, status, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], code, "{}", answer.1);
    assert!(answer.1["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    match field {
        Some(field) => assert_eq!(answer.1["error"]["field"], field, "{}", answer.1),
        None => assert!(answer.1["error"].get("field").is_none(), "{}", answer.1),
    }
}

/// Creates an agent; returns (id, token).
async fn create(client: &ApiClient, spec: Value) -> (u64, String) {
    let (status, created) = post(client, "/v1/agents", spec).await;
    assert_eq!(status, 201, "{created}");
    (
        created["agent"]["id"].as_u64().unwrap(),
        created["token"].as_str().unwrap().to_string(),
    )
}

fn script(steps: Value) -> Value {
    json!({ "type": "scripted", "steps": steps })
}

async fn wake(client: &ApiClient, agent: u64, body: Value) -> (u16, Value) {
    post(client, &format!("/v1/agents/{agent}/wakeup"), body).await
}

/// Polls run `run` until `done(run)` holds (bounded).
async fn wait_run(client: &ApiClient, run: u64, done: impl Fn(&Value) -> bool) -> Value {
    wait_page(client, &format!("/v1/runs/{run}"), done).await
}

fn terminal(run: &Value) -> bool {
    !matches!(run["status"].as_str(), Some("queued" | "running"))
}

/// A redb backend whose every call waits until the test opens its gate: recovery that takes as
/// long as the test wants.
#[derive(Debug)]
struct GatedBackend {
    inner: redb::backends::InMemoryBackend,
    open: Arc<(Mutex<bool>, Condvar)>,
}

impl GatedBackend {
    fn wait(&self) {
        let (lock, opened) = &*self.open;
        let mut open = lock.lock().unwrap();
        while !*open {
            open = opened.wait(open).unwrap();
        }
    }
}

impl redb::StorageBackend for GatedBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.wait();
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.wait();
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.wait();
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.wait();
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.wait();
        self.inner.write(offset, data)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_listens_and_answers_recovering_before_it_is_ready() {
    let open = Arc::new((Mutex::new(false), Condvar::new()));
    let backend = GatedBackend {
        inner: redb::backends::InMemoryBackend::new(),
        open: open.clone(),
    };
    let clock = ManualClock::at(START_MS);
    let mut node = Node::start(config(StorageLocation::with_memory_wal(Box::new(backend)), clock))
        .await
        .expect("node listens");
    let anonymous = ApiClient::new(node.local_addr());
    assert_eq!(
        get(&anonymous, "/v1/health").await,
        (503, json!({"status": "recovering"}))
    );
    let acme = ApiClient::with_token(node.local_addr(), ACME);
    assert_error(&get(&acme, "/v1/agents").await, 503, "recovering", None);
    // The API's description takes no token but waits for readiness like the rest.
    assert_error(&get(&anonymous, "/v1/openapi.json").await, 503, "recovering", None);
    {
        let (lock, opened) = &*open;
        *lock.lock().unwrap() = true;
        opened.notify_all();
    }
    node.ready().await.expect("recovers once the disk answers");
    let (status, health) = get(&anonymous, "/v1/health").await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    assert_eq!(get(&acme, "/v1/agents").await.0, 200);
    assert_eq!(get(&anonymous, "/v1/openapi.json").await.0, 200);
    node.stop();
}

#[tokio::test]
async fn agents_are_created_listed_shown_and_scoped_to_their_tenant() {
    let f = start("agents").await;
    let (status, created) = post(
        &f.acme,
        "/v1/agents",
        json!({"name": "scout", "heartbeat": {"interval_ms": 60_000}, "time_zone": "Europe/Paris"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["agent"]["id"].as_u64().unwrap();
    let token = created["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("vgl_agent_"), "{token}");
    assert_eq!(created["agent"]["tenant"], "acme");
    assert_eq!(created["agent"]["status"], "active");
    assert_eq!(created["agent"]["spec"]["time_zone"], "Europe/Paris");
    assert_eq!(created["agent"]["spec"]["limits"]["queued_runs_max"], 16);
    let first_slot = created["agent"]["next_fire_at_ms"].as_u64().unwrap();
    assert!(
        (START_MS + 60_000..=START_MS + 66_000).contains(&first_slot),
        "{first_slot}"
    );
    assert!(
        created["agent"].get("token_hash").is_none(),
        "hashes are not served"
    );

    let (_, listing) = get(&f.acme, "/v1/agents").await;
    assert_eq!(listing["now_ms"], START_MS);
    assert_eq!(listing["agents"].as_array().unwrap().len(), 1);
    assert_eq!(
        get(&f.acme, &format!("/v1/agents/{id}")).await.1["name"],
        "scout"
    );

    // The same name in another tenant is a different agent; neither tenant sees the other's.
    let (other, _) = create(&f.globex, json!({"name": "scout"})).await;
    assert_ne!(other, id);
    assert_eq!(
        get(&f.globex, "/v1/agents").await.1["agents"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_error(
        &get(&f.globex, &format!("/v1/agents/{id}")).await,
        404,
        "not_found",
        None,
    );
    assert_error(
        &get(&f.acme, &format!("/v1/agents/{other}")).await,
        404,
        "not_found",
        None,
    );

    // The agent's own token reads itself, nothing else, and cannot operate.
    let agent = f.as_token(&token);
    assert_eq!(get(&agent, &format!("/v1/agents/{id}")).await.0, 200);
    assert_error(&get(&agent, "/v1/agents").await, 403, "forbidden", None);
    assert_error(
        &post(&agent, "/v1/agents", json!({"name": "x"})).await,
        403,
        "forbidden",
        None,
    );
    let (sibling, _) = create(&f.acme, json!({"name": "sibling"})).await;
    assert_error(
        &get(&agent, &format!("/v1/agents/{sibling}")).await,
        403,
        "forbidden",
        None,
    );

    // No token, a malformed header, an unknown token.
    assert_error(
        &get(&f.anonymous(), "/v1/agents").await,
        401,
        "unauthenticated",
        None,
    );
    assert_error(
        &get(&f.as_token("nobody"), "/v1/agents").await,
        401,
        "unauthenticated",
        None,
    );
    assert_error(
        &get(&f.acme, "/v1/agents/999").await,
        404,
        "not_found",
        None,
    );
    assert_error(
        &get(&f.acme, "/v1/agents/abc").await,
        400,
        "invalid_field",
        Some("id"),
    );
    assert_error(&get(&f.acme, "/v1/nowhere").await, 404, "not_found", None);
    let (status, body) = post(&f.acme, &format!("/v1/agents/{id}"), json!({})).await;
    assert_error(&(status, body), 405, "method_not_allowed", None);
    f.node.stop();
}

#[tokio::test]
async fn agent_lists_come_in_pages_by_id_and_find_one_name() {
    let f = start("agent_pages").await;
    // Two tenants' agents interleave in id order; each tenant pages through its own only.
    let mut acme = Vec::new();
    for i in 0..5 {
        acme.push(create(&f.acme, json!({"name": format!("a{i}")})).await.0);
        create(&f.globex, json!({"name": format!("g{i}")})).await;
    }
    let ids = |page: &Value| -> Vec<u64> {
        page["agents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_u64().unwrap())
            .collect()
    };
    let (status, first) = get(&f.acme, "/v1/agents?limit=2").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(ids(&first), acme[..2]);
    assert_eq!(first["next_after"], acme[1]);
    let second = get(&f.acme, &format!("/v1/agents?limit=2&after={}", acme[1]))
        .await
        .1;
    assert_eq!(ids(&second), acme[2..4]);
    let last = get(&f.acme, &format!("/v1/agents?limit=2&after={}", acme[3]))
        .await
        .1;
    assert_eq!(ids(&last), acme[4..]);
    assert!(
        last.get("next_after").is_none(),
        "the last page says so: {last}"
    );
    // A page that ends exactly at the last agent has nothing after it either.
    let exact = get(&f.acme, "/v1/agents?limit=5").await.1;
    assert_eq!(ids(&exact), acme);
    assert!(exact.get("next_after").is_none(), "{exact}");
    // Without `limit`, a fleet this small is one page, as before paging.
    let whole = get(&f.acme, "/v1/agents").await.1;
    assert_eq!(ids(&whole), acme);
    assert!(whole.get("next_after").is_none(), "{whole}");

    // One name: the agent or nothing, within the caller's tenant.
    assert_eq!(ids(&get(&f.acme, "/v1/agents?name=a3").await.1), [acme[3]]);
    assert!(ids(&get(&f.acme, "/v1/agents?name=g3").await.1).is_empty());
    assert!(ids(&get(&f.acme, "/v1/agents?name=nobody").await.1).is_empty());

    // `view=brief`: the same agents and pages, each without its spec; `view=whole` is the default.
    let brief = get(&f.acme, "/v1/agents?view=brief&limit=2").await.1;
    assert_eq!(ids(&brief), acme[..2]);
    assert_eq!(brief["next_after"], acme[1]);
    let whole_first = &first["agents"][0];
    let brief_first = &brief["agents"][0];
    for key in ["id", "name", "status", "next_fire_at_ms", "paused_until_ms", "breaker"] {
        assert_eq!(brief_first[key], whole_first[key], "{key}: {brief_first}");
    }
    assert_eq!(brief_first["liveness"], whole_first["liveness"]["status"]);
    assert!(brief_first.get("spec").is_none(), "{brief_first}");
    assert_eq!(
        get(&f.acme, "/v1/agents?view=whole&limit=2").await.1["agents"],
        first["agents"]
    );

    // `limit` at its bounds; bad parameters are refused naming themselves.
    assert_eq!(
        get(&f.acme, &format!("/v1/agents?limit={AGENTS_PAGE_MAX}"))
            .await
            .0,
        200
    );
    assert_eq!(ids(&get(&f.acme, "/v1/agents?limit=1").await.1), acme[..1]);
    for (query, field) in [
        ("limit=0".to_string(), "limit"),
        (format!("limit={}", AGENTS_PAGE_MAX + 1), "limit"),
        ("after=-1".to_string(), "after"),
        ("since=3".to_string(), "since"),
        ("view=short".to_string(), "view"),
    ] {
        assert_error(
            &get(&f.acme, &format!("/v1/agents?{query}")).await,
            400,
            "invalid_field",
            Some(field),
        );
    }
    f.node.stop();
}

#[tokio::test]
async fn bad_agent_input_is_refused_naming_the_field_and_changes_nothing() {
    let f = start("bad-input").await;
    let head_before = get(&f.acme, "/v1/events").await.1["head_seq"].clone();
    let cases = [
        (json!({"heartbeat": {"interval_ms": 60_000}}), "name"),
        (json!({"name": ""}), "name"),
        (json!({"name": "no spaces"}), "name"),
        (json!({"name": "x".repeat(65)}), "name"),
        (
            json!({"name": "a", "heartbeat": {"interval_ms": 999}}),
            "heartbeat.interval_ms",
        ),
        (
            json!({"name": "a", "heartbeat": {"interval_ms": 604_800_001_u64}}),
            "heartbeat.interval_ms",
        ),
        (
            json!({"name": "a", "heartbeat": {"interval_ms": "soon"}}),
            "heartbeat.interval_ms",
        ),
        (
            json!({"name": "a", "heartbeat": {"sources": ["timer", "timer"]}}),
            "heartbeat.sources",
        ),
        (
            json!({"name": "a", "heartbeat": {"sources": ["email"]}}),
            "heartbeat.sources[0]",
        ),
        (
            json!({"name": "a", "time_zone": "Mars/Olympus"}),
            "time_zone",
        ),
        (
            json!({"name": "a", "limits": {"run_timeout_ms": 999}}),
            "limits.run_timeout_ms",
        ),
        (
            json!({"name": "a", "limits": {"queued_runs_max": 0}}),
            "limits.queued_runs_max",
        ),
        (
            json!({"name": "a", "limits": {"queued_runs_max": 1001}}),
            "limits.queued_runs_max",
        ),
        (
            json!({"name": "a", "limits": {"daily_cap": 0}}),
            "limits.daily_cap",
        ),
        (
            json!({"name": "a", "limits": {"cooldown_ms": -1}}),
            "limits.cooldown_ms",
        ),
        (
            json!({"name": "a", "limits": {"cooldown_ms": 86_400_001_u64}}),
            "limits.cooldown_ms",
        ),
        (
            json!({"name": "a", "breaker": {"failures_to_open": 0}}),
            "breaker.failures_to_open",
        ),
        (
            json!({"name": "a", "adapter": script(json!([]))}),
            "adapter.steps",
        ),
        (json!({"name": "a", "colour": "red"}), "colour"),
        (
            json!({"name": "a", "limits": {"colour": 1}}),
            "limits.colour",
        ),
    ];
    for (body, field) in cases {
        let answer = post(&f.acme, "/v1/agents", body.clone()).await;
        assert_error(&answer, 400, "invalid_field", Some(field));
    }
    let not_json = f
        .acme
        .request(
            hyper::Method::POST,
            "/v1/agents",
            Some(b"{not json".to_vec()),
        )
        .await
        .unwrap();
    assert_error(
        &(not_json.status.as_u16(), not_json.json().unwrap()),
        400,
        "invalid_json",
        None,
    );
    let huge = json!({"name": "a", "pad": "x".repeat(BODY_BYTES_MAX)});
    assert_error(
        &post(&f.acme, "/v1/agents", huge).await,
        413,
        "body_too_large",
        None,
    );
    // None of it reached the log.
    assert_eq!(get(&f.acme, "/v1/events").await.1["head_seq"], head_before);

    create(&f.acme, json!({"name": "a"})).await;
    let duplicate = post(&f.acme, "/v1/agents", json!({"name": "a"})).await;
    assert_error(&duplicate, 409, "name_taken", Some("name"));
    f.node.stop();
}

#[tokio::test]
async fn wakeups_queue_coalesce_replay_and_are_refused_with_a_reason() {
    let f = start("wakeups").await;
    let hang = script(json!([{ "duration_ms": 0, "outcome": "hang" }]));
    let (id, token) = create(
        &f.acme,
        json!({"name": "a", "adapter": hang, "limits": {"queued_runs_max": 2}}),
    )
    .await;

    let (status, first) = wake(
        &f.acme,
        id,
        json!({"source": "on_demand", "reason": "hello"}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["outcome"], "queued");
    assert_eq!(first["replayed"], false);
    let running = first["run"].as_u64().unwrap();
    wait_run(&f.acme, running, |r| r["status"] == "running").await;

    // Two wakeups for one task key: one queued run, the second coalesces (latest reason kept).
    let (_, queued) = wake(
        &f.acme,
        id,
        json!({"source": "timer", "task_key": "inbox", "reason": "one"}),
    )
    .await;
    assert_eq!(queued["outcome"], "queued");
    let (_, coalesced) = wake(
        &f.acme,
        id,
        json!({"source": "on_demand", "task_key": "inbox", "reason": "two"}),
    )
    .await;
    assert_eq!(coalesced["outcome"], "coalesced");
    assert_eq!(coalesced["run"], queued["run"]);
    assert_eq!(coalesced["coalesced_count"], 1);
    let (_, run) = get(&f.acme, &format!("/v1/runs/{}", queued["run"])).await;
    assert_eq!(run["reason"], "two");
    assert_eq!(run["priority"], "on_demand");

    // An idempotency key replays the original answer and records nothing.
    let keyed = json!({"source": "assignment", "task_key": "t2", "idempotency_key": "k-1"});
    let (_, original) = wake(&f.acme, id, keyed.clone()).await;
    assert_eq!(original["outcome"], "queued");
    let head = get(&f.acme, "/v1/events").await.1["head_seq"].clone();
    let (_, replay) = wake(&f.acme, id, keyed).await;
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["wakeup"], original["wakeup"]);
    assert_eq!(replay["run"], original["run"]);
    assert_eq!(get(&f.acme, "/v1/events").await.1["head_seq"], head);

    // The queue holds two: a third task key is refused, and the refusal is an event.
    let (_, full) = wake(
        &f.acme,
        id,
        json!({"source": "on_demand", "task_key": "t3"}),
    )
    .await;
    assert_eq!(full["outcome"], "refused");
    assert_eq!(full["refusal"], "queue_full");
    let (_, page) = get(&f.acme, &format!("/v1/events?after={head}")).await;
    assert_eq!(
        page["events"].as_array().unwrap().last().unwrap()["type"],
        "wakeup_refused"
    );

    // The agent's own token wakes itself.
    let (status, own) = wake(
        &f.as_token(&token),
        id,
        json!({"source": "on_demand", "task_key": "inbox"}),
    )
    .await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["outcome"], "coalesced");

    // A source the policy does not accept.
    let (picky, _) = create(
        &f.acme,
        json!({"name": "picky", "heartbeat": {"sources": ["on_demand"]}}),
    )
    .await;
    let (_, refused) = wake(&f.acme, picky, json!({"source": "automation"})).await;
    assert_eq!(refused["refusal"], "disabled_source");

    // Paused and terminated agents take no wakeups.
    assert_eq!(
        post_empty(&f.acme, &format!("/v1/agents/{picky}/pause"))
            .await
            .1["status"],
        "paused"
    );
    assert_eq!(
        wake(&f.acme, picky, json!({"source": "on_demand"})).await.1["refusal"],
        "paused"
    );
    assert_eq!(
        post_empty(&f.acme, &format!("/v1/agents/{picky}/terminate"))
            .await
            .1["status"],
        "terminated"
    );
    assert_eq!(
        wake(&f.acme, picky, json!({"source": "on_demand"})).await.1["refusal"],
        "terminated"
    );
    f.node.stop();
}

#[tokio::test]
async fn bad_wakeups_are_refused_naming_the_field_and_scoped() {
    let f = start("bad-wakeups").await;
    let (id, _) = create(&f.acme, json!({"name": "a"})).await;
    let (other, other_token) = create(&f.acme, json!({"name": "b"})).await;
    let cases = [
        (json!({}), "source"),
        (json!({"source": "email"}), "source"),
        (
            json!({"source": "on_demand", "reason": "x".repeat(501)}),
            "reason",
        ),
        (json!({"source": "on_demand", "task_key": ""}), "task_key"),
        (
            json!({"source": "on_demand", "idempotency_key": "k".repeat(201)}),
            "idempotency_key",
        ),
        (
            json!({"source": "on_demand", "payload": "p".repeat(16 * 1024)}),
            "payload",
        ),
        (json!({"source": "on_demand", "priority": 1}), "priority"),
    ];
    for (body, field) in cases {
        assert_error(
            &wake(&f.acme, id, body).await,
            400,
            "invalid_field",
            Some(field),
        );
    }
    assert_error(
        &wake(&f.acme, 999, json!({"source": "on_demand"})).await,
        404,
        "not_found",
        None,
    );
    assert_error(
        &wake(&f.globex, id, json!({"source": "on_demand"})).await,
        404,
        "not_found",
        None,
    );
    let other_agent = f.as_token(&other_token);
    assert_error(
        &wake(&other_agent, id, json!({"source": "on_demand"})).await,
        403,
        "forbidden",
        None,
    );
    assert_eq!(
        wake(&other_agent, other, json!({"source": "on_demand"}))
            .await
            .0,
        200
    );
    f.node.stop();
}

#[tokio::test]
async fn runs_end_every_way_and_the_next_queued_run_starts_by_itself() {
    let f = start("runs").await;
    let steps = json!([
        { "duration_ms": 10, "outcome": "succeeded" },
        { "duration_ms": 10, "outcome": "failed" },
        { "duration_ms": 0, "outcome": "hang" },
        { "duration_ms": 0, "outcome": "hang" },
        { "duration_ms": 10, "outcome": "succeeded" },
    ]);
    let (id, token) = create(
        &f.acme,
        json!({"name": "a", "adapter": script(steps), "limits": {"run_timeout_ms": 1_000}}),
    )
    .await;
    let run_of = |answer: (u16, Value)| answer.1["run"].as_u64().unwrap();
    let r0 = run_of(wake(&f.acme, id, json!({"source": "on_demand", "task_key": "0"})).await);
    assert_eq!(wait_run(&f.acme, r0, terminal).await["status"], "succeeded");
    let r1 = run_of(wake(&f.acme, id, json!({"source": "on_demand", "task_key": "1"})).await);
    assert_eq!(wait_run(&f.acme, r1, terminal).await["status"], "failed");
    // A hanging run meets its timeout.
    let r2 = run_of(wake(&f.acme, id, json!({"source": "on_demand", "task_key": "2"})).await);
    let timed_out = wait_run(&f.acme, r2, terminal).await;
    assert_eq!(timed_out["status"], "timed_out");
    // A hanging run cancelled over the API; the run queued behind it starts by itself.
    let r3 = run_of(wake(&f.acme, id, json!({"source": "on_demand", "task_key": "3"})).await);
    wait_run(&f.acme, r3, |r| r["status"] == "running").await;
    let r4 = run_of(wake(&f.acme, id, json!({"source": "timer", "task_key": "4"})).await);
    assert_eq!(
        get(&f.acme, &format!("/v1/runs/{r4}")).await.1["status"],
        "queued"
    );
    // Only an operator cancels.
    let agent = f.as_token(&token);
    assert_error(
        &post_empty(&agent, &format!("/v1/runs/{r3}/cancel")).await,
        403,
        "forbidden",
        None,
    );
    let (status, cancelled) = post_empty(&f.acme, &format!("/v1/runs/{r3}/cancel")).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(wait_run(&f.acme, r4, terminal).await["status"], "succeeded");
    assert_error(
        &post_empty(&f.acme, &format!("/v1/runs/{r3}/cancel")).await,
        409,
        "run_finished",
        None,
    );

    // Listing: newest first, filters, limits.
    let (_, all) = get(&f.acme, "/v1/runs").await;
    let ids: Vec<u64> = all["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![r4, r3, r2, r1, r0]);
    let (_, failed) = get(&f.acme, &format!("/v1/runs?agent={id}&status=failed")).await;
    assert_eq!(failed["runs"].as_array().unwrap().len(), 1);
    assert_eq!(
        get(&f.acme, "/v1/runs?limit=2").await.1["runs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_error(
        &get(&f.acme, "/v1/runs?status=done").await,
        400,
        "invalid_field",
        Some("status"),
    );
    assert_error(
        &get(&f.acme, "/v1/runs?limit=0").await,
        400,
        "invalid_field",
        Some("limit"),
    );
    assert_error(
        &get(&f.acme, "/v1/runs?agent=x").await,
        400,
        "invalid_field",
        Some("agent"),
    );
    assert_error(
        &get(&f.acme, "/v1/runs?colour=1").await,
        400,
        "invalid_field",
        Some("colour"),
    );
    assert_error(
        &get(&f.acme, "/v1/runs/abc").await,
        400,
        "invalid_field",
        Some("id"),
    );
    assert_error(&get(&f.acme, "/v1/runs/999").await, 404, "not_found", None);

    // Scoping: another tenant sees none of it; an agent token sees its own runs only.
    assert_eq!(get(&f.globex, "/v1/runs").await.1["runs"], json!([]));
    assert_error(
        &get(&f.globex, &format!("/v1/runs/{r0}")).await,
        404,
        "not_found",
        None,
    );
    assert_error(
        &post_empty(&f.globex, &format!("/v1/runs/{r0}/cancel")).await,
        404,
        "not_found",
        None,
    );
    assert_eq!(
        get(&agent, "/v1/runs").await.1["runs"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    let (other, _) = create(&f.acme, json!({"name": "other"})).await;
    assert_error(
        &get(&agent, &format!("/v1/runs?agent={other}")).await,
        403,
        "forbidden",
        None,
    );
    f.node.stop();
}

#[tokio::test]
async fn pauses_resume_terminate_and_the_breaker_reset() {
    let f = start("control").await;
    let hang = script(json!([{ "duration_ms": 0, "outcome": "hang" }]));
    let (id, token) = create(
        &f.acme,
        json!({"name": "a", "adapter": hang, "heartbeat": {"interval_ms": 60_000}}),
    )
    .await;
    let run = wake(&f.acme, id, json!({"source": "on_demand"})).await.1["run"]
        .as_u64()
        .unwrap();
    wait_run(&f.acme, run, |r| r["status"] == "running").await;

    // The agent rests: pause_heartbeats clamps to 1..=60 minutes and cancels the running run.
    let agent = f.as_token(&token);
    let (status, paused) = post(
        &agent,
        &format!("/v1/agents/{id}/pause_heartbeats"),
        json!({"minutes": 90}),
    )
    .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["paused_until_ms"], START_MS + 60 * 60_000);
    assert_eq!(paused["paused_by"], "agent");
    assert_eq!(
        wait_run(&f.acme, run, terminal).await["status"],
        "cancelled"
    );
    assert_eq!(
        wake(&f.acme, id, json!({"source": "timer"})).await.1["refusal"],
        "paused"
    );
    // A shorter rest (the default 2 minutes) never cuts the longer pause in force.
    let (_, defaulted) = post_empty(&agent, &format!("/v1/agents/{id}/pause_heartbeats")).await;
    assert_eq!(defaulted["paused_until_ms"], START_MS + 60 * 60_000);

    // An operator's timed pause is bounded and names the field.
    let bad = post(
        &f.acme,
        &format!("/v1/agents/{id}/pause"),
        json!({"minutes": 0}),
    )
    .await;
    assert_error(&bad, 400, "invalid_field", Some("minutes"));
    let unknown = post(
        &f.acme,
        &format!("/v1/agents/{id}/pause"),
        json!({"hours": 1}),
    )
    .await;
    assert_error(&unknown, 400, "invalid_field", Some("hours"));
    // A shorter operator pause leaves the longer one in force; after a resume it applies.
    let (_, kept) = post(
        &f.acme,
        &format!("/v1/agents/{id}/pause"),
        json!({"minutes": 30}),
    )
    .await;
    assert_eq!(kept["paused_until_ms"], START_MS + 60 * 60_000);
    post_empty(&f.acme, &format!("/v1/agents/{id}/resume")).await;
    let (_, timed) = post(
        &f.acme,
        &format!("/v1/agents/{id}/pause"),
        json!({"minutes": 30}),
    )
    .await;
    assert_eq!(timed["paused_until_ms"], START_MS + 30 * 60_000);
    assert_eq!(timed["paused_by"], "operator");
    assert_eq!(
        post_empty(&f.acme, &format!("/v1/agents/{id}/resume"))
            .await
            .1["paused_until_ms"],
        Value::Null
    );
    // Only operators pause for good, resume, terminate and reset.
    for action in ["pause", "resume", "terminate", "breaker/reset"] {
        assert_error(
            &post_empty(&agent, &format!("/v1/agents/{id}/{action}")).await,
            403,
            "forbidden",
            None,
        );
        assert_error(
            &post_empty(&f.globex, &format!("/v1/agents/{id}/{action}")).await,
            404,
            "not_found",
            None,
        );
    }
    let (status, reset) = post_empty(&f.acme, &format!("/v1/agents/{id}/breaker/reset")).await;
    assert_eq!(status, 200, "{reset}");
    assert_eq!(reset["breaker"]["state"], "closed");
    assert_eq!(
        post_empty(&f.acme, &format!("/v1/agents/{id}/terminate"))
            .await
            .1["status"],
        "terminated"
    );
    assert_error(
        &post_empty(&f.acme, &format!("/v1/agents/{id}/resume")).await,
        409,
        "agent_terminated",
        None,
    );
    assert_error(
        &post_empty(&f.acme, "/v1/agents/999/pause").await,
        404,
        "not_found",
        None,
    );
    f.node.stop();
}

#[tokio::test]
async fn the_event_feed_pages_resume_exactly_and_stay_within_the_tenant() {
    let f = start("events").await;
    create(
        &f.acme,
        json!({"name": "a", "heartbeat": {"interval_ms": 1_000}}),
    )
    .await;
    create(&f.globex, json!({"name": "g"})).await;
    // Jump 3.5 intervals (plus the jitter, at most a tenth) ahead: one fire stands for the
    // missed slots, never the backlog.
    f.clock.0.store(START_MS + 3_600, Ordering::SeqCst);
    let mut fired = Value::Null;
    for _ in 0..WAIT_MS_MAX / 50 {
        let (_, page) = get(&f.acme, "/v1/events?after=0&limit=1000").await;
        if let Some(event) = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["type"] == "timer_fired")
        {
            fired = event.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        fired["missed_slots"], 2,
        "the timer loop did not fire once for the backlog: {fired}"
    );

    let (_, acme_page) = get(&f.acme, "/v1/events?after=0&limit=1000").await;
    let events = acme_page["events"].as_array().unwrap();
    assert!(events.iter().all(|e| e["tenant"] == "acme"), "{acme_page}");
    let (_, globex_page) = get(&f.globex, "/v1/events?after=0&limit=1000").await;
    let theirs = globex_page["events"].as_array().unwrap();
    assert!(!theirs.is_empty() && theirs.iter().all(|e| e["tenant"] == "globex"));
    // Pages resume exactly: one event at a time yields the same sequence.
    let mut after = 0;
    let mut one_by_one = Vec::new();
    loop {
        let (_, page) = get(&f.acme, &format!("/v1/events?after={after}&limit=1")).await;
        let Some(event) = page["events"].as_array().unwrap().first().cloned() else {
            break;
        };
        assert!(event["seq"].as_u64().unwrap() > after);
        after = page["next_after"].as_u64().unwrap();
        one_by_one.push(event);
    }
    let seqs = |v: &[Value]| {
        v.iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    let all = get(&f.acme, "/v1/events?after=0&limit=1000").await.1["events"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(seqs(&one_by_one), seqs(&all));
    for (query, field) in [
        ("after=x", "after"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("since=1", "since"),
    ] {
        assert_error(
            &get(&f.acme, &format!("/v1/events?{query}")).await,
            400,
            "invalid_field",
            Some(field),
        );
    }
    f.node.stop();
}

/// Opens `GET /v1/events` as Server-Sent Events and returns the `id:` of each frame read until
/// `count` frames came (bounded by a read timeout).
fn sse_ids(addr: SocketAddr, token: &str, last_event_id: Option<u64>, count: usize) -> Vec<u64> {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(WAIT_MS_MAX)))
        .unwrap();
    let resume = last_event_id.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
    let request = format!(
        "GET /v1/events HTTP/1.1\r\nHost: vigil\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n{resume}\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut seen = String::new();
    let mut buffer = [0u8; 4096];
    let ids = |text: &str| -> Vec<u64> {
        text.lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|id| id.trim().parse().unwrap())
            .collect()
    };
    while ids(&seen).len() < count {
        let read = stream.read(&mut buffer).expect("the stream keeps sending");
        assert!(read > 0, "the stream ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(
        seen.to_lowercase()
            .contains("content-type: text/event-stream"),
        "{seen}"
    );
    ids(&seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_stream_resumes_from_last_event_id_and_carries_new_events() {
    let f = start("sse").await;
    let (id, _) = create(&f.acme, json!({"name": "a"})).await;
    create(&f.globex, json!({"name": "g"})).await;
    let (_, page) = get(&f.acme, "/v1/events?after=0&limit=1000").await;
    let acme_seqs: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let addr = f.node.local_addr();
    let all = tokio::task::spawn_blocking(move || sse_ids(addr, ACME, None, 2))
        .await
        .unwrap();
    assert_eq!(
        all, acme_seqs,
        "the stream from the start is the tenant's events"
    );
    let after_first = tokio::task::spawn_blocking({
        let first = acme_seqs[0];
        move || sse_ids(addr, ACME, Some(first), 1)
    })
    .await
    .unwrap();
    assert_eq!(
        after_first,
        acme_seqs[1..].to_vec(),
        "resumed after {}",
        acme_seqs[0]
    );

    // Events committed while a stream is open arrive on it.
    let head = *acme_seqs.last().unwrap();
    let live = tokio::task::spawn_blocking(move || sse_ids(addr, ACME, Some(head), 2));
    tokio::time::sleep(Duration::from_millis(100)).await;
    wake(&f.acme, id, json!({"source": "on_demand"})).await;
    let live = live.await.unwrap();
    assert!(
        live.iter().all(|&seq| seq > head) && live.len() >= 2,
        "{live:?}"
    );

    // A Last-Event-ID that is not a sequence number is refused, naming the header.
    let answer = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_millis(WAIT_MS_MAX))).unwrap();
        let request = format!(
            "GET /v1/events HTTP/1.1\r\nHost: vigil\r\nAuthorization: Bearer {ACME}\r\nAccept: text/event-stream\r\nLast-Event-ID: soon\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains(r#""field":"Last-Event-ID""#), "{answer}");
    f.node.stop();
}

#[tokio::test]
async fn a_restart_fails_the_running_run_and_requeues_its_wakeup_once() {
    let f = start("restart").await;
    let hang = script(json!([{ "duration_ms": 0, "outcome": "hang" }]));
    let (id, _) = create(&f.acme, json!({"name": "a", "adapter": hang})).await;
    let run = wake(
        &f.acme,
        id,
        json!({"source": "assignment", "task_key": "t"}),
    )
    .await
    .1["run"]
        .as_u64()
        .unwrap();
    wait_run(&f.acme, run, |r| r["status"] == "running").await;
    let Fixture {
        node, path, clock, ..
    } = f;
    node.stop();
    tokio::time::sleep(Duration::from_millis(50)).await;

    let f = start_on(path, clock).await;
    let (_, old) = get(&f.acme, &format!("/v1/runs/{run}")).await;
    assert_eq!(old["status"], "failed");
    assert_eq!(old["detail"], "control_plane_restart");
    let (_, runs) = get(&f.acme, &format!("/v1/runs?agent={id}")).await;
    let retries: Vec<&Value> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["retry_of"] == run)
        .collect();
    assert_eq!(retries.len(), 1, "{runs}");
    assert_eq!(retries[0]["source"], "assignment");
    assert_eq!(retries[0]["status"], "running");
    f.node.stop();
}

/// Polls agent `agent` until `done(agent)` holds (bounded).
async fn wait_agent(client: &ApiClient, agent: u64, done: impl Fn(&Value) -> bool) -> Value {
    wait_page(client, &format!("/v1/agents/{agent}"), done).await
}

/// Polls `path` until `done(page)` holds (bounded). For what the durable log shows: an agent's
/// state (`GET /v1/agents/{id}`) may show a decision a moment before its events are durable and
/// listed (ADR 0012), so a test that saw the state waits for the log too.
async fn wait_page(client: &ApiClient, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..WAIT_MS_MAX / 20 {
        let (status, body) = get(client, path).await;
        assert_eq!(status, 200, "{body}");
        if done(&body) {
            return body;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{path} never showed the expected page: {last}");
}

/// Whether an events page holds an event of type `kind`.
fn has_event(page: &Value, kind: &str) -> bool {
    page["events"].as_array().unwrap().iter().any(|e| e["type"] == kind)
}

fn liveness(agent: &Value) -> &str {
    agent["liveness"]["status"].as_str().unwrap()
}

#[tokio::test]
async fn a_threshold_lowered_while_the_agent_is_online_takes_effect_at_once() {
    let f = start("pulses-lowered").await;
    let (a, _) = create(
        &f.acme,
        json!({ "name": "a", "liveness": { "pulse_interval_ms": 3_600_000, "offline_after_misses": 1 } }),
    )
    .await;
    let (status, answer) = post_empty(&f.acme, &format!("/v1/agents/{a}/pulse")).await;
    assert_eq!((status, answer["liveness"].as_str()), (200, Some("online")));
    // The stale sweep now sleeps until the hour's threshold would pass. The operator lowers
    // it to a second, and two seconds of silence pass on the monotonic clock: the sweep must
    // look again now, not in an hour (WAIT_MS_MAX bounds the wait for it).
    let body = r#"{"liveness": {"pulse_interval_ms": 1000}}"#;
    let (status, updated) = call(
        &f.acme,
        hyper::Method::PATCH,
        &format!("/v1/agents/{a}"),
        body,
    )
    .await;
    assert_eq!(status, 200, "{updated}");
    f.clock.1.store(2_001, Ordering::SeqCst);
    wait_agent(&f.acme, a, |agent| liveness(agent) == "offline").await;
}

#[tokio::test]
async fn pulses_bring_agents_online_and_the_sweep_marks_silent_ones_offline() {
    let f = start("pulses").await;
    let (a, a_token) = create(
        &f.acme,
        json!({ "name": "a", "liveness": { "pulse_interval_ms": 1000, "offline_after_misses": 2 } }),
    )
    .await;
    let (b, b_token) = create(&f.acme, json!({ "name": "b" })).await;
    let (g, _) = create(&f.globex, json!({ "name": "g" })).await;
    let (_, shown) = get(&f.acme, &format!("/v1/agents/{a}")).await;
    assert_eq!(
        liveness(&shown),
        "unknown",
        "an agent that never pulsed is not watched"
    );

    // The agent's own pulse (an empty body) brings it online: one event.
    let agent_a = f.as_token(&a_token);
    let (status, answer) = post_empty(&agent_a, &format!("/v1/agents/{a}/pulse")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["liveness"], "online");
    let seq = answer["seq"].as_u64().unwrap();
    let (_, page) = get(&f.acme, &format!("/v1/events?after={}", seq - 1)).await;
    assert_eq!(page["events"][0]["type"], "agent_online");
    // Further pulses of an online agent write nothing.
    let (status, again) = post(&agent_a, &format!("/v1/agents/{a}/pulse"), json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(again["seq"].as_u64(), Some(seq));

    // A host's batch: b comes online, a already was; duplicates count once.
    let (status, batch) = post(&f.acme, "/v1/pulses", json!({ "agents": [a, b, b] })).await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch["accepted"], 2);
    assert_eq!(batch["came_online"], json!([b]));
    // Out of order, with a duplicate apart: each agent once, in id order.
    let (status, batch) = post(&f.acme, "/v1/pulses", json!({ "agents": [b, a, b] })).await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch["accepted"], 2);
    let answered: Vec<_> = batch["pulses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line["agent"].clone())
        .collect();
    assert_eq!(answered, vec![json!(a.min(b)), json!(a.max(b))]);
    assert_eq!(batch["came_online"], json!([]));

    // 2.001 s of silence on the monotonic clock: a (threshold 2 s) goes offline at the next
    // sweep, b (30 s) stays online. The wall clock does not matter.
    f.clock.0.fetch_add(3_600_000, Ordering::SeqCst);
    f.clock.1.store(2_001, Ordering::SeqCst);
    let offline = wait_agent(&f.acme, a, |agent| liveness(agent) == "offline").await;
    assert_eq!(offline["liveness"]["since_ms"], START_MS + 3_600_000);
    let (_, shown_b) = get(&f.acme, &format!("/v1/agents/{b}")).await;
    assert_eq!(liveness(&shown_b), "online");
    let page = wait_page(&f.acme, "/v1/events?limit=1000", |p| has_event(p, "agent_offline")).await;
    let offline_event = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "agent_offline")
        .expect("an agent_offline event");
    assert_eq!(offline_event["agent"], a);
    assert!(offline_event["silent_ms"].as_u64().unwrap() > 2_000);
    // The next pulse brings it back.
    let (_, back) = post_empty(&agent_a, &format!("/v1/agents/{a}/pulse")).await;
    assert_eq!(back["liveness"], "online");

    // Bad input and scoping.
    assert_error(
        &post(
            &agent_a,
            &format!("/v1/agents/{a}/pulse"),
            json!({ "x": 1 }),
        )
        .await,
        400,
        "invalid_field",
        Some("x"),
    );
    assert_error(
        &post_empty(&agent_a, &format!("/v1/agents/{b}/pulse")).await,
        403,
        "forbidden",
        None,
    );
    assert_error(
        &post_empty(&f.acme, &format!("/v1/agents/{g}/pulse")).await,
        404,
        "not_found",
        None,
    );
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": [] })).await,
        400,
        "invalid_field",
        Some("agents"),
    );
    let too_many: Vec<u64> = (0..=vigil::engine::liveness::PULSE_BATCH_MAX as u64).collect();
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": too_many })).await,
        400,
        "invalid_field",
        Some("agents"),
    );
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": [a, g] })).await,
        404,
        "not_found",
        Some("agents[1]"),
    );
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": "a" })).await,
        400,
        "invalid_field",
        Some("agents"),
    );
    assert_error(
        &post(
            &f.as_token(&b_token),
            "/v1/pulses",
            json!({ "agents": [b] }),
        )
        .await,
        403,
        "forbidden",
        None,
    );
    // A terminated agent's pulse is refused, and refuses the batch it is in (which changes
    // nothing: a stays as it was).
    let (status, _) = post_empty(&f.acme, &format!("/v1/agents/{b}/terminate")).await;
    assert_eq!(status, 200);
    let head = get(&f.acme, "/v1/health").await.1["head_seq"].clone();
    assert_error(
        &post_empty(&f.as_token(&b_token), &format!("/v1/agents/{b}/pulse")).await,
        409,
        "agent_terminated",
        None,
    );
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": [a, b] })).await,
        409,
        "agent_terminated",
        Some("agents"),
    );
    assert_eq!(get(&f.acme, "/v1/health").await.1["head_seq"], head);
}

#[tokio::test]
async fn pulses_carry_a_status_and_metadata_that_the_views_and_liveness_events_show() {
    use vigil::engine::pulse_report::{PULSE_METADATA_BYTES_MAX, PULSE_METADATA_KEYS_MAX};
    let f = start("pulse-reports").await;
    let (a, a_token) = create(
        &f.acme,
        json!({ "name": "a", "liveness": { "pulse_interval_ms": 1000, "offline_after_misses": 3 } }),
    )
    .await;
    let (b, _) = create(&f.acme, json!({ "name": "b" })).await;
    let agent_a = f.as_token(&a_token);

    // The answer: when the pulse came, the earliest and latest instants a silent agent is
    // judged, and what it said; the agent_online event carries the report.
    let (status, answer) = post(
        &agent_a,
        &format!("/v1/agents/{a}/pulse"),
        json!({ "status": "busy", "metadata": { "queue": 3 } }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["heartbeat_at_ms"], START_MS);
    assert_eq!(answer["next_deadline_ms"], START_MS + 3_000);
    assert_eq!(answer["offline_by_ms"], START_MS + 3_000);
    assert_eq!(answer["status"], "busy");
    assert_eq!(answer["metadata"], json!({ "queue": 3 }));
    let seq = answer["seq"].as_u64().unwrap();
    let (_, page) = get(&f.acme, &format!("/v1/events?after={}", seq - 1)).await;
    assert_eq!(page["events"][0]["type"], "agent_online");
    assert_eq!(
        page["events"][0]["report"],
        json!({ "status": "busy", "metadata": { "queue": 3 } })
    );

    // A pulse that leaves a part out keeps it; the agent view and the list show the latest.
    f.clock.0.fetch_add(500, Ordering::SeqCst);
    let (_, kept) = post(&agent_a, &format!("/v1/agents/{a}/pulse"), json!({ "status": "shutting_down" })).await;
    assert_eq!(kept["metadata"], json!({ "queue": 3 }));
    let (_, shown) = get(&f.acme, &format!("/v1/agents/{a}")).await;
    assert_eq!(shown["pulse"]["status"], "shutting_down");
    assert_eq!(shown["pulse"]["heartbeat_at_ms"], START_MS + 500);
    let (_, listing) = get(&f.acme, "/v1/agents").await;
    let listed = listing["agents"].as_array().unwrap();
    assert_eq!(listed.iter().find(|x| x["id"] == a).unwrap()["pulse"]["metadata"], json!({ "queue": 3 }));
    assert!(listed.iter().find(|x| x["id"] == b).unwrap().get("pulse").is_none(), "b never pulsed");

    // The batch takes ids and objects alike, and answers each agent's deadline and status.
    let (status, batch) = post(
        &f.acme,
        "/v1/pulses",
        json!({ "agents": [a, { "id": b, "status": "idle", "metadata": { "v": "2" } }] }),
    )
    .await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch["came_online"], json!([b]));
    assert_eq!(batch["pulses"][1], json!({ "agent": b, "next_deadline_ms": START_MS + 500 + 30_000, "status": "idle" }));
    assert_eq!(batch["pulses"][0]["status"], "shutting_down", "a bare id changes nothing said");

    // Silence: the offline event carries what the agent said last (it announced its leaving).
    f.clock.1.store(3_001, Ordering::SeqCst);
    wait_agent(&f.acme, a, |agent| liveness(agent) == "offline").await;
    let page = wait_page(&f.acme, "/v1/events?limit=1000", |p| has_event(p, "agent_offline")).await;
    let offline = page["events"].as_array().unwrap().iter().find(|e| e["type"] == "agent_offline").cloned().unwrap();
    assert_eq!(offline["report"]["status"], "shutting_down");

    // Bad input, each at its limit and named; a refused pulse changes nothing.
    let pulse_a = format!("/v1/agents/{a}/pulse");
    assert_error(&post(&agent_a, &pulse_a, json!({ "status": "sleeping" })).await, 400, "invalid_field", Some("status"));
    assert_error(&post(&agent_a, &pulse_a, json!({ "metadata": [1] })).await, 400, "invalid_field", Some("metadata"));
    let at_limit = json!({ "k": "x".repeat(PULSE_METADATA_BYTES_MAX - 8) });
    let (status, _) = post(&agent_a, &pulse_a, json!({ "metadata": at_limit })).await;
    assert_eq!(status, 200, "exactly {PULSE_METADATA_BYTES_MAX} bytes of metadata");
    let over = json!({ "k": "x".repeat(PULSE_METADATA_BYTES_MAX - 7) });
    assert_error(&post(&agent_a, &pulse_a, json!({ "metadata": over.clone() })).await, 400, "invalid_field", Some("metadata"));
    let many: serde_json::Map<String, serde_json::Value> =
        (0..=PULSE_METADATA_KEYS_MAX).map(|i| (format!("k{i}"), json!(i))).collect();
    assert_error(&post(&agent_a, &pulse_a, json!({ "metadata": many })).await, 400, "invalid_field", Some("metadata"));
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": [b, { "id": a, "metadata": over }] })).await,
        400,
        "invalid_field",
        Some("agents[1].metadata"),
    );
    // The first bad entry is the one named, whatever is wrong with each.
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": [{ "id": a, "metadata": over }, 999_999] })).await,
        400,
        "invalid_field",
        Some("agents[0].metadata"),
    );
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": [999_999, { "id": a, "metadata": over }] })).await,
        404,
        "not_found",
        Some("agents[0]"),
    );
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": [{ "id": a, "status": "gone" }] })).await,
        400,
        "invalid_field",
        Some("agents[0].status"),
    );
    assert_error(
        &post(&f.acme, "/v1/pulses", json!({ "agents": [{ "id": a, "mood": "ok" }] })).await,
        400,
        "invalid_field",
        Some("agents[0].mood"),
    );
    let (_, shown) = get(&f.acme, &format!("/v1/agents/{b}")).await;
    assert_eq!(shown["pulse"]["status"], "idle", "the refused batches changed nothing");
}

#[tokio::test]
async fn input_wakes_the_agent_and_restarts_its_idle_chamber() {
    let f = start("input").await;
    let (a, a_token) = create(
        &f.acme,
        json!({ "name": "a", "heartbeat": { "idle_after_ms": 60000 },
                "adapter": script(json!([{ "duration_ms": 1000000, "outcome": "succeeded" }])) }),
    )
    .await;
    let (_, shown) = get(&f.acme, &format!("/v1/agents/{a}")).await;
    assert_eq!(shown["next_idle_at_ms"], START_MS + 60_000);

    f.clock.0.fetch_add(30_000, Ordering::SeqCst);
    let (status, answer) = post(
        &f.as_token(&a_token),
        &format!("/v1/agents/{a}/input"),
        json!({ "text": "where is my refund?" }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["source"], "on_demand");
    assert_eq!(answer["outcome"], "queued", "{answer}");
    let run = answer["run"].as_u64().unwrap();
    let (_, run_body) = get(&f.acme, &format!("/v1/runs/{run}")).await;
    assert_eq!(run_body["payload"]["text"], "where is my refund?");
    let (_, shown) = get(&f.acme, &format!("/v1/agents/{a}")).await;
    assert_eq!(shown["last_input_at_ms"], START_MS + 30_000);
    assert_eq!(shown["next_idle_at_ms"], START_MS + 90_000);
    let (status, _) = post_empty(&f.acme, &format!("/v1/runs/{run}/cancel")).await;
    assert_eq!(status, 200);

    // Silence past idle_after: the timer loop fires an idle wakeup.
    f.clock.0.store(START_MS + 90_000, Ordering::SeqCst);
    let idle = wait_agent(&f.acme, a, |agent| {
        agent["next_idle_at_ms"] == START_MS + 150_000
    })
    .await;
    assert_eq!(idle["runs_started"], 2);
    let (_, runs) = get(&f.acme, &format!("/v1/runs?agent={a}&status=running")).await;
    assert_eq!(runs["runs"][0]["source"], "idle", "{runs}");

    // Bad input.
    let path = format!("/v1/agents/{a}/input");
    assert_error(
        &post(&f.acme, &path, json!({})).await,
        400,
        "invalid_field",
        Some("text"),
    );
    assert_error(
        &post(&f.acme, &path, json!({ "text": 7 })).await,
        400,
        "invalid_field",
        Some("text"),
    );
    assert_error(
        &post(&f.acme, &path, json!({ "text": "x".repeat(17 * 1024) })).await,
        400,
        "invalid_field",
        Some("text"),
    );
    assert_error(
        &post(&f.acme, &path, json!({ "text": "hi", "source": "timer" })).await,
        400,
        "invalid_field",
        Some("source"),
    );
    assert_error(
        &post(&f.globex, &path, json!({ "text": "hi" })).await,
        404,
        "not_found",
        None,
    );
}

/// What the stub provider answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    Ok,
    RateLimited,
    Failing,
    Garbage,
    Silent,
}

/// An OpenAI-compatible stub on a real port, answering as `mode` says.
async fn stub_provider(mode: Arc<Mutex<Provider>>) -> SocketAddr {
    use axum::routing::post;
    let router = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |body: axum::body::Bytes| {
            let mode = *mode.lock().unwrap();
            async move {
                let request: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(request["model"], "stub-1");
                let user = request["messages"][1]["content"].as_str().unwrap().to_string();
                match mode {
                    Provider::Ok => (
                        axum::http::StatusCode::OK,
                        json!({ "choices": [{ "message": { "role": "assistant", "content": format!("done: {user}") } }] })
                            .to_string(),
                    ),
                    Provider::RateLimited => (
                        axum::http::StatusCode::TOO_MANY_REQUESTS,
                        r#"{"error":{"message":"slow down"}}"#.to_string(),
                    ),
                    Provider::Failing => (
                        axum::http::StatusCode::BAD_GATEWAY,
                        "upstream broke".to_string(),
                    ),
                    Provider::Garbage => (axum::http::StatusCode::OK, "{\"choices\":".to_string()),
                    Provider::Silent => {
                        tokio::time::sleep(Duration::from_secs(3_600)).await;
                        (axum::http::StatusCode::OK, String::new())
                    }
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(vigil::api::serve(listener, router));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_runs_end_by_what_the_provider_answers_and_failures_open_the_breaker() {
    let f = start("llm").await;
    let mode = Arc::new(Mutex::new(Provider::Ok));
    let provider = stub_provider(mode.clone()).await;
    let (agent, _) = create(
        &f.acme,
        json!({ "name": "thinker",
                "adapter": { "type": "llm", "base_url": format!("http://{provider}"), "model": "stub-1",
                             "request_timeout_ms": 1000 },
                "breaker": { "failures_to_open": 6, "cooldown_ms": 3600000 } }),
    )
    .await;
    let run_once = |reason: &'static str| {
        let client = f.acme.clone();
        async move {
            let (status, answer) = wake(
                &client,
                agent,
                json!({ "source": "on_demand", "reason": reason }),
            )
            .await;
            assert_eq!(status, 200, "{answer}");
            let run = answer["run"].as_u64().expect("a queued run");
            wait_run(&client, run, terminal).await
        }
    };
    let ok = run_once("summarise ticket 7").await;
    assert_eq!(ok["status"], "succeeded", "{ok}");
    let detail = ok["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("the model ended its turn: done: ")
            && detail.contains("Reason: summarise ticket 7"),
        "{ok}"
    );
    assert_eq!(ok["stop_reason"], "end_turn", "{ok}");
    for (provider_mode, status, words) in [
        (Provider::RateLimited, "failed", "429 Too Many Requests"),
        (Provider::Failing, "failed", "502 Bad Gateway"),
        (Provider::Garbage, "failed", "not a chat completion"),
        (
            Provider::Silent,
            "failed",
            "did not answer within adapter.request_timeout_ms = 1000",
        ),
    ] {
        *mode.lock().unwrap() = provider_mode;
        let run = run_once("again").await;
        assert_eq!(run["status"], status, "{provider_mode:?}: {run}");
        assert!(
            run["detail"].as_str().unwrap().contains(words),
            "{provider_mode:?}: {run}"
        );
    }
    // Four LLM failures in a row; the fifth and sixth (an unreachable provider) open the breaker.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nobody = closed.local_addr().unwrap();
    drop(closed);
    let (other, _) = create(
        &f.acme,
        json!({ "name": "unreachable",
                "adapter": { "type": "llm", "base_url": format!("http://{nobody}"), "model": "stub-1" },
                "breaker": { "failures_to_open": 1, "cooldown_ms": 3600000 } }),
    )
    .await;
    let (_, answer) = wake(&f.acme, other, json!({ "source": "on_demand" })).await;
    let run = wait_run(&f.acme, answer["run"].as_u64().unwrap(), terminal).await;
    assert!(
        run["detail"]
            .as_str()
            .unwrap()
            .contains("could not reach the provider"),
        "{run}"
    );
    let (_, shown) = get(&f.acme, &format!("/v1/agents/{other}")).await;
    assert_eq!(shown["breaker"]["state"], "open", "{shown}");
    let (_, refused) = wake(&f.acme, other, json!({ "source": "on_demand" })).await;
    assert_eq!(refused["refusal"], "breaker_open");
    // Bad adapter input names its field.
    assert_error(
        &post(&f.acme, "/v1/agents", json!({ "name": "x", "adapter": { "type": "llm", "base_url": "ftp://api.example.com", "model": "m" } })).await,
        400,
        "invalid_field",
        Some("adapter.base_url"),
    );
}

/// `limits.cooldown_ms`: a run that ends holds the agent's next run queued; the spec answers
/// with the cooldown it was given. (The wait's end is the engine's unit and model tests' to show,
/// in virtual time.)
#[tokio::test]
async fn a_cooldown_keeps_the_next_run_queued_after_a_run_ends() {
    let f = start("cooldown").await;
    let steps = json!([{ "duration_ms": 10, "outcome": "succeeded" }]);
    let (id, _) = create(
        &f.acme,
        json!({"name": "a", "adapter": script(steps), "limits": {"cooldown_ms": 600_000}}),
    )
    .await;
    let (_, agent) = get(&f.acme, &format!("/v1/agents/{id}")).await;
    assert_eq!(agent["spec"]["limits"]["cooldown_ms"], 600_000, "{agent}");
    let run_of = |answer: (u16, Value)| answer.1["run"].as_u64().unwrap();
    let first = run_of(wake(&f.acme, id, json!({"source": "on_demand", "task_key": "0"})).await);
    assert_eq!(wait_run(&f.acme, first, terminal).await["status"], "succeeded");
    let second = run_of(wake(&f.acme, id, json!({"source": "on_demand", "task_key": "1"})).await);
    assert_eq!(
        get(&f.acme, &format!("/v1/runs/{second}")).await.1["status"],
        "queued",
        "the second run waits out the cooldown"
    );
    f.node.stop();
}

#[tokio::test]
async fn run_activity_is_a_pulse_for_agents_that_ask_for_passive_pulses() {
    let f = start("passive-pulses").await;
    let steps = json!([{ "duration_ms": 10, "outcome": "succeeded" }]);
    let liveness_of = |passive: bool| {
        json!({ "pulse_interval_ms": 1000, "offline_after_misses": 2, "passive_pulses": passive })
    };
    let (busy, _) = create(
        &f.acme,
        json!({ "name": "busy", "adapter": script(steps.clone()), "liveness": liveness_of(true) }),
    )
    .await;
    let (plain, _) = create(
        &f.acme,
        json!({ "name": "plain", "adapter": script(steps.clone()), "liveness": liveness_of(false) }),
    )
    .await;
    let (never, _) = create(
        &f.acme,
        json!({ "name": "never", "adapter": script(steps), "liveness": liveness_of(true) }),
    )
    .await;
    let (_, shown) = get(&f.acme, &format!("/v1/agents/{busy}")).await;
    assert_eq!(shown["spec"]["liveness"]["passive_pulses"], true);
    let (status, _) = post(&f.acme, "/v1/pulses", json!({ "agents": [busy, plain] })).await;
    assert_eq!(status, 200);

    // 1.5 s later (monotonic) each agent runs once: the run's transcript lines are pulses for
    // `busy` only. At 2.6 s `plain` (silent 2.6 s, threshold 2 s) goes offline; `busy`, silent
    // 1.1 s since its run, stays online.
    f.clock.1.store(1_500, Ordering::SeqCst);
    let run_of = |answer: (u16, Value)| answer.1["run"].as_u64().unwrap();
    for agent in [busy, plain, never] {
        let run = run_of(wake(&f.acme, agent, json!({ "source": "on_demand" })).await);
        assert_eq!(wait_run(&f.acme, run, terminal).await["status"], "succeeded");
    }
    f.clock.1.store(2_600, Ordering::SeqCst);
    wait_agent(&f.acme, plain, |agent| liveness(agent) == "offline").await;
    let (_, shown) = get(&f.acme, &format!("/v1/agents/{busy}")).await;
    assert_eq!(liveness(&shown), "online", "its run's activity was a pulse");
    // A passive pulse never brings an agent online: `never` ran but never pulsed.
    let (_, shown) = get(&f.acme, &format!("/v1/agents/{never}")).await;
    assert_eq!(liveness(&shown), "unknown");
    // And without more activity, `busy` goes silent like any other agent.
    f.clock.1.store(3_501, Ordering::SeqCst);
    wait_agent(&f.acme, busy, |agent| liveness(agent) == "offline").await;
    assert_error(
        &post(&f.acme, "/v1/agents", json!({ "name": "bad", "liveness": { "passive_pulses": "yes" } })).await,
        400,
        "invalid_field",
        Some("liveness.passive_pulses"),
    );
    f.node.stop();
}

/// `GET /v1/wakeups`: every wakeup with who asked, what caused it and where it stands now,
/// filtered, paged, scoped to the caller; bad filters and trigger details name their field.
#[tokio::test]
async fn the_wakeup_history_shows_who_asked_and_what_became_of_each_wakeup() {
    let f = start("wakeup-history").await;
    let steps = json!([
        { "duration_ms": 0, "outcome": "succeeded" },
        { "duration_ms": 0, "outcome": "hang" }
    ]);
    let (id, token) = create(
        &f.acme,
        json!({ "name": "h", "adapter": script(steps), "limits": {"queued_runs_max": 1},
                "heartbeat": { "idle_after_ms": 60000 } }),
    )
    .await;
    let (other, _) = create(&f.acme, json!({ "name": "other" })).await;
    let run_of = |answer: &Value| answer["run"].as_u64().unwrap();

    // 1: finished (operator, with a trigger detail); 2: started (the agent's own token);
    // 3: queued; 4: coalesced onto 3; 5: refused (queue full).
    let detail = json!({ "issue": 4812, "repo": "acme/api" });
    let (status, first) = wake(
        &f.acme,
        id,
        json!({ "source": "assignment", "reason": "issue", "trigger_detail": detail }),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    wait_run(&f.acme, run_of(&first), terminal).await;
    let (_, second) = wake(&f.as_token(&token), id, json!({ "source": "on_demand" })).await;
    wait_run(&f.acme, run_of(&second), |r| r["status"] == "running").await;
    let (_, third) = wake(&f.acme, id, json!({ "source": "automation", "task_key": "t" })).await;
    let (_, fourth) = wake(&f.acme, id, json!({ "source": "on_demand", "task_key": "t" })).await;
    assert_eq!(fourth["outcome"], "coalesced");
    let (_, fifth) = wake(&f.acme, id, json!({ "source": "on_demand", "task_key": "u" })).await;
    assert_eq!(fifth["refusal"], "queue_full");
    let (_, elsewhere) = wake(&f.acme, other, json!({ "source": "on_demand" })).await;

    let (status, page) = get(&f.acme, &format!("/v1/wakeups?agent={id}")).await;
    assert_eq!(status, 200, "{page}");
    let rows = page["wakeups"].as_array().unwrap();
    let column = |key: &str| rows.iter().map(|w| w[key].clone()).collect::<Vec<_>>();
    assert_eq!(
        column("wakeup"),
        [&first, &second, &third, &fourth, &fifth].map(|a| a["wakeup"].clone())
    );
    assert_eq!(
        column("status"),
        ["finished", "started", "queued", "coalesced", "refused"]
    );
    assert_eq!(
        column("requested_by"),
        ["operator", "agent", "operator", "operator", "operator"]
    );
    assert_eq!(rows[0]["trigger_detail"], detail);
    assert_eq!(rows[0]["run_status"], "succeeded");
    assert_eq!(rows[0]["stop_reason"], "end_turn", "{}", rows[0]);
    assert_eq!(rows[1]["run_status"], "running");
    assert_eq!(rows[3]["run"], rows[2]["run"]);
    assert_eq!(rows[3]["task_key"], "t");
    assert_eq!(rows[4]["refusal"], "queue_full");
    assert!(rows[4].get("run").is_none());
    assert!(rows[1].get("trigger_detail").is_none());

    // Filters, each alone and together; the status follows the run.
    let ids = |page: &Value| {
        page["wakeups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["wakeup"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    let wid = |answer: &Value| answer["wakeup"].as_u64().unwrap();
    let (_, page) = get(&f.acme, "/v1/wakeups?status=refused").await;
    assert_eq!(ids(&page), [wid(&fifth)]);
    let (_, page) = get(&f.acme, "/v1/wakeups?source=on_demand").await;
    assert_eq!(
        ids(&page),
        [wid(&second), wid(&fourth), wid(&fifth), wid(&elsewhere)]
    );
    let (_, page) = get(&f.acme, "/v1/wakeups?requested_by=agent").await;
    assert_eq!(ids(&page), [wid(&second)]);
    let (_, page) = get(&f.acme, &format!("/v1/wakeups?agent={id}&source=on_demand&status=coalesced")).await;
    assert_eq!(ids(&page), [wid(&fourth)]);
    let (status, _) = post_empty(&f.acme, &format!("/v1/runs/{}/cancel", run_of(&second))).await;
    assert_eq!(status, 200);
    let (_, page) = get(&f.acme, "/v1/wakeups?status=finished").await;
    assert!(ids(&page).contains(&wid(&second)), "{page}");

    // Paging: `limit` rows, then on from `next_after`, nothing lost or repeated.
    let (_, one) = get(&f.acme, &format!("/v1/wakeups?agent={id}&limit=2")).await;
    assert_eq!(ids(&one), [wid(&first), wid(&second)]);
    let after = one["next_after"].as_u64().unwrap();
    let (_, rest) = get(&f.acme, &format!("/v1/wakeups?agent={id}&after={after}")).await;
    assert_eq!(ids(&rest), [wid(&third), wid(&fourth), wid(&fifth)]);

    // The idle chamber asks as `idle`; its wakeup carries no detail.
    f.clock.0.store(START_MS + 60_000, Ordering::SeqCst);
    wait_agent(&f.acme, id, |agent| agent["next_idle_at_ms"] == START_MS + 120_000).await;
    let page = wait_page(&f.acme, "/v1/wakeups?requested_by=idle", |p| p["wakeups"][0].is_object()).await;
    assert_eq!(page["wakeups"][0]["source"], "idle", "{page}");

    // Scoping: an agent token sees only its own; another tenant sees none.
    let (status, page) = get(&f.as_token(&token), "/v1/wakeups").await;
    assert_eq!(status, 200);
    assert!(page["wakeups"].as_array().unwrap().iter().all(|w| w["agent"] == id));
    assert_error(
        &get(&f.as_token(&token), &format!("/v1/wakeups?agent={other}")).await,
        403,
        "forbidden",
        None,
    );
    assert_eq!(get(&f.globex, "/v1/wakeups").await.1["wakeups"], json!([]));
    assert_error(
        &get(&f.globex, &format!("/v1/wakeups?agent={id}")).await,
        404,
        "not_found",
        None,
    );

    // Bad filters name their parameter.
    for (query, field) in [
        ("status=done", "status"),
        ("source=email", "source"),
        ("requested_by=someone", "requested_by"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("after=-1", "after"),
        ("agent=x", "agent"),
        ("since=3", "since"),
    ] {
        assert_error(
            &get(&f.acme, &format!("/v1/wakeups?{query}")).await,
            400,
            "invalid_field",
            Some(field),
        );
    }
    assert_eq!(get(&f.acme, "/v1/wakeups?limit=1000").await.0, 200);

    // Bad trigger details are refused naming the field, and nothing is recorded.
    let head = get(&f.acme, "/v1/events").await.1["head_seq"].clone();
    for body in [
        json!({ "source": "on_demand", "trigger_detail": ["a"] }),
        json!({ "source": "on_demand", "trigger_detail": { "k": "d".repeat(2048) } }),
    ] {
        assert_error(&wake(&f.acme, id, body).await, 400, "invalid_field", Some("trigger_detail"));
    }
    // Who asked is the node's to say, never the body's.
    assert_error(
        &wake(&f.acme, id, json!({ "source": "on_demand", "requested_by": "timer" })).await,
        400,
        "invalid_field",
        Some("requested_by"),
    );
    assert_eq!(get(&f.acme, "/v1/events").await.1["head_seq"], head);
    f.node.stop();
}

/// A crash loop puts an agent in `error`: three runs in a row ended by a restart of the node
/// (here a real restart on the same redb file), after which every wakeup is refused
/// `agent_error` until the operator resets it; the state survives restarts.
#[tokio::test]
async fn a_crash_loop_puts_the_agent_in_error_until_an_operator_resets_it() {
    let mut f = start("error-state").await;
    let hang = script(json!([{ "duration_ms": 0, "outcome": "hang" }]));
    let (id, token) = create(&f.acme, json!({"name": "a", "adapter": hang})).await;
    let running = |agent: &Value| agent["runs_started"].as_u64();
    // Restart 1 ends run 1 (its retry starts); restart 2 ends the retry (not retried again);
    // then a fresh wakeup, and restart 3 ends its run: three in a row.
    for restart in 1..=3 {
        if restart != 2 {
            let (status, answer) = wake(&f.acme, id, json!({"source": "on_demand"})).await;
            assert_eq!(status, 200, "{answer}");
            wait_run(&f.acme, answer["run"].as_u64().unwrap(), |r| r["status"] == "running").await;
        }
        let before = running(&get(&f.acme, &format!("/v1/agents/{id}")).await.1);
        let Fixture { node, path, clock, .. } = f;
        node.stop();
        tokio::time::sleep(Duration::from_millis(50)).await;
        f = start_on(path, clock).await;
        let (_, agent) = get(&f.acme, &format!("/v1/agents/{id}")).await;
        if restart < 3 {
            assert!(agent.get("error").is_none(), "{agent}");
        } else {
            assert_eq!(agent["error"]["reason"], "restart_loop", "{agent}");
            assert!(agent["error"]["since_ms"].is_u64(), "{agent}");
            assert_eq!(running(&agent), before, "no run started after the third");
        }
    }
    let (_, events) = get(&f.acme, "/v1/events").await;
    let errored: Vec<&Value> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "agent_errored")
        .collect();
    assert_eq!(errored.len(), 1, "{events}");
    assert_eq!(errored[0]["reason"], "restart_loop");
    assert_eq!(errored[0]["count"], 3);
    // Every wakeup is refused, the agent's own included; the history shows why.
    for client in [&f.acme, &f.as_token(&token)] {
        let (status, answer) = wake(client, id, json!({"source": "on_demand"})).await;
        assert_eq!(status, 200);
        assert_eq!(answer["refusal"], "agent_error", "{answer}");
    }
    let (_, page) = get(&f.acme, "/v1/wakeups?status=refused").await;
    assert_eq!(page["wakeups"][0]["refusal"], "agent_error", "{page}");
    // Only the operator resets it, and a bad id names its field.
    let path = format!("/v1/agents/{id}/error/reset");
    assert_error(&post_empty(&f.as_token(&token), &path).await, 403, "forbidden", None);
    assert_error(&post_empty(&f.globex, &path).await, 404, "not_found", None);
    assert_error(
        &post_empty(&f.acme, "/v1/agents/x/error/reset").await,
        400,
        "invalid_field",
        Some("id"),
    );
    let (status, agent) = post_empty(&f.acme, &path).await;
    assert_eq!(status, 200, "{agent}");
    assert!(agent.get("error").is_none(), "{agent}");
    // Resetting again changes nothing; the agent takes wakeups and runs again.
    let head = get(&f.acme, "/v1/events").await.1["head_seq"].clone();
    assert_eq!(post_empty(&f.acme, &path).await.0, 200);
    assert_eq!(get(&f.acme, "/v1/events").await.1["head_seq"], head);
    let (_, answer) = wake(&f.acme, id, json!({"source": "on_demand"})).await;
    assert_eq!(answer["outcome"], "queued", "{answer}");
    wait_run(&f.acme, answer["run"].as_u64().unwrap(), |r| r["status"] == "running").await;
    f.node.stop();
}

#[tokio::test]
async fn an_operator_rotates_an_agent_token_and_only_the_new_one_works_across_a_restart() {
    let f = start("rotate-token").await;
    let (id, old_token) = create(&f.acme, json!({"name": "a"})).await;
    let path = format!("/v1/agents/{id}/token");
    // Only the agent's own operator may rotate: not the agent, not another tenant.
    let (status, _) = post_empty(&f.as_token(&old_token), &path).await;
    assert_eq!(status, 403);
    let (status, _) = post_empty(&f.globex, &path).await;
    assert_eq!(status, 404);
    let (status, _) = post_empty(&f.acme, "/v1/agents/999/token").await;
    assert_eq!(status, 404);

    let (status, rotated) = post_empty(&f.acme, &path).await;
    assert_eq!(status, 200, "{rotated}");
    assert_eq!(rotated["agent"], id);
    let new_token = rotated["token"].as_str().unwrap().to_string();
    assert!(new_token.starts_with("vgl_agent_"), "{new_token}");
    assert_ne!(new_token, old_token);
    let own = format!("/v1/agents/{id}");
    assert_eq!(get(&f.as_token(&old_token), &own).await.0, 401);
    assert_eq!(get(&f.as_token(&new_token), &own).await.0, 200);
    // The token itself is never written anywhere the API shows: the event says only that it
    // was rotated.
    let (_, events) = get(&f.acme, "/v1/events").await;
    assert!(has_event(&events, "agent_token_rotated"), "{events}");
    assert!(!events.to_string().contains(&new_token));

    let f = restart(f).await;
    assert_eq!(get(&f.as_token(&old_token), &own).await.0, 401);
    assert_eq!(get(&f.as_token(&new_token), &own).await.0, 200);
    f.node.stop();
}

/// Stops the fixture's node and starts another on the same file and clock.
async fn restart(f: Fixture) -> Fixture {
    let Fixture {
        node, path, clock, ..
    } = f;
    node.stop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    start_on(path, clock).await
}

async fn call(client: &ApiClient, method: hyper::Method, path: &str, body: &str) -> (u16, Value) {
    let body = (!body.is_empty()).then(|| body.as_bytes().to_vec());
    let answer = client.request(method, path, body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

#[tokio::test]
async fn an_operator_changes_an_agent_with_a_merge_patch_validated_like_a_create() {
    let f = start("patch-agent").await;
    let (id, agent_token) = create(&f.acme, json!({"name": "a", "limits": {"daily_cap": 5}})).await;
    let path = format!("/v1/agents/{id}");
    let patch = hyper::Method::PATCH;
    let body = r#"{"heartbeat": {"interval_ms": 60000}, "limits": {"daily_cap": null}}"#;
    // Only its tenant's operator.
    assert_eq!(
        call(&f.as_token(&agent_token), patch.clone(), &path, body)
            .await
            .0,
        403
    );
    assert_eq!(call(&f.globex, patch.clone(), &path, body).await.0, 404);
    let (status, updated) = call(&f.acme, patch.clone(), &path, body).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(
        updated["changed"],
        json!(["heartbeat.interval_ms", "limits.daily_cap"])
    );
    assert!(updated["seq"].as_u64().is_some());
    assert_eq!(updated["agent"]["spec"]["heartbeat"]["interval_ms"], 60_000);
    assert_eq!(updated["agent"]["spec"]["limits"]["daily_cap"], Value::Null);
    assert!(updated["agent"]["next_fire_at_ms"].as_u64().unwrap() >= START_MS + 60_000);
    // The same patch again changes nothing and records nothing.
    let (status, again) = call(&f.acme, patch.clone(), &path, body).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["changed"], json!([]));
    assert!(again.get("seq").is_none(), "{again}");
    // Refusals name the field and change nothing.
    let bad = call(
        &f.acme,
        patch.clone(),
        &path,
        r#"{"heartbeat": {"interval_ms": 1}}"#,
    )
    .await;
    assert_error(&bad, 400, "invalid_field", Some("heartbeat.interval_ms"));
    let bad = call(
        &f.acme,
        patch.clone(),
        &path,
        r#"{"limits": {"daily_kap": 1}}"#,
    )
    .await;
    assert_error(&bad, 400, "invalid_field", Some("limits.daily_kap"));
    let bad = call(&f.acme, patch.clone(), &path, "[1]").await;
    assert_error(&bad, 400, "invalid_field", Some("body"));
    let bad = call(&f.acme, patch.clone(), &path, "{not json").await;
    assert_error(&bad, 400, "invalid_json", None);
    create(&f.acme, json!({"name": "b"})).await;
    let clash = call(&f.acme, patch.clone(), &path, r#"{"name": "b"}"#).await;
    assert_error(&clash, 409, "name_taken", Some("name"));
    let (_, shown) = get(&f.acme, &path).await;
    assert_eq!(
        shown["spec"], updated["agent"]["spec"],
        "refusals changed nothing"
    );
    let (_, events) = get(&f.acme, "/v1/events").await;
    let changes = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "agent_updated")
        .count();
    assert_eq!(changes, 1, "{events}");
    // A terminated agent cannot change.
    post_empty(&f.acme, &format!("{path}/terminate")).await;
    let terminated = call(&f.acme, patch, &path, r#"{"limits": {"daily_cap": 2}}"#).await;
    assert_error(&terminated, 409, "agent_terminated", None);
    f.node.stop();
}

#[tokio::test]
async fn a_deleted_agent_is_forgotten_across_a_restart_and_its_events_stay() {
    let f = start("delete-agent").await;
    let (id, agent_token) = create(&f.acme, json!({"name": "gone"})).await;
    let path = format!("/v1/agents/{id}");
    let delete = hyper::Method::DELETE;
    assert_eq!(
        call(&f.as_token(&agent_token), delete.clone(), &path, "")
            .await
            .0,
        403
    );
    assert_eq!(call(&f.globex, delete.clone(), &path, "").await.0, 404);
    let (status, deleted) = call(&f.acme, delete.clone(), &path, "").await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["agent"], id);
    assert_eq!(deleted["name"], "gone");
    assert_eq!(get(&f.acme, &path).await.0, 404);
    assert_eq!(get(&f.as_token(&agent_token), &path).await.0, 401);
    assert_eq!(call(&f.acme, delete, &path, "").await.0, 404);
    let (_, listing) = get(&f.acme, "/v1/agents").await;
    assert_eq!(listing["agents"], json!([]));
    let f = restart(f).await;
    assert_eq!(get(&f.acme, &path).await.0, 404);
    let (_, events) = get(&f.acme, "/v1/events").await;
    for kind in ["agent_created", "agent_terminated", "agent_deleted"] {
        assert!(has_event(&events, kind), "no {kind}: {events}");
    }
    let (again, _) = create(&f.acme, json!({"name": "gone"})).await;
    assert!(again > id, "the name is free, the id is not reused");
    f.node.stop();
}

#[tokio::test]
async fn an_operator_rotates_their_own_token() {
    let f = start("rotate-operator").await;
    let (_, agent_token) = create(&f.acme, json!({"name": "a"})).await;
    let path = "/v1/operator/token";
    assert_eq!(post_empty(&f.as_token(&agent_token), path).await.0, 403);
    let (status, rotated) = post_empty(&f.acme, path).await;
    assert_eq!(status, 200, "{rotated}");
    assert_eq!(rotated["tenant"], "acme");
    let token = rotated["token"].as_str().unwrap().to_string();
    assert_eq!(
        get(&f.acme, "/v1/agents").await.0,
        401,
        "the old token stops at once"
    );
    assert_eq!(get(&f.as_token(&token), "/v1/agents").await.0, 200);
    assert_eq!(
        get(&f.globex, "/v1/agents").await.0,
        200,
        "other tenants untouched"
    );
    let (_, events) = get(&f.as_token(&token), "/v1/events").await;
    assert!(has_event(&events, "operator_token_set"), "{events}");
    assert!(
        !events.to_string().contains(&token),
        "the token itself is never shown again"
    );
    // A restart configuring the same tokens keeps the rotated one.
    let f = restart(f).await;
    assert_eq!(get(&f.acme, "/v1/agents").await.0, 401);
    assert_eq!(get(&f.as_token(&token), "/v1/agents").await.0, 200);
    f.node.stop();
}

#[tokio::test]
async fn the_node_snapshots_as_it_goes_and_a_restart_recovers_from_the_snapshot() {
    let path = data_file("snapshots");
    let clock = ManualClock::at(START_MS);
    let mut configured = config(StorageLocation::File(path.clone()), clock.clone());
    configured.snapshots = vigil::snapshots::SnapshotPolicy {
        every_events: 10,
        every_ms: u64::MAX,
        keep_events_ms: u64::MAX,
    };
    // The node's metrics are tenant default's operator's to read.
    const NODE_OPERATOR: &str = "default-operator-token";
    configured.tenants.push(TenantToken {
        tenant: "default".into(),
        token: NODE_OPERATOR.into(),
    });
    let mut node = Node::start(configured).await.expect("node starts");
    node.ready().await.expect("node recovers");
    let acme = ApiClient::with_token(node.local_addr(), ACME);
    let mut ids = Vec::new();
    for name in ["a", "b", "c"] {
        ids.push(create(&acme, json!({"name": name})).await.0);
    }
    for round in 0..10 {
        for id in &ids {
            let body = json!({"source": "on_demand", "reason": format!("round {round}")});
            let (status, answer) = wake(&acme, *id, body).await;
            assert!(status == 202 || status == 200, "{status} {answer}");
        }
    }
    let node_operator = ApiClient::with_token(node.local_addr(), NODE_OPERATOR);
    let written = || async {
        let metrics = node_operator.get("/metrics").await.unwrap();
        assert_eq!(metrics.status.as_u16(), 200);
        let text = String::from_utf8(metrics.body.to_vec()).unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix("vigil_snapshots_total "))
            .map_or(0, |count| count.trim().parse::<u64>().unwrap())
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while written().await < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no snapshots written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let names = |listing: &Value| -> Vec<(u64, String)> {
        let agents = listing["agents"].as_array().unwrap();
        agents
            .iter()
            .map(|a| {
                (
                    a["id"].as_u64().unwrap(),
                    a["name"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    let before = names(&get(&acme, "/v1/agents").await.1);
    node.stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    {
        let store = vigil::store::Store::open(StorageLocation::File(path.clone())).unwrap();
        let seq = store
            .current_snapshot_seq()
            .unwrap()
            .expect("a current snapshot");
        assert!(seq > 10, "snapshot at {seq}");
        // Recovering from the snapshot and the log after it gives what the whole log gives.
        store.recover_observed(None, &mut |_| {}).unwrap();
    }
    let f = start_on(path, clock).await;
    // The runs the manual clock kept going were failed by the restart, as without snapshots.
    assert_eq!(names(&get(&f.acme, "/v1/agents").await.1), before);
    f.node.stop();
}

#[tokio::test]
async fn a_read_from_before_the_oldest_kept_event_is_refused_compacted() {
    let path = data_file("compacted");
    let clock = ManualClock::at(START_MS);
    let mut configured = config(StorageLocation::File(path.clone()), clock.clone());
    configured.snapshots = vigil::snapshots::SnapshotPolicy {
        every_events: 10,
        every_ms: u64::MAX,
        keep_events_ms: 60_000,
    };
    let mut node = Node::start(configured).await.expect("node starts");
    node.ready().await.expect("node recovers");
    let acme = ApiClient::with_token(node.local_addr(), ACME);
    let (id, _) = create(&acme, json!({"name": "a"})).await;
    let wake_some = |round: u64| {
        let acme = &acme;
        async move {
            for i in 0..10 {
                let body = json!({"source": "on_demand", "reason": format!("{round}.{i}")});
                let (status, answer) = wake(acme, id, body).await;
                assert!(status == 202 || status == 200, "{status} {answer}");
            }
        }
    };
    wake_some(0).await;
    // An hour on, the next snapshot compacts everything older than a minute that it holds.
    clock.0.fetch_add(3_600_000, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    let mut round = 1;
    let refused = loop {
        wake_some(round).await;
        round += 1;
        let (status, answer) = get(&acme, "/v1/events?after=1").await;
        if status == 410 {
            break answer;
        }
        assert_eq!(status, 200, "{answer}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing was compacted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(refused["error"]["code"], "compacted");
    assert_eq!(refused["error"]["field"], "after");
    let message = refused["error"]["message"].as_str().unwrap();
    // Without `after`, the feed starts at the oldest kept event, which the refusal named.
    let (status, page) = get(&acme, "/v1/events").await;
    assert_eq!(status, 200);
    let oldest = page["events"][0]["seq"].as_u64().unwrap();
    assert!(oldest > 2, "events were compacted: {page}");
    assert!(
        message.contains(&format!("the oldest kept is seq {oldest}")),
        "{message}"
    );
    let first_at_ms = page["events"][0]["at_ms"].as_u64().unwrap();
    assert!(
        first_at_ms >= START_MS + 3_600_000 - 60_000,
        "{first_at_ms}"
    );
    // Reading on from just before it is fine.
    let (status, _) = get(&acme, &format!("/v1/events?after={}", oldest - 1)).await;
    assert_eq!(status, 200);
    node.stop();
}

/// The types of a timeline page's entries, in order.
fn timeline_types(page: &Value) -> Vec<String> {
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn an_agents_timeline_reads_its_pauses_liveness_and_runs_since_an_instant_from_the_log() {
    const MINUTE_MS: u64 = 60_000;
    let f = start("timeline").await;
    let quick = script(json!([{ "duration_ms": 10, "outcome": "succeeded" }]));
    let (a, a_token) = create(
        &f.acme,
        json!({ "name": "a", "adapter": quick,
                "liveness": { "pulse_interval_ms": 1000, "offline_after_misses": 2 } }),
    )
    .await;
    let (b, b_token) = create(&f.acme, json!({ "name": "b" })).await;
    let (g, _) = create(&f.globex, json!({ "name": "g" })).await;
    let at = |ms: u64| f.clock.0.store(ms, Ordering::SeqCst);
    let pause = format!("/v1/agents/{a}/pause");
    let resume = format!("/v1/agents/{a}/resume");

    // Before the window: a pause and its resume.
    assert_eq!(post(&f.acme, &pause, json!({})).await.0, 200);
    at(START_MS + MINUTE_MS);
    assert_eq!(post_empty(&f.acme, &resume).await.0, 200);

    // The window opens an hour later, with a timed pause of a (and one of b, not a's).
    let since = START_MS + 60 * MINUTE_MS;
    at(since);
    let (status, paused) = post(&f.acme, &pause, json!({ "minutes": 30 })).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(
        post(&f.acme, &format!("/v1/agents/{b}/pause"), json!({}))
            .await
            .0,
        200
    );
    at(since + MINUTE_MS);
    assert_eq!(post_empty(&f.acme, &resume).await.0, 200);
    // A run.
    at(since + 2 * MINUTE_MS);
    let run = wake(&f.acme, a, json!({ "source": "on_demand" })).await.1["run"]
        .as_u64()
        .unwrap();
    assert_eq!(wait_run(&f.acme, run, terminal).await["status"], "succeeded");
    // Online, offline after 2 s of silence on the monotonic clock, online again.
    at(since + 3 * MINUTE_MS);
    let agent_a = f.as_token(&a_token);
    let pulse = format!("/v1/agents/{a}/pulse");
    assert_eq!(post_empty(&agent_a, &pulse).await.1["liveness"], "online");
    at(since + 4 * MINUTE_MS);
    f.clock.1.store(2_001, Ordering::SeqCst);
    wait_agent(&f.acme, a, |agent| liveness(agent) == "offline").await;
    at(since + 5 * MINUTE_MS);
    assert_eq!(post_empty(&agent_a, &pulse).await.1["liveness"], "online");

    let path = |since_ms: u64, rest: &str| format!("/v1/agents/{a}/timeline?since_ms={since_ms}{rest}");
    let expected = [
        "agent_paused",
        "agent_resumed",
        "run_started",
        "run_finished",
        "agent_online",
        "agent_offline",
        "agent_online",
    ];
    let whole = wait_page(&f.acme, &path(since, ""), |p| {
        p["entries"].as_array().unwrap().len() == expected.len()
    })
    .await;
    assert_eq!(timeline_types(&whole), expected, "{whole}");
    assert_eq!(whole["agent"], a);
    assert_eq!(whole["since_ms"], since);
    let entries = whole["entries"].as_array().unwrap();
    assert_eq!(entries[0]["at_ms"], since, "the window's first instant is in it");
    assert_eq!(entries[0]["by"], "operator");
    assert_eq!(entries[0]["until_ms"], since + 30 * MINUTE_MS);
    assert_eq!(entries[1]["at_ms"], since + MINUTE_MS);
    assert_eq!(entries[2]["run"], run);
    assert_eq!(entries[3]["status"], "succeeded");
    assert_eq!(entries[5]["at_ms"], since + 4 * MINUTE_MS);
    assert!(whole["next_after"].as_u64() >= whole["head_seq"].as_u64(), "{whole}");
    let seqs: Vec<u64> = entries.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "oldest first: {seqs:?}");
    // The payload of each entry is the logged event of that seq.
    let (_, events) = get(&f.acme, &format!("/v1/events?after={}&limit=1", seqs[0] - 1)).await;
    assert_eq!(events["events"][0]["type"], "agent_paused");
    assert_eq!(events["events"][0]["agent"], a);

    // The window's boundary: from the start of the log, the earlier pause is in it too; one
    // millisecond after the window's pause, that pause is not.
    let (_, all) = get(&f.acme, &path(0, "")).await;
    let mut earlier = vec!["agent_paused", "agent_resumed"];
    earlier.extend(expected);
    assert_eq!(timeline_types(&all), earlier, "{all}");
    let (_, later) = get(&f.acme, &path(since + 1, "")).await;
    assert_eq!(timeline_types(&later), expected[1..], "{later}");
    let (_, last) = get(&f.acme, &path(since + 5 * MINUTE_MS, "")).await;
    assert_eq!(timeline_types(&last), ["agent_online"], "{last}");
    let (_, none) = get(&f.acme, &path(since + 5 * MINUTE_MS + 1, "")).await;
    assert_eq!(timeline_types(&none), Vec::<String>::new(), "{none}");

    // Pages: two entries, then the rest after `next_after`, together the whole.
    let (_, first) = get(&f.acme, &path(since, "&limit=2")).await;
    assert_eq!(timeline_types(&first), expected[..2]);
    assert_eq!(first["next_after"], entries[1]["seq"]);
    let (_, rest) = get(
        &f.acme,
        &path(since, &format!("&after={}", first["next_after"])),
    )
    .await;
    assert_eq!(timeline_types(&rest), expected[2..]);

    // Scoping: the agent itself reads the same; another agent's token is refused; another
    // tenant's operator and unknown agents are not found.
    let (status, own) = get(&agent_a, &path(since, "")).await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["entries"], whole["entries"]);
    assert_error(
        &get(&f.as_token(&b_token), &path(since, "")).await,
        403,
        "forbidden",
        None,
    );
    assert_error(&get(&f.globex, &path(since, "")).await, 404, "not_found", None);
    assert_error(
        &get(&f.acme, &format!("/v1/agents/{g}/timeline?since_ms=0")).await,
        404,
        "not_found",
        None,
    );
    assert_error(
        &get(&f.acme, "/v1/agents/999/timeline?since_ms=0").await,
        404,
        "not_found",
        None,
    );
    assert_error(
        &get(&f.anonymous(), &path(since, "")).await,
        401,
        "unauthenticated",
        None,
    );

    // Bad input names its field; limits at their boundary.
    let bad = |query: &str| format!("/v1/agents/{a}/timeline{query}");
    for (query, field) in [
        ("", "since_ms"),
        ("?since_ms=", "since_ms"),
        ("?since_ms=-1", "since_ms"),
        ("?since_ms=yesterday", "since_ms"),
        ("?since_ms=0&after=x", "after"),
        ("?since_ms=0&limit=0", "limit"),
        ("?since_ms=0&until_ms=5", "until_ms"),
    ] {
        assert_error(&get(&f.acme, &bad(query)).await, 400, "invalid_field", Some(field));
    }
    assert_error(
        &get(&f.acme, "/v1/agents/x/timeline?since_ms=0").await,
        400,
        "invalid_field",
        Some("id"),
    );
    let instant_max = vigil::store::record::current::INSTANT_MS_MAX;
    let (status, end) = get(&f.acme, &path(instant_max, "")).await;
    assert_eq!(status, 200, "{end}");
    assert_eq!(end["entries"], json!([]));
    assert_error(
        &get(&f.acme, &path(instant_max + 1, "")).await,
        400,
        "invalid_field",
        Some("since_ms"),
    );
    let max = vigil::api::TIMELINE_PAGE_MAX;
    let (status, page) = get(&f.acme, &path(0, &format!("&limit={max}"))).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(timeline_types(&page), earlier);
    assert_error(
        &get(&f.acme, &path(0, &format!("&limit={}", max + 1))).await,
        400,
        "invalid_field",
        Some("limit"),
    );
    // Without `limit`, a page holds `TIMELINE_PAGE_DEFAULT` entries: b, paused once above,
    // is resumed and paused again until it has one more than that.
    let default = vigil::api::TIMELINE_PAGE_DEFAULT;
    for _ in 0..default / 2 {
        assert_eq!(post_empty(&f.acme, &format!("/v1/agents/{b}/resume")).await.0, 200);
        assert_eq!(
            post(&f.acme, &format!("/v1/agents/{b}/pause"), json!({}))
                .await
                .0,
            200
        );
    }
    let b_path = format!("/v1/agents/{b}/timeline?since_ms={since}");
    let (_, b_all) = get(&f.acme, &format!("{b_path}&limit={max}")).await;
    assert_eq!(b_all["entries"].as_array().unwrap().len(), default + 1, "{b_all}");
    let (_, b_page) = get(&f.acme, &b_path).await;
    assert_eq!(b_page["entries"].as_array().unwrap().len(), default);
    assert_eq!(b_page["next_after"], b_all["entries"][default - 1]["seq"]);
}

#[tokio::test]
async fn an_agents_timeline_shows_its_breaker_open_half_open_close_and_reset() {
    let f = start("timeline-breaker").await;
    let steps = json!([
        { "duration_ms": 10, "outcome": "failed" },
        { "duration_ms": 10, "outcome": "succeeded" },
        { "duration_ms": 10, "outcome": "failed" },
    ]);
    let (a, _) = create(
        &f.acme,
        json!({ "name": "a", "adapter": script(steps),
                "breaker": { "failures_to_open": 1, "cooldown_ms": 1000 } }),
    )
    .await;
    let run_of = |answer: (u16, Value)| answer.1["run"].as_u64().unwrap();
    // A failure opens the breaker for a second.
    let first = run_of(wake(&f.acme, a, json!({ "source": "on_demand" })).await);
    assert_eq!(wait_run(&f.acme, first, terminal).await["status"], "failed");
    wait_agent(&f.acme, a, |agent| agent["breaker"]["state"] == "open").await;
    // Past the cooldown, the next wakeup is the probe; it succeeds and closes the breaker.
    f.clock.0.store(START_MS + 2_000, Ordering::SeqCst);
    let probe = run_of(wake(&f.acme, a, json!({ "source": "on_demand" })).await);
    assert_eq!(wait_run(&f.acme, probe, terminal).await["status"], "succeeded");
    wait_agent(&f.acme, a, |agent| agent["breaker"]["state"] == "closed").await;
    // Another failure opens it; an operator closes it.
    let third = run_of(wake(&f.acme, a, json!({ "source": "on_demand" })).await);
    assert_eq!(wait_run(&f.acme, third, terminal).await["status"], "failed");
    wait_agent(&f.acme, a, |agent| agent["breaker"]["state"] == "open").await;
    let (status, _) = post_empty(&f.acme, &format!("/v1/agents/{a}/breaker/reset")).await;
    assert_eq!(status, 200);

    let breaker_changes = |page: &Value| -> Vec<String> {
        timeline_types(page)
            .into_iter()
            .filter(|t| t.starts_with("breaker_"))
            .collect()
    };
    let expected = [
        "breaker_opened",
        "breaker_half_opened",
        "breaker_closed",
        "breaker_opened",
        "breaker_reset",
    ];
    let page = wait_page(
        &f.acme,
        &format!("/v1/agents/{a}/timeline?since_ms={START_MS}"),
        |p| breaker_changes(p).len() == expected.len(),
    )
    .await;
    assert_eq!(breaker_changes(&page), expected, "{page}");
    let opened = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "breaker_opened")
        .unwrap();
    assert_eq!(opened["until_ms"], START_MS + 1_000, "{opened}");
    assert_eq!(opened["trigger"], "llm", "{opened}");
    // Each run started and finished, as many times as it was woken.
    let types = timeline_types(&page);
    assert_eq!(types.iter().filter(|t| *t == "run_started").count(), 3, "{page}");
    assert_eq!(types.iter().filter(|t| *t == "run_finished").count(), 3, "{page}");
}
