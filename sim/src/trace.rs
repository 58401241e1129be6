//! The trace: the ordered record of everything that happened in a run, and its hash.
//!
//! Records are (virtual ms, node, event). The determinism check compares whole traces, record by
//! record; the hash summarizes one for the result line.

use std::fmt;

use serde::{Serialize, Serializer};
use vigil::engine::event::Event;
use vigil_faults::stream::fnv1a64;
use vigil_faults::Fault;

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
    /// A fault struck, typed: the oracle matches on the variant, never on its text. Rendered as
    /// its one-line description (`kind key=value ...`), so trace lines read as they always have.
    Fault {
        #[serde(rename = "description", serialize_with = "as_text")]
        fault: FaultRecord,
    },
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
    /// A graceful stop began (fault `graceful_stop`): the node holds run starts from now on.
    /// `after_seq` is its log position when it did (every later event was decided with starts
    /// held); `going` the runs then in progress, as the node counts them; `groups` the
    /// machine's process groups then alive.
    DrainStarted {
        grace_ms: u64,
        after_seq: u64,
        going: usize,
        groups: usize,
    },
    /// The drain ended: `left` runs were still going when the grace ran out (0: every run that
    /// was going has ended, its end durable).
    Drained { left: usize },
    /// The node stopped its runs and waited for their process groups, and its process exits:
    /// `live_groups`, the process groups of the machine still alive at that moment (the
    /// simulated machine's view, not the node's).
    StoppedGracefully { live_groups: Vec<u32> },
    /// The node finished recovery: the whole recovered log as (seq, digest) pairs (from its
    /// oldest kept event: seq 1 unless the node compacts), and in full the events on disk that
    /// were never reported committed (only a power cut may leave any).
    Recovered {
        head_seq: u64,
        digests: Vec<(u64, u64)>,
        unreported: Vec<Event>,
    },
    /// The node compacts its log: events a snapshot holds that are older than `keep_events_ms`
    /// on its wall clock may be removed, so a recovered log may begin after seq 1.
    LogRetention { keep_events_ms: u64 },
    /// The node is about to recover from a disk holding the snapshot at `seq` and its whole
    /// log: `Store::recover_observed` compares the engine the snapshot gives with a replay of
    /// the log, and a difference fails the start (`RecoveryFailed`).
    SnapshotOnDisk { seq: u64 },
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
    /// The workload got a 2xx for one batch of pulses (`POST /v1/pulses`) it sent at virtual
    /// `sent_ms`: each of `agents` was answered. One record per batch, not per agent: a day of
    /// the Heart fleet's batches is 43,000 records this way and 640,000 the other, which was
    /// most of the trace's memory and a fifth of the run's time (docs/simulation.md).
    AckedPulses { agents: Vec<u64>, sent_ms: u64 },
    /// A pulse of `agent` the workload sent at virtual `sent_ms` got no 2xx (no answer, or a
    /// 5xx): it may have reached the node or not. Recorded so that the oracle knows which pulse
    /// arrivals it cannot place (check/phi.rs).
    UnansweredPulse { agent: u64, sent_ms: u64 },
    /// The same for a batch of pulses; which agents it named is not kept (a fleet's batches name
    /// thousands), so the oracle takes it as touching every agent.
    UnansweredPulses { sent_ms: u64 },
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
    /// The node is about to write the events `first_seq..=last_seq` as one store transaction
    /// (before every commit). Their `committed` records follow once it is durable; if the
    /// process dies first, recovery may find all of them on disk, or none.
    CommitAttempted { first_seq: u64, last_seq: u64 },
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
        /// The source and reason the run's wakeup message names, when it is the built-in
        /// wakeup prompt (invariant 38); absent otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        wake: Option<WakeSeen>,
        /// The calls of this reply whose arguments the model broke on purpose (absent in a
        /// reply a fault replaced): each must come back refused, never executed.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        broken: Vec<BrokenCall>,
        /// The results the node sent back for the previous round's broken calls, as this
        /// request carries them.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        results_seen: Vec<ToolResultSeen>,
        /// The body of the 429 or 5xx a fault answered with, as sent.
        #[serde(skip_serializing_if = "Option::is_none")]
        error_body: Option<String>,
        /// A final answer's text, in scenarios that judge answer excerpts (their provider draws
        /// long answers: `Behaviour::long_answer_permille`); absent otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
    },
    /// The simulated tool server served an HTTP tool call (sim/src/tool_server.rs): the agent
    /// and run the runtime named in the POST body, the tool, which endpoint, what it did.
    ToolCallServed {
        agent: u64,
        run: u64,
        /// The `call_id` of the POST body: the id the model gave the call.
        call_id: String,
        tool: String,
        endpoint: String,
        outcome: ToolOutcome,
    },
    /// A run's child was started on the simulated machine (sim/src/processes.rs): its group and
    /// what it was drawn to do; the arguments and stdin it was given (invariant 38); the lines
    /// it will write to stdout if nothing stops it, and how its leader will end on its own
    /// (invariant 39).
    ProcessSpawned {
        run: u64,
        pgid: u32,
        plan: String,
        args: Vec<String>,
        stdin: Option<String>,
        stdout: Vec<String>,
        end: PlannedEnd,
        /// When the child plays a coding CLI (sim/src/coding_clis.rs): what it printed, for
        /// invariant 40.
        #[serde(skip_serializing_if = "Option::is_none")]
        cli: Option<Box<CliDrawn>>,
    },
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
    /// The simulated alert receiver (sim/src/alert_sink.rs) is up: the run judges alerts.
    AlertSinkUp,
    /// The alert receiver accepted (2xx) alert `id` about event `seq`, of `kind`.
    AlertDelivered { id: String, seq: u64, kind: String },
    /// The simulated state server (sim/src/state_server.rs) began serving request `request`
    /// (numbered from 1 per heartbeat) of heartbeat `heartbeat`'s check: the truth `value` it
    /// read at that instant, the length of the `pad` string it carries beside it (absent: the
    /// answer is `{"unread": value}` alone; see `state_server::observed`), and how it will
    /// answer.
    CheckServed {
        heartbeat: String,
        request: u64,
        value: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        pad_bytes: Option<u64>,
        answer: CheckAnswer,
    },
    /// That check is over: answered, or dropped by the runtime (its budget, a closed
    /// connection).
    CheckEnded { heartbeat: String, request: u64 },
    /// A request of the `edges` workload (sim/src/edges.rs), sent with values at and just past
    /// the documented limits, and its final answer once it got one (a lost answer is retried
    /// with the same body; `attempts` counts the sends). `field` is an `invalid_field` answer's
    /// field. The oracle judges it against the limits restated in check/edges.rs.
    EdgeAnswered {
        kind: EdgeKind,
        /// The agent asked about (by name); none for a creation.
        agent: Option<String>,
        body: serde_json::Value,
        status: u16,
        code: Option<String>,
        field: Option<String>,
        attempts: u32,
        /// The durable events the oracle knew of when the request was first sent: a commit
        /// with a larger seq may be this request's.
        seq_before: u64,
        /// `paused_until_ms` of a 2xx answer that shows the agent (pauses and resumes).
        paused_until_ms: Option<u64>,
        /// A heartbeat definition's 2xx answer: the heartbeat it shows.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shown: Option<serde_json::Value>,
    },
    /// The `edges` workload read a page of agent `agent`'s timeline
    /// (`GET /v1/agents/{id}/timeline?since_ms=..&limit=..`): its entries, oldest first, and
    /// where it stopped. The oracle holds it to the agent's committed state changes.
    TimelineShown {
        agent: u64,
        since_ms: u64,
        limit: usize,
        entries: Vec<TimelineSeen>,
        next_after: u64,
        head_seq: u64,
    },
    /// The workload read agent `agent`'s conversation history (`GET /v1/agents/{id}/history`):
    /// each message's role, the [`text_digest`] of its text and its length in bytes, oldest
    /// first, and the answer's `bytes`; `sent_ms`, when the request was sent.
    HistoryShown {
        agent: u64,
        sent_ms: u64,
        messages: Vec<(vigil::engine::history::Role, u64, usize)>,
        bytes: usize,
    },
    /// The `edges` workload read the agent called `agent`: the spec the node shows.
    SpecShown {
        agent: String,
        spec: serde_json::Value,
    },
    /// The `edges` workload had the token of the agent called `agent` replaced
    /// (`POST /v1/agents/{id}/token`, answered 2xx): the `seq` the answer gave, and the SHA-256
    /// (lowercase hex) of the token it returned. The token itself stays out of the trace.
    TokenRotated {
        agent: String,
        seq: u64,
        token_sha256: String,
    },
    /// The `edges` workload read the agent called `agent` with a token one of its rotations
    /// returned (named by its SHA-256): the answer's status.
    TokenUsed {
        agent: String,
        token_sha256: String,
        status: u16,
    },
}

/// Which request an [`TraceEvent::EdgeAnswered`] record answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// `POST /v1/agents`.
    Create,
    /// `PATCH /v1/agents/{id}`.
    Patch,
    /// `POST /v1/agents/{id}/wakeup`.
    Wake,
    /// `POST /v1/agents/{id}/pause`.
    Pause,
    /// `POST /v1/agents/{id}/pause_heartbeats`.
    PauseHeartbeats,
    /// `POST /v1/agents/{id}/resume`.
    Resume,
    /// `POST /v1/agents/{id}/pulse`, with what the agent says of itself (status, metadata).
    Pulse,
    /// `POST /v1/heartbeats`: a command-check predicate heartbeat of the agent, whose id the
    /// workload puts into the body as `agent` once it is known.
    Heartbeat,
}

/// One entry of a timeline page as the node showed it: its event's position, instant and type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimelineSeen {
    pub seq: u64,
    pub at_ms: u64,
    #[serde(rename = "type")]
    pub kind: String,
}

/// How the simulated state server answers one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CheckAnswer {
    /// At once.
    Quick,
    /// After `delay_ms`, within the heartbeat's budget.
    Slow { delay_ms: u64 },
    /// After `delay_ms`, past the heartbeat's budget: the runtime gives up first.
    Late { delay_ms: u64 },
    /// Never.
    Hang,
}

impl CheckAnswer {
    /// Whether the runtime gets the answer within its budget.
    pub fn in_budget(self) -> bool {
        matches!(self, CheckAnswer::Quick | CheckAnswer::Slow { .. })
    }
}

/// What a `fault` trace record says happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultRecord {
    /// A planned fault struck: an instant one (crash, power cut, storm) at its arrival, or a
    /// window one opened.
    Struck(Fault),
    /// A planned window fault had nothing to strike in this world (an `llm_*` fault in a
    /// scenario without an LLM provider, a `tool_*` fault in one without a tool server), so it
    /// was skipped.
    SkippedNoProvider(Fault),
    /// A planned window fault healed.
    Healed(Fault),
    /// Every fault still open was healed for the quiet phase.
    HealedAll,
    /// The disk failed an injected storage operation while the node was up (its
    /// `injected_errors` so far): from here on the process must commit nothing (ADR 0008).
    StorageOpFailed { injected_errors: u64 },
    /// The node stopped itself after a failed write (ADR 0008), with the cause it gave.
    NodeStopped { cause: String },
    /// The node's wall clock moved by `delta_ms` (negative: backward); it now stands
    /// `offset_ms` from virtual time.
    ClockJump { delta_ms: i64, offset_ms: i64 },
}

impl FaultRecord {
    /// The fault kind's name: the first word of the record's rendering, as in docs/faults.md.
    pub fn kind(&self) -> &'static str {
        match self {
            FaultRecord::Struck(fault)
            | FaultRecord::SkippedNoProvider(fault)
            | FaultRecord::Healed(fault) => fault.kind(),
            FaultRecord::HealedAll => "healed",
            FaultRecord::StorageOpFailed { .. } => "storage_op_failed",
            FaultRecord::NodeStopped { .. } => "node_stopped",
            FaultRecord::ClockJump { .. } => "clock_jump",
        }
    }
}

impl fmt::Display for FaultRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultRecord::Struck(fault) => write!(f, "{fault}"),
            FaultRecord::SkippedNoProvider(fault) => {
                let missing = match fault {
                    Fault::ToolFailure { .. } | Fault::ToolHang { .. } => "tool server",
                    _ => "llm provider",
                };
                write!(f, "{} skipped: no {missing} in this scenario", fault.kind())
            }
            FaultRecord::Healed(fault) => write!(f, "{} healed", fault.kind()),
            FaultRecord::HealedAll => f.write_str("healed every fault for the quiet phase"),
            FaultRecord::StorageOpFailed { injected_errors } => {
                write!(f, "storage_op_failed injected_errors={injected_errors}")
            }
            FaultRecord::NodeStopped { cause } => write!(f, "node_stopped cause={cause:?}"),
            FaultRecord::ClockJump {
                delta_ms,
                offset_ms,
            } => write!(f, "clock_jump delta_ms={delta_ms} offset_ms={offset_ms}"),
        }
    }
}

/// Serializes a value as its `Display` text.
fn as_text<S: Serializer>(value: &impl fmt::Display, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
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

/// How a simulated child's leader ends if nothing stops it, as drawn when it was spawned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PlannedEnd {
    Exit { code: i32 },
    Signal { signal: i32 },
    /// It hangs until a signal ends it.
    Never,
}

/// Which coding CLI a simulated child plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CliName {
    Claude,
    Codex,
}

/// How one invocation of a simulated coding CLI was drawn to go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CliOutcome {
    /// It refused the session it was asked to resume (stderr says so), exit 1.
    Refused,
    /// It finished: a success result (Claude Code) or a completed turn (Codex), exit 0.
    Succeeded,
    /// It reported a failure (an error result, a failed turn) and exited `code`.
    Failed { code: i32 },
    /// Exit 0 with nothing on stdout a run can be read from.
    Garbage,
    /// Exit `code` with nothing on stdout.
    Crashed { code: i32 },
    /// It never ends on its own.
    Hangs,
}

/// Token counts one usage object printed, field by field as the CLI names them: Claude Code's
/// `input_tokens`, `cache_creation_input_tokens`, `cache_read_input_tokens`, `output_tokens`;
/// Codex's `input_tokens` (cached included), `cached_input_tokens` (as `cache_read`) and
/// `output_tokens` (`cache_creation` 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PrintedUsage {
    pub input: u64,
    pub cache_creation: u64,
    pub cache_read: u64,
    pub output: u64,
}

/// What a simulated coding CLI printed for one invocation: what the oracle reads the run's
/// end against (invariant 40).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CliDrawn {
    pub cli: CliName,
    /// The session it was asked to resume.
    pub resume: Option<String>,
    pub outcome: CliOutcome,
    /// The session (Claude Code) or thread (Codex) it reported.
    pub session: Option<String>,
    /// Claude Code's one usage object; Codex's, one per completed turn.
    pub usage: Vec<PrintedUsage>,
    /// Claude Code's `num_turns` (none: left out).
    pub num_turns: Option<u64>,
    /// Claude Code's `total_cost_usd`, in micro-dollars.
    pub cost_micro_usd: Option<u64>,
    /// The final answer it printed (Claude Code's `result`, Codex's last agent message).
    pub text: Option<String>,
}

/// What a built-in wakeup prompt names, as the simulated provider read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WakeSeen {
    /// The `Wakeup source:` line.
    pub source: String,
    /// The `Reason:` line (all of a reason's lines, up to `Local time:`).
    pub reason: String,
}

/// A tool call whose arguments the simulated model made break the tool's parameters schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokenCall {
    /// The call's id, as the model named it.
    pub id: String,
    pub tool: String,
    /// How many schema errors its arguments carry (each value of a wrong type is one).
    pub errors: u32,
}

/// A tool result as the simulated provider read it in the next request of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolResultSeen {
    pub call_id: String,
    /// The result's text, whole.
    pub text: String,
}

/// What the simulated provider answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelReply {
    /// Exactly `[IDLE]`, no tool calls.
    Idle,
    /// A final answer.
    Answer,
    /// Tool calls, by tool name; with the `minutes` it asked `pause_heartbeats` for, if it
    /// asked for a rest.
    ToolCalls {
        tools: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        rest_minutes: Option<u64>,
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

/// Records of the shared past shown before the first difference of two traces.
pub const DIVERGENCE_CONTEXT_RECORDS: usize = 20;

/// Where two traces of one seed part: the first record that differs, in each (`None`: that
/// trace ended there), and the records just before it, which both traces share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    pub index: usize,
    pub lengths: (usize, usize),
    pub first: Option<TraceRecord>,
    pub second: Option<TraceRecord>,
    /// At most [`DIVERGENCE_CONTEXT_RECORDS`], oldest first, ending at `index - 1`.
    pub before: Vec<TraceRecord>,
}

/// The first difference of two traces, if they differ.
pub fn first_difference(a: &[TraceRecord], b: &[TraceRecord]) -> Option<Divergence> {
    let index = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))?;
    let context_from = index.saturating_sub(DIVERGENCE_CONTEXT_RECORDS);
    Some(Divergence {
        index,
        lengths: (a.len(), b.len()),
        first: a.get(index).cloned(),
        second: b.get(index).cloned(),
        before: a[context_from..index].to_vec(),
    })
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |record: &Option<TraceRecord>| {
            record
                .as_ref()
                .map_or_else(|| "<end of trace>".to_string(), TraceRecord::line)
        };
        writeln!(
            f,
            "traces differ at record {} (lengths {} and {}); the {} records before it, the same in both:",
            self.index,
            self.lengths.0,
            self.lengths.1,
            self.before.len()
        )?;
        let context_from = self.index - self.before.len();
        for (offset, record) in self.before.iter().enumerate() {
            writeln!(f, "  [{}] {}", context_from + offset, record.line())?;
        }
        writeln!(f, "record {}:", self.index)?;
        writeln!(f, "  first:  {}", show(&self.first))?;
        write!(f, "  second: {}", show(&self.second))
    }
}

/// A stable digest of one runtime event: equal events, equal digests, on any build. The
/// event's compact JSON is written into one buffer per thread, reused, and hashed whole: every
/// committed event is digested (and every event a recovery reads), and a fresh text for each, or
/// hashing each piece as serde_json wrote it (millions of calls a fleet-day), was most of what
/// a digest cost.
pub fn event_digest(event: &Event) -> u64 {
    thread_local! {
        static TEXT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    TEXT.with_borrow_mut(|text| {
        text.clear();
        serde_json::to_writer(&mut *text, event).expect("events always serialize");
        fnv1a64(text)
    })
}

/// The digest of an event from its JSON as the node sent it (`GET /v1/events`), which the
/// node writes with serde_json's compact writer: the [`event_digest`] of the event it holds.
pub fn sent_event_digest(json: &str) -> u64 {
    fnv1a64(json.as_bytes())
}

/// The hash of a whole trace, as 16 hex digits.
pub fn trace_hash(records: &[TraceRecord]) -> String {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    // Each record's line (`TraceRecord::line`'s bytes) written into one buffer, reused: a
    // fleet-day's trace is about 56,000 records.
    let mut line = Vec::new();
    for record in records {
        line.clear();
        serde_json::to_writer(&mut line, record).expect("trace records always serialize");
        hash = (hash ^ fnv1a64(&line)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_faults::{StorageError, StorageFilter, StorageOps};

    /// `len` distinct records (their instants are their indices).
    fn trace(len: u64) -> Vec<TraceRecord> {
        (0..len)
            .map(|t_ms| TraceRecord {
                t_ms,
                node: "sim",
                event: TraceEvent::QuietPhase,
            })
            .collect()
    }

    /// The digest the oracle keeps of a committed event equals the digest of the JSON the node
    /// sends for it, escapes and all: the workload's feed is checked against it.
    #[test]
    fn an_event_digest_is_the_digest_of_its_sent_json() {
        let event = Event {
            seq: 7,
            at_ms: 1_700_000_000_123,
            tenant: "t\"\\é\u{1}\n".to_string(),
            kind: vigil::engine::event::EventKind::InputReceived {
                agent: vigil::engine::agent::AgentId(3),
                next_idle_at_ms: Some(9),
            },
        };
        let sent = serde_json::to_string(&event).unwrap();
        assert_eq!(event_digest(&event), sent_event_digest(&sent));
        assert_ne!(
            event_digest(&event),
            sent_event_digest(&sent.replace("\\n", "\\r")),
            "every byte counts"
        );
    }

    #[test]
    fn equal_traces_do_not_differ() {
        assert_eq!(first_difference(&trace(30), &trace(30)), None);
        assert_eq!(first_difference(&[], &[]), None);
    }

    #[test]
    fn a_difference_names_its_index_both_records_and_the_twenty_before() {
        let first = trace(40);
        let mut second = trace(40);
        second[25].node = "vigil-1";
        second[30].node = "vigil-1";
        let divergence = first_difference(&first, &second).expect("they differ");
        assert_eq!(divergence.index, 25);
        assert_eq!(divergence.first.as_ref(), Some(&first[25]));
        assert_eq!(divergence.second.as_ref(), Some(&second[25]));
        assert_eq!(divergence.before, first[5..25].to_vec());
        assert_eq!(divergence.before.len(), DIVERGENCE_CONTEXT_RECORDS);
        let text = divergence.to_string();
        assert!(
            text.contains("differ at record 25 (lengths 40 and 40)"),
            "{text}"
        );
        assert!(
            text.contains(&format!("  [5] {}", first[5].line())),
            "{text}"
        );
        assert!(
            text.contains(&format!("  [24] {}", first[24].line())),
            "{text}"
        );
        assert!(!text.contains(&first[4].line()), "{text}");
        assert!(
            text.contains(&format!("  first:  {}", first[25].line())),
            "{text}"
        );
        assert!(
            text.contains(&format!("  second: {}", second[25].line())),
            "{text}"
        );
    }

    #[test]
    fn an_early_difference_shows_what_came_before_it() {
        let first = trace(10);
        let mut second = trace(10);
        second[3].t_ms = 99;
        let divergence = first_difference(&first, &second).expect("they differ");
        assert_eq!(divergence.index, 3);
        assert_eq!(divergence.before, first[..3].to_vec());
    }

    #[test]
    fn a_trace_that_stops_early_differs_where_it_ends() {
        let divergence = first_difference(&trace(30), &trace(22)).expect("they differ");
        assert_eq!(divergence.index, 22);
        assert_eq!(divergence.second, None);
        assert_eq!(divergence.before, trace(22)[2..].to_vec());
        assert!(divergence.to_string().ends_with("second: <end of trace>"));
    }

    #[test]
    fn fault_records_render_as_their_description() {
        let line = |fault| {
            TraceRecord {
                t_ms: 7,
                node: "vigil-1",
                event: TraceEvent::Fault { fault },
            }
            .line()
        };
        // The golden traces hold these lines: a change here moves every trace hash.
        assert_eq!(
            line(FaultRecord::Struck(Fault::PowerCut {
                after_ops: 12,
                downtime_ms: 2_017_782
            })),
            r#"{"t_ms":7,"node":"vigil-1","event":{"type":"fault","description":"power_cut after_ops=12 downtime_ms=2017782"}}"#
        );
        let storage = Fault::StorageError {
            error: StorageError::Io,
            filter: StorageFilter {
                ops: StorageOps::Any,
                probability_permille: 1_000,
            },
            errors_max: 3,
            duration_ms: 20_542,
        };
        assert_eq!(
            FaultRecord::Struck(storage).to_string(),
            "storage_io_error ops=Any probability_permille=1000 errors_max=3 duration_ms=20542"
        );
        assert_eq!(
            FaultRecord::Healed(storage).to_string(),
            "storage_io_error healed"
        );
        assert_eq!(
            FaultRecord::NodeStopped {
                cause: "disk full".into()
            }
            .to_string(),
            r#"node_stopped cause="disk full""#
        );
    }

    #[test]
    fn a_fault_record_s_kind_is_the_first_word_of_its_rendering() {
        let crash = Fault::Crash { downtime_ms: 5 };
        for record in [
            FaultRecord::Struck(crash),
            FaultRecord::Struck(Fault::PulseLoss {
                loss_permille: 3,
                duration_ms: 4,
            }),
            FaultRecord::SkippedNoProvider(Fault::Llm {
                llm: vigil_faults::LlmFault::Timeout,
                duration_ms: 9,
            }),
            FaultRecord::Healed(crash),
            FaultRecord::HealedAll,
            FaultRecord::StorageOpFailed { injected_errors: 2 },
            FaultRecord::NodeStopped { cause: "x".into() },
            FaultRecord::ClockJump {
                delta_ms: -3,
                offset_ms: 1,
            },
        ] {
            let text = record.to_string();
            assert_eq!(
                text.split_whitespace().next(),
                Some(record.kind()),
                "{text}"
            );
        }
    }
}

/// A message text's digest in the trace: the text itself can be kilobytes, read many times.
pub fn text_digest(text: &str) -> u64 {
    vigil_faults::stream::fnv1a64(text.as_bytes())
}
