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
use crate::node::{Node, SnapshotSeen};
use crate::stats::Latencies;

/// Longest a fleet file may take to be applied.
const APPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// Events asked for per page of `GET /v1/events` (the API's maximum).
const EVENTS_PAGE: u64 = 1_000;

/// The fleet a run measures and for how long.
pub struct Window {
    pub agents: usize,
    pub interval_ms: u64,
    pub seconds: u64,
}

pub async fn run(
    vigil: &Path,
    data_dir: &Path,
    window: Window,
    fires_out: Option<&Path>,
) -> anyhow::Result<()> {
    let Window {
        agents,
        interval_ms,
        seconds,
    } = window;
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
    let snapshots = node.snapshots_seen();
    drop(node);
    if let Some(path) = fires_out {
        let lines: String = fires
            .each
            .iter()
            .map(|(at, due)| format!("{at},{due}\n"))
            .collect();
        std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))?;
    }
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
    println!("\n{}", snapshot_split(&fires.each, &snapshots));
    Ok(())
}

/// Fires over this many milliseconds late are counted apart (the target's p99).
const LATE_MS: u64 = 10;

/// The window's fires split by whether the node was writing a snapshot when it decided them
/// (from its `snapshot written` log lines), each part with its count, its fires over
/// [`LATE_MS`] and its lateness p50 / p99 / max: where the late fires come from.
fn snapshot_split(each: &[(u64, u64)], snapshots: &[SnapshotSeen]) -> String {
    let (first, last) = match (each.first(), each.last()) {
        (Some(first), Some(last)) => (first.0, last.0),
        _ => return "No fire in the window.".to_string(),
    };
    let in_window: Vec<&SnapshotSeen> = snapshots
        .iter()
        .filter(|seen| seen.ended_at_ms >= first && seen.started_at_ms() <= last)
        .collect();
    let (mut during, mut rest) = (Latencies::default(), Latencies::default());
    let (mut late_during, mut late_rest) = (0_usize, 0_usize);
    for &(at, due) in each {
        let late = at.saturating_sub(due);
        let (part, late_count) = if in_window.iter().any(|seen| seen.covers(at)) {
            (&mut during, &mut late_during)
        } else {
            (&mut rest, &mut late_rest)
        };
        part.record(Duration::from_millis(late));
        *late_count += usize::from(late > LATE_MS);
    }
    let took: Vec<String> = in_window
        .iter()
        .map(|seen| format!("{:.1}", seen.took_ms as f64 / 1_000.0))
        .collect();
    format!(
        "Fires decided while a snapshot was being written ({} snapshots in the window, taking {} s, \
         from the node's `snapshot written` lines): {} fires, {late_during} over {LATE_MS} ms, \
         lateness p50 / p99 / max {} ms. The other fires: {}, {late_rest} over {LATE_MS} ms, {} ms.",
        in_window.len(),
        if took.is_empty() { "-".to_string() } else { took.join(", ") },
        during.count(),
        during.summary(),
        rest.count(),
        rest.summary(),
    )
}

/// What the timer fires of a window say.
#[derive(Default)]
struct Fires {
    lateness: Latencies,
    /// Fires by the second (Unix) their slot was due in.
    due_per_second: BTreeMap<u64, u64>,
    /// Fires by the second (Unix) the node decided them in.
    decided_per_second: BTreeMap<u64, u64>,
    /// Every fire's `at_ms` and `due_at_ms`, in log order.
    each: Vec<(u64, u64)>,
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
            fires.each.push((at, due));
        }
        after = body["next_after"].as_u64().context("next_after")?;
    }
    Ok(fires)
}
