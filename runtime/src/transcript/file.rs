//! [`FileTranscripts`]: the production store, one NDJSON file per run at
//! `<data-dir>/transcripts/<agent-id>/<run-id>.ndjson`, directories 0700 and files 0600 (they
//! hold what models and tools said, redacted but private).
//!
//! No file I/O on an async worker: every operation runs on tokio's blocking pool
//! (`spawn_blocking`) while its caller awaits it. We chose that over a writer thread fed by a
//! bounded channel because the caller (one task per run) awaits each append anyway: at most one
//! operation per running run is in flight, so the backpressure is natural and nothing has to be
//! dropped or queued without bound. Operations take one lock for their whole duration, so
//! appends, the fsync of `finish` and a prune never interleave within the store; a slow disk
//! slows transcript writers, never the engine or the API's other routes.
//!
//! Durability: appends go to the page cache; `finish` fsyncs the run's file and its directory.
//! A crash may cut a transcript's tail (a partial last line is never read back: only lines
//! ending in `\n` count). Runs found on disk that this process did not open are over (their
//! writer was an earlier process), so they read as complete.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::budget::{plan_prune, RunBudget, RunMeta};
use super::{
    prepared, Appended, Pruned, Retention, SharedTranscriptStore, TranscriptEntry, TranscriptError,
    TranscriptFuture, TranscriptPage, TranscriptStore, TRANSCRIPTS_DIR, TRANSCRIPT_EXTENSION,
};
use crate::engine::agent::AgentId;
use crate::engine::run::RunId;
use crate::redact::Redactor;

/// Mode of transcript directories: the owner only.
#[cfg(unix)]
const DIR_MODE: u32 = 0o700;
/// Mode of transcript files: the owner only.
#[cfg(unix)]
const FILE_MODE: u32 = 0o600;

/// A run this process appends to and has not finished.
#[derive(Debug, Clone, Copy)]
struct OpenRun {
    budget: RunBudget,
    started_at_ms: u64,
}

struct Inner {
    root: PathBuf,
    retention: Retention,
    open: Mutex<BTreeMap<RunId, OpenRun>>,
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
                open: Mutex::default(),
            }),
        }
    }

    /// The store as the node takes it.
    pub fn shared(data_dir: &Path) -> SharedTranscriptStore {
        Arc::new(Self::new(data_dir))
    }

    /// The directory that holds the agents' directories.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Where `run`'s transcript lives.
    pub fn path(&self, agent: AgentId, run: RunId) -> PathBuf {
        self.inner.path(agent, run)
    }

    /// Runs `op` on the blocking pool, under the store's lock.
    fn blocking<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Inner, &mut BTreeMap<RunId, OpenRun>) -> Result<T, TranscriptError>
            + Send
            + 'static,
    ) -> TranscriptFuture<'static, T> {
        let inner = self.inner.clone();
        let job = move || {
            let mut open = inner.lock();
            op(&inner, &mut open)
        };
        Box::pin(async move {
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
    fn lock(&self) -> MutexGuard<'_, BTreeMap<RunId, OpenRun>> {
        // A panic under the lock leaves the map consistent (it is only ever replaced whole).
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn agent_dir(&self, agent: AgentId) -> PathBuf {
        self.root.join(agent.to_string())
    }

    fn path(&self, agent: AgentId, run: RunId) -> PathBuf {
        self.agent_dir(agent)
            .join(format!("{run}.{TRANSCRIPT_EXTENSION}"))
    }

    fn append(
        &self,
        open: &mut BTreeMap<RunId, OpenRun>,
        agent: AgentId,
        run: RunId,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Appended, TranscriptError> {
        let path = self.path(agent, run);
        let state = match open.get(&run) {
            Some(state) => *state,
            None => self.open_run(agent, &path, &entries)?,
        };
        let mut budget = state.budget;
        let admitted = budget.admit(entries, self.retention.run_bytes_max)?;
        let text: String = admitted
            .kept
            .iter()
            .map(|(_, line)| line.as_str())
            .collect();
        let written = admitted.kept.len();
        open.insert(run, OpenRun { budget, ..state });
        if !text.is_empty() {
            let mut file = open_for_append(&path)?;
            file.write_all(text.as_bytes()).map_err(io_error(&path))?;
        }
        Ok(Appended {
            written,
            dropped: admitted.dropped,
        })
    }

    /// The first append of this process to `run`: makes its directories, and counts what an
    /// earlier append to the same file left there.
    fn open_run(
        &self,
        agent: AgentId,
        path: &Path,
        entries: &[TranscriptEntry],
    ) -> Result<OpenRun, TranscriptError> {
        make_private_dir(&self.root)?;
        make_private_dir(&self.agent_dir(agent))?;
        let existing = match std::fs::metadata(path) {
            Ok(meta) => meta.len(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
            Err(error) => return Err(io_error(path)(error)),
        };
        let started_at_ms = match existing {
            0 => entries.first().map_or(0, |e| e.at_ms),
            _ => first_at_ms(path),
        };
        Ok(OpenRun {
            budget: RunBudget {
                bytes: existing,
                truncated: false,
            },
            started_at_ms,
        })
    }

    fn finish(
        &self,
        open: &mut BTreeMap<RunId, OpenRun>,
        agent: AgentId,
        run: RunId,
    ) -> Result<(), TranscriptError> {
        open.remove(&run);
        let path = self.path(agent, run);
        let file = match File::open(&path) {
            Ok(file) => file,
            // Nothing was ever appended: nothing to make durable.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(io_error(&path)(error)),
        };
        file.sync_all().map_err(io_error(&path))?;
        // The file's directory entry, so that the file itself survives a crash.
        let dir = self.agent_dir(agent);
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error(&dir))
    }

    fn read(
        &self,
        open: &BTreeMap<RunId, OpenRun>,
        agent: AgentId,
        run: RunId,
        offset: u64,
        limit: usize,
    ) -> Result<TranscriptPage, TranscriptError> {
        let path = self.path(agent, run);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TranscriptPage {
                    entries: Vec::new(),
                    next_offset: offset,
                    total: 0,
                    complete: false,
                })
            }
            Err(error) => return Err(io_error(&path)(error)),
        };
        let mut reader = BufReader::new(file);
        let mut line = Vec::new();
        let (mut total, mut entries) = (0u64, Vec::new());
        loop {
            line.clear();
            let read = reader
                .read_until(b'\n', &mut line)
                .map_err(io_error(&path))?;
            // A line without its newline is being written, or was torn by a crash.
            if read == 0 || line.last() != Some(&b'\n') {
                break;
            }
            if total >= offset && entries.len() < limit {
                entries.push(parse_line(&line, run, total));
            }
            total += 1;
        }
        let next_offset = offset + entries.len() as u64;
        Ok(TranscriptPage {
            complete: !open.contains_key(&run) && next_offset >= total,
            entries,
            next_offset,
            total,
        })
    }

    fn prune(
        &self,
        open: &mut BTreeMap<RunId, OpenRun>,
        now_ms: u64,
    ) -> Result<Pruned, TranscriptError> {
        let stored = self.stored_runs(open)?;
        let mut pruned = Pruned::default();
        for run in plan_prune(&stored, now_ms, &self.retention) {
            let Some(meta) = stored.iter().find(|m| m.run == run) else {
                continue;
            };
            let path = self.path(meta.agent, run);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(io_error(&path)(error)),
            }
            open.remove(&run);
            pruned.runs += 1;
            pruned.bytes += meta.bytes;
            // Only succeeds once the agent has no transcript left.
            let _ = std::fs::remove_dir(self.agent_dir(meta.agent));
        }
        Ok(pruned)
    }

    /// Every transcript on disk, as retention sees it. Names that are not ours are ignored.
    fn stored_runs(
        &self,
        open: &BTreeMap<RunId, OpenRun>,
    ) -> Result<Vec<RunMeta>, TranscriptError> {
        let mut runs = Vec::new();
        for (agent, dir) in numbered_entries(&self.root, None)? {
            for (run, path) in numbered_entries(&dir, Some(TRANSCRIPT_EXTENSION))? {
                let run = RunId(run);
                let bytes = std::fs::metadata(&path).map_err(io_error(&path))?.len();
                let state = open.get(&run);
                runs.push(RunMeta {
                    agent: AgentId(agent),
                    run,
                    started_at_ms: state.map_or_else(|| first_at_ms(&path), |s| s.started_at_ms),
                    bytes,
                    open: state.is_some(),
                });
            }
        }
        Ok(runs)
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
        self.blocking(move |inner, open| inner.append(open, agent, run, entries))
    }

    fn finish(&self, agent: AgentId, run: RunId) -> TranscriptFuture<'_, ()> {
        self.blocking(move |inner, open| inner.finish(open, agent, run))
    }

    fn read(
        &self,
        agent: AgentId,
        run: RunId,
        offset: u64,
        limit: usize,
    ) -> TranscriptFuture<'_, TranscriptPage> {
        self.blocking(move |inner, open| inner.read(open, agent, run, offset, limit))
    }

    fn prune(&self, now_ms: u64) -> TranscriptFuture<'_, Pruned> {
        self.blocking(move |inner, open| inner.prune(open, now_ms))
    }
}

/// One stored line as an entry; a line that is not one (a damaged file) reads as a note, so
/// that offsets stay stable.
fn parse_line(line: &[u8], run: RunId, index: u64) -> TranscriptEntry {
    serde_json::from_slice(line).unwrap_or_else(|error| {
        TranscriptEntry::note(
            run,
            index,
            0,
            format!("unreadable transcript line: {error}"),
        )
    })
}

/// `at_ms` of a transcript's first entry; 0 when it has none readable (retention then takes
/// it for the oldest).
fn first_at_ms(path: &Path) -> u64 {
    let Ok(file) = File::open(path) else {
        return 0;
    };
    let mut line = Vec::new();
    if BufReader::new(file).read_until(b'\n', &mut line).is_err() {
        return 0;
    }
    serde_json::from_slice::<TranscriptEntry>(&line).map_or(0, |e| e.at_ms)
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
    options.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    options.open(path).map_err(io_error(path))
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> TranscriptError + '_ {
    move |source| TranscriptError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests;
