//! Running one child process for a run, the same way for every adapter that spawns one
//! (`process`, the coding CLIs): spawn it, record its process group durably before reading a
//! byte of output, stream each output line into the run's transcript, enforce the child's own
//! time limit with SIGTERM then SIGKILL after the grace, and make sure nothing of the group
//! outlives the run, even when the run's future is dropped (cancel, pause, terminate, node
//! stop): a guard then terminates the group from a task of its own.
//!
//! The termination sequence (docs/adapters/process.md): SIGTERM to the whole group; wait until
//! the group is gone or `grace` has passed; then SIGKILL to the group. A group is gone only when
//! no process of it is left (a grandchild can outlive the leader), so a leader that exits while
//! its group is alive gets its group terminated the same way.

use std::time::Duration;

use super::adapter::RunContext;
use super::live_groups::LiveGroup;
use super::spawn::{
    Child, ChildEvent, ExitStatus, GroupSignal, OutputLine, SpawnError, SpawnRequest, Stream,
};
use crate::engine::cli_spec::ChildSpec;
use crate::transcript::EntryBody;

pub use super::child_env::{child_request, NODE_ENV_ALLOWED};

/// After a SIGKILL, how long the runner waits for the group to be torn down before it stops
/// waiting (SIGKILL cannot be ignored; this bounds only the kernel's work).
pub const KILL_WAIT_MS: u64 = 5_000;
/// After the group is gone, the output still buffered is read until the pipes close, unless no
/// line comes for this long, or this much time has passed in all (a process that left the group
/// but kept the pipes open would otherwise hold the run forever).
pub const DRAIN_IDLE_MS: u64 = 1_000;
pub const DRAIN_AFTER_EXIT_MS: u64 = 10_000;

/// A child's time limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildLimits {
    /// From the spawn to SIGTERM.
    pub timeout_ms: u64,
    /// From SIGTERM to SIGKILL.
    pub grace_ms: u64,
}

impl ChildLimits {
    /// A spec's `timeout_sec` and `grace_sec`.
    pub fn of(spec: &ChildSpec) -> Self {
        ChildLimits {
            timeout_ms: spec.timeout_sec.saturating_mul(1_000),
            grace_ms: spec.grace_sec.saturating_mul(1_000),
        }
    }
}

/// How a child's run went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildRun {
    /// The child could not be started.
    NotStarted(SpawnError),
    /// It started, but its group could not be recorded (the run was ended meanwhile, or the
    /// node stopped); the group was terminated.
    NotRecorded(String),
    /// It ran and its whole group is gone.
    Ended(ChildEnd),
}

/// How a started child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildEnd {
    /// The leader's exit.
    pub status: ExitStatus,
    /// It passed its time limit and was terminated.
    pub timed_out: bool,
    /// Its group had to be SIGKILLed (it outlived the grace after SIGTERM).
    pub killed: bool,
}

/// Runs `request` for `context`'s run under `limits`; every output line goes to the run's
/// transcript (redacted there) and to `on_line`, in the order read.
pub async fn run_child(
    context: &RunContext,
    request: SpawnRequest,
    limits: ChildLimits,
    on_line: &mut (dyn FnMut(&OutputLine) + Send),
) -> ChildRun {
    let spawner = context.host.spawner();
    if let Some(groups) = context.host.live_groups() {
        // An earlier run of this agent may still be ending its children (its grace).
        groups.agent_clear(context.agent).await;
    }
    let child = match spawner.spawn(request).await {
        Ok(child) => child,
        Err(error) => return ChildRun::NotStarted(error),
    };
    let pgid = child.pgid();
    let grace = Duration::from_millis(limits.grace_ms);
    let registration = context
        .host
        .live_groups()
        .map(|g| g.enter(context.agent, pgid, limits.grace_ms));
    let mut guard = GroupGuard::new(child, grace, registration);
    if let Err(error) = context.host.record_process_group(context.run, pgid).await {
        terminate(guard.child(), grace).await;
        guard.disarm();
        return ChildRun::NotRecorded(error);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(limits.timeout_ms);
    let exited = read_until_exit(context, guard.child(), deadline, on_line).await;
    let end = match exited {
        Some(status) => {
            // The leader is done; anything it left in its group goes the same way.
            let killed = match spawner.group_alive(pgid) {
                true => terminate(guard.child(), grace).await,
                false => false,
            };
            ChildEnd {
                status,
                timed_out: false,
                killed,
            }
        }
        None => {
            let killed = terminate(guard.child(), grace).await;
            // A leader that even SIGKILL did not end (stuck in the kernel) has no status yet.
            let unknown = ExitStatus {
                code: None,
                signal: None,
            };
            ChildEnd {
                status: guard.child().try_exit().unwrap_or(unknown),
                timed_out: true,
                killed,
            }
        }
    };
    drain(context, guard.child(), on_line).await;
    guard.disarm();
    ChildRun::Ended(end)
}

/// Reads output until the leader exits (its status) or the deadline passes (`None`).
async fn read_until_exit(
    context: &RunContext,
    child: &mut dyn Child,
    deadline: tokio::time::Instant,
    on_line: &mut (dyn FnMut(&OutputLine) + Send),
) -> Option<ExitStatus> {
    // One timer for the whole wait, not one per line.
    let limit = tokio::time::sleep_until(deadline);
    tokio::pin!(limit);
    loop {
        tokio::select! {
            event = child.next_event() => match event {
                Some(ChildEvent::Line(line)) => record(context, &line, on_line).await,
                Some(ChildEvent::Exited(status)) => return Some(status),
                // Output closed with the exit already told: cannot happen before the exit.
                None => return Some(child.wait().await),
            },
            () = &mut limit => return None,
        }
    }
}

/// Reads what is left of the output once the group is gone, within [`DRAIN_IDLE_MS`] of the
/// last line and [`DRAIN_AFTER_EXIT_MS`] in all.
async fn drain(
    context: &RunContext,
    child: &mut dyn Child,
    on_line: &mut (dyn FnMut(&OutputLine) + Send),
) {
    let idle = Duration::from_millis(DRAIN_IDLE_MS);
    let _ = tokio::time::timeout(Duration::from_millis(DRAIN_AFTER_EXIT_MS), async {
        while let Ok(Some(line)) = tokio::time::timeout(idle, child.next_line()).await {
            record(context, &line, on_line).await;
        }
    })
    .await;
}

async fn record(
    context: &RunContext,
    line: &OutputLine,
    on_line: &mut (dyn FnMut(&OutputLine) + Send),
) {
    let stream = match line.stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    };
    context
        .transcript
        .write(EntryBody::ChildOutput {
            stream: stream.to_string(),
            text: line.text.clone(),
        })
        .await;
    on_line(line);
}

/// SIGTERM to the group, SIGKILL after `grace` if any of it is left; returns once the leader is
/// reaped and the group is gone (or [`KILL_WAIT_MS`] after the SIGKILL). Answers whether the
/// SIGKILL was needed.
pub async fn terminate(child: &mut dyn Child, grace: Duration) -> bool {
    child.signal_group(GroupSignal::Term);
    if tokio::time::timeout(grace, gone(child)).await.is_ok() {
        return false;
    }
    child.signal_group(GroupSignal::Kill);
    let settle = Duration::from_millis(KILL_WAIT_MS);
    if tokio::time::timeout(settle, gone(child)).await.is_err() {
        tracing::warn!(
            pgid = child.pgid(),
            "a SIGKILLed process group is still there"
        );
    }
    true
}

/// Resolves once the leader is reaped and no process of its group is left.
async fn gone(child: &mut dyn Child) {
    child.wait().await;
    child.group_gone().await;
}

/// Owns a started child; if dropped before [`GroupGuard::disarm`] (the run's future was dropped)
/// it terminates the group from a task of its own, and keeps the group registered as live until
/// that is done.
struct GroupGuard {
    child: Option<Box<dyn Child>>,
    grace: Duration,
    registration: Option<LiveGroup>,
}

impl GroupGuard {
    fn new(child: Box<dyn Child>, grace: Duration, registration: Option<LiveGroup>) -> Self {
        GroupGuard {
            child: Some(child),
            grace,
            registration,
        }
    }

    fn child(&mut self) -> &mut dyn Child {
        self.child
            .as_deref_mut()
            .expect("armed guard holds its child")
    }

    /// The group is gone: nothing left to do on drop.
    fn disarm(&mut self) {
        self.child = None;
        self.registration = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let (grace, registration) = (self.grace, self.registration.take());
        if !in_runtime() {
            // No runtime left to wait out a grace in: the group gets SIGKILL at once.
            child.signal_group(GroupSignal::Kill);
            return;
        }
        tokio::spawn(async move {
            terminate(child.as_mut(), grace).await;
            drop(registration);
        });
    }
}

/// Whether a task can be spawned from here (a guard dropped by a runtime shutting down cannot).
fn in_runtime() -> bool {
    #[cfg(not(madsim))]
    return tokio::runtime::Handle::try_current().is_ok();
    // The simulator drops run futures only from inside its runtime.
    #[cfg(madsim)]
    return true;
}
