//! Who may hold the node's live event streams. Each stream is a connection held open for as
//! long as the client likes, so one token must not be able to take them all: streams are capped
//! per token and per tenant, and agents never take the slots kept for operators, so the operator
//! of a tenant can still watch it while its agents (or another tenant's) hold the rest.

use axum::http::StatusCode;

use super::error::ApiError;
use super::slots::{SlotLimits, SlotPermit, SlotRefusal, Slots};
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

/// Why a stream was refused: which cap was reached.
pub type StreamRefusal = SlotRefusal;

/// The caps of live streams.
pub const STREAM_LIMITS: SlotLimits = SlotLimits {
    node_max: SSE_STREAMS_MAX,
    node_operator_reserve: SSE_STREAMS_NODE_OPERATOR_RESERVE,
    tenant_max: SSE_STREAMS_PER_TENANT_MAX,
    tenant_operator_reserve: SSE_STREAMS_TENANT_OPERATOR_RESERVE,
    agent_token_max: SSE_STREAMS_PER_TOKEN_MAX,
    operator_token_max: SSE_STREAMS_PER_TOKEN_MAX,
};

impl SlotRefusal {
    /// The 503 answer to a refused stream, naming the cap, with `Retry-After`
    /// [`SSE_RETRY_AFTER_S`].
    pub fn stream_error(self) -> ApiError {
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

/// The node's stream slots. Cheap to clone.
#[derive(Debug, Clone)]
pub struct StreamSlots(Slots);

/// One held stream slot; dropping it frees the slot.
pub type StreamPermit = SlotPermit;

impl Default for StreamSlots {
    fn default() -> Self {
        StreamSlots(Slots::new(STREAM_LIMITS))
    }
}

impl StreamSlots {
    /// Takes a slot for `principal`, or says which cap refuses it.
    pub fn try_acquire(&self, principal: &Principal) -> Result<StreamPermit, StreamRefusal> {
        self.0.try_acquire(principal)
    }

    /// Streams held now, node-wide.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.0.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::slots::test_support::{agent, operator};

    /// Takes `n` stream slots for `principal`, all of which must be granted.
    fn take(slots: &StreamSlots, principal: &Principal, n: usize) -> Vec<StreamPermit> {
        super::super::slots::test_support::take(&slots.0, principal, n)
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
