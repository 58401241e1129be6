//! Compaction: the events a snapshot holds, once older than the retention window, leave the log
//! (ADR 0016), so the database stops growing with the node's history.
//!
//! Only events below the current snapshot's seq go (recovery never reads them again), and only
//! while their `at_ms` is older than the cutoff: the log is read from its oldest event and the
//! first event too new (or at the snapshot) stops it, so a clock that went back keeps more,
//! never less. The event at the snapshot's seq always stays, so the log's head is never lost.

use redb::{ReadableDatabase, ReadableTable};

use super::{Store, StoreError, EVENTS};

/// Events one compaction transaction deletes, at most: a group commit waits behind it for
/// redb's write lock no longer than that takes (each is read to find its instant, so a batch of
/// 10,000 held commits for tens of milliseconds).
pub const COMPACT_BATCH_EVENTS: usize = 2_000;

/// What compaction reads of a record: its wall instant (serde skips the rest unparsed).
#[derive(serde::Deserialize)]
struct Instant {
    at_ms: u64,
}

impl Store {
    /// Deletes the events the current snapshot holds whose `at_ms` is before `cutoff_at_ms`,
    /// oldest first, [`COMPACT_BATCH_EVENTS`] per transaction; answers how many went. Each
    /// transaction is durable on its own (ADR 0028); a crash before one commits leaves its
    /// events, to be compacted again.
    pub fn compact(&self, cutoff_at_ms: u64) -> Result<u64, StoreError> {
        let Some(snapshot_seq) = self.current_snapshot_seq()? else {
            return Ok(0);
        };
        let mut deleted = 0_u64;
        loop {
            let tx = self.begin_background_write()?;
            let batch = {
                let mut events = tx.open_table(EVENTS).map_err(redb::Error::from)?;
                let mut old = Vec::new();
                for row in events
                    .range(..snapshot_seq)
                    .map_err(redb::Error::from)?
                    .take(COMPACT_BATCH_EVENTS)
                {
                    let (seq, bytes) = row.map_err(redb::Error::from)?;
                    let seq = seq.value();
                    let instant: Instant =
                        serde_json::from_slice(bytes.value()).map_err(|error| {
                            StoreError::Corrupt {
                                seq,
                                reason: format!("no at_ms to compact by: {error}"),
                            }
                        })?;
                    if instant.at_ms >= cutoff_at_ms {
                        break;
                    }
                    old.push(seq);
                }
                for seq in &old {
                    events.remove(*seq).map_err(redb::Error::from)?;
                }
                old.len()
            };
            tx.commit().map_err(redb::Error::from)?;
            deleted += batch as u64;
            if batch < COMPACT_BATCH_EVENTS {
                return Ok(deleted);
            }
        }
    }

    /// The log position just before the first event at or after the wall instant `since_ms`:
    /// a reader that wants the log from that instant on reads after it. A binary search over
    /// the kept log (about log2(events) row reads, each decoding only `at_ms`), so a long log
    /// is not read from its start. It takes the log as ordered by `at_ms`; after a wall clock
    /// that went back it may land late by the events written before the clock caught up.
    pub fn seq_before_ms(&self, since_ms: u64) -> Result<u64, StoreError> {
        let tx = self.db.begin_read().map_err(redb::Error::from)?;
        let events = tx.open_table(EVENTS).map_err(redb::Error::from)?;
        let at_ms = |seq: u64, bytes: &[u8]| -> Result<u64, StoreError> {
            serde_json::from_slice::<Instant>(bytes)
                .map(|instant| instant.at_ms)
                .map_err(|error| StoreError::Corrupt {
                    seq,
                    reason: format!("no at_ms to seek by: {error}"),
                })
        };
        let Some((first, _)) = events.first().map_err(redb::Error::from)? else {
            return Ok(0);
        };
        let Some((last, _)) = events.last().map_err(redb::Error::from)? else {
            return Ok(0);
        };
        // Invariant: every event before `lo` is older than `since_ms`; the answer is in lo..=hi,
        // hi = last + 1 meaning no event is recent enough.
        let (mut lo, mut hi) = (first.value(), last.value() + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            // The first kept event at or after `mid` (robust to gaps in the sequence).
            let found = events
                .range(mid..)
                .map_err(redb::Error::from)?
                .next()
                .transpose()
                .map_err(redb::Error::from)?;
            let Some((seq, bytes)) = found else {
                hi = mid;
                continue;
            };
            let seq = seq.value();
            if at_ms(seq, bytes.value())? >= since_ms {
                hi = mid;
            } else {
                lo = seq + 1;
            }
        }
        Ok(lo.saturating_sub(1))
    }

    /// The oldest event the log still holds (1 until something is compacted; one past the head
    /// for an empty log).
    pub fn oldest_seq(&self) -> Result<u64, StoreError> {
        let tx = self.db.begin_read().map_err(redb::Error::from)?;
        let events = tx.open_table(EVENTS).map_err(redb::Error::from)?;
        let first = events.first().map_err(redb::Error::from)?;
        Ok(first.map_or(1, |(seq, _)| seq.value()))
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::agent::{AgentId, AgentSpec};
    use crate::engine::tenant::TokenHash;
    use crate::engine::wakeup::{WakeupRequest, WakeupSource};
    use crate::engine::{Command, Engine};
    use crate::io::storage::StorageLocation;
    use crate::store::Store;

    const HOUR_MS: u64 = 3_600_000;

    fn store(name: &str) -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("vigil-compact-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vigil.redb");
        (
            Store::open(StorageLocation::File(path.clone())).unwrap(),
            path,
        )
    }

    fn run(engine: &mut Engine, store: &Store, command: Command, now_ms: u64) {
        let events = engine.decide(&command, now_ms).unwrap().events;
        store.append(&events).unwrap();
        events.iter().for_each(|event| engine.apply(event));
    }

    /// An agent woken once an hour for `hours` hours, from hour 0.
    fn history(engine: &mut Engine, store: &Store, hours: u64) {
        let tenant = Command::EnsureTenant {
            tenant: "t".into(),
            operator_token_hash: TokenHash::of("op"),
        };
        run(engine, store, tenant, 0);
        let create = Command::CreateAgent {
            tenant: "t".into(),
            spec: AgentSpec::with_interval("a", None),
            token_hash: TokenHash::of("a"),
        };
        run(engine, store, create, 0);
        for hour in 1..=hours {
            let wake = Command::Wake {
                agent: AgentId(1),
                request: WakeupRequest::new(WakeupSource::OnDemand, format!("hour {hour}")),
            };
            run(engine, store, wake, hour * HOUR_MS);
        }
    }

    #[test]
    fn nothing_goes_without_a_snapshot() {
        let (store, _) = store("no-snapshot");
        let mut engine = Engine::new();
        history(&mut engine, &store, 5);
        assert_eq!(store.compact(u64::MAX).unwrap(), 0);
        assert_eq!(store.oldest_seq().unwrap(), 1);
    }

    #[test]
    fn events_the_snapshot_holds_go_once_older_than_the_cutoff_and_recovery_is_unchanged() {
        let (store, path) = store("cutoff");
        let mut engine = Engine::new();
        history(&mut engine, &store, 10);
        let snapshot = store.write_snapshot(&engine.image()).unwrap().seq;
        history_more(&mut engine, &store, 11..=12);
        // Events before hour 4 go; the first wakeup at hour 4 stops the walk.
        let deleted = store.compact(4 * HOUR_MS).unwrap();
        let oldest = store.oldest_seq().unwrap();
        assert_eq!(oldest, deleted + 1);
        let first_kept = store.events_after(0, 1).unwrap().remove(0);
        assert_eq!(first_kept.seq, oldest);
        assert_eq!(
            first_kept.at_ms,
            4 * HOUR_MS,
            "the walk stops at the first new event"
        );
        // Never the snapshot's own event or anything after it, whatever the cutoff.
        store.compact(u64::MAX).unwrap();
        assert_eq!(store.oldest_seq().unwrap(), snapshot);
        assert_eq!(store.head_seq().unwrap(), engine.last_seq());
        drop(store);
        let store = Store::open(StorageLocation::File(path)).unwrap();
        assert_eq!(store.recover().unwrap(), engine);
        // The log goes on from its head.
        history_more(&mut engine, &store, 13..=13);
        assert_eq!(store.recover().unwrap(), engine);
    }

    #[test]
    fn a_log_longer_than_one_batch_is_compacted_whole() {
        let (store, _) = store("batches");
        let mut engine = Engine::new();
        history(&mut engine, &store, 1);
        let mut hour = 2;
        while engine.last_seq() <= super::COMPACT_BATCH_EVENTS as u64 + 1 {
            history_more(&mut engine, &store, hour..=hour);
            hour += 1;
        }
        let snapshot = store.write_snapshot(&engine.image()).unwrap().seq;
        history_more(&mut engine, &store, hour..=hour);
        // Every event before the snapshot, in more than one transaction.
        assert_eq!(store.compact(u64::MAX).unwrap(), snapshot - 1);
        assert_eq!(store.oldest_seq().unwrap(), snapshot);
        assert_eq!(store.recover().unwrap(), engine);
    }

    #[test]
    fn a_backup_of_a_compacted_log_carries_the_snapshot_and_recovers_whole() {
        let (store, _) = store("backup");
        let mut engine = Engine::new();
        history(&mut engine, &store, 6);
        store.write_snapshot(&engine.image()).unwrap();
        history_more(&mut engine, &store, 7..=8);
        assert!(store.compact(u64::MAX).unwrap() > 0);
        let backup = store.backup().unwrap();
        let restored = Store::open(StorageLocation::File(backup.path)).unwrap();
        assert_eq!(restored.oldest_seq().unwrap(), store.oldest_seq().unwrap());
        assert_eq!(restored.recover().unwrap(), engine);
    }

    #[test]
    fn the_seek_by_time_lands_just_before_the_first_event_at_or_after_the_instant() {
        let (store, _) = store("seek");
        let mut engine = Engine::new();
        assert_eq!(store.seq_before_ms(0).unwrap(), 0, "an empty log");
        history(&mut engine, &store, 10);
        // Checked against a plain walk of the whole log, for every instant that matters.
        let check = |store: &Store| {
            let all = store.events_after(0, 1_000).unwrap();
            for since_ms in (0..=11 * HOUR_MS).step_by((HOUR_MS / 2) as usize) {
                let expected = all
                    .iter()
                    .find(|e| e.at_ms >= since_ms)
                    .map_or(all.last().unwrap().seq, |e| e.seq - 1);
                assert_eq!(store.seq_before_ms(since_ms).unwrap(), expected, "since {since_ms}");
            }
        };
        check(&store);
        assert_eq!(store.seq_before_ms(0).unwrap(), 0);
        assert_eq!(store.seq_before_ms(u64::MAX).unwrap(), store.head_seq().unwrap());
        // After compaction the seek starts from the oldest kept event.
        store.write_snapshot(&engine.image()).unwrap();
        history_more(&mut engine, &store, 11..=12);
        assert!(store.compact(4 * HOUR_MS).unwrap() > 0);
        assert_eq!(store.seq_before_ms(0).unwrap(), store.oldest_seq().unwrap() - 1);
        check(&store);
    }

    fn history_more(engine: &mut Engine, store: &Store, hours: std::ops::RangeInclusive<u64>) {
        for hour in hours {
            let wake = Command::Wake {
                agent: AgentId(1),
                request: WakeupRequest::new(WakeupSource::OnDemand, format!("hour {hour}")),
            };
            run(engine, store, wake, hour * HOUR_MS);
        }
    }
}
