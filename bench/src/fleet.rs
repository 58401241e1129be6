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
         while measured). Once every agent exists the node is killed (SIGKILL) and restarted on its data \
         directory: the time until `/v1/health` answers is the recovery (process start, log replay, tenants, run \
         recovery); the restarted node must then show the fleet's last agent by name. Resident memory is read \
         from `/proc` after that restart, against an empty node.\n",
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
    println!("| agents | fleet applied in | resident | per idle agent | log events | recovery (kill → ready) |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for &size in sizes {
        let dir = data_dir.join(format!("fleet-{size}"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("fleet.toml");
        std::fs::write(&file, fleet_file(size))?;
        let started = Instant::now();
        let node = Node::restart(vigil, &dir, Some(&file)).await?;
        // One event per agent after the tenant's: wait until the last is in the log.
        let expected = size as u64 + 1;
        while node.head_seq().await? < expected {
            if started.elapsed() > APPLY_TIMEOUT {
                bail!("the fleet of {size} was not applied within {APPLY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let applied = started.elapsed();
        let events = node.head_seq().await?;
        drop(node);
        let restarted = Instant::now();
        let node = Node::restart(vigil, &dir, None).await?;
        let recovery = restarted.elapsed();
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
        drop(node);
        println!(
            "| {size} | {:.1} s | {:.1} MiB | {:.0} B | {events} | {:.0} ms |",
            applied.as_secs_f64(),
            resident as f64 / 1_048_576.0,
            resident.saturating_sub(baseline) as f64 / size as f64,
            recovery.as_secs_f64() * 1_000.0
        );
    }
    Ok(())
}

/// A fleet file of `size` idle agents.
fn fleet_file(size: usize) -> String {
    let mut text = String::with_capacity(size * 160);
    for i in 0..size {
        text.push_str(&format!(
            "[[agents]]\nname = \"idle-{i}\"\n[agents.heartbeat]\ninterval_ms = 3_600_000\n[agents.adapter]\ntype = \"scripted\"\nsteps = [{{ duration_ms = 100, outcome = \"succeeded\" }}]\n\n"
        ));
    }
    text
}
