//! The engine against a small reference model of the wakeup coordinator and the Heart's
//! mechanisms (the proptest reference model; docs/ARCHITECTURE.md).
//!
//! Random sequences of wakeups, run ends (success, LLM and tool failures, timeouts), cancels,
//! pauses (until resumed, timed by the operator, the agent's own `pause_heartbeats`), resumes,
//! terminations, daily caps changed by an operator (`agent_updated`), breaker resets, error-state resets (with runs dying in crash loops and probes
//! failing at the breaker's longest cooldown, the two ways into `error`), clock moves (past the 24 h idempotency TTL, across local
//! midnights, and backwards) and crashes run through the engine and through `Model`, written
//! from the rules alone (coordinator.rs header, docs/api.md "Semantics", docs/invariants.md 1,
//! 2, 3, 5, 6, 8, 11). After every step the two must agree on the answer; on the runs started
//! (with the local day each counts against) and ended and the pause and breaker events, in log
//! order; on the running run, the queue in start order and every run's state; and on each
//! agent's pause, daily count, breaker and error state with its counts. The event log must keep invariants 1, 5 and 11 on its
//! own. A crash rebuilds the engine from the whole log, which must give the same engine, and
//! from the latest snapshot (an image taken at a random earlier step, while the engine went on
//! changing) and the log after it, which must give the same engine too; then it recovers.
use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use vigil::engine::agent::{AgentId, AgentSpec, AgentStatus, FieldError};
use vigil::engine::breaker::{BreakerState, FailureCause};
use vigil::engine::daily_cap::{DayCount, LocalDay};
use vigil::engine::event::{Event, EventKind};
use vigil::engine::pause::{PausedBy, WhilePaused};
use vigil::engine::run::{RunEnd, RunId, RunStatus, CONTROL_PLANE_RESTART};
use vigil::engine::snapshot::Image;
use vigil::engine::tenant::TokenHash;
use vigil::engine::wakeup::{
    Priority, RefusalReason, WakeupId, WakeupOutcome, WakeupRecord, WakeupRequest, WakeupSource,
    IDEMPOTENCY_TTL_MS,
};
use vigil::engine::{Command, Decision, Engine, Refusal};

/// Operations in one generated sequence, at most.
const OPS_MAX: usize = 100;
/// Agents in one generated sequence, at most.
const AGENTS_MAX: usize = 3;
/// Where the wall clock starts (2026-03-01T12:00:00Z): far enough from 0 that going back never
/// clamps.
const START_MS: u64 = 1_772_366_400_000;
const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const DAY_MS: u64 = 24 * HOUR_MS;
/// Small alphabets, so that coalescing and idempotency hits are common.
const TASK_KEYS: [&str; 3] = ["a", "b", "c"];
const IDEMPOTENCY_KEYS: [&str; 3] = ["k1", "k2", "k3"];
const TENANT: &str = "t";

/// Zones whose UTC offset has not changed since long before `START_MS` (no DST), so that the
/// model finds the local day by plain arithmetic, independently of the engine's tz database.
/// Three of four are not UTC, so a local midnight is rarely a UTC one.
const ZONES: [Zone; 4] = [
    Zone {
        name: "UTC",
        utc_offset_ms: 0,
    },
    Zone {
        name: "Asia/Tokyo",
        utc_offset_ms: 9 * HOUR_MS as i64,
    },
    Zone {
        name: "Asia/Kolkata",
        utc_offset_ms: (5 * HOUR_MS + 30 * MINUTE_MS) as i64,
    },
    Zone {
        name: "America/Phoenix",
        utc_offset_ms: -7 * (HOUR_MS as i64),
    },
];

// ---- the rules' numbers, restated from docs/api.md rather than imported from the engine ----

/// An operator's timed pause lasts 1 to this many minutes (a week); other values are refused.
const OPERATOR_PAUSE_MINUTES_MAX: u64 = 10_080;
/// `pause_heartbeats` lasts 2 minutes unless told, clamped to 1..=60.
const HEARTBEAT_PAUSE_MINUTES_DEFAULT: u64 = 2;
const HEARTBEAT_PAUSE_MINUTES_MIN: u64 = 1;
const HEARTBEAT_PAUSE_MINUTES_MAX: u64 = 60;
/// Started runs in a row ended by a control-plane restart that put an agent in `error`.
const RESTART_ENDS_TO_ERROR: u32 = 3;
/// Breaker openings in a row at `breaker.cooldown_ms_max` that put an agent in `error`.
const OPENINGS_AT_CAP_TO_ERROR: u32 = 3;

// ---- the generated input ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Zone {
    name: &'static str,
    utc_offset_ms: i64,
}

impl Zone {
    /// The local calendar day of `wall_ms`, in days since 1970-01-01.
    fn day(self, wall_ms: u64) -> i64 {
        (wall_ms as i64 + self.utc_offset_ms).div_euclid(DAY_MS as i64)
    }

    /// The wall instant local day `day` begins.
    fn midnight_ms(self, day: i64) -> u64 {
        (day * DAY_MS as i64 - self.utc_offset_ms) as u64
    }
}

#[derive(Debug, Clone)]
struct AgentSetup {
    queued_runs_max: usize,
    /// A source the agent does not accept, if any.
    disabled_source: Option<WakeupSource>,
    while_paused: WhilePaused,
    zone: Zone,
    /// Small, so that it is reached within a sequence.
    daily_cap: Option<u32>,
    failures_to_open: u32,
    cooldown_ms: u64,
    cooldown_ms_max: u64,
    /// `limits.cooldown_ms`: the pause between one run's end and the next start.
    run_cooldown_ms: u64,
}

impl AgentSetup {
    /// An agent with every Heart setting at its default: no cap, UTC, 3 failures, 15 min to 2 h.
    fn plain(queued_runs_max: usize) -> AgentSetup {
        AgentSetup {
            queued_runs_max,
            disabled_source: None,
            while_paused: WhilePaused::AllowOnDemand,
            zone: ZONES[0],
            daily_cap: None,
            failures_to_open: 3,
            cooldown_ms: 15 * MINUTE_MS,
            cooldown_ms_max: 2 * HOUR_MS,
            run_cooldown_ms: 0,
        }
    }
}

/// How the executor reports a run's end: a failure carries the cause the breaker counts, and a
/// timeout is an LLM failure (docs/api.md, "Run lifecycle").
#[derive(Debug, Clone, Copy)]
enum Ending {
    Succeeded,
    LlmFailed,
    ToolFailed,
    TimedOut,
}

impl Ending {
    fn run_end(self, detail: String) -> RunEnd {
        match self {
            Ending::Succeeded => RunEnd::new(RunStatus::Succeeded, detail),
            Ending::LlmFailed => {
                RunEnd::new(RunStatus::Failed, detail).caused_by(FailureCause::Llm)
            }
            Ending::ToolFailed => {
                RunEnd::new(RunStatus::Failed, detail).caused_by(FailureCause::Tool)
            }
            Ending::TimedOut => {
                RunEnd::new(RunStatus::TimedOut, detail).caused_by(FailureCause::Llm)
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Wake {
        agent: usize,
        source: WakeupSource,
        task_key: Option<&'static str>,
        idempotency_key: Option<&'static str>,
    },
    /// End the agent's running run (or, when none runs, try its latest run and expect a refusal).
    Finish {
        agent: usize,
        ending: Ending,
    },
    /// Cancel the `pick`-th run ever created (modulo their number).
    Cancel {
        pick: usize,
    },
    /// An operator pause: until resumed (`None`), or for `minutes` (0 and 10,081 are refused).
    Pause {
        agent: usize,
        minutes: Option<u64>,
    },
    /// The agent's own `pause_heartbeats`.
    PauseHeartbeats {
        agent: usize,
        minutes: Option<u64>,
    },
    Resume {
        agent: usize,
    },
    Terminate {
        agent: usize,
    },
    ResetBreaker {
        agent: usize,
    },
    /// An operator takes the agent out of the error state.
    ResetError {
        agent: usize,
    },
    /// An operator changes the agent's daily cap (`PATCH` with `limits.daily_cap`; `None`
    /// removes it): the day's count is kept, the new cap applies from the next decision.
    SetCap {
        agent: usize,
        cap: Option<u32>,
    },
    /// Move the wall clock by this much (negative: back).
    Advance {
        delta_ms: i64,
    },
    /// Move the wall clock to the start of the agent's next local day (`forward`) or of its
    /// current one, then by `offset_ms`: `-1` on the way back crosses midnight backwards.
    Midnight {
        agent: usize,
        forward: bool,
        offset_ms: i64,
    },
    Crash,
    /// The node takes a snapshot: the next crash recovers from it and the log after it.
    Snapshot,
    /// The timer loop's tick: starts the queued runs whose agent's cooldown is over.
    FireDue,
}

fn agent_setup() -> impl Strategy<Value = AgentSetup> {
    (
        1..=4usize,
        prop::option::weighted(0.3, prop::sample::select(WakeupSource::all())),
        prop::sample::select(vec![WhilePaused::AllowOnDemand, WhilePaused::RefuseAll]),
        prop::sample::select(ZONES.to_vec()),
        prop::option::weighted(0.5, 1..=3u32),
        1..=3u32,
        prop::sample::select(vec![1_000, MINUTE_MS, 15 * MINUTE_MS]),
        prop::sample::select(vec![1, 2, 4u64]),
        prop::sample::select(vec![0, 0, 2_000, MINUTE_MS]),
    )
        .prop_map(
            |(
                queued_runs_max,
                disabled_source,
                while_paused,
                zone,
                daily_cap,
                failures_to_open,
                cooldown_ms,
                cooldown_factor,
                run_cooldown_ms,
            )| AgentSetup {
                queued_runs_max,
                disabled_source,
                while_paused,
                zone,
                daily_cap,
                failures_to_open,
                cooldown_ms,
                cooldown_ms_max: cooldown_ms * cooldown_factor,
                run_cooldown_ms,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    let agent = 0..AGENTS_MAX;
    let ttl_ms = IDEMPOTENCY_TTL_MS as i64;
    let (minute, hour) = (MINUTE_MS as i64, HOUR_MS as i64);
    prop_oneof![
        40 => (
            agent.clone(),
            prop::sample::select(WakeupSource::all()),
            prop::option::weighted(0.7, prop::sample::select(TASK_KEYS.to_vec())),
            prop::option::weighted(0.5, prop::sample::select(IDEMPOTENCY_KEYS.to_vec())),
        )
            .prop_map(|(agent, source, task_key, idempotency_key)| Op::Wake {
                agent,
                source,
                task_key,
                idempotency_key,
            }),
        20 => (
            agent.clone(),
            prop_oneof![
                5 => Just(Ending::Succeeded),
                3 => Just(Ending::LlmFailed),
                2 => Just(Ending::ToolFailed),
                1 => Just(Ending::TimedOut),
            ],
        )
            .prop_map(|(agent, ending)| Op::Finish { agent, ending }),
        3 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        2 => agent.clone().prop_map(|agent| Op::Pause { agent, minutes: None }),
        3 => (
            agent.clone(),
            prop::sample::select(vec![0, 1, 2, 5, 60, OPERATOR_PAUSE_MINUTES_MAX, OPERATOR_PAUSE_MINUTES_MAX + 1]),
        )
            .prop_map(|(agent, minutes)| Op::Pause { agent, minutes: Some(minutes) }),
        4 => (
            agent.clone(),
            prop::option::weighted(0.7, prop::sample::select(vec![0, 1, 2, 3, 30, 60, 61, u64::MAX])),
        )
            .prop_map(|(agent, minutes)| Op::PauseHeartbeats { agent, minutes }),
        5 => agent.clone().prop_map(|agent| Op::Resume { agent }),
        1 => agent.clone().prop_map(|agent| Op::Terminate { agent }),
        2 => agent.clone().prop_map(|agent| Op::ResetBreaker { agent }),
        4 => agent.clone().prop_map(|agent| Op::ResetError { agent }),
        1 => (agent.clone(), prop::option::of(1u32..=4))
            .prop_map(|(agent, cap)| Op::SetCap { agent, cap }),
        20 => prop::sample::select(vec![
            1,
            1_000,
            minute,
            2 * minute,
            15 * minute,
            hour,
            6 * hour,
            ttl_ms - 1,
            ttl_ms,
            ttl_ms + 1,
            -1_000,
            -minute,
            -hour,
            -6 * hour,
            -ttl_ms,
        ])
        .prop_map(|delta_ms| Op::Advance { delta_ms }),
        4 => (agent.clone(), any::<bool>(), -1..=1i64).prop_map(|(agent, forward, offset_ms)| {
            Op::Midnight {
                agent,
                forward,
                offset_ms,
            }
        }),
        5 => Just(Op::Crash),
        3 => Just(Op::Snapshot),
        4 => Just(Op::FireDue),
    ]
}

/// Steps that make the error state's counts likely to reach their limits: a run dies with the
/// control plane (a wake, then a crash), or a probe fails after the longest cooldown (two hours
/// on, a wake, an LLM failure).
fn error_prone_steps() -> impl Strategy<Value = Vec<Op>> {
    let agent = 0..AGENTS_MAX;
    let wake = |agent| Op::Wake {
        agent,
        source: WakeupSource::OnDemand,
        task_key: None,
        idempotency_key: None,
    };
    prop_oneof![
        1 => agent.clone().prop_map(move |agent| vec![wake(agent), Op::Crash]),
        2 => agent.prop_map(move |agent| vec![
            Op::Advance {
                delta_ms: 2 * HOUR_MS as i64
            },
            wake(agent),
            Op::Finish {
                agent,
                ending: Ending::LlmFailed
            },
        ]),
    ]
}

fn sequence() -> impl Strategy<Value = (Vec<AgentSetup>, Vec<Op>)> {
    let step = prop_oneof![
        15 => op().prop_map(|op| vec![op]),
        1 => error_prone_steps(),
    ];
    (
        prop::collection::vec(agent_setup(), 1..=AGENTS_MAX),
        prop::collection::vec(step, 1..=OPS_MAX)
            .prop_map(|steps| steps.into_iter().flatten().take(OPS_MAX).collect()),
    )
}

// ---- the reference model ----

/// Start order of queued runs: smaller first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    OnDemand,
    Assignment,
    Routine,
}

impl Class {
    fn of(source: WakeupSource) -> Class {
        match source {
            WakeupSource::OnDemand => Class::OnDemand,
            WakeupSource::Assignment => Class::Assignment,
            _ => Class::Routine,
        }
    }

    fn priority(self) -> Priority {
        match self {
            Class::OnDemand => Priority::OnDemand,
            Class::Assignment => Priority::Assignment,
            Class::Routine => Priority::Routine,
        }
    }
}

#[derive(Debug, Clone)]
struct ModelRun {
    agent: usize,
    source: WakeupSource,
    class: Class,
    task_key: Option<String>,
    coalesced_count: u64,
    retry_of: Option<RunId>,
    status: RunStatus,
    /// The detail the run must end with, when the model knows it.
    detail: Option<String>,
}

#[derive(Debug, Clone)]
struct ModelAgent {
    id: AgentId,
    status: AgentStatus,
    sources: Vec<WakeupSource>,
    queued_runs_max: usize,
    /// Queued runs, in no particular order; `start_order` sorts them.
    queue: Vec<RunId>,
    running: Option<RunId>,
    /// The answer each idempotency key got, with the time it was given (`at_ms`).
    keys: BTreeMap<String, WakeupRecord>,
    /// The latest wall time at which a keyed wakeup was recorded: once it passes a key's first
    /// use + 24 h, the key has expired for good, even if the clock goes back.
    keys_clock_ms: u64,
    setup: AgentSetup,
    /// The end of the latest timed pause, a wall instant; only a resume clears it.
    paused_until_ms: Option<u64>,
    paused_by: Option<PausedBy>,
    /// The latest local day a start was counted against, and the starts counted on it.
    counted_day: Option<i64>,
    counted_starts: u32,
    breaker: BreakerState,
    /// The last run's end and that plus its cooldown, while it may hold.
    cooldown: Option<(u64, u64)>,
    /// In the error state: every wakeup refused `agent_error`, nothing started, until reset.
    in_error: bool,
    /// Started runs in a row that ended with a control-plane restart.
    restart_ends: u32,
    /// Breaker openings in a row at the longest cooldown.
    openings_at_cap: u32,
}

impl ModelAgent {
    /// Whether a timed pause refuses `source` at `now_ms`: it is in force strictly before its
    /// instant, whichever way the clock moved to get there; timer and idle are always refused,
    /// the others under `refuse_all` only.
    fn pause_refuses(&self, source: WakeupSource, now_ms: u64) -> bool {
        let in_force = self.paused_until_ms.is_some_and(|until| now_ms < until);
        let routine = matches!(source, WakeupSource::Timer | WakeupSource::Idle);
        in_force && (routine || self.setup.while_paused == WhilePaused::RefuseAll)
    }

    /// The local day a start at `now_ms` counts against: today, or, after the clock went back,
    /// the latest day already counted (a counted day is never re-opened).
    fn cap_day(&self, now_ms: u64) -> i64 {
        let today = self.setup.zone.day(now_ms);
        self.counted_day.map_or(today, |counted| counted.max(today))
    }

    /// Whether the starts counted on the cap's day plus `queued` runs reach the daily cap.
    fn cap_reached(&self, now_ms: u64, queued: usize) -> bool {
        let day = self.cap_day(now_ms);
        let started = if self.counted_day == Some(day) {
            self.counted_starts
        } else {
            0
        };
        self.setup
            .daily_cap
            .is_some_and(|cap| started as usize + queued >= cap as usize)
    }
}

/// The coordinator and the Heart as the rules describe them. Never calls engine code.
#[derive(Debug, Clone, Default)]
struct Model {
    agents: Vec<ModelAgent>,
    runs: BTreeMap<RunId, ModelRun>,
    next_run: u64,
    next_wakeup: u64,
    now_ms: u64,
    /// What the current step did, in order.
    effects: Vec<Effect>,
}

impl Model {
    fn new(setups: &[AgentSetup], now_ms: u64) -> Model {
        let agents = setups
            .iter()
            .enumerate()
            .map(|(i, setup)| ModelAgent {
                id: AgentId(i as u64 + 1),
                status: AgentStatus::Active,
                sources: sources(setup),
                queued_runs_max: setup.queued_runs_max,
                queue: Vec::new(),
                running: None,
                keys: BTreeMap::new(),
                keys_clock_ms: 0,
                setup: setup.clone(),
                paused_until_ms: None,
                paused_by: None,
                counted_day: None,
                counted_starts: 0,
                breaker: BreakerState::Closed {
                    llm_failures: 0,
                    tool_failures: 0,
                },
                cooldown: None,
                in_error: false,
                restart_ends: 0,
                openings_at_cap: 0,
            })
            .collect();
        Model {
            agents,
            next_run: 1,
            next_wakeup: 1,
            now_ms,
            ..Model::default()
        }
    }

    fn start_order(&self, agent: usize) -> Vec<RunId> {
        let mut queue = self.agents[agent].queue.clone();
        queue.sort_by_key(|id| (self.runs[id].class, *id));
        queue
    }

    fn queued_with_key(&self, agent: usize, task_key: &Option<String>) -> Option<RunId> {
        let a = &self.agents[agent];
        a.queue
            .iter()
            .copied()
            .find(|id| self.runs[id].task_key == *task_key)
    }

    fn new_run(&mut self, agent: usize, run: ModelRun) -> RunId {
        let id = RunId(self.next_run);
        self.next_run += 1;
        self.runs.insert(id, run);
        self.agents[agent].queue.push(id);
        id
    }

    /// A half-open breaker without a probe takes the first run admitted (queued or joined) as
    /// its one probe.
    fn take_as_probe(&mut self, agent: usize, run: RunId) {
        if let BreakerState::HalfOpen {
            probe: probe @ None,
            ..
        } = &mut self.agents[agent].breaker
        {
            *probe = Some(run);
        }
    }

    /// The breaker's refusal of a wakeup, if any. An open breaker whose cooldown is over turns
    /// half-open and lets the wakeup through.
    fn breaker_refusal(&mut self, agent: usize) -> Option<RefusalReason> {
        let now_ms = self.now_ms;
        let a = &mut self.agents[agent];
        match a.breaker {
            BreakerState::Closed { .. } | BreakerState::HalfOpen { probe: None, .. } => None,
            BreakerState::HalfOpen { probe: Some(_), .. } => Some(RefusalReason::BreakerOpen),
            BreakerState::Open { until_ms, .. } if now_ms < until_ms => {
                Some(RefusalReason::BreakerOpen)
            }
            BreakerState::Open { cooldown_ms, .. } => {
                a.breaker = BreakerState::HalfOpen {
                    cooldown_ms,
                    probe: None,
                };
                self.effects
                    .push(Effect::heart(EventKind::BreakerHalfOpened { agent: a.id }));
                None
            }
        }
    }

    /// Starts the first queued run that may start, cancelling those that may not any more: the
    /// breaker is open or has another probe, a timed pause refuses the source, the day's cap is
    /// used up.
    fn start_next(&mut self, agent: usize) {
        let now_ms = self.now_ms;
        loop {
            let a = &self.agents[agent];
            if a.status != AgentStatus::Active || a.running.is_some() || a.in_error {
                return;
            }
            // A clock read before the end went back since: the cooldown is over.
            if a.cooldown.is_some_and(|(from, until)| from <= now_ms && now_ms < until) {
                return;
            }
            let Some(&next) = self.start_order(agent).first() else {
                return;
            };
            let breaker_blocks = match a.breaker {
                BreakerState::Closed { .. } => false,
                BreakerState::Open { .. } => true,
                BreakerState::HalfOpen { probe, .. } => probe.is_some_and(|p| p != next),
            };
            let refusal = if breaker_blocks {
                Some("breaker_open")
            } else if a.pause_refuses(self.runs[&next].source, now_ms) {
                Some("agent paused")
            } else if a.cap_reached(now_ms, 0) {
                Some("daily_cap")
            } else {
                None
            };
            if let Some(detail) = refusal {
                self.end(next, RunStatus::Cancelled, Some(detail));
                continue;
            }
            let day = a.cap_day(now_ms);
            let a = &mut self.agents[agent];
            a.queue.retain(|id| *id != next);
            a.running = Some(next);
            a.cooldown = None;
            if a.counted_day == Some(day) {
                a.counted_starts += 1;
            } else {
                a.counted_day = Some(day);
                a.counted_starts = 1;
            }
            self.runs.get_mut(&next).unwrap().status = RunStatus::Running;
            self.effects.push(Effect::Started(next, day));
            return;
        }
    }

    /// Ends a run. A probe that ends here proves nothing unless `finish` says otherwise: the
    /// breaker stays half-open and awaits the next.
    fn end(&mut self, run: RunId, status: RunStatus, detail: Option<&str>) {
        let r = self.runs.get_mut(&run).unwrap();
        r.status = status;
        r.detail = detail.map(str::to_string);
        let a = &mut self.agents[r.agent];
        if a.running == Some(run) {
            a.running = None;
            let restart = status == RunStatus::Failed && detail == Some(CONTROL_PLANE_RESTART);
            a.restart_ends = if restart { a.restart_ends + 1 } else { 0 };
            let cooldown_ms = a.setup.run_cooldown_ms;
            a.cooldown = (cooldown_ms > 0).then(|| (self.now_ms, self.now_ms + cooldown_ms));
        } else {
            a.queue.retain(|id| *id != run);
        }
        if let BreakerState::HalfOpen { probe, .. } = &mut a.breaker {
            if *probe == Some(run) {
                *probe = None;
            }
        }
        self.effects.push(Effect::Ended(run, status));
    }

    /// The expected answer to a wakeup, and whether it is a replay.
    fn wake(&mut self, agent: usize, request: &WakeupRequest) -> (WakeupRecord, bool) {
        let now_ms = self.now_ms;
        if let Some(key) = &request.idempotency_key {
            if let Some(original) = self.agents[agent].keys.get(key) {
                if now_ms.max(self.agents[agent].keys_clock_ms)
                    < original.at_ms + IDEMPOTENCY_TTL_MS
                {
                    return (original.clone(), true);
                }
            }
        }
        let wakeup = WakeupId(self.next_wakeup);
        self.next_wakeup += 1;
        let a = &self.agents[agent];
        let refusal = match a.status {
            AgentStatus::Terminated => Some(RefusalReason::Terminated),
            _ if a.in_error => Some(RefusalReason::AgentError),
            AgentStatus::Paused => Some(RefusalReason::Paused),
            AgentStatus::Active if a.pause_refuses(request.source, now_ms) => {
                Some(RefusalReason::Paused)
            }
            AgentStatus::Active if !a.sources.contains(&request.source) => {
                Some(RefusalReason::DisabledSource)
            }
            AgentStatus::Active => self.breaker_refusal(agent),
        };
        let coalesce_onto = self.queued_with_key(agent, &request.task_key);
        let a = &self.agents[agent];
        let outcome = match (refusal, coalesce_onto) {
            (Some(refusal), _) => WakeupOutcome::Refused { refusal },
            (None, Some(run)) => {
                let r = self.runs.get_mut(&run).unwrap();
                r.coalesced_count += 1;
                r.class = r.class.min(Class::of(request.source));
                let coalesced_count = r.coalesced_count;
                self.take_as_probe(agent, run);
                WakeupOutcome::Coalesced {
                    run,
                    coalesced_count,
                }
            }
            (None, None) if a.cap_reached(now_ms, a.queue.len()) => WakeupOutcome::Refused {
                refusal: RefusalReason::DailyCap,
            },
            (None, None) if a.queue.len() >= a.queued_runs_max => WakeupOutcome::Refused {
                refusal: RefusalReason::QueueFull,
            },
            (None, None) => {
                let run = self.new_run(
                    agent,
                    ModelRun {
                        agent,
                        source: request.source,
                        class: Class::of(request.source),
                        task_key: request.task_key.clone(),
                        coalesced_count: 0,
                        retry_of: None,
                        status: RunStatus::Queued,
                        detail: None,
                    },
                );
                self.take_as_probe(agent, run);
                WakeupOutcome::Queued { run }
            }
        };
        self.start_next(agent);
        let record = WakeupRecord {
            wakeup,
            agent: self.agents[agent].id,
            source: request.source,
            reason: request.reason.clone(),
            task_key: request.task_key.clone(),
            idempotency_key: request.idempotency_key.clone(),
            at_ms: now_ms,
            outcome,
        };
        if let Some(key) = &request.idempotency_key {
            let a = &mut self.agents[agent];
            a.keys.insert(key.clone(), record.clone());
            a.keys_clock_ms = a.keys_clock_ms.max(now_ms);
        }
        (record, false)
    }

    /// The executor reports the end of the running run; the breaker counts it (a success
    /// resets both counters, LLM failures and timeouts count apart from tool failures; a probe
    /// that succeeds closes the breaker, one that fails opens it for twice the cooldown, capped).
    fn finish(&mut self, run: RunId, end: &RunEnd) -> Result<(), Refusal> {
        let agent = self.runs[&run].agent;
        if self.agents[agent].running != Some(run) {
            return Err(Refusal::RunNotRunning(run));
        }
        let breaker = self.agents[agent].breaker;
        let was_probe =
            matches!(breaker, BreakerState::HalfOpen { probe: Some(p), .. } if p == run);
        self.end(run, end.status, Some(&end.detail));
        let failure = match (end.status, end.cause) {
            (RunStatus::TimedOut, _) => Some(FailureCause::Llm),
            (RunStatus::Failed, cause) => cause,
            _ => None,
        };
        let succeeded = end.status == RunStatus::Succeeded;
        let a = &mut self.agents[agent];
        let (id, setup) = (a.id, &a.setup);
        let closed = |llm_failures, tool_failures| BreakerState::Closed {
            llm_failures,
            tool_failures,
        };
        let mut open_for = None;
        match (breaker, failure) {
            (BreakerState::Closed { .. }, _) if succeeded => a.breaker = closed(0, 0),
            (
                BreakerState::Closed {
                    llm_failures,
                    tool_failures,
                },
                Some(cause),
            ) => {
                let (llm, tool) = match cause {
                    FailureCause::Llm => (llm_failures + 1, tool_failures),
                    FailureCause::Tool => (llm_failures, tool_failures + 1),
                };
                a.breaker = closed(llm, tool);
                let in_a_row = match cause {
                    FailureCause::Llm => llm,
                    FailureCause::Tool => tool,
                };
                if in_a_row >= setup.failures_to_open {
                    open_for = Some((cause, setup.cooldown_ms));
                }
            }
            (BreakerState::HalfOpen { .. }, _) if was_probe && succeeded => {
                a.breaker = closed(0, 0);
                a.openings_at_cap = 0;
                self.effects
                    .push(Effect::heart(EventKind::BreakerClosed { agent: id }));
            }
            (BreakerState::HalfOpen { cooldown_ms, .. }, Some(cause)) if was_probe => {
                let doubled = cooldown_ms.saturating_mul(2).min(setup.cooldown_ms_max);
                open_for = Some((cause, doubled));
            }
            _ => {}
        }
        if let Some((trigger, cooldown_ms)) = open_for {
            let until_ms = self.now_ms + cooldown_ms;
            let a = &mut self.agents[agent];
            a.breaker = BreakerState::Open {
                until_ms,
                cooldown_ms,
            };
            if cooldown_ms >= a.setup.cooldown_ms_max {
                a.openings_at_cap += 1;
            }
            self.effects.push(Effect::heart(EventKind::BreakerOpened {
                agent: id,
                trigger,
                until_ms,
                cooldown_ms,
            }));
            for queued in self.start_order(agent) {
                self.end(queued, RunStatus::Cancelled, Some("breaker_open"));
            }
            self.enter_error_if_due(agent);
        }
        self.start_next(agent);
        Ok(())
    }

    /// A count at its limit puts the agent in `error` (restarts first), and its queued runs
    /// are cancelled; entering sets both counts back to 0. Returns whether it entered.
    fn enter_error_if_due(&mut self, agent: usize) -> bool {
        use vigil::engine::agent_error::AgentErrorReason;
        let a = &mut self.agents[agent];
        if a.in_error {
            return false;
        }
        let (reason, count) = if a.restart_ends >= RESTART_ENDS_TO_ERROR {
            (AgentErrorReason::RestartLoop, a.restart_ends)
        } else if a.openings_at_cap >= OPENINGS_AT_CAP_TO_ERROR {
            (AgentErrorReason::BreakerAtCap, a.openings_at_cap)
        } else {
            return false;
        };
        a.in_error = true;
        a.restart_ends = 0;
        a.openings_at_cap = 0;
        self.effects.push(Effect::heart(EventKind::AgentErrored {
            agent: a.id,
            reason,
            count,
        }));
        for queued in self.start_order(agent) {
            self.end(queued, RunStatus::Cancelled, Some("agent_error"));
        }
        true
    }

    /// An operator resets the error state; an agent not in error is left as it is.
    fn reset_error(&mut self, agent: usize) {
        let a = &mut self.agents[agent];
        if a.in_error {
            a.in_error = false;
            self.effects
                .push(Effect::heart(EventKind::AgentErrorReset { agent: a.id }));
            self.start_next(agent);
        }
    }

    fn cancel(&mut self, run: RunId) -> Result<(), Refusal> {
        let Some(r) = self.runs.get(&run) else {
            return Err(Refusal::UnknownRun(run));
        };
        if r.status.is_terminal() {
            return Err(Refusal::RunAlreadyFinished(run, r.status));
        }
        let agent = r.agent;
        self.end(run, RunStatus::Cancelled, Some("cancelled by an operator"));
        self.start_next(agent);
        Ok(())
    }

    /// Pause until resumed (`to == Paused`) or terminate: the running run, then the queued ones
    /// in start order, are cancelled. A timed pause's instant is left as it was.
    /// A new daily cap: refused for a terminated agent; otherwise in force from now, the day's
    /// count kept (docs/api.md, "Changing an agent").
    fn set_cap(&mut self, agent: usize, cap: Option<u32>) -> Result<(), Refusal> {
        let a = &mut self.agents[agent];
        if a.status == AgentStatus::Terminated {
            return Err(Refusal::AgentTerminated(a.id));
        }
        a.setup.daily_cap = cap;
        Ok(())
    }

    fn stop(&mut self, agent: usize, to: AgentStatus) -> Result<(), Refusal> {
        let a = &self.agents[agent];
        let id = a.id;
        match (a.status, to) {
            (AgentStatus::Terminated, AgentStatus::Terminated) => return Ok(()),
            (AgentStatus::Terminated, _) => return Err(Refusal::AgentTerminated(id)),
            (AgentStatus::Paused, AgentStatus::Paused) => return Ok(()),
            _ => {}
        }
        let doomed: Vec<RunId> = a
            .running
            .into_iter()
            .chain(self.start_order(agent))
            .collect();
        let detail = if to == AgentStatus::Paused {
            self.agents[agent].paused_by = Some(PausedBy::Operator);
            self.effects.push(Effect::heart(EventKind::AgentPaused {
                agent: id,
                until_ms: None,
                by: PausedBy::Operator,
            }));
            "agent paused"
        } else {
            "agent terminated"
        };
        self.agents[agent].status = to;
        for run in doomed {
            self.end(run, RunStatus::Cancelled, Some(detail));
        }
        Ok(())
    }

    /// A timed pause until `until_ms`, by the operator or the agent. It changes nothing on an
    /// agent paused until resumed, nor while a pause in force ends no earlier; otherwise it
    /// replaces any earlier one and cancels the running run and the queued runs it refuses.
    fn pause_until(&mut self, agent: usize, until_ms: u64, by: PausedBy) -> Result<(), Refusal> {
        let now_ms = self.now_ms;
        let a = &mut self.agents[agent];
        match a.status {
            AgentStatus::Terminated => return Err(Refusal::AgentTerminated(a.id)),
            AgentStatus::Paused => return Ok(()),
            AgentStatus::Active => {}
        }
        if a.paused_until_ms
            .is_some_and(|current| now_ms < current && until_ms <= current)
        {
            return Ok(());
        }
        a.paused_until_ms = Some(until_ms);
        a.paused_by = Some(by);
        self.effects.push(Effect::heart(EventKind::AgentPaused {
            agent: a.id,
            until_ms: Some(until_ms),
            by,
        }));
        let a = &self.agents[agent];
        let doomed: Vec<RunId> = a
            .running
            .into_iter()
            .chain(
                self.start_order(agent)
                    .into_iter()
                    .filter(|id| a.pause_refuses(self.runs[id].source, now_ms)),
            )
            .collect();
        for run in doomed {
            self.end(run, RunStatus::Cancelled, Some("agent paused"));
        }
        self.start_next(agent);
        Ok(())
    }

    /// Ends a pause until resumed, or a timed pause in force; otherwise changes nothing.
    fn resume(&mut self, agent: usize) -> Result<(), Refusal> {
        let now_ms = self.now_ms;
        let a = &mut self.agents[agent];
        let timed = a.paused_until_ms.is_some_and(|until| now_ms < until);
        match a.status {
            AgentStatus::Terminated => Err(Refusal::AgentTerminated(a.id)),
            AgentStatus::Active if !timed => Ok(()),
            AgentStatus::Active | AgentStatus::Paused => {
                a.status = AgentStatus::Active;
                a.paused_until_ms = None;
                a.paused_by = None;
                self.effects
                    .push(Effect::heart(EventKind::AgentResumed { agent: a.id }));
                self.start_next(agent);
                Ok(())
            }
        }
    }

    /// An operator closes an open or half-open breaker; a closed one is left as it is.
    fn reset_breaker(&mut self, agent: usize) {
        let a = &mut self.agents[agent];
        if !matches!(a.breaker, BreakerState::Closed { .. }) {
            a.breaker = BreakerState::Closed {
                llm_failures: 0,
                tool_failures: 0,
            };
            a.openings_at_cap = 0;
            self.effects
                .push(Effect::heart(EventKind::BreakerReset { agent: a.id }));
            self.start_next(agent);
        }
    }

    /// After a crash: each running run fails with `control_plane_restart` (no breaker cause:
    /// a probe cut off proves nothing) and, unless it is itself a retry, is queued once more
    /// (joining a queued run of its task key if there is one); then each agent starts its next
    /// run.
    /// `FireDueTimers` (the model's agents have no timer or idle chamber): every agent whose
    /// queue waits only for an elapsed cooldown starts, in id order.
    fn fire_due(&mut self) {
        for agent in 0..self.agents.len() {
            let a = &self.agents[agent];
            let due = a
                .cooldown
                .is_some_and(|(from, until)| self.now_ms < from || until <= self.now_ms);
            if due
                && a.running.is_none()
                && !a.queue.is_empty()
                && a.status == AgentStatus::Active
                && !a.in_error
            {
                self.start_next(agent);
            }
        }
    }

    fn recover(&mut self) {
        for agent in 0..self.agents.len() {
            if let Some(run) = self.agents[agent].running {
                self.end(run, RunStatus::Failed, Some(CONTROL_PLANE_RESTART));
                let old = self.runs[&run].clone();
                // A restart loop puts the agent in error instead of running it again.
                let errored = self.enter_error_if_due(agent);
                if old.retry_of.is_none() && !errored {
                    let requeued = match self.queued_with_key(agent, &old.task_key) {
                        Some(onto) => {
                            let r = self.runs.get_mut(&onto).unwrap();
                            r.coalesced_count += 1;
                            r.class = r.class.min(old.class);
                            onto
                        }
                        None => self.new_run(
                            agent,
                            ModelRun {
                                coalesced_count: 0,
                                retry_of: Some(run),
                                status: RunStatus::Queued,
                                detail: None,
                                ..old
                            },
                        ),
                    };
                    self.take_as_probe(agent, requeued);
                }
            }
            self.start_next(agent);
        }
    }
}

fn sources(setup: &AgentSetup) -> Vec<WakeupSource> {
    WakeupSource::all()
        .into_iter()
        .filter(|s| Some(*s) != setup.disabled_source)
        .collect()
}

// ---- properties of the event log alone ----

/// Invariants 1, 5 and 11, checked event by event from the log.
#[derive(Debug, Default)]
struct LogCheck {
    last_seq: u64,
    running: BTreeMap<AgentId, RunId>,
    queued: BTreeSet<RunId>,
    finished: BTreeSet<RunId>,
}

impl LogCheck {
    fn check(&mut self, event: &Event) {
        assert_eq!(event.seq, self.last_seq + 1, "seqs are gap-free from 1");
        self.last_seq = event.seq;
        match &event.kind {
            EventKind::WakeupQueued { run, .. }
            | EventKind::RunRequeued {
                run,
                coalesced: false,
                ..
            } => assert!(self.queued.insert(*run), "run {run} queued twice"),
            EventKind::WakeupCoalesced { run, .. }
            | EventKind::RunRequeued {
                run,
                coalesced: true,
                ..
            } => assert!(
                self.queued.contains(run),
                "joined run {run}, which is not queued"
            ),
            EventKind::RunStarted { run, agent, .. } => {
                assert!(
                    self.queued.remove(run),
                    "run {run} started but was not queued"
                );
                if let Some(other) = self.running.insert(*agent, *run) {
                    panic!("agent {agent} started run {run} while run {other} runs");
                }
            }
            EventKind::RunFinished {
                run, agent, status, ..
            } => {
                assert!(status.is_terminal(), "run {run} finished as {status:?}");
                assert!(self.finished.insert(*run), "run {run} finished twice");
                if self.running.get(agent) == Some(run) {
                    self.running.remove(agent);
                } else {
                    assert!(
                        self.queued.remove(run),
                        "run {run} finished but never lived"
                    );
                }
            }
            _ => {}
        }
    }
}

// ---- driving the engine ----

/// The engine with its whole event log, as a node with a store would hold them.
struct Node {
    engine: Engine,
    log: Vec<Event>,
    log_check: LogCheck,
    /// The latest snapshot, if any: the engine's image at its log position.
    snapshot: Option<Image>,
}

impl Node {
    fn execute(&mut self, command: &Command, now_ms: u64) -> Result<Decision, Refusal> {
        let decision = self.engine.decide(command, now_ms)?;
        for event in &decision.events {
            self.engine.apply(event);
            self.log_check.check(event);
        }
        self.log.extend(decision.events.iter().cloned());
        snapshots_round_trip(&self.engine);
        Ok(decision)
    }

    fn crash(&mut self) {
        let mut rebuilt = Engine::new();
        self.log.iter().for_each(|e| rebuilt.apply(e));
        assert_eq!(
            rebuilt, self.engine,
            "replaying the log rebuilds the same engine"
        );
        if let Some(image) = self.snapshot.clone() {
            let after = image.seq as usize;
            let mut restored = Engine::from_image(image).expect("an engine's image restores");
            self.log[after..].iter().for_each(|e| restored.apply(e));
            assert_eq!(
                restored, self.engine,
                "the snapshot and the log after it rebuild the same engine"
            );
            self.engine = restored;
        } else {
            self.engine = rebuilt;
        }
    }

    /// Takes a snapshot; the engine goes on changing, the image must not.
    fn snapshot(&mut self) {
        self.snapshot = Some(self.engine.image());
    }
}

/// Every agent's state and every tenant come back exactly from their snapshot records, the
/// agents encoded in order as a snapshot writes them (their specs in its spec table) and
/// decoded with that table as it is read.
fn snapshots_round_trip(engine: &Engine) {
    use vigil::store::record::{
        decode_spec, decode_tenant, encode_tenant, AgentDecoder, SnapshotSpecs, FORMAT_VERSION,
    };
    let mut specs = SnapshotSpecs::default();
    let mut table = Vec::new();
    let records: Vec<Vec<u8>> = engine
        .agent_states()
        .map(|state| {
            let (bytes, new_spec) = specs.encode_agent(state);
            if let Some((_, spec)) = new_spec {
                let spec = decode_spec(FORMAT_VERSION, &spec).expect("a spec record decodes");
                table.push(std::sync::Arc::new(spec));
            }
            bytes
        })
        .collect();
    let mut decoder = AgentDecoder::new(&table);
    for (state, bytes) in engine.agent_states().zip(&records) {
        let back = decoder
            .decode(FORMAT_VERSION, bytes)
            .expect("a snapshot record decodes");
        assert!(
            back == *state,
            "agent {} does not round-trip its snapshot record: {}",
            state.agent().id,
            String::from_utf8_lossy(bytes)
        );
    }
    for tenant in engine.tenants() {
        let back = decode_tenant(FORMAT_VERSION, &encode_tenant(tenant));
        assert_eq!(
            back.as_ref(),
            Ok(tenant),
            "a tenant round-trips its snapshot record"
        );
    }
}

fn setup(setups: &[AgentSetup]) -> Node {
    let mut node = Node {
        engine: Engine::new(),
        log: Vec::new(),
        log_check: LogCheck::default(),
        snapshot: None,
    };
    let tenant = Command::EnsureTenant {
        tenant: TENANT.into(),
        operator_token_hash: TokenHash::of("operator"),
    };
    node.execute(&tenant, START_MS).unwrap();
    for (i, agent) in setups.iter().enumerate() {
        let name = format!("agent-{i}");
        let mut spec = AgentSpec::with_interval(&name, None);
        spec.limits.queued_runs_max = agent.queued_runs_max;
        spec.limits.daily_cap = agent.daily_cap;
        spec.heartbeat.sources = sources(agent);
        spec.heartbeat.while_paused = agent.while_paused;
        spec.time_zone = agent.zone.name.into();
        spec.breaker.failures_to_open = agent.failures_to_open;
        spec.breaker.cooldown_ms = agent.cooldown_ms;
        spec.limits.cooldown_ms = agent.run_cooldown_ms;
        spec.breaker.cooldown_ms_max = agent.cooldown_ms_max;
        let create = Command::CreateAgent {
            tenant: TENANT.into(),
            spec,
            token_hash: TokenHash::of(&name),
        };
        let decision = node.execute(&create, START_MS).unwrap();
        assert!(matches!(
            decision.events[..],
            [Event { kind: EventKind::AgentCreated { agent, .. }, .. }] if agent == AgentId(i as u64 + 1)
        ));
    }
    node
}

/// What a step did, as its events tell it; compared in log order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Effect {
    /// A run started, counted against this local day.
    Started(RunId, i64),
    Ended(RunId, RunStatus),
    /// A pause or breaker event.
    Heart(Box<EventKind>),
}

impl Effect {
    fn heart(kind: EventKind) -> Effect {
        Effect::Heart(Box::new(kind))
    }
}

fn effects(decision: &Decision) -> Vec<Effect> {
    decision
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::RunStarted { run, day, .. } => Some(Effect::Started(*run, i64::from(day.0))),
            EventKind::RunFinished { run, status, .. } => Some(Effect::Ended(*run, *status)),
            EventKind::AgentPaused { .. }
            | EventKind::AgentResumed { .. }
            | EventKind::BreakerOpened { .. }
            | EventKind::BreakerHalfOpened { .. }
            | EventKind::BreakerClosed { .. }
            | EventKind::BreakerReset { .. }
            | EventKind::AgentErrored { .. }
            | EventKind::AgentErrorReset { .. } => Some(Effect::heart(event.kind.clone())),
            _ => None,
        })
        .collect()
}

/// What the wakeup events of a decision say became of the wakeup.
fn wakeup_outcomes(decision: &Decision) -> Vec<WakeupOutcome> {
    decision
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::WakeupQueued { run, .. } => Some(WakeupOutcome::Queued { run }),
            EventKind::WakeupCoalesced {
                run,
                coalesced_count,
                ..
            } => Some(WakeupOutcome::Coalesced {
                run,
                coalesced_count,
            }),
            EventKind::WakeupRefused { refusal, .. } => Some(WakeupOutcome::Refused { refusal }),
            _ => None,
        })
        .collect()
}

/// The engine's state must be the model's, agent by agent and run by run.
fn assert_same_state(engine: &Engine, model: &Model) {
    for (i, a) in model.agents.iter().enumerate() {
        let state = engine.agent_state(a.id).expect("agent exists");
        let agent = state.agent();
        assert_eq!(agent.status, a.status, "status of agent {}", a.id);
        assert_eq!(
            agent.paused_until_ms, a.paused_until_ms,
            "paused_until_ms of agent {}",
            a.id
        );
        assert_eq!(agent.paused_by, a.paused_by, "paused_by of agent {}", a.id);
        let day_count = DayCount {
            day: a.counted_day.map(|d| LocalDay(d as i32)),
            started: a.counted_starts,
        };
        assert_eq!(agent.day_count, day_count, "day count of agent {}", a.id);
        assert_eq!(agent.breaker, a.breaker, "breaker of agent {}", a.id);
        assert_eq!(agent.error.is_some(), a.in_error, "error state of agent {}", a.id);
        assert_eq!(
            (agent.error_counts.restart_ends, agent.error_counts.openings_at_cap),
            (a.restart_ends, a.openings_at_cap),
            "error counts of agent {}",
            a.id
        );
        assert_eq!(
            agent.cooldown.map(|c| (c.from_ms, c.until_ms)),
            a.cooldown,
            "cooldown of agent {}",
            a.id
        );
        assert_eq!(
            state.active_run(),
            a.running,
            "running run of agent {}",
            a.id
        );
        assert_eq!(
            state.queued_runs().collect::<Vec<_>>(),
            model.start_order(i),
            "queue of agent {} in start order",
            a.id
        );
        let engine_runs: Vec<RunId> = state.runs().map(|r| r.id).collect();
        let model_runs: Vec<RunId> = model
            .runs
            .iter()
            .filter(|(_, r)| r.agent == i)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(engine_runs, model_runs, "runs of agent {}", a.id);
    }
    for (id, r) in &model.runs {
        let run = engine.run(*id).expect("run held");
        assert_eq!(run.status, r.status, "status of run {id}");
        assert_eq!(run.source, r.source, "source of run {id}");
        assert_eq!(run.priority, r.class.priority(), "priority of run {id}");
        assert_eq!(run.task_key, r.task_key, "task key of run {id}");
        assert_eq!(
            run.coalesced_count, r.coalesced_count,
            "coalesced count of run {id}"
        );
        assert_eq!(run.retry_of, r.retry_of, "retry_of of run {id}");
        if let Some(detail) = &r.detail {
            assert_eq!(&run.detail, detail, "detail of run {id}");
        }
    }
}

/// Runs `ops` through the engine and the model, comparing after each; returns the event log.
fn check_sequence(setups: &[AgentSetup], ops: &[Op]) -> Vec<Event> {
    let mut node = setup(setups);
    let mut model = Model::new(setups, START_MS);
    let agents = setups.len();
    for (step, op) in ops.iter().enumerate() {
        model.effects.clear();
        let now_ms = model.now_ms;
        let id = |agent: &usize| model.agents[agent % agents].id;
        let decision = match op {
            Op::Wake {
                agent,
                source,
                task_key,
                idempotency_key,
            } => {
                let agent = agent % agents;
                let mut request = WakeupRequest::new(*source, format!("step {step}"));
                request.task_key = task_key.map(str::to_string);
                request.idempotency_key = idempotency_key.map(str::to_string);
                let (record, replayed) = model.wake(agent, &request);
                let command = Command::Wake {
                    agent: model.agents[agent].id,
                    request,
                };
                let decision = node
                    .execute(&command, now_ms)
                    .expect("a wakeup is answered");
                assert_eq!(decision.replayed, replayed, "step {step}: replayed");
                assert_eq!(
                    decision.wakeup.as_ref(),
                    Some(&record),
                    "step {step}: the answer"
                );
                if replayed {
                    assert!(
                        decision.events.is_empty(),
                        "step {step}: a replay records nothing"
                    );
                } else {
                    assert_eq!(
                        wakeup_outcomes(&decision),
                        [record.outcome],
                        "step {step}: recorded"
                    );
                }
                Some(decision)
            }
            Op::Finish { agent, ending } => {
                let agent = agent % agents;
                let latest = model.runs.iter().rev().find(|(_, r)| r.agent == agent);
                let target = model.agents[agent].running.or(latest.map(|(id, _)| *id));
                target.map(|run| {
                    let end = ending.run_end(format!("ended at step {step}"));
                    let expected = model.finish(run, &end);
                    let got = node.execute(&Command::FinishRun { run, end }, now_ms);
                    compare(step, got, expected)
                })
            }
            Op::Cancel { pick } => {
                let run = match model.runs.len() {
                    0 => RunId(1_000),
                    n => *model.runs.keys().nth(pick % n).unwrap(),
                };
                let expected = model.cancel(run);
                let got = node.execute(&Command::CancelRun { run }, now_ms);
                Some(compare(step, got, expected))
            }
            Op::Pause { agent, minutes } => {
                let command = Command::PauseAgent {
                    agent: id(agent),
                    minutes: *minutes,
                };
                let agent = agent % agents;
                let expected = match *minutes {
                    None => model.stop(agent, AgentStatus::Paused),
                    Some(m) if (1..=OPERATOR_PAUSE_MINUTES_MAX).contains(&m) => {
                        model.pause_until(agent, now_ms + m * MINUTE_MS, PausedBy::Operator)
                    }
                    Some(m) => Err(Refusal::InvalidField(FieldError::new(
                        "minutes",
                        format!(
                            "minutes must be between 1 and {OPERATOR_PAUSE_MINUTES_MAX} (got {m}); leave it out to pause until resumed"
                        ),
                    ))),
                };
                Some(compare(step, node.execute(&command, now_ms), expected))
            }
            Op::PauseHeartbeats { agent, minutes } => {
                let command = Command::PauseHeartbeats {
                    agent: id(agent),
                    minutes: *minutes,
                };
                let minutes = minutes
                    .unwrap_or(HEARTBEAT_PAUSE_MINUTES_DEFAULT)
                    .clamp(HEARTBEAT_PAUSE_MINUTES_MIN, HEARTBEAT_PAUSE_MINUTES_MAX);
                let expected = model.pause_until(
                    agent % agents,
                    now_ms + minutes * MINUTE_MS,
                    PausedBy::Agent,
                );
                Some(compare(step, node.execute(&command, now_ms), expected))
            }
            Op::Resume { agent } => {
                let command = Command::ResumeAgent { agent: id(agent) };
                let expected = model.resume(agent % agents);
                Some(compare(step, node.execute(&command, now_ms), expected))
            }
            Op::Terminate { agent } => {
                let command = Command::TerminateAgent { agent: id(agent) };
                let expected = model.stop(agent % agents, AgentStatus::Terminated);
                Some(compare(step, node.execute(&command, now_ms), expected))
            }
            Op::ResetBreaker { agent } => {
                let command = Command::ResetBreaker { agent: id(agent) };
                model.reset_breaker(agent % agents);
                Some(compare(step, node.execute(&command, now_ms), Ok(())))
            }
            Op::ResetError { agent } => {
                let command = Command::ResetAgentError { agent: id(agent) };
                model.reset_error(agent % agents);
                Some(compare(step, node.execute(&command, now_ms), Ok(())))
            }
            Op::SetCap { agent, cap } => {
                let patch = serde_json::json!({"limits": {"daily_cap": cap}});
                let command = Command::UpdateAgent {
                    agent: id(agent),
                    change: vigil::engine::agent_update::SpecChange::Merge(patch),
                };
                let expected = model.set_cap(agent % agents, *cap);
                Some(compare(step, node.execute(&command, now_ms), expected))
            }
            Op::Advance { delta_ms } => {
                model.now_ms = now_ms.saturating_add_signed(*delta_ms);
                None
            }
            Op::Midnight {
                agent,
                forward,
                offset_ms,
            } => {
                let zone = model.agents[agent % agents].setup.zone;
                let day = zone.day(now_ms) + i64::from(*forward);
                model.now_ms = zone.midnight_ms(day).saturating_add_signed(*offset_ms);
                None
            }
            Op::FireDue => {
                model.fire_due();
                Some(compare(step, node.execute(&Command::FireDueTimers, now_ms), Ok(())))
            }
            Op::Snapshot => {
                node.snapshot();
                None
            }
            Op::Crash => {
                node.crash();
                model.recover();
                let got = node.execute(&Command::RecoverRuns, now_ms);
                Some(compare(step, got, Ok(())))
            }
        };
        if let Some(decision) = decision {
            assert_eq!(
                effects(&decision),
                model.effects,
                "step {step}: runs started and ended, pause and breaker events"
            );
        }
        assert_same_state(&node.engine, &model);
        assert_eq!(
            node.engine.next_deadline_ms(model.now_ms),
            deadline_by_scan(&node.engine, model.now_ms),
            "step {step}: the due index's next deadline is every agent's earliest"
        );
    }
    node.log
}

/// The earliest deadline of any agent, found by looking at every one (what the engine's due
/// index answers without a scan).
fn deadline_by_scan(engine: &Engine, now_ms: u64) -> Option<u64> {
    engine
        .agent_states()
        .flat_map(|s| {
            [
                s.agent().next_fire_at_ms,
                s.agent().next_idle_at_ms,
                s.coordinator.cooldown_deadline_ms(now_ms),
            ]
        })
        .flatten()
        .min()
}

/// The engine's answer must be the model's; an accepted command yields its decision.
fn compare(step: usize, got: Result<Decision, Refusal>, expected: Result<(), Refusal>) -> Decision {
    match (got, expected) {
        (Ok(decision), Ok(())) => decision,
        (Err(got), Err(expected)) => {
            assert_eq!(got, expected, "step {step}: the refusal");
            Decision {
                events: Vec::new(),
                wakeup: None,
                replayed: false,
            }
        }
        (got, expected) => panic!("step {step}: engine answered {got:?}, the model {expected:?}"),
    }
}

/// 256 cases unless `PROPTEST_CASES` asks for another number.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn engine_agrees_with_the_model((setups, ops) in sequence()) {
        check_sequence(&setups, &ops);
    }
}

// ---- the generator reaches what it is meant to test ----

/// How often generated sequences reach each Heart mechanism, counted from their event logs.
#[derive(Debug, Default)]
struct Reach {
    refused_while_timed_pause: usize,
    refused_daily_cap: usize,
    refused_breaker_open: usize,
    cancelled_at_start_daily_cap: usize,
    cancelled_by_timed_pause: usize,
    /// Starts counted against a later day than the wall clock's, after it went back.
    started_on_a_later_day: usize,
    /// Starts whose local day is not the UTC day.
    started_off_the_utc_day: usize,
    breaker_opened: BTreeMap<&'static str, usize>,
    /// A probe failed: the breaker opened again from half-open.
    breaker_reopened: usize,
    breaker_half_opened: usize,
    breaker_closed: usize,
    breaker_reset: usize,
    errored: BTreeMap<&'static str, usize>,
    refused_agent_error: usize,
    error_reset: usize,
}

impl Reach {
    fn count(&mut self, setups: &[AgentSetup], log: &[Event]) {
        let mut paused_until_ms: BTreeMap<AgentId, u64> = BTreeMap::new();
        let mut half_open: BTreeSet<AgentId> = BTreeSet::new();
        let zone = |agent: &AgentId| setups[agent.0 as usize - 1].zone;
        for event in log {
            let timed_pause = |agent| {
                paused_until_ms
                    .get(agent)
                    .is_some_and(|until| event.at_ms < *until)
            };
            match &event.kind {
                EventKind::AgentPaused {
                    agent,
                    until_ms: Some(until),
                    ..
                } => {
                    paused_until_ms.insert(*agent, *until);
                }
                EventKind::AgentResumed { agent } => {
                    paused_until_ms.remove(agent);
                }
                EventKind::WakeupRefused { agent, refusal, .. } => match refusal {
                    RefusalReason::Paused if timed_pause(agent) => {
                        self.refused_while_timed_pause += 1
                    }
                    RefusalReason::DailyCap => self.refused_daily_cap += 1,
                    RefusalReason::BreakerOpen => self.refused_breaker_open += 1,
                    RefusalReason::AgentError => self.refused_agent_error += 1,
                    _ => {}
                },
                EventKind::RunFinished { agent, detail, .. } => match detail.as_str() {
                    "daily_cap" => self.cancelled_at_start_daily_cap += 1,
                    "agent paused" if timed_pause(agent) => self.cancelled_by_timed_pause += 1,
                    _ => {}
                },
                EventKind::RunStarted { agent, day, .. } => {
                    let today = zone(agent).day(event.at_ms);
                    self.started_on_a_later_day += usize::from(i64::from(day.0) > today);
                    self.started_off_the_utc_day += usize::from(today != ZONES[0].day(event.at_ms));
                }
                EventKind::BreakerOpened { agent, trigger, .. } => {
                    let trigger = match trigger {
                        FailureCause::Llm => "llm",
                        FailureCause::Tool => "tool",
                    };
                    *self.breaker_opened.entry(trigger).or_default() += 1;
                    self.breaker_reopened += usize::from(half_open.remove(agent));
                }
                EventKind::BreakerHalfOpened { agent } => {
                    half_open.insert(*agent);
                    self.breaker_half_opened += 1;
                }
                EventKind::BreakerClosed { agent } => {
                    half_open.remove(agent);
                    self.breaker_closed += 1;
                }
                EventKind::BreakerReset { agent } => {
                    half_open.remove(agent);
                    self.breaker_reset += 1;
                }
                EventKind::AgentErrored { reason, .. } => {
                    *self.errored.entry(reason.as_str()).or_default() += 1;
                }
                EventKind::AgentErrorReset { .. } => self.error_reset += 1,
                _ => {}
            }
        }
    }
}

/// The property is only as good as the sequences it sees: over a fixed sample, each mechanism
/// of the pause, the daily cap and the breaker must be reached several times.
#[test]
fn generated_sequences_reach_every_heart_mechanism() {
    const SAMPLE: usize = 200;
    const REACHED_MIN: usize = 5;
    let mut runner = TestRunner::deterministic();
    let mut reach = Reach::default();
    for _ in 0..SAMPLE {
        let (setups, ops) = sequence().new_tree(&mut runner).unwrap().current();
        let log = check_sequence(&setups, &ops);
        reach.count(&setups, &log);
    }
    let counts = [
        reach.refused_while_timed_pause,
        reach.refused_daily_cap,
        reach.refused_breaker_open,
        reach.cancelled_at_start_daily_cap,
        reach.cancelled_by_timed_pause,
        reach.started_on_a_later_day,
        reach.started_off_the_utc_day,
        reach.breaker_opened.get("llm").copied().unwrap_or(0),
        reach.breaker_opened.get("tool").copied().unwrap_or(0),
        reach.breaker_reopened,
        reach.breaker_half_opened,
        reach.breaker_closed,
        reach.breaker_reset,
        reach.errored.get("restart_loop").copied().unwrap_or(0),
        reach.errored.get("breaker_at_cap").copied().unwrap_or(0),
        reach.refused_agent_error,
        reach.error_reset,
    ];
    assert!(
        counts.iter().all(|n| *n >= REACHED_MIN),
        "a mechanism is reached fewer than {REACHED_MIN} times in {SAMPLE} sequences: {reach:#?}"
    );
}

// ---- sequences that once found a disagreement ----

/// Within 24 h of its first use a key is honoured even after the clock went back, but once the
/// agent's wall clock has passed the key's first use + 24 h (here: a keyed wakeup at T + 24 h),
/// the key has expired for good, and a backward jump does not revive it (docs/invariants.md,
/// `idempotency_honoured`).
#[test]
fn a_key_expired_by_the_clock_stays_expired_after_it_goes_back() {
    let wake = |idempotency_key| Op::Wake {
        agent: 0,
        source: WakeupSource::Timer,
        task_key: None,
        idempotency_key: Some(idempotency_key),
    };
    check_sequence(
        &[AgentSetup::plain(1)],
        &[
            wake("k1"),
            Op::Advance {
                delta_ms: IDEMPOTENCY_TTL_MS as i64 - 1_000,
            },
            wake("k2"),
            Op::Advance { delta_ms: -2_000 },
            // Still within 24 h of k1's first use on every reading: replayed.
            wake("k1"),
            Op::Advance { delta_ms: 5_000 },
            // A new key recorded at T + 24 h + 2 s: the agent's clock passed k1's expiry.
            wake("k3"),
            Op::Advance { delta_ms: -5_000 },
            // The clock read past k1's expiry once: k1 is new again, though the clock went back.
            wake("k1"),
        ],
    );
}
