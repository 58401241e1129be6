//! Requests in flight, per principal. A request holds a slot from the moment its token is
//! authenticated until its answer is produced: the body is read inside that span, so a client
//! that dribbles bodies (one byte every few seconds, under `BODY_STALL_TIMEOUT_MS`) holds its
//! token's slots, not the node's. Each agent token holds at most a few; a tenant's agents
//! together stop short of its operator's reserve, and all agents of all tenants short of the
//! node's operator reserve, so the operator's requests still find a slot while agents misbehave.
//! A live event stream gives its request slot back once it holds a stream slot
//! (`api::streams` caps those).

use axum::http::StatusCode;

use super::error::{ApiError, RETRY_AFTER_DEFAULT_S};
use super::slots::{SlotLimits, SlotRefusal, Slots};
use super::CONNECTIONS_MAX;

/// Most requests in flight across the node: one per connection (HTTP/1 serves one request at a
/// time on a connection), so the same as `CONNECTIONS_MAX`.
pub const REQUESTS_IN_FLIGHT_MAX: usize = CONNECTIONS_MAX;
/// Of `REQUESTS_IN_FLIGHT_MAX`, the requests only operators make: agents of every tenant
/// together never hold these.
pub const REQUESTS_IN_FLIGHT_NODE_OPERATOR_RESERVE: usize = 128;
/// Most requests one tenant's tokens have in flight together, its operator's included.
pub const REQUESTS_IN_FLIGHT_PER_TENANT_MAX: usize = 512;
/// Of a tenant's share, the requests only its operator makes.
pub const REQUESTS_IN_FLIGHT_TENANT_OPERATOR_RESERVE: usize = 64;
/// Most requests one agent token has in flight. Why 16: an agent pulses, wakes itself, reports
/// a result and reads its events, a handful at a time; more is a client holding slots.
pub const REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX: usize = 16;
/// Most requests one operator token has in flight: its whole tenant's share (an operator's
/// tooling fans out: a fleet apply, a burst of wakeups, a host's batch pulses).
pub const REQUESTS_IN_FLIGHT_PER_OPERATOR_TOKEN_MAX: usize = REQUESTS_IN_FLIGHT_PER_TENANT_MAX;

/// The caps of requests in flight.
pub const REQUEST_LIMITS: SlotLimits = SlotLimits {
    node_max: REQUESTS_IN_FLIGHT_MAX,
    node_operator_reserve: REQUESTS_IN_FLIGHT_NODE_OPERATOR_RESERVE,
    tenant_max: REQUESTS_IN_FLIGHT_PER_TENANT_MAX,
    tenant_operator_reserve: REQUESTS_IN_FLIGHT_TENANT_OPERATOR_RESERVE,
    agent_token_max: REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX,
    operator_token_max: REQUESTS_IN_FLIGHT_PER_OPERATOR_TOKEN_MAX,
};

/// The node's request slots.
pub fn request_slots() -> Slots {
    Slots::new(REQUEST_LIMITS)
}

impl SlotRefusal {
    /// The 503 answer to a request over a cap, naming it, with `Retry-After`.
    pub fn request_error(self) -> ApiError {
        let (code, message) = match self {
            SlotRefusal::Node => (
                "too_many_requests_in_flight",
                format!(
                    "this node already has all the requests in flight it allows \
                     ({REQUESTS_IN_FLIGHT_MAX}, of which the last \
                     {REQUESTS_IN_FLIGHT_NODE_OPERATOR_RESERVE} only for operators); retry later"
                ),
            ),
            SlotRefusal::Tenant => (
                "too_many_requests_in_flight_for_tenant",
                format!(
                    "this tenant already has all the requests in flight it may \
                     ({REQUESTS_IN_FLIGHT_PER_TENANT_MAX}, of which the last \
                     {REQUESTS_IN_FLIGHT_TENANT_OPERATOR_RESERVE} only for its operator); retry later"
                ),
            ),
            SlotRefusal::Token => (
                "too_many_requests_in_flight_for_token",
                format!(
                    "this token already has the most requests in flight one token may \
                     ({REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX} for an agent, \
                     {REQUESTS_IN_FLIGHT_PER_OPERATOR_TOKEN_MAX} for an operator); finish one first"
                ),
            ),
        };
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code,
            message,
            field: None,
            retry_after_s: Some(RETRY_AFTER_DEFAULT_S),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::agent::AgentId;
    use crate::engine::tenant::Principal;

    #[test]
    fn an_agent_token_has_its_cap_and_the_operator_its_reserve() {
        let slots = request_slots();
        let agent = |id| Principal::Agent {
            tenant: "t".into(),
            agent: AgentId(id),
        };
        let operator = Principal::Operator { tenant: "t".into() };
        let held: Vec<_> = (0..REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX)
            .map(|_| slots.try_acquire(&agent(1)).unwrap())
            .collect();
        let refused = slots.try_acquire(&agent(1)).unwrap_err();
        assert_eq!(refused, SlotRefusal::Token);
        let error = refused.request_error();
        assert_eq!(error.code, "too_many_requests_in_flight_for_token");
        assert_eq!(error.retry_after_s, Some(RETRY_AFTER_DEFAULT_S));
        // The tenant's agents together stop at its share less the operator's reserve.
        let agents_share =
            REQUESTS_IN_FLIGHT_PER_TENANT_MAX - REQUESTS_IN_FLIGHT_TENANT_OPERATOR_RESERVE;
        let mut others = Vec::new();
        let mut id = 2;
        while slots.held() < agents_share {
            others.push(slots.try_acquire(&agent(id)).unwrap());
            if others.len() % REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX == 0 {
                id += 1;
            }
        }
        assert_eq!(
            slots.try_acquire(&agent(999)).unwrap_err(),
            SlotRefusal::Tenant
        );
        let reserve: Vec<_> = (0..REQUESTS_IN_FLIGHT_TENANT_OPERATOR_RESERVE)
            .map(|_| slots.try_acquire(&operator).unwrap())
            .collect();
        assert_eq!(
            slots.try_acquire(&operator).unwrap_err(),
            SlotRefusal::Tenant
        );
        drop((held, others, reserve));
        assert_eq!(slots.held(), 0);
    }
}
