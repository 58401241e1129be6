//! Vigil: a heartbeat runtime that keeps a fleet of LLM agents alive and wakes them safely.
//!
//! Map of the crate (see docs/ARCHITECTURE.md): `engine` is the pure state machine; `store` the
//! redb event log; `shell` joins them through one writer task (ADR 0012); `node` is the start-up path; `api` the HTTP
//! surface; `net` the outbound HTTP(S) transport (providers, tools); `io` the seams (clock,
//! storage) the simulator substitutes; `transcript` where run transcripts go (another seam),
//! `redact` what keeps secrets out of them.

pub mod alerts;
pub mod api;
pub mod cli;
pub mod dashboard;
pub mod engine;
pub mod event_tail;
pub mod exec;
pub mod fleet;
pub mod fleet_plan;
pub mod heartbeats;
pub mod heap;
pub mod huge_pages;
pub mod io;
#[cfg(test)]
mod limits_doc;
pub mod net;
pub mod metrics;
pub mod node;
pub mod node_file;
pub mod parallel;
pub mod redact;
pub mod shell;
pub mod snapshots;
pub mod store;
pub mod transcript;
pub mod writer;
