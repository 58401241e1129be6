//! Scenario `midnight`: the rare combinations around an agent's local midnight, designed to meet
//! in every seed. The agents live in a whole-hour zone (`Etc/GMT±h`) chosen from the seed's
//! start instant so that their local midnight falls 20 to 80 minutes into the run. Around it:
//!
//! - `capped` has a daily cap of five runs, minutes-long runs and bursts of on-demand wakeups
//!   over four task keys, so its cap is reached while wakeups still join its queued runs
//!   (`cap_hit_while_coalescing`: joining costs no start and is never refused `daily_cap`);
//! - `rester` asks for a rest shortly before midnight that ends after it
//!   (`pause_across_midnight`);
//! - `steady` is woken every few minutes, and a pinned backward jump 5 to 30 minutes after
//!   midnight takes the node's clock back to 10 to 50 minutes before it, so its next starts
//!   count on the day it already counted, not the clock's (`start_on_a_kept_day`).
//!
//! Crashes and power cuts strike throughout. Invariants 2 (at most five starts per local day,
//! under the jump), 3 (the rest across the day's roll-over), 6 and 23 (joins and refusals) and
//! 22 (the day each start counts on) are the ones pushed.

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_faults::{Fault, Injection};
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, AgentWorld, Setup};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 3 * HOUR_MS;
pub const QUIET_MS: u64 = 30 * MINUTE_MS;
const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const DAY_MS: u64 = 24 * HOUR_MS;
/// The agents' local midnight falls this far into the run: late enough for the cap to fill
/// before it, early enough for the jump and the next day's starts after it.
const MIDNIGHT_AFTER_MS: std::ops::Range<u64> = 20 * MINUTE_MS..80 * MINUTE_MS;
const CAP: u32 = 5;
const TASK_KEYS: [Option<&str>; 4] = [None, Some("inbox"), Some("triage"), Some("report")];
const BURSTS: std::ops::RangeInclusive<usize> = 4..=8;
const BURST_WAKEUPS: std::ops::RangeInclusive<usize> = 10..=30;
const BURST_WINDOW_MS: u64 = 1_000;
/// `rester`'s rest starts this long before midnight and lasts `REST_MINUTES`.
const REST_BEFORE_MIDNIGHT_MS: std::ops::Range<u64> = MINUTE_MS..20 * MINUTE_MS;
const REST_MINUTES: std::ops::RangeInclusive<u64> = 25..=60;
/// The jump strikes this long after midnight and lands this long before it.
const JUMP_AFTER_MIDNIGHT_MS: std::ops::Range<u64> = 5 * MINUTE_MS..30 * MINUTE_MS;
const JUMP_LANDS_BEFORE_MIDNIGHT_MS: std::ops::Range<u64> = 10 * MINUTE_MS..50 * MINUTE_MS;
/// `steady` is woken on demand this often.
const STEADY_EVERY_MS: std::ops::Range<u64> = 2 * MINUTE_MS..6 * MINUTE_MS;

/// The whole-hour offset (-11..=12 h from UTC) whose local time at `wall_ms` is between 80 and
/// 20 minutes before midnight, and how far midnight is then. Exactly one offset in 24
/// consecutive ones puts the time of day in that one-hour window.
fn offset_before_midnight(wall_ms: u64) -> (i64, u64) {
    for hours in -11..=12_i64 {
        let local_ms = (wall_ms as i64 + hours * HOUR_MS as i64).rem_euclid(DAY_MS as i64) as u64;
        let to_midnight_ms = DAY_MS - local_ms;
        if MIDNIGHT_AFTER_MS.contains(&to_midnight_ms) {
            return (hours, to_midnight_ms);
        }
    }
    unreachable!("24 whole-hour offsets cover every hour of the day")
}

/// The IANA name of the fixed zone `hours` ahead of UTC (POSIX-style names flip the sign).
fn zone_name(hours: i64) -> String {
    match hours {
        0 => "UTC".into(),
        h if h > 0 => format!("Etc/GMT-{h}"),
        h => format!("Etc/GMT+{}", -h),
    }
}

fn agent(
    name: &str,
    zone: &str,
    heartbeat: serde_json::Value,
    limits: serde_json::Value,
    run_ms: (u64, u64),
) -> Step {
    Step {
        at_ms: 0,
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": name,
                "time_zone": zone,
                "heartbeat": heartbeat,
                "limits": limits,
                "adapter": { "type": "scripted", "steps": [
                    { "duration_ms": run_ms.0, "outcome": "succeeded" },
                    { "duration_ms": run_ms.1, "outcome": "succeeded" },
                ]},
            }),
        },
    }
}

fn wake(at_ms: u64, agent: &str, reason: String, task_key: Option<&str>) -> Step {
    Step {
        at_ms,
        action: Action::Wake {
            agent: agent.into(),
            request: serde_json::json!({ "source": "on_demand", "reason": reason, "task_key": task_key }),
        },
    }
}

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "midnight");
    let (hours, midnight_ms) = offset_before_midnight(vigil_world::harness::epoch_wall_ms());
    let zone = zone_name(hours);
    let mut steps = vec![
        agent(
            "capped",
            &zone,
            serde_json::json!({ "interval_ms": 10 * MINUTE_MS }),
            serde_json::json!({ "daily_cap": CAP }),
            (
                rng.gen_range(3 * MINUTE_MS..6 * MINUTE_MS),
                rng.gen_range(MINUTE_MS..4 * MINUTE_MS),
            ),
        ),
        agent(
            "rester",
            &zone,
            serde_json::json!({ "interval_ms": 5 * MINUTE_MS }),
            serde_json::json!({}),
            (20_000, 40_000),
        ),
        agent(
            "steady",
            &zone,
            serde_json::json!({}),
            serde_json::json!({ "daily_cap": 100 }),
            (10_000, 30_000),
        ),
    ];
    let bursts = rng.gen_range(BURSTS);
    for burst in 0..bursts {
        let start_ms = rng.gen_range(2 * MINUTE_MS..SAFETY_MS);
        for i in 0..rng.gen_range(BURST_WAKEUPS) {
            let key = TASK_KEYS[rng.gen_range(0..TASK_KEYS.len())];
            let at_ms = start_ms + rng.gen_range(0..BURST_WINDOW_MS);
            steps.push(wake(
                at_ms,
                "capped",
                format!("burst {burst} wake {i}"),
                key,
            ));
        }
    }
    let rest_at_ms = midnight_ms - rng.gen_range(REST_BEFORE_MIDNIGHT_MS);
    let minutes = rng.gen_range(REST_MINUTES);
    steps.push(Step {
        at_ms: rest_at_ms,
        action: Action::PauseHeartbeats {
            agent: "rester".into(),
            minutes: Some(minutes),
        },
    });
    let mut at_ms = rng.gen_range(STEADY_EVERY_MS);
    while at_ms < SAFETY_MS {
        steps.push(wake(at_ms, "steady", format!("steady at {at_ms}"), None));
        at_ms += rng.gen_range(STEADY_EVERY_MS);
    }
    steps.sort_by_key(|s| s.at_ms);
    let jump_at_ms = midnight_ms + rng.gen_range(JUMP_AFTER_MIDNIGHT_MS);
    let lands_before_ms = rng.gen_range(JUMP_LANDS_BEFORE_MIDNIGHT_MS);
    let delta_ms = -((jump_at_ms - midnight_ms + lands_before_ms) as i64);
    let pinned = vec![Injection {
        at_ms: jump_at_ms,
        fault: Fault::ClockJump { delta_ms },
    }];
    let setup = Setup {
        // Its crashes and power cuts meet compacted logs: recovery must come from the snapshot.
        agents: AgentWorld {
            snapshots: crate::phases::SnapshotMix::Compacting,
            ..AgentWorld::default()
        },
        pinned,
        scenario: "midnight",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 1.0, 6),
            rate(FaultKind::PowerCut, 0.5, 3),
        ],
        downtime_ms_max: 10 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 10 * MINUTE_MS,
        steps,
        probe_every_ms: 5 * MINUTE_MS,
        tail_every_ms: 2 * MINUTE_MS,
        sse_readers: 0,
        describe: format!(
            "zone={zone} midnight_ms={midnight_ms} bursts={bursts} rest_at_ms={rest_at_ms} rest_minutes={minutes} jump_at_ms={jump_at_ms} jump_ms={delta_ms}"
        ),
    };
    phases::run(setup, recorder).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_puts_midnight_inside_the_window_for_every_minute_of_the_day() {
        for minute in 0..24 * 60 {
            let wall_ms = 1_767_225_600_000 + minute * MINUTE_MS + 123;
            let (hours, to_midnight_ms) = offset_before_midnight(wall_ms);
            assert!((-11..=12).contains(&hours));
            assert!(
                MIDNIGHT_AFTER_MS.contains(&to_midnight_ms),
                "{minute}: {to_midnight_ms}"
            );
            let local_ms = wall_ms as i64 + hours * HOUR_MS as i64 + to_midnight_ms as i64;
            assert_eq!(local_ms.rem_euclid(DAY_MS as i64), 0, "{minute}");
        }
    }

    #[test]
    fn fixed_zones_are_named_with_posix_signs() {
        assert_eq!(zone_name(0), "UTC");
        assert_eq!(zone_name(5), "Etc/GMT-5");
        assert_eq!(zone_name(-8), "Etc/GMT+8");
    }
}
