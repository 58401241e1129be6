//! The trace: the ordered record of everything that happened in a run, and its hash.
//!
//! Records are (virtual ms, node, event). The determinism check compares whole traces, record by
//! record; the hash summarizes one for the result line.

use serde::Serialize;
use vigil::engine::event::Event;
use vigil_faults::stream::fnv1a64;

/// One line of the trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceRecord {
    /// Virtual time since the start of the run, ms.
    pub t_ms: u64,
    /// The node it happened on (or `sim` for the harness itself).
    pub node: &'static str,
    pub event: TraceEvent,
}

/// What a trace record says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceEvent {
    /// The run's parameters, first record of every trace.
    RunStarted {
        seed: u64,
        scenario: String,
        plan: String,
    },
    /// A runtime event became durable (reported by the node's commit observer).
    Committed { event: Event },
    /// A fault struck.
    Fault { description: String },
    /// The node was killed (`during_write`: by a power cut in the middle of a storage
    /// operation); what its disk kept of the unsynced writes.
    Crashed {
        during_write: bool,
        pending_ops: usize,
        kept_ops: usize,
        torn_ops: usize,
        lost_bytes: u64,
    },
    /// The node was started again on its surviving disk.
    Restarted,
    /// The node finished recovery: the whole recovered log as (seq, digest) pairs, and in full
    /// the events on disk that were never reported committed (only a power cut may leave any).
    Recovered {
        head_seq: u64,
        digests: Vec<(u64, u64)>,
        unreported: Vec<Event>,
    },
    /// The node could not start on its disk.
    RecoveryFailed { error: String },
    /// The workload got a 2xx for creating an agent.
    AckedCreate { name: String, agent: u64, seq: u64 },
    /// The workload got a 2xx for a wakeup: the wakeup id it was given, and whether the answer
    /// replayed an earlier wakeup with the same idempotency key.
    AckedWakeup {
        agent: u64,
        wakeup: u64,
        idempotency_key: Option<String>,
        replayed: bool,
    },
    /// The workload got a 2xx for a pulse of `agent` it sent at virtual `sent_ms`.
    AckedPulse { agent: u64, sent_ms: u64 },
    /// The workload read the agent list of node `target`: its wall clock and each agent's next
    /// timer slot (none for an agent without a timer).
    Probe {
        target: &'static str,
        now_ms: u64,
        agents: Vec<(u64, String, Option<u64>)>,
    },
    /// The workload read a page of the event feed after `after`: (seq, digest) of each event.
    StreamPage { after: u64, events: Vec<(u64, u64)> },
    /// The safety phase ended; faults are healed from here on.
    QuietPhase,
    /// The commit whose events were just recorded ends here. Recorded only after a commit that
    /// holds a `run_finished` with an agent loop's report (so that the oracle knows which events
    /// share that run end's commit; other scenarios' traces are unchanged).
    CommitEnd { first_seq: u64, last_seq: u64 },
    /// The simulated LLM provider served a model call (sim/src/provider.rs): the wire shape, the
    /// `Host` header it was reached by (an IP or the provider's DNS name), the agent and run the
    /// system prompt's marker names, the run's tool rounds so far, and what it answered.
    ModelCallServed {
        api: WireApi,
        host: String,
        agent: Option<u64>,
        run: Option<u64>,
        round: u32,
        reply: ModelReply,
    },
    /// The simulated tool server served an HTTP tool call (sim/src/tool_server.rs): the agent
    /// and run the runtime named in the POST body, the tool, which endpoint, what it did.
    ToolCallServed {
        agent: u64,
        run: u64,
        tool: String,
        endpoint: String,
        outcome: ToolOutcome,
    },
    /// A run's child was started on the simulated machine (sim/src/processes.rs): its group and
    /// what it was drawn to do.
    ProcessSpawned { run: u64, pgid: u32, plan: String },
    /// The last process of group `pgid` (of run `run`) is gone.
    ProcessGroupGone { pgid: u32, run: u64 },
    /// A model call (on node `llm-provider`) or a tool call (on node `tool-server`) that the
    /// node recorded as served is over: answered, or dropped by the runtime mid-way.
    CallEnded {
        agent: Option<u64>,
        run: Option<u64>,
    },
    /// An invariant was violated; the run stops here.
    Violation {
        invariant: &'static str,
        detail: String,
    },
    /// The honest operator sent request `request` (numbered from 1 in send order): recorded only
    /// in scenarios that judge the operator's answers (sim/src/operator_client.rs).
    OperatorAsked {
        request: u64,
        method: String,
        path: String,
    },
    /// The operator's request `request` got its answer: the HTTP status and the error's `code`,
    /// or no status at all (no connection, no answer within the client's timeout).
    OperatorAnswered {
        request: u64,
        status: Option<u16>,
        code: Option<String>,
    },
    /// The hostile node (sim/src/hostile.rs) finished one attack: which, and what it got.
    Hostile { attack: &'static str, outcome: String },
}

/// The wire shape of a model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WireApi {
    /// `/v1/chat/completions`.
    Openai,
    /// `/v1/messages`.
    Anthropic,
}

/// What the simulated provider answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelReply {
    /// Exactly `[IDLE]`, no tool calls.
    Idle,
    /// A final answer.
    Answer,
    /// Tool calls, by tool name.
    ToolCalls {
        tools: Vec<String>,
    },
    /// An `llm_*` fault answered for it.
    RateLimited,
    ServerError,
    Timeout,
    Malformed,
}

/// What the simulated tool server did with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    /// 200 with a result.
    Ok,
    /// 200, after a delay.
    Slow,
    /// A 5xx.
    Failed,
    /// 200 with a partial result that asks to be called again.
    Partial,
    /// Never answered in time (a hung tool).
    Hung,
}

impl TraceRecord {
    /// The record as one line of text (what is hashed and printed).
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("trace records always serialize")
    }
}

/// A stable digest of one runtime event: equal events, equal digests, on any build.
pub fn event_digest(event: &Event) -> u64 {
    fnv1a64(&serde_json::to_vec(event).expect("events always serialize"))
}

/// The hash of a whole trace, as 16 hex digits.
pub fn trace_hash(records: &[TraceRecord]) -> String {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for record in records {
        hash = (hash ^ fnv1a64(record.line().as_bytes())).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}
