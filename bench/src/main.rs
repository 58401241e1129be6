//! `vigil-bench`: benchmarks as code (issue "one node, a million agents"; docs/benchmarks.md).
//!
//! Each benchmark starts the real `vigil serve` on a real data directory and drives it over
//! loopback with keep-alive HTTP/1.1 connections, one per client, then prints a Markdown section
//! (machine, date, command, figures) that `cargo xtask bench` writes into docs/benchmarks.md.
//! Timing lives here, never in the test suite.

mod fleet;
mod http;
mod node;
mod peers;
mod pulses;
mod recovery;
mod stats;
mod timers;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use hyper::{Method, StatusCode};
use serde_json::json;

use http::Connection;
use node::Node;
use stats::Latencies;

#[derive(Parser)]
#[command(about = "Vigil's benchmarks: a load generator against a real `vigil serve`")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Durable wakeups per second and their latency, at each client count; a read's latency
    /// idle and under that load.
    Wakeups {
        /// The `vigil` binary to start (build it with `cargo build --release -p vigil`).
        #[arg(long, default_value = "target/release/vigil")]
        vigil: PathBuf,
        /// Data directory of the node under test (emptied first). On the disk being measured:
        /// not a tmpfs.
        #[arg(long, default_value = "target/bench-data")]
        data_dir: PathBuf,
        /// Client counts to measure, one after another, each a keep-alive connection.
        #[arg(long, value_delimiter = ',', default_value = "1,32,128")]
        clients: Vec<usize>,
        /// Seconds of load per client count.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Agents woken, round robin; each wakes itself with its own token (a token's request
        /// rate is capped, so the load is spread over many).
        #[arg(long, default_value_t = 512)]
        agents: usize,
    },
    /// Resident memory per idle agent and recovery time, at each fleet size: a fleet file of
    /// idle agents (hourly timers) applied at start, then a SIGKILL and a restart that replays
    /// the log.
    Fleet {
        #[arg(long, default_value = "target/release/vigil")]
        vigil: PathBuf,
        #[arg(long, default_value = "target/bench-data")]
        data_dir: PathBuf,
        /// Fleet sizes to measure (at most the node's agent limit).
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        sizes: Vec<usize>,
    },
    /// Pulses per second, single (each agent's own token) and batched (tenants' operator
    /// tokens), at each client count.
    Pulses {
        #[arg(long, default_value = "target/release/vigil")]
        vigil: PathBuf,
        #[arg(long, default_value = "target/bench-data")]
        data_dir: PathBuf,
        /// Client counts to measure, one after another, each a keep-alive connection.
        #[arg(long, value_delimiter = ',', default_value = "8,32")]
        clients: Vec<usize>,
        /// Seconds of load per phase (single, then batched) and client count.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Agents, spread over the tenants; 1,000 per tenant fill a batch.
        #[arg(long, default_value_t = 64_000)]
        agents: usize,
        /// Tenants, each with its own operator token. A token's requests are capped
        /// (`REQUESTS_PER_SECOND_PER_TOKEN`, 100/s with a burst of 1,000), so 8 tenants cap
        /// the batches at about 1,600/s over 10 s, 1.6 M pulses/s: the default is enough
        /// tenants for the node, not the cap, to be what is measured.
        #[arg(long, default_value_t = 64)]
        tenants: usize,
    },
    /// Recovery time against the length of the log after a snapshot, at one fleet size: a
    /// fleet snapshotted once, then tails of on-demand wakeups and their runs written with
    /// snapshots off, each followed by SIGKILLs and restarts.
    Recovery {
        #[arg(long, default_value = "target/release/vigil")]
        vigil: PathBuf,
        #[arg(long, default_value = "target/bench-data")]
        data_dir: PathBuf,
        /// Agents in the fleet (at least 100: they are spread over 100 tenants).
        #[arg(long, default_value_t = 10_000)]
        agents: usize,
        /// Tail lengths to measure, in events after the snapshot, cumulative (one log that
        /// grows); 0 is always measured, as the base the tail's cost is taken from.
        #[arg(long, value_delimiter = ',', default_value = "0,10000,50000,100000,200000,500000,1000000")]
        tails: Vec<u64>,
    },
    /// Timer lateness (fire instant minus due slot, from the node's log) in a fleet of agents
    /// on short intervals, each fire a real run.
    Timers {
        #[arg(long, default_value = "target/release/vigil")]
        vigil: PathBuf,
        #[arg(long, default_value = "target/bench-data")]
        data_dir: PathBuf,
        /// Agents in the fleet.
        #[arg(long, default_value_t = 100_000)]
        agents: usize,
        /// Each agent's timer interval.
        #[arg(long, default_value_t = 60_000)]
        interval_ms: u64,
        /// Seconds the fleet runs once applied (the window measured).
        #[arg(long, default_value_t = 180)]
        seconds: u64,
        /// Also writes every fire of the window to this file, one `at_ms,due_at_ms` line each
        /// (to see where the late ones sit in time).
        #[arg(long)]
        fires_out: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.bench {
            Bench::Wakeups {
                vigil,
                data_dir,
                clients,
                seconds,
                agents,
            } => wakeups(&vigil, &data_dir, &clients, seconds, agents).await,
            Bench::Fleet {
                vigil,
                data_dir,
                sizes,
            } => fleet::run(&vigil, &data_dir, &sizes).await,
            Bench::Pulses {
                vigil,
                data_dir,
                clients,
                seconds,
                agents,
                tenants,
            } => pulses::run(&vigil, &data_dir, &clients, seconds, agents, tenants).await,
            Bench::Recovery {
                vigil,
                data_dir,
                agents,
                tails,
            } => recovery::run(&vigil, &data_dir, agents, &tails).await,
            Bench::Timers {
                vigil,
                data_dir,
                agents,
                interval_ms,
                seconds,
                fires_out,
            } => {
                let window = timers::Window {
                    agents,
                    interval_ms,
                    seconds,
                };
                timers::run(&vigil, &data_dir, window, fires_out.as_deref()).await
            }
        }
    })
}

/// An agent of the node under test and its own token.
#[derive(Clone)]
struct BenchAgent {
    id: u64,
    token: String,
}

async fn wakeups(
    vigil: &std::path::Path,
    data_dir: &std::path::Path,
    clients: &[usize],
    seconds: u64,
    agents: usize,
) -> anyhow::Result<()> {
    let length = Duration::from_secs(seconds);
    let node = Node::start(vigil, &data_dir.join("vigil")).await?;
    let fleet = create_agents(&node, agents).await?;
    let redis = start_peer("redis-server", "redis-server", |binary| {
        peers::start_redis(binary, data_dir.join("redis"))
    })
    .await;
    let etcd = start_peer("etcd", "etcd-server", |binary| {
        peers::start_etcd(binary, data_dir.join("etcd"))
    })
    .await;
    println!("## Durable wakeups\n");
    println!("{}\n", machine_line());
    println!(
        "Command: `cargo xtask bench wakeups` (`vigil-bench wakeups --clients {} --seconds {seconds} --agents {agents}`). \
         Each client is one keep-alive connection sending one request at a time, back to back, for {seconds} s. \
         Vigil: `POST /v1/agents/{{id}}/wakeup` (source `on_demand`), round robin over {agents} agents, each with the agent's own token; \
         answered = fsynced. Redis {}: `SET` with `appendonly yes`, `appendfsync always`. etcd {}: `put` through its HTTP/JSON gateway \
         (one member; its log is fsynced before the answer). All three on the same disk ({}), in this one run. \
         Latencies p50 / p99 / max in ms.\n",
        clients.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        version_of(redis.as_ref().ok(), &["redis-server", "--version"]),
        version_of(etcd.as_ref().ok(), &["etcd", "--version"]),
        data_dir.display()
    );
    for (name, peer) in [("Redis", &redis), ("etcd", &etcd)] {
        if let Err(why) = peer {
            println!("{name} column skipped: {why}\n");
        }
    }
    let idle = read_latency(&node, &fleet[0], length).await?;
    println!("| clients | Vigil wakeups/s | Vigil latency | Redis SET/s | Redis latency | etcd put/s | etcd latency | Vigil / Redis | Vigil / etcd |");
    println!("|---:|---:|---|---:|---|---:|---|---:|---:|");
    let mut reads = Vec::new();
    for &count in clients {
        let row = load(&node, &fleet, count, length).await?;
        let redis_row = match &redis {
            Ok(peer) => Some(peers::redis_sets(peer.addr, count, length).await?),
            Err(_) => None,
        };
        let etcd_row = match &etcd {
            Ok(peer) => Some(peers::etcd_puts(peer.addr, count, length).await?),
            Err(_) => None,
        };
        let rate = |l: &Latencies| l.count() as f64 / length.as_secs_f64();
        let cell = |l: &Option<Latencies>| {
            l.as_ref()
                .map_or(("skipped".to_string(), "".to_string()), |l| {
                    (format!("{:.0}", rate(l)), l.summary())
                })
        };
        let ratio = |l: &Option<Latencies>| {
            l.as_ref().map_or("".to_string(), |l| {
                format!("{:.2}", row.per_second / rate(l))
            })
        };
        let (redis_rate, redis_latency) = cell(&redis_row);
        let (etcd_rate, etcd_latency) = cell(&etcd_row);
        println!(
            "| {count} | {:.0} | {} | {redis_rate} | {redis_latency} | {etcd_rate} | {etcd_latency} | {} | {} |",
            row.per_second,
            row.latency.summary(),
            ratio(&redis_row),
            ratio(&etcd_row),
        );
        reads.push((count, row));
    }
    println!(
        "\nA read (`GET /v1/agents/{{id}}`, every 20 ms on its own connection, from its own thread) with Vigil idle for {seconds} s, before the loads: {} ms ({} reads). Under each load:\n",
        idle.summary(),
        idle.count()
    );
    println!(
        "| clients | read latency under load | p99 / idle p99 | other answers to the wakeups |"
    );
    println!("|---:|---|---:|---|");
    for (count, row) in reads {
        println!(
            "| {count} | {} | {:.1} | {} |",
            row.reads.summary(),
            row.reads.quantile_ms(0.99) / idle.quantile_ms(0.99),
            row.others_text()
        );
    }
    if let Some(rss) = node.resident_bytes() {
        println!(
            "\nVigil's resident memory at the end: {:.1} MiB ({agents} agents).",
            rss as f64 / (1024.0 * 1024.0)
        );
    }
    Ok(())
}

/// A peer started from its binary (installed when missing), or why its column is skipped.
async fn start_peer<F, Fut>(binary: &str, package: &str, start: F) -> Result<peers::Peer, String>
where
    F: FnOnce(PathBuf) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<peers::Peer>>,
{
    let path = peers::find_or_install(binary, package)?;
    start(path)
        .await
        .map_err(|error| format!("{binary} did not start: {error:#}"))
}

/// The first line `command --version` prints, for the report.
fn version_of(peer: Option<&peers::Peer>, command: &[&str]) -> String {
    if peer.is_none() {
        return String::new();
    }
    std::process::Command::new(command[0])
        .args(&command[1..])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .map(|line| format!("({line})"))
        .unwrap_or_default()
}

/// Registers `count` agents (no timer: only the wakeups sent wake them).
async fn create_agents(node: &Node, count: usize) -> anyhow::Result<Vec<BenchAgent>> {
    let mut connection = Connection::open(node.addr).await?;
    let mut fleet = Vec::with_capacity(count);
    for i in 0..count {
        let answer = connection
            .send(
                Method::POST,
                "/v1/agents",
                &node.operator_token,
                Some(&json!({ "name": format!("bench-{i}") })),
            )
            .await?;
        if answer.status != StatusCode::CREATED {
            bail!(
                "creating agent {i}: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            );
        }
        let created: serde_json::Value = serde_json::from_slice(&answer.body)?;
        fleet.push(BenchAgent {
            id: created["agent"]["id"]
                .as_u64()
                .context("agent id in the answer")?,
            token: created["token"]
                .as_str()
                .context("token in the answer")?
                .to_string(),
        });
    }
    Ok(fleet)
}

/// One client count's figures.
struct Row {
    per_second: f64,
    latency: Latencies,
    reads: Latencies,
    /// Answers other than 200, by status.
    others: BTreeMap<u16, usize>,
}

impl Row {
    fn others_text(&self) -> String {
        others_text(&self.others)
    }
}

/// Answers other than 200, by status, as a report shows them (`none`, or `3 × 429, 1 × 503`).
pub(crate) fn others_text(others: &BTreeMap<u16, usize>) -> String {
    if others.is_empty() {
        return "none".into();
    }
    others
        .iter()
        .map(|(status, n)| format!("{n} × {status}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `clients` connections waking agents back to back for `length`, and a reader beside them.
async fn load(
    node: &Node,
    fleet: &[BenchAgent],
    clients: usize,
    length: Duration,
) -> anyhow::Result<Row> {
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(Connection::open(node.addr).await?);
    }
    let started = Instant::now();
    let until = started + length;
    let mut tasks = Vec::with_capacity(clients);
    for (client, mut connection) in connections.into_iter().enumerate() {
        let mine: Vec<BenchAgent> = fleet
            .iter()
            .skip(client)
            .step_by(clients)
            .cloned()
            .collect();
        let mine = if mine.is_empty() {
            vec![fleet[client % fleet.len()].clone()]
        } else {
            mine
        };
        tasks.push(tokio::spawn(async move {
            let mut latency = Latencies::default();
            let mut others: BTreeMap<u16, usize> = BTreeMap::new();
            let body = json!({ "source": "on_demand", "reason": "bench" });
            let mut next = 0;
            while Instant::now() < until {
                let agent = &mine[next % mine.len()];
                next += 1;
                let path = format!("/v1/agents/{}/wakeup", agent.id);
                let answer = connection
                    .send(Method::POST, &path, &agent.token, Some(&body))
                    .await?;
                if answer.status == StatusCode::OK {
                    latency.record(answer.took);
                } else {
                    *others.entry(answer.status.as_u16()).or_default() += 1;
                    if let Some(wait) = answer.retry_after_s {
                        tokio::time::sleep(Duration::from_secs(wait)).await;
                    }
                }
            }
            Ok::<_, anyhow::Error>((latency, others))
        }));
    }
    let reads = read_latency(node, &fleet[0], length).await?;
    let mut row = Row {
        per_second: 0.0,
        latency: Latencies::default(),
        reads,
        others: BTreeMap::new(),
    };
    for task in tasks {
        let (latency, others) = task.await??;
        row.latency.merge(latency);
        for (status, n) in others {
            *row.others.entry(status).or_default() += n;
        }
    }
    row.per_second = row.latency.count() as f64 / started.elapsed().as_secs_f64();
    Ok(row)
}

/// `GET /v1/agents/{id}` every 20 ms for `length`, on its own connection, from a thread of its
/// own with a runtime of its own.
///
/// Why its own thread: on the load's runtime the probe's request and answer would wait in the
/// same run queues as every load client's, and the figure is meant to be the node's. Measured on
/// 2026-12-07 ("Reads under load" in docs/benchmarks.md) the move changed no p99 visibly: the
/// tail is not in the generator.
async fn read_latency(
    node: &Node,
    agent: &BenchAgent,
    length: Duration,
) -> anyhow::Result<Latencies> {
    let addr = node.addr;
    let token = node.operator_token.clone();
    let path = format!("/v1/agents/{}", agent.id);
    let probe = std::thread::Builder::new()
        .name("read-probe".into())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(probe_reads(addr, &token, &path, length))
        })?;
    tokio::task::spawn_blocking(move || probe.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the read probe's thread panicked"))?
}

async fn probe_reads(
    addr: std::net::SocketAddr,
    token: &str,
    path: &str,
    length: Duration,
) -> anyhow::Result<Latencies> {
    const EVERY: Duration = Duration::from_millis(20);
    let mut connection = Connection::open(addr).await?;
    let mut reads = Latencies::default();
    let until = Instant::now() + length;
    while Instant::now() < until {
        let answer = connection.send(Method::GET, path, token, None).await?;
        if answer.status != StatusCode::OK {
            bail!("read answered {}", answer.status);
        }
        reads.record(answer.took);
        tokio::time::sleep(EVERY).await;
    }
    Ok(reads)
}

/// The machine and the date, for the report: CPU model and count, memory, kernel.
pub(crate) fn machine_line() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or("?".into(), |kib| {
            format!("{:.0} GiB", kib as f64 / 1024.0 / 1024.0)
        });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let commit = git(&["rev-parse", "--short", "HEAD"]);
    // The report itself is written into docs/benchmarks.md: that change does not count.
    let dirty = if git(&["status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/benchmarks.md"]).is_empty() {
        ""
    } else {
        " with uncommitted changes"
    };
    // The node started by the bench inherits its environment, so `VIGIL_WORKERS` set for the
    // bench sets the node's worker threads (`vigil serve --workers`).
    let workers = match std::env::var("VIGIL_WORKERS") {
        Ok(workers) => format!("{workers} worker threads (`VIGIL_WORKERS`)"),
        Err(_) => "a worker thread per core".to_string(),
    };
    format!(
        "Machine: {cores} cores ({model}), {memory} memory, Linux {kernel}; measured {date} at commit {commit}{dirty}; the node ran {workers}."
    )
}
