//! The engine's durable state at one log position, and the engine rebuilt from it (ADR 0016).
//!
//! An [`Image`] holds only what the log's events made and nothing can recompute: the tenants,
//! the id counters and every agent's whole state. Everything derived from those (the token and
//! name indexes, which agent owns which run, the due index, the node-wide counts and eviction
//! orders) is rebuilt by [`Engine::from_image`], never stored, so a snapshot cannot disagree
//! with itself. Taking an image is cheap: the agents are shared (`Arc`), so it clones pointers;
//! an agent the engine changes afterwards is copied then, the image keeps the old one.

use std::sync::Arc;

use super::agent_state::AgentState;
use super::due_index::Deadlines;
use super::node_bounds::{KeySummary, NodeBounds, NodeLimits};
use super::tenant::{Principal, Tenant};
use super::Engine;

/// The engine's durable state right after the event numbered `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The last event folded in: recovery replays the log from the one after.
    pub seq: u64,
    /// One past the highest agent id ever created (deleted agents included).
    pub next_agent: u64,
    pub next_wakeup: u64,
    pub next_run: u64,
    pub tenants: Vec<Tenant>,
    /// Every agent, in id order.
    pub agents: Vec<Arc<AgentState>>,
}

/// Why an image cannot be an engine: it contradicts itself (a damaged or hand-made snapshot).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the snapshot at seq {seq} is inconsistent: {reason}")]
pub struct ImageError {
    pub seq: u64,
    pub reason: String,
}

impl Engine {
    /// The engine's durable state now (pointer clones: cheap even for a million agents).
    pub fn image(&self) -> Image {
        Image {
            seq: self.last_seq,
            next_agent: self.next_agent,
            next_wakeup: self.next_wakeup,
            next_run: self.next_run,
            tenants: self.tenants.values().cloned().collect(),
            agents: self.agents.values().cloned().collect(),
        }
    }

    /// The engine `image` describes, with the default node-wide limits.
    pub fn from_image(image: Image) -> Result<Engine, ImageError> {
        Engine::from_image_with_limits(image, NodeLimits::default())
    }

    /// The engine `image` describes, its derived indexes rebuilt, enforcing `limits`.
    pub fn from_image_with_limits(image: Image, limits: NodeLimits) -> Result<Engine, ImageError> {
        let fail = |reason: String| ImageError {
            seq: image.seq,
            reason,
        };
        let mut engine = Engine {
            last_seq: image.seq,
            next_agent: image.next_agent,
            next_wakeup: image.next_wakeup,
            next_run: image.next_run,
            bounds: NodeBounds::new(limits),
            ..Engine::default()
        };
        for tenant in &image.tenants {
            engine.tokens.insert(
                tenant.operator_token_hash.clone(),
                Principal::Operator {
                    tenant: tenant.name.clone(),
                },
            );
            if engine
                .tenants
                .insert(tenant.name.clone(), tenant.clone())
                .is_some()
            {
                return Err(fail(format!("tenant {} appears twice", tenant.name)));
            }
        }
        for state in &image.agents {
            engine.restore_agent(state.clone()).map_err(fail)?;
        }
        Ok(engine)
    }

    /// Files one agent of an image and everything derived from it.
    fn restore_agent(&mut self, state: Arc<AgentState>) -> Result<(), String> {
        let agent = state.agent();
        let id = agent.id;
        if id.0 >= self.next_agent {
            return Err(format!(
                "agent {id} is at or past the next agent id {}",
                self.next_agent
            ));
        }
        if !self.tenants.contains_key(&agent.tenant) {
            return Err(format!(
                "agent {id} is in tenant {}, which the snapshot lacks",
                agent.tenant
            ));
        }
        let principal = Principal::Agent {
            tenant: agent.tenant.clone(),
            agent: id,
        };
        if self
            .tokens
            .insert(agent.token_hash.clone(), principal)
            .is_some()
        {
            return Err(format!("agent {id}'s token hash is held twice"));
        }
        if self
            .names
            .insert((agent.tenant.clone(), agent.name.clone()), id)
            .is_some()
        {
            return Err(format!("the name {:?} is held twice", agent.name));
        }
        for run in state.runs() {
            self.run_owner.insert(run.id, id);
        }
        self.due
            .refile(id, Deadlines::default(), Deadlines::of(&state));
        let no_keys = KeySummary {
            held: 0,
            oldest_at_ms: None,
        };
        self.bounds.keys_changed(id, no_keys, state.key_summary());
        for finished in state.finished_order() {
            self.bounds
                .run_finished(*finished, state.has_answer_excerpt(finished.1));
        }
        if self.agents.insert(id, state).is_some() {
            return Err(format!("agent {id} appears twice"));
        }
        Ok(())
    }
}
