//! The real `vigil serve` stopped with SIGTERM while runs go: it drains (ADR 0015). No run
//! starts, wakeups still queue, the runs going finish within the grace, and the restart runs no
//! finished run twice; a run still going when the grace ends is the only one re-queued.

// Shared with the process-agent tests; this file uses part of it.
#[allow(dead_code)]
#[path = "support/process_node.rs"]
mod process_node;

use process_node::{fresh_data_dir, get, poll, post, run, wake, Serve};
use serde_json::{json, Value};
use vigil::api::client::ApiClient;

/// Creates an agent woken on demand only, whose every run plays `step`; its id.
async fn scripted(api: &ApiClient, name: &str, step: Value) -> u64 {
    let body = json!({
        "name": name,
        "heartbeat": {"sources": ["on_demand"]},
        "adapter": {"type": "scripted", "steps": [step]},
    });
    let (status, created) = post(api, "/v1/agents", body).await;
    assert_eq!(status, 201, "{created}");
    created["agent"]["id"].as_u64().unwrap()
}

async fn status_of(api: &ApiClient, id: u64) -> String {
    run(api, id).await["status"].as_str().unwrap().to_string()
}

/// The runs of `agent`, oldest first.
async fn runs_of(api: &ApiClient, agent: u64) -> Vec<Value> {
    let page = get(api, &format!("/v1/runs?agent={agent}")).await;
    let mut runs = page["runs"].as_array().unwrap().clone();
    runs.sort_by_key(|r| r["id"].as_u64());
    runs
}

#[tokio::test]
async fn sigterm_drains_running_runs_finish_and_none_runs_twice() {
    let data_dir = fresh_data_dir("drain");
    let mut node = Serve::start_with(&data_dir, &["--drain-grace-s", "30"]).await;
    let api = node.api.clone();
    let agent = scripted(
        &api,
        "slow",
        json!({"duration_ms": 1_500, "outcome": "succeeded"}),
    )
    .await;
    let first = wake(&api, agent, "before the stop").await;
    poll("the first run to start", || async {
        status_of(&api, first).await == "running"
    })
    .await;

    node.signal(libc::SIGTERM);
    // Draining: the health check says so, and a wakeup is still answered: it queues.
    poll("the node to say it drains", || async {
        let answer = api.get("/v1/health").await.unwrap();
        answer.status.as_u16() == 503 && answer.json().unwrap()["status"] == "draining"
    })
    .await;
    let (status, during) = post(
        &api,
        &format!("/v1/agents/{agent}/wakeup"),
        json!({"source": "on_demand", "reason": "while draining"}),
    )
    .await;
    assert_eq!(status, 200, "{during}");
    assert_eq!(during["outcome"], "queued", "{during}");
    let second = during["run"].as_u64().unwrap();
    assert_eq!(status_of(&api, second).await, "queued");
    assert!(node.exited().await.success());
    drop(node);

    let node = Serve::start(&data_dir).await;
    let api = &node.api;
    // The run that was going finished within the grace; the restart did not run it again.
    let old = run(api, first).await;
    assert_eq!(old["status"], "succeeded", "{old}");
    // The wakeup taken while draining was kept, and runs now.
    poll("the queued run to succeed", || async {
        status_of(api, second).await == "succeeded"
    })
    .await;
    let runs = runs_of(api, agent).await;
    let ids: Vec<u64> = runs.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [first, second], "{runs:?}");
    assert!(runs.iter().all(|r| r["retry_of"].is_null()), "{runs:?}");
}

#[tokio::test]
async fn a_run_still_going_when_the_drain_grace_ends_is_stopped_and_alone_requeued() {
    let data_dir = fresh_data_dir("drain-grace");
    let mut node = Serve::start_with(&data_dir, &["--drain-grace-s", "1"]).await;
    let api = node.api.clone();
    let hanger = scripted(&api, "hanger", json!({"duration_ms": 0, "outcome": "hang"})).await;
    let quick = scripted(
        &api,
        "quick",
        json!({"duration_ms": 200, "outcome": "succeeded"}),
    )
    .await;
    let hung = wake(&api, hanger, "never ends").await;
    let finishing = wake(&api, quick, "ends in time").await;
    poll("the hanging run to start", || async {
        status_of(&api, hung).await == "running"
    })
    .await;
    node.signal(libc::SIGTERM);
    assert!(node.exited().await.success());
    drop(node);

    let node = Serve::start(&data_dir).await;
    let api = &node.api;
    let finished = run(api, finishing).await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    assert_eq!(
        runs_of(api, quick).await.len(),
        1,
        "a run that finished within the grace ran again"
    );
    let stopped = run(api, hung).await;
    assert_eq!(stopped["detail"], "control_plane_restart", "{stopped}");
    let retries: Vec<Value> = runs_of(api, hanger)
        .await
        .into_iter()
        .filter(|r| r["retry_of"] == hung)
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
}

#[tokio::test]
async fn the_drain_grace_is_refused_past_its_limit_and_taken_at_it() {
    let past = (vigil::node::DRAIN_GRACE_MAX_S + 1).to_string();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["serve", "--listen", "127.0.0.1:0", "--drain-grace-s", &past])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--drain-grace-s"), "{stderr}");
    // The limit itself is taken: the node starts and becomes ready (and, with no run going,
    // stops at once when dropped).
    let at_limit = vigil::node::DRAIN_GRACE_MAX_S.to_string();
    let data_dir = fresh_data_dir("drain-grace-max");
    Serve::start_with(&data_dir, &["--drain-grace-s", &at_limit]).await;
}

/// `--workers` (not a drain setting, but a `serve` flag checked at its bounds the same way):
/// 0 and one past the limit are refused naming the flag; 1 and the limit start a node that
/// serves.
#[tokio::test]
async fn the_worker_count_is_refused_outside_its_bounds_and_taken_at_them() {
    for refused in ["0".to_string(), (vigil::node::WORKERS_MAX + 1).to_string()] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
            .args(["serve", "--listen", "127.0.0.1:0", "--workers", &refused])
            .output()
            .unwrap();
        assert!(!output.status.success(), "--workers {refused} was taken");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--workers"), "{stderr}");
    }
    for taken in ["1".to_string(), vigil::node::WORKERS_MAX.to_string()] {
        let data_dir = fresh_data_dir(&format!("workers-{taken}"));
        let node =
            Serve::start_with(&data_dir, &["--drain-grace-s", "0", "--workers", &taken]).await;
        let health = get(&node.api, "/v1/health").await;
        assert_eq!(health["status"], "ok", "--workers {taken}: {health}");
    }
}
