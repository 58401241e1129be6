//! Recovery: rebuild the engine from the durable log on start.

use super::{Store, StoreError, EVENTS_PAGE_MAX};
use crate::engine::event::Event;
use crate::engine::Engine;

impl Store {
    /// Rebuilds the engine: the current snapshot (ADR 0016), if the database holds one, then
    /// every event after it. The log is checked as it is read: a gap or a reordering is
    /// reported as corruption rather than papered over (invariant 11).
    pub fn recover(&self) -> Result<Engine, StoreError> {
        let engine = match self.read_snapshot()? {
            Some(image) => {
                let seq = image.seq;
                Engine::from_image(image).map_err(|error| StoreError::Snapshot {
                    seq,
                    reason: error.reason,
                })?
            }
            None => Engine::new(),
        };
        self.replay_after(engine, &mut |_| {})
    }

    /// Recovery as the simulator checks it: replays the whole log, handing each page to
    /// `observe`, and recovers from the snapshot too (as [`Store::recover`] does); the two
    /// engines must be equal, or the snapshot is reported as wrong. The engine the snapshot gave
    /// is the one a production node runs on.
    ///
    /// `from` is the replay an earlier check of this log ended with. When the log still begins
    /// with exactly the bytes that replay read, it goes on from there: those events are neither
    /// decoded, folded nor handed to `observe` again, since each of those steps is a function of
    /// the bytes alone and would give what it gave then. Otherwise the whole log is replayed.
    /// Why: the simulator checks every restart, and replaying a fleet-day's whole log at each
    /// one was a tenth of the day's instructions (docs/benchmarks.md).
    pub fn recover_observed(
        &self,
        from: Option<CheckedReplay>,
        observe: &mut dyn FnMut(&[Event]),
    ) -> Result<ObservedRecovery, StoreError> {
        let resumed = match from {
            Some(checked) => self.still_begins_with(checked)?,
            None => None,
        };
        let resumed_through = resumed.as_ref().map(|checked| checked.engine.last_seq());
        let (engine, stored) = resumed
            .map(|checked| (checked.engine, checked.stored))
            .unwrap_or_else(|| (Engine::new(), StoredDigest::default()));
        let (replayed, stored) = self.replay_digesting(engine, stored, observe)?;
        if self.current_snapshot_seq()?.is_none() {
            return Ok(ObservedRecovery {
                engine: replayed.clone(),
                replay: CheckedReplay {
                    engine: replayed,
                    stored,
                },
                resumed_through,
            });
        }
        let restored = self.recover()?;
        if restored != replayed {
            return Err(StoreError::Snapshot {
                seq: self.current_snapshot_seq()?.unwrap_or(0),
                reason: "recovering from it and the log after it gives another state than \
                         replaying the whole log"
                    .into(),
            });
        }
        Ok(ObservedRecovery {
            engine: restored,
            replay: CheckedReplay {
                engine: replayed,
                stored,
            },
            resumed_through,
        })
    }

    /// `checked`, if the log's events through its last are still exactly the bytes it read
    /// (and none is missing); `None` if anything differs.
    fn still_begins_with(
        &self,
        checked: CheckedReplay,
    ) -> Result<Option<CheckedReplay>, StoreError> {
        let through = checked.engine.last_seq();
        let mut stored = StoredDigest::default();
        let mut expected = 1;
        let complete = through == 0
            || self.stored_events(1, through, &mut |seq, bytes| {
                if seq != expected {
                    return false;
                }
                stored.add(seq, bytes);
                expected += 1;
                true
            })?;
        let same = complete && expected == through + 1 && stored.value() == checked.stored.value();
        Ok(same.then_some(CheckedReplay {
            engine: checked.engine,
            stored,
        }))
    }

    /// Folds every event after `engine`'s last into it, handing each page to `observe`.
    fn replay_after(
        &self,
        engine: Engine,
        observe: &mut dyn FnMut(&[Event]),
    ) -> Result<Engine, StoreError> {
        self.replay_seeing(engine, &mut |_, _| {}, observe)
    }

    /// [`Store::replay_after`], adding each replayed event's stored bytes to `stored` (only
    /// the simulator's check digests them; a production recovery does not pay for it).
    fn replay_digesting(
        &self,
        engine: Engine,
        mut stored: StoredDigest,
        observe: &mut dyn FnMut(&[Event]),
    ) -> Result<(Engine, StoredDigest), StoreError> {
        let engine =
            self.replay_seeing(engine, &mut |seq, bytes| stored.add(seq, bytes), observe)?;
        Ok((engine, stored))
    }

    /// [`Store::replay_after`], handing each replayed event's seq and stored bytes to `seen`.
    fn replay_seeing(
        &self,
        mut engine: Engine,
        seen: &mut dyn FnMut(u64, &[u8]),
        observe: &mut dyn FnMut(&[Event]),
    ) -> Result<Engine, StoreError> {
        loop {
            let page = self.events_after_seen(engine.last_seq(), EVENTS_PAGE_MAX, seen)?;
            let Some(last) = page.last() else {
                return Ok(engine);
            };
            let last_seq = last.seq;
            for event in &page {
                if event.seq != engine.last_seq() + 1 {
                    return Err(StoreError::Corrupt {
                        seq: event.seq,
                        reason: format!("gap after seq {}", engine.last_seq()),
                    });
                }
                replay(&mut engine, event)?;
            }
            observe(&page);
            debug_assert_eq!(engine.last_seq(), last_seq);
        }
    }
}

/// A replay of a log's first events that recovery checked: the engine they fold into, and a
/// digest of their stored bytes, which tells whether a later log still begins with them
/// ([`Store::recover_observed`]).
#[derive(Debug, Clone)]
pub struct CheckedReplay {
    engine: Engine,
    stored: StoredDigest,
}

impl CheckedReplay {
    /// The last event the replay folded in.
    pub fn through_seq(&self) -> u64 {
        self.engine.last_seq()
    }
}

/// What [`Store::recover_observed`] recovered.
#[derive(Debug)]
pub struct ObservedRecovery {
    /// The engine to run on: the snapshot's and the log after it, when there is a snapshot.
    pub engine: Engine,
    /// The whole log's replay, for the next check of this log to go on from.
    pub replay: CheckedReplay,
    /// The last event of the earlier replay this one went on from (its events were not handed
    /// to `observe`), or `None` if the whole log was replayed.
    pub resumed_through: Option<u64>,
}

/// A digest of stored events' bytes, in log order. Deterministic within a build (the standard
/// library's default hasher with its fixed keys), which is all a comparison within one process
/// needs.
#[derive(Debug, Clone, Default)]
struct StoredDigest(std::hash::DefaultHasher);

impl StoredDigest {
    fn add(&mut self, seq: u64, bytes: &[u8]) {
        use std::hash::Hasher;
        self.0.write_u64(seq);
        self.0.write_usize(bytes.len());
        self.0.write(bytes);
    }

    fn value(&self) -> u64 {
        std::hash::Hasher::finish(&self.0)
    }
}

/// Folds one stored event in. Why catch a panic: the engine trusts the log it wrote (a run that
/// ends must be live, an agent must exist), and says so with panics. A database damaged
/// outside the node, or a bug in a migration, must still stop recovery with a message naming
/// the event, never a crash that says nothing about where.
fn replay(engine: &mut Engine, event: &Event) -> Result<(), StoreError> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.apply(event)));
    outcome.map_err(|panic| StoreError::BadRecord {
        seq: event.seq,
        event_type: event.kind.type_name().into(),
        reason: panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("the engine could not fold it in")
            .to_string(),
    })
}

#[cfg(test)]
mod tests {
    use crate::engine::agent::AgentSpec;
    use crate::engine::tenant::TokenHash;
    use crate::engine::{Command, Engine};
    use crate::io::storage::StorageLocation;
    use crate::store::{Store, StoreError};

    fn temp_path(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("vigil-store-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("vigil.redb")
    }

    fn commands() -> Vec<(Command, u64)> {
        vec![
            (
                Command::EnsureTenant {
                    tenant: "t".into(),
                    operator_token_hash: TokenHash::of("op"),
                },
                0,
            ),
            (
                Command::CreateAgent {
                    tenant: "t".into(),
                    spec: AgentSpec::with_interval("a", Some(1_000)),
                    token_hash: TokenHash::of("a"),
                },
                0,
            ),
            (Command::FireDueTimers, 1_000),
            (Command::FireDueTimers, 4_200),
        ]
    }

    #[test]
    fn reopened_store_recovers_the_same_engine() {
        let path = temp_path("recover");
        let _ = std::fs::remove_file(&path);
        let mut engine = Engine::new();
        {
            let store = Store::open(StorageLocation::File(path.clone())).unwrap();
            for (command, now) in commands() {
                let events = engine.decide(&command, now).unwrap().events;
                store.append(&events).unwrap();
                events.iter().for_each(|e| engine.apply(e));
            }
        }
        let store = Store::open(StorageLocation::File(path.clone())).unwrap();
        let head = engine.last_seq();
        assert!(head > 4, "timers fired and queued runs");
        assert_eq!(store.head_seq().unwrap(), head);
        assert_eq!(store.recover().unwrap(), engine);
        assert_eq!(
            store.events_after(1, 10).unwrap().len() as u64,
            (head - 1).min(10)
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn appends_that_do_not_continue_the_log_are_refused() {
        let path = temp_path("order");
        let _ = std::fs::remove_file(&path);
        let store = Store::open(StorageLocation::File(path.clone())).unwrap();
        let engine = Engine::new();
        let (command, now) = commands().remove(0);
        let mut events = engine.decide(&command, now).unwrap().events;
        events[0].seq = 2;
        assert!(matches!(
            store.append(&events),
            Err(StoreError::OutOfOrder { head: 0, first: 2 })
        ));
        std::fs::remove_file(&path).unwrap();
    }
}

/// A check that goes on from an earlier one (`Store::recover_observed` with a `CheckedReplay`).
#[cfg(test)]
mod resume_tests {
    use crate::store::test_node::{fresh, Node};
    use crate::store::{Store, StoreError, EVENTS};

    /// Checks `node`'s log, going on from `from`: what it recovered, and the seqs of the events
    /// it handed out.
    fn check(
        node: &Node,
        from: Option<super::CheckedReplay>,
    ) -> Result<(super::ObservedRecovery, Vec<u64>), StoreError> {
        let mut seen = Vec::new();
        let recovered = node.store.recover_observed(from, &mut |page| {
            seen.extend(page.iter().map(|event| event.seq))
        })?;
        Ok((recovered, seen))
    }

    /// Replaces event `seq`'s stored record by `bytes`.
    fn overwrite(store: &Store, seq: u64, bytes: &[u8]) {
        let tx = store.db.begin_write().unwrap();
        tx.open_table(EVENTS).unwrap().insert(seq, bytes).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn a_check_goes_on_from_the_last_while_the_log_begins_with_the_bytes_it_read() {
        let path = fresh("resume-same");
        let mut log = Node::open(&path);
        log.fleet(20);
        let (first, seen) = check(&log, None).unwrap();
        let through = log.engine.last_seq();
        assert_eq!(first.resumed_through, None);
        assert_eq!(seen, (1..=through).collect::<Vec<_>>());
        assert_eq!(first.replay.through_seq(), through);
        log.wake_all(20, 5_000);
        log.store.write_snapshot(&log.engine.image()).unwrap();
        log.wake_all(5, 9_000);
        let head = log.engine.last_seq();

        let (second, seen) = check(&log, Some(first.replay)).unwrap();
        assert_eq!(second.resumed_through, Some(through));
        assert_eq!(seen, (through + 1..=head).collect::<Vec<_>>());
        assert_eq!(second.engine, log.engine);
        assert_eq!(second.replay.engine, log.engine);
        let (whole, _) = check(&log, None).unwrap();
        assert_eq!(whole.replay.engine, second.replay.engine);
        assert_eq!(
            whole.replay.stored.value(),
            second.replay.stored.value(),
            "the digest of the bytes read is the same, read in one check or two"
        );

        let (third, seen) = check(&log, Some(second.replay)).unwrap();
        assert_eq!(third.resumed_through, Some(head));
        assert!(seen.is_empty(), "nothing new: {seen:?}");
        assert_eq!(third.engine, log.engine);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn an_event_that_reads_differently_makes_the_check_replay_the_whole_log() {
        let path = fresh("resume-changed");
        let mut log = Node::open(&path);
        log.fleet(5);
        let (first, _) = check(&log, None).unwrap();
        log.wake_all(5, 5_000);

        // Event 3 as a valid record that says it happened a millisecond later: the same log
        // length, other bytes.
        let mut later = log.store.events_after(2, 1).unwrap().remove(0);
        later.at_ms += 1;
        overwrite(&log.store, 3, &super::super::record::encode(&later));
        let (second, seen) = check(&log, Some(first.replay.clone())).unwrap();
        assert_eq!(second.resumed_through, None);
        assert_eq!(seen.first(), Some(&1), "replayed from the first event");
        let (whole, _) = check(&log, None).unwrap();
        assert_eq!(
            second.replay.engine, whole.replay.engine,
            "what the log now says"
        );
        assert_ne!(second.replay.engine, log.engine);

        // A record no build reads: the whole replay stops there, as without an earlier check.
        overwrite(&log.store, 2, b"not a record");
        assert!(matches!(
            check(&log, Some(first.replay)),
            Err(StoreError::Corrupt { seq: 2, .. })
        ));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_log_shorter_than_the_checked_replay_is_replayed_whole() {
        let long_path = fresh("resume-long");
        let mut long = Node::open(&long_path);
        long.fleet(8);
        let (checked, _) = check(&long, None).unwrap();

        // The same first events, but fewer of them: another database, not this log grown.
        let short_path = fresh("resume-short");
        let mut short = Node::open(&short_path);
        short.fleet(3);
        let (recovered, seen) = check(&short, Some(checked.replay)).unwrap();
        assert_eq!(recovered.resumed_through, None);
        assert_eq!(seen, (1..=short.engine.last_seq()).collect::<Vec<_>>());
        assert_eq!(recovered.engine, short.engine);
        for path in [long_path, short_path] {
            std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
        }
    }
}
