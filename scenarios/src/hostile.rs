//! Scenario `hostile`: an honest operator runs three timer agents (wakes them, some keyed,
//! lists them, tails the feed) while a hostile node holding eight agent tokens attacks the same
//! node (sim/src/hostile.rs): slow bodies, silent connections, a stream flood past the per-token
//! and per-tenant slots, an idempotency-key flood, a request flood past the token's burst, an
//! oversized body. While the hostile agents hold their streams the operator opens its own.
//! Crashes, power cuts and a partition strike too. Every operator request must be answered
//! within `OPERATOR_ANSWER_BOUND_MS`, never refused for a shared limit, unless a fault met it
//! (invariant 19); all the usual invariants hold. 30 minutes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use rand::Rng;
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::harness::{build_node, RUNTIME_PORT};
use vigil_world::hostile::HostilePlan;
use vigil_world::recorder::Recorder;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup, RUNTIME_IP};
use crate::smoke::rate;

pub const SAFETY_MS: u64 = 24 * MINUTE_MS;
pub const QUIET_MS: u64 = 6 * MINUTE_MS;
const MINUTE_MS: u64 = 60_000;
/// The hostile node and the operator's console (its live streams) on the simulated network.
const HOSTILE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 66));
const CONSOLE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 101));
const AGENTS: usize = 3;
const INTERVAL_MS_MIN: u64 = 30_000;
const INTERVAL_MS_MAX: u64 = 5 * MINUTE_MS;
const WAKES_MIN: usize = 10;
const WAKES_MAX: usize = 30;
/// Attacks start after the agents exist and end early enough that the streams they hold are
/// closed before the quiet phase.
const ATTACKS_FROM_MS: u64 = 2 * MINUTE_MS;
const ATTACKS_TO_MS: u64 = 16 * MINUTE_MS;
/// The operator opens its streams this long after the stream flood starts (drawn), when the
/// hostile agents have taken every slot they may, and holds each this long.
const OPERATOR_STREAM_AFTER_MS_MIN: u64 = 20_000;
const OPERATOR_STREAM_AFTER_MS_MAX: u64 = 50_000;
const OPERATOR_STREAMS: usize = 3;
const OPERATOR_STREAM_HOLD_MS: u64 = 5_000;

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    vigil_world::operator_client::record_operator_requests();
    let mut rng = stream(seed, "hostile_scenario");
    let mut steps = Vec::new();
    for i in 0..AGENTS {
        steps.push(Step {
            at_ms: rng.gen_range(0..MINUTE_MS),
            action: Action::CreateAgent {
                spec: serde_json::json!({
                    "name": format!("agent-{i}"),
                    "heartbeat": { "interval_ms": rng.gen_range(INTERVAL_MS_MIN..=INTERVAL_MS_MAX) },
                    "adapter": { "type": "scripted", "steps": [
                        { "duration_ms": rng.gen_range(500..10_000), "outcome": "succeeded" },
                    ]},
                }),
            },
        });
    }
    let wakes = rng.gen_range(WAKES_MIN..=WAKES_MAX);
    for w in 0..wakes {
        let keyed = rng.gen_bool(0.5);
        steps.push(Step {
            at_ms: rng.gen_range(MINUTE_MS..SAFETY_MS),
            action: Action::Wake {
                agent: format!("agent-{}", rng.gen_range(0..AGENTS)),
                request: serde_json::json!({
                    "source": "on_demand",
                    "reason": format!("operator wake {w}"),
                    "idempotency_key": keyed.then(|| format!("op-{w}")),
                }),
            },
        });
    }
    steps.sort_by_key(|s| s.at_ms);

    let addr = SocketAddr::new(RUNTIME_IP, RUNTIME_PORT);
    let plan = HostilePlan::draw(&mut stream(seed, "hostile"), addr, ATTACKS_FROM_MS, ATTACKS_TO_MS);
    let (flood_ms, _) = plan.stream_flood().expect("every plan floods the streams");
    let mut operator_streams: Vec<u64> = (0..OPERATOR_STREAMS)
        .map(|_| {
            flood_ms + rng.gen_range(OPERATOR_STREAM_AFTER_MS_MIN..=OPERATOR_STREAM_AFTER_MS_MAX)
        })
        .collect();
    operator_streams.sort_unstable();
    let describe = plan.describe();
    {
        let recorder = recorder.clone();
        build_node(
            madsim::runtime::Handle::current()
                .create_node()
                .name("hostile")
                .ip(HOSTILE_IP)
                .init(move || plan.clone().run(recorder.clone())),
        );
    }
    {
        let recorder = recorder.clone();
        build_node(
            madsim::runtime::Handle::current()
                .create_node()
                .name("console")
                .ip(CONSOLE_IP)
                .init(move || {
                    vigil_world::hostile::operator_streams(
                        addr,
                        recorder.clone(),
                        operator_streams.clone(),
                        OPERATOR_STREAM_HOLD_MS,
                    )
                }),
        );
    }
    let setup = Setup {
        agents: Default::default(),
        pinned: Vec::new(),
        scenario: "hostile",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 1.0, 2),
            rate(FaultKind::PowerCut, 1.0, 2),
            rate(FaultKind::Partition, 1.0, 1),
        ],
        downtime_ms_max: MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 5 * MINUTE_MS,
        steps,
        probe_every_ms: 2 * MINUTE_MS,
        tail_every_ms: MINUTE_MS,
        sse_readers: 0,
        describe,
    };
    phases::run(setup, recorder).await;
}
