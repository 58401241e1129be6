//! What the database holds, as its own types: the stored records, separate from the engine's
//! types and the API's (ADR 0014).
//!
//! Why separate: the engine's types change with the code (a field renamed, a default changed, a
//! variant dropped), and the API's spec refuses unknown fields. Stored directly, any such change
//! would make every existing database unrecoverable, or quietly change what an old agent means.
//! Here each format is a frozen set of types with explicit conversions, so a change to the
//! engine either compiles against the record conversions unchanged (the stored meaning holds)
//! or fails to compile until someone writes the conversion, and bumps [`FORMAT_VERSION`] if
//! what is written changes.
//!
//! Format history (docs/operations.md, "Upgrading"):
//! - **1**: JSON of an [`current::EventRecord`] per log entry, keyed by `seq`. Databases written
//!   before the format was recorded hold exactly this and are read as format 1.
//! - **2**: adds `agent_token_rotated`. Every format-1 record is a format-2 record unchanged.
//! - **3**: adds `agent_updated`, `agent_deleted` and `operator_token_set`'s `by` (absent:
//!   `configuration`). Every format-2 record is a format-3 record unchanged.
//! - **4**: adds snapshots: JSON of a [`current::snapshot::AgentRecord`] per agent (its whole
//!   state), of a [`current::snapshot::TenantRecord`] per tenant and of a
//!   [`current::manifest::SnapshotManifest`] per snapshot (`store/snapshot.rs`, ADR 0016). The
//!   event records are format 3's unchanged.
//! - 5: predicate heartbeats: four event types (`heartbeat_created`, `heartbeat_deleted`,
//!   `heartbeat_state_changed`, `heartbeat_emission_paused`) and an agent snapshot record's
//!   `heartbeats` (absent: none), `current::heartbeat`.
//!
//! How a format changes: a change that only *adds* (an event type, an optional field with a
//! meaning for its absence) extends the types in [`current`] and bumps [`FORMAT_VERSION`]; older
//! records still parse with them, so reading an older format is the identity. A change that
//! renames, removes or re-means something first freezes [`current`] as the old format's own
//! module, then changes the current types, and `decode` reads the old format through the frozen
//! module and an explicit migration.

pub mod current;

use std::sync::Arc;

use serde_json::value::RawValue;

use crate::engine::event::Event;

/// The format this build writes. A database of a newer format is refused at open; an older one
/// is read through this module (formats 1 to 3 with the current types: later formats only
/// added).
pub const FORMAT_VERSION: u64 = 5;

/// Why a stored record could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// The event type the record says it is, when it got that far.
    pub event_type: Option<String>,
    pub reason: String,
}

/// The stored bytes of `event` in the current format.
pub fn encode(event: &Event) -> Vec<u8> {
    serde_json::to_vec(&current::EventRecord::from(event)).expect("records always serialize")
}

/// The event stored as `bytes` under `seq`, in format `format` (1 to 3: the same types read
/// all, since each later format only added).
pub fn decode(format: u64, seq: u64, bytes: &[u8]) -> Result<Event, RecordError> {
    debug_assert!(
        (1..=FORMAT_VERSION).contains(&format),
        "format {format} is refused at open"
    );
    let record: current::EventRecord =
        serde_json::from_slice(bytes).map_err(|error| RecordError {
            event_type: type_of(bytes),
            reason: error.to_string(),
        })?;
    let event_type = record.kind.type_name();
    if record.seq != seq {
        return Err(RecordError {
            event_type: Some(event_type.into()),
            reason: format!("stored under {seq} but says seq {}", record.seq),
        });
    }
    record.into_engine().map_err(|problem| RecordError {
        event_type: Some(event_type.into()),
        reason: format!("{}: {}", problem.field, problem.message),
    })
}

/// The stored bytes of one agent's whole state (a snapshot chunk entry), current format.
pub fn encode_agent(state: &crate::engine::agent_state::AgentState) -> Vec<u8> {
    serde_json::to_vec(&current::snapshot::AgentRecord::from(state))
        .expect("records always serialize")
}

/// One agent's state from its stored bytes in format `format` (snapshots exist from format 4;
/// the current types read every format up to [`FORMAT_VERSION`]).
pub fn decode_agent(
    format: u64,
    bytes: &[u8],
) -> Result<crate::engine::agent_state::AgentState, RecordError> {
    AgentDecoder::default().decode(format, bytes)
}

/// Decodes a snapshot's agent records one after another, parsing a spec only when it differs
/// from the previous agent's by more than the name.
///
/// Why: a fleet is mostly agents made from a few specs, and parsing and converting the spec
/// was most of decoding an agent (two thirds of an idle agent's record is its spec). Each spec
/// is first taken as its raw JSON text; when that text equals the last parsed one's except for
/// the name at its start, the same bytes would parse to the same spec, so the last one is
/// copied with this agent's name instead. What is decoded is the same either way (the
/// snapshot tests check it against decoding each record alone).
#[derive(Default)]
pub struct AgentDecoder {
    /// The last spec parsed: its text after the name, and what it became.
    last: Option<(Vec<u8>, Arc<crate::engine::agent::AgentSpec>)>,
    /// Specs taken from the previous one instead of parsed.
    reused: u64,
}

impl AgentDecoder {
    /// The agent state stored as `bytes` in format `format`.
    pub fn decode(
        &mut self,
        format: u64,
        bytes: &[u8],
    ) -> Result<crate::engine::agent_state::AgentState, RecordError> {
        const TYPE: &str = "agent_snapshot";
        let record: current::snapshot::AgentRecord<Box<RawValue>> =
            read_snapshot(TYPE, format, bytes)?;
        record
            .into_engine_with(|raw| self.spec(&raw))
            .map_err(|problem| RecordError {
                event_type: Some(TYPE.into()),
                reason: format!("{}: {}", problem.field, problem.message),
            })
    }

    /// How many specs were taken from the previous agent's instead of parsed.
    pub fn specs_reused(&self) -> u64 {
        self.reused
    }

    /// The engine's spec of the raw spec `raw`.
    fn spec(
        &mut self,
        raw: &RawValue,
    ) -> Result<Arc<crate::engine::agent::AgentSpec>, current::Problem> {
        let text = raw.get();
        let split = name_end(text);
        if let (Some((name, rest)), Some((last_rest, last))) = (split, &self.last) {
            if rest.as_bytes() == last_rest.as_slice() {
                self.reused += 1;
                return Ok(Arc::new(crate::engine::agent::AgentSpec {
                    name: name.to_string(),
                    adapter: last.adapter.clone(),
                    heartbeat: last.heartbeat.clone(),
                    time_zone: last.time_zone.clone(),
                    limits: last.limits.clone(),
                    breaker: last.breaker.clone(),
                    liveness: last.liveness.clone(),
                }));
            }
        }
        let record: current::spec::AgentSpec = serde_json::from_str(text)
            .map_err(|error| current::Problem::new("spec", error.to_string()))?;
        let spec = Arc::new(
            record
                .into_engine()
                .map_err(|(field, message)| current::Problem::new(field, message))?,
        );
        if let Some((_, rest)) = split {
            self.last = Some((rest.as_bytes().to_vec(), spec.clone()));
        }
        Ok(spec)
    }
}

/// A raw spec's name and the text after it, when it starts with a name free of escapes (as
/// every stored spec does: the name is its first field); `None` otherwise (parsed in full).
fn name_end(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("{\"name\":\"")?;
    let close = rest.find(['"', '\\'])?;
    if rest.as_bytes()[close] != b'"' {
        return None;
    }
    Some((&rest[..close], &rest[close + 1..]))
}

/// The stored bytes of one tenant (name, operator token hash, configured token hash, daily
/// budget, day spend), current format.
pub fn encode_tenant(tenant: &crate::engine::tenant::Tenant) -> Vec<u8> {
    serde_json::to_vec(&current::snapshot::TenantRecord::from(tenant))
        .expect("records always serialize")
}

/// One tenant from its stored bytes in format `format`.
pub fn decode_tenant(
    format: u64,
    bytes: &[u8],
) -> Result<crate::engine::tenant::Tenant, RecordError> {
    let record: current::snapshot::TenantRecord = read_snapshot("tenant_snapshot", format, bytes)?;
    Ok(record.into_engine())
}

/// A snapshot record of type `type_name` parsed from `bytes`, or why not (a format newer than
/// this build's, JSON that is not the record: serde's message names the field and position).
fn read_snapshot<T: serde::de::DeserializeOwned>(
    type_name: &str,
    format: u64,
    bytes: &[u8],
) -> Result<T, RecordError> {
    let refused = |reason: String| RecordError {
        event_type: Some(type_name.into()),
        reason,
    };
    if format > FORMAT_VERSION {
        return Err(refused(format!(
            "format {format} is newer than this build's ({FORMAT_VERSION})"
        )));
    }
    serde_json::from_slice(bytes).map_err(|error| refused(error.to_string()))
}

/// The `type` a record that does not parse says it has, if it says one.
fn type_of(bytes: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_slice::<Typed>(bytes)
        .ok()
        .map(|typed| typed.kind)
}

#[cfg(test)]
mod tests {
    use super::name_end;

    #[test]
    fn a_spec_splits_after_a_name_free_of_escapes() {
        assert_eq!(
            name_end(r#"{"name":"a-1","adapter":null}"#),
            Some(("a-1", r#","adapter":null}"#))
        );
        assert_eq!(name_end(r#"{"name":""}"#), Some(("", "}")));
        // An escape in the name, a name that is not first, whitespace: parsed in full.
        assert_eq!(name_end(r#"{"name":"a\"b","x":1}"#), None);
        assert_eq!(name_end(r#"{"adapter":null,"name":"a"}"#), None);
        assert_eq!(name_end(r#"{ "name":"a"}"#), None);
        assert_eq!(name_end(r#"{"name":"unterminated"#), None);
    }
}
