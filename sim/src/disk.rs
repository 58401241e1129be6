//! `SimDisk`: a simulated disk that remembers what an fsync made durable, so the simulator can
//! cut the power at any point and check that the runtime (through redb) keeps what it committed.
//!
//! Reads see the volatile image; writes and `set_len` land there at once and queue as pending
//! operations. `sync_data` makes the pending operations durable. `crash` keeps a seeded subset of
//! them, tearing writes at sector boundaries, the way a real disk may after a power cut.
//!
//! The disk holds two files, the database and its write-ahead file ([`DiskFile`]): a sync
//! makes only its own file's pending operations durable, as `fdatasync` of one file does, and a
//! crash, a power cut or a storage fault window covers both (one device).
//!
//! Only one image per file is kept. Each pending operation remembers what it overwrote (an undo record),
//! so a sync just forgets them, and a crash rolls the image back to the last sync (reading each
//! write's data on the way) before it lands the kept subset. Why not a second, durable image
//! that each sync copies into: it doubled the disk's memory and copied every synced byte
//! again, about 1 % of a simulated fleet day and a large share of its page faults.
//! A storage fault window makes selected writes or syncs fail (I/O error, disk full) without
//! touching the image; `fence` is a process exit, which keeps the page cache.

mod image;

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use vigil_faults::plan::PERMILLE;
use vigil_faults::{StorageError, StorageFilter};

use image::Image;

/// Bytes per sector: the unit a disk writes atomically, so a crash tears writes at multiples of it.
pub const SECTOR_BYTES: u64 = 512;
/// How much of the unsynced data a crash lets land. Each crash draws one profile: the chance
/// that an unsynced operation lands at all, and that each 512-byte sector of a landing write
/// does. Half-and-half tears commits apart; "everything landed" is the power cut that came just
/// after the disk finished writing but before the fsync returned, so a commit the process was
/// told failed is on disk whole.
pub const CRASH_KEEP_PROFILES: [(f64, f64); 3] = [(0.5, 0.5), (0.9, 0.9), (1.0, 1.0)];
/// Environment variable that, set to exactly "1", asks for a disk whose fsync lies.
pub const LYING_FSYNC_ENV: &str = "VIGIL_SIM_LYING_FSYNC";
/// The error text every operation of a backend from before a crash returns.
const STALE_HANDLE_MESSAGE: &str = "sim disk: handle from before a crash";
const POWER_CUT_MESSAGE: &str = "sim disk: power cut";

/// True iff `VIGIL_SIM_LYING_FSYNC` is exactly "1": lets a run check that its checks catch a disk
/// that drops synced data, without a code change.
pub fn lying_fsync_from_env() -> bool {
    std::env::var(LYING_FSYNC_ENV).is_ok_and(|value| value == "1")
}

/// Counters of what was done to a disk, so scenarios can report and assert on disk traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Writes accepted (from live handles).
    pub writes: u64,
    /// `sync_data` calls accepted, including those a lying fsync ignored.
    pub syncs: u64,
    /// Crashes simulated.
    pub crashes: u64,
    /// Bytes in accepted writes.
    pub bytes_written: u64,
    /// Operations a storage fault made fail.
    pub injected_errors: u64,
}

/// What one crash did to the unsynced operations, so a trace can tell how hard a crash bit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Operations not yet synced when the power went.
    pub pending_ops: usize,
    /// Of those, the ones the crash kept (a kept write may still lose sectors).
    pub kept_ops: usize,
    /// Kept writes that lost at least one sector.
    pub torn_ops: usize,
    /// Bytes of unsynced writes that did not land.
    pub lost_bytes: u64,
}

/// The files on a [`SimDisk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskFile {
    /// The redb database.
    Db,
    /// The database's write-ahead file (`vigil::store::wal`).
    Wal,
}

impl DiskFile {
    fn index(self) -> usize {
        match self {
            DiskFile::Db => 0,
            DiskFile::Wal => 1,
        }
    }
}

/// One operation since the last sync, applied to the image, with what it replaced: the image's
/// length before it, and the bytes it overwrote or cut off. Offsets and lengths were checked to
/// fit `usize` on entry, so applying or undoing one cannot fail.
enum PendingOp {
    /// `len` bytes written at `offset`; `old` holds the bytes that were there (up to the old
    /// end of the image).
    Write {
        offset: usize,
        len: usize,
        old_len: usize,
        old: Vec<u8>,
    },
    /// The image's length set to `len`; `cut` holds the bytes a shrink removed.
    SetLen {
        len: usize,
        old_len: usize,
        cut: Vec<u8>,
    },
}

impl PendingOp {
    /// Restores the image to what it was before this operation.
    fn undo(&self, image: &mut Image) {
        match self {
            PendingOp::Write {
                offset,
                old_len,
                old,
                ..
            } => {
                image.write(*offset, old);
                image.set_len(*old_len);
            }
            PendingOp::SetLen { old_len, cut, .. } => {
                // A grow is undone by the shrink; a shrink by putting back what it cut.
                image.set_len(image.len().min(*old_len));
                image.write(image.len(), cut);
                image.set_len(*old_len);
            }
        }
    }
}

#[derive(Default)]
struct State {
    /// What reads see, per file ([`DiskFile::index`]): the last sync's image with every pending
    /// operation applied.
    volatile: [Image; 2],
    /// Operations applied to `volatile` since their file's last sync, in order, each undoable.
    pending: Vec<(DiskFile, PendingOp)>,
    /// Bumped by every crash; backends bound to an older one are fenced off.
    generation: u64,
    stats: DiskStats,
    /// An armed power cut: mutating operations left before it strikes, and the stream that
    /// decides what of the unsynced data survives it.
    power_cut: Option<(u64, ChaCha8Rng)>,
    /// What the last power cut left, until the harness takes it.
    power_cut_report: Option<CrashReport>,
    /// An open storage fault window.
    errors: Option<ErrorWindow>,
}

/// A storage fault in force: which operations fail, how, how many more may, and the stream
/// that decides each selected operation.
struct ErrorWindow {
    error: StorageError,
    filter: StorageFilter,
    errors_left: u32,
    rng: ChaCha8Rng,
}

/// A simulated disk holding a database and its write-ahead file. Shared as `Arc<SimDisk>`;
/// the store reaches it through [`SimDiskBackend`]s made by [`SimDisk::storage`].
pub struct SimDisk {
    lying_fsync: bool,
    state: Mutex<State>,
    /// `stats.injected_errors`, published so the harness wakes when a storage fault bites.
    injected: tokio::sync::watch::Sender<u64>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("SimDisk")
            .field("lying_fsync", &self.lying_fsync)
            .field("db_len", &state.volatile[0].len())
            .field("wal_len", &state.volatile[1].len())
            .field("pending_ops", &state.pending.len())
            .field("generation", &state.generation)
            .finish()
    }
}

impl SimDisk {
    /// An empty disk. With `lying_fsync`, `sync_data` does nothing, so a crash can lose data the
    /// caller was told is durable: the fault the simulator's checks must be able to catch.
    pub fn new(lying_fsync: bool) -> Self {
        Self {
            lying_fsync,
            state: Mutex::default(),
            injected: tokio::sync::watch::Sender::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("sim disk mutex poisoned")
    }

    /// A redb storage backend for the database file, bound to the current generation: it stops
    /// working at the next crash, as the file handle of a killed process would.
    pub fn backend(self: &Arc<Self>) -> SimDiskBackend {
        self.file_backend(DiskFile::Db)
    }

    /// A backend for `file`, bound to the current generation.
    pub fn file_backend(self: &Arc<Self>, file: DiskFile) -> SimDiskBackend {
        SimDiskBackend {
            disk: Arc::clone(self),
            generation: self.state().generation,
            file,
        }
    }

    /// Where the store opens on this disk: the database and its write-ahead file, both bound
    /// to the current generation.
    pub fn storage(self: &Arc<Self>) -> vigil::io::storage::StorageLocation {
        vigil::io::storage::StorageLocation::Backend {
            db: Box::new(self.file_backend(DiskFile::Db)),
            wal: Box::new(self.file_backend(DiskFile::Wal)),
        }
    }

    /// A new disk holding this one's image, with nothing unsynced (tests start many runs from
    /// one prepared image). Panics if this one holds unsynced operations.
    pub fn duplicate(&self) -> SimDisk {
        let state = self.state();
        assert!(
            state.pending.is_empty(),
            "duplicate a disk with nothing unsynced"
        );
        SimDisk {
            lying_fsync: self.lying_fsync,
            state: Mutex::new(State {
                volatile: state.volatile.clone(),
                ..State::default()
            }),
            injected: tokio::sync::watch::Sender::new(0),
        }
    }

    /// A new disk holding what this one's reads see now, with nothing unsynced, no armed fault
    /// and no counters: the harness reads it without touching this disk (a store opened on it
    /// may repair the file, and an open fault window must bite the node, not the reader).
    pub fn read_copy(&self) -> SimDisk {
        SimDisk {
            lying_fsync: self.lying_fsync,
            state: Mutex::new(State {
                volatile: self.state().volatile.clone(),
                ..State::default()
            }),
            injected: tokio::sync::watch::Sender::new(0),
        }
    }

    /// How many crashes the disk has seen: backends from an older generation are fenced off.
    pub fn generation(&self) -> u64 {
        self.state().generation
    }

    /// Operations not yet synced: what the next crash could lose.
    pub fn pending_ops(&self) -> usize {
        self.state().pending.len()
    }

    /// The disk's counters, for reports and assertions.
    pub fn stats(&self) -> DiskStats {
        self.state().stats
    }

    /// Simulates a power loss: the image becomes the durable one plus a seeded subset of the
    /// unsynced operations, in order, each write torn at sector boundaries. Fences off every
    /// existing backend. Uses only `rng`, so a seed replays the same crash.
    pub fn crash(&self, rng: &mut impl Rng) -> CrashReport {
        let mut state = self.state();
        state.power_cut = None;
        state.crash(rng)
    }

    /// Arms a power cut: the `after_ops`-th mutating operation (write, `set_len` or sync) from
    /// now fails, and the disk crashes at that instant, mid-commit, with `rng` deciding what of
    /// the unsynced data lands (CrashAfterWrite, docs/faults.md `power_cut`: since a sync counts as an operation,
    /// the cut falls before or after a sync). The process using the disk sees I/O errors until the
    /// harness kills it; [`SimDisk::take_power_cut`] tells the harness it happened.
    pub fn arm_power_cut(&self, after_ops: u64, rng: ChaCha8Rng) {
        assert!(
            after_ops > 0,
            "a power cut needs at least one operation to strike"
        );
        self.state().power_cut = Some((after_ops, rng));
    }

    /// Disarms a power cut that has not struck.
    pub fn disarm_power_cut(&self) {
        self.state().power_cut = None;
    }

    /// Whether a power cut has struck and the harness has not yet taken it: the process using
    /// the disk is about to die, and its I/O errors are the cut's, not a failure of its own.
    pub fn power_is_cut(&self) -> bool {
        self.state().power_cut_report.is_some()
    }

    /// What the power cut left, once it has struck (taken once).
    pub fn take_power_cut(&self) -> Option<CrashReport> {
        self.state().power_cut_report.take()
    }

    /// Opens a storage fault window: from now each mutating operation `filter` selects fails
    /// with `error` (with the filter's probability, drawn from `rng`) and changes nothing, until
    /// `errors_max` have failed or [`SimDisk::disarm_errors`]. Replaces an open window.
    pub fn arm_errors(
        &self,
        error: StorageError,
        filter: StorageFilter,
        errors_max: u32,
        rng: ChaCha8Rng,
    ) {
        assert!(
            errors_max > 0,
            "a storage fault window fails at least one operation"
        );
        self.state().errors = Some(ErrorWindow {
            error,
            filter,
            errors_left: errors_max,
            rng,
        });
    }

    /// Closes the storage fault window, if one is open.
    pub fn disarm_errors(&self) {
        self.state().errors = None;
    }

    /// Watches `stats().injected_errors`: changes each time a storage fault makes an operation
    /// fail.
    pub fn injected_errors(&self) -> tokio::sync::watch::Receiver<u64> {
        self.injected.subscribe()
    }

    /// The process that held the disk exited (it was not a power loss): fences off its handles,
    /// so a `Database` dropped late cannot write, and keeps the page cache: the image and the
    /// unsynced writes stay as they are. Returns the unsynced operations.
    pub fn fence(&self) -> usize {
        let mut state = self.state();
        state.generation += 1;
        state.pending.len()
    }
}

impl State {
    /// Rolls the image back to the last sync; returns each pending operation in order, with
    /// the data of each write (read from the image just before that write is undone).
    fn roll_back(&mut self) -> Vec<(DiskFile, LostOp)> {
        let pending = std::mem::take(&mut self.pending);
        let mut ops = Vec::with_capacity(pending.len());
        for (file, op) in pending.iter().rev() {
            let image = &mut self.volatile[file.index()];
            ops.push((
                *file,
                match op {
                    PendingOp::Write { offset, len, .. } => LostOp::Write {
                        offset: *offset,
                        data: image.to_vec(*offset, *offset + *len),
                    },
                    PendingOp::SetLen { len, .. } => LostOp::SetLen(*len),
                },
            ));
            op.undo(image);
        }
        ops.reverse();
        ops
    }

    fn crash(&mut self, rng: &mut impl Rng) -> CrashReport {
        let pending = self.roll_back();
        let mut images = std::mem::take(&mut self.volatile);
        let mut report = CrashReport {
            pending_ops: pending.len(),
            ..CrashReport::default()
        };
        let (keep_op, keep_sector) =
            CRASH_KEEP_PROFILES[rng.gen_range(0..CRASH_KEEP_PROFILES.len())];
        for (file, op) in &pending {
            let keep = rng.gen_bool(keep_op);
            report.kept_ops += usize::from(keep);
            let image = &mut images[file.index()];
            match op {
                LostOp::SetLen(len) if keep => image.set_len(*len),
                LostOp::SetLen(_) => {}
                LostOp::Write { data, .. } if !keep => report.lost_bytes += data.len() as u64,
                LostOp::Write { offset, data } => {
                    let lost = land_some_sectors(image, *offset, data, keep_sector, rng);
                    report.torn_ops += usize::from(lost > 0);
                    report.lost_bytes += lost;
                }
            }
        }
        self.volatile = images;
        self.generation += 1;
        self.stats.crashes += 1;
        report
    }

    /// Counts one mutating operation against an armed power cut; if it strikes, the disk
    /// crashes now and the operation fails. Otherwise an open storage fault window may fail it.
    fn before_mutation(&mut self, is_sync: bool) -> io::Result<()> {
        let Some((left, _)) = self.power_cut.as_mut() else {
            return self.inject_error(is_sync);
        };
        *left -= 1;
        if *left > 0 {
            return Ok(());
        }
        let (_, mut rng) = self.power_cut.take().expect("armed");
        let report = self.crash(&mut rng);
        self.power_cut_report = Some(report);
        Err(io::Error::other(POWER_CUT_MESSAGE))
    }

    /// Fails the operation if an open storage fault window selects it.
    fn inject_error(&mut self, is_sync: bool) -> io::Result<()> {
        let Some(window) = self.errors.as_mut() else {
            return Ok(());
        };
        let selected = window.filter.ops.selects(is_sync)
            && window.rng.gen_range(0..PERMILLE) < window.filter.probability_permille;
        if !selected {
            return Ok(());
        }
        // The message names the operation, so a trace shows which one the filter let fail.
        let op = if is_sync { "sync" } else { "write" };
        let error = match window.error {
            StorageError::Io => io::Error::other(format!("sim disk: injected I/O error on {op}")),
            StorageError::Full => io::Error::new(
                io::ErrorKind::StorageFull,
                format!("sim disk: injected disk full on {op}"),
            ),
        };
        window.errors_left -= 1;
        if window.errors_left == 0 {
            self.errors = None;
        }
        self.stats.injected_errors += 1;
        Err(error)
    }
}

/// A pending operation as a crash replays it: a write with its data, or a new length.
enum LostOp {
    Write { offset: usize, data: Vec<u8> },
    SetLen(usize),
}

/// Lands each sector-aligned piece of a write with probability `keep_sector`; returns the bytes
/// that did not land.
fn land_some_sectors(
    image: &mut Image,
    offset: usize,
    data: &[u8],
    keep_sector: f64,
    rng: &mut impl Rng,
) -> u64 {
    let sector = SECTOR_BYTES as usize;
    let end = offset + data.len();
    let mut lost = 0;
    let mut start = offset;
    while start < end {
        let piece_end = ((start / sector + 1) * sector).min(end);
        let piece = &data[start - offset..piece_end - offset];
        if rng.gen_bool(keep_sector) {
            image.write(start, piece);
        } else {
            lost += piece.len() as u64;
        }
        start = piece_end;
    }
    lost
}

/// Checks that `offset..offset + len` fits in memory; returns it as `usize` bounds.
fn range(offset: u64, len: usize) -> io::Result<(usize, usize)> {
    let start = usize::try_from(offset).ok();
    start
        .and_then(|start| Some((start, start.checked_add(len)?)))
        .ok_or_else(|| io::Error::other("sim disk: position beyond memory"))
}

/// redb's view of a [`SimDisk`], bound to the generation it was made in. After a crash every
/// operation errors and changes nothing, so a `Database` dropped late cannot write to the disk a
/// restarted process now owns.
pub struct SimDiskBackend {
    disk: Arc<SimDisk>,
    generation: u64,
    file: DiskFile,
}

impl fmt::Debug for SimDiskBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimDiskBackend")
            .field("generation", &self.generation)
            .field("file", &self.file)
            .field("lying_fsync", &self.disk.lying_fsync)
            .finish()
    }
}

impl SimDiskBackend {
    /// Locks the disk state if this handle is still from the current generation.
    fn live(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.disk.state();
        if state.generation == self.generation {
            Ok(state)
        } else {
            Err(io::Error::other(STALE_HANDLE_MESSAGE))
        }
    }

    /// Runs a mutating operation unless a power cut or a storage fault fails it first; an
    /// injected failure is published to the harness.
    fn mutate(&self, is_sync: bool, op: impl FnOnce(&mut State)) -> io::Result<()> {
        let mut state = self.live()?;
        if let Err(error) = state.before_mutation(is_sync) {
            let injected = state.stats.injected_errors;
            drop(state);
            self.disk
                .injected
                .send_if_modified(|seen| std::mem::replace(seen, injected) != injected);
            return Err(error);
        }
        op(&mut state);
        Ok(())
    }
}

impl redb::StorageBackend for SimDiskBackend {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.live()?.volatile[self.file.index()].len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let state = self.live()?;
        let (start, _) = range(offset, out.len())?;
        if state.volatile[self.file.index()].read(start, out) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "sim disk: read past end",
            ))
        }
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let (len, _) = range(len, 0)?;
        let file = self.file;
        self.mutate(false, |state| {
            let image = &mut state.volatile[file.index()];
            let old_len = image.len();
            let cut = image.to_vec(len, old_len);
            image.set_len(len);
            state
                .pending
                .push((file, PendingOp::SetLen { len, old_len, cut }));
        })
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let (lying, file) = (self.disk.lying_fsync, self.file);
        self.mutate(true, |state| {
            state.stats.syncs += 1;
            if !lying {
                state.pending.retain(|(of, _)| *of != file);
            }
        })
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let (start, _) = range(offset, data.len())?;
        let file = self.file;
        self.mutate(false, |state| {
            let image = &mut state.volatile[file.index()];
            let old_len = image.len();
            let old = image.to_vec(start, start + data.len());
            image.write(start, data);
            state.pending.push((
                file,
                PendingOp::Write {
                    offset: start,
                    len: data.len(),
                    old_len,
                    old,
                },
            ));
            state.stats.writes += 1;
            state.stats.bytes_written += data.len() as u64;
        })
    }

    fn close(&self) -> Result<(), io::Error> {
        self.live().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use redb::{Database, ReadableDatabase, StorageBackend, TableDefinition};
    use std::panic::{catch_unwind, AssertUnwindSafe};

    /// Enough seeds that a 4096-byte write (8 sectors) lands whole in some: p = 1/2 * 1/256.
    const SEEDS: u64 = 4096;
    const REDB_SEEDS: u64 = 30;
    const KEYS: u64 = 200;
    /// A commit of one small key is ~7 disk ops, so this lets ~1 seed in 8 outlive all commits.
    const MAX_OPS_BEFORE_CRASH: u64 = 1600;
    const TABLE: TableDefinition<u64, u64> = TableDefinition::new("heartbeats");
    const OLD: u8 = 0xAA;
    const NEW: u8 = 0xBB;

    fn rng(seed: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(seed)
    }

    fn image(disk: &Arc<SimDisk>) -> Vec<u8> {
        let backend = disk.backend();
        let mut out = vec![0; backend.len().expect("len") as usize];
        backend.read(0, &mut out).expect("read");
        out
    }

    #[test]
    fn unsynced_writes_are_lost_kept_or_torn_and_synced_writes_survive() {
        let (mut lost, mut kept, mut torn, mut dropped_ops) = (0, 0, 0, 0);
        for seed in 0..SEEDS {
            let disk = Arc::new(SimDisk::new(false));
            let backend = disk.backend();
            backend.write(0, &[OLD; 8192]).expect("write");
            backend.sync_data().expect("sync");
            backend.write(1024, &[NEW; 4096]).expect("aligned write");
            backend.write(5400, &[NEW; 1000]).expect("misaligned write");
            let report = disk.crash(&mut rng(seed));
            let after = image(&disk);
            assert_eq!((after.len(), report.pending_ops), (8192, 2));
            dropped_ops += report.pending_ops - report.kept_ops;
            let landed = after.iter().filter(|&&b| b == NEW).count() as u64;
            assert_eq!(report.lost_bytes, 4096 + 1000 - landed, "seed {seed}");
            assert!(after[..1024]
                .iter()
                .chain(&after[5120..5400])
                .all(|&b| b == OLD));
            // Tears fall on absolute sector boundaries, even for the misaligned write.
            for (start, end) in [(1024, 1536), (5400, 5632), (5632, 6144), (6144, 6400)] {
                let piece = &after[start..end];
                assert!(
                    piece.iter().all(|&b| b == piece[0]),
                    "seed {seed} at {start}"
                );
            }
            match after[1024..5120].iter().filter(|&&b| b == NEW).count() {
                0 => lost += 1,
                4096 => kept += 1,
                _ => torn += 1,
            }
        }
        let counts = (lost, kept, torn, dropped_ops);
        assert!(
            lost > 0 && kept > 0 && torn > 0 && dropped_ops > 0,
            "{counts:?}"
        );

        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let mut expected = vec![0; 300];
        expected.extend_from_slice(&data);
        for seed in 0..SEEDS {
            let disk = Arc::new(SimDisk::new(false));
            disk.backend().write(300, &data).expect("write");
            disk.backend().sync_data().expect("sync");
            assert_eq!(disk.crash(&mut rng(seed)).pending_ops, 0);
            assert_eq!(image(&disk), expected, "seed {seed}");
        }
    }

    /// The undo records bring back exactly the image of the last sync, and each write's data,
    /// whatever the operations did since: overlapping writes, writes past the end, shrinks and
    /// growths, in random order.
    #[test]
    fn rolling_back_restores_the_last_synced_image_and_each_writes_data() {
        for seed in 0..200 {
            let mut rng = rng(seed);
            let disk = Arc::new(SimDisk::new(false));
            let backend = disk.backend();
            let mut synced = Vec::new();
            let mut written = Vec::new();
            for step in 0..rng.gen_range(1..40u64) {
                let len = image(&disk).len() as u64;
                match rng.gen_range(0..10) {
                    0 => {
                        backend.sync_data().expect("sync");
                        synced = image(&disk);
                        written.clear();
                    }
                    1 => backend.set_len(rng.gen_range(0..=len + 3000)).expect("set_len"),
                    _ => {
                        let offset = rng.gen_range(0..=len + 2000);
                        let data = vec![(step % 251) as u8 + 1; rng.gen_range(0..3000)];
                        backend.write(offset, &data).expect("write");
                        written.push(data);
                    }
                }
            }
            let ops = disk.state().roll_back();
            assert_eq!(image(&disk), synced, "seed {seed}: the last sync's image");
            let data: Vec<_> = ops
                .into_iter()
                .filter_map(|(_, op)| match op {
                    LostOp::Write { data, .. } => Some(data),
                    LostOp::SetLen(_) => None,
                })
                .collect();
            assert_eq!(data, written, "seed {seed}: each write's data, in order");
        }
    }

    #[test]
    fn set_len_zero_fills_and_reads_past_end_fail() {
        let disk = Arc::new(SimDisk::new(false));
        let backend = disk.backend();
        backend.write(0, &[7; 100]).expect("write");
        backend.set_len(50).expect("shrink");
        backend.set_len(200).expect("grow");
        let mut expected = vec![7; 50];
        expected.resize(200, 0);
        assert_eq!(image(&disk), expected);
        assert!(backend.read(190, &mut [0; 20]).is_err());
        assert!(backend.read(u64::MAX, &mut [0; 2]).is_err());
        backend.sync_data().expect("sync");
        disk.crash(&mut rng(1));
        assert_eq!(
            image(&disk),
            expected,
            "the durable image applies set_len in order"
        );
    }

    #[test]
    fn stale_backend_is_fenced_after_a_crash() {
        let disk = Arc::new(SimDisk::new(false));
        let stale = disk.backend();
        stale.write(0, &[OLD; 1024]).expect("write");
        stale.sync_data().expect("sync");
        disk.crash(&mut rng(0));
        let before = (image(&disk), disk.stats(), disk.pending_ops());
        let errors = [
            stale.write(0, &[NEW; 1024]).err(),
            stale.read(0, &mut [0; 16]).err(),
            stale.set_len(4096).err(),
            stale.sync_data().err(),
            stale.len().err(),
        ];
        for error in errors {
            assert_eq!(
                error.expect("stale handle must fail").to_string(),
                STALE_HANDLE_MESSAGE
            );
        }
        assert_eq!((image(&disk), disk.stats(), disk.pending_ops()), before);
        disk.backend()
            .write(0, &[NEW; 4])
            .expect("a fresh handle works");
    }

    #[test]
    fn lying_fsync_loses_synced_data() {
        let lost = (0..SEEDS).filter(|&seed| {
            let disk = Arc::new(SimDisk::new(true));
            disk.backend().write(0, &[NEW; 4096]).expect("write");
            disk.backend().sync_data().expect("sync");
            disk.crash(&mut rng(seed));
            image(&disk) != [NEW; 4096]
        });
        assert!(lost.count() > 0);
    }

    fn open(disk: &Arc<SimDisk>) -> Result<Database, redb::DatabaseError> {
        Database::builder().create_with_backend(disk.backend())
    }

    fn commit(db: &Database, key: u64) -> Result<(), redb::Error> {
        let tx = db.begin_write()?;
        tx.open_table(TABLE)?.insert(key, key)?;
        Ok(tx.commit()?)
    }

    /// Keys below `end` that are absent or hold the wrong value.
    fn missing(db: &Database, end: u64) -> Result<Vec<u64>, redb::Error> {
        let tx = db.begin_read()?;
        let table = match tx.open_table(TABLE) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok((0..end).collect()),
            table => table?,
        };
        let mut out = Vec::new();
        for key in 0..end {
            if table.get(key)?.map(|value| value.value()) != Some(key) {
                out.push(key);
            }
        }
        Ok(out)
    }

    #[test]
    fn redb_keeps_every_committed_key_across_crashes() {
        let (mut mid_commit, mut between_commits, mut tore_something) = (0, 0, 0);
        for seed in 0..REDB_SEEDS {
            let mut rng = rng(seed);
            let disk = Arc::new(SimDisk::new(false));
            drop(open(&disk).expect("create"));
            disk.arm_power_cut(
                rng.gen_range(1..=MAX_OPS_BEFORE_CRASH),
                ChaCha8Rng::seed_from_u64(rng.gen()),
            );
            let mut committed = 0;
            let mut cut = None;
            if let Ok(db) = open(&disk) {
                while committed < KEYS && commit(&db, committed).is_ok() {
                    committed += 1;
                }
                cut = disk.take_power_cut();
                if cut.is_none() {
                    disk.disarm_power_cut();
                    let in_flight = db.begin_write().expect("begin");
                    in_flight
                        .open_table(TABLE)
                        .expect("table")
                        .insert(KEYS, 0)
                        .expect("insert");
                    disk.crash(&mut rng);
                    between_commits += 1;
                }
            }
            if let Some(report) = cut.or_else(|| disk.take_power_cut()) {
                mid_commit += 1;
                tore_something += usize::from(report.lost_bytes > 0);
            }
            let db = open(&disk).expect("reopen after crash");
            // The commit cut by the crash may or may not have landed; none after it did.
            let lost = missing(&db, KEYS + 1).expect("read");
            let unsure: Vec<u64> = (committed..=KEYS).collect();
            assert!(
                lost == unsure || lost == unsure[1..],
                "seed {seed}: lost {lost:?}"
            );
            (committed..KEYS).for_each(|key| commit(&db, key).expect("commit"));
            disk.crash(&mut rng);
            drop(db);
            let db = open(&disk).expect("reopen after second crash");
            assert_eq!(
                missing(&db, KEYS).expect("read"),
                Vec::<u64>::new(),
                "seed {seed}"
            );
        }
        let counts = (mid_commit, between_commits, tore_something);
        assert!(counts.0 > 0 && counts.1 > 0 && counts.2 > 0, "{counts:?}");
    }

    #[test]
    fn storage_faults_fail_selected_operations_and_change_nothing() {
        use vigil_faults::StorageOps;
        let disk = Arc::new(SimDisk::new(false));
        let backend = disk.backend();
        let injected = disk.injected_errors();
        backend.write(0, &[OLD; 512]).expect("write");
        disk.arm_errors(
            StorageError::Io,
            StorageFilter::always(StorageOps::Write),
            2,
            rng(0),
        );
        for _ in 0..2 {
            let error = backend.write(0, &[NEW; 512]).expect_err("writes fail");
            assert_eq!(error.kind(), io::ErrorKind::Other);
            assert!(
                backend.set_len(4096).is_err(),
                "set_len grows the file: a write"
            );
            assert_eq!(image(&disk), [OLD; 512], "a failed write changes nothing");
            disk.arm_errors(
                StorageError::Io,
                StorageFilter::always(StorageOps::Write),
                2,
                rng(0),
            );
            backend.sync_data().expect("the filter spares syncs");
        }
        assert_eq!((disk.stats().injected_errors, *injected.borrow()), (4, 4));
        backend.write(0, &[NEW; 8]).expect_err("still open");
        backend
            .write(0, &[NEW; 8])
            .expect_err("the last error of the window");
        backend
            .write(0, &[NEW; 8])
            .expect("the window closed after errors_max");

        disk.arm_errors(
            StorageError::Full,
            StorageFilter::always(StorageOps::Sync),
            1,
            rng(0),
        );
        let pending = disk.pending_ops();
        let error = backend.sync_data().expect_err("syncs fail");
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert_eq!(
            disk.pending_ops(),
            pending,
            "a failed sync makes nothing durable"
        );
        disk.arm_errors(
            StorageError::Full,
            StorageFilter::always(StorageOps::Sync),
            1,
            rng(0),
        );
        disk.disarm_errors();
        backend.sync_data().expect("disarmed");

        // A probability of one half fails about half of the selected operations.
        disk.arm_errors(
            StorageError::Io,
            StorageFilter {
                ops: StorageOps::Any,
                probability_permille: 500,
            },
            u32::MAX,
            rng(3),
        );
        let failed = (0..1_000).filter(|_| backend.sync_data().is_err()).count();
        assert!((400..600).contains(&failed), "{failed}");
    }

    #[test]
    fn fence_keeps_the_page_cache_and_stops_old_handles() {
        let disk = Arc::new(SimDisk::new(false));
        let old = disk.backend();
        old.write(0, &[OLD; 1024]).expect("write");
        assert_eq!(disk.fence(), 1);
        assert!(
            old.write(0, &[NEW; 4]).is_err(),
            "the exited process's handle is fenced"
        );
        assert_eq!(
            image(&disk),
            [OLD; 1024],
            "unsynced writes stay in the page cache"
        );
        assert_eq!(disk.pending_ops(), 1, "and are still unsynced");
    }

    #[test]
    fn redb_reopened_after_a_failed_commit_keeps_every_committed_key() {
        use vigil_faults::StorageOps;
        let mut refused_after = 0;
        for seed in 0..REDB_SEEDS {
            let mut rng = rng(seed);
            let disk = Arc::new(SimDisk::new(false));
            let db = open(&disk).expect("create");
            let committed = rng.gen_range(0..KEYS / 4);
            (0..committed).for_each(|key| commit(&db, key).expect("commit"));
            let ops = [StorageOps::Write, StorageOps::Sync, StorageOps::Any][seed as usize % 3];
            let filter = StorageFilter {
                ops,
                probability_permille: rng.gen_range(100..=PERMILLE),
            };
            disk.arm_errors(
                StorageError::Io,
                filter,
                1,
                ChaCha8Rng::seed_from_u64(rng.gen()),
            );
            let mut failed_at = None;
            for key in committed..KEYS {
                if commit(&db, key).is_err() {
                    failed_at = Some(key);
                    break;
                }
            }
            let Some(failed_at) = failed_at else {
                continue;
            };
            // redb latches the failure: nothing more is written until the database is reopened.
            refused_after += usize::from(commit(&db, KEYS).is_err());
            disk.fence();
            drop(db);
            let db = open(&disk).expect("reopen after the process exited");
            let lost = missing(&db, failed_at + 1).expect("read");
            assert!(
                lost.is_empty() || lost == [failed_at],
                "seed {seed}: lost {lost:?} of 0..={failed_at}"
            );
            // The page cache kept the unsynced tail; the next sync makes all of it durable.
            commit(&db, KEYS + 1).expect("commit after reopen");
            disk.crash(&mut rng);
            drop(db);
            let db = open(&disk).expect("reopen after a crash");
            assert!(
                missing(&db, failed_at).expect("read").is_empty(),
                "seed {seed}"
            );
        }
        assert_eq!(
            refused_after, REDB_SEEDS as usize,
            "every seed hit its window"
        );
    }

    #[test]
    fn redb_on_a_lying_fsync_loses_or_corrupts_committed_keys() {
        let detected = (0..REDB_SEEDS).filter(|&seed| {
            let disk = Arc::new(SimDisk::new(true));
            let db = open(&disk).expect("create");
            (0..KEYS).for_each(|key| commit(&db, key).expect("commit"));
            disk.crash(&mut rng(seed));
            drop(db);
            // A corrupted image could make redb panic rather than return an error: both count.
            let outcome = catch_unwind(AssertUnwindSafe(|| missing(&open(&disk)?, KEYS)));
            !matches!(outcome, Ok(Ok(lost)) if lost.is_empty())
        });
        assert!(detected.count() > 0);
    }
}
