//! `vigil-sim fleet FILE` as a user runs it (issue 19): the travel_rescue pair fails and passes
//! its expectation, a fleet file with an error gets the runtime's own message, the JSON report
//! agrees with counts taken straight from the written trace, and the same seeds give the same
//! report bytes. Few days and seeds: each test simulates at most a few agent-days.
#![cfg(madsim)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "support/chromium_page.rs"]
mod chromium_page;

const DAY_MS: u64 = 24 * 60 * 60 * 1_000;

fn example(name: &str) -> String {
    format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn vigil_sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vigil-sim"))
        .args(args)
        .env_remove("VIGIL_SIM_LYING_FSYNC")
        .env_remove("VIGIL_SEED")
        .output()
        .expect("vigil-sim runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn report(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("the report is JSON ({e}); stderr:\n{}", stderr(output)))
}

/// Every day's (min, median, max) of figure `key` of the first agent.
fn agent_days(report: &serde_json::Value, key: &str) -> Vec<(f64, f64, f64)> {
    report["agents"][0]["days"][key]
        .as_array()
        .unwrap_or_else(|| panic!("figure {key} in the report"))
        .iter()
        .map(|s| {
            (
                s["min"].as_f64().unwrap(),
                s["median"].as_f64().unwrap(),
                s["max"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-sim-fleet-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The Heart paper's travel_rescue storm: a 5-minute timer without a cap makes about 288
/// wakeups a day and breaks `max_invocations_per_day = 48`, with the seed, the agent and the
/// command that replays it; 30 minutes with a cap of 48 keeps it.
#[test]
fn travel_rescue_breaks_its_expectation_and_the_fix_keeps_it() {
    let storm_file = example("travel_rescue.toml");
    let storm = vigil_sim(&[
        "fleet",
        &storm_file,
        "--days",
        "2",
        "--seeds",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(storm.status.code(), Some(1), "{}", stderr(&storm));
    let json = report(&storm);
    for (day, (min, _, max)) in agent_days(&json, "wakeups").into_iter().enumerate() {
        // 86,400 s / 300 s; a crash's downtime (at most 10 minutes) costs a slot or two.
        assert!(
            (270.0..=290.0).contains(&min) && max <= 290.0,
            "day {}: {min}..{max} wakeups",
            day + 1
        );
    }
    let expectation = &json["expectations"][0];
    assert_eq!(expectation["expectation"], "max_invocations_per_day = 48");
    assert_eq!(expectation["passed"], false);
    let breach = &expectation["breach"];
    assert_eq!(breach["seed"], 1);
    assert_eq!(breach["agent"], "travel_rescue");
    let replay = format!(
        "vigil-sim fleet {storm_file} --seed 1 --days 2 --faults typical --trace vigil-sim-fleet-1.jsonl"
    );
    assert_eq!(breach["replay"], replay.as_str());
    let printed = stderr(&storm);
    assert!(
        printed.contains("FAILED expectation `max_invocations_per_day = 48` (fleet): seed 1")
            && printed.contains("agent travel_rescue")
            && printed.contains(&format!("replay:   {replay}")),
        "{printed}"
    );

    let fixed = vigil_sim(&[
        "fleet",
        &example("travel_rescue_fixed.toml"),
        "--days",
        "2",
        "--seeds",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(fixed.status.code(), Some(0), "{}", stderr(&fixed));
    let json = report(&fixed);
    for (_, _, max) in agent_days(&json, "llm_invocations") {
        assert!(max <= 48.0, "{max} invocations in a day");
    }
    assert!(json["expectations"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["passed"] == true));
}

/// The fleet file is read by the runtime's own `Fleet::load`: a mistake gets exactly its
/// message, which `vigil serve --fleet` prints for the same file (tests/cli.rs), and exit
/// status 2.
#[test]
fn a_fleet_file_with_an_error_gets_the_runtimes_message() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/broken_fleet.toml"
    ))
    .to_path_buf();
    let expected = vigil::fleet::Fleet::load(&path).unwrap_err().to_string();
    assert!(expected.contains("intreval_ms"), "{expected}");
    let output = vigil_sim(&[
        "fleet",
        path.to_str().unwrap(),
        "--days",
        "1",
        "--seeds",
        "1",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stderr(&output), format!("error: {expected}\n"));
    // And the simulator's own sections name their field.
    let path = scratch("bad-world.toml");
    std::fs::write(
        &path,
        "[[agents]]\nname = \"scout\"\n[simulation.agent]\nidle_rate = 2.0\n",
    )
    .unwrap();
    let output = vigil_sim(&[
        "fleet",
        path.to_str().unwrap(),
        "--days",
        "1",
        "--seeds",
        "1",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("simulation.agent.idle_rate = 2"),
        "{}",
        stderr(&output)
    );
}

/// Per agent and day from the trace file alone: finished runs, usage records, wakeups asked.
/// Where day 1 starts in a written trace, in virtual ms: its first record names it.
fn day_one_ms(text: &str) -> u64 {
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let plan = first["event"]["plan"].as_str().unwrap().to_string();
    plan.split(' ')
        .find_map(|word| word.strip_prefix("day1_at_ms="))
        .unwrap_or_else(|| panic!("day1_at_ms in {plan}"))
        .parse()
        .unwrap()
}

fn counts_from_trace(path: &Path) -> BTreeMap<(String, u64), [u64; 3]> {
    let text = std::fs::read_to_string(path).unwrap();
    let day_one = day_one_ms(&text);
    let mut names = BTreeMap::new();
    let mut counts: BTreeMap<(String, u64), [u64; 3]> = BTreeMap::new();
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let event = &record["event"];
        if event["type"] != "committed" {
            continue;
        }
        let inner = &event["event"];
        let kind = inner["type"].as_str().unwrap();
        if kind == "agent_created" {
            names.insert(
                inner["agent"].as_u64().unwrap(),
                inner["name"].as_str().unwrap().to_string(),
            );
            continue;
        }
        let slot = match kind {
            "run_finished" => 0,
            "usage_recorded" => 1,
            "wakeup_queued" | "wakeup_coalesced" | "wakeup_refused" => 2,
            _ => continue,
        };
        let agent = names[&inner["agent"].as_u64().unwrap()].clone();
        let day = record["t_ms"].as_u64().unwrap().saturating_sub(day_one) / DAY_MS;
        counts.entry((agent, day)).or_default()[slot] += 1;
    }
    counts
}

/// One seed's JSON report says what its trace says: the report is computed from the trace.
#[test]
fn the_json_report_agrees_with_the_trace_it_came_from() {
    let trace = scratch("seed-3.jsonl");
    let output = vigil_sim(&[
        "fleet",
        &example("fleet.toml"),
        "--seed",
        "3",
        "--days",
        "1",
        "--format",
        "json",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert!(
        output.status.code() == Some(0) || output.status.code() == Some(1),
        "{}",
        stderr(&output)
    );
    let json = report(&output);
    assert_eq!(json["seeds"], serde_json::json!([3]));
    let counts = counts_from_trace(&trace);
    let mut compared = 0;
    for agent in json["agents"].as_array().unwrap() {
        let name = agent["agent"].as_str().unwrap();
        for (slot, key) in ["runs", "llm_invocations", "wakeups"]
            .into_iter()
            .enumerate()
        {
            let days = agent["days"][key].as_array().unwrap();
            for (day, spread) in days.iter().enumerate() {
                let from_trace = counts
                    .get(&(name.to_string(), day as u64))
                    .map_or(0, |c| c[slot]);
                // One seed: min, median and max are its value.
                for side in ["min", "median", "max"] {
                    assert_eq!(
                        spread[side].as_f64().unwrap(),
                        from_trace as f64,
                        "{name} day {} {key} ({side})",
                        day + 1
                    );
                }
                compared += from_trace;
            }
        }
    }
    assert!(compared > 1_000, "the example fleet is busy: {compared}");
}

/// The same seeds give a byte-identical JSON report, however the seeds are spread over
/// threads.
#[test]
fn the_same_seeds_give_the_same_report_bytes() {
    let file = example("travel_rescue_fixed.toml");
    let run = |jobs: &str| {
        vigil_sim(&[
            "fleet", &file, "--days", "1", "--seeds", "3", "--jobs", jobs, "--format", "json",
        ])
    };
    let (one, two) = (run("1"), run("3"));
    assert_eq!(one.status.code(), Some(0), "{}", stderr(&one));
    assert!(!one.stdout.is_empty());
    assert_eq!(one.stdout, two.stdout);
    // And a different seed set gives a different report (the comparison can fail).
    let other = vigil_sim(&[
        "fleet", &file, "--days", "1", "--seed", "9", "--format", "json",
    ]);
    assert_ne!(one.stdout, other.stdout);
}

/// A breach's instant is the moment the limit was passed: for `max_invocations_per_day = 48`,
/// the 49th model call of the day in the replayed seed's trace.
#[test]
fn a_breach_names_the_instant_the_replayed_trace_shows() {
    let trace = scratch("storm-1.jsonl");
    let output = vigil_sim(&[
        "fleet",
        &example("travel_rescue.toml"),
        "--seed",
        "1",
        "--days",
        "1",
        "--format",
        "json",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let breach = report(&output)["expectations"][0]["breach"].clone();
    let text = std::fs::read_to_string(&trace).unwrap();
    let forty_ninth = text
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|r| {
            r["event"]["type"] == "committed" && r["event"]["event"]["type"] == "usage_recorded"
        })
        .nth(48)
        .expect("more than 48 model calls on day 1");
    // Day 1 starts at the first local midnight after the simulation's start: the trace's
    // first record names that instant, and the node's first event's wall clock puts it at
    // 00:00 in the agent's time zone (within the node's skew of at most 2 s).
    let records: Vec<serde_json::Value> = text
        .lines()
        .take(4)
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let plan = records[0]["event"]["plan"].as_str().unwrap();
    let lead_ms = day_one_ms(&text);
    assert!(plan.contains("day_zone=America/New_York"), "{plan}");
    let first = records
        .iter()
        .find(|r| r["event"]["type"] == "committed")
        .unwrap();
    let wall_ms = first["event"]["event"]["at_ms"].as_u64().unwrap()
        - first["t_ms"].as_u64().unwrap()
        + lead_ms;
    let local = jiff::Timestamp::from_millisecond(wall_ms as i64)
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::get("America/New_York").unwrap());
    let from_midnight_s = i64::from(local.hour()) * 3_600
        + i64::from(local.minute()) * 60
        + i64::from(local.second());
    let off_s = from_midnight_s.min(86_400 - from_midnight_s);
    assert!(off_s <= 3, "day 1 starts at {local}, not a local midnight");

    let forty_ninth_ms = forty_ninth["t_ms"].as_u64().unwrap();
    assert_eq!(breach["at_ms"].as_u64().unwrap(), forty_ninth_ms - lead_ms);
    assert_eq!(breach["day"], 1);
    // 48 five-minute slots after the first (created in the first minute, its grid jittered by
    // less than an interval): a little after 04:00.
    let at_ms = breach["at_ms"].as_u64().unwrap();
    assert!(
        (4 * 3_600_000..4 * 3_600_000 + 10 * 60_000).contains(&at_ms),
        "the 49th call at {at_ms} ms into day 1"
    );
}

/// `--world FILE` replaces the fleet file's `[simulation]`, and `--faults FILE` reads a
/// profile: a model that never answers `[IDLE]` leaves no ghost run, and the report names the
/// profile file.
#[test]
fn a_world_file_and_a_fault_profile_file_are_used() {
    let world = scratch("world.toml");
    std::fs::write(
        &world,
        "[simulation.agent]\nidle_rate = 0.0\ntool_call_rate = 0.0\nrest_rate = 0.0\ninputs_per_day = 0\n",
    )
    .unwrap();
    let faults = scratch("faults.toml");
    std::fs::write(&faults, "[crash]\nper_day = 0\n").unwrap();
    let file = example("travel_rescue_fixed.toml");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "fleet",
            file.as_str(),
            "--days",
            "1",
            "--seed",
            "4",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let output = vigil_sim(&args);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        report(&output)
    };
    let with_file = run(&[]);
    let (_, ghosts, _) = agent_days(&with_file, "ghost_runs")[0];
    assert!(
        ghosts > 40.0,
        "the file's world answers [IDLE] 99 % of the time: {ghosts}"
    );
    let with_world = run(&[
        "--world",
        world.to_str().unwrap(),
        "--faults",
        faults.to_str().unwrap(),
    ]);
    assert_eq!(agent_days(&with_world, "ghost_runs")[0], (0.0, 0.0, 0.0));
    assert!(agent_days(&with_world, "runs.end_turn")[0].0 > 40.0);
    assert_eq!(with_world["faults"], faults.to_str().unwrap());
}

/// The page `--format html` writes, opened in headless Chromium from its file: every chart the
/// page holds is laid out with a non-zero size, every run mark is drawn, and each agent of the
/// JSON report of the same seeds is on the page. Without Chromium the test says it skipped
/// (fails under CI).
#[test]
fn the_html_report_of_a_real_run_shows_its_charts_in_chromium() {
    let Some(browser) = chromium_page::browser() else {
        return;
    };
    let file = example("travel_rescue_fixed.toml");
    let page = scratch("travel_rescue_fixed.html");
    let args = ["fleet", &file, "--days", "2", "--seeds", "2"];
    let written = vigil_sim(
        &[
            &args[..],
            &["--format", "html", "--out", page.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(written.status.code(), Some(0), "{}", stderr(&written));
    let json = report(&vigil_sim(&[&args[..], &["--format", "json"]].concat()));
    let html = std::fs::read_to_string(&page).expect("the page was written");
    let charts = html.matches("<svg ").count() as u64;
    let run_marks = html.matches("<rect class=\"run").count() as u64;
    // A timeline and a cost chart per agent, a cap chart for the capped one, the fleet's cost.
    let agents = json["agents"].as_array().unwrap();
    assert_eq!(charts, 2 * agents.len() as u64 + 2, "{charts} charts");
    assert!(run_marks > 0, "no run drawn");

    let work = scratch("chromium");
    std::fs::create_dir_all(&work).unwrap();
    let dom = chromium_page::headless(
        &browser,
        &work,
        &page,
        &[
            "--window-size=1280,2000".to_string(),
            "--dump-dom".to_string(),
        ],
    );
    assert_eq!(chromium_page::body_attribute(&dom, "svgs-total"), charts);
    assert_eq!(
        chromium_page::body_attribute(&dom, "svgs-rendered"),
        charts,
        "a chart laid out empty"
    );
    assert_eq!(
        chromium_page::body_attribute(&dom, "run-marks-rendered"),
        run_marks
    );
    for agent in agents {
        let name = agent["agent"].as_str().unwrap();
        assert!(dom.contains(name), "{name} not on the page");
    }
}

/// A fleet larger than one page of `GET /v1/agents` (1,000 agents) is read whole by the
/// simulation's probes: every agent acknowledged is found on some page, and each runs. Light
/// agents (scripted, a timer every 6 hours, no host pulsing) keep the day cheap.
#[test]
fn a_fleet_of_more_than_one_page_of_agents_is_probed_whole() {
    const AGENTS: usize = 1_005;
    let mut text = String::new();
    for i in 0..AGENTS {
        text.push_str(&format!(
            "[[agents]]\nname = \"a{i:04}\"\nheartbeat = {{ interval_ms = 21_600_000 }}\n\
             [agents.adapter]\ntype = \"scripted\"\nsteps = [{{ duration_ms = 1_000, outcome = \"succeeded\" }}]\n\n"
        ));
    }
    let file = scratch("thousand.toml");
    std::fs::write(&file, text).unwrap();
    let output = vigil_sim(&[
        "fleet",
        file.to_str().unwrap(),
        "--days",
        "1",
        "--seeds",
        "1",
        "--faults",
        "none",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json = report(&output);
    let agents = json["agents"].as_array().expect("agents in the report");
    assert_eq!(agents.len(), AGENTS);
    let last = agents.iter().find(|a| a["agent"] == "a1004").expect("the last agent is reported");
    let runs = &last["days"]["runs"][0];
    assert!(runs["min"].as_f64().unwrap() >= 3.0, "a 6-hour timer runs 3-4 times a day: {runs}");
}
