//! The HTML report of `vigil-sim fleet` opened in headless Chromium: the page loads from a file
//! with no network, every chart is laid out with a non-zero size at desktop (1280 px) and phone
//! (390 px) widths, the run marks of the timelines are drawn, and the page itself does not
//! overflow a phone's width. A screenshot lands in `target/fleet-report-screenshots/`, and in
//! `docs/fleet-simulation/report.png` with `VIGIL_UPDATE_SCREENSHOTS=1`.
//!
//! The layout figures come from the page's one inline script, which writes them on `load` into
//! `data-` attributes of `<body>` that `--dump-dom` prints. Without Chromium the test says it
//! skipped, and fails under CI (env `CI` set).
//!
//! A normal test (package `vigil-scenarios`, no madsim): the renderers are plain Rust.
#![cfg(not(madsim))]

use std::path::Path;

#[path = "support/chromium_page.rs"]
mod chromium_page;
use chromium_page::{body_attribute, browser, headless, png_size};

use vigil_scenarios::fleet_report::{
    html, table, AgentReport, Breach, DaySpreads, ExpectationResult, FleetReport, RunMark, Span,
    Spread, REPORT_FORMAT,
};

const DAY_MS: u64 = 86_400_000;
const MINUTE_MS: u64 = 60_000;
const DAYS: u32 = 7;
const SEEDS: u64 = 20;
/// Window sizes of the two views, in CSS pixels.
const DESKTOP_WIDTH_PX: u32 = 1280;
const DESKTOP_HEIGHT_PX: u32 = 2000;
const PHONE_WIDTH_PX: u32 = 390;
const PHONE_HEIGHT_PX: u32 = 844;

/// A figure that is `base` on each day, spread ± `spread` over the seeds.
fn steady(base: f64, spread: f64) -> Vec<Spread> {
    (0..DAYS)
        .map(|day| {
            let wobble = f64::from(day % 3) - 1.0;
            let median = (base + wobble * spread / 2.0).max(0.0);
            Spread {
                min: (median - spread).max(0.0),
                median,
                max: median + spread,
            }
        })
        .collect()
}

/// An agent woken every `interval_min` minutes, answering `[IDLE]` to every `ghost_every`th
/// wakeup, calling `pause_heartbeats` on every `pause_every`th, capped at `cap` runs a day.
fn agent(name: &str, interval_min: u64, cap: Option<u64>, ghost_every: u64) -> AgentReport {
    let mut runs = Vec::new();
    for day in 0..u64::from(DAYS) {
        let mut started_today = 0;
        let mut minute = interval_min / 2;
        while minute < 24 * 60 {
            if cap.is_some_and(|c| started_today >= c) {
                break;
            }
            let n = day * 1000 + minute;
            let stop = match n % ghost_every {
                0 => "end_turn",
                _ if n.is_multiple_of(97) => "llm_error",
                _ if n.is_multiple_of(61) => "pause_heartbeats",
                _ => "ghost",
            };
            let length_min = if stop == "ghost" { 1 } else { 4 + n % 9 };
            let started_ms = day * DAY_MS + minute * MINUTE_MS;
            runs.push(RunMark {
                started_ms,
                finished_ms: started_ms + length_min * MINUTE_MS,
                source: "timer".to_string(),
                stop: stop.to_string(),
            });
            started_today += 1;
            minute += interval_min;
        }
    }
    let per_day = runs.len() as f64 / f64::from(DAYS);
    let mut days = DaySpreads::new();
    days.insert("wakeups".into(), steady(per_day * 1.05, 3.0));
    days.insert("wakeups.timer".into(), steady(per_day, 2.0));
    days.insert("runs".into(), steady(per_day, 2.0));
    days.insert("runs.ghost".into(), steady(per_day * 0.7, 2.0));
    days.insert("runs.end_turn".into(), steady(per_day * 0.3, 2.0));
    days.insert("ghost_rate".into(), steady(0.7, 0.05));
    days.insert("llm_invocations".into(), steady(per_day * 1.6, 4.0));
    days.insert("input_tokens".into(), steady(per_day * 2_400.0, 900.0));
    days.insert("output_tokens".into(), steady(per_day * 310.0, 120.0));
    days.insert("cost_usd".into(), steady(per_day * 0.011, per_day * 0.003));
    days.insert(
        "cap_hits".into(),
        steady(if cap.is_some() { 6.0 } else { 0.0 }, 0.0),
    );
    if cap.is_some() {
        days.insert("first_cap_hit_minute".into(), steady(1_050.0, 40.0));
    }
    days.insert("breaker_openings".into(), steady(0.0, 1.0));
    days.insert("pauses".into(), steady(1.0, 1.0));
    days.insert("offline_minutes".into(), steady(4.0, 4.0));
    AgentReport {
        agent: name.to_string(),
        daily_cap: cap,
        days,
        runs,
        spans: vec![
            Span {
                from_ms: 9 * 60 * MINUTE_MS,
                to_ms: 13 * 60 * MINUTE_MS,
                kind: "paused".to_string(),
            },
            Span {
                from_ms: 2 * DAY_MS + 300 * MINUTE_MS,
                to_ms: 2 * DAY_MS + 420 * MINUTE_MS,
                kind: "offline".to_string(),
            },
            Span {
                from_ms: 4 * DAY_MS + 600 * MINUTE_MS,
                to_ms: 4 * DAY_MS + 640 * MINUTE_MS,
                kind: "breaker_open".to_string(),
            },
        ],
    }
}

/// A week of three agents over 20 seeds: the paper's 5-minute storm without a cap, the same
/// agent at 30 minutes with a cap, and a quiet one; one broken expectation, one violation.
fn week_report() -> FleetReport {
    let agents = vec![
        agent("travel_rescue", 5, None, 9),
        agent("travel_rescue_capped", 30, Some(40), 4),
        agent("<inbox>\u{1b}[31m", 120, Some(6), 2),
    ];
    // The fleet's figures: the agents' summed (a simplification: a sum of medians), the ghost
    // rate averaged, the first cap hit the earliest.
    let mut fleet = DaySpreads::new();
    for figure in agents[1].days.keys() {
        if figure == "ghost_rate" || figure == "first_cap_hit_minute" {
            fleet.insert(figure.clone(), agents[1].days[figure].clone());
            continue;
        }
        let summed: Vec<Spread> = (0..DAYS as usize)
            .map(|d| {
                let sum = |f: fn(&Spread) -> f64| {
                    agents
                        .iter()
                        .filter_map(|a| a.days.get(figure))
                        .map(|v| f(&v[d]))
                        .sum()
                };
                Spread {
                    min: sum(|s| s.min),
                    median: sum(|s| s.median),
                    max: sum(|s| s.max),
                }
            })
            .collect();
        fleet.insert(figure.clone(), summed);
    }
    fleet.insert("refusals.daily_cap".into(), steady(12.0, 2.0));
    let replay =
        "vigil-sim fleet examples/travel_rescue.toml --seed 4 --days 7 --trace trace.jsonl";
    FleetReport {
        format: REPORT_FORMAT,
        fleet_file: "examples/travel_rescue.toml".to_string(),
        days: DAYS,
        seeds: (1..=SEEDS).collect(),
        faults: "typical".to_string(),
        fleet,
        agents,
        expectations: vec![
            ExpectationResult {
                expectation: "max_invocations_per_day = 100".to_string(),
                scope: "travel_rescue".to_string(),
                passed: false,
                breach: Some(Breach {
                    seed: 4,
                    at_ms: 9 * 60 * MINUTE_MS,
                    day: 1,
                    agent: Some("travel_rescue".to_string()),
                    expected: "at most 100 LLM invocations a day".to_string(),
                    actual: "101 by 09:00 on day 1".to_string(),
                    replay: replay.to_string(),
                }),
            },
            ExpectationResult {
                expectation: "no_cap_hit_before = \"16:00\"".to_string(),
                scope: "travel_rescue_capped".to_string(),
                passed: true,
                breach: None,
            },
        ],
        invariant_violations: vec![Breach {
            seed: 11,
            at_ms: 3 * DAY_MS + 7_261_000,
            day: 4,
            agent: None,
            expected: "wakeups_accounted: every wakeup is queued, coalesced or refused".to_string(),
            actual: "wakeup 812 neither queued nor refused".to_string(),
            replay: replay.replace("--seed 4", "--seed 11"),
        }],
    }
}

#[test]
fn the_html_report_renders_its_charts_in_headless_chromium() {
    let Some(browser) = browser() else {
        return;
    };
    let report = week_report();
    let page_html = html::render(&report);
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fleet-report-html");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let page = tmp.join("report.html");
    std::fs::write(&page, &page_html).unwrap();
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("fleet-report-screenshots");
    std::fs::create_dir_all(&kept).unwrap();
    std::fs::copy(&page, kept.join("report.html")).unwrap();
    // The terminal table of the same report beside it, to compare by eye.
    std::fs::write(kept.join("report.txt"), table::render(&report)).unwrap();

    // What the page should show: a timeline and a cost chart per agent, a cap chart per capped
    // agent, the fleet's cost chart; every run mark of the timelines.
    let capped = report
        .agents
        .iter()
        .filter(|a| a.daily_cap.is_some())
        .count() as u64;
    let agents = report.agents.len() as u64;
    let charts = 2 * agents + capped + 1;
    let run_marks = page_html.matches("<rect class=\"run").count() as u64;
    assert_eq!(page_html.matches("<svg ").count() as u64, charts);
    assert!(run_marks > 0);

    for (view, width, height) in [
        ("desktop", DESKTOP_WIDTH_PX, DESKTOP_HEIGHT_PX),
        ("phone", PHONE_WIDTH_PX, PHONE_HEIGHT_PX),
    ] {
        let window = format!("--window-size={width},{height}");
        let dom = headless(
            &browser,
            &tmp,
            &page,
            &[window.clone(), "--dump-dom".into()],
        );
        assert_eq!(body_attribute(&dom, "svgs-total"), charts, "{view}");
        assert_eq!(
            body_attribute(&dom, "svgs-rendered"),
            charts,
            "{view}: a chart laid out empty"
        );
        assert_eq!(
            body_attribute(&dom, "run-marks-rendered"),
            run_marks,
            "{view}"
        );
        assert_eq!(
            body_attribute(&dom, "page-overflow-px"),
            0,
            "{view}: the page is wider than the window"
        );
        // The hostile agent name arrived as text, not as markup or a terminal escape.
        assert!(dom.contains("&lt;inbox&gt;\\x1b[31m"), "{view}");

        let screenshot = tmp.join(format!("report-{view}.png"));
        headless(
            &browser,
            &tmp,
            &page,
            &[window, format!("--screenshot={}", screenshot.display())],
        );
        let png = std::fs::read(&screenshot).expect("the browser wrote its screenshot");
        assert_eq!(png_size(&png), (width, height), "{view}");
        std::fs::copy(&screenshot, kept.join(format!("report-{view}.png"))).unwrap();
        if view == "desktop" && std::env::var("VIGIL_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
            let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fleet-simulation");
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::copy(&screenshot, docs.join("report.png")).unwrap();
        }
    }
}
