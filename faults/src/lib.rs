//! The fault vocabulary of Vigil's simulator and the seeded plan that schedules faults.
//!
//! This crate knows *what* can go wrong and *when* it is planned to; the simulator (`sim/`)
//! knows *how* to make it happen to the production code. Every random choice comes from a named
//! stream derived from the run's seed, so adding one fault to a plan never shifts the draws of
//! another (see `stream`).
//!
//! Built (docs/faults.md describes each): crash at a random instant, power cut mid-commit
//! (CrashAfterWrite), clock jumps both ways and clock skew windows, storage I/O errors and disk
//! full (with an operation filter), network partition, delay and loss, the LLM provider's rate
//! limits, 5xx, timeouts and malformed replies and its partition, pulse loss, run hangs and
//! failures, and wakeup storms (burst, aligned timers, catch-up). Faults of subsystems still to
//! come (process adapters, tools, predicates) extend `Fault` with the issues that build them.

pub mod plan;
pub mod stream;
pub mod swarm;

pub use plan::{
    plan, Fault, FaultKind, FaultRate, Injection, LlmFault, StorageError, StorageFilter, StorageOps,
};
pub use stream::stream;
