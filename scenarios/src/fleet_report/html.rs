//! The HTML report of `vigil-sim fleet`: one self-contained page (inline CSS, charts as inline
//! SVG written here, no fonts, scripts or images fetched) that opens offline from a file. It
//! shows summary cards, each agent's timeline of runs (coloured by stop reason, ghost runs in a
//! lane of their own) with its pauses, offline spells and open breakers as bands, the daily cap's
//! use through the first days, the cost per day (median bar, min–max whisker), the expectations
//! and invariant violations, and the fleet's figures per day.
//!
//! Deterministic: the same report gives the same bytes (no clock, no map with a random order).
//! Every string from the report is made visible with [`escape_controls`] and then HTML-escaped
//! with [`escape_html`]. The page carries one small inline script that only records, on load,
//! how many charts the browser laid out with a non-zero size (`data-svgs-rendered` on `<body>`),
//! how many of the timelines' run marks have a non-zero width (`data-run-marks-rendered`) and how far the page
//! overflows the window sideways (`data-page-overflow-px`), for the headless-browser test; the
//! page needs no script to show anything.

use std::fmt::Write as _;

use vigil::cli::escape_controls;

use super::table::{
    day_cell, earliest_cap_hit, figure_rows, fmt_count, fmt_instant, fmt_minute_of_day, fmt_seeds,
    fmt_usd, fmt_value, spread_cell, typical_day, Unit, DAY_MS,
};
use super::{AgentReport, Breach, DaySpreads, FleetReport, RunMark, Span, Spread};

/// Width of every wide chart's coordinate system (its viewBox), in CSS pixels at full size.
const CHART_WIDTH_PX: f64 = 1160.0;
/// Left margin of a timeline, where its lanes are named.
const TIMELINE_LEFT_PX: f64 = 52.0;
/// Right margin of every chart.
const CHART_RIGHT_PX: f64 = 12.0;
/// Timeline rows: the day labels, the span strip, the runs lane, the ghost lane, the time axis.
const TIMELINE_DAY_LABEL_Y_PX: f64 = 12.0;
const TIMELINE_STRIP_TOP_PX: f64 = 18.0;
const TIMELINE_STRIP_HEIGHT_PX: f64 = 6.0;
const TIMELINE_RUNS_TOP_PX: f64 = 28.0;
const TIMELINE_RUNS_HEIGHT_PX: f64 = 22.0;
const TIMELINE_GHOST_TOP_PX: f64 = 54.0;
const TIMELINE_GHOST_HEIGHT_PX: f64 = 12.0;
const TIMELINE_HEIGHT_PX: f64 = 84.0;
/// Narrowest mark of a run, so a one-second run still shows.
const RUN_MARK_MIN_WIDTH_PX: f64 = 1.0;
/// Cap-use chart: its height, margins, and how many of the first seed's days it draws.
const CAP_CHART_HEIGHT_PX: f64 = 200.0;
const CAP_CHART_LEFT_PX: f64 = 52.0;
const CAP_CHART_TOP_PX: f64 = 16.0;
const CAP_CHART_BOTTOM_PX: f64 = 28.0;
const CAP_CHART_DAYS_MAX: u32 = 3;
/// Headroom above the higher of the cap and the busiest day, as a fraction of it.
const CAP_CHART_HEADROOM: f64 = 0.1;
/// Cost charts: the fleet's (wide) and each agent's (small multiples).
const COST_CHART_HEIGHT_PX: f64 = 200.0;
const COST_SMALL_WIDTH_PX: f64 = 360.0;
const COST_SMALL_HEIGHT_PX: f64 = 150.0;
const COST_CHART_LEFT_PX: f64 = 60.0;
const COST_CHART_TOP_PX: f64 = 16.0;
const COST_CHART_BOTTOM_PX: f64 = 24.0;
/// A cost bar's share of its day's slot.
const COST_BAR_SHARE: f64 = 0.6;
/// Half the width of a whisker's end, as a share of the bar's width.
const WHISKER_CAP_SHARE: f64 = 0.25;
/// Hours between the time axis's ticks within a day.
const AXIS_TICK_HOURS: u64 = 6;
/// Narrowest a timeline may be drawn before its box scrolls sideways (phones), in CSS pixels.
const TIMELINE_MIN_WIDTH_PX: u32 = 640;
const MS_PER_HOUR: u64 = 3_600_000;

/// Colours of the stop reasons the runtime names (and of run statuses without one); any other
/// word gets one of [`FALLBACK_COLOURS`], picked by a hash of the word (stable across runs).
const STOP_COLOURS: &[(&str, &str)] = &[
    ("end_turn", "#2e7d32"),
    ("succeeded", "#2e7d32"),
    ("ghost", "#9e9e9e"),
    ("pause_heartbeats", "#7b1fa2"),
    ("max_iterations", "#ef6c00"),
    ("tool_cap", "#f9a825"),
    ("budget", "#ad1457"),
    ("llm_error", "#c62828"),
    ("tool_error", "#d84315"),
    ("failed", "#b71c1c"),
    ("cancelled", "#546e7a"),
    ("timed_out", "#6d4c41"),
    ("control_plane_restart", "#0277bd"),
];
const FALLBACK_COLOURS: &[&str] = &["#00838f", "#5d4037", "#283593", "#827717", "#4a148c"];
/// Colours of the timeline's bands.
const SPAN_COLOURS: &[(&str, &str)] = &[
    ("paused", "#ffb300"),
    ("offline", "#455a64"),
    ("breaker_open", "#e53935"),
];
const SPAN_FALLBACK_COLOUR: &str = "#8d6e63";
/// Lines of the cap-use chart, day 1 first.
const CAP_DAY_COLOURS: &[&str] = &["#1565c0", "#6a1b9a", "#00838f"];
const CAP_LINE_COLOUR: &str = "#c62828";
const COST_BAR_COLOUR: &str = "#1565c0";

/// `text` with `& < > " '` replaced by entities: safe in element content and quoted attributes.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A string from the report, for the page: control characters made visible, then HTML-escaped.
fn text(raw: &str) -> String {
    escape_html(&escape_controls(raw))
}

/// FNV-1a of `word`: a stable pick among the fallback colours.
fn stable_hash(word: &str) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0100_0000_01b3;
    word.bytes().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

fn stop_colour(stop: &str) -> &'static str {
    STOP_COLOURS
        .iter()
        .find(|(word, _)| *word == stop)
        .map_or_else(
            || FALLBACK_COLOURS[(stable_hash(stop) % FALLBACK_COLOURS.len() as u64) as usize],
            |(_, colour)| colour,
        )
}

fn span_colour(kind: &str) -> &'static str {
    SPAN_COLOURS
        .iter()
        .find(|(word, _)| *word == kind)
        .map_or(SPAN_FALLBACK_COLOUR, |(_, colour)| colour)
}

/// A coordinate written with one decimal (enough at these sizes, and short).
fn px(value: f64) -> String {
    format!("{value:.1}")
}

const STYLE: &str = "\
:root{--fg:#1f2328;--muted:#59636e;--line:#d0d7de;--bg:#fff;--card:#f6f8fa;--ok:#1a7f37;--bad:#cf222e}
*{box-sizing:border-box}
body{margin:0 auto;max-width:1240px;padding:16px;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);background:var(--bg)}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
.meta{color:var(--muted);margin:0 0 12px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:10px}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:10px}
.card .label{color:var(--muted);font-size:12px}.card .value{font-size:20px;font-weight:600}
.card .range{color:var(--muted);font-size:12px}
.pass{color:var(--ok)}.fail{color:var(--bad)}
.legend{display:flex;flex-wrap:wrap;gap:6px 14px;margin:6px 0;font-size:12px}
.legend span{display:inline-flex;align-items:center;gap:4px}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px}
.sw.ghost{border:1px dashed #616161}
.chart{overflow-x:auto}
.chart svg{display:block;width:100%;height:auto}
svg.timeline{min-width:TIMELINE_MIN_WIDTHpx}
svg text{font:11px system-ui,sans-serif;fill:#59636e}
.small-multiples{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:12px}
.small-multiples figure{margin:0}.small-multiples figcaption{font-size:13px;font-weight:600}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:right;white-space:nowrap}
th:first-child,td:first-child,table.expectations th,table.violations th{text-align:left}
td.text{text-align:left;white-space:normal}
td.sub{padding-left:24px;color:var(--muted)}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:var(--card);padding:1px 4px;border-radius:3px;word-break:break-all}
@media (max-width:600px){body{padding:8px}h1{font-size:18px}.card .value{font-size:17px}}
";

/// The inline script of the layout check: counts the charts laid out with a non-zero size.
const LAYOUT_CHECK_SCRIPT: &str =
    "addEventListener('load',function(){var s=document.querySelectorAll('svg'),n=0;\
for(var i=0;i<s.length;i++){var r=s[i].getBoundingClientRect();if(r.width>0&&r.height>0)n++}\
var m=document.querySelectorAll('svg.timeline rect.run'),k=0;\
for(var j=0;j<m.length;j++){if(m[j].getBoundingClientRect().width>0)k++}\
document.body.setAttribute('data-svgs-total',s.length);\
document.body.setAttribute('data-svgs-rendered',n);\
document.body.setAttribute('data-run-marks-rendered',k);\
document.body.setAttribute('data-page-overflow-px',Math.max(0,document.documentElement.scrollWidth-innerWidth))});";

/// The HTML page of `report`.
pub fn render(report: &FleetReport) -> String {
    let mut out = String::new();
    let title = format!("Fleet simulation: {}", text(&report.fleet_file));
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>\n{}</style>\n</head>\n<body>\n",
        STYLE.replace("TIMELINE_MIN_WIDTH", &TIMELINE_MIN_WIDTH_PX.to_string())
    );
    let _ = writeln!(out, "<h1>{title}</h1>");
    let _ = writeln!(
        out,
        "<p class=\"meta\">{} days × {} seeds · faults: {} · {} agents</p>",
        report.days,
        escape_html(&fmt_seeds(&report.seeds)),
        text(&report.faults),
        report.agents.len()
    );
    summary(&mut out, report);
    legend(&mut out, report);
    timelines(&mut out, report);
    cap_use(&mut out, report);
    cost(&mut out, report);
    expectations(&mut out, report);
    fleet_table(&mut out, report);
    agents_table(&mut out, report);
    let _ = write!(
        out,
        "<script>{LAYOUT_CHECK_SCRIPT}</script>\n</body>\n</html>\n"
    );
    out
}

/// One summary card: a label, a value, a line under it.
fn card(out: &mut String, label: &str, value: &str, under: &str, class: &str) {
    let _ = writeln!(
        out,
        "<div class=\"card\"><div class=\"label\">{label}</div>\
         <div class=\"value {class}\">{value}</div><div class=\"range\">{under}</div></div>"
    );
}

/// The lowest min and highest max of `figure` over every day.
fn whole_range(spreads: &DaySpreads, figure: &str) -> Option<(f64, f64)> {
    let days = spreads.get(figure)?;
    let min = days.iter().map(|s| s.min).min_by(f64::total_cmp)?;
    let max = days.iter().map(|s| s.max).max_by(f64::total_cmp)?;
    Some((min, max))
}

fn summary(out: &mut String, report: &FleetReport) {
    out.push_str("<h2>Summary</h2>\n<div class=\"cards\">\n");
    let broken = report.expectations.iter().filter(|e| !e.passed).count();
    let violations = report.invariant_violations.len();
    let (verdict, class) = if report.passed() {
        ("PASSED", "pass")
    } else {
        ("FAILED", "fail")
    };
    card(
        out,
        "verdict",
        verdict,
        &format!(
            "{broken} of {} expectations broken · {violations} invariant violations",
            report.expectations.len()
        ),
        class,
    );
    let figures: &[(&str, &str, Unit)] = &[
        ("wakeups a day", "wakeups", Unit::Count),
        ("runs a day", "runs", Unit::Count),
        ("ghost rate", "ghost_rate", Unit::Percent),
        ("LLM invocations a day", "llm_invocations", Unit::Count),
        ("cost a day", "cost_usd", Unit::Usd),
        ("cap hits a day", "cap_hits", Unit::Count),
        ("breaker openings a day", "breaker_openings", Unit::Count),
        ("offline minutes a day", "offline_minutes", Unit::Count),
    ];
    for (label, figure, unit) in figures {
        let value = typical_day(&report.fleet, figure)
            .map_or_else(|| "-".to_string(), |v| fmt_value(v, *unit));
        let under = whole_range(&report.fleet, figure).map_or_else(String::new, |(lo, hi)| {
            if lo == hi {
                format!("typical day; every day and seed {}", fmt_value(lo, *unit))
            } else {
                format!(
                    "typical day; all days and seeds {}–{}",
                    fmt_value(lo, *unit),
                    fmt_value(hi, *unit)
                )
            }
        });
        card(out, label, &escape_html(&value), &escape_html(&under), "");
    }
    let first =
        earliest_cap_hit(&report.fleet).map_or_else(|| "none".to_string(), fmt_minute_of_day);
    card(
        out,
        "earliest cap hit",
        &first,
        "median over seeds, earliest day",
        "",
    );
    out.push_str("</div>\n");
}

/// The stop reasons of every run on the page, sorted (for the legend).
fn stop_words(report: &FleetReport) -> Vec<&str> {
    let mut words: Vec<&str> = report
        .agents
        .iter()
        .flat_map(|a| a.runs.iter().map(|r| r.stop.as_str()))
        .collect();
    words.sort_unstable();
    words.dedup();
    words
}

fn legend(out: &mut String, report: &FleetReport) {
    out.push_str("<h2>Legend</h2>\n<div class=\"legend\" aria-label=\"colours of the charts\">\n");
    for word in stop_words(report) {
        let class = if word == "ghost" { " ghost" } else { "" };
        let _ = writeln!(
            out,
            "<span><i class=\"sw{class}\" style=\"background:{}\"></i>run: {}</span>",
            stop_colour(word),
            text(word)
        );
    }
    for (kind, colour) in SPAN_COLOURS {
        let _ = writeln!(
            out,
            "<span><i class=\"sw\" style=\"background:{colour};opacity:.5\"></i>band: {kind}</span>"
        );
    }
    out.push_str("</div>\n");
}

/// A mark on a timeline lane, in whole-pixel-aligned x; neighbours of one colour that touch are
/// merged, so a week of five-minute runs stays a few hundred rectangles.
struct Mark {
    x0: f64,
    x1: f64,
    colour: &'static str,
}

fn merged_marks<'a>(
    runs: impl Iterator<Item = &'a RunMark>,
    x_of: &impl Fn(u64) -> f64,
) -> Vec<Mark> {
    let mut marks: Vec<Mark> = Vec::new();
    for run in runs {
        let x0 = x_of(run.started_ms).floor();
        let x1 = x_of(run.finished_ms.max(run.started_ms))
            .ceil()
            .max(x0 + RUN_MARK_MIN_WIDTH_PX);
        let colour = stop_colour(&run.stop);
        if let Some(last) = marks.last_mut() {
            if last.colour == colour && x0 <= last.x1 {
                last.x1 = last.x1.max(x1);
                continue;
            }
        }
        marks.push(Mark { x0, x1, colour });
    }
    marks
}

fn timelines(out: &mut String, report: &FleetReport) {
    let seed = report
        .seeds
        .first()
        .map_or_else(|| "-".to_string(), u64::to_string);
    let _ = writeln!(
        out,
        "<h2>Timelines (seed {seed})</h2>\n<p class=\"meta\">Each agent's runs over the {} days, \
         coloured by stop reason; ghost runs in the lower lane; bands: paused, offline, breaker \
         open.</p>",
        report.days
    );
    for agent in &report.agents {
        let _ = writeln!(out, "<h3>{}</h3>", text(&agent.agent));
        out.push_str("<div class=\"chart\">");
        timeline_svg(out, agent, report.days);
        out.push_str("</div>\n");
    }
}

/// The time axis shared by the timelines: a line at each day's start, a tick every
/// [`AXIS_TICK_HOURS`], the day's number above.
fn day_axis(out: &mut String, x_of: &impl Fn(u64) -> f64, days: u32, top: f64, bottom: f64) {
    for day in 0..days as u64 {
        let start = x_of(day * DAY_MS);
        let end = x_of((day + 1) * DAY_MS);
        let _ = write!(
            out,
            "<line x1=\"{x}\" y1=\"{t}\" x2=\"{x}\" y2=\"{b}\" stroke=\"#d0d7de\"/>\
             <text x=\"{c}\" y=\"{TIMELINE_DAY_LABEL_Y_PX}\" text-anchor=\"middle\">day {}</text>",
            day + 1,
            x = px(start),
            t = px(top),
            b = px(bottom),
            c = px((start + end) / 2.0),
        );
        for hour in (AXIS_TICK_HOURS..24).step_by(AXIS_TICK_HOURS as usize) {
            let x = x_of(day * DAY_MS + hour * MS_PER_HOUR);
            let _ = write!(
                out,
                "<line x1=\"{x}\" y1=\"{b}\" x2=\"{x}\" y2=\"{b2}\" stroke=\"#d0d7de\"/>\
                 <text x=\"{x}\" y=\"{ty}\" text-anchor=\"middle\">{hour:02}</text>",
                x = px(x),
                b = px(bottom),
                b2 = px(bottom + 4.0),
                ty = px(bottom + 14.0),
            );
        }
    }
}

fn timeline_svg(out: &mut String, agent: &AgentReport, days: u32) {
    let span_ms = (u64::from(days.max(1)) * DAY_MS) as f64;
    let plot = CHART_WIDTH_PX - TIMELINE_LEFT_PX - CHART_RIGHT_PX;
    let x_of = move |ms: u64| TIMELINE_LEFT_PX + (ms as f64).min(span_ms) / span_ms * plot;
    let ghosts = agent.runs.iter().filter(|r| r.stop == "ghost").count();
    let label = format!(
        "Timeline of {}: {} runs ({} ghost), {} paused, offline or breaker-open spans",
        escape_controls(&agent.agent),
        agent.runs.len(),
        ghosts,
        agent.spans.len()
    );
    let _ = write!(
        out,
        "<svg class=\"timeline\" viewBox=\"0 0 {CHART_WIDTH_PX} {TIMELINE_HEIGHT_PX}\" role=\"img\" \
         aria-label=\"{l}\"><title>{l}</title>",
        l = escape_html(&label)
    );
    let lanes_bottom = TIMELINE_GHOST_TOP_PX + TIMELINE_GHOST_HEIGHT_PX;
    // Bands behind everything, with a solid strip on top naming the kind by colour.
    for span in spans_sorted(&agent.spans) {
        let x0 = x_of(span.from_ms);
        let x1 = x_of(span.to_ms.max(span.from_ms)).max(x0 + RUN_MARK_MIN_WIDTH_PX);
        let colour = span_colour(&span.kind);
        let _ = write!(
            out,
            "<rect class=\"span\" x=\"{x}\" y=\"{t}\" width=\"{w}\" height=\"{h}\" fill=\"{colour}\" \
             opacity=\"0.15\"/><rect x=\"{x}\" y=\"{TIMELINE_STRIP_TOP_PX}\" width=\"{w}\" \
             height=\"{TIMELINE_STRIP_HEIGHT_PX}\" fill=\"{colour}\"><title>{k}</title></rect>",
            x = px(x0),
            t = px(TIMELINE_STRIP_TOP_PX),
            w = px(x1 - x0),
            h = px(lanes_bottom - TIMELINE_STRIP_TOP_PX),
            k = text(&span.kind),
        );
    }
    day_axis(out, &x_of, days, TIMELINE_STRIP_TOP_PX, lanes_bottom);
    let _ = write!(
        out,
        "<text x=\"4\" y=\"{}\">runs</text><text x=\"4\" y=\"{}\">ghost</text>",
        px(TIMELINE_RUNS_TOP_PX + TIMELINE_RUNS_HEIGHT_PX / 2.0 + 4.0),
        px(TIMELINE_GHOST_TOP_PX + TIMELINE_GHOST_HEIGHT_PX / 2.0 + 4.0)
    );
    let mut sorted: Vec<&RunMark> = agent.runs.iter().collect();
    // Ordered by everything a mark shows, so the report's order of runs cannot change the page.
    sorted.sort_by(|a, b| {
        (a.started_ms, a.finished_ms, &a.stop, &a.source).cmp(&(
            b.started_ms,
            b.finished_ms,
            &b.stop,
            &b.source,
        ))
    });
    let worked = merged_marks(sorted.iter().copied().filter(|r| r.stop != "ghost"), &x_of);
    for mark in worked {
        let _ = write!(
            out,
            "<rect class=\"run\" x=\"{}\" y=\"{TIMELINE_RUNS_TOP_PX}\" width=\"{}\" \
             height=\"{TIMELINE_RUNS_HEIGHT_PX}\" fill=\"{}\"/>",
            px(mark.x0),
            px(mark.x1 - mark.x0),
            mark.colour
        );
    }
    let ghost = merged_marks(sorted.iter().copied().filter(|r| r.stop == "ghost"), &x_of);
    for mark in ghost {
        let _ = write!(
            out,
            "<rect class=\"run ghost\" x=\"{}\" y=\"{TIMELINE_GHOST_TOP_PX}\" width=\"{}\" \
             height=\"{TIMELINE_GHOST_HEIGHT_PX}\" fill=\"{}\" opacity=\"0.8\"/>",
            px(mark.x0),
            px(mark.x1 - mark.x0),
            mark.colour
        );
    }
    out.push_str("</svg>");
}

/// Spans in a fixed order (the report's order may be anything; the page must not depend on it
/// beyond its content).
fn spans_sorted(spans: &[Span]) -> Vec<&Span> {
    let mut sorted: Vec<&Span> = spans.iter().collect();
    sorted.sort_by(|a, b| (a.from_ms, a.to_ms, &a.kind).cmp(&(b.from_ms, b.to_ms, &b.kind)));
    sorted
}

/// For each of the first `days` days: the start times (ms into the day) of the runs that
/// started that day, sorted. The daily cap counts runs that start in a day.
pub(crate) fn run_starts_by_day(runs: &[RunMark], days: u32) -> Vec<Vec<u64>> {
    let mut by_day = vec![Vec::new(); days as usize];
    for run in runs {
        let day = (run.started_ms / DAY_MS) as usize;
        if let Some(starts) = by_day.get_mut(day) {
            starts.push(run.started_ms % DAY_MS);
        }
    }
    for starts in &mut by_day {
        starts.sort_unstable();
    }
    by_day
}

/// A round number at least `value`: 1, 2 or 5 times a power of ten.
fn nice_ceiling(value: f64) -> f64 {
    if value <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|v| *v >= value)
        .unwrap_or(10.0 * magnitude)
}

fn cap_use(out: &mut String, report: &FleetReport) {
    let capped: Vec<&AgentReport> = report
        .agents
        .iter()
        .filter(|a| a.daily_cap.is_some())
        .collect();
    let days = report.days.min(CAP_CHART_DAYS_MAX);
    let _ = writeln!(
        out,
        "<h2>Daily cap use</h2>\n<p class=\"meta\">Runs started so far in the day (first seed, \
         days 1–{days}), against the cap (dashed).</p>"
    );
    if capped.is_empty() {
        out.push_str("<p>No agent has a daily cap.</p>\n");
        return;
    }
    out.push_str("<div class=\"small-multiples\">\n");
    for agent in capped {
        let _ = write!(
            out,
            "<figure><figcaption>{}</figcaption><div class=\"chart\">",
            text(&agent.agent)
        );
        cap_svg(out, agent, days);
        out.push_str("</div></figure>\n");
    }
    out.push_str("</div>\n");
}

fn cap_svg(out: &mut String, agent: &AgentReport, days: u32) {
    let cap = agent.daily_cap.unwrap_or(0);
    let starts = run_starts_by_day(&agent.runs, days);
    let busiest = starts.iter().map(Vec::len).max().unwrap_or(0) as f64;
    let y_max = nice_ceiling(busiest.max(cap as f64) * (1.0 + CAP_CHART_HEADROOM));
    let width = COST_SMALL_WIDTH_PX;
    let plot_w = width - CAP_CHART_LEFT_PX - CHART_RIGHT_PX;
    let plot_h = CAP_CHART_HEIGHT_PX - CAP_CHART_TOP_PX - CAP_CHART_BOTTOM_PX;
    let bottom = CAP_CHART_TOP_PX + plot_h;
    let x_of = |ms: u64| CAP_CHART_LEFT_PX + ms as f64 / DAY_MS as f64 * plot_w;
    let y_of = |count: f64| bottom - count / y_max * plot_h;
    let reached: Vec<String> = starts
        .iter()
        .enumerate()
        .map(|(day, s)| match s.get((cap as usize).saturating_sub(1)) {
            Some(ms) if cap > 0 => format!(
                "day {}: {} runs, cap reached at {}",
                day + 1,
                s.len(),
                fmt_minute_of_day((ms / 60_000) as f64)
            ),
            _ => format!("day {}: {} runs, cap not reached", day + 1, s.len()),
        })
        .collect();
    let label = format!(
        "Daily cap use of {}: cap {cap}; {}",
        escape_controls(&agent.agent),
        reached.join("; ")
    );
    let _ = write!(
        out,
        "<svg class=\"cap-use\" viewBox=\"0 0 {width} {CAP_CHART_HEIGHT_PX}\" role=\"img\" \
         aria-label=\"{l}\"><title>{l}</title>",
        l = escape_html(&label)
    );
    // Axes: counts at 0, the cap and the top; hours along the bottom.
    for value in [0.0, cap as f64, y_max] {
        let y = px(y_of(value));
        let _ = write!(
            out,
            "<line x1=\"{CAP_CHART_LEFT_PX}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#eaeef2\"/>\
             <text x=\"{}\" y=\"{y}\" text-anchor=\"end\" dy=\"4\">{}</text>",
            px(width - CHART_RIGHT_PX),
            px(CAP_CHART_LEFT_PX - 4.0),
            fmt_count(value)
        );
    }
    for hour in (0..=24).step_by(AXIS_TICK_HOURS as usize) {
        let x = px(x_of(hour * MS_PER_HOUR));
        // The ends' labels stay inside the chart.
        let anchor = match hour {
            0 => "start",
            24 => "end",
            _ => "middle",
        };
        let _ = write!(
            out,
            "<text x=\"{x}\" y=\"{}\" text-anchor=\"{anchor}\">{hour:02}:00</text>",
            px(bottom + 16.0)
        );
    }
    let _ = write!(
        out,
        "<line class=\"cap\" x1=\"{CAP_CHART_LEFT_PX}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" \
         stroke=\"{CAP_LINE_COLOUR}\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/>",
        px(width - CHART_RIGHT_PX),
        y = px(y_of(cap as f64)),
    );
    // Each day a step line: flat between runs, one up at each start, on to the day's end.
    for (day, day_starts) in starts.iter().enumerate().rev() {
        let mut points = vec![format!("{},{}", px(x_of(0)), px(y_of(0.0)))];
        for (i, ms) in day_starts.iter().enumerate() {
            let x = px(x_of(*ms));
            points.push(format!("{x},{}", px(y_of(i as f64))));
            points.push(format!("{x},{}", px(y_of(i as f64 + 1.0))));
        }
        points.push(format!(
            "{},{}",
            px(x_of(DAY_MS)),
            px(y_of(day_starts.len() as f64))
        ));
        let _ = write!(
            out,
            "<polyline class=\"cap-day\" points=\"{}\" fill=\"none\" stroke=\"{}\" \
             stroke-width=\"1.5\"><title>day {}</title></polyline>",
            points.join(" "),
            CAP_DAY_COLOURS[day % CAP_DAY_COLOURS.len()],
            day + 1
        );
    }
    // The day lines' key, top left.
    for day in 0..starts.len() {
        let x = CAP_CHART_LEFT_PX + 8.0 + day as f64 * 52.0;
        let _ = write!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"3\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">day {}</text>",
            px(x),
            px(CAP_CHART_TOP_PX + 4.0),
            CAP_DAY_COLOURS[day % CAP_DAY_COLOURS.len()],
            px(x + 13.0),
            px(CAP_CHART_TOP_PX + 8.0),
            day + 1
        );
    }
    out.push_str("</svg>");
}

fn cost(out: &mut String, report: &FleetReport) {
    out.push_str(
        "<h2>Cost per day</h2>\n<p class=\"meta\">Median over the seeds (bar), min–max \
         (whisker), in USD from the price table.</p>\n<div class=\"chart\">",
    );
    cost_svg(
        out,
        "cost",
        &report.fleet,
        report.days,
        CHART_WIDTH_PX,
        COST_CHART_HEIGHT_PX,
        "the fleet",
    );
    out.push_str("</div>\n<div class=\"small-multiples\">\n");
    for agent in &report.agents {
        let _ = write!(
            out,
            "<figure><figcaption>{}</figcaption><div class=\"chart\">",
            text(&agent.agent)
        );
        cost_svg(
            out,
            "cost agent-cost",
            &agent.days,
            report.days,
            COST_SMALL_WIDTH_PX,
            COST_SMALL_HEIGHT_PX,
            &agent.agent,
        );
        out.push_str("</div></figure>\n");
    }
    out.push_str("</div>\n");
}

fn cost_svg(
    out: &mut String,
    class: &str,
    spreads: &DaySpreads,
    days: u32,
    width: f64,
    height: f64,
    whose: &str,
) {
    let per_day: Vec<Spread> = (0..days as usize)
        .map(|d| super::table::day_spread(spreads, "cost_usd", d).unwrap_or_default())
        .collect();
    let top = per_day.iter().map(|s| s.max).fold(0.0, f64::max);
    let y_max = nice_ceiling(top);
    let plot_w = width - COST_CHART_LEFT_PX - CHART_RIGHT_PX;
    let plot_h = height - COST_CHART_TOP_PX - COST_CHART_BOTTOM_PX;
    let bottom = COST_CHART_TOP_PX + plot_h;
    let slot = plot_w / f64::from(days.max(1));
    let bar = slot * COST_BAR_SHARE;
    let y_of = |usd: f64| bottom - usd / y_max * plot_h;
    let described: Vec<String> = per_day
        .iter()
        .enumerate()
        .map(|(d, s)| format!("day {}: {}", d + 1, spread_cell(*s, Unit::Usd)))
        .collect();
    let label = format!(
        "Cost per day of {}: {}",
        escape_controls(whose),
        described.join("; ")
    );
    let _ = write!(
        out,
        "<svg class=\"{class}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"{l}\">\
         <title>{l}</title>",
        l = escape_html(&label)
    );
    for value in [0.0, y_max / 2.0, y_max] {
        let y = px(y_of(value));
        let _ = write!(
            out,
            "<line x1=\"{COST_CHART_LEFT_PX}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#eaeef2\"/>\
             <text x=\"{}\" y=\"{y}\" text-anchor=\"end\" dy=\"4\">{}</text>",
            px(width - CHART_RIGHT_PX),
            px(COST_CHART_LEFT_PX - 4.0),
            escape_html(&fmt_usd(value))
        );
    }
    for (d, s) in per_day.iter().enumerate() {
        let centre = COST_CHART_LEFT_PX + slot * (d as f64 + 0.5);
        let y = y_of(s.median);
        let _ = write!(
            out,
            "<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{COST_BAR_COLOUR}\" \
             opacity=\"0.75\"><title>day {}: {}</title></rect>",
            px(centre - bar / 2.0),
            px(y),
            px(bar),
            px(bottom - y),
            d + 1,
            escape_html(&spread_cell(*s, Unit::Usd))
        );
        let cap = bar * WHISKER_CAP_SHARE;
        let (y_lo, y_hi) = (px(y_of(s.min)), px(y_of(s.max)));
        let _ = write!(
            out,
            "<path class=\"whisker\" d=\"M{c} {y_lo}V{y_hi}M{l} {y_lo}H{r}M{l} {y_hi}H{r}\" \
             stroke=\"#1f2328\" fill=\"none\"/>\
             <text x=\"{c}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(bottom + 16.0),
            d + 1,
            c = px(centre),
            l = px(centre - cap),
            r = px(centre + cap),
        );
    }
    out.push_str("</svg>");
}

/// One breach as table cells: seed, instant, agent, expected, actual, replay.
fn breach_cells(breach: &Breach) -> String {
    format!(
        "<td>{}</td><td>{}</td><td class=\"text\">{}</td><td class=\"text\">{}</td>\
         <td class=\"text\">{}</td><td class=\"text\"><code>{}</code></td>",
        breach.seed,
        escape_html(&fmt_instant(breach.day, breach.at_ms)),
        breach
            .agent
            .as_deref()
            .map_or_else(|| "-".to_string(), text),
        text(&breach.expected),
        text(&breach.actual),
        text(&breach.replay)
    )
}

const BREACH_HEADERS: &str =
    "<th>seed</th><th>when</th><th>agent</th><th>expected</th><th>actual</th><th>replay</th>";

fn expectations(out: &mut String, report: &FleetReport) {
    out.push_str("<h2>Expectations</h2>\n");
    if report.expectations.is_empty() {
        out.push_str("<p>None: the fleet file has no <code>[expect]</code> section.</p>\n");
    } else {
        let _ = writeln!(
            out,
            "<div class=\"scroll\"><table class=\"expectations\"><thead><tr><th></th>\
             <th>scope</th><th>expectation</th>{BREACH_HEADERS}</tr></thead><tbody>"
        );
        for expectation in &report.expectations {
            let (mark, class) = if expectation.passed {
                ("✔", "pass")
            } else {
                ("✘", "fail")
            };
            let _ = write!(
                out,
                "<tr><td class=\"{class}\">{mark}</td><td class=\"text\">{}</td>\
                 <td class=\"text\">{}</td>",
                text(&expectation.scope),
                text(&expectation.expectation)
            );
            match &expectation.breach {
                Some(breach) => out.push_str(&breach_cells(breach)),
                None => out.push_str("<td></td><td></td><td></td><td></td><td></td><td></td>"),
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table></div>\n");
    }
    out.push_str("<h2>Invariant violations</h2>\n");
    if report.invariant_violations.is_empty() {
        out.push_str("<p class=\"pass\">None.</p>\n");
        return;
    }
    let _ = writeln!(
        out,
        "<div class=\"scroll\"><table class=\"violations\"><thead><tr>{BREACH_HEADERS}</tr>\
         </thead><tbody>"
    );
    for breach in &report.invariant_violations {
        let _ = writeln!(out, "<tr>{}</tr>", breach_cells(breach));
    }
    out.push_str("</tbody></table></div>\n");
}

fn fleet_table(out: &mut String, report: &FleetReport) {
    out.push_str(
        "<h2>Fleet, per day</h2>\n<p class=\"meta\">Median over the seeds, then min–max.</p>\n\
         <div class=\"scroll\"><table class=\"fleet\"><thead><tr><th>figure</th>",
    );
    for day in 1..=report.days {
        let _ = write!(out, "<th>day {day}</th>");
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in figure_rows(&report.fleet) {
        // A source, stop reason or refusal reason sits indented under its total.
        match row.label.strip_prefix("  ") {
            Some(sub) => {
                let _ = write!(out, "<tr><td class=\"sub\">{}</td>", escape_html(sub));
            }
            None => {
                let _ = write!(out, "<tr><td>{}</td>", escape_html(&row.label));
            }
        }
        for day in 0..report.days as usize {
            let _ = write!(
                out,
                "<td>{}</td>",
                escape_html(&day_cell(&report.fleet, &row, day))
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

fn agents_table(out: &mut String, report: &FleetReport) {
    if report.agents.is_empty() {
        return;
    }
    let columns: &[(&str, &str, Unit)] = &[
        ("wakeups", "wakeups", Unit::Count),
        ("runs", "runs", Unit::Count),
        ("ghost", "ghost_rate", Unit::Percent),
        ("LLM calls", "llm_invocations", Unit::Count),
        ("cost", "cost_usd", Unit::Usd),
        ("cap hits", "cap_hits", Unit::Count),
        ("breaker", "breaker_openings", Unit::Count),
        ("pauses", "pauses", Unit::Count),
        ("offline min", "offline_minutes", Unit::Count),
    ];
    out.push_str(
        "<h2>Agents, a typical day</h2>\n<p class=\"meta\">The median over the days of each \
         day's median over the seeds.</p>\n<div class=\"scroll\"><table class=\"agents\"><thead>\
         <tr><th>agent</th><th>cap</th>",
    );
    for (header, _, _) in columns {
        let _ = write!(out, "<th>{header}</th>");
    }
    out.push_str("<th>first cap hit</th></tr></thead><tbody>\n");
    for agent in &report.agents {
        let cap = agent
            .daily_cap
            .map_or_else(|| "-".to_string(), |c| c.to_string());
        let _ = write!(out, "<tr><td>{}</td><td>{cap}</td>", text(&agent.agent));
        for (_, figure, unit) in columns {
            let value = typical_day(&agent.days, figure)
                .map_or_else(|| "-".to_string(), |v| fmt_value(v, *unit));
            let _ = write!(out, "<td>{}</td>", escape_html(&value));
        }
        let first =
            earliest_cap_hit(&agent.days).map_or_else(|| "-".to_string(), fmt_minute_of_day);
        let _ = writeln!(out, "<td>{first}</td></tr>");
    }
    out.push_str("</tbody></table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::super::table::fixture::{report, run};
    use super::*;

    fn count(haystack: &str, needle: &str) -> usize {
        haystack.matches(needle).count()
    }

    /// The element that starts with `start` (up to its closing `</svg>`).
    fn svg_starting<'a>(page: &'a str, start: &str) -> &'a str {
        let from = page.find(start).unwrap_or_else(|| panic!("no {start:?}"));
        let to = from + page[from..].find("</svg>").expect("an unclosed svg");
        &page[from..to]
    }

    #[test]
    fn one_timeline_per_agent_a_cap_chart_per_capped_agent_and_cost_charts() {
        let page = render(&report());
        assert_eq!(count(&page, "<svg class=\"timeline\""), 2);
        // Only alpha has a daily cap.
        assert_eq!(count(&page, "<svg class=\"cap-use\""), 1);
        assert!(svg_starting(&page, "<svg class=\"cap-use\"").contains("Daily cap use of alpha"));
        // The fleet's cost chart, then one per agent.
        assert_eq!(count(&page, "<svg class=\"cost\""), 1);
        assert_eq!(count(&page, "<svg class=\"cost agent-cost\""), 2);
        // Every chart names itself for a screen reader.
        assert_eq!(
            count(&page, "<svg "),
            count(&page, "role=\"img\" aria-label=\"")
        );
        assert_eq!(count(&page, "<svg "), 6);
    }

    #[test]
    fn timelines_draw_runs_by_stop_reason_ghosts_apart_and_spans_as_bands() {
        let page = render(&report());
        let alpha = svg_starting(&page, "<svg class=\"timeline\"");
        assert!(alpha.contains("aria-label=\"Timeline of alpha: 6 runs (2 ghost), 1 paused"));
        // Two ghost runs a day apart are two marks in the ghost lane, grey.
        assert_eq!(count(alpha, "class=\"run ghost\""), 2);
        assert!(alpha.contains(&format!(
            "y=\"{TIMELINE_GHOST_TOP_PX}\" width=\"1.0\" height=\"{TIMELINE_GHOST_HEIGHT_PX}\" fill=\"{}\"",
            stop_colour("ghost")
        )));
        // The other four are in the runs lane in their stop reason's colour.
        assert_eq!(count(alpha, "class=\"run\""), 4);
        assert_eq!(count(alpha, stop_colour("end_turn")), 3);
        assert_eq!(count(alpha, stop_colour("pause_heartbeats")), 1);
        assert_eq!(count(alpha, "class=\"span\""), 1);
        assert!(alpha.contains(&format!("fill=\"{}\"", span_colour("paused"))));
        let beta_from = page.find("Timeline of beta").unwrap();
        let beta = &page[beta_from..];
        assert!(beta[..beta.find("</svg>").unwrap()].contains(span_colour("breaker_open")));
        // The legend names every stop reason on the page and the bands.
        for word in ["end_turn", "ghost", "pause_heartbeats", "llm_error"] {
            assert!(page.contains(&format!("run: {word}</span>")), "{word}");
        }
        assert!(page.contains("band: breaker_open"));
    }

    #[test]
    fn runs_that_touch_at_the_charts_resolution_merge_into_one_mark() {
        let runs: Vec<RunMark> = (0..100)
            .map(|i| run(0, i, 1, "timer", "end_turn"))
            .collect();
        let span_ms = (3 * DAY_MS) as f64;
        let plot = CHART_WIDTH_PX - TIMELINE_LEFT_PX - CHART_RIGHT_PX;
        let x_of = move |ms: u64| TIMELINE_LEFT_PX + ms as f64 / span_ms * plot;
        let marks = merged_marks(runs.iter(), &x_of);
        assert_eq!(marks.len(), 1);
        assert!(marks[0].x1 - marks[0].x0 >= x_of(100 * 60_000) - x_of(0));
        // A gap of more than a pixel keeps two marks; another colour starts a new one.
        let apart = [
            run(0, 0, 1, "timer", "end_turn"),
            run(0, 120, 1, "timer", "end_turn"),
        ];
        assert_eq!(merged_marks(apart.iter(), &x_of).len(), 2);
        let recoloured = [
            run(0, 0, 1, "timer", "end_turn"),
            run(0, 1, 1, "timer", "llm_error"),
        ];
        assert_eq!(merged_marks(recoloured.iter(), &x_of).len(), 2);
    }

    #[test]
    fn cap_use_counts_the_runs_started_each_day_against_the_cap() {
        let report = report();
        let starts = run_starts_by_day(&report.agents[0].runs, 3);
        let minutes: Vec<Vec<u64>> = starts
            .iter()
            .map(|d| d.iter().map(|ms| ms / 60_000).collect())
            .collect();
        assert_eq!(minutes, [vec![60, 120, 180, 240], vec![30, 600], vec![]]);
        let page = render(&report);
        let chart = svg_starting(&page, "<svg class=\"cap-use\"");
        assert!(
            chart.contains(
                "cap 4; day 1: 4 runs, cap reached at 04:00; day 2: 2 runs, cap not reached; \
             day 3: 0 runs, cap not reached"
            ),
            "{chart}"
        );
        assert_eq!(count(chart, "<polyline class=\"cap-day\""), 3);
        assert_eq!(count(chart, "<line class=\"cap\""), 1);
        // Day 1's line climbs four steps: two points a run, plus its two ends.
        let day1 = chart
            .split("<polyline")
            .find(|p| p.contains("<title>day 1</title>"))
            .unwrap();
        let points = day1
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(points.split(' ').count(), 2 + 2 * 4);
    }

    #[test]
    fn cost_bars_are_medians_with_min_max_whiskers() {
        let page = render(&report());
        let fleet = svg_starting(&page, "<svg class=\"cost\"");
        assert!(fleet.contains(
            "Cost per day of the fleet: day 1: $1.25 ($0.50–$2.00); day 2: $1.00 ($0.75–$1.50); \
             day 3: $0.0040"
        ), "{fleet}");
        assert_eq!(count(fleet, "<rect class=\"bar\""), 3);
        assert_eq!(count(fleet, "<path class=\"whisker\""), 3);
        // The axis tops at $2 (the highest max); day 1's bar reaches $1.25 of it.
        let plot_h = COST_CHART_HEIGHT_PX - COST_CHART_TOP_PX - COST_CHART_BOTTOM_PX;
        let bar_h = px(plot_h * 1.25 / 2.0);
        assert!(fleet.contains(&format!("height=\"{bar_h}\"")), "{fleet}");
    }

    #[test]
    fn expectations_violations_and_the_fleet_table_are_on_the_page() {
        let page = render(&report());
        assert!(page.contains("<div class=\"value fail\">FAILED</div>"));
        assert!(
            page.contains(
                "<td class=\"fail\">✘</td><td class=\"text\">alpha</td><td class=\"text\">\
             no_cap_hit_before = &quot;18:00&quot;</td><td>2</td><td>day 3 10:15:07</td>"
            ),
            "{page}"
        );
        assert!(page.contains(
            "<code>vigil-sim fleet examples/fleet.toml --seed 2 --days 3 --trace</code>"
        ));
        assert!(page.contains("<td>3</td><td>day 1 00:30:01</td><td class=\"text\">beta</td>"));
        assert!(page
            .contains("<tr><td>wakeups</td><td>12 (10–15)</td><td>13 (11–14)</td><td>9</td></tr>"));
        assert!(page.contains(
            "<tr><td>first cap hit</td><td>09:14</td><td>-</td><td>10:15 (10:00–10:30)</td></tr>"
        ));
    }

    #[test]
    fn the_page_is_self_contained() {
        let page = render(&report());
        for external in ["http://", "https://", "src=", "@import", "url(", "<link"] {
            assert!(!page.contains(external), "{external}");
        }
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<title>Fleet simulation: examples/fleet.toml</title>"));
        assert!(page.contains("<meta name=\"viewport\""));
        assert_eq!(count(&page, "<script>"), 1);
    }

    #[test]
    fn the_same_report_gives_the_same_bytes_also_read_back_from_json() {
        let report = report();
        let page = render(&report);
        assert_eq!(page, render(&report));
        let json = serde_json::to_string(&report).unwrap();
        let read_back: FleetReport = serde_json::from_str(&json).unwrap();
        assert_eq!(page, render(&read_back));
        // Runs and spans given in another order draw the same page, even runs that share their
        // start and end.
        let mut report = report;
        report.agents[0]
            .runs
            .push(run(0, 60, 5, "timer", "llm_error"));
        let page = render(&report);
        let mut shuffled = report.clone();
        shuffled.agents[1].spans.reverse();
        shuffled.agents[0].runs.reverse();
        assert_eq!(page, render(&shuffled));
    }

    #[test]
    fn hostile_text_is_escaped_everywhere() {
        let mut report = report();
        let hostile = "<script>alert('x')</script>&\"\x1b[31m\u{202e}";
        report.agents[1].agent = hostile.to_string();
        report.agents[1].daily_cap = Some(2);
        report.agents[1].runs[0].stop = "<img src=x onerror=alert(1)>".to_string();
        report.agents[1].spans[0].kind = "<b>".to_string();
        report.fleet_file = hostile.to_string();
        report.faults = hostile.to_string();
        report.expectations[1].expectation = hostile.to_string();
        report.invariant_violations[0].replay = hostile.to_string();
        report
            .fleet
            .insert("refusals.<i>".to_string(), vec![Spread::default(); 3]);
        let page = render(&report);
        assert_eq!(
            count(&page, "<script>"),
            1,
            "only the layout check's script"
        );
        for raw in ["<img", "<b>", "<i>", "alert('x')", "\x1b", "\u{202e}"] {
            assert!(!page.contains(raw), "{raw:?} reached the page");
        }
        let escaped =
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\\x1b[31m\\u{202e}";
        // Title, heading, timeline, cap chart, cost chart, expectation, replay, ...
        assert!(count(&page, escaped) >= 8, "{page}");
        assert!(page.contains("run: &lt;img src=x onerror=alert(1)&gt;"));
    }

    #[test]
    fn escape_html_replaces_the_five_characters() {
        assert_eq!(
            escape_html("a&b<c>d\"e'f"),
            "a&amp;b&lt;c&gt;d&quot;e&#39;f"
        );
        assert_eq!(escape_html("plain ✔"), "plain ✔");
    }
}
