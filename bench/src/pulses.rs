//! `vigil-bench pulses`: pulses per second a node answers, single and batched.
//!
//! A token's requests are rate limited (`REQUESTS_PER_SECOND_PER_TOKEN`, with a burst), so the
//! load is spread the way a real fleet spreads it: single pulses each with the agent's own token,
//! batches with the operator tokens of several tenants (a host pulses for the agents it runs).
//! The tenants are declared in a fleet file; the agents are created over the API, which is what
//! hands out their tokens.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::json;

use crate::http::Connection;
use crate::node::Node;
use crate::stats::Latencies;

/// Agents per batch: the API's largest (`PULSE_BATCH_MAX`).
const BATCH_AGENTS_MAX: usize = 1_000;

/// One tenant of the node under test: its operator token and its agents with theirs.
struct Tenant {
    token: String,
    agents: Vec<(u64, String)>,
}

/// What one phase (single or batched, at one client count) measured.
#[derive(Default)]
struct Phase {
    pulses: usize,
    latency: Latencies,
    /// Answers other than 200, by status.
    others: BTreeMap<u16, usize>,
    seconds: f64,
}

impl Phase {
    fn per_second(&self) -> f64 {
        self.pulses as f64 / self.seconds
    }
}

pub async fn run(
    vigil: &Path,
    data_dir: &Path,
    clients: &[usize],
    seconds: u64,
    agents: usize,
    tenants: usize,
) -> anyhow::Result<()> {
    if tenants == 0 || agents < tenants {
        bail!("need at least one tenant and one agent per tenant");
    }
    let length = Duration::from_secs(seconds);
    let dir = data_dir.join("pulses");
    let (node, tenants) = start(vigil, &dir, agents, tenants).await?;
    println!("## Pulses\n");
    println!("{}\n", crate::machine_line());
    println!(
        "Command: `cargo xtask bench pulses` (`vigil-bench pulses --clients {} --seconds {seconds} --agents {agents} --tenants {}`). \
         {agents} agents in {} tenants, each brought online by a first pulse before the clock starts. \
         Single: `POST /v1/agents/{{id}}/pulse` with the agent's own token, each client round robin over its share of the agents. \
         Batched: `POST /v1/pulses` with a tenant's operator token, up to {BATCH_AGENTS_MAX} of its agents per batch, client `c` of `n` pulsing in turn for tenants `c`, `c + n`, ... (or `c mod {}` when the clients outnumber the tenants), each body encoded once. \
         Each client is one keep-alive connection sending one request at a time for {seconds} s. Latencies p50 / p99 / max in ms, per request. \
         Ceiling: `GET /v1/health` (no token, no body, a few bytes of JSON) the same way, after the pulses at each client count: what the HTTP stack, the kernel's loopback and this load generator allow on these cores, with no work behind the request.\n",
        clients.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        tenants.len(),
        tenants.len(),
        tenants.len(),
    );
    println!("| clients | single pulses/s | single latency | batched pulses/s | batches/s | batch latency | ceiling: health/s | other answers |");
    println!("|---:|---:|---|---:|---:|---|---:|---|");
    for &count in clients {
        let single = single_pulses(&node, &tenants, count, length).await?;
        let batched = batched_pulses(&node, &tenants, count, length).await?;
        let ceiling = health_reads(&node, count, length).await?;
        let mut others = single.others.clone();
        for (status, n) in batched.others.iter().chain(&ceiling.others) {
            *others.entry(*status).or_default() += n;
        }
        println!(
            "| {count} | {:.0} | {} | {:.0} | {:.0} | {} | {:.0} | {} |",
            single.per_second(),
            single.latency.summary(),
            batched.per_second(),
            batched.latency.count() as f64 / batched.seconds,
            batched.latency.summary(),
            ceiling.latency.count() as f64 / ceiling.seconds,
            crate::others_text(&others),
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

/// A fresh node with `tenants` tenants (from a fleet file, their operator tokens from the
/// environment), `agents` agents spread over them, every agent online.
async fn start(
    vigil: &Path,
    dir: &Path,
    agents: usize,
    tenants: usize,
) -> anyhow::Result<(Node, Vec<Tenant>)> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("emptying {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir)?;
    let mut fleet = String::new();
    let mut envs = Vec::new();
    for t in 0..tenants {
        let variable = format!("VIGIL_BENCH_OPERATOR_{t}");
        fleet.push_str(&format!(
            "[[tenants]]\nname = \"bench-{t}\"\noperator_token_env = \"{variable}\"\n\n"
        ));
        envs.push((
            variable,
            format!("vgl_op_bench_tenant_{t}_0123456789abcdef"),
        ));
    }
    let file = dir.join("fleet.toml");
    std::fs::write(&file, fleet)?;
    let node = Node::start_with(vigil, dir, Some(&file), &envs).await?;
    let mut creating = Vec::new();
    for (t, (_, token)) in envs.into_iter().enumerate() {
        let share = agents / tenants + usize::from(t < agents % tenants);
        let addr = node.addr;
        creating.push(tokio::spawn(async move {
            create_and_bring_online(addr, t, token, share).await
        }));
    }
    let mut all = Vec::new();
    for task in creating {
        all.push(task.await??);
    }
    Ok((node, all))
}

/// Creates `count` agents in tenant `t` (one connection), then pulses them all once in batches:
/// the first pulse of an agent is a write (`agent_online`), the ones measured are not.
async fn create_and_bring_online(
    addr: std::net::SocketAddr,
    t: usize,
    token: String,
    count: usize,
) -> anyhow::Result<Tenant> {
    let mut connection = Connection::open(addr).await?;
    let mut agents = Vec::with_capacity(count);
    for i in 0..count {
        let answer = send_until_accepted(
            &mut connection,
            Method::POST,
            "/v1/agents",
            &token,
            &json!({ "name": format!("pulse-{t}-{i}") }),
        )
        .await?;
        if answer.status != StatusCode::CREATED {
            bail!(
                "creating agent {i} of tenant {t}: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            );
        }
        let created: serde_json::Value = serde_json::from_slice(&answer.body)?;
        agents.push((
            created["agent"]["id"].as_u64().context("agent id")?,
            created["token"].as_str().context("token")?.to_string(),
        ));
    }
    for chunk in agents.chunks(BATCH_AGENTS_MAX) {
        let ids: Vec<u64> = chunk.iter().map(|(id, _)| *id).collect();
        let answer = send_until_accepted(
            &mut connection,
            Method::POST,
            "/v1/pulses",
            &token,
            &json!({ "agents": ids }),
        )
        .await?;
        if answer.status != StatusCode::OK {
            bail!("bringing tenant {t} online: {}", answer.status);
        }
    }
    Ok(Tenant { token, agents })
}

/// Sends until the answer is not a 429/503 with `Retry-After` (setting up must not fail on the
/// rate limit the measured phases are spread to avoid).
async fn send_until_accepted(
    connection: &mut Connection,
    method: Method,
    path: &str,
    token: &str,
    body: &serde_json::Value,
) -> anyhow::Result<crate::http::Timed> {
    loop {
        let answer = connection
            .send(method.clone(), path, token, Some(body))
            .await?;
        match answer.retry_after_s {
            Some(wait) if !answer.status.is_success() => {
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            _ => return Ok(answer),
        }
    }
}

/// `clients` connections sending single pulses back to back for `length`.
async fn single_pulses(
    node: &Node,
    tenants: &[Tenant],
    clients: usize,
    length: Duration,
) -> anyhow::Result<Phase> {
    let everyone: Vec<(u64, String)> = tenants.iter().flat_map(|t| t.agents.clone()).collect();
    let mut work = Vec::new();
    for client in 0..clients {
        let mine: Vec<(u64, String)> = everyone
            .iter()
            .skip(client % everyone.len())
            .step_by(clients)
            .cloned()
            .collect();
        let requests = mine
            .into_iter()
            .map(|(id, token)| Request {
                method: Method::POST,
                path: format!("/v1/agents/{id}/pulse"),
                token,
                body: Bytes::new(),
                pulses: 1,
            })
            .collect();
        work.push(requests);
    }
    drive(node, work, length).await
}

/// `clients` connections reading `/v1/health` back to back for `length`: the most requests
/// this stack answers on these cores (counted as one "pulse" each).
async fn health_reads(node: &Node, clients: usize, length: Duration) -> anyhow::Result<Phase> {
    let read = Request {
        method: Method::GET,
        path: "/v1/health".into(),
        token: String::new(),
        body: Bytes::new(),
        pulses: 1,
    };
    drive(node, vec![vec![read]; clients], length).await
}

/// `clients` connections sending batches back to back for `length`, each for its share of the
/// tenants ([`my_tenants`]).
async fn batched_pulses(
    node: &Node,
    tenants: &[Tenant],
    clients: usize,
    length: Duration,
) -> anyhow::Result<Phase> {
    let mut work = Vec::new();
    for client in 0..clients {
        let requests = my_tenants(client, clients, tenants.len())
            .flat_map(|t| {
                let tenant = &tenants[t];
                tenant.agents.chunks(BATCH_AGENTS_MAX).map(|chunk| {
                    let ids: Vec<u64> = chunk.iter().map(|(id, _)| *id).collect();
                    Request {
                        method: Method::POST,
                        path: "/v1/pulses".to_string(),
                        token: tenant.token.clone(),
                        body: Bytes::from(json!({ "agents": ids }).to_string()),
                        pulses: chunk.len(),
                    }
                })
            })
            .collect();
        work.push(requests);
    }
    drive(node, work, length).await
}

/// The tenants client `client` of `clients` pulses for: every `clients`-th from its own
/// (`c`, `c + clients`, ...), or tenant `c mod tenants` when there are more clients than
/// tenants. Why: a token's requests are rate limited, so a few clients pulsing for a few
/// tenants measure the rate limit, not the node; spread like this, every tenant's token carries
/// an equal share of the batches.
fn my_tenants(client: usize, clients: usize, tenants: usize) -> impl Iterator<Item = usize> {
    let first = client % tenants;
    (first..tenants).step_by(clients.min(tenants))
}

/// One request of a client's round.
#[derive(Clone)]
struct Request {
    method: Method,
    path: String,
    /// Sent as a bearer token unless empty.
    token: String,
    /// Encoded once, sent every time.
    body: Bytes,
    /// Pulses it carries.
    pulses: usize,
}

/// One connection per entry of `work`, each cycling through its requests for `length`.
async fn drive(node: &Node, work: Vec<Vec<Request>>, length: Duration) -> anyhow::Result<Phase> {
    let mut connections = Vec::with_capacity(work.len());
    for _ in 0..work.len() {
        connections.push(Connection::open(node.addr).await?);
    }
    let started = Instant::now();
    let until = started + length;
    let mut tasks = Vec::new();
    for (requests, mut connection) in work.into_iter().zip(connections) {
        tasks.push(tokio::spawn(async move {
            let mut phase = Phase::default();
            let mut next = 0;
            while Instant::now() < until {
                let request = &requests[next % requests.len()];
                next += 1;
                let answer = connection
                    .send_bytes(
                        request.method.clone(),
                        &request.path,
                        &request.token,
                        request.body.clone(),
                    )
                    .await?;
                if answer.status == StatusCode::OK {
                    phase.latency.record(answer.took);
                    phase.pulses += request.pulses;
                } else {
                    *phase.others.entry(answer.status.as_u16()).or_default() += 1;
                    if let Some(wait) = answer.retry_after_s {
                        tokio::time::sleep(Duration::from_secs(wait)).await;
                    }
                }
            }
            Ok::<_, anyhow::Error>(phase)
        }));
    }
    let mut total = Phase::default();
    for task in tasks {
        let phase = task.await??;
        total.pulses += phase.pulses;
        total.latency.merge(phase.latency);
        for (status, n) in phase.others {
            *total.others.entry(status).or_default() += n;
        }
    }
    total.seconds = started.elapsed().as_secs_f64();
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::my_tenants;

    #[test]
    fn the_clients_share_the_tenants_evenly_and_each_pulses_for_one_at_least() {
        let share = |clients, tenants| -> Vec<Vec<usize>> {
            (0..clients)
                .map(|c| my_tenants(c, clients, tenants).collect())
                .collect()
        };
        assert_eq!(share(2, 5), [vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(share(3, 3), [vec![0], vec![1], vec![2]]);
        assert_eq!(share(4, 2), [vec![0], vec![1], vec![0], vec![1]]);
    }
}
