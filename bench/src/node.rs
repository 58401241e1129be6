//! The node under test: the real `vigil serve` binary on a real data directory, over loopback.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        let child = command
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .env("VIGIL_OPERATOR_TOKEN", &operator_token)
            .env("RUST_LOG", "warn")
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", vigil.display()))?;
        let node = Node {
            child,
            addr,
            operator_token,
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
