//! A decision in progress: the events decided so far, numbered after the log's head, with the
//! identifiers they have taken.

use std::collections::BTreeSet;

use super::coordinator::Coordinator;
use super::tenant::TenantName;
use super::event::{Event, EventKind};
use super::run::RunId;
use super::wakeup::WakeupId;

/// Collects the events of one command. Agent events are applied to the scratch copy of the
/// agent as they are emitted, so later steps of the same decision see them.
#[derive(Debug)]
pub struct Draft {
    now_ms: u64,
    next_seq: u64,
    next_wakeup: u64,
    next_run: u64,
    events: Vec<Event>,
    /// Tenants whose daily budget is spent at `now_ms` (decided once per command).
    budget_spent_tenants: BTreeSet<TenantName>,
    /// The node is draining: queued runs stay queued (see [`super::Engine::hold_starts`]).
    starts_held: bool,
}

impl Draft {
    pub(super) fn new(now_ms: u64, last_seq: u64, next_wakeup: u64, next_run: u64) -> Self {
        Draft {
            now_ms,
            next_seq: last_seq + 1,
            next_wakeup,
            next_run,
            events: Vec::new(),
            budget_spent_tenants: BTreeSet::new(),
            starts_held: false,
        }
    }

    /// Holds every run start of this decision (the node is draining).
    pub(super) fn with_starts_held(mut self, held: bool) -> Self {
        self.starts_held = held;
        self
    }

    /// Whether runs may start in this decision.
    pub fn starts_held(&self) -> bool {
        self.starts_held
    }

    /// Marks the tenants whose budget is spent at this decision's instant.
    pub(super) fn with_spent_tenants(mut self, tenants: BTreeSet<TenantName>) -> Self {
        self.budget_spent_tenants = tenants;
        self
    }

    /// Whether `tenant`'s daily budget is spent at this decision's instant.
    pub fn tenant_budget_spent(&self, tenant: &str) -> bool {
        self.budget_spent_tenants.contains(tenant)
    }

    /// The wall time the decision is made at.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Takes the next wakeup id.
    pub fn wakeup_id(&mut self) -> WakeupId {
        self.next_wakeup += 1;
        WakeupId(self.next_wakeup - 1)
    }

    /// Takes the next run id.
    pub fn run_id(&mut self) -> RunId {
        self.next_run += 1;
        RunId(self.next_run - 1)
    }

    /// Records an event about `agent` and applies it to the scratch copy.
    pub fn emit(&mut self, agent: &mut Coordinator, kind: EventKind) {
        let event = self.event(agent.agent.tenant.clone(), kind);
        agent.apply(&event);
        self.events.push(event);
    }

    /// Records an event that is not about one agent's coordinator state.
    pub fn emit_global(&mut self, tenant: String, kind: EventKind) {
        let event = self.event(tenant, kind);
        self.events.push(event);
    }

    fn event(&mut self, tenant: String, kind: EventKind) -> Event {
        let seq = self.next_seq;
        self.next_seq += 1;
        Event {
            seq,
            at_ms: self.now_ms,
            tenant,
            kind,
        }
    }

    /// The events decided, in log order.
    pub fn into_events(self) -> Vec<Event> {
        self.events
    }
}
