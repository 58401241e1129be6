//! The upgrade fixtures: `tests/fixtures/store/format-N.redb`, real redb databases each written
//! by the build that introduced storage format N, holding every event type of that format. Every
//! later build must open each, find format N, re-encode each record to the very bytes stored,
//! and recover the same state (the snapshot `format_N_fixture_state`). Never rewrite a fixture:
//! a later format adds its own beside them (docs/operations.md, "Upgrading").
//!
//! `VIGIL_WRITE_STORE_FIXTURE=1 cargo test -p vigil write_current_format_fixture -- --ignored`
//! writes the current format's fixture (run once, when the format is introduced).

use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, ReadableTable};
use serde_json::json;

use super::{record, Store, EVENTS};
use crate::engine::agent::{AgentId, AgentSpec};
use crate::engine::agent_update::SpecChange;
use crate::engine::breaker::FailureCause;
use crate::engine::event::Event;
use crate::engine::history::{HistoryMessage, Role};
use crate::engine::predicate::HeartbeatId;
use crate::engine::pulse_report::{PulseReport, ReportedStatus};
use crate::engine::run::{
    ChildExit, ErrorClass, RunEnd, RunId, RunReport, RunStatus, SessionChange, StopReason,
};
use crate::engine::tenant::TokenHash;
use crate::engine::usage::{MicroUsd, Usage};
use crate::engine::wakeup::WakeupRequest;
use crate::engine::{Command, Decision, Engine};
use crate::io::storage::StorageLocation;

/// Every event type format 1 has, by wire name.
const FORMAT_1_TYPES: [&str; 27] = [
    "tenant_created",
    "operator_token_set",
    "tenant_budget_set",
    "agent_created",
    "agent_paused",
    "agent_resumed",
    "agent_terminated",
    "timer_fired",
    "wakeup_queued",
    "wakeup_coalesced",
    "wakeup_refused",
    "run_requeued",
    "run_started",
    "run_finished",
    "run_process_started",
    "session_reset",
    "usage_recorded",
    "breaker_opened",
    "breaker_half_opened",
    "breaker_closed",
    "breaker_reset",
    "agent_errored",
    "agent_error_reset",
    "agent_online",
    "agent_offline",
    "input_received",
    "idle_fired",
];

/// What format 2 added.
const FORMAT_2_ADDED: [&str; 1] = ["agent_token_rotated"];
/// Format 3 added these types (and `operator_token_set`'s `by`).
const FORMAT_3_ADDED: [&str; 2] = ["agent_updated", "agent_deleted"];
/// Format 5 added predicate heartbeats.
const FORMAT_5_ADDED: [&str; 4] = [
    "heartbeat_created",
    "heartbeat_deleted",
    "heartbeat_state_changed",
    "heartbeat_emission_paused",
];

fn fixture_path(format: u64) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../tests/fixtures/store/format-{format}.redb"))
}

/// A copy of format `format`'s fixture in a fresh directory: opening a database writes to it
/// (redb's repair, the format stamp), and the checked-in file must never change.
fn fixture_copy(format: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-fixture-{format}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vigil.redb");
    std::fs::copy(fixture_path(format), &path)
        .unwrap_or_else(|e| panic!("the format-{format} fixture is checked in: {e}"));
    path
}

/// 2026-01-05T08:00:00Z, a Monday.
const T0: u64 = 1_767_600_000_000;
const MINUTE: u64 = 60_000;

/// Drives the engine through a story that writes every event type, appending each decision.
struct Story {
    engine: Engine,
    store: Store,
}

impl Story {
    fn step(&mut self, command: Command, now_ms: u64) -> Decision {
        let decision = self
            .engine
            .decide(&command, now_ms)
            .unwrap_or_else(|refusal| panic!("{command:?} refused: {refusal}"));
        self.store.append(&decision.events).unwrap();
        for event in &decision.events {
            self.engine.apply(event);
        }
        decision
    }

    fn create(&mut self, tenant: &str, spec: serde_json::Value, now_ms: u64) -> AgentId {
        let spec: AgentSpec = serde_json::from_value(spec).expect("a valid spec");
        let name = spec.name.clone();
        self.step(
            Command::CreateAgent {
                tenant: tenant.into(),
                token_hash: TokenHash::of(&format!("token-{name}")),
                spec,
            },
            now_ms,
        );
        self.engine.agent_named(tenant, &name).unwrap().id
    }

    fn wake(&mut self, agent: AgentId, request: serde_json::Value, now_ms: u64) -> Decision {
        let request: WakeupRequest = serde_json::from_value(request).expect("a valid request");
        self.step(Command::Wake { agent, request }, now_ms)
    }

    fn active(&self, agent: AgentId) -> RunId {
        self.engine
            .agent_state(agent)
            .and_then(|state| state.active_run())
            .expect("the agent has a running run")
    }

    fn finish(&mut self, agent: AgentId, end: RunEnd, now_ms: u64) {
        let run = self.active(agent);
        self.step(Command::FinishRun { run, end }, now_ms);
    }
}

fn on_demand(reason: &str) -> serde_json::Value {
    json!({"source": "on_demand", "reason": reason})
}

fn write_story(store: Store) -> Engine {
    let mut story = Story {
        engine: Engine::new(),
        store,
    };
    tenants(&mut story);
    let scripted = scripted_agent(&mut story);
    let llm = llm_agent(&mut story);
    cli_agents(&mut story);
    heartbeats_before_the_snapshot(&mut story);
    // Format 4: a snapshot of everything so far; recovery reads it and replays the rest.
    story.store.write_snapshot(&story.engine.image()).unwrap();
    heartbeats_after_the_snapshot(&mut story);
    breaker(&mut story, llm);
    restarts(&mut story, scripted);
    // Format 2: an operator replaces the scripted agent's token.
    story.step(
        Command::RotateAgentToken {
            agent: scripted,
            token_hash: TokenHash::of("token-planner-2"),
        },
        T0 + 400 * MINUTE,
    );
    lifecycle(&mut story, llm);
    story.engine
}

/// Format 5: an agent with a heartbeat of each kind; the inbox's baseline and a transition (the
/// snapshot holds both heartbeats and their states).
fn heartbeats_before_the_snapshot(story: &mut Story) {
    let watcher = story.create("acme", json!({"name": "watcher"}), T0 + 50 * MINUTE);
    for (id, check, on_change) in [
        ("inbox", json!({"kind": "sample"}), "wake"),
        (
            "feed",
            json!({"kind": "http", "url": "https://feeds.example/x.json", "pointer": "/items/0"}),
            "event",
        ),
    ] {
        let request = serde_json::from_value(json!({
            "id": id, "agent": watcher.0, "interval_sec": 60, "check": check, "on_change": on_change,
        }))
        .unwrap();
        story.step(
            Command::CreateHeartbeat {
                tenant: "acme".into(),
                request,
            },
            T0 + 50 * MINUTE,
        );
    }
    observe(story, "inbox", json!({"unread": 0}), T0 + 51 * MINUTE);
    observe(story, "inbox", json!({"unread": 2}), T0 + 52 * MINUTE);
}

/// Format 5: transitions until the inbox's emission pauses, and a deleted heartbeat.
fn heartbeats_after_the_snapshot(story: &mut Story) {
    for unread in 3..9 {
        observe(story, "inbox", json!({"unread": unread}), T0 + 53 * MINUTE);
    }
    assert!(story
        .engine
        .heartbeat("acme", &HeartbeatId("inbox".into()))
        .unwrap()
        .emission_paused);
    story.step(
        Command::DeleteHeartbeat {
            tenant: "acme".into(),
            heartbeat: HeartbeatId("feed".into()),
        },
        T0 + 54 * MINUTE,
    );
}

fn observe(story: &mut Story, id: &str, observed: serde_json::Value, now_ms: u64) {
    story.step(
        Command::ObserveHeartbeat {
            tenant: "acme".into(),
            heartbeat: HeartbeatId(id.into()),
            state: crate::engine::predicate::state_token(&observed).unwrap(),
        },
        now_ms,
    );
}

/// Format 3: an operator changes the LLM agent's timer and cap, rotates their own token, and
/// deletes an agent that was running.
fn lifecycle(story: &mut Story, llm: AgentId) {
    let change = json!({"heartbeat": {"interval_ms": 45 * MINUTE}, "limits": {"daily_cap": 12}});
    story.step(
        Command::UpdateAgent {
            agent: llm,
            change: SpecChange::Merge(change),
        },
        T0 + 410 * MINUTE,
    );
    story.step(
        Command::RotateOperatorToken {
            tenant: "acme".into(),
            token_hash: TokenHash::of("op-acme-rotated"),
        },
        T0 + 420 * MINUTE,
    );
    let scratch = story.create("beta", json!({"name": "scratch"}), T0 + 430 * MINUTE);
    story.wake(scratch, on_demand("short-lived"), T0 + 431 * MINUTE);
    story.step(Command::DeleteAgent { agent: scratch }, T0 + 440 * MINUTE);
}

fn tenants(story: &mut Story) {
    for (tenant, token) in [
        ("acme", "op-acme"),
        ("beta", "op-beta"),
        ("acme", "op-acme-2"),
    ] {
        story.step(
            Command::EnsureTenant {
                tenant: tenant.into(),
                operator_token_hash: TokenHash::of(token),
            },
            T0,
        );
    }
    story.step(
        Command::SetTenantBudget {
            tenant: "acme".into(),
            daily_budget_usd: Some(MicroUsd(12_500_000)),
        },
        T0,
    );
}

/// A scripted agent on a timer and an idle chamber in Paris: timers, idle, pulses, wakeups of
/// every outcome, pauses, a session.
fn scripted_agent(story: &mut Story) -> AgentId {
    let agent = story.create(
        "acme",
        json!({
            "name": "planner",
            "adapter": {"type": "scripted", "steps": [
                {"duration_ms": 30_000, "outcome": "succeeded"},
                {"duration_ms": 5_000, "outcome": "failed"},
            ]},
            "heartbeat": {"interval_ms": 30 * MINUTE, "idle_after_ms": 120 * MINUTE,
                          "while_paused": "refuse_all"},
            "time_zone": "Europe/Paris",
            "limits": {"daily_cap": 48, "queued_runs_max": 4, "cooldown_ms": 1_000},
            "liveness": {"pulse_interval_ms": 5_000, "detector": "phi_accrual"},
        }),
        T0,
    );
    let mut now = T0 + MINUTE;
    story.step(
        Command::MarkOnline {
            agents: vec![(
                agent,
                PulseReport {
                    status: Some(ReportedStatus::Busy),
                    metadata: Some(
                        json!({"host": "a1", "load": 0.5})
                            .as_object()
                            .unwrap()
                            .clone(),
                    ),
                },
            )],
        },
        now,
    );
    story.wake(
        agent,
        json!({"source": "assignment", "reason": "ticket 7", "task_key": "t-7",
               "idempotency_key": "k-1", "payload": {"ticket": 7},
               "trigger_detail": {"from": "tracker"}}),
        now,
    );
    story.wake(
        agent,
        json!({"source": "assignment", "reason": "ticket 8", "task_key": "t-8"}),
        now,
    );
    story.wake(
        agent,
        json!({"source": "assignment", "reason": "ticket 8 again", "task_key": "t-8"}),
        now,
    );
    now += MINUTE;
    let report = RunReport {
        session: Some(SessionChange::Set {
            session_id: "sess-1".into(),
        }),
        answer_excerpt: Some("done with 7".into()),
        ..RunReport::default()
    };
    story.finish(
        agent,
        RunEnd {
            stop_reason: Some(StopReason::EndTurn),
            report: Some(Box::new(report)),
            ..RunEnd::new(RunStatus::Succeeded, "ok")
        },
        now,
    );
    story.step(
        Command::ResetSession {
            agent,
            task_key: "t-7".into(),
        },
        now,
    );
    now += 40 * MINUTE;
    story.step(Command::FireDueTimers, now);
    story.step(
        Command::PauseAgent {
            agent,
            minutes: Some(30),
        },
        now,
    );
    story.wake(agent, on_demand("while paused"), now);
    story.step(Command::ResumeAgent { agent }, now);
    story.step(
        Command::MarkOffline {
            agents: vec![(agent, 20_000, PulseReport::default())],
        },
        now,
    );
    now += 200 * MINUTE;
    story.step(Command::FireDueTimers, now);
    agent
}

/// An LLM agent with tools and prompts: input, usage, a rest asked from inside a run.
fn llm_agent(story: &mut Story) -> AgentId {
    let agent = story.create(
        "acme",
        json!({
            "name": "writer",
            "adapter": {
                "type": "llm", "api": "anthropic", "base_url": "https://llm.example.com/v1",
                "model": "claude-test", "api_key_env": "WRITER_KEY", "max_iterations": 8,
                "prompts": {"system": "You are {{ agent.name }}.",
                            "wakeup": {"default": "Woken: {{ run.reason }}"}},
                "tools": [{"name": "lookup", "description": "Looks a word up",
                           "parameters": {"type": "object",
                                          "properties": {"word": {"type": "string"}}},
                           "url": "https://tools.example.com/lookup"}],
            },
            "heartbeat": {"idle_after_ms": 60 * MINUTE, "sources": ["idle", "on_demand"]},
            "limits": {"daily_budget_usd": 2.5},
            "breaker": {"failures_to_open": 2, "cooldown_ms": 60_000, "cooldown_ms_max": 240_000},
        }),
        T0,
    );
    let now = T0 + 10 * MINUTE;
    story.step(
        Command::Input {
            agent,
            request: serde_json::from_value(on_demand("user wrote")).unwrap(),
        },
        now,
    );
    story.wake(
        agent,
        json!({"source": "timer", "reason": "not accepted"}),
        now,
    );
    let run = story.active(agent);
    story.step(
        Command::RecordUsage {
            run,
            usage: Usage {
                llm_calls: 1,
                input_tokens: 1_200,
                cached_input_tokens: 800,
                output_tokens: 150,
                cost_micro_usd: 4_321,
            },
        },
        now,
    );
    let report = RunReport {
        pause_minutes: Some(15),
        history_append: vec![
            HistoryMessage {
                role: Role::User,
                text: "user wrote".into(),
            },
            HistoryMessage {
                role: Role::Assistant,
                text: "resting".into(),
            },
        ],
        tool_calls: 1,
        ..RunReport::default()
    };
    story.finish(
        agent,
        RunEnd {
            stop_reason: Some(StopReason::PauseHeartbeats),
            report: Some(Box::new(report)),
            ..RunEnd::new(RunStatus::Succeeded, "rest asked")
        },
        now + MINUTE,
    );
    story.step(Command::ResumeAgent { agent }, now + 2 * MINUTE);
    agent
}

/// The adapters that run something outside the node, and a terminated agent.
fn cli_agents(story: &mut Story) {
    let child = json!({"cwd": "/srv/work", "env": {"MODE": "ci"},
                       "secret_env": {"GH_TOKEN": "NODE_GH_TOKEN"}, "timeout_sec": 900});
    let mut process = json!({"type": "process", "command": "/usr/bin/make",
                             "args": ["-C", "{{ agent.name }}"], "stdin": "{{ run.reason }}"});
    merge(&mut process, &child);
    let mut claude = json!({"type": "claude_local", "model": "sonnet", "max_turns": 12,
                            "extra_args": ["--verbose"]});
    merge(&mut claude, &child);
    let codex = json!({"type": "codex_local", "binary": "/opt/codex/bin/codex"});
    let hook = json!({"type": "http", "url": "https://hooks.example.com/run",
                      "secret_env": "HOOK_SECRET", "mode": "async", "report_wait_sec": 120});
    let now = T0 + 20 * MINUTE;
    let builder = story.create("beta", json!({"name": "builder", "adapter": process}), T0);
    story.create(
        "beta",
        json!({"name": "coder", "adapter": claude.clone()}),
        T0,
    );
    // Format 6: two agents of one spec, which the snapshot's spec table holds once.
    story.create("beta", json!({"name": "coder-2", "adapter": claude}), T0);
    story.create("beta", json!({"name": "reviewer", "adapter": codex}), T0);
    let notifier = story.create("beta", json!({"name": "notifier", "adapter": hook}), T0);
    story.wake(builder, on_demand("build"), now);
    let run = story.active(builder);
    story.step(Command::RecordProcessGroup { run, pgid: 4242 }, now);
    let report = RunReport {
        exit: Some(ChildExit {
            code: Some(2),
            signal: None,
        }),
        ..RunReport::default()
    };
    story.finish(
        builder,
        RunEnd {
            report: Some(Box::new(report)),
            ..RunEnd::new(RunStatus::Failed, "make exited 2").classed(ErrorClass::ExitNonzero)
        },
        now + MINUTE,
    );
    story.step(Command::TerminateAgent { agent: notifier }, now + MINUTE);
}

fn merge(into: &mut serde_json::Value, from: &serde_json::Value) {
    let into = into.as_object_mut().unwrap();
    for (key, value) in from.as_object().unwrap() {
        into.insert(key.clone(), value.clone());
    }
}

/// The LLM agent's breaker: opened by failures, reset by an operator, opened again, probed
/// after its cooldown, closed by the probe's success.
fn breaker(story: &mut Story, agent: AgentId) {
    let mut now = T0 + 60 * MINUTE;
    let failed = || RunEnd {
        cause: Some(FailureCause::Llm),
        stop_reason: Some(StopReason::LlmError),
        ..RunEnd::new(RunStatus::Failed, "provider answered 503").classed(ErrorClass::LlmError)
    };
    for _ in 0..2 {
        story.wake(agent, on_demand("try"), now);
        story.finish(agent, failed(), now + 1_000);
        now += 2_000;
    }
    story.step(Command::ResetBreaker { agent }, now);
    for _ in 0..2 {
        story.wake(agent, on_demand("try again"), now);
        story.finish(agent, failed(), now + 1_000);
        now += 2_000;
    }
    now += 5 * MINUTE;
    story.wake(agent, on_demand("probe"), now);
    story.finish(
        agent,
        RunEnd {
            stop_reason: Some(StopReason::Ghost),
            ..RunEnd::new(RunStatus::Succeeded, "[IDLE]")
        },
        now + 1_000,
    );
}

/// Restarts in the middle of the scripted agent's runs until it enters the error state, then an
/// operator takes it out.
fn restarts(story: &mut Story, agent: AgentId) {
    let mut now = T0 + 300 * MINUTE;
    while story.engine.agent(agent).unwrap().error.is_none() {
        let running = story.engine.agent_state(agent).unwrap().active_run();
        if running.is_none() {
            story.wake(agent, on_demand("long job"), now);
        }
        now += MINUTE;
        story.step(Command::RecoverRuns, now);
        assert!(
            now < T0 + 400 * MINUTE,
            "the restarts never put the agent in error"
        );
    }
    story.step(Command::ResetAgentError { agent }, now);
}

#[test]
#[ignore = "writes the checked-in fixture; run once, by hand, when a new format is introduced"]
fn write_current_format_fixture() {
    if std::env::var_os("VIGIL_WRITE_STORE_FIXTURE").is_none() {
        return;
    }
    let path = fixture_path(record::FORMAT_VERSION);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    write_story(Store::open(StorageLocation::File(path)).unwrap());
}

/// The stored bytes of every record, in order.
fn raw_records(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let db = redb::Database::open(path).unwrap();
    let tx = db.begin_read().unwrap();
    let table = tx.open_table(EVENTS).unwrap();
    table
        .iter()
        .unwrap()
        .map(|entry| {
            let (key, value) = entry.unwrap();
            (key.value(), value.value().to_vec())
        })
        .collect()
}

/// The stored bytes of every spec (by number) and every agent record (by id) of the database's
/// snapshots (none before format 4, no spec before format 6).
fn raw_snapshot(path: &Path) -> (Vec<(u32, Vec<u8>)>, Vec<(u64, Vec<u8>)>) {
    let db = redb::Database::open(path).unwrap();
    let tx = db.begin_read().unwrap();
    let specs = match tx.open_table(super::snapshot::SNAPSHOT_SPECS) {
        Ok(table) => table
            .iter()
            .unwrap()
            .map(|entry| {
                let (key, value) = entry.unwrap();
                (key.value().1, value.value().to_vec())
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    let Ok(table) = tx.open_table(super::snapshot::SNAPSHOT_AGENTS) else {
        return (specs, Vec::new());
    };
    let agents = table
        .iter()
        .unwrap()
        .map(|entry| {
            let (key, value) = entry.unwrap();
            (key.value().1, value.value().to_vec())
        })
        .collect();
    (specs, agents)
}

/// The format that stores a snapshot's specs in its spec table (before it, in each record).
const SPEC_TABLE_FORMAT: u64 = 6;

/// Decodes the snapshot of the database at `path` (written in format `format`) and encodes it
/// again as its format would: each spec and agent record must come back as the very bytes
/// stored.
fn snapshot_reencodes_byte_for_byte(format: u64, path: &Path) {
    let (specs, agents) = raw_snapshot(path);
    let table: Vec<std::sync::Arc<AgentSpec>> = specs
        .iter()
        .map(|(_, bytes)| std::sync::Arc::new(record::decode_spec(format, bytes).unwrap()))
        .collect();
    let mut decoder = record::AgentDecoder::new(&table);
    let mut encoder = record::SnapshotSpecs::default();
    let mut added = Vec::new();
    for (id, bytes) in &agents {
        let state = decoder.decode(format, bytes).unwrap();
        let again = if format < SPEC_TABLE_FORMAT {
            record::encode_agent(&state)
        } else {
            let (again, new_spec) = encoder.encode_agent(&state);
            added.extend(new_spec);
            again
        };
        assert!(
            again == *bytes,
            "agent {id}'s snapshot record does not re-encode to its stored bytes"
        );
    }
    assert!(
        added == specs,
        "the spec table does not re-encode to its stored bytes"
    );
}

/// The recovered state, as the views show it: each agent, its runs, history and sessions.
fn state_of(engine: &Engine) -> serde_json::Value {
    let agents: Vec<serde_json::Value> = engine
        .agent_states()
        .map(|state| {
            json!({
                "agent": state.agent(),
                // Not in the agent's view (which never shows it): which token it answers to.
                "token_hash": state.agent().token_hash.to_hex(),
                "runs": state.runs().collect::<Vec<_>>(),
                "active_run": state.active_run(),
                "queued_runs": state.queued_runs().collect::<Vec<_>>(),
                "history": state.history().messages().collect::<Vec<_>>(),
                "sessions": state.sessions().iter().collect::<Vec<_>>(),
            })
        })
        .map(|mut view| {
            // Only where there are any (format 5), so the older formats' states read as before.
            let state = engine.agent_state(AgentId(view["agent"]["id"].as_u64().unwrap()));
            let heartbeats: Vec<_> = state.unwrap().heartbeats().iter().collect();
            if !heartbeats.is_empty() {
                view["heartbeats"] = json!(heartbeats);
            }
            view
        })
        .collect();
    let tenants: Vec<serde_json::Value> = engine
        .tenants()
        .map(|tenant| {
            json!({
                "name": tenant.name,
                "budget": tenant.daily_budget_usd,
                "operator_token_hash": tenant.operator_token_hash.to_hex(),
                "configured_token_hash": tenant.configured_token_hash.to_hex(),
            })
        })
        .collect();
    json!({"last_seq": engine.last_seq(), "tenants": tenants, "agents": agents})
}

#[test]
fn the_story_writes_every_event_type_of_the_current_format() {
    let dir = std::env::temp_dir().join(format!("vigil-fixture-story-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vigil.redb");
    let engine = write_story(Store::open(StorageLocation::File(path.clone())).unwrap());
    let store = Store::open(StorageLocation::File(path.clone())).unwrap();
    let events = all_events(&store);
    let missing: Vec<&str> = FORMAT_1_TYPES
        .into_iter()
        .chain(FORMAT_2_ADDED)
        .chain(FORMAT_3_ADDED)
        .chain(FORMAT_5_ADDED)
        .filter(|name| !events.iter().any(|e| e.kind.type_name() == *name))
        .collect();
    assert!(missing.is_empty(), "the story never writes {missing:?}");
    let snapshot = store
        .current_snapshot_seq()
        .unwrap()
        .expect("the story snapshots");
    assert!(
        snapshot < engine.last_seq(),
        "events come after the snapshot"
    );
    assert_eq!(store.recover().unwrap(), engine);
    assert_eq!(
        store.recover_observed(None, &mut |_| {}).unwrap().engine,
        engine
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn all_events(store: &Store) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        let page = store
            .events_after(events.len() as u64, super::EVENTS_PAGE_MAX)
            .unwrap();
        if page.is_empty() {
            return events;
        }
        events.extend(page);
    }
}

/// Opens format `format`'s fixture: it is found in that format and stamped with the current
/// one, every record re-encodes to the very bytes stored, and it recovers into the state of its
/// snapshot.
fn fixture_recovers_byte_for_byte(format: u64) -> String {
    let path = fixture_copy(format);
    let store = Store::open(StorageLocation::File(path.clone())).unwrap();
    assert_eq!(store.found_format(), format);
    assert_eq!(store.format(), record::FORMAT_VERSION);
    let events = all_events(&store);
    drop(store);
    let raw = raw_records(&path);
    assert_eq!(events.len(), raw.len());
    for (event, (seq, bytes)) in events.iter().zip(&raw) {
        assert_eq!(event.seq, *seq);
        assert!(
            record::encode(event) == *bytes,
            "event {seq} ({}) does not re-encode to its stored bytes",
            event.kind.type_name()
        );
        // Every record is read the quick way, to what the derived reading gives.
        let quick = record::current::read::in_written_order(bytes)
            .unwrap_or_else(|error| panic!("event {seq} is not in the written order: {error}"));
        let derived: record::current::EventRecord = serde_json::from_slice(bytes).unwrap();
        assert_eq!(quick, derived, "event {seq}");
    }
    snapshot_reencodes_byte_for_byte(format, &path);
    let store = Store::open(StorageLocation::File(path.clone())).unwrap();
    assert_eq!(
        store.found_format(),
        record::FORMAT_VERSION,
        "stamped at the first open"
    );
    let engine = store.recover().unwrap();
    assert_eq!(
        store.recover_observed(None, &mut |_| {}).unwrap().engine,
        engine,
        "the snapshot and the log after it recover what the whole log does"
    );
    serde_json::to_string_pretty(&state_of(&engine)).unwrap()
}

#[test]
fn format_1_fixture_recovers_byte_for_byte_into_the_same_state() {
    let state = fixture_recovers_byte_for_byte(1);
    insta::assert_snapshot!("format_1_fixture_state", state);
}

#[test]
fn format_2_fixture_recovers_byte_for_byte_into_the_same_state() {
    let state = fixture_recovers_byte_for_byte(2);
    insta::assert_snapshot!("format_2_fixture_state", state);
}

#[test]
fn format_3_fixture_recovers_byte_for_byte_into_the_same_state() {
    let state = fixture_recovers_byte_for_byte(3);
    insta::assert_snapshot!("format_3_fixture_state", state);
}

#[test]
fn format_5_fixture_recovers_byte_for_byte_into_the_same_state() {
    let state = fixture_recovers_byte_for_byte(5);
    assert!(state.contains("emission_paused"), "the fixture holds heartbeats");
    insta::assert_snapshot!("format_5_fixture_state", state);
}

#[test]
fn format_6_fixture_recovers_byte_for_byte_into_the_same_state() {
    // A copy: redb writes to a database it opens, and the fixture is never rewritten.
    let (specs, agents) = raw_snapshot(&fixture_copy(6));
    assert!(
        specs.len() < agents.len() && !specs.is_empty(),
        "the fixture's snapshot shares a spec: {} specs for {} agents",
        specs.len(),
        agents.len()
    );
    let state = fixture_recovers_byte_for_byte(6);
    insta::assert_snapshot!("format_6_fixture_state", state);
}

#[test]
fn format_4_fixture_recovers_byte_for_byte_into_the_same_state() {
    let path = fixture_copy(4);
    let store = Store::open(StorageLocation::File(path)).unwrap();
    assert!(
        store.current_snapshot_seq().unwrap().is_some(),
        "the format-4 fixture holds a snapshot"
    );
    drop(store);
    let state = fixture_recovers_byte_for_byte(4);
    insta::assert_snapshot!("format_4_fixture_state", state);
}

/// A page of `GET /v1/events` writes each event exactly as serde_json writes the event alone,
/// so a reader may digest each event as the bytes it received: the simulator's feed reader
/// does (`sim/src/workload.rs`), and its digests must equal those of the events committed.
/// Every event type, from the newest format's fixture.
#[test]
fn a_feed_page_writes_each_event_as_the_event_alone() {
    // A copy of its own: the fixture tests of this format remove theirs when done.
    let dir = std::env::temp_dir().join(format!("vigil-feed-page-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vigil.redb");
    std::fs::copy(fixture_path(record::FORMAT_VERSION), &path).unwrap();
    let store = Store::open(StorageLocation::File(path)).unwrap();
    let events = all_events(&store);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(events.len() > 50, "{} events", events.len());
    let alone: Vec<String> = events
        .iter()
        .map(|event| serde_json::to_string(event).unwrap())
        .collect();
    let page = crate::api::events::Page {
        events,
        head_seq: 1,
        next_after: 2,
    };
    let written = serde_json::to_string(&page).unwrap();
    assert_eq!(
        written,
        format!(
            r#"{{"events":[{}],"head_seq":1,"next_after":2}}"#,
            alone.join(",")
        )
    );
}
