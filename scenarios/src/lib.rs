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

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_e`, mimalloc 3's `mimalloc.h`;
/// the Rust bindings name only the options of mimalloc 2). docs/benchmarks.md, "The simulator's
/// speed", has the measurements.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
/// "Never purge": freed memory stays mapped for the next allocation.
const MI_PURGE_NEVER: std::ffi::c_long = -1;

unsafe extern "C" {
    /// mimalloc's option setter (mimalloc is linked as the global allocator above).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Tells mimalloc to keep freed memory mapped instead of returning it to the OS. Each seed runs
/// on a fresh thread (sim/src/harness.rs, `simulate`): when it ends, its pages were purged and
/// the next seed faulted them in again, the kernel zeroing them (5–10 % of a `heart_fleet`
/// day's time). Resident memory is still bounded by the seeds in flight at once, not by how
/// many ran (docs/simulation.md, "Memory"). Called before every run; only the first call does
/// anything.
pub fn keep_freed_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `mi_option_set` takes plain integers and may be called at any time; mimalloc
        // reads the option when it next considers purging.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, MI_PURGE_NEVER) }
    });
}

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
