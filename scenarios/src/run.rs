//! Running scenarios: one seed, a determinism check, and sweeps over many seeds.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use vigil_world::check::Violation;
use vigil_world::harness::simulate;
use vigil_world::recorder::Recorder;
use vigil_world::trace::{first_difference, trace_hash, TraceEvent, TraceRecord};

use crate::wall_clock::Stopwatch;

/// Trace records shown before a failure report's verdict.
pub const REPORT_TAIL_RECORDS: usize = 50;

type ScenarioFuture = Pin<Box<dyn Future<Output = ()>>>;

/// A named scenario.
pub struct Scenario {
    pub name: &'static str,
    /// One line for `vigil-sim list`.
    pub summary: &'static str,
    /// Simulated length of one run.
    pub virtual_ms: u64,
    body: fn(u64, Recorder) -> ScenarioFuture,
}

/// Every scenario, in the order `list` shows them.
pub static SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "smoke",
        summary: "1 node, 10 timer agents with scripted runs, 24 h; crashes, power cuts mid-commit, clock jumps both ways; quiet last hour",
        virtual_ms: crate::smoke::SAFETY_MS + crate::smoke::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::smoke::run(seed, recorder)),
    },
    Scenario {
        name: "coalesce_burst",
        summary: "4 agents (2 with a 5-60 s cooldown between runs), bursts of 100-200 on-demand wakeups inside a second over 4 task keys, with crashes and power cuts; 2 h",
        virtual_ms: crate::coalesce_burst::SAFETY_MS + crate::coalesce_burst::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::coalesce_burst::run(seed, recorder)),
    },
    Scenario {
        name: "idempotency",
        summary: "keyed wakeups retried 2-6 times each across crashes and power cuts; every answer for a key names one wakeup; 2 h",
        virtual_ms: crate::idempotency::SAFETY_MS + crate::idempotency::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::idempotency::run(seed, recorder)),
    },
    Scenario {
        name: "crash_mid_run",
        summary: "minutes-long runs cut off by frequent crashes; each interrupted run fails once and is re-queued once; 3 h 15 min",
        virtual_ms: crate::crash_mid_run::SAFETY_MS + crate::crash_mid_run::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::crash_mid_run::run(seed, recorder)),
    },
    Scenario {
        name: "pause",
        summary: "6 timer agents take pause_heartbeats rests (0-61 min) under skew, clock jumps, crashes and power cuts, while a reader drops and resumes the live event stream; 3 h",
        virtual_ms: crate::pause::SAFETY_MS + crate::pause::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::pause::run(seed, recorder)),
    },
    Scenario {
        name: "pause_basic",
        summary: "3 agents on 10-20 s timers take 1-3 pause_heartbeats rests each (default, 1, 3, 5 min); no faults; 25 min",
        virtual_ms: crate::pause_table::SAFETY_MS + crate::pause_table::QUIET_MS,
        body: |seed, recorder| {
            Box::pin(crate::pause_table::run(
                crate::pause_table::Case::Basic,
                seed,
                recorder,
            ))
        },
    },
    Scenario {
        name: "pause_skew",
        summary: "as pause_basic on a node whose wall clock is 5 s off (either way) from the start; 25 min",
        virtual_ms: crate::pause_table::SAFETY_MS + crate::pause_table::QUIET_MS,
        body: |seed, recorder| {
            Box::pin(crate::pause_table::run(
                crate::pause_table::Case::Skew,
                seed,
                recorder,
            ))
        },
    },
    Scenario {
        name: "pause_jump_forward",
        summary: "a 1-min rest, then 10 s in a +60 s clock jump past pause_until: the pause ends at once; 25 min",
        virtual_ms: crate::pause_table::SAFETY_MS + crate::pause_table::QUIET_MS,
        body: |seed, recorder| {
            Box::pin(crate::pause_table::run(
                crate::pause_table::Case::JumpForward,
                seed,
                recorder,
            ))
        },
    },
    Scenario {
        name: "pause_jump_backward",
        summary: "a 1-min rest, then 10 s in a -30 s clock jump: the pause holds 30 s longer in true time; 25 min",
        virtual_ms: crate::pause_table::SAFETY_MS + crate::pause_table::QUIET_MS,
        body: |seed, recorder| {
            Box::pin(crate::pause_table::run(
                crate::pause_table::Case::JumpBackward,
                seed,
                recorder,
            ))
        },
    },
    Scenario {
        name: "pause_crash_after_write",
        summary: "a power cut within the commit that records a rest (before or after its sync); an acked pause survives; 25 min",
        virtual_ms: crate::pause_table::SAFETY_MS + crate::pause_table::QUIET_MS,
        body: |seed, recorder| {
            Box::pin(crate::pause_table::run(
                crate::pause_table::Case::CrashAfterWrite,
                seed,
                recorder,
            ))
        },
    },
    Scenario {
        name: "pause_many_agents",
        summary: "20 agents rest independently (clamp boundaries 0, 1, 61 min too); no faults; 30 min",
        virtual_ms: crate::pause_table::MANY_SAFETY_MS + crate::pause_table::QUIET_MS,
        body: |seed, recorder| {
            Box::pin(crate::pause_table::run(
                crate::pause_table::Case::ManyAgents,
                seed,
                recorder,
            ))
        },
    },
    Scenario {
        name: "breaker",
        summary: "a simulated LLM provider rate-limits for 40-90 min (plus 503s, timeouts, malformed replies): breaker opens, one probe per doubling cooldown, closes after recovery; a tool-failure agent too; 5 h",
        virtual_ms: crate::breaker::SAFETY_MS + crate::breaker::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::breaker::run(seed, recorder)),
    },
    Scenario {
        name: "wakeup_storm",
        summary: "travel_rescue: 5-min timer, daily_cap 48 in New York time, bursts, long downtimes, jumps; 2 days",
        virtual_ms: crate::wakeup_storm::SAFETY_MS + crate::wakeup_storm::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::wakeup_storm::run(seed, recorder)),
    },
    Scenario {
        name: "midnight",
        summary: "3 agents in a zone whose local midnight falls 20-80 min in: a cap of 5 reached while bursts coalesce, a rest across midnight, a backward jump back over it, crashes and power cuts; 3 h 30 min",
        virtual_ms: crate::midnight::SAFETY_MS + crate::midnight::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::midnight::run(seed, recorder)),
    },
    Scenario {
        name: "liveness",
        summary: "8 agents pulse (fixed and phi-accrual) over a lossy, slow network with dropped pulses and silences, crashes, power cuts, clock jumps; 1 h",
        virtual_ms: crate::liveness::SAFETY_MS + crate::liveness::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::liveness::run(seed, recorder)),
    },
    Scenario {
        name: "heart_fleet",
        summary: "the LocalKin Heart fleet: 75 llm agents, batch pulses every 10 s, 30-min schedule with daily_cap 48, 2-h idle chamber, breaker, 78 % [IDLE] answers; prints its figures beside the paper's; 24 h",
        virtual_ms: crate::heart_fleet::DAY_SAFETY_MS + crate::heart_fleet::QUIET_MS,
        body: |seed, recorder| {
            Box::pin(crate::heart_fleet::run(
                seed,
                recorder,
                crate::heart_fleet::DAY_SAFETY_MS,
            ))
        },
    },
    Scenario {
        name: "heart_fleet_2h",
        summary: "heart_fleet for 2 hours (the sweep's length): the same fleet, provider, tools and faults",
        virtual_ms: crate::heart_fleet::SHORT_SAFETY_MS + crate::heart_fleet::QUIET_MS,
        body: |seed, recorder| {
            Box::pin(crate::heart_fleet::run(
                seed,
                recorder,
                crate::heart_fleet::SHORT_SAFETY_MS,
            ))
        },
    },
    Scenario {
        name: "tool_loop",
        summary: "llm agents whose model keeps calling failing and looping tools, against tool_calls_max, max_iterations and a daily budget, with crashes, power cuts and tool-server failure and hang spells mid-run; 2 h 30 min",
        virtual_ms: crate::tool_loop::SAFETY_MS + crate::tool_loop::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::tool_loop::run(seed, recorder)),
    },
    Scenario {
        name: "cli_agents",
        summary: "process agents on a machine whose children hang, ignore SIGTERM, print garbage, die mid-output and leave grandchildren, with cancels, pauses, crashes and power cuts mid-run: no process group outlives its run; 3 h",
        virtual_ms: crate::cli_agents::SAFETY_MS + crate::cli_agents::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::cli_agents::run(seed, recorder)),
    },
    Scenario {
        name: "hostile",
        summary: "an honest operator beside a hostile node abusing 8 agent tokens (slow bodies, idle connections, stream flood, key flood, request flood, oversized body), with crashes, power cuts and a partition: the operator is answered in time; 30 min",
        virtual_ms: crate::hostile::SAFETY_MS + crate::hostile::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::hostile::run(seed, recorder)),
    },
    Scenario {
        name: "alerts",
        summary: "1 alert sink refusing 30% of attempts; failing runs and breakers, a daily cap, an agent gone silent, crashes and power cuts; every alerted event delivered after the quiet phase; 30 min",
        virtual_ms: crate::alerts::SAFETY_MS + crate::alerts::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::alerts::run(seed, recorder)),
    },
    Scenario {
        name: "predicate_flap",
        summary: "predicate heartbeats of 4 scripted agents watch a state server flapping every 10-60 s, answering slowly, late or never, with crashes, power cuts mid-commit and clock jumps: each transition enqueued once, the pending cap held, lost transitions seen again; 29 min",
        virtual_ms: crate::predicate_flap::SAFETY_MS + crate::predicate_flap::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::predicate_flap::run(seed, recorder)),
    },
    Scenario {
        name: "edges",
        summary: "agents created, changed, woken, paused, pulsed and given heartbeats with every documented limit at its edge and just past it (one field at a time), under crashes, power cuts and clock jumps; specs and timelines read back; 1 h 20 min",
        virtual_ms: crate::edges::SAFETY_MS + crate::edges::QUIET_MS,
        body: |seed, recorder| Box::pin(crate::edges::run(seed, recorder)),
    },
];

/// The scenario called `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// How a run chooses its faults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// The scenario's own designed mix of faults.
    #[default]
    Designed,
    /// A random subset of the fault catalogue at random rates, chosen by the seed
    /// (faults/src/swarm.rs).
    Swarm,
}

impl Mode {
    /// The words a command line adds for this mode (empty for the designed mix).
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Designed => "",
            Mode::Swarm => " --swarm",
        }
    }
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub scenario: &'static str,
    pub seed: u64,
    pub mode: Mode,
    pub records: Vec<TraceRecord>,
    pub violation: Option<(u64, Violation)>,
    pub virtual_ms: u64,
    pub wall_ms: u64,
    /// What the seed met: invariants' preconditions and faults struck.
    pub coverage: crate::coverage::Coverage,
}

impl Outcome {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violation.is_none()
    }

    /// The hash of the whole trace. Computed when asked: it serializes every record, about 2 %
    /// of a seed's work, and a sweep asks it of no passing seed.
    pub fn trace_hash(&self) -> String {
        trace_hash(&self.records)
    }

    /// The one-line summary every run ends with.
    pub fn result_line(&self) -> String {
        format!(
            "seed={} scenario={}{} verdict={} trace_hash={} events={} virtual_s={} wall_ms={}",
            self.seed,
            self.scenario,
            match self.mode {
                Mode::Designed => "",
                Mode::Swarm => " mode=swarm",
            },
            if self.passed() { "pass" } else { "fail" },
            self.trace_hash(),
            self.records.len(),
            self.virtual_ms / 1_000,
            self.wall_ms
        )
    }

    /// The failure report: the invariant, when, the last trace records, how to replay.
    pub fn failure_report(&self) -> Option<String> {
        let (t_ms, violation) = self.violation.as_ref()?;
        let mut report = String::new();
        let skip = self.records.len().saturating_sub(REPORT_TAIL_RECORDS);
        report.push_str(&format!(
            "--- last {} trace records ---\n",
            self.records.len() - skip
        ));
        for record in &self.records[skip..] {
            report.push_str(&record.line());
            report.push('\n');
        }
        report.push_str(&format!(
            "--- FAILED: invariant `{}` violated at virtual t={}.{:03}s ---\n{}\nseed: {}\n",
            violation.invariant,
            t_ms / 1_000,
            t_ms % 1_000,
            violation.detail,
            self.seed,
        ));
        if let Some(swarm) = self.swarm_choice() {
            report.push_str(&format!("swarm: {swarm}\n"));
        }
        report.push_str(&format!(
            "replay: {}\n",
            replay_command(self.seed, self.scenario, self.mode)
        ));
        Some(report)
    }

    /// The swarm choice the run recorded in its first trace record, if it was a swarm run.
    pub fn swarm_choice(&self) -> Option<&str> {
        let TraceEvent::RunStarted { plan, .. } = &self.records.first()?.event else {
            return None;
        };
        plan.split_whitespace()
            .find_map(|word| word.strip_prefix("swarm="))
    }
}

/// The one command that reproduces `seed` of `scenario` as this process ran it (including the
/// lying-fsync switch, which changes the world).
pub fn replay_command(seed: u64, scenario: &str, mode: Mode) -> String {
    let lying = if vigil_world::disk::lying_fsync_from_env() {
        format!("{}=1 ", vigil_world::disk::LYING_FSYNC_ENV)
    } else {
        String::new()
    };
    format!("{lying}cargo xtask replay {seed} {scenario}{}", mode.flag())
}

/// Runs `scenario` once for `seed` with its designed faults.
pub fn run_seed(scenario: &'static Scenario, seed: u64) -> Outcome {
    run_seed_in(scenario, seed, Mode::Designed)
}

/// Runs `scenario` once for `seed`, its faults chosen as `mode` says.
pub fn run_seed_in(scenario: &'static Scenario, seed: u64, mode: Mode) -> Outcome {
    crate::keep_freed_memory();
    let stopwatch = Stopwatch::start();
    // Generous: a run that needs more virtual time than twice its length is stuck.
    let time_limit = Duration::from_millis(scenario.virtual_ms * 2);
    let body = scenario.body;
    let result = simulate(seed, time_limit, move |recorder| {
        recorder.set_swarm(mode == Mode::Swarm);
        body(seed, recorder)
    });
    Outcome {
        scenario: scenario.name,
        seed,
        mode,
        coverage: crate::coverage::of_seed(&result.records),
        records: result.records,
        violation: result.violation,
        virtual_ms: result.virtual_ms,
        wall_ms: stopwatch.elapsed_ms(),
    }
}

/// Runs `seed` twice and fails the outcome unless the two whole traces are identical.
pub fn run_seed_twice(scenario: &'static Scenario, seed: u64) -> Outcome {
    run_seed_twice_in(scenario, seed, Mode::Designed)
}

/// Like [`run_seed_twice`], its faults chosen as `mode` says.
pub fn run_seed_twice_in(scenario: &'static Scenario, seed: u64, mode: Mode) -> Outcome {
    let stopwatch = Stopwatch::start();
    let first = run_seed_in(scenario, seed, mode);
    let mut second = run_seed_in(scenario, seed, mode);
    second.wall_ms = stopwatch.elapsed_ms();
    if second.violation.is_none() {
        if let Some(divergence) = first_difference(&first.records, &second.records) {
            let t_ms = second.records.last().map_or(0, |r| r.t_ms);
            second.violation = Some((
                t_ms,
                Violation {
                    invariant: "same_seed_same_trace",
                    detail: divergence.to_string(),
                },
            ));
        }
    }
    second
}

/// Summary of a sweep.
#[derive(Debug, Clone)]
pub struct SweepSummary {
    pub scenario: &'static str,
    pub mode: Mode,
    pub seeds: u64,
    pub failed: Vec<Outcome>,
    pub wall_ms: u64,
    pub virtual_ms_total: u64,
    /// What the seeds met, together.
    pub coverage: crate::coverage::SweepCoverage,
}

impl SweepSummary {
    /// The preconditions the scenario is built to reach that no seed of this sweep met (a
    /// sweep that never met one checked nothing of its invariant).
    pub fn coverage_gaps(&self) -> Vec<&'static str> {
        self.coverage.gaps(self.scenario)
    }

    /// The coverage table: each precondition and fault, the seeds that met it, how often.
    pub fn coverage_table(&self) -> String {
        self.coverage.table(self.scenario, self.seeds)
    }

    /// The line every sweep ends with.
    pub fn result_line(&self) -> String {
        format!(
            "sweep scenario={}{} seeds={} passed={} failed={} wall_ms={}",
            self.scenario,
            match self.mode {
                Mode::Designed => "",
                Mode::Swarm => " mode=swarm",
            },
            self.seeds,
            self.seeds - self.failed.len() as u64,
            self.failed.len(),
            self.wall_ms
        )
    }
}

/// Options of a sweep.
#[derive(Debug, Clone, Copy)]
pub struct SweepOptions {
    pub start: u64,
    pub seeds: u64,
    pub jobs: usize,
    pub check_determinism: bool,
}

/// Runs seeds `start..start+seeds` on `jobs` threads. `progress` is called after each seed with
/// (done, failed, outcome) from the thread that ran it.
pub fn sweep(
    scenario: &'static Scenario,
    options: SweepOptions,
    progress: &(dyn Fn(u64, u64, &Outcome) + Sync),
) -> SweepSummary {
    sweep_in(scenario, options, Mode::Designed, progress)
}

/// Like [`sweep`], every seed's faults chosen as `mode` says.
pub fn sweep_in(
    scenario: &'static Scenario,
    options: SweepOptions,
    mode: Mode,
    progress: &(dyn Fn(u64, u64, &Outcome) + Sync),
) -> SweepSummary {
    let stopwatch = Stopwatch::start();
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failed = Mutex::new(Vec::new());
    let virtual_ms_total = AtomicU64::new(0);
    let coverage = Mutex::new(crate::coverage::SweepCoverage::default());
    let jobs = options.jobs.max(1);
    // Worker threads only hand out seeds; each seed still runs alone in its own simulation.
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                if index >= options.seeds {
                    return;
                }
                let seed = options.start + index;
                let outcome = if options.check_determinism {
                    run_seed_twice_in(scenario, seed, mode)
                } else {
                    run_seed_in(scenario, seed, mode)
                };
                virtual_ms_total.fetch_add(outcome.virtual_ms, Ordering::SeqCst);
                coverage.lock().expect("sweep lock").add(&outcome.coverage);
                let failed_count = {
                    let mut failed = failed.lock().expect("sweep lock");
                    if !outcome.passed() {
                        failed.push(outcome.clone());
                    }
                    failed.len() as u64
                };
                let done_count = done.fetch_add(1, Ordering::SeqCst) + 1;
                progress(done_count, failed_count, &outcome);
            });
        }
    });
    let mut failed = failed.into_inner().expect("sweep lock");
    failed.sort_by_key(|o| o.seed);
    SweepSummary {
        scenario: scenario.name,
        mode,
        seeds: options.seeds,
        failed,
        wall_ms: stopwatch.elapsed_ms(),
        virtual_ms_total: virtual_ms_total.load(Ordering::SeqCst),
        coverage: coverage.into_inner().expect("sweep lock"),
    }
}

/// One line of a regression file: a scenario and a seed that once failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regression {
    pub scenario: &'static Scenario,
    pub seed: u64,
    pub mode: Mode,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name)
    }
}

impl PartialEq for Scenario {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Scenario {}

/// Parses a regression file: one `<scenario> <seed>` per line, `<scenario> <seed> swarm` for a
/// swarm run; `#` starts a comment. Errors name the line.
pub fn parse_regressions(text: &str) -> Result<Vec<Regression>, String> {
    let mut regressions = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let number = index + 1;
        let mut words = line.split_whitespace();
        let (Some(name), Some(seed), mode, None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return Err(format!(
                "line {number}: expected `<scenario> <seed>` or `<scenario> <seed> swarm`, got {raw:?}"
            ));
        };
        let mode = match mode {
            None => Mode::Designed,
            Some("swarm") => Mode::Swarm,
            Some(other) => {
                return Err(format!(
                    "line {number}: the third word may only be `swarm`, got {other:?}"
                ))
            }
        };
        let scenario =
            find(name).ok_or_else(|| format!("line {number}: unknown scenario {name:?}"))?;
        let seed = seed
            .parse()
            .map_err(|_| format!("line {number}: seed must be a number, got {seed:?}"))?;
        regressions.push(Regression {
            scenario,
            seed,
            mode,
        });
    }
    Ok(regressions)
}

/// The lines a sweep appends to a regression file for its failures.
pub fn regression_lines(summary: &SweepSummary) -> String {
    summary
        .failed
        .iter()
        .map(|o| {
            let invariant = o.violation.as_ref().map_or("", |(_, v)| v.invariant);
            let swarm = match o.mode {
                Mode::Designed => "",
                Mode::Swarm => " swarm",
            };
            format!("{} {}{swarm}  # {invariant}\n", o.scenario, o.seed)
        })
        .collect()
}
