//! `GET /metrics` of a real `vigil serve`, parsed with a Prometheus text-format parser: what the
//! node did shows in its counters and gauges, and only the node's own operator may read them.
//! And `VIGIL_LOG_FORMAT=json`: every log line a JSON object.

// Shared with the process-agent tests; this file uses part of it.
#[allow(dead_code)]
#[path = "support/process_node.rs"]
mod process_node;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use process_node::{finished, fresh_data_dir, poll, post, wake, Serve};
use prometheus_parse::{Scrape, Value as Sample};
use serde_json::{json, Value};
use vigil::api::client::ApiClient;

/// Creates a scripted agent whose runs play `outcome`, with `more` merged into its spec.
async fn scripted(api: &ApiClient, name: &str, outcome: &str, more: Value) -> u64 {
    let mut spec = json!({
        "name": name,
        "adapter": {"type": "scripted", "steps": [{"duration_ms": 10, "outcome": outcome}]},
    });
    spec.as_object_mut()
        .unwrap()
        .extend(more.as_object().unwrap().clone());
    let (status, created) = post(api, "/v1/agents", spec).await;
    assert_eq!(status, 201, "{created}");
    created["agent"]["id"].as_u64().unwrap()
}

/// One scrape, parsed as Prometheus parses it.
async fn scrape(api: &ApiClient) -> Scrape {
    let answer = api.get("/metrics").await.unwrap();
    let text = String::from_utf8(answer.body.to_vec()).unwrap();
    assert_eq!(answer.status.as_u16(), 200, "{text}");
    let content_type = answer
        .headers
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    Scrape::parse(text.lines().map(|line| Ok(line.to_owned()))).expect("valid exposition text")
}

/// The sum of the samples of `metric` whose labels include `labels`.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|sample| sample.metric == metric)
        .filter(|sample| {
            labels
                .iter()
                .all(|(key, want)| sample.labels.get(key) == Some(*want))
        })
        .map(|sample| match &sample.value {
            Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => *v,
            other => panic!("{metric} is not a plain number: {other:?}"),
        })
        .sum()
}

#[tokio::test]
async fn metrics_count_what_the_node_did_as_prometheus_reads_them() {
    let dir = fresh_data_dir("metrics");
    let node = Serve::start(&dir).await;
    let api = &node.api;
    let ok = scripted(api, "ok", "succeeded", json!({})).await;
    let failing = scripted(
        api,
        "failing",
        "failed",
        json!({"breaker": {"failures_to_open": 1}}),
    )
    .await;
    let timer_only = scripted(
        api,
        "timer-only",
        "succeeded",
        json!({"heartbeat": {"sources": ["timer"]}}),
    )
    .await;
    for agent in [ok, failing] {
        let run = wake(api, agent, "metrics").await;
        finished(api, run).await;
    }
    let (status, refused) = post(
        api,
        &format!("/v1/agents/{timer_only}/wakeup"),
        json!({"source": "on_demand", "reason": "not accepted"}),
    )
    .await;
    assert_eq!(status, 200, "{refused}");
    assert_eq!(refused["outcome"], "refused", "{refused}");
    let (status, pulsed) = post(api, &format!("/v1/agents/{ok}/pulse"), json!({})).await;
    assert_eq!(status, 200, "{pulsed}");
    // The breaker's opening is committed with the failed run's end; wait until it shows.
    poll("the breaker to open", || async {
        value(&scrape(api).await, "vigil_breaker_openings_total", &[]) == 1.0
    })
    .await;

    let s = scrape(api).await;
    let wakeups = |source, outcome| {
        value(
            &s,
            "vigil_wakeups_total",
            &[("source", source), ("outcome", outcome)],
        )
    };
    assert_eq!(wakeups("on_demand", "queued"), 2.0);
    assert_eq!(wakeups("on_demand", "refused"), 1.0);
    assert_eq!(
        value(
            &s,
            "vigil_wakeup_refusals_total",
            &[("reason", "disabled_source")]
        ),
        1.0
    );
    assert_eq!(
        value(&s, "vigil_runs_finished_total", &[("status", "succeeded")]),
        1.0
    );
    assert_eq!(
        value(&s, "vigil_runs_finished_total", &[("status", "failed")]),
        1.0
    );
    assert_eq!(
        value(&s, "vigil_breaker_openings_total", &[("trigger", "llm")]),
        1.0
    );
    assert_eq!(value(&s, "vigil_breakers", &[("state", "open")]), 1.0);
    assert_eq!(value(&s, "vigil_breakers", &[("state", "closed")]), 2.0);
    assert_eq!(value(&s, "vigil_agents", &[("status", "active")]), 3.0);
    assert_eq!(value(&s, "vigil_agents", &[("liveness", "online")]), 1.0);
    assert_eq!(value(&s, "vigil_pulses_total", &[]), 1.0);
    assert_eq!(value(&s, "vigil_runs", &[("state", "running")]), 0.0);
    assert_eq!(value(&s, "vigil_runs", &[("state", "queued")]), 0.0);
    assert_eq!(value(&s, "vigil_agents_paused", &[]), 0.0);
    // Every event the log holds was counted once: the feed's head is the count (the tenant
    // of the node's own token is the only one, so it sees them all).
    let head = api.get("/v1/events").await.unwrap().json().unwrap()["head_seq"]
        .as_f64()
        .unwrap();
    assert_eq!(value(&s, "vigil_events_total", &[]), head);
    assert!(
        s.samples
            .iter()
            .any(|sample| sample.metric == "vigil_commit_seconds"
                || sample.metric.starts_with("vigil_commit_seconds_")),
        "no commit latency histogram"
    );
}

#[tokio::test]
async fn metrics_need_the_operator_token_of_the_nodes_own_tenant() {
    let dir = fresh_data_dir("metrics-auth");
    let node = Serve::start(&dir).await;
    let (status, created) = post(&node.api, "/v1/agents", json!({"name": "a"})).await;
    assert_eq!(status, 201, "{created}");
    let agent_token = created["token"].as_str().unwrap();
    let addr = node.api.addr();
    let anonymous = ApiClient::new(addr).get("/metrics").await.unwrap();
    assert_eq!(anonymous.status.as_u16(), 401);
    let as_agent = ApiClient::with_token(addr, agent_token)
        .get("/metrics")
        .await
        .unwrap();
    assert_eq!(as_agent.status.as_u16(), 403);
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = fresh_data_dir("json-logs");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .env("VIGIL_LOG_FORMAT", "json")
        .env("VIGIL_LOG", "info")
        .env("VIGIL_OPERATOR_TOKEN", process_node::TOKEN)
        .env_remove("VIGIL_FLEET")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut logged = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        // The node tells a person how to reach it in plain text, once it is ready: by then
        // recovery has logged. Everything else is a log line, and JSON.
        if line.starts_with("try: ") {
            break;
        }
        let record: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        logged.push(record);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let recovered = logged
        .iter()
        .find(|r| r["fields"]["message"] == "recovered state from the event log")
        .expect("the recovery line");
    assert_eq!(recovered["level"], "INFO");
    assert_eq!(recovered["fields"]["events"], 0);
    assert!(recovered["timestamp"].is_string());
}
