//! Process agents under the simulator: `cli_agents` passes its sweep and gives the same trace
//! twice; its seeds really meet every child behaviour and every way a run ends; and invariant 14
//! (no process group outlives its run by more than the grace plus a slack) fires on a hand-made
//! bad trace and on a runtime that forgets to kill what a crash left behind.
#![cfg(madsim)]

mod sim_support;

use std::collections::BTreeMap;

use vigil::engine::agent::{AdapterSpec, AgentId, AgentSpec};
use vigil::engine::cli_spec::{ChildSpec, ProcessSpec};
use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::{ErrorClass, RunId, RunStatus};
use vigil::engine::tenant::TokenHash;
use vigil_scenarios::run::{find, run_seed, run_seed_twice};
use vigil_world::check::Checker;
use vigil_world::trace::{TraceEvent, TraceRecord};

const CLI_AGENTS_SEEDS: u64 = 500;

#[test]
fn cli_agents_passes_500_seeds() {
    sim_support::sweep_passes("cli_agents", CLI_AGENTS_SEEDS);
}

#[test]
fn cli_agents_gives_the_same_whole_trace_twice() {
    let outcome = run_seed_twice(find("cli_agents").expect("scenario"), 5);
    assert!(outcome.passed(), "{}", outcome.failure_report().unwrap_or_default());
}

/// What a handful of seeds did, counted from their traces.
#[derive(Debug, Default)]
struct Seen {
    classes: BTreeMap<ErrorClass, u64>,
    succeeded: u64,
    /// Runs that ended while their recorded group was still alive (the runtime had to end it).
    ended_with_live_group: u64,
    /// Groups gone only after a recovery (a crash left them, recovery killed them).
    killed_after_recovery: u64,
    plans_with_grandchild: u64,
    plans_deaf_to_term: u64,
    restarts: u64,
}

fn tally(seeds: std::ops::Range<u64>) -> Seen {
    let scenario = find("cli_agents").expect("scenario");
    let mut seen = Seen::default();
    for seed in seeds {
        let outcome = run_seed(scenario, seed);
        assert!(outcome.passed(), "{}", outcome.failure_report().unwrap_or_default());
        let mut live: BTreeMap<u32, u64> = BTreeMap::new();
        let mut group_of: BTreeMap<u64, u32> = BTreeMap::new();
        let mut restarted_at = None;
        for record in &outcome.records {
            match &record.event {
                TraceEvent::ProcessSpawned {
                    plan, pgid, run, ..
                } => {
                    seen.plans_with_grandchild += u64::from(plan.contains("grandchild: Some"));
                    seen.plans_deaf_to_term += u64::from(plan.contains("ignores_term: true"));
                    live.insert(*pgid, *run);
                }
                TraceEvent::ProcessGroupGone { pgid, .. } => {
                    live.remove(pgid);
                    // Recovery kills what a crash left before it takes any wakeup.
                    let in_recovery = restarted_at.is_some_and(|at| record.t_ms <= at + 5);
                    seen.killed_after_recovery += u64::from(in_recovery);
                }
                TraceEvent::Restarted => {
                    seen.restarts += 1;
                    restarted_at = Some(record.t_ms);
                }
                TraceEvent::Committed { event } => match &event.kind {
                    EventKind::RunProcessStarted { run, pgid, .. } => {
                        group_of.insert(run.0, *pgid);
                    }
                    EventKind::RunFinished {
                        run,
                        status,
                        error_class,
                        ..
                    } => {
                        if *status == RunStatus::Succeeded {
                            seen.succeeded += 1;
                        }
                        if let Some(class) = error_class {
                            *seen.classes.entry(*class).or_default() += 1;
                        }
                        let alive = group_of.get(&run.0).is_some_and(|p| live.contains_key(p));
                        seen.ended_with_live_group += u64::from(alive);
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    seen
}

#[test]
fn cli_agents_meets_every_child_behaviour_and_every_way_a_run_ends() {
    let seen = tally(0..6);
    for class in [
        ErrorClass::ExitNonzero,
        ErrorClass::TimedOut,
        ErrorClass::Cancelled,
        ErrorClass::ControlPlaneRestart,
        ErrorClass::AdapterNotInstalled,
    ] {
        assert!(seen.classes.get(&class).copied().unwrap_or(0) > 0, "no {class:?} run: {seen:?}");
    }
    assert!(seen.succeeded > 50, "{seen:?}");
    // Runs the runtime had to end with their group alive (cancel, pause, timeout, a leader that
    // left a grandchild): rarer since the children's limits are at most 3 minutes.
    assert!(seen.ended_with_live_group > 0, "{seen:?}");
    assert!(seen.killed_after_recovery > 0, "{seen:?}");
    assert!(seen.plans_with_grandchild > 10 && seen.plans_deaf_to_term > 10, "{seen:?}");
    assert!(seen.restarts > 3, "{seen:?}");
}

// --- Invariant 14 fires on a hand-made bad trace. ---

fn record(t_ms: u64, node: &'static str, event: TraceEvent) -> TraceRecord {
    TraceRecord { t_ms, node, event }
}

fn commit(seq: u64, at_ms: u64, kind: EventKind) -> TraceRecord {
    let event = Event {
        seq,
        at_ms,
        tenant: "default".into(),
        kind,
    };
    record(at_ms, "vigil-1", TraceEvent::Committed { event })
}

const GRACE_SEC: u64 = 3;

/// A checker that has seen a process agent (grace 3 s) start run 1 in group 1000 at 1 s, and
/// the run end at 10 s; the (seq, digest) pairs of its log.
fn ended_run() -> (Checker, Vec<(u64, u64)>) {
    let mut spec = AgentSpec::with_interval("p", None);
    spec.adapter = AdapterSpec::Process(ProcessSpec {
        command: "sim-agent".into(),
        args: Vec::new(),
        stdin: None,
        child: ChildSpec {
            grace_sec: GRACE_SEC,
            ..ChildSpec::default()
        },
    });
    let (agent, run) = (AgentId(1), RunId(1));
    let records = [
        commit(1, 1_000, EventKind::AgentCreated {
            agent,
            name: "p".into(),
            spec: Box::new(spec),
            token_hash: TokenHash::of("p"),
            first_fire_at_ms: None,
        }),
        commit(2, 1_000, EventKind::WakeupQueued {
            requested_by: None,
            trigger_detail: None,
            wakeup: vigil::engine::wakeup::WakeupId(1),
            agent,
            source: vigil::engine::wakeup::WakeupSource::OnDemand,
            reason: String::new(),
            payload: serde_json::Value::Null,
            task_key: None,
            idempotency_key: None,
            run,
        }),
        commit(3, 1_000, EventKind::RunStarted {
            run,
            agent,
            run_number: 0,
            day: vigil::engine::daily_cap::LocalDay::of(1_000, "UTC"),
        }),
        commit(4, 1_000, EventKind::RunProcessStarted { run, agent, pgid: 1_000 }),
        commit(5, 10_000, EventKind::RunFinished {
            run,
            agent,
            status: RunStatus::Cancelled,
            detail: "cancelled by an operator".into(),
            cause: None,
            stop_reason: None,
            report: None,
            error_class: Some(ErrorClass::Cancelled),
        }),
    ];
    let mut checker = Checker::new();
    let started = TraceEvent::Recovered {
        head_seq: 0,
        digests: Vec::new(),
        unreported: Vec::new(),
    };
    checker.observe(&record(0, "vigil-1", started)).unwrap();
    for record in &records {
        checker.observe(record).unwrap();
    }
    let digests = records
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::Committed { event } => {
                Some((event.seq, vigil_world::trace::event_digest(event)))
            }
            _ => None,
        })
        .collect();
    (checker, digests)
}

fn later(t_ms: u64) -> TraceRecord {
    record(t_ms, "workload", TraceEvent::QuietPhase)
}

#[test]
fn a_group_gone_within_the_grace_and_slack_passes() {
    let (mut checker, _) = ended_run();
    let deadline = 10_000 + GRACE_SEC * 1_000 + vigil_world::check::GROUP_EXIT_SLACK_MS;
    checker.observe(&later(deadline)).unwrap();
    let gone = TraceEvent::ProcessGroupGone { pgid: 1_000, run: 1 };
    checker.observe(&record(deadline, "processes", gone)).unwrap();
    checker.observe(&later(deadline + 60_000)).unwrap();
}

#[test]
fn a_group_alive_past_the_grace_and_slack_is_caught() {
    let (mut checker, _) = ended_run();
    let deadline = 10_000 + GRACE_SEC * 1_000 + vigil_world::check::GROUP_EXIT_SLACK_MS;
    checker.observe(&later(deadline)).unwrap();
    let err = checker.observe(&later(deadline + 1)).unwrap_err();
    assert_eq!(err.invariant, "process_group_ends_with_run");
}

#[test]
fn while_the_node_is_down_the_deadline_waits_for_its_recovery() {
    let (mut checker, digests) = ended_run();
    let crashed = TraceEvent::Crashed {
        during_write: false,
        pending_ops: 0,
        kept_ops: 0,
        torn_ops: 0,
        lost_bytes: 0,
    };
    checker.observe(&record(11_000, "vigil-1", crashed)).unwrap();
    // Down long past the deadline: nothing could signal the group.
    checker.observe(&later(100_000)).unwrap();
    let recovered = TraceEvent::Recovered {
        head_seq: 5,
        digests,
        unreported: Vec::new(),
    };
    checker.observe(&record(200_000, "vigil-1", recovered)).unwrap();
    let slack = vigil_world::check::GROUP_EXIT_SLACK_MS;
    checker.observe(&later(200_000 + slack)).unwrap();
    let err = checker.observe(&later(200_000 + slack + 1)).unwrap_err();
    assert_eq!(err.invariant, "process_group_ends_with_run");
}
