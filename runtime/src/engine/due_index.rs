//! Which agents `FireDueTimers` must look at, and when the timer loop must next wake: ordered by
//! instant, so neither scans the fleet (issue 13: a million agents; a fire's cost grows with
//! the agents due, and with the fleet only by a logarithm).
//!
//! Kept by `Engine::apply` from each agent's state before and after an event, never by
//! scanning; a pure function of the agents' states, so a recovered engine has the same index.

use std::collections::BTreeSet;

use super::agent::AgentId;
use super::agent_state::AgentState;

/// Why an agent is filed at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Chamber {
    /// The schedule's next slot (`next_fire_at_ms`).
    Timer,
    /// The idle chamber (`next_idle_at_ms`).
    Idle,
    /// The end of the cooldown a queued run waits out.
    CooldownEnd,
}

/// What one agent is filed under: its deadlines as its state says them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deadlines {
    timer_ms: Option<u64>,
    idle_ms: Option<u64>,
    /// `(from_ms, until_ms)` of the cooldown a queued run waits out.
    cooldown: Option<(u64, u64)>,
}

impl Deadlines {
    /// The deadlines of `state` now.
    pub fn of(state: &AgentState) -> Deadlines {
        let agent = state.agent();
        Deadlines {
            timer_ms: agent.next_fire_at_ms,
            idle_ms: agent.next_idle_at_ms,
            cooldown: state
                .coordinator
                .waiting_cooldown()
                .map(|c| (c.from_ms, c.until_ms)),
        }
    }

    fn entries(self, agent: AgentId) -> impl Iterator<Item = (u64, AgentId, Chamber)> {
        [
            self.timer_ms.map(|at| (at, agent, Chamber::Timer)),
            self.idle_ms.map(|at| (at, agent, Chamber::Idle)),
            self.cooldown
                .map(|(_, until)| (until, agent, Chamber::CooldownEnd)),
        ]
        .into_iter()
        .flatten()
    }
}

/// Every agent's deadlines, ordered by instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueIndex {
    /// Timer slots, idle fires and cooldown ends.
    at: BTreeSet<(u64, AgentId, Chamber)>,
    /// `(from_ms, agent)` of every cooldown a queued run waits out: a wall clock gone back before
    /// `from_ms` makes that run due at once (`Cooldown::due_at_ms`).
    cooldown_from: BTreeSet<(u64, AgentId)>,
}

impl DueIndex {
    /// The index of every agent's deadlines at once (a recovered engine's), built from sorted
    /// entries in one pass instead of an insert per deadline.
    pub fn of_all(deadlines: Vec<(AgentId, Deadlines)>) -> DueIndex {
        let mut at: Vec<_> = deadlines
            .iter()
            .flat_map(|&(agent, d)| d.entries(agent))
            .collect();
        at.sort_unstable();
        let mut cooldown_from: Vec<_> = deadlines
            .iter()
            .filter_map(|&(agent, d)| d.cooldown.map(|(from, _)| (from, agent)))
            .collect();
        cooldown_from.sort_unstable();
        DueIndex {
            at: at.into_iter().collect(),
            cooldown_from: cooldown_from.into_iter().collect(),
        }
    }

    /// Files `agent` under `after` instead of `before`.
    pub fn refile(&mut self, agent: AgentId, before: Deadlines, after: Deadlines) {
        if before == after {
            return;
        }
        for entry in before.entries(agent) {
            self.at.remove(&entry);
        }
        if let Some((from, _)) = before.cooldown {
            self.cooldown_from.remove(&(from, agent));
        }
        self.at.extend(after.entries(agent));
        if let Some((from, _)) = after.cooldown {
            self.cooldown_from.insert((from, agent));
        }
    }

    /// The earliest wall instant at which an agent is due, read at `now_ms`.
    pub fn next_ms(&self, now_ms: u64) -> Option<u64> {
        let clock_went_back = self
            .cooldown_from
            .last()
            .is_some_and(|&(from, _)| now_ms < from);
        let first = self.at.first().map(|&(at, _, _)| at);
        if clock_went_back {
            return Some(first.map_or(now_ms, |at| at.min(now_ms)));
        }
        first
    }

    /// The agents with a deadline at or before `now_ms`, in id order (the order
    /// `FireDueTimers` decides them in).
    pub fn due(&self, now_ms: u64) -> BTreeSet<AgentId> {
        let mut due: BTreeSet<AgentId> = self
            .at
            .iter()
            .take_while(|&&(at, _, _)| at <= now_ms)
            .map(|&(_, agent, _)| agent)
            .collect();
        let went_back = self
            .cooldown_from
            .range((now_ms.saturating_add(1), AgentId(0))..)
            .map(|&(_, agent)| agent);
        due.extend(went_back);
        due
    }

    /// Agents filed (for tests and the benchmarks' memory figures).
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether nothing is filed.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty() && self.cooldown_from.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadlines(timer: Option<u64>, idle: Option<u64>, cooldown: Option<(u64, u64)>) -> Deadlines {
        Deadlines {
            timer_ms: timer,
            idle_ms: idle,
            cooldown,
        }
    }

    #[test]
    fn due_agents_and_the_next_deadline_come_from_the_index() {
        let mut index = DueIndex::default();
        index.refile(
            AgentId(2),
            Deadlines::default(),
            deadlines(Some(100), None, None),
        );
        index.refile(
            AgentId(1),
            Deadlines::default(),
            deadlines(Some(300), Some(100), None),
        );
        index.refile(
            AgentId(3),
            Deadlines::default(),
            deadlines(None, None, Some((50, 200))),
        );
        assert_eq!(
            index.next_ms(0),
            Some(0),
            "a clock before a cooldown's start: due now"
        );
        assert_eq!(index.due(0), BTreeSet::from([AgentId(3)]));
        assert_eq!(index.next_ms(60), Some(100));
        assert_eq!(index.due(99), BTreeSet::new());
        assert_eq!(index.due(100), BTreeSet::from([AgentId(1), AgentId(2)]));
        assert_eq!(
            index.due(200),
            BTreeSet::from([AgentId(1), AgentId(2), AgentId(3)])
        );

        // Timer and idle at the same instant: moving one keeps the other filed.
        index.refile(
            AgentId(2),
            deadlines(Some(100), None, None),
            deadlines(Some(100), Some(100), None),
        );
        index.refile(
            AgentId(2),
            deadlines(Some(100), Some(100), None),
            deadlines(Some(400), Some(100), None),
        );
        assert_eq!(index.due(100), BTreeSet::from([AgentId(1), AgentId(2)]));
        index.refile(
            AgentId(3),
            deadlines(None, None, Some((50, 200))),
            Deadlines::default(),
        );
        index.refile(
            AgentId(1),
            deadlines(Some(300), Some(100), None),
            Deadlines::default(),
        );
        index.refile(
            AgentId(2),
            deadlines(Some(400), Some(100), None),
            Deadlines::default(),
        );
        assert!(index.is_empty());
        assert_eq!(index.next_ms(0), None);
    }
}
