//! The workload: what users and operators do to a runtime node, over the simulated network with
//! real HTTP. It registers agents (recording each acknowledgement), probes the agent list, and
//! tails the event feed, so the oracle can judge what an outside client saw.

use std::net::SocketAddr;
use std::time::Duration;

use vigil::api::client::ApiClient;
use vigil::engine::event::Event;

use crate::harness::{elapsed_ms, sleep_until_ms};
use crate::recorder::Recorder;
use crate::trace::{event_digest, TraceEvent};

/// Pause before retrying a request that got no answer or a 5xx.
const RETRY_MS: u64 = 2_000;
/// Largest page the workload asks for when tailing the feed.
const TAIL_PAGE_EVENTS: usize = 1_000;

/// An agent the workload registers at a virtual instant.
#[derive(Debug, Clone)]
pub struct AgentToCreate {
    pub at_ms: u64,
    pub name: String,
    pub interval_ms: u64,
}

/// One workload's plan against one runtime node.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Name of the runtime node it talks to (for the oracle).
    pub target: &'static str,
    pub addr: SocketAddr,
    /// Agents to register, in time order.
    pub agents: Vec<AgentToCreate>,
    pub probe_every_ms: u64,
    pub tail_every_ms: u64,
    /// The workload stops at this virtual instant.
    pub until_ms: u64,
}

impl Workload {
    /// Runs the plan to its end (or until an invariant breaks).
    pub async fn run(self, recorder: Recorder) {
        let client = ApiClient::new(self.addr);
        let mut creations = self.agents.iter().peekable();
        let mut next_probe_ms = self.probe_every_ms;
        let mut next_tail_ms = self.tail_every_ms;
        let mut tailed_seq = 0;
        loop {
            let next_create_ms = creations.peek().map_or(u64::MAX, |a| a.at_ms);
            let next_ms = next_create_ms.min(next_probe_ms).min(next_tail_ms);
            if next_ms >= self.until_ms || !sleep_until_ms(&recorder, next_ms).await {
                return;
            }
            if next_ms == next_create_ms {
                let agent = creations.next().expect("peeked");
                self.create(&client, &recorder, agent).await;
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
    async fn create(&self, client: &ApiClient, recorder: &Recorder, agent: &AgentToCreate) {
        let body = serde_json::json!({ "name": agent.name, "interval_ms": agent.interval_ms });
        loop {
            if recorder.failed() || elapsed_ms() >= self.until_ms {
                return;
            }
            match client.post_json("/v1/agents", &body).await {
                Ok(answer) if answer.status.as_u16() == 201 => {
                    let json = answer.json().expect("201 answers are JSON");
                    recorder.record(
                        "workload",
                        TraceEvent::AckedCreate {
                            name: agent.name.clone(),
                            agent: json["agent"]["id"].as_u64().expect("agent id"),
                            seq: json["seq"].as_u64().expect("seq"),
                        },
                    );
                    return;
                }
                Ok(answer) if answer.status.as_u16() == 409 => return,
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

    /// Reads the agent list once (skipped if the node does not answer).
    async fn probe(&self, client: &ApiClient, recorder: &Recorder) {
        let Ok(answer) = client.get("/v1/agents").await else {
            return;
        };
        if !answer.status.is_success() {
            return;
        }
        let json = answer.json().expect("agent lists are JSON");
        let agents = json["agents"]
            .as_array()
            .expect("agents array")
            .iter()
            .map(|a| {
                (
                    a["id"].as_u64().expect("id"),
                    a["name"].as_str().expect("name").to_string(),
                    a["next_fire_at_ms"].as_u64().expect("next_fire_at_ms"),
                )
            })
            .collect();
        let now_ms = json["now_ms"].as_u64().expect("now_ms");
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
    async fn tail(&self, client: &ApiClient, recorder: &Recorder, mut after: u64) -> u64 {
        loop {
            let path = format!("/v1/events?after={after}&limit={TAIL_PAGE_EVENTS}");
            let Ok(answer) = client.get(&path).await else {
                return after;
            };
            if !answer.status.is_success() {
                return after;
            }
            let json = answer.json().expect("event pages are JSON");
            let events: Vec<Event> =
                serde_json::from_value(json["events"].clone()).expect("events decode");
            if events.is_empty() {
                return after;
            }
            let page = events.iter().map(|e| (e.seq, event_digest(e))).collect();
            recorder.record(
                "workload",
                TraceEvent::StreamPage {
                    after,
                    events: page,
                },
            );
            after = events.last().map_or(after, |e| e.seq);
            if events.len() < TAIL_PAGE_EVENTS {
                return after;
            }
        }
    }
}
