//! Node-wide memory bounds: what the whole node keeps in memory across its agents, beside each
//! agent's own caps (`IDEMPOTENCY_KEYS_PER_AGENT_MAX`, `FINISHED_RUNS_KEPT_PER_AGENT`). Without
//! them 10,000 agents at their own caps could hold hundreds of GB.
//!
//! The bookkeeping here changes only in [`super::Engine::apply`], never by scanning every agent,
//! and decisions read it as of the engine's state alone, so replaying the same log rebuilds the
//! same bounds (and the same refusals and evictions).
//!
//! - **Idempotency keys**: a live key is never forgotten before its TTL (that would break the
//!   idempotency invariant), so at the node's cap a wakeup with a *new* key is refused — unless
//!   the node's oldest key has expired, in which case the oldest key is forgotten to make room.
//! - **Finished runs**: they are history for the API only (the event log keeps them), so the
//!   oldest finished across the node are evicted; `GET /v1/runs/{id}` then answers 404, as for a
//!   run past its agent's own cap.
//! - **Answer excerpts** (`report.answer_excerpt`, up to 32 KiB each) are kept on the node's newest
//!   finished runs only; older retained runs drop theirs (marked `excerpt_truncated`).

use std::collections::BTreeSet;

use super::agent::AgentId;
use super::run::RunId;
use super::wakeup::IDEMPOTENCY_TTL_MS;

/// Most idempotency keys the whole node remembers at once, across agents. A key costs its
/// record: the key itself three times (map key, age index, record; ≤ 200 chars each), the
/// wakeup's reason (≤ 500 chars) and task key (≤ 200 chars), about 200 bytes of structure: at
/// most ~1.5 KB with ASCII text, ~5.4 KB with 4-byte characters throughout. So at most ~150 MB
/// typical-worst, ~540 MB absolute worst. 100,000 keyed wakeups per 24 h (1.2 per second,
/// sustained) is the node's keyed-wakeup capacity; un-keyed wakeups are unaffected.
pub const IDEMPOTENCY_KEYS_PER_NODE_MAX: usize = 100_000;

/// Most finished runs the node keeps in memory for the API, across agents; the oldest finished
/// go first (the event log keeps them all). A retained run drops its payload; it carries its
/// reason (≤ 500 chars), detail (≤ 1,000 chars), task key (≤ 200 chars), a CLI session id
/// (≤ 256 chars) and ~500 bytes of structure: ≤ ~2.5 KB with ASCII text, ≤ ~8.5 KB with 4-byte
/// characters, so ≤ ~850 MB at worst (≈ 250 MB ASCII), excerpts apart (below).
pub const FINISHED_RUNS_KEPT_PER_NODE: usize = 100_000;

/// Most retained finished runs that keep their `report.answer_excerpt` (≤ 32 KiB each,
/// `ANSWER_EXCERPT_BYTES_MAX`): ≤ 320 MiB of excerpts. Older retained runs drop theirs; the
/// event log and the run's transcript still hold the answer.
pub const ANSWER_EXCERPTS_KEPT_PER_NODE: usize = 10_000;

/// The node-wide limits an engine enforces (the constants above by default; tests inject small
/// ones through [`super::Engine::with_limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    /// Agents the node keeps (`AGENTS_MAX`).
    pub agents: usize,
    /// Idempotency keys held across agents.
    pub idempotency_keys: usize,
    /// Finished runs held across agents.
    pub finished_runs: usize,
    /// Retained finished runs that keep their answer excerpt.
    pub answer_excerpts: usize,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            agents: super::agent::AGENTS_MAX,
            idempotency_keys: IDEMPOTENCY_KEYS_PER_NODE_MAX,
            finished_runs: FINISHED_RUNS_KEPT_PER_NODE,
            answer_excerpts: ANSWER_EXCERPTS_KEPT_PER_NODE,
        }
    }
}

/// How many keys one agent holds, and the first-use time of its oldest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySummary {
    pub held: usize,
    pub oldest_at_ms: Option<u64>,
}

/// A finished run's place in the node's finish order: the seq of its `run_finished`.
pub type FinishedAt = (u64, RunId);

/// The node-wide counts and orders, maintained by `Engine::apply`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeBounds {
    limits: NodeLimits,
    /// Idempotency keys held across agents (expired ones not yet forgotten included).
    keys_held: usize,
    /// Each agent holding keys, by the first use of its oldest: the node's oldest key belongs
    /// to the first entry. One entry per agent, so it stays small.
    oldest_keys: BTreeSet<(u64, AgentId)>,
    /// Finished runs held in memory, oldest finished first.
    finished: BTreeSet<FinishedAt>,
    /// Those of `finished` that still carry an answer excerpt.
    excerpts: BTreeSet<FinishedAt>,
}

impl NodeBounds {
    /// Empty bounds enforcing `limits`.
    pub fn new(limits: NodeLimits) -> Self {
        NodeBounds {
            limits,
            ..NodeBounds::default()
        }
    }

    /// The bounds of a whole fleet at once (a recovered engine's), enforcing `limits`: the keys
    /// held, each agent's oldest key, the finished runs held and those with an excerpt.
    pub fn of_all(
        limits: NodeLimits,
        keys_held: usize,
        mut oldest_keys: Vec<(u64, AgentId)>,
        mut finished: Vec<FinishedAt>,
        mut excerpts: Vec<FinishedAt>,
    ) -> Self {
        oldest_keys.sort_unstable();
        finished.sort_unstable();
        excerpts.sort_unstable();
        NodeBounds {
            limits,
            keys_held,
            oldest_keys: oldest_keys.into_iter().collect(),
            finished: finished.into_iter().collect(),
            excerpts: excerpts.into_iter().collect(),
        }
    }

    /// The limits enforced.
    pub fn limits(&self) -> NodeLimits {
        self.limits
    }

    /// Idempotency keys held across the node.
    pub fn keys_held(&self) -> usize {
        self.keys_held
    }

    /// Finished runs held across the node.
    pub fn finished_held(&self) -> usize {
        self.finished.len()
    }

    /// Retained finished runs that still carry an answer excerpt.
    pub fn excerpts_held(&self) -> usize {
        self.excerpts.len()
    }

    /// Whether a wakeup with a new key may be recorded at `now_ms`: the node is under its cap,
    /// or its oldest key has expired (applying the wakeup then forgets that key). Otherwise,
    /// the seconds until the oldest key expires.
    pub fn key_room(&self, now_ms: u64) -> Result<(), u64> {
        if self.keys_held < self.limits.idempotency_keys {
            return Ok(());
        }
        let Some((oldest_at_ms, _)) = self.oldest_keys.first() else {
            // A cap of zero keys: never room.
            return Err(IDEMPOTENCY_TTL_MS.div_ceil(1_000));
        };
        let expires_at_ms = oldest_at_ms.saturating_add(IDEMPOTENCY_TTL_MS);
        if expires_at_ms <= now_ms {
            return Ok(());
        }
        Err((expires_at_ms - now_ms).div_ceil(1_000))
    }

    /// An agent's keys went from `before` to `after`.
    pub fn keys_changed(&mut self, agent: AgentId, before: KeySummary, after: KeySummary) {
        self.keys_held = self.keys_held - before.held + after.held;
        if before.oldest_at_ms != after.oldest_at_ms {
            if let Some(at_ms) = before.oldest_at_ms {
                self.oldest_keys.remove(&(at_ms, agent));
            }
            if let Some(at_ms) = after.oldest_at_ms {
                self.oldest_keys.insert((at_ms, agent));
            }
        }
    }

    /// The agent holding the node's oldest key, when the node holds more keys than its cap.
    pub fn key_over_cap(&self) -> Option<AgentId> {
        if self.keys_held <= self.limits.idempotency_keys {
            return None;
        }
        self.oldest_keys.first().map(|(_, agent)| *agent)
    }

    /// A run finished and is retained, with or without an answer excerpt.
    pub fn run_finished(&mut self, at: FinishedAt, has_excerpt: bool) {
        self.finished.insert(at);
        if has_excerpt {
            self.excerpts.insert(at);
        }
    }

    /// A retained run was evicted (by its agent's cap or the node's).
    pub fn run_evicted(&mut self, at: FinishedAt) {
        self.finished.remove(&at);
        self.excerpts.remove(&at);
    }

    /// The node's oldest finished run, when the node holds more than its cap.
    pub fn run_over_cap(&self) -> Option<FinishedAt> {
        (self.finished.len() > self.limits.finished_runs)
            .then(|| *self.finished.first().expect("over a cap, so not empty"))
    }

    /// The oldest run still carrying an excerpt, when more than the cap do; it is no longer
    /// counted as carrying one.
    pub fn take_excerpt_over_cap(&mut self) -> Option<FinishedAt> {
        (self.excerpts.len() > self.limits.answer_excerpts)
            .then(|| self.excerpts.pop_first().expect("over a cap, so not empty"))
    }
}
