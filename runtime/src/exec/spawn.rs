//! The spawner seam: how a run's child process is started, read, signalled and reaped.
//! Production spawns real processes with `tokio::process` (no shell, each in its own process
//! group); the simulator gives simulated processes driven by the seed. Everything above this
//! seam (the adapters, their time limits, SIGTERM-then-SIGKILL, transcripts, recovery's kill of
//! orphaned groups) is the same code in both.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::engine::run::RunId;

/// The environment variable every child gets with its run's id: recovery checks it before it
/// kills a recorded process group, so that a group id reused by an unrelated process after a
/// reboot is never signalled.
pub const RUN_MARKER_ENV: &str = "VIGIL_RUN_ID";

/// What to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    /// The run the child belongs to (its marker).
    pub run: RunId,
    /// A path, or a name looked up in `PATH` (of `env`, else the node's).
    pub program: String,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// The child's whole environment (nothing else is inherited).
    pub env: BTreeMap<String, String>,
    /// Written to stdin, which is then closed (`None`: stdin is empty).
    pub stdin: Option<Vec<u8>>,
}

/// Why a child could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The program does not exist (error class `adapter_not_installed`).
    #[error("{program} is not installed (not found: {detail})")]
    NotFound { program: String, detail: String },
    /// Anything else (error class `spawn_failed`).
    #[error("could not start {program}: {detail}")]
    Failed { program: String, detail: String },
}

/// Which stream a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One line of a child's output (without its newline; a last line without one is a line too),
/// cut at [`OUTPUT_LINE_BYTES_MAX`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    pub stream: Stream,
    pub text: String,
}

/// Longest line kept from a child's output; the rest of the line is dropped.
pub const OUTPUT_LINE_BYTES_MAX: usize = 64 * 1024;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    pub code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn success(self) -> bool {
        self.code == Some(0)
    }
}

/// A signal for a whole process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSignal {
    Term,
    Kill,
}

/// What a child does next, as its runner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildEvent {
    /// A line of output.
    Line(OutputLine),
    /// The leader exited (told once). Lines may still follow while another process of the
    /// group holds the pipes open.
    Exited(ExitStatus),
}

/// A boxed future of a child's.
pub type ChildFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A started child, leader of its own process group.
pub trait Child: Send {
    /// Its process group id (its own pid).
    fn pgid(&self) -> u32;
    /// The next line of output, in the order the child wrote them per stream; `None` once both
    /// streams are closed.
    fn next_line(&mut self) -> ChildFuture<'_, Option<OutputLine>>;
    /// The next line or the leader's exit, whichever comes first; `None` once the output is
    /// closed and the exit was told. Cancel-safe. Why one method: a runner that waited on
    /// lines and on the exit separately would have to poll one of them.
    fn next_event(&mut self) -> ChildFuture<'_, Option<ChildEvent>>;
    /// Waits for the child (the group leader) to exit.
    fn wait(&mut self) -> ChildFuture<'_, ExitStatus>;
    /// The leader's status if it has exited, without waiting.
    fn try_exit(&mut self) -> Option<ExitStatus>;
    /// Resolves once no process of the group is left.
    fn group_gone(&mut self) -> ChildFuture<'_, ()>;
    /// Sends `signal` to every process of the group. Never blocks.
    fn signal_group(&self, signal: GroupSignal);
}

/// Starts children, and deals with groups a previous run of the node left behind.
pub trait Spawner: Send + Sync {
    fn spawn(&self, request: SpawnRequest) -> ChildFuture<'_, Result<Box<dyn Child>, SpawnError>>;
    /// Whether any process of group `pgid` is alive.
    fn group_alive(&self, pgid: u32) -> bool;
    /// Recovery: SIGKILLs each group `(pgid, run)` one of whose processes carries `run`'s
    /// marker (nothing the new node started can be among them: it has started nothing yet).
    /// Answers the groups it signalled. One call for all, so production reads `/proc` once.
    fn kill_orphan_groups(&self, groups: &[(u32, RunId)]) -> Vec<u32>;
}

/// A spawner shared by a node's runs.
pub type SharedSpawner = Arc<dyn Spawner>;

/// A spawner that starts nothing: every spawn fails with `spawn_failed`. For hosts that run
/// only network adapters.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSpawner;

impl Spawner for NoSpawner {
    fn spawn(&self, request: SpawnRequest) -> ChildFuture<'_, Result<Box<dyn Child>, SpawnError>> {
        Box::pin(async move {
            Err(SpawnError::Failed {
                program: request.program,
                detail: "this node starts no processes".into(),
            })
        })
    }

    fn group_alive(&self, _pgid: u32) -> bool {
        false
    }

    fn kill_orphan_groups(&self, _groups: &[(u32, RunId)]) -> Vec<u32> {
        Vec::new()
    }
}
