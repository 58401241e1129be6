//! Predicate heartbeats (invariants 28–32, docs/invariants.md "Predicate heartbeats"), restated
//! from docs/api.md "Predicate heartbeats" with the oracle's own constants, never the runtime's:
//!
//! - `transition_enqueued_once`: a committed transition (`heartbeat_state_changed` with a prior
//!   state) of an `on_change: wake` heartbeat is followed, in the same commit, by exactly one
//!   wakeup of its agent with source `predicate` and task key `heartbeat:<id>:<n>`; no predicate
//!   wakeup comes without its transition; an `event` heartbeat and a baseline wake nobody.
//! - `transition_chain`: each transition starts from the heartbeat's recorded state and changes
//!   it, and records no state over [`STATE_BYTES_MAX`] bytes. The recorded chain follows what
//!   the checks observed: for each evaluation the oracle can attribute (a check answered within
//!   its budget, judged when the heartbeat's next check is served, with no crash or fault in
//!   between), a state over the limit records nothing (the node reports `error` and keeps the
//!   prior state), and a state at or under it is recorded, as its canonical JSON, when it differs
//!   from the recorded one (unless the heartbeat's runs already wait at the cap).
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

use serde_json::Value;
use vigil::engine::event::{Event, EventKind};
use vigil::engine::wakeup::WakeupSource;

use super::{violation, Violation};
use crate::state_server;
use crate::trace::FaultRecord;

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

/// The largest observed state a heartbeat records, in bytes of its state token (docs/api.md
/// "Predicate heartbeats": "a state over 4 KiB is an `error`; the prior state is kept";
/// `maxStateBytes` in `GET /v1/capabilities`). At the limit is within it.
pub const STATE_BYTES_MAX: usize = 4 * 1024;

/// An observation's state token as docs/api.md defines it: "its JSON, compact, keys in order"
/// (so `{"b":1,"a":2}` and `{ "a": 2, "b": 1 }` are the same state), at every level. Written out
/// here rather than trusting a JSON library's map order.
pub fn canonical_json(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&str, &Value> = map.iter().map(|(k, v)| (k.as_str(), v)).collect();
            let members: Vec<String> = sorted
                .into_iter()
                .map(|(key, v)| format!("{}:{}", Value::from(key), canonical_json(v)))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", items.join(","))
        }
        // A scalar's compact JSON (a string escaped as JSON escapes it).
        scalar => scalar.to_string(),
    }
}

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

/// An evaluation whose verdict the oracle can judge: its check was answered within its budget
/// while no fault window was open. It is judged when the heartbeat's next check is served (one
/// evaluation at a time, so by then it has committed all it will), unless a crash or a fault
/// comes first.
#[derive(Debug, Clone)]
struct Attributed {
    request: u64,
    /// The observed state's canonical JSON.
    token: String,
    /// The heartbeat's recorded state when the check was served.
    recorded: Option<String>,
    /// Its runs waited at the cap then, or its emission paused since: a transition may rightly
    /// go unrecorded.
    at_cap: bool,
    /// The `to` of each transition of the heartbeat committed since.
    recorded_since: Vec<String>,
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
    /// Each heartbeat's last evaluation awaiting its verdict.
    attributed: BTreeMap<String, Attributed>,
    /// Fault windows open now (a network fault, a storage fault, ...): no verdict is attributed
    /// while one is.
    open_windows: usize,
    /// A storage operation failed (or the node stopped itself) since the node last started: it
    /// commits nothing more until it restarts, so no verdict is attributed.
    write_failed: bool,
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
                self.attributed.remove(&heartbeat.0);
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
        if to.len() > STATE_BYTES_MAX {
            return violation(
                "transition_chain",
                format!(
                    "seq {}: heartbeat {id} recorded a state of {} bytes, over the {STATE_BYTES_MAX}-byte limit",
                    event.seq,
                    to.len()
                ),
            );
        }
        if let Some(attributed) = self.attributed.get_mut(id) {
            attributed.recorded_since.push(to.to_string());
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
        if let Some(attributed) = self.attributed.get_mut(id) {
            attributed.at_cap = true;
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

    /// The state server began serving request `request` of `heartbeat`'s check, whose answer
    /// carries `observed` if the runtime gets it within its budget. The heartbeat's previous
    /// evaluation is over: its verdict is judged.
    pub fn check_served(
        &mut self,
        heartbeat: &str,
        request: u64,
        observed: Option<&Value>,
    ) -> Result<(), Violation> {
        if let Some(other) = self.in_flight.insert(heartbeat.to_string(), request) {
            return violation(
                "one_evaluation_at_a_time",
                format!(
                    "the state server began check {request} of heartbeat {heartbeat} while check {other} of it was still being served"
                ),
            );
        }
        // The previous check is over (else the rule above broke), and so is its evaluation.
        if let Some(previous) = self.attributed.remove(heartbeat) {
            judge_verdict(heartbeat, &previous, request)?;
        }
        if let Some(observed) = observed {
            self.attribute(heartbeat, request, observed);
        }
        Ok(())
    }

    /// Keeps request `request` of `heartbeat`, which observed `observed`, to be judged, if
    /// nothing else may explain its verdict.
    fn attribute(&mut self, heartbeat: &str, request: u64, observed: &Value) {
        if self.open_windows > 0 || self.write_failed {
            return;
        }
        let Some(((_, id), known)) = self
            .heartbeats
            .iter()
            .find(|((_, id), h)| id == heartbeat && h.observes_state_server)
        else {
            return;
        };
        let waiting = self.waiting.get(id).map_or(0, BTreeSet::len);
        self.attributed.insert(
            heartbeat.to_string(),
            Attributed {
                request,
                token: canonical_json(observed),
                recorded: known.recorded.clone(),
                at_cap: known.wakes && waiting >= PENDING_CAP,
                recorded_since: Vec::new(),
            },
        );
    }

    /// A fault record: a window fault opened or healed, or anything else struck. Any of them
    /// may explain an evaluation's verdict (a lost answer, a failed commit, a writer flooded),
    /// so the evaluations awaiting one are not judged; a clock jump moves no tick.
    pub fn fault(&mut self, fault: &FaultRecord) {
        match fault {
            FaultRecord::ClockJump { .. } => return,
            FaultRecord::Struck(fault) if fault.kind() == "clock_jump" => return,
            FaultRecord::Struck(fault) if fault.duration_ms() > 0 => self.open_windows += 1,
            FaultRecord::Healed(_) => self.open_windows = self.open_windows.saturating_sub(1),
            FaultRecord::HealedAll => self.open_windows = 0,
            FaultRecord::StorageOpFailed { .. } | FaultRecord::NodeStopped { .. } => {
                self.write_failed = true
            }
            _ => {}
        }
        self.attributed.clear();
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
        self.attributed.clear();
        self.write_failed = false;
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

/// The verdict of `heartbeat`'s evaluation `attributed`, judged as check `next` is served: a
/// state over [`STATE_BYTES_MAX`] recorded nothing; one within it that differs from the
/// recorded state was recorded, as its canonical JSON.
fn judge_verdict(heartbeat: &str, attributed: &Attributed, next: u64) -> Result<(), Violation> {
    let Attributed {
        request,
        token,
        recorded,
        at_cap,
        recorded_since,
    } = attributed;
    let bytes = token.len();
    if bytes > STATE_BYTES_MAX {
        return match recorded_since.first() {
            Some(to) => violation(
                "transition_chain",
                format!(
                    "check {request} of heartbeat {heartbeat} observed a state of {bytes} bytes, over the {STATE_BYTES_MAX}-byte limit, yet the node recorded {} from it: it is an `error`, the prior state {} kept",
                    brief(Some(to)),
                    brief(recorded.as_ref())
                ),
            ),
            None => Ok(()),
        };
    }
    match recorded_since.last() {
        Some(to) if to != token => violation(
            "transition_chain",
            format!(
                "check {request} of heartbeat {heartbeat} observed {} ({bytes} bytes as canonical JSON), but the node recorded {}",
                brief(Some(token)),
                brief(Some(to))
            ),
        ),
        None if recorded.as_ref() != Some(token) && !at_cap => violation(
            "transition_chain",
            format!(
                "check {request} of heartbeat {heartbeat} observed a state of {bytes} bytes, within the {STATE_BYTES_MAX}-byte limit and other than the recorded {}, but no transition recorded it before check {next}",
                brief(recorded.as_ref())
            ),
        ),
        _ => Ok(()),
    }
}

/// A state token for a violation's text: a long one cut, with its length.
fn brief(token: Option<&String>) -> String {
    /// The most of a token shown, in characters.
    const SHOWN_CHARS: usize = 60;
    match token {
        None => "none".into(),
        Some(token) if token.chars().count() <= SHOWN_CHARS => format!("{token:?}"),
        Some(token) => {
            let head: String = token.chars().take(SHOWN_CHARS).collect();
            format!("{head:?}… ({} bytes)", token.len())
        }
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
        oracle.check_served("inbox", 1, None).unwrap();
        oracle.check_served("other", 1, None).unwrap();
        assert_eq!(
            oracle.check_served("inbox", 2, None).unwrap_err().invariant,
            "one_evaluation_at_a_time"
        );
        let mut oracle = PredicateOracle::default();
        oracle.check_served("inbox", 1, None).unwrap();
        oracle.check_ended("inbox", 1);
        oracle.check_served("inbox", 2, None).unwrap();
        oracle.crashed().expect("no wakeup owed");
        oracle.check_served("inbox", 3, None).unwrap();
        // The dropped check's late end changes nothing.
        oracle.check_ended("inbox", 2);
        assert_eq!(
            oracle.check_served("inbox", 4, None).unwrap_err().invariant,
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

    /// `inbox`'s check `request`, answering `unread` padded by `pad` bytes within its budget,
    /// and its end.
    fn served(log: &mut Log, request: u64, unread: u64, pad: Option<u64>) -> Result<(), Violation> {
        let observed = state_server::observed(unread, pad);
        let result = log.oracle.check_served("inbox", request, Some(&observed));
        log.oracle.check_ended("inbox", request);
        result
    }

    /// The pad that makes a state with a one-digit `unread` exactly `bytes` bytes of canonical
    /// JSON (`{"pad":"…","unread":N}`: 21 bytes besides the pad).
    fn pad_for(bytes: usize) -> Option<u64> {
        Some((bytes - 21) as u64)
    }

    /// `inbox`'s transition from `from` to `to` (tokens as given).
    fn changed_to(from: &str, to: String) -> EventKind {
        EventKind::HeartbeatStateChanged {
            agent: AgentId(1),
            heartbeat: HeartbeatId("inbox".into()),
            from: Some(from.into()),
            to,
        }
    }

    fn canonical(unread: u64, pad: Option<u64>) -> String {
        canonical_json(&state_server::observed(unread, pad))
    }

    #[test]
    fn the_canonical_json_is_compact_with_its_keys_in_order_at_every_level() {
        let value: Value =
            serde_json::from_str(r#"{ "b": [ {"z": 1, "y": "é\n"} ], "a": null, "c": 2.5 }"#)
                .unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"a":null,"b":[{"y":"é\n","z":1}],"c":2.5}"#
        );
        assert_eq!(canonical(7, None), state_server::state_token(7));
        assert_eq!(
            canonical(7, pad_for(STATE_BYTES_MAX)).len(),
            STATE_BYTES_MAX
        );
        assert_eq!(canonical(7, pad_for(STATE_BYTES_MAX)), {
            let pad = pad_for(STATE_BYTES_MAX);
            state_server::served_token(7, pad)
        });
    }

    #[test]
    fn a_state_over_the_limit_is_never_recorded() {
        // Any transition to a state over the limit, attributed or not.
        let mut log = with_baseline();
        let over = canonical(1, pad_for(STATE_BYTES_MAX + 1));
        assert_eq!(
            log.broken(changed_to(r#"{"unread":0}"#, over)),
            "transition_chain"
        );
        // A check that observed a state over the limit records nothing from it, not even
        // something else.
        let mut log = with_baseline();
        served(&mut log, 1, 1, pad_for(STATE_BYTES_MAX + 1)).unwrap();
        log.ok(changed("inbox", Some(0), 1));
        log.ok(queued("inbox", 1, 10));
        assert_eq!(
            served(&mut log, 2, 1, None).unwrap_err().invariant,
            "transition_chain"
        );
        // Kept out, the prior state kept: silent.
        let mut log = with_baseline();
        served(&mut log, 1, 1, pad_for(STATE_BYTES_MAX + 1)).unwrap();
        served(&mut log, 2, 0, None).unwrap();
    }

    #[test]
    fn a_state_within_the_limit_that_changed_is_recorded_before_the_next_check() {
        for bytes in [STATE_BYTES_MAX, STATE_BYTES_MAX - 1, STATE_BYTES_MAX / 2] {
            let mut log = with_baseline();
            served(&mut log, 1, 1, pad_for(bytes)).unwrap();
            assert_eq!(
                served(&mut log, 2, 1, None).unwrap_err().invariant,
                "transition_chain",
                "{bytes} bytes"
            );
            let mut log = with_baseline();
            served(&mut log, 1, 1, pad_for(bytes)).unwrap();
            log.ok(changed_to(r#"{"unread":0}"#, canonical(1, pad_for(bytes))));
            log.ok(queued("inbox", 1, 10));
            served(&mut log, 2, 1, None).unwrap();
        }
        // The recorded state observed again: nothing to record.
        let mut log = with_baseline();
        served(&mut log, 1, 0, None).unwrap();
        served(&mut log, 2, 0, None).unwrap();
        // A first observation is the baseline: it too is recorded.
        let mut log = Log::new();
        log.ok(created("inbox", OnChange::Wake));
        served(&mut log, 1, 4, None).unwrap();
        assert_eq!(
            served(&mut log, 2, 4, None).unwrap_err().invariant,
            "transition_chain"
        );
    }

    #[test]
    fn a_state_recorded_in_another_form_than_its_canonical_json_is_reported() {
        let mut log = with_baseline();
        let pad = pad_for(2_000);
        served(&mut log, 1, 1, pad).unwrap();
        // Keys as the server sent them, not in order.
        let as_sent = format!(
            r#"{{"unread":1,"pad":"{}"}}"#,
            "x".repeat(pad.unwrap() as usize)
        );
        log.ok(changed_to(r#"{"unread":0}"#, as_sent));
        log.ok(queued("inbox", 1, 10));
        assert_eq!(
            served(&mut log, 2, 1, None).unwrap_err().invariant,
            "transition_chain"
        );
    }

    #[test]
    fn an_unrecorded_state_is_excused_at_the_cap_after_a_crash_or_in_a_fault_window() {
        // `at_the_cap` records 4 with 3 runs waiting: emission rightly pauses.
        let mut log = at_the_cap();
        served(&mut log, 1, 1, pad_for(3_000)).unwrap();
        served(&mut log, 2, 1, None).unwrap();
        // A crash drops the evaluation.
        let mut log = with_baseline();
        served(&mut log, 1, 1, pad_for(3_000)).unwrap();
        log.oracle.crashed().unwrap();
        served(&mut log, 2, 1, None).unwrap();
        // A fault window open when served, or a fault struck since, leaves it unjudged; once all
        // is healed, checks are judged again.
        let net_delay = vigil_faults::Fault::NetDelay {
            latency_ms: 100,
            duration_ms: 60_000,
        };
        let mut log = with_baseline();
        log.oracle.fault(&FaultRecord::Struck(net_delay));
        served(&mut log, 1, 1, None).unwrap();
        served(&mut log, 2, 1, None).unwrap();
        log.oracle.fault(&FaultRecord::HealedAll);
        served(&mut log, 3, 2, None).unwrap();
        // A failed write stops the node's commits until it restarts.
        log.oracle
            .fault(&FaultRecord::StorageOpFailed { injected_errors: 1 });
        served(&mut log, 4, 2, None).unwrap();
        served(&mut log, 5, 3, None).unwrap();
        log.oracle.crashed().unwrap();
        served(&mut log, 6, 3, None).unwrap();
        assert_eq!(
            served(&mut log, 7, 3, None).unwrap_err().invariant,
            "transition_chain"
        );
    }
}
