//! The disk seam: where the runtime's redb database and its write-ahead file live (ADR 0026).
//!
//! Production keeps them in two files; the simulator hands in two `redb::StorageBackend`s over
//! its simulated disk (writes volatile until `sync_data`, torn on crash). The store never knows
//! which.

use std::fmt;
use std::path::PathBuf;

/// Where to open the database.
pub enum StorageLocation {
    /// A redb file on the real file system (created if absent), its write-ahead file beside it
    /// ([`crate::store::wal_path`]).
    File(PathBuf),
    /// Any redb backends, e.g. the simulator's `SimDisk`: one for the database, one for its
    /// write-ahead file. Consumed by the open.
    Backend {
        db: Box<dyn redb::StorageBackend>,
        wal: Box<dyn redb::StorageBackend>,
    },
}

impl StorageLocation {
    /// Both files in memory: for tests and tools that need no disk.
    pub fn in_memory() -> Self {
        Self::with_memory_wal(Box::new(redb::backends::InMemoryBackend::new()))
    }

    /// The database on `db`, its write-ahead file in memory (a test that gates the database's
    /// I/O).
    pub fn with_memory_wal(db: Box<dyn redb::StorageBackend>) -> Self {
        StorageLocation::Backend {
            db,
            wal: Box::new(redb::backends::InMemoryBackend::new()),
        }
    }
}

impl fmt::Debug for StorageLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageLocation::File(path) => f.debug_tuple("File").field(path).finish(),
            StorageLocation::Backend { db, wal } => f
                .debug_struct("Backend")
                .field("db", db)
                .field("wal", wal)
                .finish(),
        }
    }
}

/// Adapts a boxed backend to redb's generic `create_with_backend`.
#[derive(Debug)]
pub(crate) struct BoxedBackend(pub(crate) Box<dyn redb::StorageBackend>);

impl redb::StorageBackend for BoxedBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
    fn close(&self) -> Result<(), std::io::Error> {
        self.0.close()
    }
}
