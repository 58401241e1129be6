//! Slots that principals hold for a while (a live stream, a request in flight), counted per
//! token, per tenant and per node, with shares of the tenant's and the node's slots that only
//! operators take. One holder of many tokens' worth of work (an agent opening streams, a client
//! dribbling request bodies) then runs into its own cap long before it can shut its tenant's
//! operator, or another tenant, out.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::engine::agent::AgentId;
use crate::engine::tenant::{Principal, TenantHandle};

/// The caps of one kind of slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLimits {
    /// Most slots held across the node.
    pub node_max: usize,
    /// Of `node_max`, the last ones only operators take.
    pub node_operator_reserve: usize,
    /// Most slots one tenant's tokens hold together.
    pub tenant_max: usize,
    /// Of `tenant_max`, the last ones only the tenant's operator takes.
    pub tenant_operator_reserve: usize,
    /// Most slots one agent token holds.
    pub agent_token_max: usize,
    /// Most slots one operator token holds.
    pub operator_token_max: usize,
}

/// Which cap refused a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRefusal {
    /// The node's `node_max`, or (for an agent) all of it but the operators' reserve.
    Node,
    /// The tenant's `tenant_max`, or (for an agent) all of it but its operator's reserve.
    Tenant,
    /// The token's own cap.
    Token,
}

/// One holder of slots: a tenant's operator, or one agent.
type Holder = (TenantHandle, Option<AgentId>);

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_tenant: BTreeMap<TenantHandle, usize>,
    by_holder: BTreeMap<Holder, usize>,
}

/// A node's slots of one kind. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Slots {
    limits: SlotLimits,
    counts: Arc<Mutex<Counts>>,
}

/// One held slot; dropping it frees the slot.
#[derive(Debug)]
pub struct SlotPermit {
    counts: Arc<Mutex<Counts>>,
    holder: Holder,
}

impl Slots {
    pub fn new(limits: SlotLimits) -> Self {
        assert!(
            limits.node_operator_reserve <= limits.node_max
                && limits.tenant_operator_reserve <= limits.tenant_max,
            "a reserve is a share of its cap: {limits:?}"
        );
        Slots {
            limits,
            counts: Arc::default(),
        }
    }

    /// Takes a slot for `principal`, or says which cap refuses it.
    pub fn try_acquire(&self, principal: &Principal) -> Result<SlotPermit, SlotRefusal> {
        let holder = holder_of(principal);
        let l = self.limits;
        // Agents stop short of the operators' reserves; operators may use everything.
        let (node_cap, tenant_cap, token_cap) = match holder.1 {
            Some(_) => (
                l.node_max - l.node_operator_reserve,
                l.tenant_max - l.tenant_operator_reserve,
                l.agent_token_max,
            ),
            None => (l.node_max, l.tenant_max, l.operator_token_max),
        };
        let mut counts = self.counts.lock().expect("slots lock");
        let tenant_held = counts.by_tenant.get(&holder.0).copied().unwrap_or(0);
        let holder_held = counts.by_holder.get(&holder).copied().unwrap_or(0);
        if holder_held >= token_cap {
            return Err(SlotRefusal::Token);
        }
        if tenant_held >= tenant_cap {
            return Err(SlotRefusal::Tenant);
        }
        if counts.total >= node_cap {
            return Err(SlotRefusal::Node);
        }
        counts.total += 1;
        *counts.by_tenant.entry(holder.0.clone()).or_default() += 1;
        *counts.by_holder.entry(holder.clone()).or_default() += 1;
        Ok(SlotPermit {
            counts: self.counts.clone(),
            holder,
        })
    }

    /// Slots held now, node-wide.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.counts.lock().expect("slots lock").total
    }
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().expect("slots lock");
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
        Principal::Operator { tenant } => (tenant.clone(), None),
        Principal::Agent { tenant, agent } => (tenant.clone(), Some(*agent)),
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{agent, operator, take};
    use super::*;

    const LIMITS: SlotLimits = SlotLimits {
        node_max: 20,
        node_operator_reserve: 4,
        tenant_max: 10,
        tenant_operator_reserve: 2,
        agent_token_max: 3,
        operator_token_max: 6,
    };

    #[test]
    fn each_token_kind_holds_at_most_its_own_cap() {
        let slots = Slots::new(LIMITS);
        let held = take(&slots, &agent("t", 1), LIMITS.agent_token_max);
        assert_eq!(
            slots.try_acquire(&agent("t", 1)).unwrap_err(),
            SlotRefusal::Token
        );
        let _operator = take(&slots, &operator("t"), LIMITS.operator_token_max);
        assert_eq!(
            slots.try_acquire(&operator("t")).unwrap_err(),
            SlotRefusal::Token
        );
        drop(held);
        // The operator's slots count in the tenant's share too: with 6 of the operator's held,
        // the tenant's agents have 2 left before its operator's reserve.
        let _again = take(&slots, &agent("t", 1), 2);
        assert_eq!(
            slots.try_acquire(&agent("t", 1)).unwrap_err(),
            SlotRefusal::Tenant
        );
    }

    #[test]
    fn agents_leave_the_tenant_reserve_to_its_operator_and_other_tenants_are_untouched() {
        let slots = Slots::new(LIMITS);
        let agents_cap = LIMITS.tenant_max - LIMITS.tenant_operator_reserve;
        let held: Vec<_> = (0..agents_cap as u64)
            .flat_map(|i| take(&slots, &agent("t", i), 1))
            .collect();
        assert_eq!(
            slots.try_acquire(&agent("t", 99)).unwrap_err(),
            SlotRefusal::Tenant
        );
        let reserve = take(&slots, &operator("t"), LIMITS.tenant_operator_reserve);
        assert_eq!(
            slots.try_acquire(&operator("t")).unwrap_err(),
            SlotRefusal::Tenant
        );
        let _other = take(&slots, &agent("u", 1), 1);
        drop(reserve);
        drop(held);
        assert_eq!(slots.held(), 1);
    }

    #[test]
    fn agents_leave_the_node_reserve_to_operators() {
        let slots = Slots::new(LIMITS);
        let agents_cap = LIMITS.node_max - LIMITS.node_operator_reserve;
        let per_tenant = LIMITS.tenant_max - LIMITS.tenant_operator_reserve;
        let held: Vec<_> = (0..agents_cap)
            .flat_map(|i| take(&slots, &agent(&format!("t{}", i / per_tenant), i as u64), 1))
            .collect();
        assert_eq!(
            slots.try_acquire(&agent("fresh", 1)).unwrap_err(),
            SlotRefusal::Node
        );
        let ops = take(&slots, &operator("fresh"), LIMITS.node_operator_reserve);
        assert_eq!(
            slots.try_acquire(&operator("late")).unwrap_err(),
            SlotRefusal::Node
        );
        drop((held, ops));
        assert_eq!(slots.held(), 0);
    }
}

/// Principals and grants for the unit tests of every kind of slot.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub fn operator(tenant: &str) -> Principal {
        Principal::Operator {
            tenant: tenant.into(),
        }
    }

    pub fn agent(tenant: &str, id: u64) -> Principal {
        Principal::Agent {
            tenant: tenant.into(),
            agent: AgentId(id),
        }
    }

    /// Takes `n` slots for `principal`, all of which must be granted.
    pub fn take(slots: &Slots, principal: &Principal, n: usize) -> Vec<SlotPermit> {
        (0..n)
            .map(|i| {
                slots
                    .try_acquire(principal)
                    .unwrap_or_else(|e| panic!("slot {i} of {principal:?}: {e:?}"))
            })
            .collect()
    }
}
