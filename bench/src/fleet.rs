//! `vigil-bench fleet`: what an idle agent costs in memory, and how long a restart takes to
//! recover a fleet, at each size.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::node::Node;

/// Longest a fleet file may take to be applied.
const APPLY_TIMEOUT: Duration = Duration::from_secs(1_800);

/// After the fleet is applied, how long the node is left to settle before its memory is read.
const SETTLE: Duration = Duration::from_secs(2);

pub async fn run(vigil: &Path, data_dir: &Path, sizes: &[usize]) -> anyhow::Result<()> {
    println!("## Idle agents: memory and recovery\n");
    println!("{}\n", crate::machine_line());
    println!(
        "Command: `cargo xtask bench fleet` (`vigil-bench fleet --sizes {}`). For each size, a fresh \
         `vigil serve --fleet` applies a fleet file of that many agents (scripted adapter, a timer every hour, so idle \
         while measured), with snapshots off (`[snapshots] every_events` out of reach). Once every agent exists \
         the node is killed (SIGKILL) and restarted on its data directory with snapshots due at once: the time \
         until `/v1/health` answers is the recovery from the log (process start, replay of the whole log, \
         tenants, run recovery). That node then writes a snapshot (the time from ready until `/metrics` shows \
         it current), is killed and restarted again: recovery from the snapshot (reading it, replaying the log \
         after it). The restarted node must show the fleet's last agent by name. Resident memory is read \
         from `/proc` after that restart, against an empty node. That node is then stopped cleanly (SIGTERM: \
         it closes its database) and started again: recovery from the snapshot after a clean stop. The two \
         differ by redb's repair of a database a crash left open, which walks every page of the file.\n",
        sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
    );
    let empty = Node::start(vigil, &data_dir.join("empty")).await?;
    tokio::time::sleep(SETTLE).await;
    let baseline = empty.resident_bytes().unwrap_or(0);
    drop(empty);
    println!(
        "An empty node: {:.1} MiB resident.\n",
        baseline as f64 / 1_048_576.0
    );
    println!(
        "| agents | fleet applied in | resident | per idle agent | log events | recovery from the log | \
         snapshot written in | recovery from the snapshot | the same after a clean stop |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &size in sizes {
        let row = one_size(vigil, data_dir, size, baseline).await?;
        println!("{row}");
    }
    Ok(())
}

/// Applies a fleet of `size` with snapshots off, restarts it (recovery from the log), lets
/// that node snapshot, restarts again (recovery from the snapshot): the table's row.
async fn one_size(
    vigil: &Path,
    data_dir: &Path,
    size: usize,
    baseline: u64,
) -> anyhow::Result<String> {
    let dir = data_dir.join(format!("fleet-{size}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("fleet.toml");
    std::fs::write(&file, fleet_file("idle", size, IDLE_INTERVAL_MS))?;
    // First without snapshots, so that the first restart replays the whole log.
    let no_snapshots = node_file(&dir, "no-snapshots.toml", NO_SNAPSHOTS_EVERY_EVENTS, None)?;
    let started = Instant::now();
    let node = Node::start_with(vigil, &dir, Some(&file), &no_snapshots).await?;
    // One event per agent after the tenant's: wait until the last is in the log.
    node.wait_for_head(size as u64 + 1, APPLY_TIMEOUT).await?;
    let applied = started.elapsed();
    let events = node.head_seq().await?;
    drop(node);
    // Snapshots due at once (every_events is raised to the fleet's size, which the log
    // exceeds by its tenant's event).
    let snapshot_asap = node_file(&dir, "snapshots.toml", 1, None)?;
    let restarted = Instant::now();
    let node = Node::start_with(vigil, &dir, None, &snapshot_asap).await?;
    let from_log = restarted.elapsed();
    let ready = Instant::now();
    while node.snapshot_seq().await? < events {
        if ready.elapsed() > APPLY_TIMEOUT {
            bail!("the node of {size} agents wrote no snapshot within {APPLY_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let snapshot_written = ready.elapsed();
    drop(node);
    let restarted = Instant::now();
    let node = Node::start_with(vigil, &dir, None, &snapshot_asap).await?;
    let from_snapshot = restarted.elapsed();
    // The recovered node holds the fleet: its last agent is there, by name.
    let last = format!("/v1/agents?name=idle-{}", size - 1);
    let answer = crate::http::Connection::open(node.addr)
        .await?
        .send(hyper::Method::GET, &last, &node.operator_token, None)
        .await?;
    let found: serde_json::Value = serde_json::from_slice(&answer.body)?;
    if found["agents"].as_array().map_or(0, Vec::len) != 1 {
        bail!("after the restart, the last of {size} agents is missing: {found}");
    }
    // Read after the restart: the fleet as recovery builds it, without what the allocator
    // kept from applying the file (every create queued at once).
    tokio::time::sleep(SETTLE).await;
    let resident = node.resident_bytes().unwrap_or(0);
    node.stop().await?;
    let restarted = Instant::now();
    let node = Node::start_with(vigil, &dir, None, &snapshot_asap).await?;
    let after_clean_stop = restarted.elapsed();
    drop(node);
    Ok(format!(
        "| {size} | {:.1} s | {:.1} MiB | {:.0} B | {events} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |",
        applied.as_secs_f64(),
        resident as f64 / 1_048_576.0,
        resident.saturating_sub(baseline) as f64 / size as f64,
        from_log.as_secs_f64() * 1_000.0,
        snapshot_written.as_secs_f64() * 1_000.0,
        from_snapshot.as_secs_f64() * 1_000.0,
        after_clean_stop.as_secs_f64() * 1_000.0
    ))
}

/// A `[snapshots] every_events` no fleet reaches: a node that never snapshots.
pub(crate) const NO_SNAPSHOTS_EVERY_EVENTS: u64 = 1 << 60;

/// Writes a node file with `[snapshots] every_events` (and `every_ms`, if given) in `dir` and
/// answers the environment that hands it to `vigil serve`.
pub(crate) fn node_file(
    dir: &Path,
    name: &str,
    every_events: u64,
    every_ms: Option<u64>,
) -> anyhow::Result<Vec<(String, String)>> {
    let path = dir.join(name);
    let mut text = format!("[snapshots]\nevery_events = {every_events}\n");
    if let Some(every_ms) = every_ms {
        text.push_str(&format!("every_ms = {every_ms}\n"));
    }
    std::fs::write(&path, text)?;
    Ok(vec![("VIGIL_CONFIG".into(), path.display().to_string())])
}

/// A timer interval that keeps an agent idle while it is measured.
pub(crate) const IDLE_INTERVAL_MS: u64 = 3_600_000;

/// A fleet file of `size` agents named `<prefix>-<i>`, each with a timer every `interval_ms` and
/// a scripted run of 100 ms.
pub fn fleet_file(prefix: &str, size: usize, interval_ms: u64) -> String {
    let mut text = String::with_capacity(size * 160);
    for i in 0..size {
        text.push_str(&agent_entry(
            "agents",
            &format!("{prefix}-{i}"),
            interval_ms,
        ));
    }
    text
}

/// One agent of a fleet file, an entry of the array of tables `table` (`agents`, or
/// `tenants.agents` for the last tenant above it): a timer every `interval_ms` and a scripted
/// run of 100 ms.
pub(crate) fn agent_entry(table: &str, name: &str, interval_ms: u64) -> String {
    format!(
        "[[{table}]]\nname = \"{name}\"\n[{table}.heartbeat]\ninterval_ms = {interval_ms}\n[{table}.adapter]\ntype = \"scripted\"\nsteps = [{{ duration_ms = 100, outcome = \"succeeded\" }}]\n\n"
    )
}
