//! The engine: Vigil's pure state machine. No I/O, no tokio, no clocks: `now` comes in as an
//! argument (the sans-IO shape of quinn-proto).
//!
//! It is split in two steps so that memory can never run ahead of disk (ADR 0002):
//! - [`Engine::decide`] turns a command into the events it implies, changing nothing;
//! - the shell persists those events, and only then calls [`Engine::apply`] for each.
//!
//! Recovery is the same `apply` over the stored log, so a restarted node is exactly the node
//! that wrote the log.

pub mod agent;
pub mod event;
pub mod schedule;

use std::collections::BTreeMap;

use agent::{Agent, AgentId, AgentSpec, FieldError, AGENTS_MAX};
use event::{Event, EventKind};

/// Something the outside world asks of the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Register an agent with a timer schedule.
    CreateAgent(AgentSpec),
    /// Fire every timer whose slot has come.
    FireDueTimers,
}

/// Why the engine refused a command. Nothing was decided, nothing needs undoing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{}", .0.message)]
    InvalidField(FieldError),
    #[error("an agent named {0:?} already exists; choose another name")]
    NameTaken(String),
    #[error("this runtime already keeps {AGENTS_MAX} agents, its limit")]
    TooManyAgents,
}

/// The runtime's whole in-memory state, rebuilt from the event log on start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Engine {
    agents: BTreeMap<AgentId, Agent>,
    names: BTreeMap<String, AgentId>,
    last_seq: u64,
}

impl Engine {
    /// An engine with no agents and an empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sequence number of the last applied event (0 for an empty log).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// All agents, in id order.
    pub fn agents(&self) -> impl Iterator<Item = &Agent> {
        self.agents.values()
    }

    /// One agent by id.
    pub fn agent(&self, id: AgentId) -> Option<&Agent> {
        self.agents.get(&id)
    }

    /// The events `command` implies at wall time `now_ms`, numbered after the last applied event.
    /// Pure: the engine is unchanged until the shell applies what it persisted.
    pub fn decide(&self, command: &Command, now_ms: u64) -> Result<Vec<Event>, Refusal> {
        let kinds = match command {
            Command::CreateAgent(spec) => vec![self.decide_create(spec, now_ms)?],
            Command::FireDueTimers => self.decide_timers(now_ms),
        };
        Ok(kinds
            .into_iter()
            .zip(self.last_seq + 1..)
            .map(|(kind, seq)| Event {
                seq,
                at_ms: now_ms,
                kind,
            })
            .collect())
    }

    fn decide_create(&self, spec: &AgentSpec, now_ms: u64) -> Result<EventKind, Refusal> {
        spec.validate().map_err(Refusal::InvalidField)?;
        if self.names.contains_key(&spec.name) {
            return Err(Refusal::NameTaken(spec.name.clone()));
        }
        if self.agents.len() >= AGENTS_MAX {
            return Err(Refusal::TooManyAgents);
        }
        let id = AgentId(self.agents.keys().next_back().map_or(1, |last| last.0 + 1));
        Ok(EventKind::AgentCreated {
            agent: id,
            name: spec.name.clone(),
            interval_ms: spec.interval_ms,
            first_fire_at_ms: now_ms.saturating_add(spec.interval_ms),
        })
    }

    fn decide_timers(&self, now_ms: u64) -> Vec<EventKind> {
        self.agents
            .values()
            .filter_map(|agent| {
                let fire = schedule::fire_due(agent.next_fire_at_ms, agent.interval_ms, now_ms)?;
                Some(EventKind::TimerFired {
                    agent: agent.id,
                    due_at_ms: fire.due_at_ms,
                    missed_slots: fire.missed_slots,
                    next_fire_at_ms: fire.next_fire_at_ms,
                })
            })
            .collect()
    }

    /// Folds one persisted event into the state. Events must arrive in log order; anything else
    /// is a bug in the shell or a corrupt log, and stops the node rather than guess.
    pub fn apply(&mut self, event: &Event) {
        assert_eq!(
            event.seq,
            self.last_seq + 1,
            "event log out of order: expected seq {}, got {} (invariant 11)",
            self.last_seq + 1,
            event.seq
        );
        match &event.kind {
            EventKind::AgentCreated {
                agent,
                name,
                interval_ms,
                first_fire_at_ms,
            } => {
                let previous = self.agents.insert(
                    *agent,
                    Agent {
                        id: *agent,
                        name: name.clone(),
                        interval_ms: *interval_ms,
                        next_fire_at_ms: *first_fire_at_ms,
                        timer_fires: 0,
                        last_due_at_ms: None,
                    },
                );
                assert!(previous.is_none(), "agent {agent} created twice");
                self.names.insert(name.clone(), *agent);
            }
            EventKind::TimerFired {
                agent,
                due_at_ms,
                next_fire_at_ms,
                ..
            } => {
                let state = self
                    .agents
                    .get_mut(agent)
                    .unwrap_or_else(|| panic!("timer fired for unknown agent {agent}"));
                assert!(
                    state.last_due_at_ms.is_none_or(|last| last < *due_at_ms),
                    "timer slot {due_at_ms} of agent {agent} fired twice"
                );
                state.last_due_at_ms = Some(*due_at_ms);
                state.next_fire_at_ms = *next_fire_at_ms;
                state.timer_fires += 1;
            }
        }
        self.last_seq = event.seq;
    }

    /// The earliest wall time at which `FireDueTimers` would decide something, if any.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.agents.values().map(|a| a.next_fire_at_ms).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(engine: &mut Engine, name: &str, interval_ms: u64, now_ms: u64) -> AgentId {
        let spec = AgentSpec {
            name: name.into(),
            interval_ms,
        };
        let events = engine.decide(&Command::CreateAgent(spec), now_ms).unwrap();
        events.iter().for_each(|e| engine.apply(e));
        match events[0].kind {
            EventKind::AgentCreated { agent, .. } => agent,
            _ => panic!("expected agent_created"),
        }
    }

    #[test]
    fn decide_changes_nothing_until_apply() {
        let engine = Engine::new();
        let spec = AgentSpec {
            name: "a".into(),
            interval_ms: 1_000,
        };
        let events = engine.decide(&Command::CreateAgent(spec), 0).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].seq, 1);
        assert_eq!(engine, Engine::new());
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut engine = Engine::new();
        create(&mut engine, "a", 1_000, 0);
        let spec = AgentSpec {
            name: "a".into(),
            interval_ms: 5_000,
        };
        assert_eq!(
            engine.decide(&Command::CreateAgent(spec), 0),
            Err(Refusal::NameTaken("a".into()))
        );
    }

    #[test]
    fn timers_fire_on_their_slots_with_gap_free_seqs() {
        let mut engine = Engine::new();
        let a = create(&mut engine, "a", 1_000, 0);
        let b = create(&mut engine, "b", 3_000, 0);
        assert_eq!(engine.next_deadline_ms(), Some(1_000));
        assert!(engine
            .decide(&Command::FireDueTimers, 999)
            .unwrap()
            .is_empty());
        let mut fired = Vec::new();
        for now in (1_000..=6_000).step_by(1_000) {
            for event in engine.decide(&Command::FireDueTimers, now).unwrap() {
                assert_eq!(event.seq, engine.last_seq() + 1);
                engine.apply(&event);
                fired.push(event);
            }
        }
        assert_eq!(engine.agent(a).unwrap().timer_fires, 6);
        assert_eq!(engine.agent(b).unwrap().timer_fires, 2);
        assert_eq!(fired.len(), 8);
    }

    #[test]
    fn replaying_the_log_rebuilds_the_same_state() {
        let mut engine = Engine::new();
        create(&mut engine, "a", 1_000, 0);
        let mut log = Vec::new();
        for now in [1_000, 7_500, 8_000] {
            for event in engine.decide(&Command::FireDueTimers, now).unwrap() {
                engine.apply(&event);
                log.push(event);
            }
        }
        let mut replayed = Engine::new();
        create(&mut replayed, "a", 1_000, 0);
        log.iter().for_each(|e| replayed.apply(e));
        assert_eq!(replayed, engine);
    }

    #[test]
    #[should_panic(expected = "out of order")]
    fn applying_out_of_order_is_a_bug() {
        let mut engine = Engine::new();
        engine.apply(&Event {
            seq: 2,
            at_ms: 0,
            kind: EventKind::AgentCreated {
                agent: AgentId(1),
                name: "a".into(),
                interval_ms: 1_000,
                first_fire_at_ms: 1_000,
            },
        });
    }
}
