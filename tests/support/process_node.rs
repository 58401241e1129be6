//! A real `vigil serve` for the process-agent tests, its API, and the processes of a group as
//! /proc shows them.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use vigil::api::client::ApiClient;


pub const TOKEN: &str = "vgl_op_process-agents-test-token";
/// The node's variable holding the secret a child gets through `secret_env`.
pub const SECRET_ENV: &str = "PROCESS_TEST_SECRET";
pub const SECRET: &str = "sk-process-secret-7f3a9c";
/// A variable of the node's that no child may see (not in the allow-list).
pub const NODE_ONLY_ENV: &str = "PROCESS_TEST_NODE_ONLY";
/// Hang guard for every poll loop: far above anything these runs take.
pub const WAIT_MS_MAX: u64 = 60_000;
pub const POLL_MS: u64 = 25;

// ---- the node ---------------------------------------------------------------------------------

/// A `vigil serve` process on its own data directory; killed when dropped.
pub struct Serve {
    child: Child,
    pub api: ApiClient,
}

impl Serve {
    /// A node that does not drain (ADR 0015): SIGTERM stops its runs at once, which is what the
    /// process tests look at (a stopped node takes its runs' process groups with it).
    pub async fn start(data_dir: &Path) -> Serve {
        Serve::start_with(data_dir, &["--drain-grace-s", "0"]).await
    }

    /// A node started with `args` added to `vigil serve`.
    pub async fn start_with(data_dir: &Path, args: &[&str]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vigil"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env("VIGIL_LOG", "warn")
            .env("VIGIL_OPERATOR_TOKEN", TOKEN)
            .env(SECRET_ENV, SECRET)
            .env(NODE_ONLY_ENV, "must-not-leak")
            .env_remove("VIGIL_FLEET")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("vigil serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr: SocketAddr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line from vigil serve: {line:?}"))
            .parse()
            .unwrap();
        let api = ApiClient::with_token(addr, TOKEN);
        let serve = Serve { child, api };
        poll("the node to be ready", || async {
            serve
                .api
                .get("/v1/health")
                .await
                .is_ok_and(|a| a.status.as_u16() == 200)
        })
        .await;
        serve
    }

    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, signal: i32) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) has no memory-safety preconditions.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits (bounded) for the process to exit; its status.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        for _ in 0..WAIT_MS_MAX / POLL_MS {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
        panic!("vigil serve did not exit");
    }
}

/// SIGTERM first, so that the node takes its runs' children with it (a SIGKILLed node would
/// leave grandchildren behind until its next start); SIGKILL if it does not exit (bounded).
impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        for _ in 0..WAIT_MS_MAX / POLL_MS {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn fresh_data_dir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("process_agents")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    dir
}

pub fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/cli")
        .join(name)
        .canonicalize()
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
        .display()
        .to_string()
}

/// Polls `done` until it holds (bounded: a hang guard, not a timing goal).
pub async fn poll<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..WAIT_MS_MAX / POLL_MS {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    panic!("timed out waiting for {what}");
}

// ---- the API ----------------------------------------------------------------------------------

pub async fn get(api: &ApiClient, path: &str) -> Value {
    let answer = api.get(path).await.unwrap();
    let body = answer.json().unwrap();
    assert_eq!(answer.status.as_u16(), 200, "GET {path}: {body}");
    body
}

pub async fn post(api: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = api.post_json(path, &body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

/// Creates a `process` agent running `adapter` (merged over the type) and returns its id.
pub async fn create(api: &ApiClient, name: &str, adapter: Value) -> u64 {
    let mut spec = json!({"type": "process"});
    spec.as_object_mut()
        .unwrap()
        .extend(adapter.as_object().unwrap().clone());
    let body = json!({"name": name, "limits": {"run_timeout_ms": 300_000}, "adapter": spec});
    let (status, created) = post(api, "/v1/agents", body).await;
    assert_eq!(status, 201, "{created}");
    created["agent"]["id"].as_u64().unwrap()
}

/// Wakes `agent` on demand; the run it queued.
pub async fn wake(api: &ApiClient, agent: u64, reason: &str) -> u64 {
    let body = json!({"source": "on_demand", "reason": reason});
    let (status, answer) = post(api, &format!("/v1/agents/{agent}/wakeup"), body).await;
    assert!(status == 200 || status == 202, "{status} {answer}");
    answer["run"].as_u64().unwrap_or_else(|| panic!("no run: {answer}"))
}

pub async fn run(api: &ApiClient, run: u64) -> Value {
    get(api, &format!("/v1/runs/{run}")).await
}

/// The run once it is over.
pub async fn finished(api: &ApiClient, id: u64) -> Value {
    let mut last = Value::Null;
    for _ in 0..WAIT_MS_MAX / POLL_MS {
        last = run(api, id).await;
        if !matches!(last["status"].as_str(), Some("queued" | "running")) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    panic!("run {id} never ended: {last}");
}

/// Every entry of a run's transcript.
pub async fn log_entries(api: &ApiClient, run: u64) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut offset = 0;
    for _ in 0..100 {
        let path = format!("/v1/runs/{run}/log?offset={offset}&limit=1000");
        let page = get(api, &path).await;
        entries.extend(page["entries"].as_array().unwrap().iter().cloned());
        if page["complete"] == true {
            return entries;
        }
        offset = page["next_offset"].as_u64().unwrap();
    }
    panic!("the transcript of run {run} never completed");
}

/// The `child_output` lines of a run on `stream`.
pub fn output(entries: &[Value], stream: &str) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e["kind"] == "child_output" && e["stream"] == stream)
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect()
}

/// Every event of the feed, as raw text and parsed.
pub async fn events(api: &ApiClient) -> (String, Vec<Value>) {
    let mut all = Vec::new();
    let mut raw = String::new();
    let mut after = 0;
    for _ in 0..100 {
        let answer = api.get(&format!("/v1/events?after={after}&limit=1000")).await.unwrap();
        raw.push_str(&String::from_utf8_lossy(&answer.body));
        let page = answer.json().unwrap();
        all.extend(page["events"].as_array().unwrap().iter().cloned());
        after = page["next_after"].as_u64().unwrap();
        if after >= page["head_seq"].as_u64().unwrap() {
            return (raw, all);
        }
    }
    panic!("the event feed never ended");
}

/// The process group the run's child was recorded in (its `run_process_started` event).
pub async fn pgid_of(api: &ApiClient, run: u64) -> u32 {
    for _ in 0..WAIT_MS_MAX / POLL_MS {
        let (_, all) = events(api).await;
        let found = all.iter().find(|e| {
            (e["type"] == "run_process_started" || e["kind"] == "run_process_started")
                && e["run"] == run
        });
        if let Some(event) = found {
            return u32::try_from(event["pgid"].as_u64().unwrap()).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    panic!("run {run} never recorded a process group");
}

// ---- processes --------------------------------------------------------------------------------

/// The live (not zombie) processes whose process group is `pgid`, from /proc.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else { continue };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // Fields after the name: state, ppid, pgrp. A zombie is dead already, awaiting its reaper.
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse() == Ok(pgid) {
            members.push(pid);
        }
    }
    members
}

pub async fn group_gone(pgid: u32) {
    poll(&format!("process group {pgid} to be gone"), || async move {
        group_members(pgid).is_empty()
    })
    .await;
}

/// Waits until the group's grandchild (the `sleep` grandchild.sh starts) is alive too.
pub async fn grandchild_started(api: &ApiClient, run: u64) -> u32 {
    let pgid = pgid_of(api, run).await;
    poll("the grandchild to start", || async {
        let page = get(api, &format!("/v1/runs/{run}/log?offset=0&limit=1000")).await;
        output(page["entries"].as_array().unwrap(), "stdout")
            .iter()
            .any(|l| l.starts_with("grandchild "))
    })
    .await;
    assert!(group_members(pgid).len() >= 2, "leader and grandchild are in group {pgid}");
    pgid
}

