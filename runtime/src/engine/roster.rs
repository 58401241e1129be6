//! The pulse roster: what a pulse needs to know of each agent (its tenant, whether it is
//! terminated or online, its detector's floor and threshold), in one dense table indexed by agent id.
//!
//! Why a table of its own: a host's batch names up to `PULSE_BATCH_MAX` agents, and each one
//! looked up in the agents' B-tree and then in its `AgentState` (over a kilobyte, the tenant a
//! string behind another pointer) missed the cache two or three times; a profile of batched
//! pulses spent about two thirds of the node's time on those and the pulse book's look-ups. Ids are dense (one past the
//! highest ever created, never reused), so a vector indexed by id holds every card in 24 bytes,
//! a batch of neighbouring ids reads a few consecutive cache lines, and a look-up is one load.
//!
//! Derived, like the name and token indexes: [`Engine::apply`](super::Engine::apply) refreshes
//! the card of the agent each event is about, and an engine rebuilt from a snapshot builds the
//! table from its agents, so the roster is a function of the state alone (two engines with equal
//! state have equal rosters, whatever history made them).

use std::collections::BTreeMap;

use super::agent::{AgentId, AgentStatus};
use super::agent_state::AgentState;
use super::dense::DenseById;
use super::liveness::LivenessStatus;
use super::tenant::TenantName;

/// A tenant's rank among the tenants in name order: what a card holds instead of the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TenantRank(u32);

/// One agent as a pulse sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PulseCard {
    pub tenant: TenantRank,
    pub terminated: bool,
    /// Its liveness is `online` (a pulse of it writes nothing).
    pub online: bool,
    /// Its detector's floor (`LivenessPolicy::floor_ms`): a pulse's next deadline is this after
    /// the pulse.
    pub floor_ms: u64,
    /// Its fixed threshold (`LivenessPolicy::threshold_ms`): silent this long after a pulse, it
    /// is offline. With the floor, what a single pulse's answer says of its deadlines, so that
    /// answer needs no look-up of the agent's whole state.
    pub threshold_ms: u64,
}

impl PulseCard {
    fn of(tenant: TenantRank, state: &AgentState) -> PulseCard {
        let agent = state.agent();
        PulseCard {
            tenant,
            terminated: agent.status == AgentStatus::Terminated,
            online: agent.liveness.status == LivenessStatus::Online,
            floor_ms: agent.spec.liveness.floor_ms(),
            threshold_ms: agent.spec.liveness.threshold_ms(),
        }
    }
}

/// Every agent's card, by id, and every tenant's rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roster {
    ranks: BTreeMap<TenantName, TenantRank>,
    cards: DenseById<PulseCard>,
}

impl Roster {
    /// The roster of `tenants` and `agents` (an engine rebuilt from a snapshot).
    pub fn of<'a>(
        tenants: impl IntoIterator<Item = &'a TenantName>,
        agents: impl IntoIterator<Item = &'a AgentState>,
    ) -> Roster {
        let mut roster = Roster::default();
        for tenant in tenants {
            roster.add_tenant(tenant);
        }
        // A million agents at recovery: their tenant's rank is looked up again only when it
        // changes from the agent before (a fleet's agents come in runs of one tenant).
        let mut last: Option<(&str, TenantRank)> = None;
        for state in agents {
            let agent = state.agent();
            let tenant = match last {
                Some((name, rank)) if name == agent.tenant => rank,
                _ => {
                    let rank = roster
                        .rank(&agent.tenant)
                        .expect("an agent's tenant exists");
                    last = Some((&agent.tenant, rank));
                    rank
                }
            };
            roster.cards.insert(agent.id, PulseCard::of(tenant, state));
        }
        roster
    }

    /// `tenant` was created. The tenants after it in name order move one rank up, and so do
    /// their agents' cards: a scan of the table, as rare as a new tenant.
    pub fn add_tenant(&mut self, tenant: &TenantName) {
        if self.ranks.contains_key(tenant) {
            return;
        }
        let rank = TenantRank(self.ranks.range(..tenant.clone()).count() as u32);
        for (_, later) in self.ranks.range_mut(tenant.clone()..) {
            later.0 += 1;
        }
        for card in self.cards.values_mut() {
            if card.tenant >= rank {
                card.tenant.0 += 1;
            }
        }
        self.ranks.insert(tenant.clone(), rank);
    }

    /// `agent` is now `state` (`None`: deleted, or never created).
    pub fn refresh(&mut self, agent: AgentId, state: Option<&AgentState>) {
        match state {
            Some(state) => {
                let tenant = self
                    .rank(&state.agent().tenant)
                    .expect("an agent's tenant exists");
                self.cards.insert(agent, PulseCard::of(tenant, state));
            }
            None => {
                self.cards.remove(agent);
            }
        }
    }

    /// The rank of `tenant`, if it exists.
    pub fn rank(&self, tenant: &str) -> Option<TenantRank> {
        self.ranks.get(tenant).copied()
    }

    /// The card of `agent`, if it exists.
    pub fn card(&self, agent: AgentId) -> Option<PulseCard> {
        self.cards.get(agent).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_tenant_moves_the_later_tenants_and_their_cards_one_rank_up() {
        let mut roster = Roster::default();
        roster.add_tenant(&"b".to_string());
        roster.add_tenant(&"d".to_string());
        let card = |tenant| PulseCard {
            tenant,
            terminated: false,
            online: true,
            floor_ms: 30_000,
            threshold_ms: 90_000,
        };
        roster.cards.insert(AgentId(1), card(TenantRank(0)));
        roster.cards.insert(AgentId(2), card(TenantRank(1)));
        roster.add_tenant(&"c".to_string());
        roster.add_tenant(&"a".to_string());
        roster.add_tenant(&"c".to_string());
        assert_eq!(
            ["a", "b", "c", "d"].map(|t| roster.rank(t)),
            [0, 1, 2, 3].map(|r| Some(TenantRank(r)))
        );
        assert_eq!(roster.card(AgentId(1)).unwrap().tenant, TenantRank(1));
        assert_eq!(roster.card(AgentId(2)).unwrap().tenant, TenantRank(3));
        assert_eq!(roster.rank("e"), None);
        assert_eq!(roster.card(AgentId(3)), None);
        assert_eq!(roster.card(AgentId(u64::MAX)), None);
    }

    #[test]
    fn a_deleted_agent_leaves_no_card() {
        let mut roster = Roster::default();
        roster.add_tenant(&"t".to_string());
        let card = PulseCard {
            tenant: TenantRank(0),
            terminated: true,
            online: false,
            floor_ms: 1,
            threshold_ms: 3,
        };
        roster.cards.insert(AgentId(1), card);
        roster.refresh(AgentId(1), None);
        assert_eq!(roster.card(AgentId(1)), None);
        assert_eq!(roster, Roster::of([&"t".to_string()], []));
        roster.refresh(AgentId(7), None);
        assert!(roster.cards.is_empty());
    }
}
