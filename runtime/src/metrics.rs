//! The node's metrics, for Prometheus (`GET /metrics`, docs/operations.md "Metrics").
//!
//! Kept with `prometheus-client` (the Prometheus project's Rust client), never hand-formatted.
//! Two kinds:
//! - **counters and histograms** fed as things happen: committed events (wakeups by source and
//!   outcome, refusals by reason, runs by status and stop reason, breaker openings), pulses,
//!   and every group commit's duration and size. Counted from the committed log, so a decision
//!   that was refused or never written counts nothing.
//! - **gauges read at scrape time** from the engine: agents by status and liveness, breakers by
//!   state, paused agents, agents at their daily cap, runs running and queued, the writer's
//!   queue, each tenant's spend today and budget left. One pass over the agents per scrape.
//!
//! Nothing here feeds a decision: the metrics read the clock through the node's seam and
//! change no behaviour, in the node or in the simulator.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::engine::agent::{Agent, AgentStatus};
use crate::engine::breaker::BreakerState;
use crate::engine::daily_cap::LocalDay;
use crate::engine::event::{Event, EventKind};
use crate::engine::tenant::TENANT_BUDGET_TIME_ZONE;
use crate::engine::Engine;

/// Content type of the answer: OpenMetrics text, which Prometheus scrapes natively.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Buckets of a group commit's duration, in seconds: 0.25 ms to about 4 s, doubling.
const COMMIT_SECONDS_BUCKETS: (f64, f64, u16) = (0.000_25, 2.0, 15);

/// Buckets of a wait for the engine's lock, in seconds: 10 µs to about 0.3 s, doubling.
const LOCK_WAIT_SECONDS_BUCKETS: (f64, f64, u16) = (0.000_01, 2.0, 16);
/// Buckets of a group commit's size (commands, events): 1 to 4,096, doubling.
const BATCH_SIZE_BUCKETS: (f64, f64, u16) = (1.0, 2.0, 13);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WakeupLabels {
    source: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    status: &'static str,
    stop_reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabels {
    trigger: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    status: &'static str,
    liveness: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlertLabels {
    sink: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabels {
    sink: String,
}

/// Every metric of one node.
pub struct Metrics {
    /// Encoding walks it; the families inside are shared handles.
    registry: Registry,
    wakeups: Family<WakeupLabels, Counter>,
    refusals: Family<ReasonLabels, Counter>,
    runs_finished: Family<RunLabels, Counter>,
    breaker_openings: Family<TriggerLabels, Counter>,
    events: Counter,
    pulses: Counter,
    commit_seconds: Histogram,
    engine_lock_wait_seconds: Histogram,
    commit_commands: Histogram,
    commit_events: Histogram,
    agents: Family<AgentLabels, Gauge>,
    breakers: Family<StateLabels, Gauge>,
    agents_paused: Gauge,
    agents_at_daily_cap: Gauge,
    runs: Family<StateLabels, Gauge>,
    writer_queue: Gauge,
    spend_today: Family<TenantLabels, Gauge<f64, AtomicU64>>,
    budget_left: Family<TenantLabels, Gauge<f64, AtomicU64>>,
    alerts_delivered: Family<AlertLabels, Counter>,
    alerts_skipped: Family<AlertLabels, Counter>,
    alert_attempts_failed: Family<SinkLabels, Counter>,
    snapshots: Counter,
    snapshot_seq: Gauge,
    heartbeat_evaluations: Family<StatusLabels, Counter>,
    heartbeat_transitions: Counter,
    /// One scrape at a time: the gauges are cleared and refilled by each.
    scrape: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn histogram((start, factor, count): (f64, f64, u16)) -> Histogram {
    Histogram::new(exponential_buckets(start, factor, count))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("vigil"),
            wakeups: Family::default(),
            refusals: Family::default(),
            runs_finished: Family::default(),
            breaker_openings: Family::default(),
            events: Counter::default(),
            pulses: Counter::default(),
            commit_seconds: histogram(COMMIT_SECONDS_BUCKETS),
            engine_lock_wait_seconds: histogram(LOCK_WAIT_SECONDS_BUCKETS),
            commit_commands: histogram(BATCH_SIZE_BUCKETS),
            commit_events: histogram(BATCH_SIZE_BUCKETS),
            agents: Family::default(),
            breakers: Family::default(),
            agents_paused: Gauge::default(),
            agents_at_daily_cap: Gauge::default(),
            runs: Family::default(),
            writer_queue: Gauge::default(),
            spend_today: Family::default(),
            budget_left: Family::default(),
            alerts_delivered: Family::default(),
            alerts_skipped: Family::default(),
            alert_attempts_failed: Family::default(),
            snapshots: Counter::default(),
            snapshot_seq: Gauge::default(),
            heartbeat_evaluations: Family::default(),
            heartbeat_transitions: Counter::default(),
            scrape: Mutex::new(()),
        };
        metrics.register();
        metrics
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "wakeups",
            "Wakeups committed, by source and outcome (queued, coalesced, refused)",
            self.wakeups.clone(),
        );
        r.register(
            "wakeup_refusals",
            "Wakeups refused, by reason",
            self.refusals.clone(),
        );
        r.register(
            "runs_finished",
            "Runs ended, by status and stop reason",
            self.runs_finished.clone(),
        );
        r.register(
            "breaker_openings",
            "Circuit breaker openings, by the failure kind that opened it",
            self.breaker_openings.clone(),
        );
        r.register("events", "Events committed to the log", self.events.clone());
        r.register(
            "pulses",
            "Pulses taken (each agent of a batch pulse counts once)",
            self.pulses.clone(),
        );
        r.register(
            "commit_seconds",
            "Duration of a group commit: the durable write of one batch",
            self.commit_seconds.clone(),
        );
        r.register(
            "engine_lock_wait_seconds",
            "Waits for the engine's lock: each acquisition that found it held, for how long (ADR 0030)",
            self.engine_lock_wait_seconds.clone(),
        );
        r.register(
            "commit_commands",
            "Commands decided in one group commit",
            self.commit_commands.clone(),
        );
        r.register(
            "commit_events",
            "Events written by one group commit",
            self.commit_events.clone(),
        );
        r.register(
            "agents",
            "Agents, by status and liveness",
            self.agents.clone(),
        );
        r.register(
            "breakers",
            "Agents' circuit breakers, by state",
            self.breakers.clone(),
        );
        r.register(
            "agents_paused",
            "Agents with a pause in force (operator or their own)",
            self.agents_paused.clone(),
        );
        r.register(
            "agents_at_daily_cap",
            "Agents that have used their daily cap for their local today",
            self.agents_at_daily_cap.clone(),
        );
        r.register("runs", "Runs by state (running, queued)", self.runs.clone());
        r.register(
            "heartbeat_evaluations",
            "Predicate heartbeat ticks, by status (ok, timeout, error, skipped)",
            self.heartbeat_evaluations.clone(),
        );
        r.register(
            "heartbeat_transitions",
            "Predicate heartbeat transitions committed (a baseline not counted)",
            self.heartbeat_transitions.clone(),
        );
        r.register(
            "writer_queue",
            "Commands waiting for the writer",
            self.writer_queue.clone(),
        );
        r.register(
            "tenant_spend_today_usd",
            "Each tenant's model spend on today's UTC day, in dollars",
            self.spend_today.clone(),
        );
        r.register(
            "tenant_budget_left_usd",
            "What each tenant with a daily budget may still spend today, in dollars",
            self.budget_left.clone(),
        );
        r.register(
            "alerts_delivered",
            "Alerts a sink answered with a 2xx, by sink and kind (docs/operations.md, Alerts)",
            self.alerts_delivered.clone(),
        );
        r.register(
            "alerts_skipped",
            "Alerts not sent because their event was older than the sink's catch-up bound",
            self.alerts_skipped.clone(),
        );
        r.register(
            "alert_attempts_failed",
            "Alert deliveries that failed and will be retried (no 2xx, or no answer)",
            self.alert_attempts_failed.clone(),
        );
        r.register(
            "snapshots",
            "Snapshots of the engine written (docs/operations.md, Snapshots)",
            self.snapshots.clone(),
        );
        r.register(
            "snapshot_seq",
            "The log position of the newest snapshot this process wrote (0: none yet)",
            self.snapshot_seq.clone(),
        );
    }

    /// A snapshot at log position `seq` became current.
    pub fn snapshot_written(&self, seq: u64) {
        self.snapshots.inc();
        self.snapshot_seq
            .set(i64::try_from(seq).unwrap_or(i64::MAX));
    }

    /// An alert of `kind` reached sink `sink` (a 2xx).
    pub fn alert_delivered(&self, sink: &str, kind: &'static str) {
        let labels = AlertLabels { sink: sink.to_string(), kind };
        self.alerts_delivered.get_or_create(&labels).inc();
    }

    /// An alert of `kind` for sink `sink` was skipped by the catch-up bound.
    pub fn alert_skipped(&self, sink: &str, kind: &'static str) {
        let labels = AlertLabels { sink: sink.to_string(), kind };
        self.alerts_skipped.get_or_create(&labels).inc();
    }

    /// One delivery attempt to sink `sink` failed.
    pub fn alert_attempt_failed(&self, sink: &str) {
        let labels = SinkLabels { sink: sink.to_string() };
        self.alert_attempts_failed.get_or_create(&labels).inc();
    }

    /// Counts what a durable batch committed.
    pub fn committed(&self, events: &[Event]) {
        self.events.inc_by(events.len() as u64);
        for event in events {
            self.count(&event.kind);
        }
    }

    fn count(&self, kind: &EventKind) {
        match kind {
            EventKind::WakeupQueued { source, .. } => self.wakeup(source.as_str(), "queued"),
            EventKind::WakeupCoalesced { source, .. } => self.wakeup(source.as_str(), "coalesced"),
            EventKind::WakeupRefused {
                source, refusal, ..
            } => {
                self.wakeup(source.as_str(), "refused");
                self.refusals
                    .get_or_create(&ReasonLabels {
                        reason: wire_name(refusal),
                    })
                    .inc();
            }
            EventKind::RunFinished {
                status,
                stop_reason,
                ..
            } => {
                let labels = RunLabels {
                    status: status.as_str(),
                    stop_reason: stop_reason.map_or("none", |reason| reason.as_str()),
                };
                self.runs_finished.get_or_create(&labels).inc();
            }
            EventKind::HeartbeatStateChanged { from: Some(_), .. } => {
                self.heartbeat_transitions.inc();
            }
            EventKind::BreakerOpened { trigger, .. } => {
                self.breaker_openings
                    .get_or_create(&TriggerLabels {
                        trigger: wire_name(trigger),
                    })
                    .inc();
            }
            _ => {}
        }
    }

    fn wakeup(&self, source: &'static str, outcome: &'static str) {
        self.wakeups
            .get_or_create(&WakeupLabels { source, outcome })
            .inc();
    }

    /// Counts one predicate heartbeat tick that ended with `status`.
    pub fn heartbeat_evaluated(&self, status: &'static str) {
        self.heartbeat_evaluations
            .get_or_create(&StatusLabels { status })
            .inc();
    }

    /// Counts `agents` pulses taken.
    pub fn pulsed(&self, agents: usize) {
        self.pulses.inc_by(agents as u64);
    }

    /// Records one wait for the engine's lock, of `seconds`.
    pub fn engine_lock_waited(&self, seconds: f64) {
        self.engine_lock_wait_seconds.observe(seconds);
    }

    /// Records one group commit: `commands` decided, `events` written in `seconds`.
    pub fn group_commit(&self, commands: usize, events: usize, seconds: f64) {
        self.commit_commands.observe(commands as f64);
        self.commit_events.observe(events as f64);
        if events > 0 {
            self.commit_seconds.observe(seconds);
        }
    }

    /// The whole text a scrape answers: the scrape-time gauges read from `engine` at `now_ms`,
    /// with `writer_waiting` commands queued, then every metric encoded.
    pub fn scrape(&self, engine: &Engine, now_ms: u64, writer_waiting: usize) -> String {
        let _one_at_a_time = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.read_engine(engine, now_ms);
        self.writer_queue.set(writer_waiting as i64);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    fn read_engine(&self, engine: &Engine, now_ms: u64) {
        self.agents.clear();
        self.breakers.clear();
        self.runs.clear();
        self.spend_today.clear();
        self.budget_left.clear();
        let (mut paused, mut at_cap, mut running, mut queued) = (0, 0, 0, 0);
        for state in engine.agent_states() {
            let agent = state.agent();
            let labels = AgentLabels {
                status: status_name(agent),
                liveness: agent.liveness.status.as_str(),
            };
            self.agents.get_or_create(&labels).inc();
            self.breakers
                .get_or_create(&StateLabels {
                    state: breaker_name(&agent.breaker),
                })
                .inc();
            paused += i64::from(pause_in_force(agent, now_ms));
            at_cap += i64::from(at_daily_cap(agent, now_ms));
            running += i64::from(state.active_run().is_some());
            queued += state.queued_runs().count() as i64;
        }
        self.agents_paused.set(paused);
        self.agents_at_daily_cap.set(at_cap);
        for (state, count) in [("running", running), ("queued", queued)] {
            self.runs.get_or_create(&StateLabels { state }).set(count);
        }
        let utc_today = LocalDay::of(now_ms, TENANT_BUDGET_TIME_ZONE);
        for tenant in engine.tenants() {
            let labels = TenantLabels {
                tenant: tenant.name.clone(),
            };
            let spent = tenant.day_spend.on(tenant.day_spend.day_for(utc_today));
            self.spend_today
                .get_or_create(&labels)
                .set(spent.cost_micro_usd as f64 / 1e6);
            if let Some(left) = tenant.budget_left(now_ms) {
                self.budget_left
                    .get_or_create(&labels)
                    .set(left as f64 / 1e6);
            }
        }
    }
}

/// An agent's status as the API shows it, with the error state apart.
fn status_name(agent: &Agent) -> &'static str {
    if agent.error.is_some() {
        return "error";
    }
    match agent.status {
        AgentStatus::Active => "active",
        AgentStatus::Paused => "paused",
        AgentStatus::Terminated => "terminated",
    }
}

fn breaker_name(breaker: &BreakerState) -> &'static str {
    match breaker {
        BreakerState::Closed { .. } => "closed",
        BreakerState::Open { .. } => "open",
        BreakerState::HalfOpen { .. } => "half_open",
    }
}

/// Paused until resumed, or a timed pause not yet over.
fn pause_in_force(agent: &Agent, now_ms: u64) -> bool {
    agent.status == AgentStatus::Paused
        || agent
            .paused_until_ms
            .is_some_and(|until_ms| until_ms > now_ms)
}

/// Whether the agent has started its daily cap's runs on its local today (time zones are read
/// only for capped agents).
fn at_daily_cap(agent: &Agent, now_ms: u64) -> bool {
    let Some(cap) = agent.spec.limits.daily_cap else {
        return false;
    };
    let day = agent.day_count.day_for(now_ms, &agent.spec.time_zone);
    agent.day_count.started_on(day) >= cap
}

/// The serde (wire) name of a plain enum value.
fn wire_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".into(),
    }
}
