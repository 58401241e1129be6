//! Alerts (docs/operations.md "Alerts", ADR 0018): signed webhook notifications about a few
//! committed events, delivered at least once from the durable log.
//!
//! An alert is a *view of the log*, never a fact of its own: each sink reads the committed
//! events after its persisted cursor and derives its alerts from them with [`AlertRules`], a
//! pure function of the events and the sink's own small state (the local day each agent last
//! alerted a refusal on). So a crash between an event's commit and its delivery loses nothing
//! (the event is still after the cursor), and an alert's id (`<sink>:<seq>`) is the same on
//! every retry and every restart, which lets a receiver drop duplicates.
//!
//! The sinks come from the node file (`[[alerts]]`, [`AlertSinkSpec`]); `deliver.rs` runs one
//! task per sink.

mod deliver;

pub use deliver::{
    spawn_sinks, Alerting, ALERT_ANSWER_BYTES_MAX, ALERT_CURSOR_SAVE_EVENTS, ALERT_ID_HEADER,
    ALERT_PAGE_EVENTS, ALERT_POST_TIMEOUT_MS, ALERT_RETRY_FIRST_MS, ALERT_RETRY_MAX_MS,
};

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::engine::agent::AgentId;
use crate::engine::daily_cap::LocalDay;
use crate::engine::event::{Event, EventKind};
use crate::engine::run::RunStatus;
use crate::engine::wakeup::RefusalReason;

/// Most `[[alerts]]` sinks of one node (each is a task and a cursor).
pub const ALERT_SINKS_MAX: usize = 16;
/// Most characters of a sink's `name` (it is part of every alert id and of the cursor's key).
pub const ALERT_SINK_NAME_CHARS_MAX: usize = 64;
/// Most entries of a sink's `tenants` filter.
pub const ALERT_SINK_TENANTS_MAX: usize = 256;
/// Most characters of `secret_env` (an environment variable's name).
pub const ALERT_SECRET_ENV_CHARS_MAX: usize = 128;
/// The catch-up bound by default: an alert about an event older than this (by the node's wall
/// clock, when the alert is about to be sent) is skipped, so a node restarted after a long
/// outage, or a sink back after one, never floods its receiver with old news.
pub const ALERT_CATCH_UP_DEFAULT_S: u64 = 60 * 60;
/// Shortest catch-up bound a sink may set (`catch_up_s`).
pub const ALERT_CATCH_UP_MIN_S: u64 = 1;
/// Longest catch-up bound a sink may set (`catch_up_s`): a week.
pub const ALERT_CATCH_UP_MAX_S: u64 = 7 * 24 * 60 * 60;

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// `agent_offline`: the stale sweep found the agent silent.
    AgentOffline,
    /// `breaker_opened`: the agent's breaker opened.
    BreakerOpened,
    /// The first wakeup of an agent's local day refused for its daily cap.
    DailyCapReached,
    /// The first wakeup of an agent's local day refused for a spent budget (the agent's or its
    /// tenant's).
    BudgetReached,
    /// A run ended `failed` or `timed_out`.
    RunFailed,
}

impl AlertKind {
    pub const ALL: [AlertKind; 5] = [
        AlertKind::AgentOffline,
        AlertKind::BreakerOpened,
        AlertKind::DailyCapReached,
        AlertKind::BudgetReached,
        AlertKind::RunFailed,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::AgentOffline => "agent_offline",
            AlertKind::BreakerOpened => "breaker_opened",
            AlertKind::DailyCapReached => "daily_cap_reached",
            AlertKind::BudgetReached => "budget_reached",
            AlertKind::RunFailed => "run_failed",
        }
    }

    /// Whether the kind is alerted once per agent and local day (the refusals) rather than
    /// once per event.
    pub fn once_a_day(self) -> bool {
        matches!(self, AlertKind::DailyCapReached | AlertKind::BudgetReached)
    }
}

/// One `[[alerts]]` entry of the node file, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertSinkSpec {
    /// The sink's name: its cursor's key and the first part of its alert ids. Why a name and
    /// not the URL: a URL may carry a secret path (many chat webhooks do), and it may change
    /// while the sink stays the same.
    pub name: String,
    /// Where alerts are POSTed (`http://` or `https://`).
    pub url: String,
    /// The node's environment variable holding the HMAC key; the key itself is never stored.
    pub secret_env: String,
    /// Only these tenants' events; absent, every tenant's.
    #[serde(default)]
    pub tenants: Option<Vec<String>>,
    /// Only these kinds; absent, all five.
    #[serde(default)]
    pub kinds: Option<Vec<AlertKind>>,
    /// The catch-up bound in seconds ([`ALERT_CATCH_UP_DEFAULT_S`] when absent).
    #[serde(default)]
    pub catch_up_s: Option<u64>,
}

/// A checked sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertSink {
    pub name: String,
    pub url: String,
    pub secret_env: String,
    /// `None`: every tenant.
    pub tenants: Option<BTreeSet<String>>,
    pub kinds: BTreeSet<AlertKind>,
    pub catch_up_ms: u64,
}

/// Checks the `[[alerts]]` entries, naming the field of the first mistake.
pub fn validate_sinks(specs: &[AlertSinkSpec]) -> Result<Vec<AlertSink>, String> {
    if specs.len() > ALERT_SINKS_MAX {
        return Err(format!(
            "alerts has {} sinks; at most {ALERT_SINKS_MAX}",
            specs.len()
        ));
    }
    let mut names = BTreeSet::new();
    let mut sinks = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let sink = validate_sink(spec).map_err(|e| format!("alerts[{i}].{e}"))?;
        if !names.insert(sink.name.clone()) {
            return Err(format!("alerts[{i}].name: {:?} names two sinks", sink.name));
        }
        sinks.push(sink);
    }
    Ok(sinks)
}

fn validate_sink(spec: &AlertSinkSpec) -> Result<AlertSink, String> {
    let name_ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    if spec.name.is_empty()
        || spec.name.chars().count() > ALERT_SINK_NAME_CHARS_MAX
        || !spec.name.chars().all(name_ok)
    {
        return Err(format!(
            "name: {:?} must be 1 to {ALERT_SINK_NAME_CHARS_MAX} characters of a-z, 0-9, - and _",
            spec.name
        ));
    }
    crate::net::Endpoint::parse(&spec.url).map_err(|e| format!("url: {e}"))?;
    let env_ok = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if spec.secret_env.is_empty()
        || spec.secret_env.len() > ALERT_SECRET_ENV_CHARS_MAX
        || !spec.secret_env.chars().all(env_ok)
    {
        return Err(format!(
            "secret_env: must name an environment variable (1 to {ALERT_SECRET_ENV_CHARS_MAX} characters of A-Z, a-z, 0-9 and _)"
        ));
    }
    Ok(AlertSink {
        name: spec.name.clone(),
        url: spec.url.clone(),
        secret_env: spec.secret_env.clone(),
        tenants: tenants_filter(spec.tenants.as_deref())?,
        kinds: kinds_filter(spec.kinds.as_deref())?,
        catch_up_ms: catch_up_ms(spec.catch_up_s)?,
    })
}

fn tenants_filter(tenants: Option<&[String]>) -> Result<Option<BTreeSet<String>>, String> {
    let Some(tenants) = tenants else {
        return Ok(None);
    };
    if tenants.is_empty() {
        return Err(
            "tenants: an empty list would deliver nothing; leave it out for every tenant".into(),
        );
    }
    if tenants.len() > ALERT_SINK_TENANTS_MAX {
        return Err(format!(
            "tenants: {} entries; at most {ALERT_SINK_TENANTS_MAX}",
            tenants.len()
        ));
    }
    if let Some(blank) = tenants.iter().find(|t| t.trim().is_empty()) {
        return Err(format!("tenants: {blank:?} is not a tenant name"));
    }
    Ok(Some(tenants.iter().cloned().collect()))
}

fn kinds_filter(kinds: Option<&[AlertKind]>) -> Result<BTreeSet<AlertKind>, String> {
    match kinds {
        None => Ok(AlertKind::ALL.into_iter().collect()),
        Some([]) => {
            Err("kinds: an empty list would deliver nothing; leave it out for every kind".into())
        }
        Some(kinds) => Ok(kinds.iter().copied().collect()),
    }
}

fn catch_up_ms(catch_up_s: Option<u64>) -> Result<u64, String> {
    let seconds = catch_up_s.unwrap_or(ALERT_CATCH_UP_DEFAULT_S);
    if !(ALERT_CATCH_UP_MIN_S..=ALERT_CATCH_UP_MAX_S).contains(&seconds) {
        return Err(format!(
            "catch_up_s: {seconds} is outside {ALERT_CATCH_UP_MIN_S} to {ALERT_CATCH_UP_MAX_S}"
        ));
    }
    Ok(seconds * 1_000)
}

/// The kind of alert `event` may raise, before the sink's filters and the once-a-day rule.
/// `run_failed` covers `timed_out` too: a run that hung is a failure an operator wants to see;
/// a `cancelled` run was stopped on purpose (an operator, a pause) and raises nothing.
pub fn candidate(event: &Event) -> Option<(AlertKind, AgentId)> {
    match &event.kind {
        EventKind::AgentOffline { agent, .. } => Some((AlertKind::AgentOffline, *agent)),
        EventKind::BreakerOpened { agent, .. } => Some((AlertKind::BreakerOpened, *agent)),
        EventKind::RunFinished {
            agent,
            status: RunStatus::Failed | RunStatus::TimedOut,
            ..
        } => Some((AlertKind::RunFailed, *agent)),
        EventKind::WakeupRefused { agent, refusal, .. } => match refusal {
            RefusalReason::DailyCap => Some((AlertKind::DailyCapReached, *agent)),
            RefusalReason::Budget => Some((AlertKind::BudgetReached, *agent)),
            _ => None,
        },
        _ => None,
    }
}

/// What a sink's rules decided about one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    pub kind: AlertKind,
    pub agent: AgentId,
    /// For a once-a-day kind: the agent's local day it is raised on (to be remembered once the
    /// alert is dealt with).
    pub day: Option<LocalDay>,
}

/// One sink's derivation of alerts from the log: its filters, and the day each agent last raised
/// each once-a-day kind on. Bounded: at most two entries per agent.
#[derive(Debug, Clone)]
pub struct AlertRules {
    pub tenants: Option<BTreeSet<String>>,
    pub kinds: BTreeSet<AlertKind>,
    pub days: BTreeMap<(AlertKind, AgentId), LocalDay>,
}

impl AlertRules {
    pub fn new(sink: &AlertSink, days: BTreeMap<(AlertKind, AgentId), LocalDay>) -> Self {
        AlertRules {
            tenants: sink.tenants.clone(),
            kinds: sink.kinds.clone(),
            days,
        }
    }

    /// The alert `event` raises for this sink, if any. `time_zone` is the agent's (for the
    /// once-a-day kinds' local day). Changes nothing: [`AlertRules::dealt_with`] records it.
    pub fn raised(
        &self,
        event: &Event,
        time_zone: impl FnOnce(AgentId) -> String,
    ) -> Option<Raised> {
        let (kind, agent) = candidate(event)?;
        if !self.kinds.contains(&kind) {
            return None;
        }
        if self
            .tenants
            .as_ref()
            .is_some_and(|t| !t.contains(event.tenant.as_str()))
        {
            return None;
        }
        if !kind.once_a_day() {
            return Some(Raised {
                kind,
                agent,
                day: None,
            });
        }
        let day = LocalDay::of(event.at_ms, &time_zone(agent));
        // Why `>=`: a clock set back must not make an earlier day alert a second time.
        if self
            .days
            .get(&(kind, agent))
            .is_some_and(|last| *last >= day)
        {
            return None;
        }
        Some(Raised {
            kind,
            agent,
            day: Some(day),
        })
    }

    /// Remembers a once-a-day alert as dealt with (delivered or skipped).
    pub fn dealt_with(&mut self, raised: &Raised) {
        if let Some(day) = raised.day {
            self.days.insert((raised.kind, raised.agent), day);
        }
    }
}

/// An alert's id: the sink and the event's place in the log, the same on every attempt.
pub fn alert_id(sink: &str, seq: u64) -> String {
    format!("{sink}:{seq}")
}

/// The JSON an alert carries: who, what, when, and the few facts of its event an operator acts
/// on (never a run's output or a token's hash).
pub fn alert_body(sink: &str, event: &Event, raised: &Raised, agent_name: &str) -> Value {
    json!({
        "id": alert_id(sink, event.seq),
        "kind": raised.kind.as_str(),
        "sink": sink,
        "seq": event.seq,
        "at_ms": event.at_ms,
        "tenant": event.tenant.as_str(),
        "agent": {"id": raised.agent, "name": agent_name},
        "detail": detail(event),
    })
}

fn detail(event: &Event) -> Value {
    match &event.kind {
        EventKind::AgentOffline { silent_ms, .. } => json!({"silent_ms": silent_ms}),
        EventKind::BreakerOpened {
            trigger,
            until_ms,
            cooldown_ms,
            ..
        } => {
            json!({"trigger": trigger, "until_ms": until_ms, "cooldown_ms": cooldown_ms})
        }
        EventKind::RunFinished {
            run,
            status,
            detail,
            error_class,
            stop_reason,
            ..
        } => json!({
            "run": run, "status": status, "detail": detail,
            "error_class": error_class, "stop_reason": stop_reason,
        }),
        EventKind::WakeupRefused {
            wakeup,
            source,
            refusal,
            ..
        } => {
            json!({"wakeup": wakeup, "source": source, "refusal": refusal})
        }
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests;
