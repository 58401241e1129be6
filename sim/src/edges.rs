//! The `edges` workload's requests: agent specs, spec changes, wakeups, pauses and pulses whose values
//! sit at and just past the limits docs/api.md documents, each sent until it gets an answer that
//! is not a server error, then recorded whole with that answer ([`TraceEvent::EdgeAnswered`]);
//! and reads of the specs the node shows ([`TraceEvent::SpecShown`]). What each answer should
//! have been is the oracle's to say (check/edges.rs), from its own restatement of the limits.

use std::time::Duration;

use hyper::Method;

use crate::harness::elapsed_ms;
use crate::operator_client::OperatorClient;
use crate::recorder::Recorder;
use crate::trace::{EdgeKind, TimelineSeen, TraceEvent};
use crate::workload::{get_until_answered, learn_ids, Directory};

/// Pause before sending a request again after no answer or a server error.
const RETRY_MS: u64 = 2_000;

/// Sends `body` as a `kind` request about `agent` (by name; none for a creation) until it is
/// answered with anything but a server error, then records the answer. A creation answered 201
/// or a wakeup answered 2xx is also recorded as acknowledged, for the durability checks.
pub async fn submit(
    until_ms: u64,
    client: OperatorClient,
    recorder: Recorder,
    directory: Directory,
    kind: EdgeKind,
    agent: Option<String>,
    mut body: serde_json::Value,
) {
    let mut attempts = 0;
    let seq_before = recorder.durable_events();
    loop {
        if recorder.failed() || elapsed_ms() >= until_ms {
            return;
        }
        let Some(path) = path_of(kind, agent.as_deref(), &directory) else {
            // The agent's creation has not been answered yet.
            learn_ids(until_ms, &client, &directory).await;
            tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
            continue;
        };
        // A heartbeat names its agent by id in the body, known only now.
        if let (EdgeKind::Heartbeat, Some(id)) = (kind, id_of(agent.as_deref(), &directory)) {
            body["agent"] = serde_json::json!(id);
        }
        let bytes = body.to_string().into_bytes();
        let method = match kind {
            EdgeKind::Patch => Method::PATCH,
            _ => Method::POST,
        };
        attempts += 1;
        let sent_ms = elapsed_ms();
        let answer = match client.request(method, &path, Some(bytes.clone())).await {
            Ok(answer) if !answer.status.is_server_error() => answer,
            _ => {
                // A pulse without an answer may have reached the node: the liveness checks
                // must know (check/phi.rs).
                if let (EdgeKind::Pulse, Some(agent)) = (kind, id_of(agent.as_deref(), &directory))
                {
                    recorder.record("workload", TraceEvent::UnansweredPulse { agent, sent_ms });
                }
                tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
                continue;
            }
        };
        let json = answer.json().unwrap_or(serde_json::Value::Null);
        let status = answer.status.as_u16();
        acknowledge(kind, status, &json, &body, &recorder, &directory, sent_ms);
        if kind == EdgeKind::Create && status == 409 {
            // An earlier attempt was committed but its answer lost: learn the agent's id.
            learn_ids(until_ms, &client, &directory).await;
        }
        let error = &json["error"];
        let shows_agent = matches!(
            kind,
            EdgeKind::Pause | EdgeKind::PauseHeartbeats | EdgeKind::Resume
        );
        recorder.record(
            "workload",
            TraceEvent::EdgeAnswered {
                kind,
                agent,
                body,
                status,
                code: error["code"].as_str().map(str::to_string),
                field: error["field"].as_str().map(str::to_string),
                attempts,
                seq_before,
                paused_until_ms: json["paused_until_ms"].as_u64().filter(|_| shows_agent),
                shown: (kind == EdgeKind::Heartbeat && (200..300).contains(&status))
                    .then(|| json["heartbeat"].clone()),
            },
        );
        return;
    }
}

/// The request's path, once the agent it is about has a known id.
fn path_of(kind: EdgeKind, agent: Option<&str>, directory: &Directory) -> Option<String> {
    if kind == EdgeKind::Create {
        return Some("/v1/agents".into());
    }
    let id = id_of(agent, directory)?;
    Some(match kind {
        EdgeKind::Create => unreachable!("handled above"),
        EdgeKind::Patch => format!("/v1/agents/{id}"),
        EdgeKind::Wake => format!("/v1/agents/{id}/wakeup"),
        EdgeKind::Pause => format!("/v1/agents/{id}/pause"),
        EdgeKind::PauseHeartbeats => format!("/v1/agents/{id}/pause_heartbeats"),
        EdgeKind::Resume => format!("/v1/agents/{id}/resume"),
        EdgeKind::Pulse => format!("/v1/agents/{id}/pulse"),
        EdgeKind::Heartbeat => "/v1/heartbeats".to_string(),
    })
}

/// The id of the agent called `agent`, once known.
fn id_of(agent: Option<&str>, directory: &Directory) -> Option<u64> {
    directory.borrow().get(agent?).copied()
}

/// Records what the other checks judge of a 2xx: an acknowledged creation, wakeup or pulse
/// (sent at `sent_ms`).
fn acknowledge(
    kind: EdgeKind,
    status: u16,
    json: &serde_json::Value,
    body: &serde_json::Value,
    recorder: &Recorder,
    directory: &Directory,
    sent_ms: u64,
) {
    match kind {
        EdgeKind::Create if status == 201 => {
            let name = body["name"].as_str().expect("specs name their agent");
            let agent = json["agent"]["id"].as_u64().expect("agent id");
            directory.borrow_mut().insert(name.to_string(), agent);
            recorder.record(
                "workload",
                TraceEvent::AckedCreate {
                    name: name.to_string(),
                    agent,
                    seq: json["seq"].as_u64().expect("seq"),
                },
            );
        }
        EdgeKind::Wake if (200..300).contains(&status) => recorder.record(
            "workload",
            TraceEvent::AckedWakeup {
                agent: json["agent"].as_u64().expect("the wakeup's agent"),
                wakeup: json["wakeup"].as_u64().expect("wakeup id"),
                idempotency_key: json["idempotency_key"].as_str().map(str::to_string),
                replayed: json["replayed"].as_bool().expect("replayed"),
            },
        ),
        EdgeKind::Pulse if (200..300).contains(&status) => recorder.record(
            "workload",
            TraceEvent::AckedPulse {
                agent: json["agent"].as_u64().expect("the pulse's agent"),
                sent_ms,
            },
        ),
        _ => {}
    }
}

/// Reads the agent called `agent` until answered, and records the spec it shows. Nothing is
/// recorded for an agent whose id is not known yet.
pub async fn show(
    until_ms: u64,
    client: OperatorClient,
    recorder: Recorder,
    directory: Directory,
    agent: String,
) {
    let Some(id) = directory.borrow().get(&agent).copied() else {
        return;
    };
    let path = format!("/v1/agents/{id}");
    let Some((_, answer)) = get_until_answered(until_ms, &client, &recorder, &path).await else {
        return;
    };
    let json = answer.json().expect("an agent is JSON");
    recorder.record(
        "workload",
        TraceEvent::SpecShown {
            agent,
            spec: json["spec"].clone(),
        },
    );
}

/// Reads one page of the timeline of the agent called `agent` from `since_ms` until answered,
/// and records it ([`TraceEvent::TimelineShown`]). Nothing is recorded for an agent whose id is
/// not known yet.
pub async fn timeline(
    until_ms: u64,
    client: OperatorClient,
    recorder: Recorder,
    directory: Directory,
    agent: String,
    since_ms: u64,
    limit: usize,
) {
    let Some(id) = directory.borrow().get(&agent).copied() else {
        return;
    };
    let path = format!("/v1/agents/{id}/timeline?since_ms={since_ms}&limit={limit}");
    let Some((_, answer)) = get_until_answered(until_ms, &client, &recorder, &path).await else {
        return;
    };
    let json = answer.json().expect("a timeline is JSON");
    let entries = json["entries"]
        .as_array()
        .expect("a timeline has entries")
        .iter()
        .map(|entry| TimelineSeen {
            seq: entry["seq"].as_u64().expect("an entry's seq"),
            at_ms: entry["at_ms"].as_u64().expect("an entry's at_ms"),
            kind: entry["type"].as_str().expect("an entry's type").to_string(),
        })
        .collect();
    recorder.record(
        "workload",
        TraceEvent::TimelineShown {
            agent: id,
            since_ms,
            limit,
            entries,
            next_after: json["next_after"].as_u64().expect("next_after"),
            head_seq: json["head_seq"].as_u64().expect("head_seq"),
        },
    );
}

/// Rotations of one agent's token in a [`rotate`] action: the second shows whether the first
/// token stopped working.
const ROTATIONS: usize = 2;

/// Replaces the token of the agent called `agent` [`ROTATIONS`] times, one after another. After
/// each 2xx answer it records what the answer gave ([`TraceEvent::TokenRotated`]), then reads
/// the agent with every token rotated so far and records each status
/// ([`TraceEvent::TokenUsed`]): the oracle holds the newest to 200 and the older ones to 401.
/// Nothing is recorded for an agent whose id is not known yet.
pub async fn rotate(
    until_ms: u64,
    client: OperatorClient,
    recorder: Recorder,
    directory: Directory,
    agent: String,
) {
    let Some(id) = directory.borrow().get(&agent).copied() else {
        return;
    };
    let mut tokens: Vec<(String, String)> = Vec::new();
    let (path, no_body) = (format!("/v1/agents/{id}/token"), serde_json::json!({}));
    for _ in 0..ROTATIONS {
        let Some(json) = answered(until_ms, &recorder, || client.post_json(&path, &no_body))
            .await
            .and_then(|(status, json)| (200..300).contains(&status).then_some(json))
        else {
            return;
        };
        let (Some(token), Some(seq)) = (json["token"].as_str(), json["seq"].as_u64()) else {
            return;
        };
        let token_sha256 = sha256_hex(token);
        recorder.record(
            "workload",
            TraceEvent::TokenRotated {
                agent: agent.clone(),
                seq,
                token_sha256: token_sha256.clone(),
            },
        );
        tokens.push((token.to_string(), token_sha256));
        for (token, token_sha256) in &tokens {
            let bearer = client.with_bearer(token);
            let path = format!("/v1/agents/{id}");
            let Some((status, _)) = answered(until_ms, &recorder, || bearer.get(&path)).await
            else {
                return;
            };
            recorder.record(
                "workload",
                TraceEvent::TokenUsed {
                    agent: agent.clone(),
                    token_sha256: token_sha256.clone(),
                    status,
                },
            );
        }
    }
}

/// Sends `request` until it is answered with anything but a server error or a rate limit:
/// the status and the body as JSON; none once the run is over.
async fn answered<F, Fut>(
    until_ms: u64,
    recorder: &Recorder,
    request: F,
) -> Option<(u16, serde_json::Value)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<
        Output = Result<vigil::api::client::Answer, vigil::api::client::ClientError>,
    >,
{
    loop {
        if recorder.failed() || elapsed_ms() >= until_ms {
            return None;
        }
        match request().await {
            Ok(answer) if !answer.status.is_server_error() && answer.status.as_u16() != 429 => {
                let json = answer.json().unwrap_or(serde_json::Value::Null);
                return Some((answer.status.as_u16(), json));
            }
            _ => tokio::time::sleep(Duration::from_millis(RETRY_MS)).await,
        }
    }
}

/// Lowercase hex SHA-256 of `token`, as the node stores an agent token's hash (docs/api.md).
pub fn sha256_hex(token: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
