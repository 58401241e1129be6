//! `cargo xtask mutants`: the mutation score of the engine, shell, store and executor.
//!
//! cargo-mutants generates the mutants (`cargo mutants --list --json --diff`); this command
//! judges each one in a scratch worktree of the committed HEAD (`target/mutants/tree`):
//!
//! 1. the bounded simulation sweep ([`SIM_JUDGE`], built with `--cfg madsim`): a seed that fails
//!    any invariant, a sweep that misses its scenario's required coverage, or a sweep past its
//!    time limit catches the mutant;
//! 2. if the simulation missed it, the runtime's unit tests and the engine's model test
//!    (`cargo test -p vigil --lib --test engine_model`);
//! 3. if those missed it too, the integration tests of the real parts ([`REAL_PARTS`]).
//!
//! A mutant that does not build is unviable. Results are appended to a JSON-lines file, one
//! mutant a line, so a run can stop at its time budget and the next one resumes where it
//! stopped (or another shard runs beside it); `--report` prints the score from that file.
//! Why a judge of our own rather than `cargo mutants` running the tests: the simulation is a
//! second build (`--cfg madsim`, its own target directory) with a sweep rather than `cargo test`,
//! and the simulation's share of the catches is a figure of its own (docs/simulation.md).

use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{exit, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The code mutated: the engine, the shell, the store and the executor.
const MUTATED: &[&str] = &[
    "runtime/src/engine/",
    "runtime/src/shell.rs",
    "runtime/src/store/",
    "runtime/src/exec/",
];

/// The bounded sweep that judges a mutant: (scenario, seeds), cheapest first so that most
/// catches come early. About 45 s of simulation on 2 cores in the `mutants` profile.
const SIM_JUDGE: &[(&str, u32)] = &[
    ("crash_mid_run", 10),
    ("idempotency", 10),
    ("edges", 10),
    ("pause_basic", 5),
    ("pause_jump_backward", 5),
    ("pause_crash_after_write", 5),
    ("hostile", 5),
    ("coalesce_burst", 10),
    ("midnight", 10),
    ("liveness", 10),
    ("cli_agents", 10),
    ("breaker", 10),
    ("pause", 10),
    ("wakeup_storm", 5),
    ("heart_fleet_2h", 3),
    // Seeds 0-19: the first 20 that meet every required precondition, a graceful stop
    // whose grace runs out and a history read at its bound among them (about 1 seed in 50
    // and 1 in 14).
    ("tool_loop", 20),
    ("smoke", 3),
    ("alerts", 5),
    // Fewer seeds may meet none of its power cuts mid-commit (a required coverage).
    ("predicate_flap", 20),
];

/// The integration tests that judge a mutant the simulation and the unit tests missed: the
/// shell, store and executor against real HTTP(S), real processes and redb on disk. Not the
/// tests that drive the built binary (`cli`, `kill_restart`, `hostile`): slow, and the code they
/// reach is the same.
const REAL_PARTS: &[&str] = &[
    "http_api",
    "webhook_agents",
    "http_tools",
    "https_transport",
    "transcripts",
    "llm_agents",
    "coding_cli_agents",
    "process_agents",
];

/// A judge's time limit: this many times the unmutated tree's time, plus [`SLACK`]. A mutant
/// that loops forever is caught by the limit, as cargo-mutants counts timeouts.
const TIMEOUT_FACTOR: u32 = 3;
const SLACK: Duration = Duration::from_secs(30);
/// Without `--budget-min`, a run stops starting mutants after this long.
const BUDGET_DEFAULT: Duration = Duration::from_secs(60 * 60);

#[derive(Debug)]
struct Options {
    sample: usize,
    seed: u64,
    shard: (usize, usize),
    budget: Duration,
    out: PathBuf,
    report_only: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        sample: 0,
        seed: 1,
        shard: (0, 1),
        budget: BUDGET_DEFAULT,
        out: PathBuf::from("target/mutants/results.jsonl"),
        report_only: false,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        if flag == "--report" {
            options.report_only = true;
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |what: &str| -> Result<u64, String> {
            value
                .parse()
                .map_err(|_| format!("{what} must be a whole number (got {value:?})"))
        };
        match flag.as_str() {
            "--sample" => options.sample = number("--sample")? as usize,
            "--seed" => options.seed = number("--seed")?,
            "--budget-min" => options.budget = Duration::from_secs(60 * number("--budget-min")?),
            "--out" => options.out = PathBuf::from(value),
            "--shard" => {
                let (k, n) = value.split_once('/').ok_or("--shard is K/N, e.g. 0/4")?;
                let (k, n) = (k.parse::<usize>(), n.parse::<usize>());
                match (k, n) {
                    (Ok(k), Ok(n)) if k < n => options.shard = (k, n),
                    _ => return Err(format!("--shard is K/N with K < N (got {value:?})")),
                }
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(options)
}

pub const USAGE: &str =
    "[--sample N] [--seed S] [--shard K/N] [--budget-min M] [--out FILE] [--report]";

/// `cargo xtask mutants …`, run from the workspace root.
pub fn run(args: &[String], root: &Path) -> ! {
    let options = parse(args).unwrap_or_else(|why| {
        eprintln!("cargo xtask mutants: {why}\nusage: cargo xtask mutants {USAGE}");
        exit(2);
    });
    let out = root.join(&options.out);
    if options.report_only {
        exit(report(&out));
    }
    let mutants = chosen(&list(root), &options);
    let done = judged(&out);
    let pending: Vec<&Value> = mutants.iter().filter(|m| !done.contains(name(m))).collect();
    eprintln!(
        "mutants: {} chosen, {} already judged in {}, {} to judge within {} min",
        mutants.len(),
        mutants.len() - pending.len(),
        options.out.display(),
        pending.len(),
        options.budget.as_secs() / 60
    );
    let tree = Tree::prepare(root);
    let limits = tree.baseline();
    let started = Instant::now();
    fs::create_dir_all(out.parent().expect("the results file has a directory")).ok();
    for (i, mutant) in pending.iter().enumerate() {
        if started.elapsed() > options.budget {
            eprintln!("mutants: time budget spent after {i} of {}", pending.len());
            break;
        }
        let verdict = tree.judge(mutant, &limits);
        eprintln!(
            "mutants: [{}/{}] {} -> {} {} ({} s)",
            i + 1,
            pending.len(),
            name(mutant),
            verdict["verdict"],
            verdict["caught_by"].as_str().unwrap_or_default(),
            verdict["seconds"]
        );
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)
            .expect("results file");
        writeln!(file, "{verdict}").expect("write the results file");
    }
    exit(report(&out));
}

fn name(mutant: &Value) -> &str {
    mutant["name"].as_str().unwrap_or_default()
}

/// Every mutant cargo-mutants generates in [`MUTATED`].
fn list(root: &Path) -> Vec<Value> {
    let output = Command::new("cargo")
        .args([
            "mutants",
            "--list",
            "--json",
            "--diff",
            "--package",
            "vigil",
        ])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        _ => {
            eprintln!(
                "cargo xtask mutants needs cargo-mutants: cargo install cargo-mutants --locked"
            );
            exit(2);
        }
    };
    let all: Vec<Value> = serde_json::from_slice(&output.stdout).expect("cargo-mutants' JSON list");
    all.into_iter()
        .filter(|m| {
            let file = m["file"].as_str().unwrap_or_default();
            MUTATED.iter().any(|prefix| file.starts_with(prefix))
        })
        .collect()
}

/// The shard's mutants in a seeded order (FNV-1a of the seed and the name: stable across
/// runs and machines), the first `sample` of them when sampling.
fn chosen(all: &[Value], options: &Options) -> Vec<Value> {
    let mut keyed: Vec<(u64, &Value)> = all
        .iter()
        .map(|m| (fnv(options.seed, name(m)), m))
        .collect();
    keyed.sort_by_key(|(key, _)| *key);
    let (k, n) = options.shard;
    let mut mine: Vec<Value> = keyed
        .into_iter()
        .map(|(_, m)| m.clone())
        .enumerate()
        .filter(|(i, _)| i % n == k)
        .map(|(_, m)| m)
        .collect();
    if options.sample > 0 {
        mine.truncate(options.sample);
    }
    mine
}

fn fnv(seed: u64, text: &str) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ seed;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The names already judged in the results file.
fn judged(out: &Path) -> BTreeSet<String> {
    let text = fs::read_to_string(out).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|v| v["name"].as_str().map(String::from))
        .collect()
}

/// The scratch worktree and its two target directories.
struct Tree {
    dir: PathBuf,
    unit_target: PathBuf,
    sim_target: PathBuf,
}

/// The unmutated tree's judge times, times [`TIMEOUT_FACTOR`] plus [`SLACK`].
struct Limits {
    /// [`Stage::Unit`], then [`Stage::RealParts`].
    tests: Vec<Duration>,
    sim: Vec<Duration>,
}

/// The judges after the simulation, in order.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// The runtime's unit tests and the engine's model test.
    Unit,
    /// [`REAL_PARTS`]: the shell, store and executor against real sockets, processes and disks.
    RealParts,
}

impl Stage {
    /// The name a catch records (`caught_by`).
    fn name(self) -> &'static str {
        match self {
            Stage::Unit => "unit",
            Stage::RealParts => "real_parts",
        }
    }
}

enum Outcome {
    Passed,
    Failed,
    TimedOut,
}

impl Tree {
    fn prepare(root: &Path) -> Tree {
        let base = root.join("target/mutants");
        let dir = base.join("tree");
        let head = git(root, &["rev-parse", "HEAD"]);
        if !dir.exists() {
            git(
                root,
                &[
                    "worktree",
                    "add",
                    "--detach",
                    dir.to_str().expect("UTF-8 path"),
                    &head,
                ],
            );
        } else {
            git(&dir, &["checkout", "--detach", "--force", &head]);
            git(&dir, &["reset", "--hard", "--quiet"]);
        }
        eprintln!(
            "mutants: judging the committed HEAD {} in {}",
            &head[..12],
            dir.display()
        );
        Tree {
            dir,
            unit_target: base.join("target-unit"),
            sim_target: base.join("target-sim"),
        }
    }

    fn cargo(&self, args: &[&str], simulated: bool) -> Command {
        let mut command = Command::new("cargo");
        command
            .args(args)
            .args(["--profile", "mutants"])
            .current_dir(&self.dir);
        if simulated {
            command
                .env("RUSTFLAGS", "--cfg madsim")
                .env("CARGO_TARGET_DIR", &self.sim_target);
        } else {
            command
                .env_remove("RUSTFLAGS")
                .env("CARGO_TARGET_DIR", &self.unit_target);
        }
        command.stdout(Stdio::null()).stderr(Stdio::null());
        command
    }

    fn build_sim(&self) -> bool {
        let args = ["build", "-p", "vigil-scenarios", "--bin", "vigil-sim"];
        self.cargo(&args, true).status().is_ok_and(|s| s.success())
    }

    /// `cargo test` of the runtime's unit tests and the model test, or of [`REAL_PARTS`].
    fn test_args(stage: Stage) -> Vec<&'static str> {
        let mut args = vec!["test", "-p", "vigil"];
        match stage {
            Stage::Unit => args.extend(["--lib", "--test", "engine_model"]),
            Stage::RealParts => {
                for test in REAL_PARTS {
                    args.extend(["--test", test]);
                }
            }
        }
        args
    }

    fn build_tests(&self, stage: Stage) -> bool {
        let mut command = self.cargo(&Self::test_args(stage), false);
        command.arg("--no-run");
        command.status().is_ok_and(|s| s.success())
    }

    fn run_tests(&self, stage: Stage, limit: Option<Duration>) -> (Outcome, Duration) {
        timed(self.cargo(&Self::test_args(stage), false), limit)
    }

    fn run_sweep(
        &self,
        scenario: &str,
        seeds: u32,
        limit: Option<Duration>,
    ) -> (Outcome, Duration) {
        let bin = self.sim_target.join("mutants/vigil-sim");
        let mut command = Command::new(bin);
        command.args([
            "sweep",
            "--scenario",
            scenario,
            "--seeds",
            &seeds.to_string(),
            "--jobs",
            "2",
            // A mechanism a mutant silently switched off fails its scenario's required coverage
            // (the breaker that never opens never meets `breaker_probe`).
            "--require-coverage",
        ]);
        command.stdout(Stdio::null()).stderr(Stdio::null());
        timed(command, limit)
    }

    /// Builds and runs both judges on the unmutated tree: they must pass, and their times set
    /// the limits.
    fn baseline(&self) -> Limits {
        eprintln!(
            "mutants: building and judging the unmutated tree (the first build takes minutes)"
        );
        assert!(self.build_sim(), "the unmutated simulator does not build");
        for stage in [Stage::Unit, Stage::RealParts] {
            assert!(
                self.build_tests(stage),
                "the unmutated {stage:?} tests do not build"
            );
        }
        let limit = |d: Duration| d * TIMEOUT_FACTOR + SLACK;
        let mut sim = Vec::new();
        for (scenario, seeds) in SIM_JUDGE {
            let (outcome, took) = self.run_sweep(scenario, *seeds, None);
            assert!(
                matches!(outcome, Outcome::Passed),
                "the unmutated tree fails {scenario}"
            );
            eprintln!("mutants: baseline sim:{scenario} ({seeds} seeds) {took:.1?}");
            sim.push(limit(took));
        }
        let mut tests = Vec::new();
        for stage in [Stage::Unit, Stage::RealParts] {
            let (outcome, took) = self.run_tests(stage, None);
            assert!(
                matches!(outcome, Outcome::Passed),
                "the unmutated tree fails its {stage:?} tests"
            );
            eprintln!("mutants: baseline {} {took:.1?}", stage.name());
            tests.push(limit(took));
        }
        Limits { tests, sim }
    }

    /// Applies `mutant`, judges it, and restores the file.
    fn judge(&self, mutant: &Value, limits: &Limits) -> Value {
        let file = mutant["file"].as_str().expect("a mutant names its file");
        let diff = mutant["diff"].as_str().expect("listed with --diff");
        // cargo-mutants' diff names the mutation on its `+++` line: give git its paths.
        let body = diff
            .split_once("\n@@")
            .map(|(_, rest)| rest)
            .expect("a unified diff");
        let patch = format!("--- a/{file}\n+++ b/{file}\n@@{body}");
        let mut apply = Command::new("git")
            .args(["apply", "-"])
            .current_dir(&self.dir)
            .stdin(Stdio::piped())
            .spawn()
            .expect("git apply");
        apply
            .stdin
            .take()
            .expect("stdin")
            .write_all(patch.as_bytes())
            .expect("patch");
        assert!(
            apply.wait().is_ok_and(|s| s.success()),
            "{}: the diff does not apply",
            name(mutant)
        );
        let started = Instant::now();
        let (verdict, by) = self.verdict(limits);
        git(&self.dir, &["checkout", "--", file]);
        json!({
            "name": name(mutant),
            "file": file,
            "genre": mutant["genre"],
            "verdict": verdict,
            "caught_by": by,
            "seconds": started.elapsed().as_secs(),
        })
    }

    fn verdict(&self, limits: &Limits) -> (&'static str, Option<String>) {
        if !self.build_sim() {
            return ("unviable", None);
        }
        for ((scenario, seeds), limit) in SIM_JUDGE.iter().zip(&limits.sim) {
            match self.run_sweep(scenario, *seeds, Some(*limit)).0 {
                Outcome::Passed => {}
                Outcome::Failed => return ("caught", Some(format!("sim:{scenario}"))),
                Outcome::TimedOut => return ("caught", Some(format!("sim:{scenario}:timeout"))),
            }
        }
        for (stage, limit) in [Stage::Unit, Stage::RealParts]
            .into_iter()
            .zip(&limits.tests)
        {
            if !self.build_tests(stage) {
                return ("unviable", None);
            }
            match self.run_tests(stage, Some(*limit)).0 {
                Outcome::Passed => {}
                Outcome::Failed => return ("caught", Some(stage.name().into())),
                Outcome::TimedOut => return ("caught", Some(format!("{}:timeout", stage.name()))),
            }
        }
        ("survived", None)
    }
}

/// Runs `command` to its end or until `limit` (then kills it).
fn timed(mut command: Command, limit: Option<Duration>) -> (Outcome, Duration) {
    let started = Instant::now();
    let mut child = command.spawn().expect("spawn a judge");
    loop {
        if let Some(status) = child.try_wait().expect("wait for a judge") {
            let outcome = if status.success() {
                Outcome::Passed
            } else {
                Outcome::Failed
            };
            return (outcome, started.elapsed());
        }
        if limit.is_some_and(|limit| started.elapsed() > limit) {
            child.kill().ok();
            child.wait().ok();
            return (Outcome::TimedOut, started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Prints the score from the results file: caught / viable, the simulation's share, and the
/// survivors. Exits 0 (the score is a figure, not a gate).
fn report(out: &Path) -> i32 {
    let text = fs::read_to_string(out).unwrap_or_default();
    let results: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let count = |f: &dyn Fn(&Value) -> bool| results.iter().filter(|r| f(r)).count();
    let unviable = count(&|r| r["verdict"] == "unviable");
    let caught = count(&|r| r["verdict"] == "caught");
    let by_sim = count(&|r| {
        r["caught_by"]
            .as_str()
            .is_some_and(|b| b.starts_with("sim"))
    });
    let viable = results.len() - unviable;
    let percent = |n: usize| {
        if viable == 0 {
            0.0
        } else {
            100.0 * n as f64 / viable as f64
        }
    };
    println!(
        "mutants judged: {} ({unviable} unviable, {viable} viable)",
        results.len()
    );
    println!(
        "caught: {caught} of {viable} viable ({:.1} %)",
        percent(caught)
    );
    println!(
        "caught by the simulation: {by_sim} of {viable} viable ({:.1} %)",
        percent(by_sim)
    );
    let by = |stage: &str| {
        count(&|r| {
            r["caught_by"]
                .as_str()
                .is_some_and(|b| b.starts_with(stage))
        })
    };
    println!(
        "caught after the simulation: {} by the unit and model tests, {} by the real-parts tests",
        by("unit"),
        by("real_parts")
    );
    let timeouts = count(&|r| {
        r["caught_by"]
            .as_str()
            .is_some_and(|b| b.ends_with("timeout"))
    });
    println!("of the catches, by a time limit: {timeouts}");
    for r in results.iter().filter(|r| r["verdict"] == "survived") {
        println!("survived: {}", r["name"].as_str().unwrap_or_default());
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn mutants(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| json!({"name": format!("runtime/src/engine/x.rs:{i}:1: replace + with -")}))
            .collect()
    }

    fn names(list: &[Value]) -> Vec<String> {
        list.iter().map(|m| name(m).to_string()).collect()
    }

    #[test]
    fn options_parse_and_bad_ones_name_the_flag() {
        let o = parse(&args(&[
            "--sample",
            "7",
            "--shard",
            "1/3",
            "--budget-min",
            "2",
        ]))
        .unwrap();
        assert_eq!(
            (o.sample, o.shard, o.budget),
            (7, (1, 3), Duration::from_secs(120))
        );
        assert!(parse(&args(&["--shard", "3/3"]))
            .unwrap_err()
            .contains("K < N"));
        assert!(parse(&args(&["--sample", "x"]))
            .unwrap_err()
            .contains("--sample"));
        assert!(parse(&args(&["--seed"]))
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse(&args(&["--nope", "1"]))
            .unwrap_err()
            .contains("--nope"));
    }

    #[test]
    fn shards_split_the_mutants_exactly_and_a_sample_is_a_stable_prefix() {
        let all = mutants(50);
        let mut options = parse(&[]).unwrap();
        let mut seen: Vec<String> = Vec::new();
        for k in 0..4 {
            options.shard = (k, 4);
            seen.extend(names(&chosen(&all, &options)));
        }
        seen.sort();
        let mut expected = names(&all);
        expected.sort();
        assert_eq!(seen, expected, "every mutant in exactly one shard");

        options.shard = (0, 1);
        let order = names(&chosen(&all, &options));
        options.sample = 5;
        assert_eq!(names(&chosen(&all, &options)), order[..5].to_vec());
        options.seed = 2;
        assert_ne!(
            names(&chosen(&all, &options)),
            order[..5].to_vec(),
            "the seed picks another sample"
        );
    }
}
