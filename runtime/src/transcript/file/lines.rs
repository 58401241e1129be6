//! The lines of one agent's transcript file: which run each belongs to, a run's entries and
//! bytes, the runs retention sees, and the crash-safe replacement of a file.
//!
//! A line is an entry as NDJSON, so it starts with `{"run":<id>,` (the entry's first field): the
//! run of a line is read from that prefix without parsing the rest. A line that does not start
//! so (damaged on disk) belongs to the run of the line before it, for reads and for retention
//! alike, so that it keeps its place in its run. Only lines ending in `\n` count: a line without
//! one is being written, or was torn by a crash.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::super::budget::RunMeta;
use super::super::TranscriptEntry;
use crate::engine::agent::AgentId;
use crate::engine::run::RunId;

/// How much of a file's end is read to find the run of its last line (64 KiB). A longer last
/// line (an entry of several capped fields) makes the caller scan the whole file instead.
pub(super) const TAIL_WINDOW_BYTES: u64 = 64 * 1024;

/// The run `line` belongs to by its own account: read from the `{"run":<id>,` prefix this
/// store writes, or else from the line parsed as JSON (a line written by something else may
/// order its fields differently); `None` for a line that is not an entry.
pub(super) fn line_run(line: &[u8]) -> Option<RunId> {
    prefix_run(line).or_else(|| {
        #[derive(serde::Deserialize)]
        struct RunOnly {
            run: RunId,
        }
        serde_json::from_slice::<RunOnly>(line).ok().map(|l| l.run)
    })
}

fn prefix_run(line: &[u8]) -> Option<RunId> {
    let rest = line.strip_prefix(b"{\"run\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits) != Some(&b',') {
        return None;
    }
    std::str::from_utf8(&rest[..digits])
        .ok()?
        .parse()
        .ok()
        .map(RunId)
}

/// Calls `each(run, line)` for every complete line, in order, with the run it belongs to
/// (`None` only for damaged lines before any readable one).
pub(super) fn for_each_line(
    reader: impl Read,
    mut each: impl FnMut(Option<RunId>, &[u8]),
) -> io::Result<()> {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    let mut current = None;
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line)?;
        if read == 0 || line.last() != Some(&b'\n') {
            return Ok(());
        }
        if let Some(run) = line_run(&line) {
            current = Some(run);
        }
        each(current, &line);
    }
}

/// `run`'s entries from its `offset`-th on, at most `limit`, and how many it has in all. A
/// damaged line reads as a note, so that offsets stay stable.
pub(super) fn read_run(
    file: File,
    run: RunId,
    offset: u64,
    limit: usize,
) -> io::Result<(Vec<TranscriptEntry>, u64)> {
    let (mut total, mut entries) = (0u64, Vec::new());
    for_each_line(file, |of, line| {
        if of != Some(run) {
            return;
        }
        if total >= offset && entries.len() < limit {
            entries.push(parse_line(line, run, total));
        }
        total += 1;
    })?;
    Ok((entries, total))
}

/// Bytes of `run`'s lines in the file.
pub(super) fn run_bytes(file: &File, run: RunId) -> io::Result<u64> {
    let mut bytes = 0;
    for_each_line(from_start(file)?, |of, line| {
        if of == Some(run) {
            bytes += line.len() as u64;
        }
    })?;
    Ok(bytes)
}

/// What the end of a file says, read from its last [`TAIL_WINDOW_BYTES`] in one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tail {
    /// The file ends in the middle of a line (a crash tore its last append).
    pub torn: bool,
    /// The run of the last line, when the window holds the whole of it and it ends the file;
    /// `None` when the caller cannot tell without a scan (torn, too long, or no run named).
    pub last_run: Option<RunId>,
}

pub(super) fn tail(file: &mut File, len: u64) -> io::Result<Tail> {
    let window = len.min(TAIL_WINDOW_BYTES);
    let mut bytes = vec![0; window as usize];
    file.seek(SeekFrom::Start(len - window))?;
    file.read_exact(&mut bytes)?;
    let Some(body) = bytes.strip_suffix(b"\n") else {
        return Ok(Tail {
            torn: len > 0,
            last_run: None,
        });
    };
    let start = match body.iter().rposition(|&b| b == b'\n') {
        Some(newline) => Some(newline + 1),
        None if window == len => Some(0),
        None => None,
    };
    Ok(Tail {
        torn: false,
        last_run: start.and_then(|start| line_run(&body[start..])),
    })
}

/// `at_ms` of the file's first entry; 0 when it is unreadable (retention then takes the file
/// for the oldest).
pub(super) fn first_at_ms(file: &File) -> u64 {
    let mut line = Vec::new();
    let Ok(file) = from_start(file) else {
        return 0;
    };
    if BufReader::new(file).read_until(b'\n', &mut line).is_err() {
        return 0;
    }
    entry_at_ms(&line)
}

/// Each run in the file as retention sees it, in order of first appearance; `open` says which
/// runs a writer may still append to.
pub(super) fn runs_in(
    file: &File,
    agent: AgentId,
    open: impl Fn(RunId) -> bool,
) -> io::Result<Vec<RunMeta>> {
    // Where each run is in `runs`: a file of 64 MiB may hold tens of thousands of runs.
    let mut at: BTreeMap<RunId, usize> = BTreeMap::new();
    let mut runs: Vec<RunMeta> = Vec::new();
    for_each_line(from_start(file)?, |of, line| {
        let run = of.unwrap_or(RunId(0));
        let bytes = line.len() as u64;
        match at.get(&run) {
            Some(&index) => runs[index].bytes += bytes,
            None => {
                at.insert(run, runs.len());
                runs.push(RunMeta {
                    agent,
                    run,
                    started_at_ms: entry_at_ms(line),
                    bytes,
                    open: open(run),
                });
            }
        }
    })?;
    Ok(runs)
}

/// Replaces the file at `path` with what `fill` writes (returning the bytes it wrote): into a
/// temporary file, made durable, then renamed over it, so that a crash leaves the old file or the
/// new one, never a mix. When `fill` writes nothing the file is removed instead. The caller makes
/// the directory durable. Returns the bytes written.
pub(super) fn replace_file(
    path: &Path,
    file_mode: u32,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<u64>,
) -> io::Result<u64> {
    let temporary = temporary_path(path);
    let mut out = io::BufWriter::new(create_private(&temporary, file_mode)?);
    let written = fill(&mut out)?;
    let out = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    if written == 0 {
        drop_file(&temporary)?;
        drop_file(path)?;
        return Ok(0);
    }
    out.sync_all()?;
    std::fs::rename(&temporary, path)?;
    Ok(written)
}

/// Copies the complete lines of `from` whose run `keep` accepts to `out`; returns the bytes
/// copied. A torn last line is not copied.
pub(super) fn copy_lines(
    from: impl Read,
    out: &mut dyn Write,
    keep: impl Fn(RunId) -> bool,
) -> io::Result<u64> {
    let mut copied = 0u64;
    let mut failed = Ok(());
    for_each_line(from, |of, line| {
        if failed.is_ok() && keep(of.unwrap_or(RunId(0))) {
            copied += line.len() as u64;
            failed = out.write_all(line);
        }
    })?;
    failed.map(|()| copied)
}

/// Where [`replace_file`] stages a file: a name no transcript has, which a prune removes
/// when a crash left it behind.
pub(super) fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

fn create_private(path: &Path, file_mode: u32) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, file_mode);
    #[cfg(not(unix))]
    let _ = file_mode;
    options.open(path)
}

/// `file`, positioned at its start (a handle shared with appends may be anywhere).
fn from_start(mut file: &File) -> io::Result<&File> {
    file.seek(SeekFrom::Start(0))?;
    Ok(file)
}

/// Removes a file that may already be gone.
pub(super) fn drop_file(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// One stored line as an entry; a line that is not one reads as a note in its place.
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

/// `at_ms` of the entry on `line`; 0 when unreadable.
fn entry_at_ms(line: &[u8]) -> u64 {
    serde_json::from_slice::<TranscriptEntry>(line).map_or(0, |e| e.at_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_its_run_by_its_prefix_or_its_json() {
        assert_eq!(line_run(b"{\"run\":42,\"seq\":0}\n"), Some(RunId(42)));
        // Another writer's field order.
        assert_eq!(line_run(b"{\"at_ms\":1, \"run\": 42}\n"), Some(RunId(42)));
        for damaged in [
            &b"{\"run\":,"[..],
            b"{\"run\":4x,",
            b"{\"run\":4",
            b"{\"seq\":1,\"run\":4,",
            b"",
        ] {
            assert_eq!(
                line_run(damaged),
                None,
                "{:?}",
                String::from_utf8_lossy(damaged)
            );
        }
    }

    #[test]
    fn the_tail_finds_the_last_line_in_its_window_and_a_torn_end() {
        let path = std::env::temp_dir().join(format!("vigil-lines-tail-{}", std::process::id()));
        let write = |text: &[u8]| {
            std::fs::write(&path, text).unwrap();
            let mut file = File::open(&path).unwrap();
            let found = tail(&mut file, text.len() as u64).unwrap();
            assert_eq!(found.torn, !text.is_empty() && !text.ends_with(b"\n"));
            found.last_run
        };
        assert_eq!(write(b"{\"run\":1,}\n{\"run\":2,}\n"), Some(RunId(2)));
        assert_eq!(
            write(b"{\"run\":7,}\n"),
            Some(RunId(7)),
            "a file of one line"
        );
        assert_eq!(
            write(b"{\"run\":1,}\n{\"run\":2,"),
            None,
            "a torn last line"
        );
        assert_eq!(write(b""), None, "an empty file");
        // A last line that starts before the window: unknown, not the run of a piece of it.
        let mut long = b"{\"run\":1,}\n{\"run\":3,\"x\":\"".to_vec();
        long.extend(std::iter::repeat(b'a').take(TAIL_WINDOW_BYTES as usize));
        long.extend(b"{\"run\":9,\"}\n");
        assert_eq!(write(&long), None);
        let _ = std::fs::remove_file(&path);
    }
}
