//! [`MemoryTranscripts`]: transcripts in memory, for the simulator and tests. It models what a
//! disk does to them: appended entries are *unsynced* until `finish`, and [`MemoryTranscripts::crash`]
//! keeps everything synced plus a seeded prefix of each unsynced tail. A crash may cut a
//! transcript's tail, never an entry in the middle, and never a finished transcript.
//!
//! Deterministic: `BTreeMap`s, no clock, randomness only from the rng `crash` is given.
//! Compiles under `--cfg madsim` (the simulator gives each runtime node one that outlives its
//! restarts, like its disk).

use std::collections::BTreeMap;
use std::sync::Mutex;

use rand::Rng;

use super::budget::{plan_prune, RunBudget, RunMeta};
use super::{
    prepared, Appended, Pruned, Retention, TranscriptEntry, TranscriptFuture, TranscriptPage,
    TranscriptStore,
};
use crate::engine::agent::AgentId;
use crate::engine::run::RunId;
use crate::redact::Redactor;

/// One run's transcript as the memory store holds it.
#[derive(Debug, Clone)]
struct MemoryRun {
    agent: AgentId,
    /// Durable entries, in order.
    synced: Vec<StoredEntry>,
    /// Entries after the last `finish`, lost (a suffix of them) by a crash.
    unsynced: Vec<StoredEntry>,
    budget: RunBudget,
    /// Whether a writer of this process may still append (not finished, no crash since).
    open: bool,
}

#[derive(Debug, Clone)]
struct StoredEntry {
    entry: TranscriptEntry,
    bytes: u64,
}

impl MemoryRun {
    fn entries(&self) -> impl Iterator<Item = &StoredEntry> {
        self.synced.iter().chain(&self.unsynced)
    }

    fn meta(&self, run: RunId) -> RunMeta {
        RunMeta {
            agent: self.agent,
            run,
            started_at_ms: self.entries().next().map_or(0, |e| e.entry.at_ms),
            bytes: self.entries().map(|e| e.bytes).sum(),
            open: self.open,
        }
    }
}

/// What a crash did to the transcripts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Transcripts that had an unsynced tail.
    pub runs_with_tail: usize,
    /// Unsynced entries kept (they reached the disk before the crash).
    pub kept_entries: usize,
    /// Unsynced entries lost.
    pub lost_entries: usize,
}

/// Transcripts in memory (see the module documentation).
#[derive(Debug, Default)]
pub struct MemoryTranscripts {
    runs: Mutex<BTreeMap<RunId, MemoryRun>>,
    retention: Retention,
}

impl MemoryTranscripts {
    pub fn new() -> Self {
        Self::default()
    }

    /// With other retention limits than the named constants.
    pub fn with_retention(retention: Retention) -> Self {
        MemoryTranscripts {
            runs: Mutex::default(),
            retention,
        }
    }

    /// A power loss: each transcript keeps its synced entries and a prefix of its unsynced
    /// tail whose length is drawn from `rng` (uniform, empty and whole included), in run
    /// order; one draw per transcript with a tail, none otherwise. Afterwards every transcript
    /// is closed, as its writer died.
    pub fn crash(&self, rng: &mut impl Rng) -> CrashReport {
        let mut report = CrashReport::default();
        for run in self.lock().values_mut() {
            run.open = false;
            if run.unsynced.is_empty() {
                continue;
            }
            let keep = rng.gen_range(0..=run.unsynced.len());
            report.runs_with_tail += 1;
            report.kept_entries += keep;
            report.lost_entries += run.unsynced.len() - keep;
            run.unsynced.truncate(keep);
            let kept = std::mem::take(&mut run.unsynced);
            run.synced.extend(kept);
        }
        report
    }

    /// Every stored entry of `run`, synced or not (for tests and the simulator's checks).
    pub fn entries(&self, run: RunId) -> Vec<TranscriptEntry> {
        self.lock()
            .get(&run)
            .map(|r| r.entries().map(|e| e.entry.clone()).collect())
            .unwrap_or_default()
    }

    /// How many of `run`'s entries are synced (durable).
    pub fn synced_len(&self, run: RunId) -> usize {
        self.lock().get(&run).map_or(0, |r| r.synced.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<RunId, MemoryRun>> {
        self.runs.lock().expect("memory transcripts lock")
    }

    fn append_now(
        &self,
        agent: AgentId,
        run: RunId,
        entries: &[TranscriptEntry],
        redactor: &Redactor,
    ) -> Result<Appended, super::TranscriptError> {
        let prepared = prepared(entries, redactor);
        let mut runs = self.lock();
        let stored = runs.entry(run).or_insert_with(|| MemoryRun {
            agent,
            synced: Vec::new(),
            unsynced: Vec::new(),
            budget: RunBudget::default(),
            open: true,
        });
        let admitted = stored
            .budget
            .admit(prepared, self.retention.run_bytes_max)?;
        let written = admitted.kept.len();
        for (entry, line) in admitted.kept {
            let bytes = line.len() as u64;
            stored.unsynced.push(StoredEntry { entry, bytes });
        }
        Ok(Appended {
            written,
            dropped: admitted.dropped,
        })
    }

    fn finish_now(&self, run: RunId) {
        if let Some(stored) = self.lock().get_mut(&run) {
            let tail = std::mem::take(&mut stored.unsynced);
            stored.synced.extend(tail);
            stored.open = false;
        }
    }

    fn read_now(&self, agent: AgentId, run: RunId, offset: u64, limit: usize) -> TranscriptPage {
        let runs = self.lock();
        let Some(stored) = runs.get(&run).filter(|r| r.agent == agent) else {
            return TranscriptPage {
                entries: Vec::new(),
                next_offset: offset,
                total: 0,
                complete: false,
            };
        };
        page(
            stored.entries().map(|e| e.entry.clone()),
            offset,
            limit,
            !stored.open,
        )
    }

    fn prune_now(&self, now_ms: u64) -> Pruned {
        let mut runs = self.lock();
        let metas: Vec<RunMeta> = runs.iter().map(|(id, r)| r.meta(*id)).collect();
        let mut pruned = Pruned::default();
        for run in plan_prune(&metas, now_ms, &self.retention) {
            if let Some(removed) = runs.remove(&run) {
                pruned.runs += 1;
                pruned.bytes += removed.meta(run).bytes;
            }
        }
        pruned
    }
}

/// The page of `entries` from `offset`: at most `limit`, complete when `closed` and it reaches
/// the end.
pub(super) fn page(
    entries: impl Iterator<Item = TranscriptEntry>,
    offset: u64,
    limit: usize,
    closed: bool,
) -> TranscriptPage {
    let mut total = 0u64;
    let mut page = Vec::new();
    for entry in entries {
        if total >= offset && page.len() < limit {
            page.push(entry);
        }
        total += 1;
    }
    let next_offset = offset + page.len() as u64;
    TranscriptPage {
        complete: closed && next_offset >= total,
        entries: page,
        next_offset,
        total,
    }
}

impl TranscriptStore for MemoryTranscripts {
    fn append<'a>(
        &'a self,
        agent: AgentId,
        run: RunId,
        entries: &'a [TranscriptEntry],
        redactor: &'a Redactor,
    ) -> TranscriptFuture<'a, Appended> {
        Box::pin(std::future::ready(
            self.append_now(agent, run, entries, redactor),
        ))
    }

    fn finish(&self, _agent: AgentId, run: RunId) -> TranscriptFuture<'_, ()> {
        self.finish_now(run);
        Box::pin(std::future::ready(Ok(())))
    }

    fn read(
        &self,
        agent: AgentId,
        run: RunId,
        offset: u64,
        limit: usize,
    ) -> TranscriptFuture<'_, TranscriptPage> {
        Box::pin(std::future::ready(Ok(
            self.read_now(agent, run, offset, limit)
        )))
    }

    fn prune(&self, now_ms: u64) -> TranscriptFuture<'_, Pruned> {
        Box::pin(std::future::ready(Ok(self.prune_now(now_ms))))
    }

    /// Pruned by whoever drives it (see [`TranscriptStore::prune_every_ms`]).
    fn prune_every_ms(&self) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn note(run: u64, seq: u64) -> TranscriptEntry {
        TranscriptEntry::note(RunId(run), seq, 1_000 + seq, format!("entry {seq}"))
    }

    fn block_on<T>(future: TranscriptFuture<'_, T>) -> T {
        // The memory store's futures are ready at once.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut future = future;
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(result) => result.expect("memory store never fails"),
            std::task::Poll::Pending => panic!("memory store futures are ready at once"),
        }
    }

    /// Run 1 finished after 3 entries then 2 unsynced; run 2 never finished (4 entries); run 3
    /// finished with nothing unsynced.
    fn populated() -> MemoryTranscripts {
        let store = MemoryTranscripts::new();
        let r = Redactor::default();
        let (a1, a2) = (AgentId(1), AgentId(2));
        block_on(store.append(a1, RunId(1), &[note(1, 0), note(1, 1), note(1, 2)], &r));
        block_on(store.finish(a1, RunId(1)));
        block_on(store.append(a1, RunId(1), &[note(1, 3), note(1, 4)], &r));
        block_on(store.append(a2, RunId(2), &[note(2, 0), note(2, 1)], &r));
        block_on(store.append(a2, RunId(2), &[note(2, 2), note(2, 3)], &r));
        block_on(store.append(a2, RunId(3), &[note(3, 0)], &r));
        block_on(store.finish(a2, RunId(3)));
        store
    }

    fn seqs(store: &MemoryTranscripts, run: u64) -> Vec<u64> {
        store.entries(RunId(run)).iter().map(|e| e.seq).collect()
    }

    #[test]
    fn a_crash_keeps_synced_entries_and_cuts_only_unsynced_tails() {
        for seed in 0..64 {
            let store = populated();
            let report = store.crash(&mut ChaCha8Rng::seed_from_u64(seed));
            let one = seqs(&store, 1);
            let two = seqs(&store, 2);
            // Synced entries all survive; what survives is a prefix, in order.
            assert!(one.len() >= 3 && one == (0..one.len() as u64).collect::<Vec<_>>());
            assert!(two == (0..two.len() as u64).collect::<Vec<_>>());
            assert_eq!(seqs(&store, 3), vec![0]);
            assert_eq!(report.runs_with_tail, 2);
            assert_eq!(report.kept_entries, one.len() - 3 + two.len());
            assert_eq!(report.kept_entries + report.lost_entries, 2 + 4);
            // The writer died: every transcript reads complete, and what survived is durable.
            let page = block_on(store.read(AgentId(2), RunId(2), 0, 100));
            assert!(page.complete);
            assert_eq!(store.synced_len(RunId(2)), two.len());
        }
    }

    #[test]
    fn a_crash_is_a_function_of_the_seed_and_the_seeds_differ() {
        let outcome = |seed| {
            let store = populated();
            let report = store.crash(&mut ChaCha8Rng::seed_from_u64(seed));
            (report, seqs(&store, 1), seqs(&store, 2))
        };
        assert_eq!(outcome(42), outcome(42));
        let distinct: std::collections::BTreeSet<_> = (0..32)
            .map(|s| outcome(s).1.len() * 10 + outcome(s).2.len())
            .collect();
        assert!(distinct.len() > 1, "every seed cut the same: {distinct:?}");
    }

    #[test]
    fn a_crash_with_no_unsynced_tail_draws_nothing() {
        let store = MemoryTranscripts::new();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        assert_eq!(store.crash(&mut rng), CrashReport::default());
        assert_eq!(rng.gen::<u64>(), ChaCha8Rng::seed_from_u64(9).gen::<u64>());
    }

    #[test]
    fn pages_reads_and_completion() {
        let store = populated();
        let page = block_on(store.read(AgentId(2), RunId(2), 1, 2));
        assert_eq!(
            page.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!((page.next_offset, page.total, page.complete), (3, 4, false));
        // A finished run is complete only on the page that reaches its end.
        let first = block_on(store.read(AgentId(2), RunId(3), 0, 0));
        assert!(!first.complete);
        let all = block_on(store.read(AgentId(2), RunId(3), 0, 10));
        assert!(all.complete);
        // Unknown runs, and a run asked for under another agent, read empty and incomplete.
        let none = block_on(store.read(AgentId(1), RunId(3), 0, 10));
        assert_eq!(
            (none.entries.len(), none.total, none.complete),
            (0, 0, false)
        );
        let past = block_on(store.read(AgentId(2), RunId(3), 9, 10));
        assert_eq!((past.next_offset, past.complete), (9, true));
    }

    #[test]
    fn appends_are_redacted_before_they_are_kept() {
        let store = MemoryTranscripts::new();
        let redactor = Redactor::new(["sk-very-secret"]);
        let entry = TranscriptEntry::note(RunId(1), 0, 0, "key sk-very-secret");
        block_on(store.append(AgentId(1), RunId(1), &[entry], &redactor));
        assert_eq!(
            store.entries(RunId(1))[0].body,
            super::super::EntryBody::Note {
                text: "key [REDACTED]".into()
            }
        );
    }

    #[test]
    fn prune_applies_retention_to_finished_runs() {
        let retention = Retention {
            age_ms: 100,
            agent_bytes_max: u64::MAX,
            run_bytes_max: u64::MAX,
        };
        let store = MemoryTranscripts::with_retention(retention);
        let r = Redactor::default();
        block_on(store.append(AgentId(1), RunId(1), &[note(1, 0)], &r));
        // First entry at 1_000: kept at 1_100, gone at 1_101.
        assert_eq!(block_on(store.prune(1_100)).runs, 0);
        let pruned = block_on(store.prune(1_101));
        assert_eq!(pruned.runs, 1);
        assert!(store.entries(RunId(1)).is_empty());
    }
}
