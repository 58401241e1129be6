//! The real `vigil serve` process, killed with SIGKILL while clients are writing, restarted on
//! the same data directory: every write it acknowledged is still there (invariant 4). Stopped
//! with SIGTERM while runs go: it drains (ADR 0015), and the restart runs no finished run twice.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::json;
use vigil::api::client::ApiClient;

/// The operator token the tests configure (`vigil serve --operator-token` via its env var).
const TOKEN: &str = "vgl_op_kill-restart-test-token";

/// Starts `vigil serve` on a free port; returns the child and a client of the address it
/// printed, once the node answers ready.
async fn serve(data_dir: &Path) -> (Child, ApiClient) {
    serve_with(data_dir, &[]).await
}

/// [`serve`] with more `vigil serve` arguments.
async fn serve_with(data_dir: &Path, args: &[&str]) -> (Child, ApiClient) {
    let (child, addr) = spawn_serve(data_dir, args);
    let client = ApiClient::with_token(addr, TOKEN);
    // It listens before recovery is done; wait (bounded) until it is ready.
    for _ in 0..300 {
        if client
            .get("/v1/health")
            .await
            .is_ok_and(|a| a.status.as_u16() == 200)
        {
            return (child, client);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("vigil serve at {addr} never became ready");
}

fn spawn_serve(data_dir: &Path, args: &[&str]) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(args)
        .env("VIGIL_LOG", "warn")
        .env("VIGIL_OPERATOR_TOKEN", TOKEN)
        .env_remove("VIGIL_FLEET")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("vigil serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line from vigil serve: {line:?}"))
        .parse()
        .unwrap();
    (child, addr)
}

/// An empty data directory of this test process, named after the test.
fn fresh_data_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[tokio::test]
async fn sigkill_loses_nothing_that_was_acknowledged() {
    let data_dir = fresh_data_dir("kill");

    let (mut child, client) = serve(&data_dir).await;
    // Four writers create agents as fast as they can; the process is killed while they write.
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for i in 0.. {
                    let body = json!({"name": format!("w{writer}-{i}"), "heartbeat": {"interval_ms": 60_000}});
                    match client.post_json("/v1/agents", &body).await {
                        Ok(answer) if answer.status.as_u16() == 201 => {
                            let json = answer.json().unwrap();
                            acked.push((
                                json["agent"]["id"].as_u64().unwrap(),
                                body["name"].clone(),
                                json["seq"].as_u64().unwrap(),
                            ));
                        }
                        _ => return acked,
                    }
                }
                acked
            })
        })
        .collect();
    // Kill once a good number of writes were acknowledged, with writers still going.
    loop {
        let head = client.get("/v1/events").await.unwrap().json().unwrap()["head_seq"]
            .as_u64()
            .unwrap();
        if head >= 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    child.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix
    child.wait().unwrap();
    let mut acked = Vec::new();
    for writer in writers {
        acked.extend(writer.await.unwrap());
    }
    assert!(
        acked.len() >= 200,
        "only {} writes were acknowledged before the kill",
        acked.len()
    );

    let (mut child, client) = serve(&data_dir).await;
    let listing = client.get("/v1/agents").await.unwrap().json().unwrap();
    let agents = listing["agents"].as_array().unwrap();
    for (id, name, seq) in &acked {
        assert!(
            agents.iter().any(|a| a["id"] == *id && a["name"] == *name),
            "acknowledged agent {name} ({id}, seq {seq}) is gone after SIGKILL"
        );
    }
    // The log is gap-free from 1 and holds each acknowledged creation at its seq.
    let mut after = 0;
    loop {
        let page = client
            .get(&format!("/v1/events?after={after}&limit=1000"))
            .await
            .unwrap()
            .json()
            .unwrap();
        let events = page["events"].as_array().unwrap().clone();
        if events.is_empty() {
            break;
        }
        for event in &events {
            assert_eq!(event["seq"], after + 1);
            after += 1;
        }
    }
    for (id, _, seq) in &acked {
        assert!(
            *seq <= after,
            "acknowledged seq {seq} (agent {id}) beyond the recovered log head {after}"
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&data_dir).unwrap();
}

#[tokio::test]
async fn sigterm_stops_cleanly_and_the_restart_keeps_everything() {
    let data_dir = fresh_data_dir("term");
    let (mut child, client) = serve(&data_dir).await;
    for i in 0..10 {
        let body = json!({"name": format!("a{i}"), "heartbeat": {"interval_ms": 60_000}});
        assert_eq!(
            client
                .post_json("/v1/agents", &body)
                .await
                .unwrap()
                .status
                .as_u16(),
            201
        );
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Bounded wait for the exit (not a timing goal: a stuck process fails after 30 s).
    let mut exit = None;
    for _ in 0..300 {
        exit = child.try_wait().unwrap();
        if exit.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let exit = exit.expect("vigil serve did not stop on SIGTERM");
    assert!(exit.success(), "vigil serve exited with {exit} on SIGTERM");

    let (mut child, client) = serve(&data_dir).await;
    let listing = client.get("/v1/agents").await.unwrap().json().unwrap();
    assert_eq!(listing["agents"].as_array().unwrap().len(), 10);
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&data_dir).unwrap();
}

/// Creates an agent woken on demand only, whose every run plays `step`; its id.
async fn scripted_agent(client: &ApiClient, name: &str, step: serde_json::Value) -> u64 {
    let body = json!({
        "name": name,
        "heartbeat": {"sources": ["on_demand"]},
        "adapter": {"type": "scripted", "steps": [step]},
    });
    let answer = client.post_json("/v1/agents", &body).await.unwrap();
    assert_eq!(answer.status.as_u16(), 201);
    answer.json().unwrap()["agent"]["id"].as_u64().unwrap()
}

/// Wakes `agent` on demand; the wakeup's answer.
async fn wake(client: &ApiClient, agent: u64, reason: &str) -> serde_json::Value {
    let body = json!({"source": "on_demand", "reason": reason});
    let answer = client
        .post_json(&format!("/v1/agents/{agent}/wakeup"), &body)
        .await
        .unwrap();
    assert_eq!(answer.status.as_u16(), 200);
    answer.json().unwrap()
}

async fn run(client: &ApiClient, run: u64) -> serde_json::Value {
    client
        .get(&format!("/v1/runs/{run}"))
        .await
        .unwrap()
        .json()
        .unwrap()
}

/// Polls run `id` until `done` holds for it (bounded: a stuck run fails after 10 s).
async fn wait_run(client: &ApiClient, id: u64, done: impl Fn(&serde_json::Value) -> bool) {
    for _ in 0..200 {
        if done(&run(client, id).await) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!(
        "run {id} never reached the expected state: {}",
        run(client, id).await
    );
}

/// Sends SIGTERM to `child`.
fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for `child` to exit (bounded: a stuck process fails after 30 s).
async fn exited(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..300 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    panic!("vigil serve did not stop after SIGTERM");
}

/// The runs of `agent`, oldest first.
async fn runs_of(client: &ApiClient, agent: u64) -> Vec<serde_json::Value> {
    let page = client
        .get(&format!("/v1/runs?agent={agent}"))
        .await
        .unwrap()
        .json()
        .unwrap();
    let mut runs = page["runs"].as_array().unwrap().clone();
    runs.sort_by_key(|r| r["id"].as_u64());
    runs
}

#[tokio::test]
async fn sigterm_drains_running_runs_finish_and_none_runs_twice() {
    let data_dir = fresh_data_dir("drain");
    let (mut child, client) = serve_with(&data_dir, &["--drain-grace-s", "30"]).await;
    let agent = scripted_agent(
        &client,
        "slow",
        json!({"duration_ms": 1_500, "outcome": "succeeded"}),
    )
    .await;
    let first = wake(&client, agent, "before the stop").await["run"]
        .as_u64()
        .unwrap();
    wait_run(&client, first, |r| r["status"] == "running").await;

    sigterm(&child);
    // Draining: the health check says so, wakeups are still answered, and they queue.
    let mut health = serde_json::Value::Null;
    for _ in 0..100 {
        let answer = client.get("/v1/health").await.unwrap();
        health = answer.json().unwrap();
        if health["status"] == "draining" {
            assert_eq!(answer.status.as_u16(), 503);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(health["status"], "draining", "{health}");
    let during = wake(&client, agent, "while draining").await;
    assert_eq!(during["outcome"], "queued", "{during}");
    let second = during["run"].as_u64().unwrap();
    assert!(exited(&mut child).await.success());

    let (mut child, client) = serve(&data_dir).await;
    // The run that was going finished within the grace, and the restart did not run it again.
    let old = run(&client, first).await;
    assert_eq!(old["status"], "succeeded", "{old}");
    // The wakeup taken while draining was kept, and runs now.
    wait_run(&client, second, |r| r["status"] == "succeeded").await;
    let runs = runs_of(&client, agent).await;
    let ids: Vec<u64> = runs.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [first, second], "{runs:?}");
    assert!(runs.iter().all(|r| r["retry_of"].is_null()), "{runs:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&data_dir).unwrap();
}

#[tokio::test]
async fn a_run_still_going_when_the_drain_grace_ends_is_stopped_and_alone_requeued() {
    let data_dir = fresh_data_dir("drain-grace");
    let (mut child, client) = serve_with(&data_dir, &["--drain-grace-s", "1"]).await;
    let hanger = scripted_agent(
        &client,
        "hanger",
        json!({"duration_ms": 0, "outcome": "hang"}),
    )
    .await;
    let quick = scripted_agent(
        &client,
        "quick",
        json!({"duration_ms": 200, "outcome": "succeeded"}),
    )
    .await;
    let hung = wake(&client, hanger, "never ends").await["run"]
        .as_u64()
        .unwrap();
    let finishing = wake(&client, quick, "ends in time").await["run"]
        .as_u64()
        .unwrap();
    wait_run(&client, hung, |r| r["status"] == "running").await;
    sigterm(&child);
    assert!(exited(&mut child).await.success());

    let (mut child, client) = serve(&data_dir).await;
    let finished = run(&client, finishing).await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    assert!(
        runs_of(&client, quick).await.len() == 1,
        "a run that finished within the grace ran again"
    );
    let stopped = run(&client, hung).await;
    assert_eq!(stopped["detail"], "control_plane_restart", "{stopped}");
    let retries: Vec<serde_json::Value> = runs_of(&client, hanger)
        .await
        .into_iter()
        .filter(|r| r["retry_of"] == hung)
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&data_dir).unwrap();
}

#[test]
fn a_drain_grace_past_its_limit_is_refused_naming_the_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["serve", "--listen", "127.0.0.1:0", "--drain-grace-s"])
        .arg((vigil::node::DRAIN_GRACE_MAX_S + 1).to_string())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--drain-grace-s"), "{stderr}");
    // The limit itself is accepted: the node starts and listens.
    let data_dir = fresh_data_dir("drain-grace-max");
    let max = vigil::node::DRAIN_GRACE_MAX_S.to_string();
    let (mut child, _addr) = spawn_serve(&data_dir, &["--drain-grace-s", &max]);
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&data_dir);
}
