//! Alerts from the real `vigil serve` to a local webhook, across a SIGKILL (docs/operations.md
//! "Alerts", ADR 0018): every alert the log calls for is delivered, none is lost, a duplicate
//! carries the same id and body, and a refusal alerts once per agent and day even across the
//! restart; a restart after the catch-up bound skips the old alerts (counted) and still delivers
//! new ones.

// Shared with the process-agent tests; this file uses part of it.
#[allow(dead_code)]
#[path = "support/process_node.rs"]
mod process_node;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use process_node::{events, finished, fresh_data_dir, poll, post, Serve, SECRET, SECRET_ENV};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use vigil::api::client::ApiClient;

/// One POST the sink received.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    body: Value,
    verified: bool,
    /// What the sink answered.
    status: u16,
}

/// A local alert receiver: verifies each signature with its own HMAC-SHA256 over the bytes it
/// received, answers 200 while it has acceptances left and 503 after, and records every POST.
#[derive(Clone)]
struct Sink {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    /// How many more POSTs it answers 200 (then 503).
    accepts: Arc<AtomicU64>,
}

impl Sink {
    async fn start(accepts: u64) -> Sink {
        let received = Arc::new(Mutex::new(Vec::new()));
        let accepts = Arc::new(AtomicU64::new(accepts));
        let (seen, left) = (received.clone(), accepts.clone());
        let router = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let (seen, left) = (seen.clone(), left.clone());
            async move {
                let verified = verify(&headers, &body);
                let accept = verified
                    && left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                let status = if accept { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                let id = header(&headers, "x-vigil-alert-id").unwrap_or_default();
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let status_code = status.as_u16();
                seen.lock().unwrap().push(Received { id, body, verified, status: status_code });
                status
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(vigil::api::serve(listener, router));
        Sink { addr, received, accepts }
    }

    fn accept_all(&self) {
        self.accepts.store(u64::MAX, Ordering::SeqCst);
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The ids answered 200, with how many times each.
    fn delivered(&self) -> BTreeMap<String, usize> {
        let mut delivered = BTreeMap::new();
        for r in self.received().into_iter().filter(|r| r.status == 200) {
            *delivered.entry(r.id).or_default() += 1;
        }
        delivered
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// What a receiver does: HMAC-SHA256 of `"<timestamp>.<raw body>"` keyed with the shared secret.
fn verify(headers: &HeaderMap, body: &[u8]) -> bool {
    let (Some(timestamp), Some(signature)) =
        (header(headers, "x-vigil-timestamp"), header(headers, "x-vigil-signature"))
    else {
        return false;
    };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    signature == format!("sha256={hex}")
}

/// A node config with one sink, `ops`, at `sink`.
fn config(dir: &Path, sink: &Sink, extra: &str) -> PathBuf {
    let path = dir.with_extension("toml");
    let text = format!(
        "[[alerts]]\nname = \"ops\"\nurl = \"http://{}/hook\"\nsecret_env = \"{SECRET_ENV}\"\n{extra}",
        sink.addr
    );
    std::fs::write(&path, text).unwrap();
    path
}

async fn start(data_dir: &Path, config: &Path) -> Serve {
    let config = config.to_str().unwrap();
    Serve::start_with(data_dir, &["--drain-grace-s", "0", "--config", config]).await
}

/// A scripted agent woken on demand whose every run ends `outcome`, with `extra` merged into
/// its spec; its id.
async fn agent(api: &ApiClient, name: &str, outcome: &str, extra: Value) -> u64 {
    let mut body = json!({
        "name": name,
        "heartbeat": {"sources": ["on_demand"]},
        "adapter": {"type": "scripted", "steps": [{"duration_ms": 0, "outcome": outcome}]},
    });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (status, created) = post(api, "/v1/agents", body).await;
    assert_eq!(status, 201, "{created}");
    created["agent"]["id"].as_u64().unwrap()
}

/// Wakes `agent`; the wakeup's answer.
async fn wake(api: &ApiClient, agent: u64) -> Value {
    let body = json!({"source": "on_demand", "reason": "alert test"});
    let (status, answer) = post(api, &format!("/v1/agents/{agent}/wakeup"), body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Wakes `agent` and waits for its run to end.
async fn wake_and_finish(api: &ApiClient, agent: u64) {
    let answer = wake(api, agent).await;
    finished(api, answer["run"].as_u64().unwrap()).await;
}

/// The alerts the log calls for, restated from the event feed: every failed or timed-out run,
/// every breaker opening and offline agent, and the first daily-cap or budget refusal of each
/// agent and (UTC) day.
fn expected_alerts(events: &[Value]) -> BTreeSet<String> {
    let mut first_of_day = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for e in events {
        let raises = match e["type"].as_str().unwrap() {
            "run_finished" => matches!(e["status"].as_str(), Some("failed" | "timed_out")),
            "breaker_opened" | "agent_offline" => true,
            "wakeup_refused" => match e["refusal"].as_str() {
                Some(refusal @ ("daily_cap" | "budget")) => {
                    let day = e["at_ms"].as_u64().unwrap() / 86_400_000;
                    first_of_day.insert((refusal.to_string(), e["agent"].as_u64(), day))
                }
                _ => false,
            },
            _ => false,
        };
        if raises {
            ids.insert(format!("ops:{}", e["seq"]));
        }
    }
    ids
}

/// The event feed once it holds `n` alertable events, and their alert ids. Why a wait: a run
/// reads as ended as soon as the engine decided it, one group commit before its end is durable
/// (ADR 0012), and the feed shows only the durable log.
async fn alerts_in_log(api: &ApiClient, n: usize) -> (Vec<Value>, BTreeSet<String>) {
    let mut last = (Vec::new(), BTreeSet::new());
    for _ in 0..process_node::WAIT_MS_MAX / process_node::POLL_MS {
        let (_, all) = events(api).await;
        let ids = expected_alerts(&all);
        if ids.len() >= n {
            return (all, ids);
        }
        last = (all, ids);
        tokio::time::sleep(Duration::from_millis(process_node::POLL_MS)).await;
    }
    panic!("the log never held {n} alertable events: {:?}", last.1);
}

/// Every POST verified, its id header the body's id; duplicates identical.
fn check_received(received: &[Received]) {
    let mut bodies: BTreeMap<&str, &Value> = BTreeMap::new();
    for r in received {
        assert!(r.verified, "a POST did not verify: {r:?}");
        assert_eq!(r.body["id"], r.id.as_str(), "{r:?}");
        if let Some(earlier) = bodies.insert(&r.id, &r.body) {
            assert_eq!(earlier, &r.body, "a duplicate of {} differs", r.id);
        }
    }
}

#[tokio::test]
async fn every_alert_is_delivered_across_a_sigkill_none_lost_duplicates_by_id() {
    let data_dir = fresh_data_dir("alerts-sigkill");
    // The first alert (the daily cap) is taken; then the sink fails until after the restart.
    let sink = Sink::start(1).await;
    let config = config(&data_dir, &sink, "");
    let mut node = start(&data_dir, &config).await;
    let api = node.api.clone();
    let capped = agent(&api, "capped", "succeeded", json!({"limits": {"daily_cap": 1}})).await;
    wake_and_finish(&api, capped).await;
    for _ in 0..2 {
        assert_eq!(wake(&api, capped).await["refusal"], "daily_cap");
    }
    let failing = agent(&api, "failing", "failed", json!({})).await;
    for _ in 0..3 {
        wake_and_finish(&api, failing).await;
    }
    // Three runs failed, the breaker opened, the cap was reached once.
    let (_, expected_before) = alerts_in_log(&api, 5).await;
    assert_eq!(expected_before.len(), 5, "{expected_before:?}");
    // Killed while alerts are pending: one delivered, the next refused at least once.
    poll("a refused delivery", || async { sink.received().iter().any(|r| r.status == 503) }).await;
    node.signal(libc::SIGKILL);
    node.exited().await;
    drop(node);
    assert_eq!(sink.delivered().len(), 1, "{:?}", sink.received());

    sink.accept_all();
    let node = start(&data_dir, &config).await;
    let api = &node.api;
    // The cap's day was saved with its delivery: a refusal after the restart raises nothing.
    assert_eq!(wake(api, capped).await["refusal"], "daily_cap");
    let (_, all) = events(api).await;
    let expected = expected_alerts(&all);
    assert_eq!(expected, expected_before, "the refusal after the restart is no alert");
    poll("every alert delivered", || async {
        expected.iter().all(|id| sink.delivered().contains_key(id))
    })
    .await;
    // Nothing else comes: wait past the first retry's backoff.
    tokio::time::sleep(Duration::from_millis(vigil::alerts::ALERT_RETRY_FIRST_MS + 500)).await;
    let delivered = sink.delivered();
    let ids: BTreeSet<String> = delivered.keys().cloned().collect();
    assert_eq!(ids, expected, "{:?}", sink.received());
    check_received(&sink.received());
    let duplicates: usize = delivered.values().map(|n| n - 1).sum();
    assert!(duplicates <= 1, "only the alert in flight at the kill may repeat: {delivered:?}");
    eprintln!(
        "alerts: {} expected, {} POSTs, {} delivered, {} duplicates",
        expected.len(),
        sink.received().len(),
        delivered.values().sum::<usize>(),
        duplicates
    );
}

#[tokio::test]
async fn a_restart_past_the_catch_up_bound_skips_old_alerts_and_delivers_new_ones() {
    const CATCH_UP_S: u64 = 3;
    let data_dir = fresh_data_dir("alerts-catch-up");
    let sink = Sink::start(0).await;
    let config = config(&data_dir, &sink, &format!("catch_up_s = {CATCH_UP_S}\n"));
    let mut node = start(&data_dir, &config).await;
    let api = node.api.clone();
    // The breaker stays closed: only `run_failed` here.
    let failing = agent(&api, "failing", "failed", json!({"breaker": {"failures_to_open": 10}})).await;
    for _ in 0..2 {
        wake_and_finish(&api, failing).await;
    }
    let (_, old_ids) = alerts_in_log(&api, 2).await;
    poll("a refused delivery", || async { !sink.received().is_empty() }).await;
    node.signal(libc::SIGKILL);
    node.exited().await;
    drop(node);
    assert_eq!(old_ids.len(), 2, "{old_ids:?}");
    tokio::time::sleep(Duration::from_millis(CATCH_UP_S * 1_000 + 500)).await;

    sink.accept_all();
    let node = start(&data_dir, &config).await;
    let api = &node.api;
    wake_and_finish(api, failing).await;
    let (_, all) = alerts_in_log(api, 3).await;
    let new_ids: BTreeSet<String> = all.difference(&old_ids).cloned().collect();
    assert_eq!(new_ids.len(), 1, "{new_ids:?}");
    poll("the new alert delivered", || async {
        new_ids.iter().all(|id| sink.delivered().contains_key(id))
    })
    .await;
    let delivered: BTreeSet<String> = sink.delivered().into_keys().collect();
    assert_eq!(delivered, new_ids, "an old alert was delivered: {:?}", sink.received());
    check_received(&sink.received());
    // The node counts a delivery once the receiver's answer is back, which may be just after
    // the receiver has recorded it: wait for the count, then read both.
    let delivered = "vigil_alerts_delivered_total{sink=\"ops\",kind=\"run_failed\"} 1";
    poll("the delivery counted", || async {
        let metrics = node.api.get("/metrics").await.unwrap();
        String::from_utf8_lossy(&metrics.body).contains(delivered)
    })
    .await;
    let metrics = node.api.get("/metrics").await.unwrap();
    let text = String::from_utf8_lossy(&metrics.body);
    let skipped = "vigil_alerts_skipped_total{sink=\"ops\",kind=\"run_failed\"} 2";
    assert!(text.contains(skipped), "{text}");
    assert!(text.contains(delivered), "{text}");
}

#[tokio::test]
async fn a_sink_whose_key_is_not_set_stops_the_start_with_the_variable_named() {
    let data_dir = fresh_data_dir("alerts-no-key");
    let path = data_dir.with_extension("toml");
    let toml = "[[alerts]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/\"\nsecret_env = \"VIGIL_TEST_UNSET_ALERT_KEY\"\n";
    std::fs::write(&path, toml).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .arg("--config")
        .arg(&path)
        .env_remove("VIGIL_TEST_UNSET_ALERT_KEY")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("VIGIL_TEST_UNSET_ALERT_KEY") && stderr.contains("secret_env"), "{stderr}");
}
