//! Named simulation scenarios and the machinery to run, sweep and check them for determinism.
//! The `vigil-sim` binary (main.rs) is a thin CLI over this.

pub mod wall_clock;

#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod smoke;
