//! The process groups a node's runs have alive right now, with the agent and the grace of each.
//! A node that stops waits here until every group is gone (its runs' guards send SIGTERM, then
//! SIGKILL after the grace), so that no child outlives `vigil serve`'s clean exit. A run about
//! to spawn waits here until its agent's earlier groups are gone: a run cancelled (by a pause, an
//! operator, a time limit) ends in the log at once while its children get their grace, and the
//! agent's next run must not start a second child beside them (one execution per agent; the
//! simulator's `one_execution_per_agent` check found it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::engine::agent::AgentId;

/// How long, past the largest grace, a stopping node waits for SIGKILLed groups to be reaped.
/// SIGKILL cannot be caught, so this only covers the kernel tearing the processes down.
pub const KILL_SETTLE_MS: u64 = 2_000;

/// A live group's agent and grace.
#[derive(Debug, Clone, Copy)]
struct Entry {
    agent: AgentId,
    grace_ms: u64,
}

/// The live groups of one node, by process group id.
#[derive(Debug, Default)]
pub struct LiveGroups {
    groups: Mutex<BTreeMap<u32, Entry>>,
    changed: tokio::sync::Notify,
}

/// One group's place in [`LiveGroups`]; dropping it says the group is gone.
#[derive(Debug)]
pub struct LiveGroup {
    groups: Arc<LiveGroups>,
    pgid: u32,
}

impl LiveGroups {
    /// Registers `agent`'s group `pgid`, to be given `grace_ms` between SIGTERM and SIGKILL.
    pub fn enter(self: &Arc<Self>, agent: AgentId, pgid: u32, grace_ms: u64) -> LiveGroup {
        self.lock().insert(pgid, Entry { agent, grace_ms });
        LiveGroup {
            groups: self.clone(),
            pgid,
        }
    }

    /// The groups alive now.
    pub fn pgids(&self) -> Vec<u32> {
        self.lock().keys().copied().collect()
    }

    /// Waits until every group is gone, at most the largest grace registered plus
    /// [`KILL_SETTLE_MS`]. Answers whether they all went.
    pub async fn drained(&self) -> bool {
        self.gone_where(|_| true).await
    }

    /// Waits until no group of `agent` is left, at most the largest grace among them plus
    /// [`KILL_SETTLE_MS`] (a group even SIGKILL cannot end is invariant 14's to report, not a
    /// reason to stop the agent for good). Answers whether they all went.
    pub async fn agent_clear(&self, agent: AgentId) -> bool {
        self.gone_where(|entry| entry.agent == agent).await
    }

    async fn gone_where(&self, matches: impl Fn(&Entry) -> bool) -> bool {
        let any_left = || self.lock().values().any(&matches);
        if !any_left() {
            return true;
        }
        let largest = self
            .lock()
            .values()
            .filter(|entry| matches(entry))
            .map(|entry| entry.grace_ms)
            .max()
            .unwrap_or(0);
        let bound = Duration::from_millis(largest.saturating_add(KILL_SETTLE_MS));
        tokio::time::timeout(bound, async {
            loop {
                let changed = self.changed.notified();
                if !any_left() {
                    return;
                }
                changed.await;
            }
        })
        .await
        .is_ok()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Entry>> {
        // Why not poison-propagate: the map stays consistent whatever panicked while holding it.
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for LiveGroup {
    fn drop(&mut self) {
        self.groups.lock().remove(&self.pgid);
        self.groups.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drained_waits_for_the_last_group_to_leave() {
        let groups = Arc::new(LiveGroups::default());
        assert!(
            groups.drained().await,
            "an empty registry is drained at once"
        );
        let first = groups.enter(AgentId(1), 10, 50);
        let second = groups.enter(AgentId(2), 11, 50);
        assert_eq!(groups.pgids(), vec![10, 11]);
        let leave = tokio::spawn(async move {
            tokio::task::yield_now().await;
            drop(first);
            drop(second);
        });
        assert!(groups.drained().await);
        leave.await.unwrap();
        assert!(groups.pgids().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn drained_gives_up_after_the_largest_grace_and_the_settle_time() {
        let groups = Arc::new(LiveGroups::default());
        let _stuck = groups.enter(AgentId(1), 12, 1_000);
        let started = tokio::time::Instant::now();
        assert!(!groups.drained().await);
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(1_000 + KILL_SETTLE_MS)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_run_waits_for_its_own_agent_s_groups_only() {
        let groups = Arc::new(LiveGroups::default());
        let _other_agent = groups.enter(AgentId(2), 20, 60_000);
        assert!(
            groups.agent_clear(AgentId(1)).await,
            "another agent's group does not hold agent 1 back"
        );
        let earlier = groups.enter(AgentId(1), 21, 5_000);
        let started = tokio::time::Instant::now();
        let leave = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(earlier);
        });
        assert!(groups.agent_clear(AgentId(1)).await);
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        leave.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_that_never_leaves_holds_its_agent_for_its_grace_and_the_settle_time() {
        let groups = Arc::new(LiveGroups::default());
        let _stuck = groups.enter(AgentId(1), 22, 5_000);
        let started = tokio::time::Instant::now();
        assert!(!groups.agent_clear(AgentId(1)).await);
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(5_000 + KILL_SETTLE_MS)
        );
    }
}
