//! The time seam. The only place in the runtime allowed to read the OS clocks.
//!
//! Two kinds of time, deliberately separate (docs/invariants.md, invariants 3 and "timer"):
//! - *wall* time, Unix milliseconds: what is persisted (next fire, day boundaries, pause_until).
//!   It may skew or jump in either direction, so code that uses it must tolerate both.
//! - *monotonic* time: for timeouts and intervals inside one process lifetime. Never goes back,
//!   restarts from zero with the process, never persisted.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall and monotonic time, injected into every part of the runtime that needs it.
pub trait Clock: Send + Sync + 'static {
    /// Wall-clock time as Unix milliseconds. May jump forward or backward.
    fn wall_now_ms(&self) -> u64;
    /// Time since this clock was created. Never decreases.
    fn mono_now(&self) -> Duration;
}

/// The handle that is passed around.
pub type SharedClock = Arc<dyn Clock>;

/// The production clock: reads `SystemTime` and `Instant`.
///
/// Under `--cfg madsim` both calls are intercepted by madsim and return virtual time, so this
/// clock is also correct (but un-skewed) inside the simulator; the simulator's `SimClock` wraps
/// the same readings with per-node offsets.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose monotonic time starts now.
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }

    /// The same clock as a shared handle.
    pub fn shared() -> SharedClock {
        Arc::new(Self::new())
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn wall_now_ms(&self) -> u64 {
        // A system clock set before 1970 is a broken host; report the epoch rather than panic.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn mono_now(&self) -> Duration {
        self.origin.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_time_never_decreases_and_wall_time_is_after_2020() {
        let clock = SystemClock::new();
        let a = clock.mono_now();
        let b = clock.mono_now();
        assert!(b >= a);
        // 2020-01-01 in Unix ms: a wall reading before it means the seam is wired wrong.
        assert!(clock.wall_now_ms() > 1_577_836_800_000);
    }
}
