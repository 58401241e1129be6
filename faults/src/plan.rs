//! Fault plans: which faults happen at which virtual instants of a run.
//!
//! Every fault arrives as a Poisson process with a mean rate per simulated hour, bounded by
//! `max_triggers` and starting `after_ms` into the run. Instant faults (crash, power cut, clock
//! jump) strike at their arrival; window faults (storage errors, network partition, delay, loss)
//! open a window there that heals after a drawn duration. Each fault kind draws its arrivals and
//! parameters from its own stream, so adding a kind to a plan never shifts another's draws.

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::stream::stream;

/// Something that goes wrong on a runtime node or between nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// Kill the node at this instant (all memory lost, unsynced writes partly lost or torn) and
    /// restart it on its surviving disk after `downtime_ms`.
    Crash { downtime_ms: u64 },
    /// Cut the node's power at its `after_ops`-th storage operation from now (a write,
    /// `set_len` or sync: so before or after a sync), in the middle of a commit; the unsynced
    /// part of that commit partly lands, torn. CrashAfterWrite (docs/faults.md). Restart after
    /// `downtime_ms`.
    PowerCut { after_ops: u64, downtime_ms: u64 },
    /// Stop the node as a service manager does (SIGTERM): it drains for `grace_ms` (no run
    /// starts; the runs going may finish), stops its runs and their process groups, and
    /// exits; restart it after `downtime_ms` (ADR 0015).
    GracefulStop { grace_ms: u64, downtime_ms: u64 },
    /// Move the node's wall clock by `delta_ms` (negative: backward). Monotonic time is untouched.
    ClockJump { delta_ms: i64 },
    /// For `duration_ms`, or until `errors_max` operations have failed, each storage operation
    /// that `filter` selects fails with `error`. Nothing of a failed operation reaches the disk.
    StorageError {
        error: StorageError,
        filter: StorageFilter,
        errors_max: u32,
        duration_ms: u64,
    },
    /// Nothing passes between the workload and the runtime node, either way, for `duration_ms`:
    /// new connections are refused, messages on open ones wait until the link heals.
    Partition { duration_ms: u64 },
    /// Every message on the network takes `latency_ms` longer, for `duration_ms`.
    NetDelay { latency_ms: u64, duration_ms: u64 },
    /// Each message (and each connection attempt) is lost with probability
    /// `loss_permille / 1000`, for `duration_ms`; a lost message on an open connection is
    /// resent after a back-off, as TCP would.
    PacketLoss {
        loss_permille: u16,
        duration_ms: u64,
    },
    /// For `duration_ms`, the node's wall clock stands `skew_ms` off (either way) from where it
    /// was; then it is set right again (an NTP step). Monotonic time is untouched.
    ClockSkew { skew_ms: i64, duration_ms: u64 },
    /// Nothing passes between the runtime node and the LLM provider, either way, for
    /// `duration_ms` (scenarios with `llm` agents only).
    ProviderPartition { duration_ms: u64 },
    /// For `duration_ms`, each pulse the workload would send is dropped at its source with
    /// probability `loss_permille / 1000` (an agent's host hiccups).
    PulseLoss {
        loss_permille: u16,
        duration_ms: u64,
    },
    /// For `duration_ms`, every run that starts on the node hangs: its call never answers, so
    /// the executor's run timeout ends it (or, if the window heals first, the stuck call errors
    /// out then).
    RunHang { duration_ms: u64 },
    /// For `duration_ms`, every run that starts on the node fails at once: a tool call failed
    /// (the breaker's tool trigger counts it).
    RunFailure { duration_ms: u64 },
    /// For `duration_ms`, every call to the simulated tool server fails (HTTP 500): the agent
    /// loop hands the model a tool error and the run's end counts on the breaker's tool trigger.
    ToolFailure { duration_ms: u64 },
    /// For `duration_ms`, no call to the simulated tool server is answered: each hangs until
    /// the tool's own timeout (`timeout_ms` of the spec) ends it.
    ToolHang { duration_ms: u64 },
    /// For `duration_ms`, the simulated LLM provider misbehaves as `llm` says.
    Llm { llm: LlmFault, duration_ms: u64 },
    /// A wakeup storm: `wakes` on-demand wakeups sent at once to the node's agents (picked by
    /// `pick`), over `task_keys` task keys.
    WakeupBurst {
        wakes: u32,
        task_keys: u32,
        pick: u64,
    },
    /// A wakeup storm: `agents` agents registered at once on the same `interval_ms`; without the
    /// schedule's per-agent jitter their timers would all fire in the same instant.
    AlignedTimers { agents: u32, interval_ms: u64 },
    /// A wakeup storm: the wall clock leaps forward by `delta_ms` (hours), so every timer and
    /// idle chamber of the fleet is overdue at once (mass catch-up: one fire each, never the
    /// backlog).
    CatchUp { delta_ms: u64 },
}

impl Fault {
    /// The fault kind's name: its random stream and its name in traces and docs/faults.md.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Crash { .. } => "crash",
            Fault::PowerCut { .. } => "power_cut",
            Fault::GracefulStop { .. } => "graceful_stop",
            Fault::ClockJump { .. } => "clock_jump",
            Fault::StorageError {
                error: StorageError::Io,
                ..
            } => "storage_io_error",
            Fault::StorageError {
                error: StorageError::Full,
                ..
            } => "disk_full",
            Fault::Partition { .. } => "partition",
            Fault::NetDelay { .. } => "net_delay",
            Fault::PacketLoss { .. } => "packet_loss",
            Fault::Llm { llm, .. } => llm.name(),
            Fault::ProviderPartition { .. } => "provider_partition",
            Fault::PulseLoss { .. } => "pulse_loss",
            Fault::ClockSkew { .. } => "clock_skew",
            Fault::RunHang { .. } => "run_hang",
            Fault::RunFailure { .. } => "run_failure",
            Fault::ToolFailure { .. } => "tool_failure",
            Fault::ToolHang { .. } => "tool_hang",
            Fault::WakeupBurst { .. } => "wakeup_burst",
            Fault::AlignedTimers { .. } => "aligned_timers",
            Fault::CatchUp { .. } => "catch_up",
        }
    }

    /// How long the fault's window stays open (0 for an instant fault).
    pub fn duration_ms(&self) -> u64 {
        match *self {
            Fault::Crash { .. }
            | Fault::PowerCut { .. }
            | Fault::GracefulStop { .. }
            | Fault::ClockJump { .. }
            | Fault::WakeupBurst { .. }
            | Fault::AlignedTimers { .. }
            | Fault::CatchUp { .. } => 0,
            Fault::StorageError { duration_ms, .. }
            | Fault::Partition { duration_ms }
            | Fault::NetDelay { duration_ms, .. }
            | Fault::PacketLoss { duration_ms, .. }
            | Fault::Llm { duration_ms, .. }
            | Fault::ProviderPartition { duration_ms }
            | Fault::PulseLoss { duration_ms, .. }
            | Fault::ClockSkew { duration_ms, .. }
            | Fault::RunHang { duration_ms }
            | Fault::RunFailure { duration_ms }
            | Fault::ToolFailure { duration_ms }
            | Fault::ToolHang { duration_ms } => duration_ms,
        }
    }
}

/// A fault as one line of a trace: its kind, then its parameters as `key=value` words (the
/// wakeup burst's `pick`, a draw for choosing agents, is left out).
impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind())?;
        match *self {
            Fault::Crash { downtime_ms } => write!(f, " downtime_ms={downtime_ms}"),
            Fault::PowerCut {
                after_ops,
                downtime_ms,
            } => write!(f, " after_ops={after_ops} downtime_ms={downtime_ms}"),
            Fault::GracefulStop {
                grace_ms,
                downtime_ms,
            } => write!(f, " grace_ms={grace_ms} downtime_ms={downtime_ms}"),
            Fault::ClockJump { delta_ms } => write!(f, " delta_ms={delta_ms}"),
            Fault::StorageError {
                filter,
                errors_max,
                duration_ms,
                ..
            } => write!(
                f,
                " ops={:?} probability_permille={} errors_max={errors_max} duration_ms={duration_ms}",
                filter.ops, filter.probability_permille
            ),
            Fault::NetDelay {
                latency_ms,
                duration_ms,
            } => write!(f, " latency_ms={latency_ms} duration_ms={duration_ms}"),
            Fault::PacketLoss {
                loss_permille,
                duration_ms,
            }
            | Fault::PulseLoss {
                loss_permille,
                duration_ms,
            } => write!(f, " loss_permille={loss_permille} duration_ms={duration_ms}"),
            Fault::ClockSkew {
                skew_ms,
                duration_ms,
            } => write!(f, " skew_ms={skew_ms} duration_ms={duration_ms}"),
            Fault::Partition { duration_ms }
            | Fault::ProviderPartition { duration_ms }
            | Fault::RunHang { duration_ms }
            | Fault::RunFailure { duration_ms }
            | Fault::ToolFailure { duration_ms }
            | Fault::ToolHang { duration_ms }
            | Fault::Llm { duration_ms, .. } => write!(f, " duration_ms={duration_ms}"),
            Fault::WakeupBurst {
                wakes, task_keys, ..
            } => write!(f, " wakes={wakes} task_keys={task_keys}"),
            Fault::AlignedTimers {
                agents,
                interval_ms,
            } => write!(f, " agents={agents} interval_ms={interval_ms}"),
            Fault::CatchUp { delta_ms } => write!(f, " delta_ms={delta_ms}"),
        }
    }
}

/// How the simulated LLM provider misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmFault {
    /// Every call answers 429 Too Many Requests.
    RateLimit,
    /// Every call answers 503 Service Unavailable.
    ServerError,
    /// Calls get no answer until long after any sane request timeout.
    Timeout,
    /// Calls answer 200 with a body that is not a chat completion.
    Malformed,
}

impl LlmFault {
    pub fn name(self) -> &'static str {
        match self {
            LlmFault::RateLimit => "llm_rate_limit",
            LlmFault::ServerError => "llm_server_error",
            LlmFault::Timeout => "llm_timeout",
            LlmFault::Malformed => "llm_malformed",
        }
    }
}

/// What a failing storage operation returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageError {
    /// `io::ErrorKind::Other`: a failing device, a bad sector, a lost NFS server.
    Io,
    /// `io::ErrorKind::StorageFull` (ENOSPC).
    Full,
}

/// Which storage operations a storage fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageOps {
    /// Writes and `set_len` (what grows the file).
    Write,
    /// `sync_data` (fsync).
    Sync,
    /// Both.
    Any,
}

impl StorageOps {
    /// Whether an operation that is (or is not) a sync is selected.
    pub fn selects(self, is_sync: bool) -> bool {
        match self {
            StorageOps::Write => !is_sync,
            StorageOps::Sync => is_sync,
            StorageOps::Any => true,
        }
    }
}

/// The operation filter of a storage fault: which operations, and the chance that a selected
/// operation fails while the fault's window is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageFilter {
    pub ops: StorageOps,
    /// Chance, in thousandths, that a selected operation fails (1000: every one).
    pub probability_permille: u16,
}

impl StorageFilter {
    /// Every operation of `ops` fails while the window is open.
    pub const fn always(ops: StorageOps) -> Self {
        StorageFilter {
            ops,
            probability_permille: PERMILLE,
        }
    }
}

/// How often one kind of fault strikes, and within which bounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FaultRate {
    /// Which fault; `plan` draws each arrival's parameters (downtime, jump size, window length,
    /// ...) from the kind's own stream.
    pub kind: FaultKind,
    /// Mean arrivals per simulated hour.
    pub per_hour: f64,
    /// No arrival before this many virtual ms into the run.
    pub after_ms: u64,
    /// At most this many arrivals.
    pub max_triggers: u32,
}

/// The kinds of fault a plan can schedule. A storage fault carries its operation filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Crash,
    PowerCut,
    /// SIGTERM: a drain, a stop, a restart after a downtime.
    GracefulStop,
    ClockJump,
    /// Storage operations fail with an I/O error (`ErrorKind::Other`).
    StorageIoError(StorageFilter),
    /// Storage operations fail with `ErrorKind::StorageFull`.
    DiskFull(StorageFilter),
    /// The link between the workload and the runtime node is cut both ways.
    Partition,
    /// The network's latency rises.
    NetDelay,
    /// The network loses packets.
    PacketLoss,
    /// The simulated LLM provider misbehaves for a while (scenarios with `llm` agents only).
    Llm(LlmFault),
    /// The link between the runtime and the LLM provider is cut both ways.
    ProviderPartition,
    /// Pulses are dropped at their source.
    PulseLoss,
    /// The node's wall clock stands off for a while.
    ClockSkew,
    /// Runs that start on the node hang.
    RunHang,
    /// Runs that start on the node fail (a tool call failed).
    RunFailure,
    /// The simulated tool server fails every call (scenarios with a tool server only).
    ToolFailure,
    /// The simulated tool server answers no call (scenarios with a tool server only).
    ToolHang,
    /// A burst of on-demand wakeups at once.
    WakeupBurst,
    /// A fleet registered at once on one interval.
    AlignedTimers,
    /// A forward clock leap of hours: the whole fleet's catch-up at once.
    CatchUp,
}

impl FaultKind {
    /// The kind's name: its random stream, and its name in traces and docs/faults.md.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::PowerCut => "power_cut",
            FaultKind::GracefulStop => "graceful_stop",
            FaultKind::ClockJump => "clock_jump",
            FaultKind::StorageIoError(_) => "storage_io_error",
            FaultKind::DiskFull(_) => "disk_full",
            FaultKind::Partition => "partition",
            FaultKind::NetDelay => "net_delay",
            FaultKind::PacketLoss => "packet_loss",
            FaultKind::Llm(fault) => fault.name(),
            FaultKind::ProviderPartition => "provider_partition",
            FaultKind::PulseLoss => "pulse_loss",
            FaultKind::ClockSkew => "clock_skew",
            FaultKind::RunHang => "run_hang",
            FaultKind::RunFailure => "run_failure",
            FaultKind::ToolFailure => "tool_failure",
            FaultKind::ToolHang => "tool_hang",
            FaultKind::WakeupBurst => "wakeup_burst",
            FaultKind::AlignedTimers => "aligned_timers",
            FaultKind::CatchUp => "catch_up",
        }
    }
}

/// A fault scheduled at a virtual instant, counted from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injection {
    pub at_ms: u64,
    pub fault: Fault,
}

/// Thousandths: the unit of every probability a fault carries (integers keep `Fault` `Eq`).
pub const PERMILLE: u16 = 1_000;
/// Shortest and longest downtime after a crash: from a quick restart to a long outage that
/// makes many timer slots go missed.
pub const CRASH_DOWNTIME_MS_MIN: u64 = 1_000;
pub const CRASH_DOWNTIME_MS_MAX: u64 = 3 * 60 * 60 * 1_000;
/// A power cut strikes within this many storage operations: a redb commit of a few events does
/// about six writes and one sync, so this spans the first one or two commits after arming.
pub const POWER_CUT_AFTER_OPS_MAX: u64 = 12;
/// Longest drain a graceful stop gives the runs going (drawn from 0, which stops at once):
/// production's default is 25 s (`DRAIN_GRACE_DEFAULT_S`); up to two minutes lets runs of a
/// few tool rounds finish, while a hung or long process run outlasts it.
pub const GRACEFUL_STOP_GRACE_MS_MAX: u64 = 2 * 60 * 1_000;
/// Largest forward and backward clock jumps.
pub const CLOCK_JUMP_FORWARD_MS_MAX: i64 = 3 * 60 * 60 * 1_000;
pub const CLOCK_JUMP_BACKWARD_MS_MAX: i64 = 60 * 60 * 1_000;
/// A storage fault's window: from a blip to ten minutes of a sick disk. The node stops at the
/// first failed append (ADR 0008), so a long window means a crash loop of restarts that fail.
pub const STORAGE_ERROR_MS_MIN: u64 = 1_000;
pub const STORAGE_ERROR_MS_MAX: u64 = 10 * 60_000;
/// A storage fault's window also closes once this many operations have failed in it.
pub const STORAGE_ERRORS_PER_WINDOW_MAX: u32 = 3;
/// A network fault's window: from a blip to minutes (longer than the client's 10 s timeout).
pub const NET_FAULT_MS_MIN: u64 = 1_000;
pub const NET_FAULT_MS_MAX: u64 = 5 * 60 * 1_000;
/// Extra latency per message under `NetDelay`: noticeable to far past the client's timeout
/// (a request is at least two messages).
pub const NET_DELAY_MS_MIN: u64 = 20;
pub const NET_DELAY_MS_MAX: u64 = 8_000;
/// Loss rate under `PacketLoss`, in thousandths.
pub const PACKET_LOSS_PERMILLE_MIN: u16 = 50;
pub const PACKET_LOSS_PERMILLE_MAX: u16 = 600;
/// A provider fault's window: from a minute to two hours of a sick provider.
pub const LLM_FAULT_MS_MIN: u64 = 60_000;
pub const LLM_FAULT_MS_MAX: u64 = 2 * 60 * 60 * 1_000;
/// How far a `ClockSkew` sets the wall clock off (either way), and for how long.
pub const CLOCK_SKEW_MS_MIN: u64 = 100;
pub const CLOCK_SKEW_MS_MAX: u64 = 60_000;
pub const CLOCK_SKEW_WINDOW_MS_MIN: u64 = 60_000;
pub const CLOCK_SKEW_WINDOW_MS_MAX: u64 = 2 * 60 * 60 * 1_000;
/// Share of pulses dropped under `PulseLoss`, at least (up to all of them), in thousandths.
pub const PULSE_LOSS_PERMILLE_MIN: u16 = 100;
/// A run fault's window: from a minute to half an hour (the default run timeout is ten
/// minutes, so some hangs outlast it and some heal first).
pub const RUN_FAULT_MS_MIN: u64 = 60_000;
pub const RUN_FAULT_MS_MAX: u64 = 30 * 60_000;
/// A tool server's sick spell: from a few calls (a tool round takes seconds) to a quarter of an
/// hour, long enough for several runs in a row to meet it and the tool trigger to open the
/// breaker.
pub const TOOL_FAULT_MS_MIN: u64 = 10_000;
pub const TOOL_FAULT_MS_MAX: u64 = 15 * 60_000;
/// Wakeups in one burst, and the task keys they spread over.
pub const BURST_WAKES_MIN: u64 = 20;
pub const BURST_WAKES_MAX: u64 = 300;
pub const BURST_TASK_KEYS_MAX: u32 = 8;
/// Agents registered at once by an aligned-timers storm, and their shared interval.
pub const ALIGNED_AGENTS_MIN: u32 = 5;
pub const ALIGNED_AGENTS_MAX: u32 = 20;
pub const ALIGNED_INTERVAL_MS_MIN: u64 = 2 * 60_000;
pub const ALIGNED_INTERVAL_MS_MAX: u64 = 30 * 60_000;
/// A catch-up leap of the wall clock: from one hour to a day.
pub const CATCH_UP_MS_MIN: u64 = 60 * 60 * 1_000;
pub const CATCH_UP_MS_MAX: u64 = 24 * 60 * 60 * 1_000;

/// Every injection of `rates` within `[0, until_ms)`, in time order (ties in `rates` order).
pub fn plan(seed: u64, until_ms: u64, rates: &[FaultRate]) -> Vec<Injection> {
    let mut injections = Vec::new();
    for rate in rates {
        assert!(rate.per_hour >= 0.0, "fault rate must not be negative");
        let mut rng = stream(seed, rate.kind.name());
        let mut at_ms = rate.after_ms;
        for _ in 0..rate.max_triggers {
            if rate.per_hour == 0.0 {
                break;
            }
            let mean_gap_ms = 3_600_000.0 / rate.per_hour;
            // Exponential gaps make a Poisson process; the clamp keeps `ln` finite.
            let u: f64 = rng.gen_range(f64::EPSILON..1.0);
            at_ms = at_ms.saturating_add((-u.ln() * mean_gap_ms) as u64);
            if at_ms >= until_ms {
                break;
            }
            let fault = draw(rate.kind, &mut rng);
            injections.push(Injection { at_ms, fault });
        }
    }
    // Stable sort: equal instants keep the order of `rates`, so the plan is fully determined.
    injections.sort_by_key(|i| i.at_ms);
    injections
}

/// A storage fault's window, drawn from its kind's stream.
fn storage_window(error: StorageError, filter: StorageFilter, rng: &mut impl Rng) -> Fault {
    assert!(
        filter.probability_permille <= PERMILLE,
        "a probability is at most {PERMILLE} permille"
    );
    Fault::StorageError {
        error,
        filter,
        errors_max: rng.gen_range(1..=STORAGE_ERRORS_PER_WINDOW_MAX),
        duration_ms: log_uniform(rng, STORAGE_ERROR_MS_MIN, STORAGE_ERROR_MS_MAX),
    }
}

/// The parameters of one arrival of `kind`, from the kind's own stream.
fn draw(kind: FaultKind, rng: &mut impl Rng) -> Fault {
    match kind {
        FaultKind::Crash => Fault::Crash {
            downtime_ms: log_uniform(rng, CRASH_DOWNTIME_MS_MIN, CRASH_DOWNTIME_MS_MAX),
        },
        FaultKind::PowerCut => Fault::PowerCut {
            after_ops: rng.gen_range(1..=POWER_CUT_AFTER_OPS_MAX),
            downtime_ms: log_uniform(rng, CRASH_DOWNTIME_MS_MIN, CRASH_DOWNTIME_MS_MAX),
        },
        FaultKind::GracefulStop => Fault::GracefulStop {
            grace_ms: rng.gen_range(0..=GRACEFUL_STOP_GRACE_MS_MAX),
            downtime_ms: log_uniform(rng, CRASH_DOWNTIME_MS_MIN, CRASH_DOWNTIME_MS_MAX),
        },
        FaultKind::ClockJump => {
            let delta_ms = if rng.gen_bool(0.5) {
                log_uniform(rng, 1_000, CLOCK_JUMP_FORWARD_MS_MAX as u64) as i64
            } else {
                -(log_uniform(rng, 1_000, CLOCK_JUMP_BACKWARD_MS_MAX as u64) as i64)
            };
            Fault::ClockJump { delta_ms }
        }
        FaultKind::StorageIoError(filter) => storage_window(StorageError::Io, filter, rng),
        FaultKind::DiskFull(filter) => storage_window(StorageError::Full, filter, rng),
        FaultKind::Partition => Fault::Partition {
            duration_ms: log_uniform(rng, NET_FAULT_MS_MIN, NET_FAULT_MS_MAX),
        },
        FaultKind::NetDelay => Fault::NetDelay {
            latency_ms: log_uniform(rng, NET_DELAY_MS_MIN, NET_DELAY_MS_MAX),
            duration_ms: log_uniform(rng, NET_FAULT_MS_MIN, NET_FAULT_MS_MAX),
        },
        FaultKind::PacketLoss => Fault::PacketLoss {
            loss_permille: rng.gen_range(PACKET_LOSS_PERMILLE_MIN..=PACKET_LOSS_PERMILLE_MAX),
            duration_ms: log_uniform(rng, NET_FAULT_MS_MIN, NET_FAULT_MS_MAX),
        },
        FaultKind::Llm(llm) => Fault::Llm {
            llm,
            duration_ms: log_uniform(rng, LLM_FAULT_MS_MIN, LLM_FAULT_MS_MAX),
        },
        FaultKind::ProviderPartition => Fault::ProviderPartition {
            duration_ms: log_uniform(rng, NET_FAULT_MS_MIN, NET_FAULT_MS_MAX),
        },
        FaultKind::PulseLoss => Fault::PulseLoss {
            loss_permille: rng.gen_range(PULSE_LOSS_PERMILLE_MIN..=PERMILLE),
            duration_ms: log_uniform(rng, NET_FAULT_MS_MIN, NET_FAULT_MS_MAX),
        },
        FaultKind::ClockSkew => {
            let size = log_uniform(rng, CLOCK_SKEW_MS_MIN, CLOCK_SKEW_MS_MAX) as i64;
            Fault::ClockSkew {
                skew_ms: if rng.gen_bool(0.5) { size } else { -size },
                duration_ms: log_uniform(rng, CLOCK_SKEW_WINDOW_MS_MIN, CLOCK_SKEW_WINDOW_MS_MAX),
            }
        }
        FaultKind::RunHang => Fault::RunHang {
            duration_ms: log_uniform(rng, RUN_FAULT_MS_MIN, RUN_FAULT_MS_MAX),
        },
        FaultKind::RunFailure => Fault::RunFailure {
            duration_ms: log_uniform(rng, RUN_FAULT_MS_MIN, RUN_FAULT_MS_MAX),
        },
        FaultKind::ToolFailure => Fault::ToolFailure {
            duration_ms: log_uniform(rng, TOOL_FAULT_MS_MIN, TOOL_FAULT_MS_MAX),
        },
        FaultKind::ToolHang => Fault::ToolHang {
            duration_ms: log_uniform(rng, TOOL_FAULT_MS_MIN, TOOL_FAULT_MS_MAX),
        },
        FaultKind::WakeupBurst => Fault::WakeupBurst {
            wakes: log_uniform(rng, BURST_WAKES_MIN, BURST_WAKES_MAX) as u32,
            task_keys: rng.gen_range(1..=BURST_TASK_KEYS_MAX),
            pick: rng.gen(),
        },
        FaultKind::AlignedTimers => Fault::AlignedTimers {
            agents: rng.gen_range(ALIGNED_AGENTS_MIN..=ALIGNED_AGENTS_MAX),
            interval_ms: log_uniform(rng, ALIGNED_INTERVAL_MS_MIN, ALIGNED_INTERVAL_MS_MAX),
        },
        FaultKind::CatchUp => Fault::CatchUp {
            delta_ms: log_uniform(rng, CATCH_UP_MS_MIN, CATCH_UP_MS_MAX),
        },
    }
}

/// A value between `min` and `max` whose logarithm is uniform: short and long values are both
/// common, as outages and clock errors are in life.
pub fn log_uniform(rng: &mut impl Rng, min: u64, max: u64) -> u64 {
    assert!(0 < min && min <= max);
    let (lo, hi) = ((min as f64).ln(), (max as f64).ln());
    (rng.gen_range(lo..=hi).exp() as u64).clamp(min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(crash_per_hour: f64) -> Vec<FaultRate> {
        vec![
            FaultRate {
                kind: FaultKind::Crash,
                per_hour: crash_per_hour,
                after_ms: 0,
                max_triggers: 1_000,
            },
            FaultRate {
                kind: FaultKind::ClockJump,
                per_hour: 0.5,
                after_ms: 60_000,
                max_triggers: 3,
            },
        ]
    }

    #[test]
    fn plans_are_sorted_bounded_and_reproducible() {
        let day_ms = 24 * 3_600_000;
        let a = plan(42, day_ms, &rates(0.25));
        assert_eq!(a, plan(42, day_ms, &rates(0.25)));
        assert!(a.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert!(a.iter().all(|i| i.at_ms < day_ms));
        let jumps: Vec<_> = a
            .iter()
            .filter(|i| i.fault.kind() == "clock_jump")
            .collect();
        assert!(jumps.len() <= 3);
        assert!(jumps.iter().all(|i| i.at_ms >= 60_000));
    }

    #[test]
    fn changing_one_fault_rate_leaves_the_others_alone() {
        let day_ms = 24 * 3_600_000;
        let jumps = |p: &[Injection]| -> Vec<Injection> {
            p.iter()
                .copied()
                .filter(|i| i.fault.kind() == "clock_jump")
                .collect()
        };
        let few_crashes = plan(9, day_ms, &rates(0.1));
        let many_crashes = plan(9, day_ms, &rates(3.0));
        assert_ne!(few_crashes.len(), many_crashes.len());
        assert_eq!(jumps(&few_crashes), jumps(&many_crashes));
    }

    /// Every kind the plan knows, at rates that make each strike several times a day.
    fn every_kind() -> Vec<FaultRate> {
        let rate = |kind, per_hour| FaultRate {
            kind,
            per_hour,
            after_ms: 0,
            max_triggers: 50,
        };
        vec![
            rate(FaultKind::Crash, 0.5),
            rate(FaultKind::PowerCut, 0.5),
            rate(FaultKind::GracefulStop, 0.5),
            rate(FaultKind::ClockJump, 0.5),
            rate(
                FaultKind::StorageIoError(StorageFilter::always(StorageOps::Write)),
                0.5,
            ),
            rate(
                FaultKind::DiskFull(StorageFilter {
                    ops: StorageOps::Sync,
                    probability_permille: 250,
                }),
                0.5,
            ),
            rate(FaultKind::Partition, 0.5),
            rate(FaultKind::NetDelay, 0.5),
            rate(FaultKind::PacketLoss, 0.5),
            rate(FaultKind::Llm(LlmFault::RateLimit), 0.5),
            rate(FaultKind::Llm(LlmFault::ServerError), 0.5),
            rate(FaultKind::Llm(LlmFault::Timeout), 0.5),
            rate(FaultKind::Llm(LlmFault::Malformed), 0.5),
            rate(FaultKind::ProviderPartition, 0.5),
            rate(FaultKind::PulseLoss, 0.5),
            rate(FaultKind::ClockSkew, 0.5),
            rate(FaultKind::RunHang, 0.5),
            rate(FaultKind::RunFailure, 0.5),
            rate(FaultKind::ToolFailure, 0.5),
            rate(FaultKind::ToolHang, 0.5),
            rate(FaultKind::WakeupBurst, 0.5),
            rate(FaultKind::AlignedTimers, 0.5),
            rate(FaultKind::CatchUp, 0.5),
        ]
    }

    fn of_kind(plan: &[Injection], kind: &str) -> Vec<Injection> {
        plan.iter()
            .copied()
            .filter(|i| i.fault.kind() == kind)
            .collect()
    }

    #[test]
    fn adding_or_changing_a_kind_never_shifts_the_others() {
        let day_ms = 24 * 3_600_000;
        let all = every_kind();
        let full = plan(5, day_ms, &all);
        for (index, rate) in all.iter().enumerate() {
            // Without this kind, and with this kind at another rate: the rest is unchanged.
            let mut without = all.clone();
            without.remove(index);
            let mut faster = all.clone();
            faster[index].per_hour = 4.0;
            let (without, faster) = (plan(5, day_ms, &without), plan(5, day_ms, &faster));
            assert!(
                !of_kind(&full, rate.kind.name()).is_empty(),
                "{}",
                rate.kind.name()
            );
            assert_ne!(
                of_kind(&full, rate.kind.name()),
                of_kind(&faster, rate.kind.name())
            );
            for other in all.iter().filter(|r| r.kind != rate.kind) {
                let name = other.kind.name();
                assert_eq!(of_kind(&full, name), of_kind(&without, name), "{name}");
                assert_eq!(of_kind(&full, name), of_kind(&faster, name), "{name}");
            }
        }
    }

    #[test]
    fn window_faults_carry_their_knobs_within_bounds() {
        let day_ms = 24 * 3_600_000;
        let injections = plan(11, day_ms, &every_kind());
        let mut kinds = std::collections::BTreeSet::new();
        for injection in &injections {
            kinds.insert(injection.fault.kind());
            match injection.fault {
                Fault::StorageError {
                    error,
                    filter,
                    errors_max,
                    duration_ms,
                } => {
                    let expected = match error {
                        StorageError::Io => StorageFilter::always(StorageOps::Write),
                        StorageError::Full => StorageFilter {
                            ops: StorageOps::Sync,
                            probability_permille: 250,
                        },
                    };
                    assert_eq!(filter, expected);
                    assert!((1..=STORAGE_ERRORS_PER_WINDOW_MAX).contains(&errors_max));
                    assert!((STORAGE_ERROR_MS_MIN..=STORAGE_ERROR_MS_MAX).contains(&duration_ms));
                }
                Fault::NetDelay { latency_ms, .. } => {
                    assert!((NET_DELAY_MS_MIN..=NET_DELAY_MS_MAX).contains(&latency_ms));
                }
                Fault::PacketLoss { loss_permille, .. } => assert!((PACKET_LOSS_PERMILLE_MIN
                    ..=PACKET_LOSS_PERMILLE_MAX)
                    .contains(&loss_permille)),
                _ => {}
            }
            if matches!(
                injection.fault,
                Fault::Partition { .. } | Fault::NetDelay { .. } | Fault::PacketLoss { .. }
            ) {
                let d = injection.fault.duration_ms();
                assert!((NET_FAULT_MS_MIN..=NET_FAULT_MS_MAX).contains(&d));
            }
            if matches!(
                injection.fault,
                Fault::RunHang { .. } | Fault::RunFailure { .. }
            ) {
                let d = injection.fault.duration_ms();
                assert!((RUN_FAULT_MS_MIN..=RUN_FAULT_MS_MAX).contains(&d));
            }
            if matches!(
                injection.fault,
                Fault::ToolFailure { .. } | Fault::ToolHang { .. }
            ) {
                let d = injection.fault.duration_ms();
                assert!((TOOL_FAULT_MS_MIN..=TOOL_FAULT_MS_MAX).contains(&d));
            }
        }
        assert_eq!(kinds.len(), every_kind().len(), "{kinds:?}");
    }

    #[test]
    fn storage_ops_filter_selects_writes_or_syncs() {
        assert!(StorageOps::Write.selects(false) && !StorageOps::Write.selects(true));
        assert!(StorageOps::Sync.selects(true) && !StorageOps::Sync.selects(false));
        assert!(StorageOps::Any.selects(true) && StorageOps::Any.selects(false));
    }

    #[test]
    fn log_uniform_stays_in_bounds() {
        let mut rng = stream(1, "test");
        for _ in 0..1_000 {
            let v = log_uniform(&mut rng, 1_000, 10_800_000);
            assert!((1_000..=10_800_000).contains(&v));
        }
    }
}
