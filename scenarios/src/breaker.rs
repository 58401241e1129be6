//! Scenario `breaker`: a simulated LLM provider (its own node, an OpenAI-compatible endpoint)
//! rate-limits for a while: for a window of 40–90 minutes, pinned in the run, every call
//! answers 429. Two agents call it through the real `llm` adapter on their timers and on
//! demand; the provider also has shorter spells of 503s, timeouts and malformed replies, and the
//! node crashes, loses power and has its clock jump. A third agent's scripted runs fail as tool
//! failures for a stretch, for the breaker's other trigger.
//!
//! The breaker must open after `failures_to_open` failures, refuse wakeups while open, admit
//! exactly one probe per cooldown (doubling up to the cap while the provider still
//! rate-limits) and close once a probe succeeds after the provider recovers (invariant 8).
//! A long spell holds a breaker at its 20-minute cap for three openings in a row in most
//! seeds: the agent enters the error state (invariant 24), and the operator resets errored
//! agents a few times at seeded moments.

use rand::Rng;
use vigil_faults::plan::{FaultKind, LlmFault};
use vigil_faults::{stream, Fault, Injection};
use vigil_world::provider::base_url;
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 4 * HOUR_MS;
pub const QUIET_MS: u64 = HOUR_MS;
const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const LLM_AGENTS: usize = 2;
const SCRIPT_STEPS: usize = 40;
/// Most operator resets of one agent's error state in a run.
const ERROR_RESETS_MAX: usize = 3;
/// The pinned rate-limit window: when it starts and how long it lasts.
pub const RATE_LIMIT_FROM_MS: u64 = 20 * MINUTE_MS;
pub const RATE_LIMIT_UNTIL_MS: u64 = 60 * MINUTE_MS;
pub const RATE_LIMIT_MS_MIN: u64 = 40 * MINUTE_MS;
pub const RATE_LIMIT_MS_MAX: u64 = 90 * MINUTE_MS;

fn breaker_policy(rng: &mut impl Rng) -> serde_json::Value {
    serde_json::json!({
        "failures_to_open": rng.gen_range(1..=3),
        "cooldown_ms": rng.gen_range(2 * MINUTE_MS..5 * MINUTE_MS),
        "cooldown_ms_max": 20 * MINUTE_MS,
    })
}

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "breaker");
    let mut steps = Vec::new();
    let mut names = Vec::new();
    for i in 0..LLM_AGENTS {
        let name = format!("agent-{i}");
        steps.push(Step {
            at_ms: rng.gen_range(0..MINUTE_MS),
            action: Action::CreateAgent {
                spec: serde_json::json!({
                    "name": name,
                    "heartbeat": { "interval_ms": rng.gen_range(MINUTE_MS..3 * MINUTE_MS) },
                    "adapter": {
                        "type": "llm",
                        "base_url": base_url(),
                        "model": "sim-model-1",
                        "request_timeout_ms": 30_000,
                    },
                    "breaker": breaker_policy(&mut rng),
                }),
            },
        });
        names.push(name);
    }
    // The tool trigger: scripted runs that fail as tool failures for a stretch of runs.
    let ok_before = rng.gen_range(1..5);
    let failing = rng.gen_range(3..12);
    let script: Vec<serde_json::Value> = (0..SCRIPT_STEPS)
        .map(|n| {
            let fails = n >= ok_before && n < ok_before + failing;
            serde_json::json!({
                "duration_ms": rng.gen_range(1_000..20_000),
                "outcome": if fails { "tool_failed" } else { "succeeded" },
            })
        })
        .collect();
    steps.push(Step {
        at_ms: rng.gen_range(0..MINUTE_MS),
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": "toolsmith",
                "heartbeat": { "interval_ms": rng.gen_range(MINUTE_MS..3 * MINUTE_MS) },
                "adapter": { "type": "scripted", "steps": script },
                "breaker": breaker_policy(&mut rng),
            }),
        },
    });
    names.push("toolsmith".into());
    for name in &names {
        for w in 0..rng.gen_range(0..20) {
            steps.push(Step {
                at_ms: rng.gen_range(2 * MINUTE_MS..SAFETY_MS),
                action: Action::Wake {
                    agent: name.clone(),
                    request: serde_json::json!({ "source": "on_demand", "reason": format!("user {w}") }),
                },
            });
        }
    }
    for name in &names {
        for _ in 0..rng.gen_range(0..=ERROR_RESETS_MAX) {
            steps.push(Step {
                at_ms: rng.gen_range(HOUR_MS..SAFETY_MS),
                action: Action::ResetError {
                    agent: name.clone(),
                },
            });
        }
    }
    steps.sort_by_key(|s| s.at_ms);
    let rate_limit_at_ms = rng.gen_range(RATE_LIMIT_FROM_MS..RATE_LIMIT_UNTIL_MS);
    let rate_limit_ms = rng.gen_range(RATE_LIMIT_MS_MIN..RATE_LIMIT_MS_MAX);
    let setup = Setup {
        agents: Default::default(),
        pinned: vec![Injection {
            at_ms: rate_limit_at_ms,
            fault: Fault::Llm {
                llm: LlmFault::RateLimit,
                duration_ms: rate_limit_ms,
            },
        }],
        scenario: "breaker",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 0.3, 8),
            rate(FaultKind::PowerCut, 0.3, 8),
            rate(FaultKind::ClockJump, 0.3, 4),
            rate(FaultKind::Llm(LlmFault::ServerError), 0.3, 2),
            rate(FaultKind::Llm(LlmFault::Timeout), 0.3, 2),
            rate(FaultKind::Llm(LlmFault::Malformed), 0.3, 2),
        ],
        downtime_ms_max: 10 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 10 * MINUTE_MS,
        steps,
        probe_every_ms: 10 * MINUTE_MS,
        tail_every_ms: 10 * MINUTE_MS,
        sse_readers: 0,
        describe: format!("rate_limit_at_ms={rate_limit_at_ms} rate_limit_ms={rate_limit_ms}"),
    };
    phases::run(setup, recorder).await;
}
