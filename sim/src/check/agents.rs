//! The agent loop's invariants (docs/invariants.md, 7, 12 and the loop's bounds), judged from
//! committed events, commit boundaries and what the simulated provider and tool server saw.
//! Every bound is the one the scenario itself wrote in the agent's spec, read back from
//! `agent_created`; nothing here imports a runtime constant.
//!
//! - `ghost_leaves_history_untouched`: a run that stopped `ghost` came from a timer or idle
//!   wakeup, succeeded, made no tool call and appends nothing to the history.
//! - `tool_calls_within_cap`: no run makes more tool calls than its agent's `tool_calls_max`,
//!   as the run reports it and as the tool server counted them.
//! - `model_calls_within_iterations`: no run makes more model calls than `max_iterations`, as
//!   the `usage_recorded` events count them and as the provider counted them.
//! - `budget_overshoot_bounded`: a model call is made only while its agent's spend on the local
//!   day is under its daily budget, so a day's spend passes the budget by at most one call.
//! - `rest_durable_with_run_end`: a run that succeeded asking for a rest of m minutes is followed
//!   in its own commit by the agent's `agent_paused` until `at_ms + m minutes` (unless a pause at
//!   least as long, or one until resumed, was already in force), and a run end's commit holds
//!   no other agent rest.

use std::collections::BTreeMap;

use vigil::engine::agent::AdapterSpec;
use vigil::engine::event::{Event, EventKind};
use vigil::engine::pause::PausedBy;
use vigil::engine::run::{RunStatus, StopReason};
use vigil::engine::wakeup::WakeupSource;

use super::documented::agents_local_day;
use super::{violation, Violation};

/// A minute of wall time, in ms.
const MINUTE_MS: u64 = 60_000;
/// A rest the agent asks for lasts 1 to 60 minutes (docs/agents.md: `pause_heartbeats`).
const REST_MINUTES: std::ops::RangeInclusive<u64> = 1..=60;

/// What an agent's spec bounds.
#[derive(Debug, Clone, Default)]
struct Limits {
    time_zone: String,
    max_iterations: Option<u32>,
    tool_calls_max: Option<u32>,
    budget_micro_usd: Option<u64>,
}

/// An agent's pause as the events describe it.
#[derive(Debug, Clone, Copy, Default)]
struct Pause {
    until_resumed: bool,
    until_ms: Option<u64>,
}

/// A run end with a report whose commit is still being recorded.
#[derive(Debug, Clone)]
struct OpenRunEnd {
    agent: u64,
    run: u64,
    /// The rest that must follow in this commit, as `until_ms`.
    expected_until_ms: Option<u64>,
    rested: bool,
}

/// What the oracle has seen of agent loops.
#[derive(Debug, Default)]
pub struct AgentsOracle {
    limits: BTreeMap<u64, Limits>,
    pauses: BTreeMap<u64, Pause>,
    sources: BTreeMap<u64, WakeupSource>,
    /// `usage_recorded` events per run.
    model_calls: BTreeMap<u64, u32>,
    /// Calls the provider served per run.
    served_model_calls: BTreeMap<u64, u32>,
    /// Calls the tool server served per run.
    served_tool_calls: BTreeMap<u64, u32>,
    /// Per agent: the latest local day spend counted on, and the spend on it (micro-dollars).
    spend: BTreeMap<u64, (i64, u64)>,
    open: Vec<OpenRunEnd>,
    /// Figures for reports: ghost runs, and runs that finished with a model's answer.
    pub ghost_runs: u64,
}

impl AgentsOracle {
    /// Checks one durable event (inside its commit; [`AgentsOracle::commit_end`] closes it).
    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. } => {
                let (max_iterations, tool_calls_max) = match &spec.adapter {
                    AdapterSpec::Llm(llm) => (Some(llm.max_iterations), Some(llm.tool_calls_max)),
                    // Only the agent loop has these bounds.
                    _ => (None, None),
                };
                self.limits.insert(
                    agent.0,
                    Limits {
                        time_zone: spec.time_zone.clone(),
                        max_iterations,
                        tool_calls_max,
                        budget_micro_usd: spec.limits.daily_budget_usd.map(|b| b.0),
                    },
                );
            }
            EventKind::WakeupQueued { run, source, .. } => {
                self.sources.insert(run.0, *source);
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
            EventKind::AgentPaused {
                agent,
                until_ms,
                by,
            } => {
                if *by == PausedBy::Agent {
                    self.rest_in_commit(agent.0, event.at_ms, *until_ms)?;
                }
                let pause = self.pauses.entry(agent.0).or_default();
                match until_ms {
                    None => pause.until_resumed = true,
                    Some(until) => pause.until_ms = Some(*until),
                }
            }
            EventKind::AgentResumed { agent } => {
                self.pauses.insert(agent.0, Pause::default());
            }
            EventKind::UsageRecorded {
                run, agent, usage, ..
            } => {
                let limits = self.limits.get(&agent.0).cloned().unwrap_or_default();
                let calls = self.model_calls.entry(run.0).or_default();
                *calls += 1;
                if let Some(max) = limits.max_iterations {
                    if *calls > max {
                        return violation(
                            "model_calls_within_iterations",
                            format!("run {run} of agent {agent} recorded its model call {calls}, over adapter.max_iterations = {max}"),
                        );
                    }
                }
                // Spend counts against the local day of the call; a day once counted is never
                // re-opened by a backward clock jump.
                let today = agents_local_day(event.at_ms, &limits.time_zone);
                let (day, before) = match self.spend.get(&agent.0) {
                    Some(&(counted, spent)) if counted >= today => (counted, spent),
                    _ => (today, 0),
                };
                if let Some(budget) = limits.budget_micro_usd {
                    if before >= budget {
                        return violation(
                            "budget_overshoot_bounded",
                            format!(
                                "run {run} of agent {agent} made a model call (cost {} µ$) although its spend on local day {day:?} was already {before} µ$, at or past its daily budget of {budget} µ$",
                                usage.cost_micro_usd
                            ),
                        );
                    }
                }
                self.spend
                    .insert(agent.0, (day, before.saturating_add(usage.cost_micro_usd)));
            }
            EventKind::RunFinished {
                run,
                agent,
                status,
                stop_reason,
                report,
                ..
            } => {
                let limits = self.limits.get(&agent.0).cloned().unwrap_or_default();
                if *stop_reason == Some(StopReason::Ghost) {
                    self.ghost_runs += 1;
                    let source = self.sources.get(&run.0).copied();
                    let appended = report.as_ref().map_or(0, |r| r.history_append.len());
                    let tools = report.as_ref().map_or(0, |r| r.tool_calls);
                    let routine = matches!(source, Some(WakeupSource::Timer | WakeupSource::Idle));
                    if appended > 0 || tools > 0 || *status != RunStatus::Succeeded || !routine {
                        return violation(
                            "ghost_leaves_history_untouched",
                            format!("ghost run {run} of agent {agent} ({source:?} wakeup, {status:?}) made {tools} tool calls and appends {appended} history messages; a ghost is a timer or idle run that succeeded with no tool call and appends nothing"),
                        );
                    }
                }
                if let (Some(report), Some(max)) = (report, limits.tool_calls_max) {
                    if report.tool_calls > u64::from(max) {
                        return violation(
                            "tool_calls_within_cap",
                            format!("run {run} of agent {agent} reports {} tool calls, over adapter.tool_calls_max = {max}", report.tool_calls),
                        );
                    }
                }
                if let Some(report) = report {
                    let asked = report
                        .pause_minutes
                        .filter(|_| *status == RunStatus::Succeeded);
                    if let Some(minutes) = asked {
                        if !REST_MINUTES.contains(&minutes) {
                            return violation(
                                "rest_durable_with_run_end",
                                format!("run {run} of agent {agent} rests {minutes} minutes, outside 1..=60"),
                            );
                        }
                    }
                    let until = asked.map(|m| event.at_ms.saturating_add(m * MINUTE_MS));
                    let pause = self.pauses.get(&agent.0).copied().unwrap_or_default();
                    let longer_in_force = pause.until_resumed
                        || pause.until_ms.zip(until).is_some_and(|(current, until)| {
                            current >= until && event.at_ms < current
                        });
                    self.open.push(OpenRunEnd {
                        agent: agent.0,
                        run: run.0,
                        expected_until_ms: until.filter(|_| !longer_in_force),
                        rested: false,
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// An agent's rest inside a commit: if the commit ends a run of that agent with a report,
    /// the rest must be the one that run asked for, and only once.
    fn rest_in_commit(
        &mut self,
        agent: u64,
        at_ms: u64,
        until_ms: Option<u64>,
    ) -> Result<(), Violation> {
        let Some(open) = self.open.iter_mut().rev().find(|o| o.agent == agent) else {
            // A rest asked through the API (`POST /v1/agents/{id}/pause_heartbeats`) commits
            // on its own, with no run end.
            return Ok(());
        };
        if open.rested || open.expected_until_ms.is_none() || open.expected_until_ms != until_ms {
            return violation(
                "rest_durable_with_run_end",
                format!(
                    "agent {agent} rests until {until_ms:?} (at wall {at_ms}) in the commit that ends its run {}, which asked for a rest until {:?} (already rested: {})",
                    open.run, open.expected_until_ms, open.rested
                ),
            );
        }
        open.rested = true;
        Ok(())
    }

    /// The commit being recorded ended: every rest its run ends asked for must be in it.
    pub fn commit_end(&mut self) -> Result<(), Violation> {
        for open in std::mem::take(&mut self.open) {
            if let (Some(until), false) = (open.expected_until_ms, open.rested) {
                return violation(
                    "rest_durable_with_run_end",
                    format!(
                        "run {} of agent {} succeeded asking for a rest until {until}, but its commit holds no agent_paused for it",
                        open.run, open.agent
                    ),
                );
            }
        }
        Ok(())
    }

    /// The provider served a model call of `run` of `agent`.
    pub fn model_call_served(
        &mut self,
        agent: Option<u64>,
        run: Option<u64>,
    ) -> Result<(), Violation> {
        let (Some(agent), Some(run)) = (agent, run) else {
            return Ok(());
        };
        let calls = self.served_model_calls.entry(run).or_default();
        *calls += 1;
        let max = self.limits.get(&agent).and_then(|l| l.max_iterations);
        if let Some(max) = max.filter(|max| *calls > *max) {
            return violation(
                "model_calls_within_iterations",
                format!("the provider served run {run} of agent {agent} its model call {calls}, over adapter.max_iterations = {max}"),
            );
        }
        Ok(())
    }

    /// The tool server served a tool call of `run` of `agent`.
    pub fn tool_call_served(&mut self, agent: u64, run: u64) -> Result<(), Violation> {
        let calls = self.served_tool_calls.entry(run).or_default();
        *calls += 1;
        let max = self.limits.get(&agent).and_then(|l| l.tool_calls_max);
        if let Some(max) = max.filter(|max| *calls > *max) {
            return violation(
                "tool_calls_within_cap",
                format!("the tool server served run {run} of agent {agent} its tool call {calls}, over adapter.tool_calls_max = {max}"),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::daily_cap::LocalDay;
    use vigil::engine::history::{HistoryMessage, Role};
    use vigil::engine::llm_spec::LlmSpec;
    use vigil::engine::run::{RunId, RunReport};
    use vigil::engine::tenant::TokenHash;
    use vigil::engine::usage::{MicroUsd, Usage};
    use vigil::engine::wakeup::WakeupId;

    use super::*;

    fn event(at_ms: u64, kind: EventKind) -> Event {
        Event {
            seq: 0,
            at_ms,
            tenant: "default".into(),
            kind,
        }
    }

    /// An `llm` agent: 3 model calls and 2 tool calls per run, a budget of 100 µ$ a day.
    fn created() -> Event {
        let mut llm = LlmSpec::new("http://10.77.0.2:8080", "sim-model-1");
        llm.max_iterations = 3;
        llm.tool_calls_max = 2;
        let mut spec = AgentSpec::with_interval("a", Some(60_000));
        spec.adapter = AdapterSpec::Llm(llm.into());
        spec.limits.daily_budget_usd = Some(MicroUsd(100));
        event(
            0,
            EventKind::AgentCreated {
                agent: AgentId(1),
                name: "a".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::of("a"),
                first_fire_at_ms: Some(60_000),
            },
        )
    }

    fn queued(run: u64, source: WakeupSource) -> Event {
        event(
            0,
            EventKind::WakeupQueued {
                requested_by: None,
                trigger_detail: None,
                wakeup: WakeupId(run),
                agent: AgentId(1),
                source,
                reason: String::new(),
                payload: serde_json::Value::Null,
                task_key: None,
                idempotency_key: None,
                run: RunId(run),
            },
        )
    }

    fn finished(run: u64, at_ms: u64, stop: StopReason, report: RunReport) -> Event {
        event(
            at_ms,
            EventKind::RunFinished {
                run: RunId(run),
                agent: AgentId(1),
                status: RunStatus::Succeeded,
                detail: String::new(),
                cause: None,
                stop_reason: Some(stop),
                report: Some(Box::new(report)),
                error_class: None,
            },
        )
    }

    fn usage(run: u64, at_ms: u64, call: u64, cost: u64) -> Event {
        event(
            at_ms,
            EventKind::UsageRecorded {
                run: RunId(run),
                agent: AgentId(1),
                call,
                usage: Usage {
                    llm_calls: 1,
                    cost_micro_usd: cost,
                    ..Usage::default()
                },
                day: LocalDay(agents_local_day(at_ms, "UTC") as i32),
            },
        )
    }

    fn rested(at_ms: u64, until_ms: u64) -> Event {
        event(
            at_ms,
            EventKind::AgentPaused {
                agent: AgentId(1),
                until_ms: Some(until_ms),
                by: PausedBy::Agent,
            },
        )
    }

    fn oracle() -> AgentsOracle {
        let mut oracle = AgentsOracle::default();
        oracle.committed(&created()).unwrap();
        oracle
    }

    #[test]
    fn a_ghost_run_that_appends_history_is_caught() {
        let mut oracle = oracle();
        oracle.committed(&queued(1, WakeupSource::Timer)).unwrap();
        let clean = RunReport {
            answer_excerpt: Some("[IDLE]".into()),
            ..RunReport::default()
        };
        oracle
            .committed(&finished(1, 10, StopReason::Ghost, clean.clone()))
            .unwrap();
        oracle.commit_end().unwrap();
        oracle.committed(&queued(2, WakeupSource::Timer)).unwrap();
        let polluting = RunReport {
            history_append: vec![
                HistoryMessage::new(Role::User, "wake"),
                HistoryMessage::new(Role::Assistant, "[IDLE]"),
            ],
            ..clean.clone()
        };
        let err = oracle
            .committed(&finished(2, 20, StopReason::Ghost, polluting))
            .unwrap_err();
        assert_eq!(err.invariant, "ghost_leaves_history_untouched");
        // An on-demand run is never a ghost.
        let mut oracle = self::oracle();
        oracle
            .committed(&queued(3, WakeupSource::OnDemand))
            .unwrap();
        let err = oracle
            .committed(&finished(3, 30, StopReason::Ghost, clean))
            .unwrap_err();
        assert_eq!(err.invariant, "ghost_leaves_history_untouched");
    }

    #[test]
    fn tool_calls_over_the_cap_are_caught_in_the_report_and_at_the_tool_server() {
        let mut oracle = oracle();
        oracle
            .committed(&queued(1, WakeupSource::OnDemand))
            .unwrap();
        let report = |tool_calls| RunReport {
            tool_calls,
            ..RunReport::default()
        };
        oracle
            .committed(&finished(1, 10, StopReason::ToolCap, report(2)))
            .unwrap();
        oracle.commit_end().unwrap();
        let err = oracle
            .committed(&finished(2, 20, StopReason::ToolCap, report(3)))
            .unwrap_err();
        assert_eq!(err.invariant, "tool_calls_within_cap");
        let mut oracle = self::oracle();
        oracle.tool_call_served(1, 7).unwrap();
        oracle.tool_call_served(1, 7).unwrap();
        oracle.tool_call_served(1, 8).unwrap();
        assert_eq!(
            oracle.tool_call_served(1, 7).unwrap_err().invariant,
            "tool_calls_within_cap"
        );
    }

    #[test]
    fn model_calls_past_max_iterations_are_caught_in_usage_and_at_the_provider() {
        let mut oracle = oracle();
        for call in 1..=3 {
            oracle.committed(&usage(1, 10 + call, call, 1)).unwrap();
        }
        let err = oracle.committed(&usage(1, 20, 4, 1)).unwrap_err();
        assert_eq!(err.invariant, "model_calls_within_iterations");
        let mut oracle = self::oracle();
        for _ in 0..3 {
            oracle.model_call_served(Some(1), Some(5)).unwrap();
        }
        oracle.model_call_served(None, None).unwrap();
        let err = oracle.model_call_served(Some(1), Some(5)).unwrap_err();
        assert_eq!(err.invariant, "model_calls_within_iterations");
    }

    #[test]
    fn a_call_made_once_the_budget_is_spent_is_caught_but_one_crossing_call_is_fine() {
        let day_ms = 86_400_000;
        let mut oracle = oracle();
        oracle.committed(&usage(1, 10 * day_ms, 1, 60)).unwrap();
        // Crosses the budget of 100: allowed, it was made at 60.
        oracle.committed(&usage(1, 10 * day_ms + 1, 2, 70)).unwrap();
        let err = oracle
            .committed(&usage(2, 10 * day_ms + 2, 1, 1))
            .unwrap_err();
        assert_eq!(err.invariant, "budget_overshoot_bounded");
        // The next local day starts from nothing; a backward jump does not reopen the old one.
        let mut oracle = self::oracle();
        oracle.committed(&usage(1, 10 * day_ms, 1, 130)).unwrap();
        oracle.committed(&usage(2, 11 * day_ms, 1, 90)).unwrap();
        oracle.committed(&usage(3, 10 * day_ms + 5, 1, 10)).unwrap();
        let err = oracle
            .committed(&usage(4, 10 * day_ms + 6, 1, 5))
            .unwrap_err();
        assert_eq!(err.invariant, "budget_overshoot_bounded");
    }

    fn resting(minutes: u64) -> RunReport {
        RunReport {
            pause_minutes: Some(minutes),
            answer_excerpt: Some("resting".into()),
            tool_calls: 1,
            ..RunReport::default()
        }
    }

    #[test]
    fn a_rest_missing_from_its_run_ends_commit_is_caught() {
        let mut oracle = oracle();
        oracle
            .committed(&finished(1, 1_000, StopReason::PauseHeartbeats, resting(5)))
            .unwrap();
        oracle
            .committed(&rested(1_000, 1_000 + 5 * MINUTE_MS))
            .unwrap();
        oracle.commit_end().unwrap();
        // The rest of the next run is missing from its commit.
        oracle
            .committed(&finished(
                2,
                2_000_000,
                StopReason::PauseHeartbeats,
                resting(3),
            ))
            .unwrap();
        assert_eq!(
            oracle.commit_end().unwrap_err().invariant,
            "rest_durable_with_run_end"
        );
    }

    #[test]
    fn a_wrong_or_unasked_rest_in_a_run_ends_commit_is_caught_and_a_longer_pause_needs_none() {
        let mut oracle = oracle();
        oracle
            .committed(&finished(1, 1_000, StopReason::PauseHeartbeats, resting(5)))
            .unwrap();
        let err = oracle
            .committed(&rested(1_000, 1_000 + 6 * MINUTE_MS))
            .unwrap_err();
        assert_eq!(err.invariant, "rest_durable_with_run_end");
        let mut oracle = self::oracle();
        let plain = RunReport {
            answer_excerpt: Some("done".into()),
            ..RunReport::default()
        };
        oracle
            .committed(&finished(1, 1_000, StopReason::EndTurn, plain))
            .unwrap();
        let err = oracle
            .committed(&rested(1_000, 1_000 + 2 * MINUTE_MS))
            .unwrap_err();
        assert_eq!(err.invariant, "rest_durable_with_run_end");
        // A rest through the API, in a commit of its own, is fine.
        let mut oracle = self::oracle();
        oracle
            .committed(&rested(1_000, 1_000 + 30 * MINUTE_MS))
            .unwrap();
        // A 30-minute pause is in force: a 5-minute rest adds nothing and needs no event.
        oracle
            .committed(&finished(1, 2_000, StopReason::PauseHeartbeats, resting(5)))
            .unwrap();
        oracle.commit_end().unwrap();
    }
}
