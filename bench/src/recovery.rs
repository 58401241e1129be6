//! `vigil-bench recovery`: how long a restart takes against the length of the log it replays
//! after its snapshot, at one fleet size (issue 13: "recovery time against log length").
//!
//! A restart reads the current snapshot, then replays every event after it (ADR 0016). The
//! `fleet` benchmark times the first part against the fleet's size; this one holds the fleet
//! and its snapshot fixed and grows the second part: a tail of real events (on-demand wakeups
//! and the runs they start, sent over HTTP) written with snapshots off, timed at each length.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hyper::{Method, StatusCode};
use serde_json::json;

use crate::fleet::{agent_entry, node_file, IDLE_INTERVAL_MS, NO_SNAPSHOTS_EVERY_EVENTS};
use crate::http::Connection;
use crate::node::{metric, Node};

/// Longest the fleet file may take to be applied, and its snapshot to be written.
const APPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// Tenants the agents are spread over, round robin. Why: a token's requests are rate limited
/// (a burst of 1,000, then 100 a second: `REQUESTS_PER_SECOND_PER_TOKEN`), so the tail is
/// written with many tenants' operator tokens, as many hosts would write it.
const TENANTS: usize = 100;

/// Keep-alive connections writing the tail, each sending one wakeup at a time.
const CLIENTS: usize = 64;

/// Restarts timed at each tail length; the table gives their median and spread.
const RESTARTS: usize = 5;

/// Events a wakeup adds, until a round has measured it: `wakeup_queued` and `run_started`,
/// then `run_finished` 100 ms later (an idle agent's on-demand wakeup and its scripted run).
const EVENTS_PER_WAKEUP_GUESS: f64 = 3.0;

/// Rounds of wakeups a tail may take to reach its length: each round sends what is left at the
/// events per wakeup the last one measured, so two or three are enough.
const WRITE_ROUNDS_MAX: usize = 20;

/// `[snapshots] every_ms` while the tail is written and restarted: 2^60 ms, never reached (with
/// `every_events` out of reach too, the snapshot taken first stays the current one).
const NO_SNAPSHOTS_EVERY_MS: u64 = 1 << 60;

/// Longest the node may take to finish its runs once the wakeups stop.
const QUIET_TIMEOUT: Duration = Duration::from_secs(120);

/// How often the node is asked whether it is quiet, or its snapshot current.
const POLL: Duration = Duration::from_millis(50);

/// Where a wakeup goes: the agent's wakeup path and its tenant's operator token.
type Target = (String, String);

pub async fn run(
    vigil: &Path,
    data_dir: &Path,
    agents: usize,
    tails: &[u64],
) -> anyhow::Result<()> {
    if agents < TENANTS {
        bail!("need at least {TENANTS} agents (one per tenant)");
    }
    let tails = with_zero(tails);
    println!("## Recovery against the tail after a snapshot\n");
    println!("{}\n", crate::machine_line());
    print_method(agents, &tails);
    let dir = data_dir.join(format!("recovery-{agents}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("emptying {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let (snapshot, targets) = fleet_with_snapshot(vigil, &dir, agents).await?;
    println!(
        "The snapshot: seq {} ({agents} agents in {TENANTS} tenants), written in {:.0} ms.\n",
        snapshot.seq,
        snapshot.took.as_secs_f64() * 1_000.0
    );
    let envs = node_file(
        &dir,
        "no-snapshots.toml",
        NO_SNAPSHOTS_EVERY_EVENTS,
        Some(NO_SNAPSHOTS_EVERY_MS),
    )?;
    let mut writer = Writer::new(targets);
    let mut node = Node::start_with(vigil, &dir, None, &envs).await?;
    let mut tail_0_ms = None;
    println!(
        "| tail events | log events total | recovery from snapshot + tail (ms) | min – max of {RESTARTS} (ms) | ms per 1,000 tail events |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for &tail in &tails {
        let head = writer.write_until(&node, snapshot.seq + tail).await?;
        if node.snapshot_seq().await? != 0 {
            bail!("the node wrote a snapshot while the tail was written: the tail would be shorter than the log says");
        }
        drop(node);
        let (times, restarted) = time_restarts(vigil, &dir, &envs, head).await?;
        node = restarted;
        let median = times[times.len() / 2];
        let base = *tail_0_ms.get_or_insert(median);
        let tail = head - snapshot.seq;
        let per_thousand = if tail == 0 {
            "–".to_string()
        } else {
            format!("{:.1}", (median - base) / (tail as f64 / 1_000.0))
        };
        println!(
            "| {tail} | {head} | {median:.0} | {:.0} – {:.0} | {per_thousand} |",
            times[0],
            times[times.len() - 1]
        );
    }
    drop(node);
    writer.print_summary();
    Ok(())
}

/// The tail lengths, ascending, with 0 first: the restart from the snapshot alone is the base
/// the tail's cost is measured against.
fn with_zero(tails: &[u64]) -> Vec<u64> {
    let mut tails = tails.to_vec();
    tails.push(0);
    tails.sort_unstable();
    tails.dedup();
    tails
}

fn print_method(agents: usize, tails: &[u64]) {
    let tails = tails
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    println!(
        "Command: `cargo xtask bench recovery` (`vigil-bench recovery --agents {agents} --tails {tails}`). \
         A fresh `vigil serve --fleet` applies {agents} agents (the `fleet` benchmark's idle agents: scripted \
         adapter, a run of 100 ms, a timer every hour, which never fires during the benchmark) spread over \
         {TENANTS} tenants, with snapshots off. It is restarted with a snapshot due at once and killed once \
         `/metrics` shows it current. From then on the node runs with snapshots off (`[snapshots] every_events` \
         and `every_ms` out of reach) while the tail is written: `POST /v1/agents/{{id}}/wakeup` (source \
         `on_demand`) from {CLIENTS} keep-alive connections, round robin over the agents, each with its \
         tenant's operator token (a token's request rate is capped, hence the tenants), until the log head \
         (`/v1/health`) is the tail's length past the snapshot. An idle agent's wakeup is `wakeup_queued` and \
         `run_started`, and `run_finished` 100 ms later. Once no run is running or queued (`/metrics`), the node \
         is killed (SIGKILL) and restarted {RESTARTS} times on its data directory: the time until `/v1/health` \
         answers is the recovery (process start, reading the snapshot, replaying the tail, run recovery, which \
         finds nothing to do), and each restarted node must report the same log head. The tails are cumulative: \
         one log, measured as it grows. The table gives the median restart, the fastest and slowest, and the \
         tail's cost: the median minus the median at tail 0, per 1,000 events of tail. Recovery from the same \
         log without its snapshot is not measured (a node always starts from its current snapshot); the \
         `fleet` table gives recovery from a whole log.\n"
    );
}

/// The snapshot the tails are written after.
struct Snapshot {
    /// Its log position: the head when it was taken.
    seq: u64,
    /// From the node's readiness until `/metrics` showed it current.
    took: Duration,
}

/// Applies a fleet of `agents` over [`TENANTS`] tenants with snapshots off, then restarts it
/// with a snapshot due at once and waits until it is current: the snapshot, and whom to wake.
async fn fleet_with_snapshot(
    vigil: &Path,
    dir: &Path,
    agents: usize,
) -> anyhow::Result<(Snapshot, Vec<Target>)> {
    let file = dir.join("fleet.toml");
    let (text, tokens) = tenants_fleet_file(agents);
    std::fs::write(&file, text)?;
    let mut envs = node_file(
        dir,
        "apply.toml",
        NO_SNAPSHOTS_EVERY_EVENTS,
        Some(NO_SNAPSHOTS_EVERY_MS),
    )?;
    envs.extend(tokens.iter().cloned());
    let node = Node::start_with(vigil, dir, Some(&file), &envs).await?;
    // The default tenant's event, each tenant's, then one per agent.
    node.wait_for_head((1 + TENANTS + agents) as u64, APPLY_TIMEOUT)
        .await?;
    let targets = targets(&node, &tokens, agents).await?;
    let head = node.head_seq().await?;
    drop(node);
    // Due at once: every_events is raised to the fleet's size, which the log exceeds by its
    // tenants' events.
    let snapshot_asap = node_file(dir, "snapshot-asap.toml", 1, None)?;
    let node = Node::start_with(vigil, dir, None, &snapshot_asap).await?;
    let ready = Instant::now();
    while node.snapshot_seq().await? < head {
        if ready.elapsed() > APPLY_TIMEOUT {
            bail!("the node of {agents} agents wrote no snapshot within {APPLY_TIMEOUT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    let took = ready.elapsed();
    let seq = node.snapshot_seq().await?;
    if node.head_seq().await? != seq {
        bail!("the log moved past the snapshot (seq {seq}) before the node was stopped");
    }
    Ok((Snapshot { seq, took }, targets))
}

/// A fleet file of `agents` agents (`recovery-<i>`, in tenant `bench-<i mod TENANTS>`), each as
/// the `fleet` benchmark's, and the environment holding the tenants' operator tokens.
fn tenants_fleet_file(agents: usize) -> (String, Vec<(String, String)>) {
    let mut text = String::with_capacity(agents * 200);
    let mut tokens = Vec::with_capacity(TENANTS);
    for t in 0..TENANTS {
        let variable = format!("VIGIL_BENCH_OPERATOR_{t}");
        text.push_str(&format!(
            "[[tenants]]\nname = \"bench-{t}\"\noperator_token_env = \"{variable}\"\n\n"
        ));
        for i in (t..agents).step_by(TENANTS) {
            text.push_str(&agent_entry(
                "tenants.agents",
                &format!("recovery-{i}"),
                IDLE_INTERVAL_MS,
            ));
        }
        tokens.push((
            variable,
            format!("vgl_op_bench_tenant_{t}_0123456789abcdef"),
        ));
    }
    (text, tokens)
}

/// Every agent's wakeup target, tenants interleaved (consecutive wakeups spend different
/// tenants' tokens); an error unless the node holds all `agents`.
async fn targets(
    node: &Node,
    tokens: &[(String, String)],
    agents: usize,
) -> anyhow::Result<Vec<Target>> {
    let mut by_tenant = Vec::with_capacity(tokens.len());
    for (_, token) in tokens {
        by_tenant.push(agent_ids(node, token).await?);
    }
    let mut targets = Vec::with_capacity(agents);
    let longest = by_tenant.iter().map(Vec::len).max().unwrap_or(0);
    for k in 0..longest {
        for (ids, (_, token)) in by_tenant.iter().zip(tokens) {
            if let Some(id) = ids.get(k) {
                targets.push((format!("/v1/agents/{id}/wakeup"), token.clone()));
            }
        }
    }
    if targets.len() != agents {
        bail!(
            "the node lists {} agents in its tenants, not {agents}",
            targets.len()
        );
    }
    Ok(targets)
}

/// The ids of the agents of the tenant whose operator token is `token`, page by page.
async fn agent_ids(node: &Node, token: &str) -> anyhow::Result<Vec<u64>> {
    let mut connection = Connection::open(node.addr).await?;
    let mut ids = Vec::new();
    let mut after = 0;
    loop {
        let path = format!("/v1/agents?after={after}&limit=1000");
        let page = connection.send(Method::GET, &path, token, None).await?;
        if page.status != StatusCode::OK {
            bail!(
                "GET {path}: {} {}",
                page.status,
                String::from_utf8_lossy(&page.body)
            );
        }
        let body: serde_json::Value = serde_json::from_slice(&page.body)?;
        for agent in body["agents"].as_array().context("agents in a page")? {
            ids.push(agent["id"].as_u64().context("an agent's id")?);
        }
        match body["next_after"].as_u64() {
            Some(next) => after = next,
            None => return Ok(ids),
        }
    }
}

/// Starts the node on `dir` [`RESTARTS`] times, killing each before the next (SIGKILL), and
/// times each until `/v1/health` answers. Each must report the log head `head`.
/// Answers the times in milliseconds, sorted, and the last node, still running.
async fn time_restarts(
    vigil: &Path,
    dir: &Path,
    envs: &[(String, String)],
    head: u64,
) -> anyhow::Result<(Vec<f64>, Node)> {
    let mut times = Vec::with_capacity(RESTARTS);
    let mut node = None;
    for _ in 0..RESTARTS {
        drop(node.take());
        let started = Instant::now();
        let restarted = Node::start_with(vigil, dir, None, envs).await?;
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
        let recovered = restarted.head_seq().await?;
        if recovered != head {
            bail!("a restart recovered the log up to seq {recovered}, not {head}");
        }
        node = Some(restarted);
    }
    times.sort_by(f64::total_cmp);
    Ok((times, node.context("no restart")?))
}

/// Writes the tail: rounds of on-demand wakeups, round robin over every agent from where the
/// last round stopped.
struct Writer {
    targets: Arc<Vec<Target>>,
    /// The next wakeup's index (modulo the targets).
    next: u64,
    /// Events per wakeup, as the last round measured it.
    per_wakeup: f64,
    wakeups: u64,
    events: u64,
    rate_limited: u64,
    sending: Duration,
}

impl Writer {
    fn new(targets: Vec<Target>) -> Writer {
        Writer {
            targets: Arc::new(targets),
            next: 0,
            per_wakeup: EVENTS_PER_WAKEUP_GUESS,
            wakeups: 0,
            events: 0,
            rate_limited: 0,
            sending: Duration::ZERO,
        }
    }

    /// Wakes agents until the log head reaches `until` and the node is quiet (no run running
    /// or queued): the head then.
    async fn write_until(&mut self, node: &Node, until: u64) -> anyhow::Result<u64> {
        let first = wait_quiet(node).await?;
        let mut head = first;
        for _ in 0..WRITE_ROUNDS_MAX {
            if head >= until {
                check_events_total(node, head - first).await?;
                return Ok(head);
            }
            let wakeups = ((until - head) as f64 / self.per_wakeup).ceil() as u64;
            let started = Instant::now();
            self.rate_limited += self.wake(node, wakeups).await?;
            let after = wait_quiet(node).await?;
            self.sending += started.elapsed();
            self.per_wakeup = ((after - head) as f64 / wakeups as f64).max(1.0);
            self.wakeups += wakeups;
            self.events += after - head;
            head = after;
        }
        bail!("the log did not reach seq {until} in {WRITE_ROUNDS_MAX} rounds of wakeups")
    }

    /// Sends `count` wakeups from [`CLIENTS`] connections; answers how many were refused 429
    /// (and sent again after `Retry-After`).
    async fn wake(&mut self, node: &Node, count: u64) -> anyhow::Result<u64> {
        let next = Arc::new(AtomicU64::new(self.next));
        let end = self.next + count;
        let mut clients = Vec::with_capacity(CLIENTS);
        for _ in 0..CLIENTS {
            let connection = Connection::open(node.addr).await?;
            let (next, targets) = (next.clone(), self.targets.clone());
            clients.push(tokio::spawn(wake_until(connection, next, end, targets)));
        }
        let mut rate_limited = 0;
        for client in clients {
            rate_limited += client.await??;
        }
        self.next = end;
        Ok(rate_limited)
    }

    fn print_summary(&self) {
        println!(
            "\nThe tail was written by {} wakeups: {} events, {:.2} a wakeup, in {:.1} s of sending and \
             waiting for the runs to end ({:.0} events/s); {} answers 429, each sent again after its \
             `Retry-After`.",
            self.wakeups,
            self.events,
            self.events as f64 / self.wakeups.max(1) as f64,
            self.sending.as_secs_f64(),
            self.events as f64 / self.sending.as_secs_f64().max(f64::MIN_POSITIVE),
            self.rate_limited
        );
    }
}

/// One client: takes the next wakeup's index until `end`, sending each on `connection`;
/// answers how many answers were 429.
async fn wake_until(
    mut connection: Connection,
    next: Arc<AtomicU64>,
    end: u64,
    targets: Arc<Vec<Target>>,
) -> anyhow::Result<u64> {
    let body = json!({ "source": "on_demand", "reason": "bench" });
    let mut rate_limited = 0;
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= end {
            return Ok(rate_limited);
        }
        let (path, token) = &targets[(index % targets.len() as u64) as usize];
        loop {
            let answer = connection
                .send(Method::POST, path, token, Some(&body))
                .await?;
            if answer.status == StatusCode::OK {
                break;
            }
            if answer.status != StatusCode::TOO_MANY_REQUESTS {
                bail!(
                    "POST {path}: {} {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                );
            }
            rate_limited += 1;
            let wait = answer.retry_after_s.unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(wait)).await;
        }
    }
}

/// Waits until no run is running or queued and no command waits for the writer, and the log
/// head has not moved since the last look: the head then.
async fn wait_quiet(node: &Node) -> anyhow::Result<u64> {
    let started = Instant::now();
    let mut quiet_at = None;
    loop {
        let metrics = node.metrics().await?;
        let busy = metric(&metrics, r#"vigil_runs{state="running"}"#)?
            + metric(&metrics, r#"vigil_runs{state="queued"}"#)?
            + metric(&metrics, "vigil_writer_queue")?;
        let head = node.head_seq().await?;
        if busy == 0 && quiet_at == Some(head) {
            return Ok(head);
        }
        quiet_at = (busy == 0).then_some(head);
        if started.elapsed() > QUIET_TIMEOUT {
            bail!("the node still had runs or writes after {QUIET_TIMEOUT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The log head is what the node says it committed: this process's `vigil_events_total` is
/// the `written` events since it started, none more, none fewer.
async fn check_events_total(node: &Node, written: u64) -> anyhow::Result<()> {
    let committed = metric(&node.metrics().await?, "vigil_events_total")?;
    if committed != written {
        bail!("the log head moved by {written} events, but the node committed {committed}");
    }
    Ok(())
}
