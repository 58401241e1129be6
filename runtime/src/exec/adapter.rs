//! The adapter seam: how a run is carried out. The executor owns timeouts and cancellation;
//! an adapter only does the work and says how it went.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::engine::agent::{AdapterSpec, AgentId};
use crate::engine::breaker::FailureCause;
use crate::engine::history::HistoryMessage;
use crate::engine::run::{ErrorClass, RunId, RunReport, RunStatus, StopReason};
use crate::engine::usage::Usage;
use crate::engine::wakeup::WakeupSource;
use crate::exec::model::Poster;
use crate::exec::pricing::PriceTable;
use crate::exec::run_tokens::{ReportRefusal, RunTokenGrant};
use crate::exec::run_transcript::RunTranscript;
use crate::exec::spawn::SharedSpawner;

/// What an adapter is given for one run: the wakeup, the agent's state at the run's start, and
/// the host's services.
#[derive(Clone)]
pub struct RunContext {
    pub run: RunId,
    pub agent: AgentId,
    pub agent_name: String,
    /// The agent's n-th run start (from 0).
    pub run_number: u64,
    /// Source of the wakeup that created the run.
    pub source: WakeupSource,
    pub reason: String,
    pub payload: serde_json::Value,
    /// The agent's conversation history when the run started.
    pub history: Vec<HistoryMessage>,
    /// Micro-dollars the agent may spend today (`None`: no budget).
    pub budget_left_micro_usd: Option<u64>,
    /// Runs the daily cap still allows today after this one (`None`: no cap).
    pub daily_cap_remaining: Option<u32>,
    /// The node's wall clock when the run started, and the agent's time zone.
    pub started_at_ms: u64,
    pub time_zone: String,
    /// The task key of the wakeup that created the run, and the CLI session stored for that
    /// task (coding-CLI adapters resume it).
    pub task_key: Option<String>,
    pub session_id: Option<String>,
    pub host: SharedRunHost,
    /// The run's transcript (the executor writes its stop line and finishes it).
    pub transcript: Arc<RunTranscript>,
}

impl RunContext {
    /// Opens the run's transcript with why it was woken: every adapter's first line.
    pub async fn record_wakeup(&self) {
        self.transcript
            .write(crate::transcript::EntryBody::Wakeup {
                source: self.source.as_str().to_string(),
                reason: Some(self.reason.clone()),
                payload: (!self.payload.is_null()).then(|| self.payload.clone()),
            })
            .await;
    }
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("run", &self.run)
            .field("agent", &self.agent)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// What a durable record by a run's host comes to: what it answers, or why it could not.
pub type RecordFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// What a node offers its runs: the network, prices, secrets, and a way to record spend as it
/// happens. Production's is the node's; tests and the simulator give their own.
pub trait RunHost: Send + Sync {
    /// Records one model call of running run `run`; answers the micro-dollars the agent may
    /// still spend today (`None`: no budget), or why it could not (the run was ended meanwhile,
    /// or the node stopped).
    fn record_usage(&self, run: RunId, usage: Usage) -> RecordFuture<'_, Option<u64>>;
    /// Carries the run's outbound HTTP.
    fn poster(&self) -> Arc<dyn Poster>;

    /// The node's model prices.
    fn prices(&self) -> &PriceTable;
    /// The value of environment variable `name` of the node (API keys), if set.
    fn secret(&self, name: &str) -> Option<String>;

    /// Starts the run's child processes.
    fn spawner(&self) -> SharedSpawner;
    /// A child's working directory when its spec names none.
    fn work_dir(&self) -> Option<std::path::PathBuf>;
    /// Records, durably, that running run `run` spawned its child in process group `pgid`.
    /// Called before the child's output is read; an error means the run was ended meanwhile
    /// or the node stopped (the caller kills the group).
    fn record_process_group(&self, run: RunId, pgid: u32) -> RecordFuture<'_, ()>;
    /// Where the node keeps its runs' live process groups, so that stopping waits for them
    /// (none: nothing waits).
    fn live_groups(&self) -> Option<Arc<crate::exec::live_groups::LiveGroups>> {
        None
    }

    /// Mints running run `run` the token an asynchronous webhook reports its result with
    /// (`crate::exec::run_tokens`); a host without an API refuses.
    fn issue_run_token(&self, _run: RunId) -> Result<RunTokenGrant, ReportRefusal> {
        Err(ReportRefusal::NoReportAddress)
    }
}

/// A run host shared by the runs of a node.
pub type SharedRunHost = Arc<dyn RunHost>;

/// How the adapter says the run went. Timeouts and cancellation are the executor's business.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterOutcome {
    /// `Succeeded` or `Failed`.
    pub status: RunStatus,
    pub detail: String,
    /// For a failure: whether the model or a tool failed (the breaker counts them apart).
    pub cause: Option<FailureCause>,
    /// Why it stopped, when the adapter knows better than the status implies.
    pub stop_reason: Option<StopReason>,
    /// What an agent loop adds to the run's end.
    pub report: Option<RunReport>,
    /// The error class of an unsuccessful end, when the adapter knows better than its stop.
    pub error_class: Option<ErrorClass>,
    /// The spend of the run's last model call, recorded with the run's end
    /// ([`RunEnd::last_call`](crate::engine::run::RunEnd::last_call)).
    pub last_call: Option<Usage>,
}

impl AdapterOutcome {
    /// An outcome with no stop reason or report of its own.
    pub fn new(status: RunStatus, detail: impl Into<String>, cause: Option<FailureCause>) -> Self {
        AdapterOutcome {
            status,
            detail: detail.into(),
            cause,
            stop_reason: None,
            report: None,
            error_class: None,
            last_call: None,
        }
    }
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

/// The adapters this binary ships, as agent policies name them. One per node: it holds what
/// the node's runs share (the compiled tool lists of `llm` agents).
#[derive(Debug, Clone, Default)]
pub struct BuiltinAdapters {
    tools: Arc<super::tools::CompiledTools>,
}

impl BuiltinAdapters {
    pub fn shared() -> SharedAdapterSource {
        Arc::new(BuiltinAdapters::default())
    }

    /// The built-in adapter an agent's policy names.
    pub fn adapter(&self, spec: &AdapterSpec) -> Box<dyn Adapter> {
        adapter_for(spec, &self.tools)
    }
}

impl AdapterSource for BuiltinAdapters {
    fn adapter_for(&self, spec: &AdapterSpec) -> Box<dyn Adapter> {
        self.adapter(spec)
    }
}

/// The built-in adapter an agent's policy names, its `llm` runs compiling tools into `tools`.
fn adapter_for(spec: &AdapterSpec, tools: &Arc<super::tools::CompiledTools>) -> Box<dyn Adapter> {
    match spec {
        AdapterSpec::Scripted(script) => Box::new(super::scripted::Scripted::new(script.clone())),
        AdapterSpec::Llm(llm) => Box::new(super::llm::Llm::new(llm.clone(), tools.clone())),
        AdapterSpec::Process(process) => Box::new(super::process::Process::new(process.clone())),
        AdapterSpec::ClaudeLocal(cli) => Box::new(super::coding_cli::CodingCli::new(
            super::coding_cli::CliKind::Claude,
            cli.clone(),
        )),
        AdapterSpec::CodexLocal(cli) => Box::new(super::coding_cli::CodingCli::new(
            super::coding_cli::CliKind::Codex,
            cli.clone(),
        )),
        AdapterSpec::Http(webhook) => Box::new(super::webhook::Webhook::new(webhook.clone())),
    }
}
