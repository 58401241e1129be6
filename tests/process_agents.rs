//! `process` agents against the real `vigil serve` binary and real child processes (the shell
//! scripts in tests/fixtures/cli/ are the children; Vigil itself runs them without a shell):
//! output into the transcript, exit codes and error classes, the child's environment, secrets
//! kept out of everything stored, hostile output, and no process of a run's group outliving the
//! run, whatever ends it (cancel, pause, timeout, a node stopped with SIGTERM, a node SIGKILLed
//! and restarted).

#[path = "support/process_node.rs"]
mod process_node;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use process_node::*;
use serde_json::{json, Value};
use vigil::api::client::ApiClient;

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

/// `THP_enabled` of /proc/`pid`/status: whether the process may have transparent huge pages
/// (`None` on a kernel that does not say).
fn thp_enabled(pid: &str) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    thp_enabled_in(&status)
}

fn thp_enabled_in(text: &str) -> Option<bool> {
    let line = text.lines().find(|l| l.starts_with("THP_enabled:"))?;
    match line.trim_start_matches("THP_enabled:").trim() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

#[tokio::test]
async fn the_node_runs_without_huge_pages_and_its_children_get_them_back() {
    // ADR 0031. Only where huge pages can be told apart: a kernel that reports them, and a test
    // process that has them (a parent that turned them off would pass that on to the node, which
    // then rightly leaves its children so).
    if thp_enabled("self") != Some(true) {
        eprintln!("skipped: this process has no transparent huge pages to turn off (THP_enabled)");
        return;
    }
    let data_dir = fresh_data_dir("huge_pages");
    let serve = Serve::start(&data_dir).await;
    let node = serve.pid().to_string();
    assert_eq!(thp_enabled(&node), Some(false), "the node's own memory");

    let api = &serve.api;
    let agent = create(
        api,
        "pages",
        json!({"command": "/bin/grep", "args": ["THP_enabled", "/proc/self/status"]}),
    )
    .await;
    let id = wake(api, agent, "look").await;
    assert_eq!(finished(api, id).await["status"], "succeeded");
    let stdout = output(&log_entries(api, id).await, "stdout");
    let child = thp_enabled_in(&stdout.join("\n"));
    assert_eq!(child, Some(true), "the child's: {stdout:?}");
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
        alert_sinks: Vec::new(),
        snapshots: Default::default(),
        heartbeat_test_seam: false,
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

/// A cancelled run ends at once while its child gets its grace; the agent's next run must not
/// start a second child beside it (invariant 17, `one_execution_per_agent`, found this in the
/// simulator). Deterministic: the second group is recorded only after the first is gone.
#[tokio::test]
async fn the_next_run_spawns_only_once_the_cancelled_run_s_group_is_gone() {
    let data_dir = fresh_data_dir("one-at-a-time");
    let serve = Serve::start(&data_dir).await;
    let api = &serve.api;
    let agent = create(
        api,
        "stubborn",
        json!({"command": fixture("ignore_term.sh"), "grace_sec": 5}),
    )
    .await;
    let first = wake(api, agent, "first").await;
    let first_pgid = pgid_of(api, first).await;
    // The trap is set once the line is out; a SIGTERM before it would end the child at once.
    poll("the first child to ignore SIGTERM", || async {
        let page = get(api, &format!("/v1/runs/{first}/log?offset=0&limit=100")).await;
        output(page["entries"].as_array().unwrap(), "stdout")
            .iter()
            .any(|l| l == "ignoring SIGTERM")
    })
    .await;
    let (status, answer) = post(api, &format!("/v1/runs/{first}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(finished(api, first).await["status"], "cancelled");
    assert!(
        !group_members(first_pgid).is_empty(),
        "the first child is still in its grace"
    );

    let second = wake(api, agent, "second").await;
    let second_pgid = pgid_of(api, second).await;
    assert_eq!(
        group_members(first_pgid),
        Vec::<u32>::new(),
        "run {second}'s child (group {second_pgid}) was spawned while run {first}'s group lived"
    );
    let (status, answer) = post(api, &format!("/v1/runs/{second}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{answer}");
    group_gone(second_pgid).await;
}
