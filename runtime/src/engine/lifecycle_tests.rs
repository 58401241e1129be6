//! The agent lifecycle beyond create: changing a spec, deleting an agent, rotating an operator
//! token; each checked against the state it leaves and against a replay of its log.

use serde_json::json;

use super::agent::{AgentId, AgentSpec, AgentStatus};
use super::agent_update::SpecChange;
use super::event::{Event, EventKind};
use super::run::{RunId, RunStatus};
use super::tenant::{Principal, TokenHash, TokenSetBy};
use super::wakeup::{WakeupRequest, WakeupSource};
use super::{Command, Engine, Refusal};

/// Applies what `command` decides and keeps its events; panics on a refusal.
fn run(engine: &mut Engine, log: &mut Vec<Event>, command: Command, now_ms: u64) -> Vec<Event> {
    let decision = engine.decide(&command, now_ms).expect("command accepted");
    for event in &decision.events {
        engine.apply(event);
        log.push(event.clone());
    }
    decision.events
}

fn setup() -> (Engine, Vec<Event>) {
    let mut engine = Engine::new();
    let mut log = Vec::new();
    let tenant = Command::EnsureTenant {
        tenant: "t".into(),
        operator_token_hash: TokenHash::of("op"),
    };
    run(&mut engine, &mut log, tenant, 0);
    (engine, log)
}

fn create(engine: &mut Engine, log: &mut Vec<Event>, spec: AgentSpec, now_ms: u64) -> AgentId {
    let token_hash = TokenHash::of(&spec.name);
    let command = Command::CreateAgent {
        tenant: "t".into(),
        spec,
        token_hash,
    };
    match run(engine, log, command, now_ms)[0].kind {
        EventKind::AgentCreated { agent, .. } => agent,
        _ => panic!("expected agent_created"),
    }
}

fn patch(agent: AgentId, patch: serde_json::Value) -> Command {
    Command::UpdateAgent {
        agent,
        change: SpecChange::Merge(patch),
    }
}

fn wake(engine: &mut Engine, log: &mut Vec<Event>, agent: AgentId, now_ms: u64) -> Vec<Event> {
    let request = WakeupRequest::new(WakeupSource::OnDemand, "go");
    run(engine, log, Command::Wake { agent, request }, now_ms)
}

/// The run a wakeup's events queued.
fn queued_run(events: &[Event]) -> RunId {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::WakeupQueued { run, .. } => Some(*run),
            _ => None,
        })
        .expect("the wakeup queued a run")
}

fn replayed(log: &[Event]) -> Engine {
    let mut engine = Engine::new();
    log.iter().for_each(|event| engine.apply(event));
    engine
}

#[test]
fn a_new_grid_after_the_clock_went_back_starts_after_the_latest_fired_slot() {
    let (mut engine, mut log) = setup();
    let a = create(
        &mut engine,
        &mut log,
        AgentSpec::with_interval("a", Some(1_000)),
        0,
    );
    run(&mut engine, &mut log, Command::FireDueTimers, 200_000);
    let slot = engine.agent(a).unwrap().last_due_at_ms.expect("a slot fired");
    assert!(slot > 199_000);
    // The wall clock went back 100 s, more than the new interval; a new interval is set then.
    let back_ms = 100_000;
    let events = run(
        &mut engine,
        &mut log,
        patch(a, json!({"heartbeat": {"interval_ms": 60_000}})),
        back_ms,
    );
    let EventKind::AgentUpdated {
        first_fire_at_ms, ..
    } = &events[0].kind
    else {
        panic!("expected agent_updated, got {:?}", events[0].kind)
    };
    let jitter = super::schedule::jitter_ms(a.0, 60_000);
    assert_eq!(*first_fire_at_ms, Some(slot + 60_000 + jitter));
    // Its first slot fires once the clock reaches it, after the slot that already fired.
    let first = first_fire_at_ms.unwrap();
    let fired = run(&mut engine, &mut log, Command::FireDueTimers, first);
    assert!(fired
        .iter()
        .any(|e| matches!(e.kind, EventKind::TimerFired { due_at_ms, .. } if due_at_ms == first)));
    assert_eq!(replayed(&log), engine);
}

#[test]
fn a_new_interval_re_anchors_the_grid_and_an_unchanged_one_keeps_it() {
    let (mut engine, mut log) = setup();
    let a = create(
        &mut engine,
        &mut log,
        AgentSpec::with_interval("a", Some(60_000)),
        0,
    );
    let grid = engine.agent(a).unwrap().next_fire_at_ms.unwrap();
    // A change elsewhere keeps the grid.
    run(
        &mut engine,
        &mut log,
        patch(a, json!({"limits": {"daily_cap": 3}})),
        10_000,
    );
    assert_eq!(engine.agent(a).unwrap().next_fire_at_ms, Some(grid));
    // A new interval: one new interval plus the agent's jitter after the change.
    let events = run(
        &mut engine,
        &mut log,
        patch(a, json!({"heartbeat": {"interval_ms": 120_000}})),
        20_000,
    );
    let EventKind::AgentUpdated {
        changed,
        first_fire_at_ms,
        ..
    } = &events[0].kind
    else {
        panic!("expected agent_updated, got {:?}", events[0].kind)
    };
    assert_eq!(changed, &["heartbeat.interval_ms"]);
    let next = engine.agent(a).unwrap().next_fire_at_ms.unwrap();
    assert_eq!(Some(next), *first_fire_at_ms);
    let jitter = super::schedule::jitter_ms(a.0, 120_000);
    assert_eq!(next, 20_000 + 120_000 + jitter);
    assert_eq!(
        engine.next_deadline_ms(20_000),
        Some(next),
        "the due index was refiled"
    );
    // Removing the timer removes its slot.
    run(
        &mut engine,
        &mut log,
        patch(a, json!({"heartbeat": {"interval_ms": null}})),
        30_000,
    );
    assert_eq!(engine.agent(a).unwrap().next_fire_at_ms, None);
    assert_eq!(engine.next_deadline_ms(30_000), None);
    assert_eq!(replayed(&log), engine);
}

#[test]
fn a_change_keeps_queued_runs_pause_and_the_days_count() {
    let (mut engine, mut log) = setup();
    let spec = AgentSpec::with_interval("a", None);
    let a = create(&mut engine, &mut log, spec, 0);
    let running = queued_run(&wake(&mut engine, &mut log, a, 1_000));
    let request = WakeupRequest::new(WakeupSource::Assignment, "queued");
    let queued = run(
        &mut engine,
        &mut log,
        Command::Wake { agent: a, request },
        1_001,
    );
    let change = patch(a, json!({"limits": {"daily_cap": 1, "queued_runs_max": 1}}));
    run(&mut engine, &mut log, change, 2_000);
    let state = engine.agent_state(a).unwrap();
    assert_eq!(state.agent().spec.limits.daily_cap, Some(1));
    assert_eq!(state.active_run(), Some(running), "the running run goes on");
    let waiting: Vec<RunId> = state.queued_runs().collect();
    assert_eq!(
        waiting,
        vec![queued_run(&queued)],
        "queued runs stay queued"
    );
    let pause = Command::PauseAgent {
        agent: a,
        minutes: Some(30),
    };
    run(&mut engine, &mut log, pause, 3_000);
    let before = engine.agent(a).unwrap().clone();
    run(
        &mut engine,
        &mut log,
        patch(a, json!({"time_zone": "Asia/Tokyo"})),
        4_000,
    );
    let after = engine.agent(a).unwrap();
    assert_eq!(after.paused_until_ms, before.paused_until_ms);
    assert_eq!(after.paused_by, before.paused_by);
    assert_eq!(after.day_count, before.day_count);
    assert_eq!(after.breaker, before.breaker);
    assert_eq!(replayed(&log), engine);
}

#[test]
fn a_change_that_changes_nothing_records_nothing() {
    let (mut engine, mut log) = setup();
    let a = create(
        &mut engine,
        &mut log,
        AgentSpec::with_interval("a", Some(60_000)),
        0,
    );
    let same = engine
        .decide(&patch(a, json!({"heartbeat": {"interval_ms": 60_000}})), 5)
        .unwrap();
    assert!(same.events.is_empty());
    let declared = AgentSpec::with_interval("a", Some(60_000));
    let replace = Command::UpdateAgent {
        agent: a,
        change: SpecChange::Replace(Box::new(declared)),
    };
    assert!(engine.decide(&replace, 5).unwrap().events.is_empty());
}

#[test]
fn a_change_is_refused_when_invalid_renamed_onto_another_or_terminated() {
    let (mut engine, mut log) = setup();
    let a = create(
        &mut engine,
        &mut log,
        AgentSpec::with_interval("a", None),
        0,
    );
    create(
        &mut engine,
        &mut log,
        AgentSpec::with_interval("b", None),
        0,
    );
    let invalid = engine.decide(&patch(a, json!({"time_zone": "Mars/Olympus"})), 1);
    assert!(matches!(invalid, Err(Refusal::InvalidField(e)) if e.field == "time_zone"));
    let taken = engine.decide(&patch(a, json!({"name": "b"})), 1);
    assert_eq!(taken, Err(Refusal::NameTaken("b".into())));
    // A rename frees the old name and answers to the new one.
    run(&mut engine, &mut log, patch(a, json!({"name": "c"})), 2);
    assert_eq!(engine.agent_named("t", "c").map(|x| x.id), Some(a));
    assert!(engine.agent_named("t", "a").is_none());
    run(
        &mut engine,
        &mut log,
        Command::TerminateAgent { agent: a },
        3,
    );
    let terminated = engine.decide(&patch(a, json!({"limits": {"daily_cap": 2}})), 4);
    assert_eq!(terminated, Err(Refusal::AgentTerminated(a)));
    assert_eq!(replayed(&log), engine);
}

#[test]
fn a_delete_terminates_then_forgets_and_never_reuses_the_id() {
    let (mut engine, mut log) = setup();
    create(
        &mut engine,
        &mut log,
        AgentSpec::with_interval("keep", None),
        0,
    );
    let a = create(
        &mut engine,
        &mut log,
        AgentSpec::with_interval("a", Some(60_000)),
        0,
    );
    let running = queued_run(&wake(&mut engine, &mut log, a, 10));
    assert_eq!(engine.run(running).unwrap().status, RunStatus::Running);
    let events = run(&mut engine, &mut log, Command::DeleteAgent { agent: a }, 20);
    let types: Vec<&str> = events.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(types, ["agent_terminated", "run_finished", "agent_deleted"]);
    assert!(engine.agent(a).is_none());
    assert!(
        engine.run(running).is_none(),
        "its runs leave the run index"
    );
    assert_eq!(
        engine.principal(&TokenHash::of("a")),
        None,
        "its token stops working"
    );
    assert_eq!(engine.bounds().finished_held(), 0);
    assert_eq!(
        engine.next_deadline_ms(20),
        None,
        "its timer leaves the due index"
    );
    assert_eq!(
        engine.decide(&Command::DeleteAgent { agent: a }, 21),
        Err(Refusal::UnknownAgent(a))
    );
    // The name is free again; the id is not (the log keeps the deleted agent's events).
    let again = create(
        &mut engine,
        &mut log,
        AgentSpec::with_interval("a", None),
        30,
    );
    assert!(again.0 > a.0, "id {again} reuses a deleted agent's");
    assert_eq!(replayed(&log), engine);
    // Deleting the highest id and replaying still never hands it out again.
    run(
        &mut engine,
        &mut log,
        Command::DeleteAgent { agent: again },
        40,
    );
    let mut recovered = replayed(&log);
    let next = create(
        &mut recovered,
        &mut log,
        AgentSpec::with_interval("n", None),
        50,
    );
    assert!(next.0 > again.0);
    assert_eq!(
        engine.agent_state(AgentId(1)).unwrap().agent().status,
        AgentStatus::Active
    );
}

#[test]
fn a_rotated_operator_token_survives_the_same_configuration_but_not_a_new_one() {
    let (mut engine, mut log) = setup();
    let rotate = Command::RotateOperatorToken {
        tenant: "t".into(),
        token_hash: TokenHash::of("rotated"),
    };
    let events = run(&mut engine, &mut log, rotate, 1);
    assert!(matches!(
        events[0].kind,
        EventKind::OperatorTokenSet {
            by: TokenSetBy::Operator,
            ..
        }
    ));
    assert_eq!(engine.principal(&TokenHash::of("op")), None);
    let operator = Principal::Operator { tenant: "t".into() };
    assert_eq!(engine.principal(&TokenHash::of("rotated")), Some(&operator));
    // A restart configuring the same token as before: the rotation holds.
    let same = Command::EnsureTenant {
        tenant: "t".into(),
        operator_token_hash: TokenHash::of("op"),
    };
    assert!(replayed(&log).decide(&same, 2).unwrap().events.is_empty());
    // A new configured token replaces the rotated one.
    let new = Command::EnsureTenant {
        tenant: "t".into(),
        operator_token_hash: TokenHash::of("op-new"),
    };
    let events = run(&mut engine, &mut log, new, 3);
    assert!(matches!(
        events[0].kind,
        EventKind::OperatorTokenSet {
            by: TokenSetBy::Configuration,
            ..
        }
    ));
    assert_eq!(engine.principal(&TokenHash::of("rotated")), None);
    assert_eq!(engine.principal(&TokenHash::of("op-new")), Some(&operator));
    // A token another principal holds is refused.
    create(
        &mut engine,
        &mut log,
        AgentSpec::with_interval("a", None),
        4,
    );
    let clash = Command::RotateOperatorToken {
        tenant: "t".into(),
        token_hash: TokenHash::of("a"),
    };
    assert_eq!(engine.decide(&clash, 5), Err(Refusal::TokenInUse));
    assert_eq!(replayed(&log), engine);
}
