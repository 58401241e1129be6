//! When the node takes a snapshot, and taking it off the writer (ADR 0016).
//!
//! After each group commit the writer asks [`Snapshots::due`]; when a snapshot is due it
//! captures the engine's image under the engine's lock (pointer clones) and hands it to a
//! blocking thread, which encodes and writes it chunk by chunk while the writer goes on. One
//! snapshot at a time; the next is due only once this one is written.

/// Events after the current snapshot that make the next one due, at least. Why: replaying
/// 50,000 events takes about a second on the benchmark machine (docs/benchmarks.md), so a
/// restart replays at most that much on top of reading the snapshot.
pub const SNAPSHOT_EVERY_EVENTS: u64 = 50_000;

/// Time after the current snapshot that makes the next one due when at least one event has
/// come since: a quiet node still gets a recent snapshot, and compaction (which deletes only
/// events a snapshot holds) stays at most this far behind `EVENTS_RETENTION_MS`. Why six hours
/// and not one: the event count above already bounds what a restart replays, so the clock only
/// has to keep compaction going. A snapshot rewrites every agent, and a small busy fleet's
/// agents are tens of kilobytes each (history, finished runs): hourly, the 75-agent Heart fleet
/// spent about 15 % of its node's CPU writing snapshots (the simulator's profile of a fleet
/// week, docs/benchmarks.md), to shorten a replay of a few thousand events (a few ms).
pub const SNAPSHOT_EVERY_MS: u64 = 6 * 60 * 60 * 1_000;

/// How long events stay in the log once a snapshot holds them: the feed, the wakeup history
/// and the alert sinks read them back this far (7 days, the longest alert catch-up bound).
/// Older ones are compacted after each snapshot.
pub const EVENTS_RETENTION_MS: u64 = 7 * 24 * 60 * 60 * 1_000;

/// When snapshots are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// Events after the current snapshot that make the next one due. Raised to the number of
    /// agents: a snapshot writes every agent, so it is taken at most once per that many
    /// events and its cost per event stays constant however large the fleet.
    pub every_events: u64,
    /// Milliseconds (monotonic) after the current snapshot that make the next one due.
    pub every_ms: u64,
    /// Events the current snapshot holds and older than this (wall clock) leave the log.
    pub keep_events_ms: u64,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        SnapshotPolicy {
            every_events: SNAPSHOT_EVERY_EVENTS,
            every_ms: SNAPSHOT_EVERY_MS,
            keep_events_ms: EVENTS_RETENTION_MS,
        }
    }
}

/// The shell's record of its snapshots.
#[derive(Debug)]
pub(crate) struct Snapshots {
    policy: SnapshotPolicy,
    /// The log position of the current snapshot (0: none yet).
    current_seq: u64,
    /// The monotonic instant the current snapshot was taken (or the node started).
    taken_at_ms: u64,
    /// A snapshot is being written.
    writing: bool,
}

impl Snapshots {
    pub(crate) fn new(policy: SnapshotPolicy, current_seq: u64, now_ms: u64) -> Self {
        Snapshots {
            policy,
            current_seq,
            taken_at_ms: now_ms,
            writing: false,
        }
    }

    /// Whether a snapshot of the engine at `head` with `agents` agents is due at `now_ms`.
    pub(crate) fn due(&self, head: u64, agents: usize, now_ms: u64) -> bool {
        if self.writing || head <= self.current_seq {
            return false;
        }
        let every_events = self.policy.every_events.max(agents as u64);
        head - self.current_seq >= every_events
            || now_ms.saturating_sub(self.taken_at_ms) >= self.policy.every_ms
    }

    /// A snapshot at `seq` is being written.
    pub(crate) fn started(&mut self) {
        self.writing = true;
    }

    /// The snapshot being written ended: current at `seq` if it was written, or not.
    pub(crate) fn ended(&mut self, written: Option<u64>, now_ms: u64) {
        self.writing = false;
        if let Some(seq) = written {
            self.current_seq = seq;
            self.taken_at_ms = now_ms;
        }
    }

    /// How long events stay in the log once a snapshot holds them.
    pub(crate) fn keep_events_ms(&self) -> u64 {
        self.policy.keep_events_ms
    }

    /// The log position of the current snapshot (0: none).
    pub(crate) fn current_seq(&self) -> u64 {
        self.current_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> SnapshotPolicy {
        SnapshotPolicy {
            every_events: 100,
            every_ms: 1_000,
            keep_events_ms: EVENTS_RETENTION_MS,
        }
    }

    #[test]
    fn due_after_every_events_and_not_one_before() {
        let snapshots = Snapshots::new(policy(), 50, 0);
        assert!(!snapshots.due(149, 10, 0));
        assert!(snapshots.due(150, 10, 0));
    }

    #[test]
    fn a_large_fleet_raises_the_event_count() {
        let snapshots = Snapshots::new(policy(), 0, 0);
        assert!(!snapshots.due(999, 1_000, 0));
        assert!(snapshots.due(1_000, 1_000, 0));
    }

    #[test]
    fn due_after_every_ms_only_if_something_changed() {
        let snapshots = Snapshots::new(policy(), 7, 0);
        assert!(!snapshots.due(7, 10, 5_000), "nothing since the last one");
        assert!(!snapshots.due(8, 10, 999));
        assert!(snapshots.due(8, 10, 1_000));
    }

    #[test]
    fn one_at_a_time() {
        let mut snapshots = Snapshots::new(policy(), 0, 0);
        snapshots.started();
        assert!(!snapshots.due(1_000, 1, 5_000));
        snapshots.ended(Some(1_000), 5_000);
        assert_eq!(snapshots.current_seq(), 1_000);
        assert!(!snapshots.due(1_050, 1, 5_500));
        snapshots.started();
        snapshots.ended(None, 6_000);
        assert!(
            snapshots.due(1_100, 1, 6_000),
            "a failed one leaves the old current"
        );
    }
}
