//! Predicate heartbeats (the OpenWOP RFC 0060 contract, docs/api.md "Predicate heartbeats"): a
//! cheap, bounded check of an agent's outside world on a short interval that acts only when the
//! state it observes changes, never on every tick.
//!
//! The engine keeps each heartbeat's definition and its prior state (an opaque token, the last
//! observation recorded as durable). Ticks and evaluations happen in the node
//! (`crate::heartbeats`); only a transition reaches the engine (`Command::ObserveHeartbeat`), and
//! its `heartbeat_state_changed` is decided together with the wakeup it enqueues, so one commit
//! holds both (ADR 0022).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::agent::{AgentId, AgentStatus, FieldError};
use super::agent_state::{AgentState, RestoreError};
use super::draft::Draft;
use super::event::EventKind;
use super::spec_error::echo;
use super::wakeup::{RequestedBy, WakeupRequest, WakeupSource};
use super::{Engine, Refusal};

/// The shortest interval a heartbeat ticks at, in seconds. A shorter interval asked for is
/// raised to it (RFC 0060: requests below the host's minimum clamp up) and the effective interval
/// is answered.
pub const HEARTBEAT_MIN_INTERVAL_SEC: u64 = 5;
/// The longest interval, in seconds (a week, as an agent's timer).
pub const HEARTBEAT_MAX_INTERVAL_SEC: u64 = 7 * 24 * 60 * 60;
/// The longest one evaluation may take, in ms, and the default; a definition may ask for less.
/// An evaluation past its budget is abandoned and reported `timeout`.
pub const HEARTBEAT_MAX_RUNTIME_MS: u64 = 5_000;
/// The shortest evaluation budget a definition may ask for, in ms.
pub const HEARTBEAT_MIN_RUNTIME_MS: u64 = 10;
/// The largest observed state kept as the prior state, in bytes (as canonical JSON). A larger
/// observation is reported `error` and the prior state is kept.
pub const HEARTBEAT_MAX_STATE_BYTES: usize = 4 * 1024;
/// Most runs enqueued by one heartbeat that may wait (queued, not started) at once. Past it the
/// heartbeat's emission pauses: a transition is neither recorded nor enqueued (so the next tick
/// after the queue drains detects it again), and `heartbeat_emission_paused` says so once.
pub const HEARTBEAT_MAX_PENDING_ENQUEUED: usize = 3;
/// Most heartbeats one agent may have.
pub const HEARTBEATS_PER_AGENT_MAX: usize = 16;
/// Longest heartbeat id, in characters (`[a-z0-9_-]`, unique in its tenant).
pub const HEARTBEAT_ID_CHARS_MAX: usize = 64;
/// Longest URL of an HTTP predicate, in bytes.
pub const HEARTBEAT_URL_BYTES_MAX: usize = 2_048;
/// Longest JSON pointer into an HTTP predicate's answer, in bytes.
pub const HEARTBEAT_POINTER_BYTES_MAX: usize = 256;
/// Most `secret_headers` of an HTTP check.
pub const HEARTBEAT_SECRET_HEADERS_MAX: usize = 8;
/// Longest header name of an HTTP check's `secret_headers`, in bytes.
pub const HEARTBEAT_HEADER_NAME_BYTES_MAX: usize = 64;
/// Longest program of a command predicate, in bytes.
pub const HEARTBEAT_COMMAND_BYTES_MAX: usize = 1_024;
/// Most arguments of a command predicate, and the longest one, in bytes.
pub const HEARTBEAT_ARGS_MAX: usize = 32;
pub const HEARTBEAT_ARG_BYTES_MAX: usize = 4_096;

/// A heartbeat's id: chosen by the operator, unique in the tenant.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct HeartbeatId(pub String);

impl std::fmt::Display for HeartbeatId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a heartbeat observes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// `GET url`: the JSON answer (or the value at `pointer` in it, RFC 6901) is the state. A
    /// non-2xx answer or a body that is not JSON is an `error`.
    Http {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pointer: Option<String>,
        /// Headers whose values are secrets: header name → the name of the node's environment
        /// variable holding the value (`{"authorization": "INBOX_AUTH"}`). Read at each check,
        /// sent redacted from every error; the values are never stored or shown.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        secret_headers: BTreeMap<String, String>,
    },
    /// `command args…` run through the node's spawner (no shell, its own process group, the
    /// node's allowed variables only; killed with its group past the budget): exit 0 and its
    /// stdout is the state, as JSON when it parses as JSON, else as the trimmed text.
    Command {
        command: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
    },
    /// Nothing observed by the node itself: only the test seam
    /// (`POST /v1/host/sample/heartbeat/tick`) brings observations.
    Sample,
}

/// What a transition does besides its `heartbeat_state_changed` event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnChange {
    /// Enqueue a wakeup of the agent with source `predicate` and `{heartbeat, from, to}` as its
    /// payload.
    #[default]
    Wake,
    /// Only the event.
    Event,
}

/// A heartbeat's definition as asked for (`POST /v1/heartbeats`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    pub id: String,
    pub agent: u64,
    pub interval_sec: u64,
    pub check: Check,
    #[serde(default)]
    pub on_change: OnChange,
    /// The evaluation budget (default and ceiling `HEARTBEAT_MAX_RUNTIME_MS`).
    #[serde(default)]
    pub max_runtime_ms: Option<u64>,
}

/// A heartbeat's definition as kept: the effective interval and budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeartbeatSpec {
    pub interval_sec: u64,
    pub check: Check,
    pub on_change: OnChange,
    pub max_runtime_ms: u64,
}

impl HeartbeatRequest {
    /// Validates the request (each field named) and makes the kept spec: an interval under the
    /// minimum is raised to it, not refused.
    pub fn validate(&self) -> Result<(HeartbeatId, AgentId, HeartbeatSpec), FieldError> {
        let id = validate_id(&self.id)?;
        if self.interval_sec == 0 || self.interval_sec > HEARTBEAT_MAX_INTERVAL_SEC {
            return Err(FieldError::new(
                "interval_sec",
                format!(
                    "interval_sec must be 1 to {HEARTBEAT_MAX_INTERVAL_SEC} seconds (under {HEARTBEAT_MIN_INTERVAL_SEC} is raised to {HEARTBEAT_MIN_INTERVAL_SEC}), got {}",
                    self.interval_sec
                ),
            ));
        }
        let max_runtime_ms = self.max_runtime_ms.unwrap_or(HEARTBEAT_MAX_RUNTIME_MS);
        if !(HEARTBEAT_MIN_RUNTIME_MS..=HEARTBEAT_MAX_RUNTIME_MS).contains(&max_runtime_ms) {
            return Err(FieldError::new(
                "max_runtime_ms",
                format!(
                    "max_runtime_ms must be {HEARTBEAT_MIN_RUNTIME_MS} to {HEARTBEAT_MAX_RUNTIME_MS}, got {max_runtime_ms}"
                ),
            ));
        }
        self.check.validate()?;
        Ok((
            id,
            AgentId(self.agent),
            HeartbeatSpec {
                interval_sec: self.interval_sec.max(HEARTBEAT_MIN_INTERVAL_SEC),
                check: self.check.clone(),
                on_change: self.on_change,
                max_runtime_ms,
            },
        ))
    }
}

fn validate_id(id: &str) -> Result<HeartbeatId, FieldError> {
    let shaped = !id.is_empty()
        && id.chars().count() <= HEARTBEAT_ID_CHARS_MAX
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !shaped {
        return Err(FieldError::new(
            "id",
            format!(
                "id must be 1 to {HEARTBEAT_ID_CHARS_MAX} characters of a-z, 0-9, _ and -, got {}",
                echo(id)
            ),
        ));
    }
    Ok(HeartbeatId(id.to_string()))
}

impl Check {
    fn validate(&self) -> Result<(), FieldError> {
        match self {
            Check::Sample => Ok(()),
            Check::Command { command, args } => validate_command(command, args),
            Check::Http {
                url,
                pointer,
                secret_headers,
            } => {
                validate_secret_headers(secret_headers)?;
                let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
                if !scheme_ok || url.len() > HEARTBEAT_URL_BYTES_MAX {
                    return Err(FieldError::new(
                        "check.url",
                        format!(
                            "check.url must be an http:// or https:// URL of at most {HEARTBEAT_URL_BYTES_MAX} bytes, got {}",
                            echo(url)
                        ),
                    ));
                }
                if let Some(pointer) = pointer {
                    let shaped = pointer.is_empty() || pointer.starts_with('/');
                    if !shaped || pointer.len() > HEARTBEAT_POINTER_BYTES_MAX {
                        return Err(FieldError::new(
                            "check.pointer",
                            format!(
                                "check.pointer must be a JSON pointer (empty, or starting with /) of at most {HEARTBEAT_POINTER_BYTES_MAX} bytes, got {}",
                                echo(pointer)
                            ),
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}

/// Header names a check may not set: the transport sets them itself.
const MANAGED_HEADER_NAMES: [&str; 6] = [
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "accept",
];

fn validate_secret_headers(headers: &BTreeMap<String, String>) -> Result<(), FieldError> {
    if headers.len() > HEARTBEAT_SECRET_HEADERS_MAX {
        return Err(FieldError::new(
            "check.secret_headers",
            format!(
                "check.secret_headers may name at most {HEARTBEAT_SECRET_HEADERS_MAX} headers, got {}",
                headers.len()
            ),
        ));
    }
    for (name, variable) in headers {
        let field = format!("check.secret_headers.{name}");
        let token = !name.is_empty()
            && name.len() <= HEARTBEAT_HEADER_NAME_BYTES_MAX
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token || MANAGED_HEADER_NAMES.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(FieldError::new(
                field,
                format!(
                    "a header name is 1 to {HEARTBEAT_HEADER_NAME_BYTES_MAX} token characters, not one the transport sets ({}), got {}",
                    MANAGED_HEADER_NAMES.join(", "),
                    echo(name)
                ),
            ));
        }
        super::cli_spec::validate_env_name(&field, variable)?;
    }
    Ok(())
}

fn validate_command(command: &str, args: &[String]) -> Result<(), FieldError> {
    if command.trim().is_empty() || command.len() > HEARTBEAT_COMMAND_BYTES_MAX {
        return Err(FieldError::new(
            "check.command",
            format!(
                "check.command must be a program (a path, or a name in the node's PATH) of 1 to {HEARTBEAT_COMMAND_BYTES_MAX} bytes, got {}",
                echo(command)
            ),
        ));
    }
    if args.len() > HEARTBEAT_ARGS_MAX {
        return Err(FieldError::new(
            "check.args",
            format!(
                "check.args may hold at most {HEARTBEAT_ARGS_MAX} arguments, got {}",
                args.len()
            ),
        ));
    }
    if let Some(i) = args.iter().position(|a| a.len() > HEARTBEAT_ARG_BYTES_MAX) {
        return Err(FieldError::new(
            format!("check.args[{i}]"),
            format!("an argument may be at most {HEARTBEAT_ARG_BYTES_MAX} bytes"),
        ));
    }
    Ok(())
}

/// One heartbeat as the engine keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Heartbeat {
    pub id: HeartbeatId,
    pub agent: AgentId,
    pub spec: HeartbeatSpec,
    /// The last state recorded as durable (none: nothing observed yet).
    pub state: Option<String>,
    /// A pause was announced (`heartbeat_emission_paused`) and no transition was recorded
    /// since. Whether emission is paused *now* also needs the cap met now
    /// (`Engine::heartbeat_paused_now`): the runs may have drained since with the state back
    /// where it was, and nothing records that.
    pub emission_paused: bool,
    pub created_at_ms: u64,
    /// When the state last changed (none: never).
    pub changed_at_ms: Option<u64>,
    /// Transitions recorded so far (the baseline not counted). The wakeup of transition n has
    /// task key `heartbeat:<id>:<n>`, so each transition is its own run and never coalesces
    /// with another's: what `HEARTBEAT_MAX_PENDING_ENQUEUED` bounds.
    pub transitions: u64,
}

/// An agent's heartbeats, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heartbeats {
    by_id: BTreeMap<HeartbeatId, Heartbeat>,
}

impl Heartbeats {
    pub fn get(&self, id: &HeartbeatId) -> Option<&Heartbeat> {
        self.by_id.get(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Heartbeat> {
        self.by_id.values()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub(crate) fn insert(&mut self, heartbeat: Heartbeat) {
        self.by_id.insert(heartbeat.id.clone(), heartbeat);
    }

    pub(crate) fn remove(&mut self, id: &HeartbeatId) {
        self.by_id.remove(id);
    }

    /// A recorded transition: the new prior state; emission goes on.
    pub(crate) fn changed(&mut self, id: &HeartbeatId, to: &str, at_ms: u64) {
        if let Some(heartbeat) = self.by_id.get_mut(id) {
            if heartbeat.state.is_some() {
                heartbeat.transitions += 1;
            }
            heartbeat.state = Some(to.to_string());
            heartbeat.emission_paused = false;
            heartbeat.changed_at_ms = Some(at_ms);
        }
    }

    pub(crate) fn paused(&mut self, id: &HeartbeatId) {
        if let Some(heartbeat) = self.by_id.get_mut(id) {
            heartbeat.emission_paused = true;
        }
    }

    /// An agent's heartbeats from a snapshot's list; refuses an id listed twice.
    pub(crate) fn restore(list: Vec<Heartbeat>) -> Result<Heartbeats, RestoreError> {
        let mut by_id = BTreeMap::new();
        for heartbeat in list {
            let id = heartbeat.id.clone();
            if by_id.insert(id.clone(), heartbeat).is_some() {
                return Err(RestoreError::new(
                    "heartbeats",
                    format!("heartbeat {id} is held twice"),
                ));
            }
        }
        Ok(Heartbeats { by_id })
    }
}

/// An observation as the prior-state token: canonical JSON (serde_json's, keys in order), or
/// `None` when it is larger than `HEARTBEAT_MAX_STATE_BYTES`.
pub fn state_token(observed: &serde_json::Value) -> Option<String> {
    let token = serde_json::to_string(observed).expect("a JSON value always serializes");
    (token.len() <= HEARTBEAT_MAX_STATE_BYTES).then_some(token)
}

/// The decisions about heartbeats (`Command::CreateHeartbeat`, `DeleteHeartbeat`,
/// `ObserveHeartbeat`).
impl Engine {
    /// The agent that has heartbeat `id` in `tenant`.
    pub fn heartbeat_owner(&self, tenant: &str, id: &HeartbeatId) -> Option<AgentId> {
        self.heartbeat_owners
            .get(&(tenant.to_string(), id.clone()))
            .copied()
    }

    /// Heartbeat `id` of `tenant`.
    pub fn heartbeat(&self, tenant: &str, id: &HeartbeatId) -> Option<&Heartbeat> {
        let agent = self.heartbeat_owner(tenant, id)?;
        self.agent_state(agent)?.heartbeats().get(id)
    }

    /// Whether heartbeat `id`'s emission is paused now: a pause was announced, no transition
    /// since, and `HEARTBEAT_MAX_PENDING_ENQUEUED` of its runs still wait. (A blocked transition
    /// with the flag set always belongs to the announced pause: no transition was recorded, so
    /// the heartbeat's runs only drained, and they are still at the cap; so one announcement per
    /// pause is right. Only what is shown needs the count.)
    pub fn heartbeat_paused_now(&self, tenant: &str, id: &HeartbeatId) -> bool {
        let Some(agent) = self.heartbeat_owner(tenant, id) else {
            return false;
        };
        let Some(state) = self.agent_state(agent) else {
            return false;
        };
        state.heartbeats().get(id).is_some_and(|h| h.emission_paused)
            && pending_enqueued(state, id) >= HEARTBEAT_MAX_PENDING_ENQUEUED
    }

    /// Every heartbeat of `tenant`, by id.
    pub fn tenant_heartbeats<'a>(&'a self, tenant: &'a str) -> impl Iterator<Item = &'a Heartbeat> {
        self.heartbeat_owners
            .range((tenant.to_string(), HeartbeatId(String::new()))..)
            .take_while(move |((t, _), _)| t == tenant)
            .filter_map(|((_, id), agent)| self.agent_state(*agent)?.heartbeats().get(id))
    }

    /// Every heartbeat of every tenant, as (tenant, heartbeat), in order.
    pub fn all_heartbeats(&self) -> impl Iterator<Item = (&str, &Heartbeat)> {
        self.heartbeat_owners
            .iter()
            .filter_map(|((tenant, id), agent)| {
                let heartbeat = self.agent_state(*agent)?.heartbeats().get(id)?;
                Some((tenant.as_str(), heartbeat))
            })
    }

    pub(super) fn decide_create_heartbeat(
        &self,
        draft: &mut Draft,
        tenant: &str,
        request: &HeartbeatRequest,
    ) -> Result<(), Refusal> {
        let (id, agent, spec) = request.validate().map_err(Refusal::InvalidField)?;
        let state = self.state(agent)?;
        if state.agent().tenant != tenant {
            return Err(Refusal::UnknownAgent(agent));
        }
        if state.agent().status == AgentStatus::Terminated {
            return Err(Refusal::AgentTerminated(agent));
        }
        if self.heartbeat_owner(tenant, &id).is_some() {
            return Err(Refusal::HeartbeatIdTaken(id.0));
        }
        if state.heartbeats().len() >= HEARTBEATS_PER_AGENT_MAX {
            return Err(Refusal::TooManyHeartbeats(agent));
        }
        draft.emit_global(
            tenant.to_string(),
            EventKind::HeartbeatCreated {
                agent,
                heartbeat: id,
                spec: Box::new(spec),
            },
        );
        Ok(())
    }

    pub(super) fn decide_delete_heartbeat(
        &self,
        draft: &mut Draft,
        tenant: &str,
        id: &HeartbeatId,
    ) -> Result<(), Refusal> {
        let agent = self
            .heartbeat_owner(tenant, id)
            .ok_or_else(|| Refusal::UnknownHeartbeat(id.0.clone()))?;
        draft.emit_global(
            tenant.to_string(),
            EventKind::HeartbeatDeleted {
                agent,
                heartbeat: id.clone(),
            },
        );
        Ok(())
    }

    /// An observation `to` of heartbeat `id`: nothing when it is the recorded state; else the
    /// transition and, for `on_change = wake`, the wakeup in the same decision; or, with
    /// `HEARTBEAT_MAX_PENDING_ENQUEUED` of its runs waiting, nothing recorded but the pause.
    pub(super) fn decide_observe_heartbeat(
        &self,
        draft: &mut Draft,
        tenant: &str,
        id: &HeartbeatId,
        to: &str,
    ) -> Result<(), Refusal> {
        let agent = self
            .heartbeat_owner(tenant, id)
            .ok_or_else(|| Refusal::UnknownHeartbeat(id.0.clone()))?;
        let state = self.state(agent)?;
        let heartbeat = state.heartbeats().get(id).expect("the owner holds it");
        if heartbeat.state.as_deref() == Some(to) {
            return Ok(());
        }
        let changed = EventKind::HeartbeatStateChanged {
            agent,
            heartbeat: id.clone(),
            from: heartbeat.state.clone(),
            to: to.to_string(),
        };
        let Some(from) = heartbeat.state.as_deref() else {
            // The first observation is the baseline: nothing changed that anyone was told of.
            draft.emit_global(tenant.to_string(), changed);
            return Ok(());
        };
        if heartbeat.spec.on_change == OnChange::Event {
            draft.emit_global(tenant.to_string(), changed);
            return Ok(());
        }
        let pending = pending_enqueued(state, id);
        if pending >= HEARTBEAT_MAX_PENDING_ENQUEUED {
            if !heartbeat.emission_paused {
                draft.emit_global(
                    tenant.to_string(),
                    EventKind::HeartbeatEmissionPaused {
                        agent,
                        heartbeat: id.clone(),
                        pending: pending as u64,
                    },
                );
            }
            return Ok(());
        }
        draft.emit_global(tenant.to_string(), changed);
        let mut coordinator = state.coordinator.clone();
        coordinator.wake(draft, &wakeup_of(id, heartbeat.transitions + 1, from, to));
        Ok(())
    }
}

/// The task key of transition `n` of heartbeat `id`'s wakeup.
pub fn task_key(id: &HeartbeatId, n: u64) -> String {
    format!("heartbeat:{id}:{n}")
}

/// Runs of the agent waiting to start that a transition of heartbeat `id` enqueued.
fn pending_enqueued(state: &AgentState, id: &HeartbeatId) -> usize {
    let prefix = format!("heartbeat:{id}:");
    state
        .queued_runs()
        .filter_map(|run| state.run(run))
        .filter(|run| {
            run.source == WakeupSource::Predicate
                && run
                    .task_key
                    .as_deref()
                    .is_some_and(|key| key.starts_with(&prefix))
        })
        .count()
}

/// The wakeup transition `n` enqueues: source `predicate`, `{heartbeat, from, to}` as its
/// payload (the states as the JSON they are), its own task key.
fn wakeup_of(id: &HeartbeatId, n: u64, from: &str, to: &str) -> WakeupRequest {
    let json = |token: &str| {
        serde_json::from_str::<serde_json::Value>(token).expect("a state token is JSON")
    };
    let mut request = WakeupRequest::new(
        WakeupSource::Predicate,
        format!("heartbeat {id}: the observed state changed"),
    )
    .requested_by(RequestedBy::Predicate);
    request.payload = serde_json::json!({ "heartbeat": id.0, "from": json(from), "to": json(to) });
    request.task_key = Some(task_key(id, n));
    request.trigger_detail = Some(serde_json::json!({ "heartbeat": id.0, "transition": n }));
    request
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::agent::AgentSpec;
    use crate::engine::event::Event;
    use crate::engine::tenant::TokenHash;
    use crate::engine::Command;

    /// An engine of tenant `t` with agent 1 (no timer) and its heartbeat `inbox`.
    fn engine_with(on_change: OnChange) -> Engine {
        let mut engine = Engine::new();
        for command in [
            Command::EnsureTenant {
                tenant: "t".into(),
                operator_token_hash: TokenHash::of("operator"),
            },
            Command::CreateAgent {
                tenant: "t".into(),
                spec: AgentSpec::with_interval("a", None),
                token_hash: TokenHash::of("a"),
            },
            Command::CreateHeartbeat {
                tenant: "t".into(),
                request: HeartbeatRequest {
                    on_change,
                    ..request(60)
                },
            },
        ] {
            step(&mut engine, &command).unwrap();
        }
        engine
    }

    fn step(engine: &mut Engine, command: &Command) -> Result<Vec<Event>, Refusal> {
        let events = engine.decide(command, 1_000)?.events;
        events.iter().for_each(|event| engine.apply(event));
        Ok(events)
    }

    /// Observes `unread` and answers the decided event types.
    fn observe(engine: &mut Engine, unread: u64) -> Vec<&'static str> {
        let state = state_token(&serde_json::json!({ "unread": unread })).unwrap();
        let command = Command::ObserveHeartbeat {
            tenant: "t".into(),
            heartbeat: HeartbeatId("inbox".into()),
            state,
        };
        let events = step(engine, &command).unwrap();
        events.iter().map(|e| e.kind.type_name()).collect()
    }

    #[test]
    fn only_a_transition_records_anything_and_it_enqueues_one_wakeup_with_it() {
        let mut engine = engine_with(OnChange::Wake);
        assert_eq!(
            observe(&mut engine, 0),
            ["heartbeat_state_changed"],
            "the baseline"
        );
        assert!(observe(&mut engine, 0).is_empty(), "unchanged: nothing");
        assert!(observe(&mut engine, 0).is_empty());
        assert_eq!(
            observe(&mut engine, 3),
            ["heartbeat_state_changed", "wakeup_queued", "run_started"]
        );
        assert!(observe(&mut engine, 3).is_empty(), "still 3: nothing again");
        let heartbeat = engine.heartbeat("t", &HeartbeatId("inbox".into())).unwrap();
        assert_eq!(heartbeat.state.as_deref(), Some(r#"{"unread":3}"#));
        assert_eq!(heartbeat.transitions, 1);
        let state = engine.agent_state(AgentId(1)).unwrap();
        let run = state.run(state.active_run().unwrap()).unwrap();
        assert_eq!(run.source, WakeupSource::Predicate);
        assert_eq!(run.task_key.as_deref(), Some("heartbeat:inbox:1"));
        assert_eq!(
            run.payload,
            serde_json::json!({"heartbeat": "inbox", "from": {"unread": 0}, "to": {"unread": 3}})
        );
    }

    #[test]
    fn an_event_only_heartbeat_wakes_nobody() {
        let mut engine = engine_with(OnChange::Event);
        observe(&mut engine, 0);
        assert_eq!(observe(&mut engine, 1), ["heartbeat_state_changed"]);
    }

    #[test]
    fn past_the_pending_cap_emission_pauses_once_and_the_transition_waits_to_be_seen_again() {
        let mut engine = engine_with(OnChange::Wake);
        observe(&mut engine, 0);
        // The first transition's run starts; the next ones wait behind it, each its own run.
        observe(&mut engine, 1);
        for unread in 2..2 + HEARTBEAT_MAX_PENDING_ENQUEUED as u64 {
            assert_eq!(
                observe(&mut engine, unread),
                ["heartbeat_state_changed", "wakeup_queued"]
            );
        }
        let at_cap = 2 + HEARTBEAT_MAX_PENDING_ENQUEUED as u64;
        assert_eq!(observe(&mut engine, at_cap), ["heartbeat_emission_paused"]);
        assert!(observe(&mut engine, at_cap).is_empty(), "said once");
        let heartbeat = engine.heartbeat("t", &HeartbeatId("inbox".into())).unwrap();
        assert!(heartbeat.emission_paused);
        assert!(engine.heartbeat_paused_now("t", &HeartbeatId("inbox".into())));
        assert_eq!(
            heartbeat.state.as_deref(),
            Some(format!(r#"{{"unread":{}}}"#, at_cap - 1).as_str()),
            "the unrecorded transition keeps the prior state"
        );
        // The running run ends; the next queued one starts, so one fewer waits.
        let run = engine
            .agent_state(AgentId(1))
            .unwrap()
            .active_run()
            .unwrap();
        step(
            &mut engine,
            &Command::FinishRun {
                run,
                end: crate::engine::run::RunEnd::new(
                    crate::engine::run::RunStatus::Succeeded,
                    "done",
                ),
            },
        )
        .unwrap();
        assert!(
            !engine.heartbeat_paused_now("t", &HeartbeatId("inbox".into())),
            "one run fewer waits: not paused now, though no event says so yet"
        );
        assert_eq!(
            observe(&mut engine, at_cap),
            ["heartbeat_state_changed", "wakeup_queued"],
            "seen again once the queue drained"
        );
        assert!(
            !engine
                .heartbeat("t", &HeartbeatId("inbox".into()))
                .unwrap()
                .emission_paused
        );
    }

    #[test]
    fn definitions_are_refused_with_their_reason() {
        let mut engine = engine_with(OnChange::Wake);
        let create = |id: &str, agent: u64| Command::CreateHeartbeat {
            tenant: "t".into(),
            request: HeartbeatRequest {
                id: id.into(),
                agent,
                ..request(60)
            },
        };
        assert_eq!(
            step(&mut engine, &create("inbox", 1)).unwrap_err(),
            Refusal::HeartbeatIdTaken("inbox".into())
        );
        assert_eq!(
            step(&mut engine, &create("other", 9)).unwrap_err(),
            Refusal::UnknownAgent(AgentId(9))
        );
        for n in 1..HEARTBEATS_PER_AGENT_MAX {
            step(&mut engine, &create(&format!("h{n}"), 1)).unwrap();
        }
        assert_eq!(
            step(&mut engine, &create("one-more", 1)).unwrap_err(),
            Refusal::TooManyHeartbeats(AgentId(1))
        );
        let other_tenant = Command::CreateHeartbeat {
            tenant: "u".into(),
            request: HeartbeatRequest {
                id: "x".into(),
                ..request(60)
            },
        };
        assert_eq!(
            step(&mut engine, &other_tenant).unwrap_err(),
            Refusal::UnknownAgent(AgentId(1)),
            "another tenant's agent is not found"
        );
        let delete = Command::DeleteHeartbeat {
            tenant: "t".into(),
            heartbeat: HeartbeatId("inbox".into()),
        };
        assert_eq!(step(&mut engine, &delete).unwrap().len(), 1);
        assert_eq!(
            step(&mut engine, &delete).unwrap_err(),
            Refusal::UnknownHeartbeat("inbox".into())
        );
        step(&mut engine, &create("inbox", 1)).unwrap();
    }

    #[test]
    fn an_image_rebuilds_the_heartbeat_index() {
        let mut engine = engine_with(OnChange::Wake);
        observe(&mut engine, 0);
        let restored = Engine::from_image(engine.image()).unwrap();
        assert_eq!(restored, engine);
        assert!(restored
            .heartbeat("t", &HeartbeatId("inbox".into()))
            .is_some());
    }

    fn request(interval_sec: u64) -> HeartbeatRequest {
        HeartbeatRequest {
            id: "inbox".into(),
            agent: 1,
            interval_sec,
            check: Check::Sample,
            on_change: OnChange::Wake,
            max_runtime_ms: None,
        }
    }

    #[test]
    fn a_short_interval_is_raised_to_the_minimum_not_refused() {
        let (_, _, spec) = request(1).validate().unwrap();
        assert_eq!(spec.interval_sec, HEARTBEAT_MIN_INTERVAL_SEC);
        let (_, _, spec) = request(HEARTBEAT_MIN_INTERVAL_SEC + 1).validate().unwrap();
        assert_eq!(spec.interval_sec, HEARTBEAT_MIN_INTERVAL_SEC + 1);
        assert_eq!(spec.max_runtime_ms, HEARTBEAT_MAX_RUNTIME_MS);
        let (_, _, spec) = request(HEARTBEAT_MAX_INTERVAL_SEC).validate().unwrap();
        assert_eq!(spec.interval_sec, HEARTBEAT_MAX_INTERVAL_SEC);
        for bad in [0, HEARTBEAT_MAX_INTERVAL_SEC + 1] {
            assert_eq!(request(bad).validate().unwrap_err().field, "interval_sec");
        }
    }

    #[test]
    fn each_field_is_named_when_wrong() {
        let mut r = request(60);
        r.id = "Inbox!".into();
        assert_eq!(r.validate().unwrap_err().field, "id");
        r.id = "a".repeat(HEARTBEAT_ID_CHARS_MAX);
        assert!(r.validate().is_ok());
        r.id = "a".repeat(HEARTBEAT_ID_CHARS_MAX + 1);
        assert_eq!(r.validate().unwrap_err().field, "id");
        let mut r = request(60);
        r.max_runtime_ms = Some(HEARTBEAT_MAX_RUNTIME_MS + 1);
        assert_eq!(r.validate().unwrap_err().field, "max_runtime_ms");
        r.max_runtime_ms = Some(HEARTBEAT_MIN_RUNTIME_MS - 1);
        assert_eq!(r.validate().unwrap_err().field, "max_runtime_ms");
        r.max_runtime_ms = Some(HEARTBEAT_MIN_RUNTIME_MS);
        assert!(r.validate().is_ok());
        let mut r = request(60);
        r.check = Check::Http {
            url: "ftp://x".into(),
            pointer: None,
            secret_headers: BTreeMap::new(),
        };
        assert_eq!(r.validate().unwrap_err().field, "check.url");
        r.check = Check::Http {
            url: format!("http://x/{}", "a".repeat(HEARTBEAT_URL_BYTES_MAX)),
            pointer: None,
            secret_headers: BTreeMap::new(),
        };
        assert_eq!(r.validate().unwrap_err().field, "check.url");
        r.check = Check::Http {
            url: "http://x/inbox".into(),
            pointer: Some("unread".into()),
            secret_headers: BTreeMap::new(),
        };
        assert_eq!(r.validate().unwrap_err().field, "check.pointer");
        r.check = Check::Http {
            url: "http://x/inbox".into(),
            pointer: Some("/unread".into()),
            secret_headers: BTreeMap::new(),
        };
        assert!(r.validate().is_ok());
        let headers = |pairs: &[(&str, &str)]| Check::Http {
            url: "http://x/inbox".into(),
            pointer: None,
            secret_headers: pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
        };
        r.check = headers(&[("authorization", "INBOX_AUTH"), ("x-api-key", "INBOX_KEY")]);
        assert!(r.validate().is_ok());
        r.check = headers(&[("Host", "H")]);
        assert_eq!(r.validate().unwrap_err().field, "check.secret_headers.Host");
        r.check = headers(&[("bad header", "H")]);
        assert_eq!(r.validate().unwrap_err().field, "check.secret_headers.bad header");
        r.check = headers(&[("authorization", "1NOT-A-VAR")]);
        assert_eq!(r.validate().unwrap_err().field, "check.secret_headers.authorization");
        let names: Vec<String> = (0..=HEARTBEAT_SECRET_HEADERS_MAX).map(|i| format!("x-h{i}")).collect();
        let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "V")).collect();
        r.check = headers(&many);
        assert_eq!(r.validate().unwrap_err().field, "check.secret_headers");
        r.check = headers(&many[..HEARTBEAT_SECRET_HEADERS_MAX]);
        assert!(r.validate().is_ok());
        let command = |command: &str, args: Vec<String>| Check::Command {
            command: command.into(),
            args,
        };
        r.check = command(" ", vec![]);
        assert_eq!(r.validate().unwrap_err().field, "check.command");
        r.check = command(&"c".repeat(HEARTBEAT_COMMAND_BYTES_MAX + 1), vec![]);
        assert_eq!(r.validate().unwrap_err().field, "check.command");
        r.check = command("mail-count", vec!["a".into(); HEARTBEAT_ARGS_MAX + 1]);
        assert_eq!(r.validate().unwrap_err().field, "check.args");
        r.check = command(
            "mail-count",
            vec!["a".into(), "b".repeat(HEARTBEAT_ARG_BYTES_MAX + 1)],
        );
        assert_eq!(r.validate().unwrap_err().field, "check.args[1]");
        r.check = command(
            "mail-count",
            vec!["a".repeat(HEARTBEAT_ARG_BYTES_MAX); HEARTBEAT_ARGS_MAX],
        );
        assert!(r.validate().is_ok());
    }

    #[test]
    fn a_state_token_is_canonical_and_bounded() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b":1,"a":2}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{ "a": 2, "b": 1 }"#).unwrap();
        assert_eq!(state_token(&a), state_token(&b));
        // The token of a string of n bytes is n + 2 (its quotes).
        let fits = serde_json::Value::String("x".repeat(HEARTBEAT_MAX_STATE_BYTES - 2));
        assert_eq!(state_token(&fits).unwrap().len(), HEARTBEAT_MAX_STATE_BYTES);
        let over = serde_json::Value::String("x".repeat(HEARTBEAT_MAX_STATE_BYTES - 1));
        assert_eq!(state_token(&over), None);
    }
}
