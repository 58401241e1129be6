//! A snapshot's manifest record (format 4; `specs` from format 6): what makes a snapshot current,
//! and what it must hold to be whole. Its tenants, agents and specs are stored as their own
//! records beside it (`snapshot_tenants`, `snapshot_agents`, `snapshot_specs`), keyed by the
//! snapshot's `seq`.

use serde::{Deserialize, Serialize};

/// One snapshot's manifest. Written last, in the transaction that makes the snapshot current:
/// a snapshot without one was cut short and is never read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotManifest {
    /// The last event the snapshot holds: recovery replays the log from the next one.
    pub seq: u64,
    /// One past the highest agent id ever created, deleted agents included.
    pub next_agent: u64,
    /// One past the highest wakeup id ever recorded.
    pub next_wakeup: u64,
    /// One past the highest run id ever recorded.
    pub next_run: u64,
    /// How many tenant records the snapshot holds (a count short of it is a damaged snapshot).
    pub tenants: u64,
    /// How many agent records the snapshot holds.
    pub agents: u64,
    /// How many specs its spec table holds (format 6; absent: 0, every spec in its agent's
    /// record).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub specs: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl SnapshotManifest {
    /// The stored bytes of this manifest.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("records always serialize")
    }

    /// A manifest from its stored bytes.
    pub fn decode(bytes: &[u8]) -> Result<SnapshotManifest, String> {
        serde_json::from_slice(bytes).map_err(|error| error.to_string())
    }
}
