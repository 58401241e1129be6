//! The node under test: the real `vigil serve` binary on a real data directory, over loopback.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use hyper::Method;

use crate::http::Connection;

/// Longest a node may take to answer `/v1/health` after its start: a million agents' fleet
/// file is parsed first, and a million events are replayed at a restart.
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// How often a starting node is asked whether it is ready. Why this short: a restart is timed
/// until the first answer, so the period is the resolution of every recovery figure (a
/// 10,000-agent node recovers from its snapshot in about 100 ms); a refused poll costs the node
/// a connection.
const READY_POLL: Duration = Duration::from_millis(10);

/// A running `vigil serve`, killed when dropped.
pub struct Node {
    child: Child,
    pub addr: SocketAddr,
    pub operator_token: String,
    /// The snapshots the node has logged so far (read from its stderr).
    snapshots: Arc<Mutex<Vec<SnapshotSeen>>>,
}

/// A snapshot the node logged (`snapshot written`): when the bench read the line, in Unix
/// milliseconds, and how long the node says it took. The span before `ended_at_ms` is when the
/// node was writing it, to the pipe's delay (well under a millisecond).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotSeen {
    pub ended_at_ms: u64,
    pub took_ms: u64,
}

impl SnapshotSeen {
    /// When the node started writing this snapshot, in Unix milliseconds.
    pub fn started_at_ms(&self) -> u64 {
        self.ended_at_ms.saturating_sub(self.took_ms)
    }

    /// Whether the node was writing this snapshot at the wall instant `at_ms`.
    pub fn covers(&self, at_ms: u64) -> bool {
        (self.started_at_ms()..=self.ended_at_ms).contains(&at_ms)
    }
}

/// The `took_ms` of a node's `snapshot written` log line, plain or JSON (`VIGIL_LOG_FORMAT`).
fn snapshot_took_ms(line: &str) -> Option<u64> {
    if !line.contains("snapshot written") {
        return None;
    }
    let after = &line[line.find("took_ms")? + "took_ms".len()..];
    let digits: String = after
        .trim_start_matches(['=', '"', ':', ' '])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Copies the node's stderr to the bench's, line by line, noting each snapshot it logs. Ends
/// when the node does (its end of the pipe closes).
fn watch_stderr(stderr: ChildStderr, snapshots: Arc<Mutex<Vec<SnapshotSeen>>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            eprintln!("{line}");
            if let Some(took_ms) = snapshot_took_ms(&line) {
                let ended_at_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| since.as_millis() as u64);
                let seen = SnapshotSeen {
                    ended_at_ms,
                    took_ms,
                };
                snapshots.lock().expect("snapshots seen").push(seen);
            }
        }
    });
}

impl Node {
    /// Starts `vigil` on a fresh `data_dir` (emptied first) and waits until it is ready.
    pub async fn start(vigil: &Path, data_dir: &Path) -> anyhow::Result<Node> {
        if data_dir.exists() {
            std::fs::remove_dir_all(data_dir)
                .with_context(|| format!("emptying {}", data_dir.display()))?;
        }
        std::fs::create_dir_all(data_dir)?;
        Node::restart(vigil, data_dir, None).await
    }

    /// Starts `vigil` on `data_dir` as it is (a restart recovers its log), with a fleet file if
    /// given, and waits until it answers `/v1/health`.
    pub async fn restart(vigil: &Path, data_dir: &Path, fleet: Option<&Path>) -> anyhow::Result<Node> {
        Node::start_with(vigil, data_dir, fleet, &[]).await
    }

    /// Like [`Node::restart`], with `envs` set for the process (the operator tokens a fleet
    /// file's tenants name).
    pub async fn start_with(
        vigil: &Path,
        data_dir: &Path,
        fleet: Option<&Path>,
        envs: &[(String, String)],
    ) -> anyhow::Result<Node> {
        let addr = free_port()?;
        let operator_token = "vgl_op_bench_0123456789abcdef".to_string();
        let mut command = Command::new(vigil);
        command.arg("serve");
        if let Some(fleet) = fleet {
            command.arg("--fleet").arg(fleet);
        }
        let mut child = command
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .env("VIGIL_OPERATOR_TOKEN", &operator_token)
            // The node logs at its default level (`info`: a line per snapshot, say) to the
            // bench's stderr; `VIGIL_LOG` in the bench's environment changes it.
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", vigil.display()))?;
        let snapshots = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            watch_stderr(stderr, snapshots.clone());
        }
        let node = Node {
            child,
            addr,
            operator_token,
            snapshots,
        };
        node.wait_ready().await?;
        Ok(node)
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if let Ok(mut connection) = Connection::open(self.addr).await {
                let health = connection.send(Method::GET, "/v1/health", "", None).await;
                if health.is_ok_and(|answer| answer.status.is_success()) {
                    return Ok(());
                }
            }
            tokio::time::sleep(READY_POLL).await;
        }
        bail!("vigil serve did not become ready within {START_TIMEOUT:?}")
    }

    /// The log head the node reports (`/v1/health`).
    pub async fn head_seq(&self) -> anyhow::Result<u64> {
        let mut connection = Connection::open(self.addr).await?;
        let health = connection.send(Method::GET, "/v1/health", "", None).await?;
        let body: serde_json::Value = serde_json::from_slice(&health.body)?;
        body["head_seq"].as_u64().context("head_seq in /v1/health")
    }

    /// Waits until the log head reaches `seq` (a fleet file applied: one event per agent after
    /// its tenant's), polling; an error past `timeout`.
    pub async fn wait_for_head(&self, seq: u64, timeout: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        while self.head_seq().await? < seq {
            if started.elapsed() > timeout {
                bail!("the log did not reach seq {seq} within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The snapshots the node has logged since it started.
    pub fn snapshots_seen(&self) -> Vec<SnapshotSeen> {
        self.snapshots.lock().expect("snapshots seen").clone()
    }

    /// The log position of the node's newest snapshot (`vigil_snapshot_seq` in `/metrics`;
    /// 0 until this process writes one).
    pub async fn snapshot_seq(&self) -> anyhow::Result<u64> {
        metric(&self.metrics().await?, "vigil_snapshot_seq")
    }

    /// The node's `/metrics` text, read with the operator's token.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let mut connection = Connection::open(self.addr).await?;
        let metrics = connection
            .send(Method::GET, "/metrics", &self.operator_token, None)
            .await?;
        if !metrics.status.is_success() {
            bail!("GET /metrics: {}", metrics.status);
        }
        Ok(String::from_utf8_lossy(&metrics.body).into_owned())
    }

    /// The node process's resident memory, in bytes (Linux `/proc`).
    pub fn resident_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

/// Longest a node may take to stop after SIGTERM (an idle node drains nothing).
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

impl Node {
    /// Stops the node as an operator does (SIGTERM), waiting until it has exited: it closes
    /// its database, so the next start finds nothing to repair.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .context("running kill")?;
        if !sent.success() {
            bail!("kill -TERM {pid} failed: {sent}");
        }
        let asked = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("the node exited with {status} after SIGTERM");
                }
                return Ok(());
            }
            if asked.elapsed() > STOP_TIMEOUT {
                bail!("the node did not stop within {STOP_TIMEOUT:?} of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `series` in a `/metrics` text: a metric's name with its labels as the node
/// prints them (`vigil_snapshot_seq`, `vigil_runs{state="running"}`).
pub fn metric(text: &str, series: &str) -> anyhow::Result<u64> {
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .with_context(|| format!("{series} in /metrics"))?;
    value
        .trim()
        .parse()
        .with_context(|| format!("{series} in /metrics is {value:?}"))
}

/// A loopback port nothing listens on right now.
fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_line_gives_its_duration_plain_or_json() {
        let plain = "2026-12-02T16:37:34.483463Z  INFO vigil::shell: snapshot written seq=50165 \
                     agents=50164 bytes=10362460 compacted=0 took_ms=319";
        assert_eq!(snapshot_took_ms(plain), Some(319));
        let json = r#"{"timestamp":"2026-12-02T16:37:34.483463Z","level":"INFO","fields":{"message":"snapshot written","seq":50165,"took_ms":1207},"target":"vigil::shell"}"#;
        assert_eq!(snapshot_took_ms(json), Some(1207));
    }

    #[test]
    fn other_lines_give_nothing() {
        let other = "INFO vigil: fleet: created agent took_ms=5";
        assert_eq!(snapshot_took_ms(other), None);
        let started = "DEBUG vigil::shell: snapshot started seq=1";
        assert_eq!(snapshot_took_ms(started), None);
    }

    #[test]
    fn a_snapshot_covers_the_span_before_its_line() {
        let seen = SnapshotSeen {
            ended_at_ms: 10_000,
            took_ms: 1_500,
        };
        assert!(!seen.covers(8_499));
        assert!(seen.covers(8_500));
        assert!(seen.covers(10_000));
        assert!(!seen.covers(10_001));
    }
}
