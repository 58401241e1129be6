//! Each alert sink's place in the log (docs/operations.md "Alerts", ADR 0018): its cursor (the
//! last event it has dealt with) and, per agent, the local day it last raised each once-a-day
//! alert on. Two small tables beside the event log, in the same database, so a sink's state
//! commits atomically and survives exactly what the log survives.
//!
//! Not part of the storage format (ADR 0014): the event records are unchanged, and a build that
//! does not know these tables never opens them. They are created by the first save, never at
//! open, so a node without alerts writes exactly what it wrote before.

use std::collections::BTreeMap;

use redb::{ReadableDatabase, TableDefinition, TableError};

use super::{Store, StoreError};
use crate::alerts::AlertKind;
use crate::engine::agent::AgentId;
use crate::engine::daily_cap::LocalDay;

/// sink name -> the seq of the last event the sink dealt with.
const ALERT_CURSORS: TableDefinition<&str, u64> = TableDefinition::new("alert_cursors");

/// (sink name, alert kind, agent) -> the local day it last raised that once-a-day kind on.
const ALERT_DAYS: TableDefinition<(&str, &str, u64), i32> = TableDefinition::new("alert_days");

/// A sink's saved state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlertCursor {
    /// The last event dealt with (0: none yet).
    pub seq: u64,
    pub days: BTreeMap<(AlertKind, AgentId), LocalDay>,
}

impl Store {
    /// The saved state of sink `sink` (the default when it has none yet). Blocking.
    pub fn alert_cursor(&self, sink: &str) -> Result<AlertCursor, StoreError> {
        let tx = self.db.begin_read().map_err(redb::Error::from)?;
        let seq = match tx.open_table(ALERT_CURSORS) {
            Ok(table) => table
                .get(sink)
                .map_err(redb::Error::from)?
                .map_or(0, |v| v.value()),
            Err(TableError::TableDoesNotExist(_)) => 0,
            Err(error) => return Err(redb::Error::from(error).into()),
        };
        let mut days = BTreeMap::new();
        match tx.open_table(ALERT_DAYS) {
            Ok(table) => {
                for entry in table.range((sink, "", 0)..).map_err(redb::Error::from)? {
                    let (key, day) = entry.map_err(redb::Error::from)?;
                    let (name, kind, agent) = key.value();
                    if name != sink {
                        break;
                    }
                    if let Some(kind) = AlertKind::ALL.into_iter().find(|k| k.as_str() == kind) {
                        days.insert((kind, AgentId(agent)), LocalDay(day.value()));
                    }
                }
            }
            Err(TableError::TableDoesNotExist(_)) => {}
            Err(error) => return Err(redb::Error::from(error).into()),
        }
        Ok(AlertCursor { seq, days })
    }

    /// Saves sink `sink`'s cursor at `seq`, and each `(kind, agent, day)` of `days` as the day
    /// `(kind, agent)` last raised on, in one durable transaction. Blocking (fsync).
    pub fn save_alert_cursor(
        &self,
        sink: &str,
        seq: u64,
        days: &[(AlertKind, AgentId, LocalDay)],
    ) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(redb::Error::from)?;
        {
            let mut cursors = tx.open_table(ALERT_CURSORS).map_err(redb::Error::from)?;
            cursors.insert(sink, seq).map_err(redb::Error::from)?;
            if !days.is_empty() {
                let mut table = tx.open_table(ALERT_DAYS).map_err(redb::Error::from)?;
                for (kind, agent, day) in days {
                    table
                        .insert((sink, kind.as_str(), agent.0), day.0)
                        .map_err(redb::Error::from)?;
                }
            }
        }
        tx.commit().map_err(redb::Error::from)?;
        Ok(())
    }
}

/// Copies every sink's saved state as `snapshot` sees it into `copy` (a backup, `backup.rs`), so
/// a node restored from a backup resumes each sink where the backed-up log had it, not from the
/// start of the log. Nothing is written when no sink ever saved.
pub(super) fn copy_alert_state(
    snapshot: &redb::ReadTransaction,
    copy: &redb::WriteTransaction,
) -> Result<(), StoreError> {
    use redb::ReadableTable;
    match snapshot.open_table(ALERT_CURSORS) {
        Ok(cursors) => {
            let mut target = copy.open_table(ALERT_CURSORS).map_err(redb::Error::from)?;
            for entry in cursors.iter().map_err(redb::Error::from)? {
                let (sink, seq) = entry.map_err(redb::Error::from)?;
                target
                    .insert(sink.value(), seq.value())
                    .map_err(redb::Error::from)?;
            }
        }
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(error) => return Err(redb::Error::from(error).into()),
    }
    match snapshot.open_table(ALERT_DAYS) {
        Ok(days) => {
            let mut target = copy.open_table(ALERT_DAYS).map_err(redb::Error::from)?;
            for entry in days.iter().map_err(redb::Error::from)? {
                let (key, day) = entry.map_err(redb::Error::from)?;
                target
                    .insert(key.value(), day.value())
                    .map_err(redb::Error::from)?;
            }
        }
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(error) => return Err(redb::Error::from(error).into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::storage::StorageLocation;

    #[test]
    fn a_cursor_and_its_days_survive_a_reopen_and_sinks_are_apart() {
        let dir = std::env::temp_dir().join(format!("vigil-alert-cursor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vigil.redb");
        let _ = std::fs::remove_file(&path);
        {
            let store = Store::open(StorageLocation::File(path.clone())).unwrap();
            assert_eq!(store.alert_cursor("ops").unwrap(), AlertCursor::default());
            store.save_alert_cursor("ops", 7, &[]).unwrap();
            let day = (AlertKind::DailyCapReached, AgentId(3), LocalDay(20_000));
            store.save_alert_cursor("ops", 9, &[day]).unwrap();
            store
                .save_alert_cursor(
                    "ops-2",
                    4,
                    &[(AlertKind::BudgetReached, AgentId(1), LocalDay(5))],
                )
                .unwrap();
        }
        let store = Store::open(StorageLocation::File(path)).unwrap();
        let ops = store.alert_cursor("ops").unwrap();
        assert_eq!(ops.seq, 9);
        assert_eq!(
            ops.days.into_iter().collect::<Vec<_>>(),
            [((AlertKind::DailyCapReached, AgentId(3)), LocalDay(20_000))]
        );
        let other = store.alert_cursor("ops-2").unwrap();
        assert_eq!(other.seq, 4);
        assert_eq!(other.days.len(), 1);
        assert_eq!(store.alert_cursor("none").unwrap(), AlertCursor::default());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
