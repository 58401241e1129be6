//! The durable store: the event log in redb, in front of it a write-ahead file.
//!
//! An append is durable once its frame in the write-ahead file ([`wal`]) is synced, before
//! `append` returns, so an event the store has accepted survives any crash (invariant 4). redb
//! takes the events in a commit that does not sync, and a durable redb commit every
//! [`wal::WAL_CHECKPOINT_APPENDS`] appends lets the file start again (ADR 0026). The engine's
//! state is not stored beside the log: it is rebuilt by replaying the log (`recovery`), so the
//! two can never disagree.

pub mod alert_cursors;
pub mod backup;
pub mod compaction;
pub mod record;
pub mod recovery;
pub mod snapshot;
mod turns;
pub mod wal;

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod format_tests;
#[cfg(test)]
mod test_node;
#[cfg(test)]
mod wal_tests;

use std::sync::{Mutex, MutexGuard};

use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
};

use crate::engine::event::Event;
use crate::io::storage::{BoxedBackend, StorageLocation};

/// seq -> the event's stored record ([`record`], in the database's format).
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");

/// The database's own facts: its storage format ([`FORMAT_KEY`]).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The key in [`META`] of the format the database's records are in.
const FORMAT_KEY: &str = "format_version";

/// The format of a database that holds events but records no format: one written before the
/// format was recorded, whose records are exactly format 1's.
const UNRECORDED_FORMAT: u64 = 1;

/// Largest page of events one read returns.
pub const EVENTS_PAGE_MAX: usize = 1_000;

/// Memory redb may use to cache the database's pages, reads and writes together. Why bounded
/// well below redb's default (1 GiB): recovery reads the whole log once, and with the default
/// every page it read stayed cached, so a node's memory grew with its history (about 2 KB per
/// idle agent at 10,000 agents, most of the figure), not with its fleet. The live working set
/// (the log's tail, the pages a commit rewrites, the feed's recent pages) fits easily.
pub const STORE_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Why the store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("could not open the database: {0}")]
    Open(#[source] redb::DatabaseError),
    #[error("storage failure: {0}")]
    Storage(#[from] redb::Error),
    #[error("event log is corrupt at seq {seq}: {reason}")]
    Corrupt { seq: u64, reason: String },
    #[error("append out of order: log head is {head}, first new event is {first}")]
    OutOfOrder { head: u64, first: u64 },
    #[error(
        "the database is in storage format {found}, written by a newer Vigil; this build reads \
         storage formats up to {supported}. Run the newer Vigil, or restore the backup taken \
         before the upgrade (docs/operations.md, \"Upgrading\"); the database was not changed"
    )]
    NewerFormat { found: u64, supported: u64 },
    #[error("the database records storage format {found}, which no Vigil ever wrote; the database was not changed")]
    UnknownFormat { found: u64 },
    #[error("event {seq} ({event_type}) cannot be replayed: {reason}")]
    BadRecord {
        seq: u64,
        event_type: String,
        reason: String,
    },
    #[error("backup failed: {0}")]
    Backup(String),
    #[error("the snapshot at seq {seq} cannot be read: {reason}")]
    Snapshot { seq: u64, reason: String },
    #[error("{0}")]
    Wal(#[from] wal::WalError),
}

/// The write-ahead file beside a database file: its name with this appended.
pub const WAL_FILE_SUFFIX: &str = "-wal";

/// Where the write-ahead file of the database at `path` lives.
pub fn wal_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(WAL_FILE_SUFFIX);
    std::path::PathBuf::from(name)
}

/// Mode of the database file: the owner only. It holds every agent's spec, reasons, payloads
/// and token hashes.
#[cfg(unix)]
pub const DATABASE_FILE_MODE: u32 = 0o600;

/// Makes sure the database file exists with [`DATABASE_FILE_MODE`] before redb opens it. Why
/// first: redb would create it with the process umask (often 0644), readable by every local
/// user. A file left by an older version is tightened too.
fn owner_only(path: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(DATABASE_FILE_MODE)
            .open(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(DATABASE_FILE_MODE))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// The runtime's database handle.
#[derive(Debug)]
pub struct Store {
    db: Database,
    /// The database's file, when it is one (backups are written beside it).
    file: Option<std::path::PathBuf>,
    /// The storage format the database recorded when it was opened (an older one is read as
    /// it is and stamped with the current format at open).
    found_format: u64,
    /// The log's appends go before background writes at redb's write lock.
    turns: turns::WriteTurns,
    /// The write-ahead file and the appends since the last durable redb commit. Locked only by
    /// appends (which run one at a time anyway) and on drop.
    wal: Mutex<WalState>,
}

#[derive(Debug)]
struct WalState {
    wal: wal::Wal,
    appends_since_checkpoint: u32,
    /// False from an append's frame until its redb commit, and from the open until its replay:
    /// a failed append may leave a frame redb does not hold, and a refused open a file that is
    /// not this database's; only a later open may settle either, so the drop does not
    /// checkpoint (which would cut the file back).
    settled: bool,
}

impl Store {
    /// Opens (creating if needed) the database at `location`. redb repairs an image left by a
    /// crash here, before any read.
    pub fn open(location: StorageLocation) -> Result<Store, StoreError> {
        let file = match &location {
            StorageLocation::File(path) => Some(path.clone()),
            StorageLocation::Backend { .. } => None,
        };
        let (db, wal_file) = match location {
            StorageLocation::File(path) => {
                let open_error = |error| StoreError::Open(redb::StorageError::from(error).into());
                owner_only(&path).map_err(open_error)?;
                let db = Database::builder()
                    .set_cache_size(STORE_CACHE_BYTES)
                    .create(&path)
                    .map_err(StoreError::Open)?;
                // Opened only once redb holds the database's lock: one process owns both.
                let wal_file = open_wal_file(&wal_path(&path)).map_err(open_error)?;
                (db, wal_file)
            }
            StorageLocation::Backend { db, wal } => (
                Database::builder()
                    .set_cache_size(STORE_CACHE_BYTES)
                    .create_with_backend(BoxedBackend(db))
                    .map_err(StoreError::Open)?,
                wal,
            ),
        };
        let found_format = settle_format(&db)?;
        let (wal, frames) = wal::Wal::open(wal_file)?;
        let store = Store {
            db,
            file,
            found_format,
            turns: turns::WriteTurns::default(),
            wal: Mutex::new(WalState {
                wal,
                appends_since_checkpoint: 0,
                // Until the replay: a refused open must leave the file as it found it.
                settled: false,
            }),
        };
        store.replay_wal(frames)?;
        store.wal_state().settled = true;
        Ok(store)
    }

    /// Puts the write-ahead file's frames the database does not hold yet into it, durably, and
    /// starts the file again. A frame that skips ahead of the database's head means the two
    /// files are not each other's: refused, nothing changed.
    fn replay_wal(&self, frames: Vec<wal::Frame>) -> Result<(), StoreError> {
        if frames.is_empty() {
            return Ok(());
        }
        let tx = self.db.begin_write().map_err(redb::Error::from)?;
        {
            let mut table = tx.open_table(EVENTS).map_err(redb::Error::from)?;
            let mut head = table
                .last()
                .map_err(redb::Error::from)?
                .map_or(0, |(k, _)| k.value());
            for frame in &frames {
                if frame.last_seq() <= head {
                    continue;
                }
                if frame.first_seq != head + 1 {
                    return Err(StoreError::Corrupt {
                        seq: frame.first_seq,
                        reason: format!(
                            "the write-ahead log holds events from seq {} on, but the database \
                             ends at seq {head}: the two files do not belong together (after \
                             restoring a backup, move the old `{WAL_FILE_SUFFIX}` file aside too, \
                             docs/operations.md); nothing was changed",
                            frame.first_seq
                        ),
                    });
                }
                for (offset, record) in frame.records.iter().enumerate() {
                    table
                        .insert(frame.first_seq + offset as u64, record.as_slice())
                        .map_err(redb::Error::from)?;
                }
                head = frame.last_seq();
            }
        }
        tx.commit().map_err(redb::Error::from)?;
        let mut state = self.wal_state();
        state.wal.reset()?;
        Ok(())
    }

    fn wal_state(&self) -> MutexGuard<'_, WalState> {
        // A panic while appending leaves the file as it was written; the next append or the
        // next open reads it as it is.
        self.wal
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One durable redb commit (everything committed before it becomes durable in the
    /// database), then the write-ahead file starts again.
    fn checkpoint(&self, state: &mut WalState) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(redb::Error::from)?;
        tx.commit().map_err(redb::Error::from)?;
        state.wal.reset()?;
        state.appends_since_checkpoint = 0;
        Ok(())
    }

    /// The storage format the database is in: the current one once it is open.
    pub fn format(&self) -> u64 {
        record::FORMAT_VERSION
    }

    /// The storage format the database recorded when it was opened.
    pub fn found_format(&self) -> u64 {
        self.found_format
    }

    /// Appends `events` durably, all or none. They must continue the log exactly.
    pub fn append(&self, events: &[Event]) -> Result<(), StoreError> {
        self.append_sized(events).map(drop)
    }

    /// Appends like [`Store::append`], and returns each event's stored size in bytes.
    pub fn append_sized(&self, events: &[Event]) -> Result<Vec<usize>, StoreError> {
        let mut sizes = Vec::with_capacity(events.len());
        let Some(first) = events.first() else {
            return Ok(sizes);
        };
        let _turn = self.turns.append();
        let mut tx = self.db.begin_write().map_err(redb::Error::from)?;
        // Durable through the write-ahead file below; redb's own sync waits for a checkpoint.
        tx.set_durability(Durability::None)
            .map_err(|error| StoreError::Storage(redb::Error::from(error)))?;
        let mut records = Vec::with_capacity(events.len());
        {
            let mut table = tx.open_table(EVENTS).map_err(redb::Error::from)?;
            let head = table
                .last()
                .map_err(redb::Error::from)?
                .map_or(0, |(k, _)| k.value());
            if first.seq != head + 1 {
                return Err(StoreError::OutOfOrder {
                    head,
                    first: first.seq,
                });
            }
            for (offset, event) in events.iter().enumerate() {
                debug_assert_eq!(
                    event.seq,
                    first.seq + offset as u64,
                    "batch must be contiguous"
                );
                let bytes = record::encode(event);
                sizes.push(bytes.len());
                table
                    .insert(event.seq, bytes.as_slice())
                    .map_err(redb::Error::from)?;
                records.push(bytes);
            }
        }
        // The frame is synced before redb's commit makes the events visible: a reader never
        // sees an event a crash could take back.
        let mut state = self.wal_state();
        state.settled = false;
        state.wal.append(first.seq, &records)?;
        tx.commit().map_err(redb::Error::from)?;
        state.settled = true;
        state.appends_since_checkpoint += 1;
        if wal::checkpoint_due(state.appends_since_checkpoint, state.wal.frame_bytes()) {
            self.checkpoint(&mut state)?;
        }
        Ok(sizes)
    }

    /// A write transaction for work in the background (snapshots, pruning, compaction), begun
    /// once the appends waiting or committing when it was asked for have ended ([`turns`]).
    /// Blocking: call it on a blocking thread.
    fn begin_background_write(&self) -> Result<redb::WriteTransaction, StoreError> {
        self.turns.background();
        Ok(self.db.begin_write().map_err(redb::Error::from)?)
    }

    /// Sequence number of the newest stored event (0 when the log is empty).
    pub fn head_seq(&self) -> Result<u64, StoreError> {
        let tx = self.db.begin_read().map_err(redb::Error::from)?;
        let table = tx.open_table(EVENTS).map_err(redb::Error::from)?;
        let head = table.last().map_err(redb::Error::from)?;
        Ok(head.map_or(0, |(k, _)| k.value()))
    }

    /// Up to `limit` (at most `EVENTS_PAGE_MAX`) events with `seq > after`, in order.
    pub fn events_after(&self, after: u64, limit: usize) -> Result<Vec<Event>, StoreError> {
        self.events_after_seen(after, limit, &mut |_, _| {})
    }

    /// [`Store::events_after`], handing each event's seq and stored bytes to `seen` as it is
    /// read.
    fn events_after_seen(
        &self,
        after: u64,
        limit: usize,
        seen: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<Vec<Event>, StoreError> {
        let limit = limit.min(EVENTS_PAGE_MAX);
        let tx = self.db.begin_read().map_err(redb::Error::from)?;
        let table = tx.open_table(EVENTS).map_err(redb::Error::from)?;
        let mut events = Vec::new();
        for entry in table
            .range(after.saturating_add(1)..)
            .map_err(redb::Error::from)?
        {
            if events.len() >= limit {
                break;
            }
            let (key, value) = entry.map_err(redb::Error::from)?;
            seen(key.value(), value.value());
            events.push(decode(record::FORMAT_VERSION, key.value(), value.value())?);
        }
        Ok(events)
    }

    /// Hands the stored events from seq `first` through `last`, in order, to `each` as their
    /// seq and stored bytes, undecoded, until `each` answers `false`; whether it never did.
    fn stored_events(
        &self,
        first: u64,
        last: u64,
        each: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> Result<bool, StoreError> {
        let tx = self.db.begin_read().map_err(redb::Error::from)?;
        let table = tx.open_table(EVENTS).map_err(redb::Error::from)?;
        for entry in table.range(first..=last).map_err(redb::Error::from)? {
            let (key, value) = entry.map_err(redb::Error::from)?;
            if !each(key.value(), value.value()) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl Drop for Store {
    /// A clean close checkpoints, so the database file alone holds every event (an older Vigil
    /// that knows no write-ahead file can open it). Failing here loses nothing: the next open
    /// replays the file.
    fn drop(&mut self) {
        let mut state = self.wal_state();
        if state.settled && state.wal.frame_bytes() > 0 {
            let _ = self.checkpoint(&mut state);
        }
    }
}

/// Opens (creating if needed, owner-only like the database) the write-ahead file at `path`.
fn open_wal_file(path: &std::path::Path) -> std::io::Result<Box<dyn redb::StorageBackend>> {
    owner_only(path)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let backend = redb::backends::FileBackend::new(file).map_err(std::io::Error::other)?;
    Ok(Box::new(backend))
}

/// Creates the tables up front (so readers never meet a missing one) and settles the database's
/// format; returns the format it found. A new database is stamped with
/// [`record::FORMAT_VERSION`]; one from before formats were recorded holds format 1
/// ([`UNRECORDED_FORMAT`]); an older format is read as it is (every older format is read by the
/// current types, ADR 0014) and stamped with the current one, because this build may add
/// records an older build cannot read. A newer or unknown format is refused without writing
/// anything.
fn settle_format(db: &Database) -> Result<u64, StoreError> {
    let tx = db.begin_write().map_err(redb::Error::from)?;
    let found = {
        let mut meta = tx.open_table(META).map_err(redb::Error::from)?;
        let events = tx.open_table(EVENTS).map_err(redb::Error::from)?;
        Store::create_snapshot_tables(&tx)?;
        let recorded = meta
            .get(FORMAT_KEY)
            .map_err(redb::Error::from)?
            .map(|value| value.value());
        let found = match recorded {
            Some(found) if found > record::FORMAT_VERSION => Err(StoreError::NewerFormat {
                found,
                supported: record::FORMAT_VERSION,
            }),
            Some(0) => Err(StoreError::UnknownFormat { found: 0 }),
            Some(found) => Ok(found),
            None if events.is_empty().map_err(redb::Error::from)? => Ok(record::FORMAT_VERSION),
            None => Ok(UNRECORDED_FORMAT),
        };
        if let Ok(found) = found {
            if recorded != Some(record::FORMAT_VERSION) {
                meta.insert(FORMAT_KEY, record::FORMAT_VERSION)
                    .map_err(redb::Error::from)?;
            }
            if found < record::FORMAT_VERSION {
                tracing::info!(
                    from = found,
                    to = record::FORMAT_VERSION,
                    "storage format upgraded: the database now reads only with this build or a \
                     newer one (docs/operations.md, \"Upgrading\")"
                );
            }
        }
        found
    };
    match found {
        Ok(found) => {
            tx.commit().map_err(redb::Error::from)?;
            Ok(found)
        }
        Err(refusal) => {
            tx.abort().map_err(redb::Error::from)?;
            Err(refusal)
        }
    }
}

fn decode(format: u64, seq: u64, bytes: &[u8]) -> Result<Event, StoreError> {
    record::decode(format, seq, bytes).map_err(|error| match error.event_type {
        Some(event_type) => StoreError::BadRecord {
            seq,
            event_type,
            reason: error.reason,
        },
        None => StoreError::Corrupt {
            seq,
            reason: error.reason,
        },
    })
}
