//! `SimDisk`: a simulated disk that remembers what an fsync made durable, so the simulator can
//! cut the power at any point and check that the runtime (through redb) keeps what it committed.
//!
//! Reads see the volatile image; writes and `set_len` land there at once and queue as pending
//! operations. `sync_data` makes the pending operations durable. `crash` keeps a seeded subset of
//! them, tearing writes at sector boundaries, the way a real disk may after a power cut.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use rand::Rng;

/// Bytes per sector: the unit a disk writes atomically, so a crash tears writes at multiples of it.
pub const SECTOR_BYTES: u64 = 512;
/// Probability that a crash keeps one unsynced operation (a write or a `set_len`).
pub const KEEP_PENDING_OP_PROBABILITY: f64 = 0.5;
/// Probability that a crash keeps one sector of a kept unsynced write.
pub const KEEP_SECTOR_PROBABILITY: f64 = 0.5;
/// Environment variable that, set to exactly "1", asks for a disk whose fsync lies.
pub const LYING_FSYNC_ENV: &str = "VIGIL_SIM_LYING_FSYNC";
/// The error text every operation of a backend from before a crash returns.
const STALE_HANDLE_MESSAGE: &str = "sim disk: handle from before a crash";

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
}

/// What one crash did to the unsynced operations, so a trace can tell how hard a crash bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// One operation since the last sync. Offsets and lengths were checked to fit `usize` on entry,
/// so applying one cannot fail.
enum PendingOp {
    Write { offset: usize, data: Vec<u8> },
    SetLen(usize),
}

struct State {
    /// What survives a crash.
    durable: Vec<u8>,
    /// What reads see.
    volatile: Vec<u8>,
    /// Operations applied to `volatile` but not to `durable`, in order.
    pending: Vec<PendingOp>,
    /// Bumped by every crash; backends bound to an older one are fenced off.
    generation: u64,
    stats: DiskStats,
}

/// A simulated disk holding one file. Shared as `Arc<SimDisk>`; redb reaches it through
/// [`SimDiskBackend`]s made by [`SimDisk::backend`].
pub struct SimDisk {
    lying_fsync: bool,
    state: Mutex<State>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("SimDisk")
            .field("lying_fsync", &self.lying_fsync)
            .field("len", &state.volatile.len())
            .field("durable_len", &state.durable.len())
            .field("pending_ops", &state.pending.len())
            .field("generation", &state.generation)
            .field("stats", &state.stats)
            .finish()
    }
}

impl SimDisk {
    /// An empty disk. With `lying_fsync`, `sync_data` does nothing, so a crash can lose data the
    /// caller was told is durable: the fault the simulator's checks must be able to catch.
    pub fn new(lying_fsync: bool) -> Self {
        Self {
            lying_fsync,
            state: Mutex::new(State {
                durable: Vec::new(),
                volatile: Vec::new(),
                pending: Vec::new(),
                generation: 0,
                stats: DiskStats::default(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("sim disk mutex poisoned")
    }

    /// A redb storage backend bound to the current generation: it stops working at the next
    /// crash, as the file handle of a killed process would.
    pub fn backend(self: &Arc<Self>) -> SimDiskBackend {
        SimDiskBackend {
            disk: Arc::clone(self),
            generation: self.state().generation,
        }
    }

    /// Whether `sync_data` is ignored, so a report can say which kind of disk a run used.
    pub fn is_lying_fsync(&self) -> bool {
        self.lying_fsync
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
        let pending = std::mem::take(&mut state.pending);
        let mut image = std::mem::take(&mut state.durable);
        let mut report = CrashReport {
            pending_ops: pending.len(),
            kept_ops: 0,
            torn_ops: 0,
            lost_bytes: 0,
        };
        for op in &pending {
            let keep = rng.gen_bool(KEEP_PENDING_OP_PROBABILITY);
            match op {
                PendingOp::SetLen(len) => {
                    if keep {
                        report.kept_ops += 1;
                        image.resize(*len, 0);
                    }
                }
                PendingOp::Write { offset, data } => {
                    if !keep {
                        report.lost_bytes += data.len() as u64;
                        continue;
                    }
                    report.kept_ops += 1;
                    let lost = land_some_sectors(&mut image, *offset, data, rng);
                    if lost > 0 {
                        report.torn_ops += 1;
                        report.lost_bytes += lost;
                    }
                }
            }
        }
        state.volatile = image.clone();
        state.durable = image;
        state.generation += 1;
        state.stats.crashes += 1;
        report
    }
}

/// Writes `data` at `offset`, growing `image` with zeros if the write ends past it.
fn apply_write(image: &mut Vec<u8>, offset: usize, data: &[u8]) {
    let end = offset + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset..end].copy_from_slice(data);
}

/// Lands each sector-aligned piece of a write with `KEEP_SECTOR_PROBABILITY`; returns the bytes
/// that did not land.
fn land_some_sectors(image: &mut Vec<u8>, offset: usize, data: &[u8], rng: &mut impl Rng) -> u64 {
    let sector = SECTOR_BYTES as usize;
    let end = offset + data.len();
    let mut lost = 0;
    let mut start = offset;
    while start < end {
        let piece_end = ((start / sector + 1) * sector).min(end);
        let piece = &data[start - offset..piece_end - offset];
        if rng.gen_bool(KEEP_SECTOR_PROBABILITY) {
            apply_write(image, start, piece);
        } else {
            lost += piece.len() as u64;
        }
        start = piece_end;
    }
    lost
}

/// Converts a disk position, refusing one this machine could not hold in memory.
fn position(value: u64) -> io::Result<usize> {
    usize::try_from(value).map_err(|_| io::Error::other("sim disk: position beyond memory"))
}

/// Converts `offset + len` to a checked in-memory end position.
fn end_position(offset: u64, len: usize) -> io::Result<(usize, usize)> {
    let start = position(offset)?;
    let end = start
        .checked_add(len)
        .ok_or_else(|| io::Error::other("sim disk: range overflows"))?;
    Ok((start, end))
}

/// redb's view of a [`SimDisk`], bound to the generation it was made in. After a crash every
/// operation errors and changes nothing, so a `Database` dropped late cannot write to the disk a
/// restarted process now owns.
pub struct SimDiskBackend {
    disk: Arc<SimDisk>,
    generation: u64,
}

impl fmt::Debug for SimDiskBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimDiskBackend")
            .field("generation", &self.generation)
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
}

impl redb::StorageBackend for SimDiskBackend {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.live()?.volatile.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let state = self.live()?;
        let (start, end) = end_position(offset, out.len())?;
        let Some(bytes) = state.volatile.get(start..end) else {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "sim disk: read past end",
            ));
        };
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut state = self.live()?;
        let len = position(len)?;
        state.volatile.resize(len, 0);
        state.pending.push(PendingOp::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let mut state = self.live()?;
        state.stats.syncs += 1;
        if self.disk.lying_fsync {
            return Ok(());
        }
        let state = &mut *state;
        for op in state.pending.drain(..) {
            match op {
                PendingOp::Write { offset, data } => apply_write(&mut state.durable, offset, &data),
                PendingOp::SetLen(len) => state.durable.resize(len, 0),
            }
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut state = self.live()?;
        let (start, _) = end_position(offset, data.len())?;
        apply_write(&mut state.volatile, start, data);
        state.pending.push(PendingOp::Write {
            offset: start,
            data: data.to_vec(),
        });
        state.stats.writes += 1;
        state.stats.bytes_written += data.len() as u64;
        Ok(())
    }

    fn close(&self) -> Result<(), io::Error> {
        self.live().map(drop)
    }
}
