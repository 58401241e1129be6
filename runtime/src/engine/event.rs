//! Events: every durable fact the runtime knows. The log of events is the source of truth for
//! recovery, the audit trail, the API's event feed and the simulator's trace (invariant 11).

use serde::{Deserialize, Serialize};

use super::agent::AgentId;

/// One durable fact with its place in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the log: starts at 1, gap-free, strictly increasing (invariant 11).
    pub seq: u64,
    /// Wall-clock time of the node that decided it, Unix ms. Informational: it may jump.
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What an event says happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// An agent was registered with its timer schedule.
    AgentCreated {
        agent: AgentId,
        name: String,
        interval_ms: u64,
        /// The first timer slot; the agent's schedule grid is `first_fire_at_ms + k * interval_ms`.
        first_fire_at_ms: u64,
    },
    /// A timer wakeup fired. One event covers every slot missed since the previous fire
    /// (downtime, forward clock jump): the schedule fires once, never the backlog.
    TimerFired {
        agent: AgentId,
        /// The latest grid slot at or before the fire: the slot this wakeup stands for.
        due_at_ms: u64,
        /// Slots of the grid skipped because they were missed (0 when on time).
        missed_slots: u64,
        /// The next grid slot strictly after the fire time.
        next_fire_at_ms: u64,
    },
}

impl EventKind {
    /// The event type's wire name, as in the JSON `type` field.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::AgentCreated { .. } => "agent_created",
            EventKind::TimerFired { .. } => "timer_fired",
        }
    }
}
