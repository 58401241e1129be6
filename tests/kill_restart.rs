//! The real `vigil serve` process, killed with SIGKILL while clients are writing, restarted on
//! the same data directory: every write it acknowledged is still there (invariant 4).

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
    let (child, addr) = spawn_serve(data_dir);
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

fn spawn_serve(data_dir: &Path) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
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
    // They count their acknowledgements, so the kill waits for enough of them: the log's head
    // runs ahead of the answers still in flight.
    let acked_so_far = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let client = client.clone();
            let acked_so_far = acked_so_far.clone();
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
                            acked_so_far.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        _ => return acked,
                    }
                }
                acked
            })
        })
        .collect();
    // Kill once a good number of writes were acknowledged, with writers still going.
    while acked_so_far.load(std::sync::atomic::Ordering::SeqCst) < 200
        && !writers.iter().all(|w| w.is_finished())
    {
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
