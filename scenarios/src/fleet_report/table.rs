//! The terminal report of `vigil-sim fleet`: a header, the fleet's figures per day as
//! `median (min–max)` over the seeds, one compact table of the agents, the expectations and the
//! invariant violations. Plain text, columns aligned by computed widths, no colours; every string
//! that came from the fleet file or a trace goes through [`escape_controls`] first, so an agent
//! named with an escape sequence cannot drive the reader's terminal.
//!
//! The formatting helpers here (`fmt_*`, [`FigureRow`]) are shared with `html.rs`, so both
//! renderers write a figure the same way.

use std::fmt::Write as _;

use vigil::cli::escape_controls;

use super::{AgentReport, Breach, DaySpreads, FleetReport, Spread};

/// Milliseconds in a simulated day. Day `n` (1-based) of the report spans
/// `[(n-1)·DAY_MS, n·DAY_MS)` from the simulation's start, which is the agents' local midnight.
pub(crate) const DAY_MS: u64 = 86_400_000;
/// Minutes in a day (the range of `first_cap_hit_minute`).
pub(crate) const MINUTES_PER_DAY: f64 = 1440.0;
/// Widest the fleet table may grow, in terminal columns, before its days wrap into a second block.
const TERMINAL_WIDTH_COLUMNS: usize = 120;
/// Spaces between two columns.
const COLUMN_GAP_COLUMNS: usize = 2;
/// Up to this many days the agents' table has a row per agent and day; beyond, a row per agent.
pub(crate) const AGENT_DAY_ROWS_DAYS_MAX: u32 = 3;
/// Seeds listed one by one in the header before the list is cut short.
const SEEDS_LISTED_MAX: usize = 8;

/// How a figure is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// A count: `12`, `12.5` (a median of an even number of seeds), `48.2k`, `1.31M`.
    Count,
    /// Dollars: `$0.0042`, `$1.25`, `$312`.
    Usd,
    /// A ratio 0..1 written as a percentage: `37%`.
    Percent,
    /// A minute of the day written `HH:MM`.
    TimeOfDay,
}

/// One row of the fleet table: a label, the figure's name in [`DaySpreads`], how to write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FigureRow {
    pub label: String,
    pub figure: String,
    pub unit: Unit,
}

impl FigureRow {
    fn new(label: &str, figure: &str, unit: Unit) -> FigureRow {
        FigureRow {
            label: label.to_string(),
            figure: figure.to_string(),
            unit,
        }
    }
}

/// The rows of a per-day table of `spreads`, in reading order: wakeups and their sources, runs
/// and their stop reasons, the ghost rate, model calls, tokens, cost, the cap, breakers, pauses,
/// time offline, refusals by reason. The fixed rows are always there (a figure the report lacks
/// shows `-`); the sources, stop reasons and refusal reasons are the ones the report has. Labels
/// are escaped.
pub(crate) fn figure_rows(spreads: &DaySpreads) -> Vec<FigureRow> {
    let sub_rows = |prefix: &str| -> Vec<FigureRow> {
        spreads
            .keys()
            .filter_map(|key| {
                let name = key.strip_prefix(prefix)?.strip_prefix('.')?;
                Some(FigureRow {
                    label: format!("  {}", escape_controls(name)),
                    figure: key.clone(),
                    unit: Unit::Count,
                })
            })
            .collect()
    };
    let mut rows = vec![FigureRow::new("wakeups", "wakeups", Unit::Count)];
    rows.extend(sub_rows("wakeups"));
    rows.push(FigureRow::new("runs", "runs", Unit::Count));
    rows.extend(sub_rows("runs"));
    rows.extend([
        FigureRow::new("ghost rate", "ghost_rate", Unit::Percent),
        FigureRow::new("LLM invocations", "llm_invocations", Unit::Count),
        FigureRow::new("input tokens", "input_tokens", Unit::Count),
        FigureRow::new("  cached", "cached_input_tokens", Unit::Count),
        FigureRow::new("output tokens", "output_tokens", Unit::Count),
        FigureRow::new("cost", "cost_usd", Unit::Usd),
        FigureRow::new("cap hits", "cap_hits", Unit::Count),
        FigureRow::new("first cap hit", "first_cap_hit_minute", Unit::TimeOfDay),
        FigureRow::new("breaker openings", "breaker_openings", Unit::Count),
        FigureRow::new("pauses", "pauses", Unit::Count),
        FigureRow::new("offline minutes", "offline_minutes", Unit::Count),
    ]);
    let refusals = sub_rows("refusals");
    if !refusals.is_empty() {
        rows.push(FigureRow::new("refused, by reason", "", Unit::Count));
        rows.extend(refusals);
    }
    rows
}

/// The spread of `figure` on day index `day` (0 = day 1), if the report has it.
pub(crate) fn day_spread(spreads: &DaySpreads, figure: &str, day: usize) -> Option<Spread> {
    spreads.get(figure)?.get(day).copied()
}

/// Whether some seed hit the daily cap on day index `day`: `first_cap_hit_minute` means nothing
/// on a day without a cap hit.
fn cap_hit_on(spreads: &DaySpreads, day: usize) -> bool {
    day_spread(spreads, "cap_hits", day).is_some_and(|s| s.max > 0.0)
}

/// One cell of a per-day table: `median (min–max)`, just the median when every seed agreed,
/// `-` when the report lacks the figure (or, for the first cap hit, no seed hit the cap).
pub(crate) fn day_cell(spreads: &DaySpreads, row: &FigureRow, day: usize) -> String {
    if row.figure.is_empty() {
        return String::new();
    }
    if row.unit == Unit::TimeOfDay && !cap_hit_on(spreads, day) {
        return "-".to_string();
    }
    day_spread(spreads, &row.figure, day)
        .map_or_else(|| "-".to_string(), |s| spread_cell(s, row.unit))
}

/// `median (min–max)`, or the median alone when min = max.
pub(crate) fn spread_cell(spread: Spread, unit: Unit) -> String {
    let median = fmt_value(spread.median, unit);
    if spread.min == spread.max {
        return median;
    }
    format!(
        "{median} ({}–{})",
        fmt_value(spread.min, unit),
        fmt_value(spread.max, unit)
    )
}

/// `value` written in `unit`.
pub(crate) fn fmt_value(value: f64, unit: Unit) -> String {
    match unit {
        Unit::Count => fmt_count(value),
        Unit::Usd => fmt_usd(value),
        Unit::Percent => fmt_percent(value),
        Unit::TimeOfDay => fmt_minute_of_day(value),
    }
}

/// A count: whole numbers as they are below 10,000 (`288`), a median between two seeds with one
/// decimal (`12.5`), larger ones in thousands or millions with three significant digits
/// (`48.2k`, `1.31M`).
pub(crate) fn fmt_count(value: f64) -> String {
    const THOUSAND: f64 = 1_000.0;
    const MILLION: f64 = 1_000_000.0;
    const EXACT_BELOW: f64 = 10_000.0;
    let abs = value.abs();
    if abs < EXACT_BELOW {
        if value.fract() == 0.0 {
            format!("{value:.0}")
        } else {
            format!("{value:.1}")
        }
    } else if abs < MILLION {
        format!("{}k", three_significant(value / THOUSAND))
    } else {
        format!("{}M", three_significant(value / MILLION))
    }
}

/// `value` (1 ≤ |value| < 1000) with three significant digits: `1.31`, `48.2`, `312`.
fn three_significant(value: f64) -> String {
    if value.abs() < 10.0 {
        format!("{value:.2}")
    } else if value.abs() < 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

/// Dollars: four decimals under a cent (`$0.0042`), two under $1,000 (`$1.25`), none above.
pub(crate) fn fmt_usd(value: f64) -> String {
    const CENT: f64 = 0.01;
    const WHOLE_DOLLARS_FROM: f64 = 1_000.0;
    if value == 0.0 {
        "$0".to_string()
    } else if value.abs() < CENT {
        format!("${value:.4}")
    } else if value.abs() < WHOLE_DOLLARS_FROM {
        format!("${value:.2}")
    } else {
        format!("${value:.0}")
    }
}

/// A ratio 0..1 as a whole percentage (`0.372` → `37%`).
pub(crate) fn fmt_percent(ratio: f64) -> String {
    format!("{:.0}%", ratio * 100.0)
}

/// A minute of the day (0..1440, possibly a median's half minute) as `HH:MM`, rounded down.
pub(crate) fn fmt_minute_of_day(minute: f64) -> String {
    let minute = minute.clamp(0.0, MINUTES_PER_DAY - 1.0) as u32;
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

/// A breach's instant: `day 2 09:14:05` (the day the report gives, the time of day from `at_ms`).
pub(crate) fn fmt_instant(day: u32, at_ms: u64) -> String {
    let seconds = (at_ms % DAY_MS) / 1000;
    format!(
        "day {day} {:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// The seeds: `20 (1–20)` when consecutive, else the first few.
pub(crate) fn fmt_seeds(seeds: &[u64]) -> String {
    match seeds {
        [] => "0".to_string(),
        [only] => format!("1 ({only})"),
        [first, .., last] if seeds.windows(2).all(|w| w[1] == w[0] + 1) => {
            format!("{} ({first}–{last})", seeds.len())
        }
        _ => {
            let listed: Vec<String> = seeds
                .iter()
                .take(SEEDS_LISTED_MAX)
                .map(u64::to_string)
                .collect();
            let more = if seeds.len() > SEEDS_LISTED_MAX {
                ", …"
            } else {
                ""
            };
            format!("{} ({}{more})", seeds.len(), listed.join(", "))
        }
    }
}

/// Column alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// `rows` under `headers`, each column as wide as its widest cell, a dashed rule under the
/// headers; the first `left` columns left-aligned, the rest right-aligned (numbers).
fn aligned(headers: &[String], rows: &[Vec<String>], left: usize) -> String {
    let columns = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let align = |i: usize| if i < left { Align::Left } else { Align::Right };
    let line = |cells: &[String]| -> String {
        let mut out = String::new();
        for (i, width) in widths.iter().enumerate() {
            let cell = cells.get(i).map_or("", String::as_str);
            let pad = width - cell.chars().count().min(*width);
            if i > 0 {
                out.push_str(&" ".repeat(COLUMN_GAP_COLUMNS));
            }
            match align(i) {
                Align::Left => {
                    out.push_str(cell);
                    out.push_str(&" ".repeat(pad));
                }
                Align::Right => {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(cell);
                }
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(headers);
    out.push('\n');
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&line(&rule));
    out.push('\n');
    for row in rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

/// The terminal report of `report`.
pub fn render(report: &FleetReport) -> String {
    let mut out = String::new();
    header(&mut out, report);
    out.push_str("\nFleet, per day (median over the seeds, then min–max):\n\n");
    out.push_str(&fleet_table(&report.fleet, report.days));
    agents(&mut out, report);
    expectations(&mut out, report);
    violations(&mut out, report);
    verdict(&mut out, report);
    out
}

fn header(out: &mut String, report: &FleetReport) {
    let _ = writeln!(
        out,
        "vigil-sim fleet {}",
        escape_controls(&report.fleet_file)
    );
    let _ = writeln!(
        out,
        "days: {}   seeds: {}   faults: {}   agents: {}",
        report.days,
        fmt_seeds(&report.seeds),
        escape_controls(&report.faults),
        report.agents.len()
    );
}

/// The fleet's figures, one row per figure and one column per day, the days split into blocks
/// that fit [`TERMINAL_WIDTH_COLUMNS`].
pub(crate) fn fleet_table(spreads: &DaySpreads, days: u32) -> String {
    let rows = figure_rows(spreads);
    let label_width = rows
        .iter()
        .map(|r| r.label.chars().count())
        .max()
        .unwrap_or(0);
    let day_count = days as usize;
    let columns: Vec<Vec<String>> = (0..day_count)
        .map(|day| rows.iter().map(|row| day_cell(spreads, row, day)).collect())
        .collect();
    let column_width = |day: usize| -> usize {
        columns[day]
            .iter()
            .map(|c| c.chars().count())
            .chain([format!("day {}", day + 1).len()])
            .max()
            .unwrap_or(0)
    };
    // Greedy blocks of days: as many as fit beside the labels (at least one per block).
    let mut blocks: Vec<std::ops::Range<usize>> = Vec::new();
    let mut start = 0;
    let mut width = label_width;
    for day in 0..day_count {
        let added = COLUMN_GAP_COLUMNS + column_width(day);
        if day > start && width + added > TERMINAL_WIDTH_COLUMNS {
            blocks.push(start..day);
            start = day;
            width = label_width;
        }
        width += added;
    }
    if start < day_count {
        blocks.push(start..day_count);
    }
    let mut out = String::new();
    for (i, block) in blocks.into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut headers = vec!["figure".to_string()];
        headers.extend(block.clone().map(|d| format!("day {}", d + 1)));
        let table_rows: Vec<Vec<String>> = rows
            .iter()
            .enumerate()
            .map(|(r, row)| {
                let mut cells = vec![row.label.clone()];
                cells.extend(block.clone().map(|d| columns[d][r].clone()));
                cells
            })
            .collect();
        out.push_str(&aligned(&headers, &table_rows, 1));
    }
    out
}

/// The median over the days of each day's median of `figure` (None without the figure).
pub(crate) fn typical_day(spreads: &DaySpreads, figure: &str) -> Option<f64> {
    let medians: Vec<f64> = spreads.get(figure)?.iter().map(|s| s.median).collect();
    (!medians.is_empty()).then(|| Spread::of(&medians).median)
}

/// The earliest of the days' median first cap hits, over the days some seed hit the cap.
pub(crate) fn earliest_cap_hit(spreads: &DaySpreads) -> Option<f64> {
    let firsts = spreads.get("first_cap_hit_minute")?;
    firsts
        .iter()
        .enumerate()
        .filter(|(day, _)| cap_hit_on(spreads, *day))
        .map(|(_, s)| s.median)
        .min_by(f64::total_cmp)
}

/// The agents' columns after the name, the day and the cap: a header and the figures of its
/// cell (more than one are written `a/b`). Short headers keep a row within 120 columns; the
/// table's title explains them.
const AGENT_COLUMNS: &[(&str, &[(&str, Unit)])] = &[
    ("wakeups", &[("wakeups", Unit::Count)]),
    ("runs", &[("runs", Unit::Count)]),
    ("ghost", &[("ghost_rate", Unit::Percent)]),
    ("LLM", &[("llm_invocations", Unit::Count)]),
    (
        "tokens",
        &[
            ("input_tokens", Unit::Count),
            ("output_tokens", Unit::Count),
        ],
    ),
    ("cost", &[("cost_usd", Unit::Usd)]),
    ("cap hits", &[("cap_hits", Unit::Count)]),
    ("cap at", &[("first_cap_hit_minute", Unit::TimeOfDay)]),
    ("breaker", &[("breaker_openings", Unit::Count)]),
    ("pauses", &[("pauses", Unit::Count)]),
    ("offline", &[("offline_minutes", Unit::Count)]),
];

/// What the agents' table's short headers mean.
const AGENT_COLUMNS_KEY: &str = "LLM: model calls; tokens: input/output; cap at: the first cap \
     hit's time of day; breaker: openings; offline: minutes";

fn agent_cap(agent: &AgentReport) -> String {
    agent
        .daily_cap
        .map_or_else(|| "-".to_string(), |c| c.to_string())
}

/// One figure of an agent: the median of day index `day`, or with `None` its typical day (the
/// median over the days of each day's median; for the first cap hit, the earliest day's).
fn agent_value(
    agent: &AgentReport,
    figure: &str,
    unit: Unit,
    day: Option<usize>,
) -> Option<String> {
    let value = match (day, unit) {
        (Some(day), Unit::TimeOfDay) if !cap_hit_on(&agent.days, day) => None,
        (Some(day), _) => day_spread(&agent.days, figure, day).map(|s| s.median),
        (None, Unit::TimeOfDay) => earliest_cap_hit(&agent.days),
        (None, _) => typical_day(&agent.days, figure),
    };
    value.map(|v| fmt_value(v, unit))
}

/// The agent's cells of [`AGENT_COLUMNS`] for `day` (see [`agent_value`]); `-` for a figure the
/// report lacks.
fn agent_cells(agent: &AgentReport, day: Option<usize>) -> Vec<String> {
    AGENT_COLUMNS
        .iter()
        .map(|(_, figures)| {
            let values: Vec<Option<String>> = figures
                .iter()
                .map(|(figure, unit)| agent_value(agent, figure, *unit, day))
                .collect();
            if values.iter().all(Option::is_none) {
                return "-".to_string();
            }
            values
                .into_iter()
                .map(|v| v.unwrap_or_else(|| "-".to_string()))
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect()
}

fn agents(out: &mut String, report: &FleetReport) {
    if report.agents.is_empty() {
        return;
    }
    let per_day = report.days <= AGENT_DAY_ROWS_DAYS_MAX;
    let mut headers = vec!["agent".to_string()];
    if per_day {
        out.push_str("\nAgents, per day (median over the seeds):\n");
        headers.push("day".to_string());
    } else {
        let _ = writeln!(
            out,
            "\nAgents, a typical day (the median over the {} days of each day's median over the \
             seeds;\nthe first cap hit: the earliest day's):",
            report.days
        );
    }
    let _ = writeln!(out, "{AGENT_COLUMNS_KEY}\n");
    headers.push("cap".to_string());
    headers.extend(AGENT_COLUMNS.iter().map(|(h, _)| h.to_string()));
    let mut rows = Vec::new();
    for agent in &report.agents {
        let name = escape_controls(&agent.agent).into_owned();
        if per_day {
            for day in 0..report.days as usize {
                // The name and the cap on the agent's first row only.
                let (name, cap) = match day {
                    0 => (name.clone(), agent_cap(agent)),
                    _ => (String::new(), String::new()),
                };
                let mut row = vec![name, (day + 1).to_string(), cap];
                row.extend(agent_cells(agent, Some(day)));
                rows.push(row);
            }
        } else {
            let mut row = vec![name, agent_cap(agent)];
            row.extend(agent_cells(agent, None));
            rows.push(row);
        }
    }
    out.push_str(&aligned(&headers, &rows, 1));
}

/// The lines of one breach, indented under its heading (`expected` left out when the heading
/// already says it).
fn breach_lines(out: &mut String, breach: &Breach, with_expected: bool) {
    let agent = breach
        .agent
        .as_deref()
        .map_or_else(|| "-".to_string(), |a| escape_controls(a).into_owned());
    let _ = writeln!(
        out,
        "      seed {}, {}, agent {agent}",
        breach.seed,
        fmt_instant(breach.day, breach.at_ms)
    );
    if with_expected {
        let _ = writeln!(out, "      expected: {}", escape_controls(&breach.expected));
    }
    let _ = writeln!(out, "      actual:   {}", escape_controls(&breach.actual));
    let _ = writeln!(out, "      replay:   {}", escape_controls(&breach.replay));
}

fn expectations(out: &mut String, report: &FleetReport) {
    if report.expectations.is_empty() {
        out.push_str("\nExpectations: none (the fleet file has no [expect] section)\n");
        return;
    }
    let broken = report.expectations.iter().filter(|e| !e.passed).count();
    let _ = writeln!(
        out,
        "\nExpectations: {} held, {broken} broken\n",
        report.expectations.len() - broken
    );
    for expectation in &report.expectations {
        let mark = if expectation.passed { '✔' } else { '✘' };
        let _ = writeln!(
            out,
            "  {mark} {}: {}",
            escape_controls(&expectation.scope),
            escape_controls(&expectation.expectation)
        );
        if let Some(breach) = &expectation.breach {
            breach_lines(out, breach, true);
        }
    }
}

fn violations(out: &mut String, report: &FleetReport) {
    if report.invariant_violations.is_empty() {
        out.push_str("\nInvariant violations: none\n");
        return;
    }
    let _ = writeln!(
        out,
        "\nInvariant violations: {}\n",
        report.invariant_violations.len()
    );
    for breach in &report.invariant_violations {
        let _ = writeln!(out, "  ✘ {}", escape_controls(&breach.expected));
        breach_lines(out, breach, false);
    }
}

fn verdict(out: &mut String, report: &FleetReport) {
    let broken = report.expectations.iter().filter(|e| !e.passed).count();
    let violations = report.invariant_violations.len();
    if report.passed() {
        out.push_str("\nPASSED\n");
    } else {
        let _ = writeln!(
            out,
            "\nFAILED: {broken} expectation(s) broken, {violations} invariant violation(s)"
        );
    }
}

/// The hand-built report the renderers' tests share: 2 agents, 3 days, 3 seeds, one broken
/// expectation, one invariant violation.
#[cfg(test)]
pub(crate) mod fixture {
    use super::super::{
        AgentReport, Breach, DaySpreads, ExpectationResult, FleetReport, RunMark, Span, Spread,
        REPORT_FORMAT,
    };
    use super::DAY_MS;

    /// `(figure, [(min, median, max) per day])` as [`DaySpreads`].
    /// A figure's `(min, median, max)` for each day.
    pub type Days = [(f64, f64, f64)];

    pub fn spreads(figures: &[(&str, &Days)]) -> DaySpreads {
        figures
            .iter()
            .map(|(name, days)| {
                let days = days
                    .iter()
                    .map(|&(min, median, max)| Spread { min, median, max })
                    .collect();
                (name.to_string(), days)
            })
            .collect()
    }

    pub const MINUTE_MS: u64 = 60_000;
    pub const HOUR_MS: u64 = 60 * MINUTE_MS;

    pub fn run(day: u64, start_minute: u64, minutes: u64, source: &str, stop: &str) -> RunMark {
        let started_ms = day * DAY_MS + start_minute * MINUTE_MS;
        RunMark {
            started_ms,
            finished_ms: started_ms + minutes * MINUTE_MS,
            source: source.to_string(),
            stop: stop.to_string(),
        }
    }

    pub fn report() -> FleetReport {
        let fleet = spreads(&[
            (
                "wakeups",
                &[(10.0, 12.0, 15.0), (11.0, 13.0, 14.0), (9.0, 9.0, 9.0)],
            ),
            (
                "wakeups.timer",
                &[(8.0, 10.0, 12.0), (9.0, 11.0, 12.0), (7.0, 7.0, 7.0)],
            ),
            (
                "wakeups.on_demand",
                &[(2.0, 2.0, 3.0), (2.0, 2.0, 2.0), (2.0, 2.0, 2.0)],
            ),
            (
                "runs",
                &[(9.0, 11.5, 14.0), (10.0, 12.0, 13.0), (8.0, 8.0, 8.0)],
            ),
            (
                "runs.end_turn",
                &[(5.0, 7.0, 9.0), (6.0, 8.0, 9.0), (5.0, 5.0, 5.0)],
            ),
            (
                "runs.ghost",
                &[(3.0, 4.5, 5.0), (4.0, 4.0, 4.0), (3.0, 3.0, 3.0)],
            ),
            (
                "ghost_rate",
                &[(0.25, 0.372, 0.5), (0.3, 0.33, 0.4), (0.375, 0.375, 0.375)],
            ),
            (
                "llm_invocations",
                &[(20.0, 25.0, 31.0), (22.0, 24.0, 30.0), (18.0, 18.0, 18.0)],
            ),
            (
                "input_tokens",
                &[
                    (40_000.0, 48_210.0, 52_000.0),
                    (41_000.0, 45_000.0, 50_000.0),
                    (9_000.0, 9_000.0, 9_000.0),
                ],
            ),
            (
                "cached_input_tokens",
                &[(0.0, 1_000.0, 2_000.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)],
            ),
            (
                "output_tokens",
                &[
                    (3_000.0, 4_100.0, 5_000.0),
                    (3_000.0, 3_500.0, 4_000.0),
                    (1_200.0, 1_200.0, 1_200.0),
                ],
            ),
            (
                "cost_usd",
                &[(0.5, 1.25, 2.0), (0.75, 1.0, 1.5), (0.004, 0.004, 0.004)],
            ),
            (
                "cap_hits",
                &[(0.0, 1.0, 2.0), (0.0, 0.0, 0.0), (1.0, 2.0, 3.0)],
            ),
            (
                "first_cap_hit_minute",
                &[
                    (554.0, 554.0, 554.0),
                    (0.0, 0.0, 0.0),
                    (600.0, 615.0, 630.0),
                ],
            ),
            (
                "breaker_openings",
                &[(0.0, 0.0, 1.0), (0.0, 0.0, 0.0), (0.0, 1.0, 2.0)],
            ),
            (
                "pauses",
                &[(1.0, 1.0, 1.0), (0.0, 1.0, 1.0), (0.0, 0.0, 0.0)],
            ),
            (
                "offline_minutes",
                &[(0.0, 12.0, 30.0), (0.0, 0.0, 0.0), (5.0, 5.0, 5.0)],
            ),
            (
                "refusals.daily_cap",
                &[(0.0, 1.0, 2.0), (0.0, 0.0, 0.0), (1.0, 2.0, 3.0)],
            ),
            (
                "refusals.paused",
                &[(0.0, 0.5, 1.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)],
            ),
        ]);
        let alpha = AgentReport {
            agent: "alpha".to_string(),
            daily_cap: Some(4),
            days: spreads(&[
                (
                    "wakeups",
                    &[(6.0, 7.0, 9.0), (6.0, 8.0, 8.0), (5.0, 5.0, 5.0)],
                ),
                ("runs", &[(4.0, 4.0, 4.0), (4.0, 4.0, 4.0), (4.0, 4.0, 4.0)]),
                (
                    "ghost_rate",
                    &[(0.25, 0.25, 0.5), (0.0, 0.25, 0.25), (0.5, 0.5, 0.5)],
                ),
                (
                    "llm_invocations",
                    &[(10.0, 12.0, 15.0), (11.0, 11.0, 14.0), (9.0, 9.0, 9.0)],
                ),
                (
                    "input_tokens",
                    &[
                        (20_000.0, 24_000.0, 26_000.0),
                        (20_000.0, 22_000.0, 25_000.0),
                        (4_000.0, 4_000.0, 4_000.0),
                    ],
                ),
                (
                    "output_tokens",
                    &[
                        (1_500.0, 2_000.0, 2_500.0),
                        (1_500.0, 1_700.0, 2_000.0),
                        (600.0, 600.0, 600.0),
                    ],
                ),
                (
                    "cost_usd",
                    &[(0.25, 0.625, 1.0), (0.4, 0.5, 0.75), (0.002, 0.002, 0.002)],
                ),
                (
                    "cap_hits",
                    &[(0.0, 1.0, 2.0), (0.0, 0.0, 0.0), (1.0, 2.0, 3.0)],
                ),
                (
                    "first_cap_hit_minute",
                    &[
                        (554.0, 554.0, 554.0),
                        (0.0, 0.0, 0.0),
                        (600.0, 615.0, 630.0),
                    ],
                ),
                (
                    "breaker_openings",
                    &[(0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)],
                ),
                (
                    "pauses",
                    &[(1.0, 1.0, 1.0), (0.0, 1.0, 1.0), (0.0, 0.0, 0.0)],
                ),
                (
                    "offline_minutes",
                    &[(0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)],
                ),
            ]),
            runs: vec![
                run(0, 60, 5, "timer", "end_turn"),
                run(0, 120, 1, "timer", "ghost"),
                run(0, 180, 6, "on_demand", "end_turn"),
                run(0, 240, 4, "timer", "pause_heartbeats"),
                run(1, 30, 5, "timer", "end_turn"),
                run(1, 600, 2, "timer", "ghost"),
            ],
            spans: vec![Span {
                from_ms: 4 * HOUR_MS + 4 * MINUTE_MS,
                to_ms: 8 * HOUR_MS,
                kind: "paused".to_string(),
            }],
        };
        let beta = AgentReport {
            agent: "beta".to_string(),
            daily_cap: None,
            days: spreads(&[
                (
                    "wakeups",
                    &[(4.0, 5.0, 6.0), (5.0, 5.0, 6.0), (4.0, 4.0, 4.0)],
                ),
                (
                    "runs",
                    &[(5.0, 7.5, 10.0), (6.0, 8.0, 9.0), (4.0, 4.0, 4.0)],
                ),
                (
                    "cost_usd",
                    &[(0.25, 0.625, 1.0), (0.35, 0.5, 0.75), (0.002, 0.002, 0.002)],
                ),
                (
                    "cap_hits",
                    &[(0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)],
                ),
                (
                    "breaker_openings",
                    &[(0.0, 0.0, 1.0), (0.0, 0.0, 0.0), (0.0, 1.0, 2.0)],
                ),
                (
                    "offline_minutes",
                    &[(0.0, 12.0, 30.0), (0.0, 0.0, 0.0), (5.0, 5.0, 5.0)],
                ),
            ]),
            runs: vec![
                run(0, 30, 20, "on_demand", "end_turn"),
                run(0, 90, 3, "timer", "llm_error"),
                run(2, 600, 10, "assignment", "end_turn"),
            ],
            spans: vec![
                Span {
                    from_ms: 2 * HOUR_MS,
                    to_ms: 2 * HOUR_MS + 30 * MINUTE_MS,
                    kind: "offline".to_string(),
                },
                Span {
                    from_ms: 2 * DAY_MS + 9 * HOUR_MS,
                    to_ms: 2 * DAY_MS + 9 * HOUR_MS + 10 * MINUTE_MS,
                    kind: "breaker_open".to_string(),
                },
            ],
        };
        let replay = "vigil-sim fleet examples/fleet.toml --seed 2 --days 3 --trace".to_string();
        FleetReport {
            format: REPORT_FORMAT,
            fleet_file: "examples/fleet.toml".to_string(),
            days: 3,
            seeds: vec![1, 2, 3],
            faults: "typical".to_string(),
            fleet,
            agents: vec![alpha, beta],
            expectations: vec![
                ExpectationResult {
                    expectation: "max_invocations_per_day = 48".to_string(),
                    scope: "fleet".to_string(),
                    passed: true,
                    breach: None,
                },
                ExpectationResult {
                    expectation: "no_cap_hit_before = \"18:00\"".to_string(),
                    scope: "alpha".to_string(),
                    passed: false,
                    breach: Some(Breach {
                        seed: 2,
                        at_ms: 2 * DAY_MS + 10 * HOUR_MS + 15 * MINUTE_MS + 7_000,
                        day: 3,
                        agent: Some("alpha".to_string()),
                        expected: "no daily-cap hit before 18:00".to_string(),
                        actual: "a daily-cap hit at 10:15".to_string(),
                        replay: replay.clone(),
                    }),
                },
            ],
            invariant_violations: vec![Breach {
                seed: 3,
                at_ms: 30 * MINUTE_MS + 1_500,
                day: 1,
                agent: Some("beta".to_string()),
                expected: "daily_cap_respected: at most 4 runs start in a local day".to_string(),
                actual: "5 runs started on day 1".to_string(),
                replay,
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::{report, spreads};
    use super::*;

    /// The cells of `line`: columns are separated by at least two spaces.
    fn cells(line: &str) -> Vec<String> {
        line.trim()
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The cells of the first line of `text` after `after` whose first cell is `first`.
    fn row(text: &str, after: &str, first: &str) -> Vec<String> {
        let start = text
            .find(after)
            .unwrap_or_else(|| panic!("no {after:?} in\n{text}"));
        text[start..]
            .lines()
            .map(cells)
            .find(|c| c.first().map(String::as_str) == Some(first))
            .unwrap_or_else(|| panic!("no row {first:?} after {after:?} in\n{text}"))
    }

    #[test]
    fn the_fleet_table_has_each_days_median_and_range_in_its_cell() {
        let text = render(&report());
        let fleet = "Fleet, per day";
        assert_eq!(
            row(&text, fleet, "figure"),
            ["figure", "day 1", "day 2", "day 3"]
        );
        assert_eq!(
            row(&text, fleet, "wakeups"),
            ["wakeups", "12 (10–15)", "13 (11–14)", "9"]
        );
        assert_eq!(
            row(&text, fleet, "timer"),
            ["timer", "10 (8–12)", "11 (9–12)", "7"]
        );
        assert_eq!(
            row(&text, fleet, "runs"),
            ["runs", "11.5 (9–14)", "12 (10–13)", "8"]
        );
        assert_eq!(row(&text, fleet, "ghost"), ["ghost", "4.5 (3–5)", "4", "3"]);
        assert_eq!(
            row(&text, fleet, "ghost rate"),
            ["ghost rate", "37% (25%–50%)", "33% (30%–40%)", "38%"]
        );
        assert_eq!(
            row(&text, fleet, "input tokens"),
            [
                "input tokens",
                "48.2k (40.0k–52.0k)",
                "45.0k (41.0k–50.0k)",
                "9000"
            ]
        );
        assert_eq!(
            row(&text, fleet, "cost"),
            [
                "cost",
                "$1.25 ($0.50–$2.00)",
                "$1.00 ($0.75–$1.50)",
                "$0.0040"
            ]
        );
        // Day 2 had no cap hit in any seed: its first-cap-hit cell is empty, not 00:00.
        assert_eq!(
            row(&text, fleet, "first cap hit"),
            ["first cap hit", "09:14", "-", "10:15 (10:00–10:30)"]
        );
        assert_eq!(
            row(&text, fleet, "daily_cap"),
            ["daily_cap", "1 (0–2)", "0", "2 (1–3)"]
        );
        assert_eq!(
            row(&text, fleet, "paused"),
            ["paused", "0.5 (0–1)", "0", "0"]
        );
    }

    #[test]
    fn a_figure_the_report_lacks_shows_a_dash() {
        let mut report = report();
        report.fleet.remove("pauses");
        let text = render(&report);
        assert_eq!(
            row(&text, "Fleet, per day", "pauses"),
            ["pauses", "-", "-", "-"]
        );
    }

    #[test]
    fn with_few_days_each_agent_has_a_row_per_day_of_medians() {
        let text = render(&report());
        let agents = "Agents, per day";
        assert_eq!(
            row(&text, agents, "agent"),
            [
                "agent", "day", "cap", "wakeups", "runs", "ghost", "LLM", "tokens", "cost",
                "cap hits", "cap at", "breaker", "pauses", "offline"
            ]
        );
        assert_eq!(
            row(&text, agents, "alpha"),
            [
                "alpha",
                "1",
                "4",
                "7",
                "4",
                "25%",
                "12",
                "24.0k/2000",
                "$0.62",
                "1",
                "09:14",
                "0",
                "1",
                "0"
            ]
        );
        // Day 2's row has no name or cap; alpha hit no cap that day.
        assert_eq!(
            row(&text, agents, "2"),
            [
                "2",
                "8",
                "4",
                "25%",
                "11",
                "22.0k/1700",
                "$0.50",
                "0",
                "-",
                "0",
                "1",
                "0"
            ]
        );
        // beta has no cap and lacks most figures.
        assert_eq!(
            row(&text, agents, "beta"),
            ["beta", "1", "-", "5", "7.5", "-", "-", "-", "$0.62", "0", "-", "0", "-", "12"]
        );
    }

    #[test]
    fn with_many_days_each_agent_has_one_row_of_its_typical_day() {
        let mut report = report();
        report.days = 5;
        report.agents[0].days = spreads(&[
            (
                "wakeups",
                &[
                    (1.0, 1.0, 1.0),
                    (2.0, 2.0, 2.0),
                    (3.0, 3.0, 3.0),
                    (4.0, 4.0, 4.0),
                    (0.0, 100.0, 200.0),
                ],
            ),
            (
                "cap_hits",
                &[
                    (0.0, 0.0, 0.0),
                    (0.0, 1.0, 1.0),
                    (0.0, 0.0, 0.0),
                    (1.0, 1.0, 1.0),
                    (0.0, 0.0, 0.0),
                ],
            ),
            (
                "first_cap_hit_minute",
                &[
                    (0.0, 0.0, 0.0),
                    (700.0, 720.0, 740.0),
                    (0.0, 0.0, 0.0),
                    (480.0, 481.0, 482.0),
                    (0.0, 0.0, 0.0),
                ],
            ),
        ]);
        let text = render(&report);
        let alpha = row(&text, "Agents, a typical day", "alpha");
        // The median of the days' medians 1, 2, 3, 4, 100; the earliest day's first cap hit.
        assert_eq!(alpha[..4], ["alpha", "4", "3", "-"]);
        assert_eq!(alpha[9], "08:01");
    }

    #[test]
    fn expectations_and_violations_say_where_and_how_to_replay() {
        let text = render(&report());
        assert!(text.contains("Expectations: 1 held, 1 broken"), "{text}");
        assert!(
            text.contains("  ✔ fleet: max_invocations_per_day = 48\n"),
            "{text}"
        );
        let broken = "  ✘ alpha: no_cap_hit_before = \"18:00\"\n\
             \x20     seed 2, day 3 10:15:07, agent alpha\n\
             \x20     expected: no daily-cap hit before 18:00\n\
             \x20     actual:   a daily-cap hit at 10:15\n\
             \x20     replay:   vigil-sim fleet examples/fleet.toml --seed 2 --days 3 --trace\n";
        assert!(text.contains(broken), "{text}");
        assert!(text.contains("Invariant violations: 1\n"), "{text}");
        assert!(
            text.contains(
                "  ✘ daily_cap_respected: at most 4 runs start in a local day\n\
             \x20     seed 3, day 1 00:30:01, agent beta\n\
             \x20     actual:   5 runs started on day 1\n"
            ),
            "{text}"
        );
        assert!(text.ends_with("FAILED: 1 expectation(s) broken, 1 invariant violation(s)\n"));
        let mut fixed = report();
        fixed.expectations[1].passed = true;
        fixed.expectations[1].breach = None;
        fixed.invariant_violations.clear();
        let text = render(&fixed);
        assert!(text.contains("Invariant violations: none\n"), "{text}");
        assert!(text.ends_with("\nPASSED\n"), "{text}");
    }

    #[test]
    fn the_header_names_file_days_seeds_and_faults() {
        let text = render(&report());
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("vigil-sim fleet examples/fleet.toml"));
        assert_eq!(
            lines.next(),
            Some("days: 3   seeds: 3 (1–3)   faults: typical   agents: 2")
        );
    }

    #[test]
    fn hostile_names_cannot_reach_the_terminal() {
        let mut report = report();
        let hostile = "<script>alert(1)</script>\x1b[31mred\u{9b}2J\u{202e}evil\nnext";
        report.agents[1].agent = hostile.to_string();
        report.fleet_file = "fleet\x1b]0;title\x07.toml".to_string();
        report.expectations[1].scope = hostile.to_string();
        report.invariant_violations[0].agent = Some(hostile.to_string());
        report.invariant_violations[0].replay = "vigil-sim \x1b[2J".to_string();
        report
            .fleet
            .insert("runs.\x1b[1mbold".to_string(), vec![Spread::default(); 3]);
        let text = render(&report);
        for raw in ['\x1b', '\u{9b}', '\u{202e}', '\x07'] {
            assert!(!text.contains(raw), "{raw:?} reached the output:\n{text}");
        }
        assert!(text.contains("<script>alert(1)</script>\\x1b[31mred\\u{9b}2J\\u{202e}evil\\nnext"));
        assert!(text.contains("vigil-sim fleet fleet\\x1b]0;title\\x07.toml"));
        assert!(text.contains("\\x1b[1mbold"));
        // A newline in a name stays on its row: the table keeps one line per agent and day.
        let beta_rows = text.lines().filter(|l| l.contains("evil")).count();
        assert_eq!(beta_rows, 3, "{text}");
    }

    #[test]
    fn wide_reports_wrap_their_days_into_blocks() {
        let mut report = report();
        report.days = 12;
        for days in report.fleet.values_mut() {
            let day = days[0];
            days.resize(12, day);
        }
        let text = render(&report);
        let table = &text[text.find("Fleet, per day").unwrap()..text.find("Agents").unwrap()];
        assert!(
            table
                .lines()
                .all(|l| l.chars().count() <= TERMINAL_WIDTH_COLUMNS),
            "{table}"
        );
        let headers: Vec<Vec<String>> = table
            .lines()
            .map(cells)
            .filter(|c| c.first().map(String::as_str) == Some("figure"))
            .collect();
        assert!(headers.len() >= 2, "{table}");
        let days: Vec<&String> = headers.iter().flat_map(|h| &h[1..]).collect();
        let expected: Vec<String> = (1..=12).map(|d| format!("day {d}")).collect();
        assert_eq!(days, expected.iter().collect::<Vec<_>>());
    }

    #[test]
    fn figures_are_written_compactly() {
        assert_eq!(fmt_count(288.0), "288");
        assert_eq!(fmt_count(12.5), "12.5");
        assert_eq!(fmt_count(48_210.0), "48.2k");
        assert_eq!(fmt_count(312_000.0), "312k");
        assert_eq!(fmt_count(1_310_000.0), "1.31M");
        assert_eq!(fmt_usd(0.0), "$0");
        assert_eq!(fmt_usd(0.0042), "$0.0042");
        assert_eq!(fmt_usd(1.254), "$1.25");
        assert_eq!(fmt_usd(1234.4), "$1234");
        assert_eq!(fmt_percent(0.372), "37%");
        assert_eq!(fmt_minute_of_day(554.5), "09:14");
        assert_eq!(fmt_minute_of_day(1439.0), "23:59");
        assert_eq!(fmt_instant(2, DAY_MS + 3_723_000), "day 2 01:02:03");
        assert_eq!(fmt_seeds(&[4, 5, 6]), "3 (4–6)");
        assert_eq!(fmt_seeds(&[1, 5]), "2 (1, 5)");
        assert_eq!(
            fmt_seeds(&(0..20).step_by(2).collect::<Vec<_>>()),
            "10 (0, 2, 4, 6, 8, 10, 12, 14, …)"
        );
    }

    #[test]
    fn the_table_of_the_fixed_report() {
        insta::assert_snapshot!("fleet_report_table", render(&report()));
    }
}
