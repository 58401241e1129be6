//! The HTTP API over real TCP and a real database file: every endpoint, every bad-input case,
//! and timers firing from a clock the test controls.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use vigil::api::client::ApiClient;
use vigil::api::BODY_BYTES_MAX;
use vigil::io::clock::Clock;
use vigil::io::storage::StorageLocation;
use vigil::node::{Node, NodeConfig};

/// Wall time the test sets by hand; monotonic time is irrelevant to these tests.
#[derive(Debug)]
struct ManualClock(AtomicU64);

impl Clock for ManualClock {
    fn wall_now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn mono_now(&self) -> Duration {
        Duration::ZERO
    }
}

const START_MS: u64 = 1_800_000_000_000;

fn data_file(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-http-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("vigil.redb")
}

async fn start(test: &str) -> (Node, ApiClient, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock(AtomicU64::new(START_MS)));
    let node = Node::start(NodeConfig {
        listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        storage: StorageLocation::File(data_file(test)),
        clock: clock.clone(),
        on_commit: None,
    })
    .await
    .expect("node starts");
    let client = ApiClient::new(node.local_addr());
    (node, client, clock)
}

async fn post(client: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = client.post_json(path, &body).await.unwrap();
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

#[tokio::test]
async fn agents_can_be_created_listed_and_shown() {
    let (node, client, _clock) = start("agents").await;
    assert_eq!(
        get(&client, "/v1/health").await,
        (200, json!({"status": "ok"}))
    );
    let (status, created) = post(
        &client,
        "/v1/agents",
        json!({"name": "scout", "interval_ms": 60_000}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["seq"], 1);
    assert_eq!(created["agent"]["id"], 1);
    assert_eq!(created["agent"]["next_fire_at_ms"], START_MS + 60_000);
    let (_, listing) = get(&client, "/v1/agents").await;
    assert_eq!(listing["now_ms"], START_MS);
    assert_eq!(listing["agents"].as_array().unwrap().len(), 1);
    assert_eq!(get(&client, "/v1/agents/1").await.1["name"], "scout");
    assert_error(&get(&client, "/v1/agents/2").await, 404, "not_found", None);
    assert_error(
        &get(&client, "/v1/agents/abc").await,
        400,
        "invalid_field",
        Some("id"),
    );
    node.stop();
}

#[tokio::test]
async fn bad_agent_input_is_refused_naming_the_field_and_changes_nothing() {
    let (node, client, _clock) = start("bad-input").await;
    let cases = [
        (
            json!({"interval_ms": 60_000}),
            "invalid_field",
            Some("name"),
        ),
        (json!({"name": "a"}), "invalid_field", Some("interval_ms")),
        (
            json!({"name": "a", "interval_ms": 999}),
            "invalid_field",
            Some("interval_ms"),
        ),
        (
            json!({"name": "a", "interval_ms": "soon"}),
            "invalid_field",
            Some("interval_ms"),
        ),
        (
            json!({"name": "", "interval_ms": 60_000}),
            "invalid_field",
            Some("name"),
        ),
        (
            json!({"name": "no spaces", "interval_ms": 60_000}),
            "invalid_field",
            Some("name"),
        ),
        (
            json!({"name": "a", "interval_ms": 60_000, "colour": "red"}),
            "invalid_field",
            Some("colour"),
        ),
    ];
    for (body, code, field) in cases {
        assert_error(&post(&client, "/v1/agents", body).await, 400, code, field);
    }
    let not_json = client
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
    let huge = json!({"name": "a", "interval_ms": 60_000, "pad": "x".repeat(BODY_BYTES_MAX)});
    assert_error(
        &post(&client, "/v1/agents", huge).await,
        413,
        "body_too_large",
        None,
    );
    // None of it reached the log.
    assert_eq!(get(&client, "/v1/events").await.1["head_seq"], 0);

    assert_eq!(
        post(
            &client,
            "/v1/agents",
            json!({"name": "a", "interval_ms": 60_000})
        )
        .await
        .0,
        201
    );
    let duplicate = post(
        &client,
        "/v1/agents",
        json!({"name": "a", "interval_ms": 5_000}),
    )
    .await;
    assert_error(&duplicate, 409, "name_taken", Some("name"));
    assert_error(&get(&client, "/v1/nowhere").await, 404, "not_found", None);
    node.stop();
}

#[tokio::test]
async fn timers_fire_on_the_nodes_clock_and_the_feed_pages_resume_exactly() {
    let (node, client, clock) = start("timers").await;
    post(
        &client,
        "/v1/agents",
        json!({"name": "a", "interval_ms": 1_000}),
    )
    .await;
    // Jump 3.5 intervals ahead: one fire stands for the missed slots, never the backlog.
    clock.0.store(START_MS + 3_500, Ordering::SeqCst);
    let mut page = Value::Null;
    for _ in 0..100 {
        page = get(&client, "/v1/events?after=1").await.1;
        if page["head_seq"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(page["head_seq"], 2, "the timer loop did not fire: {page}");
    let fired = &page["events"][0];
    assert_eq!(fired["type"], "timer_fired");
    assert_eq!(fired["due_at_ms"], START_MS + 3_000);
    assert_eq!(fired["missed_slots"], 2);
    assert_eq!(fired["next_fire_at_ms"], START_MS + 4_000);

    let (_, all) = get(&client, "/v1/events?after=0&limit=1").await;
    assert_eq!(all["events"].as_array().unwrap().len(), 1);
    assert_eq!(all["events"][0]["seq"], 1);
    let (_, rest) = get(&client, "/v1/events?after=1&limit=1000").await;
    assert_eq!(rest["events"][0]["seq"], 2);
    assert_eq!(
        get(&client, "/v1/events?after=2").await.1["events"],
        json!([])
    );
    assert_error(
        &get(&client, "/v1/events?after=x").await,
        400,
        "invalid_field",
        Some("after"),
    );
    assert_error(
        &get(&client, "/v1/events?limit=0").await,
        400,
        "invalid_field",
        Some("limit"),
    );
    assert_error(
        &get(&client, "/v1/events?limit=1001").await,
        400,
        "invalid_field",
        Some("limit"),
    );
    assert_error(
        &get(&client, "/v1/events?since=1").await,
        400,
        "invalid_field",
        Some("since"),
    );
    node.stop();
}
