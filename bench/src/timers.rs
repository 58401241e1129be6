//! `vigil-bench timers`: how late timers fire in a large fleet on short intervals (issue 13's
//! target: p99 ≤ 10 ms at 100,000 agents on 60 s intervals).
//!
//! Lateness is read from the node's own log, not guessed from outside: each `timer_fired` event
//! carries the grid slot it stands for (`due_at_ms`) and the wall instant the node decided the
//! fire (`at_ms`); the difference is how late the timer loop reached that agent.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use hyper::Method;

use crate::fleet::fleet_file;
use crate::http::Connection;
use crate::node::Node;
use crate::stats::Latencies;

/// Longest a fleet file may take to be applied.
const APPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// Events asked for per page of `GET /v1/events` (the API's maximum).
const EVENTS_PAGE: u64 = 1_000;

pub async fn run(
    vigil: &Path,
    data_dir: &Path,
    agents: usize,
    interval_ms: u64,
    seconds: u64,
) -> anyhow::Result<()> {
    println!("## Timer lateness\n");
    println!("{}\n", crate::machine_line());
    println!(
        "Command: `cargo xtask bench timers` (`vigil-bench timers --agents {agents} --interval-ms \
         {interval_ms} --seconds {seconds}`). A fresh `vigil serve --fleet` applies {agents} agents, each \
         with a timer every {interval_ms} ms and a scripted run of 100 ms (so every fire is a real run: \
         queued, started, finished, all durable), with the default snapshot policy. Once every agent \
         exists, the node runs for {seconds} s; then every `timer_fired` event of that window is read \
         back from `GET /v1/events`: lateness is its `at_ms` (when the node decided the fire) minus \
         its `due_at_ms` (the slot it stands for), in the node's milliseconds. A fleet created at \
         once has its slots within its jitter window (less than one interval, ADR 0021; a tenth \
         of it before, which made the load come in bursts): the table gives the most slots due in \
         any one second of the window, and the most fires the node decided in one.\n"
    );
    let dir = data_dir.join(format!("timers-{agents}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("fleet.toml");
    std::fs::write(&file, fleet_file("timer", agents, interval_ms))?;
    let node = Node::start_with(vigil, &dir, Some(&file), &[]).await?;
    node.wait_for_head(agents as u64 + 1, APPLY_TIMEOUT).await?;
    let from = node.head_seq().await?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let to = node.head_seq().await?;
    let fires = read_fires(&node, from, to).await?;
    let resident = node.resident_bytes().unwrap_or(0);
    drop(node);
    println!(
        "| agents | interval | window | events | timer fires | fires/s | slots due/s, peak | fires decided/s, peak | lateness p50 / p99 / max (ms) | resident |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|");
    println!(
        "| {agents} | {} s | {seconds} s | {} | {} | {:.0} | {} | {} | {} | {:.0} MiB |",
        interval_ms / 1_000,
        to - from,
        fires.lateness.count(),
        fires.lateness.count() as f64 / seconds as f64,
        peak(&fires.due_per_second),
        peak(&fires.decided_per_second),
        fires.lateness.summary(),
        resident as f64 / 1_048_576.0
    );
    Ok(())
}

/// What the timer fires of a window say.
#[derive(Default)]
struct Fires {
    lateness: Latencies,
    /// Fires by the second (Unix) their slot was due in.
    due_per_second: BTreeMap<u64, u64>,
    /// Fires by the second (Unix) the node decided them in.
    decided_per_second: BTreeMap<u64, u64>,
}

/// The largest count of any one second.
fn peak(per_second: &BTreeMap<u64, u64>) -> u64 {
    per_second.values().copied().max().unwrap_or(0)
}

/// Every timer fire logged after `from` up to `to`.
async fn read_fires(node: &Node, from: u64, to: u64) -> anyhow::Result<Fires> {
    let mut connection = Connection::open(node.addr).await?;
    let mut fires = Fires::default();
    let mut after = from;
    while after < to {
        let path = format!("/v1/events?after={after}&limit={EVENTS_PAGE}");
        let page = connection
            .send(Method::GET, &path, &node.operator_token, None)
            .await?;
        if !page.status.is_success() {
            bail!("GET {path}: {}", page.status);
        }
        let body: serde_json::Value = serde_json::from_slice(&page.body)?;
        for event in body["events"].as_array().context("events in a page")? {
            if event["seq"].as_u64().is_some_and(|seq| seq > to) {
                return Ok(fires);
            }
            if event["type"] != "timer_fired" {
                continue;
            }
            let at = event["at_ms"].as_u64().context("at_ms")?;
            let due = event["due_at_ms"].as_u64().context("due_at_ms")?;
            fires
                .lateness
                .record(Duration::from_millis(at.saturating_sub(due)));
            *fires.due_per_second.entry(due / 1_000).or_default() += 1;
            *fires.decided_per_second.entry(at / 1_000).or_default() += 1;
        }
        after = body["next_after"].as_u64().context("next_after")?;
    }
    Ok(fires)
}
