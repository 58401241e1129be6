//! `timer_jitter_as_documented` (41): where an agent's first timer slot falls.
//!
//! docs/api.md ("When the agent has a timer"): the first slot is the creation time plus
//! `interval_ms` plus a fixed jitter derived from the agent id, less than one interval and at
//! most 5 minutes, spread over that whole window (so that a fleet created alike does not wake in
//! one instant). Two checks:
//!
//! - each created agent's jitter (its `first_fire_at_ms` minus its creation time minus the
//!   interval) lies in `0..=window`;
//! - once [`SPREAD_SAMPLE`] agents with a window of at least [`SPREAD_WINDOW_MS_MIN`] were
//!   created, their jitters cover both halves of their windows. The jitter is a hash of the
//!   agent id, so for distinct ids all landing in one half is a 2 × 2^-32 event: a node whose
//!   offsets stay in the lower half (a smaller cap than documented) or are all zero is caught,
//!   where the bound alone lets it pass.
//!
//! The limits are restated from the docs, never imported: a wrong constant in the runtime would
//! otherwise move the bound with it.

use super::{violation, Violation};

/// The largest jitter, in ms: "at most 5 minutes" (docs/api.md).
const JITTER_MS_MAX: u64 = 5 * 60 * 1_000;
/// The jitter is shorter than the interval by at least this: "less than one interval"
/// (docs/api.md).
const JITTER_UNDER_INTERVAL_MS: u64 = 1;
/// Agents whose window is at least this wide take part in the spread check: on a narrower one
/// the halves are a few milliseconds apart.
pub const SPREAD_WINDOW_MS_MIN: u64 = 10_000;
/// How many such agents the spread check waits for.
pub const SPREAD_SAMPLE: usize = 32;

/// The documented window of an agent's jitter on a timer every `interval_ms`.
pub(super) fn window_ms(interval_ms: u64) -> u64 {
    interval_ms
        .saturating_sub(JITTER_UNDER_INTERVAL_MS)
        .min(JITTER_MS_MAX)
}

/// What the spread check has seen so far.
#[derive(Debug, Default)]
pub struct JitterOracle {
    /// Agents with a wide enough window seen so far, up to [`SPREAD_SAMPLE`].
    sampled: usize,
    /// Some sampled jitter lay in the lower half of its window, some in the upper half.
    lower_half: bool,
    upper_half: bool,
}

impl JitterOracle {
    /// Judges the creation of `agent` at node time `at_ms` with a timer every `interval_ms`
    /// whose first slot the node set at `first_fire_at_ms`.
    pub fn created(
        &mut self,
        agent: u64,
        at_ms: u64,
        interval_ms: u64,
        first_fire_at_ms: u64,
    ) -> Result<(), Violation> {
        let window = window_ms(interval_ms);
        let base = at_ms.saturating_add(interval_ms);
        let Some(jitter) = first_fire_at_ms
            .checked_sub(base)
            .filter(|jitter| *jitter <= window)
        else {
            return violation(
                "timer_jitter_as_documented",
                format!(
                    "agent {agent} created at {at_ms} with a timer every {interval_ms} ms has its first slot at {first_fire_at_ms}: outside {base}..={} (creation + interval + a jitter of at most {window} ms)",
                    base + window
                ),
            );
        };
        if window < SPREAD_WINDOW_MS_MIN || self.sampled >= SPREAD_SAMPLE {
            return Ok(());
        }
        self.sampled += 1;
        self.lower_half |= 2 * jitter < window;
        self.upper_half |= 2 * jitter > window;
        if self.sampled == SPREAD_SAMPLE && !(self.lower_half && self.upper_half) {
            let half = if self.lower_half { "lower" } else { "upper" };
            return violation(
                "timer_jitter_as_documented",
                format!(
                    "the first {SPREAD_SAMPLE} agents with a jitter window of at least {SPREAD_WINDOW_MS_MIN} ms all have their jitter in the {half} half of it (or on its middle): the offsets are not spread over the documented window (the last: agent {agent}, {jitter} ms of {window})"
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF_HOUR_MS: u64 = 30 * 60 * 1_000;

    /// Creates `SPREAD_SAMPLE` agents on half-hour timers (a 5-minute window) with the jitters
    /// `jitter(i)` gives, returning the first violation.
    fn sample(jitter: impl Fn(u64) -> u64) -> Result<(), Violation> {
        let mut oracle = JitterOracle::default();
        for i in 0..SPREAD_SAMPLE as u64 {
            let at_ms = 1_000 * i;
            oracle.created(i + 1, at_ms, HALF_HOUR_MS, at_ms + HALF_HOUR_MS + jitter(i))?;
        }
        Ok(())
    }

    #[test]
    fn jitters_over_the_whole_window_pass() {
        // 0, 9.4 s, ... up to 291 s of a 300 s window.
        assert_eq!(sample(|i| i * 300_000 / SPREAD_SAMPLE as u64), Ok(()));
    }

    #[test]
    fn jitters_capped_below_the_documented_window_are_caught() {
        // A node capping the jitter at 2.5 minutes: every offset in the lower half of 5 minutes.
        // (A tenth of the interval, the contract before ADR 0021, is caught this way on shorter
        // intervals: on 1-minute timers every offset is under 6 s of a 60-s window.)
        let error = sample(|i| i * 148_000 / SPREAD_SAMPLE as u64).unwrap_err();
        assert_eq!(error.invariant, "timer_jitter_as_documented");
        assert!(error.detail.contains("lower half"), "{}", error.detail);
    }

    #[test]
    fn no_jitter_at_all_is_caught() {
        let error = sample(|_| 0).unwrap_err();
        assert_eq!(error.invariant, "timer_jitter_as_documented");
    }

    #[test]
    fn a_jitter_past_its_window_is_caught_at_once() {
        let mut oracle = JitterOracle::default();
        // A 1-minute interval: a window of 59,999 ms, less than the interval.
        assert_eq!(oracle.created(1, 0, 60_000, 60_000 + 59_999), Ok(()));
        let error = oracle.created(2, 0, 60_000, 60_000 + 60_000).unwrap_err();
        assert_eq!(error.invariant, "timer_jitter_as_documented");
        // An hour-long interval's window is capped at 5 minutes.
        let error = oracle
            .created(3, 0, 3_600_000, 3_600_000 + 300_001)
            .unwrap_err();
        assert_eq!(error.invariant, "timer_jitter_as_documented");
        // A first slot before creation + interval.
        let error = oracle.created(4, 5_000, 600_000, 604_999).unwrap_err();
        assert_eq!(error.invariant, "timer_jitter_as_documented");
    }

    #[test]
    fn narrow_windows_take_no_part_in_the_spread() {
        // Forty agents on a 5-second timer (a 4,999 ms window), all without jitter: no spread
        // judged.
        let mut oracle = JitterOracle::default();
        for i in 0..40 {
            assert_eq!(oracle.created(i + 1, 0, 5_000, 5_000), Ok(()));
        }
    }
}
