//! The Heart's scenarios under the simulator (DESIGN.md invariants 2 and 3): 500 seeds of each
//! pass, and each really exercises what it is named for.
#![cfg(madsim)]

use vigil::engine::event::EventKind;
use vigil::engine::wakeup::{RefusalReason, WakeupSource};
use vigil_scenarios::run::{find, run_seed, sweep, Outcome, SweepOptions};
use vigil_world::trace::TraceEvent;

const SEEDS: u64 = 500;
const COVERAGE_SEEDS: u64 = 5;

fn jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn quiet(_: u64, _: u64, _: &Outcome) {}

fn sweep_passes(name: &str) {
    let scenario = find(name).expect("scenario exists");
    let options = SweepOptions {
        start: 0,
        seeds: SEEDS,
        jobs: jobs(),
        check_determinism: false,
    };
    let summary = sweep(scenario, options, &quiet);
    for outcome in &summary.failed {
        eprintln!("{}", outcome.failure_report().unwrap_or_default());
    }
    println!("{}", summary.result_line());
    assert!(summary.failed.is_empty(), "{}", summary.result_line());
    assert_eq!(summary.virtual_ms_total, SEEDS * scenario.virtual_ms);
}

fn committed(name: &str) -> Vec<EventKind> {
    let scenario = find(name).expect("scenario exists");
    (0..COVERAGE_SEEDS)
        .flat_map(|seed| {
            let outcome = run_seed(scenario, seed);
            assert!(
                outcome.passed(),
                "{}",
                outcome.failure_report().unwrap_or_default()
            );
            outcome.records
        })
        .filter_map(|r| match r.event {
            TraceEvent::Committed { event } => Some(event.kind),
            _ => None,
        })
        .collect()
}

#[test]
fn pause_passes_500_seeds() {
    sweep_passes("pause");
}

#[test]
fn breaker_passes_500_seeds() {
    sweep_passes("breaker");
}

#[test]
fn breaker_really_opens_probes_and_closes() {
    let kinds = committed("breaker");
    let count = |f: fn(&EventKind) -> bool| kinds.iter().filter(|k| f(k)).count();
    let opened = count(|k| matches!(k, EventKind::BreakerOpened { .. }));
    let half = count(|k| matches!(k, EventKind::BreakerHalfOpened { .. }));
    let closed = count(|k| matches!(k, EventKind::BreakerClosed { .. }));
    let refused = count(|k| {
        matches!(
            k,
            EventKind::WakeupRefused {
                refusal: RefusalReason::BreakerOpen,
                ..
            }
        )
    });
    let doubled = kinds.windows(1).count() > 0
        && kinds.iter().any(|k| matches!(k, EventKind::BreakerOpened { cooldown_ms, .. } if *cooldown_ms >= 4 * 60_000));
    assert!(
        opened > 0 && half > 0 && closed > 0 && refused > 0,
        "opened={opened} half={half} closed={closed} refused={refused}"
    );
    assert!(doubled, "some cooldown doubled");
}

#[test]
fn wakeup_storm_passes_500_seeds() {
    sweep_passes("wakeup_storm");
}

#[test]
fn pause_really_refuses_timer_wakeups_and_they_resume() {
    let kinds = committed("pause");
    let refused = kinds
        .iter()
        .filter(|k| {
            matches!(
                k,
                EventKind::WakeupRefused {
                    source: WakeupSource::Timer,
                    refusal: RefusalReason::Paused,
                    ..
                }
            )
        })
        .count();
    let timer_runs = kinds
        .iter()
        .filter(|k| {
            matches!(
                k,
                EventKind::WakeupQueued {
                    source: WakeupSource::Timer,
                    ..
                }
            )
        })
        .count();
    assert!(refused > 20, "timer wakeups refused as paused: {refused}");
    assert!(
        timer_runs > refused,
        "timers resumed after pauses: {timer_runs} queued, {refused} refused"
    );
}

#[test]
fn wakeup_storm_really_reaches_the_daily_cap() {
    let kinds = committed("wakeup_storm");
    let capped = kinds
        .iter()
        .filter(|k| {
            matches!(
                k,
                EventKind::WakeupRefused {
                    refusal: RefusalReason::DailyCap,
                    ..
                }
            )
        })
        .count();
    assert!(capped > 100, "wakeups refused by the daily cap: {capped}");
}
