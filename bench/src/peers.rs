//! The peers measured beside Vigil in the same run, on the same disk: Redis with
//! `appendfsync always` (a durable `SET`) and etcd (a durable `put`), both from the
//! distribution's packages. Driven by the same kind of client: one connection per client, one
//! request at a time, no pipelining, so the figures compare like with like.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http::Connection;
use crate::stats::Latencies;

/// Longest a peer may take to accept connections after its start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A peer server process, killed when dropped.
pub struct Peer {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary `name`, installing `package` with apt-get when it is missing and we may.
/// `Err` says why the peer's column is skipped.
pub fn find_or_install(binary: &str, package: &str) -> Result<PathBuf, String> {
    let found = || {
        ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(binary))
            .find(|path| path.exists())
    };
    if let Some(path) = found() {
        return Ok(path);
    }
    eprintln!("{binary} is missing: installing the distribution's {package} package");
    let installed = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends", package])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status();
    match installed {
        Ok(status) if status.success() => {
            found().ok_or_else(|| format!("{package} installed no {binary}"))
        }
        Ok(status) => Err(format!(
            "apt-get install {package} failed ({status}); its column is skipped"
        )),
        Err(error) => Err(format!(
            "no apt-get to install {package} ({error}); its column is skipped"
        )),
    }
}

/// Redis on `dir`, every write fsynced before its answer (`appendfsync always`).
pub async fn start_redis(binary: PathBuf, dir: PathBuf) -> anyhow::Result<Peer> {
    fresh_dir(&dir)?;
    let addr = free_port()?;
    let child = Command::new(binary)
        .args(["--port", &addr.port().to_string(), "--bind", "127.0.0.1"])
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting redis-server")?;
    let peer = Peer { child, addr };
    wait_listening(addr).await?;
    Ok(peer)
}

/// etcd on `dir`, a single member (its write-ahead log fsyncs every put).
pub async fn start_etcd(binary: PathBuf, dir: PathBuf) -> anyhow::Result<Peer> {
    fresh_dir(&dir)?;
    let addr = free_port()?;
    let peer_addr = free_port()?;
    let client_url = format!("http://{addr}");
    let peer_url = format!("http://{peer_addr}");
    let child = Command::new(binary)
        .arg("--data-dir")
        .arg(&dir)
        .args([
            "--listen-client-urls",
            &client_url,
            "--advertise-client-urls",
            &client_url,
        ])
        .args([
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
        ])
        .args(["--initial-cluster", &format!("default={peer_url}")])
        .args(["--log-level", "error"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting etcd")?;
    let peer = Peer { child, addr };
    wait_listening(addr).await?;
    // Listening comes before the member is elected: wait for a put to succeed.
    let started = Instant::now();
    let mut connection = Connection::open(addr).await?;
    while etcd_put(&mut connection, "ready", "1").await.is_err() {
        if started.elapsed() > START_TIMEOUT {
            bail!("etcd took no put within {START_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(peer)
}

/// `clients` connections each sending durable `SET key value` back to back for `length`.
pub async fn redis_sets(
    addr: SocketAddr,
    clients: usize,
    length: Duration,
) -> anyhow::Result<Latencies> {
    let until = Instant::now() + length;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        tasks.push(tokio::spawn(async move {
            let mut latency = Latencies::default();
            let mut reply = [0u8; 64];
            let mut n = 0u64;
            while Instant::now() < until {
                let key = format!("agent:{client}:{n}");
                n += 1;
                let command = format!(
                    "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$5\r\nwoken\r\n",
                    key.len()
                );
                let started = Instant::now();
                stream.write_all(command.as_bytes()).await?;
                let read = stream.read(&mut reply).await?;
                if !reply[..read].starts_with(b"+OK\r\n") {
                    bail!(
                        "redis answered {:?}",
                        String::from_utf8_lossy(&reply[..read])
                    );
                }
                latency.record(started.elapsed());
            }
            Ok::<_, anyhow::Error>(latency)
        }));
    }
    merge(tasks).await
}

/// `clients` connections each sending `put` through etcd's HTTP/JSON gateway back to back.
pub async fn etcd_puts(
    addr: SocketAddr,
    clients: usize,
    length: Duration,
) -> anyhow::Result<Latencies> {
    let until = Instant::now() + length;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let mut connection = Connection::open(addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut latency = Latencies::default();
            let mut n = 0u64;
            while Instant::now() < until {
                let took =
                    etcd_put(&mut connection, &format!("agent/{client}/{n}"), "woken").await?;
                n += 1;
                latency.record(took);
            }
            Ok::<_, anyhow::Error>(latency)
        }));
    }
    merge(tasks).await
}

/// One put (`POST /v3/kv/put`, key and value in base64), its time.
async fn etcd_put(connection: &mut Connection, key: &str, value: &str) -> anyhow::Result<Duration> {
    let body =
        serde_json::json!({ "key": base64(key.as_bytes()), "value": base64(value.as_bytes()) });
    let answer = connection
        .send(hyper::Method::POST, "/v3/kv/put", "", Some(&body))
        .await?;
    if !answer.status.is_success() {
        bail!(
            "etcd answered {} {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
    }
    Ok(answer.took)
}

async fn merge(
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<Latencies>>>,
) -> anyhow::Result<Latencies> {
    let mut all = Latencies::default();
    for task in tasks {
        all.merge(task.await??);
    }
    Ok(all)
}

/// Standard base64 with padding (etcd's gateway takes bytes fields so).
fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("emptying {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(())
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

async fn wait_listening(addr: SocketAddr) -> anyhow::Result<()> {
    let started = Instant::now();
    while TcpStream::connect(addr).await.is_err() {
        if started.elapsed() > START_TIMEOUT {
            bail!("nothing listens on {addr} after {START_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_pads_like_the_standard() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"agent/1/2"), "YWdlbnQvMS8y");
    }
}
