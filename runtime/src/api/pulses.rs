//! Pulses (`POST /v1/agents/{id}/pulse`, `POST /v1/pulses`) and user input
//! (`POST /v1/agents/{id}/input`): the signals of the Heart that come from outside.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::Path;
use super::json::Json;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::agents::{optional_body, WakeAnswer};
use super::auth::{parse_id, Caller};
use super::body::parse_json;
use super::error::ApiError;
use crate::engine::agent::AgentId;
use crate::engine::liveness::{LastPulse, LivenessPolicy, LivenessStatus, PULSE_BATCH_MAX};
use crate::engine::pulse_report::{PulseReport, ReportedStatus};
use crate::engine::wakeup::{WakeupRequest, WakeupSource};

/// A single pulse: empty, or what the agent says of itself.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PulseRequest {
    /// `active`, `busy`, `idle` or `shutting_down`; kept until a pulse says otherwise.
    #[serde(default)]
    pub status: Option<ReportedStatus>,
    /// A small JSON object (at most `PULSE_METADATA_BYTES_MAX` bytes, `PULSE_METADATA_KEYS_MAX`
    /// keys, `PULSE_METADATA_DEPTH_MAX` levels); kept until a pulse sends another.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
}

impl PulseRequest {
    /// The report, its metadata checked; `prefix` places the fields (`agents[3].`) in errors.
    /// `prefix` names where the entry sits in the request (`agents[3].` in a batch); it is
    /// built only for a batch entry that carries metadata.
    fn into_report(self, prefix: impl FnOnce() -> String) -> Result<PulseReport, ApiError> {
        if let Some(metadata) = &self.metadata {
            PulseReport::validate_metadata(metadata, &format!("{}metadata", prefix()))
                .map_err(|e| ApiError::invalid_field(e.field, e.message))?;
        }
        Ok(PulseReport {
            status: self.status,
            metadata: self.metadata,
        })
    }
}

/// An agent's pulse as the API shows it: when it came, until when the agent is safe without
/// another, and what its pulses say.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PulseView {
    /// The node's wall clock when the latest pulse came.
    pub heartbeat_at_ms: u64,
    /// The earliest instant the agent can be suspected (and marked offline) without another
    /// pulse: its detector's floor after the pulse (the fixed threshold, or one interval for
    /// `phi_accrual`). Only pulses since the node started are known.
    pub next_deadline_ms: u64,
    /// The latest instant by which a silent agent is judged offline (its fixed threshold).
    pub offline_by_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ReportedStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
}

impl PulseView {
    /// The view of `last` for an agent judged by `policy`.
    pub fn of(last: LastPulse, policy: &LivenessPolicy) -> PulseView {
        PulseView::after(last, policy.floor_ms(), policy.threshold_ms())
    }

    /// The view of `last` for an agent whose detector's floor is `floor_ms` and whose fixed
    /// threshold is `threshold_ms`.
    pub fn after(last: LastPulse, floor_ms: u64, threshold_ms: u64) -> PulseView {
        PulseView {
            heartbeat_at_ms: last.at_ms,
            next_deadline_ms: last.at_ms.saturating_add(floor_ms),
            offline_by_ms: last.at_ms.saturating_add(threshold_ms),
            status: last.report.status,
            metadata: last.report.metadata,
        }
    }
}

/// The answer to a pulse: the agent's liveness after it, and its pulse as the node keeps it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PulseAnswer {
    pub agent: AgentId,
    pub liveness: LivenessStatus,
    #[serde(flatten)]
    pub pulse: PulseView,
    /// The log head after the pulse (a pulse writes only when the agent comes online).
    pub seq: u64,
}

/// `POST /v1/agents/{id}/pulse`, by the agent itself or its tenant's operator.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/pulse",
    tag = "pulses",
    params(super::openapi::AgentPath),
    request_body(content = Option<PulseRequest>, description = "No body: a bare pulse"),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The agent's liveness after the pulse", body = PulseAnswer),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn pulse(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PulseAnswer>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    let card = caller.pulse_card(agent)?;
    let request: PulseRequest = optional_body(body)?;
    let report = request.into_report(String::new)?;
    caller
        .shell
        .pulse(&[(agent, report)], crate::writer::WhenFull::Refuse)
        .await?;
    let last = caller
        .shell
        .last_pulse(agent)
        .expect("the pulse just taken is remembered");
    // Why from the card, not the agent's state: a taken pulse leaves the agent online (it was,
    // or the pulse committed `agent_online`), and the card holds the deadlines' two spans; the
    // state's look-up was the handler's largest cost (a profile of the `pulses` benchmark).
    Ok(Json(PulseAnswer {
        agent,
        liveness: LivenessStatus::Online,
        pulse: PulseView::after(last, card.floor_ms, card.threshold_ms),
        seq: caller.shell.head_seq(),
    }))
}

/// A host's batch: the agents it runs that are alive, each an id or an object
/// `{"id": N, "status": .., "metadata": {..}}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub agents: Vec<BatchEntry>,
}

/// One agent of a batch.
#[derive(Debug)]
pub struct BatchEntry {
    pub id: u64,
    pub request: PulseRequest,
}

/// A batch entry's schema: what its `Deserialize` takes, an id or an object.
impl utoipa::PartialSchema for BatchEntry {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::OneOfBuilder::new()
            .item(u64::schema())
            .item(utoipa::openapi::Ref::from_schema_name("BatchEntryObject"))
            .description(Some("An agent id, or an object with `id`, `status`, `metadata`"))
            .into()
    }
}

impl utoipa::ToSchema for BatchEntry {
    fn schemas(
        schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>,
    ) {
        use utoipa::PartialSchema;
        schemas.push(("BatchEntryObject".into(), BatchEntryObject::schema()));
        <BatchEntryObject as utoipa::ToSchema>::schemas(schemas);
    }
}

/// An entry with what the agent says.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchEntryObject {
    id: u64,
    #[serde(default)]
    status: Option<ReportedStatus>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Map<String, Value>>,
}

impl<'de> Deserialize<'de> for BatchEntry {
    /// A bare id, or an object; a bad field inside names itself (`agents[2].status`).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor;
        impl<'de> serde::de::Visitor<'de> for EntryVisitor {
            type Value = BatchEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "an agent id, or an object with `id` and optionally `status` and `metadata`",
                )
            }
            fn visit_u64<E: serde::de::Error>(self, id: u64) -> Result<BatchEntry, E> {
                Ok(BatchEntry {
                    id,
                    request: PulseRequest::default(),
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<BatchEntry, A::Error> {
                let object = BatchEntryObject::deserialize(
                    serde::de::value::MapAccessDeserializer::new(map),
                )?;
                Ok(BatchEntry {
                    id: object.id,
                    request: PulseRequest {
                        status: object.status,
                        metadata: object.metadata,
                    },
                })
            }
        }
        deserializer.deserialize_any(EntryVisitor)
    }
}

/// One agent's line in a batch's answer.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct BatchPulse {
    pub agent: AgentId,
    pub next_deadline_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ReportedStatus>,
}

/// The answer to a batch.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchAnswer {
    /// Pulses taken (one per distinct agent).
    pub accepted: usize,
    /// Agents that came online with this batch.
    pub came_online: Vec<AgentId>,
    /// The node's wall clock when the batch was taken.
    pub heartbeat_at_ms: u64,
    /// Each distinct agent, in id order: its next deadline and reported status.
    pub pulses: Vec<BatchPulse>,
    pub seq: u64,
}

/// Digits of the longest `u64` written in decimal (`u64::MAX`).
const U64_DIGITS_MAX: usize = 20;

/// Bytes of a batch answer's longest line and the comma after it: both numbers `u64::MAX`,
/// the longest status. Room reserved, so that an answer is written without growing.
const BATCH_LINE_BYTES_MAX: usize =
    r#"{"agent":,"next_deadline_ms":,"status":"shutting_down"},"#.len() + 2 * U64_DIGITS_MAX;

/// Bytes of a batch answer without its lines and newly online agents, at most.
const BATCH_FRAME_BYTES_MAX: usize =
    r#"{"accepted":,"came_online":[],"heartbeat_at_ms":,"pulses":[],"seq":}"#.len()
        + 3 * U64_DIGITS_MAX;

impl BatchAnswer {
    /// The answer's JSON: the bytes serde_json writes for it (compact, fields in declaration
    /// order), written directly. Why by hand: every field is a number, a list of numbers or a
    /// status's fixed name, so nothing needs escaping, and serde_json's general path (each key
    /// escaped byte by byte, each piece a write of its own) was 5 % of a simulated Heart
    /// fleet-day and 16 % of the node's work answering batches (docs/benchmarks.md). The test
    /// below holds it to serde_json's bytes.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            BATCH_FRAME_BYTES_MAX
                + self.came_online.len() * (U64_DIGITS_MAX + 1)
                + self.pulses.len() * BATCH_LINE_BYTES_MAX,
        );
        let mut number = itoa::Buffer::new();
        out.extend_from_slice(b"{\"accepted\":");
        out.extend_from_slice(number.format(self.accepted).as_bytes());
        out.extend_from_slice(b",\"came_online\":[");
        for (i, agent) in self.came_online.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(number.format(agent.0).as_bytes());
        }
        out.extend_from_slice(b"],\"heartbeat_at_ms\":");
        out.extend_from_slice(number.format(self.heartbeat_at_ms).as_bytes());
        out.extend_from_slice(b",\"pulses\":[");
        for (i, line) in self.pulses.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"agent\":");
            out.extend_from_slice(number.format(line.agent.0).as_bytes());
            out.extend_from_slice(b",\"next_deadline_ms\":");
            out.extend_from_slice(number.format(line.next_deadline_ms).as_bytes());
            if let Some(status) = line.status {
                out.extend_from_slice(b",\"status\":\"");
                out.extend_from_slice(status.as_str().as_bytes());
                out.push(b'"');
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"],\"seq\":");
        out.extend_from_slice(number.format(self.seq).as_bytes());
        out.push(b'}');
        out
    }
}

impl axum::response::IntoResponse for BatchAnswer {
    fn into_response(self) -> axum::response::Response {
        super::json::written(self.to_json())
    }
}

/// `POST /v1/pulses` (operator only): `{"agents": [id or {"id", "status", "metadata"}, ...]}`,
/// 1 to `PULSE_BATCH_MAX` agents of the caller's tenant. All or nothing: one unknown or
/// terminated agent, or one bad entry, refuses the batch and names it.
#[utoipa::path(
    post,
    path = "/v1/pulses",
    tag = "pulses",
    request_body = BatchRequest,
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "Every pulse taken (all or nothing)", body = BatchAnswer),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn batch(
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<BatchAnswer, ApiError> {
    caller.operator()?;
    let request: BatchRequest = parse_json(body)?;
    if request.agents.is_empty() || request.agents.len() > PULSE_BATCH_MAX {
        return Err(ApiError::invalid_field(
            "agents",
            format!(
                "agents must list 1 to {PULSE_BATCH_MAX} agent ids (got {})",
                request.agents.len()
            ),
        ));
    }
    let mut pulses = Vec::with_capacity(request.agents.len());
    let mut looked = Vec::with_capacity(request.agents.len());
    // Every agent's card read under one hold of the engine's lock, then each entry checked in
    // order: the first bad entry, whatever is wrong with it, is the one named. A card holds
    // the agent's pulse floor too, for the answer's deadlines.
    let cards = caller.pulse_cards(request.agents.iter().map(|entry| AgentId(entry.id)));
    for (i, (entry, card)) in request.agents.into_iter().zip(cards).enumerate() {
        let named = |mut e: ApiError| {
            e.field = Some(format!("agents[{i}]"));
            e
        };
        let agent = AgentId(entry.id);
        looked.push((agent, card.map_err(named)?));
        pulses.push((
            agent,
            entry.request.into_report(|| format!("agents[{i}]."))?,
        ));
    }
    // Each distinct agent once, in id order: a batch already in id order is only looked over
    // (a pass, where the stable sort took a scratch buffer even then), any other sorted in
    // place. Unstable is enough: an agent listed twice has the same card twice (read under one
    // hold of the lock), so which one stays does not matter.
    if !looked.is_sorted_by_key(|(agent, _)| *agent) {
        looked.sort_unstable_by_key(|(agent, _)| *agent);
    }
    looked.dedup_by_key(|(agent, _)| *agent);
    let heartbeat_at_ms = caller
        .shell
        .pulse(&pulses, crate::writer::WhenFull::Refuse)
        .await
        .map_err(|error| {
            let mut e = ApiError::from(error);
            if e.field.is_none() {
                e.field = Some("agents".into());
            }
            e
        })?;
    let statuses = caller
        .shell
        .last_statuses(looked.iter().map(|(agent, _)| *agent));
    let lines = looked
        .iter()
        .zip(statuses)
        .map(|((agent, card), status)| BatchPulse {
            agent: *agent,
            next_deadline_ms: heartbeat_at_ms.saturating_add(card.floor_ms),
            status,
        })
        .collect();
    Ok(BatchAnswer {
        accepted: looked.len(),
        came_online: looked
            .iter()
            .filter(|(_, card)| !card.online)
            .map(|(agent, _)| *agent)
            .collect(),
        heartbeat_at_ms,
        pulses: lines,
        seq: caller.shell.head_seq(),
    })
}

/// User input for an agent.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputRequest {
    /// What the user wrote; handed to the run as `payload.text`.
    pub text: String,
    #[serde(default)]
    pub task_key: Option<String>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// `POST /v1/agents/{id}/input`: records user input (the idle chamber counts again from now)
/// and wakes the agent on demand. Answers like a wakeup.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/input",
    tag = "pulses",
    params(super::openapi::AgentPath),
    request_body = InputRequest,
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "The on-demand wakeup it made", body = WakeAnswer),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn input(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<WakeAnswer>, ApiError> {
    let agent = AgentId(parse_id("id", &id)?);
    caller.agent(agent)?;
    let request: InputRequest = parse_json(body)?;
    let wake = WakeupRequest {
        source: WakeupSource::OnDemand,
        reason: "user input".into(),
        payload: serde_json::json!({ "text": request.text }),
        task_key: request.task_key,
        idempotency_key: request.idempotency_key,
        trigger_detail: None,
        requested_by: Some(caller.requested_by()),
    };
    // The text travels as the payload, so the payload's limit is the text's: name the field
    // the caller sent.
    let answer = caller
        .shell
        .input(agent, wake, crate::writer::WhenFull::Refuse)
        .await
        .map_err(|error| {
            let mut e = ApiError::from(error);
            if e.field.as_deref() == Some("payload") {
                e.field = Some("text".into());
                e.message = e.message.replace("payload", "text");
            }
            e
        })?;
    Ok(Json(WakeAnswer {
        wakeup: answer.wakeup,
        replayed: answer.replayed,
        seq: answer.seq,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn status() -> impl Strategy<Value = Option<ReportedStatus>> {
        prop_oneof![
            Just(None),
            proptest::sample::select(ReportedStatus::ALL.to_vec()).prop_map(Some),
        ]
    }

    fn answer() -> impl Strategy<Value = BatchAnswer> {
        let line = (any::<u64>(), any::<u64>(), status()).prop_map(|(agent, due, status)| {
            BatchPulse {
                agent: AgentId(agent),
                next_deadline_ms: due,
                status,
            }
        });
        (
            any::<usize>(),
            proptest::collection::vec(any::<u64>().prop_map(AgentId), 0..4),
            any::<u64>(),
            proptest::collection::vec(line, 0..6),
            any::<u64>(),
        )
            .prop_map(
                |(accepted, came_online, heartbeat_at_ms, pulses, seq)| BatchAnswer {
                    accepted,
                    came_online,
                    heartbeat_at_ms,
                    pulses,
                    seq,
                },
            )
    }

    proptest! {
        #[test]
        fn a_batch_answer_is_written_as_serde_json_writes_it(answer in answer()) {
            prop_assert_eq!(
                String::from_utf8(answer.to_json()).expect("UTF-8"),
                serde_json::to_string(&answer).expect("serializes")
            );
        }
    }

    /// The reserved room is exact at its edge: the longest line (and its comma) and the
    /// longest frame fill it, so an answer is written without growing its buffer.
    #[test]
    fn the_longest_batch_answer_fills_its_reserved_room_exactly() {
        let longest = BatchPulse {
            agent: AgentId(u64::MAX),
            next_deadline_ms: u64::MAX,
            status: Some(ReportedStatus::ShuttingDown),
        };
        let frame = BatchAnswer {
            accepted: usize::MAX,
            came_online: Vec::new(),
            heartbeat_at_ms: u64::MAX,
            pulses: Vec::new(),
            seq: u64::MAX,
        };
        assert_eq!(frame.to_json().len(), BATCH_FRAME_BYTES_MAX);
        let two_lines = BatchAnswer {
            pulses: vec![longest, longest],
            ..frame
        };
        let bytes = two_lines.to_json();
        assert_eq!(bytes.len(), BATCH_FRAME_BYTES_MAX + 2 * BATCH_LINE_BYTES_MAX - 1);
        // Had the buffer grown, its capacity would have doubled past the room reserved.
        assert_eq!(
            bytes.capacity(),
            BATCH_FRAME_BYTES_MAX + 2 * BATCH_LINE_BYTES_MAX
        );
    }
}
