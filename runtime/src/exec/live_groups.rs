//! The process groups a node's runs have alive right now, with the grace each was given. A
//! node that stops waits here until every group is gone (its runs' guards send SIGTERM, then
//! SIGKILL after the grace), so that no child outlives `vigil serve`'s clean exit.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long, past the largest grace, a stopping node waits for SIGKILLed groups to be reaped.
/// SIGKILL cannot be caught, so this only covers the kernel tearing the processes down.
pub const KILL_SETTLE_MS: u64 = 2_000;

/// The live groups of one node, by process group id.
#[derive(Debug, Default)]
pub struct LiveGroups {
    groups: Mutex<BTreeMap<u32, u64>>,
    changed: tokio::sync::Notify,
}

/// One group's place in [`LiveGroups`]; dropping it says the group is gone.
#[derive(Debug)]
pub struct LiveGroup {
    groups: Arc<LiveGroups>,
    pgid: u32,
}

impl LiveGroups {
    /// Registers group `pgid`, to be given `grace_ms` between SIGTERM and SIGKILL.
    pub fn enter(self: &Arc<Self>, pgid: u32, grace_ms: u64) -> LiveGroup {
        self.lock().insert(pgid, grace_ms);
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
        let largest = self.lock().values().copied().max().unwrap_or(0);
        let bound = Duration::from_millis(largest.saturating_add(KILL_SETTLE_MS));
        tokio::time::timeout(bound, async {
            loop {
                let changed = self.changed.notified();
                if self.lock().is_empty() {
                    return;
                }
                changed.await;
            }
        })
        .await
        .is_ok()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, u64>> {
        // Why not poison-propagate: the map stays consistent whatever panicked while holding it.
        self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        assert!(groups.drained().await, "an empty registry is drained at once");
        let first = groups.enter(10, 50);
        let second = groups.enter(11, 50);
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
        let _stuck = groups.enter(12, 1_000);
        let started = tokio::time::Instant::now();
        assert!(!groups.drained().await);
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(1_000 + KILL_SETTLE_MS)
        );
    }
}
