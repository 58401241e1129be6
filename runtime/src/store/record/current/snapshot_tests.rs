//! The snapshot records round-trip every state the engine reaches: engines are driven through
//! real command histories (the format fixtures' stories, and histories written here for what
//! they do not reach), and after every event each agent's state and each tenant is encoded,
//! decoded and compared whole. Plus decode errors, and a size and speed measure.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use crate::engine::agent::{AgentId, AgentSpec};
use crate::engine::agent_state::AgentState;
use crate::engine::breaker::FailureCause;
use crate::engine::event::Event;
use crate::engine::history::{HistoryMessage, Role};
use crate::engine::node_bounds::NodeLimits;
use crate::engine::run::{
    ErrorClass, RunEnd, RunId, RunReport, RunStatus, SessionChange, StopReason,
};
use crate::engine::tenant::TokenHash;
use crate::engine::usage::{MicroUsd, Usage};
use crate::engine::wakeup::{WakeupRequest, IDEMPOTENCY_TTL_MS};
use crate::engine::{Command, Decision, Engine};
use crate::store::record::{
    decode_agent, decode_spec, decode_tenant, encode_agent, encode_tenant, AgentDecoder,
    RecordError, SnapshotSpecs, FORMAT_VERSION, SHARED_SPEC_BYTES_MAX,
};

/// Encodes and decodes `state`, asserting the very same state comes back and that encoding
/// again gives the very same bytes.
fn round_trip(state: &AgentState) {
    let bytes = encode_agent(state);
    let back = decode_agent(FORMAT_VERSION, &bytes).unwrap_or_else(|error| {
        panic!(
            "agent {} does not decode: {error:?}\n{}",
            state.agent().id,
            String::from_utf8_lossy(&bytes)
        )
    });
    assert!(
        back == *state,
        "agent {} does not round-trip:\n{}\nstate: {state:#?}\nback: {back:#?}",
        state.agent().id,
        String::from_utf8_lossy(&bytes)
    );
    assert_eq!(encode_agent(&back), bytes, "re-encoding changes the bytes");
}

fn round_trip_all(engine: &Engine) -> usize {
    for tenant in engine.tenants() {
        let bytes = encode_tenant(tenant);
        assert_eq!(
            decode_tenant(FORMAT_VERSION, &bytes).as_ref(),
            Ok(tenant),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
    }
    let mut agents = 0;
    // Also as a snapshot before format 6 is read: one decoder for the agents in order, taking a
    // spec from the previous agent's whenever only the name differs.
    let mut in_order = AgentDecoder::new(&[]);
    for state in engine.agent_states() {
        round_trip(state);
        let back = in_order
            .decode(FORMAT_VERSION, &encode_agent(state))
            .expect("decodes");
        assert!(
            back == *state,
            "agent {} decodes otherwise after the agent before it",
            state.agent().id
        );
        agents += 1;
    }
    round_trip_with_spec_table(engine);
    agents
}

/// The engine's agents encoded in order as a snapshot writes them (specs in its spec table)
/// and decoded with that table as a snapshot is read: each comes back whole.
fn round_trip_with_spec_table(engine: &Engine) {
    let (records, table) = with_spec_table(engine.agent_states());
    let mut decoder = AgentDecoder::new(&table);
    for (state, bytes) in engine.agent_states().zip(&records) {
        let back = decoder
            .decode(FORMAT_VERSION, bytes)
            .unwrap_or_else(|error| {
                panic!(
                    "agent {} does not decode with its spec table: {error:?}\n{}",
                    state.agent().id,
                    String::from_utf8_lossy(bytes)
                )
            });
        assert!(
            back == *state,
            "agent {} decodes otherwise with its spec table",
            state.agent().id
        );
    }
}

/// `states` encoded in order as a snapshot writes them: each agent's record, and the spec table
/// they filled, decoded (each spec numbered in the order it was added).
fn with_spec_table<'s>(
    states: impl Iterator<Item = &'s AgentState>,
) -> (Vec<Vec<u8>>, Vec<Arc<AgentSpec>>) {
    let mut specs = SnapshotSpecs::default();
    let mut table = Vec::new();
    let records = states
        .map(|state| {
            let (record, new_spec) = specs.encode_agent(state);
            if let Some((number, bytes)) = new_spec {
                assert_eq!(number as usize, table.len(), "specs are numbered in order");
                table.push(Arc::new(
                    decode_spec(FORMAT_VERSION, &bytes).expect("decodes"),
                ));
            }
            record
        })
        .collect();
    assert_eq!(specs.len(), table.len());
    (records, table)
}

/// Drives an engine, round-tripping every agent and tenant after every event.
struct Driver {
    engine: Engine,
    checks: usize,
}

impl Driver {
    fn new(limits: NodeLimits) -> Driver {
        let mut driver = Driver {
            engine: Engine::with_limits(limits),
            checks: 0,
        };
        driver.step(
            Command::EnsureTenant {
                tenant: "t".into(),
                operator_token_hash: TokenHash::of("op"),
            },
            T0,
        );
        driver
    }

    fn step(&mut self, command: Command, now_ms: u64) -> Decision {
        let decision = self
            .engine
            .decide(&command, now_ms)
            .unwrap_or_else(|refusal| panic!("{command:?} refused: {refusal}"));
        for event in &decision.events {
            self.engine.apply(event);
            self.checks += round_trip_all(&self.engine);
        }
        decision
    }

    fn create(&mut self, spec: serde_json::Value, now_ms: u64) -> AgentId {
        let spec: AgentSpec = serde_json::from_value(spec).expect("a valid spec");
        let name = spec.name.clone();
        self.step(
            Command::CreateAgent {
                tenant: "t".into(),
                token_hash: TokenHash::of(&name),
                spec,
            },
            now_ms,
        );
        self.engine.agent_named("t", &name).unwrap().id
    }

    fn wake(&mut self, agent: AgentId, request: serde_json::Value, now_ms: u64) -> Decision {
        let request: WakeupRequest = serde_json::from_value(request).expect("a valid request");
        self.step(Command::Wake { agent, request }, now_ms)
    }

    fn active(&self, agent: AgentId) -> Option<RunId> {
        self.engine.agent_state(agent).unwrap().active_run()
    }

    fn finish(&mut self, agent: AgentId, end: RunEnd, now_ms: u64) {
        let run = self.active(agent).expect("a running run");
        self.step(Command::FinishRun { run, end }, now_ms);
    }

    fn state(&self, agent: AgentId) -> &AgentState {
        self.engine.agent_state(agent).unwrap()
    }
}

/// 2026-01-05T08:00:00Z.
const T0: u64 = 1_767_600_000_000;
const MINUTE: u64 = 60_000;

fn llm_spec(name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "adapter": {"type": "llm", "base_url": "https://llm.example.com/v1", "model": "m"},
        "heartbeat": {"interval_ms": 30 * MINUTE, "idle_after_ms": 60 * MINUTE},
        "limits": {"daily_budget_usd": 100.0, "queued_runs_max": 8},
        "breaker": {"failures_to_open": 2, "cooldown_ms": 60_000, "cooldown_ms_max": 120_000},
    })
}

fn llm_end(turn: usize, excerpt_bytes: usize) -> RunEnd {
    let report = RunReport {
        history_append: vec![
            HistoryMessage::new(Role::User, &format!("wakeup {turn}")),
            HistoryMessage::new(
                Role::Assistant,
                &format!("answer {turn}: {}", "é".repeat(20)),
            ),
        ],
        answer_excerpt: Some(format!("answer {turn} {}", "x".repeat(excerpt_bytes))),
        tool_calls: turn as u64 % 3,
        ..RunReport::default()
    };
    RunEnd {
        stop_reason: Some(StopReason::EndTurn),
        report: Some(Box::new(report)),
        ..RunEnd::new(RunStatus::Succeeded, "ok")
    }
}

fn usage(cost: u64) -> Usage {
    Usage {
        llm_calls: 1,
        input_tokens: 1_000,
        cached_input_tokens: 100,
        output_tokens: 50,
        cost_micro_usd: cost,
    }
}

/// Every fixture's story, replayed event by event, round-trips at every step.
#[test]
fn every_state_of_the_fixture_stories_round_trips() {
    let mut checked = 0;
    for format in 1..=3u64 {
        let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../tests/fixtures/store/format-{format}.redb"));
        let dir = std::env::temp_dir().join(format!(
            "vigil-snapshot-fixture-{format}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vigil.redb");
        std::fs::copy(source, &path).unwrap();
        let events: Vec<Event> = {
            use redb::{ReadableDatabase, ReadableTable};
            let db = redb::Database::open(&path).unwrap();
            let tx = db.begin_read().unwrap();
            let table = tx.open_table(crate::store::EVENTS).unwrap();
            table
                .iter()
                .unwrap()
                .map(|entry| {
                    let (seq, bytes) = entry.unwrap();
                    crate::store::record::decode(format, seq.value(), bytes.value()).unwrap()
                })
                .collect()
        };
        let mut engine = Engine::new();
        for event in &events {
            engine.apply(event);
            checked += round_trip_all(&engine);
        }
        assert!(events.len() > 50, "format {format}'s story is there");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(checked > 500, "{checked} states checked");
}

/// LLM agents through many runs: histories past their bound, more finished runs than an agent
/// keeps, excerpts dropped by the node's bound, usage, budgets, timers, idle, keys expiring,
/// coalescing, failures opening the breaker, a half-open probe, a re-queue after a restart.
#[test]
fn busy_llm_agents_round_trip_at_every_step() {
    let mut d = Driver::new(NodeLimits {
        answer_excerpts: 30,
        finished_runs: 150,
        ..NodeLimits::default()
    });
    d.step(
        Command::SetTenantBudget {
            tenant: "t".into(),
            daily_budget_usd: Some(MicroUsd(50_000_000)),
        },
        T0,
    );
    let a = d.create(llm_spec("writer"), T0);
    let b = d.create(llm_spec("reader"), T0);
    let mut now = T0 + MINUTE;
    for turn in 0..130 {
        let agent = if turn % 3 == 0 { b } else { a };
        let key = format!("k-{}", turn % 7);
        d.wake(
            agent,
            json!({"source": "on_demand", "reason": format!("turn {turn}"),
                   "task_key": format!("task-{}", turn % 2), "idempotency_key": key,
                   "payload": {"turn": turn, "f": 0.1 * turn as f64}}),
            now,
        );
        // A second wakeup for the other task key queues behind, a third coalesces onto it.
        d.wake(
            agent,
            json!({"source": "assignment", "reason": "behind", "task_key": "other",
                   "idempotency_key": format!("b-{turn}")}),
            now,
        );
        d.wake(
            agent,
            json!({"source": "on_demand", "reason": "coalesced", "task_key": "other"}),
            now,
        );
        while let Some(run) = d.active(agent) {
            d.step(
                Command::RecordUsage {
                    run,
                    usage: usage(1_000 + turn as u64),
                },
                now,
            );
            now += 1_000;
            d.step(
                Command::FinishRun {
                    run,
                    end: llm_end(turn, turn * 40),
                },
                now,
            );
        }
        now += 7 * MINUTE;
        if turn % 10 == 0 {
            d.step(Command::FireDueTimers, now);
        }
        if turn % 40 == 39 {
            // Past the keys' time to live: the next keyed wakeup forgets the expired ones.
            now += IDEMPOTENCY_TTL_MS;
        }
    }
    // More runs finished than the node keeps: the oldest were evicted.
    let held = |agent| d.state(agent).finished_in_order().count();
    assert_eq!(held(a) + held(b), 150);
    // Failures open the breaker; after its cooldown the probe fails again with a cause.
    let failed = || RunEnd {
        cause: Some(FailureCause::Llm),
        ..RunEnd::new(RunStatus::Failed, "503").classed(ErrorClass::LlmError)
    };
    for _ in 0..2 {
        d.wake(a, json!({"source": "on_demand", "reason": "try"}), now);
        d.finish(a, failed(), now + 1_000);
        now += 2_000;
    }
    now += 2 * MINUTE;
    d.wake(a, json!({"source": "on_demand", "reason": "probe"}), now);
    d.wake(
        a,
        json!({"source": "on_demand", "reason": "refused", "task_key": "x"}),
        now,
    );
    d.finish(a, failed(), now + 1_000);
    // A restart fails the running run and re-queues it once, payload and all.
    now += 10 * MINUTE;
    d.wake(
        b,
        json!({"source": "assignment", "reason": "long", "payload": {"big": [1, 2, 3]}}),
        now,
    );
    d.step(Command::RecoverRuns, now + 1_000);
    let requeued = d
        .active(b)
        .or_else(|| d.state(b).queued_runs().next())
        .expect("the failed run is re-queued");
    d.step(Command::CancelRun { run: requeued }, now + 2_000);
    assert!(d.checks > 1_000, "{} states checked", d.checks);
}

/// Scripted and coding-CLI agents: sessions set, cleared and reset, cooldowns holding a queued
/// run, daily caps, pauses of both kinds, liveness, process groups, terminated and errored
/// agents, and a spec update.
#[test]
fn scripted_and_cli_agents_round_trip_at_every_step() {
    let mut d = Driver::new(NodeLimits::default());
    let idle = d.create(
        json!({"name": "idle", "heartbeat": {"interval_ms": MINUTE}}),
        T0,
    );
    let capped = d.create(
        json!({"name": "capped", "time_zone": "Asia/Tokyo",
               "adapter": {"type": "scripted", "steps": [
                   {"duration_ms": 1_000, "outcome": "succeeded"},
                   {"duration_ms": 1_000, "outcome": "tool_failed"}]},
               "heartbeat": {"interval_ms": 5 * MINUTE, "idle_after_ms": 10 * MINUTE,
                             "while_paused": "refuse_all"},
               "limits": {"daily_cap": 3, "cooldown_ms": 90_000, "queued_runs_max": 2},
               "liveness": {"pulse_interval_ms": 5_000, "passive_pulses": true}}),
        T0,
    );
    let coder = d.create(
        json!({"name": "coder", "adapter": {"type": "claude_local", "model": "sonnet",
                                            "cwd": "/srv", "timeout_sec": 900}}),
        T0,
    );
    let mut now = T0;
    for i in 0..12u64 {
        now += 3 * MINUTE;
        d.step(Command::FireDueTimers, now);
        d.wake(
            capped,
            json!({"source": "assignment", "reason": format!("job {i}"),
                   "task_key": format!("j{}", i % 2), "idempotency_key": format!("j-{i}")}),
            now,
        );
        if let Some(run) = d.active(capped) {
            d.step(
                Command::RecordProcessGroup {
                    run,
                    pgid: 100 + i as u32,
                },
                now,
            );
            let end = if i % 3 == 1 {
                RunEnd::new(RunStatus::Failed, "tool").caused_by(FailureCause::Tool)
            } else {
                RunEnd::new(RunStatus::Succeeded, "ok")
            };
            d.finish(capped, end, now + 1_000);
        }
        d.step(
            Command::MarkOnline {
                agents: vec![(capped, Default::default())],
            },
            now,
        );
        if i % 4 == 3 {
            d.step(
                Command::MarkOffline {
                    agents: vec![(capped, 30_000, Default::default())],
                },
                now + 1,
            );
        }
        if i == 5 {
            d.step(
                Command::Input {
                    agent: capped,
                    request: serde_json::from_value(json!({"source": "on_demand",
                                                           "reason": "hello"}))
                    .unwrap(),
                },
                now,
            );
        }
        // The coding CLI works in the task's session, which a later run clears.
        d.wake(
            coder,
            json!({"source": "on_demand", "reason": "code", "task_key": format!("c{}", i % 3)}),
            now,
        );
        let session = match i % 4 {
            3 => Some(SessionChange::Clear),
            _ => Some(SessionChange::Set {
                session_id: format!("sess-{i}"),
            }),
        };
        let report = RunReport {
            session,
            answer_excerpt: Some("patched".into()),
            ..RunReport::default()
        };
        d.finish(
            coder,
            RunEnd::new(RunStatus::Succeeded, "ok").with_report(report),
            now + 500,
        );
    }
    d.step(
        Command::ResetSession {
            agent: coder,
            task_key: "c1".into(),
        },
        now,
    );
    d.step(
        Command::PauseAgent {
            agent: capped,
            minutes: Some(20),
        },
        now,
    );
    d.wake(
        capped,
        json!({"source": "on_demand", "reason": "paused"}),
        now,
    );
    d.step(Command::ResumeAgent { agent: capped }, now + 1);
    d.step(
        Command::PauseAgent {
            agent: idle,
            minutes: None,
        },
        now,
    );
    d.wake(
        coder,
        json!({"source": "on_demand", "reason": "agent rests"}),
        now,
    );
    d.step(
        Command::PauseHeartbeats {
            agent: coder,
            minutes: Some(5),
        },
        now + 1,
    );
    d.step(
        Command::UpdateAgent {
            agent: capped,
            change: crate::engine::agent_update::SpecChange::Merge(
                json!({"limits": {"daily_cap": 20}}),
            ),
        },
        now + 2,
    );
    // Restarts in a row put the capped agent in error; an operator takes it out.
    for round in 0.. {
        if d.engine.agent(capped).unwrap().error.is_some() {
            break;
        }
        assert!(round < 50, "the restarts never put the agent in error");
        if d.active(capped).is_none() {
            d.wake(capped, json!({"source": "on_demand", "reason": "job"}), now);
        }
        now += 2 * MINUTE;
        d.step(Command::RecoverRuns, now);
    }
    d.step(Command::ResetAgentError { agent: capped }, now);
    d.step(Command::TerminateAgent { agent: idle }, now);
    assert!(d.checks > 300, "{} states checked", d.checks);
}

// ---- decode errors ----

fn busy_record() -> serde_json::Value {
    let mut d = Driver::new(NodeLimits::default());
    let a = d.create(llm_spec("busy"), T0);
    d.wake(
        a,
        json!({"source": "on_demand", "reason": "one", "task_key": "t"}),
        T0,
    );
    d.wake(
        a,
        json!({"source": "on_demand", "reason": "two", "task_key": "t"}),
        T0,
    );
    serde_json::from_slice(&encode_agent(d.state(a))).unwrap()
}

fn decode_error(record: &serde_json::Value) -> RecordError {
    decode_agent(FORMAT_VERSION, &serde_json::to_vec(record).unwrap()).unwrap_err()
}

/// Agents of one spec (but for the name) decode in order as each does alone, the spec taken
/// from the agent before; a spec that differs after the name, even by one digit, or an agent
/// with a bad spec, is parsed for itself.
#[test]
fn agents_of_one_spec_share_its_parse_and_any_difference_is_parsed() {
    let engine = fleet_of([60_000, 60_000, 60_000, 90_000, 90_000, 60_000]);
    let mut decoder = AgentDecoder::new(&[]);
    for state in engine.agent_states() {
        let back = decoder
            .decode(FORMAT_VERSION, &encode_agent(state))
            .expect("decodes");
        assert!(
            back == *state,
            "agent {} decodes otherwise",
            state.agent().id
        );
    }
    // Agents 2, 3 and 5 follow one of their spec; 4 and 6 change the interval.
    assert_eq!(decoder.specs_reused(), 3);

    // A spec that does not convert is refused, naming its field, even after one that did.
    let mut record: serde_json::Value =
        serde_json::from_slice(&encode_agent(engine.agent_states().next().unwrap())).unwrap();
    record["spec"]["time_zone"] = json!("Mars/Olympus");
    let bytes = serde_json::to_vec(&record).unwrap();
    let error = decoder.decode(FORMAT_VERSION, &bytes).unwrap_err();
    assert!(error.reason.contains("spec.time_zone"), "{error:?}");
    record["spec"]["heartbeat"] = json!("every minute");
    let error = decoder
        .decode(FORMAT_VERSION, &serde_json::to_vec(&record).unwrap())
        .unwrap_err();
    assert!(error.reason.starts_with("spec: "), "{error:?}");
}

/// An engine with one tenant and an agent per interval, named `agent-<i>`.
fn fleet_of(intervals: impl IntoIterator<Item = u64>) -> Engine {
    let mut engine = Engine::new();
    let mut apply = |command: Command| {
        let events = engine.decide(&command, T0).expect("accepted").events;
        events.iter().for_each(|event| engine.apply(event));
    };
    apply(Command::EnsureTenant {
        tenant: "t".into(),
        operator_token_hash: TokenHash::of("op"),
    });
    for (i, interval) in intervals.into_iter().enumerate() {
        apply(Command::CreateAgent {
            tenant: "t".into(),
            spec: AgentSpec::with_interval(&format!("agent-{i}"), Some(interval)),
            token_hash: TokenHash::of(&format!("token-{i}")),
        });
    }
    engine
}

/// Each record's `spec_ref`, and whether it holds a spec.
fn spec_refs(records: &[Vec<u8>]) -> Vec<(Option<u64>, bool)> {
    records
        .iter()
        .map(|bytes| {
            let record: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            (record["spec_ref"].as_u64(), record.get("spec").is_some())
        })
        .collect()
}

/// Agents whose specs are equal but for the name refer to one spec of the snapshot's spec
/// table, stored once with an empty name; a spec that differs after the name gets a number of
/// its own. A record that refers to the table does not decode alone.
#[test]
fn agents_of_one_spec_refer_to_one_spec_of_the_table() {
    let engine = fleet_of([60_000, 60_000, 90_000, 60_000, 90_000]);
    let (records, table) = with_spec_table(engine.agent_states());
    assert_eq!(
        spec_refs(&records),
        [
            (Some(0), false),
            (Some(0), false),
            (Some(1), false),
            (Some(0), false),
            (Some(1), false)
        ]
    );
    assert_eq!(table.len(), 2);
    assert!(table.iter().all(|spec| spec.name.is_empty()));
    assert_eq!(table[1].heartbeat.interval_ms, Some(90_000));
    round_trip_with_spec_table(&engine);

    let error = decode_agent(FORMAT_VERSION, &records[0]).unwrap_err();
    assert_eq!(
        error.reason,
        "spec_ref: spec 0 is not in the snapshot's spec table, which holds 0"
    );
}

/// A record names a spec of the table that exists, or holds its own spec: a number past the
/// table, both, or neither is refused, naming the field.
#[test]
fn a_record_refers_to_a_spec_of_the_table_or_holds_one() {
    let engine = fleet_of([60_000]);
    let (records, table) = with_spec_table(engine.agent_states());
    let refused = |record: &serde_json::Value| {
        AgentDecoder::new(&table)
            .decode(FORMAT_VERSION, &serde_json::to_vec(record).unwrap())
            .unwrap_err()
            .reason
    };
    let mut record: serde_json::Value = serde_json::from_slice(&records[0]).unwrap();
    record["spec_ref"] = json!(1);
    assert_eq!(
        refused(&record),
        "spec_ref: spec 1 is not in the snapshot's spec table, which holds 1"
    );
    let inline: serde_json::Value =
        serde_json::from_slice(&encode_agent(engine.agent_states().next().unwrap())).unwrap();
    record["spec_ref"] = json!(0);
    record["spec"] = inline["spec"].clone();
    assert_eq!(
        refused(&record),
        "spec_ref: the record holds a spec and refers to one; it may do one only"
    );
    let fields = record.as_object_mut().unwrap();
    fields.remove("spec");
    fields.remove("spec_ref");
    assert_eq!(
        refused(&record),
        "spec: missing: the record neither holds a spec nor refers to one"
    );
}

/// The table shares distinct specs while their text fits in [`SHARED_SPEC_BYTES_MAX`]; the
/// first that would not fit, and every new one after it, stays in its agent's record, while a
/// spec already shared is still referred to. Every agent decodes whole either way.
#[test]
fn the_spec_table_shares_specs_up_to_its_byte_bound() {
    // An idle agent's spec is a few hundred bytes: enough distinct ones (an interval each) to
    // fill the table, then one more agent of the first agent's spec.
    let distinct = SHARED_SPEC_BYTES_MAX / 300;
    let engine = fleet_of((0..distinct as u64).map(|i| 60_000 + i).chain([60_000]));
    let mut specs = SnapshotSpecs::default();
    let mut shared_bytes = 0;
    let mut records = Vec::new();
    for state in engine.agent_states() {
        let (record, new_spec) = specs.encode_agent(state);
        shared_bytes += new_spec.map_or(0, |(_, bytes)| bytes.len());
        records.push(record);
    }
    assert!(shared_bytes <= SHARED_SPEC_BYTES_MAX);
    let refs = spec_refs(&records);
    let first_kept = refs
        .iter()
        .position(|(spec_ref, _)| spec_ref.is_none())
        .expect("the table fills up");
    assert_eq!(first_kept, specs.len(), "every spec before it is shared");
    assert!(refs[first_kept..distinct]
        .iter()
        .all(|&(spec_ref, inline)| spec_ref.is_none() && inline));
    assert_eq!(
        refs[distinct],
        (Some(0), false),
        "a shared spec is still shared"
    );
    // The first kept one would not have fit: its text (name empty) and the table's pass the bound.
    let record: serde_json::Value = serde_json::from_slice(&records[first_kept]).unwrap();
    let mut spec = record["spec"].clone();
    spec["name"] = json!("");
    let spec_bytes = serde_json::to_vec(&spec).unwrap().len();
    assert!(shared_bytes + spec_bytes > SHARED_SPEC_BYTES_MAX);
    round_trip_with_spec_table(&engine);
}

#[test]
fn a_bad_instant_is_refused_naming_its_field() {
    let mut record = busy_record();
    record["created_at_ms"] = json!(u64::MAX);
    let error = decode_error(&record);
    assert_eq!(error.event_type.as_deref(), Some("agent_snapshot"));
    assert!(
        error.reason.starts_with("created_at_ms: "),
        "{}",
        error.reason
    );

    let mut record = busy_record();
    record["live"][1]["queued_at_ms"] = json!(253_402_207_200_001u64);
    let error = decode_error(&record);
    assert!(
        error.reason.starts_with("live[1].queued_at_ms: "),
        "{}",
        error.reason
    );

    let mut record = busy_record();
    record["spec"]["time_zone"] = json!("Mars/Olympus");
    assert!(decode_error(&record).reason.starts_with("spec.time_zone: "));
}

#[test]
fn an_inconsistent_run_set_is_refused_naming_its_field() {
    let record = busy_record();
    assert_eq!(record["live"][0]["status"], "running");
    assert_eq!(record["live"][1]["status"], "queued");

    let mut two_running = record.clone();
    two_running["live"][1]["status"] = json!("running");
    let error = decode_error(&two_running);
    assert!(error.reason.starts_with("live: "), "{}", error.reason);
    assert!(error.reason.contains("both running"), "{}", error.reason);

    let mut queued_twice = record.clone();
    let mut again = record["live"][1].clone();
    again["id"] = json!(999);
    queued_twice["live"].as_array_mut().unwrap().push(again);
    let error = decode_error(&queued_twice);
    assert!(
        error.reason.contains("both queued for task key"),
        "{}",
        error.reason
    );

    let mut ended_live = record.clone();
    ended_live["live"][1]["status"] = json!("succeeded");
    assert!(decode_error(&ended_live).reason.starts_with("live: "));

    let mut held_twice = record.clone();
    held_twice["live"][1]["id"] = record["live"][0]["id"].clone();
    assert!(decode_error(&held_twice).reason.contains("held twice"));

    let mut dangling = record.clone();
    dangling["last_finished"] = json!({"held": {"run": 12345}});
    assert!(decode_error(&dangling)
        .reason
        .starts_with("last_finished: "));

    let mut finished_live = record.clone();
    finished_live["finished"] = json!([{"seq": 9, "run": record["live"][1].clone()}]);
    assert!(decode_error(&finished_live)
        .reason
        .starts_with("finished: "));
}

#[test]
fn truncated_or_foreign_json_is_refused() {
    let bytes = serde_json::to_vec(&busy_record()).unwrap();
    let error = decode_agent(FORMAT_VERSION, &bytes[..bytes.len() / 2]).unwrap_err();
    assert_eq!(error.event_type.as_deref(), Some("agent_snapshot"));
    assert!(error.reason.contains("EOF"), "{}", error.reason);

    let mut record = busy_record();
    record["live"][0]["status"] = json!("sleeping");
    let error = decode_error(&record);
    assert!(error.reason.contains("sleeping"), "{}", error.reason);

    let error = decode_tenant(FORMAT_VERSION, br#"{"name": "t"}"#).unwrap_err();
    assert_eq!(error.event_type.as_deref(), Some("tenant_snapshot"));
    assert!(
        error.reason.contains("operator_token_hash"),
        "{}",
        error.reason
    );

    let error = decode_agent(FORMAT_VERSION + 1, &bytes).unwrap_err();
    assert!(error.reason.contains("newer"), "{}", error.reason);
}

/// An idle agent's record holds its identity and spec and nothing else.
#[test]
fn an_idle_agent_stores_only_what_it_has() {
    let mut d = Driver::new(NodeLimits::default());
    let a = d.create(
        json!({"name": "idle-1", "heartbeat": {"interval_ms": MINUTE}}),
        T0,
    );
    let record: serde_json::Value = serde_json::from_slice(&encode_agent(d.state(a))).unwrap();
    let mut fields: Vec<&str> = record
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "created_at_ms",
            "id",
            "name",
            "next_fire_at_ms",
            "spec",
            "tenant",
            "token_hash"
        ]
    );
}

/// Sizes and speed, for the report: `cargo test --release -p vigil --lib
/// snapshot_sizes_and_speed -- --ignored --nocapture`. Why the real clock (`Instant::now`): it
/// measures how long encoding and decoding take, and only prints it; ignored, never in the
/// suite or the simulator, and nothing it reads reaches behaviour or a trace.
#[test]
#[ignore = "a measure, not a test: run by hand in release"]
fn snapshot_sizes_and_speed() {
    let mut engine = Engine::new();
    let apply = |engine: &mut Engine, command: Command, now_ms: u64| {
        let decision = engine.decide(&command, now_ms).unwrap();
        decision.events.iter().for_each(|e| engine.apply(e));
    };
    apply(
        &mut engine,
        Command::EnsureTenant {
            tenant: "t".into(),
            operator_token_hash: TokenHash::of("op"),
        },
        T0,
    );
    const AGENTS: usize = 100_000;
    for i in 0..AGENTS {
        let spec = AgentSpec::with_interval(&format!("agent-{i}"), Some(30 * MINUTE));
        apply(
            &mut engine,
            Command::CreateAgent {
                tenant: "t".into(),
                spec,
                token_hash: TokenHash::of(&format!("token-{i}")),
            },
            T0,
        );
    }
    let states: Vec<&AgentState> = engine.agent_states().collect();
    let idle_bytes = encode_agent(states[0]);
    println!(
        "idle scripted agent with a timer: {} bytes\n{}",
        idle_bytes.len(),
        String::from_utf8_lossy(&idle_bytes)
    );
    let started = Instant::now();
    let encoded: Vec<Vec<u8>> = states.iter().map(|s| encode_agent(s)).collect();
    let encode_time = started.elapsed();
    let total: usize = encoded.iter().map(Vec::len).sum();
    let started = Instant::now();
    let decoded: Vec<AgentState> = encoded
        .iter()
        .map(|bytes| decode_agent(FORMAT_VERSION, bytes).unwrap())
        .collect();
    let decode_time = started.elapsed();
    assert_eq!(decoded.len(), AGENTS);
    println!(
        "{AGENTS} idle agents: {total} bytes; encode {:?} ({:.2} µs/agent), decode {:?} ({:.2} µs/agent)",
        encode_time,
        encode_time.as_secs_f64() * 1e6 / AGENTS as f64,
        decode_time,
        decode_time.as_secs_f64() * 1e6 / AGENTS as f64,
    );

    // Where decoding goes: parsing the JSON (the spec's internally tagged adapter included),
    // then the time zone's lookup and the rest of the conversion.
    let started = Instant::now();
    for bytes in &encoded {
        std::hint::black_box(
            serde_json::from_slice::<super::snapshot::AgentRecord>(bytes).unwrap(),
        );
    }
    let parse_time = started.elapsed();
    let started = Instant::now();
    for _ in 0..AGENTS {
        std::hint::black_box(jiff::tz::TimeZone::get(std::hint::black_box("UTC")).is_ok());
    }
    let zone_time = started.elapsed();
    println!(
        "of which parsing the JSON {:.2} µs/agent, the time zone's lookup {:.2} µs/agent",
        parse_time.as_secs_f64() * 1e6 / AGENTS as f64,
        zone_time.as_secs_f64() * 1e6 / AGENTS as f64,
    );

    // A busy LLM agent: 100 finished runs with reports, a full history, keys, usage.
    let mut d = Driver::new(NodeLimits::default());
    let a = d.create(llm_spec("busy"), T0);
    let mut now = T0;
    for turn in 0..150 {
        let request: WakeupRequest = serde_json::from_value(json!({
            "source": "on_demand", "reason": format!("turn {turn}"),
            "idempotency_key": format!("k-{turn}"), "payload": {"turn": turn}}))
        .unwrap();
        apply(&mut d.engine, Command::Wake { agent: a, request }, now);
        let run = d.active(a).unwrap();
        apply(
            &mut d.engine,
            Command::RecordUsage {
                run,
                usage: usage(1_500),
            },
            now,
        );
        apply(
            &mut d.engine,
            Command::FinishRun {
                run,
                end: llm_end(turn, 200),
            },
            now + 1_000,
        );
        now += MINUTE;
    }
    let busy = d.state(a);
    let bytes = encode_agent(busy);
    let started = Instant::now();
    for _ in 0..100 {
        std::hint::black_box(encode_agent(busy));
    }
    let encode_time = started.elapsed() / 100;
    let started = Instant::now();
    for _ in 0..100 {
        std::hint::black_box(decode_agent(FORMAT_VERSION, &bytes).unwrap());
    }
    let decode_time = started.elapsed() / 100;
    println!(
        "busy LLM agent ({} finished runs, {} history messages, {} keys): {} bytes; encode {:?}, decode {:?}",
        busy.finished_in_order().count(),
        busy.history().messages().len(),
        busy.idempotency_keys().count(),
        bytes.len(),
        encode_time,
        decode_time
    );
}
