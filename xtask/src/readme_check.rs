//! `cargo xtask readme-check`: walks README.md's "Operate it" section as a new user would.
//!
//! The commands come from the README itself (the ```sh blocks between the
//! `<!-- readme-check: begin -->` and `<!-- readme-check: end -->` markers), so the README cannot
//! drift from what is checked. A temporary directory stands for the root of a fresh checkout
//! (a copy of `examples/` and nothing else); there `vigil serve --fleet examples/fleet.toml`
//! starts as `cargo xtask run` starts it, on a free loopback port. Each command then runs in
//! order and must exit 0 without an error answer (a 409 included). Two substitutions only:
//! `cargo xtask vigil` is the debug `vigil` binary the workspace tests built (no second build),
//! and `localhost:7070` is the chosen port.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The markers around the checked part of the README.
pub const BEGIN_MARKER: &str = "<!-- readme-check: begin -->";
pub const END_MARKER: &str = "<!-- readme-check: end -->";

/// How the README names the CLI; replaced by the built binary's path.
const CLI_PREFIX: &str = "cargo xtask vigil";

/// The README's server address; replaced by the address the checked server printed.
const README_ADDRESS: &str = "localhost:7070";

/// Longest wait for `vigil serve` to be ready (its "try:" line, after the fleet is applied).
/// Generous: a debug build on a busy 2-core machine recovers slowly.
const SERVER_READY_TIMEOUT_S: u64 = 60;

/// Longest a finite command may take before it counts as hung.
const COMMAND_TIMEOUT_S: u64 = 30;

/// How long a following command (`--follow`, `curl -N`: they never end by design) must keep
/// running without failing; it is stopped after that and passes.
const FOLLOW_WATCH_S: u64 = 3;

/// Marks of a command that follows a stream forever.
const FOLLOW_MARKS: &[&str] = &["--follow", "curl -sN", "curl -N"];

/// What an error answer of the API looks like in a command's output (`--json` or curl).
const ERROR_ANSWER_MARK: &str = "{\"error\":{";

/// One command of the README, with the README line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub line: usize,
    pub command: String,
}

/// The commands of the ```sh blocks between the markers: continuation lines (`\`) joined,
/// comment-only and blank lines dropped. An error names what is missing.
pub fn steps(readme: &str) -> Result<Vec<Step>, String> {
    let start = readme
        .lines()
        .position(|l| l.trim() == BEGIN_MARKER)
        .ok_or_else(|| format!("README.md has no {BEGIN_MARKER} line"))?;
    let end = readme
        .lines()
        .position(|l| l.trim() == END_MARKER)
        .filter(|&end| end > start)
        .ok_or_else(|| format!("README.md has no {END_MARKER} line after {BEGIN_MARKER}"))?;
    let mut steps = Vec::new();
    let mut in_block = false;
    let mut pending: Option<Step> = None;
    for (index, raw) in readme.lines().enumerate().take(end).skip(start + 1) {
        let trimmed = raw.trim();
        if trimmed.starts_with("```") {
            in_block = !in_block && trimmed == "```sh";
            continue;
        }
        if !in_block || (pending.is_none() && (trimmed.is_empty() || trimmed.starts_with('#'))) {
            continue;
        }
        let (text, continues) = match trimmed.strip_suffix('\\') {
            Some(head) => (head.trim_end(), true),
            None => (trimmed, false),
        };
        let step = pending.get_or_insert(Step {
            line: index + 1,
            command: String::new(),
        });
        if !step.command.is_empty() {
            step.command.push(' ');
        }
        step.command.push_str(text);
        if !continues {
            steps.extend(pending.take());
        }
    }
    steps.extend(pending);
    if steps.is_empty() {
        return Err("README.md's checked section has no ```sh command".into());
    }
    Ok(steps)
}

/// `step` as the checker runs it: the CLI is `cli`, the server is at `address`.
pub fn localised(command: &str, cli: &Path, address: &str) -> String {
    let command = match command.strip_prefix(CLI_PREFIX) {
        Some(rest) => format!("{}{rest}", shell_quoted(cli)),
        None => command.to_string(),
    };
    command.replace(README_ADDRESS, address)
}

/// A shell variable set by a step (`TOKEN=$(…)`): kept as a prelude of the later steps.
fn is_assignment(command: &str) -> bool {
    command.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
    })
}

/// The first command of the banner's "try: A   or   B   (Ctrl-C stops)".
fn banner_command(suggested: &str) -> &str {
    suggested.split("   ").next().unwrap_or_default().trim()
}

fn follows(command: &str) -> bool {
    FOLLOW_MARKS.iter().any(|mark| command.contains(mark))
}

fn shell_quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// Runs the check; `root` is the workspace, `cli` the built `vigil` binary. Err: what failed.
pub fn run(root: &Path, cli: &Path) -> Result<usize, String> {
    let readme = std::fs::read_to_string(root.join("README.md"))
        .map_err(|e| format!("cannot read README.md: {e}"))?;
    let steps = steps(&readme)?;
    let dir = fresh_dir()?;
    copy_dir(&root.join("examples"), &dir.join("examples"))?;
    let outcome = Server::start(cli, &dir).and_then(|mut server| {
        // The banner's suggestion must work as printed, like the README's commands.
        println!("readme-check: the banner's `{}`", server.suggested);
        let walked = run_step(
            &format!("exec {}", server.suggested),
            &dir,
            &server.address,
            false,
        )
        .map_err(|why| format!("the startup banner's `{}` {why}", server.suggested))
        .and_then(|()| walk(&steps, cli, &dir, &server.address));
        server.stop();
        walked.map_err(|e| format!("{e}\n--- vigil serve's output ---\n{}", server.output()))
    });
    if outcome.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("readme-check: left {} for a look", dir.display());
    }
    outcome
}

/// Runs each step in order; Err names the first that failed and why.
fn walk(steps: &[Step], cli: &Path, dir: &Path, address: &str) -> Result<usize, String> {
    let has_curl = Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok();
    let mut prelude = String::new();
    let mut ran = 0;
    for step in steps {
        let command = localised(&step.command, cli, address);
        if is_assignment(&command) {
            prelude.push_str(&command);
            prelude.push('\n');
            continue;
        }
        if command.starts_with("curl") && !has_curl {
            println!(
                "readme-check: skip (curl is not installed): {}",
                step.command
            );
            continue;
        }
        println!("readme-check: README.md:{}: {}", step.line, step.command);
        // `exec`: the command is the child itself, so stopping a follower stops it (and its
        // pipes close), not only a shell around it.
        let script = format!("{prelude}exec {command}");
        run_step(&script, dir, address, follows(&command))
            .map_err(|why| format!("README.md:{}: `{}` {why}", step.line, step.command))?;
        ran += 1;
    }
    Ok(ran)
}

/// One step under `sh`, in `dir`, pointed at `address`. Err: how it failed.
fn run_step(script: &str, dir: &Path, address: &str, follows: bool) -> Result<(), String> {
    let mut child = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env("VIGIL_SERVER", format!("http://{address}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start: {e}"))?;
    let stdout = drain(child.stdout.take().expect("piped"));
    let stderr = drain(child.stderr.take().expect("piped"));
    let limit = Duration::from_secs(if follows {
        FOLLOW_WATCH_S
    } else {
        COMMAND_TIMEOUT_S
    });
    let status = wait_for(&mut child, limit);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (out, err) = (collect(stdout), collect(stderr));
    let shown = || format!("\n--- stdout ---\n{out}--- stderr ---\n{err}");
    match status {
        None if !follows => {
            return Err(format!(
                "still running after {COMMAND_TIMEOUT_S} s{}",
                shown()
            ))
        }
        Some(status) if !status.success() => {
            return Err(format!("exited with {status}{}", shown()))
        }
        _ => {}
    }
    if out.contains(ERROR_ANSWER_MARK) {
        return Err(format!("got an error answer (a 409 counts){}", shown()));
    }
    Ok(())
}

fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(50));
    }
    child.try_wait().ok().flatten()
}

/// Reads a pipe to its end on a thread, so a chatty command never blocks on a full pipe.
fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn collect(reader: thread::JoinHandle<String>) -> String {
    reader.join().unwrap_or_default()
}

/// `vigil serve` as `cargo xtask run` starts it, on a free port, in `dir`.
struct Server {
    child: Child,
    address: String,
    log: mpsc::Receiver<String>,
    lines: Vec<String>,
    /// The CLI command the startup banner suggests, as printed.
    suggested: String,
}

impl Server {
    fn start(cli: &Path, dir: &Path) -> Result<Server, String> {
        let mut command = Command::new(cli);
        command
            .args([
                "serve",
                "--fleet",
                "examples/fleet.toml",
                "--listen",
                "127.0.0.1:0",
            ])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for name in [
            "VIGIL_LISTEN",
            "VIGIL_DATA_DIR",
            "VIGIL_FLEET",
            "VIGIL_CONFIG",
            "VIGIL_SERVER",
            "VIGIL_TOKEN",
        ] {
            command.env_remove(name);
        }
        for name in ["VIGIL_OPERATOR_TOKEN", "VIGIL_OPERATOR_TOKEN_FILE"] {
            command.env_remove(name);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", cli.display()))?;
        let (sender, log) = mpsc::channel();
        for pipe in [
            Box::new(child.stdout.take().expect("piped")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("piped")),
        ] {
            let sender = sender.clone();
            thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let mut server = Server {
            child,
            address: String::new(),
            log,
            lines: Vec::new(),
            suggested: String::new(),
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Waits for the listening line (the address) and the "try:" line (the fleet is applied).
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(SERVER_READY_TIMEOUT_S);
        let mut ready = false;
        while !(ready && !self.address.is_empty()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.log.recv_timeout(left) else {
                self.stop();
                return Err(format!(
                    "vigil serve was not ready within {SERVER_READY_TIMEOUT_S} s:\n{}",
                    self.output()
                ));
            };
            if let Some(rest) = line.strip_prefix("vigil listening on http://") {
                self.address = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
            }
            if let Some(suggested) = line.strip_prefix("try: ") {
                ready = true;
                self.suggested = banner_command(suggested).to_string();
            }
            self.lines.push(line);
        }
        Ok(())
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Everything the server printed so far.
    fn output(&mut self) -> String {
        self.lines.extend(self.log.try_iter());
        self.lines.join("\n")
    }
}

/// A new, empty directory under the system's temporary directory.
fn fresh_dir() -> Result<PathBuf, String> {
    let base = std::env::temp_dir();
    for attempt in 0..100u32 {
        let dir = base.join(format!(
            "vigil-readme-check-{}-{attempt}",
            std::process::id()
        ));
        if std::fs::create_dir(&dir).is_ok() {
            return Ok(dir);
        }
    }
    Err(format!(
        "could not create a directory in {}",
        base.display()
    ))
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let entries =
        std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .map_err(|e| format!("cannot copy {}: {e}", entry.path().display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readme(body: &str) -> String {
        format!("# Title\n```sh\nnot checked\n```\n{BEGIN_MARKER}\n{body}{END_MARKER}\n```sh\nafter\n```\n")
    }

    #[test]
    fn only_sh_blocks_between_the_markers_count_with_their_line() {
        let text = readme("text\n```sh\n# a comment\n\nfirst --a  # trailing\n```\n```toml\nx = 1\n```\n```sh\nsecond\n```\n");
        let found = steps(&text).unwrap();
        assert_eq!(
            found,
            vec![
                Step {
                    line: 10,
                    command: "first --a  # trailing".into()
                },
                Step {
                    line: 16,
                    command: "second".into()
                },
            ]
        );
    }

    #[test]
    fn continuation_lines_make_one_command() {
        let text = readme("```sh\ncurl -s \\\n     -d '{}'\nnext\n```\n");
        let found = steps(&text).unwrap();
        assert_eq!(found[0].command, "curl -s -d '{}'");
        assert_eq!(found[1].command, "next");
    }

    #[test]
    fn a_readme_without_markers_or_commands_is_refused() {
        assert!(steps("```sh\nls\n```\n")
            .unwrap_err()
            .contains(BEGIN_MARKER));
        assert!(steps(&readme("no block\n"))
            .unwrap_err()
            .contains("no ```sh"));
    }

    #[test]
    fn the_cli_and_the_address_are_the_only_substitutions() {
        let cli = Path::new("/t/vigil");
        assert_eq!(
            localised("cargo xtask vigil agent list", cli, "127.0.0.1:4000"),
            "'/t/vigil' agent list"
        );
        assert_eq!(
            localised("curl -s localhost:7070/v1/agents", cli, "127.0.0.1:4000"),
            "curl -s 127.0.0.1:4000/v1/agents"
        );
        assert_eq!(
            localised("echo cargo xtask vigil", cli, "a"),
            "echo cargo xtask vigil"
        );
    }

    #[test]
    fn the_banner_command_is_its_first_suggestion() {
        assert_eq!(
            banner_command(
                "/b/vigil agent list --server http://a   or   curl -s x   (Ctrl-C stops)"
            ),
            "/b/vigil agent list --server http://a"
        );
    }

    #[test]
    fn assignments_and_followers_are_recognised() {
        assert!(is_assignment("TOKEN=$(cat vigil-data/operator-token)"));
        assert!(!is_assignment("curl -d '{\"a\":1}' x=1"));
        assert!(follows("vigil events tail --follow"));
        assert!(!follows("vigil events tail"));
    }
}
