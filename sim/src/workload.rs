//! The workload: what users and operators do to a runtime node, over the simulated network with
//! real HTTP and the operator's bearer token. It registers agents and wakes them (recording each
//! acknowledgement), probes the agent list, and tails the event feed, so the oracle can judge what
//! an outside client saw.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;


use crate::harness::{elapsed_ms, sleep_until_ms};
use crate::operator_client::OperatorClient;
use crate::recorder::Recorder;
use crate::trace::{sent_event_digest, TraceEvent};

/// Pause before retrying a request that got no answer or a 5xx.
const RETRY_MS: u64 = 2_000;
/// Largest page the workload asks for when tailing the feed.
const TAIL_PAGE_EVENTS: usize = 1_000;

/// Something a user or operator does at a virtual instant.
#[derive(Debug, Clone)]
pub enum Action {
    /// Register an agent with this JSON spec (which names it).
    CreateAgent { spec: serde_json::Value },
    /// Wake the agent called `agent` with this JSON request, retrying until answered. Each wake
    /// runs on its own task, so a burst of them really arrives at once.
    Wake {
        agent: String,
        request: serde_json::Value,
    },
    /// The agent called `agent` asks for a rest: `pause_heartbeats(minutes)`, retried until
    /// answered (a retry pauses again from its own instant, as a real agent's would).
    PauseHeartbeats { agent: String, minutes: Option<u64> },
    /// The agent called `agent` (or its host) pulses: one attempt, never retried (a lost pulse
    /// is simply lost, as on a real network); a 2xx is recorded with the send instant.
    Pulse { agent: String },
    /// A host pulses for all the agents it runs at once (`POST /v1/pulses`): one attempt,
    /// never retried; a 2xx is recorded as an answered pulse of each agent, with the send
    /// instant. Agents whose creation is not answered yet are left out. Shared: a host sends
    /// the same list thousands of times a day.
    PulseBatch { agents: std::sync::Arc<[String]> },
    /// A user writes `text` to the agent called `agent`, retried until answered.
    Input { agent: String, text: String },
    /// The operator pauses the agent called `agent` for `minutes` (which cancels its running
    /// run), retried until answered.
    Pause { agent: String, minutes: u64 },
    /// The operator cancels the agent's running run, if it has one when asked (one attempt:
    /// a run that ended meanwhile answers 409, which is fine).
    CancelRunning { agent: String },
    /// The operator takes the agent called `agent` out of the error state
    /// (`POST /v1/agents/{id}/error/reset`; nothing changes if it is not in it), retried until
    /// answered.
    ResetError { agent: String },
    /// The operator terminates the agent called `agent` for good, retried until answered.
    Terminate { agent: String },
    /// The operator defines a predicate heartbeat of the agent called `agent`
    /// (`POST /v1/heartbeats` with `definition` and the agent's id), retried until answered; a
    /// 409 means an earlier attempt was committed but its answer lost in a crash.
    DefineHeartbeat {
        agent: String,
        definition: serde_json::Value,
    },
    /// A request with values at or past the documented limits (sim/src/edges.rs), sent until
    /// answered with anything but a server error and recorded with its answer. Sent one after
    /// another (the next step waits for the answer), so the node takes spec changes in order.
    Submit {
        kind: crate::trace::EdgeKind,
        agent: Option<String>,
        body: serde_json::Value,
    },
    /// Read the agent called `agent` and record the spec it shows.
    ShowSpec { agent: String },
    /// Read one page of the timeline of the agent called `agent` (sim/src/edges.rs::timeline).
    ShowTimeline {
        agent: String,
        since_ms: u64,
        limit: usize,
    },
    /// Read the conversation history of the agent called `agent`, retried until answered
    /// (nothing is recorded for an agent whose id is not known yet).
    ReadHistory { agent: String },
    /// Replace the token of the agent called `agent` twice, reading the agent with each token
    /// the node returned after each rotation (sim/src/edges.rs::rotate).
    RotateToken { agent: String },
}

/// An action and when it happens.
#[derive(Debug, Clone)]
pub struct Step {
    pub at_ms: u64,
    pub action: Action,
}

/// One workload's plan against one runtime node.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Name of the runtime node it talks to (for the oracle).
    pub target: &'static str,
    pub addr: SocketAddr,
    /// What to do, in time order. Shared: the node's init clones the workload at every start,
    /// and a day of a fleet's pulse batches is many steps.
    pub steps: std::sync::Arc<[Step]>,
    pub probe_every_ms: u64,
    pub tail_every_ms: u64,
    /// The workload stops at this virtual instant.
    pub until_ms: u64,
    /// While non-zero, each pulse is dropped at its source with this chance in thousandths
    /// (the `pulse_loss` fault sets it).
    pub pulse_loss: std::sync::Arc<std::sync::atomic::AtomicU16>,
    /// Seeds the pulse drops' own random stream.
    pub pulse_drop_seed: u64,
    /// Readers of the live event stream (`sse_reader`), each with its own seed for its drops.
    pub sse_readers: Vec<u64>,
}

/// Agent ids by name, as learnt from the API.
pub(crate) type Directory = Rc<RefCell<Names>>;

/// Agent ids by name, and how many times a name was given a new id: a batch's ids, resolved
/// once, stay right until that count moves.
#[derive(Default)]
pub struct Names {
    ids: BTreeMap<String, u64>,
    changes: u64,
}

impl Names {
    pub fn get(&self, name: &str) -> Option<&u64> {
        self.ids.get(name)
    }

    /// Learns `name`'s id; learning one already known changes nothing.
    pub fn insert(&mut self, name: String, id: u64) {
        if self.ids.insert(name, id) != Some(id) {
            self.changes += 1;
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.ids.keys()
    }
}

/// The ids of a shared batch list, as resolved against the directory after `changes` changes.
/// Why: a host sends the same list of up to hundreds of names every few seconds, and looking
/// each name up in the directory was 5 % of a simulated Heart fleet-day (callgrind).
struct ResolvedBatch {
    agents: std::sync::Arc<[String]>,
    changes: u64,
    ids: Vec<u64>,
}

impl ResolvedBatch {
    /// `agents`' ids (those the directory knows, in list order), resolved again only when the
    /// directory changed since that list was last resolved. `memo` holds one entry per list.
    fn ids(
        memo: &mut Vec<ResolvedBatch>,
        agents: &std::sync::Arc<[String]>,
        directory: &Names,
    ) -> Vec<u64> {
        let at = match memo
            .iter()
            .position(|m| std::sync::Arc::ptr_eq(&m.agents, agents))
        {
            Some(at) => at,
            None => {
                memo.push(ResolvedBatch {
                    agents: agents.clone(),
                    // Never a directory's count: resolved below.
                    changes: u64::MAX,
                    ids: Vec::new(),
                });
                memo.len() - 1
            }
        };
        let entry = &mut memo[at];
        if entry.changes != directory.changes {
            entry.ids = agents
                .iter()
                .filter_map(|a| directory.get(a).copied())
                .collect();
            entry.changes = directory.changes;
        }
        entry.ids.clone()
    }
}

impl Workload {
    /// Runs the plan to its end (or until an invariant breaks).
    pub async fn run(self, recorder: Recorder) {
        let client = OperatorClient::new(self.addr, recorder.clone());
        // Hosts pulse every few seconds over connections they keep open.
        let pulser = client.clone().keeping_connections();
        let directory: Directory = Rc::default();
        let mut steps = self.steps.iter().peekable();
        let mut next_probe_ms = self.probe_every_ms;
        let mut next_tail_ms = self.tail_every_ms;
        let mut tailed_seq = 0;
        let mut resolved: Vec<ResolvedBatch> = Vec::new();
        let mut pulse_drops = {
            use rand::SeedableRng;
            rand_chacha::ChaCha8Rng::seed_from_u64(self.pulse_drop_seed)
        };
        for seed in &self.sse_readers {
            use rand::SeedableRng;
            let rng = rand_chacha::ChaCha8Rng::seed_from_u64(*seed);
            madsim::task::spawn_local(crate::sse_reader::run(
                self.addr,
                recorder.clone(),
                rng,
                self.until_ms,
            ));
        }
        loop {
            let next_step_ms = steps.peek().map_or(u64::MAX, |s| s.at_ms);
            let next_ms = next_step_ms.min(next_probe_ms).min(next_tail_ms);
            if next_ms >= self.until_ms || !sleep_until_ms(&recorder, next_ms).await {
                return;
            }
            if next_ms == next_step_ms {
                let step = steps.next().expect("peeked");
                match &step.action {
                    Action::CreateAgent { spec } => {
                        self.create(&client, &recorder, &directory, spec).await;
                    }
                    Action::PauseHeartbeats { agent, minutes } => {
                        let body = serde_json::json!({ "minutes": minutes });
                        let pause = post_to_agent(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                            "pause_heartbeats",
                            body,
                        );
                        madsim::task::spawn_local(pause);
                    }
                    Action::Pulse { agent } => {
                        // Draws only while pulse loss is in force, so a world without it keeps
                        // its trace.
                        let loss = self.pulse_loss.load(std::sync::atomic::Ordering::SeqCst);
                        if loss > 0 && {
                            use rand::Rng;
                            pulse_drops.gen_range(0..1_000) < loss
                        } {
                            continue;
                        }
                        let id = directory.borrow().get(agent).copied();
                        // Before its creation is answered an agent has nothing to pulse to.
                        if let Some(id) = id {
                            madsim::task::spawn_local(pulse(pulser.clone(), recorder.clone(), id));
                        }
                    }
                    Action::PulseBatch { agents } => {
                        let ids =
                            ResolvedBatch::ids(&mut resolved, agents, &directory.borrow());
                        if !ids.is_empty() {
                            madsim::task::spawn_local(pulse_batch(
                                pulser.clone(),
                                recorder.clone(),
                                ids,
                            ));
                        }
                    }
                    Action::Input { agent, text } => {
                        let input = post_to_agent(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                            "input",
                            serde_json::json!({ "text": text }),
                        );
                        madsim::task::spawn_local(input);
                    }
                    Action::Pause { agent, minutes } => {
                        let pause = post_to_agent(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                            "pause",
                            serde_json::json!({ "minutes": minutes }),
                        );
                        madsim::task::spawn_local(pause);
                    }
                    Action::ResetError { agent } | Action::Terminate { agent } => {
                        let path = match &step.action {
                            Action::ResetError { .. } => "error/reset",
                            _ => "terminate",
                        };
                        let post = post_to_agent(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                            path,
                            serde_json::json!({}),
                        );
                        madsim::task::spawn_local(post);
                    }
                    Action::CancelRunning { agent } => {
                        let id = directory.borrow().get(agent).copied();
                        if let Some(id) = id {
                            madsim::task::spawn_local(cancel_running(client.clone(), id));
                        }
                    }
                    Action::DefineHeartbeat { agent, definition } => {
                        madsim::task::spawn_local(define_heartbeat(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                            definition.clone(),
                        ));
                    }
                    Action::Submit { kind, agent, body } => {
                        crate::edges::submit(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            *kind,
                            agent.clone(),
                            body.clone(),
                        )
                        .await;
                    }
                    Action::RotateToken { agent } => {
                        crate::edges::rotate(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                        )
                        .await;
                    }
                    Action::ReadHistory { agent } => {
                        read_history(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                        )
                        .await;
                    }
                    Action::ShowSpec { agent } => {
                        crate::edges::show(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                        )
                        .await;
                    }
                    Action::ShowTimeline {
                        agent,
                        since_ms,
                        limit,
                    } => {
                        crate::edges::timeline(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                            *since_ms,
                            *limit,
                        )
                        .await;
                    }
                    Action::Wake { agent, request } => {
                        let wake = wake(
                            self.until_ms,
                            client.clone(),
                            recorder.clone(),
                            directory.clone(),
                            agent.clone(),
                            request.clone(),
                        );
                        madsim::task::spawn_local(wake);
                    }
                }
            } else if next_ms == next_probe_ms {
                self.probe(&client, &recorder).await;
                next_probe_ms = elapsed_ms() + self.probe_every_ms;
            } else {
                tailed_seq = self.tail(&client, &recorder, tailed_seq).await;
                next_tail_ms = elapsed_ms() + self.tail_every_ms;
            }
        }
    }

    /// Registers one agent, retrying until the node answers. A 409 means an earlier attempt was
    /// committed but its answer lost in a crash: the agent exists, though it was never acked.
    async fn create(
        &self,
        client: &OperatorClient,
        recorder: &Recorder,
        directory: &Directory,
        spec: &serde_json::Value,
    ) {
        let name = spec["name"]
            .as_str()
            .expect("specs name their agent")
            .to_string();
        loop {
            if recorder.failed() || elapsed_ms() >= self.until_ms {
                return;
            }
            match client.post_json("/v1/agents", spec).await {
                Ok(answer) if answer.status.as_u16() == 201 => {
                    let json = answer.json().expect("201 answers are JSON");
                    let agent = json["agent"]["id"].as_u64().expect("agent id");
                    directory.borrow_mut().insert(name.clone(), agent);
                    recorder.record(
                        "workload",
                        TraceEvent::AckedCreate {
                            name,
                            agent,
                            seq: json["seq"].as_u64().expect("seq"),
                        },
                    );
                    return;
                }
                Ok(answer) if answer.status.as_u16() == 409 => {
                    learn_ids(self.until_ms, client, directory).await;
                    return;
                }
                Ok(answer) if answer.status.is_client_error() => {
                    panic!(
                        "workload sent a bad request: {} {:?}",
                        answer.status, answer.body
                    )
                }
                _ => tokio::time::sleep(Duration::from_millis(RETRY_MS)).await,
            }
        }
    }
}

/// Sends one wakeup until a 2xx answer, then records the acknowledgement. A retry carries the
/// same body, so a keyed wakeup is retried under its idempotency key.
async fn wake(
    until_ms: u64,
    client: OperatorClient,
    recorder: Recorder,
    directory: Directory,
    agent: String,
    request: serde_json::Value,
) {
    let answered = post_to_agent(
        until_ms,
        client,
        recorder.clone(),
        directory,
        agent,
        "wakeup",
        request,
    )
    .await;
    if let Some((id, json)) = answered {
        recorder.record(
            "workload",
            TraceEvent::AckedWakeup {
                agent: id,
                wakeup: json["wakeup"].as_u64().expect("wakeup id"),
                idempotency_key: json["idempotency_key"].as_str().map(str::to_string),
                replayed: json["replayed"].as_bool().expect("replayed"),
            },
        );
    }
}

/// Defines a heartbeat of agent `agent` until the node answers 201, or 409 (defined already by
/// an attempt whose answer was lost).
async fn define_heartbeat(
    until_ms: u64,
    client: OperatorClient,
    recorder: Recorder,
    directory: Directory,
    agent: String,
    mut definition: serde_json::Value,
) {
    loop {
        if recorder.failed() || elapsed_ms() >= until_ms {
            return;
        }
        let id = directory.borrow().get(&agent).copied();
        let Some(id) = id else {
            // The agent's creation has not been answered yet.
            learn_ids(until_ms, &client, &directory).await;
            tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
            continue;
        };
        definition["agent"] = id.into();
        match client.post_json("/v1/heartbeats", &definition).await {
            Ok(answer) if answer.status.as_u16() == 201 || answer.status.as_u16() == 409 => return,
            Ok(answer) if answer.status.is_client_error() => panic!(
                "workload sent a bad heartbeat: {} {:?}",
                answer.status, answer.body
            ),
            _ => tokio::time::sleep(Duration::from_millis(RETRY_MS)).await,
        }
    }
}

/// Cancels agent `agent`'s running run, if the node names one (one attempt each; a run that
/// ended meanwhile answers 409).
async fn cancel_running(client: OperatorClient, agent: u64) {
    let Ok(answer) = client.get(&format!("/v1/runs?agent={agent}&status=running")).await else {
        return;
    };
    if !answer.status.is_success() {
        return;
    }
    let json = answer.json().expect("run lists are JSON");
    let Some(run) = json["runs"].as_array().and_then(|runs| runs.first()) else {
        return;
    };
    let run = run["id"].as_u64().expect("run id");
    let path = format!("/v1/runs/{run}/cancel");
    if let Ok(answer) = client.post_json(&path, &serde_json::json!({})).await {
        let refused = answer.status.is_client_error() && answer.status.as_u16() != 409;
        assert!(!refused, "workload sent a bad cancel: {} {:?}", answer.status, answer.body);
    }
}

/// The part of a history answer the workload reads.
#[derive(serde::Deserialize)]
struct ShownHistory {
    messages: Vec<vigil::engine::history::HistoryMessage>,
    bytes: usize,
}

/// GETs `path` until the node answers 2xx (after no answer or any other status, again in
/// [`RETRY_MS`]): the answer and when its request was sent; `None` once the workload's time is
/// up or an invariant broke.
pub(crate) async fn get_until_answered(
    until_ms: u64,
    client: &OperatorClient,
    recorder: &Recorder,
    path: &str,
) -> Option<(u64, vigil::api::client::Answer)> {
    loop {
        if recorder.failed() || elapsed_ms() >= until_ms {
            return None;
        }
        let sent_ms = elapsed_ms();
        match client.get(path).await {
            Ok(answer) if answer.status.is_success() => return Some((sent_ms, answer)),
            _ => tokio::time::sleep(Duration::from_millis(RETRY_MS)).await,
        }
    }
}

/// Reads the history of the agent called `agent` until answered; records what it showed.
async fn read_history(
    until_ms: u64,
    client: OperatorClient,
    recorder: Recorder,
    directory: Directory,
    agent: String,
) {
    let Some(id) = directory.borrow().get(&agent).copied() else {
        return;
    };
    let path = format!("/v1/agents/{id}/history");
    let Some((sent_ms, answer)) = get_until_answered(until_ms, &client, &recorder, &path).await
    else {
        return;
    };
    let shown: ShownHistory = serde_json::from_slice(&answer.body).expect("a history is JSON");
    let messages = shown
        .messages
        .iter()
        .map(|m| (m.role, crate::trace::text_digest(&m.text), m.text.len()))
        .collect();
    recorder.record(
        "workload",
        TraceEvent::HistoryShown {
            agent: id,
            sent_ms,
            messages,
            bytes: shown.bytes,
        },
    );
}

/// Sends one pulse; records its acknowledgement with the instant it was sent.
async fn pulse(client: OperatorClient, recorder: Recorder, agent: u64) {
    let sent_ms = elapsed_ms();
    let answer = client
        .request(
            hyper::Method::POST,
            &format!("/v1/agents/{agent}/pulse"),
            None,
        )
        .await;
    if recorder.failed() {
        return;
    }
    let Ok(answer) = answer else {
        recorder.record("workload", TraceEvent::UnansweredPulse { agent, sent_ms });
        return;
    };
    if answer.status.is_success() {
        recorder.record("workload", TraceEvent::AckedPulse { agent, sent_ms });
    } else if answer.status.is_server_error() {
        recorder.record("workload", TraceEvent::UnansweredPulse { agent, sent_ms });
    } else if answer.status.is_client_error() {
        panic!(
            "workload sent a bad pulse: {} {:?}",
            answer.status, answer.body
        );
    }
}

/// Sends one batch of pulses; records the batch's acknowledgement with the send instant.
async fn pulse_batch(client: OperatorClient, recorder: Recorder, agents: Vec<u64>) {
    let sent_ms = elapsed_ms();
    // `{"agents":[1,2,…]}`, the bytes `serde_json` writes, without building a `Value` (a fleet
    // sends tens of thousands of batches a day).
    let mut body = String::from("{\"agents\":[");
    for (i, agent) in agents.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        let _ = std::fmt::Write::write_fmt(&mut body, format_args!("{agent}"));
    }
    body.push_str("]}");
    let answer = client
        .request(hyper::Method::POST, "/v1/pulses", Some(body.into_bytes()))
        .await;
    if recorder.failed() {
        return;
    }
    let Ok(answer) = answer else {
        recorder.record("workload", TraceEvent::UnansweredPulses { sent_ms });
        return;
    };
    if answer.status.is_success() {
        recorder.record("workload", TraceEvent::AckedPulses { agents, sent_ms });
    } else if answer.status.is_server_error() {
        recorder.record("workload", TraceEvent::UnansweredPulses { sent_ms });
    } else if answer.status.is_client_error() {
        panic!(
            "workload sent a bad pulse batch: {} {:?}",
            answer.status, answer.body
        );
    }
}

/// The part of a `GET /v1/agents` page a probe reads.
#[derive(serde::Deserialize)]
struct ProbedListing {
    now_ms: u64,
    agents: Vec<ProbedAgent>,
    next_after: Option<u64>,
}

/// Agents per page the workload asks for (the API's largest page, `AGENTS_PAGE_MAX`).
const AGENTS_PAGE: usize = vigil::api::AGENTS_PAGE_MAX;

/// Every agent of the node's list, page by page: (id, name, next timer slot), with the first
/// page's `now_ms` (the earliest: a timer that fires while later pages are read only moves its
/// slot on). `None` if the node does not answer a page.
async fn read_agent_list(client: &OperatorClient) -> Option<(u64, Vec<(u64, String, Option<u64>)>)> {
    let mut agents = Vec::new();
    let mut first_now_ms = None;
    let mut after = 0;
    loop {
        // Brief: the probe reads ids, names and slots, not the specs that are most of a whole
        // view's bytes (a whole listing, read every 10 minutes, was about 5 % of a fleet's day).
        let path = if after == 0 {
            "/v1/agents?view=brief".to_string()
        } else {
            format!("/v1/agents?view=brief&limit={AGENTS_PAGE}&after={after}")
        };
        let answer = client.get(&path).await.ok()?;
        if !answer.status.is_success() {
            return None;
        }
        // Typed: only the fields the probe reads are decoded.
        let page: ProbedListing =
            serde_json::from_slice(&answer.body).expect("agent lists are JSON");
        first_now_ms.get_or_insert(page.now_ms);
        agents.extend(page.agents.into_iter().map(|a| (a.id, a.name, a.next_fire_at_ms)));
        match page.next_after {
            Some(next) => after = next,
            None => return Some((first_now_ms?, agents)),
        }
    }
}

/// The part of one agent's view a probe reads.
#[derive(serde::Deserialize)]
struct ProbedAgent {
    id: u64,
    name: String,
    next_fire_at_ms: Option<u64>,
}

/// The part of a `GET /v1/events` page the tail reads: each event's JSON as the node wrote it.
#[derive(serde::Deserialize)]
struct EventPage<'a> {
    #[serde(borrow)]
    events: Vec<&'a serde_json::value::RawValue>,
}

/// An event's position, read from its JSON (the rest is skipped, not decoded).
#[derive(serde::Deserialize)]
struct EventSeq {
    seq: u64,
}

impl Workload {
    /// Reads the agent list once, every page of it (skipped if the node does not answer one).
    async fn probe(&self, client: &OperatorClient, recorder: &Recorder) {
        let Some((now_ms, agents)) = read_agent_list(client).await else {
            return;
        };
        recorder.record(
            "workload",
            TraceEvent::Probe {
                target: self.target,
                now_ms,
                agents,
            },
        );
    }

    /// Reads the feed after `after` until caught up; returns the last seq read.
    async fn tail(&self, client: &OperatorClient, recorder: &Recorder, mut after: u64) -> u64 {
        loop {
            let path = format!("/v1/events?after={after}&limit={TAIL_PAGE_EVENTS}");
            let Ok(answer) = client.get(&path).await else {
                return after;
            };
            if !answer.status.is_success() {
                return after;
            }
            // Each event is digested as the bytes the node sent, not decoded and written
            // again: the node writes an event exactly as `event_digest` does (serde_json's
            // compact writer), so a digest that differs is an event that differs. Decoding
            // each event and writing it again was about 5 % of a simulated fleet-day.
            let page: EventPage =
                serde_json::from_slice(&answer.body).expect("event pages decode");
            let events: Vec<(u64, u64)> = page
                .events
                .iter()
                .map(|raw| {
                    let seq: EventSeq =
                        serde_json::from_str(raw.get()).expect("every event has its seq");
                    (seq.seq, sent_event_digest(raw.get()))
                })
                .collect();
            let Some(&(last, _)) = events.last() else {
                return after;
            };
            let read = events.len();
            recorder.record("workload", TraceEvent::StreamPage { after, events });
            after = last;
            if read < TAIL_PAGE_EVENTS {
                return after;
            }
        }
    }
}

/// A wakeup storm (fault `wakeup_burst`): `wakes` on-demand wakeups sent at once to the
/// node's agents (which ones, and their task keys, drawn from `pick`), each retried until
/// answered and its acknowledgement recorded like any other.
pub async fn wakeup_burst(
    addr: SocketAddr,
    recorder: Recorder,
    wakes: u32,
    task_keys: u32,
    pick: u64,
    until_ms: u64,
) {
    use rand::{Rng, SeedableRng};
    let client = OperatorClient::new(addr, recorder.clone());
    let directory: Directory = Rc::default();
    learn_ids(until_ms, &client, &directory).await;
    let names: Vec<String> = directory.borrow().keys().cloned().collect();
    if names.is_empty() {
        return;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(pick);
    for w in 0..wakes {
        let agent = names[rng.gen_range(0..names.len())].clone();
        let request = serde_json::json!({
            "source": "on_demand",
            "reason": format!("storm wake {w}"),
            "task_key": format!("storm-{}", rng.gen_range(0..task_keys.max(1))),
        });
        madsim::task::spawn_local(wake(
            until_ms,
            client.clone(),
            recorder.clone(),
            directory.clone(),
            agent,
            request,
        ));
    }
}

/// A wakeup storm (fault `aligned_timers`): `agents` agents registered at once, every one on
/// the same `interval_ms`, named after `tag`.
pub async fn aligned_timers(
    target: &'static str,
    addr: SocketAddr,
    recorder: Recorder,
    agents: u32,
    interval_ms: u64,
    tag: u64,
    until_ms: u64,
) {
    let workload = Workload {
        target,
        addr,
        steps: std::sync::Arc::from([]),
        probe_every_ms: u64::MAX,
        tail_every_ms: u64::MAX,
        until_ms,
        pulse_loss: Default::default(),
        pulse_drop_seed: 0,
        sse_readers: Vec::new(),
    };
    let client = OperatorClient::new(addr, recorder.clone());
    let directory: Directory = Rc::default();
    for i in 0..agents {
        let spec = serde_json::json!({
            "name": format!("aligned-{tag}-{i}"),
            "heartbeat": { "interval_ms": interval_ms },
            "adapter": { "type": "scripted", "steps": [
                { "duration_ms": 1_000, "outcome": "succeeded" },
            ]},
        });
        workload.create(&client, &recorder, &directory, &spec).await;
    }
}

/// Fills the directory from the agent list (after a create whose answer was lost).
pub(crate) async fn learn_ids(until_ms: u64, client: &OperatorClient, directory: &Directory) {
    loop {
        if let Some((_, agents)) = read_agent_list(client).await {
            let mut directory = directory.borrow_mut();
            for (id, name, _) in agents {
                directory.insert(name, id);
            }
            return;
        }
        if elapsed_ms() >= until_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
    }
}

/// Posts `body` to `/v1/agents/{id}/{action}` until a 2xx answer; returns the agent's id and
/// the answer, or nothing if the run ended first.
async fn post_to_agent(
    until_ms: u64,
    client: OperatorClient,
    recorder: Recorder,
    directory: Directory,
    agent: String,
    action: &'static str,
    body: serde_json::Value,
) -> Option<(u64, serde_json::Value)> {
    loop {
        if recorder.failed() || elapsed_ms() >= until_ms {
            return None;
        }
        let id = directory.borrow().get(&agent).copied();
        let Some(id) = id else {
            // The agent's creation has not been answered yet.
            learn_ids(until_ms, &client, &directory).await;
            tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
            continue;
        };
        match client
            .post_json(&format!("/v1/agents/{id}/{action}"), &body)
            .await
        {
            Ok(answer) if answer.status.is_success() => {
                return Some((id, answer.json().expect("answers are JSON")));
            }
            Ok(answer) if answer.status.is_client_error() => {
                panic!(
                    "workload sent a bad {action}: {} {:?}",
                    answer.status, answer.body
                )
            }
            _ => tokio::time::sleep(Duration::from_millis(RETRY_MS)).await,
        }
    }
}
