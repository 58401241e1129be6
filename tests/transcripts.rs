//! Run transcripts over HTTP (real tokio, real TCP, the production file store in a temporary
//! data directory): entries written through the node's store for a real run read back with
//! paging, `complete` once finished, the same scoping as `GET /v1/runs/{id}`, and bad query
//! parameters answered 400 naming the field.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use vigil::api::client::ApiClient;
use vigil::api::{RUN_LOG_PAGE_DEFAULT, RUN_LOG_PAGE_MAX};
use vigil::engine::agent::AgentId;
use vigil::engine::run::RunId;
use vigil::io::clock::SystemClock;
use vigil::io::entropy::SeededEntropy;
use vigil::io::storage::StorageLocation;
use vigil::node::{Node, NodeConfig, TenantToken};
use vigil::redact::Redactor;
use vigil::transcript::{EntryBody, FileTranscripts, TranscriptEntry};

const ACME: &str = "acme-operator-token";
const GLOBEX: &str = "globex-operator-token";
/// Longest the test waits for a run to end; a bound on waiting, never a timing goal.
const WAIT_MS_MAX: u64 = 10_000;

struct Fixture {
    node: Node,
    acme: ApiClient,
    globex: ApiClient,
    dir: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn start(test: &str) -> Fixture {
    let dir = test_dir(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    start_in(dir).await
}

fn test_dir(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vigil-transcripts-{test}-{}", std::process::id()))
}

/// A ready node on `dir`, with whatever a test put there.
async fn start_in(dir: PathBuf) -> Fixture {
    let tenant = |tenant: &str, token: &str| TenantToken {
        tenant: tenant.into(),
        token: token.into(),
    };
    let mut node = Node::start(NodeConfig {
        listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        storage: StorageLocation::File(dir.join("vigil.redb")),
        clock: SystemClock::shared(),
        entropy: SeededEntropy::shared(11),
        tenants: vec![tenant("acme", ACME), tenant("globex", GLOBEX)],
        on_commit: None,
        on_replayed: None,
        adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
        run_services: vigil::exec::host::RunServices::standard(),
        transcripts: FileTranscripts::shared(&dir),
        alert_sinks: Vec::new(),
        snapshots: Default::default(),
        heartbeat_test_seam: false,
    })
    .await
    .expect("node starts");
    node.ready().await.expect("node recovers");
    let addr = node.local_addr();
    Fixture {
        node,
        acme: ApiClient::with_token(addr, ACME),
        globex: ApiClient::with_token(addr, GLOBEX),
        dir,
    }
}

async fn get(client: &ApiClient, path: &str) -> (u16, Value) {
    let answer = client.get(path).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

async fn post(client: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = client.post_json(path, &body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

fn assert_invalid(answer: &(u16, Value), field: &str) {
    assert_eq!(answer.0, 400, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], "invalid_field", "{}", answer.1);
    assert_eq!(answer.1["error"]["field"], field, "{}", answer.1);
}

/// An agent whose runs hang until cancelled (so the run stays open while we read), woken once:
/// (agent id, agent token, run id).
async fn hanging_run(f: &Fixture) -> (u64, String, u64) {
    let spec = json!({"name": "talker", "heartbeat": {"sources": ["on_demand"]},
        "adapter": {"type": "scripted", "steps": [{"duration_ms": 0, "outcome": "hang"}]}});
    let (status, created) = post(&f.acme, "/v1/agents", spec).await;
    assert_eq!(status, 201, "{created}");
    let agent = created["agent"]["id"].as_u64().unwrap();
    let token = created["token"].as_str().unwrap().to_string();
    let (status, woken) = post(
        &f.acme,
        &format!("/v1/agents/{agent}/wakeup"),
        json!({"source": "on_demand", "reason": "talk"}),
    )
    .await;
    assert!(status == 200 || status == 202, "{status} {woken}");
    let run = woken["run"]
        .as_u64()
        .or_else(|| woken["run"]["id"].as_u64())
        .unwrap_or_else(|| panic!("no run id in {woken}"));
    (agent, token, run)
}

fn entries(run: u64, count: u64) -> Vec<TranscriptEntry> {
    (0..count)
        .map(|seq| TranscriptEntry {
            run: RunId(run),
            seq,
            at_ms: 1_800_000_000_000 + seq,
            body: EntryBody::Note {
                text: format!("step {seq} with sk-test-secret-1234"),
            },
        })
        .collect()
}

fn seqs(page: &Value) -> Vec<u64> {
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_runs_transcript_reads_back_in_pages_and_completes_when_finished() {
    let f = start("pages").await;
    let (agent, _, run) = hanging_run(&f).await;
    let redactor = Redactor::new(["sk-test-secret-1234"]);
    let store = f.node.transcripts().clone();
    let written = entries(run, 250);
    store
        .append(AgentId(agent), RunId(run), &written, &redactor)
        .await
        .unwrap();

    // Default page size, then the rest.
    let (status, first) = get(&f.acme, &format!("/v1/runs/{run}/log")).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["run"], run);
    assert_eq!(seqs(&first).len(), RUN_LOG_PAGE_DEFAULT);
    assert_eq!(first["next_offset"], RUN_LOG_PAGE_DEFAULT as u64);
    assert_eq!(first["complete"], false);
    assert_eq!(first["entries"][0]["kind"], "note");
    assert_eq!(first["entries"][0]["text"], "step 0 with [REDACTED]");
    let (_, rest) = get(
        &f.acme,
        &format!("/v1/runs/{run}/log?offset=100&limit=1000"),
    )
    .await;
    assert_eq!(seqs(&rest), (100..250).collect::<Vec<_>>());
    assert_eq!(
        (rest["next_offset"].as_u64(), rest["complete"].as_bool()),
        (Some(250), Some(false))
    );
    // The largest page is allowed; past the end is an empty page.
    let (status, _) = get(
        &f.acme,
        &format!("/v1/runs/{run}/log?limit={RUN_LOG_PAGE_MAX}"),
    )
    .await;
    assert_eq!(status, 200);
    let (_, past) = get(&f.acme, &format!("/v1/runs/{run}/log?offset=900")).await;
    assert_eq!(
        (seqs(&past).len(), past["next_offset"].as_u64()),
        (0, Some(900))
    );

    // Finished: complete on the page that reaches the end, not before.
    store.finish(AgentId(agent), RunId(run)).await.unwrap();
    let (_, head) = get(&f.acme, &format!("/v1/runs/{run}/log?limit=10")).await;
    assert_eq!(head["complete"], false);
    let (_, tail) = get(&f.acme, &format!("/v1/runs/{run}/log?offset=240")).await;
    assert_eq!(tail["complete"], true);
    let on_disk =
        std::fs::read_to_string(FileTranscripts::new(&f.dir).path(AgentId(agent))).unwrap();
    assert!(!on_disk.contains("sk-test-secret"));
}

#[tokio::test]
async fn a_run_that_ended_without_a_transcript_is_complete_and_empty() {
    let f = start("ended").await;
    let (_, _, run) = hanging_run(&f).await;
    let (_, page) = get(&f.acme, &format!("/v1/runs/{run}/log")).await;
    assert_eq!(
        (seqs(&page).len(), page["complete"].as_bool()),
        (0, Some(false))
    );
    let (status, cancelled) = post(&f.acme, &format!("/v1/runs/{run}/cancel"), json!(null)).await;
    assert_eq!(status, 200, "{cancelled}");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let (_, page) = get(&f.acme, &format!("/v1/runs/{run}/log")).await;
        if page["complete"] == true {
            assert_eq!(seqs(&page).len(), 0);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never complete: {page}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_log_is_scoped_like_the_run() {
    let f = start("scope").await;
    let (agent, token, run) = hanging_run(&f).await;
    f.node
        .transcripts()
        .append(
            AgentId(agent),
            RunId(run),
            &entries(run, 3),
            &Redactor::default(),
        )
        .await
        .unwrap();
    let path = format!("/v1/runs/{run}/log");
    // The agent itself may read its run's log.
    let own = ApiClient::with_token(f.node.local_addr(), token);
    let (status, page) = get(&own, &path).await;
    assert_eq!((status, seqs(&page).len()), (200, 3), "{page}");
    // Another tenant's operator: not found, as if the run did not exist.
    let (status, body) = get(&f.globex, &path).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    // Another agent of the same tenant: forbidden, as for GET /v1/runs/{id}.
    let spec = json!({"name": "other", "heartbeat": {"sources": ["on_demand"]}});
    let (_, other) = post(&f.acme, "/v1/agents", spec).await;
    let other = ApiClient::with_token(f.node.local_addr(), other["token"].as_str().unwrap());
    let (status, _) = get(&other, &path).await;
    assert_eq!(status, 403);
    // Unknown run, no token.
    let (status, _) = get(&f.acme, "/v1/runs/999999/log").await;
    assert_eq!(status, 404);
    let anonymous = ApiClient::new(f.node.local_addr());
    let (status, _) = get(&anonymous, &path).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn bad_query_parameters_name_their_field() {
    let f = start("params").await;
    let (_, _, run) = hanging_run(&f).await;
    let path = |query: &str| format!("/v1/runs/{run}/log?{query}");
    assert_invalid(&get(&f.acme, &path("limit=0")).await, "limit");
    let over = RUN_LOG_PAGE_MAX + 1;
    assert_invalid(
        &get(&f.acme, &path(&format!("limit={over}"))).await,
        "limit",
    );
    assert_invalid(&get(&f.acme, &path("offset=-1")).await, "offset");
    assert_invalid(&get(&f.acme, &path("offset=x")).await, "offset");
    assert_invalid(&get(&f.acme, &path("after=3")).await, "after");
    assert_invalid(&get(&f.acme, &path("offset=1&offset=2")).await, "offset");
    assert_invalid(&get(&f.acme, "/v1/runs/abc/log").await, "id");
}

#[tokio::test]
async fn the_node_prunes_expired_transcripts_from_the_start() {
    // Transcripts left by earlier processes, their first entries at the epoch: long expired.
    // Agent 1's in the current layout, agent 2's in the one before (a file per run).
    let dir = test_dir("prune");
    let _ = std::fs::remove_dir_all(&dir);
    let line = |run: u64| {
        format!("{{\"run\":{run},\"seq\":0,\"at_ms\":0,\"kind\":\"note\",\"text\":\"old\"}}\n")
    };
    let current = FileTranscripts::new(&dir).path(AgentId(1));
    let legacy = dir.join("transcripts").join("2").join("7.ndjson");
    for (path, run) in [(&current, 1), (&legacy, 7)] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, line(run)).unwrap();
    }
    let _f = start_in(dir.clone()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    let moved = FileTranscripts::new(&dir).path(AgentId(2));
    while current.exists() || legacy.exists() || moved.exists() {
        assert!(tokio::time::Instant::now() < deadline, "never pruned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
