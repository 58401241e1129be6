//! The fault vocabulary of Vigil's simulator and the seeded plan that schedules faults.
//!
//! This crate knows *what* can go wrong and *when* it is planned to; the simulator (`sim/`)
//! knows *how* to make it happen to the production code. Every random choice comes from a named
//! stream derived from the run's seed, so adding one fault to a plan never shifts the draws of
//! another (see `stream`).
//!
//! Issue 2 ships the faults the `smoke` scenario needs: crash at a random instant, power cut
//! mid-commit (CrashAfterWrite), clock jumps in both directions, and clock skew (a per-node
//! initial offset the scenario draws). The rest of DESIGN.md §3 (I/O errors, disk full, network
//! faults, LLM faults, wakeup storms) extends `Fault` with the issues that build the subsystems
//! they hit.

pub mod plan;
pub mod stream;

pub use plan::{plan, Fault, FaultKind, FaultRate, Injection};
pub use stream::stream;
