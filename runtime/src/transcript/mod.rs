//! Run transcripts: what a run said and did (its wakeup, model requests and answers, tool calls
//! and results, timings, why it stopped), one [`TranscriptEntry`] per NDJSON line.
//!
//! Where they go is a seam, [`TranscriptStore`]: [`FileTranscripts`] in production
//! (`<data-dir>/transcripts/shard-XX/<agent>.ndjson`, a file per agent), [`MemoryTranscripts`] in the simulator and
//! tests. Both redact every entry with the caller's [`Redactor`] and cap its bulky fields before
//! anything is kept, bound each run's transcript ([`TRANSCRIPT_RUN_BYTES_MAX`]) and apply the
//! same retention ([`Retention`]). Neither reads a clock: entries carry the node's wall time as
//! the caller gives it, and `prune` takes "now".
//!
//! Transcripts are not the event log: they are best-effort diagnostics, durable from
//! [`TranscriptStore::finish`] on, and never read back by recovery.

mod budget;
mod entry;
pub(crate) mod excerpt;
mod file;
pub mod memory;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;

use crate::engine::agent::AgentId;
use crate::engine::run::RunId;
use crate::redact::Redactor;

pub use budget::{plan_prune, RunMeta, TRUNCATION_NOTE_RESERVE_BYTES};
pub use entry::{EntryBody, ToolCallSummary, TranscriptEntry, Usage};
pub use excerpt::{excerpt, Excerpt, FINAL_ANSWER_EXCERPT_BYTES_MAX, TRUNCATION_MARK};
pub use file::{
    FileTranscripts, TRANSCRIPT_IO_THREADS_MAX, TRANSCRIPT_IO_THREADS_MIN,
    TRANSCRIPT_IO_THREADS_PER_CORE,
};
pub use memory::{CrashReport, MemoryTranscripts};

/// One day, in milliseconds.
const DAY_MS: u64 = 24 * 60 * 60 * 1_000;
/// How long a run's transcript is kept, in days, counted from its first entry.
pub const TRANSCRIPT_RETENTION_DAYS_DEFAULT: u64 = 7;
/// Most bytes of transcripts kept per agent (64 MiB); past it, its oldest finished runs go.
pub const TRANSCRIPT_AGENT_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Most bytes one run's transcript takes (4 MiB): a looping run cannot fill the disk. Past it,
/// the run's further entries are replaced by one `note` saying the transcript was truncated.
pub const TRANSCRIPT_RUN_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// Largest tool output, tool-call arguments, wakeup payload, note or stop detail kept in an
/// entry, in bytes (16 KiB); longer ones are cut with [`TRUNCATION_MARK`].
pub const TRANSCRIPT_FIELD_BYTES_MAX: usize = 16 * 1024;
/// How often the node prunes a store that asks for it (5 minutes): retention is coarse, and a
/// prune walks every transcript directory.
pub const TRANSCRIPT_PRUNE_INTERVAL_MS: u64 = 5 * 60 * 1_000;
/// File extension of a transcript.
pub const TRANSCRIPT_EXTENSION: &str = "ndjson";
/// Directory under the data directory that holds transcripts.
pub const TRANSCRIPTS_DIR: &str = "transcripts";

/// Retention limits of a store. [`Retention::default`] is the named constants; tests of the
/// file store's deletions use smaller ones (the planner is tested at the constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// A transcript whose first entry is more than this old (ms) is removed.
    pub age_ms: u64,
    /// Most bytes kept per agent.
    pub agent_bytes_max: u64,
    /// Most bytes one run's transcript takes.
    pub run_bytes_max: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            age_ms: TRANSCRIPT_RETENTION_DAYS_DEFAULT * DAY_MS,
            agent_bytes_max: TRANSCRIPT_AGENT_BYTES_MAX,
            run_bytes_max: TRANSCRIPT_RUN_BYTES_MAX,
        }
    }
}

/// A page of one run's transcript.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TranscriptPage {
    /// Entries from `offset` on, at most `limit` of them.
    pub entries: Vec<TranscriptEntry>,
    /// Where the next page starts (an entry index): pass it back as `offset`.
    pub next_offset: u64,
    /// Entries stored so far.
    pub total: u64,
    /// No entry will ever follow `next_offset`: the transcript was finished (or written by an
    /// earlier process, whose runs are over) and this page reaches its end.
    pub complete: bool,
}

/// What an `append` kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Appended {
    /// Entries kept (a truncation note counts as one).
    pub written: usize,
    /// Entries dropped because the run reached its byte cap.
    pub dropped: usize,
}

/// What a `prune` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub runs: usize,
    pub bytes: u64,
}

/// Why a transcript operation failed. Transcripts are diagnostics: callers log these and go
/// on; a run never fails because its transcript could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    #[error("transcript I/O on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not encode a transcript entry of run {run}: {source}")]
    Encode {
        run: RunId,
        #[source]
        source: serde_json::Error,
    },
    #[error("the transcript writer task ended abnormally: {0}")]
    Writer(String),
}

/// What a store's methods return: boxed, so the trait is object-safe and the production store
/// does its file I/O on the blocking pool while the caller awaits.
pub type TranscriptFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, TranscriptError>> + Send + 'a>>;

/// Where transcripts go (the seam). One writer per run: the caller awaits each `append` before
/// the next and calls `finish` once, before it reports the run finished (so a reader that sees
/// the run terminal has seen its transcript complete).
pub trait TranscriptStore: Send + Sync {
    /// Adds `entries` to `run`'s transcript, redacted by `redactor` and with bulky fields cut to
    /// [`TRANSCRIPT_FIELD_BYTES_MAX`]. Not durable until [`TranscriptStore::finish`].
    fn append<'a>(
        &'a self,
        agent: AgentId,
        run: RunId,
        entries: &'a [TranscriptEntry],
        redactor: &'a Redactor,
    ) -> TranscriptFuture<'a, Appended>;

    /// Ends `run`'s transcript: flushed and made durable (fsync) before this resolves.
    fn finish(&self, agent: AgentId, run: RunId) -> TranscriptFuture<'_, ()>;

    /// `run` will append no more and will not be finished: its task was aborted (the run was
    /// cancelled, or the node is stopping). The store forgets what it keeps for an open run, so
    /// that aborted runs do not pile up, and reads the run as complete. Never blocks; what the
    /// run wrote stays readable.
    fn abandon(&self, _agent: AgentId, _run: RunId) {}

    /// Up to `limit` entries of `run` (an agent's) from entry `offset` on. A run without a
    /// transcript reads as an empty, incomplete page. `agent` is the run's (the caller knows it
    /// from the engine), so the store never searches for the file.
    fn read(
        &self,
        agent: AgentId,
        run: RunId,
        offset: u64,
        limit: usize,
    ) -> TranscriptFuture<'_, TranscriptPage>;

    /// Applies [`Retention`] as of `now_ms` (the node's wall clock): transcripts older than the
    /// age limit go, then each agent's oldest finished runs until it is within its byte limit.
    fn prune(&self, now_ms: u64) -> TranscriptFuture<'_, Pruned>;

    /// How often the node should call `prune`, if it should. The simulator's store answers
    /// `None`: whoever drives it prunes it, and no extra task changes a seed's schedule.
    fn prune_every_ms(&self) -> Option<u64> {
        Some(TRANSCRIPT_PRUNE_INTERVAL_MS)
    }
}

/// The handle that is passed around.
pub type SharedTranscriptStore = Arc<dyn TranscriptStore>;

/// `entries` redacted and capped, ready to keep.
fn prepared(entries: &[TranscriptEntry], redactor: &Redactor) -> Vec<TranscriptEntry> {
    entries
        .iter()
        .map(|entry| entry.redacted(redactor).capped())
        .collect()
}

/// One entry as its NDJSON line, newline included.
fn encode(entry: &TranscriptEntry) -> Result<String, TranscriptError> {
    let mut line = serde_json::to_string(entry).map_err(|source| TranscriptError::Encode {
        run: entry.run,
        source,
    })?;
    line.push('\n');
    Ok(line)
}
