//! Simulated processes: the [`Spawner`] the simulated node's runs start their children with.
//!
//! Each child is a task on the simulated machine's own process host (a node of its own, so a
//! crash of the runtime node does not stop it, as a real crash leaves the children the kernel
//! does not kill). What a child does is drawn from the seed when it is spawned ([`ProcessPlan`]):
//! quick or slow output, a hang, SIGTERM ignored, garbage bytes, a nonzero exit, death by a
//! signal in the middle of its output, or a grandchild that outlives the leader in the same
//! process group. Signals reach the whole group as they would on Linux; a crash of the runtime
//! node kills each leader (`PR_SET_PDEATHSIG`) and leaves grandchildren to recovery.
//!
//! The world records `process_spawned` and `process_group_gone`, so the oracle can check that no
//! run's process group outlives its run by more than the grace plus a bound.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madsim::runtime::{Handle, NodeHandle};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::{mpsc, Notify};
use vigil::engine::run::RunId;
use vigil::exec::spawn::{
    Child, ChildEvent, ChildFuture, ExitStatus, GroupSignal, OutputLine, SpawnError, SpawnRequest, Spawner,
    Stream,
};

use crate::coding_clis;
use crate::harness::build_node;
use crate::recorder::Recorder;
use crate::trace::{PlannedEnd, TraceEvent};

/// The process host's name on the simulated network.
pub const PROCESS_HOST: &str = "process-host";
/// The trace's node name for what children do.
const TRACE_NODE: &str = "processes";
/// Lines a child may have written that its reader has not read yet (a pipe's worth).
const PIPE_LINES_MAX: usize = 64;
/// First process group id handed out.
const FIRST_PGID: u32 = 1_000;
/// Programs a simulated machine has; any other is "not installed". `claude` and `codex` play
/// the coding CLIs (sim/src/coding_clis.rs).
pub const INSTALLED_PROGRAMS: [&str; 4] = ["sim-agent", "/usr/bin/sim-agent", "claude", "codex"];
const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;
const SIGSEGV: i32 = 11;

/// How often each behaviour is drawn, per mille (the rest of the first seven: quick, clean
/// runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessScript {
    pub slow_permille: u32,
    pub hang_permille: u32,
    pub ignore_term_permille: u32,
    pub garbage_permille: u32,
    pub nonzero_permille: u32,
    pub die_mid_output_permille: u32,
    /// Drawn apart from the others: any child may also fork a grandchild.
    pub spawn_child_permille: u32,
}

impl Default for ProcessScript {
    fn default() -> Self {
        ProcessScript {
            slow_permille: 100,
            hang_permille: 60,
            ignore_term_permille: 60,
            garbage_permille: 60,
            nonzero_permille: 100,
            die_mid_output_permille: 60,
            spawn_child_permille: 200,
        }
    }
}

/// What one child will do, drawn when it is spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPlan {
    /// Lines, each after a delay from the previous one.
    pub lines: Vec<(u64, Stream, String)>,
    /// How the leader ends after its last line (`None`: it never does).
    pub end: Option<LeaderEnd>,
    pub ignores_term: bool,
    /// A grandchild forked after this many ms, living this long, maybe deaf to SIGTERM.
    pub grandchild: Option<(u64, u64, bool)>,
}

/// How a leader ends on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderEnd {
    Exit(i32),
    Signal(i32),
}

impl ProcessPlan {
    /// Draws a child's behaviour.
    pub fn draw(script: &ProcessScript, rng: &mut impl Rng) -> ProcessPlan {
        let mut roll = rng.gen_range(0..1_000u32);
        let mut pick = |permille: u32| {
            let hit = roll < permille;
            roll = roll.saturating_sub(permille);
            hit
        };
        let mut plan = ProcessPlan {
            lines: quick_lines(rng, 1..=4, 50..2_000),
            end: Some(LeaderEnd::Exit(0)),
            ignores_term: false,
            grandchild: None,
        };
        if pick(script.slow_permille) {
            plan.lines = quick_lines(rng, 2..=6, 30_000..240_000);
        } else if pick(script.hang_permille) {
            plan.end = None;
        } else if pick(script.ignore_term_permille) {
            plan.end = None;
            plan.ignores_term = true;
        } else if pick(script.garbage_permille) {
            plan.lines = garbage_lines(rng);
        } else if pick(script.nonzero_permille) {
            plan.end = Some(LeaderEnd::Exit(rng.gen_range(1..=255)));
        } else if pick(script.die_mid_output_permille) {
            plan.lines.truncate(1);
            plan.end = Some(LeaderEnd::Signal(SIGSEGV));
        }
        // Any leader may leave a grandchild in its group, whatever else it does.
        if rng.gen_range(0..1_000u32) < script.spawn_child_permille {
            plan.grandchild = Some((
                rng.gen_range(0..500),
                rng.gen_range(60_000..1_800_000),
                rng.gen_bool(0.5),
            ));
        }
        plan
    }
}

impl ProcessPlan {
    /// A child that prints `printed`'s lines a moment apart, then exits as it says.
    fn printing(printed: coding_clis::Printed, rng: &mut impl Rng) -> ProcessPlan {
        ProcessPlan {
            lines: printed
                .lines
                .into_iter()
                .map(|(stream, text)| (rng.gen_range(100..3_000), stream, text))
                .collect(),
            end: printed.exit.map(LeaderEnd::Exit),
            ignores_term: false,
            grandchild: None,
        }
    }
}

fn quick_lines(
    rng: &mut impl Rng,
    count: std::ops::RangeInclusive<usize>,
    gap_ms: std::ops::Range<u64>,
) -> Vec<(u64, Stream, String)> {
    let lines = rng.gen_range(count);
    (0..lines)
        .map(|i| {
            let stream = if rng.gen_bool(0.2) { Stream::Stderr } else { Stream::Stdout };
            (rng.gen_range(gap_ms.clone()), stream, format!("step {i} of {lines}"))
        })
        .collect()
}

fn garbage_lines(rng: &mut impl Rng) -> Vec<(u64, Stream, String)> {
    (0..rng.gen_range(1..=3))
        .map(|_| {
            let bytes: Vec<u8> = (0..rng.gen_range(1..400)).map(|_| rng.gen()).collect();
            (rng.gen_range(10..500), Stream::Stdout, String::from_utf8_lossy(&bytes).into_owned())
        })
        .collect()
}

/// One process group's state, shared by the host's tasks and the runtime's reader.
#[derive(Debug)]
struct Group {
    run: RunId,
    leader_alive: bool,
    /// The leader's end, once it ended.
    leader_exit: Option<ExitStatus>,
    grandchild_alive: bool,
    ignores_term: bool,
    grandchild_ignores_term: bool,
    /// Woken on every signal and every death in the group.
    changed: Arc<Notify>,
    gone_recorded: bool,
}

impl Group {
    fn alive(&self) -> bool {
        self.leader_alive || self.grandchild_alive
    }
}

/// The simulated machine's processes. Shared by every start of the runtime node (they outlive
/// its restarts, as children outlive a crashed parent).
#[derive(Clone)]
pub struct SimProcesses {
    inner: Arc<Inner>,
}

struct Inner {
    host: NodeHandle,
    script: ProcessScript,
    rng: Mutex<ChaCha8Rng>,
    groups: Mutex<BTreeMap<u32, Group>>,
    next_pgid: Mutex<u32>,
    /// The sessions the machine's coding CLIs keep.
    cli_sessions: Mutex<coding_clis::Sessions>,
    recorder: Recorder,
}

impl SimProcesses {
    /// The machine's process host, drawing behaviours from `rng`.
    pub fn new(recorder: &Recorder, script: ProcessScript, rng: ChaCha8Rng) -> Self {
        let host = build_node(Handle::current().create_node().name(PROCESS_HOST));
        SimProcesses {
            inner: Arc::new(Inner {
                host,
                script,
                rng: Mutex::new(rng),
                groups: Mutex::new(BTreeMap::new()),
                next_pgid: Mutex::new(FIRST_PGID),
                cli_sessions: Mutex::new(coding_clis::Sessions::default()),
                recorder: recorder.clone(),
            }),
        }
    }

    /// The runtime node died: every leader dies with it (`PR_SET_PDEATHSIG`), grandchildren live.
    pub fn parent_died(&self) {
        let mut groups = self.inner.groups.lock().expect("groups");
        for (pgid, group) in groups.iter_mut() {
            if group.leader_alive {
                group.leader_alive = false;
                group.leader_exit = Some(ExitStatus {
                    code: None,
                    signal: Some(SIGKILL),
                });
                group.changed.notify_waiters();
            }
            self.inner.record_if_gone(*pgid, group);
        }
    }

    /// Groups with a live process, by pgid.
    pub fn live_groups(&self) -> Vec<u32> {
        let groups = self.inner.groups.lock().expect("groups");
        groups.iter().filter(|(_, g)| g.alive()).map(|(p, _)| *p).collect()
    }
}

impl Inner {
    fn record_if_gone(&self, pgid: u32, group: &mut Group) {
        if !group.alive() && !group.gone_recorded {
            group.gone_recorded = true;
            self.recorder.record(
                TRACE_NODE,
                TraceEvent::ProcessGroupGone {
                    pgid,
                    run: group.run.0,
                },
            );
        }
    }

    /// Delivers `signal` to group `pgid`.
    fn signal(&self, pgid: u32, signal: GroupSignal) {
        let mut groups = self.groups.lock().expect("groups");
        let Some(group) = groups.get_mut(&pgid) else {
            return;
        };
        let number = match signal {
            GroupSignal::Term => SIGTERM,
            GroupSignal::Kill => SIGKILL,
        };
        let fatal = |ignores: bool| signal == GroupSignal::Kill || !ignores;
        if group.leader_alive && fatal(group.ignores_term) {
            group.leader_alive = false;
            group.leader_exit = Some(ExitStatus {
                code: None,
                signal: Some(number),
            });
        }
        if group.grandchild_alive && fatal(group.grandchild_ignores_term) {
            group.grandchild_alive = false;
        }
        group.changed.notify_waiters();
        self.record_if_gone(pgid, group);
    }

    /// The leader ended on its own.
    fn leader_ended(&self, pgid: u32, end: LeaderEnd) {
        let mut groups = self.groups.lock().expect("groups");
        let group = groups.get_mut(&pgid).expect("a spawned group");
        if !group.leader_alive {
            return;
        }
        group.leader_alive = false;
        group.leader_exit = Some(match end {
            LeaderEnd::Exit(code) => ExitStatus {
                code: Some(code),
                signal: None,
            },
            LeaderEnd::Signal(signal) => ExitStatus {
                code: None,
                signal: Some(signal),
            },
        });
        group.changed.notify_waiters();
        self.record_if_gone(pgid, group);
    }

    fn grandchild_ended(&self, pgid: u32) {
        let mut groups = self.groups.lock().expect("groups");
        let group = groups.get_mut(&pgid).expect("a spawned group");
        group.grandchild_alive = false;
        group.changed.notify_waiters();
        self.record_if_gone(pgid, group);
    }

    fn leader_alive(&self, pgid: u32) -> bool {
        self.groups.lock().expect("groups")[&pgid].leader_alive
    }
}

impl Spawner for SimProcesses {
    fn spawn(&self, request: SpawnRequest) -> ChildFuture<'_, Result<Box<dyn Child>, SpawnError>> {
        Box::pin(async move {
            if !INSTALLED_PROGRAMS.contains(&request.program.as_str()) {
                return Err(SpawnError::NotFound {
                    program: request.program,
                    detail: "no such file on the simulated machine".into(),
                });
            }
            let (plan, cli) = {
                let mut rng = self.inner.rng.lock().expect("process rng");
                match coding_clis::cli_of(&request.program) {
                    Some(cli) => {
                        let mut sessions = self.inner.cli_sessions.lock().expect("sessions");
                        let (printed, drawn) =
                            coding_clis::draw(cli, &request.args, &mut sessions, &mut *rng);
                        (ProcessPlan::printing(printed, &mut *rng), Some(Box::new(drawn)))
                    }
                    None => (ProcessPlan::draw(&self.inner.script, &mut *rng), None),
                }
            };
            let pgid = {
                let mut next = self.inner.next_pgid.lock().expect("pgid");
                *next += 1;
                *next - 1
            };
            let changed = Arc::new(Notify::new());
            self.inner.groups.lock().expect("groups").insert(
                pgid,
                Group {
                    run: request.run,
                    leader_alive: true,
                    leader_exit: None,
                    grandchild_alive: false,
                    ignores_term: plan.ignores_term,
                    grandchild_ignores_term: plan.grandchild.is_some_and(|(_, _, deaf)| deaf),
                    changed: changed.clone(),
                    gone_recorded: false,
                },
            );
            self.inner.recorder.record(
                TRACE_NODE,
                TraceEvent::ProcessSpawned {
                    run: request.run.0,
                    pgid,
                    plan: format!("{plan:?}"),
                    args: request.args.clone(),
                    stdin: request
                        .stdin
                        .as_deref()
                        .map(|bytes| String::from_utf8_lossy(bytes).into_owned()),
                    stdout: plan
                        .lines
                        .iter()
                        .filter(|(_, stream, _)| *stream == Stream::Stdout)
                        .map(|(_, _, text)| text.clone())
                        .collect(),
                    end: match plan.end {
                        Some(LeaderEnd::Exit(code)) => PlannedEnd::Exit { code },
                        Some(LeaderEnd::Signal(signal)) => PlannedEnd::Signal { signal },
                        None => PlannedEnd::Never,
                    },
                    cli,
                },
            );
            let (lines_tx, lines_rx) = mpsc::channel(PIPE_LINES_MAX);
            let inner = self.inner.clone();
            self.inner.host.spawn(live(inner, pgid, plan, lines_tx));
            Ok(Box::new(SimChild {
                inner: self.inner.clone(),
                pgid,
                lines: lines_rx,
                changed,
                exit_told: false,
                output_open: true,
            }) as Box<dyn Child>)
        })
    }

    fn group_alive(&self, pgid: u32) -> bool {
        self.inner
            .groups
            .lock()
            .expect("groups")
            .get(&pgid)
            .is_some_and(Group::alive)
    }

    fn kill_orphan_groups(&self, groups: &[(u32, RunId)]) -> Vec<u32> {
        let marked: Vec<u32> = {
            let all = self.inner.groups.lock().expect("groups");
            groups
                .iter()
                .filter(|(pgid, run)| all.get(pgid).is_some_and(|g| g.alive() && g.run == *run))
                .map(|(pgid, _)| *pgid)
                .collect()
        };
        for pgid in &marked {
            self.inner.signal(*pgid, GroupSignal::Kill);
        }
        marked
    }
}

/// What a child does, on the process host: its lines, then its end; a grandchild beside it.
async fn live(inner: Arc<Inner>, pgid: u32, plan: ProcessPlan, lines: mpsc::Sender<OutputLine>) {
    if let Some((fork_after_ms, lives_ms, _)) = plan.grandchild {
        let inner = inner.clone();
        tokio::time::sleep(Duration::from_millis(fork_after_ms)).await;
        if !inner.leader_alive(pgid) {
            return;
        }
        inner.groups.lock().expect("groups").get_mut(&pgid).expect("group").grandchild_alive = true;
        let host = inner.host.clone();
        host.spawn(async move {
            tokio::time::sleep(Duration::from_millis(lives_ms)).await;
            inner.grandchild_ended(pgid);
        });
    }
    for (delay_ms, stream, text) in plan.lines {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        if !inner.leader_alive(pgid) {
            return;
        }
        // A reader that went away (the node died) is a closed pipe: the child writes on.
        let _ = lines.send(OutputLine { stream, text }).await;
    }
    match plan.end {
        Some(end) => inner.leader_ended(pgid, end),
        // Hangs until a signal ends it (its group's state says so).
        None => {}
    }
}

/// The runtime's side of a simulated child.
struct SimChild {
    inner: Arc<Inner>,
    pgid: u32,
    lines: mpsc::Receiver<OutputLine>,
    changed: Arc<Notify>,
    /// Whether `next_event` told the leader's exit.
    exit_told: bool,
    /// Whether the child may still write (its writer has not closed the pipe).
    output_open: bool,
}

impl SimChild {
    fn leader_exit(&self) -> Option<ExitStatus> {
        self.inner.groups.lock().expect("groups")[&self.pgid].leader_exit
    }
}

impl Child for SimChild {
    fn pgid(&self) -> u32 {
        self.pgid
    }

    fn next_line(&mut self) -> ChildFuture<'_, Option<OutputLine>> {
        Box::pin(async move {
            loop {
                let changed = self.changed.clone();
                let notified = changed.notified();
                if self.leader_exit().is_some() {
                    // The pipe is closed once the writer is gone; what it wrote is still read.
                    return self.lines.try_recv().ok();
                }
                tokio::select! {
                    line = self.lines.recv() => return line,
                    _ = notified => {}
                }
            }
        })
    }

    fn next_event(&mut self) -> ChildFuture<'_, Option<ChildEvent>> {
        Box::pin(async move {
            loop {
                let changed = self.changed.clone();
                let notified = changed.notified();
                if let Ok(line) = self.lines.try_recv() {
                    return Some(ChildEvent::Line(line));
                }
                match self.leader_exit() {
                    Some(exit) if !self.exit_told => {
                        self.exit_told = true;
                        return Some(ChildEvent::Exited(exit));
                    }
                    // The writer is gone and what it wrote was read.
                    Some(_) => return None,
                    None => {}
                }
                tokio::select! {
                    line = self.lines.recv(), if self.output_open => match line {
                        Some(line) => return Some(ChildEvent::Line(line)),
                        None => self.output_open = false,
                    },
                    _ = notified => {}
                }
            }
        })
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        self.leader_exit()
    }

    fn group_gone(&mut self) -> ChildFuture<'_, ()> {
        Box::pin(async move {
            loop {
                let changed = self.changed.clone();
                let notified = changed.notified();
                if !self.inner.groups.lock().expect("groups")[&self.pgid].alive() {
                    return;
                }
                notified.await;
            }
        })
    }

    fn wait(&mut self) -> ChildFuture<'_, ExitStatus> {
        Box::pin(async move {
            loop {
                let changed = self.changed.clone();
                let notified = changed.notified();
                if let Some(exit) = self.leader_exit() {
                    return exit;
                }
                notified.await;
            }
        })
    }

    fn signal_group(&self, signal: GroupSignal) {
        self.inner.signal(self.pgid, signal);
    }
}
