//! Predicate heartbeats (invariants 28–32, docs/invariants.md "Predicate heartbeats"), restated
//! from docs/api.md "Predicate heartbeats" with the oracle's own constants, never the runtime's:
//!
//! - `transition_enqueued_once`: a committed transition (`heartbeat_state_changed` with a prior
//!   state) of an `on_change: wake` heartbeat is followed, in the same commit, by exactly one
//!   wakeup of its agent with source `predicate` and task key `heartbeat:<id>:<n>`; no predicate
//!   wakeup comes without its transition; an `event` heartbeat and a baseline wake nobody.
//! - `transition_chain`: each transition starts from the heartbeat's recorded state and changes
//!   it.
//! - `one_evaluation_at_a_time`: the state server never serves two checks of one heartbeat at
//!   once (a crash of the runtime drops its in-flight checks).
//! - `pending_within_cap`: a heartbeat's wakeup is queued only while fewer than
//!   [`PENDING_CAP`] of its runs wait to start, and emission pauses only at the cap.
//! - `transition_redetected` (at the end): every heartbeat the state server answers ends
//!   recording the truth the server held through the quiet phase, unless its emission is paused
//!   with its runs waiting at the cap: a transition lost to a crash before its commit was seen
//!   again.
//!
//! What shares a commit: the node reports a commit's events in order before anything else
//! happens, and writes `commit_attempted` before each commit, so a wakeup owed must come before
//! the next `commit_attempted`, the next crash, or the end of the commit a recovery found
//! unreported. It need not be the very next event: the wake may emit others of the agent first
//! (a `breaker_half_opened` when the wakeup is the breaker's probe).

use std::collections::{BTreeMap, BTreeSet};

use vigil::engine::event::{Event, EventKind};
use vigil::engine::wakeup::WakeupSource;

use super::{violation, Violation};
use crate::state_server;

/// Most runs of one heartbeat that may wait to start when it enqueues another (docs/api.md
/// "Back-pressure", `maxPendingEnqueued` in `GET /v1/capabilities`), in runs.
pub const PENDING_CAP: usize = 3;
/// A restart re-queues the run that was running (docs/api.md "Recovery after a restart"): the
/// only way a heartbeat's waiting runs pass the cap, by at most this many runs.
pub const REQUEUED_PAST_CAP: usize = 1;
/// The shortest quiet phase, in ms, after which every heartbeat must have recorded the frozen
/// truth: a restart, the recovery, the queue of a busy agent draining (4 runs of at most 90 s),
/// and a tick (5 s) with room to spare.
pub const REDETECT_BOUND_MS: u64 = 8 * 60_000;

/// The task key of transition `n` of heartbeat `id` (docs/api.md).
fn task_key(id: &str, n: u64) -> String {
    format!("heartbeat:{id}:{n}")
}

/// The heartbeat a predicate task key names.
fn heartbeat_of_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("heartbeat:")?;
    rest.rsplit_once(':').map(|(id, _)| id)
}

#[derive(Debug, Clone)]
struct Heartbeat {
    agent: u64,
    wakes: bool,
    /// Its check asks the simulated state server.
    observes_state_server: bool,
    recorded: Option<String>,
    transitions: u64,
    paused: bool,
}

/// The wakeup a committed transition owes, as the next committed event.
#[derive(Debug, Clone)]
struct Owed {
    seq: u64,
    agent: u64,
    heartbeat: String,
    task_key: String,
}

#[derive(Debug, Default)]
pub struct PredicateOracle {
    seed: Option<u64>,
    heartbeats: BTreeMap<(String, String), Heartbeat>,
    /// Wakeups owed by the transitions of the commit being reported.
    owed: Vec<Owed>,
    /// Runs a heartbeat's wakeup queued (or a restart re-queued): their task key.
    run_key: BTreeMap<u64, String>,
    /// Each heartbeat's runs waiting to start.
    waiting: BTreeMap<String, BTreeSet<u64>>,
    /// The request the state server is serving now, per heartbeat.
    in_flight: BTreeMap<String, u64>,
    quiet_since_ms: Option<u64>,
    /// Transitions judged (a coverage figure).
    transitions: u64,
}

impl PredicateOracle {
    /// The run's seed (its first record): the state server's truth is drawn from it.
    pub fn run_started(&mut self, seed: u64) {
        self.seed = Some(seed);
    }

    pub fn quiet(&mut self, t_ms: u64) {
        self.quiet_since_ms.get_or_insert(t_ms);
    }

    /// The commit being reported is over (another is about to be written, the node died, or a
    /// recovery's unreported commit was read): a wakeup still owed was not in its transition's
    /// commit.
    pub fn commit_over(&self) -> Result<(), Violation> {
        match self.owed.first() {
            Some(owed) => violation(
                "transition_enqueued_once",
                format!(
                    "the transition at seq {} of heartbeat {} ended its commit without its wakeup {}",
                    owed.seq, owed.heartbeat, owed.task_key
                ),
            ),
            None => Ok(()),
        }
    }

    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        self.pay_owed(event)?;
        match &event.kind {
            EventKind::HeartbeatCreated {
                agent,
                heartbeat,
                spec,
            } => {
                let observes_state_server = matches!(
                    &spec.check,
                    vigil::engine::predicate::Check::Http { url, .. }
                        if url.starts_with(&state_server::state_url_prefix())
                );
                let wakes = spec.on_change == vigil::engine::predicate::OnChange::Wake;
                self.heartbeats.insert(
                    (event.tenant.clone(), heartbeat.0.clone()),
                    Heartbeat {
                        agent: agent.0,
                        wakes,
                        observes_state_server,
                        recorded: None,
                        transitions: 0,
                        paused: false,
                    },
                );
            }
            EventKind::HeartbeatDeleted { heartbeat, .. } => {
                self.heartbeats
                    .remove(&(event.tenant.clone(), heartbeat.0.clone()));
            }
            EventKind::HeartbeatStateChanged {
                heartbeat,
                from,
                to,
                ..
            } => self.state_changed(event, &heartbeat.0, from.as_deref(), to)?,
            EventKind::HeartbeatEmissionPaused {
                heartbeat, pending, ..
            } => self.emission_paused(event, &heartbeat.0, *pending)?,
            EventKind::WakeupQueued {
                source: WakeupSource::Predicate,
                task_key,
                run,
                ..
            } => self.queued(event.seq, task_key.as_deref(), run.0)?,
            EventKind::RunRequeued {
                run,
                retry_of,
                coalesced: false,
                ..
            } => self.requeued(run.0, retry_of.0)?,
            EventKind::RunStarted { run, .. } | EventKind::RunFinished { run, .. } => {
                let heartbeat = self.run_key.get(&run.0).and_then(|k| heartbeat_of_key(k));
                if let Some(waiting) = heartbeat.and_then(|h| self.waiting.get_mut(h)) {
                    waiting.remove(&run.0);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Judges `event` against the wakeup a transition owes, or against owing none.
    fn pay_owed(&mut self, event: &Event) -> Result<(), Violation> {
        let wakeup = match &event.kind {
            EventKind::WakeupQueued {
                agent,
                source: WakeupSource::Predicate,
                task_key,
                ..
            }
            | EventKind::WakeupRefused {
                agent,
                source: WakeupSource::Predicate,
                task_key,
                ..
            } => Some((agent.0, task_key.clone())),
            EventKind::WakeupCoalesced {
                agent,
                source: WakeupSource::Predicate,
                run,
                ..
            // A coalesced wakeup names its run, not its key: the run's key stands for it.
            } => Some((agent.0, self.run_key.get(&run.0).cloned())),
            _ => None,
        };
        let Some((agent, key)) = wakeup else {
            return Ok(());
        };
        // `predicate` is a source any caller may name: only an agent a heartbeat watches owes
        // its predicate wakeups to transitions.
        if !self.heartbeats.values().any(|h| h.agent == agent) {
            return Ok(());
        }
        let owed = self
            .owed
            .iter()
            .position(|o| o.agent == agent && key.as_deref() == Some(o.task_key.as_str()));
        match owed {
            Some(index) => {
                self.owed.remove(index);
                Ok(())
            }
            None => violation(
                "transition_enqueued_once",
                format!(
                    "seq {} is a predicate wakeup of agent {agent} (task key {key:?}) that no transition of its commit asked for (owed: {:?})",
                    event.seq,
                    self.owed.iter().map(|o| &o.task_key).collect::<Vec<_>>()
                ),
            ),
        }
    }

    fn state_changed(
        &mut self,
        event: &Event,
        id: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<(), Violation> {
        let Some(heartbeat) = self
            .heartbeats
            .get_mut(&(event.tenant.clone(), id.to_string()))
        else {
            return violation(
                "transition_chain",
                format!(
                    "seq {}: heartbeat {id} changed state but was never defined",
                    event.seq
                ),
            );
        };
        if from != heartbeat.recorded.as_deref() || from == Some(to) {
            return violation(
                "transition_chain",
                format!(
                    "seq {}: heartbeat {id} went from {from:?} to {to:?}, but its recorded state was {:?}",
                    event.seq, heartbeat.recorded
                ),
            );
        }
        heartbeat.recorded = Some(to.to_string());
        heartbeat.paused = false;
        if from.is_none() {
            // The baseline: nothing owed.
            return Ok(());
        }
        heartbeat.transitions += 1;
        self.transitions += 1;
        if heartbeat.wakes {
            self.owed.push(Owed {
                seq: event.seq,
                agent: heartbeat.agent,
                heartbeat: id.to_string(),
                task_key: task_key(id, heartbeat.transitions),
            });
        }
        Ok(())
    }

    fn emission_paused(&mut self, event: &Event, id: &str, pending: u64) -> Result<(), Violation> {
        let waiting = self.waiting.get(id).map_or(0, BTreeSet::len);
        if (pending as usize) < PENDING_CAP || pending as usize != waiting {
            return violation(
                "pending_within_cap",
                format!(
                    "seq {}: heartbeat {id}'s emission paused with {pending} runs pending; {waiting} of its runs wait, the cap is {PENDING_CAP}",
                    event.seq
                ),
            );
        }
        if let Some(heartbeat) = self
            .heartbeats
            .get_mut(&(event.tenant.clone(), id.to_string()))
        {
            heartbeat.paused = true;
        }
        Ok(())
    }

    fn queued(&mut self, seq: u64, key: Option<&str>, run: u64) -> Result<(), Violation> {
        let Some(id) = key.and_then(heartbeat_of_key) else {
            return Ok(());
        };
        let waiting = self.waiting.entry(id.to_string()).or_default();
        if waiting.len() >= PENDING_CAP {
            return violation(
                "pending_within_cap",
                format!(
                    "seq {seq}: heartbeat {id} queued run {run} while {} of its runs already waited ({waiting:?}); the cap is {PENDING_CAP}",
                    waiting.len()
                ),
            );
        }
        waiting.insert(run);
        self.run_key
            .insert(run, key.unwrap_or_default().to_string());
        Ok(())
    }

    fn requeued(&mut self, run: u64, retry_of: u64) -> Result<(), Violation> {
        let Some(key) = self.run_key.get(&retry_of).cloned() else {
            return Ok(());
        };
        let id = heartbeat_of_key(&key).unwrap_or_default().to_string();
        let waiting = self.waiting.entry(id.clone()).or_default();
        waiting.insert(run);
        self.run_key.insert(run, key);
        if waiting.len() > PENDING_CAP + REQUEUED_PAST_CAP {
            return violation(
                "pending_within_cap",
                format!(
                    "run {retry_of} of heartbeat {id} re-queued as {run} makes {} of its runs wait ({waiting:?})",
                    waiting.len()
                ),
            );
        }
        Ok(())
    }

    /// The state server began serving request `request` of `heartbeat`'s check.
    pub fn check_served(&mut self, heartbeat: &str, request: u64) -> Result<(), Violation> {
        if let Some(other) = self.in_flight.insert(heartbeat.to_string(), request) {
            return violation(
                "one_evaluation_at_a_time",
                format!(
                    "the state server began check {request} of heartbeat {heartbeat} while check {other} of it was still being served"
                ),
            );
        }
        Ok(())
    }

    /// That check is over.
    pub fn check_ended(&mut self, heartbeat: &str, request: u64) {
        if self.in_flight.get(heartbeat) == Some(&request) {
            self.in_flight.remove(heartbeat);
        }
    }

    /// The runtime node died: its checks were dropped with it (the server may learn of it only
    /// much later, or never, for a check it never answers). A commit's events are all reported
    /// before the process can die, so none may still owe a wakeup.
    pub fn crashed(&mut self) -> Result<(), Violation> {
        self.in_flight.clear();
        self.commit_over()
    }

    /// At the end of the run (`end_ms`): every heartbeat the state server answers has recorded
    /// the truth the server froze at the quiet phase, if that phase was long enough, unless its
    /// emission is paused with its runs still waiting at the cap.
    pub fn finish(&self, end_ms: u64) -> Result<(), Violation> {
        if let Some(owed) = self.owed.first() {
            return violation(
                "transition_enqueued_once",
                format!(
                    "the run ended with the wakeup {} of the transition at seq {} never committed",
                    owed.task_key, owed.seq
                ),
            );
        }
        let (Some(seed), Some(quiet_ms)) = (self.seed, self.quiet_since_ms) else {
            return Ok(());
        };
        if end_ms < quiet_ms + REDETECT_BOUND_MS {
            return Ok(());
        }
        for ((_, id), heartbeat) in &self.heartbeats {
            // Emission is rightly paused only while the cap is met: once the queue drained, the
            // next tick must record the truth (or find it recorded already).
            let waiting = self.waiting.get(id).map_or(0, BTreeSet::len);
            if !heartbeat.observes_state_server || (heartbeat.paused && waiting >= PENDING_CAP) {
                continue;
            }
            let truth = state_server::state_token(state_server::truth(seed, id, quiet_ms));
            if heartbeat.recorded.as_deref() != Some(truth.as_str()) {
                return violation(
                    "transition_redetected",
                    format!(
                        "heartbeat {id} ends recording {:?}, but the state server has said {truth} since the quiet phase began at {quiet_ms} ms ({} ms before the end)",
                        heartbeat.recorded,
                        end_ms - quiet_ms
                    ),
                );
            }
        }
        Ok(())
    }

    /// Transitions judged.
    pub fn transitions(&self) -> u64 {
        self.transitions
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_events::{event, run_finished, run_started};
    use super::*;
    use vigil::engine::agent::AgentId;
    use vigil::engine::predicate::{Check, HeartbeatId, HeartbeatSpec, OnChange};
    use vigil::engine::run::RunId;
    use vigil::engine::wakeup::{RefusalReason, WakeupId};

    /// A sequence of committed events, numbered from 1.
    struct Log {
        oracle: PredicateOracle,
        seq: u64,
    }

    impl Log {
        fn new() -> Self {
            let mut oracle = PredicateOracle::default();
            oracle.run_started(1);
            Log { oracle, seq: 0 }
        }

        fn commit(&mut self, kind: EventKind) -> Result<(), Violation> {
            self.seq += 1;
            let mut event = event(0, kind);
            event.seq = self.seq;
            self.oracle.committed(&event)
        }

        fn ok(&mut self, kind: EventKind) {
            self.commit(kind).expect("the rule holds");
        }

        fn broken(&mut self, kind: EventKind) -> &'static str {
            self.commit(kind).expect_err("the rule is broken").invariant
        }
    }

    fn created(id: &str, on_change: OnChange) -> EventKind {
        EventKind::HeartbeatCreated {
            agent: AgentId(1),
            heartbeat: HeartbeatId(id.into()),
            spec: Box::new(HeartbeatSpec {
                interval_sec: 5,
                check: Check::Http {
                    url: state_server::state_url(id),
                    pointer: None,
                    secret_headers: Default::default(),
                },
                on_change,
                max_runtime_ms: 1_000,
            }),
        }
    }

    fn changed(id: &str, from: Option<u64>, to: u64) -> EventKind {
        EventKind::HeartbeatStateChanged {
            agent: AgentId(1),
            heartbeat: HeartbeatId(id.into()),
            from: from.map(state_server::state_token),
            to: state_server::state_token(to),
        }
    }

    fn queued(id: &str, n: u64, run: u64) -> EventKind {
        EventKind::WakeupQueued {
            wakeup: WakeupId(run),
            agent: AgentId(1),
            source: WakeupSource::Predicate,
            reason: String::new(),
            payload: serde_json::Value::Null,
            task_key: Some(task_key(id, n)),
            idempotency_key: None,
            requested_by: None,
            trigger_detail: None,
            run: RunId(run),
        }
    }

    fn refused(id: &str, n: u64) -> EventKind {
        EventKind::WakeupRefused {
            wakeup: WakeupId(99),
            agent: AgentId(1),
            source: WakeupSource::Predicate,
            reason: String::new(),
            task_key: Some(task_key(id, n)),
            idempotency_key: None,
            requested_by: None,
            trigger_detail: None,
            refusal: RefusalReason::Paused,
        }
    }

    fn paused(id: &str, pending: u64) -> EventKind {
        EventKind::HeartbeatEmissionPaused {
            agent: AgentId(1),
            heartbeat: HeartbeatId(id.into()),
            pending,
        }
    }

    /// A log with heartbeat `inbox` (`wake`) and its baseline 0.
    fn with_baseline() -> Log {
        let mut log = Log::new();
        log.ok(created("inbox", OnChange::Wake));
        log.ok(changed("inbox", None, 0));
        log
    }

    #[test]
    fn transitions_each_followed_by_their_own_wakeup_are_silent() {
        let mut log = with_baseline();
        log.ok(changed("inbox", Some(0), 3));
        log.ok(queued("inbox", 1, 10));
        log.ok(run_started(0, 10, 1).kind);
        log.ok(changed("inbox", Some(3), 0));
        log.ok(refused("inbox", 2));
        log.oracle.commit_over().unwrap();
        // An `event` heartbeat's transition owes nothing.
        log.ok(created("quiet", OnChange::Event));
        log.ok(changed("quiet", None, 1));
        log.ok(changed("quiet", Some(1), 2));
        log.ok(run_finished(0, 10, 1).kind);
        assert_eq!(log.oracle.transitions(), 3);
        log.oracle.finish(0).unwrap();
    }

    #[test]
    fn a_transition_whose_commit_ends_without_its_wakeup_is_reported() {
        let mut log = with_baseline();
        log.ok(changed("inbox", Some(0), 3));
        log.ok(run_started(0, 10, 1).kind);
        assert_eq!(
            log.oracle.commit_over().unwrap_err().invariant,
            "transition_enqueued_once"
        );
        assert_eq!(
            log.oracle.finish(0).unwrap_err().invariant,
            "transition_enqueued_once"
        );
        assert_eq!(
            log.oracle.crashed().unwrap_err().invariant,
            "transition_enqueued_once"
        );
    }

    #[test]
    fn other_events_of_the_commit_may_come_between_a_transition_and_its_wakeup() {
        // The wakeup is the breaker's probe: the breaker half-opens first. Another heartbeat's
        // transition in the same commit owes its own wakeup.
        let mut log = with_baseline();
        log.ok(created("other", OnChange::Wake));
        log.ok(changed("other", None, 5));
        log.ok(changed("inbox", Some(0), 3));
        log.ok(EventKind::BreakerHalfOpened { agent: AgentId(1) });
        log.ok(changed("other", Some(5), 6));
        log.ok(queued("other", 1, 11));
        log.ok(queued("inbox", 1, 10));
        log.oracle.commit_over().unwrap();
    }

    #[test]
    fn a_wakeup_with_the_wrong_task_key_or_twice_or_from_a_baseline_is_reported() {
        let mut log = with_baseline();
        log.ok(changed("inbox", Some(0), 3));
        assert_eq!(
            log.broken(queued("inbox", 2, 10)),
            "transition_enqueued_once"
        );
        let mut log = with_baseline();
        log.ok(changed("inbox", Some(0), 3));
        log.ok(queued("inbox", 1, 10));
        assert_eq!(
            log.broken(queued("inbox", 1, 11)),
            "transition_enqueued_once"
        );
        let mut log = Log::new();
        log.ok(created("inbox", OnChange::Wake));
        log.ok(changed("inbox", None, 0));
        assert_eq!(
            log.broken(queued("inbox", 1, 10)),
            "transition_enqueued_once"
        );
        let mut log = Log::new();
        log.ok(created("quiet", OnChange::Event));
        log.ok(changed("quiet", None, 0));
        log.ok(changed("quiet", Some(0), 1));
        assert_eq!(
            log.broken(queued("quiet", 1, 10)),
            "transition_enqueued_once"
        );
    }

    #[test]
    fn a_transition_from_another_state_or_to_the_same_is_reported() {
        let mut log = with_baseline();
        assert_eq!(log.broken(changed("inbox", Some(5), 3)), "transition_chain");
        let mut log = with_baseline();
        assert_eq!(log.broken(changed("inbox", Some(0), 0)), "transition_chain");
        let mut log = with_baseline();
        assert_eq!(log.broken(changed("inbox", None, 4)), "transition_chain");
    }

    /// `inbox` with 3 runs waiting (11, 12, 13) behind its running run 10.
    fn at_the_cap() -> Log {
        let mut log = with_baseline();
        for n in 1..=4 {
            log.ok(changed("inbox", Some(n - 1), n));
            log.ok(queued("inbox", n, 9 + n));
            if n == 1 {
                log.ok(run_started(0, 10, 1).kind);
            }
        }
        log
    }

    #[test]
    fn a_wakeup_queued_at_the_cap_is_reported_and_one_below_it_is_not() {
        let mut log = at_the_cap();
        log.ok(paused("inbox", 3));
        log.ok(changed("inbox", Some(4), 5));
        assert_eq!(log.broken(queued("inbox", 5, 14)), "pending_within_cap");
        let mut log = at_the_cap();
        log.ok(run_finished(0, 10, 1).kind);
        log.ok(run_started(0, 11, 1).kind);
        log.ok(changed("inbox", Some(4), 5));
        log.ok(queued("inbox", 5, 14));
    }

    #[test]
    fn emission_paused_below_the_cap_is_reported() {
        let mut log = with_baseline();
        log.ok(changed("inbox", Some(0), 1));
        log.ok(queued("inbox", 1, 10));
        assert_eq!(log.broken(paused("inbox", 1)), "pending_within_cap");
    }

    #[test]
    fn a_restart_s_retry_may_pass_the_cap_by_one_only() {
        let mut log = at_the_cap();
        log.ok(EventKind::RunRequeued {
            run: RunId(20),
            agent: AgentId(1),
            retry_of: RunId(10),
            coalesced: false,
        });
        assert_eq!(
            log.broken(EventKind::RunRequeued {
                run: RunId(21),
                agent: AgentId(1),
                retry_of: RunId(10),
                coalesced: false,
            }),
            "pending_within_cap"
        );
    }

    #[test]
    fn two_checks_of_one_heartbeat_at_once_are_reported_unless_a_crash_dropped_the_first() {
        let mut oracle = PredicateOracle::default();
        oracle.check_served("inbox", 1).unwrap();
        oracle.check_served("other", 1).unwrap();
        assert_eq!(
            oracle.check_served("inbox", 2).unwrap_err().invariant,
            "one_evaluation_at_a_time"
        );
        let mut oracle = PredicateOracle::default();
        oracle.check_served("inbox", 1).unwrap();
        oracle.check_ended("inbox", 1);
        oracle.check_served("inbox", 2).unwrap();
        oracle.crashed().expect("no wakeup owed");
        oracle.check_served("inbox", 3).unwrap();
        // The dropped check's late end changes nothing.
        oracle.check_ended("inbox", 2);
        assert_eq!(
            oracle.check_served("inbox", 4).unwrap_err().invariant,
            "one_evaluation_at_a_time"
        );
    }

    #[test]
    fn a_heartbeat_ending_off_the_frozen_truth_is_reported() {
        let quiet_ms = 600_000;
        let truth = state_server::truth(1, "inbox", quiet_ms);
        let end_ms = quiet_ms + REDETECT_BOUND_MS;
        let mut log = with_baseline();
        log.oracle.quiet(quiet_ms);
        let wrong = (truth + 1) % 10;
        if wrong != 0 {
            log.ok(changed("inbox", Some(0), wrong));
            log.ok(queued("inbox", 1, 10));
        }
        assert_eq!(
            log.oracle.finish(end_ms).unwrap_err().invariant,
            "transition_redetected"
        );
        // Too short a quiet phase judges nothing.
        log.oracle.finish(end_ms - 1).unwrap();
        // The truth recorded: silent.
        let mut log = with_baseline();
        log.oracle.quiet(quiet_ms);
        if truth != 0 {
            log.ok(changed("inbox", Some(0), truth));
            log.ok(queued("inbox", 1, 10));
        }
        log.oracle.finish(end_ms).unwrap();
    }

    #[test]
    fn a_paused_heartbeat_is_excused_only_while_its_runs_wait_at_the_cap() {
        // `at_the_cap` records 4 with runs 11, 12, 13 waiting: a quiet phase whose truth is not 4.
        let quiet_ms = (1..)
            .map(|minute| minute * 60_000)
            .find(|t| state_server::truth(1, "inbox", *t) != 4)
            .expect("the truth changes");
        let end_ms = quiet_ms + REDETECT_BOUND_MS;
        let mut log = at_the_cap();
        log.oracle.quiet(quiet_ms);
        log.ok(paused("inbox", 3));
        log.oracle.finish(end_ms).unwrap();
        log.ok(run_finished(0, 10, 1).kind);
        log.ok(run_started(0, 11, 1).kind);
        assert_eq!(
            log.oracle.finish(end_ms).unwrap_err().invariant,
            "transition_redetected"
        );
    }

    #[test]
    fn a_task_key_names_its_heartbeat() {
        assert_eq!(heartbeat_of_key("heartbeat:in-box_2:17"), Some("in-box_2"));
        assert_eq!(heartbeat_of_key("other:x:1"), None);
        assert_eq!(heartbeat_of_key("heartbeat:x"), None);
    }
}
