//! `vigil-sim`: run, replay and sweep Vigil's simulation scenarios from a seed.
//!
//! Must be built with `RUSTFLAGS="--cfg madsim"` (`cargo xtask sim ...` does this, into its own
//! target directory `target/sim`).

#[cfg(not(madsim))]
fn main() {
    eprintln!(
        "vigil-sim runs the simulator, which needs a build with RUSTFLAGS=\"--cfg madsim\".\n\
         Use `cargo xtask sim run --scenario smoke` (or `just sim smoke`), which builds it into target/sim."
    );
    std::process::exit(2);
}

#[cfg(madsim)]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(madsim)]
mod cli {
    use std::io::{IsTerminal, Write};
    use std::process::ExitCode;

    use clap::{Parser, Subcommand};
    use vigil_scenarios::run::{
        find, parse_regressions, regression_lines, replay_command, run_seed_in, run_seed_twice_in,
        sweep_in, Mode, Outcome, Scenario, SweepOptions, SweepSummary, SCENARIOS,
    };

    /// Width of the sweep's progress bar, in characters.
    const PROGRESS_BAR_CHARS: u64 = 30;

    #[derive(Parser)]
    #[command(
        name = "vigil-sim",
        about = "Deterministic simulation of the Vigil runtime: same seed, same trace."
    )]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    /// How `replay` prints its summary.
    #[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
    enum Format {
        Text,
        Json,
    }

    #[derive(Subcommand)]
    enum Command {
        /// Run one seed of a scenario and print its verdict line.
        Run {
            #[arg(long, default_value = "smoke")]
            scenario: String,
            /// The seed; random (and printed) when absent.
            #[arg(long, env = "VIGIL_SEED")]
            seed: Option<u64>,
            /// Run the seed twice and fail unless the two whole traces are identical.
            #[arg(long)]
            check_determinism: bool,
            /// Print the whole trace (one JSON record per line) before the verdict.
            #[arg(long)]
            trace: bool,
            /// Swarm mode: the seed chooses a random subset of faults and rates instead of the
            /// scenario's designed mix (printed in the trace's first record).
            #[arg(long)]
            swarm: bool,
        },
        /// Re-run a seed: print a summary (verdict, trace records by kind, the violation) and
        /// write the whole trace, one JSON record per line, to a file.
        Replay {
            seed: u64,
            scenario: String,
            /// Replay a swarm run.
            #[arg(long)]
            swarm: bool,
            /// Where the whole trace goes (`-`: stdout, before the summary). Default:
            /// vigil-sim-<scenario>-<seed>[-swarm].jsonl in the system's temporary directory.
            #[arg(long, value_name = "FILE")]
            out: Option<std::path::PathBuf>,
            /// The summary as text, or as one JSON object for tools.
            #[arg(long, value_enum, default_value_t = Format::Text)]
            format: Format,
        },
        /// Run many seeds on all cores; list the failing ones. `--scenario all` sweeps every
        /// scenario and ends with a table.
        Sweep {
            #[arg(long, default_value = "smoke")]
            scenario: String,
            /// How many seeds.
            #[arg(long, default_value_t = 100)]
            seeds: u64,
            /// First seed.
            #[arg(long, default_value_t = 0)]
            start: u64,
            /// Parallel runs (default: all cores).
            #[arg(long)]
            jobs: Option<usize>,
            /// Run every seed twice and compare the whole traces.
            #[arg(long)]
            check_determinism: bool,
            /// Append each failing `<scenario> <seed>` to this file (for `vigil-sim regress`).
            #[arg(long)]
            failures_file: Option<std::path::PathBuf>,
            /// Swarm mode: each seed chooses a random subset of faults and rates.
            #[arg(long)]
            swarm: bool,
            /// Fail when a precondition the scenario is built to reach (a crash to recover
            /// from, a daily cap reached, ...) was met in no seed: its invariant went unchecked.
            #[arg(long)]
            require_coverage: bool,
        },
        /// Re-run every `<scenario> <seed>` listed in a regression file.
        Regress { file: std::path::PathBuf },
        /// List the scenarios.
        List,
        /// Simulate your own fleet file (the one `vigil serve --fleet` takes) for days over many
        /// seeds, report what it did, and fail when an `[expect]` or a runtime invariant breaks
        /// (docs/fleet-simulation.md).
        Fleet {
            /// The fleet file.
            file: String,
            /// Simulated days per seed.
            #[arg(long, default_value_t = 7)]
            days: u32,
            /// Seeds 1..=K.
            #[arg(long, default_value_t = 20)]
            seeds: u64,
            /// One seed only (instead of --seeds), e.g. to replay a breach.
            #[arg(long)]
            seed: Option<u64>,
            /// Fault profile: none, typical, harsh, or a TOML profile file.
            #[arg(long, default_value = "typical")]
            faults: String,
            /// The report's format.
            #[arg(long, value_enum, default_value_t = FleetFormat::Text)]
            format: FleetFormat,
            /// Write the report here instead of stdout.
            #[arg(long, value_name = "FILE")]
            out: Option<std::path::PathBuf>,
            /// A file whose `[simulation]` (and `[expect]`) replace the fleet file's.
            #[arg(long, value_name = "FILE")]
            world: Option<String>,
            /// Seeds run in parallel (default: all cores).
            #[arg(long)]
            jobs: Option<usize>,
            /// Write the seed's whole trace, one JSON record per line (with --seed).
            #[arg(long, value_name = "FILE")]
            trace: Option<std::path::PathBuf>,
        },
    }

    /// How `fleet` prints its report.
    #[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
    enum FleetFormat {
        Text,
        Json,
        Html,
    }

    pub fn main() -> ExitCode {
        match Cli::parse().command {
            Command::Run {
                scenario,
                seed,
                check_determinism,
                trace,
                swarm,
            } => {
                let Some(scenario) = scenario_named(&scenario) else {
                    return ExitCode::from(2);
                };
                let seed = seed.unwrap_or_else(random_seed);
                println!(
                    "running scenario={} seed={seed}{}",
                    scenario.name,
                    mode(swarm).flag()
                );
                run_one(scenario, seed, mode(swarm), check_determinism, trace)
            }
            Command::Replay {
                seed,
                scenario,
                swarm,
                out,
                format,
            } => {
                let Some(scenario) = scenario_named(&scenario) else {
                    return ExitCode::from(2);
                };
                replay(scenario, seed, mode(swarm), out, format)
            }
            Command::Sweep {
                scenario,
                seeds,
                start,
                jobs,
                check_determinism,
                failures_file,
                swarm,
                require_coverage,
            } => {
                let scenarios: Vec<&'static Scenario> = if scenario == "all" {
                    SCENARIOS.iter().collect()
                } else {
                    match scenario_named(&scenario) {
                        Some(s) => vec![s],
                        None => return ExitCode::from(2),
                    }
                };
                let jobs = jobs
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
                let options = SweepOptions {
                    start,
                    seeds,
                    jobs,
                    check_determinism,
                };
                let summaries: Vec<SweepSummary> = scenarios
                    .into_iter()
                    .map(|scenario| run_sweep(scenario, options, mode(swarm)))
                    .collect();
                if summaries.len() > 1 {
                    print_table(&summaries);
                }
                if let Some(path) = failures_file {
                    let lines: String = summaries.iter().map(regression_lines).collect();
                    if !lines.is_empty() {
                        let appended = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&path)
                            .and_then(|mut file| file.write_all(lines.as_bytes()));
                        if let Err(error) = appended {
                            eprintln!("could not append failures to {}: {error}", path.display());
                            return ExitCode::from(2);
                        }
                        eprintln!("failing seeds appended to {}", path.display());
                    }
                }
                let mut uncovered = false;
                for summary in &summaries {
                    let gaps = summary.coverage_gaps();
                    if require_coverage && !gaps.is_empty() {
                        eprintln!(
                            "{}: no seed met {} (their invariants went unchecked)",
                            summary.scenario,
                            gaps.join(", ")
                        );
                        uncovered = true;
                    }
                }
                if summaries.iter().all(|s| s.failed.is_empty()) && !uncovered {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Command::Regress { file } => regress(&file),
            Command::Fleet {
                file,
                days,
                seeds,
                seed,
                faults,
                format,
                out,
                world,
                jobs,
                trace,
            } => fleet(FleetArgs {
                file,
                days,
                seeds,
                seed,
                faults,
                format,
                out,
                world,
                jobs,
                trace,
            }),
            Command::List => {
                for scenario in SCENARIOS {
                    println!("{:<24} {}", scenario.name, scenario.summary);
                }
                ExitCode::SUCCESS
            }
        }
    }

    struct FleetArgs {
        file: String,
        days: u32,
        seeds: u64,
        seed: Option<u64>,
        faults: String,
        format: FleetFormat,
        out: Option<std::path::PathBuf>,
        world: Option<String>,
        jobs: Option<usize>,
        trace: Option<std::path::PathBuf>,
    }

    /// `fleet`: exit 0 when every expectation and invariant held, 1 when one broke, 2 when the
    /// files or arguments are wrong.
    fn fleet(args: FleetArgs) -> ExitCode {
        use vigil_scenarios::fleet_sim::{self, config};
        if args.days == 0 || args.days > config::DAYS_MAX {
            eprintln!("error: --days must be between 1 and {}", config::DAYS_MAX);
            return ExitCode::from(2);
        }
        let seeds: Vec<u64> = match args.seed {
            Some(seed) => vec![seed],
            None if args.seeds == 0 => {
                eprintln!("error: --seeds must be at least 1");
                return ExitCode::from(2);
            }
            None => (1..=args.seeds).collect(),
        };
        let loaded = config::FaultProfile::named(&args.faults).and_then(|faults| {
            fleet_sim::world::load(&args.file, args.world.as_deref(), faults, args.days)
        });
        let plan = match loaded {
            Ok(plan) => plan,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::from(2);
            }
        };
        for warning in &plan.warnings {
            eprintln!("warning: {warning}");
        }
        let jobs = args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let total = seeds.len();
        let interactive = std::io::stderr().is_terminal();
        // On a terminal one line that counts; in a CI log a line per tenth of the seeds.
        let step = (total / 10).max(1);
        let progress = |done: usize| {
            if interactive {
                eprint!("\rfleet: {done}/{total} seeds");
                let _ = std::io::stderr().flush();
            } else if done.is_multiple_of(step) || done == total {
                eprintln!("fleet: {done}/{total} seeds");
            }
        };
        let report = match fleet_sim::simulate_fleet(
            plan,
            args.world.as_deref(),
            &seeds,
            jobs,
            args.trace.as_deref(),
            &progress,
        ) {
            Ok(report) => report,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::from(2);
            }
        };
        if interactive {
            eprintln!();
        }
        let rendered = match args.format {
            FleetFormat::Text => vigil_scenarios::fleet_report::table::render(&report),
            FleetFormat::Json => {
                serde_json::to_string_pretty(&report).expect("reports serialize") + "\n"
            }
            FleetFormat::Html => vigil_scenarios::fleet_report::html::render(&report),
        };
        match &args.out {
            Some(path) => {
                if let Err(error) = std::fs::write(path, rendered) {
                    eprintln!("error: could not write the report to {}: {error}", path.display());
                    return ExitCode::from(2);
                }
            }
            None => print!("{rendered}"),
        }
        if let Some(path) = &args.trace {
            eprintln!("trace written to {}", path.display());
        }
        if report.passed() {
            ExitCode::SUCCESS
        } else {
            eprint!("{}", fleet_sim::failure_lines(&report));
            ExitCode::FAILURE
        }
    }

    fn mode(swarm: bool) -> Mode {
        if swarm {
            Mode::Swarm
        } else {
            Mode::Designed
        }
    }

    fn scenario_named(name: &str) -> Option<&'static Scenario> {
        let found = find(name);
        if found.is_none() {
            let known: Vec<_> = SCENARIOS.iter().map(|s| s.name).collect();
            eprintln!(
                "unknown scenario {name:?}; known scenarios: {}",
                known.join(", ")
            );
        }
        found
    }

    /// A seed for a run the user did not seed. Drawn from the OS once, printed, and from then on
    /// the run is fully determined by it.
    fn random_seed() -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(std::process::id().into());
        hasher.finish() % 1_000_000_000
    }

    fn run_one(
        scenario: &'static Scenario,
        seed: u64,
        mode: Mode,
        check_determinism: bool,
        trace: bool,
    ) -> ExitCode {
        let outcome = if check_determinism {
            run_seed_twice_in(scenario, seed, mode)
        } else {
            run_seed_in(scenario, seed, mode)
        };
        if let Some(swarm) = outcome.swarm_choice() {
            println!("swarm: {swarm}");
        }
        if trace {
            for record in &outcome.records {
                println!("{}", record.line());
            }
        }
        // The fleet's figures beside the paper's, computed from the trace.
        if scenario.name.starts_with("heart_fleet") {
            let figures = vigil_scenarios::heart_fleet::FleetFigures::from_trace(&outcome.records);
            print!("{}", figures.table());
        }
        finish(&outcome)
    }

    /// `replay`: the run, its whole trace to `out`, and a summary on stdout.
    fn replay(
        scenario: &'static Scenario,
        seed: u64,
        mode: Mode,
        out: Option<std::path::PathBuf>,
        format: Format,
    ) -> ExitCode {
        let outcome = run_seed_in(scenario, seed, mode);
        let out = out.unwrap_or_else(|| {
            let swarm = if mode == Mode::Swarm { "-swarm" } else { "" };
            std::env::temp_dir().join(format!("vigil-sim-{}-{seed}{swarm}.jsonl", scenario.name))
        });
        let trace: String = outcome.records.iter().map(|r| r.line() + "\n").collect();
        let written = if out.as_os_str() == "-" {
            print!("{trace}");
            "stdout".to_string()
        } else if let Err(error) = std::fs::write(&out, trace) {
            eprintln!("could not write the trace to {}: {error}", out.display());
            return ExitCode::from(2);
        } else {
            out.display().to_string()
        };
        let counts = kind_counts(&outcome);
        match format {
            Format::Text => print!("{}", replay_text(&outcome, &counts, &written)),
            Format::Json => println!("{}", replay_json(&outcome, &counts, &written)),
        }
        if outcome.passed() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }

    /// Trace records by kind: the record's `type`, and for a committed runtime event its own
    /// type too (`committed.agent_created`), in name order.
    fn kind_counts(outcome: &Outcome) -> std::collections::BTreeMap<String, u64> {
        let mut counts = std::collections::BTreeMap::new();
        for record in &outcome.records {
            let value = serde_json::to_value(&record.event).expect("trace records serialize");
            let kind = value["type"].as_str().unwrap_or("unknown");
            let kind = match value["event"]["type"].as_str() {
                Some(inner) if kind == "committed" => format!("{kind}.{inner}"),
                _ => kind.to_string(),
            };
            *counts.entry(kind).or_insert(0) += 1;
        }
        counts
    }

    /// The text summary; it ends with the run's usual result line.
    fn replay_text(
        outcome: &Outcome,
        counts: &std::collections::BTreeMap<String, u64>,
        written: &str,
    ) -> String {
        let mut text = format!(
            "scenario: {}\nseed: {}{}\nverdict: {}\n",
            outcome.scenario,
            outcome.seed,
            outcome.mode.flag(),
            if outcome.passed() { "pass" } else { "fail" }
        );
        if let Some(swarm) = outcome.swarm_choice() {
            text.push_str(&format!("swarm: {swarm}\n"));
        }
        text.push_str(&format!(
            "trace: {} records written to {written}\nrecords by kind:\n",
            outcome.records.len()
        ));
        let width = counts.keys().map(String::len).max().unwrap_or(0);
        for (kind, count) in counts {
            text.push_str(&format!("  {kind:<width$}  {count}\n"));
        }
        match &outcome.violation {
            None => text.push_str("violations: none\n"),
            Some((t_ms, violation)) => text.push_str(&format!(
                "violations: 1\n  `{}` at virtual t={:.3}s: {}\n",
                violation.invariant,
                *t_ms as f64 / 1_000.0,
                violation.detail
            )),
        }
        text.push_str(&outcome.result_line());
        text.push('\n');
        text
    }

    /// The summary as one JSON object.
    fn replay_json(
        outcome: &Outcome,
        counts: &std::collections::BTreeMap<String, u64>,
        written: &str,
    ) -> serde_json::Value {
        let violations: Vec<serde_json::Value> = outcome
            .violation
            .iter()
            .map(|(t_ms, violation)| {
                serde_json::json!({
                    "invariant": violation.invariant,
                    "t_ms": t_ms,
                    "detail": violation.detail,
                })
            })
            .collect();
        serde_json::json!({
            "scenario": outcome.scenario,
            "seed": outcome.seed,
            "swarm": outcome.mode == Mode::Swarm,
            "verdict": if outcome.passed() { "pass" } else { "fail" },
            "trace_hash": outcome.trace_hash(),
            "records": outcome.records.len(),
            "records_by_kind": counts,
            "violations": violations,
            "trace": written,
            "virtual_ms": outcome.virtual_ms,
            "wall_ms": outcome.wall_ms,
        })
    }

    fn finish(outcome: &Outcome) -> ExitCode {
        if let Some(report) = outcome.failure_report() {
            print!("{report}");
        }
        println!("{}", outcome.result_line());
        if outcome.passed() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }

    /// Re-runs every seed of a regression file; fails if any still fails.
    fn regress(path: &std::path::Path) -> ExitCode {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) => {
                eprintln!("could not read {}: {error}", path.display());
                return ExitCode::from(2);
            }
        };
        let regressions = match parse_regressions(&text) {
            Ok(regressions) => regressions,
            Err(error) => {
                eprintln!("{}: {error}", path.display());
                return ExitCode::from(2);
            }
        };
        let mut failed = 0;
        for regression in &regressions {
            let outcome = run_seed_in(regression.scenario, regression.seed, regression.mode);
            if let Some(report) = outcome.failure_report() {
                print!("{report}");
                failed += 1;
            }
            println!("{}", outcome.result_line());
        }
        println!(
            "regress file={} seeds={} passed={} failed={failed}",
            path.display(),
            regressions.len(),
            regressions.len() - failed
        );
        if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }

    /// One row per scenario swept.
    fn print_table(summaries: &[SweepSummary]) {
        println!(
            "{:<15} {:>6} {:>6} {:>6} {:>9} {:>12}",
            "scenario", "seeds", "passed", "failed", "wall_s", "sim_h/wall_s"
        );
        for s in summaries {
            let wall_s = s.wall_ms.max(1) as f64 / 1_000.0;
            println!(
                "{:<15} {:>6} {:>6} {:>6} {:>9.1} {:>12.0}",
                s.scenario,
                s.seeds,
                s.seeds - s.failed.len() as u64,
                s.failed.len(),
                wall_s,
                s.virtual_ms_total as f64 / 3_600_000.0 / wall_s
            );
        }
    }

    fn run_sweep(scenario: &'static Scenario, options: SweepOptions, mode: Mode) -> SweepSummary {
        let interactive = std::io::stderr().is_terminal();
        let started = vigil_scenarios::wall_clock::Stopwatch::start();
        let progress = |done: u64, failed: u64, outcome: &Outcome| {
            let wall_s = started.elapsed_ms().max(1) as f64 / 1_000.0;
            let sim_hours = done as f64 * scenario.virtual_ms as f64 / 3_600_000.0;
            let filled = done * PROGRESS_BAR_CHARS / options.seeds.max(1);
            let bar: String = (0..PROGRESS_BAR_CHARS)
                .map(|i| if i < filled { '#' } else { '.' })
                .collect();
            let line = format!(
                "{} [{bar}] {done:>5}/{} failed={failed} sim_h/wall_s={:.0}",
                scenario.name,
                options.seeds,
                sim_hours / wall_s
            );
            if !outcome.passed() {
                eprintln!(
                    "\nseed {} FAILED: {}{}",
                    outcome.seed,
                    outcome.violation.as_ref().map_or("", |(_, v)| v.invariant),
                    outcome
                        .swarm_choice()
                        .map_or(String::new(), |swarm| format!(" (swarm {swarm})"))
                );
            }
            let step = (options.seeds / 10).max(1);
            if interactive {
                eprint!("\r{line}");
                let _ = std::io::stderr().flush();
            } else if done.is_multiple_of(step) || done == options.seeds {
                eprintln!("{line}");
            }
        };
        let summary = sweep_in(scenario, options, mode, &progress);
        if interactive {
            eprintln!();
        }
        println!("{}", summary.coverage_table());
        for outcome in &summary.failed {
            let (t_ms, violation) = outcome
                .violation
                .as_ref()
                .expect("failed outcomes have a violation");
            println!(
                "FAILED seed={} invariant={} t={}s{} replay: {}",
                outcome.seed,
                violation.invariant,
                t_ms / 1_000,
                outcome
                    .swarm_choice()
                    .map_or(String::new(), |swarm| format!(" swarm={swarm}")),
                replay_command(outcome.seed, scenario.name, mode)
            );
        }
        println!("{}", summary.result_line());
        summary
    }
}
