//! What a pulse may say beside "alive": the agent's own status (`active`, `busy`, `idle`,
//! `shutting_down`) and a small metadata object (its queue length, its version, the task it
//! holds). Neither changes how liveness is judged; both are shown where liveness is (the agent
//! view, `vigil top`) and carried by the event of a liveness change, so an operator can tell an
//! agent that said it was shutting down from one that vanished.
//!
//! Like pulses themselves, the latest report lives in memory only ([`super::liveness::PulseBook`]);
//! only the report in force when liveness changes is written, inside that event.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::agent::FieldError;

/// Largest metadata object a pulse may carry, in bytes of compact JSON. Why so small: a host
/// pulses every agent every few seconds, and the last object of each agent is held in memory.
pub const PULSE_METADATA_BYTES_MAX: usize = 1_024;
/// Most keys a pulse's metadata object may have (nested objects count their own keys too).
pub const PULSE_METADATA_KEYS_MAX: usize = 32;
/// Deepest nesting of objects and arrays inside the metadata object (the object itself is 1).
pub const PULSE_METADATA_DEPTH_MAX: usize = 4;

/// The status an agent reports of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportedStatus {
    Active,
    Busy,
    Idle,
    ShuttingDown,
}

impl ReportedStatus {
    pub const ALL: [ReportedStatus; 4] = [
        ReportedStatus::Active,
        ReportedStatus::Busy,
        ReportedStatus::Idle,
        ReportedStatus::ShuttingDown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReportedStatus::Active => "active",
            ReportedStatus::Busy => "busy",
            ReportedStatus::Idle => "idle",
            ReportedStatus::ShuttingDown => "shutting_down",
        }
    }

    /// Parses a status as the API spells it.
    pub fn parse(text: &str) -> Option<ReportedStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// What one pulse said, or the latest an agent said (each part kept until a pulse replaces it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PulseReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ReportedStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl PulseReport {
    pub fn is_empty(&self) -> bool {
        self.status.is_none() && self.metadata.is_none()
    }

    /// Takes what `newer` says; keeps what it leaves out.
    pub fn update(&mut self, newer: &PulseReport) {
        if newer.status.is_some() {
            self.status = newer.status;
        }
        if newer.metadata.is_some() {
            self.metadata.clone_from(&newer.metadata);
        }
    }

    /// Checks the metadata's size, key count and depth; `field` names it in the error
    /// (`metadata`, or `agents[3].metadata` in a batch).
    pub fn validate_metadata(metadata: &Map<String, Value>, field: &str) -> Result<(), FieldError> {
        let bytes = serde_json::to_vec(metadata).map_or(usize::MAX, |b| b.len());
        if bytes > PULSE_METADATA_BYTES_MAX {
            return Err(FieldError::new(
                field.to_string(),
                format!(
                    "{field} may hold at most {PULSE_METADATA_BYTES_MAX} bytes of JSON (got {bytes})"
                ),
            ));
        }
        let (keys, depth) = shape(&Value::Object(metadata.clone()));
        if keys > PULSE_METADATA_KEYS_MAX {
            return Err(FieldError::new(
                field.to_string(),
                format!("{field} may have at most {PULSE_METADATA_KEYS_MAX} keys (got {keys})"),
            ));
        }
        if depth > PULSE_METADATA_DEPTH_MAX {
            return Err(FieldError::new(
                field.to_string(),
                format!(
                    "{field} may nest at most {PULSE_METADATA_DEPTH_MAX} levels deep (got {depth})"
                ),
            ));
        }
        Ok(())
    }
}

/// Keys of every object inside `value`, and its nesting depth (a scalar is 0).
fn shape(value: &Value) -> (usize, usize) {
    match value {
        Value::Object(map) => map.values().fold((map.len(), 1), |(keys, depth), v| {
            let (k, d) = shape(v);
            (keys + k, depth.max(d + 1))
        }),
        Value::Array(items) => items.iter().fold((0, 1), |(keys, depth), v| {
            let (k, d) = shape(v);
            (keys + k, depth.max(d + 1))
        }),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().expect("an object").clone()
    }

    #[test]
    fn metadata_at_its_byte_limit_passes_and_one_byte_more_is_refused() {
        // {"k":"xxx…"} is 8 bytes of framing around the string.
        let at_limit = object(json!({ "k": "x".repeat(PULSE_METADATA_BYTES_MAX - 8) }));
        assert_eq!(
            serde_json::to_vec(&at_limit).unwrap().len(),
            PULSE_METADATA_BYTES_MAX
        );
        PulseReport::validate_metadata(&at_limit, "metadata").unwrap();
        let over = object(json!({ "k": "x".repeat(PULSE_METADATA_BYTES_MAX - 7) }));
        let err = PulseReport::validate_metadata(&over, "agents[2].metadata").unwrap_err();
        assert_eq!(err.field, "agents[2].metadata");
        assert!(err.message.contains("1025"), "{}", err.message);
    }

    #[test]
    fn key_count_and_depth_have_their_limits() {
        let keys = |n: usize| {
            object(Value::Object(
                (0..n).map(|i| (format!("k{i}"), json!(i))).collect(),
            ))
        };
        PulseReport::validate_metadata(&keys(PULSE_METADATA_KEYS_MAX), "metadata").unwrap();
        let err = PulseReport::validate_metadata(&keys(PULSE_METADATA_KEYS_MAX + 1), "metadata")
            .unwrap_err();
        assert!(err.message.contains("keys"), "{}", err.message);
        // Depth 4: object > object > array > object.
        let deep_ok = object(json!({ "a": { "b": [ { "c": 1 } ] } }));
        PulseReport::validate_metadata(&deep_ok, "metadata").unwrap();
        let too_deep = object(json!({ "a": { "b": [ { "c": [1] } ] } }));
        let err = PulseReport::validate_metadata(&too_deep, "metadata").unwrap_err();
        assert!(err.message.contains("levels"), "{}", err.message);
    }

    #[test]
    fn an_update_replaces_what_it_says_and_keeps_the_rest() {
        let mut latest = PulseReport {
            status: Some(ReportedStatus::Busy),
            metadata: Some(object(json!({ "queue": 3 }))),
        };
        latest.update(&PulseReport {
            status: Some(ReportedStatus::Idle),
            metadata: None,
        });
        assert_eq!(latest.status, Some(ReportedStatus::Idle));
        assert_eq!(latest.metadata, Some(object(json!({ "queue": 3 }))));
        latest.update(&PulseReport {
            status: None,
            metadata: Some(object(json!({ "queue": 0 }))),
        });
        assert_eq!(latest.status, Some(ReportedStatus::Idle));
        assert_eq!(latest.metadata, Some(object(json!({ "queue": 0 }))));
    }

    #[test]
    fn statuses_parse_as_they_are_spelled() {
        for status in ReportedStatus::ALL {
            assert_eq!(ReportedStatus::parse(status.as_str()), Some(status));
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, json!(status.as_str()));
        }
        assert_eq!(ReportedStatus::parse("sleeping"), None);
    }
}
