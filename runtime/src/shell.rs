//! The shell: the one place where engine decisions meet the disk.
//!
//! Every command goes decide → persist → apply → observe, under one lock, so the in-memory
//! engine is never ahead of the durable log and observers see events in log order.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::engine::agent::{Agent, AgentId};
use crate::engine::event::Event;
use crate::engine::{Command, Engine, Refusal};
use crate::io::clock::SharedClock;
use crate::store::{Store, StoreError};

/// Called with each batch of events right after it became durable, in log order.
/// The simulator records its trace through this; production leaves it unset.
pub type CommitObserver = Arc<dyn Fn(&[Event]) + Send + Sync>;

/// Why a command did not take effect.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Shared by the API handlers and the timer loop of one node.
pub struct Shell {
    engine: Mutex<Engine>,
    store: Store,
    clock: SharedClock,
    on_commit: Option<CommitObserver>,
    /// Wakes the timer loop when the schedule may have changed.
    pub(crate) schedule_changed: tokio::sync::Notify,
}

impl Shell {
    /// Wraps a store and the engine recovered from it.
    pub fn new(
        engine: Engine,
        store: Store,
        clock: SharedClock,
        on_commit: Option<CommitObserver>,
    ) -> Self {
        Shell {
            engine: Mutex::new(engine),
            store,
            clock,
            on_commit,
            schedule_changed: tokio::sync::Notify::new(),
        }
    }

    fn engine(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock means an engine invariant broke; nothing after it can
        // be trusted, so every later caller fails loudly too.
        self.engine
            .lock()
            .expect("engine lock poisoned by an earlier invariant failure")
    }

    /// The node's clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Runs `command` at the current wall time: decide, persist durably, apply, observe.
    /// Returns the events it produced (possibly none).
    pub fn execute(&self, command: Command) -> Result<Vec<Event>, ExecuteError> {
        let mut engine = self.engine();
        let now_ms = self.clock.wall_now_ms();
        let events = engine.decide(&command, now_ms)?;
        if events.is_empty() {
            return Ok(events);
        }
        self.store.append(&events)?;
        for event in &events {
            engine.apply(event);
        }
        if let Some(observe) = &self.on_commit {
            observe(&events);
        }
        drop(engine);
        self.schedule_changed.notify_one();
        Ok(events)
    }

    /// Every agent, in id order, with the wall time at which the snapshot was taken.
    pub fn agents(&self) -> (u64, Vec<Agent>) {
        let engine = self.engine();
        (self.clock.wall_now_ms(), engine.agents().cloned().collect())
    }

    /// One agent.
    pub fn agent(&self, id: AgentId) -> Option<Agent> {
        self.engine().agent(id).cloned()
    }

    /// The earliest wall time at which a timer is due.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.engine().next_deadline_ms()
    }

    /// A page of the durable log after `after`, and the log's head at the time of reading.
    pub fn events_after(&self, after: u64, limit: usize) -> Result<(Vec<Event>, u64), StoreError> {
        // Head first: a page may then contain events newer than `head`, never the reverse.
        let head = self.engine().last_seq();
        let events = self.store.events_after(after, limit)?;
        Ok((events, head))
    }
}
