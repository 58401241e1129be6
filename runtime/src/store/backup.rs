//! A consistent copy of the database while the node serves (`POST /v1/backup`, `vigil backup`).
//!
//! Why not `cp` of the file: a copy taken while a commit is being written can hold half of it.
//! redb's read transactions see one committed state and never block the writer, so the copy
//! reads one read transaction from start to end and writes its records, unchanged, into a new
//! database beside the live one. The new file appears under its final name only once complete
//! and synced (written under a temporary name, then renamed), so a crash or a full disk during a
//! backup never leaves a file that looks like a backup and is not one. The alert sinks' cursors
//! (`alert_cursors.rs`) are copied from the same snapshot.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable};
use serde::Serialize;

use super::{record, Store, StoreError, EVENTS, FORMAT_KEY, META};

/// Directory, beside the database file, where backups are written.
pub const BACKUP_DIR: &str = "backups";
/// Events copied per transaction of the copy: bounds the memory a backup of a long log uses (a
/// transaction's changes are held until it commits).
pub const BACKUP_CHUNK_EVENTS: usize = 10_000;

/// A backup written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Backup {
    /// The backup file: a whole Vigil database, openable by `vigil serve` as it is.
    #[schema(value_type = String)]
    pub path: PathBuf,
    /// The newest event it holds; it holds every event up to this one.
    pub head_seq: u64,
    /// The events it holds.
    pub events: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

impl Store {
    /// Writes a consistent copy of the database into `BACKUP_DIR` beside the database file, as
    /// `vigil-<head seq>.redb`. Blocking: call it on a blocking thread.
    pub fn backup(&self) -> Result<Backup, StoreError> {
        let Some(file) = &self.file else {
            return Err(backup_error(
                "this node's database is not a file; there is nothing to copy",
            ));
        };
        let dir = file.parent().unwrap_or(Path::new(".")).join(BACKUP_DIR);
        create_private_dir(&dir).map_err(|e| io_error("create", &dir, e))?;
        let snapshot = self.db.begin_read().map_err(redb::Error::from)?;
        let events = snapshot.open_table(EVENTS).map_err(redb::Error::from)?;
        let head_seq = events
            .last()
            .map_err(redb::Error::from)?
            .map_or(0, |(k, _)| k.value());
        let path = dir.join(format!("vigil-{head_seq:012}.redb"));
        let partial = dir.join(format!(".vigil-{head_seq:012}.redb.partial"));
        let _ = std::fs::remove_file(&partial);
        super::owner_only(&partial).map_err(|e| io_error("create", &partial, e))?;
        let copy = Database::create(&partial).map_err(StoreError::Open)?;
        let copied = copy_events(&events, &copy)?;
        // The alert sinks' cursors from the same snapshot, so a restored node resumes them there.
        let tx = copy.begin_write().map_err(redb::Error::from)?;
        super::alert_cursors::copy_alert_state(&snapshot, &tx)?;
        tx.commit().map_err(redb::Error::from)?;
        // The engine snapshot of the same instant: with a compacted log, recovery needs it.
        super::snapshot::copy_current_snapshot(&snapshot, &copy)?;
        drop(copy);
        std::fs::rename(&partial, &path).map_err(|e| io_error("rename", &partial, e))?;
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error("sync", &dir, e))?;
        let bytes = std::fs::metadata(&path)
            .map_err(|e| io_error("read", &path, e))?
            .len();
        Ok(Backup {
            path,
            head_seq,
            events: copied,
            bytes,
        })
    }
}

/// Copies every record of `events` (one read transaction's view) into `copy`, stamped with the
/// current format (the live database was stamped at open), `BACKUP_CHUNK_EVENTS` per commit.
fn copy_events(
    events: &redb::ReadOnlyTable<u64, &[u8]>,
    copy: &Database,
) -> Result<u64, StoreError> {
    let mut copied = 0_u64;
    let mut rows = events.iter().map_err(redb::Error::from)?.peekable();
    let mut first = true;
    while first || rows.peek().is_some() {
        let tx = copy.begin_write().map_err(redb::Error::from)?;
        {
            if first {
                let mut meta = tx.open_table(META).map_err(redb::Error::from)?;
                meta.insert(FORMAT_KEY, record::FORMAT_VERSION)
                    .map_err(redb::Error::from)?;
                first = false;
            }
            let mut table = tx.open_table(EVENTS).map_err(redb::Error::from)?;
            for row in rows.by_ref().take(BACKUP_CHUNK_EVENTS) {
                let (seq, bytes) = row.map_err(redb::Error::from)?;
                table
                    .insert(seq.value(), bytes.value())
                    .map_err(redb::Error::from)?;
                copied += 1;
            }
        }
        tx.commit().map_err(redb::Error::from)?;
    }
    Ok(copied)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn backup_error(message: impl Into<String>) -> StoreError {
    StoreError::Backup(message.into())
}

fn io_error(what: &str, path: &Path, error: std::io::Error) -> StoreError {
    backup_error(format!("could not {what} {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::agent::AgentId;
    use crate::engine::event::{Event, EventKind};
    use crate::io::storage::StorageLocation;

    fn store_with(dir: &Path, events: u64) -> Store {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let store = Store::open(StorageLocation::File(dir.join("vigil.redb"))).unwrap();
        let events: Vec<Event> = (1..=events)
            .map(|seq| Event {
                seq,
                at_ms: 1_000 + seq,
                tenant: "t".into(),
                kind: EventKind::AgentResumed {
                    agent: AgentId(seq),
                },
            })
            .collect();
        store.append(&events).unwrap();
        store
    }

    fn all(store: &Store) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            let page = store.events_after(events.len() as u64, super::super::EVENTS_PAGE_MAX);
            let page = page.unwrap();
            if page.is_empty() {
                return events;
            }
            events.extend(page);
        }
    }

    /// Logs of exactly one chunk and of one event more are copied whole, in order.
    #[test]
    fn a_backup_copies_every_event_across_its_chunk_boundary() {
        let root = std::env::temp_dir().join(format!("vigil-backup-{}", std::process::id()));
        for events in [
            0,
            BACKUP_CHUNK_EVENTS as u64,
            BACKUP_CHUNK_EVENTS as u64 + 1,
        ] {
            let dir = root.join(events.to_string());
            let store = store_with(&dir, events);
            store.save_alert_cursor("ops", events / 2, &[]).unwrap();
            let backup = store.backup().unwrap();
            assert_eq!((backup.head_seq, backup.events), (events, events));
            assert_eq!(
                backup.path,
                dir.join(BACKUP_DIR)
                    .join(format!("vigil-{events:012}.redb"))
            );
            let copy = Store::open(StorageLocation::File(backup.path.clone())).unwrap();
            assert_eq!(copy.found_format(), record::FORMAT_VERSION);
            assert_eq!(all(&copy), all(&store));
            assert_eq!(copy.alert_cursor("ops").unwrap().seq, events / 2);
            let leftovers: Vec<_> = std::fs::read_dir(dir.join(BACKUP_DIR))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .filter(|name| name.to_string_lossy().ends_with(".partial"))
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
