//! LLM agents under the simulator: the agent loop against a simulated provider and tool server.
//! `heart_fleet` (whole days) and `tool_loop` pass their 500-seed sweeps; the pinned seed's
//! day comes out near the paper's figures; each scenario really exercises what it is named for;
//! and each new oracle check fires on a hand-made bad trace.
//!
//! Seed counts (docs/simulation.md, "How long it takes"): a whole `heart_fleet` day costs about
//! 3 s of one core, so its 500 days are about 13 minutes of CI's 2 cores, the suite's biggest
//! sweep. `tool_loop` costs about 1 s a seed. The 2-hour cut, `heart_fleet_2h`, is swept in
//! swarm mode (tests/sim_swarm.rs) and checked for determinism here.
#![cfg(madsim)]

mod sim_support;

use std::collections::BTreeMap;

use vigil::engine::agent::{AgentId, AgentSpec};
use vigil::engine::event::{Event, EventKind};
use vigil::engine::pause::PausedBy;
use vigil::engine::run::{RunId, RunReport, RunStatus, StopReason};
use vigil::engine::tenant::TokenHash;
use vigil_scenarios::heart_fleet::FleetFigures;
use vigil_scenarios::run::{find, run_seed, run_seed_twice};
use vigil_world::check::Checker;
use vigil_world::trace::{ModelReply, ToolOutcome, TraceEvent, TraceRecord, WireApi};

const HEART_FLEET_SEEDS: u64 = 500;
const TOOL_LOOP_SEEDS: u64 = 500;
/// The seed whose whole day is run for the paper's figures.
const PINNED_DAY_SEED: u64 = 1;

#[test]
fn heart_fleet_passes_500_whole_days() {
    sim_support::sweep_passes("heart_fleet", HEART_FLEET_SEEDS);
}

#[test]
fn tool_loop_passes_500_seeds() {
    sim_support::sweep_passes("tool_loop", TOOL_LOOP_SEEDS);
}

#[test]
fn a_whole_heart_fleet_day_passes_and_comes_out_near_the_papers_figures() {
    let outcome = run_seed(find("heart_fleet").expect("scenario"), PINNED_DAY_SEED);
    assert!(
        outcome.passed(),
        "{}",
        outcome.failure_report().unwrap_or_default()
    );
    let figures = FleetFigures::from_trace(&outcome.records);
    println!("{}", figures.table());
    assert_eq!(figures.agents, 75);
    let ghost_rate = figures.ghost_runs as f64 / figures.routine_runs_answered as f64;
    assert!(
        (0.72..0.84).contains(&ghost_rate),
        "ghost rate {ghost_rate}"
    );
    // 48 scheduled runs a day at most (the cap) and a few extra calls for tools.
    let per_agent_day = figures.model_calls as f64 / 75.0;
    assert!(
        (35.0..80.0).contains(&per_agent_day),
        "{per_agent_day} calls per agent-day"
    );
    assert!(
        figures.daily_cap_refusals > 0,
        "the idle chamber meets the cap"
    );
    assert!(
        figures.pulses_answered > 75 * 8_000,
        "{}",
        figures.pulses_answered
    );
    assert!(figures.calls_by_host_name > 0 && figures.calls_anthropic > 0);
    assert!(figures.tool_calls_served > 0 && figures.rests > 0);
}

#[test]
fn agent_scenarios_give_the_same_whole_trace_twice() {
    for (name, seed) in [("heart_fleet_2h", 3), ("tool_loop", 3), ("tool_loop", 4)] {
        let outcome = run_seed_twice(find(name).expect("scenario"), seed);
        assert!(
            outcome.passed(),
            "{}",
            outcome.failure_report().unwrap_or_default()
        );
    }
}

#[test]
fn tool_loop_really_meets_every_bound_and_survives_crashes_mid_run() {
    let scenario = find("tool_loop").expect("scenario");
    let mut stops: BTreeMap<StopReason, u64> = BTreeMap::new();
    let mut outcomes: BTreeMap<&'static str, u64> = BTreeMap::new();
    let (mut restarts, mut anthropic, mut by_name, mut rests) = (0, 0, 0, 0);
    for seed in 0..4 {
        let outcome = run_seed(scenario, seed);
        assert!(
            outcome.passed(),
            "{}",
            outcome.failure_report().unwrap_or_default()
        );
        for record in &outcome.records {
            match &record.event {
                TraceEvent::Committed { event } => match &event.kind {
                    EventKind::RunFinished {
                        stop_reason: Some(stop),
                        ..
                    } => *stops.entry(*stop).or_default() += 1,
                    EventKind::AgentPaused {
                        by: PausedBy::Agent,
                        ..
                    } => rests += 1,
                    _ => {}
                },
                TraceEvent::ToolCallServed { outcome, .. } => {
                    let name = match outcome {
                        ToolOutcome::Ok => "ok",
                        ToolOutcome::Slow => "slow",
                        ToolOutcome::Failed => "failed",
                        ToolOutcome::Partial => "partial",
                        ToolOutcome::Hung => "hung",
                    };
                    *outcomes.entry(name).or_default() += 1;
                }
                TraceEvent::ModelCallServed { api, host, .. } => {
                    anthropic += u64::from(*api == WireApi::Anthropic);
                    by_name += u64::from(host.starts_with("llm.sim.internal"));
                }
                TraceEvent::Restarted => restarts += 1,
                _ => {}
            }
        }
    }
    for stop in [
        StopReason::ToolCap,
        StopReason::MaxIterations,
        StopReason::Budget,
        StopReason::PauseHeartbeats,
        StopReason::EndTurn,
        StopReason::ControlPlaneRestart,
    ] {
        assert!(
            stops.get(&stop).copied().unwrap_or(0) > 0,
            "no {stop:?} in {stops:?}"
        );
    }
    for kind in ["ok", "slow", "failed", "partial", "hung"] {
        assert!(
            outcomes.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in {outcomes:?}"
        );
    }
    assert!(restarts > 0 && anthropic > 0 && by_name > 0 && rests > 0);
}

// --- Each new oracle check fires on a hand-made bad trace. ---

fn record(t_ms: u64, event: TraceEvent) -> TraceRecord {
    TraceRecord {
        t_ms,
        node: "vigil-1",
        event,
    }
}

/// A checker that has seen agent 1 created as an `llm` agent (3 model calls, 2 tool calls per
/// run, a budget of 100 µ$ a day) and a timer run 1 queued and started; the last seq.
fn fresh() -> (Checker, u64) {
    let mut checker = Checker::new();
    let records = checker_records();
    for record in &records {
        checker.observe(record).unwrap();
    }
    (checker, records.len() as u64)
}

fn commit(seq: u64, at_ms: u64, kind: EventKind) -> TraceRecord {
    record(
        at_ms,
        TraceEvent::Committed {
            event: Event {
                seq,
                at_ms,
                tenant: "default".into(),
                kind,
            },
        },
    )
}

fn finished(stop: StopReason, report: RunReport) -> EventKind {
    EventKind::RunFinished {
        run: RunId(1),
        agent: AgentId(1),
        status: RunStatus::Succeeded,
        detail: String::new(),
        cause: None,
        stop_reason: Some(stop),
        report: Some(Box::new(report)),
        error_class: None,
    }
}

fn usage(call: u64, cost_micro_usd: u64) -> EventKind {
    EventKind::UsageRecorded {
        run: RunId(1),
        agent: AgentId(1),
        call,
        usage: vigil::engine::usage::Usage {
            llm_calls: 1,
            cost_micro_usd,
            ..Default::default()
        },
        day: vigil::engine::daily_cap::LocalDay::of(2_000, "UTC"),
    }
}

#[test]
fn a_ghost_run_that_changes_the_history_is_caught() {
    let (mut checker, seq) = fresh();
    let report = RunReport {
        answer_excerpt: Some("[IDLE]".into()),
        history_append: vec![vigil::engine::history::HistoryMessage::new(
            vigil::engine::history::Role::Assistant,
            "[IDLE]",
        )],
        ..RunReport::default()
    };
    let err = checker
        .observe(&commit(seq + 1, 2_000, finished(StopReason::Ghost, report)))
        .unwrap_err();
    assert_eq!(err.invariant, "ghost_leaves_history_untouched");
}

#[test]
fn tool_calls_past_the_cap_are_caught() {
    let (mut checker, seq) = fresh();
    let report = RunReport {
        tool_calls: 3,
        ..RunReport::default()
    };
    let err = checker
        .observe(&commit(
            seq + 1,
            2_000,
            finished(StopReason::ToolCap, report),
        ))
        .unwrap_err();
    assert_eq!(err.invariant, "tool_calls_within_cap");
    // The tool server's own count.
    let (mut checker, _) = fresh();
    let served = || {
        record(
            2_000,
            TraceEvent::ToolCallServed {
                agent: 1,
                run: 1,
                call_id: "c1".into(),
                tool: "t".into(),
                endpoint: "ok".into(),
                outcome: ToolOutcome::Ok,
            },
        )
    };
    checker.observe(&served()).unwrap();
    checker.observe(&served()).unwrap();
    assert_eq!(
        checker.observe(&served()).unwrap_err().invariant,
        "tool_calls_within_cap"
    );
}

#[test]
fn model_calls_past_max_iterations_are_caught() {
    let (mut checker, mut seq) = fresh();
    for call in 1..=3 {
        seq += 1;
        checker
            .observe(&commit(seq, 2_000, usage(call, 1)))
            .unwrap();
    }
    let err = checker
        .observe(&commit(seq + 1, 2_000, usage(4, 1)))
        .unwrap_err();
    assert_eq!(err.invariant, "model_calls_within_iterations");
    // The provider's own count.
    let (mut checker, _) = fresh();
    let served = || {
        record(
            2_000,
            TraceEvent::ModelCallServed {
                api: WireApi::Openai,
                host: "llm.sim.internal:8080".into(),
                agent: Some(1),
                run: Some(1),
                round: 0,
                reply: ModelReply::Answer,
                // The built-in wakeup prompt of run 1, queued by its timer without a reason.
                wake: Some(vigil_world::trace::WakeSeen {
                    source: "timer".into(),
                    reason: "(none given)".into(),
                }),
                broken: Vec::new(),
                results_seen: Vec::new(),
                error_body: None,
                answer: None,
            },
        )
    };
    for _ in 0..3 {
        checker.observe(&served()).unwrap();
    }
    assert_eq!(
        checker.observe(&served()).unwrap_err().invariant,
        "model_calls_within_iterations"
    );
}

#[test]
fn a_model_call_after_the_budget_is_spent_is_caught() {
    let (mut checker, seq) = fresh();
    // 60 then 70 µ$: the second call crossed the budget of 100, which is allowed...
    checker
        .observe(&commit(seq + 1, 2_000, usage(1, 60)))
        .unwrap();
    checker
        .observe(&commit(seq + 2, 2_000, usage(2, 70)))
        .unwrap();
    // ...but no call may start once it is spent.
    let err = checker
        .observe(&commit(seq + 3, 2_000, usage(3, 1)))
        .unwrap_err();
    assert_eq!(err.invariant, "budget_overshoot_bounded");
}

fn resting(minutes: u64) -> RunReport {
    RunReport {
        pause_minutes: Some(minutes),
        answer_excerpt: Some("resting".into()),
        tool_calls: 1,
        ..RunReport::default()
    }
}

fn commit_end(first_seq: u64, last_seq: u64) -> TraceRecord {
    record(
        2_000,
        TraceEvent::CommitEnd {
            first_seq,
            last_seq,
        },
    )
}

#[test]
fn a_rest_not_committed_with_its_run_end_is_caught() {
    // Good: the run's end and its rest in one commit.
    let (mut checker, seq) = fresh();
    let rest = |until_ms| EventKind::AgentPaused {
        agent: AgentId(1),
        until_ms: Some(until_ms),
        by: PausedBy::Agent,
    };
    checker
        .observe(&commit(
            seq + 1,
            2_000,
            finished(StopReason::PauseHeartbeats, resting(5)),
        ))
        .unwrap();
    checker
        .observe(&commit(seq + 2, 2_000, rest(2_000 + 5 * 60_000)))
        .unwrap();
    checker.observe(&commit_end(seq + 1, seq + 2)).unwrap();
    // Bad: the commit ends without the rest.
    let (mut checker, seq) = fresh();
    checker
        .observe(&commit(
            seq + 1,
            2_000,
            finished(StopReason::PauseHeartbeats, resting(5)),
        ))
        .unwrap();
    let err = checker.observe(&commit_end(seq + 1, seq + 1)).unwrap_err();
    assert_eq!(err.invariant, "rest_durable_with_run_end");
    // Bad: a rest nobody asked for rides on a run's end.
    let (mut checker, seq) = fresh();
    let plain = RunReport {
        answer_excerpt: Some("done".into()),
        ..RunReport::default()
    };
    checker
        .observe(&commit(
            seq + 1,
            2_000,
            finished(StopReason::EndTurn, plain),
        ))
        .unwrap();
    let err = checker
        .observe(&commit(seq + 2, 2_000, rest(2_000 + 2 * 60_000)))
        .unwrap_err();
    assert_eq!(err.invariant, "rest_durable_with_run_end");
    // Bad: a power cut left the run's end on disk but not its rest (one commit, recovered as
    // an unreported tail).
    let (mut checker, seq) = fresh();
    checker
        .observe(&record(
            2_000,
            TraceEvent::Crashed {
                during_write: true,
                pending_ops: 1,
                kept_ops: 1,
                torn_ops: 0,
                lost_bytes: 0,
            },
        ))
        .unwrap();
    let tail = match commit(
        seq + 1,
        2_000,
        finished(StopReason::PauseHeartbeats, resting(5)),
    )
    .event
    {
        TraceEvent::Committed { event } => event,
        _ => unreachable!(),
    };
    // The digests of the log the checker knows, plus the tail's.
    let mut digests = checker_log_digests();
    digests.push((tail.seq, vigil_world::trace::event_digest(&tail)));
    let err = checker
        .observe(&record(
            3_000,
            TraceEvent::Recovered {
                head_seq: tail.seq,
                digests,
                unreported: vec![tail],
            },
        ))
        .unwrap_err();
    assert_eq!(err.invariant, "rest_durable_with_run_end");
}

/// The (seq, digest) pairs of the events [`fresh`] commits.
fn checker_log_digests() -> Vec<(u64, u64)> {
    checker_records()
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::Committed { event } => {
                Some((event.seq, vigil_world::trace::event_digest(event)))
            }
            _ => None,
        })
        .collect()
}

/// The records [`fresh`] feeds its checker.
fn checker_records() -> Vec<TraceRecord> {
    let mut llm = vigil::engine::llm_spec::LlmSpec::new("http://10.77.0.2:8080", "sim-model-1");
    llm.max_iterations = 3;
    llm.tool_calls_max = 2;
    let mut spec = AgentSpec::with_interval("a", Some(60_000));
    spec.adapter = vigil::engine::agent::AdapterSpec::Llm(llm.into());
    spec.limits.daily_budget_usd = Some(vigil::engine::usage::MicroUsd(100));
    vec![
        commit(
            1,
            1_000,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "a".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::of("a"),
                // Created at 1 s on a 1-minute timer: its first slot (no jitter).
                first_fire_at_ms: Some(61_000),
            },
        ),
        commit(
            2,
            1_000,
            EventKind::WakeupQueued {
                wakeup: vigil::engine::wakeup::WakeupId(1),
                agent: AgentId(1),
                source: vigil::engine::wakeup::WakeupSource::Timer,
                requested_by: None,
                trigger_detail: None,
                reason: String::new(),
                payload: serde_json::Value::Null,
                task_key: None,
                idempotency_key: None,
                run: RunId(1),
            },
        ),
        commit(
            3,
            1_000,
            EventKind::RunStarted {
                run: RunId(1),
                agent: AgentId(1),
                run_number: 0,
                day: vigil::engine::daily_cap::LocalDay::of(1_000, "UTC"),
            },
        ),
    ]
}
