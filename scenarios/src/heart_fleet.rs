//! Scenario `heart_fleet`: the LocalKin Heart production fleet (the Heart paper, §7.1) on one
//! node for one simulated day. 75 `llm` agents, each with
//! - a Pulse chamber: 10-second pulses, sent as one batch (`POST /v1/pulses`) for the 75 agents
//!   by their host: the paper's fleet runs on a single machine (its §8, "single-machine
//!   assumption"), whose restarts bound its uptime;
//! - a Schedule chamber: a timer every 30 minutes, `daily_cap` 48 in the agent's time zone;
//! - an Idle chamber: a wakeup after 2 hours without user input (the paper's default); users
//!   write to some agents now and then;
//! - the breaker: 3 failures in a row open it, 15-minute cooldown doubling up to 2 hours (the
//!   paper's defaults);
//! - a model (the simulated provider) that answers `[IDLE]` to 78 % of runs (the paper's ghost
//!   rate), calls the agent's HTTP tools (an `ok` and a `flaky` one on the simulated tool server)
//!   in some of the others, and now and then asks for a rest.
//!
//! A third of the agents reach the provider by host name (madsim's DNS), a quarter speak the
//! Anthropic Messages shape. The provider has short spells of 503s, timeouts and rate limits, and
//! the node crashes or loses power about once a day. [`FleetFigures`] computes, from the trace,
//! the figures the paper reports beside its own.
//!
//! The sweep variant, `heart_fleet_2h`, is the same fleet for 2 hours (see tests/sim_agents.rs
//! for why).

use std::collections::BTreeMap;

use rand::Rng;
use vigil::engine::event::EventKind;
use vigil::engine::run::StopReason;
use vigil::engine::wakeup::{RefusalReason, WakeupSource};
use vigil_faults::plan::{FaultKind, LlmFault};
use vigil_faults::stream;
use vigil_world::provider::{
    base_url, host_base_url, Behaviour, ProviderScript, ID_MARKER_TEMPLATE, SIM_MODEL,
};
use vigil_world::recorder::Recorder;
use vigil_world::tool_server::{tool_url, ToolScript};
use vigil_world::trace::{TraceEvent, TraceRecord};
use vigil_world::workload::{Action, Step};

use crate::phases::{self, AgentWorld, Setup, SnapshotMix};
use crate::smoke::rate;

const SECOND_MS: u64 = 1_000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
const HOUR_MS: u64 = 60 * MINUTE_MS;
pub const DAY_MS: u64 = 24 * HOUR_MS;
/// The fleet and its hosts: one, the paper's single machine. (Until 2026-11-28 five hosts of 15
/// pulsed, a split the paper does not make; one batch of 75 instead of five of 15 makes a
/// simulated day about a fifth cheaper. Batches from several hosts at once are still sent by
/// `vigil-sim fleet`, whose hosts pulse for `AGENTS_PER_HOST_DEFAULT` agents each.)
pub const AGENTS: usize = 75;
const HOSTS: usize = 1;
/// The paper's chambers.
const PULSE_MS: u64 = 10 * SECOND_MS;
const SCHEDULE_MS: u64 = 30 * MINUTE_MS;
const DAILY_CAP: u32 = 48;
const IDLE_AFTER_MS: u64 = 2 * HOUR_MS;
/// The paper's ghost rate, as the provider's `[IDLE]` rate.
pub const IDLE_PERMILLE: u32 = 780;
/// The paper's figures.
pub const PAPER_GHOST_RATE: f64 = 0.78;
pub const PAPER_CALLS_PER_AGENT_DAY: f64 = 31.4;
pub const PAPER_BREAKER_PER_WEEK: (u32, u32) = (2, 5);
/// The quiet last stretch of a run (liveness is judged there).
pub const QUIET_MS: u64 = HOUR_MS;
/// The full day and the sweep's 2 hours, quiet phase included.
pub const DAY_SAFETY_MS: u64 = DAY_MS - QUIET_MS;
pub const SHORT_SAFETY_MS: u64 = 2 * HOUR_MS - QUIET_MS;
const TIME_ZONES: [&str; 4] = ["UTC", "America/New_York", "Asia/Shanghai", "Europe/Paris"];

/// The model's behaviour in the fleet.
pub fn provider_script() -> ProviderScript {
    ProviderScript {
        default: Behaviour {
            idle_permille: IDLE_PERMILLE,
            pause_permille: 50,
            pause_minutes: (5, 45),
            tool_permille: 400,
            tool_rounds: (1, 2),
            calls_per_round: (1, 2),
            answer_tokens: (40, 400),
            latency_ms: (0, 0),
            ..Behaviour::default()
        },
        by_name_prefix: Vec::new(),
    }
}

fn agent_spec(i: usize, rng: &mut impl Rng) -> serde_json::Value {
    let by_name = i.is_multiple_of(3);
    let api = if i % 4 == 1 { "anthropic" } else { "openai" };
    let tools = serde_json::json!([
        {
            "name": "scan_feed",
            "description": "Scans the agent's feed for anything new.",
            "parameters": { "type": "object", "properties": { "query": { "type": "string" } } },
            "url": tool_url("ok", by_name),
            "timeout_ms": 10_000,
        },
        {
            "name": "fetch_quote",
            "description": "Fetches a price from an upstream API that sometimes fails.",
            "parameters": { "type": "object", "properties": { "symbol": { "type": "string" } } },
            "url": tool_url("flaky", !by_name),
            "timeout_ms": 10_000,
        },
    ]);
    serde_json::json!({
        "name": format!("fleet-{i:02}"),
        "time_zone": TIME_ZONES[i % TIME_ZONES.len()],
        "heartbeat": { "interval_ms": SCHEDULE_MS, "idle_after_ms": IDLE_AFTER_MS },
        "limits": { "daily_cap": DAILY_CAP },
        "liveness": { "pulse_interval_ms": PULSE_MS },
        "breaker": { "failures_to_open": 3, "cooldown_ms": 15 * MINUTE_MS, "cooldown_ms_max": 2 * HOUR_MS },
        "adapter": {
            "type": "llm",
            "api": api,
            "base_url": if by_name { host_base_url() } else { base_url() },
            "model": SIM_MODEL,
            "request_timeout_ms": 30_000 + rng.gen_range(0..30_000),
            "prompts": {
                "system": format!("{ID_MARKER_TEMPLATE} You are {{{{ agent.name }}}}, one agent of a fleet kept alive by Vigil. If nothing notable happened, respond with [IDLE]."),
            },
            "tools": tools,
        },
    })
}

/// Runs the fleet for `seed` for a whole day (`safety_ms` = [`DAY_SAFETY_MS`]) or the sweep's
/// 2 hours ([`SHORT_SAFETY_MS`]).
pub async fn run(seed: u64, recorder: Recorder, safety_ms: u64) {
    let mut rng = stream(seed, "heart_fleet");
    let end_ms = safety_ms + QUIET_MS;
    let mut steps = Vec::new();
    let names: Vec<String> = (0..AGENTS).map(|i| format!("fleet-{i:02}")).collect();
    for i in 0..AGENTS {
        steps.push(Step {
            at_ms: rng.gen_range(0..2 * MINUTE_MS),
            action: Action::CreateAgent {
                spec: agent_spec(i, &mut rng),
            },
        });
    }
    // Users write to a few agents now and then (about one message per agent per 8 hours).
    let mut inputs = 0;
    for name in &names {
        for n in 0..rng.gen_range(0..=(end_ms / (8 * HOUR_MS)).max(1)) {
            inputs += 1;
            steps.push(Step {
                at_ms: rng.gen_range(5 * MINUTE_MS..end_ms),
                action: Action::Input {
                    agent: name.clone(),
                    text: format!("user message {n}"),
                },
            });
        }
    }
    // The host pulses for its agents every 10 s, with a little jitter.
    let mut batches = 0;
    for (host, agents) in names.chunks(AGENTS / HOSTS).enumerate() {
        let agents: std::sync::Arc<[String]> = agents.into();
        let mut at_ms = 3 * MINUTE_MS + host as u64 * 1_700 + rng.gen_range(0..PULSE_MS);
        while at_ms < end_ms {
            batches += 1;
            steps.push(Step {
                at_ms,
                action: Action::PulseBatch {
                    agents: agents.clone(),
                },
            });
            at_ms += PULSE_MS - 500 + rng.gen_range(0..=1_000);
        }
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: AgentWorld {
            provider: provider_script(),
            tools: Some(ToolScript::default()),
            processes: None,
            alert_refuse_permille: None,
            state: None,
            snapshots: SnapshotMix::Rare,
        },
        pinned: Vec::new(),
        scenario: if safety_ms == DAY_SAFETY_MS {
            "heart_fleet"
        } else {
            "heart_fleet_2h"
        },
        seed,
        safety_ms,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 0.04, 2),
            rate(FaultKind::PowerCut, 0.04, 2),
            rate(FaultKind::ClockJump, 0.04, 2),
            rate(FaultKind::Llm(LlmFault::ServerError), 0.05, 2),
            rate(FaultKind::Llm(LlmFault::Timeout), 0.03, 1),
            rate(FaultKind::Llm(LlmFault::RateLimit), 0.03, 1),
        ],
        downtime_ms_max: 5 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 10 * MINUTE_MS,
        steps,
        probe_every_ms: 10 * MINUTE_MS,
        tail_every_ms: 30 * MINUTE_MS,
        sse_readers: 0,
        describe: format!("agents={AGENTS} pulse_batches={batches} inputs={inputs}"),
    };
    phases::run(setup, recorder).await;
}

/// The paper's figures as this run's trace has them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetFigures {
    pub agents: u64,
    pub simulated_ms: u64,
    /// Runs that started from the Schedule or Idle chamber, and how they ended.
    pub routine_runs_finished: u64,
    pub ghost_runs: u64,
    /// Runs whose model answered (any stop but an LLM error, cancellation, timeout or restart).
    pub routine_runs_answered: u64,
    /// `usage_recorded` events: model calls whose answer was used.
    pub model_calls: u64,
    /// Calls the provider served (failed ones included).
    pub calls_served: u64,
    pub breaker_openings: u64,
    pub daily_cap_refusals: u64,
    pub pulses_answered: u64,
    pub rests: u64,
    pub tool_calls_served: u64,
    pub calls_by_host_name: u64,
    pub calls_anthropic: u64,
}

impl FleetFigures {
    /// Counts the figures in `records`.
    pub fn from_trace(records: &[TraceRecord]) -> Self {
        let mut figures = FleetFigures::default();
        let mut sources: BTreeMap<u64, WakeupSource> = BTreeMap::new();
        for record in records {
            figures.simulated_ms = figures.simulated_ms.max(record.t_ms);
            match &record.event {
                TraceEvent::Committed { event } => match &event.kind {
                    EventKind::AgentCreated { .. } => figures.agents += 1,
                    EventKind::WakeupQueued { run, source, .. } => {
                        sources.insert(run.0, *source);
                    }
                    EventKind::RunRequeued {
                        run,
                        retry_of,
                        coalesced: false,
                        ..
                    } => {
                        if let Some(source) = sources.get(&retry_of.0).copied() {
                            sources.insert(run.0, source);
                        }
                    }
                    EventKind::RunFinished {
                        run, stop_reason, ..
                    } => {
                        let routine = matches!(
                            sources.get(&run.0),
                            Some(WakeupSource::Timer | WakeupSource::Idle)
                        );
                        if routine {
                            figures.routine_runs_finished += 1;
                            let answered = !matches!(
                                stop_reason,
                                None | Some(
                                    StopReason::LlmError
                                        | StopReason::Cancelled
                                        | StopReason::TimedOut
                                        | StopReason::ControlPlaneRestart
                                )
                            );
                            figures.routine_runs_answered += u64::from(answered);
                        }
                        if *stop_reason == Some(StopReason::Ghost) {
                            figures.ghost_runs += 1;
                        }
                    }
                    EventKind::UsageRecorded { .. } => figures.model_calls += 1,
                    EventKind::BreakerOpened { .. } => figures.breaker_openings += 1,
                    EventKind::WakeupRefused {
                        refusal: RefusalReason::DailyCap,
                        ..
                    } => figures.daily_cap_refusals += 1,
                    EventKind::AgentPaused {
                        by: vigil::engine::pause::PausedBy::Agent,
                        ..
                    } => figures.rests += 1,
                    _ => {}
                },
                TraceEvent::AckedPulse { .. } => figures.pulses_answered += 1,
                TraceEvent::AckedPulses { agents, .. } => {
                    figures.pulses_answered += agents.len() as u64
                }
                TraceEvent::ModelCallServed { host, api, .. } => {
                    figures.calls_served += 1;
                    figures.calls_by_host_name += u64::from(host.starts_with("llm.sim"));
                    figures.calls_anthropic +=
                        u64::from(*api == vigil_world::trace::WireApi::Anthropic);
                }
                TraceEvent::ToolCallServed { .. } => figures.tool_calls_served += 1,
                _ => {}
            }
        }
        figures
    }

    fn agent_days(&self) -> f64 {
        self.agents as f64 * self.simulated_ms as f64 / DAY_MS as f64
    }

    /// The table printed after a run, beside the paper's figures.
    pub fn table(&self) -> String {
        let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        let agent_days = self.agent_days();
        let per_agent_day = |n: u64| {
            if agent_days > 0.0 {
                n as f64 / agent_days
            } else {
                0.0
            }
        };
        let days = self.simulated_ms as f64 / DAY_MS as f64;
        let mut t = String::new();
        t.push_str(&format!(
            "heart_fleet: {} agents, {:.2} simulated days ({agent_days:.1} agent-days)\n",
            self.agents, days
        ));
        t.push_str("| figure | this run | LocalKin Heart paper |\n|---|---|---|\n");
        t.push_str(&format!(
            "| ghost rate (ghost / routine runs the model answered) | {:.1} % ({} / {}) | ~78 % of scheduled wakeups |\n",
            100.0 * per(self.ghost_runs, self.routine_runs_answered),
            self.ghost_runs,
            self.routine_runs_answered
        ));
        t.push_str(&format!(
            "| ghost rate (ghost / all routine runs finished) | {:.1} % ({} / {}) | |\n",
            100.0 * per(self.ghost_runs, self.routine_runs_finished),
            self.ghost_runs,
            self.routine_runs_finished
        ));
        t.push_str(&format!(
            "| LLM invocations per agent-day (usage_recorded) | {:.1} | 31.4 |\n",
            per_agent_day(self.model_calls)
        ));
        t.push_str(&format!(
            "| model calls served per agent-day (failed ones too) | {:.1} | |\n",
            per_agent_day(self.calls_served)
        ));
        t.push_str(&format!(
            "| breaker openings (fleet) | {} ({:.1} per week) | 2-5 per week |\n",
            self.breaker_openings,
            if days > 0.0 {
                self.breaker_openings as f64 * 7.0 / days
            } else {
                0.0
            }
        ));
        t.push_str(&format!(
            "| daily-cap refusals | {} | |\n| pulses answered per agent-day | {:.0} | 8,640 (every 10 s) |\n",
            self.daily_cap_refusals,
            per_agent_day(self.pulses_answered)
        ));
        t.push_str(&format!(
            "| rests (pause_heartbeats) / tool calls served | {} / {} | |\n| calls by host name / Anthropic shape | {} / {} of {} | |\n",
            self.rests, self.tool_calls_served, self.calls_by_host_name, self.calls_anthropic, self.calls_served
        ));
        t
    }
}
