//! The documented limits at their edges (docs/invariants.md, 33–35), judged on the `edges`
//! workload's requests (sim/src/edges.rs). Every limit, default and clamp below is restated from
//! docs/api.md, never taken from the runtime's constants, so that a wrong constant or a slip in a
//! comparison cannot move the runtime and its check together.
//!
//! - `limits_as_documented` (33): a request whose every field lies within its documented limits
//!   is taken (2xx); one with a field outside them is refused 400 `invalid_field` naming that
//!   field (any one of them when several are out), and nothing changes.
//! - `spec_shown_as_sent` (34): the spec the node shows holds each field as the accepted
//!   creation and spec changes (JSON merge patches) left it, or the documented default; across
//!   crashes, power cuts and recoveries from snapshots.
//! - `pause_length_as_asked` (35): a `/pause` of N minutes pauses until N minutes after its
//!   decision, by the operator; a `pause_heartbeats` rest lasts its minutes clamped to 1–60
//!   (2 when not given), by the agent; a `/pause` without minutes pauses until resumed.
//! - `resume_ends_pauses` (36): a resume records `agent_resumed` exactly when a pause was in
//!   force at its instant (paused until resumed, or a timed pause not yet over), and its answer
//!   then shows no `paused_until_ms`; resuming an agent with no pause in force changes nothing.
//! - `token_rotation_as_answered` (37): a token rotation answered 2xx committed
//!   `agent_token_rotated` for that agent at the answer's `seq`, holding the SHA-256 of the token
//!   the answer returned; from then on that token reads the agent (200) and every token it
//!   replaced gets 401, across crashes and recoveries.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use vigil::engine::event::{Event, EventKind};
use vigil::engine::pause::PausedBy;

use super::{violation, Violation};
use crate::trace::EdgeKind;

/// An integer field of an agent spec: its dotted path, its default (`None`: null) and its
/// documented range. `nullable`: `null` is a value (no timer, no cap) rather than a wrong type.
#[derive(Debug, Clone, Copy)]
pub struct IntField {
    pub path: &'static str,
    pub default: Option<u64>,
    pub min: u64,
    pub max: u64,
    pub nullable: bool,
}

const fn int(path: &'static str, default: Option<u64>, min: u64, max: u64) -> IntField {
    IntField {
        path,
        default,
        min,
        max,
        nullable: default.is_none(),
    }
}

/// One week and one day, in ms.
const WEEK_MS: u64 = 604_800_000;
const DAY_MS: u64 = 86_400_000;

/// The integer fields of docs/api.md's spec table (`POST /v1/agents`), with their defaults.
/// `breaker.cooldown_ms_max` also may not be below `breaker.cooldown_ms` ([`COOLDOWN_MAX_PATH`]).
pub static SPEC_INTS: &[IntField] = &[
    int("heartbeat.interval_ms", None, 1_000, WEEK_MS),
    int("heartbeat.idle_after_ms", None, 1_000, WEEK_MS),
    int("limits.run_timeout_ms", Some(600_000), 1_000, DAY_MS),
    int("limits.queued_runs_max", Some(16), 1, 1_000),
    int("limits.cooldown_ms", Some(0), 0, DAY_MS),
    int("limits.daily_cap", None, 1, 10_000),
    int("breaker.failures_to_open", Some(3), 1, 100),
    int("breaker.cooldown_ms", Some(900_000), 1_000, WEEK_MS),
    int("breaker.cooldown_ms_max", Some(7_200_000), 0, WEEK_MS),
    int("liveness.pulse_interval_ms", Some(10_000), 1_000, 3_600_000),
    int("liveness.offline_after_misses", Some(3), 1, 100),
    int("liveness.phi_threshold", Some(8), 1, 16),
];

/// Its lower bound is the spec's `breaker.cooldown_ms`, not a number.
const COOLDOWN_MAX_PATH: &str = "breaker.cooldown_ms_max";
const COOLDOWN_PATH: &str = "breaker.cooldown_ms";

/// `name`: 1 to this many characters of `[A-Za-z0-9._-]`.
pub const NAME_CHARS_MAX: usize = 64;
/// `adapter.steps`: 1 to this many steps, each lasting 0 to a day.
pub const STEPS_MAX: usize = 64;
pub const STEP_MS_MAX: u64 = DAY_MS;
const STEP_OUTCOMES: &[&str] = &["succeeded", "failed", "tool_failed", "hang"];
/// Zones the bundled tz database holds, and names that are no zone (the workload draws from
/// these; a name in neither list is not judged).
pub const ZONES: &[&str] = &[
    "UTC",
    "Europe/Paris",
    "Pacific/Kiritimati",
    "America/St_Johns",
];
pub const NOT_ZONES: &[&str] = &["Mars/Olympus_Mons", "utc+1", "Europe/Pariss"];
/// `time_zone`: at most this many characters.
pub const ZONE_CHARS_MAX: usize = 64;

/// The wakeup request's fields (`POST /v1/agents/{id}/wakeup`).
pub const SOURCES: &[&str] = &[
    "timer",
    "idle",
    "assignment",
    "on_demand",
    "automation",
    "predicate",
];
pub const REASON_CHARS_MAX: usize = 500;
pub const PAYLOAD_BYTES_MAX: usize = 16_384;
pub const KEY_CHARS_MAX: usize = 200;
pub const TRIGGER_DETAIL_BYTES_MAX: usize = 2_048;

/// `/pause`'s `minutes`: 1 to a week.
pub const PAUSE_MINUTES_MAX: u64 = 10_080;
/// `pause_heartbeats`' `minutes`: clamped into 1..=60, 2 when not given.
pub const REST_MINUTES_MIN: u64 = 1;
pub const REST_MINUTES_MAX: u64 = 60;
pub const REST_MINUTES_DEFAULT: u64 = 2;
const MINUTE_MS: u64 = 60_000;
/// A pulse's `status`: one of these, or null.
pub const PULSE_STATUSES: &[&str] = &["active", "busy", "idle", "shutting_down"];
/// A pulse's `metadata`: an object (or null) of at most this many bytes of compact JSON...
pub const PULSE_METADATA_BYTES_MAX: usize = 1_024;
/// ...holding at most this many keys, its nested objects' counted...
pub const PULSE_METADATA_KEYS_MAX: usize = 32;
/// ...nested at most this many levels deep, the object itself the first (an array is a level).
pub const PULSE_METADATA_LEVELS_MAX: usize = 4;

/// What a request deserves: to be taken, or refused naming one of these fields.
pub type Judgement = BTreeSet<String>;

/// A committed pause.
#[derive(Debug, Clone, Copy)]
struct Pause {
    seq: u64,
    at_ms: u64,
    until_ms: Option<u64>,
    by: PausedBy,
}

/// An agent's pauses as the committed events leave them.
#[derive(Debug, Clone, Copy, Default)]
struct PauseState {
    until_resumed: bool,
    timed_until_ms: Option<u64>,
}

#[derive(Debug, Default)]
pub struct EdgesOracle {
    /// The spec each accepted agent should show, by name: the creation's body with every
    /// accepted change merged in.
    expected: BTreeMap<String, Value>,
    /// Agent ids by name, from the committed creations.
    ids: BTreeMap<String, u64>,
    /// Each agent's latest committed pause.
    pauses: BTreeMap<u64, Pause>,
    /// Each agent's pauses now, and its latest committed resume: (seq, whether a pause was in
    /// force at its instant).
    pause_states: BTreeMap<u64, PauseState>,
    resumes: BTreeMap<u64, (u64, bool)>,
    /// Committed token rotations by seq: the agent and the new token's hash.
    rotations: BTreeMap<u64, (u64, String)>,
    /// The newest token the workload was given for each agent (by name), as its SHA-256.
    tokens: BTreeMap<String, String>,
    /// Requests judged: taken, refused.
    judged: (u64, u64),
    shown: u64,
}

impl EdgesOracle {
    /// Follows the committed events it needs: creations (names to ids) and pauses.
    pub fn committed(&mut self, event: &Event) {
        match &event.kind {
            EventKind::AgentCreated { agent, name, .. } => {
                self.ids.insert(name.clone(), agent.0);
            }
            EventKind::AgentPaused {
                agent,
                until_ms,
                by,
            } => {
                let pause = Pause {
                    seq: event.seq,
                    at_ms: event.at_ms,
                    until_ms: *until_ms,
                    by: *by,
                };
                self.pauses.insert(agent.0, pause);
                let state = self.pause_states.entry(agent.0).or_default();
                match until_ms {
                    None => state.until_resumed = true,
                    Some(until) => state.timed_until_ms = Some(*until),
                }
            }
            EventKind::AgentTokenRotated { agent, token_hash } => {
                self.rotations
                    .insert(event.seq, (agent.0, token_hash.to_hex()));
            }
            EventKind::AgentResumed { agent } => {
                let state = self.pause_states.remove(&agent.0).unwrap_or_default();
                let timed = state.timed_until_ms.is_some_and(|u| event.at_ms < u);
                let in_force = state.until_resumed || timed;
                self.resumes.insert(agent.0, (event.seq, in_force));
            }
            _ => {}
        }
    }

    /// Requests judged so far: (taken, refused).
    pub fn judged(&self) -> (u64, u64) {
        self.judged
    }

    /// Specs compared so far.
    pub fn specs_shown(&self) -> u64 {
        self.shown
    }

    /// Judges one answered request (invariants 33 and 35).
    #[allow(clippy::too_many_arguments)]
    pub fn answered(
        &mut self,
        kind: EdgeKind,
        agent: Option<&str>,
        body: &Value,
        status: u16,
        code: Option<&str>,
        field: Option<&str>,
        attempts: u32,
        (seq_before, paused_until_ms): (u64, Option<u64>),
    ) -> Result<(), Violation> {
        let current = agent.and_then(|a| self.expected.get(a));
        let (invalid, merged) = match kind {
            EdgeKind::Create => (judge_spec(body), Some(body.clone())),
            EdgeKind::Patch => {
                let current = current.ok_or_else(|| unknown_agent(agent))?;
                let merged = merge_patch(current, body);
                let invalid = if body.is_object() {
                    judge_spec(&merged)
                } else {
                    ["body".to_string()].into()
                };
                (invalid, Some(merged))
            }
            EdgeKind::Wake => (judge_wake(body), None),
            EdgeKind::Pause | EdgeKind::PauseHeartbeats => (judge_pause(kind, body), None),
            // No body is read.
            EdgeKind::Resume => (Judgement::new(), None),
            EdgeKind::Pulse => (judge_pulse(body), None),
            EdgeKind::Heartbeat => (super::heartbeat_defs::judge_heartbeat(body), None),
        };
        // A creation retried after a lost answer finds its own agent (409 `name_taken`), a
        // heartbeat's its own id (409 `id_taken`).
        let retried = matches!(kind, EdgeKind::Create | EdgeKind::Heartbeat);
        let taken = (200..300).contains(&status) || (retried && status == 409 && attempts > 1);
        let what = format!("{kind:?} {} {body}", agent.unwrap_or(""));
        if invalid.is_empty() {
            if !taken {
                return violation(
                    "limits_as_documented",
                    format!("{what}: every field is within its documented limits, yet the answer was {status} {code:?} naming {field:?}"),
                );
            }
            self.judged.0 += 1;
            if let Some(merged) = merged {
                let name = merged["name"].as_str().unwrap_or_default().to_string();
                let name = agent.map_or(name, str::to_string);
                self.expected.insert(name, merged);
            }
            if let Some(agent) = agent {
                self.pause_length(kind, agent, body, seq_before, paused_until_ms)?;
                if kind == EdgeKind::Resume {
                    self.resume(agent, seq_before, paused_until_ms)?;
                }
            }
            return Ok(());
        }
        // A list's item is named with its index (`adapter.args[3]`), a step's field after it.
        let named = field.is_some_and(|f| {
            invalid.iter().any(|i| {
                f == i || f.starts_with(&format!("{i}[")) || f.starts_with(&format!("{i}."))
            })
        });
        if status != 400 || code != Some("invalid_field") || !named {
            return violation(
                "limits_as_documented",
                format!("{what}: {invalid:?} lie outside their documented limits, so the answer should be 400 invalid_field naming one of them; it was {status} {code:?} naming {field:?}"),
            );
        }
        self.judged.1 += 1;
        Ok(())
    }

    /// Invariant 35 for a pause the node took: the pause committed since the request was sent
    /// lasts as asked; or, when none was, a pause at least as long was in force (an agent's
    /// short rest never cuts a longer pause) and the answer shows it.
    fn pause_length(
        &self,
        kind: EdgeKind,
        agent: &str,
        body: &Value,
        seq_before: u64,
        paused_until_ms: Option<u64>,
    ) -> Result<(), Violation> {
        let (minutes, by) = match kind {
            EdgeKind::Pause => match body["minutes"].as_u64() {
                Some(minutes) => (minutes, PausedBy::Operator),
                None => return self.pause_until_resumed(agent, body, seq_before),
            },
            EdgeKind::PauseHeartbeats => {
                let asked = body["minutes"].as_u64().unwrap_or(REST_MINUTES_DEFAULT);
                (
                    asked.clamp(REST_MINUTES_MIN, REST_MINUTES_MAX),
                    PausedBy::Agent,
                )
            }
            _ => return Ok(()),
        };
        let id = self
            .ids
            .get(agent)
            .ok_or_else(|| unknown_agent(Some(agent)))?;
        let Some(pause) = self.pauses.get(id).copied() else {
            return violation(
                "pause_length_as_asked",
                format!(
                    "agent {agent}: a {kind:?} {body} was taken, yet no pause was ever committed"
                ),
            );
        };
        if pause.seq <= seq_before {
            // Nothing new: the agent is paused until resumed (a timed pause adds nothing), or
            // a pause in force already lasted as long.
            let until_resumed = self.pause_states.get(id).is_some_and(|s| s.until_resumed);
            if !until_resumed && paused_until_ms != pause.until_ms {
                return violation(
                    "pause_length_as_asked",
                    format!("agent {agent}: {kind:?} {body} committed no pause, so the pause in force (until {:?}) should stand; the answer shows paused_until_ms {paused_until_ms:?}", pause.until_ms),
                );
            }
            return Ok(());
        }
        let expected = pause.at_ms + minutes * MINUTE_MS;
        if pause.until_ms != Some(expected) || paused_until_ms != pause.until_ms || pause.by != by {
            return violation(
                "pause_length_as_asked",
                format!("agent {agent}: {kind:?} {body} decided at {} should pause until {expected} by {by:?}; the node committed until {:?} by {:?} and answered paused_until_ms {paused_until_ms:?}", pause.at_ms, pause.until_ms, pause.by),
            );
        }
        Ok(())
    }

    /// Invariant 35 for `/pause` without minutes: a pause committed since is until resumed, by
    /// the operator (none is when the agent was paused until resumed already).
    fn pause_until_resumed(
        &self,
        agent: &str,
        body: &Value,
        seq_before: u64,
    ) -> Result<(), Violation> {
        let id = self
            .ids
            .get(agent)
            .ok_or_else(|| unknown_agent(Some(agent)))?;
        match self.pauses.get(id) {
            Some(pause) if pause.seq > seq_before => {
                if pause.until_ms.is_some() || pause.by != PausedBy::Operator {
                    return violation(
                        "pause_length_as_asked",
                        format!("agent {agent}: Pause {body} should pause until resumed, by the operator; the node committed until {:?} by {:?}", pause.until_ms, pause.by),
                    );
                }
                Ok(())
            }
            _ if self.pause_states.get(id).is_some_and(|s| s.until_resumed) => Ok(()),
            _ => violation(
                "pause_length_as_asked",
                format!("agent {agent}: Pause {body} was taken, yet it committed no pause and none until resumed was in force"),
            ),
        }
    }

    /// Invariant 36 for a resume the node took.
    fn resume(
        &self,
        agent: &str,
        seq_before: u64,
        paused_until_ms: Option<u64>,
    ) -> Result<(), Violation> {
        let id = self
            .ids
            .get(agent)
            .ok_or_else(|| unknown_agent(Some(agent)))?;
        match self.resumes.get(id) {
            Some(&(seq, in_force)) if seq > seq_before => {
                if !in_force {
                    return violation(
                        "resume_ends_pauses",
                        format!("agent {agent}: a resume recorded agent_resumed (seq {seq}) though no pause was in force at its instant: it should change nothing"),
                    );
                }
                if paused_until_ms.is_some() {
                    return violation(
                        "resume_ends_pauses",
                        format!("agent {agent}: a resume ended its pause, yet the answer shows paused_until_ms {paused_until_ms:?}"),
                    );
                }
                Ok(())
            }
            _ if self.pause_states.get(id).is_some_and(|s| s.until_resumed) => violation(
                "resume_ends_pauses",
                format!("agent {agent}: a resume was taken while the agent was paused until resumed, yet it recorded no agent_resumed"),
            ),
            _ => Ok(()),
        }
    }

    /// Invariant 37 for a rotation answered 2xx: the event at its `seq` is that agent's
    /// rotation to the token it returned.
    pub fn token_rotated(
        &mut self,
        agent: &str,
        seq: u64,
        token_sha256: &str,
    ) -> Result<(), Violation> {
        let id = self
            .ids
            .get(agent)
            .ok_or_else(|| unknown_agent(Some(agent)))?;
        match self.rotations.get(&seq) {
            Some((rotated, hash)) if rotated == id && hash == token_sha256 => {
                self.tokens.insert(agent.to_string(), token_sha256.to_string());
                Ok(())
            }
            other => violation(
                "token_rotation_as_answered",
                format!("agent {agent} ({id}): a rotation was answered with seq {seq} and a token hashing to {token_sha256}, yet the rotation committed at that seq is {other:?}"),
            ),
        }
    }

    /// Invariant 37 for a read with a token a rotation returned: the newest reads the agent,
    /// an older one is refused.
    pub fn token_used(
        &self,
        agent: &str,
        token_sha256: &str,
        status: u16,
    ) -> Result<(), Violation> {
        let newest = self.tokens.get(agent).map(String::as_str) == Some(token_sha256);
        let expected = if newest { 200 } else { 401 };
        if status != expected {
            let which = if newest { "newest" } else { "replaced" };
            return violation(
                "token_rotation_as_answered",
                format!("agent {agent}: a read with its {which} token (sha256 {token_sha256}) was answered {status}, not {expected}"),
            );
        }
        Ok(())
    }

    /// Invariant 34: the shown spec against the expected one, field by field.
    pub fn shown(&mut self, agent: &str, spec: &Value) -> Result<(), Violation> {
        let Some(expected) = self.expected.get(agent) else {
            return Ok(());
        };
        self.shown += 1;
        let mismatch = |path: &str, want: &Value, got: &Value| {
            violation(
                "spec_shown_as_sent",
                format!("agent {agent}: {path} should be {want} (as sent, or its documented default); the node shows {got}"),
            )
        };
        for field in SPEC_INTS {
            let sent = at(expected, field.path);
            let want = if sent.is_null() {
                field.default.map_or(Value::Null, Value::from)
            } else {
                sent.clone()
            };
            let got = at(spec, field.path);
            // A field left out of the shown spec is shown at its default.
            let got = if got.is_null() {
                field.default.map_or(Value::Null, Value::from)
            } else {
                got.clone()
            };
            if want != got {
                return mismatch(field.path, &want, &got);
            }
        }
        self.adapter_shown(agent, expected, spec)?;
        let zone = at(expected, "time_zone");
        let zone = if zone.is_null() {
            &Value::from("UTC")
        } else {
            zone
        };
        for (path, want) in [
            ("name", &expected["name"]),
            ("time_zone", zone),
            ("adapter.steps", at(expected, "adapter.steps")),
        ] {
            if at(spec, path) != want {
                return mismatch(path, want, at(spec, path));
            }
        }
        Ok(())
    }
}

impl EdgesOracle {
    /// Invariant 34 for the adapter's own fields: numbers as sent or at their documented
    /// defaults, texts and lists as sent, the two choices at their defaults when not sent.
    fn adapter_shown(&self, agent: &str, expected: &Value, spec: &Value) -> Result<(), Violation> {
        let kind = at(expected, "adapter.type").as_str().unwrap_or("scripted");
        let Some(rules) = ADAPTERS.iter().find(|a| a.kind == kind) else {
            return Ok(());
        };
        let default_of = |path: &str| match path {
            "adapter.api" => Value::from("openai"),
            "adapter.mode" => Value::from("sync"),
            _ => Value::Null,
        };
        let paths = rules
            .ints
            .iter()
            .map(|f| (f.path, f.default.map_or(Value::Null, Value::from)))
            .chain(rules.texts.iter().map(|t| (t.path, default_of(t.path))))
            .chain(rules.lists.iter().map(|l| (l.path, Value::Null)));
        for (path, default) in paths {
            let sent = at(expected, path);
            let want = if sent.is_null() { &default } else { sent };
            let got = at(spec, path);
            // A field never sent and without a documented default is the node's to fill.
            if sent.is_null() && default.is_null() {
                continue;
            }
            // An empty list may be left out of the spec shown.
            let empty = want.as_array().is_some_and(Vec::is_empty) && got.is_null();
            if got != want && !empty {
                return violation(
                    "spec_shown_as_sent",
                    format!("agent {agent}: {path} should be {want} (as sent, or its documented default); the node shows {got}"),
                );
            }
        }
        Ok(())
    }
}

fn unknown_agent(agent: Option<&str>) -> Violation {
    Violation {
        invariant: "limits_as_documented",
        detail: format!(
            "a request about {agent:?}, whose creation was never taken (the workload only sends those)"
        ),
    }
}

/// The value at a dotted path; null when absent.
fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .try_fold(value, |v, key| v.get(key))
        .unwrap_or(&Value::Null)
}

/// RFC 7396: an object merges key by key, `null` removes a key, anything else replaces.
fn merge_patch(target: &Value, patch: &Value) -> Value {
    let Value::Object(patch) = patch else {
        return patch.clone();
    };
    let mut merged = match target {
        Value::Object(target) => target.clone(),
        _ => Map::new(),
    };
    for (key, value) in patch {
        if value.is_null() {
            merged.remove(key);
        } else {
            let old = merged.get(key).cloned().unwrap_or(Value::Null);
            merged.insert(key.clone(), merge_patch(&old, value));
        }
    }
    Value::Object(merged)
}

/// The fields of `spec` outside their documented limits (empty: a valid spec).
pub fn judge_spec(spec: &Value) -> Judgement {
    let mut invalid = Judgement::new();
    let Some(object) = spec.as_object() else {
        invalid.insert("body".into());
        return invalid;
    };
    for (key, value) in object {
        match key.as_str() {
            "name" => {
                if !valid_name(value) {
                    invalid.insert("name".into());
                }
            }
            "time_zone" => {
                if !valid_zone(value) {
                    invalid.insert("time_zone".into());
                }
            }
            "adapter" => judge_adapter(value, &mut invalid),
            "heartbeat" | "limits" | "breaker" | "liveness" => {
                judge_group(key, value, &mut invalid);
            }
            other => {
                invalid.insert(other.to_string());
            }
        }
    }
    let cooldown = match at(spec, COOLDOWN_PATH) {
        Value::Null => 900_000,
        v => v.as_u64().unwrap_or(0),
    };
    if let Some(max) = at(spec, COOLDOWN_MAX_PATH).as_u64().or(Some(7_200_000)) {
        if max < cooldown && !invalid.contains(COOLDOWN_PATH) {
            invalid.insert(COOLDOWN_MAX_PATH.into());
        }
    }
    invalid
}

fn valid_name(value: &Value) -> bool {
    let Some(name) = value.as_str() else {
        return false;
    };
    let chars = name.chars().count();
    (1..=NAME_CHARS_MAX).contains(&chars)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn valid_zone(value: &Value) -> bool {
    match value.as_str() {
        Some(zone) => zone.chars().count() <= ZONE_CHARS_MAX && ZONES.contains(&zone),
        None => false,
    }
}

fn judge_adapter(adapter: &Value, invalid: &mut Judgement) {
    let Some(fields) = adapter.as_object() else {
        invalid.insert("adapter".into());
        return;
    };
    let kind = fields
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("scripted");
    let Some(rules) = ADAPTERS.iter().find(|a| a.kind == kind) else {
        invalid.insert("adapter.type".into());
        return;
    };
    for required in rules.required {
        if !fields.contains_key(*required) {
            invalid.insert(format!("adapter.{required}"));
        }
    }
    for (key, value) in fields {
        let path = format!("adapter.{key}");
        let ok = match key.as_str() {
            "type" => true,
            "steps" if kind == "scripted" => {
                judge_steps(value, invalid);
                true
            }
            _ => rules.judge(&path, value),
        };
        if !ok {
            invalid.insert(path);
        }
    }
}

fn judge_steps(steps: &Value, invalid: &mut Judgement) {
    let steps = steps.as_array().map(Vec::as_slice).unwrap_or_default();
    if !(1..=STEPS_MAX).contains(&steps.len()) {
        invalid.insert("adapter.steps".into());
    }
    for step in steps {
        let duration = step["duration_ms"].as_u64();
        if !duration.is_some_and(|d| d <= STEP_MS_MAX) {
            invalid.insert("adapter.steps.duration_ms".into());
        }
        let outcome = step["outcome"].as_str().unwrap_or_default();
        if !STEP_OUTCOMES.contains(&outcome) {
            invalid.insert("adapter.steps.outcome".into());
        }
    }
}

/// A text field: its length in characters, and whether blank text is refused.
#[derive(Debug, Clone, Copy)]
pub struct Text {
    pub path: &'static str,
    pub chars_max: usize,
    pub form: Form,
}

/// What a text field holds besides its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Any text of at least one character that is not all blank (a program's name).
    NotBlank,
    /// Any text of at least one character.
    NonEmpty,
    /// Any text, empty included.
    Any,
    /// An `http://` or `https://` URL with a host; `strict`: no user info, query or fragment.
    Url { strict: bool },
    /// An environment variable's name: letters, digits and `_`, not starting with a digit.
    EnvName,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// A prompt template (docs/agents.md): minijinja syntax, reading only
    /// [`PROMPT_VARIABLES`].
    Template,
}

/// The variables a prompt template may read (docs/agents.md, "Variables (nothing else is
/// accepted)").
pub const PROMPT_VARIABLES: &[&str] = &[
    "agent.name",
    "agent.id",
    "run.id",
    "run.source",
    "run.reason",
    "run.payload",
    "now_local",
    "daily_cap_remaining",
];

/// Whether `source` is a template the documents accept: it parses, and every variable it
/// reads is in the table (minijinja's own analysis says which it reads, as the docs say).
fn template_holds(source: &str) -> bool {
    let env = minijinja::Environment::new();
    let Ok(template) = env.template_from_str(source) else {
        return false;
    };
    template
        .undeclared_variables(true)
        .iter()
        .all(|name| PROMPT_VARIABLES.contains(&name.as_str()))
}

/// A list of texts: at most `items_max`, each at most `chars_max` characters.
#[derive(Debug, Clone, Copy)]
pub struct List {
    pub path: &'static str,
    pub items_max: usize,
    pub chars_max: usize,
}

/// One adapter type's documented fields (docs/api.md, docs/agents.md, docs/adapters/).
#[derive(Debug)]
pub struct AdapterRules {
    pub kind: &'static str,
    pub required: &'static [&'static str],
    pub ints: &'static [IntField],
    pub texts: &'static [Text],
    pub lists: &'static [List],
}

impl AdapterRules {
    /// Whether `value` is a valid value of the field at `path` (unknown fields are not).
    fn judge(&self, path: &str, value: &Value) -> bool {
        if let Some(field) = self.ints.iter().find(|f| f.path == path) {
            return match value {
                Value::Null => field.nullable,
                v => v
                    .as_u64()
                    .is_some_and(|n| (field.min..=field.max).contains(&n)),
            };
        }
        if let Some(text) = self.texts.iter().find(|t| t.path == path) {
            return value.as_str().is_some_and(|v| text.holds(v))
                || (value.is_null()
                    && !self.required.iter().any(|r| path == format!("adapter.{r}")));
        }
        if let Some(list) = self.lists.iter().find(|l| l.path == path) {
            return value.as_array().is_some_and(|items| {
                items.len() <= list.items_max
                    && items.iter().all(|item| {
                        item.as_str()
                            .is_some_and(|t| t.chars().count() <= list.chars_max)
                    })
            });
        }
        false
    }
}

impl Text {
    fn holds(&self, value: &str) -> bool {
        if value.chars().count() > self.chars_max {
            return false;
        }
        match self.form {
            Form::Any => true,
            Form::NotBlank => !value.trim().is_empty(),
            Form::NonEmpty => !value.is_empty(),
            Form::EnvName => {
                let mut chars = value.chars();
                chars
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            }
            Form::OneOf(words) => words.contains(&value),
            Form::Template => template_holds(value),
            Form::Url { strict } => {
                let Some(rest) = value
                    .strip_prefix("https://")
                    .or_else(|| value.strip_prefix("http://"))
                else {
                    return false;
                };
                let host = rest.split('/').next().unwrap_or_default();
                let extras = rest.contains('?') || rest.contains('#') || host.contains('@');
                !host.is_empty() && !(strict && extras)
            }
        }
    }
}

const fn text(path: &'static str, chars_max: usize, form: Form) -> Text {
    Text {
        path,
        chars_max,
        form,
    }
}

/// The child process' fields, shared by `process`, `claude_local` and `codex_local`.
const CHILD_INTS: [IntField; 2] = [
    int("adapter.timeout_sec", Some(600), 1, 86_400),
    int("adapter.grace_sec", Some(10), 0, 300),
];
const CLAUDE_INTS: [IntField; 3] = [
    CHILD_INTS[0],
    CHILD_INTS[1],
    int("adapter.max_turns", None, 1, 500),
];
/// A child's working directory (docs/adapters/process.md: 1–1,024 characters).
const CWD: Text = text("adapter.cwd", 1_024, Form::NonEmpty);
const CLI_TEXTS: [Text; 4] = [
    text("adapter.binary", 1_024, Form::NotBlank),
    text("adapter.model", 200, Form::NonEmpty),
    text("adapter.prompt", 16_384, Form::Any),
    CWD,
];
const CLI_LISTS: [List; 1] = [List {
    path: "adapter.extra_args",
    items_max: 64,
    chars_max: 4_096,
}];

/// Every adapter type the workload writes, with its documented fields.
pub static ADAPTERS: &[AdapterRules] = &[
    AdapterRules {
        kind: "scripted",
        required: &["steps"],
        ints: &[],
        texts: &[],
        lists: &[],
    },
    AdapterRules {
        kind: "llm",
        required: &["base_url", "model"],
        ints: &[
            int("adapter.request_timeout_ms", Some(60_000), 1_000, 600_000),
            int("adapter.max_iterations", Some(5), 1, 50),
            int("adapter.tool_calls_max", Some(5), 0, 50),
            int("adapter.max_output_tokens", Some(1_024), 1, 128_000),
        ],
        texts: &[
            text("adapter.api", 16, Form::OneOf(&["openai", "anthropic"])),
            text("adapter.base_url", 2_048, Form::Url { strict: true }),
            text("adapter.model", 200, Form::NonEmpty),
            text("adapter.api_key_env", 128, Form::EnvName),
            text("adapter.system_prompt", 8_192, Form::Template),
        ],
        lists: &[],
    },
    AdapterRules {
        kind: "process",
        required: &["command"],
        ints: &CHILD_INTS,
        texts: &[
            text("adapter.command", 1_024, Form::NotBlank),
            text("adapter.stdin", 16_384, Form::Any),
            CWD,
        ],
        lists: &[List {
            path: "adapter.args",
            items_max: 64,
            chars_max: 4_096,
        }],
    },
    AdapterRules {
        kind: "claude_local",
        required: &[],
        ints: &CLAUDE_INTS,
        texts: &CLI_TEXTS,
        lists: &CLI_LISTS,
    },
    AdapterRules {
        kind: "codex_local",
        required: &[],
        ints: &CHILD_INTS,
        texts: &CLI_TEXTS,
        lists: &CLI_LISTS,
    },
    AdapterRules {
        kind: "http",
        required: &["url", "secret_env"],
        ints: &[
            int("adapter.timeout_ms", Some(30_000), 100, 600_000),
            int("adapter.report_wait_sec", Some(600), 1, 86_400),
        ],
        texts: &[
            text("adapter.url", 2_048, Form::Url { strict: false }),
            text("adapter.secret_env", 128, Form::EnvName),
            text("adapter.mode", 16, Form::OneOf(&["sync", "async"])),
        ],
        lists: &[],
    },
];

fn judge_group(group: &str, value: &Value, invalid: &mut Judgement) {
    let Some(fields) = value.as_object() else {
        invalid.insert(group.to_string());
        return;
    };
    for (key, value) in fields {
        let path = format!("{group}.{key}");
        let Some(field) = SPEC_INTS.iter().find(|f| f.path == path) else {
            invalid.insert(path);
            continue;
        };
        let ok = match value {
            Value::Null => field.nullable,
            v => v
                .as_u64()
                .is_some_and(|n| (field.min..=field.max).contains(&n)),
        };
        if !ok {
            invalid.insert(path);
        }
    }
}

/// The fields of a wakeup request outside their documented limits.
pub fn judge_wake(body: &Value) -> Judgement {
    let mut invalid = Judgement::new();
    let Some(object) = body.as_object() else {
        invalid.insert("body".into());
        return invalid;
    };
    if !object.contains_key("source") {
        invalid.insert("source".into());
    }
    for (key, value) in object {
        let ok = match key.as_str() {
            "source" => value.as_str().is_some_and(|s| SOURCES.contains(&s)),
            "reason" => value
                .as_str()
                .is_some_and(|r| r.chars().count() <= REASON_CHARS_MAX),
            "payload" => value.to_string().len() <= PAYLOAD_BYTES_MAX,
            "task_key" | "idempotency_key" => match value {
                Value::Null => true,
                Value::String(k) => (1..=KEY_CHARS_MAX).contains(&k.chars().count()),
                _ => false,
            },
            "trigger_detail" => match value {
                Value::Null => true,
                Value::Object(_) => value.to_string().len() <= TRIGGER_DETAIL_BYTES_MAX,
                _ => false,
            },
            _ => false,
        };
        if !ok {
            invalid.insert(key.clone());
        }
    }
    invalid
}

/// The fields of a pause request outside their documented limits.
pub fn judge_pause(kind: EdgeKind, body: &Value) -> Judgement {
    let mut invalid = Judgement::new();
    let Some(object) = body.as_object() else {
        invalid.insert("body".into());
        return invalid;
    };
    for (key, value) in object {
        let ok = match (key.as_str(), kind) {
            ("minutes", _) if value.is_null() => true,
            ("minutes", EdgeKind::Pause) => value
                .as_u64()
                .is_some_and(|m| (1..=PAUSE_MINUTES_MAX).contains(&m)),
            // Clamped, never refused: any whole number of minutes that is not negative.
            ("minutes", _) => value.as_u64().is_some(),
            _ => false,
        };
        if !ok {
            invalid.insert(key.clone());
        }
    }
    invalid
}

/// The fields of a pulse outside their documented limits.
pub fn judge_pulse(body: &Value) -> Judgement {
    let mut invalid = Judgement::new();
    let Some(object) = body.as_object() else {
        invalid.insert("body".into());
        return invalid;
    };
    for (key, value) in object {
        let ok = match key.as_str() {
            "status" => {
                value.is_null() || value.as_str().is_some_and(|s| PULSE_STATUSES.contains(&s))
            }
            "metadata" => {
                value.is_null()
                    || (value.is_object()
                        && value.to_string().len() <= PULSE_METADATA_BYTES_MAX
                        && keys_within(value) <= PULSE_METADATA_KEYS_MAX
                        && levels(value) <= PULSE_METADATA_LEVELS_MAX)
            }
            _ => false,
        };
        if !ok {
            invalid.insert(key.clone());
        }
    }
    invalid
}

/// Keys of every object within `value`, its own included.
fn keys_within(value: &Value) -> usize {
    match value {
        Value::Object(map) => map.len() + map.values().map(keys_within).sum::<usize>(),
        Value::Array(items) => items.iter().map(keys_within).sum(),
        _ => 0,
    }
}

/// Levels of objects and arrays in `value` (a scalar has none).
fn levels(value: &Value) -> usize {
    match value {
        Value::Object(map) => 1 + map.values().map(levels).max().unwrap_or(0),
        Value::Array(items) => 1 + items.iter().map(levels).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(extra: Value) -> Value {
        let base = json!({
            "name": "edge-1",
            "adapter": {"type": "scripted", "steps": [{"duration_ms": 1000, "outcome": "succeeded"}]},
        });
        merge_patch(&base, &extra)
    }

    #[test]
    fn a_system_prompt_is_judged_as_a_documented_template() {
        let llm = |prompt: Value| {
            json!({
                "name": "edge-2",
                "adapter": {"type": "llm", "base_url": "https://p.example/v1", "model": "m", "system_prompt": prompt},
            })
        };
        let accepted = [
            json!("Wake {{ agent.name }} for {{ run.reason }} at {{ now_local }}"),
            json!("{{ run.payload[\"ticket\"] | default(\"\") }}"),
            json!("é".repeat(8_192)),
            Value::Null,
        ];
        for prompt in accepted {
            assert!(judge_spec(&llm(prompt.clone())).is_empty(), "{prompt}");
        }
        let refused = [
            json!("é".repeat(8_193)),
            json!("{% if run.id %}unclosed"),
            json!("{{ agent.nmae }}"),
            json!("{{ run.payload.ticket }}"),
        ];
        for prompt in refused {
            let want: Judgement = ["adapter.system_prompt".to_string()].into_iter().collect();
            assert_eq!(judge_spec(&llm(prompt.clone())), want, "{prompt}");
        }
    }

    #[test]
    fn specs_are_judged_at_their_edges() {
        let cases = [
            (json!({"heartbeat": {"interval_ms": 1_000}}), None),
            (
                json!({"heartbeat": {"interval_ms": 999}}),
                Some("heartbeat.interval_ms"),
            ),
            (
                json!({"heartbeat": {"interval_ms": 604_800_001}}),
                Some("heartbeat.interval_ms"),
            ),
            (
                json!({"limits": {"cooldown_ms": 0, "daily_cap": 10_000}}),
                None,
            ),
            (
                json!({"limits": {"daily_cap": 10_001}}),
                Some("limits.daily_cap"),
            ),
            (
                json!({"limits": {"queued_runs_max": "16"}}),
                Some("limits.queued_runs_max"),
            ),
            (json!({"limits": {"colour": 1}}), Some("limits.colour")),
            (
                json!({"breaker": {"cooldown_ms": 8_000_000}}),
                Some("breaker.cooldown_ms_max"),
            ),
            (
                json!({"breaker": {"cooldown_ms": 8_000_000, "cooldown_ms_max": 8_000_000}}),
                None,
            ),
            (json!({"name": "x".repeat(NAME_CHARS_MAX)}), None),
            (
                json!({"name": "x".repeat(NAME_CHARS_MAX + 1)}),
                Some("name"),
            ),
            (json!({"name": "a b"}), Some("name")),
            (json!({"time_zone": "Mars/Olympus_Mons"}), Some("time_zone")),
            (json!({"adapter": {"steps": []}}), Some("adapter.steps")),
            (
                json!({"adapter": {"steps": [{"duration_ms": STEP_MS_MAX + 1, "outcome": "failed"}]}}),
                Some("adapter.steps.duration_ms"),
            ),
        ];
        for (extra, field) in cases {
            let invalid = judge_spec(&spec(extra.clone()));
            let want: Judgement = field.into_iter().map(String::from).collect();
            assert_eq!(invalid, want, "{extra}");
        }
    }

    #[test]
    fn wakeups_are_judged_in_characters_and_compact_bytes() {
        let reason = "é".repeat(REASON_CHARS_MAX);
        assert!(judge_wake(&json!({"source": "on_demand", "reason": reason})).is_empty());
        let long = "é".repeat(REASON_CHARS_MAX + 1);
        assert_eq!(
            judge_wake(&json!({"source": "timer", "reason": long})),
            ["reason".to_string()].into()
        );
        // {"p":"xx…"} is 8 bytes around the string.
        let payload = json!({"p": "x".repeat(PAYLOAD_BYTES_MAX - 8)});
        assert!(judge_wake(&json!({"source": "idle", "payload": payload})).is_empty());
        let payload = json!({"p": "x".repeat(PAYLOAD_BYTES_MAX - 7)});
        assert!(judge_wake(&json!({"source": "idle", "payload": payload})).contains("payload"));
        assert!(judge_wake(&json!({"source": "idle", "task_key": ""})).contains("task_key"));
        assert!(
            judge_wake(&json!({"source": "idle", "trigger_detail": []})).contains("trigger_detail")
        );
        assert!(judge_wake(&json!({"source": "later"})).contains("source"));
        assert!(judge_wake(&json!({"reason": "no source"})).contains("source"));
    }

    #[test]
    fn pulse_metadata_is_judged_in_compact_bytes_keys_and_levels() {
        assert!(judge_pulse(&json!({})).is_empty());
        assert!(judge_pulse(&json!({"status": "shutting_down", "metadata": null})).is_empty());
        assert_eq!(
            judge_pulse(&json!({"status": "asleep"})),
            ["status".into()].into()
        );
        // {"m":"xx…"} is 8 bytes around the string.
        let at = json!({"metadata": {"m": "x".repeat(PULSE_METADATA_BYTES_MAX - 8)}});
        assert!(judge_pulse(&at).is_empty());
        let over = json!({"metadata": {"m": "x".repeat(PULSE_METADATA_BYTES_MAX - 7)}});
        assert_eq!(judge_pulse(&over), ["metadata".into()].into());
        // 31 keys beside `inner`, whose one key makes 33.
        let mut flat: Map<String, Value> = (0..PULSE_METADATA_KEYS_MAX - 1)
            .map(|i| (format!("k{i}"), json!(i)))
            .collect();
        flat.insert("inner".into(), json!({}));
        assert!(judge_pulse(&json!({ "metadata": flat.clone() })).is_empty());
        flat.insert("inner".into(), json!({"one": 1}));
        assert!(judge_pulse(&json!({ "metadata": flat })).contains("metadata"));
        // Object > object > array > object is four levels; one array more is five.
        assert!(judge_pulse(&json!({"metadata": {"a": {"b": [{"c": 1}]}}})).is_empty());
        let deep = json!({"metadata": {"a": {"b": [{"c": [1]}]}}});
        assert!(judge_pulse(&deep).contains("metadata"));
        assert!(judge_pulse(&json!({"metadata": [1]})).contains("metadata"));
        assert!(judge_pulse(&json!({"load": 0.5})).contains("load"));
    }

    #[test]
    fn a_pulse_within_limits_refused_is_reported_and_one_past_them_refused_is_not() {
        let mut oracle = oracle_with_agent();
        let within = json!({"status": "busy", "metadata": {"queue": 3}});
        let refused = oracle.answered(
            EdgeKind::Pulse,
            Some("edge-1"),
            &within,
            400,
            Some("invalid_field"),
            Some("metadata"),
            1,
            (0, None),
        );
        assert_eq!(refused.unwrap_err().invariant, "limits_as_documented");
        oracle
            .answered(
                EdgeKind::Pulse,
                Some("edge-1"),
                &within,
                200,
                None,
                None,
                1,
                (0, None),
            )
            .expect("a pulse within its limits taken");
        let past = json!({"metadata": {"a": {"b": {"c": {"d": {"e": 1}}}}}});
        oracle
            .answered(
                EdgeKind::Pulse,
                Some("edge-1"),
                &past,
                400,
                Some("invalid_field"),
                Some("metadata"),
                1,
                (0, None),
            )
            .expect("a pulse five levels deep refused naming its metadata");
        let taken = oracle.answered(
            EdgeKind::Pulse,
            Some("edge-1"),
            &past,
            200,
            None,
            None,
            1,
            (0, None),
        );
        assert_eq!(taken.unwrap_err().invariant, "limits_as_documented");
    }

    fn oracle_with_agent() -> EdgesOracle {
        let mut oracle = EdgesOracle::default();
        let body = spec(json!({"limits": {"daily_cap": 5}}));
        oracle
            .answered(EdgeKind::Create, None, &body, 201, None, None, 1, (0, None))
            .expect("a valid creation taken");
        oracle
    }

    #[test]
    fn a_valid_request_refused_or_an_invalid_one_taken_is_reported() {
        let mut oracle = oracle_with_agent();
        let valid = spec(json!({"name": "edge-2", "limits": {"queued_runs_max": 1_000}}));
        let refused = oracle.answered(
            EdgeKind::Create,
            None,
            &valid,
            400,
            Some("invalid_field"),
            Some("limits.queued_runs_max"),
            1,
            (0, None),
        );
        assert_eq!(refused.unwrap_err().invariant, "limits_as_documented");
        let patch = json!({"limits": {"queued_runs_max": 1_001}});
        let taken = oracle.answered(
            EdgeKind::Patch,
            Some("edge-1"),
            &patch,
            200,
            None,
            None,
            1,
            (0, None),
        );
        assert_eq!(taken.unwrap_err().invariant, "limits_as_documented");
        let wrong_field = oracle.answered(
            EdgeKind::Patch,
            Some("edge-1"),
            &patch,
            400,
            Some("invalid_field"),
            Some("limits"),
            1,
            (0, None),
        );
        assert_eq!(wrong_field.unwrap_err().invariant, "limits_as_documented");
        oracle
            .answered(
                EdgeKind::Patch,
                Some("edge-1"),
                &patch,
                400,
                Some("invalid_field"),
                Some("limits.queued_runs_max"),
                1,
                (0, None),
            )
            .expect("refused naming the field");
    }

    #[test]
    fn a_spec_shown_otherwise_than_sent_and_patched_is_reported() {
        let mut oracle = oracle_with_agent();
        let patch = json!({"limits": {"daily_cap": null, "cooldown_ms": 5_000}});
        oracle
            .answered(
                EdgeKind::Patch,
                Some("edge-1"),
                &patch,
                200,
                None,
                None,
                1,
                (0, None),
            )
            .expect("a valid change taken");
        let mut shown = spec(
            json!({"limits": {"cooldown_ms": 5_000, "run_timeout_ms": 600_000}, "time_zone": "UTC"}),
        );
        oracle
            .shown("edge-1", &shown)
            .expect("as sent, with defaults");
        shown["limits"]["daily_cap"] = json!(5);
        let kept = oracle.shown("edge-1", &shown).unwrap_err();
        assert_eq!(kept.invariant, "spec_shown_as_sent");
        shown["limits"]["daily_cap"] = Value::Null;
        shown["liveness"] = json!({"phi_threshold": 9});
        assert!(
            oracle.shown("edge-1", &shown).is_err(),
            "a default shown wrong"
        );
    }

    #[test]
    fn a_resume_that_ends_no_pause_or_leaves_one_is_reported() {
        let mut oracle = oracle_with_agent();
        oracle.ids.insert("edge-1".into(), 7);
        let agent = vigil::engine::agent::AgentId(7);
        let event = |seq, at_ms, kind| Event {
            seq,
            at_ms,
            tenant: "default".into(),
            kind,
        };
        let resume = |oracle: &mut EdgesOracle, seq_before| {
            oracle.answered(
                EdgeKind::Resume,
                Some("edge-1"),
                &json!({}),
                200,
                None,
                None,
                1,
                (seq_before, None),
            )
        };
        // Nothing paused, yet a resume recorded agent_resumed.
        oracle.committed(&event(3, 10_000, EventKind::AgentResumed { agent }));
        assert_eq!(
            resume(&mut oracle, 2).unwrap_err().invariant,
            "resume_ends_pauses"
        );
        // Paused until resumed, and the resume recorded nothing.
        let paused = EventKind::AgentPaused {
            agent,
            until_ms: None,
            by: PausedBy::Operator,
        };
        oracle.committed(&event(4, 20_000, paused));
        assert_eq!(
            resume(&mut oracle, 4).unwrap_err().invariant,
            "resume_ends_pauses"
        );
        // The resume that ends it.
        oracle.committed(&event(5, 30_000, EventKind::AgentResumed { agent }));
        resume(&mut oracle, 4).expect("the pause in force was ended");
        // A timed pause already over: nothing to end, nothing recorded.
        let timed = EventKind::AgentPaused {
            agent,
            until_ms: Some(40_000),
            by: PausedBy::Agent,
        };
        oracle.committed(&event(6, 35_000, timed));
        resume(&mut oracle, 6).expect("nothing in force at the resume's instant");
    }

    #[test]
    fn a_rest_not_clamped_as_documented_is_reported() {
        let mut oracle = oracle_with_agent();
        let created = Event {
            seq: 5,
            at_ms: 1_000,
            tenant: "default".into(),
            kind: EventKind::AgentPaused {
                agent: vigil::engine::agent::AgentId(7),
                until_ms: Some(1_000 + 60 * MINUTE_MS),
                by: PausedBy::Agent,
            },
        };
        oracle.ids.insert("edge-1".into(), 7);
        oracle.committed(&created);
        let body = json!({"minutes": 999});
        let until = Some(1_000 + 60 * MINUTE_MS);
        oracle
            .answered(
                EdgeKind::PauseHeartbeats,
                Some("edge-1"),
                &body,
                200,
                None,
                None,
                1,
                (0, until),
            )
            .expect("999 clamps to 60");
        let body = json!({"minutes": 59});
        let short = oracle.answered(
            EdgeKind::PauseHeartbeats,
            Some("edge-1"),
            &body,
            200,
            None,
            None,
            1,
            (0, until),
        );
        assert_eq!(short.unwrap_err().invariant, "pause_length_as_asked");
    }

    #[test]
    fn a_rotation_answered_otherwise_than_committed_or_a_token_misjudged_is_reported() {
        let mut oracle = oracle_with_agent();
        oracle.ids.insert("edge-1".into(), 7);
        let hex = |token: &str| vigil::engine::tenant::TokenHash::of(token).to_hex();
        let (aa, bb, cc) = (hex("a"), hex("b"), hex("c"));
        let rotated = |seq, agent, hash: &str| Event {
            seq,
            at_ms: 10_000,
            tenant: "default".into(),
            kind: EventKind::AgentTokenRotated {
                agent: vigil::engine::agent::AgentId(agent),
                token_hash: vigil::engine::tenant::TokenHash::from_hex(hash).expect("a hash's hex"),
            },
        };
        oracle.committed(&rotated(3, 7, &aa));
        oracle.committed(&rotated(4, 8, &bb));
        // Another seq, another agent's rotation, another hash: each is reported.
        for (seq, hash) in [(2, &aa), (4, &bb), (3, &bb)] {
            let error = oracle.token_rotated("edge-1", seq, hash).unwrap_err();
            assert_eq!(error.invariant, "token_rotation_as_answered");
        }
        oracle
            .token_rotated("edge-1", 3, &aa)
            .expect("the rotation committed at the answer's seq");
        oracle
            .token_used("edge-1", &aa, 200)
            .expect("the newest token reads");
        let refused = oracle.token_used("edge-1", &aa, 401).unwrap_err();
        assert_eq!(refused.invariant, "token_rotation_as_answered");
        oracle.committed(&rotated(5, 7, &cc));
        oracle
            .token_rotated("edge-1", 5, &cc)
            .expect("the second rotation");
        oracle
            .token_used("edge-1", &aa, 401)
            .expect("the replaced token is refused");
        let kept = oracle.token_used("edge-1", &aa, 200).unwrap_err();
        assert_eq!(kept.invariant, "token_rotation_as_answered");
    }
}
