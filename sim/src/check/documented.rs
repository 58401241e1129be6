//! The contract's numbers and calendar as the oracle restates them, each from the document that
//! states it. The oracle imports none of the runtime's constants, thresholds or day arithmetic:
//! a wrong constant there would move the node and its judge together and every seed would still
//! pass. The runtime's types are read as data (an event, an agent's spec); what the oracle
//! computes from them it computes here, and `the_oracle_restates_what_it_judges_by` below fails
//! when a check reaches for the runtime's own instead.

use vigil::engine::liveness::LivenessPolicy;

/// An idempotency key is honoured for 24 hours of the node's wall clock (docs/api.md, limits:
/// `IDEMPOTENCY_TTL_MS`).
pub const IDEMPOTENCY_TTL_MS: u64 = 24 * 60 * 60 * 1_000;
/// The stale sweep's period: a silent agent goes offline within its threshold plus this
/// (docs/api.md, limits: `LIVENESS_SWEEP_MS`, 1 s).
pub const LIVENESS_SWEEP_MS: u64 = 1_000;
/// A due timer fires at most this late, even after a wall-clock jump (docs/api.md, limits:
/// `WALL_RECHECK_MS`, 1 s).
pub const WALL_RECHECK_MS: u64 = 1_000;
/// The detail of a run a node restart interrupted (docs/api.md, run fields: `detail`;
/// docs/agents.md, stop reasons).
pub const CONTROL_PLANE_RESTART: &str = "control_plane_restart";

const DAY_SECONDS: i64 = 86_400;

/// The fixed detector's threshold: `pulse_interval_ms × offline_after_misses` (docs/api.md,
/// `liveness.offline_after_misses`). It is also the ceiling of the phi-accrual detector.
pub fn fixed_threshold_ms(liveness: &LivenessPolicy) -> u64 {
    liveness
        .pulse_interval_ms
        .saturating_mul(u64::from(liveness.offline_after_misses))
}

/// Days from 1970-01-01 to the calendar date of wall instant `at_ms` in `time_zone` (an IANA
/// name): the local day a daily cap, a daily budget or an alert's day counts on (docs/api.md,
/// `limits.daily_cap`). `None` for a zone the time-zone database does not know.
pub fn local_day(at_ms: u64, time_zone: &str) -> Option<i64> {
    let tz = jiff::tz::TimeZone::get(time_zone).ok()?;
    let instant = jiff::Timestamp::from_millisecond(i64::try_from(at_ms).ok()?).ok()?;
    let date = instant.to_zoned(tz).date();
    let midnight_utc = date.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    Some(midnight_utc.as_second().div_euclid(DAY_SECONDS))
}

/// [`local_day`] for an agent's zone, which the node validated when it created the agent.
pub fn agents_local_day(at_ms: u64, time_zone: &str) -> i64 {
    local_day(at_ms, time_zone).unwrap_or_else(|| {
        panic!("oracle: agent time zone {time_zone:?} is not in the time-zone database")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_day_turns_at_local_midnight() {
        // 2026-03-01T04:59:59Z is still 2026-02-28 in New York (UTC-5), 05:00:00Z is March 1st.
        let before = 1_772_341_199_000;
        let ny = "America/New_York";
        assert_eq!(
            local_day(before, ny).unwrap() + 1,
            local_day(before + 1_000, ny).unwrap()
        );
        assert_eq!(local_day(before, "UTC"), local_day(before + 1_000, "UTC"));
        assert_eq!(local_day(0, "UTC"), Some(0));
        assert_eq!(local_day(0, "Not/AZone"), None);
    }

    #[test]
    fn the_fixed_threshold_is_interval_times_misses() {
        let mut policy = LivenessPolicy::default();
        policy.pulse_interval_ms = 10_000;
        policy.offline_after_misses = 3;
        assert_eq!(fixed_threshold_ms(&policy), 30_000);
    }

    /// No check imports a runtime constant, the runtime's day arithmetic or its liveness
    /// thresholds. A runtime path whose last segment is all capitals is a constant; the
    /// restated ones live above.
    #[test]
    fn the_oracle_restates_what_it_judges_by() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/check");
        let mut found = Vec::new();
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("sim/src/check")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        // This file names what it looks for.
        files.retain(|p| p.file_name().is_some_and(|n| n != "documented.rs"));
        for path in files {
            let text = std::fs::read_to_string(&path).expect("source");
            for (n, line) in text.lines().enumerate() {
                if reaches_for_the_runtimes_rule(line) {
                    found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "the oracle uses the runtime's own rules:\n{}",
            found.join("\n")
        );
    }

    /// Whether `line` takes a constant, the day arithmetic or a liveness threshold from the
    /// runtime (`vigil::…`).
    fn reaches_for_the_runtimes_rule(line: &str) -> bool {
        let helpers = [
            "LocalDay::of",
            ".threshold_ms()",
            ".floor_ms()",
            ".is_stale(",
        ];
        if helpers.iter().any(|h| line.contains(h)) {
            return true;
        }
        let Some(at) = line.find("vigil::") else {
            return false;
        };
        // Every name the path brings in, braces included: `vigil::a::{B, c::D}`.
        let path = &line[at..];
        let end = path.find(';').unwrap_or(path.len());
        path[..end]
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(is_constant_name)
    }

    fn is_constant_name(name: &str) -> bool {
        name.len() > 1
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && name.chars().any(|c| c.is_ascii_uppercase())
    }

    #[test]
    fn the_scan_sees_constants_and_helpers() {
        assert!(reaches_for_the_runtimes_rule(
            "use vigil::node::WALL_RECHECK_MS;"
        ));
        assert!(reaches_for_the_runtimes_rule(
            "use vigil::engine::liveness::{Detector, LIVENESS_SWEEP_MS};"
        ));
        assert!(reaches_for_the_runtimes_rule(
            "let d = LocalDay::of(t, zone);"
        ));
        assert!(reaches_for_the_runtimes_rule("x = policy.threshold_ms();"));
        assert!(!reaches_for_the_runtimes_rule(
            "use vigil::engine::event::{Event, EventKind};"
        ));
        assert!(!reaches_for_the_runtimes_rule("const X_MS: u64 = 1_000;"));
    }
}
