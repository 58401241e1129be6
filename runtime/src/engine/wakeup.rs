//! Wakeups: the one shape every trigger takes on its way into the coordinator.

use serde::{Deserialize, Serialize};

use super::agent::FieldError;
use super::run::RunId;

/// An idempotency key is honoured for this long after the wakeup that first used it.
pub const IDEMPOTENCY_TTL_MS: u64 = 24 * 60 * 60 * 1_000;
/// Most idempotency keys one agent remembers at once (keys expire after `IDEMPOTENCY_TTL_MS`);
/// a keyed wakeup beyond this is refused rather than forgetting a key early.
pub const IDEMPOTENCY_KEYS_PER_AGENT_MAX: usize = 10_000;
/// Longest `reason` accepted.
pub const REASON_CHARS_MAX: usize = 500;
/// Longest `task_key` or `idempotency_key` accepted.
pub const KEY_CHARS_MAX: usize = 200;
/// Largest `payload`, as compact JSON.
pub const PAYLOAD_BYTES_MAX: usize = 16 * 1024;
/// Largest `trigger_detail`, as compact JSON: a pointer to what caused the wakeup (an issue, a
/// message id), not the data itself, which belongs in `payload`.
pub const TRIGGER_DETAIL_BYTES_MAX: usize = 2 * 1024;

/// Identifies a wakeup within one runtime, in arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(transparent)]
pub struct WakeupId(pub u64);

impl std::fmt::Display for WakeupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What triggered a wakeup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WakeupSource {
    Timer,
    Idle,
    Assignment,
    OnDemand,
    Automation,
    Predicate,
}

impl WakeupSource {
    /// Every source, the default set an agent accepts.
    pub fn all() -> Vec<WakeupSource> {
        vec![
            WakeupSource::Timer,
            WakeupSource::Idle,
            WakeupSource::Assignment,
            WakeupSource::OnDemand,
            WakeupSource::Automation,
            WakeupSource::Predicate,
        ]
    }

    /// The source's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            WakeupSource::Timer => "timer",
            WakeupSource::Idle => "idle",
            WakeupSource::Assignment => "assignment",
            WakeupSource::OnDemand => "on_demand",
            WakeupSource::Automation => "automation",
            WakeupSource::Predicate => "predicate",
        }
    }

    /// The priority class of a run this source queues.
    pub fn priority(self) -> Priority {
        match self {
            WakeupSource::OnDemand => Priority::OnDemand,
            WakeupSource::Assignment => Priority::Assignment,
            WakeupSource::Timer
            | WakeupSource::Idle
            | WakeupSource::Automation
            | WakeupSource::Predicate => Priority::Routine,
        }
    }
}

/// Who asked for a wakeup, recorded on its event and shown in the wakeup history.
///
/// The caller cannot choose it: the API sets `operator` or `agent` from the bearer token, the
/// coordinator `timer` and `idle` for its own chambers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestedBy {
    /// A tenant's operator token (`POST /v1/agents/{id}/wakeup` or `/input`).
    Operator,
    /// The agent's own token.
    Agent,
    /// The agent's schedule chamber.
    Timer,
    /// The agent's idle chamber.
    Idle,
    /// A predicate heartbeat on a state change. Reserved: no predicate heartbeat exists yet.
    Predicate,
    /// The fleet file at start. Reserved: the fleet file wakes nothing yet.
    FleetFile,
}

impl RequestedBy {
    /// Every value, for parsing a filter.
    pub const ALL: [RequestedBy; 6] = [
        RequestedBy::Operator,
        RequestedBy::Agent,
        RequestedBy::Timer,
        RequestedBy::Idle,
        RequestedBy::Predicate,
        RequestedBy::FleetFile,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestedBy::Operator => "operator",
            RequestedBy::Agent => "agent",
            RequestedBy::Timer => "timer",
            RequestedBy::Idle => "idle",
            RequestedBy::Predicate => "predicate",
            RequestedBy::FleetFile => "fleet_file",
        }
    }
}

/// Order in which queued runs start: smaller first, FIFO (by run id) within a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    OnDemand,
    Assignment,
    /// timer, idle, automation, predicate
    Routine,
}

/// A request to wake an agent, from the API or an internal trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WakeupRequest {
    pub source: WakeupSource,
    /// Free text for humans and the agent: why it is being woken.
    #[serde(default)]
    pub reason: String,
    /// Data handed to the run (at most `PAYLOAD_BYTES_MAX` as JSON).
    #[serde(default)]
    pub payload: serde_json::Value,
    /// Wakeups for the same agent and task key coalesce onto one queued run.
    #[serde(default)]
    pub task_key: Option<String>,
    /// A retry carrying a key seen in the last 24 h gets the original answer.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// What caused the wakeup, as a JSON object (at most `TRIGGER_DETAIL_BYTES_MAX`): kept on
    /// the wakeup's event and in the wakeup history, not handed to the run.
    #[serde(default)]
    pub trigger_detail: Option<serde_json::Value>,
    /// Who asked; set by the node, never by the body (`operator` when unset).
    #[serde(skip)]
    pub requested_by: Option<RequestedBy>,
}

impl WakeupRequest {
    /// A request with no payload, task key or idempotency key.
    pub fn new(source: WakeupSource, reason: impl Into<String>) -> Self {
        WakeupRequest {
            source,
            reason: reason.into(),
            payload: serde_json::Value::Null,
            task_key: None,
            idempotency_key: None,
            trigger_detail: None,
            requested_by: None,
        }
    }

    /// The same request, asked for by `by`.
    pub fn requested_by(mut self, by: RequestedBy) -> Self {
        self.requested_by = Some(by);
        self
    }

    /// Who asked: as set, else `operator` (the API always sets it).
    pub fn asker(&self) -> RequestedBy {
        self.requested_by.unwrap_or(RequestedBy::Operator)
    }

    /// Checks every field against its limit.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.reason.chars().count() > REASON_CHARS_MAX {
            return Err(FieldError::new(
                "reason",
                format!("reason is at most {REASON_CHARS_MAX} characters"),
            ));
        }
        for (field, key) in [
            ("task_key", &self.task_key),
            ("idempotency_key", &self.idempotency_key),
        ] {
            if let Some(key) = key {
                if key.is_empty() || key.chars().count() > KEY_CHARS_MAX {
                    return Err(FieldError::new(
                        field,
                        format!("{field} must be 1 to {KEY_CHARS_MAX} characters"),
                    ));
                }
            }
        }
        let payload_bytes = serde_json::to_vec(&self.payload)
            .expect("JSON values serialize")
            .len();
        if payload_bytes > PAYLOAD_BYTES_MAX {
            return Err(FieldError::new(
                "payload",
                format!(
                    "payload is at most {PAYLOAD_BYTES_MAX} bytes of JSON (got {payload_bytes})"
                ),
            ));
        }
        if let Some(detail) = &self.trigger_detail {
            if !detail.is_object() {
                return Err(FieldError::new(
                    "trigger_detail",
                    "trigger_detail must be a JSON object",
                ));
            }
            let bytes = serde_json::to_vec(detail)
                .expect("JSON values serialize")
                .len();
            if bytes > TRIGGER_DETAIL_BYTES_MAX {
                return Err(FieldError::new(
                    "trigger_detail",
                    format!(
                        "trigger_detail is at most {TRIGGER_DETAIL_BYTES_MAX} bytes of JSON (got {bytes})"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Why a wakeup was refused. Every refusal is recorded as an event, never silently dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// The agent is paused.
    Paused,
    /// The agent was terminated.
    Terminated,
    /// The agent's policy does not accept this source.
    DisabledSource,
    /// The agent already has `limits.queued_runs_max` runs waiting.
    QueueFull,
    /// The agent's daily invocation cap is used up (the Heart's daily cap).
    DailyCap,
    /// The agent's circuit breaker is open.
    BreakerOpen,
    /// The agent's cost budget is spent.
    Budget,
    /// The agent is in the error state (a restart loop, or its breaker stuck at its longest
    /// cooldown) until an operator resets it.
    AgentError,
}

/// What became of a wakeup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum WakeupOutcome {
    /// It queued a new run.
    Queued { run: RunId },
    /// It joined a run already queued for the same agent and task key.
    Coalesced { run: RunId, coalesced_count: u64 },
    /// It was refused, for `refusal`.
    Refused { refusal: RefusalReason },
}

/// A wakeup as remembered for idempotency and as answered to the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeupRecord {
    pub wakeup: WakeupId,
    pub agent: super::agent::AgentId,
    pub source: WakeupSource,
    pub reason: String,
    pub task_key: Option<String>,
    pub idempotency_key: Option<String>,
    pub at_ms: u64,
    #[serde(flatten)]
    pub outcome: WakeupOutcome,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_limits_name_their_field() {
        let ok = WakeupRequest::new(WakeupSource::OnDemand, "x".repeat(REASON_CHARS_MAX));
        assert!(ok.validate().is_ok());
        let long = WakeupRequest::new(WakeupSource::OnDemand, "x".repeat(REASON_CHARS_MAX + 1));
        assert_eq!(long.validate().unwrap_err().field, "reason");
        let mut r = WakeupRequest::new(WakeupSource::OnDemand, "");
        r.task_key = Some(String::new());
        assert_eq!(r.validate().unwrap_err().field, "task_key");
        r.task_key = Some("k".repeat(KEY_CHARS_MAX));
        assert!(r.validate().is_ok());
        r.idempotency_key = Some("k".repeat(KEY_CHARS_MAX + 1));
        assert_eq!(r.validate().unwrap_err().field, "idempotency_key");
        let mut r = WakeupRequest::new(WakeupSource::OnDemand, "");
        r.payload = serde_json::Value::String("p".repeat(PAYLOAD_BYTES_MAX));
        assert_eq!(r.validate().unwrap_err().field, "payload");
        r.payload = serde_json::Value::String("p".repeat(PAYLOAD_BYTES_MAX - 2));
        assert!(r.validate().is_ok());
    }

    #[test]
    fn trigger_detail_is_an_object_within_its_limit() {
        let mut r = WakeupRequest::new(WakeupSource::OnDemand, "");
        r.trigger_detail = Some(serde_json::json!(["not", "an", "object"]));
        assert_eq!(r.validate().unwrap_err().field, "trigger_detail");
        // {"k":"…"} is 8 bytes of JSON around the string.
        r.trigger_detail = Some(serde_json::json!({ "k": "d".repeat(TRIGGER_DETAIL_BYTES_MAX - 8) }));
        assert!(r.validate().is_ok());
        r.trigger_detail = Some(serde_json::json!({ "k": "d".repeat(TRIGGER_DETAIL_BYTES_MAX - 7) }));
        let error = r.validate().unwrap_err();
        assert_eq!(error.field, "trigger_detail");
        assert!(error.message.contains(&(TRIGGER_DETAIL_BYTES_MAX + 1).to_string()));
    }

    #[test]
    fn requested_by_is_not_taken_from_a_body() {
        let body = r#"{"source":"on_demand","requested_by":"timer"}"#;
        assert!(serde_json::from_str::<WakeupRequest>(body).is_err());
        let body = r#"{"source":"on_demand"}"#;
        let request: WakeupRequest = serde_json::from_str(body).unwrap();
        assert_eq!(request.asker(), RequestedBy::Operator);
        assert_eq!(request.requested_by(RequestedBy::Agent).asker(), RequestedBy::Agent);
    }

    #[test]
    fn priority_classes() {
        assert!(WakeupSource::OnDemand.priority() < WakeupSource::Assignment.priority());
        assert!(WakeupSource::Assignment.priority() < WakeupSource::Timer.priority());
        assert_eq!(
            WakeupSource::Idle.priority(),
            WakeupSource::Predicate.priority()
        );
    }
}
