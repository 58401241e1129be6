//! The project's workflows as one portable program, so a fresh machine needs nothing but cargo.
//! The justfile's recipes call these; README and CI use them directly.
//! `cargo xtask` (or `cargo xtask help`) lists the commands: see [`COMMANDS`].

use std::env;
use std::path::PathBuf;
use std::process::{exit, Command};

mod mutants;
mod readme_check;

/// The simulator's own target directory: the `--cfg madsim` build never invalidates the normal
/// one and vice versa.
const SIM_TARGET_DIR: &str = "target/sim";

/// Exit status of `cargo xtask` given a command it does not know.
const EXIT_USAGE: i32 = 2;

/// Every command, with its arguments and one line on what it does: what `cargo xtask` prints.
const COMMANDS: &[(&str, &str)] = &[
    (
        "run [serve args]",
        "vigil serve --fleet examples/fleet.toml on ./vigil-data (release)",
    ),
    (
        "vigil <cli args>",
        "the operator CLI: the release binary `run` built (builds it if needed)",
    ),
    (
        "test",
        "every test: workspace tests, readme-check, then the simulation suite",
    ),
    (
        "readme-check",
        "run README.md's \"Operate it\" commands in order against a fresh vigil serve",
    ),
    (
        "sim <vigil-sim args>",
        "build the simulator (--cfg madsim, target/sim; `fleet` in the LTO profile `sim`) and run it",
    ),
    (
        "sweep [scenario] [seeds]",
        "sweep seeds 0..seeds of a scenario (default smoke, 100) on all cores",
    ),
    (
        "replay <seed> <scenario> [--swarm] [--out FILE] [--format json]",
        "re-run one seed: a summary, and its whole trace in a file",
    ),
    (
        "bench <name> [vigil-bench args]",
        "a benchmark against the real vigil serve (wakeups, fleet, pulses, timers, recovery); writes its section of docs/benchmarks.md",
    ),
    (
        "bench-smoke [runs] [seed]",
        "median wall time of one smoke seed run `runs` times",
    ),
    (
        "mutants [--sample N] [--seed S] [--shard K/N] [--budget-min M] [--report]",
        "mutation score of engine, shell, store, executor (needs cargo-mutants)",
    ),
    ("help", "this list"),
];

/// The command list, one line each.
fn command_list() -> String {
    let width = COMMANDS
        .iter()
        .map(|(usage, _)| usage.len())
        .max()
        .unwrap_or(0);
    let mut text = String::from("usage: cargo xtask <command> [args]\n\ncommands:\n");
    for (usage, what) in COMMANDS {
        text.push_str(&format!("  {usage:<width$}  {what}\n"));
    }
    text
}

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        help();
    };
    if task == "vigil" {
        // Before entering the workspace root: paths in the arguments are the caller's.
        vigil_cli(rest);
    }
    env::set_current_dir(workspace_root()).expect("cannot enter the workspace root");
    match task.as_str() {
        "run" => {
            let mut serve = vec![
                "run",
                "--release",
                "-p",
                "vigil",
                "--",
                "serve",
                "--fleet",
                "examples/fleet.toml",
            ];
            serve.extend(rest.iter().map(String::as_str));
            cargo(&serve, false);
        }
        "test" => test(),
        "readme-check" => readme_check(),
        "sim" => sim(rest),
        "sweep" => {
            let scenario = rest.first().map_or("smoke", String::as_str);
            let seeds = rest.get(1).map_or("100", String::as_str);
            sim(&strings(&[
                "sweep",
                "--scenario",
                scenario,
                "--seeds",
                seeds,
            ]));
        }
        "replay" => {
            let (Some(seed), Some(scenario)) = (rest.first(), rest.get(1)) else {
                eprintln!("usage: cargo xtask replay <seed> <scenario> [--swarm] [--out FILE] [--format json]");
                exit(EXIT_USAGE);
            };
            let mut args = strings(&["replay", seed, scenario]);
            args.extend(rest.iter().skip(2).cloned());
            sim(&args);
        }
        "bench" => bench(rest),
        "bench-smoke" => {
            let runs = rest
                .first()
                .map_or(7, |n| n.parse().expect("runs must be a number"));
            let seed = rest
                .get(1)
                .map_or(1, |n| n.parse().expect("seed must be a number"));
            bench_smoke(runs, seed)
        }
        "mutants" => mutants::run(rest, &workspace_root()),
        "help" | "--help" | "-h" => help(),
        unknown => usage(unknown),
    }
}

/// Prints the command list and exits 0: what was asked for.
fn help() -> ! {
    print!("{}", command_list());
    exit(0);
}

/// Prints what `unknown` is not, then the command list, and exits with [`EXIT_USAGE`].
fn usage(unknown: &str) -> ! {
    eprint!(
        "cargo xtask: unknown command {unknown:?}\n\n{}",
        command_list()
    );
    exit(EXIT_USAGE);
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// A cargo command with `args`; `simulated` builds with `--cfg madsim` into `target/sim`.
fn cargo_command(args: &[&str], simulated: bool) -> Command {
    let mut command = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.args(args);
    if simulated {
        let flags = env::var("RUSTFLAGS").unwrap_or_default();
        command.env("RUSTFLAGS", format!("{flags} --cfg madsim").trim());
        command.env("CARGO_TARGET_DIR", SIM_TARGET_DIR);
        // Why no line tables in the simulator's build: it is the test suite's longest compile,
        // and a failing seed is reported by its seed, its trace and the panic's own file:line
        // (which needs no debug info). Set CARGO_PROFILE_RELEASE_DEBUG to profile it.
        if env::var_os("CARGO_PROFILE_RELEASE_DEBUG").is_none() {
            command.env("CARGO_PROFILE_RELEASE_DEBUG", "false");
        }
    }
    command
}

/// Runs cargo with `args`, exiting with its status if it fails.
fn cargo(args: &[&str], simulated: bool) {
    let status = cargo_command(args, simulated)
        .status()
        .expect("could not run cargo");
    if !status.success() {
        stop_background_build();
        exit(status.code().unwrap_or(1));
    }
}

/// The `vigil` binary of a cargo profile ("debug", "release") in the workspace's target dir.
fn vigil_binary(profile: &str) -> PathBuf {
    let target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        workspace_root().join(target)
    };
    target
        .join(profile)
        .join(format!("vigil{}", env::consts::EXE_SUFFIX))
}

/// Builds `vigil` in `profile` (a no-op when it is up to date), from any directory.
fn build_vigil(release: bool) {
    let manifest = workspace_root().join("Cargo.toml");
    let manifest = manifest.to_str().expect("the workspace path is UTF-8");
    let mut args = vec![
        "build",
        "--quiet",
        "--manifest-path",
        manifest,
        "-p",
        "vigil",
        "--bin",
        "vigil",
    ];
    if release {
        args.push("--release");
    }
    cargo(&args, false);
}

/// `cargo xtask vigil …`: the release binary `cargo xtask run` serves with, run in the
/// caller's directory, so the CLI and the server are one build.
fn vigil_cli(args: &[String]) -> ! {
    build_vigil(true);
    let status = Command::new(vigil_binary("release"))
        .args(args)
        .status()
        .expect("could not run vigil");
    exit(status.code().unwrap_or(1));
}

/// `cargo xtask readme-check`, on the debug binary (the one the workspace tests build).
fn readme_check() {
    build_vigil(false);
    match readme_check::run(&workspace_root(), &vigil_binary("debug")) {
        Ok(ran) => println!("readme-check: {ran} README commands passed"),
        Err(why) => {
            eprintln!("readme-check failed: {why}");
            stop_background_build();
            exit(1);
        }
    }
}

/// The cargo profile `vigil-sim fleet` is built in: fat LTO (Cargo.toml, `[profile.sim]`).
/// A user's fleet week over 20 seeds is minutes of CPU, so it pays for the slower build; the
/// scenarios, sweeps and replays a developer rebuilds after every change keep `release`.
const FLEET_PROFILE: &str = "sim";

/// Builds `vigil-sim` in `profile` ("release" or [`FLEET_PROFILE`]).
fn build_sim_in(profile: &str) {
    cargo(
        &[
            "build",
            "--profile",
            profile,
            "-p",
            "vigil-scenarios",
            "--bin",
            "vigil-sim",
        ],
        true,
    );
}

fn build_sim() {
    build_sim_in("release");
}

/// `vigil-sim` as `profile` builds it.
fn sim_binary_in(profile: &str) -> PathBuf {
    PathBuf::from(SIM_TARGET_DIR)
        .join(profile)
        .join("vigil-sim")
}

fn sim_binary() -> PathBuf {
    sim_binary_in("release")
}

fn sim(args: &[String]) {
    let profile = if args.first().is_some_and(|command| command == "fleet") {
        FLEET_PROFILE
    } else {
        "release"
    };
    build_sim_in(profile);
    let status = Command::new(sim_binary_in(profile))
        .args(args)
        .status()
        .expect("could not run vigil-sim");
    exit(status.code().unwrap_or(1));
}

/// The simulation suite's cargo command; its build starts early with `--no-run` added.
const SIM_TEST_ARGS: [&str; 4] = ["test", "--release", "-p", "vigil-scenarios"];

fn test() {
    ensure_browser();
    // Why now: the workspace tests and the README check leave a core idle most of the time
    // (they wait on real time, real processes, a browser), and the simulator's release build
    // is the suite's longest; built beside them, it is mostly done when they end.
    let sim_build = SimBuild::start();
    eprintln!("==> 1/3 workspace tests (real tokio, real disk)");
    let (mut passed, mut failed) = cargo_test(&["test", "--workspace"], false);
    eprintln!(
        "==> 2/3 readme-check: README.md's \"Operate it\" commands against a real vigil serve"
    );
    readme_check();
    eprintln!("==> 3/3 simulation tests (--cfg madsim, release, target/sim): sweeps, determinism, lying fsync");
    sim_build.finish();
    let (sim_passed, sim_failed) = cargo_test(&SIM_TEST_ARGS, true);
    passed += sim_passed;
    failed += sim_failed;
    // One closing line for the whole suite, whatever cargo's last (often empty doc-test) line says.
    println!("tests: {passed} passed, {failed} failed");
}

/// The process id of the background build while it runs (0: none).
static BACKGROUND_BUILD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Stops the background build, if one runs, before the suite exits early on a failure.
fn stop_background_build() {
    let pid = BACKGROUND_BUILD.swap(0, std::sync::atomic::Ordering::SeqCst);
    if pid != 0 {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
}

/// The simulation suite's build (`cargo test --no-run`, the same flags as the run after it, so
/// the run builds nothing), started in the background; its output goes to a log file, printed
/// when it is waited for.
struct SimBuild {
    child: std::process::Child,
    log: PathBuf,
}

impl SimBuild {
    fn start() -> SimBuild {
        let log = workspace_root().join("target").join("sim-build.log");
        std::fs::create_dir_all(log.parent().expect("target/ has a parent"))
            .expect("could not create target/");
        let file = std::fs::File::create(&log).expect("could not create target/sim-build.log");
        let mut args = SIM_TEST_ARGS.to_vec();
        args.push("--no-run");
        let child = cargo_command(&args, true)
            .stdin(std::process::Stdio::null())
            .stdout(file.try_clone().expect("log file handle"))
            .stderr(file)
            .spawn()
            .expect("could not run cargo");
        BACKGROUND_BUILD.store(child.id(), std::sync::atomic::Ordering::SeqCst);
        eprintln!(
            "==> building the simulation suite in the background (log: {})",
            log.display()
        );
        SimBuild { child, log }
    }

    /// Waits for the build, prints its log, and exits with its status if it failed.
    fn finish(mut self) {
        let status = self.child.wait().expect("cargo runs");
        BACKGROUND_BUILD.store(0, std::sync::atomic::Ordering::SeqCst);
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        eprint!("{log}");
        if !status.success() {
            eprintln!("the simulation suite's build failed (log above)");
            exit(status.code().unwrap_or(1));
        }
    }
}

/// What the dashboard's browser tests (tests/dashboard.rs) drive: Debian's Chromium and its
/// WebDriver server. Restated in tests/support/browser.rs, which skips (or fails under CI)
/// without them.
const BROWSER_FILES: [&str; 2] = ["/usr/bin/chromium", "/usr/bin/chromedriver"];
const BROWSER_PACKAGES: [&str; 2] = ["chromium", "chromium-driver"];

/// Installs Chromium and chromedriver when they are missing and this user can (root, apt-get),
/// saying what it does; otherwise says plainly that the browser tests will be skipped, or fail
/// under CI.
fn ensure_browser() {
    let missing: Vec<&str> = BROWSER_FILES
        .into_iter()
        .filter(|f| !std::path::Path::new(f).exists())
        .collect();
    if missing.is_empty() {
        return;
    }
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let apt = std::path::Path::new("/usr/bin/apt-get").exists();
    if root && apt {
        eprintln!(
            "==> browser tests need {}: apt-get install -y {}",
            missing.join(", "),
            BROWSER_PACKAGES.join(" ")
        );
        let install = || {
            std::process::Command::new("apt-get")
                .args(["install", "-y"])
                .args(BROWSER_PACKAGES)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .is_ok_and(|s| s.success())
        };
        let installed = install() || {
            eprintln!("==> the install failed; apt-get update, then once more");
            let _ = std::process::Command::new("apt-get")
                .arg("update")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status();
            install()
        };
        if installed {
            return;
        }
    }
    let consequence = if std::env::var_os("CI").is_some() {
        "CI is set, so the browser tests will fail"
    } else {
        "the browser tests will be skipped"
    };
    eprintln!(
        "==> could not install {} (needs root and apt-get: apt-get install chromium chromium-driver); {consequence}",
        BROWSER_PACKAGES.join(" ")
    );
}

/// Runs a `cargo test` command, echoing its output, and adds up its `test result:` lines.
/// Exits with cargo's status if it failed.
fn cargo_test(args: &[&str], simulated: bool) -> (u64, u64) {
    use std::io::{BufRead, BufReader};
    let mut command = cargo_command(args, simulated);
    command.stdout(std::process::Stdio::piped());
    let mut child = command.spawn().expect("could not run cargo");
    let (mut passed, mut failed) = (0, 0);
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("cargo output is text");
        println!("{line}");
        if let Some(counts) = line.strip_prefix("test result: ") {
            passed += count_before(counts, " passed");
            failed += count_before(counts, " failed");
        }
    }
    let status = child.wait().expect("cargo runs");
    if !status.success() {
        println!("tests: {passed} passed, {} failed", failed.max(1));
        stop_background_build();
        exit(status.code().unwrap_or(1));
    }
    (passed, failed)
}

/// In "ok. 15 passed; 0 failed; ...", the number before `label`.
fn count_before(counts: &str, label: &str) -> u64 {
    let Some(end) = counts.find(label) else {
        return 0;
    };
    let start = counts[..end]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    counts[start..end].parse().unwrap_or(0)
}

/// Builds `vigil` and `vigil-bench` (release), runs benchmark `name` against the real binary and
/// writes what it prints into its section of docs/benchmarks.md (between
/// `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, added at the end the first time).
fn bench(args: &[String]) {
    let Some(name) = args.first() else {
        eprintln!("usage: cargo xtask bench <name> [vigil-bench args]   (names: wakeups, fleet, pulses, timers, recovery)");
        exit(EXIT_USAGE);
    };
    cargo(
        &["build", "--release", "-p", "vigil", "-p", "vigil-bench"],
        false,
    );
    let bench_binary = vigil_binary("release").with_file_name("vigil-bench");
    let output = Command::new(&bench_binary)
        .args(args)
        .arg("--vigil")
        .arg(vigil_binary("release"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("could not run vigil-bench");
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    print!("{report}");
    if !output.status.success() {
        eprintln!("vigil-bench {name} failed; docs/benchmarks.md is unchanged");
        exit(output.status.code().unwrap_or(1));
    }
    // A report is a section with its heading; anything else (`--help`, a usage text) is shown,
    // never written over the measured figures.
    if !report.starts_with("## ") {
        return;
    }
    let path = PathBuf::from("docs/benchmarks.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, with_section(&doc, name, &report))
        .expect("could not write docs/benchmarks.md");
    eprintln!("wrote the {name} section of {}", path.display());
}

/// `doc` with the section of benchmark `name` replaced by `report` (appended if absent).
fn with_section(doc: &str, name: &str, report: &str) -> String {
    let (begin, end) = (
        format!("<!-- bench:{name} -->"),
        format!("<!-- /bench:{name} -->"),
    );
    let section = format!("{begin}\n{}\n{end}", report.trim_end());
    match (doc.find(&begin), doc.find(&end)) {
        (Some(start), Some(stop)) if start < stop => {
            format!("{}{section}{}", &doc[..start], &doc[stop + end.len()..])
        }
        _ => format!("{}\n\n{section}\n", doc.trim_end()),
    }
}

/// Runs one seed of `smoke` `runs` times (each in a fresh process) and prints the median wall time.
fn bench_smoke(runs: usize, seed: u64) {
    assert!(runs > 0, "runs must be at least 1");
    build_sim();
    let mut wall_ms: Vec<u64> = (0..runs)
        .map(|_| {
            let output = Command::new(sim_binary())
                .args(["run", "--scenario", "smoke", "--seed", &seed.to_string()])
                .output()
                .expect("could not run vigil-sim");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let line = stdout.lines().last().unwrap_or_default().to_string();
            println!("{line}");
            line.split_whitespace()
                .find_map(|field| field.strip_prefix("wall_ms="))
                .and_then(|v| v.parse().ok())
                .expect("result line has wall_ms")
        })
        .collect();
    wall_ms.sort_unstable();
    println!(
        "smoke seed={seed}: median wall_ms={} over {runs} runs (min {}, max {})",
        wall_ms[runs / 2],
        wall_ms[0],
        wall_ms[runs - 1]
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bench_section_is_replaced_in_place_or_appended() {
        let doc = "# Benchmarks\n\n<!-- bench:wakeups -->\nold\n<!-- /bench:wakeups -->\n\ntail\n";
        let replaced = with_section(doc, "wakeups", "new\n");
        assert_eq!(
            replaced,
            "# Benchmarks\n\n<!-- bench:wakeups -->\nnew\n<!-- /bench:wakeups -->\n\ntail\n"
        );
        let appended = with_section(&replaced, "pulses", "p");
        assert!(appended.ends_with("tail\n\n<!-- bench:pulses -->\np\n<!-- /bench:pulses -->\n"));
        assert!(appended.contains("new"), "the other section is kept");
    }

    #[test]
    fn command_list_names_every_command_on_one_line() {
        let list = command_list();
        for name in [
            "run",
            "vigil",
            "test",
            "readme-check",
            "sim",
            "sweep",
            "replay",
            "bench-smoke",
            "bench",
            "help",
        ] {
            let lines = list
                .lines()
                .filter(|line| line.trim_start().split(' ').next() == Some(name))
                .count();
            assert_eq!(lines, 1, "{name} should have exactly one line in:\n{list}");
        }
    }
}
