//! Pauses: an operator's (for good until resumed, or for a while) and the agent's own
//! `pause_heartbeats(minutes)` (Kelpie ADR-010). A timed pause is a persisted wall-clock instant,
//! `paused_until_ms`: a forward clock jump past it ends the pause, a backward jump keeps it, a
//! crash keeps it (it is in the log).

use serde::{Deserialize, Serialize};

use super::wakeup::WakeupSource;

/// `pause_heartbeats` without a duration pauses this long.
pub const PAUSE_HEARTBEATS_MINUTES_DEFAULT: u64 = 2;
/// `pause_heartbeats` durations are clamped to this range (never refused: the agent asked for a
/// rest, and gets the nearest one allowed).
pub const PAUSE_HEARTBEATS_MINUTES_MIN: u64 = 1;
pub const PAUSE_HEARTBEATS_MINUTES_MAX: u64 = 60;
/// Longest timed operator pause: a week. (An operator pause without a duration lasts until
/// resumed.)
pub const OPERATOR_PAUSE_MINUTES_MAX: u64 = 7 * 24 * 60;
const MINUTE_MS: u64 = 60_000;

/// Who asked for a pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PausedBy {
    Operator,
    /// The agent itself, through `pause_heartbeats`.
    Agent,
}

/// What on-demand (and assignment, automation, predicate) wakeups do while a timed pause is in
/// force. Timer and idle wakeups are always refused then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WhilePaused {
    /// They are taken as usual (the default: a user who writes to a resting agent is answered).
    #[default]
    AllowOnDemand,
    /// They are refused with `paused` too.
    RefuseAll,
}

/// The minutes `pause_heartbeats` pauses for: the default when none is given, else clamped.
pub fn heartbeat_pause_minutes(requested: Option<u64>) -> u64 {
    requested
        .unwrap_or(PAUSE_HEARTBEATS_MINUTES_DEFAULT)
        .clamp(PAUSE_HEARTBEATS_MINUTES_MIN, PAUSE_HEARTBEATS_MINUTES_MAX)
}

/// The wall instant a pause of `minutes` taken at `now_ms` ends.
pub fn pause_until_ms(now_ms: u64, minutes: u64) -> u64 {
    now_ms.saturating_add(minutes.saturating_mul(MINUTE_MS))
}

/// Whether a timed pause ending at `paused_until_ms` is in force at `now_ms`.
pub fn in_force(paused_until_ms: Option<u64>, now_ms: u64) -> bool {
    paused_until_ms.is_some_and(|until| now_ms < until)
}

/// Whether a wakeup from `source` is refused while a timed pause is in force.
pub fn refuses(source: WakeupSource, while_paused: WhilePaused) -> bool {
    match source {
        WakeupSource::Timer | WakeupSource::Idle => true,
        _ => while_paused == WhilePaused::RefuseAll,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_pauses_default_to_two_minutes_and_clamp_to_one_to_sixty() {
        assert_eq!(heartbeat_pause_minutes(None), 2);
        assert_eq!(heartbeat_pause_minutes(Some(0)), 1);
        assert_eq!(heartbeat_pause_minutes(Some(1)), 1);
        assert_eq!(heartbeat_pause_minutes(Some(60)), 60);
        assert_eq!(heartbeat_pause_minutes(Some(61)), 60);
        assert_eq!(heartbeat_pause_minutes(Some(u64::MAX)), 60);
    }

    #[test]
    fn a_pause_is_in_force_strictly_before_its_instant() {
        let until = pause_until_ms(1_000, 2);
        assert_eq!(until, 121_000);
        assert!(in_force(Some(until), 120_999));
        assert!(!in_force(Some(until), 121_000));
        assert!(!in_force(None, 0));
        // A backward jump keeps it; a forward jump past it ends it.
        assert!(in_force(Some(until), 0));
        assert!(!in_force(Some(until), u64::MAX));
    }

    #[test]
    fn timer_and_idle_are_always_refused_others_by_policy() {
        for source in WakeupSource::all() {
            let routine = matches!(source, WakeupSource::Timer | WakeupSource::Idle);
            assert_eq!(refuses(source, WhilePaused::AllowOnDemand), routine);
            assert!(refuses(source, WhilePaused::RefuseAll));
        }
    }
}
