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
//! - **6**: a snapshot's spec table: each distinct spec once (with an empty name) in
//!   `snapshot_specs`, an agent record's `spec_ref` naming it instead of holding its `spec`
//!   ([`SnapshotSpecs`]), and the manifest's `specs` count (absent: 0). Records that hold their
//!   spec read as before.
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

use self::current::snapshot::StoredSpec;
use crate::engine::agent::AgentSpec;
use crate::engine::event::Event;

/// The format this build writes. A database of a newer format is refused at open; an older one
/// is read through this module (formats 1 to 3 with the current types: later formats only
/// added).
pub const FORMAT_VERSION: u64 = 6;

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
    let record = current::read::event_record(bytes).map_err(|error| RecordError {
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
/// the current types read every format up to [`FORMAT_VERSION`]). A record that refers to its
/// snapshot's spec table is refused: decode it with an [`AgentDecoder`] holding that table.
pub fn decode_agent(
    format: u64,
    bytes: &[u8],
) -> Result<crate::engine::agent_state::AgentState, RecordError> {
    AgentDecoder::new(&[]).decode(format, bytes)
}

/// Text of the distinct specs one snapshot shares through its spec table, at most; once
/// reached, a spec not yet shared stays in its agent's record. Why bounded: the writer keeps
/// each shared spec's text to find the agents that have it, and a fleet whose agents all differ
/// (a prompt each) would otherwise hold its every spec twice while a snapshot is written. Why
/// this size: thousands of typical specs (an idle agent's is about 450 bytes, an LLM agent's
/// with its prompts a few kilobytes), well beyond the few specs a fleet is made from.
pub const SHARED_SPEC_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Encodes a snapshot's agents in order, storing each distinct spec once in the snapshot's spec
/// table and a reference to it in each agent's record (format 6).
///
/// Why: a fleet is mostly agents made from a few specs, and the spec was two thirds of an idle
/// agent's record, so a million agents' snapshot stored the same spec a million times: a larger
/// file to write, to read back, and to walk when a crash's repair checks it (ADR 0024).
#[derive(Default)]
pub struct SnapshotSpecs {
    /// Each shared spec's stored bytes (its name empty), and its number.
    numbers: std::collections::BTreeMap<Vec<u8>, u32>,
    /// The bytes of the specs in `numbers`.
    bytes: usize,
}

/// A spec added to a snapshot's spec table: its number and its stored bytes.
pub type NewSpec = (u32, Vec<u8>);

impl SnapshotSpecs {
    /// The stored bytes of `state`'s record, and the spec it adds to the table when its spec
    /// is shared here first.
    pub fn encode_agent(
        &mut self,
        state: &crate::engine::agent_state::AgentState,
    ) -> (Vec<u8>, Option<NewSpec>) {
        let mut record = current::snapshot::AgentRecord::from(state);
        let mut added = None;
        if let Some(spec) = &mut record.spec {
            // The engine keeps an agent's name in its spec as well; a record refers to a shared
            // spec only when the two agree, so that the spec decoded is the very same.
            if spec.name == record.name {
                let name = std::mem::take(&mut spec.name);
                let bytes = serde_json::to_vec(&*spec).expect("records always serialize");
                match self.number_of(bytes) {
                    Some((number, new)) => {
                        record.spec = None;
                        record.spec_ref = Some(number);
                        added = new;
                    }
                    None => spec.name = name,
                }
            }
        }
        let bytes = serde_json::to_vec(&record).expect("records always serialize");
        (bytes, added)
    }

    /// How many specs the table holds.
    pub fn len(&self) -> usize {
        self.numbers.len()
    }

    /// Whether the table holds no spec.
    pub fn is_empty(&self) -> bool {
        self.numbers.is_empty()
    }

    /// The number of the spec stored as `bytes`, and the spec itself when it is new to the
    /// table; `None` when it is new and the table is full ([`SHARED_SPEC_BYTES_MAX`]).
    fn number_of(&mut self, bytes: Vec<u8>) -> Option<(u32, Option<NewSpec>)> {
        if let Some(number) = self.numbers.get(&bytes) {
            return Some((*number, None));
        }
        if self.bytes + bytes.len() > SHARED_SPEC_BYTES_MAX {
            return None;
        }
        let number =
            u32::try_from(self.numbers.len()).expect("bounded by SHARED_SPEC_BYTES_MAX");
        self.bytes += bytes.len();
        self.numbers.insert(bytes.clone(), number);
        Some((number, Some((number, bytes))))
    }
}

/// A spec of a snapshot's spec table from its stored bytes in format `format` (its name empty:
/// each agent that refers to it gives its own).
pub fn decode_spec(format: u64, bytes: &[u8]) -> Result<AgentSpec, RecordError> {
    const TYPE: &str = "spec_snapshot";
    let record: current::spec::AgentSpec = read_snapshot(TYPE, format, bytes)?;
    record.into_engine().map_err(|(field, message)| RecordError {
        event_type: Some(TYPE.into()),
        reason: format!("{field}: {message}"),
    })
}

/// Decodes a snapshot's agent records one after another: a spec in the snapshot's spec table
/// (format 6) is copied from the table with the agent's name; a spec in the record is parsed
/// only when it differs from the previous agent's by more than the name.
///
/// Why the second: before format 6 every record held its spec, and parsing and converting it
/// was most of decoding an agent. Each such spec is first taken as its raw JSON text; when that
/// text equals the last parsed one's except for the name at its start, the same bytes would
/// parse to the same spec, so the last one is copied with this agent's name instead. What is
/// decoded is the same either way (the snapshot tests check it against decoding each record
/// alone).
pub struct AgentDecoder<'t> {
    /// The snapshot's spec table, by number.
    table: &'t [Arc<AgentSpec>],
    /// The last spec parsed: its text after the name, and what it became.
    last: Option<(Vec<u8>, Arc<AgentSpec>)>,
    /// Specs taken from the previous one instead of parsed.
    reused: u64,
}

impl<'t> AgentDecoder<'t> {
    /// A decoder of the agents of a snapshot whose spec table is `table` (empty before
    /// format 6).
    pub fn new(table: &'t [Arc<AgentSpec>]) -> AgentDecoder<'t> {
        AgentDecoder {
            table,
            last: None,
            reused: 0,
        }
    }

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
            .into_engine_with(|stored, name| match stored {
                StoredSpec::Inline(raw) => self.spec(&raw),
                StoredSpec::Shared(number) => self.shared(number, name),
            })
            .map_err(|problem| RecordError {
                event_type: Some(TYPE.into()),
                reason: format!("{}: {}", problem.field, problem.message),
            })
    }

    /// How many specs were taken from the previous agent's instead of parsed.
    pub fn specs_reused(&self) -> u64 {
        self.reused
    }

    /// Spec `number` of the spec table, named `name`.
    fn shared(&self, number: u32, name: &str) -> Result<Arc<AgentSpec>, current::Problem> {
        let spec = self.table.get(number as usize).ok_or_else(|| {
            current::Problem::new(
                "spec_ref",
                format!(
                    "spec {number} is not in the snapshot's spec table, which holds {}",
                    self.table.len()
                ),
            )
        })?;
        Ok(renamed(spec, name))
    }

    /// The engine's spec of the raw spec `raw`.
    fn spec(&mut self, raw: &RawValue) -> Result<Arc<AgentSpec>, current::Problem> {
        let text = raw.get();
        let split = name_end(text);
        if let (Some((name, rest)), Some((last_rest, last))) = (split, &self.last) {
            if rest.as_bytes() == last_rest.as_slice() {
                self.reused += 1;
                return Ok(renamed(last, name));
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

/// `spec` named `name` (every field named, so that a new one is decided on here).
fn renamed(spec: &AgentSpec, name: &str) -> Arc<AgentSpec> {
    Arc::new(AgentSpec {
        name: name.to_string(),
        adapter: spec.adapter.clone(),
        heartbeat: spec.heartbeat.clone(),
        time_zone: spec.time_zone.clone(),
        limits: spec.limits.clone(),
        breaker: spec.breaker.clone(),
        liveness: spec.liveness.clone(),
    })
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
    record.into_engine().map_err(|problem| RecordError {
        event_type: Some("tenant_snapshot".into()),
        reason: format!("{}: {}", problem.field, problem.message),
    })
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
