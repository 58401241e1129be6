//! The report of `vigil-sim fleet FILE` (issue 19): what a user's fleet did over simulated days
//! and seeds, computed from each seed's trace. These types are the contract between the
//! simulation (`crate::fleet_sim`, which fills them) and the renderers (`table.rs` for the
//! terminal, `html.rs` for the self-contained page); `--format json` prints a [`FleetReport`]
//! with serde as is. Pure data: no madsim, so the renderers are tested in every build.
//!
//! Names on the wire are the runtime's own snake_case words (`timer`, `on_demand`,
//! `pause_heartbeats`, `daily_cap`) so a report reads like the event log it came from. Every map
//! is a `BTreeMap`: the same seeds give a byte-identical JSON report.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

// TEMPORARY: stand-ins for table.rs and html.rs until they merge (drop these two lines then).
mod stand_in;
pub use stand_in::{html, table};

/// Version of the JSON report's shape; raised on any change a reader would notice.
pub const REPORT_FORMAT: u32 = 1;

/// One agent's (or the whole fleet's) figures for one simulated day of one seed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DayCounts {
    /// Wakeups asked for, by source (`timer`, `idle`, `on_demand`, `assignment`, `automation`,
    /// `predicate`), refused ones included.
    pub wakeups_by_source: BTreeMap<String, u64>,
    /// Wakeups refused, by the refusal's reason (`daily_cap`, `paused`, `breaker_open`, ...).
    pub refusals_by_reason: BTreeMap<String, u64>,
    /// Runs that finished this day, by stop reason (`end_turn`, `ghost`, `pause_heartbeats`, ...;
    /// a run with no stop reason, e.g. a non-LLM adapter's failure, counts under its status).
    pub runs_by_stop_reason: BTreeMap<String, u64>,
    /// Runs that finished this day (the sum of `runs_by_stop_reason`).
    pub runs: u64,
    /// Runs that ended `ghost` (a timer or idle wakeup answered `[IDLE]`).
    pub ghost_runs: u64,
    /// Model calls (LLM invocations) whose usage was recorded.
    pub llm_invocations: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    /// Cost from the price table, in millionths of a dollar (integers, like the runtime).
    pub cost_micro_usd: u64,
    /// Wakeups refused by the daily cap.
    pub cap_hits: u64,
    /// Minute of the agent's local day (0..1440) of the first daily-cap refusal, if any.
    /// Fleet-wide: the earliest of any agent's.
    pub first_cap_hit_minute: Option<u32>,
    pub breaker_openings: u64,
    /// Pauses that began this day: the agent's `pause_heartbeats` rests and operators' pauses.
    pub pauses: u64,
    /// Time the node saw the agent offline (from `agent_offline` to `agent_online`), this day.
    pub offline_ms: u64,
}

/// Min, median and max of one figure over the seeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (empty: all zero). The median of an even count is the mean of the
    /// two middle values.
    pub fn of(values: &[f64]) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Spread {
            min: sorted[0],
            median,
            max: sorted[n - 1],
        }
    }
}

/// One figure's spread over the seeds, for each simulated day (index 0 = day 1), for one agent or
/// the fleet. Keys are figure names: `wakeups`, `wakeups.<source>`, `refusals.<reason>`, `runs`,
/// `runs.<stop_reason>`, `ghost_runs`, `ghost_rate` (ghost runs / runs, 0..1), `llm_invocations`,
/// `input_tokens`, `cached_input_tokens`, `output_tokens`, `cost_usd`, `cap_hits`,
/// `first_cap_hit_minute` (over the seeds that hit the cap; absent when none did),
/// `breaker_openings`, `pauses`, `offline_minutes`.
pub type DaySpreads = BTreeMap<String, Vec<Spread>>;

/// One run, for the HTML page's per-agent timeline (the report's first seed only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMark {
    /// Simulated milliseconds since the simulation's start.
    pub started_ms: u64,
    pub finished_ms: u64,
    /// The wakeup's source (`timer`, ...).
    pub source: String,
    /// The stop reason's word (`end_turn`, `ghost`, ...), or the run's status without one.
    pub stop: String,
}

/// A span of time an agent spent in one state, for the timeline (first seed only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub from_ms: u64,
    pub to_ms: u64,
    /// `paused`, `offline` or `breaker_open`.
    pub kind: String,
}

/// One agent's part of the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The agent's name in the fleet file (tenant-qualified `tenant/name` outside `default`).
    pub agent: String,
    /// Its daily cap, if it has one (for the cap-use chart).
    pub daily_cap: Option<u64>,
    /// Per day, min/median/max over the seeds.
    pub days: DaySpreads,
    /// The first seed's runs, for the timeline.
    pub runs: Vec<RunMark>,
    /// The first seed's pauses, offline spells and open breakers.
    pub spans: Vec<Span>,
}

/// One expectation of the `[expect]` section, judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectationResult {
    /// The expectation as written (`max_invocations_per_day = 48`).
    pub expectation: String,
    /// `fleet` or the agent's name.
    pub scope: String,
    pub passed: bool,
    /// When broken: the first breach found, in seed order.
    pub breach: Option<Breach>,
}

/// Where and how an expectation or a runtime invariant broke.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Breach {
    pub seed: u64,
    /// Simulated instant (ms since the start) the breach was seen, and the day (1-based).
    pub at_ms: u64,
    pub day: u32,
    /// The agent, when the breach is one agent's.
    pub agent: Option<String>,
    pub expected: String,
    pub actual: String,
    /// The exact command that replays this seed and writes its whole trace.
    pub replay: String,
}

/// The whole report of one `vigil-sim fleet` invocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    pub format: u32,
    /// The fleet file as given on the command line.
    pub fleet_file: String,
    pub days: u32,
    pub seeds: Vec<u64>,
    /// The fault profile's name (`none`, `typical`, `harsh`, or the profile file's path).
    pub faults: String,
    /// Fleet-wide figures per day.
    pub fleet: DaySpreads,
    /// One entry per agent, in the fleet file's order.
    pub agents: Vec<AgentReport>,
    /// Every expectation, judged; empty when the file has no `[expect]` section.
    pub expectations: Vec<ExpectationResult>,
    /// Runtime invariants the oracle found broken (any seed); empty when none.
    pub invariant_violations: Vec<Breach>,
}

impl FleetReport {
    /// True when every expectation held and no invariant broke: the command's exit status.
    pub fn passed(&self) -> bool {
        self.expectations.iter().all(|e| e.passed) && self.invariant_violations.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_min_median_max_with_an_even_count_averaged() {
        assert_eq!(Spread::of(&[]), Spread::default());
        let odd = Spread::of(&[5.0, 1.0, 3.0]);
        assert_eq!((odd.min, odd.median, odd.max), (1.0, 3.0, 5.0));
        let even = Spread::of(&[4.0, 1.0, 2.0, 10.0]);
        assert_eq!((even.min, even.median, even.max), (1.0, 3.0, 10.0));
    }

    #[test]
    fn a_report_passes_only_with_every_expectation_held_and_no_violation() {
        let mut report = FleetReport::default();
        assert!(report.passed());
        report.expectations.push(ExpectationResult {
            expectation: "max_invocations_per_day = 48".into(),
            scope: "fleet".into(),
            passed: false,
            breach: None,
        });
        assert!(!report.passed());
        report.expectations[0].passed = true;
        report.invariant_violations.push(Breach {
            seed: 1,
            at_ms: 0,
            day: 1,
            agent: None,
            expected: "x".into(),
            actual: "y".into(),
            replay: "vigil-sim replay".into(),
        });
        assert!(!report.passed());
    }
}
