//! `process` agents against the real `vigil serve` binary and real child processes (the shell
//! scripts in tests/fixtures/cli/ are the children; Vigil itself runs them without a shell):
//! output into the transcript, exit codes and error classes, the child's environment, secrets
//! kept out of everything stored, hostile output, and no process of a run's group outliving the
//! run, whatever ends it (cancel, pause, timeout, a node stopped with SIGTERM, a node SIGKILLed
//! and restarted).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use vigil::api::client::ApiClient;

const TOKEN: &str = "vgl_op_process-agents-test-token";
/// The node's variable holding the secret a child gets through `secret_env`.
const SECRET_ENV: &str = "PROCESS_TEST_SECRET";
const SECRET: &str = "sk-process-secret-7f3a9c";
/// A variable of the node's that no child may see (not in the allow-list).
const NODE_ONLY_ENV: &str = "PROCESS_TEST_NODE_ONLY";
/// Hang guard for every poll loop: far above anything these runs take.
const WAIT_MS_MAX: u64 = 60_000;
const POLL_MS: u64 = 25;

// ---- the node ---------------------------------------------------------------------------------

/// A `vigil serve` process on its own data directory; killed when dropped.
struct Serve {
    child: Child,
    api: ApiClient,
}

impl Serve {
    async fn start(data_dir: &Path) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vigil"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
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

    fn signal(&self, signal: i32) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) has no memory-safety preconditions.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits (bounded) for the process to exit; its status.
    async fn exited(&mut self) -> std::process::ExitStatus {
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

fn fresh_data_dir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("process_agents")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    dir
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/cli")
        .join(name)
        .canonicalize()
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
        .display()
        .to_string()
}

/// Polls `done` until it holds (bounded: a hang guard, not a timing goal).
async fn poll<F, Fut>(what: &str, mut done: F)
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

async fn get(api: &ApiClient, path: &str) -> Value {
    let answer = api.get(path).await.unwrap();
    let body = answer.json().unwrap();
    assert_eq!(answer.status.as_u16(), 200, "GET {path}: {body}");
    body
}

async fn post(api: &ApiClient, path: &str, body: Value) -> (u16, Value) {
    let answer = api.post_json(path, &body).await.unwrap();
    (answer.status.as_u16(), answer.json().unwrap())
}

/// Creates a `process` agent running `adapter` (merged over the type) and returns its id.
async fn create(api: &ApiClient, name: &str, adapter: Value) -> u64 {
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
async fn wake(api: &ApiClient, agent: u64, reason: &str) -> u64 {
    let body = json!({"source": "on_demand", "reason": reason});
    let (status, answer) = post(api, &format!("/v1/agents/{agent}/wakeup"), body).await;
    assert!(status == 200 || status == 202, "{status} {answer}");
    answer["run"].as_u64().unwrap_or_else(|| panic!("no run: {answer}"))
}

async fn run(api: &ApiClient, run: u64) -> Value {
    get(api, &format!("/v1/runs/{run}")).await
}

/// The run once it is over.
async fn finished(api: &ApiClient, id: u64) -> Value {
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
async fn log_entries(api: &ApiClient, run: u64) -> Vec<Value> {
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
fn output(entries: &[Value], stream: &str) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e["kind"] == "child_output" && e["stream"] == stream)
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect()
}

/// Every event of the feed, as raw text and parsed.
async fn events(api: &ApiClient) -> (String, Vec<Value>) {
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
async fn pgid_of(api: &ApiClient, run: u64) -> u32 {
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
fn group_members(pgid: u32) -> Vec<u32> {
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

async fn group_gone(pgid: u32) {
    poll(&format!("process group {pgid} to be gone"), || async move {
        group_members(pgid).is_empty()
    })
    .await;
}

/// Waits until the group's grandchild (the `sleep` grandchild.sh starts) is alive too.
async fn grandchild_started(api: &ApiClient, run: u64) -> u32 {
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

// ---- the tests ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_child_that_prints_and_exits_0_succeeds_with_its_lines_its_excerpt_and_its_environment() {
    let data_dir = fresh_data_dir("lines");
    let serve = Serve::start(&data_dir).await;
    let api = &serve.api;
    let agent = create(
        api,
        "printer",
        json!({
            "command": fixture("lines.sh"),
            "args": ["{{ run.reason }}", "agent={{ agent.name }}"],
            "stdin": "woken by {{ run.source }}",
            "env": {"PLAIN_VAR": "plain-value"},
        }),
    )
    .await;
    let id = wake(api, agent, "say hello").await;
    let ended = finished(api, id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(ended["report"]["exit"]["code"], 0, "{ended}");
    let excerpt = ended["report"]["answer_excerpt"].as_str().unwrap();
    assert!(excerpt.ends_with("last line"), "{excerpt}");

    let entries = log_entries(api, id).await;
    let stdout = output(&entries, "stdout");
    assert_eq!(stdout[0], "args: say hello agent=printer");
    assert_eq!(stdout[1], "stdin: woken by on_demand");
    assert_eq!(stdout.last().unwrap(), "last line");
    assert_eq!(output(&entries, "stderr"), vec!["to stderr"]);
    // The child's environment: allow-listed node variables, the spec's, Vigil's, nothing else.
    let env: Vec<&str> = stdout.iter().filter_map(|l| l.strip_prefix("env: ")).collect();
    assert!(env.contains(&"PLAIN_VAR=plain-value"), "{env:?}");
    assert!(env.contains(&format!("VIGIL_RUN_ID={id}").as_str()), "{env:?}");
    assert!(env.contains(&format!("VIGIL_AGENT_ID={agent}").as_str()), "{env:?}");
    assert!(env.contains(&"VIGIL_AGENT_NAME=printer"), "{env:?}");
    assert!(env.iter().any(|v| v.starts_with("PATH=")), "{env:?}");
    assert!(!env.iter().any(|v| v.starts_with(NODE_ONLY_ENV)), "{env:?}");
    assert!(!env.iter().any(|v| v.starts_with("VIGIL_OPERATOR_TOKEN")), "{env:?}");
    assert_eq!(entries.last().unwrap()["kind"], "stop");
    group_gone(pgid_of(api, id).await).await;
}

#[tokio::test]
async fn a_nonzero_exit_fails_exit_nonzero_with_its_code_and_a_missing_program_is_not_installed() {
    let data_dir = fresh_data_dir("exit");
    let serve = Serve::start(&data_dir).await;
    let api = &serve.api;
    let failing = create(api, "failing", json!({"command": fixture("exit3.sh")})).await;
    let ended = finished(api, wake(api, failing, "fail").await).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["error_class"], "exit_nonzero", "{ended}");
    assert_eq!(ended["report"]["exit"]["code"], 3, "{ended}");
    assert!(ended["detail"].as_str().unwrap().contains("exited 3"), "{ended}");

    let missing = create(
        api,
        "missing",
        json!({"command": "/nonexistent/vigil-no-such-program"}),
    )
    .await;
    let ended = finished(api, wake(api, missing, "run").await).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["error_class"], "adapter_not_installed", "{ended}");
    assert!(ended["detail"].as_str().unwrap().contains("not installed"), "{ended}");

    // A secret the node does not have: spawn_failed, naming the variable.
    let unset = create(
        api,
        "unset-secret",
        json!({"command": fixture("secret.sh"), "secret_env": {"X": "PROCESS_TEST_NOT_SET"}}),
    )
    .await;
    let ended = finished(api, wake(api, unset, "run").await).await;
    assert_eq!(ended["error_class"], "spawn_failed", "{ended}");
    assert!(ended["detail"].as_str().unwrap().contains("PROCESS_TEST_NOT_SET"), "{ended}");
}

#[tokio::test]
async fn a_child_that_ignores_sigterm_is_killed_after_the_grace_and_a_slow_one_times_out() {
    let data_dir = fresh_data_dir("timeout");
    let serve = Serve::start(&data_dir).await;
    let api = &serve.api;
    let stubborn = create(
        api,
        "stubborn",
        json!({"command": fixture("ignore_term.sh"), "timeout_sec": 1, "grace_sec": 1}),
    )
    .await;
    let id = wake(api, stubborn, "hold on").await;
    let pgid = pgid_of(api, id).await;
    let ended = finished(api, id).await;
    assert_eq!(ended["status"], "timed_out", "{ended}");
    assert_eq!(ended["error_class"], "timed_out", "{ended}");
    assert_eq!(ended["report"]["exit"]["signal"], libc::SIGKILL, "{ended}");
    assert!(ended["detail"].as_str().unwrap().contains("SIGKILL"), "{ended}");
    group_gone(pgid).await;

    // A child that would go away on SIGTERM: timed out too, without the SIGKILL.
    let slow = create(
        api,
        "slow",
        json!({"command": fixture("grandchild.sh"), "timeout_sec": 1, "grace_sec": 30}),
    )
    .await;
    let id = wake(api, slow, "take long").await;
    let pgid = grandchild_started(api, id).await;
    let ended = finished(api, id).await;
    assert_eq!(ended["status"], "timed_out", "{ended}");
    assert_eq!(ended["report"]["exit"]["signal"], libc::SIGTERM, "{ended}");
    assert!(!ended["detail"].as_str().unwrap().contains("SIGKILL"), "{ended}");
    group_gone(pgid).await;
}

#[tokio::test]
async fn no_process_of_the_group_outlives_a_cancel_a_pause_or_a_leader_that_left() {
    let data_dir = fresh_data_dir("cancel");
    let serve = Serve::start(&data_dir).await;
    let api = &serve.api;
    let agent = create(api, "forker", json!({"command": fixture("grandchild.sh")})).await;

    let id = wake(api, agent, "to be cancelled").await;
    let pgid = grandchild_started(api, id).await;
    let (status, answer) = post(api, &format!("/v1/runs/{id}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{answer}");
    group_gone(pgid).await;
    assert_eq!(finished(api, id).await["status"], "cancelled");

    let id = wake(api, agent, "to be paused").await;
    let pgid = grandchild_started(api, id).await;
    let (status, answer) = post(api, &format!("/v1/agents/{agent}/pause"), json!({})).await;
    assert_eq!(status, 200, "{answer}");
    group_gone(pgid).await;
    assert_ne!(finished(api, id).await["status"], "succeeded");

    // The leader exits at once and leaves its grandchild holding the pipes: the run still ends,
    // and the grandchild goes with it.
    let leaver = create(
        api,
        "leaver",
        json!({"command": fixture("grandchild.sh"), "args": ["leave"], "grace_sec": 1}),
    )
    .await;
    let id = wake(api, leaver, "leave").await;
    let pgid = pgid_of(api, id).await;
    let ended = finished(api, id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    group_gone(pgid).await;
}

#[tokio::test]
async fn a_node_stopped_with_sigterm_takes_its_children_with_it() {
    let data_dir = fresh_data_dir("sigterm");
    let mut serve = Serve::start(&data_dir).await;
    let api = serve.api.clone();
    let agent = create(&api, "forker", json!({"command": fixture("grandchild.sh")})).await;
    let stubborn = create(
        &api,
        "stubborn",
        json!({"command": fixture("ignore_term.sh"), "grace_sec": 1}),
    )
    .await;
    let forker_run = wake(&api, agent, "run until stopped").await;
    let forker = grandchild_started(&api, forker_run).await;
    let stubborn_run = wake(&api, stubborn, "run until killed").await;
    let stubborn_pgid = pgid_of(&api, stubborn_run).await;
    serve.signal(libc::SIGTERM);
    let status = serve.exited().await;
    assert!(status.success(), "vigil serve exits cleanly: {status:?}");
    // It exits only once its children's groups are gone.
    assert!(group_members(forker).is_empty(), "group {forker} outlived the node");
    assert!(
        group_members(stubborn_pgid).is_empty(),
        "group {stubborn_pgid} outlived the node"
    );
}

#[tokio::test]
async fn after_a_sigkill_the_restarted_node_kills_what_the_run_left_behind() {
    let data_dir = fresh_data_dir("sigkill");
    let mut serve = Serve::start(&data_dir).await;
    let agent = create(&serve.api, "forker", json!({"command": fixture("grandchild.sh")})).await;
    let id = wake(&serve.api, agent, "run until killed").await;
    let pgid = grandchild_started(&serve.api, id).await;
    serve.signal(libc::SIGKILL);
    serve.exited().await;
    // The leader died with the node (PR_SET_PDEATHSIG); the grandchild is still there.
    poll("the leader to die with the node", || async {
        group_members(pgid).len() == 1
    })
    .await;
    drop(serve);

    let serve = Serve::start(&data_dir).await;
    group_gone(pgid).await;
    let ended = finished(&serve.api, id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["error_class"], "control_plane_restart", "{ended}");
}

#[tokio::test]
async fn a_child_that_writes_much_and_exits_at_once_loses_no_line() {
    let data_dir = fresh_data_dir("many");
    let serve = Serve::start(&data_dir).await;
    let api = &serve.api;
    let agent = create(api, "chatty", json!({"command": fixture("many_lines.sh")})).await;
    let id = wake(api, agent, "talk").await;
    assert_eq!(finished(api, id).await["status"], "succeeded");
    let stdout = output(&log_entries(api, id).await, "stdout");
    let expected: Vec<String> = (0..5000).map(|i| format!("line {i}")).collect();
    assert_eq!(stdout, expected);
}

#[tokio::test]
async fn hostile_output_is_cut_and_the_transcript_stays_ndjson() {
    let data_dir = fresh_data_dir("garbage");
    let serve = Serve::start(&data_dir).await;
    let api = &serve.api;
    let agent = create(api, "garbage", json!({"command": fixture("garbage.sh")})).await;
    let id = wake(api, agent, "spew").await;
    let ended = finished(api, id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    let stdout = output(&log_entries(api, id).await, "stdout");
    assert_eq!(stdout.len(), 3, "{:?}", stdout.iter().map(String::len).collect::<Vec<_>>());
    assert!(stdout[0].starts_with("bin ") && stdout[0].contains('\u{fffd}'), "{}", stdout[0]);
    // The 1 MiB line, cut at the transcript's field cap with its mark.
    let long = &stdout[1];
    assert_eq!(long.len(), vigil::transcript::TRANSCRIPT_FIELD_BYTES_MAX, "cut at the cap");
    assert!(long.ends_with(vigil::transcript::TRUNCATION_MARK));
    assert_eq!(stdout[2], "after the long line");
    // Every line of every transcript file on disk is one JSON object.
    let mut lines = 0;
    for file in files_under(&data_dir.join("transcripts")) {
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let entry: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not JSON ({e})", file.display()));
            assert!(entry.is_object());
            lines += 1;
        }
    }
    assert!(lines >= 5, "the transcript was found on disk ({lines} lines)");
}

#[tokio::test]
async fn a_secret_the_child_prints_never_reaches_the_transcript_events_or_the_excerpt() {
    let data_dir = fresh_data_dir("secret");
    let serve = Serve::start(&data_dir).await;
    let api = &serve.api;
    let agent = create(
        api,
        "leaky",
        json!({"command": fixture("secret.sh"), "secret_env": {"PROCESS_TEST_TOKEN": SECRET_ENV}}),
    )
    .await;
    let id = wake(api, agent, "leak").await;
    let ended = finished(api, id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    let entries = log_entries(api, id).await;
    let stdout = output(&entries, "stdout");
    // The child did get it, and printed it: the transcript shows where, redacted.
    assert_eq!(stdout[0], "the token is [REDACTED], see", "{stdout:?}");
    assert_eq!(stdout[1], "[REDACTED]");
    let run_text = run(api, id).await.to_string();
    let (events_text, _) = events(api).await;
    let log_text = serde_json::to_string(&entries).unwrap();
    for (what, text) in [("run", &run_text), ("events", &events_text), ("log", &log_text)] {
        assert!(!text.contains(SECRET), "the secret is in the {what}: {text}");
    }
    assert!(ended["report"]["answer_excerpt"].as_str().unwrap().contains("[REDACTED]"));
    for file in files_under(&data_dir) {
        let bytes = std::fs::read(&file).unwrap();
        let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
        assert!(!found, "the secret is on disk in {}", file.display());
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        match path.is_dir() {
            true => files.extend(files_under(&path)),
            false => files.push(path),
        }
    }
    files
}

// ---- a panicking adapter (in process: the executor's own path, with an adapter that panics) -----

/// Every adapter panics, after one suspension (so the panic comes from a poll, as a bug would).
struct Panicking;

impl vigil::exec::adapter::AdapterSource for Panicking {
    fn adapter_for(
        &self,
        _spec: &vigil::engine::agent::AdapterSpec,
    ) -> Box<dyn vigil::exec::adapter::Adapter> {
        Box::new(Panicking)
    }
}

impl vigil::exec::adapter::Adapter for Panicking {
    fn execute(
        &self,
        _run: vigil::exec::adapter::RunContext,
    ) -> vigil::exec::adapter::AdapterFuture {
        Box::pin(async {
            tokio::task::yield_now().await;
            panic!("a bug in the adapter");
        })
    }
}

#[tokio::test]
async fn a_panicking_adapter_ends_its_run_failed_with_class_adapter_error() {
    use vigil::node::{Node, NodeConfig, TenantToken};
    let data_dir = fresh_data_dir("panic");
    std::fs::create_dir_all(&data_dir).unwrap();
    let mut node = Node::start(NodeConfig {
        listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        storage: vigil::io::storage::StorageLocation::File(data_dir.join("vigil.redb")),
        clock: vigil::io::clock::SystemClock::shared(),
        entropy: vigil::io::entropy::OsEntropy::shared(),
        tenants: vec![TenantToken {
            tenant: "default".into(),
            token: TOKEN.into(),
        }],
        on_commit: None,
        on_replayed: None,
        adapters: std::sync::Arc::new(Panicking),
        run_services: vigil::exec::host::RunServices::standard(),
        transcripts: vigil::transcript::FileTranscripts::shared(&data_dir),
    })
    .await
    .expect("node starts");
    node.ready().await.expect("node recovers");
    let api = ApiClient::with_token(node.local_addr(), TOKEN);
    let body = json!({
        "name": "buggy",
        "adapter": {"type": "scripted", "steps": [{"duration_ms": 1, "outcome": "succeeded"}]},
    });
    let (status, created) = post(&api, "/v1/agents", body).await;
    assert_eq!(status, 201, "{created}");
    let agent = created["agent"]["id"].as_u64().unwrap();
    let ended = finished(&api, wake(&api, agent, "crash").await).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["error_class"], "adapter_error", "{ended}");
    assert!(ended["detail"].as_str().unwrap().contains("a bug in the adapter"), "{ended}");
    node.stop();
}
