//! The hostile node: a client of the runtime that holds agent tokens and abuses them, drawing
//! everything from its own seeded stream. Against the node's limits (docs/api.md, Limits) it
//! sends request bodies a byte every few seconds, opens connections and says nothing, opens
//! live event streams up to and past the per-token and per-tenant slots, floods its agents with
//! idempotency keys and requests, and sends oversized bodies. Each attack records what it got
//! (`hostile`), so a sweep shows the limits answered; the oracle meanwhile holds the node to
//! answering the honest operator in time (invariant 19, check/operator.rs). Every count is
//! bounded, so a seed stays fast.
//!
//! The operator registers the hostile agents (setup, not judged) and hands over their tokens;
//! from then on the node only ever sees those tokens, or no token at all, from here.
//! [`operator_streams`] is the honest operator's side of the stream attack: it opens its own
//! live streams while the hostile agents hold theirs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vigil::api::client::ApiClient;
use vigil::api::{BODY_BYTES_MAX, SSE_STREAMS_PER_TOKEN_MAX};

use crate::harness::{elapsed_ms, sleep_until_ms, SIM_OPERATOR_TOKEN};
use crate::operator_client;
use crate::recorder::Recorder;
use crate::trace::TraceEvent;

/// Agents the hostile node holds tokens of. Together they ask for more streams than the tenant
/// lets its agents hold (`SSE_STREAMS_PER_TENANT_MAX - SSE_STREAMS_TENANT_OPERATOR_RESERVE`).
pub const HOSTILE_AGENTS: usize = 8;
/// Streams each hostile agent asks for in a stream flood: one past its token's cap.
pub const STREAMS_PER_AGENT: usize = SSE_STREAMS_PER_TOKEN_MAX + 1;
/// How long a stream flood holds its granted streams, in virtual ms (drawn in this range).
pub const STREAM_HOLD_MS_MIN: u64 = 60_000;
pub const STREAM_HOLD_MS_MAX: u64 = 120_000;
/// Slow bodies sent at once in one attack, at most: past the token's cap of requests in flight
/// (`REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX`), so that some attacks find it and get 503s.
const SLOW_BODIES_MAX: u32 = vigil::api::REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX as u32 + 8;
/// Declared length of a slow body; it never arrives whole.
const SLOW_BODY_BYTES: usize = 512;
/// Pause between two bytes of a slow body, drawn in this range (the node allows a 2 s stall
/// and 10 s for the whole body: some bodies stall, others trickle until the deadline).
const SLOW_BYTE_EVERY_MS_MIN: u64 = 500;
const SLOW_BYTE_EVERY_MS_MAX: u64 = 6_000;
/// Connections opened and left silent in one attack, at most (below `CONNECTIONS_MAX`: the
/// node cannot tell whose a silent connection is, so past it only the header timeout helps).
const IDLE_CONNECTIONS_MAX: u32 = 64;
/// Keyed wakeups one key flood sends, at most (sent one after another).
const FLOOD_KEYS_MAX: u32 = 60;
/// Requests past the token's burst that one request flood sends, at most.
const FLOOD_EXTRA_REQUESTS_MAX: u64 = 100;
/// Connections a request flood pipelines its requests over.
const FLOOD_CONNECTIONS: usize = 4;
/// Longest the hostile node waits for the node to close or answer a connection it abuses.
const ATTACK_WAIT_MS_MAX: u64 = 60_000;
/// Pause before retrying the registration of a hostile agent.
const RETRY_MS: u64 = 2_000;

/// One attack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attack {
    /// `bodies` wakeup requests whose body comes one byte every `byte_every_ms`.
    SlowBodies { agent: usize, bodies: u32, byte_every_ms: u64 },
    /// `count` connections that never send a byte.
    IdleConnections { count: u32 },
    /// Every hostile agent asks for [`STREAMS_PER_AGENT`] live streams and holds the granted
    /// ones for `hold_ms`.
    StreamFlood { hold_ms: u64 },
    /// `keys` wakeups of one agent, each with a fresh idempotency key.
    KeyFlood { agent: usize, keys: u32 },
    /// `requests` requests of one agent's token, pipelined over [`FLOOD_CONNECTIONS`] connections.
    RequestFlood { agent: usize, requests: u64 },
    /// One wakeup whose body is one byte past `BODY_BYTES_MAX`.
    OversizedBody { agent: usize },
}

impl Attack {
    fn name(&self) -> &'static str {
        match self {
            Attack::SlowBodies { .. } => "slow_bodies",
            Attack::IdleConnections { .. } => "idle_connections",
            Attack::StreamFlood { .. } => "stream_flood",
            Attack::KeyFlood { .. } => "key_flood",
            Attack::RequestFlood { .. } => "request_flood",
            Attack::OversizedBody { .. } => "oversized_body",
        }
    }
}

/// What the hostile node does: attacks at virtual instants, in time order.
#[derive(Debug, Clone)]
pub struct HostilePlan {
    pub addr: SocketAddr,
    pub attacks: Vec<(u64, Attack)>,
    /// The node stops attacking at this instant.
    pub until_ms: u64,
}

impl HostilePlan {
    /// Draws one of each attack at instants in `[from_ms, to_ms)` (a stream flood then holds
    /// its streams up to `STREAM_HOLD_MS_MAX` more), from `rng`, the node's own stream.
    pub fn draw(rng: &mut ChaCha8Rng, addr: SocketAddr, from_ms: u64, to_ms: u64) -> Self {
        let mut at = || rng.gen_range(from_ms..to_ms);
        let instants: Vec<u64> = (0..6).map(|_| at()).collect();
        let attacks = vec![
            Attack::SlowBodies {
                agent: rng.gen_range(0..HOSTILE_AGENTS),
                bodies: rng.gen_range(1..=SLOW_BODIES_MAX),
                byte_every_ms: rng.gen_range(SLOW_BYTE_EVERY_MS_MIN..=SLOW_BYTE_EVERY_MS_MAX),
            },
            Attack::IdleConnections {
                count: rng.gen_range(1..=IDLE_CONNECTIONS_MAX),
            },
            Attack::StreamFlood {
                hold_ms: rng.gen_range(STREAM_HOLD_MS_MIN..=STREAM_HOLD_MS_MAX),
            },
            Attack::KeyFlood {
                agent: rng.gen_range(0..HOSTILE_AGENTS),
                keys: rng.gen_range(1..=FLOOD_KEYS_MAX),
            },
            Attack::RequestFlood {
                agent: rng.gen_range(0..HOSTILE_AGENTS),
                requests: vigil::api::REQUEST_BURST_PER_TOKEN
                    + rng.gen_range(1..=FLOOD_EXTRA_REQUESTS_MAX),
            },
            Attack::OversizedBody {
                agent: rng.gen_range(0..HOSTILE_AGENTS),
            },
        ];
        let mut attacks: Vec<(u64, Attack)> = instants.into_iter().zip(attacks).collect();
        attacks.sort_by_key(|(at_ms, _)| *at_ms);
        HostilePlan {
            addr,
            attacks,
            until_ms: to_ms + STREAM_HOLD_MS_MAX + ATTACK_WAIT_MS_MAX,
        }
    }

    /// The instant of the stream flood, and how long it holds.
    pub fn stream_flood(&self) -> Option<(u64, u64)> {
        self.attacks.iter().find_map(|(at_ms, attack)| match attack {
            Attack::StreamFlood { hold_ms } => Some((*at_ms, *hold_ms)),
            _ => None,
        })
    }

    /// A short description for the run's first record.
    pub fn describe(&self) -> String {
        let words: Vec<String> = self
            .attacks
            .iter()
            .map(|(at_ms, attack)| format!("{}@{}s", attack.name(), at_ms / 1_000))
            .collect();
        format!("hostile=[{}]", words.join(","))
    }

    /// Runs the plan: registers the agents, then each attack on its own task at its instant.
    pub async fn run(self, recorder: Recorder) {
        let Some(agents) = register_agents(self.addr, &recorder, self.until_ms).await else {
            return;
        };
        let agents = Rc::new(agents);
        let mut running = Vec::new();
        for (at_ms, attack) in self.attacks {
            if !sleep_until_ms(&recorder, at_ms).await {
                return;
            }
            let (addr, agents, recorder) = (self.addr, agents.clone(), recorder.clone());
            running.push(madsim::task::spawn_local(async move {
                let outcome = attack_once(addr, &agents, &attack).await;
                recorder.record(
                    "hostile",
                    TraceEvent::Hostile {
                        attack: attack.name(),
                        outcome,
                    },
                );
            }));
        }
        // A madsim node ends, its tasks with it, when this (its first task) returns.
        for attack in running {
            let _ = attack.await;
        }
    }
}

/// A hostile agent: its id and token.
#[derive(Debug, Clone)]
struct HostileAgent {
    id: u64,
    token: String,
}

/// The operator registers the hostile agents and hands their tokens over (retried until the node
/// answers; an agent whose 201 was lost in a crash is left out, its token never seen).
async fn register_agents(
    addr: SocketAddr,
    recorder: &Recorder,
    until_ms: u64,
) -> Option<Vec<HostileAgent>> {
    let operator = ApiClient::with_token(addr, SIM_OPERATOR_TOKEN);
    let mut agents = Vec::new();
    for i in 0..HOSTILE_AGENTS {
        let spec = serde_json::json!({
            "name": format!("hostile-{i}"),
            "adapter": { "type": "scripted", "steps": [
                { "duration_ms": 500, "outcome": "succeeded" },
            ]},
        });
        loop {
            if recorder.failed() || elapsed_ms() >= until_ms {
                return None;
            }
            match operator.post_json("/v1/agents", &spec).await {
                Ok(answer) if answer.status.as_u16() == 201 => {
                    let json = answer.json().expect("201 answers are JSON");
                    agents.push(HostileAgent {
                        id: json["agent"]["id"].as_u64().expect("agent id"),
                        token: json["token"].as_str().expect("agent token").to_string(),
                    });
                    break;
                }
                Ok(answer) if answer.status.as_u16() == 409 => break,
                _ => tokio::time::sleep(Duration::from_millis(RETRY_MS)).await,
            }
        }
    }
    (!agents.is_empty()).then_some(agents)
}

/// Runs one attack; what it got, as words for the trace.
async fn attack_once(addr: SocketAddr, agents: &[HostileAgent], attack: &Attack) -> String {
    let agent = |i: usize| &agents[i % agents.len()];
    match *attack {
        Attack::SlowBodies {
            agent: a,
            bodies,
            byte_every_ms,
        } => {
            let agent = agent(a).clone();
            let tasks: Vec<_> = (0..bodies)
                .map(|_| madsim::task::spawn_local(slow_body(addr, agent.clone(), byte_every_ms)))
                .collect();
            let mut outcomes = Tally::default();
            for task in tasks {
                outcomes.add(task.await.unwrap_or_else(|_| "aborted".into()));
            }
            format!("byte_every_ms={byte_every_ms} {}", outcomes.words())
        }
        Attack::IdleConnections { count } => {
            let tasks: Vec<_> = (0..count)
                .map(|_| madsim::task::spawn_local(idle_connection(addr)))
                .collect();
            let mut outcomes = Tally::default();
            for task in tasks {
                outcomes.add(task.await.unwrap_or_else(|_| "aborted".into()));
            }
            outcomes.words()
        }
        Attack::StreamFlood { hold_ms } => stream_flood(addr, agents, hold_ms).await,
        Attack::KeyFlood { agent: a, keys } => key_flood(addr, agent(a), keys).await,
        Attack::RequestFlood { agent: a, requests } => {
            request_flood(addr, agent(a), requests).await
        }
        Attack::OversizedBody { agent: a } => {
            let agent = agent(a);
            let client = ApiClient::with_token(addr, agent.token.clone());
            let body = vec![b' '; BODY_BYTES_MAX + 1];
            let path = format!("/v1/agents/{}/wakeup", agent.id);
            match client.request(hyper::Method::POST, &path, Some(body)).await {
                Ok(answer) => format!("status={}", answer.status.as_u16()),
                Err(_) => "no_answer".into(),
            }
        }
    }
}

/// Counts of outcomes, printed in a stable order.
#[derive(Debug, Default)]
struct Tally(BTreeMap<String, u32>);

impl Tally {
    fn add(&mut self, outcome: String) {
        *self.0.entry(outcome).or_default() += 1;
    }

    fn words(&self) -> String {
        let words: Vec<String> = self.0.iter().map(|(k, n)| format!("{k}:{n}")).collect();
        words.join(" ")
    }
}

/// A wakeup whose body never comes whole: the head, then a byte every `byte_every_ms` until the
/// node answers or closes. Says what the node did.
async fn slow_body(addr: SocketAddr, agent: HostileAgent, byte_every_ms: u64) -> String {
    let Ok(stream) = TcpStream::connect(addr).await else {
        return "no_connection".into();
    };
    let (mut reader, mut writer) = tokio::io::split(stream);
    let head = format!(
        "POST /v1/agents/{}/wakeup HTTP/1.1\r\nhost: vigil\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {SLOW_BODY_BYTES}\r\n\r\n",
        agent.id, agent.token
    );
    let trickle = madsim::task::spawn_local(async move {
        if writer.write_all(head.as_bytes()).await.is_err() || writer.flush().await.is_err() {
            return;
        }
        for _ in 0..SLOW_BODY_BYTES - 1 {
            tokio::time::sleep(Duration::from_millis(byte_every_ms)).await;
            if writer.write_all(b" ").await.is_err() || writer.flush().await.is_err() {
                return;
            }
        }
    });
    let answer = read_until_closed(&mut reader).await;
    trickle.abort();
    answer.map_or_else(|| "held".into(), |answer| status_word(&answer))
}

/// A connection that sends nothing. Says whether the node closed it.
async fn idle_connection(addr: SocketAddr) -> String {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return "no_connection".into();
    };
    match read_until_closed(&mut stream).await {
        Some(_) => "closed".into(),
        None => "held".into(),
    }
}

/// Reads until the node closes the connection (its whole answer), or `None` if it keeps it open
/// past `ATTACK_WAIT_MS_MAX`.
async fn read_until_closed(reader: &mut (impl AsyncReadExt + Unpin)) -> Option<String> {
    let mut answer = Vec::new();
    let read = reader.read_to_end(&mut answer);
    match tokio::time::timeout(Duration::from_millis(ATTACK_WAIT_MS_MAX), read).await {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

/// `status=NNN` of a raw HTTP answer, or `closed` for none.
fn status_word(answer: &str) -> String {
    match answer.split_whitespace().nth(1) {
        Some(status) => format!("status={status}"),
        None => "closed".into(),
    }
}

/// Every hostile agent asks for [`STREAMS_PER_AGENT`] streams, one after another; the granted
/// ones are held for `hold_ms`. Says how many were granted and which caps refused the rest.
async fn stream_flood(addr: SocketAddr, agents: &[HostileAgent], hold_ms: u64) -> String {
    let mut held = Vec::new();
    let mut outcomes = Tally::default();
    for agent in agents {
        for _ in 0..STREAMS_PER_AGENT {
            match open_stream(addr, &agent.token).await {
                StreamAnswer::Open(stream) => {
                    held.push(stream);
                    outcomes.add("granted".into());
                }
                StreamAnswer::Refused { status, code } => {
                    outcomes.add(format!("{status}_{}", code.unwrap_or_default()))
                }
                StreamAnswer::None => outcomes.add("no_answer".into()),
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
    drop(held);
    outcomes.words()
}

/// What asking for a live stream got.
pub enum StreamAnswer {
    /// 200: the stream, open.
    Open(TcpStream),
    /// Any other status, with the error's code.
    Refused { status: u16, code: Option<String> },
    /// No answer (no connection, closed, or nothing within the client's timeout).
    None,
}

/// Asks for the live event stream with `token` over a raw connection.
pub async fn open_stream(addr: SocketAddr, token: &str) -> StreamAnswer {
    let timeout = Duration::from_millis(vigil::api::client::REQUEST_TIMEOUT_MS);
    match tokio::time::timeout(timeout, ask_stream(addr, token)).await {
        Ok(answer) => answer,
        Err(_) => StreamAnswer::None,
    }
}

async fn ask_stream(addr: SocketAddr, token: &str) -> StreamAnswer {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return StreamAnswer::None;
    };
    let request = format!(
        "GET /v1/events HTTP/1.1\r\nhost: vigil\r\nauthorization: Bearer {token}\r\n\
         accept: text/event-stream\r\n\r\n"
    );
    // The simulated socket sends what was written only when flushed.
    if stream.write_all(request.as_bytes()).await.is_err() || stream.flush().await.is_err() {
        return StreamAnswer::None;
    }
    // The head, then (for a refusal) the body its length names.
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 1_024];
    let head_end = loop {
        if let Some(end) = find(&bytes, b"\r\n\r\n") {
            break end + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return StreamAnswer::None,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
    let Some(status) = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()) else {
        return StreamAnswer::None;
    };
    if status == 200 {
        return StreamAnswer::Open(stream);
    }
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
    let code = serde_json::from_slice::<serde_json::Value>(&bytes[head_end..])
        .ok()
        .and_then(|json| json["error"]["code"].as_str().map(str::to_string));
    StreamAnswer::Refused { status, code }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `keys` wakeups of the agent by its own token, each with a fresh idempotency key, one after
/// another. Says how they were answered.
async fn key_flood(addr: SocketAddr, agent: &HostileAgent, keys: u32) -> String {
    let client = ApiClient::with_token(addr, agent.token.clone());
    let path = format!("/v1/agents/{}/wakeup", agent.id);
    let mut outcomes = Tally::default();
    for k in 0..keys {
        let body = serde_json::json!({
            "source": "on_demand",
            "reason": "flood",
            "task_key": "flood",
            "idempotency_key": format!("flood-{k}"),
        });
        match client.post_json(&path, &body).await {
            Ok(answer) => outcomes.add(format!("status={}", answer.status.as_u16())),
            Err(_) => outcomes.add("no_answer".into()),
        }
    }
    outcomes.words()
}

/// `requests` reads of the agent by its own token, pipelined over [`FLOOD_CONNECTIONS`]
/// connections (all of a connection's requests written at once, so they reach the node faster
/// than its bucket refills). Says how they were answered.
async fn request_flood(addr: SocketAddr, agent: &HostileAgent, requests: u64) -> String {
    let per_connection = requests.div_ceil(FLOOD_CONNECTIONS as u64);
    let tasks: Vec<_> = (0..FLOOD_CONNECTIONS as u64)
        .map(|c| {
            let count = per_connection.min(requests.saturating_sub(c * per_connection));
            madsim::task::spawn_local(pipelined_reads(addr, agent.clone(), count))
        })
        .collect();
    let mut outcomes = Tally::default();
    for task in tasks {
        for outcome in task.await.unwrap_or_default() {
            outcomes.add(outcome);
        }
    }
    outcomes.words()
}

/// `count` pipelined `GET /v1/agents/{id}` on one connection, the last asking to close it; the
/// status of each answer read back (`status=NNN`), or `no_answer` for each one missing.
async fn pipelined_reads(addr: SocketAddr, agent: HostileAgent, count: u64) -> Vec<String> {
    if count == 0 {
        return Vec::new();
    }
    let missing = |answered: usize| vec!["no_answer".to_string(); count as usize - answered];
    let Ok(stream) = TcpStream::connect(addr).await else {
        return missing(0);
    };
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut batch = String::new();
    for i in 0..count {
        let close = if i + 1 == count { "connection: close\r\n" } else { "" };
        batch.push_str(&format!(
            "GET /v1/agents/{} HTTP/1.1\r\nhost: vigil\r\nauthorization: Bearer {}\r\n{close}\r\n",
            agent.id, agent.token
        ));
    }
    let send = madsim::task::spawn_local(async move {
        let _ = writer.write_all(batch.as_bytes()).await;
        let _ = writer.flush().await;
        // Keep the write half open until the node closes the connection.
        std::future::pending::<()>().await;
    });
    let answers = read_until_closed(&mut reader).await.unwrap_or_default();
    send.abort();
    let mut statuses: Vec<String> = answers
        .match_indices("HTTP/1.1 ")
        .filter_map(|(at, _)| answers.get(at + 9..at + 12))
        .map(|status| format!("status={status}"))
        .take(count as usize)
        .collect();
    statuses.extend(missing(statuses.len()));
    statuses
}

/// The honest operator's live streams: at each instant of `at_ms` (in order), it asks for the event stream
/// with its own token (recorded as an operator request and judged like any other), holds it for
/// `hold_ms`, then closes it.
pub async fn operator_streams(addr: SocketAddr, recorder: Recorder, at_ms: Vec<u64>, hold_ms: u64) {
    let mut opened = Vec::new();
    for t_ms in at_ms {
        if !sleep_until_ms(&recorder, t_ms).await {
            return;
        }
        let recorder = recorder.clone();
        opened.push(madsim::task::spawn_local(async move {
            let request = operator_client::asked(&recorder, "GET", "/v1/events (stream)");
            match open_stream(addr, SIM_OPERATOR_TOKEN).await {
                StreamAnswer::Open(stream) => {
                    operator_client::answered(&recorder, request, Some(200), &[]);
                    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                    drop(stream);
                }
                StreamAnswer::Refused { status, code } => {
                    let body = serde_json::json!({ "error": { "code": code } }).to_string();
                    operator_client::answered(&recorder, request, Some(status), body.as_bytes());
                }
                StreamAnswer::None => operator_client::answered(&recorder, request, None, &[]),
            }
        }));
    }
    // A madsim node ends, its tasks with it, when this (its first task) returns.
    for stream in opened {
        let _ = stream.await;
    }
}
