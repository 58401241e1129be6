//! Production's [`Spawner`]: real processes through `tokio::process`, no shell, each the leader
//! of its own process group, with nothing of the node's environment but what the request
//! gives. Signals go to the whole group; recovery finds a previous node's orphaned groups
//! through `/proc` (procfs: kernel memory, no disk I/O behind the reads).

use std::io;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::spawn::{
    Child, ChildEvent, ChildFuture, ExitStatus, GroupSignal, OutputLine, SpawnError, SpawnRequest, Spawner,
    Stream, OUTPUT_LINE_BYTES_MAX, RUN_MARKER_ENV,
};
use crate::engine::run::RunId;

/// While terminating, how often the group is looked for in `/proc` (the kernel tells no one
/// when the last process of a group is gone).
pub const GROUP_POLL_MS: u64 = 50;

/// Lines read ahead of the run (both streams together); past it the readers wait, and so does
/// a child that keeps writing (the pipe fills).
pub const OUTPUT_LINES_QUEUED_MAX: usize = 256;

/// Spawns real processes.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSpawner;

impl Spawner for TokioSpawner {
    fn spawn(&self, request: SpawnRequest) -> ChildFuture<'_, Result<Box<dyn Child>, SpawnError>> {
        Box::pin(async move { start(request).await.map(|child| Box::new(child) as Box<dyn Child>) })
    }

    fn group_alive(&self, pgid: u32) -> bool {
        // kill(…, 0) sends nothing; it only asks whether the group has a process.
        if !signal(pgid, 0) {
            return false;
        }
        // A zombie still counts for kill(2) until its parent reaps it; only live ones count.
        #[cfg(target_os = "linux")]
        return super::proc_scan::group_members(pgid).iter().any(|p| !p.zombie);
        #[cfg(not(target_os = "linux"))]
        return true;
    }

    fn kill_orphan_groups(&self, groups: &[(u32, RunId)]) -> Vec<u32> {
        #[cfg(target_os = "linux")]
        {
            let wanted: std::collections::BTreeMap<u32, String> = groups
                .iter()
                .map(|(pgid, run)| (*pgid, format!("{RUN_MARKER_ENV}={}", run.0)))
                .collect();
            let mut marked = std::collections::BTreeSet::new();
            for process in super::proc_scan::processes() {
                let Some(marker) = wanted.get(&process.pgrp) else {
                    continue;
                };
                if !marked.contains(&process.pgrp)
                    && super::proc_scan::environ_has(process.pid, marker)
                {
                    marked.insert(process.pgrp);
                }
            }
            marked
                .into_iter()
                .filter(|pgid| signal(*pgid, libc::SIGKILL))
                .collect()
        }
        // Without /proc the marker cannot be checked, and an unchecked group may not be ours.
        #[cfg(not(target_os = "linux"))]
        {
            let _ = groups;
            Vec::new()
        }
    }
}

/// `kill(-pgid, sig)`: whether it reached a process.
fn signal(pgid: u32, sig: i32) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    // Why the guard: kill(0, …) and kill(-1, …) would hit our own group or every process.
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

async fn start(request: SpawnRequest) -> Result<TokioChild, SpawnError> {
    let mut command = tokio::process::Command::new(&request.program);
    command
        .args(&request.args)
        .env_clear()
        .envs(&request.env)
        .stdin(match request.stdin {
            Some(_) => Stdio::piped(),
            None => Stdio::null(),
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // Termination is ours (the run's guard, SIGTERM then SIGKILL to the whole group).
        .kill_on_drop(false);
    if let Some(cwd) = &request.cwd {
        command.current_dir(cwd);
    }
    set_up_child(&mut command);
    // Why on this (worker) thread: PR_SET_PDEATHSIG fires when the spawning thread ends, and a
    // blocking-pool thread ends when idle, which would kill the child.
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let cwd_missing = match request.cwd.clone() {
                Some(cwd) => tokio::task::spawn_blocking(move || !cwd.is_dir())
                    .await
                    .unwrap_or(false),
                None => false,
            };
            return Err(spawn_error(&request, error, cwd_missing));
        }
    };
    let pgid = child.id().expect("a child just spawned has its pid");
    if let (Some(bytes), Some(mut stdin)) = (request.stdin, child.stdin.take()) {
        // A child that does not read its stdin is not an error: it just does not get it.
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
        });
    }
    let (lines, queue) = mpsc::channel(OUTPUT_LINES_QUEUED_MAX);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(read_lines(out, Stream::Stdout, lines.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(read_lines(err, Stream::Stderr, lines));
    }
    Ok(TokioChild {
        child,
        pgid,
        queue,
        output_open: true,
        exit_told: false,
    })
}

/// Linux: the child gets SIGKILL if the node dies (a node SIGKILLed never runs its guards;
/// recovery finds what else of the group is left), and the system's transparent huge pages.
fn set_up_child(command: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
        // functions (prctl, getppid, an atomic load), allocating nothing.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The node may have died before the prctl: then nobody would send the signal.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                // The child gets the system's huge pages, not the node's 4 KiB ones (ADR 0031).
                crate::huge_pages::restore_in_child();
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// ENOENT also comes from a missing working directory (`cwd_missing`): not a missing program.
fn spawn_error(request: &SpawnRequest, error: io::Error, cwd_missing: bool) -> SpawnError {
    let detail = error.to_string();
    let program = request.program.clone();
    match error.kind() {
        io::ErrorKind::NotFound if !cwd_missing => SpawnError::NotFound { program, detail },
        _ if cwd_missing => SpawnError::Failed {
            program,
            detail: format!("working directory {} does not exist", cwd_display(request)),
        },
        _ => SpawnError::Failed { program, detail },
    }
}

fn cwd_display(request: &SpawnRequest) -> String {
    request
        .cwd
        .as_ref()
        .map_or_else(String::new, |cwd| cwd.display().to_string())
}

/// Reads `stream` line by line into `lines`, each cut at [`OUTPUT_LINE_BYTES_MAX`] (the rest of
/// a longer line is read and dropped); invalid UTF-8 becomes U+FFFD.
async fn read_lines(
    stream: impl AsyncRead + Unpin,
    which: Stream,
    lines: mpsc::Sender<OutputLine>,
) {
    let mut reader = BufReader::new(stream);
    loop {
        match read_capped_line(&mut reader).await {
            Ok(Some(bytes)) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                if lines.send(OutputLine { stream: which, text }).await.is_err() {
                    return;
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// One line without its newline, at most [`OUTPUT_LINE_BYTES_MAX`] bytes kept; `None` at the
/// end of the stream.
async fn read_capped_line(
    reader: &mut BufReader<impl AsyncRead + Unpin>,
) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut seen_any = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(seen_any.then_some(line));
        }
        seen_any = true;
        let (chunk, newline) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (&buffer[..at], true),
            None => (buffer, false),
        };
        let room = OUTPUT_LINE_BYTES_MAX.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len() + usize::from(newline);
        reader.consume(used);
        if newline {
            return Ok(Some(line));
        }
    }
}

/// A running child of [`TokioSpawner`].
struct TokioChild {
    child: tokio::process::Child,
    pgid: u32,
    queue: mpsc::Receiver<OutputLine>,
    /// Whether a reader may still send lines.
    output_open: bool,
    /// Whether `next_event` told the leader's exit.
    exit_told: bool,
}

impl Child for TokioChild {
    fn pgid(&self) -> u32 {
        self.pgid
    }

    fn next_line(&mut self) -> ChildFuture<'_, Option<OutputLine>> {
        Box::pin(self.queue.recv())
    }

    fn next_event(&mut self) -> ChildFuture<'_, Option<ChildEvent>> {
        Box::pin(async move {
            loop {
                if !self.output_open && self.exit_told {
                    return None;
                }
                // Both branches are cancel-safe: a line or an exit not returned is not lost.
                tokio::select! {
                    line = self.queue.recv(), if self.output_open => match line {
                        Some(line) => return Some(ChildEvent::Line(line)),
                        None => self.output_open = false,
                    },
                    status = self.child.wait(), if !self.exit_told => {
                        self.exit_told = true;
                        return Some(ChildEvent::Exited(status.map_or(UNKNOWN_EXIT, exit_status)));
                    }
                }
            }
        })
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        match self.child.try_wait() {
            Ok(status) => status.map(exit_status),
            Err(_) => Some(UNKNOWN_EXIT),
        }
    }

    fn group_gone(&mut self) -> ChildFuture<'_, ()> {
        Box::pin(async move {
            while TokioSpawner.group_alive(self.pgid) {
                tokio::time::sleep(std::time::Duration::from_millis(GROUP_POLL_MS)).await;
            }
        })
    }

    fn wait(&mut self) -> ChildFuture<'_, ExitStatus> {
        Box::pin(async move {
            match self.child.wait().await {
                Ok(status) => exit_status(status),
                // Only if the child was already reaped elsewhere: no status to give.
                Err(_) => ExitStatus {
                    code: None,
                    signal: None,
                },
            }
        })
    }

    fn signal_group(&self, signal_kind: GroupSignal) {
        let sig = match signal_kind {
            GroupSignal::Term => libc::SIGTERM,
            GroupSignal::Kill => libc::SIGKILL,
        };
        signal(self.pgid, sig);
    }
}

/// The status of a child reaped elsewhere: none to give.
const UNKNOWN_EXIT: ExitStatus = ExitStatus {
    code: None,
    signal: None,
};

fn exit_status(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    ExitStatus {
        code: status.code(),
        signal: status.signal(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of(bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut reader = BufReader::new(bytes);
        let mut lines = Vec::new();
        while let Some(line) = read_capped_line(&mut reader).await.unwrap() {
            lines.push(line);
        }
        lines
    }

    #[tokio::test]
    async fn lines_are_cut_at_the_cap_and_the_rest_of_a_long_line_is_dropped() {
        let exact = vec![b'a'; OUTPUT_LINE_BYTES_MAX];
        let over = vec![b'b'; OUTPUT_LINE_BYTES_MAX + 1];
        let input = [&exact[..], b"\n", &over[..], b"\n", b"\n", b"tail"].concat();
        let lines = lines_of(&input).await;
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0], exact, "a line exactly at the cap is kept whole");
        assert_eq!(lines[1], vec![b'b'; OUTPUT_LINE_BYTES_MAX], "one byte more is cut");
        assert!(lines[2].is_empty(), "an empty line is a line");
        assert_eq!(lines[3], b"tail", "a last line without its newline is a line");
        assert!(lines_of(b"").await.is_empty());
    }

    #[tokio::test]
    async fn a_missing_program_is_not_found_and_a_missing_directory_is_not() {
        let request = |program: &str, cwd: Option<&str>| SpawnRequest {
            run: RunId(1),
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.map(Into::into),
            env: Default::default(),
            stdin: None,
        };
        let missing = TokioSpawner.spawn(request("/nonexistent/vigil-program", None)).await;
        assert!(matches!(missing, Err(SpawnError::NotFound { .. })));
        let no_dir = TokioSpawner
            .spawn(request("/bin/sh", Some("/nonexistent/vigil-dir")))
            .await;
        assert!(
            matches!(&no_dir, Err(SpawnError::Failed { detail, .. }) if detail.contains("/nonexistent/vigil-dir"))
        );
    }

    #[test]
    fn signals_never_reach_the_whole_system_or_our_own_group() {
        assert!(!signal(0, 0));
        assert!(!signal(1, 0));
        assert!(!signal(u32::MAX, 0));
    }
}
