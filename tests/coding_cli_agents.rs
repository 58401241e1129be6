//! The coding-CLI adapters end to end (real tokio, real disk, real processes): a node whose
//! `claude_local` and `codex_local` agents run the fake CLIs under `tests/fixtures/cli/`
//! (shell scripts printing Claude-style JSON and Codex-style JSONL, reading the prompt from
//! stdin, logging every invocation's arguments and prompt). Sessions and usage parsed, the
//! task's session resumed on its next run, an unknown session retried fresh exactly once,
//! garbage output, a missing binary, the warning when such an agent is saved, and the sessions
//! API and CLI.
//!
//! The fakes are driven by the prompt (each agent's prompt template is `{{ run.reason }}`):
//! `new-session=ID` names the session a fresh run reports, `mode=garbage` prints no JSON,
//! `always-refuse` refuses every run as an unknown session; a session named `expired-*` is one
//! the fake does not know.

#[path = "support/coding_cli_world.rs"]
mod world;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use vigil::api::client::ApiClient;
use world::*;

// ---- the tests -------------------------------------------------------------------------------------

/// A run reports its session and usage; the next run on the task resumes the session (the fake
/// saw it), another task starts its own.
async fn session_and_usage_are_read_and_the_next_run_resumes(cli: Cli) {
    let world = World::new(&format!("resume-{}", cli.adapter()));
    let Running { node, api } = world.node().await;
    let (agent, created) = create(&api, world.agent(cli, "coder")).await;
    assert_eq!(created["warnings"], json!([]), "the fake is installed: {created}");

    let first = run_once(&api, agent, "t1", "new-session=sess-a fix the build").await;
    assert_succeeded(&first);
    let answer = first["report"]["answer_excerpt"].as_str().unwrap();
    assert!(answer.starts_with("fake "), "{first}");
    assert_eq!(first["report"]["session"], json!({"op": "set", "session_id": "sess-a"}));
    assert_eq!(first["report"]["exit"], json!({"code": 0}));
    assert_eq!(sessions(&api, agent).await["t1"], session_of("sess-a", &first));
    let log = log_text(&api, &first).await;
    assert!(log.starts_with(r#"[{"#) && log.contains(r#""kind":"wakeup""#), "{log}");
    assert!(log.contains(r#""kind":"child_output""#), "the CLI's output is in the transcript: {log}");

    let invocations = world.invocations("coder");
    assert_eq!(invocations.len(), 1, "{invocations:?}");
    assert!(!cli.resumes_any(&invocations[0].0), "a first run resumes nothing: {invocations:?}");
    assert_eq!(invocations[0].1, "new-session=sess-a fix the build", "the prompt came on stdin");

    let second = run_once(&api, agent, "t1", "and now the tests").await;
    assert_succeeded(&second);
    let invocations = world.invocations("coder");
    assert_eq!(invocations.len(), 2);
    assert!(invocations[1].0.contains(&cli.resumed("sess-a")), "{invocations:?}");
    assert_eq!(sessions(&api, agent).await["t1"], session_of("sess-a", &second));

    let other = run_once(&api, agent, "t2", "new-session=sess-b other task").await;
    assert_succeeded(&other);
    assert!(!cli.resumes_any(&world.invocations("coder")[2].0), "another task starts fresh");
    let all = sessions(&api, agent).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all["t2"], session_of("sess-b", &other));

    let (input, cached, output, cost) = match cli {
        Cli::Claude => (CLAUDE_INPUT, CLAUDE_CACHED, CLAUDE_OUTPUT, CLAUDE_COST_MICRO_USD),
        Cli::Codex => (CODEX_INPUT, CODEX_CACHED, CODEX_OUTPUT, CODEX_COST_MICRO_USD),
    };
    assert_eq!(first["usage"]["input_tokens"], input, "{first}");
    assert_eq!(first["usage"]["cached_input_tokens"], cached, "{first}");
    assert_eq!(first["usage"]["output_tokens"], output, "{first}");
    let total = usage_total(&api, agent).await;
    assert_eq!(total["input_tokens"], 3 * input, "{total}");
    assert_eq!(total["output_tokens"], 3 * output, "{total}");
    assert_eq!(total["cost_micro_usd"], 3 * cost, "{total}");
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_session_and_usage_are_read_and_the_next_run_resumes() {
    session_and_usage_are_read_and_the_next_run_resumes(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_session_and_usage_are_read_and_the_next_run_resumes() {
    session_and_usage_are_read_and_the_next_run_resumes(Cli::Codex).await;
}

/// The stored session is unknown to the CLI: the run is retried once without it and the fresh
/// session is stored. A CLI that refuses the fresh run too ends it `session_invalid` after
/// exactly two invocations, and the stored session is gone.
async fn an_unknown_session_is_retried_fresh_exactly_once(cli: Cli) {
    let world = World::new(&format!("retry-{}", cli.adapter()));
    let Running { node, api } = world.node().await;
    let (agent, _) = create(&api, world.agent(cli, "coder")).await;
    let planted = run_once(&api, agent, "t", "new-session=expired-1").await;
    assert_succeeded(&planted);
    assert_eq!(sessions(&api, agent).await["t"].0, "expired-1");

    let retried = run_once(&api, agent, "t", "new-session=fresh-2 go on").await;
    assert_succeeded(&retried);
    assert_eq!(retried["report"]["session"], json!({"op": "set", "session_id": "fresh-2"}));
    assert_eq!(sessions(&api, agent).await["t"], session_of("fresh-2", &retried));
    let invocations = world.invocations("coder");
    assert_eq!(invocations.len(), 3, "the planting run, the refused one, the fresh one: {invocations:?}");
    assert!(invocations[1].0.contains(&cli.resumed("expired-1")), "{invocations:?}");
    assert!(!cli.resumes_any(&invocations[2].0), "the retry resumes nothing: {invocations:?}");
    let log = log_text(&api, &retried).await;
    assert!(log.contains("refused session") && log.contains("retried once"), "{log}");
    // The fresh invocation's spend, committed with the run's end, is on the run.
    let input = match cli {
        Cli::Claude => CLAUDE_INPUT,
        Cli::Codex => CODEX_INPUT,
    };
    assert_eq!(retried["usage"]["input_tokens"], input, "{retried}");

    // Plant an unknown session again, then have the CLI refuse even the fresh run.
    assert_succeeded(&run_once(&api, agent, "u", "new-session=expired-3").await);
    let before = world.invocations("coder").len();
    let refused = run_once(&api, agent, "u", "always-refuse").await;
    assert_failed(&refused, "session_invalid");
    assert_eq!(refused["report"]["session"], json!({"op": "clear"}), "{refused}");
    assert_eq!(world.invocations("coder").len(), before + 2, "never more than one retry");
    assert!(!sessions(&api, agent).await.contains_key("u"), "the refused session is dropped");
    // The next run on the task starts fresh, once.
    assert_succeeded(&run_once(&api, agent, "u", "new-session=fresh-4").await);
    let last = world.invocations("coder");
    assert_eq!(last.len(), before + 3);
    assert!(!cli.resumes_any(&last[before + 2].0), "{last:?}");
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_an_unknown_session_is_retried_fresh_exactly_once() {
    an_unknown_session_is_retried_fresh_exactly_once(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_an_unknown_session_is_retried_fresh_exactly_once() {
    an_unknown_session_is_retried_fresh_exactly_once(Cli::Codex).await;
}

/// Output that is not the CLI's format fails the run `parse_error`; nothing is stored.
async fn garbage_output_is_a_parse_error(cli: Cli) {
    let world = World::new(&format!("garbage-{}", cli.adapter()));
    let Running { node, api } = world.node().await;
    let (agent, _) = create(&api, world.agent(cli, "coder")).await;
    let run = run_once(&api, agent, "t", "mode=garbage").await;
    assert_failed(&run, "parse_error");
    assert_eq!(run["status"], "failed");
    assert!(run["detail"].as_str().unwrap().contains("printed no"), "{run}");
    assert!(sessions(&api, agent).await.is_empty());
    let log = log_text(&api, &run).await;
    assert!(log.contains("not { json") || log.contains("is { not json"), "the output is in the transcript: {log}");

    // A run that reports no session keeps the task's stored one: only a refusal drops it (a
    // mutant that cleared it here survived every other judge).
    assert_succeeded(&run_once(&api, agent, "kept", "new-session=sess-k").await);
    let garbled = run_once(&api, agent, "kept", "mode=garbage").await;
    assert_failed(&garbled, "parse_error");
    assert_eq!(sessions(&api, agent).await["kept"].0, "sess-k", "{garbled}");
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_garbage_output_is_a_parse_error() {
    garbage_output_is_a_parse_error(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_garbage_output_is_a_parse_error() {
    garbage_output_is_a_parse_error(Cli::Codex).await;
}

/// A Claude error result with a nonzero exit is `exit_nonzero`, its reason in the detail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_error_result_fails_the_run_with_its_reason() {
    let world = World::new("error-result");
    let Running { node, api } = world.node().await;
    let (agent, _) = create(&api, world.agent(Cli::Claude, "coder")).await;
    let run = run_once(&api, agent, "t", "mode=fail new-session=s-9").await;
    assert_failed(&run, "exit_nonzero");
    assert!(run["detail"].as_str().unwrap().contains("error_max_turns"), "{run}");
    assert_eq!(run["report"]["exit"], json!({"code": 1}));
    node.stop();
}

/// A CLI still running after `timeout_sec` is terminated and its run ends `timed_out`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_past_its_time_limit_times_out() {
    let world = World::new("timeout");
    let Running { node, api } = world.node().await;
    let mut spec = world.agent(Cli::Claude, "coder");
    spec["adapter"]["timeout_sec"] = json!(1);
    let (agent, _) = create(&api, spec).await;
    let run = run_once(&api, agent, "t", "mode=hang").await;
    assert_eq!(run["status"], "timed_out", "{run}");
    assert_failed(&run, "timed_out");
    assert!(sessions(&api, agent).await.is_empty());
    node.stop();
}

/// A secret the CLI gets through `secret_env` and prints is in nothing the node stores or
/// serves: not the answer, the transcript, the events, nor any file of the data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_cli_prints_is_redacted_everywhere() {
    let world = World::new("secret");
    let Running { node, api } = world.node().await;
    let mut spec = world.agent(Cli::Claude, "coder");
    spec["adapter"]["secret_env"] = json!({"FAKE_SECRET": SECRET_SOURCE_ENV});
    let (agent, created) = create(&api, spec).await;
    assert!(!created.to_string().contains(SECRET));
    let run = run_once(&api, agent, "t", "mode=leak").await;
    assert_succeeded(&run);
    let answer = run["report"]["answer_excerpt"].as_str().unwrap();
    assert!(answer.starts_with("the secret is ") && !answer.contains(SECRET), "{answer}");
    let log = log_text(&api, &run).await;
    assert!(log.contains("the secret is") && !log.contains(SECRET), "{log}");
    let events = get(&api, "/v1/events?limit=1000").await;
    assert!(!events.to_string().contains(SECRET));
    node.stop();
    drop(api);
    for file in files_under(&world.data_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
        assert!(!found, "the secret is in {}", file.display());
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// A binary that is not there: the agent is saved with a warning, and its runs fail
/// `adapter_not_installed` saying what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_binary_warns_at_save_and_fails_runs_as_not_installed() {
    let world = World::new("missing");
    let Running { node, api } = world.node().await;
    for cli in [Cli::Claude, Cli::Codex] {
        let mut spec = world.agent(cli, &format!("missing-{}", cli.adapter()));
        let missing = world.dir.join("no-such-cli");
        spec["adapter"]["binary"] = json!(missing.to_str().unwrap());
        let (agent, created) = create(&api, spec).await;
        let warnings = created["warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), 1, "{created}");
        let warning = warnings[0].as_str().unwrap();
        assert!(warning.contains("no-such-cli") && warning.contains(cli.adapter()), "{warning}");
        let run = run_once(&api, agent, "t", "hello").await;
        assert_failed(&run, "adapter_not_installed");
        let detail = run["detail"].as_str().unwrap();
        assert!(detail.contains("not installed") && detail.contains("adapter.binary"), "{detail}");
    }
    node.stop();
}

/// `GET /v1/agents/{id}/sessions` lists, `POST …/sessions/{task_key}/reset` forgets (operator
/// only, the task key checked), and the next run on the task starts fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_api_lists_and_resets() {
    let world = World::new("api");
    let Running { node, api } = world.node().await;
    let (agent, created) = create(&api, world.agent(Cli::Claude, "coder")).await;
    let first = run_once(&api, agent, "ticket/7", "new-session=sess-x").await;
    assert_eq!(sessions(&api, agent).await["ticket/7"], session_of("sess-x", &first));

    // The agent may read its own sessions but not reset them.
    let token = created["token"].as_str().unwrap();
    let own = ApiClient::with_token(node.local_addr(), token);
    assert_eq!(sessions(&own, agent).await.len(), 1);
    let (status, refused) = post(&own, &format!("/v1/agents/{agent}/sessions/x/reset"), json!({})).await;
    assert_eq!(status, 403, "{refused}");

    let too_long = "k".repeat(vigil::engine::wakeup::KEY_CHARS_MAX + 1);
    let (status, bad) = post(&api, &format!("/v1/agents/{agent}/sessions/{too_long}/reset"), json!({})).await;
    assert_eq!((status, bad["error"]["field"].as_str()), (400, Some("task_key")), "{bad}");
    let (status, missing) = post(&api, "/v1/agents/999/sessions/t/reset", json!({})).await;
    assert_eq!(status, 404, "{missing}");

    let reset_path = format!("/v1/agents/{agent}/sessions/ticket%2F7/reset");
    let (status, reset) = post(&api, &reset_path, json!({})).await;
    assert_eq!(status, 200, "{reset}");
    assert_eq!(reset, json!({"agent": agent, "task_key": "ticket/7", "reset": true}));
    assert!(sessions(&api, agent).await.is_empty());
    let (_, again) = post(&api, &reset_path, json!({})).await;
    assert_eq!(again["reset"], false, "nothing left to reset: {again}");

    assert_succeeded(&run_once(&api, agent, "ticket/7", "new-session=sess-y").await);
    let invocations = world.invocations("coder");
    assert!(!Cli::Claude.resumes_any(&invocations[1].0), "after a reset the task starts fresh: {invocations:?}");
    assert_eq!(sessions(&api, agent).await["ticket/7"].0, "sess-y");
    node.stop();
}

/// `vigil agent sessions` and `vigil agent session-reset`, the real binary against the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_and_resets_sessions() {
    let world = World::new("cli");
    let Running { node, api } = world.node().await;
    let (agent, _) = create(&api, world.agent(Cli::Codex, "coder")).await;
    assert_succeeded(&run_once(&api, agent, "t 1", "new-session=thread-q").await);
    let server = format!("http://{}", node.local_addr());
    let vigil = |args: Vec<String>| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
                .args(&args)
                .env("VIGIL_SERVER", &server)
                .env("VIGIL_TOKEN", ACME)
                .output()
                .expect("vigil runs");
            let stderr = String::from_utf8_lossy(&output.stderr).to_string();
            assert!(output.status.success(), "vigil {args:?}: {stderr}");
            String::from_utf8(output.stdout).unwrap()
        })
    };
    let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let listed = vigil(args(&["agent", "sessions", "coder"])).await.unwrap();
    assert!(listed.contains("TASK KEY") && listed.contains("t 1") && listed.contains("thread-q"), "{listed}");
    let reset = vigil(args(&["agent", "session-reset", "coder", "t 1"])).await.unwrap();
    assert!(reset.contains("session forgotten"), "{reset}");
    let empty = vigil(args(&["agent", "sessions", &agent.to_string()])).await.unwrap();
    assert!(empty.contains("no task sessions"), "{empty}");
    let json_reset = vigil(args(&["agent", "session-reset", "coder", "t 1", "--json"])).await.unwrap();
    let answer: Value = serde_json::from_str(&json_reset).unwrap();
    assert_eq!(answer["reset"], false);
    node.stop();
}
