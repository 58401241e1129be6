//! Named simulation scenarios and the machinery to run, sweep and check them for determinism.
//! The `vigil-sim` binary (main.rs) is a thin CLI over this.

pub mod fleet_report;
pub mod wall_clock;

/// Every simulator binary (vigil-sim and the simulation tests link this crate) allocates through
/// mimalloc: a seed allocates and frees millions of small buffers, and glibc's malloc (with its
/// chunk consolidation) was a fifth of a smoke seed's profile. No address reaches behaviour or a
/// trace, so the allocator cannot change a seed's result (the golden traces check it).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(madsim)]
pub mod alerts;
#[cfg(madsim)]
pub mod breaker;
#[cfg(madsim)]
pub mod cli_agents;
#[cfg(madsim)]
pub mod coalesce_burst;
#[cfg(madsim)]
pub mod coverage;
#[cfg(madsim)]
pub mod crash_mid_run;
#[cfg(madsim)]
pub mod edges;
#[cfg(madsim)]
pub mod fleet_sim;
#[cfg(madsim)]
pub mod heart_fleet;
#[cfg(madsim)]
pub mod hostile;
#[cfg(madsim)]
pub mod idempotency;
#[cfg(madsim)]
pub mod liveness;
#[cfg(madsim)]
pub mod midnight;
#[cfg(madsim)]
pub mod pause;
#[cfg(madsim)]
pub mod pause_table;
#[cfg(madsim)]
pub mod phases;
#[cfg(madsim)]
pub mod predicate_flap;
#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod smoke;
#[cfg(madsim)]
pub mod tool_loop;
#[cfg(madsim)]
pub mod wakeup_storm;
