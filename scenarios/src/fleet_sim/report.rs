//! Seeds' summaries into one [`FleetReport`]: each figure's min / median / max over the seeds,
//! per agent and fleet-wide, per day; every expectation judged (its first breach in seed
//! order); every invariant the oracle found broken.

use std::collections::{BTreeMap, BTreeSet};

use super::reduce::{Check, Key, SeedSummary};
use super::world::FleetPlan;
use crate::fleet_report::{
    AgentReport, Breach, DayCounts, DaySpreads, ExpectationResult, FleetReport, Spread,
    REPORT_FORMAT,
};

const MICRO_USD_PER_USD: f64 = 1_000_000.0;
const MS_PER_MINUTE: f64 = 60_000.0;

/// One day's figures by name (docs of [`DaySpreads`]); `first_cap_hit_minute` only when the
/// cap was hit.
pub fn figures(day: &DayCounts) -> BTreeMap<String, f64> {
    let mut f = BTreeMap::new();
    let wakeups: u64 = day.wakeups_by_source.values().sum();
    f.insert("wakeups".to_string(), wakeups as f64);
    for (source, n) in &day.wakeups_by_source {
        f.insert(format!("wakeups.{source}"), *n as f64);
    }
    for (reason, n) in &day.refusals_by_reason {
        f.insert(format!("refusals.{reason}"), *n as f64);
    }
    f.insert("runs".into(), day.runs as f64);
    for (stop, n) in &day.runs_by_stop_reason {
        f.insert(format!("runs.{stop}"), *n as f64);
    }
    f.insert("ghost_runs".into(), day.ghost_runs as f64);
    f.insert(
        "ghost_rate".into(),
        if day.runs == 0 {
            0.0
        } else {
            day.ghost_runs as f64 / day.runs as f64
        },
    );
    f.insert("llm_invocations".into(), day.llm_invocations as f64);
    f.insert("input_tokens".into(), day.input_tokens as f64);
    f.insert("cached_input_tokens".into(), day.cached_input_tokens as f64);
    f.insert("output_tokens".into(), day.output_tokens as f64);
    f.insert(
        "cost_usd".into(),
        day.cost_micro_usd as f64 / MICRO_USD_PER_USD,
    );
    f.insert("cap_hits".into(), day.cap_hits as f64);
    if let Some(minute) = day.first_cap_hit_minute {
        f.insert("first_cap_hit_minute".into(), f64::from(minute));
    }
    f.insert("breaker_openings".into(), day.breaker_openings as f64);
    f.insert("pauses".into(), day.pauses as f64);
    f.insert(
        "offline_minutes".into(),
        day.offline_ms as f64 / MS_PER_MINUTE,
    );
    f
}

/// The fleet's day: every agent's summed (the earliest cap hit of any agent).
pub fn fleet_day(agents: &[Vec<DayCounts>], day: usize) -> DayCounts {
    let mut total = DayCounts::default();
    for agent in agents {
        let d = &agent[day];
        for (k, v) in &d.wakeups_by_source {
            *total.wakeups_by_source.entry(k.clone()).or_insert(0) += v;
        }
        for (k, v) in &d.refusals_by_reason {
            *total.refusals_by_reason.entry(k.clone()).or_insert(0) += v;
        }
        for (k, v) in &d.runs_by_stop_reason {
            *total.runs_by_stop_reason.entry(k.clone()).or_insert(0) += v;
        }
        total.runs += d.runs;
        total.ghost_runs += d.ghost_runs;
        total.llm_invocations += d.llm_invocations;
        total.input_tokens += d.input_tokens;
        total.cached_input_tokens += d.cached_input_tokens;
        total.output_tokens += d.output_tokens;
        total.cost_micro_usd += d.cost_micro_usd;
        total.cap_hits += d.cap_hits;
        total.first_cap_hit_minute = match (total.first_cap_hit_minute, d.first_cap_hit_minute) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        total.breaker_openings += d.breaker_openings;
        total.pauses += d.pauses;
        total.offline_ms += d.offline_ms;
    }
    total
}

/// Spreads over the seeds of `per_seed[seed][day]`. A figure a seed's day lacks counts as 0,
/// except `first_cap_hit_minute`, spread over the seeds that hit the cap that day.
fn spreads(per_seed: &[Vec<DayCounts>], days: usize) -> DaySpreads {
    let per_day: Vec<Vec<BTreeMap<String, f64>>> = (0..days)
        .map(|d| per_seed.iter().map(|seed| figures(&seed[d])).collect())
        .collect();
    let names: BTreeSet<String> = per_day
        .iter()
        .flatten()
        .flat_map(|f| f.keys().cloned())
        .collect();
    names
        .into_iter()
        .map(|name| {
            let sparse = name == "first_cap_hit_minute";
            let values = per_day
                .iter()
                .map(|seeds| {
                    let values: Vec<f64> = seeds
                        .iter()
                        .filter_map(|f| match f.get(&name) {
                            Some(v) => Some(*v),
                            None if sparse => None,
                            None => Some(0.0),
                        })
                        .collect();
                    Spread::of(&values)
                })
                .collect();
            (name, values)
        })
        .collect()
}

/// The command that replays `seed` and writes its whole trace.
pub fn replay_command(plan: &FleetPlan, world: Option<&str>, seed: u64) -> String {
    let world = world.map_or(String::new(), |w| format!(" --world {w}"));
    format!(
        "vigil-sim fleet {} --seed {seed} --days {} --faults {}{world} --trace vigil-sim-fleet-{seed}.jsonl",
        plan.file, plan.days, plan.faults.name
    )
}

fn actual(check: &Check, summary: &SeedSummary, crossing: &super::reduce::Crossing) -> String {
    let day = &summary.agents[crossing.agent][crossing.day as usize];
    let n = crossing.day + 1;
    match check.key {
        Key::InvocationsPerDay => format!("{} LLM invocations on day {n}", day.llm_invocations),
        Key::CostPerDay => format!(
            "${:.4} spent on day {n}",
            day.cost_micro_usd as f64 / MICRO_USD_PER_USD
        ),
        Key::OfflineMinutes => format!(
            "{:.1} minutes offline on day {n}",
            day.offline_ms as f64 / MS_PER_MINUTE
        ),
        Key::NoCapHitBefore => {
            let minute = crossing.minute.unwrap_or(0);
            format!(
                "the daily cap refused a wakeup at {:02}:{:02} local time on day {n} ({} refusals that day)",
                minute / 60,
                minute % 60,
                day.cap_hits
            )
        }
        Key::BreakerOpeningsPerWeek => {
            let week = crossing.day / super::config::WEEK_DAYS;
            let openings: u64 = summary.agents[crossing.agent]
                .iter()
                .skip((week * super::config::WEEK_DAYS) as usize)
                .take(super::config::WEEK_DAYS as usize)
                .map(|d| d.breaker_openings)
                .sum();
            format!("{openings} breaker openings in week {}", week + 1)
        }
        Key::WakeupsPerDay => format!(
            "{} wakeups on day {n}",
            day.wakeups_by_source.values().sum::<u64>()
        ),
    }
}

fn expected(check: &Check) -> String {
    let limit = check.limit;
    match check.key {
        Key::InvocationsPerDay => format!("at most {limit} LLM invocations per day"),
        Key::CostPerDay => format!("at most ${} per day", limit as f64 / MICRO_USD_PER_USD),
        Key::OfflineMinutes => format!(
            "at most {} minutes offline per day",
            limit as f64 / MS_PER_MINUTE
        ),
        Key::NoCapHitBefore => format!(
            "no daily-cap refusal before {:02}:{:02} local time",
            limit / 60,
            limit % 60
        ),
        Key::BreakerOpeningsPerWeek => format!("at most {limit} breaker openings per week"),
        Key::WakeupsPerDay => format!("at most {limit} wakeups per day"),
    }
}

/// The report of `summaries` (in any order: they are sorted by seed here).
pub fn build(
    plan: &FleetPlan,
    world: Option<&str>,
    checks: &[Check],
    mut summaries: Vec<SeedSummary>,
) -> FleetReport {
    summaries.sort_by_key(|s| s.seed);
    let days = plan.days as usize;
    let fleet_per_seed: Vec<Vec<DayCounts>> = summaries
        .iter()
        .map(|s| (0..days).map(|d| fleet_day(&s.agents, d)).collect())
        .collect();
    let first = summaries.first();
    let agents = plan
        .agents
        .iter()
        .enumerate()
        .map(|(i, agent)| {
            let per_seed: Vec<Vec<DayCounts>> =
                summaries.iter().map(|s| s.agents[i].clone()).collect();
            AgentReport {
                agent: agent.shown.clone(),
                daily_cap: agent.daily_cap.map(u64::from),
                days: spreads(&per_seed, days),
                runs: first
                    .and_then(|s| s.runs.get(i).cloned())
                    .unwrap_or_default(),
                spans: first
                    .and_then(|s| s.spans.get(i).cloned())
                    .unwrap_or_default(),
            }
        })
        .collect();
    let expectations = checks
        .iter()
        .enumerate()
        .map(|(c, check)| {
            let breach = summaries.iter().find_map(|summary| {
                let crossing = summary.crossings[c]?;
                Some(Breach {
                    seed: summary.seed,
                    at_ms: crossing.at_ms,
                    day: crossing.day + 1,
                    agent: Some(plan.agents[crossing.agent].shown.clone()),
                    expected: expected(check),
                    actual: actual(check, summary, &crossing),
                    replay: replay_command(plan, world, summary.seed),
                })
            });
            ExpectationResult {
                expectation: check.text.clone(),
                scope: check.scope.clone(),
                passed: breach.is_none(),
                breach,
            }
        })
        .collect();
    let invariant_violations = summaries
        .iter()
        .filter_map(|summary| {
            let (at_ms, invariant, detail) = summary.violation.clone()?;
            Some(Breach {
                seed: summary.seed,
                at_ms,
                day: ((at_ms / super::config::DAY_MS) as u32 + 1).min(plan.days),
                agent: None,
                expected: format!("runtime invariant `{invariant}` holds"),
                actual: detail,
                replay: replay_command(plan, world, summary.seed),
            })
        })
        .collect();
    FleetReport {
        format: REPORT_FORMAT,
        fleet_file: plan.file.clone(),
        days: plan.days,
        seeds: summaries.iter().map(|s| s.seed).collect(),
        faults: plan.faults.name.clone(),
        fleet: spreads(&fleet_per_seed, days),
        agents,
        expectations,
        invariant_violations,
    }
}
