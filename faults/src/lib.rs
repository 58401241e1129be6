//! The fault vocabulary of Vigil's simulator and the seeded plan that schedules faults.
//!
//! This crate knows *what* can go wrong and *when* it is planned to; the simulator (`sim/`)
//! knows *how* to make it happen to the production code. Every random choice comes from a named
//! stream derived from the run's seed, so adding one fault to a plan never shifts the draws of
//! another (see `stream`).
//!
//! Built so far (docs/faults.md has the whole catalogue): crash at a random instant, power cut
//! mid-commit (CrashAfterWrite), clock jumps in both directions and clock skew (a per-node
//! initial offset the scenario draws), storage I/O errors and disk full (with an operation
//! filter), and network partition, delay and loss between the workload and the runtime node.
//! The rest of DESIGN.md §3 (LLM faults, tool and process faults, pulse loss, wakeup storms)
//! extends `Fault` with the issues that build the subsystems they hit.

pub mod plan;
pub mod stream;
pub mod swarm;

pub use plan::{
    plan, Fault, FaultKind, FaultRate, Injection, LlmFault, StorageError, StorageFilter, StorageOps,
};
pub use stream::stream;
