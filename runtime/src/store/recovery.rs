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
    /// engines must be equal, or the snapshot is reported as wrong. Returns the engine the
    /// snapshot gave, the one a production node runs on.
    pub fn recover_observed(
        &self,
        observe: &mut dyn FnMut(&[Event]),
    ) -> Result<Engine, StoreError> {
        let replayed = self.replay_after(Engine::new(), observe)?;
        if self.current_snapshot_seq()?.is_none() {
            return Ok(replayed);
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
        Ok(restored)
    }

    /// Folds every event after `engine`'s last into it, handing each page to `observe`.
    fn replay_after(
        &self,
        mut engine: Engine,
        observe: &mut dyn FnMut(&[Event]),
    ) -> Result<Engine, StoreError> {
        loop {
            let page = self.events_after(engine.last_seq(), EVENTS_PAGE_MAX)?;
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
