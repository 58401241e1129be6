//! The layout before ADR 0020, one file per run in a directory per agent
//! (`<root>/<agent-id>/<run-id>.ndjson`), moved into the agents' files. A prune does it (the
//! node prunes at its start), so transcripts written by an earlier version stay readable and
//! under retention.

use std::fs::File;

use super::{io_error, lines, numbered_entries, Inner, TranscriptError, TRANSCRIPT_EXTENSION};
use crate::engine::agent::AgentId;

/// Moves every agent directory of the old layout into its agent's file: the old runs first (in
/// run order, torn tails dropped), then what the file already held, in one crash-safe
/// replacement; then removes the old files. Returns how many agents it moved.
pub(super) fn migrate(inner: &Inner) -> Result<usize, TranscriptError> {
    let mut moved = 0;
    for (agent, dir) in numbered_entries(&inner.root, None)? {
        if !dir.is_dir() {
            continue;
        }
        let runs = numbered_entries(&dir, Some(TRANSCRIPT_EXTENSION))?;
        if !runs.is_empty() {
            move_agent(inner, AgentId(agent), &runs)?;
            moved += 1;
        }
        for (_, path) in &runs {
            lines::drop_file(path).map_err(io_error(path))?;
        }
        // Only succeeds once nothing else (a name that is not ours) is left in it.
        let _ = std::fs::remove_dir(&dir);
    }
    Ok(moved)
}

fn move_agent(
    inner: &Inner,
    agent: AgentId,
    runs: &[(u64, std::path::PathBuf)],
) -> Result<(), TranscriptError> {
    let shard = Inner::shard_of(agent);
    let mut guard = inner.lock(shard);
    super::make_private_dir(&inner.shard_dir(shard))?;
    guard.dir_made = true;
    let current = inner.agent_path(agent);
    inner.replace_agent_file(&mut guard, agent, |out| {
        let mut written = 0;
        for (_, path) in runs {
            written += lines::copy_lines(File::open(path)?, out, |_| true)?;
        }
        match File::open(&current) {
            Ok(file) => written += lines::copy_lines(file, out, |_| true)?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        Ok(written)
    })
}
