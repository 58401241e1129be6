//! The adapter seam: how a run is carried out. The executor owns timeouts and cancellation;
//! an adapter only does the work and says how it went.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::engine::agent::{AdapterSpec, AgentId};
use crate::engine::breaker::FailureCause;
use crate::engine::run::{RunId, RunStatus};

/// What an adapter is given for one run.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub run: RunId,
    pub agent: AgentId,
    /// The agent's n-th run start (from 0).
    pub run_number: u64,
    pub reason: String,
    pub payload: serde_json::Value,
}

/// How the adapter says the run went. Timeouts and cancellation are the executor's business.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterOutcome {
    /// `Succeeded` or `Failed`.
    pub status: RunStatus,
    pub detail: String,
    /// For a failure: whether the model or a tool failed (the breaker counts them apart).
    pub cause: Option<FailureCause>,
}

/// The future an adapter returns.
pub type AdapterFuture = Pin<Box<dyn Future<Output = AdapterOutcome> + Send>>;

/// Carries out runs of one kind.
pub trait Adapter: Send + Sync {
    /// Does the run. May never finish (the executor's timeout ends it).
    fn execute(&self, run: RunContext) -> AdapterFuture;
}

/// Where a node's executor gets the adapter for an agent's policy. Production uses
/// [`BuiltinAdapters`]; the simulator wraps them so that its `run_hang` and `run_failure` faults
/// strike runs while the executor, its timeouts and the breaker stay the production code.
pub trait AdapterSource: Send + Sync {
    fn adapter_for(&self, spec: &AdapterSpec) -> Box<dyn Adapter>;
}

/// An adapter source shared by a node's executor.
pub type SharedAdapterSource = Arc<dyn AdapterSource>;

/// The adapters this binary ships, as agent policies name them.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinAdapters;

impl BuiltinAdapters {
    pub fn shared() -> SharedAdapterSource {
        Arc::new(BuiltinAdapters)
    }
}

impl AdapterSource for BuiltinAdapters {
    fn adapter_for(&self, spec: &AdapterSpec) -> Box<dyn Adapter> {
        adapter_for(spec)
    }
}

/// The built-in adapter an agent's policy names.
pub fn adapter_for(spec: &AdapterSpec) -> Box<dyn Adapter> {
    match spec {
        AdapterSpec::Scripted(script) => Box::new(super::scripted::Scripted::new(script.clone())),
        AdapterSpec::Llm(llm) => Box::new(super::llm::Llm::new(llm.clone())),
    }
}
