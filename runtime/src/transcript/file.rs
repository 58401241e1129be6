//! [`FileTranscripts`]: the production store. One NDJSON file per agent holds the lines of all
//! its runs in the order they were written, at
//! `<data-dir>/transcripts/shard-XX/<agent-id>.ndjson` (`XX`: the agent id modulo
//! [`TRANSCRIPT_SHARDS`], in hex); directories 0700 and files 0600 (they hold what models and
//! tools said, redacted but private). An agent has one active run at a time, so its runs' lines
//! follow one another; each line names its run, which is how a run is read back.
//!
//! Why a file per agent in a few shared directories, not a file per run in a directory per
//! agent (ADR 0020): a node of 100,000 agents starts about 1,700 runs a second, and creating a
//! file (and, at an agent's first run, a directory) for each cost most of the node's CPU in the
//! filesystem's inode allocation; retention had to walk every run's file. Now an agent's file is
//! created once in its life and a run's lines are appended to it.
//!
//! No file I/O on an async worker: every operation runs on tokio's blocking pool
//! (`spawn_blocking`) while its caller awaits it (one operation per running run at most: the
//! caller awaits each append, so the backpressure is natural). An operation holds the lock of
//! its agent's shard, never a store-wide one, and `finish` makes a run durable after letting it
//! go, so the fsyncs of many runs proceed side by side (the filesystem's journal commits them
//! together). A slow disk slows transcript writers, never the engine or the API's other routes.
//!
//! Durability: appends go to the page cache; `finish` fsyncs the agent's file (and, the first
//! time, its shard directory; the root directory once per shard and process). A crash may cut a transcript's tail: a partial last line is never read
//! back, and the next run to open the file ends it first. Runs found on disk that this process
//! did not open are over (their writer was an earlier process), so they read as complete.
//! Retention rewrites a file without its expired runs into a temporary file and renames it over
//! the old one, so a crash leaves either whole.

mod legacy;
mod lines;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use super::budget::{plan_prune, RunBudget};
use super::{
    prepared, Appended, Pruned, Retention, SharedTranscriptStore, TranscriptEntry, TranscriptError,
    TranscriptFuture, TranscriptPage, TranscriptStore, TRANSCRIPTS_DIR, TRANSCRIPT_EXTENSION,
};
use crate::engine::agent::AgentId;
use crate::engine::run::RunId;
use crate::redact::Redactor;

/// Directories the agents' files are spread over (256): few enough that each is made once, many
/// enough that a directory of a million-agent node holds about 4,000 files, and that runs of
/// different agents rarely wait for one another's lock.
pub const TRANSCRIPT_SHARDS: u64 = 256;
/// Most transcript operations on tokio's blocking pool at once, whatever the cores (16). Why a
/// bound: that pool also runs the writer's commits and the snapshots, and a busy fleet asks for
/// thousands of transcript operations a second (each run appends and syncs). Unbounded, they
/// filled the pool's threads and the event log's commits queued behind them. Past the bound
/// ([`io_threads_at_once`]), callers wait on a semaphore, holding no thread.
pub const TRANSCRIPT_IO_THREADS_MAX: usize = 16;
/// Transcript operations at once per core of the machine (2), within
/// [`TRANSCRIPT_IO_THREADS_MIN`] and [`TRANSCRIPT_IO_THREADS_MAX`]. Why per core: the
/// filesystem's journal commit ends every sync waiting on it at once, and each thread it wakes
/// takes a core before the async workers serving requests get one back. With 16 on 2 cores,
/// 512 runs ending in the same second put a read's p99 under load at 2.4–7.5 ms (median of
/// the runs 3.8), against 1.6–5.4 ms (2.7) with 4 (docs/benchmarks.md, "Runs that end
/// together").
pub const TRANSCRIPT_IO_THREADS_PER_CORE: usize = 2;
/// The fewest transcript operations at once (4), on a machine of one or two cores: fewer would
/// lose the journal's batching of several runs' syncs into one commit.
pub const TRANSCRIPT_IO_THREADS_MIN: usize = 4;
/// Mode of transcript directories: the owner only.
const DIR_MODE: u32 = 0o700;
/// Mode of transcript files: the owner only.
const FILE_MODE: u32 = 0o600;

/// A run this process appends to and has not finished. It holds no file handle: every
/// operation opens the agent's file (about 10 µs), so that thousands of runs in flight never
/// hold thousands of descriptors.
#[derive(Debug, Clone, Copy)]
struct OpenRun {
    agent: AgentId,
    budget: RunBudget,
    /// The file did not exist before this run: `finish` makes its directory entry durable.
    created: bool,
}

/// The state behind one shard's lock.
#[derive(Debug, Default)]
struct Shard {
    open: BTreeMap<RunId, OpenRun>,
    /// Whether this process has made sure the shard's directory exists.
    dir_made: bool,
    /// Whether this process has synced the root directory since the shard's directory was
    /// made, so that the root's entry for it is durable.
    root_synced: bool,
}

struct Inner {
    root: PathBuf,
    retention: Retention,
    shards: Vec<Mutex<Shard>>,
    /// Permits for [`io_threads_at_once`] operations on the blocking pool.
    io_permits: Arc<tokio::sync::Semaphore>,
    /// Operations running on the blocking pool now, and the most there ever were.
    in_flight: std::sync::atomic::AtomicUsize,
    in_flight_peak: std::sync::atomic::AtomicUsize,
    /// Syncs of the root directory so far.
    root_syncs: std::sync::atomic::AtomicUsize,
}

/// How many transcript operations may run on the blocking pool at once on a machine of `cores`
/// cores ([`TRANSCRIPT_IO_THREADS_PER_CORE`], within [`TRANSCRIPT_IO_THREADS_MIN`] and
/// [`TRANSCRIPT_IO_THREADS_MAX`]).
pub fn io_threads_at_once(cores: usize) -> usize {
    cores
        .saturating_mul(TRANSCRIPT_IO_THREADS_PER_CORE)
        .clamp(TRANSCRIPT_IO_THREADS_MIN, TRANSCRIPT_IO_THREADS_MAX)
}

/// Transcripts in files (see the module documentation). Creates nothing until the first append.
#[derive(Clone)]
pub struct FileTranscripts {
    inner: Arc<Inner>,
}

impl FileTranscripts {
    /// Transcripts under `<data_dir>/transcripts`, with the default [`Retention`].
    pub fn new(data_dir: &Path) -> Self {
        Self::with_retention(data_dir, Retention::default())
    }

    pub fn with_retention(data_dir: &Path, retention: Retention) -> Self {
        FileTranscripts {
            inner: Arc::new(Inner {
                root: data_dir.join(TRANSCRIPTS_DIR),
                retention,
                shards: (0..TRANSCRIPT_SHARDS).map(|_| Mutex::default()).collect(),
                io_permits: Arc::new(tokio::sync::Semaphore::new(io_threads_at_once(
                    crate::parallel::cores(),
                ))),
                in_flight: Default::default(),
                in_flight_peak: Default::default(),
                root_syncs: Default::default(),
            }),
        }
    }

    /// The store as the node takes it.
    pub fn shared(data_dir: &Path) -> SharedTranscriptStore {
        Arc::new(Self::new(data_dir))
    }

    /// The directory that holds the shards' directories.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The file that holds `agent`'s transcripts.
    pub fn path(&self, agent: AgentId) -> PathBuf {
        self.inner.agent_path(agent)
    }

    /// The most operations that were ever on the blocking pool at once.
    pub fn in_flight_peak(&self) -> usize {
        self.inner.in_flight_peak.load(Ordering::Relaxed)
    }

    /// How many times this store has synced its root directory.
    pub fn root_syncs(&self) -> usize {
        self.inner.root_syncs.load(Ordering::Relaxed)
    }

    /// Runs `op` on the blocking pool, once one of [`io_threads_at_once`] permits is free.
    fn blocking<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Inner) -> Result<T, TranscriptError> + Send + 'static,
    ) -> TranscriptFuture<'static, T> {
        let inner = self.inner.clone();
        let job = move || {
            let now = inner.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
            inner.in_flight_peak.fetch_max(now, Ordering::Relaxed);
            let done = op(&inner);
            inner.in_flight.fetch_sub(1, Ordering::Relaxed);
            done
        };
        let permits = self.inner.io_permits.clone();
        Box::pin(async move {
            // Held until the operation is over; the semaphore is never closed.
            let _permit = permits
                .acquire_owned()
                .await
                .map_err(|error| TranscriptError::Writer(error.to_string()))?;
            #[cfg(not(madsim))]
            let done = tokio::task::spawn_blocking(job)
                .await
                .map_err(|error| TranscriptError::Writer(error.to_string()))?;
            // The simulator forbids a blocking pool, and never uses this store (its nodes have
            // no real disk): inline there, only so that the crate builds the same.
            #[cfg(madsim)]
            let done = job();
            done
        })
    }
}

impl Inner {
    fn shard_of(agent: AgentId) -> u64 {
        agent.0 % TRANSCRIPT_SHARDS
    }

    fn lock(&self, shard: u64) -> MutexGuard<'_, Shard> {
        // A panic under the lock leaves the shard usable: its map holds whole entries only.
        self.shards[shard as usize]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn shard_dir(&self, shard: u64) -> PathBuf {
        self.root.join(format!("shard-{shard:02x}"))
    }

    fn agent_path(&self, agent: AgentId) -> PathBuf {
        self.shard_dir(Self::shard_of(agent))
            .join(format!("{agent}.{TRANSCRIPT_EXTENSION}"))
    }

    fn append(
        &self,
        agent: AgentId,
        run: RunId,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Appended, TranscriptError> {
        let mut shard = self.lock(Self::shard_of(agent));
        if !shard.open.contains_key(&run) {
            let opened = self.open_run(&mut shard, agent, run)?;
            shard.open.insert(run, opened);
        }
        let state = shard.open.get_mut(&run).expect("opened above");
        let admitted = state.budget.admit(entries, self.retention.run_bytes_max)?;
        let text: String = admitted
            .kept
            .iter()
            .map(|(_, line)| line.as_str())
            .collect();
        if !text.is_empty() {
            let path = self.agent_path(agent);
            open_for_append(&path)?
                .write_all(text.as_bytes())
                .map_err(io_error(&path))?;
        }
        Ok(Appended {
            written: admitted.kept.len(),
            dropped: admitted.dropped,
        })
    }

    /// The first append of this process to `run`: opens (or creates) the agent's file, ends a
    /// line a crash tore, and counts what an earlier process appended to the same run.
    fn open_run(
        &self,
        shard: &mut Shard,
        agent: AgentId,
        run: RunId,
    ) -> Result<OpenRun, TranscriptError> {
        if !shard.dir_made {
            make_private_dir(&self.root)?;
            make_private_dir(&self.shard_dir(Self::shard_of(agent)))?;
            shard.dir_made = true;
        }
        let path = self.agent_path(agent);
        let mut file = open_for_append(&path)?;
        let opened = (|| {
            let len = file.metadata()?.len();
            // Runs are numbered in order, so a file whose last line is of an earlier run holds
            // nothing of this one; otherwise (a run an earlier process began) count it.
            let tail = lines::tail(&mut file, len)?;
            let bytes = match tail.last_run {
                _ if len == 0 => 0,
                Some(last) if last < run => 0,
                _ => lines::run_bytes(&file, run)?,
            };
            if tail.torn {
                file.write_all(b"\n")?;
            }
            Ok((len, bytes))
        })();
        let (len, bytes) = opened.map_err(io_error(&path))?;
        Ok(OpenRun {
            agent,
            budget: RunBudget {
                bytes,
                truncated: false,
            },
            created: len == 0,
        })
    }

    fn finish(&self, agent: AgentId, run: RunId) -> Result<(), TranscriptError> {
        let shard = Self::shard_of(agent);
        // Nothing appended by this process: nothing to make durable.
        let Some(state) = self.lock(shard).open.remove(&run) else {
            return Ok(());
        };
        // Outside the lock: other runs of the shard append and sync meanwhile.
        let path = self.agent_path(agent);
        let file = match File::open(&path) {
            Ok(file) => file,
            // A prune removed every line of it meanwhile: nothing to make durable.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(io_error(&path)(error)),
        };
        file.sync_data().map_err(io_error(&path))?;
        if state.created {
            // The file's directory entry, so that the file survives a crash.
            sync_dir(&self.shard_dir(shard))?;
            // And the shard directory's own entry, once: the root's entries change only when a
            // shard directory is made, so syncing it for every new file (every agent's first
            // run) added a sync that made nothing more durable.
            if !self.lock(shard).root_synced {
                sync_dir(&self.root)?;
                self.root_syncs.fetch_add(1, Ordering::Relaxed);
                self.lock(shard).root_synced = true;
            }
        }
        Ok(())
    }

    fn read(
        &self,
        agent: AgentId,
        run: RunId,
        offset: u64,
        limit: usize,
    ) -> Result<TranscriptPage, TranscriptError> {
        // Whether the run may still grow is decided before the read: lines appended meanwhile
        // make the page incomplete, never complete too early.
        let open = self.lock(Self::shard_of(agent)).open.contains_key(&run);
        let path = self.agent_path(agent);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(empty_page(offset));
            }
            Err(error) => return Err(io_error(&path)(error)),
        };
        let (entries, total) =
            lines::read_run(file, run, offset, limit).map_err(io_error(&path))?;
        if total == 0 {
            return Ok(empty_page(offset));
        }
        let next_offset = offset + entries.len() as u64;
        Ok(TranscriptPage {
            complete: !open && next_offset >= total,
            entries,
            next_offset,
            total,
        })
    }

    fn prune(&self, now_ms: u64) -> Result<Pruned, TranscriptError> {
        legacy::migrate(self)?;
        let mut pruned = Pruned::default();
        for shard in 0..TRANSCRIPT_SHARDS {
            for (agent, path) in self.shard_files(shard)? {
                let mut guard = self.lock(shard);
                let step = self.prune_agent(&mut guard, AgentId(agent), &path, now_ms)?;
                pruned.runs += step.runs;
                pruned.bytes += step.bytes;
            }
        }
        Ok(pruned)
    }

    /// The agents' files of `shard`, after removing what a crash during a rewrite left.
    fn shard_files(&self, shard: u64) -> Result<Vec<(u64, PathBuf)>, TranscriptError> {
        let dir = self.shard_dir(shard);
        let _guard = self.lock(shard);
        for (_, staged) in numbered_entries(&dir, Some("ndjson.tmp"))? {
            lines::drop_file(&staged).map_err(io_error(&staged))?;
        }
        numbered_entries(&dir, Some(TRANSCRIPT_EXTENSION))
    }

    /// Applies retention to one agent's file: it is read whole only when its first entry is
    /// past the age limit or the file is past the agent's byte limit.
    fn prune_agent(
        &self,
        shard: &mut Shard,
        agent: AgentId,
        path: &Path,
        now_ms: u64,
    ) -> Result<Pruned, TranscriptError> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Pruned::default())
            }
            Err(error) => return Err(io_error(path)(error)),
        };
        let len = file.metadata().map_err(io_error(path))?.len();
        let oldest = lines::first_at_ms(&file);
        let retention = &self.retention;
        if len <= retention.agent_bytes_max && now_ms.saturating_sub(oldest) <= retention.age_ms {
            return Ok(Pruned::default());
        }
        let is_open = |run: RunId| shard.open.get(&run).is_some_and(|s| s.agent == agent);
        let runs = lines::runs_in(&file, agent, is_open).map_err(io_error(path))?;
        let doomed = plan_prune(&runs, now_ms, retention);
        if doomed.is_empty() {
            return Ok(Pruned::default());
        }
        let drops = |run: RunId| doomed.binary_search(&run).is_ok();
        self.replace_agent_file(shard, agent, |out| {
            lines::copy_lines(File::open(path)?, out, |run| !drops(run))
        })?;
        Ok(Pruned {
            runs: doomed.len(),
            bytes: runs.iter().filter(|m| drops(m.run)).map(|m| m.bytes).sum(),
        })
    }

    /// Replaces `agent`'s file with what `fill` writes (see [`lines::replace_file`]) and makes
    /// the change durable. (Open runs hold no handle: their next append opens the new file.)
    fn replace_agent_file(
        &self,
        shard: &mut Shard,
        agent: AgentId,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<u64>,
    ) -> Result<(), TranscriptError> {
        let path = self.agent_path(agent);
        let kept = lines::replace_file(&path, FILE_MODE, fill).map_err(io_error(&path))?;
        sync_dir(&self.shard_dir(Self::shard_of(agent)))?;
        // A file removed whole is created anew by the next append of a run still open.
        for state in shard.open.values_mut().filter(|s| s.agent == agent) {
            state.created |= kept == 0;
        }
        Ok(())
    }
}

impl TranscriptStore for FileTranscripts {
    fn append<'a>(
        &'a self,
        agent: AgentId,
        run: RunId,
        entries: &'a [TranscriptEntry],
        redactor: &'a Redactor,
    ) -> TranscriptFuture<'a, Appended> {
        // Redacted here, so that nothing secret even crosses to the writer.
        let entries = prepared(entries, redactor);
        self.blocking(move |inner| inner.append(agent, run, entries))
    }

    fn finish(&self, agent: AgentId, run: RunId) -> TranscriptFuture<'_, ()> {
        self.blocking(move |inner| inner.finish(agent, run))
    }

    fn abandon(&self, agent: AgentId, run: RunId) {
        let inner = self.inner.clone();
        let forget = move || {
            inner.lock(Inner::shard_of(agent)).open.remove(&run);
        };
        // On the blocking pool: the shard's lock may be held across a prune's rewrite, and this
        // is called from a dropped run on an async worker.
        #[cfg(not(madsim))]
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn_blocking(forget);
            return;
        }
        forget();
    }

    fn read(
        &self,
        agent: AgentId,
        run: RunId,
        offset: u64,
        limit: usize,
    ) -> TranscriptFuture<'_, TranscriptPage> {
        self.blocking(move |inner| inner.read(agent, run, offset, limit))
    }

    fn prune(&self, now_ms: u64) -> TranscriptFuture<'_, Pruned> {
        self.blocking(move |inner| inner.prune(now_ms))
    }
}

/// The page of a run with no transcript: empty, and not complete (it may still be written).
fn empty_page(offset: u64) -> TranscriptPage {
    TranscriptPage {
        entries: Vec::new(),
        next_offset: offset,
        total: 0,
        complete: false,
    }
}

/// Entries of `dir` named `<number>` (or `<number>.<extension>`), by number; none if `dir`
/// does not exist.
fn numbered_entries(
    dir: &Path,
    extension: Option<&str>,
) -> Result<Vec<(u64, PathBuf)>, TranscriptError> {
    let listing = match std::fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(io_error(dir)(error)),
    };
    let mut found = Vec::new();
    for entry in listing {
        let path = entry.map_err(io_error(dir))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let stem = match extension {
            None => Some(name),
            Some(extension) => name
                .strip_suffix(extension)
                .and_then(|s| s.strip_suffix('.')),
        };
        if let Some(number) = stem.and_then(|s| s.parse::<u64>().ok()) {
            found.push((number, path));
        }
    }
    found.sort();
    Ok(found)
}

fn make_private_dir(dir: &Path) -> Result<(), TranscriptError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(dir).map_err(io_error(dir))
}

fn open_for_append(path: &Path) -> Result<File, TranscriptError> {
    let mut options = OpenOptions::new();
    options.read(true).append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    options.open(path).map_err(io_error(path))
}

/// Makes `dir`'s entries durable.
fn sync_dir(dir: &Path) -> Result<(), TranscriptError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> TranscriptError + '_ {
    move |source| TranscriptError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests;
