//! The engine's durable state at one log position, and the engine rebuilt from it (ADR 0016).
//!
//! An [`Image`] holds only what the log's events made and nothing can recompute: the tenants,
//! the id counters and every agent's whole state. Everything derived from those (the token and
//! name indexes, which agent owns which run, the due index, the node-wide counts and eviction
//! orders, the pulse roster) is rebuilt by [`Engine::from_image`], never stored, so a snapshot
//! cannot disagree with itself. Taking an image is cheap: the agents are shared (`Arc`), so it clones pointers;
//! an agent the engine changes afterwards is copied then, the image keeps the old one.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::agent::AgentId;
use super::agent_state::AgentState;
use super::due_index::{Deadlines, DueIndex};
use super::node_bounds::{FinishedAt, NodeBounds, NodeLimits};
use super::predicate::HeartbeatId;
use super::run::RunId;
use super::tenant::{Principal, Tenant, TenantHandle, TenantName, TokenHash};
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
    ///
    /// Why the indexes are gathered, sorted and then built in one go rather than inserted one
    /// agent at a time: at a million agents the token and name indexes take their keys in random
    /// order, and a random insert into a B-tree misses the cache at every level (4.6 of 6.1 s
    /// of recovery's engine rebuild); a sorted vector becomes a B-tree in one pass.
    pub fn from_image_with_limits(image: Image, limits: NodeLimits) -> Result<Engine, ImageError> {
        let fail = |reason: String| ImageError {
            seq: image.seq,
            reason,
        };
        let mut tenants = BTreeMap::new();
        for tenant in &image.tenants {
            if tenants
                .insert(tenant.name.clone(), tenant.clone())
                .is_some()
            {
                return Err(fail(format!("tenant {} appears twice", tenant.name)));
            }
        }
        if let Some(pair) = image
            .agents
            .windows(2)
            .find(|pair| pair[0].agent().id >= pair[1].agent().id)
        {
            let id = pair[1].agent().id;
            return Err(fail(format!("agent {id} appears twice or out of id order")));
        }
        // One shared name per tenant, for its operator's principal and every agent's.
        let handles: BTreeMap<TenantName, TenantHandle> = tenants
            .keys()
            .map(|name| (name.clone(), TenantHandle::from(name.as_str())))
            .collect();
        let mut derived =
            Derived::of_agents(&image.agents, image.next_agent, &handles).map_err(fail)?;
        derived.tokens.extend(image.tenants.iter().map(|tenant| {
            (
                tenant.operator_token_hash.clone(),
                Principal::Operator {
                    tenant: handles[&tenant.name].clone(),
                },
            )
        }));
        let agents = image
            .agents
            .iter()
            .map(|state| (state.agent().id, state.clone()));
        let mut engine = Engine {
            last_seq: image.seq,
            next_agent: image.next_agent,
            next_wakeup: image.next_wakeup,
            next_run: image.next_run,
            tenants,
            agents: agents.collect(),
            ..Engine::default()
        };
        derived.build(&mut engine, limits).map_err(fail)?;
        engine.roster =
            super::roster::Roster::of(engine.tenants.keys(), engine.agents.values().map(|s| &**s));
        Ok(engine)
    }
}

/// Everything an engine derives from its agents, gathered agent by agent, then built at once.
#[derive(Default)]
struct Derived {
    tokens: Vec<(TokenHash, Principal)>,
    names: Vec<((TenantName, String), AgentId)>,
    heartbeat_owners: Vec<((TenantName, HeartbeatId), AgentId)>,
    run_owner: Vec<(RunId, AgentId)>,
    deadlines: Vec<(AgentId, Deadlines)>,
    keys_held: usize,
    oldest_keys: Vec<(u64, AgentId)>,
    finished: Vec<FinishedAt>,
    excerpts: Vec<FinishedAt>,
}

impl Derived {
    /// What every index holds of `agents`, gathered on every core there is.
    fn of_agents(
        agents: &[Arc<AgentState>],
        next_agent: u64,
        tenants: &BTreeMap<TenantName, TenantHandle>,
    ) -> Result<Derived, String> {
        let gather = |part: &[Arc<AgentState>]| {
            let mut derived = Derived::default();
            for state in part {
                derived.file(state, next_agent, tenants)?;
            }
            Ok::<_, String>(derived)
        };
        // Every index is sorted before it is built, so how the agents are shared out does not
        // change the engine.
        let parts = crate::parallel::map_chunks(agents, gather);
        let mut all = Derived::default();
        for part in parts {
            all.append(part?);
        }
        Ok(all)
    }

    fn append(&mut self, mut other: Derived) {
        self.tokens.append(&mut other.tokens);
        self.names.append(&mut other.names);
        self.heartbeat_owners.append(&mut other.heartbeat_owners);
        self.run_owner.append(&mut other.run_owner);
        self.deadlines.append(&mut other.deadlines);
        self.keys_held += other.keys_held;
        self.oldest_keys.append(&mut other.oldest_keys);
        self.finished.append(&mut other.finished);
        self.excerpts.append(&mut other.excerpts);
    }

    /// Files one agent of an image: what each index holds of it.
    fn file(
        &mut self,
        state: &AgentState,
        next_agent: u64,
        tenants: &BTreeMap<TenantName, TenantHandle>,
    ) -> Result<(), String> {
        let agent = state.agent();
        let id = agent.id;
        if id.0 >= next_agent {
            return Err(format!(
                "agent {id} is at or past the next agent id {next_agent}"
            ));
        }
        let Some(tenant) = tenants.get(&agent.tenant) else {
            return Err(format!(
                "agent {id} is in tenant {}, which the snapshot lacks",
                agent.tenant
            ));
        };
        self.tokens.push((
            agent.token_hash.clone(),
            Principal::Agent {
                tenant: tenant.clone(),
                agent: id,
            },
        ));
        self.names
            .push(((agent.tenant.clone(), agent.name.clone()), id));
        self.heartbeat_owners.extend(
            state
                .heartbeats()
                .iter()
                .map(|heartbeat| ((agent.tenant.clone(), heartbeat.id.clone()), id)),
        );
        self.run_owner.extend(state.runs().map(|run| (run.id, id)));
        self.deadlines.push((id, Deadlines::of(state)));
        let keys = state.key_summary();
        self.keys_held += keys.held;
        self.oldest_keys
            .extend(keys.oldest_at_ms.map(|at_ms| (at_ms, id)));
        for finished in state.finished_order() {
            self.finished.push(*finished);
            if state.has_answer_excerpt(finished.1) {
                self.excerpts.push(*finished);
            }
        }
        Ok(())
    }

    /// Builds every index from what was filed; a key held twice makes the image inconsistent.
    fn build(mut self, engine: &mut Engine, limits: NodeLimits) -> Result<(), String> {
        // The two large sorts (a token hash and a name per agent) side by side.
        let (tokens, names) = (
            std::mem::take(&mut self.tokens),
            std::mem::take(&mut self.names),
        );
        let sort_tokens = |mut tokens: Vec<(TokenHash, Principal)>| {
            tokens.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            tokens
        };
        let sort_names = |names| {
            sort_by_text(names, |((tenant, name), _): &((TenantName, String), _)| {
                (tenant.as_str(), name.as_str())
            })
        };
        if crate::parallel::threads() > 1 {
            std::thread::scope(|scope| {
                let sorted = scope.spawn(|| sort_tokens(tokens));
                self.names = sort_names(names);
                self.tokens = sorted.join().expect("sorting does not panic");
            });
        } else {
            self.tokens = sort_tokens(tokens);
            self.names = sort_names(names);
        }
        if let Some(pair) = self.tokens.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(match &pair[1].1 {
                Principal::Agent { agent, .. } => {
                    format!("agent {agent}'s token hash is held twice")
                }
                Principal::Operator { tenant } => {
                    format!("tenant {tenant}'s operator token hash is held twice")
                }
            });
        }
        if let Some(pair) = self.names.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(format!("the name {:?} is held twice", (pair[0].0).1));
        }
        self.heartbeat_owners.sort_unstable();
        if let Some(pair) = self
            .heartbeat_owners
            .windows(2)
            .find(|pair| pair[0].0 == pair[1].0)
        {
            return Err(format!("heartbeat {} is held twice", (pair[0].0).1));
        }
        self.run_owner.sort_unstable();
        if let Some(pair) = self
            .run_owner
            .windows(2)
            .find(|pair| pair[0].0 == pair[1].0)
        {
            return Err(format!(
                "run {} is held by agents {} and {}",
                pair[0].0, pair[0].1, pair[1].1
            ));
        }
        let (tokens, names) = (self.tokens, self.names);
        if crate::parallel::threads() > 1 {
            std::thread::scope(|scope| {
                let built = scope.spawn(|| tokens.into_iter().collect());
                engine.names = names.into_iter().collect();
                engine.tokens = built.join().expect("building an index does not panic");
            });
        } else {
            engine.tokens = tokens.into_iter().collect();
            engine.names = names.into_iter().collect();
        }
        engine.heartbeat_owners = self.heartbeat_owners.into_iter().collect();
        engine.run_owner = self.run_owner.into_iter().collect();
        engine.due = DueIndex::of_all(self.deadlines);
        engine.bounds = NodeBounds::of_all(
            limits,
            self.keys_held,
            self.oldest_keys,
            self.finished,
            self.excerpts,
        );
        Ok(())
    }
}

/// `entries` in the order of the text `key` gives each, a group and a name compared in that
/// order (as `sort_unstable_by` comparing `key`s would), for entries of few distinct groups.
///
/// Why not that sort itself: sorting a million agents' token hashes or names took about a second
/// each, nearly all of it fetching strings scattered in memory to compare them. Here each entry
/// is first given a number beside it, the group's rank among the groups and then the name's first
/// [`SORT_PREFIX_BYTES`] bytes, which orders as the texts do wherever it differs: most
/// comparisons read only that, and only entries whose numbers are equal compare their texts.
fn sort_by_text<T>(entries: Vec<T>, key: impl Fn(&T) -> (&str, &str)) -> Vec<T> {
    let ranks: BTreeMap<String, u32> = {
        let groups: std::collections::BTreeSet<&str> =
            entries.iter().map(|entry| key(entry).0).collect();
        (0..)
            .zip(groups)
            .map(|(rank, group)| (group.to_string(), rank))
            .collect()
    };
    let mut ranked: Vec<(u128, T)> = entries
        .into_iter()
        .map(|entry| {
            let (group, name) = key(&entry);
            (sort_number(ranks[group], name.as_bytes()), entry)
        })
        .collect();
    ranked.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| key(&a.1).cmp(&key(&b.1))));
    ranked.into_iter().map(|(_, entry)| entry).collect()
}

/// Bytes of a name that [`sort_by_text`] keeps beside each entry.
const SORT_PREFIX_BYTES: usize = 12;

/// `rank` in the top 32 bits, then the first [`SORT_PREFIX_BYTES`] of `name` (zeros past its
/// end): where two such numbers differ, they order as (rank, name) do.
fn sort_number(rank: u32, name: &[u8]) -> u128 {
    let mut bytes = [0_u8; 16];
    bytes[..4].copy_from_slice(&rank.to_be_bytes());
    let head = name.len().min(SORT_PREFIX_BYTES);
    bytes[4..4 + head].copy_from_slice(&name[..head]);
    u128::from_be_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::agent::AgentSpec;
    use crate::engine::Command;

    /// A name of up to 15 characters from three (NUL among them), so that shared prefixes,
    /// lengths up to and past the bytes kept, and equal names all occur.
    fn short_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy;
        proptest::collection::vec(proptest::sample::select(vec!['a', 'b', '\0']), 0..16)
            .prop_map(|chars| chars.into_iter().collect())
    }

    proptest::proptest! {
        /// `sort_by_text` orders entries as comparing their texts does, and keeps every one.
        #[test]
        fn the_sort_by_kept_numbers_orders_as_the_texts_do(
            drawn in proptest::collection::vec((0..3_usize, short_text()), 0..80)
        ) {
            let groups = ["", "t", "t\0"];
            let entries: Vec<((String, String), usize)> = drawn
                .into_iter()
                .enumerate()
                .map(|(i, (group, name))| ((groups[group].to_string(), name), i))
                .collect();
            let sorted = sort_by_text(entries.clone(), |((group, name), _)| {
                (group.as_str(), name.as_str())
            });
            let mut expected = entries.clone();
            expected.sort_by(|a, b| a.0.cmp(&b.0));
            // The sort is unstable: equal texts may come in either order.
            let texts = |all: &[((String, String), usize)]| {
                all.iter().map(|entry| entry.0.clone()).collect::<Vec<_>>()
            };
            proptest::prop_assert_eq!(texts(&sorted), texts(&expected));
            let mut ids: Vec<usize> = sorted.iter().map(|entry| entry.1).collect();
            ids.sort_unstable();
            proptest::prop_assert_eq!(ids, (0..entries.len()).collect::<Vec<_>>());
        }
    }

    /// An engine of tenant `t` holding one agent per `(name, token)`, ids from 1, with timers.
    fn engine_of(agents: &[(&str, &str)]) -> Engine {
        let mut engine = Engine::new();
        let mut commands = vec![Command::EnsureTenant {
            tenant: "t".into(),
            operator_token_hash: TokenHash::of("operator"),
        }];
        commands.extend(agents.iter().map(|(name, token)| Command::CreateAgent {
            tenant: "t".into(),
            spec: AgentSpec::with_interval(name, Some(60_000)),
            token_hash: TokenHash::of(token),
        }));
        commands.push(Command::FireDueTimers);
        for command in commands {
            let now_ms = match command {
                Command::FireDueTimers => 10 * 60_000,
                _ => 0,
            };
            let events = engine.decide(&command, now_ms).expect("accepted").events;
            events.iter().for_each(|event| engine.apply(event));
        }
        engine
    }

    fn refusal(image: Image) -> String {
        Engine::from_image(image)
            .expect_err("an inconsistent image is refused")
            .reason
    }

    #[test]
    fn an_image_restores_the_engine_it_was_taken_from_with_every_index() {
        // More agents than the rebuild shares out among threads, so the gathering is split.
        let names: Vec<String> = (0..40).map(|i| format!("agent-{i}")).collect();
        let agents: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), n.as_str())).collect();
        let engine = engine_of(&agents);
        assert!(!engine.run_owner.is_empty(), "timers fired: runs are owned");
        let restored = Engine::from_image(engine.image()).expect("restores");
        assert_eq!(restored, engine);
        assert_eq!(restored.image(), engine.image());
    }

    #[test]
    fn an_image_that_contradicts_itself_is_refused_naming_what() {
        let engine = engine_of(&[("a", "x"), ("b", "y")]);
        let mut twice = engine.image();
        twice.tenants.push(twice.tenants[0].clone());
        assert_eq!(refusal(twice), "tenant t appears twice");

        let mut repeated = engine.image();
        repeated.agents.push(repeated.agents[0].clone());
        assert_eq!(
            refusal(repeated),
            "agent 1 appears twice or out of id order"
        );

        let mut orphaned = engine.image();
        orphaned.tenants.clear();
        assert!(refusal(orphaned).contains("which the snapshot lacks"));

        let mut ahead = engine.image();
        ahead.next_agent = 2;
        assert_eq!(refusal(ahead), "agent 2 is at or past the next agent id 2");

        // Agent 1 of another engine holds agent 2's token: two agents, one token.
        let other = engine_of(&[("c", "y")]);
        let mut shared_token = engine.image();
        shared_token.agents[0] = other.image().agents[0].clone();
        assert_eq!(refusal(shared_token), "agent 2's token hash is held twice");

        // Agent 1 of a third engine is named like agent 2.
        let namesake = engine_of(&[("b", "z")]);
        let mut shared_name = engine.image();
        shared_name.agents[0] = namesake.image().agents[0].clone();
        assert_eq!(refusal(shared_name), "the name \"b\" is held twice");
    }
}
