//! The six pause scenarios of the Kelpie ADR-010 table, each pinning the one fault it is about
//! (`pause` beside them mixes every case in one seeded world):
//! - `pause_basic`: agents on short timers take `pause_heartbeats` rests; no faults;
//! - `pause_skew`: the same on a node whose wall clock is 5 s off from the start;
//! - `pause_jump_forward`: a 1-minute rest, and 10 s into it the wall clock jumps +60 s, past
//!   `pause_until`: the pause ends at once;
//! - `pause_jump_backward`: a 1-minute rest, and 10 s into it the wall clock jumps −30 s: the
//!   pause holds until the node's clock reaches `pause_until`, 30 s later in true time;
//! - `pause_crash_after_write`: the power is cut within the storage operations of the commit
//!   that records a rest or of the next one (CrashAfterWrite, before or after a sync): a pause
//!   that was acknowledged survives the restart;
//! - `pause_many_agents`: 20 agents rest independently; one's pause never touches another's
//!   timers.
//!
//! Invariant 3 (`no_routine_wakeup_while_paused`) and `pause_ends` judge every one;
//! tests/sim_heart.rs shows each really does what its name says.

use rand::Rng;
use vigil_faults::stream;
use vigil_faults::{Fault, Injection};
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};

const SECOND_MS: u64 = 1_000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
/// Every case but `many_agents`: a short world.
pub const SAFETY_MS: u64 = 20 * MINUTE_MS;
pub const QUIET_MS: u64 = 5 * MINUTE_MS;
/// `many_agents` runs a little longer, for its rests to overlap in many ways.
pub const MANY_SAFETY_MS: u64 = 25 * MINUTE_MS;
/// Timer period of the agents that the pinned faults are about: short, so that slots fall in
/// every window a case cares about.
pub const TIMER_MS: u64 = 10 * SECOND_MS;
/// The pinned rest of the jump and crash cases starts in this window...
pub const REST_FROM_MS: u64 = 5 * MINUTE_MS;
pub const REST_UNTIL_MS: u64 = 12 * MINUTE_MS;
/// ...and the pinned jump strikes this long into it.
pub const JUMP_INTO_REST_MS: u64 = 10 * SECOND_MS;
/// The pinned skew and jumps.
pub const SKEW_MS: i64 = 5_000;
pub const JUMP_FORWARD_MS: i64 = 60_000;
pub const JUMP_BACKWARD_MS: i64 = -30_000;
/// A commit of a few events is about six writes and one sync: the cut falls within the commit
/// that records the rest (the rest is lost and retried) or the one after it (the rest is
/// durable and acknowledged, and must survive).
const CUT_WITHIN_OPS: u64 = 14;
const MANY_AGENTS: usize = 20;

/// Which row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Basic,
    Skew,
    JumpForward,
    JumpBackward,
    CrashAfterWrite,
    ManyAgents,
}

impl Case {
    pub fn name(self) -> &'static str {
        match self {
            Case::Basic => "pause_basic",
            Case::Skew => "pause_skew",
            Case::JumpForward => "pause_jump_forward",
            Case::JumpBackward => "pause_jump_backward",
            Case::CrashAfterWrite => "pause_crash_after_write",
            Case::ManyAgents => "pause_many_agents",
        }
    }

    pub fn safety_ms(self) -> u64 {
        match self {
            Case::ManyAgents => MANY_SAFETY_MS,
            _ => SAFETY_MS,
        }
    }
}

fn agent(name: &str, interval_ms: u64) -> Step {
    Step {
        at_ms: SECOND_MS,
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": name,
                "heartbeat": { "interval_ms": interval_ms },
                "adapter": { "type": "scripted", "steps": [
                    { "duration_ms": 2_000, "outcome": "succeeded" },
                ]},
            }),
        },
    }
}

fn rest(at_ms: u64, name: &str, minutes: Option<u64>) -> Step {
    Step {
        at_ms,
        action: Action::PauseHeartbeats {
            agent: name.into(),
            minutes,
        },
    }
}

/// Runs `case` for `seed`, recording into `recorder`.
pub async fn run(case: Case, seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, case.name());
    let safety_ms = case.safety_ms();
    let mut steps = Vec::new();
    let mut pinned = Vec::new();
    // The agent the pinned fault is about rests once, at a drawn instant; a second agent on the
    // same timer never rests and shows the timer itself keeps going.
    let rest_at_ms = rng.gen_range(REST_FROM_MS..REST_UNTIL_MS);
    let describe;
    match case {
        Case::Basic | Case::Skew => {
            for i in 0..3 {
                let name = format!("agent-{i}");
                steps.push(agent(&name, rng.gen_range(TIMER_MS..2 * TIMER_MS)));
                for _ in 0..rng.gen_range(1..=3) {
                    let minutes = [None, Some(1), Some(3), Some(5)][rng.gen_range(0..4)];
                    steps.push(rest(
                        rng.gen_range(MINUTE_MS..safety_ms - MINUTE_MS),
                        &name,
                        minutes,
                    ));
                }
            }
            if case == Case::Skew {
                // The node's wall clock is 5 s off (either way) from the start of the run.
                let skew_ms = if rng.gen_bool(0.5) { SKEW_MS } else { -SKEW_MS };
                pinned.push(Injection {
                    at_ms: 0,
                    fault: Fault::ClockJump { delta_ms: skew_ms },
                });
                describe = format!("skew_ms_pinned={skew_ms}");
            } else {
                describe = String::new();
            }
        }
        Case::JumpForward | Case::JumpBackward => {
            steps.push(agent("rester", TIMER_MS));
            steps.push(agent("control", TIMER_MS));
            steps.push(rest(rest_at_ms, "rester", Some(1)));
            let delta_ms = match case {
                Case::JumpForward => JUMP_FORWARD_MS,
                _ => JUMP_BACKWARD_MS,
            };
            pinned.push(Injection {
                at_ms: rest_at_ms + JUMP_INTO_REST_MS,
                fault: Fault::ClockJump { delta_ms },
            });
            describe = format!("rest_at_ms={rest_at_ms} jump_ms={delta_ms}");
        }
        Case::CrashAfterWrite => {
            steps.push(agent("rester", TIMER_MS));
            steps.push(agent("control", TIMER_MS));
            steps.push(rest(rest_at_ms, "rester", Some(5)));
            // Armed a moment before the rest is asked for: the cut falls among the storage
            // operations of the commit that records it or of the next one, before or after a
            // sync.
            let after_ops = rng.gen_range(1..=CUT_WITHIN_OPS);
            pinned.push(Injection {
                at_ms: rest_at_ms - 1,
                fault: Fault::PowerCut {
                    after_ops,
                    downtime_ms: 5 * SECOND_MS,
                },
            });
            describe = format!("rest_at_ms={rest_at_ms} cut_after_ops={after_ops}");
        }
        Case::ManyAgents => {
            let mut rests = 0;
            for i in 0..MANY_AGENTS {
                let name = format!("agent-{i}");
                steps.push(agent(&name, rng.gen_range(3 * TIMER_MS..6 * TIMER_MS)));
                for _ in 0..rng.gen_range(0..=3) {
                    rests += 1;
                    let minutes =
                        [None, Some(0), Some(1), Some(4), Some(10), Some(61)][rng.gen_range(0..6)];
                    steps.push(rest(
                        rng.gen_range(MINUTE_MS..safety_ms - MINUTE_MS),
                        &name,
                        minutes,
                    ));
                }
            }
            describe = format!("agents={MANY_AGENTS} rests={rests}");
        }
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: Default::default(),
        scenario: case.name(),
        seed,
        safety_ms,
        quiet_ms: QUIET_MS,
        rates: Vec::new(),
        pinned,
        downtime_ms_max: MINUTE_MS,
        skew_ms_max: 0,
        power_cut_wait_ms: MINUTE_MS,
        steps,
        probe_every_ms: MINUTE_MS,
        tail_every_ms: 5 * MINUTE_MS,
        sse_readers: 0,
        describe,
    };
    phases::run(setup, recorder).await;
}
