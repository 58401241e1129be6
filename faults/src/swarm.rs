//! Swarm mode (TigerBeetle's VOPR, "swarm testing"): per seed, a random subset of the fault
//! catalogue at random rates, instead of the scenario's designed mix. Faults that a designed mix
//! never combines meet, and a seed that dilutes one fault with ten others no longer hides it.
//!
//! The choice comes from the seed's own `swarm` stream, so it is part of the seed: printed,
//! recorded in the trace's first record, and the same on every replay. Each chosen kind then
//! draws its arrivals from its own stream as always (see [`crate::plan`]).

use rand::Rng;

use crate::plan::{FaultKind, FaultRate, LlmFault, StorageFilter, StorageOps, PERMILLE};
use crate::stream;

/// Chance that each kind of the catalogue is in a seed's swarm, in thousandths.
pub const SWARM_PICK_PERMILLE: u32 = 500;
/// Range of a chosen kind's mean arrivals per simulated hour (log-uniform).
pub const SWARM_PER_HOUR_MIN: f64 = 0.1;
pub const SWARM_PER_HOUR_MAX: f64 = 4.0;
/// Most arrivals of one chosen kind.
pub const SWARM_TRIGGERS_MAX: u32 = 8;

/// The kinds swarm mode chooses from: every fault the shared scenario runner can inflict,
/// wakeup storms included; the LLM provider's faults when the world has a provider, pulse
/// loss when its agents pulse, and the tool server's faults when it has one (`world`; these
/// come last, so the other kinds draw the same either way).
pub fn catalogue(rng: &mut impl Rng, world: World) -> Vec<FaultKind> {
    let filter = |rng: &mut dyn rand::RngCore| StorageFilter {
        ops: [StorageOps::Write, StorageOps::Sync, StorageOps::Any][rng.gen_range(0..3)],
        probability_permille: [PERMILLE / 10, PERMILLE / 2, PERMILLE][rng.gen_range(0..3)],
    };
    let mut kinds = vec![
        FaultKind::Crash,
        FaultKind::PowerCut,
        FaultKind::ClockJump,
        FaultKind::StorageIoError(filter(rng)),
        FaultKind::DiskFull(filter(rng)),
        FaultKind::Partition,
        FaultKind::NetDelay,
        FaultKind::PacketLoss,
        FaultKind::WakeupBurst,
        FaultKind::AlignedTimers,
        FaultKind::CatchUp,
        FaultKind::ClockSkew,
        FaultKind::RunHang,
        FaultKind::RunFailure,
    ];
    if world.llm {
        kinds.extend(
            [
                LlmFault::RateLimit,
                LlmFault::ServerError,
                LlmFault::Timeout,
                LlmFault::Malformed,
            ]
            .map(FaultKind::Llm),
        );
        kinds.push(FaultKind::ProviderPartition);
    }
    if world.pulses {
        kinds.push(FaultKind::PulseLoss);
    }
    if world.tools {
        kinds.extend([FaultKind::ToolFailure, FaultKind::ToolHang]);
    }
    kinds
}

/// What a scenario's world has that some faults need.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct World {
    /// A simulated LLM provider that agents call.
    pub llm: bool,
    /// Agents that pulse.
    pub pulses: bool,
    /// A simulated tool server that agents' HTTP tools call.
    pub tools: bool,
}

/// The swarm of `seed`: a random non-empty subset of the catalogue (with the faults `world`
/// makes meaningful), each kind with a random rate and trigger bound. Deterministic in the
/// seed.
pub fn choose(seed: u64, world: World) -> Vec<FaultRate> {
    let mut rng = stream(seed, "swarm");
    let kinds = catalogue(&mut rng, world);
    let mut rates: Vec<FaultRate> = Vec::new();
    for kind in &kinds {
        let picked = rng.gen_range(0..PERMILLE as u32) < SWARM_PICK_PERMILLE;
        let (lo, hi) = (SWARM_PER_HOUR_MIN.ln(), SWARM_PER_HOUR_MAX.ln());
        let per_hour = rng.gen_range(lo..=hi).exp();
        let max_triggers = rng.gen_range(1..=SWARM_TRIGGERS_MAX);
        if picked {
            rates.push(FaultRate {
                kind: *kind,
                per_hour,
                after_ms: 0,
                max_triggers,
            });
        }
    }
    if rates.is_empty() {
        // An empty swarm tests nothing the designed scenarios do not: take one kind.
        let kind = kinds[rng.gen_range(0..kinds.len())];
        rates.push(FaultRate {
            kind,
            per_hour: 1.0,
            after_ms: 0,
            max_triggers: SWARM_TRIGGERS_MAX,
        });
    }
    rates
}

/// The choice in one token for traces and reports, e.g.
/// `crash:1.20/h*3,storage_io_error[sync,500]:0.35/h*2`.
pub fn describe(rates: &[FaultRate]) -> String {
    rates
        .iter()
        .map(|r| {
            let filter = match r.kind {
                FaultKind::StorageIoError(f) | FaultKind::DiskFull(f) => {
                    let ops = match f.ops {
                        StorageOps::Write => "write",
                        StorageOps::Sync => "sync",
                        StorageOps::Any => "any",
                    };
                    format!("[{ops},{}]", f.probability_permille)
                }
                _ => String::new(),
            };
            format!(
                "{}{filter}:{:.2}/h*{}",
                r.kind.name(),
                r.per_hour,
                r.max_triggers
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swarm_is_a_deterministic_non_empty_subset_with_bounded_rates() {
        for seed in 0..200 {
            let rates = choose(seed, World::default());
            assert_eq!(rates, choose(seed, World::default()), "seed {seed}");
            assert!(!rates.is_empty());
            for r in &rates {
                assert!((SWARM_PER_HOUR_MIN..=SWARM_PER_HOUR_MAX + 1e-9).contains(&r.per_hour));
                assert!((1..=SWARM_TRIGGERS_MAX).contains(&r.max_triggers));
            }
            let mut names: Vec<_> = rates.iter().map(|r| r.kind.name()).collect();
            names.dedup();
            assert_eq!(names.len(), rates.len(), "a kind at most once");
        }
    }

    #[test]
    fn swarms_differ_between_seeds_and_cover_every_kind() {
        let swarms: Vec<String> = (0..200)
            .map(|seed| describe(&choose(seed, World::default())))
            .collect();
        let distinct: std::collections::BTreeSet<_> = swarms.iter().collect();
        assert!(
            distinct.len() > 190,
            "{} distinct swarms of 200",
            distinct.len()
        );
        for kind in [
            "crash",
            "power_cut",
            "clock_jump",
            "storage_io_error",
            "disk_full",
            "partition",
            "net_delay",
            "packet_loss",
            "wakeup_burst",
            "aligned_timers",
            "catch_up",
            "clock_skew",
            "run_hang",
            "run_failure",
        ] {
            let with = swarms.iter().filter(|s| s.contains(kind)).count();
            assert!((50..150).contains(&with), "{kind} in {with} of 200 swarms");
        }
    }

    const LLM: World = World {
        llm: true,
        pulses: false,
        tools: false,
    };

    #[test]
    fn llm_faults_join_only_worlds_with_a_provider_and_shift_nothing_else() {
        for seed in 0..100 {
            let without = choose(seed, World::default());
            let with = choose(seed, LLM);
            let extra =
                |k: FaultKind| matches!(k, FaultKind::Llm(_) | FaultKind::ProviderPartition);
            assert!(without.iter().all(|r| !extra(r.kind)));
            let common: Vec<_> = with.iter().filter(|r| !extra(r.kind)).copied().collect();
            if common.len() == without.len() {
                assert_eq!(common, without, "seed {seed}");
            }
        }
        let with_llm = (0..100)
            .filter(|seed| {
                choose(*seed, LLM)
                    .iter()
                    .any(|r| matches!(r.kind, FaultKind::Llm(_)))
            })
            .count();
        assert!(with_llm > 80, "{with_llm}");
    }

    #[test]
    fn tool_faults_join_only_worlds_with_a_tool_server_and_shift_nothing_else() {
        let tools = World {
            tools: true,
            ..LLM
        };
        let is_tool = |k: FaultKind| matches!(k, FaultKind::ToolFailure | FaultKind::ToolHang);
        for seed in 0..100 {
            let without = choose(seed, LLM);
            assert!(without.iter().all(|r| !is_tool(r.kind)), "seed {seed}");
            let with = choose(seed, tools);
            let common: Vec<_> = with.iter().filter(|r| !is_tool(r.kind)).copied().collect();
            // An empty pick falls back to one random kind drawn after the whole catalogue, so
            // only swarms that picked something compare.
            if common.len() == without.len() {
                assert_eq!(common, without, "seed {seed}");
            }
        }
        let with_tool_faults = (0..100)
            .filter(|seed| choose(*seed, tools).iter().any(|r| is_tool(r.kind)))
            .count();
        assert!((50..100).contains(&with_tool_faults), "{with_tool_faults}");
    }

    #[test]
    fn the_description_names_kind_filter_rate_and_bound() {
        let rates = [
            FaultRate {
                kind: FaultKind::Crash,
                per_hour: 1.2,
                after_ms: 0,
                max_triggers: 3,
            },
            FaultRate {
                kind: FaultKind::StorageIoError(StorageFilter {
                    ops: StorageOps::Sync,
                    probability_permille: 500,
                }),
                per_hour: 0.35,
                after_ms: 0,
                max_triggers: 2,
            },
        ];
        assert_eq!(
            describe(&rates),
            "crash:1.20/h*3,storage_io_error[sync,500]:0.35/h*2"
        );
    }
}
