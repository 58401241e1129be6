//! The simulated world Vigil's runtime runs in.
//!
//! Pure parts (clock, disk, trace, oracle) build everywhere and are unit-tested in the normal
//! build; the harness that drives madsim nodes exists only under `--cfg madsim`.

pub mod alert_sink;
pub mod check;
pub mod clock;
pub mod coding_clis;
pub mod disk;
pub mod provider;
pub mod recorder;
pub mod run_faults;
pub mod sse_frames;
pub mod state_server;
pub mod tool_server;
pub mod trace;

#[cfg(madsim)]
pub mod edges;
#[cfg(madsim)]
pub mod harness;
#[cfg(madsim)]
pub mod hostile;
#[cfg(madsim)]
pub mod operator_client;
#[cfg(madsim)]
pub mod processes;
#[cfg(madsim)]
pub mod sse_reader;
#[cfg(madsim)]
pub mod workload;

#[cfg(test)]
mod snapshot_cut_tests;
#[cfg(test)]
mod wal_cut_tests;
