//! The `vigil-sim` binary as a user runs it: the exact result lines, the same trace hash from two
//! separate processes, and the lying-fsync switch making durability violations show up.
#![cfg(madsim)]

use std::process::{Command, Output};

fn vigil_sim(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vigil-sim"));
    command
        .args(args)
        .env_remove("VIGIL_SIM_LYING_FSYNC")
        .env_remove("VIGIL_SEED");
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().expect("vigil-sim runs")
}

fn last_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// Splits `k=v k=v ...` into pairs, checking the keys are exactly `keys` in order.
fn fields(line: &str, keys: &[&str]) -> Vec<(String, String)> {
    let pairs: Vec<(String, String)> = line
        .split_whitespace()
        .filter_map(|f| {
            f.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let got: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(got, keys, "unexpected result line: {line}");
    pairs
}

#[test]
fn run_line_is_exact_and_the_hash_is_the_same_in_two_processes() {
    let keys = [
        "seed",
        "scenario",
        "verdict",
        "trace_hash",
        "events",
        "virtual_s",
        "wall_ms",
    ];
    let first = vigil_sim(&["run", "--scenario", "smoke", "--seed", "4242"], &[]);
    let second = vigil_sim(&["run", "--scenario", "smoke", "--seed", "4242"], &[]);
    assert!(first.status.success() && second.status.success());
    let (a, b) = (
        fields(&last_line(&first), &keys),
        fields(&last_line(&second), &keys),
    );
    assert_eq!(a[0].1, "4242");
    assert_eq!(a[2].1, "pass");
    assert_eq!(a[3].1.len(), 16);
    assert!(a[3].1.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(a[5].1, "86400", "smoke simulates 24 hours");
    // Everything but the wall time must match between the two processes.
    assert_eq!(a[..6], b[..6]);
    let other = fields(
        &last_line(&vigil_sim(&["run", "--seed", "4243"], &[])),
        &keys,
    );
    assert_ne!(
        a[3].1, other[3].1,
        "different seeds should give different traces"
    );
}

#[test]
fn lying_fsync_makes_a_100_seed_sweep_report_durability_violations() {
    let output = vigil_sim(
        &["sweep", "--scenario", "smoke", "--seeds", "100"],
        &[("VIGIL_SIM_LYING_FSYNC", "1")],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = last_line(&output);
    assert!(line.starts_with("sweep "), "unexpected sweep line: {line}");
    let pairs = fields(&line, &["scenario", "seeds", "passed", "failed", "wall_ms"]);
    let failed: u64 = pairs[3].1.parse().unwrap();
    assert!(failed >= 1, "lying fsync went unnoticed: {line}");
    assert!(!output.status.success());
    let durability_failures = stdout
        .lines()
        .filter(|l| l.starts_with("FAILED seed=") && l.contains("invariant=durable_events_survive"))
        .count() as u64;
    assert!(
        durability_failures >= 1,
        "no durability violation among the failures:\n{stdout}"
    );
    // The replay command must reproduce the run, so it carries the switch.
    assert!(
        stdout.contains("replay: VIGIL_SIM_LYING_FSYNC=1 cargo xtask replay"),
        "{stdout}"
    );
}

#[test]
fn an_unknown_scenario_is_a_clear_error() {
    let output = vigil_sim(&["run", "--scenario", "nope", "--seed", "1"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("known scenarios: smoke, coalesce_burst, idempotency, crash_mid_run"));
}

#[test]
fn every_seed_of_the_regression_file_passes() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/regressions.txt");
    let output = vigil_sim(&["regress", file], &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let summary = last_line(&output);
    assert!(summary.starts_with("regress file="), "{summary}");
    assert!(summary.ends_with("failed=0"), "{summary}");
    assert!(
        !summary.contains("seeds=0 "),
        "the regression file lists seeds: {summary}"
    );
}

#[test]
fn a_sweep_writes_its_failures_to_a_file_that_regress_re_runs() {
    let dir = std::env::temp_dir().join(format!("vigil-regress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("failures.txt");
    let _ = std::fs::remove_file(&file);
    let path = file.to_str().unwrap();
    let lying = [("VIGIL_SIM_LYING_FSYNC", "1")];
    // A lying fsync makes seeds fail; their `<scenario> <seed>` lines go to the file.
    let sweep = vigil_sim(
        &[
            "sweep",
            "--scenario",
            "crash_mid_run",
            "--seeds",
            "20",
            "--failures-file",
            path,
        ],
        &lying,
    );
    assert!(!sweep.status.success());
    let written = std::fs::read_to_string(&file).expect("failures file written");
    let failed_seeds = written.lines().count();
    assert!(failed_seeds > 0, "{written}");
    assert!(
        written.lines().all(|l| l.starts_with("crash_mid_run ")),
        "{written}"
    );
    // Re-running the file in the same world fails again, seed for seed...
    let again = vigil_sim(&["regress", path], &lying);
    assert!(!again.status.success());
    let summary = last_line(&again);
    assert!(
        summary.ends_with(&format!("failed={failed_seeds}")),
        "{summary}"
    );
    // ...and with an honest disk every one of them passes.
    let honest = vigil_sim(&["regress", path], &[]);
    assert!(honest.status.success(), "{}", last_line(&honest));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_malformed_regression_file_names_the_line() {
    let dir = std::env::temp_dir().join(format!("vigil-regress-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.txt");
    std::fs::write(&file, "# ok\ncrash_mid_run 3\nsmoke three\n").unwrap();
    let output = vigil_sim(&["regress", file.to_str().unwrap()], &[]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 3: seed must be a number"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_summarises_and_writes_the_whole_trace_to_a_file() {
    let dir = std::env::temp_dir().join(format!("vigil-sim-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("trace.jsonl");
    let path = file.to_str().unwrap();
    let json = vigil_sim(
        &["replay", "4242", "smoke", "--out", path, "--format", "json"],
        &[],
    );
    assert!(json.status.success());
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&json.stdout).trim())
            .expect("one JSON object");
    let trace = std::fs::read_to_string(&file).expect("trace written");
    let records = trace.lines().count() as u64;
    assert_eq!(summary["records"], records);
    assert!(trace
        .lines()
        .all(|line| serde_json::from_str::<serde_json::Value>(line).is_ok()));
    let by_kind = summary["records_by_kind"].as_object().expect("counts");
    let counted: u64 = by_kind.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(
        counted, records,
        "every record is counted once: {by_kind:?}"
    );
    assert_eq!(by_kind["run_started"], 1);
    assert!(
        by_kind.keys().any(|k| k.starts_with("committed.")),
        "{by_kind:?}"
    );
    assert_eq!(summary["verdict"], "pass");
    assert_eq!(summary["violations"], serde_json::json!([]));

    // The text summary of the same seed: same hash, ends with the usual result line.
    let text = vigil_sim(&["replay", "4242", "smoke", "--out", path], &[]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("verdict: pass\n") && stdout.contains("violations: none\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("trace: {records} records written to {path}\n")),
        "{stdout}"
    );
    let last = last_line(&text);
    assert!(
        last.contains(&format!(
            "trace_hash={}",
            summary["trace_hash"].as_str().unwrap()
        )),
        "{last}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        trace,
        "same seed, same trace"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
