//! Unit tests of the node-wide memory bounds (`node_bounds.rs`), each at its boundary with small
//! limits injected, and each ending with a replay of the log into a fresh engine.

use super::agent::{AgentId, AgentSpec};
use super::event::{Event, EventKind};
use super::node_bounds::NodeLimits;
use super::run::{RunEnd, RunId, RunReport, RunStatus, FINISHED_RUNS_KEPT_PER_AGENT};
use super::tenant::TokenHash;
use super::wakeup::{WakeupOutcome, WakeupRequest, WakeupSource, IDEMPOTENCY_TTL_MS};
use super::{Command, Decision, Engine, Refusal};

/// An engine under test and every event it applied, for the replay at the end.
struct Node {
    engine: Engine,
    log: Vec<Event>,
}

impl Node {
    fn new(limits: NodeLimits) -> Self {
        let mut node = Node {
            engine: Engine::with_limits(limits),
            log: Vec::new(),
        };
        node.run(
            Command::EnsureTenant {
                tenant: "t".into(),
                operator_token_hash: TokenHash::of("op"),
            },
            0,
        );
        node
    }

    fn decide(&self, command: Command, now_ms: u64) -> Result<Decision, Refusal> {
        self.engine.decide(&command, now_ms)
    }

    fn run(&mut self, command: Command, now_ms: u64) -> Decision {
        let decision = self.decide(command, now_ms).expect("command accepted");
        for event in &decision.events {
            self.engine.apply(event);
            self.log.push(event.clone());
        }
        decision
    }

    fn create(&mut self, name: &str) -> AgentId {
        let decision = self.run(
            Command::CreateAgent {
                tenant: "t".into(),
                spec: AgentSpec::with_interval(name, None),
                token_hash: TokenHash::of(name),
            },
            0,
        );
        match decision.events[0].kind {
            EventKind::AgentCreated { agent, .. } => agent,
            _ => panic!("expected agent_created"),
        }
    }

    /// Folds the whole log into a fresh engine with the same limits: it must be this engine.
    fn assert_replay_matches(&self) {
        let mut fresh = Engine::with_limits(self.engine.bounds().limits());
        self.log.iter().for_each(|e| fresh.apply(e));
        assert_eq!(fresh, self.engine, "a replay of the log rebuilds the same state");
    }
}

fn limits(keys: usize, runs: usize, excerpts: usize) -> NodeLimits {
    NodeLimits {
        idempotency_keys: keys,
        agents: 100,
        finished_runs: runs,
        answer_excerpts: excerpts,
    }
}

fn keyed(agent: AgentId, key: &str) -> Command {
    let mut request = WakeupRequest::new(WakeupSource::OnDemand, "x");
    request.task_key = Some(key.to_string());
    request.idempotency_key = Some(key.to_string());
    Command::Wake { agent, request }
}

#[test]
fn the_node_refuses_a_new_key_at_its_cap_until_its_oldest_key_expires() {
    let mut node = Node::new(limits(3, 100, 100));
    let (a, b) = (node.create("a"), node.create("b"));
    node.run(keyed(a, "a1"), 1_000);
    node.run(keyed(b, "b1"), 2_000);
    node.run(keyed(a, "a2"), 3_000);
    assert_eq!(node.engine.bounds().keys_held(), 3, "exactly the cap is accepted");

    let refused = node.decide(keyed(b, "b2"), 4_000).unwrap_err();
    // The oldest key (a1, first used at 1 s) expires at 1 s + TTL: 24 h - 3 s from now.
    let wait_s = (1_000 + IDEMPOTENCY_TTL_MS - 4_000) / 1_000;
    assert_eq!(
        refused,
        Refusal::TooManyIdempotencyKeysOnNode {
            limit: 3,
            retry_after_s: wait_s
        }
    );
    assert!(refused.to_string().contains("node-wide limit"), "{refused}");
    // The node's capacity, not the caller's rate: 503, naming the field.
    let answer = crate::api::ApiError::from(refused.clone());
    assert_eq!(answer.status.as_u16(), 503);
    assert_eq!(answer.code, "node_limit_reached");
    assert_eq!(answer.field.as_deref(), Some("idempotency_key"));
    assert_eq!(answer.retry_after(), Some(wait_s), "Retry-After: when a1 expires");
    // A key already held still answers as before, and un-keyed wakeups are not limited.
    assert!(node.decide(keyed(a, "a1"), 4_000).unwrap().replayed);
    node.run(
        Command::Wake {
            agent: b,
            request: WakeupRequest::new(WakeupSource::OnDemand, "no key"),
        },
        4_000,
    );
    // One millisecond before the oldest key expires: still refused.
    let before_expiry = 1_000 + IDEMPOTENCY_TTL_MS - 1;
    assert!(matches!(
        node.decide(keyed(b, "b2"), before_expiry),
        Err(Refusal::TooManyIdempotencyKeysOnNode { retry_after_s: 1, .. })
    ));
    // Once it has expired, the new key takes its place: the node never holds more than 3.
    let expired = 1_000 + IDEMPOTENCY_TTL_MS;
    let accepted = node.run(keyed(b, "b2"), expired);
    assert!(!accepted.replayed);
    assert_eq!(node.engine.bounds().keys_held(), 3);
    let agent_a = node.engine.agent_state(a).unwrap();
    assert_eq!(agent_a.key_summary().held, 1, "a1 was forgotten, a2 kept");
    // The keys still live are still honoured.
    assert!(node.decide(keyed(b, "b1"), expired).unwrap().replayed);
    assert!(node.decide(keyed(a, "a2"), expired).unwrap().replayed);
    node.assert_replay_matches();
}

#[test]
fn a_replay_under_a_smaller_cap_evicts_the_oldest_keys() {
    let mut node = Node::new(limits(10, 100, 100));
    let (a, b) = (node.create("a"), node.create("b"));
    node.run(keyed(a, "a1"), 1_000);
    node.run(keyed(b, "b1"), 2_000);
    node.run(keyed(a, "a2"), 3_000);
    let mut smaller = Engine::with_limits(limits(2, 100, 100));
    node.log.iter().for_each(|e| smaller.apply(e));
    assert_eq!(smaller.bounds().keys_held(), 2, "memory stays within the cap");
    let a_state = smaller.agent_state(a).unwrap();
    assert_eq!(a_state.idempotent_wakeup("a1", 3_000), None, "the oldest went");
    assert!(a_state.idempotent_wakeup("a2", 3_000).is_some());
}

/// Wakes `agent` (idle) and finishes its run, with an answer excerpt; returns the run.
fn finished_run(node: &mut Node, agent: AgentId, now_ms: u64) -> RunId {
    finished_run_with(node, agent, now_ms, true)
}

/// As [`finished_run`], with an answer excerpt or without one.
fn finished_run_with(node: &mut Node, agent: AgentId, now_ms: u64, with_excerpt: bool) -> RunId {
    let woken = node.run(
        Command::Wake {
            agent,
            request: WakeupRequest::new(WakeupSource::OnDemand, "x"),
        },
        now_ms,
    );
    let WakeupOutcome::Queued { run } = woken.wakeup.unwrap().outcome else {
        panic!("an idle agent queues and starts a run");
    };
    let report = RunReport {
        answer_excerpt: with_excerpt.then(|| format!("answer of run {run}")),
        ..RunReport::default()
    };
    let end = RunEnd::new(RunStatus::Succeeded, "ok").with_report(report);
    node.run(Command::FinishRun { run, end }, now_ms + 1);
    run
}

fn excerpt(engine: &Engine, run: RunId) -> Option<String> {
    engine.run(run)?.report.as_ref()?.answer_excerpt.clone()
}

#[test]
fn the_oldest_finished_run_across_the_node_is_evicted_past_the_cap() {
    let mut node = Node::new(limits(100, 3, 100));
    let (a, b) = (node.create("a"), node.create("b"));
    let runs = [
        finished_run(&mut node, a, 1_000),
        finished_run(&mut node, b, 2_000),
        finished_run(&mut node, a, 3_000),
    ];
    assert_eq!(node.engine.bounds().finished_held(), 3, "exactly the cap is kept");
    assert!(runs.iter().all(|r| node.engine.run(*r).is_some()));
    let fourth = finished_run(&mut node, b, 4_000);
    assert_eq!(node.engine.bounds().finished_held(), 3);
    assert!(node.engine.run(runs[0]).is_none(), "the oldest finished went");
    assert!(node.engine.owner_of(runs[0]).is_none());
    assert!(matches!(
        node.decide(Command::CancelRun { run: runs[0] }, 5_000),
        Err(Refusal::UnknownRun(_))
    ));
    assert!([runs[1], runs[2], fourth]
        .iter()
        .all(|r| node.engine.run(*r).is_some()));
    assert_eq!(node.engine.agent_state(a).unwrap().runs().count(), 1);
    node.assert_replay_matches();
}

#[test]
fn only_the_newest_finished_runs_keep_their_answer_excerpts() {
    let mut node = Node::new(limits(100, 100, 2));
    let (a, b) = (node.create("a"), node.create("b"));
    let first = finished_run(&mut node, a, 1_000);
    let second = finished_run(&mut node, b, 2_000);
    assert_eq!(node.engine.bounds().excerpts_held(), 2, "exactly the cap is kept");
    assert!(excerpt(&node.engine, first).is_some());
    let third = finished_run(&mut node, a, 3_000);
    assert_eq!(node.engine.bounds().excerpts_held(), 2);
    assert_eq!(excerpt(&node.engine, first), None, "the oldest excerpt went");
    let kept = node.engine.run(first).expect("the run itself is kept");
    assert!(kept.report.as_ref().unwrap().excerpt_truncated);
    assert_eq!(excerpt(&node.engine, second).as_deref(), Some("answer of run 2"));
    assert!(excerpt(&node.engine, third).is_some());
    node.assert_replay_matches();
}

#[test]
fn runs_without_an_excerpt_take_no_place_under_the_excerpt_cap() {
    let mut node = Node::new(limits(100, 100, 2));
    let a = node.create("a");
    let first = finished_run(&mut node, a, 1_000);
    for i in 1..=3 {
        finished_run_with(&mut node, a, 1_000 + i * 10, false);
    }
    assert_eq!(node.engine.bounds().excerpts_held(), 1);
    assert!(excerpt(&node.engine, first).is_some(), "nothing pushed it out");
    node.assert_replay_matches();
}

#[test]
fn runs_past_an_agents_own_cap_leave_the_node_count_too() {
    let mut node = Node::new(limits(100, 1_000, 1_000));
    let a = node.create("a");
    let first = finished_run(&mut node, a, 1_000);
    for i in 1..=FINISHED_RUNS_KEPT_PER_AGENT as u64 {
        finished_run(&mut node, a, 1_000 + i * 10);
    }
    assert!(node.engine.run(first).is_none());
    assert_eq!(
        node.engine.bounds().finished_held(),
        FINISHED_RUNS_KEPT_PER_AGENT
    );
    assert_eq!(
        node.engine.bounds().excerpts_held(),
        FINISHED_RUNS_KEPT_PER_AGENT
    );
    node.assert_replay_matches();
}

#[test]
fn the_node_refuses_an_agent_past_its_agent_limit_terminated_ones_included() {
    let mut node = Node::new(NodeLimits {
        agents: 2,
        ..limits(100, 100, 100)
    });
    let a = node.create("a");
    node.create("b");
    assert_eq!(
        node.engine.agents().count(),
        2,
        "exactly the limit is accepted"
    );
    let create_c = || Command::CreateAgent {
        tenant: "t".into(),
        spec: AgentSpec::with_interval("c", None),
        token_hash: TokenHash::of("c"),
    };
    assert_eq!(
        node.decide(create_c(), 0).unwrap_err(),
        Refusal::TooManyAgents
    );
    // A terminated agent is still kept (its runs and events stay readable): no room is made.
    node.run(Command::TerminateAgent { agent: a }, 1_000);
    assert_eq!(
        node.decide(create_c(), 2_000).unwrap_err(),
        Refusal::TooManyAgents
    );
    node.assert_replay_matches();
}

#[test]
fn the_default_agent_limit_is_the_documented_constant() {
    assert_eq!(NodeLimits::default().agents, super::agent::AGENTS_MAX);
}
