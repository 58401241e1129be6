//! Who may hold the node's live event streams. Each stream is a connection held open for as
//! long as the client likes, so one token must not be able to take them all: streams are capped
//! per token and per tenant, and agents never take the slots kept for operators, so the operator
//! of a tenant can still watch it while its agents (or another tenant's) hold the rest.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;

use super::error::ApiError;
use crate::engine::agent::AgentId;
use crate::engine::tenant::Principal;

/// Most live streams one node serves at once.
pub const SSE_STREAMS_MAX: usize = 256;
/// Most live streams one token (an operator's or an agent's) holds at once.
pub const SSE_STREAMS_PER_TOKEN_MAX: usize = 8;
/// Most live streams one tenant's tokens hold at once, its operator's included.
pub const SSE_STREAMS_PER_TENANT_MAX: usize = 64;
/// Streams of its tenant's share that the tenant's agents never take: the operator can always
/// open this many, whatever its agents hold.
pub const SSE_STREAMS_TENANT_OPERATOR_RESERVE: usize = 4;
/// Streams of the node's `SSE_STREAMS_MAX` that agents never take: only operators open the
/// last ones, so agents of many tenants together cannot shut every operator out.
pub const SSE_STREAMS_NODE_OPERATOR_RESERVE: usize = 32;
/// `Retry-After` of a refused stream, in seconds.
pub const SSE_RETRY_AFTER_S: u64 = 5;

/// One holder of streams: a tenant's operator, or one agent.
type Holder = (String, Option<AgentId>);

/// Why a stream was refused: which cap was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamRefusal {
    /// The node's whole `SSE_STREAMS_MAX`, or (for an agent) all of it but the operators' reserve.
    Node,
    /// The tenant's `SSE_STREAMS_PER_TENANT_MAX`, or (for an agent) all of it but its
    /// operator's reserve.
    Tenant,
    /// The token's own `SSE_STREAMS_PER_TOKEN_MAX`.
    Token,
}

impl StreamRefusal {
    /// The 503 answer, naming the cap, with `Retry-After` [`SSE_RETRY_AFTER_S`].
    pub fn to_api_error(self) -> ApiError {
        let (code, message) = match self {
            StreamRefusal::Node => (
                "too_many_streams",
                format!(
                    "this node already serves all the event streams it allows ({SSE_STREAMS_MAX}, \
                     of which the last {SSE_STREAMS_NODE_OPERATOR_RESERVE} only for operators); \
                     retry later or read pages"
                ),
            ),
            StreamRefusal::Tenant => (
                "too_many_streams_for_tenant",
                format!(
                    "this tenant already holds all the event streams it may ({SSE_STREAMS_PER_TENANT_MAX}, \
                     of which the last {SSE_STREAMS_TENANT_OPERATOR_RESERVE} only for its operator); \
                     close one or read pages"
                ),
            ),
            StreamRefusal::Token => (
                "too_many_streams_for_token",
                format!(
                    "this token already holds {SSE_STREAMS_PER_TOKEN_MAX} event streams, the most \
                     one token may; close one or read pages"
                ),
            ),
        };
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code,
            message,
            field: None,
            retry_after_s: Some(SSE_RETRY_AFTER_S),
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_tenant: BTreeMap<String, usize>,
    by_holder: BTreeMap<Holder, usize>,
}

/// The node's stream slots. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct StreamSlots {
    counts: Arc<Mutex<Counts>>,
}

/// One held stream slot; dropping it frees the slot.
#[derive(Debug)]
pub struct StreamPermit {
    slots: StreamSlots,
    holder: Holder,
}

impl StreamSlots {
    /// Takes a slot for `principal`, or says which cap refuses it.
    pub fn try_acquire(&self, principal: &Principal) -> Result<StreamPermit, StreamRefusal> {
        let holder = holder_of(principal);
        let is_agent = holder.1.is_some();
        let mut counts = self.counts.lock().expect("stream slots lock");
        // Agents stop short of the operators' reserves; operators may use everything.
        let (node_cap, tenant_cap) = match is_agent {
            true => (
                SSE_STREAMS_MAX - SSE_STREAMS_NODE_OPERATOR_RESERVE,
                SSE_STREAMS_PER_TENANT_MAX - SSE_STREAMS_TENANT_OPERATOR_RESERVE,
            ),
            false => (SSE_STREAMS_MAX, SSE_STREAMS_PER_TENANT_MAX),
        };
        let tenant_held = counts.by_tenant.get(&holder.0).copied().unwrap_or(0);
        let holder_held = counts.by_holder.get(&holder).copied().unwrap_or(0);
        if holder_held >= SSE_STREAMS_PER_TOKEN_MAX {
            return Err(StreamRefusal::Token);
        }
        if tenant_held >= tenant_cap {
            return Err(StreamRefusal::Tenant);
        }
        if counts.total >= node_cap {
            return Err(StreamRefusal::Node);
        }
        counts.total += 1;
        *counts.by_tenant.entry(holder.0.clone()).or_default() += 1;
        *counts.by_holder.entry(holder.clone()).or_default() += 1;
        Ok(StreamPermit {
            slots: self.clone(),
            holder,
        })
    }

    /// Streams held now, node-wide.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.counts.lock().expect("stream slots lock").total
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut counts = self.slots.counts.lock().expect("stream slots lock");
        counts.total -= 1;
        decrement(&mut counts.by_tenant, &self.holder.0);
        decrement(&mut counts.by_holder, &self.holder);
    }
}

/// Lowers `key`'s count, forgetting it at zero (so the maps hold only live holders).
fn decrement<K: Ord + Clone>(map: &mut BTreeMap<K, usize>, key: &K) {
    if let Some(count) = map.get_mut(key) {
        *count -= 1;
        if *count == 0 {
            map.remove(key);
        }
    }
}

fn holder_of(principal: &Principal) -> Holder {
    match principal {
        Principal::Operator { tenant } => (tenant.to_string(), None),
        Principal::Agent { tenant, agent } => (tenant.to_string(), Some(*agent)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator(tenant: &str) -> Principal {
        Principal::Operator {
            tenant: tenant.into(),
        }
    }

    fn agent(tenant: &str, id: u64) -> Principal {
        Principal::Agent {
            tenant: tenant.into(),
            agent: AgentId(id),
        }
    }

    /// Takes `n` slots for `principal`, all of which must be granted.
    fn take(slots: &StreamSlots, principal: &Principal, n: usize) -> Vec<StreamPermit> {
        (0..n)
            .map(|i| {
                slots
                    .try_acquire(principal)
                    .unwrap_or_else(|e| panic!("slot {i} of {principal:?}: {e:?}"))
            })
            .collect()
    }

    #[test]
    fn one_token_holds_at_most_its_cap() {
        let slots = StreamSlots::default();
        let held = take(&slots, &agent("t", 1), SSE_STREAMS_PER_TOKEN_MAX);
        assert_eq!(slots.try_acquire(&agent("t", 1)).unwrap_err(), StreamRefusal::Token);
        // Another agent of the tenant, and its operator, are not held back by it.
        let _other = take(&slots, &agent("t", 2), 1);
        let _operator = take(&slots, &operator("t"), SSE_STREAMS_PER_TOKEN_MAX);
        assert_eq!(slots.try_acquire(&operator("t")).unwrap_err(), StreamRefusal::Token);
        drop(held);
        let _again = take(&slots, &agent("t", 1), SSE_STREAMS_PER_TOKEN_MAX);
    }

    #[test]
    fn agents_leave_the_tenant_reserve_to_the_operator() {
        let slots = StreamSlots::default();
        let agents_cap = SSE_STREAMS_PER_TENANT_MAX - SSE_STREAMS_TENANT_OPERATOR_RESERVE;
        let mut held = Vec::new();
        for i in 0..agents_cap {
            held.extend(take(&slots, &agent("t", i as u64), 1));
        }
        assert_eq!(slots.try_acquire(&agent("t", 999)).unwrap_err(), StreamRefusal::Tenant);
        held.extend(take(&slots, &operator("t"), SSE_STREAMS_TENANT_OPERATOR_RESERVE));
        assert_eq!(slots.try_acquire(&operator("t")).unwrap_err(), StreamRefusal::Tenant);
        // Another tenant is not affected.
        let _other = take(&slots, &agent("u", 1), 1);
        held.pop();
        let _back = take(&slots, &operator("t"), 1);
    }

    #[test]
    fn agents_leave_the_node_reserve_to_operators() {
        let slots = StreamSlots::default();
        let agents_cap = SSE_STREAMS_MAX - SSE_STREAMS_NODE_OPERATOR_RESERVE;
        let per_tenant = SSE_STREAMS_PER_TENANT_MAX - SSE_STREAMS_TENANT_OPERATOR_RESERVE;
        let mut held = Vec::new();
        for i in 0..agents_cap {
            let tenant = format!("t{}", i / per_tenant);
            held.extend(take(&slots, &agent(&tenant, i as u64), 1));
        }
        assert_eq!(slots.held(), agents_cap);
        assert_eq!(slots.try_acquire(&agent("fresh", 1)).unwrap_err(), StreamRefusal::Node);
        for i in 0..SSE_STREAMS_NODE_OPERATOR_RESERVE {
            held.extend(take(&slots, &operator(&format!("op{}", i / 4)), 1));
        }
        assert_eq!(slots.held(), SSE_STREAMS_MAX);
        assert_eq!(slots.try_acquire(&operator("late")).unwrap_err(), StreamRefusal::Node);
        drop(held);
        assert_eq!(slots.held(), 0);
    }
}
