//! Unit tests of the engine's decisions. The proptest model test lives in
//! `tests/engine_model.rs`.

use super::agent::{AgentId, AgentSpec, AgentStatus};
use super::event::{Event, EventKind};
use super::run::{RunEnd, RunId, RunStatus, CONTROL_PLANE_RESTART};
use super::tenant::{Principal, TokenHash};
use super::wakeup::{
    RefusalReason, WakeupOutcome, WakeupRequest, WakeupSource, IDEMPOTENCY_TTL_MS,
};
use super::{Command, Decision, Engine, Refusal};

/// Applies what `command` decides; panics on a refusal.
fn run(engine: &mut Engine, command: Command, now_ms: u64) -> Decision {
    let decision = engine.decide(&command, now_ms).expect("command accepted");
    decision.events.iter().for_each(|e| engine.apply(e));
    decision
}

fn with_tenant() -> Engine {
    let mut engine = Engine::new();
    run(
        &mut engine,
        Command::EnsureTenant {
            tenant: "t".into(),
            operator_token_hash: TokenHash::of("op"),
        },
        0,
    );
    engine
}

fn create(engine: &mut Engine, name: &str, interval_ms: Option<u64>, now_ms: u64) -> AgentId {
    let decision = run(
        engine,
        Command::CreateAgent {
            tenant: "t".into(),
            spec: AgentSpec::with_interval(name, interval_ms),
            token_hash: TokenHash::of(name),
        },
        now_ms,
    );
    match decision.events[0].kind {
        EventKind::AgentCreated { agent, .. } => agent,
        _ => panic!("expected agent_created"),
    }
}

fn wake(
    engine: &mut Engine,
    agent: AgentId,
    source: WakeupSource,
    key: Option<&str>,
    now_ms: u64,
) -> Decision {
    let mut request = WakeupRequest::new(source, format!("{source:?}"));
    request.task_key = key.map(str::to_string);
    run(engine, Command::Wake { agent, request }, now_ms)
}

fn outcome(decision: &Decision) -> WakeupOutcome {
    decision.wakeup.clone().expect("a wake answers").outcome
}

fn finish(engine: &mut Engine, run_id: RunId, now_ms: u64) -> Decision {
    run(
        engine,
        Command::FinishRun {
            run: run_id,
            end: RunEnd::new(RunStatus::Succeeded, "ok"),
        },
        now_ms,
    )
}

fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.type_name()).collect()
}

#[test]
fn decide_changes_nothing_until_apply() {
    let engine = with_tenant();
    let before = engine.clone();
    let decision = engine
        .decide(
            &Command::CreateAgent {
                tenant: "t".into(),
                spec: AgentSpec::with_interval("a", None),
                token_hash: TokenHash::of("a"),
            },
            0,
        )
        .unwrap();
    assert_eq!(decision.events.len(), 1);
    assert_eq!(decision.events[0].seq, 2);
    assert_eq!(engine, before);
}

#[test]
fn tokens_resolve_to_their_principal() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    assert_eq!(
        engine.principal(&TokenHash::of("op")),
        Some(&Principal::Operator { tenant: "t".into() })
    );
    assert_eq!(
        engine.principal(&TokenHash::of("a")),
        Some(&Principal::Agent {
            tenant: "t".into(),
            agent: a
        })
    );
    assert_eq!(engine.principal(&TokenHash::of("nobody")), None);
    // Re-configuring the operator token replaces the old one.
    run(
        &mut engine,
        Command::EnsureTenant {
            tenant: "t".into(),
            operator_token_hash: TokenHash::of("op2"),
        },
        1,
    );
    assert_eq!(engine.principal(&TokenHash::of("op")), None);
    assert!(engine.principal(&TokenHash::of("op2")).is_some());
    // The same configuration again decides nothing.
    let again = engine
        .decide(
            &Command::EnsureTenant {
                tenant: "t".into(),
                operator_token_hash: TokenHash::of("op2"),
            },
            2,
        )
        .unwrap();
    assert!(again.events.is_empty());
}

#[test]
fn duplicate_names_are_refused_within_a_tenant_only() {
    let mut engine = with_tenant();
    create(&mut engine, "a", None, 0);
    let spec = AgentSpec::with_interval("a", None);
    assert_eq!(
        engine.decide(
            &Command::CreateAgent {
                tenant: "t".into(),
                spec: spec.clone(),
                token_hash: TokenHash::of("x")
            },
            0
        ),
        Err(Refusal::NameTaken("a".into()))
    );
    run(
        &mut engine,
        Command::EnsureTenant {
            tenant: "u".into(),
            operator_token_hash: TokenHash::of("op-u"),
        },
        0,
    );
    assert!(engine
        .decide(
            &Command::CreateAgent {
                tenant: "u".into(),
                spec,
                token_hash: TokenHash::of("x")
            },
            0
        )
        .is_ok());
}

#[test]
fn a_wake_on_an_idle_agent_starts_a_run_at_once() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let decision = wake(&mut engine, a, WakeupSource::OnDemand, None, 10);
    assert_eq!(types(&decision.events), ["wakeup_queued", "run_started"]);
    let WakeupOutcome::Queued { run } = outcome(&decision) else {
        panic!()
    };
    assert_eq!(engine.run(run).unwrap().status, RunStatus::Running);
    assert_eq!(engine.agent_state(a).unwrap().active_run(), Some(run));
}

#[test]
fn wakeups_for_a_queued_task_key_coalesce_keeping_the_latest_reason() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    wake(&mut engine, a, WakeupSource::OnDemand, Some("k"), 0); // starts running
    let first = wake(&mut engine, a, WakeupSource::Timer, Some("k"), 1);
    let WakeupOutcome::Queued { run } = outcome(&first) else {
        panic!()
    };
    for i in 1..=5 {
        let mut request = WakeupRequest::new(WakeupSource::OnDemand, format!("again {i}"));
        request.task_key = Some("k".into());
        let d = run_wake(&mut engine, a, request, 2);
        assert_eq!(
            outcome(&d),
            WakeupOutcome::Coalesced {
                run,
                coalesced_count: i
            }
        );
    }
    let queued = engine.run(run).unwrap();
    assert_eq!(queued.coalesced_count, 5);
    assert_eq!(queued.reason, "again 5");
    assert_eq!(
        queued.priority,
        WakeupSource::OnDemand.priority(),
        "priority rises to the best wakeup"
    );
    // Another task key queues its own run.
    let other = wake(&mut engine, a, WakeupSource::Timer, Some("other"), 3);
    assert!(matches!(outcome(&other), WakeupOutcome::Queued { .. }));
}

fn run_wake(engine: &mut Engine, agent: AgentId, request: WakeupRequest, now_ms: u64) -> Decision {
    run(engine, Command::Wake { agent, request }, now_ms)
}

#[test]
fn queued_runs_start_by_priority_then_fifo_one_at_a_time() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let busy = wake(&mut engine, a, WakeupSource::Timer, Some("busy"), 0);
    let WakeupOutcome::Queued { run: busy } = outcome(&busy) else {
        panic!()
    };
    let mut queued = Vec::new();
    for (key, source) in [
        ("t1", WakeupSource::Timer),
        ("a1", WakeupSource::Assignment),
        ("o1", WakeupSource::OnDemand),
        ("i1", WakeupSource::Idle),
        ("o2", WakeupSource::OnDemand),
    ] {
        let WakeupOutcome::Queued { run } = outcome(&wake(&mut engine, a, source, Some(key), 1))
        else {
            panic!()
        };
        queued.push((key, run));
    }
    let id = |k: &str| queued.iter().find(|(key, _)| *key == k).unwrap().1;
    let mut order = Vec::new();
    let mut current = busy;
    for t in 2..8 {
        let d = finish(&mut engine, current, t);
        match d.events.iter().find_map(|e| match e.kind {
            EventKind::RunStarted { run, .. } => Some(run),
            _ => None,
        }) {
            Some(next) => {
                order.push(next);
                current = next;
            }
            None => break,
        }
    }
    assert_eq!(
        order,
        vec![id("o1"), id("o2"), id("a1"), id("t1"), id("i1")]
    );
}

#[test]
fn refusals_are_recorded_with_their_reason() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let mut spec = AgentSpec::with_interval("b", None);
    spec.heartbeat.sources = vec![WakeupSource::OnDemand];
    spec.limits.queued_runs_max = 1;
    run(
        &mut engine,
        Command::CreateAgent {
            tenant: "t".into(),
            spec,
            token_hash: TokenHash::of("b"),
        },
        0,
    );
    let b = engine.agent_named("t", "b").unwrap().id;

    let d = wake(&mut engine, b, WakeupSource::Timer, None, 1);
    assert_eq!(types(&d.events), ["wakeup_refused"]);
    assert_eq!(
        outcome(&d),
        WakeupOutcome::Refused {
            refusal: RefusalReason::DisabledSource
        }
    );

    wake(&mut engine, b, WakeupSource::OnDemand, Some("1"), 1); // running
    wake(&mut engine, b, WakeupSource::OnDemand, Some("2"), 1); // queued: the queue is full
    let full = wake(&mut engine, b, WakeupSource::OnDemand, Some("3"), 1);
    assert_eq!(
        outcome(&full),
        WakeupOutcome::Refused {
            refusal: RefusalReason::QueueFull
        }
    );
    let joins = wake(&mut engine, b, WakeupSource::OnDemand, Some("2"), 1);
    assert!(
        matches!(outcome(&joins), WakeupOutcome::Coalesced { .. }),
        "a full queue still coalesces"
    );

    run(
        &mut engine,
        Command::PauseAgent {
            agent: a,
            minutes: None,
        },
        2,
    );
    let paused = wake(&mut engine, a, WakeupSource::OnDemand, None, 3);
    assert_eq!(
        outcome(&paused),
        WakeupOutcome::Refused {
            refusal: RefusalReason::Paused
        }
    );
    run(&mut engine, Command::TerminateAgent { agent: a }, 4);
    let gone = wake(&mut engine, a, WakeupSource::OnDemand, None, 5);
    assert_eq!(
        outcome(&gone),
        WakeupOutcome::Refused {
            refusal: RefusalReason::Terminated
        }
    );
    assert_eq!(
        engine.decide(&Command::ResumeAgent { agent: a }, 6),
        Err(Refusal::AgentTerminated(a))
    );
}

#[test]
fn pausing_cancels_queued_and_running_runs_and_resume_takes_wakeups_again() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    wake(&mut engine, a, WakeupSource::OnDemand, Some("1"), 0);
    wake(&mut engine, a, WakeupSource::OnDemand, Some("2"), 0);
    let d = run(
        &mut engine,
        Command::PauseAgent {
            agent: a,
            minutes: None,
        },
        1,
    );
    assert_eq!(
        types(&d.events),
        ["agent_paused", "run_finished", "run_finished"]
    );
    assert!(engine
        .agent_state(a)
        .unwrap()
        .runs()
        .all(|r| r.status == RunStatus::Cancelled));
    assert_eq!(engine.agent(a).unwrap().status, AgentStatus::Paused);
    assert!(engine
        .decide(
            &Command::PauseAgent {
                agent: a,
                minutes: None
            },
            2
        )
        .unwrap()
        .events
        .is_empty());
    run(&mut engine, Command::ResumeAgent { agent: a }, 3);
    let d = wake(&mut engine, a, WakeupSource::OnDemand, None, 4);
    assert_eq!(types(&d.events), ["wakeup_queued", "run_started"]);
}

#[test]
fn idempotency_keys_replay_the_original_answer_for_24_hours() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let mut request = WakeupRequest::new(WakeupSource::OnDemand, "x");
    request.idempotency_key = Some("key-1".into());
    let first = run(
        &mut engine,
        Command::Wake {
            agent: a,
            request: request.clone(),
        },
        1_000,
    );
    assert!(!first.replayed);
    let again = engine
        .decide(
            &Command::Wake {
                agent: a,
                request: request.clone(),
            },
            1_000 + IDEMPOTENCY_TTL_MS - 1,
        )
        .unwrap();
    assert!(again.replayed);
    assert!(again.events.is_empty());
    assert_eq!(again.wakeup, first.wakeup);
    // A wall clock that went back still honours the key.
    assert!(
        engine
            .decide(
                &Command::Wake {
                    agent: a,
                    request: request.clone()
                },
                0
            )
            .unwrap()
            .replayed
    );
    // After the TTL the key is new again.
    let later = engine
        .decide(
            &Command::Wake { agent: a, request },
            1_000 + IDEMPOTENCY_TTL_MS,
        )
        .unwrap();
    assert!(!later.replayed);
    // The first run is still running, so the new wakeup queues a run behind it.
    assert_eq!(types(&later.events), ["wakeup_queued"]);
}

#[test]
fn recovery_fails_running_runs_and_requeues_each_once() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let d = wake(&mut engine, a, WakeupSource::Assignment, Some("k"), 0);
    let WakeupOutcome::Queued { run: first } = outcome(&d) else {
        panic!()
    };
    let d = run(&mut engine, Command::RecoverRuns, 10);
    assert_eq!(
        types(&d.events),
        ["run_finished", "run_requeued", "run_started"]
    );
    assert_eq!(engine.run(first).unwrap().detail, CONTROL_PLANE_RESTART);
    let retry = engine.agent_state(a).unwrap().active_run().unwrap();
    assert_eq!(engine.run(retry).unwrap().retry_of, Some(first));
    assert_eq!(engine.run(retry).unwrap().source, WakeupSource::Assignment);
    // A retry that is interrupted again fails for good.
    let d = run(&mut engine, Command::RecoverRuns, 20);
    assert_eq!(types(&d.events), ["run_finished"]);
    assert_eq!(engine.agent_state(a).unwrap().active_run(), None);
    // Nothing left to recover.
    assert!(engine
        .decide(&Command::RecoverRuns, 30)
        .unwrap()
        .events
        .is_empty());
}

#[test]
fn cancel_and_finish_refuse_runs_in_the_wrong_state() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let WakeupOutcome::Queued { run: r1 } =
        outcome(&wake(&mut engine, a, WakeupSource::OnDemand, Some("1"), 0))
    else {
        panic!()
    };
    let WakeupOutcome::Queued { run: r2 } =
        outcome(&wake(&mut engine, a, WakeupSource::OnDemand, Some("2"), 0))
    else {
        panic!()
    };
    let end = RunEnd::new(RunStatus::Succeeded, "");
    assert_eq!(
        engine.decide(
            &Command::FinishRun {
                run: r2,
                end: end.clone()
            },
            1
        ),
        Err(Refusal::RunNotRunning(r2))
    );
    let d = run(&mut engine, Command::CancelRun { run: r2 }, 1);
    assert_eq!(types(&d.events), ["run_finished"]);
    assert_eq!(
        engine.decide(&Command::CancelRun { run: r2 }, 2),
        Err(Refusal::RunAlreadyFinished(r2, RunStatus::Cancelled))
    );
    let d = run(&mut engine, Command::CancelRun { run: r1 }, 3);
    assert_eq!(types(&d.events), ["run_finished"]);
    assert_eq!(
        engine.decide(&Command::CancelRun { run: RunId(99) }, 4),
        Err(Refusal::UnknownRun(RunId(99)))
    );
}

#[test]
fn timers_fire_on_their_slots_and_wake_through_the_coordinator() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", Some(1_000), 0);
    let b = create(&mut engine, "b", Some(3_000), 0);
    // Each grid is offset by its agent's jitter, less than one interval.
    let first_a = engine.agent(a).unwrap().next_fire_at_ms.unwrap();
    let first_b = engine.agent(b).unwrap().next_fire_at_ms.unwrap();
    assert!((1_000..2_000).contains(&first_a) && (3_000..6_000).contains(&first_b));
    assert_eq!(engine.next_deadline_ms(0), Some(first_a));
    assert!(engine
        .decide(&Command::FireDueTimers, first_a - 1)
        .unwrap()
        .events
        .is_empty());
    for now in (0..=6_400).step_by(50) {
        let d = run(&mut engine, Command::FireDueTimers, now);
        for event in &d.events {
            assert!(event.seq <= engine.last_seq());
        }
    }
    // One fire per slot up to 6,400 ms: the grid's slots are its first plus whole intervals.
    let slots_until = |first: u64, interval: u64| (6_400 - first) / interval + 1;
    let fires_a = slots_until(first_a, 1_000);
    assert!(fires_a >= 5, "{first_a}");
    assert_eq!(engine.agent(a).unwrap().timer_fires, fires_a);
    assert_eq!(engine.agent(b).unwrap().timer_fires, slots_until(first_b, 3_000));
    // Runs never finished, so later timer wakeups coalesced onto one queued run per agent: the
    // first fire started a run, the second queued one, the rest joined it.
    let queued: Vec<_> = engine.agent_state(a).unwrap().queued_runs().collect();
    assert_eq!(queued.len(), 1);
    assert_eq!(engine.run(queued[0]).unwrap().coalesced_count, fires_a - 2);
}

#[test]
fn replaying_the_log_rebuilds_the_same_state() {
    let mut engine = with_tenant();
    let mut log: Vec<Event> = Vec::new();
    let mut record = |engine: &mut Engine, command: Command, now_ms: u64| {
        let d = run(engine, command, now_ms);
        log.extend(d.events);
    };
    // The tenant's event is the log's first.
    let mut replay_start = Engine::new();
    let first = replay_start
        .decide(
            &Command::EnsureTenant {
                tenant: "t".into(),
                operator_token_hash: TokenHash::of("op"),
            },
            0,
        )
        .unwrap();
    let a_spec = AgentSpec::with_interval("a", Some(1_000));
    record(
        &mut engine,
        Command::CreateAgent {
            tenant: "t".into(),
            spec: a_spec,
            token_hash: TokenHash::of("a"),
        },
        0,
    );
    record(&mut engine, Command::FireDueTimers, 1_000);
    record(
        &mut engine,
        Command::Wake {
            agent: AgentId(1),
            request: WakeupRequest::new(WakeupSource::OnDemand, "x"),
        },
        1_500,
    );
    record(
        &mut engine,
        Command::FinishRun {
            run: RunId(1),
            end: RunEnd::new(RunStatus::Failed, "boom"),
        },
        2_000,
    );
    record(&mut engine, Command::FireDueTimers, 7_500);
    record(&mut engine, Command::RecoverRuns, 8_000);
    first.events.iter().for_each(|e| replay_start.apply(e));
    log.iter().for_each(|e| replay_start.apply(e));
    assert_eq!(replay_start, engine);
}

#[test]
#[should_panic(expected = "out of order")]
fn applying_out_of_order_is_a_bug() {
    let mut engine = Engine::new();
    engine.apply(&Event {
        seq: 2,
        at_ms: 0,
        tenant: "t".into(),
        kind: EventKind::TenantCreated {
            operator_token_hash: TokenHash::of("x"),
        },
    });
}

// ---- the Heart: timed pauses and the daily cap ----

const MINUTE: u64 = 60_000;

fn create_with(engine: &mut Engine, spec: AgentSpec, now_ms: u64) -> AgentId {
    let name = spec.name.clone();
    run(
        engine,
        Command::CreateAgent {
            tenant: "t".into(),
            token_hash: TokenHash::of(&name),
            spec,
        },
        now_ms,
    );
    engine.agent_named("t", &name).unwrap().id
}

#[test]
fn a_timed_pause_refuses_timer_and_idle_and_cancels_the_running_run() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let WakeupOutcome::Queued { run: running } =
        outcome(&wake(&mut engine, a, WakeupSource::OnDemand, Some("x"), 0))
    else {
        panic!()
    };
    let WakeupOutcome::Queued { run: timer_run } =
        outcome(&wake(&mut engine, a, WakeupSource::Timer, Some("t"), 0))
    else {
        panic!()
    };
    let WakeupOutcome::Queued { run: user_run } =
        outcome(&wake(&mut engine, a, WakeupSource::OnDemand, Some("u"), 0))
    else {
        panic!()
    };
    let d = run(
        &mut engine,
        Command::PauseHeartbeats {
            agent: a,
            minutes: Some(10),
        },
        1_000,
    );
    assert_eq!(
        types(&d.events),
        [
            "agent_paused",
            "run_finished",
            "run_finished",
            "run_started"
        ]
    );
    assert_eq!(engine.run(running).unwrap().status, RunStatus::Cancelled);
    assert_eq!(engine.run(timer_run).unwrap().status, RunStatus::Cancelled);
    // On-demand work goes on by default.
    assert_eq!(engine.run(user_run).unwrap().status, RunStatus::Running);
    assert_eq!(
        engine.agent(a).unwrap().paused_until_ms,
        Some(1_000 + 10 * MINUTE)
    );
    for source in [WakeupSource::Timer, WakeupSource::Idle] {
        let d = wake(&mut engine, a, source, None, 2_000);
        assert_eq!(
            outcome(&d),
            WakeupOutcome::Refused {
                refusal: RefusalReason::Paused
            }
        );
    }
    assert!(matches!(
        outcome(&wake(
            &mut engine,
            a,
            WakeupSource::OnDemand,
            Some("v"),
            2_000
        )),
        WakeupOutcome::Queued { .. }
    ));
    // A backward jump keeps the pause; the instant itself ends it (a forward jump past it too).
    let back = wake(&mut engine, a, WakeupSource::Timer, None, 0);
    assert_eq!(
        outcome(&back),
        WakeupOutcome::Refused {
            refusal: RefusalReason::Paused
        }
    );
    let at_end = wake(
        &mut engine,
        a,
        WakeupSource::Timer,
        None,
        1_000 + 10 * MINUTE,
    );
    assert!(matches!(outcome(&at_end), WakeupOutcome::Queued { .. }));
}

#[test]
fn a_timed_pause_survives_a_crash() {
    let mut engine = Engine::new();
    let mut log: Vec<Event> = Vec::new();
    let mut step = |engine: &mut Engine, command: Command, now_ms: u64| {
        log.extend(run(engine, command, now_ms).events);
    };
    step(
        &mut engine,
        Command::EnsureTenant {
            tenant: "t".into(),
            operator_token_hash: TokenHash::of("op"),
        },
        0,
    );
    step(
        &mut engine,
        Command::CreateAgent {
            tenant: "t".into(),
            spec: AgentSpec::with_interval("a", Some(MINUTE)),
            token_hash: TokenHash::of("a"),
        },
        0,
    );
    let a = engine.agent_named("t", "a").unwrap().id;
    step(
        &mut engine,
        Command::PauseHeartbeats {
            agent: a,
            minutes: None,
        },
        5_000,
    );
    step(&mut engine, Command::FireDueTimers, 5_000 + MINUTE);
    // Replaying the log (what a restart does) restores the pause, which still refuses timers.
    let mut replayed = Engine::new();
    log.iter().for_each(|e| replayed.apply(e));
    assert_eq!(replayed, engine);
    assert_eq!(
        replayed.agent(a).unwrap().paused_until_ms,
        Some(5_000 + 2 * MINUTE)
    );
    let d = replayed
        .decide(&Command::FireDueTimers, 5_000 + 2 * MINUTE - 1)
        .unwrap();
    assert_eq!(types(&d.events), ["timer_fired", "wakeup_refused"]);
}

#[test]
fn pause_heartbeats_clamps_and_operator_pauses_are_bounded() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    run(
        &mut engine,
        Command::PauseHeartbeats {
            agent: a,
            minutes: Some(0),
        },
        0,
    );
    assert_eq!(engine.agent(a).unwrap().paused_until_ms, Some(MINUTE));
    run(
        &mut engine,
        Command::PauseHeartbeats {
            agent: a,
            minutes: Some(61),
        },
        0,
    );
    assert_eq!(engine.agent(a).unwrap().paused_until_ms, Some(60 * MINUTE));
    for bad in [0, super::pause::OPERATOR_PAUSE_MINUTES_MAX + 1] {
        let refused = engine.decide(
            &Command::PauseAgent {
                agent: a,
                minutes: Some(bad),
            },
            0,
        );
        assert!(
            matches!(refused, Err(Refusal::InvalidField(ref f)) if f.field == "minutes"),
            "{refused:?}"
        );
    }
    run(&mut engine, Command::ResumeAgent { agent: a }, 1);
    assert_eq!(engine.agent(a).unwrap().paused_until_ms, None);
    assert!(matches!(
        outcome(&wake(&mut engine, a, WakeupSource::Timer, None, 2)),
        WakeupOutcome::Queued { .. }
    ));
}

#[test]
fn the_daily_cap_counts_starts_per_local_day_and_never_reopens_a_day() {
    let mut engine = with_tenant();
    let mut spec = AgentSpec::with_interval("capped", None);
    spec.limits.daily_cap = Some(2);
    spec.time_zone = "Asia/Tokyo".into();
    // 2026-05-01T12:00:00Z is 21:00 in Tokyo; 15:00Z is midnight there.
    let noon_utc: u64 = 1_777_636_800_000;
    let a = create_with(&mut engine, spec, noon_utc);
    let finish_active = |engine: &mut Engine, now| {
        let active = engine.agent_state(a).unwrap().active_run().unwrap();
        finish(engine, active, now);
    };
    assert!(matches!(
        outcome(&wake(
            &mut engine,
            a,
            WakeupSource::OnDemand,
            Some("1"),
            noon_utc
        )),
        WakeupOutcome::Queued { .. }
    ));
    assert!(matches!(
        outcome(&wake(
            &mut engine,
            a,
            WakeupSource::Timer,
            Some("2"),
            noon_utc
        )),
        WakeupOutcome::Queued { .. }
    ));
    // One running and one queued use up the cap of 2.
    let capped = wake(
        &mut engine,
        a,
        WakeupSource::Assignment,
        Some("3"),
        noon_utc,
    );
    assert_eq!(
        outcome(&capped),
        WakeupOutcome::Refused {
            refusal: RefusalReason::DailyCap
        }
    );
    // Joining the queued run costs no invocation.
    assert!(matches!(
        outcome(&wake(
            &mut engine,
            a,
            WakeupSource::Timer,
            Some("2"),
            noon_utc
        )),
        WakeupOutcome::Coalesced { .. }
    ));
    finish_active(&mut engine, noon_utc + 1);
    finish_active(&mut engine, noon_utc + 2);
    let still = wake(&mut engine, a, WakeupSource::OnDemand, None, noon_utc + 3);
    assert_eq!(
        outcome(&still),
        WakeupOutcome::Refused {
            refusal: RefusalReason::DailyCap
        }
    );
    // After local midnight (15:00 UTC) the cap is fresh.
    let midnight_tokyo = noon_utc + 3 * 60 * MINUTE;
    assert!(matches!(
        outcome(&wake(
            &mut engine,
            a,
            WakeupSource::OnDemand,
            None,
            midnight_tokyo
        )),
        WakeupOutcome::Queued { .. }
    ));
    finish_active(&mut engine, midnight_tokyo + 1);
    assert!(matches!(
        outcome(&wake(
            &mut engine,
            a,
            WakeupSource::OnDemand,
            None,
            midnight_tokyo + 2
        )),
        WakeupOutcome::Queued { .. }
    ));
    finish_active(&mut engine, midnight_tokyo + 3);
    // The clock jumps back into the previous day: the new day stays counted (2 used), and the
    // old day is not re-opened.
    let back = wake(&mut engine, a, WakeupSource::OnDemand, None, noon_utc);
    assert_eq!(
        outcome(&back),
        WakeupOutcome::Refused {
            refusal: RefusalReason::DailyCap
        }
    );
}

#[test]
fn a_timer_grid_is_offset_by_the_agents_jitter() {
    let mut engine = with_tenant();
    let interval_ms = 30 * MINUTE;
    let first_slots: Vec<u64> = (0..20)
        .map(|i| {
            let id = create(&mut engine, &format!("a{i}"), Some(interval_ms), 0);
            engine.agent(id).unwrap().next_fire_at_ms.unwrap()
        })
        .collect();
    assert!(first_slots
        .iter()
        .all(|&s| (interval_ms..=interval_ms + super::schedule::JITTER_MS_MAX).contains(&s)));
    let mut distinct = first_slots.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() >= 18,
        "agents created alike fire apart: {first_slots:?}"
    );
}

// ---- the circuit breaker ----

fn fail_active(
    engine: &mut Engine,
    agent: AgentId,
    cause: super::breaker::FailureCause,
    now_ms: u64,
) -> Decision {
    let active = engine
        .agent_state(agent)
        .unwrap()
        .active_run()
        .expect("a running run");
    run(
        engine,
        Command::FinishRun {
            run: active,
            end: RunEnd::new(RunStatus::Failed, "boom").caused_by(cause),
        },
        now_ms,
    )
}

fn breaker(engine: &Engine, agent: AgentId) -> super::breaker::BreakerState {
    engine.agent(agent).unwrap().breaker
}

#[test]
fn the_breaker_opens_after_k_failures_probes_once_and_doubles_its_cooldown() {
    use super::breaker::{BreakerState, FailureCause};
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let cooldown = super::breaker::COOLDOWN_MS_DEFAULT;
    // Two LLM failures and a tool failure do not open it: the triggers count apart.
    for (i, cause) in [FailureCause::Llm, FailureCause::Tool, FailureCause::Llm]
        .into_iter()
        .enumerate()
    {
        wake(&mut engine, a, WakeupSource::OnDemand, None, i as u64);
        fail_active(&mut engine, a, cause, i as u64);
    }
    assert_eq!(
        breaker(&engine, a),
        BreakerState::Closed {
            llm_failures: 2,
            tool_failures: 1
        }
    );
    // A queued run is waiting when the third LLM failure opens the breaker: it is cancelled.
    wake(&mut engine, a, WakeupSource::OnDemand, Some("x"), 10);
    wake(&mut engine, a, WakeupSource::OnDemand, Some("y"), 10);
    let d = fail_active(&mut engine, a, FailureCause::Llm, 10);
    assert_eq!(
        types(&d.events),
        ["run_finished", "breaker_opened", "run_finished"]
    );
    assert_eq!(
        breaker(&engine, a),
        BreakerState::Open {
            until_ms: 10 + cooldown,
            cooldown_ms: cooldown
        }
    );
    let refused = wake(&mut engine, a, WakeupSource::Timer, None, 10 + cooldown - 1);
    assert_eq!(
        outcome(&refused),
        WakeupOutcome::Refused {
            refusal: RefusalReason::BreakerOpen
        }
    );
    // After the cooldown: exactly one probe.
    let probe = wake(&mut engine, a, WakeupSource::Timer, None, 10 + cooldown);
    assert_eq!(
        types(&probe.events),
        ["breaker_half_opened", "wakeup_queued", "run_started"]
    );
    let second = wake(
        &mut engine,
        a,
        WakeupSource::OnDemand,
        Some("z"),
        10 + cooldown,
    );
    assert_eq!(
        outcome(&second),
        WakeupOutcome::Refused {
            refusal: RefusalReason::BreakerOpen
        }
    );
    // The probe fails: open again for twice as long.
    let t = 20 + cooldown;
    let d = fail_active(&mut engine, a, FailureCause::Tool, t);
    assert_eq!(types(&d.events), ["run_finished", "breaker_opened"]);
    assert_eq!(
        breaker(&engine, a),
        BreakerState::Open {
            until_ms: t + 2 * cooldown,
            cooldown_ms: 2 * cooldown
        }
    );
    // The next probe succeeds: closed, counters at zero.
    wake(
        &mut engine,
        a,
        WakeupSource::OnDemand,
        None,
        t + 2 * cooldown,
    );
    let active = engine.agent_state(a).unwrap().active_run().unwrap();
    let d = finish(&mut engine, active, t + 2 * cooldown + 1);
    assert_eq!(types(&d.events), ["run_finished", "breaker_closed"]);
    assert_eq!(breaker(&engine, a), BreakerState::default());
}

#[test]
fn a_cancelled_probe_leaves_the_breaker_half_open_and_operators_can_reset_it() {
    use super::breaker::{BreakerState, FailureCause};
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    for t in 0..3 {
        wake(&mut engine, a, WakeupSource::OnDemand, None, t);
        fail_active(&mut engine, a, FailureCause::Llm, t);
    }
    let cooldown = super::breaker::COOLDOWN_MS_DEFAULT;
    wake(&mut engine, a, WakeupSource::OnDemand, None, 2 + cooldown);
    let probe = engine.agent_state(a).unwrap().active_run().unwrap();
    run(&mut engine, Command::CancelRun { run: probe }, 3 + cooldown);
    assert_eq!(
        breaker(&engine, a),
        BreakerState::HalfOpen {
            cooldown_ms: cooldown,
            probe: None
        }
    );
    // A new wakeup becomes the probe.
    let d = wake(&mut engine, a, WakeupSource::OnDemand, None, 4 + cooldown);
    assert_eq!(types(&d.events), ["wakeup_queued", "run_started"]);
    let d = run(
        &mut engine,
        Command::ResetBreaker { agent: a },
        5 + cooldown,
    );
    assert_eq!(types(&d.events), ["breaker_reset"]);
    assert_eq!(breaker(&engine, a), BreakerState::default());
    assert!(engine
        .decide(&Command::ResetBreaker { agent: a }, 6 + cooldown)
        .unwrap()
        .events
        .is_empty());
}

#[test]
fn a_requeued_run_keeps_its_payload_and_a_short_rest_never_cuts_a_longer_pause() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let mut request = WakeupRequest::new(WakeupSource::OnDemand, "x");
    request.payload = serde_json::json!({"ticket": 42});
    run(&mut engine, Command::Wake { agent: a, request }, 0);
    run(&mut engine, Command::RecoverRuns, 1);
    let retry = engine.agent_state(a).unwrap().active_run().unwrap();
    assert_eq!(
        engine.run(retry).unwrap().payload,
        serde_json::json!({"ticket": 42})
    );

    run(
        &mut engine,
        Command::PauseAgent {
            agent: a,
            minutes: Some(600),
        },
        10,
    );
    let d = run(
        &mut engine,
        Command::PauseHeartbeats {
            agent: a,
            minutes: Some(1),
        },
        20,
    );
    assert!(d.events.is_empty());
    assert_eq!(
        engine.agent(a).unwrap().paused_until_ms,
        Some(10 + 600 * MINUTE)
    );
    assert_eq!(
        engine.agent(a).unwrap().paused_by,
        Some(super::pause::PausedBy::Operator)
    );
    // A longer rest extends it.
    run(
        &mut engine,
        Command::PauseHeartbeats {
            agent: a,
            minutes: Some(60),
        },
        10 + 590 * MINUTE,
    );
    assert_eq!(
        engine.agent(a).unwrap().paused_until_ms,
        Some(10 + 650 * MINUTE)
    );
}

fn idle_agent(engine: &mut Engine, idle_after_ms: u64, now_ms: u64) -> AgentId {
    let mut spec = AgentSpec::with_interval("idler", None);
    spec.heartbeat.idle_after_ms = Some(idle_after_ms);
    spec.limits.daily_cap = Some(2);
    create_with(engine, spec, now_ms)
}

fn fire_due(engine: &mut Engine, now_ms: u64) -> Vec<&'static str> {
    types(&run(engine, Command::FireDueTimers, now_ms).events)
}

#[test]
fn the_idle_chamber_fires_after_silence_and_input_restarts_it() {
    let mut engine = with_tenant();
    let agent = idle_agent(&mut engine, 60_000, 1_000);
    assert_eq!(engine.agent(agent).unwrap().next_idle_at_ms, Some(61_000));
    assert_eq!(engine.next_deadline_ms(0), Some(61_000));
    assert!(fire_due(&mut engine, 60_999).is_empty(), "not yet due");

    // Input before the deadline moves it, and wakes the agent on demand.
    let mut request = WakeupRequest::new(WakeupSource::OnDemand, "user input");
    request.payload = serde_json::json!({ "text": "hi" });
    let decision = run(&mut engine, Command::Input { agent, request }, 30_000);
    assert_eq!(
        types(&decision.events),
        ["input_received", "wakeup_queued", "run_started"]
    );
    let a = engine.agent(agent).unwrap();
    assert_eq!(a.last_input_at_ms, Some(30_000));
    assert_eq!(a.next_idle_at_ms, Some(90_000));
    let run_id = engine.agent_state(agent).unwrap().active_run().unwrap();
    finish(&mut engine, run_id, 31_000);
    assert!(
        fire_due(&mut engine, 61_000).is_empty(),
        "input restarted the count"
    );

    // Silence: the chamber fires an idle wakeup, and again idle_after later.
    assert_eq!(
        fire_due(&mut engine, 90_000),
        ["idle_fired", "wakeup_queued", "run_started"]
    );
    assert_eq!(engine.agent(agent).unwrap().next_idle_at_ms, Some(150_000));
    let run_id = engine.agent_state(agent).unwrap().active_run().unwrap();
    assert_eq!(engine.run(run_id).unwrap().source, WakeupSource::Idle);
    finish(&mut engine, run_id, 91_000);

    // A day-long forward jump fires once, never the backlog, and the idle wakeup shares the
    // daily cap (2: the input's run and the first idle run spent it).
    let later = 86_400_000 / 2;
    let events = fire_due(&mut engine, later);
    assert_eq!(events, ["idle_fired", "wakeup_refused"]);
    assert_eq!(
        engine.agent(agent).unwrap().next_idle_at_ms,
        Some(later + 60_000)
    );
}

#[test]
fn idle_wakeups_are_refused_while_paused_and_stop_when_terminated() {
    let mut engine = with_tenant();
    let agent = idle_agent(&mut engine, 60_000, 0);
    run(
        &mut engine,
        Command::PauseHeartbeats {
            agent,
            minutes: Some(5),
        },
        1_000,
    );
    let decision = run(&mut engine, Command::FireDueTimers, 60_000);
    let refusal = decision.events.iter().find_map(|e| match &e.kind {
        EventKind::WakeupRefused {
            source, refusal, ..
        } => Some((*source, *refusal)),
        _ => None,
    });
    assert_eq!(refusal, Some((WakeupSource::Idle, RefusalReason::Paused)));
    run(&mut engine, Command::TerminateAgent { agent }, 70_000);
    assert_eq!(engine.agent(agent).unwrap().next_idle_at_ms, None);
    assert_eq!(engine.next_deadline_ms(0), None);
    // Input to a terminated agent is recorded and refused like any wakeup, and arms nothing.
    let request = WakeupRequest::new(WakeupSource::OnDemand, "user input");
    let decision = run(&mut engine, Command::Input { agent, request }, 80_000);
    assert_eq!(
        types(&decision.events),
        ["input_received", "wakeup_refused"]
    );
    assert_eq!(engine.agent(agent).unwrap().next_idle_at_ms, None);
}

#[test]
fn a_replayed_input_records_nothing() {
    let mut engine = with_tenant();
    let agent = idle_agent(&mut engine, 60_000, 0);
    let mut request = WakeupRequest::new(WakeupSource::OnDemand, "user input");
    request.idempotency_key = Some("k".into());
    let first = run(
        &mut engine,
        Command::Input {
            agent,
            request: request.clone(),
        },
        10_000,
    );
    let again = run(&mut engine, Command::Input { agent, request }, 20_000);
    assert!(again.replayed);
    assert!(again.events.is_empty());
    assert_eq!(again.wakeup, first.wakeup);
    assert_eq!(engine.agent(agent).unwrap().next_idle_at_ms, Some(70_000));
}

#[test]
fn liveness_transitions_are_events_and_batches_are_all_or_nothing() {
    use super::liveness::LivenessStatus;
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let b = create(&mut engine, "b", None, 0);
    let said = super::pulse_report::PulseReport::default;
    let status = |e: &Engine, id| e.agent(id).unwrap().liveness.status;
    assert_eq!(status(&engine, a), LivenessStatus::Unknown);

    let decision = run(
        &mut engine,
        Command::MarkOnline {
            agents: vec![(a, said()), (b, said()), (a, said())],
        },
        1_000,
    );
    assert_eq!(types(&decision.events), ["agent_online", "agent_online"]);
    assert_eq!(status(&engine, a), LivenessStatus::Online);
    assert_eq!(engine.agent(a).unwrap().liveness.since_ms, Some(1_000));
    // Pulses from online agents record nothing.
    let decision = run(&mut engine, Command::MarkOnline { agents: vec![(a, said())] }, 2_000);
    assert!(decision.events.is_empty());

    let decision = run(
        &mut engine,
        Command::MarkOffline {
            agents: vec![(a, 30_001, said())],
        },
        40_000,
    );
    assert_eq!(types(&decision.events), ["agent_offline"]);
    assert_eq!(status(&engine, a), LivenessStatus::Offline);
    // Marking an agent that is not online offline again records nothing.
    let decision = run(
        &mut engine,
        Command::MarkOffline {
            agents: vec![(a, 31_000, said())],
        },
        41_000,
    );
    assert!(decision.events.is_empty());

    run(&mut engine, Command::TerminateAgent { agent: b }, 50_000);
    let refused = engine.decide(&Command::MarkOnline { agents: vec![(a, said()), (b, said())] }, 51_000);
    assert_eq!(refused.unwrap_err(), Refusal::AgentTerminated(b));
    assert_eq!(
        status(&engine, a),
        LivenessStatus::Offline,
        "nothing applied"
    );
    let unknown = engine.decide(
        &Command::MarkOnline {
            agents: vec![(AgentId(99), said())],
        },
        51_000,
    );
    assert_eq!(unknown.unwrap_err(), Refusal::UnknownAgent(AgentId(99)));
}

#[test]
fn liveness_events_carry_what_the_agent_s_pulses_said() {
    use super::pulse_report::{PulseReport, ReportedStatus};
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let said = PulseReport {
        status: Some(ReportedStatus::ShuttingDown),
        metadata: serde_json::json!({ "version": "1.2" }).as_object().cloned(),
    };
    let online = run(
        &mut engine,
        Command::MarkOnline {
            agents: vec![(a, said.clone())],
        },
        1_000,
    );
    match &online.events[0].kind {
        EventKind::AgentOnline { report, .. } => assert_eq!(report, &said),
        other => panic!("{other:?}"),
    }
    let offline = run(
        &mut engine,
        Command::MarkOffline {
            agents: vec![(a, 30_001, said.clone())],
        },
        40_000,
    );
    match &offline.events[0].kind {
        EventKind::AgentOffline { report, .. } => assert_eq!(report, &said),
        other => panic!("{other:?}"),
    }
    // An empty report is left out of the stored event, as before reports existed.
    let quiet = run(
        &mut engine,
        Command::MarkOnline {
            agents: vec![(a, PulseReport::default())],
        },
        50_000,
    );
    let json = serde_json::to_value(&quiet.events[0]).unwrap();
    assert!(json.get("report").is_none(), "{json}");
}

fn usage_costing(cost_micro_usd: u64) -> super::usage::Usage {
    super::usage::Usage {
        llm_calls: 1,
        input_tokens: 10,
        output_tokens: 5,
        cost_micro_usd,
        ..Default::default()
    }
}

fn running_run(engine: &mut Engine, agent: AgentId, now_ms: u64) -> RunId {
    match outcome(&wake(engine, agent, WakeupSource::OnDemand, None, now_ms)) {
        WakeupOutcome::Queued { run } => run,
        other => panic!("expected a queued run, got {other:?}"),
    }
}

fn record_usage(engine: &mut Engine, run_id: RunId, cost: u64, now_ms: u64) -> Decision {
    run(
        engine,
        Command::RecordUsage {
            run: run_id,
            usage: usage_costing(cost),
        },
        now_ms,
    )
}

#[test]
fn a_pause_asked_from_inside_a_run_ends_it_succeeded_in_the_same_decision() {
    let mut engine = with_tenant();
    let agent = create(&mut engine, "a", Some(60_000), 0);
    let run_id = running_run(&mut engine, agent, 1_000);
    let report = super::run::RunReport {
        pause_minutes: Some(5),
        history_append: vec![super::history::HistoryMessage::new(
            super::history::Role::Assistant,
            "resting",
        )],
        ..Default::default()
    };
    let end = RunEnd::new(RunStatus::Succeeded, "rest")
        .stopped(super::run::StopReason::PauseHeartbeats)
        .with_report(report);
    let decision = run(&mut engine, Command::FinishRun { run: run_id, end }, 2_000);
    assert_eq!(types(&decision.events), ["run_finished", "agent_paused"]);
    let state = engine.agent_state(agent).unwrap();
    assert_eq!(engine.run(run_id).unwrap().status, RunStatus::Succeeded, "the run is not cancelled");
    assert_eq!(state.agent().paused_until_ms, Some(2_000 + 5 * 60_000));
    assert_eq!(state.history().messages().len(), 1);
    // A failed run's pause request is not honoured: only a run that succeeded rested.
    let other = create(&mut engine, "b", None, 3_000);
    let failed_run = running_run(&mut engine, other, 3_000);
    let end = RunEnd::new(RunStatus::Failed, "x").with_report(super::run::RunReport {
        pause_minutes: Some(5),
        ..Default::default()
    });
    let decision = run(&mut engine, Command::FinishRun { run: failed_run, end }, 4_000);
    assert_eq!(types(&decision.events), ["run_finished"]);
}

#[test]
fn the_last_model_calls_spend_is_recorded_with_the_runs_end_in_one_decision() {
    let mut engine = with_tenant();
    let mut spec = AgentSpec::with_interval("a", None);
    spec.limits.daily_budget_usd = Some(super::usage::MicroUsd(100));
    let agent = create_with(&mut engine, spec, 0);
    let run_id = running_run(&mut engine, agent, 1_000);
    record_usage(&mut engine, run_id, 30, 1_000);
    let mut end = RunEnd::new(RunStatus::Succeeded, "done");
    end.last_call = Some(usage_costing(70));
    let decision = run(&mut engine, Command::FinishRun { run: run_id, end: end.clone() }, 2_000);
    assert_eq!(types(&decision.events), ["usage_recorded", "run_finished"]);
    let finished = engine.run(run_id).unwrap();
    assert_eq!(finished.usage.cost_micro_usd, 100, "both calls count on the run");
    assert_eq!(finished.usage.llm_calls, 2);
    // The spend counts on the day as a separately recorded call would: the budget is spent.
    let refused = wake(&mut engine, agent, WakeupSource::OnDemand, None, 3_000);
    assert_eq!(
        outcome(&refused),
        WakeupOutcome::Refused {
            refusal: RefusalReason::Budget
        }
    );
    // A run that is no longer running records neither its end nor the spend carried with it.
    let before = engine.last_seq();
    let again = engine.decide(&Command::FinishRun { run: run_id, end }, 4_000);
    assert!(again.is_err(), "{again:?}");
    assert_eq!(engine.last_seq(), before);
}

#[test]
fn an_agents_budget_refuses_wakeups_once_spent_and_a_new_local_day_starts_afresh() {
    let mut engine = with_tenant();
    let mut spec = AgentSpec::with_interval("a", None);
    spec.limits.daily_budget_usd = Some(super::usage::MicroUsd(100));
    let agent = create_with(&mut engine, spec, 0);
    let run_id = running_run(&mut engine, agent, 1_000);
    let recorded = record_usage(&mut engine, run_id, 99, 1_000);
    assert_eq!(types(&recorded.events), ["usage_recorded"]);
    assert_eq!(engine.budget_left(run_id, 1_000), Some(1));
    record_usage(&mut engine, run_id, 50, 1_000);
    assert_eq!(engine.budget_left(run_id, 1_000), Some(0), "spent, never negative");
    assert_eq!(engine.run(run_id).unwrap().usage.cost_micro_usd, 149);
    finish(&mut engine, run_id, 2_000);
    let refused = wake(&mut engine, agent, WakeupSource::OnDemand, None, 3_000);
    assert_eq!(
        outcome(&refused),
        WakeupOutcome::Refused {
            refusal: RefusalReason::Budget
        }
    );
    const DAY_MS: u64 = 86_400_000;
    assert!(matches!(
        outcome(&wake(&mut engine, agent, WakeupSource::OnDemand, None, DAY_MS)),
        WakeupOutcome::Queued { .. }
    ));
}

#[test]
fn a_tenants_budget_is_shared_by_its_agents() {
    let mut engine = with_tenant();
    run(
        &mut engine,
        Command::SetTenantBudget {
            tenant: "t".into(),
            daily_budget_usd: Some(super::usage::MicroUsd(100)),
        },
        0,
    );
    let spender = create(&mut engine, "spender", None, 0);
    let other = create(&mut engine, "other", None, 0);
    let run_id = running_run(&mut engine, spender, 1_000);
    record_usage(&mut engine, run_id, 100, 1_000);
    assert_eq!(engine.budget_left(run_id, 1_000), Some(0));
    assert_eq!(
        outcome(&wake(&mut engine, other, WakeupSource::OnDemand, None, 2_000)),
        WakeupOutcome::Refused {
            refusal: RefusalReason::Budget
        },
        "another agent of the tenant is refused too"
    );
    // Setting the same budget again records nothing; an unknown tenant is refused.
    let same = engine.decide(
        &Command::SetTenantBudget {
            tenant: "t".into(),
            daily_budget_usd: Some(super::usage::MicroUsd(100)),
        },
        3_000,
    );
    assert!(same.unwrap().events.is_empty());
    assert!(engine
        .decide(
            &Command::SetTenantBudget {
                tenant: "nobody".into(),
                daily_budget_usd: None,
            },
            3_000,
        )
        .is_err());
}

#[test]
fn usage_is_refused_for_a_run_that_is_not_running() {
    let mut engine = with_tenant();
    let agent = create(&mut engine, "a", None, 0);
    let run_id = running_run(&mut engine, agent, 1_000);
    finish(&mut engine, run_id, 2_000);
    let refused = engine.decide(
        &Command::RecordUsage {
            run: run_id,
            usage: usage_costing(1),
        },
        3_000,
    );
    assert!(matches!(refused, Err(Refusal::RunNotRunning(_))), "{refused:?}");
}

#[test]
fn a_ghost_run_leaves_the_history_byte_identical() {
    let mut engine = with_tenant();
    let agent = create(&mut engine, "a", None, 0);
    let first = running_run(&mut engine, agent, 1_000);
    let report = super::run::RunReport {
        history_append: vec![
            super::history::HistoryMessage::new(super::history::Role::User, "wake"),
            super::history::HistoryMessage::new(super::history::Role::Assistant, "did it"),
        ],
        ..Default::default()
    };
    let end = RunEnd::new(RunStatus::Succeeded, "ok").with_report(report);
    run(&mut engine, Command::FinishRun { run: first, end }, 2_000);
    let before = engine.agent_state(agent).unwrap().history().hash();
    let ghost = running_run(&mut engine, agent, 3_000);
    let end = RunEnd::new(RunStatus::Succeeded, "ghost")
        .stopped(super::run::StopReason::Ghost)
        .with_report(super::run::RunReport::default());
    run(&mut engine, Command::FinishRun { run: ghost, end }, 4_000);
    assert_eq!(engine.agent_state(agent).unwrap().history().hash(), before);
    assert_eq!(
        engine.run(ghost).unwrap().stop_reason,
        Some(super::run::StopReason::Ghost)
    );
}

#[test]
fn a_session_reset_forgets_the_task_session_and_nothing_else() {
    use super::run::{RunReport, SessionChange};
    let mut engine = with_tenant();
    let agent = create(&mut engine, "coder", None, 0);
    let decision = wake(&mut engine, agent, WakeupSource::OnDemand, Some("t1"), 10);
    let WakeupOutcome::Queued { run: run_id } = outcome(&decision) else {
        panic!("a run queued");
    };
    let report = RunReport {
        session: Some(SessionChange::Set {
            session_id: "s1".into(),
        }),
        ..RunReport::default()
    };
    let end = RunEnd::new(RunStatus::Succeeded, "ok").with_report(report);
    run(&mut engine, Command::FinishRun { run: run_id, end }, 20);
    let state = |engine: &Engine| engine.agent_state(agent).unwrap().sessions().get("t1").cloned();
    assert_eq!(state(&engine).unwrap().session_id, "s1");
    let reset = |engine: &mut Engine, key: &str| {
        let command = Command::ResetSession {
            agent,
            task_key: key.into(),
        };
        types(&run(engine, command, 30).events)
    };
    assert_eq!(reset(&mut engine, "other"), Vec::<&str>::new(), "nothing to forget, nothing recorded");
    assert_eq!(reset(&mut engine, "t1"), ["session_reset"]);
    assert_eq!(state(&engine), None);
    assert_eq!(engine.agent_state(agent).unwrap().agent().status, AgentStatus::Active);
}

#[test]
fn a_cooldown_holds_the_next_run_until_it_is_over_and_moves_no_timer() {
    const COOLDOWN_MS: u64 = 60_000;
    let mut engine = with_tenant();
    let mut spec = AgentSpec::with_interval("cool", Some(30_000));
    spec.limits.cooldown_ms = COOLDOWN_MS;
    let a = create_with(&mut engine, spec, 0);
    let grid = engine.agent(a).unwrap().next_fire_at_ms.unwrap();

    wake(&mut engine, a, WakeupSource::OnDemand, None, 1_000);
    let first = engine.agent_state(a).unwrap().active_run().unwrap();
    finish(&mut engine, first, 10_000);
    let held = engine.agent(a).unwrap().cooldown.unwrap();
    assert_eq!((held.from_ms, held.until_ms), (10_000, 10_000 + COOLDOWN_MS));

    // A wakeup within the cooldown queues; a second one coalesces onto it.
    let queued = wake(&mut engine, a, WakeupSource::OnDemand, Some("k"), 20_000);
    assert!(!types(&queued.events).contains(&"run_started"));
    wake(&mut engine, a, WakeupSource::OnDemand, Some("k"), 21_000);
    assert_eq!(engine.agent_state(a).unwrap().queued_runs().count(), 1);
    // The timer keeps its grid (its slot fires and coalesces or queues; nothing starts).
    let deadline = engine.next_deadline_ms(21_000).unwrap();
    assert_eq!(deadline, grid.min(10_000 + COOLDOWN_MS));
    for now in (grid..10_000 + COOLDOWN_MS).step_by(1_000) {
        assert!(!fire_due(&mut engine, now).contains(&"run_started"), "at {now} ms");
    }
    assert_eq!(engine.agent(a).unwrap().next_fire_at_ms, Some(grid + 60_000));
    assert_eq!(engine.next_deadline_ms(69_000), Some(10_000 + COOLDOWN_MS));
    assert!(fire_due(&mut engine, 10_000 + COOLDOWN_MS - 1).is_empty(), "1 ms short");
    assert_eq!(fire_due(&mut engine, 10_000 + COOLDOWN_MS), vec!["run_started"]);
    assert_eq!(engine.agent(a).unwrap().cooldown, None);

    // Without a queued run the cooldown's end is no deadline (the timer loop does not spin).
    let second = engine.agent_state(a).unwrap().active_run().unwrap();
    finish(&mut engine, second, 80_000);
    assert_eq!(
        engine.next_deadline_ms(80_000),
        engine.agent(a).unwrap().next_fire_at_ms,
        "only the timer is due"
    );
}

#[test]
fn without_a_cooldown_the_next_run_starts_as_the_last_one_ends() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "eager", None, 0);
    wake(&mut engine, a, WakeupSource::OnDemand, Some("one"), 1_000);
    wake(&mut engine, a, WakeupSource::OnDemand, Some("two"), 1_000);
    let first = engine.agent_state(a).unwrap().active_run().unwrap();
    assert_eq!(
        types(&finish(&mut engine, first, 2_000).events),
        vec!["run_finished", "run_started"]
    );
    assert_eq!(engine.agent(a).unwrap().cooldown, None);
}

#[test]
fn a_clock_gone_back_past_the_run_s_end_ends_the_cooldown_instead_of_lengthening_it() {
    const COOLDOWN_MS: u64 = 60_000;
    const END_MS: u64 = 3_600_000;
    let mut engine = with_tenant();
    let mut spec = AgentSpec::with_interval("cool", None);
    spec.limits.cooldown_ms = COOLDOWN_MS;
    let a = create_with(&mut engine, spec, 0);
    wake(&mut engine, a, WakeupSource::OnDemand, None, END_MS - 1_000);
    let first = engine.agent_state(a).unwrap().active_run().unwrap();
    finish(&mut engine, first, END_MS);
    wake(&mut engine, a, WakeupSource::OnDemand, Some("k"), END_MS + 1_000);
    assert_eq!(engine.next_deadline_ms(END_MS + 1_000), Some(END_MS + COOLDOWN_MS));
    // The clock steps back half an hour: the queued run is due at once, and starts.
    let back_ms = END_MS - 1_800_000;
    assert_eq!(engine.next_deadline_ms(back_ms), Some(back_ms));
    assert_eq!(fire_due(&mut engine, back_ms), vec!["run_started"]);
    // Read at the run's end exactly, it still holds.
    let held = super::agent::Cooldown {
        from_ms: END_MS,
        until_ms: END_MS + COOLDOWN_MS,
    };
    assert!(held.holds(END_MS) && !held.holds(END_MS - 1) && !held.holds(END_MS + COOLDOWN_MS));
}

// ---- the agent error state ----

fn error_reason(engine: &Engine, agent: AgentId) -> Option<super::agent_error::AgentErrorReason> {
    engine.agent(agent).unwrap().error.map(|e| e.reason)
}

#[test]
fn runs_ended_by_restarts_in_a_row_put_the_agent_in_error_until_reset() {
    use super::agent_error::{AgentErrorReason, RESTART_ENDS_TO_ERROR};
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let mut t = 0;
    // Restart ends below the limit, then a run that finishes: the count starts over.
    for _ in 1..RESTART_ENDS_TO_ERROR {
        t += 10;
        wake(&mut engine, a, WakeupSource::OnDemand, None, t);
        let d = run(&mut engine, Command::RecoverRuns, t + 1);
        // The retry runs at once; it succeeds below or dies with the next restart.
        let retry = engine.agent_state(a).unwrap().active_run().unwrap();
        assert_eq!(types(&d.events), ["run_finished", "run_requeued", "run_started"]);
        finish(&mut engine, retry, t + 2);
    }
    assert_eq!(engine.agent(a).unwrap().error_counts.restart_ends, 0);
    // A loop: each run (and its one retry) dies with the control plane.
    for n in 1..=RESTART_ENDS_TO_ERROR {
        t += 10;
        if engine.agent_state(a).unwrap().active_run().is_none() {
            wake(&mut engine, a, WakeupSource::OnDemand, None, t);
        }
        wake(&mut engine, a, WakeupSource::Automation, Some("waiting"), t);
        let d = run(&mut engine, Command::RecoverRuns, t + 1);
        if n < RESTART_ENDS_TO_ERROR {
            assert_eq!(error_reason(&engine, a), None);
            continue;
        }
        // The third: error, the queued run cancelled, no retry.
        assert_eq!(
            types(&d.events),
            ["run_finished", "agent_errored", "run_finished"],
            "{:?}",
            d.events
        );
        assert!(matches!(
            d.events[1].kind,
            EventKind::AgentErrored { reason: AgentErrorReason::RestartLoop, count, .. }
                if count == RESTART_ENDS_TO_ERROR
        ));
    }
    assert_eq!(error_reason(&engine, a), Some(AgentErrorReason::RestartLoop));
    assert!(engine.agent_state(a).unwrap().queued_runs().next().is_none());
    // Every wakeup is refused `agent_error`, on-demand and timer alike; a terminated agent
    // still says `terminated` (below).
    for source in [WakeupSource::OnDemand, WakeupSource::Timer] {
        let d = wake(&mut engine, a, source, None, t + 5);
        assert_eq!(
            outcome(&d),
            WakeupOutcome::Refused {
                refusal: RefusalReason::AgentError
            }
        );
    }
    // Resetting an agent not in error records nothing; resetting this one takes wakeups again.
    let b = create(&mut engine, "b", None, t);
    assert!(engine
        .decide(&Command::ResetAgentError { agent: b }, t)
        .unwrap()
        .events
        .is_empty());
    let d = run(&mut engine, Command::ResetAgentError { agent: a }, t + 6);
    assert_eq!(types(&d.events), ["agent_error_reset"]);
    assert_eq!(error_reason(&engine, a), None);
    let d = wake(&mut engine, a, WakeupSource::OnDemand, None, t + 7);
    assert_eq!(types(&d.events), ["wakeup_queued", "run_started"]);
    // Terminated wins over the error.
    run(&mut engine, Command::TerminateAgent { agent: a }, t + 8);
    let d = wake(&mut engine, a, WakeupSource::OnDemand, None, t + 9);
    assert_eq!(
        outcome(&d),
        WakeupOutcome::Refused {
            refusal: RefusalReason::Terminated
        }
    );
}

#[test]
fn a_breaker_reopening_at_its_longest_cooldown_puts_the_agent_in_error() {
    use super::agent_error::{AgentErrorReason, OPENINGS_AT_CAP_TO_ERROR};
    use super::breaker::{BreakerState, FailureCause};
    let mut engine = with_tenant();
    let mut spec = AgentSpec::with_interval("a", None);
    spec.breaker.failures_to_open = 1;
    spec.breaker.cooldown_ms = 1_000;
    spec.breaker.cooldown_ms_max = 4_000;
    let a = create_with(&mut engine, spec, 0);
    let mut t = 0;
    let mut openings = Vec::new();
    while error_reason(&engine, a).is_none() {
        let d = wake(&mut engine, a, WakeupSource::OnDemand, None, t);
        assert_ne!(
            outcome(&d),
            WakeupOutcome::Refused {
                refusal: RefusalReason::BreakerOpen
            },
            "the wake comes after the cooldown"
        );
        wake(&mut engine, a, WakeupSource::Automation, Some("waiting"), t);
        t += 1;
        fail_active(&mut engine, a, FailureCause::Llm, t);
        let BreakerState::Open { cooldown_ms, until_ms } = breaker(&engine, a) else {
            panic!("a failed probe opens the breaker")
        };
        openings.push(cooldown_ms);
        t = until_ms;
        assert!(openings.len() < 10, "{openings:?}");
    }
    // 1 s, 2 s, then the cap three times.
    let mut expected = vec![1_000, 2_000];
    expected.extend([4_000; OPENINGS_AT_CAP_TO_ERROR as usize]);
    assert_eq!(openings, expected);
    assert_eq!(error_reason(&engine, a), Some(AgentErrorReason::BreakerAtCap));
    assert!(engine.agent_state(a).unwrap().queued_runs().next().is_none());
    // The breaker's own cooldown is over, but the error holds.
    let d = wake(&mut engine, a, WakeupSource::OnDemand, None, t + 1);
    assert_eq!(
        outcome(&d),
        WakeupOutcome::Refused {
            refusal: RefusalReason::AgentError
        }
    );
    // After the reset the breaker probes as before, and a success closes it and clears the count.
    run(&mut engine, Command::ResetAgentError { agent: a }, t + 2);
    let d = wake(&mut engine, a, WakeupSource::OnDemand, None, t + 3);
    assert_eq!(types(&d.events), ["breaker_half_opened", "wakeup_queued", "run_started"]);
    let probe = engine.agent_state(a).unwrap().active_run().unwrap();
    finish(&mut engine, probe, t + 4);
    assert_eq!(breaker(&engine, a), BreakerState::default());
    assert_eq!(engine.agent(a).unwrap().error_counts.openings_at_cap, 0);
}

#[test]
fn a_draining_engine_queues_wakeups_but_starts_no_run_and_lets_running_ones_end() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", Some(1_000), 0);
    let b = create(&mut engine, "b", None, 0);
    let going = wake(&mut engine, b, WakeupSource::OnDemand, None, 10);
    assert!(types(&going.events).contains(&"run_started"));
    let WakeupOutcome::Queued { run: going } = outcome(&going) else {
        panic!("queued")
    };
    // The same state in a node that does not drain: it folds in the same events below.
    let mut twin = engine.clone();
    engine.hold_starts();
    assert_eq!(engine.running_runs(), 1);
    // A wakeup queues, a due timer fires and queues, and neither starts.
    let queued = wake(&mut engine, a, WakeupSource::OnDemand, None, 20);
    assert_eq!(types(&queued.events), ["wakeup_queued"]);
    let fired = run(&mut engine, Command::FireDueTimers, 5_000);
    assert!(
        !types(&fired.events).contains(&"run_started"),
        "{:?}",
        types(&fired.events)
    );
    // The run that was going may still end, and nothing starts after it.
    let ended = finish(&mut engine, going, 5_100);
    assert_eq!(types(&ended.events), ["run_finished"]);
    assert_eq!(engine.running_runs(), 0);
    // Holding starts is not state: the log is the same, and a node that is not draining starts
    // what was queued at its next decision.
    for event in queued
        .events
        .iter()
        .chain(&fired.events)
        .chain(&ended.events)
    {
        twin.apply(event);
    }
    // Its next decision: the agent's next timer slot (within one interval, by its jitter).
    let next_slot = twin.agent(a).unwrap().next_fire_at_ms.unwrap();
    assert!((5_100..6_100).contains(&next_slot), "{next_slot}");
    let next = run(&mut twin, Command::FireDueTimers, next_slot);
    assert!(
        types(&next.events).contains(&"run_started"),
        "{:?}",
        types(&next.events)
    );
}

#[test]
fn a_rotated_agent_token_replaces_the_old_one_at_once() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let b = create(&mut engine, "b", None, 0);
    let old = TokenHash::of("a");
    let new = TokenHash::of("a-rotated");
    let rotated = run(
        &mut engine,
        Command::RotateAgentToken {
            agent: a,
            token_hash: new.clone(),
        },
        10,
    );
    assert_eq!(types(&rotated.events), ["agent_token_rotated"]);
    assert_eq!(engine.principal(&old), None);
    assert_eq!(
        engine.principal(&new),
        Some(&Principal::Agent {
            tenant: "t".into(),
            agent: a
        })
    );
    assert_eq!(engine.agent(a).unwrap().token_hash, new);
    // A token another principal holds is refused, and so is an agent that does not exist.
    let taken = Command::RotateAgentToken {
        agent: a,
        token_hash: TokenHash::of("b"),
    };
    assert_eq!(engine.decide(&taken, 20).unwrap_err(), Refusal::TokenInUse);
    let unknown = Command::RotateAgentToken {
        agent: AgentId(99),
        token_hash: TokenHash::of("x"),
    };
    assert_eq!(
        engine.decide(&unknown, 20).unwrap_err(),
        Refusal::UnknownAgent(AgentId(99))
    );
    assert_eq!(engine.agent(b).unwrap().token_hash, TokenHash::of("b"));
}

#[test]
fn the_run_index_lists_every_held_run_newest_first() {
    let mut engine = with_tenant();
    let a = create(&mut engine, "a", None, 0);
    let b = create(&mut engine, "b", None, 0);
    let mut now = 10;
    for round in 0..5 {
        for agent in [a, b] {
            wake(&mut engine, agent, WakeupSource::OnDemand, None, now);
            let active = engine.agent_state(agent).and_then(|s| s.active_run());
            if let (Some(run), 0) = (active, round % 2) {
                finish(&mut engine, run, now + 1);
            }
            now += 10;
        }
    }
    let indexed: Vec<RunId> = engine.runs_newest_first().map(|run| run.id).collect();
    let mut held: Vec<RunId> = engine
        .agent_states()
        .flat_map(|state| state.runs())
        .map(|run| run.id)
        .collect();
    held.sort_by_key(|id| std::cmp::Reverse(*id));
    assert_eq!(indexed, held);
    assert!(indexed.len() >= 6, "{indexed:?}");
}
