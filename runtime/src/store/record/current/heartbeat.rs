//! Predicate heartbeats as stored (format 5): their four events and a heartbeat in an agent's
//! snapshot record. Separate from the engine's types (`engine::predicate`), converted both ways,
//! checked on read.

use serde::{Deserialize, Serialize};

use super::{instant, optional_instant, KindRecord, Problem};
use crate::engine::agent::AgentId;
use crate::engine::event::EventKind;
use crate::engine::predicate::{
    Check, Heartbeat, HeartbeatId, HeartbeatSpec, OnChange, HEARTBEAT_MAX_STATE_BYTES,
};

/// A heartbeat's kept definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatSpecRecord {
    pub interval_sec: u64,
    pub check: CheckRecord,
    pub on_change: OnChangeRecord,
    pub max_runtime_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CheckRecord {
    Http {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pointer: Option<String>,
        /// Header name → environment variable name (absent: none).
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        secret_headers: std::collections::BTreeMap<String, String>,
    },
    Command {
        command: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
    },
    Sample,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnChangeRecord {
    Wake,
    Event,
}

/// A heartbeat in an agent's snapshot record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatRecord {
    pub id: String,
    pub spec: HeartbeatSpecRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub emission_paused: bool,
    pub created_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_at_ms: Option<u64>,
    #[serde(default)]
    pub transitions: u64,
}

impl From<&HeartbeatSpec> for HeartbeatSpecRecord {
    fn from(spec: &HeartbeatSpec) -> Self {
        HeartbeatSpecRecord {
            interval_sec: spec.interval_sec,
            check: match &spec.check {
                Check::Http {
                    url,
                    pointer,
                    secret_headers,
                } => CheckRecord::Http {
                    url: url.clone(),
                    pointer: pointer.clone(),
                    secret_headers: secret_headers.clone(),
                },
                Check::Command { command, args } => CheckRecord::Command {
                    command: command.clone(),
                    args: args.clone(),
                },
                Check::Sample => CheckRecord::Sample,
            },
            on_change: match spec.on_change {
                OnChange::Wake => OnChangeRecord::Wake,
                OnChange::Event => OnChangeRecord::Event,
            },
            max_runtime_ms: spec.max_runtime_ms,
        }
    }
}

impl HeartbeatSpecRecord {
    fn into_engine(self) -> HeartbeatSpec {
        HeartbeatSpec {
            interval_sec: self.interval_sec,
            check: match self.check {
                CheckRecord::Http {
                    url,
                    pointer,
                    secret_headers,
                } => Check::Http {
                    url,
                    pointer,
                    secret_headers,
                },
                CheckRecord::Command { command, args } => Check::Command { command, args },
                CheckRecord::Sample => Check::Sample,
            },
            on_change: match self.on_change {
                OnChangeRecord::Wake => OnChange::Wake,
                OnChangeRecord::Event => OnChange::Event,
            },
            max_runtime_ms: self.max_runtime_ms,
        }
    }
}

/// A state token as read back: no larger than the engine ever keeps.
fn state(field: &str, token: String) -> Result<String, Problem> {
    if token.len() > HEARTBEAT_MAX_STATE_BYTES {
        return Err(Problem::new(
            field,
            format!(
                "a heartbeat state of {} bytes is past the {HEARTBEAT_MAX_STATE_BYTES}-byte cap",
                token.len()
            ),
        ));
    }
    Ok(token)
}

impl From<&Heartbeat> for HeartbeatRecord {
    fn from(heartbeat: &Heartbeat) -> Self {
        HeartbeatRecord {
            id: heartbeat.id.0.clone(),
            spec: (&heartbeat.spec).into(),
            state: heartbeat.state.clone(),
            emission_paused: heartbeat.emission_paused,
            created_at_ms: heartbeat.created_at_ms,
            changed_at_ms: heartbeat.changed_at_ms,
            transitions: heartbeat.transitions,
        }
    }
}

impl HeartbeatRecord {
    /// The engine's heartbeat of `agent`, or the first field that cannot be one (`at`: where the
    /// record sits in its snapshot record, for the message).
    pub fn into_engine(self, agent: AgentId, at: &str) -> Result<Heartbeat, Problem> {
        Ok(Heartbeat {
            id: HeartbeatId(self.id),
            agent,
            spec: self.spec.into_engine(),
            state: self
                .state
                .map(|token| state(&format!("{at}.state"), token))
                .transpose()?,
            emission_paused: self.emission_paused,
            created_at_ms: instant(&format!("{at}.created_at_ms"), self.created_at_ms)?,
            changed_at_ms: optional_instant(&format!("{at}.changed_at_ms"), self.changed_at_ms)?,
            transitions: self.transitions,
        })
    }
}

/// The stored record of a heartbeat's event.
pub(super) fn heartbeat_record(kind: &EventKind) -> KindRecord {
    match kind {
        EventKind::HeartbeatCreated {
            agent,
            heartbeat,
            spec,
        } => KindRecord::HeartbeatCreated {
            agent: agent.0,
            heartbeat: heartbeat.0.clone(),
            spec: Box::new(spec.as_ref().into()),
        },
        EventKind::HeartbeatDeleted { agent, heartbeat } => KindRecord::HeartbeatDeleted {
            agent: agent.0,
            heartbeat: heartbeat.0.clone(),
        },
        EventKind::HeartbeatStateChanged {
            agent,
            heartbeat,
            from,
            to,
        } => KindRecord::HeartbeatStateChanged {
            agent: agent.0,
            heartbeat: heartbeat.0.clone(),
            from: from.clone(),
            to: to.clone(),
        },
        EventKind::HeartbeatEmissionPaused {
            agent,
            heartbeat,
            pending,
        } => KindRecord::HeartbeatEmissionPaused {
            agent: agent.0,
            heartbeat: heartbeat.0.clone(),
            pending: *pending,
        },
        other => unreachable!("{} is not a heartbeat event", other.type_name()),
    }
}

/// The engine's event of a heartbeat's stored record.
pub(super) fn heartbeat_event(record: KindRecord) -> Result<EventKind, Problem> {
    Ok(match record {
        KindRecord::HeartbeatCreated {
            agent,
            heartbeat,
            spec,
        } => EventKind::HeartbeatCreated {
            agent: AgentId(agent),
            heartbeat: HeartbeatId(heartbeat),
            spec: Box::new(spec.into_engine()),
        },
        KindRecord::HeartbeatDeleted { agent, heartbeat } => EventKind::HeartbeatDeleted {
            agent: AgentId(agent),
            heartbeat: HeartbeatId(heartbeat),
        },
        KindRecord::HeartbeatStateChanged {
            agent,
            heartbeat,
            from,
            to,
        } => EventKind::HeartbeatStateChanged {
            agent: AgentId(agent),
            heartbeat: HeartbeatId(heartbeat),
            from: from.map(|token| state("from", token)).transpose()?,
            to: state("to", to)?,
        },
        KindRecord::HeartbeatEmissionPaused {
            agent,
            heartbeat,
            pending,
        } => EventKind::HeartbeatEmissionPaused {
            agent: AgentId(agent),
            heartbeat: HeartbeatId(heartbeat),
            pending,
        },
        other => unreachable!("{} is not a heartbeat event", other.type_name()),
    })
}
