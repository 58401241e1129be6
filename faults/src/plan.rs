//! Fault plans: which faults happen at which virtual instants of a run.
//!
//! Faults that strike at an instant (crash, clock jump) arrive as a Poisson process with a mean
//! rate per simulated hour, bounded by `max_triggers` and starting `after_ms` into the run. Each
//! fault kind draws its arrivals and parameters from its own stream.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::stream::stream;

/// Something that goes wrong on a runtime node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// Kill the node at this instant (all memory lost, unsynced writes partly lost or torn) and
    /// restart it on its surviving disk after `downtime_ms`.
    Crash { downtime_ms: u64 },
    /// Cut the node's power at its `after_ops`-th storage operation from now (a write,
    /// `set_len` or sync: so before or after a sync), in the middle of a commit; the unsynced
    /// part of that commit partly lands, torn. DESIGN.md's CrashAfterWrite. Restart after
    /// `downtime_ms`.
    PowerCut { after_ops: u64, downtime_ms: u64 },
    /// Move the node's wall clock by `delta_ms` (negative: backward). Monotonic time is untouched.
    ClockJump { delta_ms: i64 },
}

impl Fault {
    /// The fault kind's name: its random stream and its name in traces and docs/faults.md.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Crash { .. } => "crash",
            Fault::PowerCut { .. } => "power_cut",
            Fault::ClockJump { .. } => "clock_jump",
        }
    }
}

/// How often one kind of instant fault strikes, and within which bounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FaultRate {
    /// Which fault; `plan` draws each arrival's parameters (downtime, jump size, ...) from the
    /// kind's own stream.
    pub kind: FaultKind,
    /// Mean arrivals per simulated hour.
    pub per_hour: f64,
    /// No arrival before this many virtual ms into the run.
    pub after_ms: u64,
    /// At most this many arrivals.
    pub max_triggers: u32,
}

/// The kinds of instant fault a plan can schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Crash,
    PowerCut,
    ClockJump,
}

impl FaultKind {
    /// The kind's name: its random stream, and its name in traces and docs/faults.md.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::PowerCut => "power_cut",
            FaultKind::ClockJump => "clock_jump",
        }
    }
}

/// A fault scheduled at a virtual instant, counted from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injection {
    pub at_ms: u64,
    pub fault: Fault,
}

/// Shortest and longest downtime after a crash: from a quick restart to a long outage that
/// makes many timer slots go missed.
pub const CRASH_DOWNTIME_MS_MIN: u64 = 1_000;
pub const CRASH_DOWNTIME_MS_MAX: u64 = 3 * 60 * 60 * 1_000;
/// A power cut strikes within this many storage operations: a redb commit of a few events does
/// about six writes and one sync, so this spans the first one or two commits after arming.
pub const POWER_CUT_AFTER_OPS_MAX: u64 = 12;
/// Largest forward and backward clock jumps.
pub const CLOCK_JUMP_FORWARD_MS_MAX: i64 = 3 * 60 * 60 * 1_000;
pub const CLOCK_JUMP_BACKWARD_MS_MAX: i64 = 60 * 60 * 1_000;

/// Every injection of `rates` within `[0, until_ms)`, in time order (ties in `rates` order).
pub fn plan(seed: u64, until_ms: u64, rates: &[FaultRate]) -> Vec<Injection> {
    let mut injections = Vec::new();
    for rate in rates {
        assert!(rate.per_hour >= 0.0, "fault rate must not be negative");
        let mut rng = stream(seed, rate.kind.name());
        let mut at_ms = rate.after_ms;
        for _ in 0..rate.max_triggers {
            if rate.per_hour == 0.0 {
                break;
            }
            let mean_gap_ms = 3_600_000.0 / rate.per_hour;
            // Exponential gaps make a Poisson process; the clamp keeps `ln` finite.
            let u: f64 = rng.gen_range(f64::EPSILON..1.0);
            at_ms = at_ms.saturating_add((-u.ln() * mean_gap_ms) as u64);
            if at_ms >= until_ms {
                break;
            }
            let fault = match rate.kind {
                FaultKind::Crash => Fault::Crash {
                    downtime_ms: log_uniform(
                        &mut rng,
                        CRASH_DOWNTIME_MS_MIN,
                        CRASH_DOWNTIME_MS_MAX,
                    ),
                },
                FaultKind::PowerCut => Fault::PowerCut {
                    after_ops: rng.gen_range(1..=POWER_CUT_AFTER_OPS_MAX),
                    downtime_ms: log_uniform(
                        &mut rng,
                        CRASH_DOWNTIME_MS_MIN,
                        CRASH_DOWNTIME_MS_MAX,
                    ),
                },
                FaultKind::ClockJump => {
                    let delta_ms = if rng.gen_bool(0.5) {
                        log_uniform(&mut rng, 1_000, CLOCK_JUMP_FORWARD_MS_MAX as u64) as i64
                    } else {
                        -(log_uniform(&mut rng, 1_000, CLOCK_JUMP_BACKWARD_MS_MAX as u64) as i64)
                    };
                    Fault::ClockJump { delta_ms }
                }
            };
            injections.push(Injection { at_ms, fault });
        }
    }
    // Stable sort: equal instants keep the order of `rates`, so the plan is fully determined.
    injections.sort_by_key(|i| i.at_ms);
    injections
}

/// A value between `min` and `max` whose logarithm is uniform: short and long values are both
/// common, as outages and clock errors are in life.
pub fn log_uniform(rng: &mut impl Rng, min: u64, max: u64) -> u64 {
    assert!(0 < min && min <= max);
    let (lo, hi) = ((min as f64).ln(), (max as f64).ln());
    (rng.gen_range(lo..=hi).exp() as u64).clamp(min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(crash_per_hour: f64) -> Vec<FaultRate> {
        vec![
            FaultRate {
                kind: FaultKind::Crash,
                per_hour: crash_per_hour,
                after_ms: 0,
                max_triggers: 1_000,
            },
            FaultRate {
                kind: FaultKind::ClockJump,
                per_hour: 0.5,
                after_ms: 60_000,
                max_triggers: 3,
            },
        ]
    }

    #[test]
    fn plans_are_sorted_bounded_and_reproducible() {
        let day_ms = 24 * 3_600_000;
        let a = plan(42, day_ms, &rates(0.25));
        assert_eq!(a, plan(42, day_ms, &rates(0.25)));
        assert!(a.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert!(a.iter().all(|i| i.at_ms < day_ms));
        let jumps: Vec<_> = a
            .iter()
            .filter(|i| i.fault.kind() == "clock_jump")
            .collect();
        assert!(jumps.len() <= 3);
        assert!(jumps.iter().all(|i| i.at_ms >= 60_000));
    }

    #[test]
    fn changing_one_fault_rate_leaves_the_others_alone() {
        let day_ms = 24 * 3_600_000;
        let jumps = |p: &[Injection]| -> Vec<Injection> {
            p.iter()
                .copied()
                .filter(|i| i.fault.kind() == "clock_jump")
                .collect()
        };
        let few_crashes = plan(9, day_ms, &rates(0.1));
        let many_crashes = plan(9, day_ms, &rates(3.0));
        assert_ne!(few_crashes.len(), many_crashes.len());
        assert_eq!(jumps(&few_crashes), jumps(&many_crashes));
    }

    #[test]
    fn log_uniform_stays_in_bounds() {
        let mut rng = stream(1, "test");
        for _ in 0..1_000 {
            let v = log_uniform(&mut rng, 1_000, 10_800_000);
            assert!((1_000..=10_800_000).contains(&v));
        }
    }
}
