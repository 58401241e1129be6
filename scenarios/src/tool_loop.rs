//! Scenario `tool_loop`: agents whose model will not stop calling tools, against the loop's
//! bounds, while the node crashes and loses power in the middle of their runs.
//!
//! - `looper-*`: the model calls tools round after round (20-40 rounds, 1-3 calls each) on the
//!   tool server's `partial` endpoint (a page that asks to be called again), `fail` and `flaky`
//!   ones: every run meets `tool_calls_max` (3-8) or `max_iterations` (2-8) first.
//! - `spender-*`: the same, with a daily budget of 0.5-2 cents by the provider's price table
//!   (`sim/src/provider.rs::prices()`: a call of about 1,000 prompt tokens costs about 0.3 cents):
//!   spend passes the budget by at most the call that crossed it, then wakeups are refused.
//! - `slowpoke-*`: tools on the `slow` (20 s) and `hang` endpoints with 5-30 s timeouts, so runs
//!   last minutes and crashes and power cuts land inside them.
//! - `rester-*`: runs that end with a rest (`pause_heartbeats` with 0-70 minutes: the clamp).
//!
//! The model of every kind but the resters breaks about one tool call in ten on purpose
//! (arguments with 1-14 values of a wrong type), and reads back what the node answered
//! (`tool_arguments_refused_as_documented`).
//!
//! The operator reads each agent's history a few times (`history_shown_as_documented`).
//!
//! Half the agents speak the Anthropic shape, half reach provider and tools by host name.
//! Timers every 2-6 minutes plus on-demand wakeups; crashes and power cuts about twice an hour,
//! clock jumps, spells of provider errors.

use rand::Rng;
use vigil_faults::plan::{FaultKind, LlmFault};
use vigil_faults::stream;
use vigil_world::provider::{
    base_url, host_base_url, Behaviour, ProviderScript, ID_MARKER_TEMPLATE, SIM_MODEL,
};
use vigil_world::recorder::Recorder;
use vigil_world::tool_server::{tool_url, ToolScript};
use vigil_world::workload::{Action, Step};

use crate::phases::{self, AgentWorld, Setup, SnapshotMix};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 2 * HOUR_MS;
pub const QUIET_MS: u64 = 30 * MINUTE_MS;
const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const KINDS: [&str; 4] = ["looper", "spender", "slowpoke", "rester"];
const PER_KIND: usize = 3;
/// Chance (thousandths) that a tool call's arguments break its tool's schema, and how many
/// schema errors they then carry: from one to past the 8 the node lists back (docs/agents.md,
/// "Tools"), so both a whole listing and one that ends "… and M more" are met.
const BROKEN_PERMILLE: u32 = 100;
const BROKEN_ERRORS: (u32, u32) = (1, 14);
/// Reads of each agent's history over the safety phase.
const HISTORY_READS: std::ops::Range<u32> = 1..4;

fn looping() -> Behaviour {
    Behaviour {
        idle_permille: 0,
        pause_permille: 0,
        pause_minutes: (1, 1),
        tool_permille: 1_000,
        tool_rounds: (20, 40),
        calls_per_round: (1, 3),
        answer_tokens: (50, 300),
        latency_ms: (0, 0),
        broken_permille: BROKEN_PERMILLE,
        broken_errors: BROKEN_ERRORS,
        long_answer_permille: 0,
    }
}

/// Chance (thousandths) that a `rester`'s final answer runs past the 32 KiB a run keeps of it
/// (`answer_excerpt_as_documented`). Only theirs: the `slowpoke`s' runs are what fill a history
/// to its 40-message bound (`history_at_bound`), which a 40 KB answer would cut short by its
/// 64 KiB.
const LONG_ANSWER_PERMILLE: u32 = 300;

/// The model's behaviour per kind of agent.
pub fn provider_script() -> ProviderScript {
    ProviderScript {
        default: looping(),
        by_name_prefix: vec![
            ("looper".into(), looping()),
            ("spender".into(), looping()),
            (
                "slowpoke".into(),
                Behaviour {
                    tool_rounds: (1, 4),
                    calls_per_round: (1, 2),
                    ..looping()
                },
            ),
            (
                "rester".into(),
                Behaviour {
                    idle_permille: 200,
                    pause_permille: 700,
                    pause_minutes: (0, 70),
                    tool_permille: 500,
                    tool_rounds: (1, 2),
                    calls_per_round: (1, 1),
                    answer_tokens: (20, 100),
                    latency_ms: (0, 0),
                    broken_permille: 0,
                    broken_errors: (1, 1),
                    long_answer_permille: LONG_ANSWER_PERMILLE,
                },
            ),
        ],
    }
}

fn tool(name: &str, endpoint: &str, by_name: bool, timeout_ms: u64) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "description": format!("The {endpoint} endpoint of the simulated tool server."),
        "parameters": { "type": "object", "properties": {
            "page": { "type": "integer" },
            "query": { "type": "string" },
            "tags": { "type": "array", "items": { "type": "string" } },
        } },
        "url": tool_url(endpoint, by_name),
        "timeout_ms": timeout_ms,
    })
}

fn agent_spec(kind: &str, i: usize, rng: &mut impl Rng) -> serde_json::Value {
    let by_name = i.is_multiple_of(2);
    let api = if (i / 2) % 2 == 0 {
        "openai"
    } else {
        "anthropic"
    };
    let tools = match kind {
        "slowpoke" => vec![
            tool("slow_search", "slow", by_name, rng.gen_range(5_000..30_000)),
            tool("stuck_api", "hang", by_name, rng.gen_range(5_000..30_000)),
            tool("lookup", "ok", !by_name, 10_000),
        ],
        _ => vec![
            tool("next_page", "partial", by_name, 10_000),
            tool("broken_api", "fail", !by_name, 10_000),
            tool("flaky_api", "flaky", by_name, 10_000),
        ],
    };
    let mut limits = serde_json::json!({ "run_timeout_ms": 10 * MINUTE_MS });
    if kind == "spender" {
        limits["daily_budget_usd"] = serde_json::json!(rng.gen_range(5..=20) as f64 / 1_000.0);
    }
    serde_json::json!({
        "name": format!("{kind}-{i}"),
        "heartbeat": { "interval_ms": rng.gen_range(2 * MINUTE_MS..6 * MINUTE_MS) },
        "limits": limits,
        "breaker": { "failures_to_open": rng.gen_range(2..=4), "cooldown_ms": rng.gen_range(2 * MINUTE_MS..6 * MINUTE_MS), "cooldown_ms_max": 20 * MINUTE_MS },
        "adapter": {
            "type": "llm",
            "api": api,
            "base_url": if by_name { host_base_url() } else { base_url() },
            "model": SIM_MODEL,
            "request_timeout_ms": 30_000,
            "max_iterations": rng.gen_range(2..=8),
            "tool_calls_max": rng.gen_range(3..=8),
            "prompts": { "system": format!("{ID_MARKER_TEMPLATE} Work through the pages until you are done.") },
            "tools": tools,
        },
    })
}

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "tool_loop");
    let mut steps = Vec::new();
    let mut names = Vec::new();
    for kind in KINDS {
        for i in 0..PER_KIND {
            steps.push(Step {
                at_ms: rng.gen_range(0..MINUTE_MS),
                action: Action::CreateAgent {
                    spec: agent_spec(kind, i, &mut rng),
                },
            });
            names.push(format!("{kind}-{i}"));
        }
    }
    for name in &names {
        for w in 0..rng.gen_range(0..8) {
            steps.push(Step {
                at_ms: rng.gen_range(2 * MINUTE_MS..SAFETY_MS),
                action: Action::Wake {
                    agent: name.clone(),
                    request: serde_json::json!({ "source": "on_demand", "reason": format!("user {w}") }),
                },
            });
        }
    }
    // The operator reads histories now and then: each is judged against the log's
    // (`history_shown_as_documented`), late ones after 20 runs and more at the bound.
    for name in &names {
        for _ in 0..rng.gen_range(HISTORY_READS) {
            steps.push(Step {
                at_ms: rng.gen_range(10 * MINUTE_MS..SAFETY_MS),
                action: Action::ReadHistory {
                    agent: name.clone(),
                },
            });
        }
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: AgentWorld {
            provider: provider_script(),
            tools: Some(ToolScript {
                slow_ms: 20_000,
                flaky_permille: 400,
            }),
            processes: None,
            alert_refuse_permille: None,
            state: None,
            snapshots: SnapshotMix::Frequent,
        },
        pinned: Vec::new(),
        scenario: "tool_loop",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 1.5, 6),
            rate(FaultKind::PowerCut, 1.5, 6),
            rate(FaultKind::GracefulStop, 0.5, 3),
            rate(FaultKind::ClockJump, 0.5, 3),
            rate(FaultKind::Llm(LlmFault::ServerError), 0.3, 2),
            rate(FaultKind::Llm(LlmFault::Malformed), 0.3, 2),
            // Spells in which every tool fails or hangs: several runs in a row meet them, so the
            // breaker's tool trigger opens, and hung calls end at the tools' own timeouts.
            rate(FaultKind::ToolFailure, 0.3, 2),
            rate(FaultKind::ToolHang, 0.3, 2),
        ],
        downtime_ms_max: 5 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 10 * MINUTE_MS,
        steps,
        probe_every_ms: 10 * MINUTE_MS,
        tail_every_ms: 10 * MINUTE_MS,
        sse_readers: 0,
        describe: format!("agents={}", names.len()),
    };
    phases::run(setup, recorder).await;
}
