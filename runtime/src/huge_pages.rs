//! Transparent huge pages: off for the node's own memory, as the system has them for the
//! processes it starts (ADR 0031).
//!
//! Why: mimalloc (the node's allocator, ADR 0029) asks the kernel for huge pages on its arenas
//! (`madvise(MADV_HUGEPAGE)`). The first touch of such a page makes the kernel zero all 2 MiB of
//! it at once, in the touching thread: on the 2-core VM of docs/benchmarks.md that took 0.7 to
//! 5 ms per page (3.5 µs per 4 KiB page), and a busy node touches several as its heap grows. In
//! a `perf` profile of the `wakeups` benchmark at one client, the kernel's page zeroing was 17 %
//! of the node's samples, in bursts of milliseconds inside the writer's append, the engine's
//! decisions (under the engine's lock) and the transcripts' threads; a read waiting behind one
//! took 5 to 20 ms where an idle read takes under one. With ordinary 4 KiB pages the same
//! zeroing is spread thin: one page at a time, microseconds each.
//!
//! How: `prctl(PR_SET_THP_DISABLE)`, which the kernel checks at every fault, so it holds for
//! memory mimalloc already reserved. The flag is inherited by children, so the process spawner
//! clears it in each child between fork and exec ([`restore_in_child`]): an agent's process gets
//! the system's setting, not the node's.
//!
//! Nothing here reaches behaviour: only the size of the pages the kernel hands out. An operator
//! who wants huge pages sets `MIMALLOC_ALLOW_THP=1` (mimalloc's own option, [`OPERATOR_ENV`]),
//! and the node leaves them on; `MIMALLOC_ALLOW_THP=0` turns them off through mimalloc itself.
//! The simulator and other platforms do nothing.

use std::sync::atomic::{AtomicBool, Ordering};

/// mimalloc's variable for huge pages. Set to anything, the operator chose, and the node keeps
/// out of it.
pub const OPERATOR_ENV: &str = "MIMALLOC_ALLOW_THP";

/// Whether [`turn_off`] turned huge pages off, so children must have them turned back on. A
/// node started with them off already (a service manager's choice) leaves its children so.
static TURNED_OFF_BY_US: AtomicBool = AtomicBool::new(false);

/// What [`turn_off`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePages {
    /// They were on; now they are off for this process.
    TurnedOff,
    /// They were off already (a parent's or mimalloc's `prctl`): left so.
    AlreadyOff,
    /// The operator set [`OPERATOR_ENV`]: left as mimalloc made them.
    OperatorChose,
    /// Not Linux, the simulator, or the kernel refused: nothing changed.
    Unsupported,
}

/// Turns transparent huge pages off for this process (see the module documentation). Call it
/// once, first thing in `vigil serve`.
pub fn turn_off() -> HugePages {
    if std::env::var_os(OPERATOR_ENV).is_some() {
        return HugePages::OperatorChose;
    }
    let done = os::turn_off();
    if done == HugePages::TurnedOff {
        TURNED_OFF_BY_US.store(true, Ordering::Relaxed);
    }
    done
}

/// In a child between fork and exec: turns huge pages back on if [`turn_off`] turned them off
/// for the node. Async-signal-safe (an atomic load and `prctl`), allocates nothing. Best effort:
/// the size of a child's pages is never a reason to refuse its run.
pub fn restore_in_child() {
    if TURNED_OFF_BY_US.load(Ordering::Relaxed) {
        os::turn_on();
    }
}

#[cfg(all(target_os = "linux", not(madsim)))]
mod os {
    use super::HugePages;

    pub(super) fn turn_off() -> HugePages {
        match off_here() {
            Some(true) => HugePages::AlreadyOff,
            None => HugePages::Unsupported,
            // SAFETY: prctl(2) with PR_SET_THP_DISABLE takes plain integers and touches no
            // memory of ours.
            Some(false) => match unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } {
                0 => HugePages::TurnedOff,
                _ => HugePages::Unsupported,
            },
        }
    }

    pub(super) fn turn_on() {
        // SAFETY: as above; async-signal-safe.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) };
    }

    fn off_here() -> Option<bool> {
        // SAFETY: PR_GET_THP_DISABLE reads a flag of this process; no memory of ours.
        match unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) } {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

#[cfg(not(all(target_os = "linux", not(madsim))))]
mod os {
    use super::HugePages;

    pub(super) fn turn_off() -> HugePages {
        HugePages::Unsupported
    }

    pub(super) fn turn_on() {}
}
