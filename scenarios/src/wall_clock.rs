//! The real clock of the sweep driver: measures how long runs take (`wall_ms`). It is read only
//! outside the simulated world, after a run's trace is complete, so it never reaches behaviour
//! or the trace.

use std::time::Instant;

/// Measures real elapsed time.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts measuring now.
    pub fn start() -> Self {
        Stopwatch(Instant::now())
    }

    /// Real milliseconds since `start`.
    pub fn elapsed_ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}
