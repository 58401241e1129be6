//! One seed's trace, reduced as soon as the seed ends to what the report needs: each agent's
//! [`DayCounts`] per simulated day, the first breach of each expectation, and (for the first
//! seed) the runs and spans of the timelines. The trace itself is dropped after this, so a run
//! of many seeds holds only these small figures. Everything here is counted from the trace's
//! committed runtime events (the oracle's own view), never from a second model of the fleet.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use vigil::engine::event::EventKind;
use vigil::engine::run::StopReason;
use vigil::engine::wakeup::{RefusalReason, WakeupSource};
use vigil_world::trace::{TraceEvent, TraceRecord};

use super::config::{parse_local_time, Limits, DAY_MS, WEEK_DAYS};
use super::world::FleetPlan;
use crate::fleet_report::{DayCounts, RunMark, Span};

/// Millionths of a dollar per dollar.
const MICRO_USD_PER_USD: f64 = 1_000_000.0;
const MINUTE_MS: u64 = 60_000;

/// Which figure an expectation bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    InvocationsPerDay,
    CostPerDay,
    OfflineMinutes,
    NoCapHitBefore,
    BreakerOpeningsPerWeek,
    WakeupsPerDay,
}

impl Key {
    pub const ALL: [Key; 6] = [
        Key::InvocationsPerDay,
        Key::CostPerDay,
        Key::OfflineMinutes,
        Key::NoCapHitBefore,
        Key::BreakerOpeningsPerWeek,
        Key::WakeupsPerDay,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Key::InvocationsPerDay => "max_invocations_per_day",
            Key::CostPerDay => "max_cost_per_day_usd",
            Key::OfflineMinutes => "max_offline_minutes",
            Key::NoCapHitBefore => "no_cap_hit_before",
            Key::BreakerOpeningsPerWeek => "max_breaker_openings_per_week",
            Key::WakeupsPerDay => "max_wakeups_per_day",
        }
    }

    /// The limit in the unit the reducer counts in (micro-dollars, ms, minute of the day), and
    /// the value as written.
    fn of(self, limits: &Limits) -> Option<(u64, String)> {
        match self {
            Key::InvocationsPerDay => limits.max_invocations_per_day.map(|v| (v, v.to_string())),
            Key::CostPerDay => limits
                .max_cost_per_day_usd
                .map(|v| ((v * MICRO_USD_PER_USD).round() as u64, v.to_string())),
            Key::OfflineMinutes => limits
                .max_offline_minutes
                .map(|v| (v * MINUTE_MS, v.to_string())),
            Key::NoCapHitBefore => limits.no_cap_hit_before.as_ref().map(|t| {
                (
                    u64::from(parse_local_time(t).expect("checked at parse")),
                    format!("{t:?}"),
                )
            }),
            Key::BreakerOpeningsPerWeek => limits
                .max_breaker_openings_per_week
                .map(|v| (v, v.to_string())),
            Key::WakeupsPerDay => limits.max_wakeups_per_day.map(|v| (v, v.to_string())),
        }
    }
}

/// One expectation to judge: a key, its limit, and the agents (plan indexes) it binds.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub key: Key,
    pub limit: u64,
    /// `max_invocations_per_day = 48`.
    pub text: String,
    /// `fleet` (the `[expect]` value, for every agent without its own) or the agent's name.
    pub scope: String,
    pub agents: Vec<usize>,
}

/// The checks of `plan`'s `[expect]` section, fleet-wide ones first, in key order.
pub fn checks(plan: &FleetPlan) -> Vec<Check> {
    let mut checks = Vec::new();
    for key in Key::ALL {
        if let Some((limit, written)) = key.of(&plan.expect.fleet) {
            let agents = (0..plan.agents.len())
                .filter(|i| {
                    plan.expect
                        .agents
                        .get(&plan.agents[*i].shown)
                        .is_none_or(|own| key.of(own).is_none())
                })
                .collect();
            checks.push(Check {
                key,
                limit,
                text: format!("{} = {written}", key.name()),
                scope: "fleet".into(),
                agents,
            });
        }
    }
    for (name, limits) in &plan.expect.agents {
        let index = plan
            .agents
            .iter()
            .position(|a| &a.shown == name)
            .expect("checked at parse");
        for key in Key::ALL {
            if let Some((limit, written)) = key.of(limits) {
                checks.push(Check {
                    key,
                    limit,
                    text: format!("{} = {written}", key.name()),
                    scope: name.clone(),
                    agents: vec![index],
                });
            }
        }
    }
    checks
}

/// Where a check first broke in one seed: the agent, the instant, the day (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossing {
    pub agent: usize,
    pub at_ms: u64,
    pub day: u32,
    /// For `no_cap_hit_before`: the local minute of the refusal.
    pub minute: Option<u32>,
}

/// What one seed leaves behind.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedSummary {
    pub seed: u64,
    /// Per agent (plan order), per day.
    pub agents: Vec<Vec<DayCounts>>,
    /// Per check, its first crossing.
    pub crossings: Vec<Option<Crossing>>,
    /// The oracle's verdict: (virtual instant, invariant, detail).
    pub violation: Option<(u64, String, String)>,
    /// The timelines, when asked for (the first seed).
    pub runs: Vec<Vec<RunMark>>,
    pub spans: Vec<Vec<Span>>,
}

/// The runtime's own word for a value (its serde name).
pub fn word<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// The minute of the local day of wall instant `wall_ms` in `time_zone`.
pub fn local_minute(wall_ms: u64, time_zone: &str) -> u32 {
    let Ok(tz) = jiff::tz::TimeZone::get(time_zone) else {
        return 0;
    };
    let Ok(at) = jiff::Timestamp::from_millisecond(wall_ms as i64) else {
        return 0;
    };
    let zoned = at.to_zoned(tz);
    zoned.hour() as u32 * 60 + zoned.minute() as u32
}

/// One seed's trace reduced as it is written: the records are fed one at a time
/// ([`Reducer::observe`]) and never kept, so a seed's memory follows its fleet, not its trace.
pub struct Reducer {
    plan: Arc<FleetPlan>,
    checks: Arc<[Check]>,
    /// Instants count from the start of day 1 (a local midnight), this far into the trace.
    lead_ms: u64,
    /// For each agent, the checks binding it.
    checks_of: Vec<Vec<usize>>,
    days: u32,
    end_ms: u64,
    by_name: BTreeMap<String, usize>,
    by_id: BTreeMap<u64, usize>,
    counts: Vec<Vec<DayCounts>>,
    crossings: Vec<Option<Crossing>>,
    sources: BTreeMap<u64, WakeupSource>,
    started: BTreeMap<u64, u64>,
    offline_since: BTreeMap<usize, u64>,
    breaker_since: BTreeMap<usize, u64>,
    paused: BTreeMap<usize, (u64, Option<u64>)>,
    /// Breaker openings per agent per week.
    weekly_openings: BTreeMap<(usize, u32), u64>,
    timelines: bool,
    runs: Vec<Vec<RunMark>>,
    spans: Vec<Vec<Span>>,
}

impl Reducer {
    fn day(&self, t_ms: u64) -> u32 {
        ((t_ms / DAY_MS) as u32).min(self.days - 1)
    }

    fn cross(&mut self, agent: usize, key: Key, value: u64, at_ms: u64, minute: Option<u32>) {
        for &c in &self.checks_of[agent] {
            let check = &self.checks[c];
            if check.key != key || self.crossings[c].is_some() {
                continue;
            }
            let broken = match key {
                Key::NoCapHitBefore => value < check.limit,
                _ => value > check.limit,
            };
            if broken {
                self.crossings[c] = Some(Crossing {
                    agent,
                    at_ms,
                    day: self.day(at_ms),
                    minute,
                });
            }
        }
    }

    fn span(&mut self, agent: usize, from_ms: u64, to_ms: u64, kind: &str) {
        if self.timelines && to_ms > from_ms {
            self.spans[agent].push(Span {
                from_ms,
                to_ms,
                kind: kind.into(),
            });
        }
    }

    /// Adds the offline stretch `[from, to)` to the days it covers.
    fn offline(&mut self, agent: usize, from_ms: u64, to_ms: u64) {
        let mut at = from_ms;
        while at < to_ms {
            let day = self.day(at);
            let day_end = if day + 1 == self.days {
                to_ms
            } else {
                (u64::from(day) + 1) * DAY_MS
            };
            let until = to_ms.min(day_end);
            let before = self.counts[agent][day as usize].offline_ms;
            let after = before + (until - at);
            self.counts[agent][day as usize].offline_ms = after;
            // The instant the day's offline time passed a limit.
            for &c in &self.checks_of[agent].clone() {
                let check = &self.checks[c];
                if check.key == Key::OfflineMinutes
                    && self.crossings[c].is_none()
                    && after > check.limit
                {
                    let at_ms = at + check.limit.saturating_sub(before);
                    self.crossings[c] = Some(Crossing {
                        agent,
                        at_ms,
                        day,
                        minute: None,
                    });
                }
            }
            at = until;
        }
        self.span(agent, from_ms, to_ms, "offline");
    }

    fn record(&mut self, t_ms: u64, record: &TraceRecord) {
        let TraceEvent::Committed { event } = &record.event else {
            return;
        };
        if let EventKind::AgentCreated { agent, name, .. } = &event.kind {
            if let Some(index) = self.by_name.get(name.as_str()) {
                self.by_id.insert(agent.0, *index);
            }
            return;
        }
        let Some(agent) = event
            .kind
            .agent()
            .and_then(|a| self.by_id.get(&a.0).copied())
        else {
            return;
        };
        let day = self.day(t_ms) as usize;
        match &event.kind {
            EventKind::WakeupQueued { run, source, .. } => {
                self.sources.insert(run.0, *source);
                self.wakeup(agent, day, *source, t_ms);
            }
            EventKind::WakeupCoalesced { source, .. } => self.wakeup(agent, day, *source, t_ms),
            EventKind::WakeupRefused {
                source, refusal, ..
            } => {
                self.wakeup(agent, day, *source, t_ms);
                let counts = &mut self.counts[agent][day];
                *counts.refusals_by_reason.entry(word(refusal)).or_insert(0) += 1;
                if *refusal == RefusalReason::DailyCap {
                    counts.cap_hits += 1;
                    let minute = local_minute(event.at_ms, &self.plan.agents[agent].time_zone);
                    counts.first_cap_hit_minute = Some(
                        counts
                            .first_cap_hit_minute
                            .map_or(minute, |m| m.min(minute)),
                    );
                    self.cross(
                        agent,
                        Key::NoCapHitBefore,
                        u64::from(minute),
                        t_ms,
                        Some(minute),
                    );
                }
            }
            EventKind::RunRequeued {
                run,
                retry_of,
                coalesced: false,
                ..
            } => {
                if let Some(source) = self.sources.get(&retry_of.0).copied() {
                    self.sources.insert(run.0, source);
                }
            }
            EventKind::RunStarted { run, .. } => {
                self.started.insert(run.0, t_ms);
            }
            EventKind::RunFinished {
                run,
                status,
                stop_reason,
                ..
            } => {
                let stop = match stop_reason {
                    Some(reason) => word(reason),
                    None => word(status),
                };
                let counts = &mut self.counts[agent][day];
                counts.runs += 1;
                counts.ghost_runs += u64::from(*stop_reason == Some(StopReason::Ghost));
                *counts.runs_by_stop_reason.entry(stop.clone()).or_insert(0) += 1;
                let source = self.sources.remove(&run.0);
                let started = self.started.remove(&run.0);
                if self.timelines {
                    self.runs[agent].push(RunMark {
                        started_ms: started.unwrap_or(t_ms),
                        finished_ms: t_ms,
                        source: source.map_or_else(|| "unknown".into(), |s| word(&s)),
                        stop,
                    });
                }
            }
            EventKind::UsageRecorded { usage, .. } => {
                let counts = &mut self.counts[agent][day];
                counts.llm_invocations += 1;
                counts.input_tokens += usage.input_tokens;
                counts.cached_input_tokens += usage.cached_input_tokens;
                counts.output_tokens += usage.output_tokens;
                counts.cost_micro_usd += usage.cost_micro_usd;
                let (calls, cost) = (counts.llm_invocations, counts.cost_micro_usd);
                self.cross(agent, Key::InvocationsPerDay, calls, t_ms, None);
                self.cross(agent, Key::CostPerDay, cost, t_ms, None);
            }
            EventKind::BreakerOpened { .. } => {
                self.counts[agent][day].breaker_openings += 1;
                let week = day as u32 / WEEK_DAYS;
                let openings = self.weekly_openings.entry((agent, week)).or_insert(0);
                *openings += 1;
                let openings = *openings;
                self.cross(agent, Key::BreakerOpeningsPerWeek, openings, t_ms, None);
                self.breaker_since.entry(agent).or_insert(t_ms);
            }
            EventKind::BreakerClosed { .. }
            | EventKind::BreakerHalfOpened { .. }
            | EventKind::BreakerReset { .. } => {
                if let Some(from) = self.breaker_since.remove(&agent) {
                    self.span(agent, from, t_ms, "breaker_open");
                }
            }
            EventKind::AgentPaused { until_ms, .. } => {
                self.counts[agent][day].pauses += 1;
                // A timed pause ends by itself: its end in virtual time, from the node's wall
                // clock at the decision.
                let ends = until_ms.map(|until| t_ms + until.saturating_sub(event.at_ms));
                if let Some((from, old_end)) = self.paused.remove(&agent) {
                    self.span(agent, from, old_end.unwrap_or(t_ms).min(t_ms), "paused");
                }
                self.paused.insert(agent, (t_ms, ends));
            }
            EventKind::AgentResumed { .. } => {
                if let Some((from, ends)) = self.paused.remove(&agent) {
                    self.span(agent, from, ends.unwrap_or(t_ms).min(t_ms), "paused");
                }
            }
            EventKind::AgentOffline { .. } => {
                self.offline_since.entry(agent).or_insert(t_ms);
            }
            EventKind::AgentOnline { .. } => {
                if let Some(from) = self.offline_since.remove(&agent) {
                    self.offline(agent, from, t_ms);
                }
            }
            _ => {}
        }
    }

    fn wakeup(&mut self, agent: usize, day: usize, source: WakeupSource, t_ms: u64) {
        let counts = &mut self.counts[agent][day];
        *counts.wakeups_by_source.entry(word(&source)).or_insert(0) += 1;
        let total = counts.wakeups_by_source.values().sum();
        self.cross(agent, Key::WakeupsPerDay, total, t_ms, None);
    }

    /// Closes what is still open at the end of the run.
    fn finish(&mut self) {
        let end = self.end_ms;
        for (agent, from) in std::mem::take(&mut self.offline_since) {
            self.offline(agent, from, end);
        }
        for (agent, from) in std::mem::take(&mut self.breaker_since) {
            self.span(agent, from, end, "breaker_open");
        }
        for (agent, (from, ends)) in std::mem::take(&mut self.paused) {
            self.span(agent, from, ends.unwrap_or(end).min(end), "paused");
        }
    }
}

impl Reducer {
    /// A reducer of one seed whose day 1 starts `lead_ms` into its trace; `timelines` keeps
    /// its runs and spans too.
    pub fn new(plan: Arc<FleetPlan>, checks: Arc<[Check]>, lead_ms: u64, timelines: bool) -> Self {
        let agents = plan.agents.len();
        let days = plan.days.max(1);
        let mut checks_of = vec![Vec::new(); agents];
        for (c, check) in checks.iter().enumerate() {
            for &agent in &check.agents {
                checks_of[agent].push(c);
            }
        }
        Reducer {
            checks_of,
            days,
            end_ms: plan.virtual_ms(),
            by_name: plan
                .agents
                .iter()
                .enumerate()
                .map(|(i, a)| (a.name.clone(), i))
                .collect(),
            by_id: BTreeMap::new(),
            counts: vec![vec![DayCounts::default(); days as usize]; agents],
            crossings: vec![None; checks.len()],
            sources: BTreeMap::new(),
            started: BTreeMap::new(),
            offline_since: BTreeMap::new(),
            breaker_since: BTreeMap::new(),
            paused: BTreeMap::new(),
            weekly_openings: BTreeMap::new(),
            timelines,
            runs: vec![Vec::new(); if timelines { agents } else { 0 }],
            spans: vec![Vec::new(); if timelines { agents } else { 0 }],
            plan,
            checks,
            lead_ms,
        }
    }

    /// Takes the next record of the trace.
    pub fn observe(&mut self, record: &TraceRecord) {
        self.record(record.t_ms.saturating_sub(self.lead_ms), record);
    }

    /// The seed's summary, once its trace has ended (`violation`: the first broken invariant,
    /// at its instant in the trace).
    pub fn summary(mut self, seed: u64, violation: Option<(u64, String, String)>) -> SeedSummary {
        self.finish();
        for spans in &mut self.spans {
            spans.sort_by(|a, b| (a.from_ms, &a.kind).cmp(&(b.from_ms, &b.kind)));
        }
        let lead_ms = self.lead_ms;
        SeedSummary {
            seed,
            agents: self.counts,
            crossings: self.crossings,
            violation: violation.map(|(t_ms, invariant, detail)| {
                (t_ms.saturating_sub(lead_ms), invariant, detail)
            }),
            runs: self.runs,
            spans: self.spans,
        }
    }
}

/// Reduces one seed's whole trace at once (the streaming [`Reducer`] fed every record).
pub fn reduce(
    plan: &FleetPlan,
    checks: &[Check],
    seed: u64,
    records: &[TraceRecord],
    lead_ms: u64,
    violation: Option<(u64, String, String)>,
    timelines: bool,
) -> SeedSummary {
    let mut reducer = Reducer::new(Arc::new(plan.clone()), checks.into(), lead_ms, timelines);
    for record in records {
        reducer.observe(record);
    }
    reducer.summary(seed, violation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet_sim::config::{Expect, FaultProfile, Simulation};
    use crate::fleet_sim::world::PlannedAgent;
    use vigil::engine::agent::AgentId;
    use vigil::engine::event::Event;
    use vigil::engine::tenant::TokenHash;
    use vigil::engine::wakeup::WakeupId;

    const HOUR_MS: u64 = 60 * MINUTE_MS;
    /// 2026-01-15 19:00 UTC: 14:00 in New York.
    const TWO_PM_NEW_YORK_MS: u64 = 1_768_503_600_000;

    fn plan(limits: Limits) -> FleetPlan {
        FleetPlan {
            file: "f.toml".into(),
            agents: vec![PlannedAgent {
                shown: "scout".into(),
                name: "scout".into(),
                spec: serde_json::json!({ "name": "scout" }),
                time_zone: "America/New_York".into(),
                daily_cap: Some(5),
                pulse_interval_ms: None,
            }],
            simulation: Simulation::default(),
            expect: Expect {
                fleet: limits,
                agents: BTreeMap::new(),
            },
            faults: FaultProfile::named("none").unwrap(),
            days: 2,
            warnings: Vec::new(),
        }
    }

    fn record(t_ms: u64, at_ms: u64, kind: EventKind) -> TraceRecord {
        TraceRecord {
            t_ms,
            node: "vigil-1",
            event: TraceEvent::Committed {
                event: Event {
                    seq: t_ms,
                    at_ms,
                    tenant: "default".into(),
                    kind,
                },
            },
        }
    }

    fn trace() -> Vec<TraceRecord> {
        let agent = AgentId(7);
        vec![
            record(
                1_000,
                0,
                EventKind::AgentCreated {
                    agent,
                    name: "scout".into(),
                    spec: Box::new(
                        serde_json::from_value(serde_json::json!({ "name": "scout" })).unwrap(),
                    ),
                    token_hash: TokenHash::of("a"),
                    first_fire_at_ms: None,
                },
            ),
            // Offline from 23:00 on day 1 to 01:00 on day 2: an hour on each day.
            record(
                DAY_MS - HOUR_MS,
                0,
                EventKind::AgentOffline {
                    agent,
                    silent_ms: 30_000,
                    report: Default::default(),
                },
            ),
            record(
                DAY_MS + HOUR_MS,
                0,
                EventKind::AgentOnline {
                    agent,
                    report: Default::default(),
                },
            ),
            record(
                DAY_MS + 2 * HOUR_MS,
                TWO_PM_NEW_YORK_MS,
                EventKind::WakeupRefused {
                    wakeup: WakeupId(1),
                    agent,
                    source: WakeupSource::Timer,
                    reason: String::new(),
                    task_key: None,
                    idempotency_key: None,
                    requested_by: None,
                    trigger_detail: None,
                    refusal: RefusalReason::DailyCap,
                },
            ),
        ]
    }

    /// Offline time splits at the day's end, and a limit is crossed at the very instant the
    /// day's total passed it; a daily-cap refusal is placed at the agent's local minute.
    #[test]
    fn offline_spells_split_by_day_and_cap_hits_by_local_minute() {
        let plan = plan(Limits {
            max_offline_minutes: Some(30),
            no_cap_hit_before: Some("18:00".into()),
            max_wakeups_per_day: Some(1),
            ..Limits::default()
        });
        let checks = checks(&plan);
        let keys: Vec<Key> = checks.iter().map(|c| c.key).collect();
        assert_eq!(
            keys,
            [Key::OfflineMinutes, Key::NoCapHitBefore, Key::WakeupsPerDay]
        );
        let summary = reduce(&plan, &checks, 5, &trace(), 0, None, true);
        let days = &summary.agents[0];
        assert_eq!(days[0].offline_ms, HOUR_MS);
        assert_eq!(days[1].offline_ms, HOUR_MS);
        assert_eq!(days[1].cap_hits, 1);
        assert_eq!(days[1].first_cap_hit_minute, Some(14 * 60));
        assert_eq!(days[1].refusals_by_reason["daily_cap"], 1);
        assert_eq!(
            summary.crossings[0],
            Some(Crossing {
                agent: 0,
                at_ms: DAY_MS - HOUR_MS + 30 * MINUTE_MS,
                day: 0,
                minute: None,
            })
        );
        assert_eq!(
            summary.crossings[1],
            Some(Crossing {
                agent: 0,
                at_ms: DAY_MS + 2 * HOUR_MS,
                day: 1,
                minute: Some(14 * 60),
            })
        );
        // One wakeup a day is within a limit of one.
        assert_eq!(summary.crossings[2], None);
        assert_eq!(
            summary.spans[0],
            vec![crate::fleet_report::Span {
                from_ms: DAY_MS - HOUR_MS,
                to_ms: DAY_MS + HOUR_MS,
                kind: "offline".into(),
            }]
        );
        let report = crate::fleet_sim::report::build(&plan, None, &checks, vec![summary]);
        assert!(!report.passed());
        let breach = report.expectations[1].breach.as_ref().unwrap();
        assert_eq!(breach.day, 2);
        assert!(
            breach.actual.contains("at 14:00 local time on day 2"),
            "{}",
            breach.actual
        );
        assert_eq!(
            breach.replay,
            "vigil-sim fleet f.toml --seed 5 --days 2 --faults none --trace vigil-sim-fleet-5.jsonl"
        );
        assert!(report.expectations[2].passed);
        assert_eq!(report.agents[0].days["offline_minutes"][1].median, 60.0);
    }

    /// A cap hit after the limit's local time breaks nothing.
    #[test]
    fn a_cap_hit_after_the_limit_keeps_no_cap_hit_before() {
        let plan = plan(Limits {
            no_cap_hit_before: Some("13:59".into()),
            ..Limits::default()
        });
        let checks = checks(&plan);
        let summary = reduce(&plan, &checks, 1, &trace(), 0, None, false);
        assert_eq!(summary.crossings, vec![None]);
        assert!(summary.runs.is_empty());
    }

    /// Instants count from day 1: the same trace moved later by a lead, reduced with that
    /// lead, gives the same summary; a violation's instant moves with it.
    #[test]
    fn a_lead_before_day_one_is_taken_off_every_instant() {
        let plan = plan(Limits {
            max_offline_minutes: Some(30),
            ..Limits::default()
        });
        let checks = checks(&plan);
        let lead_ms = 7 * HOUR_MS + 13;
        let violation = |t_ms| Some((t_ms, "x".to_string(), "y".to_string()));
        let plain = reduce(&plan, &checks, 5, &trace(), 0, violation(HOUR_MS), true);
        let led: Vec<TraceRecord> = trace()
            .into_iter()
            .map(|mut r| {
                r.t_ms += lead_ms;
                r
            })
            .collect();
        let moved = reduce(&plan, &checks, 5, &led, lead_ms, violation(lead_ms + HOUR_MS), true);
        assert_eq!(plain, moved);
        // Without the lead taken off, the same records fall on other days.
        let unled = reduce(&plan, &checks, 5, &led, 0, violation(HOUR_MS), true);
        assert_ne!(plain.agents, unled.agents);
    }

    /// Day 1 starts at the next midnight of the first agent's time zone.
    #[test]
    fn day_one_starts_at_the_next_local_midnight() {
        let plan = plan(Limits::default());
        assert_eq!(plan.reference_time_zone(), "America/New_York");
        // 14:00 in New York: ten hours to midnight.
        assert_eq!(plan.lead_ms(TWO_PM_NEW_YORK_MS), 10 * HOUR_MS);
        // At a midnight: none.
        let midnight = TWO_PM_NEW_YORK_MS + 10 * HOUR_MS;
        assert_eq!(plan.lead_ms(midnight), 0);
        assert_eq!(plan.lead_ms(midnight + 1), DAY_MS - 1);
    }
}
