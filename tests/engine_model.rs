//! The engine against a small reference model of the wakeup coordinator (STYLE.md rule 7).
//!
//! Random sequences of wakeups, run ends, cancels, pauses, resumes, terminations, clock moves
//! (past the 24 h idempotency TTL, and backwards) and crashes run through the engine and through
//! `Model`, written from the rules alone (coordinator.rs header, docs/invariants.md 1, 5, 6, 11):
//! after every step the two must agree on the answer, the running run, the queue in start order
//! and every run's state; and the event log must keep invariants 1, 5 and 11 on its own.
//! A crash rebuilds the engine from the whole log, which must give the same engine, then
//! recovers.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use vigil::engine::agent::{AgentId, AgentSpec, AgentStatus};
use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::{RunEnd, RunId, RunStatus, CONTROL_PLANE_RESTART};
use vigil::engine::tenant::TokenHash;
use vigil::engine::wakeup::{
    Priority, RefusalReason, WakeupId, WakeupOutcome, WakeupRecord, WakeupRequest, WakeupSource,
    IDEMPOTENCY_TTL_MS,
};
use vigil::engine::{Command, Decision, Engine, Refusal};

/// Operations in one generated sequence, at most.
const OPS_MAX: usize = 60;
/// Agents in one generated sequence, at most.
const AGENTS_MAX: usize = 3;
/// Where the wall clock starts: far enough from 0 that going back never clamps.
const START_MS: u64 = 10 * IDEMPOTENCY_TTL_MS;
/// Small alphabets, so that coalescing and idempotency hits are common.
const TASK_KEYS: [&str; 3] = ["a", "b", "c"];
const IDEMPOTENCY_KEYS: [&str; 3] = ["k1", "k2", "k3"];
const TENANT: &str = "t";

// ---- the generated input ----

#[derive(Debug, Clone)]
struct AgentSetup {
    queued_runs_max: usize,
    /// A source the agent does not accept, if any.
    disabled_source: Option<WakeupSource>,
}

#[derive(Debug, Clone)]
enum Op {
    Wake {
        agent: usize,
        source: WakeupSource,
        task_key: Option<&'static str>,
        idempotency_key: Option<&'static str>,
    },
    /// End the agent's running run (or, when none runs, try its latest run and expect a refusal).
    Finish {
        agent: usize,
        status: RunStatus,
    },
    /// Cancel the `pick`-th run ever created (modulo their number).
    Cancel {
        pick: usize,
    },
    Pause {
        agent: usize,
    },
    Resume {
        agent: usize,
    },
    Terminate {
        agent: usize,
    },
    /// Move the wall clock by this much (negative: back).
    Advance {
        delta_ms: i64,
    },
    Crash,
}

fn agent_setup() -> impl Strategy<Value = AgentSetup> {
    (
        1..=4usize,
        prop::option::weighted(0.3, prop::sample::select(WakeupSource::all())),
    )
        .prop_map(|(queued_runs_max, disabled_source)| AgentSetup {
            queued_runs_max,
            disabled_source,
        })
}

fn op() -> impl Strategy<Value = Op> {
    let agent = 0..AGENTS_MAX;
    let ttl_ms = IDEMPOTENCY_TTL_MS as i64;
    prop_oneof![
        20 => (
            agent.clone(),
            prop::sample::select(WakeupSource::all()),
            prop::option::weighted(0.7, prop::sample::select(TASK_KEYS.to_vec())),
            prop::option::weighted(0.5, prop::sample::select(IDEMPOTENCY_KEYS.to_vec())),
        )
            .prop_map(|(agent, source, task_key, idempotency_key)| Op::Wake {
                agent,
                source,
                task_key,
                idempotency_key,
            }),
        8 => (
            agent.clone(),
            prop::sample::select(vec![RunStatus::Succeeded, RunStatus::Failed, RunStatus::TimedOut]),
        )
            .prop_map(|(agent, status)| Op::Finish { agent, status }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        2 => agent.clone().prop_map(|agent| Op::Pause { agent }),
        3 => agent.clone().prop_map(|agent| Op::Resume { agent }),
        1 => agent.prop_map(|agent| Op::Terminate { agent }),
        4 => prop::sample::select(vec![
            1,
            1_000,
            60_000,
            3_600_000,
            ttl_ms - 1,
            ttl_ms,
            ttl_ms + 1,
            -1_000,
            -3_600_000,
            -ttl_ms,
        ])
        .prop_map(|delta_ms| Op::Advance { delta_ms }),
        3 => Just(Op::Crash),
    ]
}

// ---- the reference model ----

/// Start order of queued runs: smaller first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    OnDemand,
    Assignment,
    Routine,
}

impl Class {
    fn of(source: WakeupSource) -> Class {
        match source {
            WakeupSource::OnDemand => Class::OnDemand,
            WakeupSource::Assignment => Class::Assignment,
            _ => Class::Routine,
        }
    }

    fn priority(self) -> Priority {
        match self {
            Class::OnDemand => Priority::OnDemand,
            Class::Assignment => Priority::Assignment,
            Class::Routine => Priority::Routine,
        }
    }
}

#[derive(Debug, Clone)]
struct ModelRun {
    agent: usize,
    source: WakeupSource,
    class: Class,
    task_key: Option<String>,
    coalesced_count: u64,
    retry_of: Option<RunId>,
    status: RunStatus,
    /// The detail the run must end with, when the model knows it.
    detail: Option<String>,
}

#[derive(Debug, Clone)]
struct ModelAgent {
    id: AgentId,
    status: AgentStatus,
    sources: Vec<WakeupSource>,
    queued_runs_max: usize,
    /// Queued runs, in no particular order; `start_order` sorts them.
    queue: Vec<RunId>,
    running: Option<RunId>,
    /// The answer each idempotency key got, with the time it was given (`at_ms`).
    keys: BTreeMap<String, WakeupRecord>,
    /// The latest wall time at which a keyed wakeup was recorded: once it passes a key's first
    /// use + 24 h, the key has expired for good, even if the clock goes back.
    keys_clock_ms: u64,
}

/// The coordinator as the rules describe it. Never calls engine code.
#[derive(Debug, Clone, Default)]
struct Model {
    agents: Vec<ModelAgent>,
    runs: BTreeMap<RunId, ModelRun>,
    next_run: u64,
    next_wakeup: u64,
    /// Runs started and ended by the current step, in order.
    started: Vec<RunId>,
    ended: Vec<(RunId, RunStatus)>,
}

impl Model {
    fn new(setups: &[AgentSetup]) -> Model {
        let agents = setups
            .iter()
            .enumerate()
            .map(|(i, setup)| ModelAgent {
                id: AgentId(i as u64 + 1),
                status: AgentStatus::Active,
                sources: sources(setup),
                queued_runs_max: setup.queued_runs_max,
                queue: Vec::new(),
                running: None,
                keys: BTreeMap::new(),
                keys_clock_ms: 0,
            })
            .collect();
        Model {
            agents,
            next_run: 1,
            next_wakeup: 1,
            ..Model::default()
        }
    }

    fn start_order(&self, agent: usize) -> Vec<RunId> {
        let mut queue = self.agents[agent].queue.clone();
        queue.sort_by_key(|id| (self.runs[id].class, *id));
        queue
    }

    fn queued_with_key(&self, agent: usize, task_key: &Option<String>) -> Option<RunId> {
        let a = &self.agents[agent];
        a.queue
            .iter()
            .copied()
            .find(|id| self.runs[id].task_key == *task_key)
    }

    fn new_run(&mut self, agent: usize, run: ModelRun) -> RunId {
        let id = RunId(self.next_run);
        self.next_run += 1;
        self.runs.insert(id, run);
        self.agents[agent].queue.push(id);
        id
    }

    fn start_next(&mut self, agent: usize) {
        let a = &self.agents[agent];
        if a.status != AgentStatus::Active || a.running.is_some() {
            return;
        }
        let Some(&next) = self.start_order(agent).first() else {
            return;
        };
        let a = &mut self.agents[agent];
        a.queue.retain(|id| *id != next);
        a.running = Some(next);
        self.runs.get_mut(&next).unwrap().status = RunStatus::Running;
        self.started.push(next);
    }

    fn end(&mut self, run: RunId, status: RunStatus, detail: Option<&str>) {
        let r = self.runs.get_mut(&run).unwrap();
        r.status = status;
        r.detail = detail.map(str::to_string);
        let a = &mut self.agents[r.agent];
        if a.running == Some(run) {
            a.running = None;
        } else {
            a.queue.retain(|id| *id != run);
        }
        self.ended.push((run, status));
    }

    /// The expected answer to a wakeup, and whether it is a replay.
    fn wake(&mut self, agent: usize, request: &WakeupRequest, now_ms: u64) -> (WakeupRecord, bool) {
        if let Some(key) = &request.idempotency_key {
            if let Some(original) = self.agents[agent].keys.get(key) {
                if now_ms.max(self.agents[agent].keys_clock_ms)
                    < original.at_ms + IDEMPOTENCY_TTL_MS
                {
                    return (original.clone(), true);
                }
            }
        }
        let wakeup = WakeupId(self.next_wakeup);
        self.next_wakeup += 1;
        let a = &self.agents[agent];
        let refusal = match a.status {
            AgentStatus::Terminated => Some(RefusalReason::Terminated),
            AgentStatus::Paused => Some(RefusalReason::Paused),
            AgentStatus::Active if !a.sources.contains(&request.source) => {
                Some(RefusalReason::DisabledSource)
            }
            AgentStatus::Active => None,
        };
        let coalesce_onto = self.queued_with_key(agent, &request.task_key);
        let outcome = match (refusal, coalesce_onto) {
            (Some(refusal), _) => WakeupOutcome::Refused { refusal },
            (None, Some(run)) => {
                let r = self.runs.get_mut(&run).unwrap();
                r.coalesced_count += 1;
                r.class = r.class.min(Class::of(request.source));
                WakeupOutcome::Coalesced {
                    run,
                    coalesced_count: r.coalesced_count,
                }
            }
            (None, None) if a.queue.len() >= a.queued_runs_max => WakeupOutcome::Refused {
                refusal: RefusalReason::QueueFull,
            },
            (None, None) => {
                let run = self.new_run(
                    agent,
                    ModelRun {
                        agent,
                        source: request.source,
                        class: Class::of(request.source),
                        task_key: request.task_key.clone(),
                        coalesced_count: 0,
                        retry_of: None,
                        status: RunStatus::Queued,
                        detail: None,
                    },
                );
                WakeupOutcome::Queued { run }
            }
        };
        self.start_next(agent);
        let record = WakeupRecord {
            wakeup,
            agent: self.agents[agent].id,
            source: request.source,
            reason: request.reason.clone(),
            task_key: request.task_key.clone(),
            idempotency_key: request.idempotency_key.clone(),
            at_ms: now_ms,
            outcome,
        };
        if let Some(key) = &request.idempotency_key {
            let a = &mut self.agents[agent];
            a.keys.insert(key.clone(), record.clone());
            a.keys_clock_ms = a.keys_clock_ms.max(now_ms);
        }
        (record, false)
    }

    fn finish(&mut self, run: RunId, end: &RunEnd) -> Result<(), Refusal> {
        let agent = self.runs[&run].agent;
        if self.agents[agent].running != Some(run) {
            return Err(Refusal::RunNotRunning(run));
        }
        self.end(run, end.status, Some(&end.detail));
        self.start_next(agent);
        Ok(())
    }

    fn cancel(&mut self, run: RunId) -> Result<(), Refusal> {
        let Some(r) = self.runs.get(&run) else {
            return Err(Refusal::UnknownRun(run));
        };
        if r.status.is_terminal() {
            return Err(Refusal::RunAlreadyFinished(run, r.status));
        }
        let agent = r.agent;
        self.end(run, RunStatus::Cancelled, None);
        self.start_next(agent);
        Ok(())
    }

    /// Pause (`to == Paused`) or terminate: the running run, then the queued ones in start
    /// order, are cancelled.
    fn stop(&mut self, agent: usize, to: AgentStatus) -> Result<(), Refusal> {
        let a = &self.agents[agent];
        match (a.status, to) {
            (AgentStatus::Terminated, AgentStatus::Terminated) => return Ok(()),
            (AgentStatus::Terminated, _) => return Err(Refusal::AgentTerminated(a.id)),
            (AgentStatus::Paused, AgentStatus::Paused) => return Ok(()),
            _ => {}
        }
        let doomed: Vec<RunId> = a
            .running
            .into_iter()
            .chain(self.start_order(agent))
            .collect();
        self.agents[agent].status = to;
        for run in doomed {
            self.end(run, RunStatus::Cancelled, None);
        }
        Ok(())
    }

    fn resume(&mut self, agent: usize) -> Result<(), Refusal> {
        let a = &mut self.agents[agent];
        match a.status {
            AgentStatus::Terminated => Err(Refusal::AgentTerminated(a.id)),
            AgentStatus::Active => Ok(()),
            AgentStatus::Paused => {
                a.status = AgentStatus::Active;
                self.start_next(agent);
                Ok(())
            }
        }
    }

    /// After a crash: each running run fails with `control_plane_restart` and, unless it is
    /// itself a retry, is queued once more (joining a queued run of its task key if there is
    /// one); then each agent starts its next run.
    fn recover(&mut self) {
        for agent in 0..self.agents.len() {
            if let Some(run) = self.agents[agent].running {
                self.end(run, RunStatus::Failed, Some(CONTROL_PLANE_RESTART));
                let old = self.runs[&run].clone();
                if old.retry_of.is_none() {
                    match self.queued_with_key(agent, &old.task_key) {
                        Some(onto) => {
                            let r = self.runs.get_mut(&onto).unwrap();
                            r.coalesced_count += 1;
                            r.class = r.class.min(old.class);
                        }
                        None => {
                            self.new_run(
                                agent,
                                ModelRun {
                                    coalesced_count: 0,
                                    retry_of: Some(run),
                                    status: RunStatus::Queued,
                                    detail: None,
                                    ..old
                                },
                            );
                        }
                    }
                }
            }
            self.start_next(agent);
        }
    }
}

fn sources(setup: &AgentSetup) -> Vec<WakeupSource> {
    WakeupSource::all()
        .into_iter()
        .filter(|s| Some(*s) != setup.disabled_source)
        .collect()
}

// ---- properties of the event log alone ----

/// Invariants 1, 5 and 11, checked event by event from the log.
#[derive(Debug, Default)]
struct LogCheck {
    last_seq: u64,
    running: BTreeMap<AgentId, RunId>,
    queued: BTreeSet<RunId>,
    finished: BTreeSet<RunId>,
}

impl LogCheck {
    fn check(&mut self, event: &Event) {
        assert_eq!(event.seq, self.last_seq + 1, "seqs are gap-free from 1");
        self.last_seq = event.seq;
        match &event.kind {
            EventKind::WakeupQueued { run, .. }
            | EventKind::RunRequeued {
                run,
                coalesced: false,
                ..
            } => assert!(self.queued.insert(*run), "run {run} queued twice"),
            EventKind::WakeupCoalesced { run, .. }
            | EventKind::RunRequeued {
                run,
                coalesced: true,
                ..
            } => assert!(
                self.queued.contains(run),
                "joined run {run}, which is not queued"
            ),
            EventKind::RunStarted { run, agent, .. } => {
                assert!(
                    self.queued.remove(run),
                    "run {run} started but was not queued"
                );
                if let Some(other) = self.running.insert(*agent, *run) {
                    panic!("agent {agent} started run {run} while run {other} runs");
                }
            }
            EventKind::RunFinished {
                run, agent, status, ..
            } => {
                assert!(status.is_terminal(), "run {run} finished as {status:?}");
                assert!(self.finished.insert(*run), "run {run} finished twice");
                if self.running.get(agent) == Some(run) {
                    self.running.remove(agent);
                } else {
                    assert!(
                        self.queued.remove(run),
                        "run {run} finished but never lived"
                    );
                }
            }
            _ => {}
        }
    }
}

// ---- driving the engine ----

/// The engine with its whole event log, as a node with a store would hold them.
struct Node {
    engine: Engine,
    log: Vec<Event>,
    log_check: LogCheck,
}

impl Node {
    fn execute(&mut self, command: &Command, now_ms: u64) -> Result<Decision, Refusal> {
        let decision = self.engine.decide(command, now_ms)?;
        for event in &decision.events {
            self.engine.apply(event);
            self.log_check.check(event);
        }
        self.log.extend(decision.events.iter().cloned());
        Ok(decision)
    }

    fn crash(&mut self) {
        let mut rebuilt = Engine::new();
        self.log.iter().for_each(|e| rebuilt.apply(e));
        assert_eq!(
            rebuilt, self.engine,
            "replaying the log rebuilds the same engine"
        );
        self.engine = rebuilt;
    }
}

fn setup(setups: &[AgentSetup]) -> Node {
    let mut node = Node {
        engine: Engine::new(),
        log: Vec::new(),
        log_check: LogCheck::default(),
    };
    let tenant = Command::EnsureTenant {
        tenant: TENANT.into(),
        operator_token_hash: TokenHash::of("operator"),
    };
    node.execute(&tenant, START_MS).unwrap();
    for (i, agent) in setups.iter().enumerate() {
        let name = format!("agent-{i}");
        let mut spec = AgentSpec::with_interval(&name, None);
        spec.limits.queued_runs_max = agent.queued_runs_max;
        spec.heartbeat.sources = sources(agent);
        let create = Command::CreateAgent {
            tenant: TENANT.into(),
            spec,
            token_hash: TokenHash::of(&name),
        };
        let decision = node.execute(&create, START_MS).unwrap();
        assert!(matches!(
            decision.events[..],
            [Event { kind: EventKind::AgentCreated { agent, .. }, .. }] if agent == AgentId(i as u64 + 1)
        ));
    }
    node
}

/// Runs started and ended by a decision, in log order.
fn started_and_ended(decision: &Decision) -> (Vec<RunId>, Vec<(RunId, RunStatus)>) {
    let mut started = Vec::new();
    let mut ended = Vec::new();
    for event in &decision.events {
        match event.kind {
            EventKind::RunStarted { run, .. } => started.push(run),
            EventKind::RunFinished { run, status, .. } => ended.push((run, status)),
            _ => {}
        }
    }
    (started, ended)
}

/// What the wakeup events of a decision say became of the wakeup.
fn wakeup_outcomes(decision: &Decision) -> Vec<WakeupOutcome> {
    decision
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::WakeupQueued { run, .. } => Some(WakeupOutcome::Queued { run }),
            EventKind::WakeupCoalesced {
                run,
                coalesced_count,
                ..
            } => Some(WakeupOutcome::Coalesced {
                run,
                coalesced_count,
            }),
            EventKind::WakeupRefused { refusal, .. } => Some(WakeupOutcome::Refused { refusal }),
            _ => None,
        })
        .collect()
}

/// The engine's state must be the model's, agent by agent and run by run.
fn assert_same_state(engine: &Engine, model: &Model) {
    for (i, a) in model.agents.iter().enumerate() {
        let state = engine.agent_state(a.id).expect("agent exists");
        assert_eq!(state.agent().status, a.status, "status of agent {}", a.id);
        assert_eq!(
            state.active_run(),
            a.running,
            "running run of agent {}",
            a.id
        );
        assert_eq!(
            state.queued_runs().collect::<Vec<_>>(),
            model.start_order(i),
            "queue of agent {} in start order",
            a.id
        );
        let engine_runs: Vec<RunId> = state.runs().map(|r| r.id).collect();
        let model_runs: Vec<RunId> = model
            .runs
            .iter()
            .filter(|(_, r)| r.agent == i)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(engine_runs, model_runs, "runs of agent {}", a.id);
    }
    for (id, r) in &model.runs {
        let run = engine.run(*id).expect("run held");
        assert_eq!(run.status, r.status, "status of run {id}");
        assert_eq!(run.source, r.source, "source of run {id}");
        assert_eq!(run.priority, r.class.priority(), "priority of run {id}");
        assert_eq!(run.task_key, r.task_key, "task key of run {id}");
        assert_eq!(
            run.coalesced_count, r.coalesced_count,
            "coalesced count of run {id}"
        );
        assert_eq!(run.retry_of, r.retry_of, "retry_of of run {id}");
        if let Some(detail) = &r.detail {
            assert_eq!(&run.detail, detail, "detail of run {id}");
        }
    }
}

/// Runs `ops` through the engine and the model, comparing after each.
fn check_sequence(setups: &[AgentSetup], ops: &[Op]) {
    let mut node = setup(setups);
    let mut model = Model::new(setups);
    let mut now_ms = START_MS;
    let agents = setups.len();
    for (step, op) in ops.iter().enumerate() {
        model.started.clear();
        model.ended.clear();
        let decision = match op {
            Op::Wake {
                agent,
                source,
                task_key,
                idempotency_key,
            } => {
                let agent = agent % agents;
                let mut request = WakeupRequest::new(*source, format!("step {step}"));
                request.task_key = task_key.map(str::to_string);
                request.idempotency_key = idempotency_key.map(str::to_string);
                let (record, replayed) = model.wake(agent, &request, now_ms);
                let command = Command::Wake {
                    agent: model.agents[agent].id,
                    request,
                };
                let decision = node
                    .execute(&command, now_ms)
                    .expect("a wakeup is answered");
                assert_eq!(decision.replayed, replayed, "step {step}: replayed");
                assert_eq!(
                    decision.wakeup.as_ref(),
                    Some(&record),
                    "step {step}: the answer"
                );
                if replayed {
                    assert!(
                        decision.events.is_empty(),
                        "step {step}: a replay records nothing"
                    );
                } else {
                    assert_eq!(
                        wakeup_outcomes(&decision),
                        [record.outcome],
                        "step {step}: recorded"
                    );
                }
                Some(decision)
            }
            Op::Finish { agent, status } => {
                let agent = agent % agents;
                let latest = model.runs.iter().rev().find(|(_, r)| r.agent == agent);
                let target = model.agents[agent].running.or(latest.map(|(id, _)| *id));
                target.map(|run| {
                    let end = RunEnd::new(*status, format!("ended at step {step}"));
                    let expected = model.finish(run, &end);
                    let got = node.execute(&Command::FinishRun { run, end }, now_ms);
                    compare(step, got, expected)
                })
            }
            Op::Cancel { pick } => {
                let run = match model.runs.len() {
                    0 => RunId(1_000),
                    n => *model.runs.keys().nth(pick % n).unwrap(),
                };
                let expected = model.cancel(run);
                let got = node.execute(&Command::CancelRun { run }, now_ms);
                Some(compare(step, got, expected))
            }
            Op::Pause { agent } => {
                let agent = agent % agents;
                let expected = model.stop(agent, AgentStatus::Paused);
                let got = node.execute(
                    &Command::PauseAgent {
                        agent: model.agents[agent].id,
                        minutes: None,
                    },
                    now_ms,
                );
                Some(compare(step, got, expected))
            }
            Op::Resume { agent } => {
                let agent = agent % agents;
                let expected = model.resume(agent);
                let got = node.execute(
                    &Command::ResumeAgent {
                        agent: model.agents[agent].id,
                    },
                    now_ms,
                );
                Some(compare(step, got, expected))
            }
            Op::Terminate { agent } => {
                let agent = agent % agents;
                let expected = model.stop(agent, AgentStatus::Terminated);
                let got = node.execute(
                    &Command::TerminateAgent {
                        agent: model.agents[agent].id,
                    },
                    now_ms,
                );
                Some(compare(step, got, expected))
            }
            Op::Advance { delta_ms } => {
                now_ms = now_ms.saturating_add_signed(*delta_ms);
                None
            }
            Op::Crash => {
                node.crash();
                model.recover();
                let got = node.execute(&Command::RecoverRuns, now_ms);
                Some(compare(step, got, Ok(())))
            }
        };
        if let Some(decision) = decision {
            let (started, ended) = started_and_ended(&decision);
            assert_eq!(started, model.started, "step {step}: runs started");
            assert_eq!(ended, model.ended, "step {step}: runs ended");
        }
        assert_same_state(&node.engine, &model);
    }
}

/// The engine's answer must be the model's; an accepted command yields its decision.
fn compare(step: usize, got: Result<Decision, Refusal>, expected: Result<(), Refusal>) -> Decision {
    match (got, expected) {
        (Ok(decision), Ok(())) => decision,
        (Err(got), Err(expected)) => {
            assert_eq!(got, expected, "step {step}: the refusal");
            Decision {
                events: Vec::new(),
                wakeup: None,
                replayed: false,
            }
        }
        (got, expected) => panic!("step {step}: engine answered {got:?}, the model {expected:?}"),
    }
}

/// 256 cases unless `PROPTEST_CASES` asks for another number.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn engine_agrees_with_the_model(
        setups in prop::collection::vec(agent_setup(), 1..=AGENTS_MAX),
        ops in prop::collection::vec(op(), 1..=OPS_MAX),
    ) {
        check_sequence(&setups, &ops);
    }
}

/// The smallest sequence that found a disagreement once: within 24 h of its first use a key is
/// honoured even after the clock went back, but once the agent's wall clock has passed the key's
/// first use + 24 h (here: a keyed wakeup at T + 24 h), the key has expired for good, and a
/// backward jump does not revive it (docs/invariants.md, `idempotency_honoured`).
#[test]
fn a_key_expired_by_the_clock_stays_expired_after_it_goes_back() {
    let wake = |idempotency_key| Op::Wake {
        agent: 0,
        source: WakeupSource::Timer,
        task_key: None,
        idempotency_key: Some(idempotency_key),
    };
    let setups = [AgentSetup {
        queued_runs_max: 1,
        disabled_source: None,
    }];
    check_sequence(
        &setups,
        &[
            wake("k1"),
            Op::Advance {
                delta_ms: IDEMPOTENCY_TTL_MS as i64 - 1_000,
            },
            wake("k2"),
            Op::Advance { delta_ms: -2_000 },
            // Still within 24 h of k1's first use on every reading: replayed.
            wake("k1"),
            Op::Advance { delta_ms: 5_000 },
            // A new key recorded at T + 24 h + 2 s: the agent's clock passed k1's expiry.
            wake("k3"),
            Op::Advance { delta_ms: -5_000 },
            // The clock read past k1's expiry once: k1 is new again, though the clock went back.
            wake("k1"),
        ],
    );
}
