//! The heap while recovery builds the engine: glibc's malloc told to grow each thread's heap in
//! one step rather than a page at a time.
//!
//! Why: glibc gives each thread an arena of heaps (64 MiB each on 64-bit), reserved without
//! access and made writable as the arena grows, by one `mprotect` call per growth, which is
//! usually a page. Recovering a million agents allocates about 1.8 GB on the decoding threads:
//! about 400,000 `mprotect` calls (strace on the `fleet` benchmark's million-agent directory),
//! each taking the process's memory-map lock, a second of CPU and more on two cores. Its pad
//! (`M_TOP_PAD`) is added to a heap when it is created, so a pad of a whole heap makes each one
//! writable at once: 16,319 calls in the same measurement (the heaps made before recovery began
//! still grow page by page; 237 with the pad set from the process's start). The pad is also what
//! an arena keeps when it trims its free top, so it is set for recovery only and put back to
//! glibc's default after, when the node's memory returns to following its fleet
//! (docs/benchmarks.md).
//!
//! Once the node serves, each arena keeps up to [`SERVING_TRIM_THRESHOLD_BYTES`] free at its top
//! ([`keep_free_tops`]). Why: setting any of malloc's thresholds (the pad above) turns off
//! glibc's own adjustment of them, so its trim threshold stayed at 128 KiB, and a request that
//! allocates a few hundred KiB (a batch of a thousand pulses: its entries, its reports, its
//! answer) grew its worker's heap and shrank it again when freed: an `madvise` per request,
//! whose TLB shootdown interrupts the other core, and page faults to grow again. That was a
//! tenth of the node's samples in the `pulses` benchmark's batch phase (`perf record
//! --call-graph dwarf`: `heap_trim`, `shrink_heap`, `smp_call_function_many_cond`).
//!
//! Nothing here reaches behaviour: only how malloc asks the kernel for memory. Other platforms,
//! other C libraries and the simulator do nothing; so does a node whose operator set the pad
//! themselves (`MALLOC_TOP_PAD_`, or `top_pad` in `GLIBC_TUNABLES`), whose choice stands.

use std::ffi::OsStr;

/// The pad while [`BulkGrowth`] is held: a whole heap (glibc's `HEAP_MAX_SIZE` on 64-bit), so
/// each heap an arena creates meanwhile is writable from the start.
pub const BULK_TOP_PAD_BYTES: usize = 64 * 1024 * 1024;

/// glibc's default pad (`DEFAULT_TOP_PAD`, 128 KiB), put back when [`BulkGrowth`] ends.
pub const GLIBC_TOP_PAD_BYTES: usize = 128 * 1024;

/// Free memory an arena keeps at its top once the node serves (`M_TRIM_THRESHOLD`; glibc's
/// default is 128 KiB): a few requests' worth on each thread, so their allocations reuse it
/// instead of returning it to the kernel and faulting it back. At most this much per arena
/// (glibc makes up to eight per core) stays resident beyond what the node holds.
pub const SERVING_TRIM_THRESHOLD_BYTES: usize = 4 * 1024 * 1024;

/// While held, new heaps are made writable whole ([`BULK_TOP_PAD_BYTES`]); dropped, glibc's
/// default pad is back.
#[must_use = "the pad is put back when this is dropped"]
pub struct BulkGrowth {
    set: bool,
}

impl BulkGrowth {
    /// Sets the pad, unless the operator set one or the platform has no such pad.
    pub fn begin() -> BulkGrowth {
        let chosen = operator_chose("top_pad");
        BulkGrowth {
            set: !chosen && set_top_pad(BULK_TOP_PAD_BYTES),
        }
    }
}

impl Drop for BulkGrowth {
    fn drop(&mut self) {
        if self.set {
            set_top_pad(GLIBC_TOP_PAD_BYTES);
        }
    }
}

/// Sets the trim threshold for serving ([`SERVING_TRIM_THRESHOLD_BYTES`]), unless the operator
/// set one (`MALLOC_TRIM_THRESHOLD_`, or `trim_threshold` in `GLIBC_TUNABLES`) or the platform
/// has no such threshold; whether it took.
pub fn keep_free_tops() -> bool {
    !operator_chose("trim_threshold")
        && set_parameter(M_TRIM_THRESHOLD, SERVING_TRIM_THRESHOLD_BYTES)
}

/// Whether the environment sets glibc's malloc parameter `name` (`top_pad`: `MALLOC_TOP_PAD_`,
/// or a `glibc.malloc.top_pad` tunable among the colon-separated `GLIBC_TUNABLES`).
fn operator_chose(name: &str) -> bool {
    let variable = format!("MALLOC_{}_", name.to_uppercase());
    chose_in(
        name,
        std::env::var_os(variable).as_deref(),
        std::env::var_os("GLIBC_TUNABLES").as_deref(),
    )
}

/// [`operator_chose`] for the values given: the variable's, and `GLIBC_TUNABLES`'.
fn chose_in(name: &str, variable: Option<&OsStr>, tunables: Option<&OsStr>) -> bool {
    let prefix = format!("glibc.malloc.{name}=");
    variable.is_some()
        || tunables.is_some_and(|tunables| {
            tunables
                .to_string_lossy()
                .split(':')
                .any(|tunable| tunable.starts_with(&prefix))
        })
}

/// Sets glibc's `M_TOP_PAD` to `bytes`; whether it took.
fn set_top_pad(bytes: usize) -> bool {
    set_parameter(M_TOP_PAD, bytes)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(madsim))))]
use self::elsewhere::{M_TOP_PAD, M_TRIM_THRESHOLD};
#[cfg(all(target_os = "linux", target_env = "gnu", not(madsim)))]
use libc::{M_TOP_PAD, M_TRIM_THRESHOLD};

/// Sets malloc's parameter `parameter` to `bytes`; whether it took.
#[cfg(all(target_os = "linux", target_env = "gnu", not(madsim)))]
fn set_parameter(parameter: libc::c_int, bytes: usize) -> bool {
    let Ok(bytes) = libc::c_int::try_from(bytes) else {
        return false;
    };
    // SAFETY: `mallopt` only sets one of malloc's parameters, under malloc's own locks; any
    // thread may call it at any time.
    unsafe { libc::mallopt(parameter, bytes) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(madsim))))]
fn set_parameter(_parameter: i32, _bytes: usize) -> bool {
    false
}

/// Where there is no glibc: names for its parameters, which nothing sets.
#[cfg(not(all(target_os = "linux", target_env = "gnu", not(madsim))))]
mod elsewhere {
    pub const M_TOP_PAD: i32 = 0;
    pub const M_TRIM_THRESHOLD: i32 = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operator_setting_of_the_pad_stands() {
        let chose = |malloc_top_pad: Option<&str>, tunables: Option<&str>| {
            chose_in(
                "top_pad",
                malloc_top_pad.map(OsStr::new),
                tunables.map(OsStr::new),
            )
        };
        assert!(!chose(None, None));
        assert!(chose(Some("1048576"), None));
        assert!(chose(None, Some("glibc.malloc.top_pad=1048576")));
        assert!(chose(
            None,
            Some("glibc.malloc.arena_max=2:glibc.malloc.top_pad=0")
        ));
        assert!(!chose(None, Some("glibc.malloc.arena_max=2")));
        assert!(!chose(None, Some("glibc.malloc.top_padding=1")));
        assert!(!chose(None, Some("glibc.malloc.trim_threshold=1")));
        assert!(chose_in(
            "trim_threshold",
            None,
            Some(OsStr::new("glibc.malloc.trim_threshold=1"))
        ));
    }

    /// The pad is set and put back through glibc itself (`mallopt` answers 1 when it took).
    #[cfg(all(target_os = "linux", target_env = "gnu", not(madsim)))]
    #[test]
    fn glibc_takes_both_pads() {
        assert!(set_top_pad(BULK_TOP_PAD_BYTES));
        assert!(set_top_pad(GLIBC_TOP_PAD_BYTES));
        assert!(
            !set_top_pad(usize::MAX),
            "a pad past a C int is refused here"
        );
        assert!(set_parameter(
            M_TRIM_THRESHOLD,
            SERVING_TRIM_THRESHOLD_BYTES
        ));
    }
}
