//! The operator CLI against a real `vigil serve --fleet`: every command as a subprocess of the
//! real binary, asserting on what it prints and how it exits.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest a test waits for something asynchronous (a run to finish, a timer to fire).
const WAIT_MS: u64 = 10_000;

const FLEET: &str = r#"
# Fires every second; runs succeed quickly.
[[agents]]
name = "ticker"
heartbeat = { interval_ms = 1000 }
adapter = { type = "scripted", steps = [{ duration_ms = 50, outcome = "succeeded" }] }

# Woken on demand only.
[[agents]]
name = "worker"
heartbeat = { sources = ["on_demand"] }
adapter = { type = "scripted", steps = [{ duration_ms = 100, outcome = "succeeded" }] }

# Hangs until cancelled.
[[agents]]
name = "hanger"
heartbeat = { sources = ["on_demand"] }
adapter = { type = "scripted", steps = [{ duration_ms = 0, outcome = "hang" }] }
limits = { run_timeout_ms = 600000 }
"#;

/// A `vigil serve` child, killed (and its directory removed) when dropped, even on a failed
/// assertion.
struct Server {
    child: Child,
    /// Kept open so the server never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
    url: String,
    dir: PathBuf,
}

impl Server {
    /// Starts `vigil serve` on a free port with the test fleet, in a fresh directory.
    fn start(test: &str, extra_args: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = fresh_dir(test);
        let mut command = serve_command(&dir.join("data"), &dir);
        command.args(extra_args);
        for (key, value) in env {
            command.env(key, value);
        }
        Server::attach(command, dir)
    }

    /// Spawns `command` (a `vigil serve` in `dir`) and reads its first line for the address.
    fn attach(command: Command, dir: PathBuf) -> Server {
        let (child, stdout, url) = spawn_serve(command);
        Server {
            child,
            _stdout: stdout,
            url,
            dir,
        }
    }

    /// Kills the node (SIGKILL) and starts another on the same data directory and fleet file,
    /// with `env`.
    fn restart(&mut self, env: &[(&str, &str)]) {
        let mut command = serve_command(&self.data_dir(), &self.dir);
        for (key, value) in env {
            command.env(key, value);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        (self.child, self._stdout, self.url) = spawn_serve(command);
    }

    /// Waits until the node is ready and has applied the fleet (it listens before both), for at
    /// most `WAIT_MS`. `token` is needed when the operator token is configured, not generated.
    fn wait_for_fleet(&self, token: Option<&str>) {
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
        let mut args = vec!["agent", "list", "--json"];
        args.extend(token.iter().flat_map(|t| ["--token", *t]));
        loop {
            let output = self.vigil(&args);
            if output.status.success() {
                let listing: Value = serde_json::from_slice(&output.stdout).unwrap();
                if listing["agents"].as_array().is_some_and(|a| a.len() >= 3) {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the fleet never appeared: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `vigil ARGS` against this server, with the token from its data directory.
    fn vigil(&self, args: &[&str]) -> Output {
        self.vigil_with_stdin(args, "")
    }

    fn vigil_with_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vigil"))
            .args(args)
            .env("VIGIL_SERVER", &self.url)
            .env("VIGIL_DATA_DIR", self.data_dir())
            .env_remove("VIGIL_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("vigil runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// `vigil ARGS`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.vigil(args);
        assert_succeeded(args, &output);
        String::from_utf8(output.stdout).unwrap()
    }

    /// `vigil ARGS --json`, which must succeed; its JSON.
    fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(&args)).unwrap()
    }

    /// `vigil ARGS`, which must fail; its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let output = self.vigil(args);
        assert!(
            !output.status.success(),
            "vigil {args:?} succeeded: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stderr).unwrap()
    }

    /// Polls `runs show RUN` until `done` holds for it, for at most `WAIT_MS`.
    fn wait_run(&self, run: u64, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
        loop {
            let shown = self.json(&["runs", "show", &run.to_string()]);
            if done(&shown) {
                return shown;
            }
            assert!(
                Instant::now() < deadline,
                "run {run} never became {what}: {shown}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Spawns a `vigil serve` and reads its first line for the address; a bad first line kills the
/// child before the test fails.
fn spawn_serve(mut command: Command) -> (Child, BufReader<ChildStdout>, String) {
    let mut child = command.spawn().expect("vigil serve starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    let addr = line
        .strip_prefix("vigil listening on http://")
        .and_then(|rest| rest.split_whitespace().next());
    let Some(addr) = addr else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("unexpected first line from vigil serve: {line:?}");
    };
    let url = format!("http://{addr}");
    (child, stdout, url)
}

/// A fresh directory for one test, holding the test fleet.
fn fresh_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-cli-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fleet.toml"), FLEET).unwrap();
    dir
}

/// `vigil serve` on a free port, on `data_dir`, with the fleet in `dir`; stdout piped, stderr
/// dropped.
fn serve_command(data_dir: &Path, dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vigil"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .arg("--fleet")
        .arg(dir.join("fleet.toml"))
        .env("VIGIL_LOG", "warn")
        .env_remove("VIGIL_OPERATOR_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn assert_succeeded(args: &[&str], output: &Output) {
    assert!(
        output.status.success(),
        "vigil {args:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The number after `word ` in `text` (e.g. the run id in "queued run 7").
fn number_after(text: &str, word: &str) -> u64 {
    text.split(word)
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .find(|s| !s.is_empty())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {word:?} in {text:?}"))
}

#[test]
fn operator_cli_drives_a_fleet() {
    let server = Server::start("drive", &[], &[]);
    server.wait_for_fleet(None);
    assert!(server.data_dir().join("operator-token").exists());

    // The fleet's agents are there, one line each under a header.
    let list = server.ok(&["agent", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("NAME"),
        "{list}"
    );
    for name in ["ticker", "worker", "hanger"] {
        assert!(
            lines
                .iter()
                .any(|l| l.split_whitespace().nth(1) == Some(name)),
            "{name} missing:\n{list}"
        );
    }
    assert_eq!(lines.len(), 4, "{list}");

    // Create: the agent and its token, with the shown-once warning.
    let created = server.vigil(&["agent", "create", "--name", "scout", "--interval", "30s"]);
    assert_succeeded(&["agent", "create"], &created);
    let stdout = String::from_utf8(created.stdout).unwrap();
    assert!(
        stdout.contains("created agent") && stdout.contains("scout"),
        "{stdout}"
    );
    assert!(stdout.contains("token: vgl_agent_"), "{stdout}");
    assert!(String::from_utf8(created.stderr)
        .unwrap()
        .contains("shown only"));
    let scout = number_after(&stdout, "created agent");

    // A full spec from stdin, TOML.
    let spec = "name = \"from-spec\"\ntime_zone = \"Asia/Tokyo\"\n[heartbeat]\nsources = [\"on_demand\"]\n";
    let output = server.vigil_with_stdin(&["agent", "create", "--spec", "-"], spec);
    assert_succeeded(&["agent", "create", "--spec", "-"], &output);
    let shown = server.json(&["agent", "show", "from-spec"]);
    assert_eq!(shown["spec"]["time_zone"], "Asia/Tokyo");
    assert_eq!(
        shown["spec"]["heartbeat"]["sources"],
        serde_json::json!(["on_demand"])
    );

    // Errors: the server's field, a local parse error, a duplicate name, an unknown agent.
    let err = server.fails(&["agent", "create", "--name", "fast", "--interval", "500ms"]);
    assert!(
        err.starts_with("error: ") && err.contains("(field: heartbeat.interval_ms)"),
        "{err}"
    );
    let err = server.fails(&["agent", "create", "--name", "fast", "--interval", "soon"]);
    assert!(err.contains("--interval"), "{err}");
    let err = server.fails(&["agent", "create", "--name", "fast", "--interval", "300"]);
    assert!(err.contains("use units, e.g. 300s or 5m"), "{err}");
    let err = server.fails(&["agent", "create", "--name", "scout"]);
    assert!(err.contains("(field: name)"), "{err}");
    let err = server.fails(&["agent", "show", "999"]);
    assert!(err.contains("no agent with id 999"), "{err}");

    // Show, by id and by name.
    let show = server.ok(&["agent", "show", &scout.to_string()]);
    assert!(
        show.lines()
            .any(|l| l.starts_with("name") && l.ends_with("scout")),
        "{show}"
    );
    assert!(
        show.lines()
            .any(|l| l.starts_with("timer ") && l.ends_with("30s")),
        "{show}"
    );
    assert_eq!(server.json(&["agent", "show", "scout"])["id"], scout);

    // Wake: queued, then replayed for the same idempotency key; the run succeeds.
    let wake = [
        "agent",
        "wake",
        "worker",
        "--reason",
        "look at ticket 7",
        "--idempotency-key",
        "k1",
        "--payload",
        r#"{"ticket":7}"#,
    ];
    let answer = server.ok(&wake);
    assert!(answer.contains("queued run"), "{answer}");
    let run = number_after(&answer, "queued run");
    let again = server.ok(&wake);
    assert!(
        again.contains("replayed") && again.contains(&format!("run {run}")),
        "{again}"
    );
    server.wait_run(run, "succeeded", |r| r["status"] == "succeeded");
    let shown = server.ok(&["runs", "show", &run.to_string()]);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("status") && l.ends_with("succeeded")),
        "{shown}"
    );
    // A finished run keeps its reason; its payload lives on in the wakeup's event (see below).
    assert!(shown.contains("look at ticket 7"), "{shown}");
    let listed = server.ok(&["runs", "list", "--agent", "worker", "--status", "succeeded"]);
    let row = listed
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&run.to_string()));
    assert!(
        row.is_some_and(|r| r.contains("worker") && r.contains("on_demand")),
        "{listed}"
    );
    let err = server.fails(&["runs", "list", "--status", "sleeping"]);
    assert!(err.contains("(field: status)"), "{err}");

    // Cancel a hanging run once it runs; cancelling again is refused.
    let answer = server.ok(&["agent", "wake", "hanger"]);
    let hanging = number_after(&answer, "queued run");
    server.wait_run(hanging, "running", |r| r["status"] == "running");
    let cancelled = server.ok(&["runs", "cancel", &hanging.to_string()]);
    assert!(cancelled.contains("cancelled"), "{cancelled}");
    server.fails(&["runs", "cancel", &hanging.to_string()]);

    // Pause refuses wakeups; resume takes them again; terminate is for good.
    assert!(server.ok(&["agent", "pause", "scout"]).contains("paused"));
    let refused = server.ok(&["agent", "wake", "scout"]);
    assert!(refused.contains("refused: paused"), "{refused}");
    assert!(server.ok(&["agent", "resume", "scout"]).contains("active"));
    assert!(server
        .ok(&["agent", "terminate", "scout"])
        .contains("terminated"));
    assert_eq!(
        server.json(&["agent", "show", "scout"])["status"],
        "terminated"
    );

    // The fleet's timer fires by itself.
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
    loop {
        let runs = server.json(&["runs", "list", "--agent", "ticker", "--status", "succeeded"]);
        if runs["runs"].as_array().is_some_and(|r| !r.is_empty()) {
            assert_eq!(runs["runs"][0]["source"], "timer");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ticker's timer never ran: {runs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The event log: every event once, in order, one line each; JSON lines parse.
    let tail = server.ok(&["events", "tail"]);
    for kind in [
        "tenant_created",
        "agent_created",
        "wakeup_queued",
        "run_started",
        "run_finished",
        "agent_paused",
        "timer_fired",
    ] {
        assert!(
            tail.lines().any(|l| l.contains(kind)),
            "no {kind} in:\n{tail}"
        );
    }
    let queued = tail.lines().find(|l| l.contains("wakeup_queued")).unwrap();
    assert!(
        queued.contains(r#"payload={"ticket":7}"#)
            && queued.contains("reason=\"look at ticket 7\""),
        "{queued}"
    );
    let json_tail = server.ok(&["events", "tail", "--json"]);
    let seqs: Vec<u64> = json_tail
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(
        seqs.len() >= tail.lines().count(),
        "json tail shorter than the text tail"
    );
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let after = seqs[2];
    let later = server.ok(&["events", "tail", "--after", &after.to_string(), "--json"]);
    let first = serde_json::from_str::<Value>(later.lines().next().unwrap()).unwrap();
    assert_eq!(first["seq"].as_u64(), Some(seqs[3]));
}

/// The row of agent `name` in `vigil top` output (the name is the second column).
fn top_row<'a>(top: &'a str, name: &str) -> &'a str {
    top.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no row for {name}:\n{top}"))
}

#[test]
fn top_shows_pauses_caps_breakers_and_active_runs() {
    let server = Server::start("top", &[], &[]);
    server.wait_for_fleet(None);
    let create = |spec: &str| {
        let output = server.vigil_with_stdin(&["agent", "create", "--spec", "-"], spec);
        assert_succeeded(&["agent", "create", "--spec", spec], &output);
    };
    create(
        r#"{"name":"capped","heartbeat":{"sources":["on_demand"]},"limits":{"daily_cap":2},
            "adapter":{"type":"scripted","steps":[{"duration_ms":0,"outcome":"succeeded"}]}}"#,
    );
    // One tool failure opens the breaker for an hour.
    create(
        r#"{"name":"flaky","heartbeat":{"sources":["on_demand"]},
            "breaker":{"failures_to_open":1,"cooldown_ms":3600000,"cooldown_ms_max":7200000},
            "adapter":{"type":"scripted","steps":[{"duration_ms":0,"outcome":"tool_failed"}]}}"#,
    );
    server.ok(&["agent", "create", "--name", "resting"]);
    server.ok(&["agent", "pause", "resting"]);
    server.ok(&["agent", "pause", "worker", "--minutes", "30"]);

    let capped = number_after(&server.ok(&["agent", "wake", "capped"]), "queued run");
    server.wait_run(capped, "succeeded", |r| r["status"] == "succeeded");
    let flaky = number_after(&server.ok(&["agent", "wake", "flaky"]), "queued run");
    server.wait_run(flaky, "failed", |r| r["status"] == "failed");
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
    while server.json(&["agent", "show", "flaky"])["breaker"]["state"] != "open" {
        assert!(Instant::now() < deadline, "flaky's breaker never opened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let hanging = number_after(&server.ok(&["agent", "wake", "hanger"]), "queued run");
    server.wait_run(hanging, "running", |r| r["status"] == "running");

    let top = server.ok(&["top", "--once"]);
    let lines: Vec<&str> = top.lines().collect();
    assert_eq!(
        lines.len(),
        2 + 6,
        "a header, the column names, 6 agents:\n{top}"
    );
    assert!(
        lines[0].starts_with(&format!(
            "server {}  tenant default  agents 6  ",
            server.url
        )) && lines[0].contains("  last seq "),
        "{top}"
    );
    assert!(
        lines[1].starts_with("ID  NAME") && lines[1].contains("BREAKER"),
        "{top}"
    );
    let capped_row = top_row(&top, "capped");
    assert!(capped_row.contains("  1/2  "), "{capped_row}");
    let flaky_row = top_row(&top, "flaky");
    assert!(
        flaky_row.contains("  open, ") && flaky_row.contains(" left (tool)"),
        "{flaky_row}"
    );
    assert!(top_row(&top, "worker").contains("  0/-  "), "{top}");
    let resting = top_row(&top, "resting");
    assert_eq!(
        resting.split_whitespace().nth(2),
        Some("paused"),
        "{resting}"
    );
    assert!(resting.contains("until resumed (operator)"), "{resting}");
    let worker = top_row(&top, "worker");
    assert_eq!(worker.split_whitespace().nth(2), Some("active"), "{worker}");
    assert!(worker.contains(" left (operator)"), "{worker}");
    let hanger = top_row(&top, "hanger");
    assert!(
        hanger.contains(&format!("  run {hanging} for ")),
        "{hanger}"
    );
    assert!(
        top_row(&top, "capped").ends_with("  -"),
        "no active run: {top}"
    );

    // Without a terminal, plain `vigil top` prints the same snapshot and exits.
    let plain = server.ok(&["top"]);
    assert_eq!(plain.lines().count(), lines.len(), "{plain}");
    assert!(plain.lines().nth(1) == Some(lines[1]), "{plain}");

    // --once --json: the snapshot, with the server's field names and the view's additions.
    let json = server.json(&["top", "--once"]);
    assert_eq!(json["server"], server.url.as_str());
    assert_eq!(json["tenant"], "default");
    assert!(json["last_seq"].as_u64().unwrap() > 0, "{json}");
    let agents = json["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 6, "{json}");
    let agent = |name: &str| agents.iter().find(|a| a["name"] == name).unwrap();
    assert_eq!(agent("flaky")["breaker"]["state"], "open");
    assert_eq!(agent("flaky")["breaker_trigger"], "tool");
    assert_eq!(agent("capped")["spec"]["limits"]["daily_cap"], 2);
    assert_eq!(agent("capped")["day_count"]["started"], 1);
    assert_eq!(agent("hanger")["active_run"]["id"], hanging);
    assert_eq!(agent("resting")["status"], "paused");
    assert_eq!(agent("worker")["paused_by"], "operator");
    assert!(agent("ticker")["next_fire_at_ms"].is_u64(), "{json}");
    assert!(agent("worker")["next_fire_at_ms"].is_null(), "{json}");
    let parsed: vigil::cli::FleetSnapshot = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(parsed.agents.len(), 6);
}

#[test]
fn missing_bad_and_unreachable_credentials_say_what_to_do() {
    let server = Server::start("token", &[], &[]);
    server.wait_for_fleet(None);
    // No --token, no VIGIL_TOKEN, no token file in the data directory.
    let empty = server.dir.join("elsewhere");
    let output = server.vigil(&["agent", "list", "--data-dir", empty.to_str().unwrap()]);
    assert!(!output.status.success());
    let err = String::from_utf8(output.stderr).unwrap();
    assert!(
        err.contains("no operator token")
            && err.contains("--token")
            && err.contains("operator-token"),
        "{err}"
    );

    let err = server.fails(&["agent", "list", "--token", "vgl_op_wrong"]);
    assert!(
        err.starts_with("error: ") && err.contains("not known"),
        "{err}"
    );

    // A refused token is named by where it came from: the flag, or the file.
    let err = server.fails(&["top", "--once", "--token", "vgl_op_wrong"]);
    assert!(
        err.contains("refused the token from --token / VIGIL_TOKEN") && err.contains("not known"),
        "{err}"
    );
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("operator-token"), "vgl_op_stale\n").unwrap();
    let output = server.vigil(&["top", "--once", "--data-dir", empty.to_str().unwrap()]);
    assert!(!output.status.success());
    let err = String::from_utf8(output.stderr).unwrap();
    let file = empty.join("operator-token");
    assert!(
        err.contains(&format!("refused the token from {}", file.display())),
        "{err}"
    );

    let dead = closed_port_url();
    for command in [&["agent", "list"][..], &["top", "--once"]] {
        let mut args = command.to_vec();
        args.extend(["--server", &dead]);
        let err = server.fails(&args);
        assert!(
            err.contains("not reachable") && err.contains(&dead) && err.contains("vigil serve"),
            "{err}"
        );
    }
}

#[test]
fn configured_operator_token_is_used_and_not_written() {
    let token = "test-operator-token-0123456789";
    let server = Server::start("configured", &[], &[("VIGIL_OPERATOR_TOKEN", token)]);
    server.wait_for_fleet(Some(token));
    assert!(!server.data_dir().join("operator-token").exists());
    let list = server.ok(&["agent", "list", "--token", token]);
    assert!(list.contains("ticker"), "{list}");
    let err = server.fails(&["agent", "list"]);
    assert!(err.contains("no operator token"), "{err}");
}

/// A URL where nothing listens: a port bound and released by this process.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

#[test]
fn input_and_pulses_from_the_cli() {
    let server = Server::start("input", &[], &[]);
    server.wait_for_fleet(None);
    let spec = r#"{"name":"listener","heartbeat":{"idle_after_ms":3600000}}"#;
    let output = server.vigil_with_stdin(&["agent", "create", "--spec", "-"], spec);
    assert_succeeded(&["agent", "create", "--spec", spec], &output);

    let answer = server.ok(&["agent", "input", "listener", "--text", "hello"]);
    let run = number_after(&answer, "queued run");
    let shown = server.json(&["agent", "show", "listener"]);
    assert!(shown["last_input_at_ms"].is_u64(), "{shown}");
    let run_body = server.json(&["runs", "show", &run.to_string()]);
    assert_eq!(run_body["payload"]["text"], "hello");
    assert_eq!(run_body["source"], "on_demand");

    let one = server.ok(&["agent", "pulse", "listener"]);
    assert!(one.contains("is online"), "{one}");
    let batch = server.ok(&["agent", "pulse", "listener", "hanger"]);
    assert!(batch.starts_with("2 pulses taken"), "{batch}");
    let hanger = server.json(&["agent", "show", "hanger"])["id"].clone();
    assert!(batch.contains(&format!("[{hanger}]")), "{batch}");
    assert_eq!(
        server.json(&["agent", "show", "listener"])["liveness"]["status"],
        "online"
    );
    let top = server.ok(&["top", "--once"]);
    assert!(top_row(&top, "listener").contains("online"), "{top}");
    // Bad input names what is wrong.
    let missing = server.fails(&["agent", "pulse", "no-such-agent"]);
    assert!(missing.contains("no-such-agent"), "{missing}");

    // The wakeup history: the input's wakeup, then one with a trigger detail, then a refusal.
    let detail = r#"{"ticket":"T-9"}"#;
    let args = ["agent", "wake", "listener", "--source", "assignment", "--trigger-detail", detail];
    server.ok(&args);
    server.ok(&["agent", "pause", "listener"]);
    assert!(server.ok(&["agent", "wake", "listener"]).contains("refused: paused"));
    let listed = server.ok(&["wakeups", "list", "--agent", "listener"]);
    let rows: Vec<&str> = listed.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{listed}");
    assert!(rows[0].contains("on_demand") && rows[0].contains("operator"), "{listed}");
    assert!(rows[1].contains("assignment"), "{listed}");
    assert!(rows[2].contains("refused (paused)"), "{listed}");
    let page = server.json(&["wakeups", "list", "--status", "refused"]);
    assert_eq!(page["wakeups"].as_array().unwrap().len(), 1, "{page}");
    let page = server.json(&["wakeups", "list", "--agent", "listener", "--source", "assignment"]);
    assert_eq!(page["wakeups"][0]["trigger_detail"]["ticket"], "T-9", "{page}");
    let one = server.ok(&["wakeups", "list", "--agent", "listener", "--limit", "1"]);
    assert!(one.contains("more: --after "), "{one}");
    let err = server.fails(&["wakeups", "list", "--status", "sleeping"]);
    assert!(err.contains("(field: status)"), "{err}");
    let err = server.fails(&["agent", "wake", "listener", "--trigger-detail", "[1]"]);
    assert!(err.contains("(field: trigger_detail)"), "{err}");
}

/// Writes `lines` as the transcripts of `agent` (run `run`'s, in the tests), where the server's
/// store keeps them, in one rename so that the server never reads half of it.
fn write_transcript(server: &Server, agent: u64, run: u64, lines: &[Value]) {
    let store = vigil::transcript::FileTranscripts::new(&server.data_dir());
    let path = store.path(vigil::engine::agent::AgentId(agent));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let staged = server.data_dir().join(format!("staged-{run}.ndjson"));
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// A transcript whose model and tool text carries terminal escapes (an OSC title change, a
/// colour, a bell, a carriage return).
fn hostile_transcript(run: u64) -> Vec<Value> {
    vec![
        serde_json::json!({"run": run, "seq": 0, "at_ms": 1_800_000_000_000u64, "kind": "wakeup",
            "source": "on_demand", "reason": "check", "payload": null}),
        serde_json::json!({"run": run, "seq": 1, "at_ms": 1_800_000_000_250u64, "kind": "tool_result",
            "id": "c1", "name": "sh", "output": "\u{1b}]0;pwned\u{7}\u{1b}[31mred\roverwritten",
            "is_error": false, "latency_ms": 20}),
        serde_json::json!({"run": run, "seq": 2, "at_ms": 1_800_000_000_900u64, "kind": "stop",
            "stop_reason": "end_turn", "detail": "done \u{9b}2J"}),
    ]
}

#[test]
fn runs_log_prints_transcripts_escaped_and_follows_until_complete() {
    let server = Server::start("runs-log", &[], &[]);
    server.wait_for_fleet(None);
    let run = number_after(&server.ok(&["agent", "wake", "worker"]), "queued run");
    let shown = server.wait_run(run, "finished", |r| r["status"] == "succeeded");
    let agent = shown["agent"].as_u64().unwrap();

    // Every run the executor finished has a transcript that ends in its stop line.
    let own = server.ok(&["runs", "log", &run.to_string()]);
    assert_eq!(own.lines().count(), 1, "{own}");
    assert!(own.contains("stop            end_turn \"scripted step"), "{own}");

    write_transcript(&server, agent, run, &hostile_transcript(run));
    let text = server.ok(&["runs", "log", &run.to_string()]);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\r'),
        "{text:?}"
    );
    assert!(!text.contains('\u{9b}'), "{text:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].contains("2027-01-15T08:00:00.000Z  wakeup"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].ends_with(r#"sh id=c1 ok took=20ms "\x1b]0;pwned\x07\x1b[31mred\roverwritten""#),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].ends_with(r#"stop            end_turn "done \u{9b}2J""#),
        "{}",
        lines[2]
    );

    // --json: the server's page, escapes kept as JSON escapes, never raw.
    let json = server.ok(&["runs", "log", &run.to_string(), "--json"]);
    assert!(
        !json.contains('\u{1b}') && !json.contains('\u{9b}'),
        "{json:?}"
    );
    let page: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(page["complete"], true);
    assert_eq!(
        page["entries"][1]["output"],
        hostile_transcript(run)[1]["output"]
    );

    // --follow on a running run: polls while there is nothing, prints the transcript once it
    // is there and complete, and exits.
    let hanging = number_after(&server.ok(&["agent", "wake", "hanger"]), "queued run");
    let hanger = server.wait_run(hanging, "running", |r| r["status"] == "running")["agent"]
        .as_u64()
        .unwrap();
    let token = std::fs::read_to_string(server.data_dir().join("operator-token")).unwrap();
    let mut follower = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args([
            "runs",
            "log",
            &hanging.to_string(),
            "--follow",
            "--server",
            &server.url,
        ])
        .args(["--token", token.trim()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(
        follower.try_wait().unwrap().is_none(),
        "--follow ended before the transcript was complete"
    );
    write_transcript(&server, hanger, hanging, &hostile_transcript(hanging));
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
    while follower.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = follower.kill();
            panic!("--follow never ended");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = follower.wait_with_output().unwrap();
    assert_succeeded(&["runs", "log", "--follow"], &output);
    let followed = String::from_utf8(output.stdout).unwrap();
    assert_eq!(followed.lines().count(), 3, "{followed}");
    assert!(!followed.contains('\u{1b}'), "{followed:?}");

    // Errors name the run or the field.
    let missing = server.fails(&["runs", "log", "999999"]);
    assert!(missing.contains("no run with id 999999"), "{missing}");
}

/// What a server printed to stderr, line by line as it comes, until a line containing `until`
/// (or `WAIT_MS` passed: the test then fails on what it got).
fn stderr_until(server: &mut Server, until: &str) -> String {
    let stderr = server.child.stderr.take().expect("stderr piped");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
    let mut printed = String::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = received.recv_timeout(left) else {
            break;
        };
        printed.push_str(&line);
        printed.push('\n');
        if line.contains(until) {
            return printed;
        }
    }
    panic!("vigil serve never printed {until:?}; it printed:\n{printed}");
}

#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let dir = fresh_dir("plain-logs");
    let mut command = serve_command(&dir.join("data"), &dir);
    command.env("VIGIL_LOG", "info").stderr(Stdio::piped());
    let mut server = Server::attach(command, dir);
    // The fleet's summary is logged at info after the agents are created; the hint follows it.
    let printed = stderr_until(&mut server, "Ctrl-C stops");
    assert!(printed.contains("fleet applied"), "{printed}");
    assert!(!printed.contains("\x1b["), "colour codes in piped logs:\n{printed:?}");
}

#[test]
fn a_second_serve_on_the_same_data_dir_fails_before_listening() {
    let first = Server::start("second-serve", &[], &[]);
    let mut command = serve_command(&first.data_dir(), &first.dir);
    command.stderr(Stdio::piped());
    let mut second = command.spawn().expect("vigil serve starts");
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
    while second.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = second.kill();
            panic!("a second vigil serve on the same data directory kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = second.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    let holder = format!("another vigil (pid {}) holds the data directory", first.child.id());
    assert!(stderr.contains(&holder), "{stderr}");
    assert!(stderr.contains(&first.data_dir().display().to_string()), "{stderr}");
}

/// The annotated spec the README's "Operate it" block creates.
const EXAMPLE_SPEC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/agent.toml");

#[test]
fn the_example_agent_spec_creates_a_working_agent() {
    let server = Server::start("example-spec", &[], &[]);
    server.wait_for_fleet(None);
    let created = server.vigil(&["agent", "create", "--spec", EXAMPLE_SPEC]);
    assert_succeeded(&["agent", "create", "--spec", EXAMPLE_SPEC], &created);
    let shown = server.json(&["agent", "show", "explorer"]);
    let spec = &shown["spec"];
    assert_eq!(spec["heartbeat"]["interval_ms"], 300_000, "{shown}");
    assert_eq!(spec["adapter"]["type"], "scripted", "{shown}");
    // It runs offline: a wakeup on demand queues a run that succeeds.
    let woken = server.ok(&["agent", "wake", "explorer"]);
    let run = number_after(&woken, "run");
    server.wait_run(run, "succeeded", |run| run["status"] == "succeeded");
}

/// A fleet file with a mistake stops `vigil serve` with the fleet parser's own message, the
/// one `vigil-sim fleet` prints for the same file (tests/sim_fleet.rs).
#[test]
fn a_fleet_file_with_an_error_stops_serve_with_the_parsers_message() {
    let fleet = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/broken_fleet.toml"));
    let expected = vigil::fleet::Fleet::load(fleet).unwrap_err().to_string();
    assert!(expected.contains("intreval_ms"), "{expected}");
    let data_dir = std::env::temp_dir().join(format!("vigil-cli-broken-fleet-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .arg("--fleet")
        .arg(fleet)
        .env("VIGIL_LOG", "warn")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&data_dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
}

#[test]
fn a_database_of_a_newer_format_is_refused_at_start_with_what_to_do() {
    // A node wrote the database and stopped; then a newer Vigil (a later format) took it over.
    let mut server = Server::start("newer-format", &[], &[]);
    server.wait_for_fleet(None);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let data_dir = server.data_dir();
    let path = data_dir.join("vigil.redb");
    {
        let db = redb::Database::open(&path).unwrap();
        let meta: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
        let tx = db.begin_write().unwrap();
        tx.open_table(meta)
            .unwrap()
            .insert("format_version", vigil::store::record::FORMAT_VERSION + 1)
            .unwrap();
        tx.commit().unwrap();
    }
    let mut command = serve_command(&data_dir, &server.dir);
    command.stderr(Stdio::piped());
    let output = command.spawn().unwrap().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let newer = vigil::store::record::FORMAT_VERSION + 1;
    assert!(
        stderr.contains(&format!("storage format {newer}, written by a newer Vigil"))
            && stderr.contains(&format!(
                "reads storage formats up to {}.",
                vigil::store::record::FORMAT_VERSION
            ))
            && stderr.contains("the database was not changed"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn agent_rotate_token_prints_the_new_token_alone_and_the_old_one_stops_working() {
    let server = Server::start("rotate-token", &[], &[]);
    server.wait_for_fleet(None);
    let id = server.json(&["agent", "show", "worker"])["id"]
        .as_u64()
        .unwrap()
        .to_string();
    let first = server.vigil(&["agent", "rotate-token", "worker"]);
    assert_succeeded(&["agent", "rotate-token", "worker"], &first);
    let stdout = String::from_utf8(first.stdout).unwrap();
    let old_token = stdout.trim().to_string();
    assert!(old_token.starts_with("vgl_agent_"), "{stdout:?}");
    assert_eq!(
        stdout.lines().count(),
        1,
        "only the token on stdout: {stdout:?}"
    );
    let stderr = String::from_utf8(first.stderr).unwrap();
    assert!(stderr.contains("shown once"), "{stderr}");
    let new_token = server
        .ok(&["agent", "rotate-token", &id])
        .trim()
        .to_string();
    assert_ne!(new_token, old_token);
    let shown = server.ok(&["agent", "show", &id, "--token", &new_token]);
    assert!(shown.contains("worker"), "{shown}");
    let refused = server.fails(&["agent", "show", &id, "--token", &old_token]);
    assert!(
        refused.contains("401") || refused.contains("unauthenticated") || refused.contains("token"),
        "{refused}"
    );
}

#[test]
fn agents_are_updated_and_deleted_from_the_cli() {
    let server = Server::start("update-delete", &[], &[]);
    server.wait_for_fleet(None);
    let args = [
        "agent",
        "update",
        "worker",
        "--interval",
        "5m",
        "--daily-cap",
        "3",
    ];
    let updated = server.ok(&args);
    assert!(
        updated.contains("updated agent")
            && updated.contains("heartbeat.interval_ms, limits.daily_cap"),
        "{updated}"
    );
    let shown = server.json(&["agent", "show", "worker"]);
    assert_eq!(
        shown["spec"]["heartbeat"]["interval_ms"], 300_000,
        "{shown}"
    );
    assert_eq!(shown["spec"]["limits"]["daily_cap"], 3, "{shown}");
    assert!(
        shown["next_fire_at_ms"].as_u64().is_some(),
        "a timer now: {shown}"
    );
    assert!(server.ok(&args).contains("unchanged"));
    let refused = server.fails(&[
        "agent",
        "update",
        "worker",
        "--patch",
        r#"{"time_zone": "Mars/Olympus"}"#,
    ]);
    assert!(refused.contains("(field: time_zone)"), "{refused}");
    // A running agent is terminated, then forgotten; its name is free again, its id is not.
    let run = number_after(&server.ok(&["agent", "wake", "hanger"]), "run");
    server.wait_run(run, "running", |run| run["status"] == "running");
    let hanger = server.json(&["agent", "show", "hanger"])["id"]
        .as_u64()
        .unwrap();
    let deleted = server.ok(&["agent", "delete", "hanger"]);
    assert!(
        deleted.contains(&format!("deleted agent {hanger} hanger")),
        "{deleted}"
    );
    let gone = server.fails(&["agent", "show", &hanger.to_string()]);
    assert!(
        gone.contains(&format!("no agent with id {hanger}")),
        "{gone}"
    );
    let events = server.ok(&["events", "tail"]);
    for kind in ["agent_updated", "agent_terminated", "agent_deleted"] {
        assert!(events.contains(kind), "no {kind} in the log:\n{events}");
    }
    let again = server.ok(&["agent", "create", "--name", "hanger"]);
    assert!(number_after(&again, "agent") > hanger, "{again}");
}

#[test]
fn a_rotated_operator_token_is_written_back_and_kept_across_restarts() {
    let mut server = Server::start("rotate-operator", &[], &[]);
    server.wait_for_fleet(None);
    let token_file = server.data_dir().join("operator-token");
    let old = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    let new = server.ok(&["operator", "rotate-token"]).trim().to_string();
    assert!(new.starts_with("vgl_op_") && new != old, "{new}");
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap().trim(),
        new,
        "written back"
    );
    assert!(server
        .fails(&["agent", "list", "--token", &old])
        .contains("refused the token"));
    server.restart(&[]);
    server.wait_for_fleet(Some(&new));
    assert!(server.ok(&["agent", "list"]).contains("worker"));
}

#[test]
fn a_configured_operator_token_rotated_stays_rotated_until_the_configuration_changes() {
    let configured = "configured-operator-token-0001";
    let env = [("VIGIL_OPERATOR_TOKEN", configured)];
    let mut server = Server::start("rotate-configured", &[], &env);
    server.wait_for_fleet(Some(configured));
    let rotated = server.ok(&["operator", "rotate-token", "--token", configured]);
    let rotated = rotated.trim().to_string();
    assert!(
        !server.data_dir().join("operator-token").exists(),
        "a flag token is not written"
    );
    // The same configuration at restart: the rotated token holds, the configured one stays revoked.
    server.restart(&env);
    server.wait_for_fleet(Some(&rotated));
    let refused = server.fails(&["agent", "list", "--token", configured]);
    assert!(refused.contains("refused the token"), "{refused}");
    // A new configured token replaces the rotated one.
    let replacement = "configured-operator-token-0002";
    server.restart(&[("VIGIL_OPERATOR_TOKEN", replacement)]);
    server.wait_for_fleet(Some(replacement));
    assert!(server
        .fails(&["agent", "list", "--token", &rotated])
        .contains("refused the token"));
}

#[test]
fn fleet_plan_shows_and_apply_makes_the_difference() {
    let mut server = Server::start("fleet-apply", &[], &[]);
    server.wait_for_fleet(None);
    server.ok(&["agent", "create", "--name", "stray"]);
    let changed = FLEET
        .replace("interval_ms = 1000 }", "interval_ms = 2000 }")
        .replace("name = \"hanger\"", "name = \"newcomer\"");
    let file = server.dir.join("changed.toml");
    std::fs::write(&file, &changed).unwrap();
    let file = file.to_str().unwrap();
    let plan = server.ok(&["fleet", "plan", file]);
    let ticker = server.json(&["agent", "show", "ticker"])["id"]
        .as_u64()
        .unwrap();
    assert!(
        plan.contains(&format!(
            "~ update ticker (tenant default), id {ticker}: heartbeat.interval_ms"
        )),
        "{plan}"
    );
    assert!(
        plan.contains("+ create newcomer (tenant default)"),
        "{plan}"
    );
    assert!(plan.contains("? hanger (tenant default)"), "{plan}");
    assert!(plan.contains("? stray (tenant default)"), "{plan}");
    assert!(
        plan.ends_with("1 to create, 1 to update, 0 to delete, 1 unchanged\n"),
        "{plan}"
    );
    assert_eq!(
        server.json(&["agent", "show", "ticker"])["spec"]["heartbeat"]["interval_ms"],
        1000,
        "plan changes nothing"
    );
    let pruned = server.ok(&["fleet", "plan", file, "--prune"]);
    assert!(
        pruned.ends_with("1 to create, 1 to update, 2 to delete, 1 unchanged\n"),
        "{pruned}"
    );
    let applied = server.ok(&["fleet", "apply", file]);
    assert!(
        applied.contains("+ created newcomer (tenant default), id"),
        "{applied}"
    );
    assert!(
        applied.contains("token (shown once): vgl_agent_"),
        "{applied}"
    );
    assert!(
        applied.contains("~ updated ticker (tenant default)"),
        "{applied}"
    );
    assert_eq!(
        server.json(&["agent", "show", "ticker"])["spec"]["heartbeat"]["interval_ms"],
        2000
    );
    assert!(
        server.ok(&["agent", "show", "stray"]).contains("stray"),
        "kept without --prune"
    );
    let done = server.ok(&["fleet", "plan", file]);
    assert!(
        done.ends_with("0 to create, 0 to update, 0 to delete, 3 unchanged\n"),
        "{done}"
    );
    let pruning = server.ok(&["fleet", "apply", file, "--prune"]);
    assert!(
        pruning.contains("- deleted stray") && pruning.contains("- deleted hanger"),
        "{pruning}"
    );
    assert!(server.fails(&["agent", "show", "stray"]).contains("stray"));
    // `serve --fleet` applies at start: the original file brings the old interval back.
    let ticker_before = server.json(&["agent", "show", "ticker"])["id"].clone();
    server.restart(&[]);
    server.wait_for_fleet(None);
    let ticker = server.json(&["agent", "show", "ticker"]);
    assert_eq!(ticker["spec"]["heartbeat"]["interval_ms"], 1000, "{ticker}");
    assert_eq!(
        ticker["id"], ticker_before,
        "updated in place, not re-created"
    );
}

/// Every event of the database at `path`, read with the runtime's own store.
fn stored_events(path: &Path) -> Vec<vigil::engine::event::Event> {
    let store = vigil::store::Store::open(vigil::io::storage::StorageLocation::File(path.into()))
        .expect("the database opens");
    let mut events = Vec::new();
    loop {
        let page = store.events_after(events.len() as u64, 1_000).unwrap();
        if page.is_empty() {
            return events;
        }
        events.extend(page);
    }
}

#[test]
fn a_backup_taken_while_serving_is_a_consistent_database_a_node_restores_from() {
    let mut server = Server::start("backup", &[], &[]);
    server.wait_for_fleet(None);
    // The ticker commits every second; a few wakeups more, so the log moves during the copy.
    for _ in 0..3 {
        server.ok(&["agent", "wake", "worker"]);
    }
    let answer = server.json(&["backup"]);
    let path = PathBuf::from(answer["path"].as_str().unwrap());
    let head = answer["head_seq"].as_u64().unwrap();
    assert_eq!(
        path.parent().unwrap(),
        server.data_dir().join("backups"),
        "{answer}"
    );
    assert_eq!(
        answer["events"].as_u64(),
        Some(head),
        "every event up to the head"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        answer["bytes"].as_u64().unwrap()
    );
    let human = server.ok(&["backup"]);
    assert!(
        human.starts_with("backup of ") && human.contains("written on the server to"),
        "{human}"
    );
    // Only tenant default's operator.
    let agent_token = server
        .ok(&["agent", "rotate-token", "worker"])
        .trim()
        .to_string();
    let refused = server.fails(&["backup", "--token", &agent_token]);
    assert!(
        refused.contains("403") || refused.contains("operator"),
        "{refused}"
    );
    std::thread::sleep(Duration::from_millis(1_500)); // the ticker writes past the backup
    let _ = server.child.kill();
    let _ = server.child.wait();
    let live = stored_events(&server.data_dir().join("vigil.redb"));
    let backed_up = stored_events(&path);
    assert!(live.len() as u64 > head, "the log went on after the backup");
    assert_eq!(
        backed_up.as_slice(),
        &live[..head as usize],
        "the backup is the log's prefix"
    );
    // Restore: a node started on the backup holds the fleet as it was, ids and all.
    let restored = server.dir.join("restored");
    std::fs::create_dir_all(&restored).unwrap();
    std::fs::copy(&path, restored.join("vigil.redb")).unwrap();
    std::fs::copy(
        server.data_dir().join("operator-token"),
        restored.join("operator-token"),
    )
    .unwrap();
    let mut command = serve_command(&restored, &server.dir);
    command.env_remove("VIGIL_TOKEN");
    (server.child, server._stdout, server.url) = spawn_serve(command);
    let token = std::fs::read_to_string(restored.join("operator-token")).unwrap();
    server.wait_for_fleet(Some(token.trim()));
    let listing = server.json(&["agent", "list", "--token", token.trim()]);
    assert_eq!(listing["agents"].as_array().unwrap().len(), 3, "{listing}");
}

#[test]
fn heartbeats_come_from_the_fleet_file_and_the_cli_and_tick() {
    let dir = fresh_dir("heartbeats");
    let count = dir.join("count");
    std::fs::write(&count, "1\n").unwrap();
    let declared = format!(
        "{FLEET}\n[[heartbeats]]\nid = \"mail\"\nagent = \"worker\"\ninterval_sec = 1\ncheck = {{ kind = \"command\", command = \"cat\", args = [{:?}] }}\n",
        count.display().to_string()
    );
    std::fs::write(dir.join("fleet.toml"), declared).unwrap();
    let server = Server::attach(serve_command(&dir.join("data"), &dir), dir);
    server.wait_for_fleet(None);
    // The declared heartbeat ticks from the start (its interval raised to the minimum).
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
    let shown = loop {
        let shown = server.json(&["heartbeat", "show", "mail"]);
        if shown["state"] == 1 {
            break shown;
        }
        assert!(Instant::now() < deadline, "the fleet's heartbeat never ticked: {shown}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(shown["interval_sec"], 5);
    let human = server.ok(&["heartbeat", "show", "mail"]);
    assert!(human.contains("heartbeat mail of agent 2") && human.contains("command cat"), "{human}");
    // One from the CLI: the raised interval is said.
    let created = server.ok(&[
        "heartbeat", "create", "--id", "probe", "--agent", "hanger", "--interval-sec", "1", "--sample",
    ]);
    assert!(created.contains("every 5 s") && created.contains("minimum interval"), "{created}");
    let listed = server.ok(&["heartbeat", "list"]);
    let lines: Vec<&str> = listed.lines().collect();
    assert!(lines[0].starts_with("ID") && lines.len() == 3, "{listed}");
    assert!(lines[1].starts_with("mail") && lines[2].starts_with("probe"), "{listed}");
    let only = server.json(&["heartbeat", "list", "--agent", "hanger"]);
    assert_eq!(only["heartbeats"].as_array().unwrap().len(), 1);
    // Mistakes are named before or by the server.
    let both = server.fails(&[
        "heartbeat", "create", "--id", "x", "--agent", "worker", "--interval-sec", "9", "--sample",
        "--http", "https://example.com/",
    ]);
    assert!(both.contains("exactly one check"), "{both}");
    let bad = server.fails(&[
        "heartbeat", "create", "--id", "Bad!", "--agent", "worker", "--interval-sec", "9", "--sample",
    ]);
    assert!(bad.contains("(field: id)"), "{bad}");
    assert!(server.ok(&["heartbeat", "delete", "probe"]).contains("deleted heartbeat probe"));
    let gone = server.fails(&["heartbeat", "show", "probe"]);
    assert!(gone.contains("no heartbeat"), "{gone}");
    // `fleet plan|apply` handle heartbeats too: a new one is created, a changed one replaced.
    let file = server.dir.join("fleet-2.toml");
    let served = std::fs::read_to_string(server.dir.join("fleet.toml")).unwrap();
    let next = served.replace("interval_sec = 1\n", "interval_sec = 30\n")
        + "\n[[heartbeats]]\nid = \"hangs\"\nagent = \"hanger\"\ninterval_sec = 60\ncheck = { kind = \"sample\" }\n";
    std::fs::write(&file, next).unwrap();
    let file = file.to_str().unwrap();
    let plan = server.ok(&["fleet", "plan", file]);
    assert!(plan.contains("+ create heartbeat hangs (tenant default) of agent hanger"), "{plan}");
    assert!(plan.contains("~ replace heartbeat mail (tenant default) of agent worker: interval_sec"), "{plan}");
    assert!(plan.ends_with("heartbeats: 1 to create, 1 to replace, 0 to delete, 0 unchanged\n"), "{plan}");
    let applied = server.ok(&["fleet", "apply", file]);
    assert!(applied.contains("+ created heartbeat hangs") && applied.contains("~ replaced heartbeat mail"), "{applied}");
    assert_eq!(server.json(&["heartbeat", "show", "mail"])["interval_sec"], 30);
    let again = server.ok(&["fleet", "plan", file]);
    assert!(again.ends_with("heartbeats: 0 to create, 0 to replace, 0 to delete, 2 unchanged\n"), "{again}");
}
