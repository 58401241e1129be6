//! SimClock: a node's clock in the simulated world.
//!
//! Wall time is the simulation's virtual time plus this node's offset: an initial skew and every
//! clock jump applied so far. Monotonic time is the virtual instant and is never offset, exactly
//! as a real host's `CLOCK_MONOTONIC` ignores `settimeofday`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vigil::io::clock::Clock;

/// One node's clock. Shared between the node (which reads it) and the harness (which jumps it);
/// it survives the node's crashes, as a hardware clock does.
#[derive(Debug)]
pub struct SimClock {
    /// Virtual wall time at the start of the run, Unix ms.
    epoch_wall_ms: u64,
    /// Current offset from true virtual time (skew plus jumps), ms.
    offset_ms: AtomicI64,
    /// Reads virtual time elapsed since the start of the run.
    elapsed: fn() -> Duration,
}

impl SimClock {
    /// A clock that starts at `epoch_wall_ms + skew_ms`; `elapsed` reads virtual time since the
    /// start of the run (madsim's clock inside the simulator, anything monotonic in unit tests).
    pub fn new(epoch_wall_ms: u64, skew_ms: i64, elapsed: fn() -> Duration) -> Arc<SimClock> {
        Arc::new(SimClock {
            epoch_wall_ms,
            offset_ms: AtomicI64::new(skew_ms),
            elapsed,
        })
    }

    /// Moves the wall clock by `delta_ms` (negative: backward). Returns the new offset.
    pub fn jump(&self, delta_ms: i64) -> i64 {
        self.offset_ms.fetch_add(delta_ms, Ordering::SeqCst) + delta_ms
    }

    /// Current offset from true virtual time, ms.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }
}

impl Clock for SimClock {
    fn wall_now_ms(&self) -> u64 {
        let true_ms = self.epoch_wall_ms as i64 + (self.elapsed)().as_millis() as i64;
        (true_ms + self.offset_ms()).max(0) as u64
    }

    fn mono_now(&self) -> Duration {
        (self.elapsed)()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ten_seconds() -> Duration {
        Duration::from_secs(10)
    }

    #[test]
    fn skew_and_jumps_move_wall_time_but_not_monotonic_time() {
        let clock = SimClock::new(1_000_000, 5_000, ten_seconds);
        assert_eq!(clock.wall_now_ms(), 1_000_000 + 10_000 + 5_000);
        clock.jump(60_000);
        assert_eq!(clock.wall_now_ms(), 1_075_000);
        clock.jump(-90_000);
        assert_eq!(clock.wall_now_ms(), 985_000);
        assert_eq!(clock.mono_now(), Duration::from_secs(10));
    }
}
