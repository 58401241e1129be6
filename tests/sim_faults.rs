//! Every fault built after issue 2 takes effect: the same seed, with and without the fault,
//! shows a different observable behaviour (issue 5, "Must show"). A partition makes the
//! workload's requests in its window fail until it heals; a delay makes acknowledgements
//! arrive later; packet loss makes some of them arrive later; a storage I/O error or a full
//! disk makes the node stop itself, restart and recover everything acknowledged; the storage
//! operation filter decides which operation fails. And the faults of issue 2: a clock skew
//! really moves what the node's wall clock reads, a clock jump moves it from its instant on
//! (both directions), a crash loses the node's memory (requests wait for the restart, recovery
//! rebuilds from disk), a power cut after a write drops unsynced writes and exercises recovery.
#![cfg(madsim)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use vigil_faults::plan::{FaultKind, ALIGNED_AGENTS_MIN, PERMILLE};
use vigil_faults::{plan, Fault, FaultRate, Injection, StorageFilter, StorageOps};
use vigil_scenarios::phases::{self, Setup};
use vigil_world::harness::{simulate, RunResult};
use vigil_world::trace::{FaultRecord, TraceEvent};
use vigil_world::workload::{Action, Step};

const MINUTE_MS: u64 = 60_000;
const SAFETY_MS: u64 = 20 * MINUTE_MS;
const QUIET_MS: u64 = 10 * MINUTE_MS;
/// The fault is planned to open about this far into the run (one arrival, a second later on
/// average).
const FAULT_AFTER_MS: u64 = 5 * MINUTE_MS;
/// The workload sends one keyed wakeup this often, from the first minute to the end of the
/// safety phase.
const WAKE_EVERY_MS: u64 = 5_000;
/// How many seeds the tests look at to find one whose drawn fault suits them.
const SEEDS_TO_SEARCH: u64 = 500;

/// One arrival of `kind`, about `FAULT_AFTER_MS` into the run.
fn once(kind: FaultKind) -> Vec<FaultRate> {
    vec![FaultRate {
        kind,
        per_hour: 3_600.0,
        after_ms: FAULT_AFTER_MS,
        max_triggers: 1,
    }]
}

/// The first seed whose planned fault satisfies `wanted`, and that fault.
fn seed_where(rates: &[FaultRate], wanted: impl Fn(&Fault) -> bool) -> (u64, Injection) {
    (0..SEEDS_TO_SEARCH)
        .find_map(|seed| {
            let injections = plan(seed, SAFETY_MS, rates);
            let first = *injections.first()?;
            wanted(&first.fault).then_some((seed, first))
        })
        .expect("some seed draws a suitable fault")
}

/// A window in which the workload surely writes (a wakeup every `WAKE_EVERY_MS`).
fn long_enough(fault: &Fault) -> bool {
    fault.duration_ms() >= 6 * WAKE_EVERY_MS
}

/// The wakeup steps: one agent, then a keyed wakeup every `WAKE_EVERY_MS`.
fn steps() -> Vec<Step> {
    let mut steps = vec![Step {
        at_ms: 1_000,
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": "agent-0",
                "adapter": { "type": "scripted", "steps": [
                    { "duration_ms": 500, "outcome": "succeeded" },
                ]},
            }),
        },
    }];
    let mut at_ms = MINUTE_MS;
    while at_ms < SAFETY_MS {
        steps.push(Step {
            at_ms,
            action: Action::Wake {
                agent: "agent-0".into(),
                request: serde_json::json!({
                    "source": "on_demand",
                    "reason": format!("wake at {at_ms}"),
                    "idempotency_key": key(at_ms),
                }),
            },
        });
        at_ms += WAKE_EVERY_MS;
    }
    steps
}

fn key(at_ms: u64) -> String {
    format!("wake-{at_ms}")
}

/// Runs the shared two-phase runner for `seed` with `rates`.
fn run(seed: u64, rates: Vec<FaultRate>) -> RunResult {
    run_skewed(seed, rates, 0)
}

/// Like [`run`], with the node's wall clock offset by up to `skew_ms_max` either way.
fn run_skewed(seed: u64, rates: Vec<FaultRate>, skew_ms_max: i64) -> RunResult {
    run_steps(seed, rates, skew_ms_max, steps())
}

/// The shared runner for `seed` with `rates`, a skew and these workload steps.
fn run_steps(seed: u64, rates: Vec<FaultRate>, skew_ms_max: i64, steps: Vec<Step>) -> RunResult {
    run_world(seed, rates, skew_ms_max, steps, Default::default())
}

/// Like [`run_steps`], in a world with these outside services.
fn run_world(
    seed: u64,
    rates: Vec<FaultRate>,
    skew_ms_max: i64,
    steps: Vec<Step>,
    agents: phases::AgentWorld,
) -> RunResult {
    let setup = Setup {
        agents,
        pinned: Vec::new(),
        scenario: "sim_faults",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates,
        downtime_ms_max: MINUTE_MS,
        skew_ms_max,
        power_cut_wait_ms: MINUTE_MS,
        steps,
        probe_every_ms: 2 * MINUTE_MS,
        tail_every_ms: 5 * MINUTE_MS,
        sse_readers: 0,
        describe: String::new(),
    };
    let limit = Duration::from_millis(4 * (SAFETY_MS + QUIET_MS));
    let result = simulate(seed, limit, move |recorder| phases::run(setup, recorder));
    assert!(
        result.violation.is_none(),
        "seed {seed}: {:?}",
        result.violation
    );
    result
}

/// The same seed without and with `rates`.
fn without_and_with(seed: u64, rates: Vec<FaultRate>) -> (RunResult, RunResult) {
    (run(seed, Vec::new()), run(seed, rates))
}

/// Virtual ms from each wakeup's step to its (first) acknowledgement, by step instant.
fn ack_delays(result: &RunResult) -> BTreeMap<u64, u64> {
    let mut delays = BTreeMap::new();
    for record in &result.records {
        if let TraceEvent::AckedWakeup {
            idempotency_key: Some(key),
            ..
        } = &record.event
        {
            let at_ms: u64 = key
                .strip_prefix("wake-")
                .and_then(|t| t.parse().ok())
                .expect("keys name their step");
            delays.entry(at_ms).or_insert(record.t_ms - at_ms);
        }
    }
    delays
}

/// The steps that fall inside `[from_ms, until_ms)`.
fn steps_within(from_ms: u64, until_ms: u64) -> impl Iterator<Item = u64> {
    (MINUTE_MS..SAFETY_MS)
        .step_by(WAKE_EVERY_MS as usize)
        .filter(move |t| (from_ms..until_ms).contains(t))
}

/// The cause of every `node_stopped` record, in order.
fn stops(result: &RunResult) -> Vec<String> {
    result
        .records
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::Fault {
                fault: FaultRecord::NodeStopped { cause },
            } => Some(cause.clone()),
            _ => None,
        })
        .collect()
}

/// A node stop is followed by a restart and a recovery that holds every event it committed.
fn assert_stopped_and_recovered(result: &RunResult) {
    let at = result
        .records
        .iter()
        .position(|r| {
            matches!(
                &r.event,
                TraceEvent::Fault {
                    fault: FaultRecord::NodeStopped { .. }
                }
            )
        })
        .expect("the node stopped itself");
    let committed_before = result.records[..at]
        .iter()
        .filter(|r| matches!(r.event, TraceEvent::Committed { .. }))
        .count() as u64;
    let after: Vec<&TraceEvent> = result.records[at + 1..].iter().map(|r| &r.event).collect();
    assert!(
        matches!(
            after[0],
            TraceEvent::Crashed {
                during_write: true,
                ..
            }
        ),
        "{:?}",
        after[0]
    );
    let restarted = after
        .iter()
        .position(|e| matches!(e, TraceEvent::Restarted))
        .expect("the supervisor restarted the node");
    let head_seq = after[restarted..]
        .iter()
        .find_map(|e| match e {
            TraceEvent::Recovered { head_seq, .. } => Some(*head_seq),
            _ => None,
        })
        .expect("the restarted node recovered");
    assert!(
        head_seq >= committed_before,
        "recovered {head_seq} of {committed_before}"
    );
}

#[test]
fn a_partition_fails_requests_until_it_heals() {
    let rates = once(FaultKind::Partition);
    let (seed, window) = seed_where(&rates, |f| f.duration_ms() >= 30_000);
    let (heals_ms, opens_ms) = (window.at_ms + window.fault.duration_ms(), window.at_ms);
    let (calm, cut) = without_and_with(seed, rates);
    let (calm, cut) = (ack_delays(&calm), ack_delays(&cut));
    let inside: Vec<u64> = steps_within(opens_ms, heals_ms - 2_000).collect();
    assert!(!inside.is_empty());
    for step_ms in inside {
        assert!(
            calm[&step_ms] < 1_000,
            "without the partition, {step_ms} is answered at once"
        );
        assert!(
            step_ms + cut[&step_ms] >= heals_ms,
            "a wakeup sent at {step_ms} inside the partition [{opens_ms}, {heals_ms}) was \
             acknowledged at {}",
            step_ms + cut[&step_ms]
        );
    }
    // Once healed, the workload is answered at once again.
    let after = steps_within(heals_ms + 5_000, SAFETY_MS)
        .next()
        .expect("a step after");
    assert!(cut[&after] < 1_000);
}

#[test]
fn a_delay_makes_acknowledgements_arrive_later() {
    let rates = once(FaultKind::NetDelay);
    let (seed, window) = seed_where(
        &rates,
        |f| matches!(f, Fault::NetDelay { latency_ms, duration_ms } if (200..3_000).contains(latency_ms) && *duration_ms >= 30_000),
    );
    let Fault::NetDelay { latency_ms, .. } = window.fault else {
        unreachable!()
    };
    let (calm, slow) = without_and_with(seed, rates);
    let (calm, slow) = (ack_delays(&calm), ack_delays(&slow));
    let heals_ms = window.at_ms + window.fault.duration_ms();
    let inside: Vec<u64> = steps_within(window.at_ms, heals_ms - 2 * latency_ms).collect();
    assert!(!inside.is_empty());
    for step_ms in inside {
        // The request and its answer each take `latency_ms` longer.
        assert!(
            slow[&step_ms] >= 2 * latency_ms && calm[&step_ms] < latency_ms,
            "step {step_ms}: {} ms with a {latency_ms} ms delay, {} ms without",
            slow[&step_ms],
            calm[&step_ms]
        );
    }
    let after = steps_within(heals_ms + 5_000, SAFETY_MS)
        .next()
        .expect("a step after");
    assert!(slow[&after] < latency_ms);
}

#[test]
fn packet_loss_makes_some_requests_retry() {
    let rates = once(FaultKind::PacketLoss);
    let (seed, window) = seed_where(
        &rates,
        |f| matches!(f, Fault::PacketLoss { loss_permille, duration_ms } if *loss_permille >= 300 && *duration_ms >= 60_000),
    );
    let (calm, lossy) = without_and_with(seed, rates);
    let (calm, lossy) = (ack_delays(&calm), ack_delays(&lossy));
    let heals_ms = window.at_ms + window.fault.duration_ms();
    let retried = steps_within(window.at_ms, heals_ms)
        .filter(|t| lossy[t] >= calm[t] + 1_000)
        .count();
    assert!(
        retried > 0,
        "no request inside the lossy window was slowed down"
    );
    assert_eq!(
        calm.len(),
        lossy.len(),
        "every wakeup is acknowledged in the end"
    );
}

#[test]
fn a_storage_io_error_stops_the_node_which_recovers_from_disk() {
    let rates = once(FaultKind::StorageIoError(StorageFilter::always(
        StorageOps::Any,
    )));
    let (seed, _) = seed_where(&rates, long_enough);
    let (calm, failing) = without_and_with(seed, rates);
    assert!(stops(&calm).is_empty());
    assert!(!calm
        .records
        .iter()
        .any(|r| matches!(r.event, TraceEvent::Restarted)));
    let causes = stops(&failing);
    assert!(
        !causes.is_empty() && causes.iter().all(|c| c.contains("injected I/O error")),
        "{causes:?}"
    );
    assert_stopped_and_recovered(&failing);
    assert_eq!(ack_delays(&calm).len(), ack_delays(&failing).len());
}

#[test]
fn a_full_disk_stops_the_node_which_recovers_from_disk() {
    let rates = once(FaultKind::DiskFull(StorageFilter::always(
        StorageOps::Write,
    )));
    let (seed, _) = seed_where(&rates, long_enough);
    let (calm, full) = without_and_with(seed, rates);
    assert!(stops(&calm).is_empty());
    let causes = stops(&full);
    assert!(
        !causes.is_empty()
            && causes
                .iter()
                .all(|c| c.contains("injected disk full on write")),
        "{causes:?}"
    );
    assert_stopped_and_recovered(&full);
}

#[test]
fn the_operation_filter_decides_which_operation_fails() {
    for (ops, named, spared) in [
        (StorageOps::Sync, "on sync", "on write"),
        (StorageOps::Write, "on write", "on sync"),
    ] {
        let filter = StorageFilter {
            ops,
            probability_permille: PERMILLE,
        };
        let rates = once(FaultKind::StorageIoError(filter));
        let (seed, _) = seed_where(&rates, long_enough);
        let causes = stops(&run(seed, rates));
        assert!(!causes.is_empty(), "{ops:?}");
        assert!(
            causes
                .iter()
                .all(|c| c.contains(named) && !c.contains(spared)),
            "{causes:?}"
        );
    }
}

/// (virtual ms, the node's wall clock) of every probe the workload made.
fn probes(result: &RunResult) -> Vec<(u64, i64)> {
    result
        .records
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::Probe { now_ms, .. } => Some((r.t_ms, *now_ms as i64)),
            _ => None,
        })
        .collect()
}

/// How far the node's wall clock stood from the no-fault run's at each probe of `with`: the
/// probe's wall reading minus its virtual instant, against the same in the run without (where
/// it is one constant: the simulated epoch). Probes of the two runs need not fall on the same
/// instant.
fn wall_offsets(without: &RunResult, with: &RunResult) -> Vec<(u64, i64)> {
    let base = probes(without)
        .first()
        .map(|(t, now)| now - *t as i64)
        .expect("the run without probed the node");
    probes(with)
        .into_iter()
        .map(|(t, now)| (t, now - t as i64 - base))
        .collect()
}

#[test]
fn clock_skew_moves_what_the_nodes_wall_clock_reads() {
    for seed in 0..4 {
        let (without, with) = (run(seed, Vec::new()), run_skewed(seed, Vec::new(), 5_000));
        let TraceEvent::RunStarted { plan, .. } = &with.records[0].event else {
            panic!("the first record starts the run");
        };
        let skew_ms: i64 = plan
            .split_whitespace()
            .find_map(|w| w.strip_prefix("skew_ms="))
            .and_then(|v| v.parse().ok())
            .expect("the plan records the skew");
        let offsets = wall_offsets(&without, &with);
        assert!(offsets.len() >= 3, "seed {seed}: {offsets:?}");
        // Probes at the same virtual instant read a wall clock `skew_ms` apart (the answer's
        // trip over the network may differ by a few ms).
        for (t, offset) in &offsets {
            assert!(
                (offset - skew_ms).abs() <= 50,
                "seed {seed} at {t} ms: wall clock {offset} ms off, skew {skew_ms} ms"
            );
        }
        if skew_ms.abs() > 100 {
            assert!(offsets.iter().all(|(_, o)| o.abs() > 50));
        }
    }
}

#[test]
fn a_clock_jump_moves_the_wall_clock_from_its_instant_on() {
    let rates = once(FaultKind::ClockJump);
    // A jump large enough to tell apart from network noise, and both directions.
    for direction in [1_i64, -1] {
        let (seed, injection) = seed_where(
            &rates,
            |f| matches!(f, Fault::ClockJump { delta_ms } if delta_ms.signum() == direction && delta_ms.abs() >= 1_000),
        );
        let Fault::ClockJump { delta_ms } = injection.fault else {
            unreachable!()
        };
        let (without, with) = without_and_with(seed, rates.clone());
        let offsets = wall_offsets(&without, &with);
        let (before, after): (Vec<_>, Vec<_>) =
            offsets.iter().partition(|(t, _)| *t < injection.at_ms);
        assert!(!before.is_empty() && !after.is_empty(), "{offsets:?}");
        assert!(before.iter().all(|(_, o)| o.abs() <= 50), "{before:?}");
        for (t, offset) in after {
            assert!(
                (offset - delta_ms).abs() <= 50,
                "seed {seed} at {t} ms: wall clock {offset} ms off after a jump of {delta_ms} ms"
            );
        }
    }
}

/// Whether `result` shows a crash (or, with `during_write`, a power cut mid-commit), a restart
/// and a recovery holding every event committed before the crash.
fn crashed_and_recovered(result: &RunResult, during_write: bool) -> bool {
    let Some(at) = result.records.iter().position(
        |r| matches!(r.event, TraceEvent::Crashed { during_write: d, .. } if d == during_write),
    ) else {
        return false;
    };
    let committed_before = result.records[..at]
        .iter()
        .filter(|r| matches!(r.event, TraceEvent::Committed { .. }))
        .count() as u64;
    result.records[at..].iter().any(|r| {
        matches!(r.event, TraceEvent::Recovered { head_seq, .. } if head_seq >= committed_before)
    })
}

#[test]
fn a_crash_loses_the_nodes_memory_and_recovery_rebuilds_it_from_disk() {
    let rates = once(FaultKind::Crash);
    let (seed, injection) = seed_where(
        &rates,
        |f| matches!(f, Fault::Crash { downtime_ms } if *downtime_ms >= 3 * WAKE_EVERY_MS),
    );
    let (without, with) = without_and_with(seed, rates);
    assert!(!crashed_and_recovered(&without, false));
    assert!(crashed_and_recovered(&with, false));
    // Requests made while the node was down are answered only after the restart.
    let Fault::Crash { downtime_ms } = injection.fault else {
        unreachable!()
    };
    let (calm, struck) = (ack_delays(&without), ack_delays(&with));
    // The runner restarts a crashed node after at most its `downtime_ms_max` (a minute).
    let down_until_ms = injection.at_ms + downtime_ms.min(MINUTE_MS);
    let during: Vec<u64> = steps_within(injection.at_ms, down_until_ms).collect();
    assert!(!during.is_empty());
    for step in during {
        assert!(
            struck[&step] > calm[&step],
            "step {step}: {} vs {}",
            struck[&step],
            calm[&step]
        );
    }
}

#[test]
fn a_power_cut_after_a_write_drops_unsynced_writes_and_exercises_recovery() {
    let rates = once(FaultKind::PowerCut);
    // A cut strikes the operation its draw names: an append's write-ahead frame (nothing
    // unsynced yet) or its sync (the frame unsynced), a checkpoint's pages. Each seed must
    // recover; among the first few, some cut must find writes not yet synced.
    let mut pending_at_cuts = Vec::new();
    for seed in power_cut_seeds(&rates, POWER_CUT_SEEDS) {
        let (without, with) = without_and_with(seed, rates.clone());
        assert!(!crashed_and_recovered(&without, true), "seed {seed}");
        assert!(crashed_and_recovered(&with, true), "seed {seed}");
        let pending = with.records.iter().find_map(|r| match r.event {
            TraceEvent::Crashed {
                during_write: true,
                pending_ops,
                ..
            } => Some(pending_ops),
            _ => None,
        });
        pending_at_cuts.push((seed, pending.expect("the cut struck inside an operation")));
    }
    assert!(
        pending_at_cuts.iter().any(|&(_, pending)| pending > 0),
        "no cut found unsynced writes: {pending_at_cuts:?}"
    );
}

/// Power-cut seeds the test above runs.
const POWER_CUT_SEEDS: usize = 6;

/// The first `count` seeds whose first fault is a power cut.
fn power_cut_seeds(rates: &[FaultRate], count: usize) -> Vec<u64> {
    let seeds: Vec<u64> = (0..SEEDS_TO_SEARCH)
        .filter(|&seed| {
            plan(seed, SAFETY_MS, rates)
                .first()
                .is_some_and(|first| matches!(first.fault, Fault::PowerCut { .. }))
        })
        .take(count)
        .collect();
    assert_eq!(seeds.len(), count, "enough seeds draw a power cut");
    seeds
}

/// The committed events of a run.
fn committed(result: &RunResult) -> Vec<&vigil::engine::event::EventKind> {
    result
        .records
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::Committed { event } => Some(&event.kind),
            _ => None,
        })
        .collect()
}

#[test]
fn a_wakeup_burst_sends_its_wakes_at_once_and_each_is_recorded() {
    use vigil::engine::event::EventKind;
    let rates = once(FaultKind::WakeupBurst);
    let (seed, injection) = seed_where(&rates, |f| matches!(f, Fault::WakeupBurst { .. }));
    let Fault::WakeupBurst { wakes, .. } = injection.fault else {
        unreachable!()
    };
    let storm_wakes = |result: &RunResult| {
        committed(result)
            .into_iter()
            .filter(|k| match k {
                EventKind::WakeupQueued { reason, .. }
                | EventKind::WakeupCoalesced { reason, .. }
                | EventKind::WakeupRefused { reason, .. } => reason.starts_with("storm wake"),
                _ => false,
            })
            .count()
    };
    let (without, with) = without_and_with(seed, rates);
    assert_eq!(storm_wakes(&without), 0);
    assert!(
        storm_wakes(&with) >= wakes as usize,
        "{} of {wakes} storm wakes recorded",
        storm_wakes(&with)
    );
}

#[test]
fn aligned_timers_register_a_fleet_at_once_whose_timers_the_jitter_spreads() {
    use vigil::engine::event::EventKind;
    let rates = once(FaultKind::AlignedTimers);
    let (seed, injection) = seed_where(
        &rates,
        |f| matches!(f, Fault::AlignedTimers { agents, interval_ms } if *agents >= 10 && *interval_ms <= 10 * MINUTE_MS),
    );
    let Fault::AlignedTimers { agents, .. } = injection.fault else {
        unreachable!()
    };
    let (without, with) = without_and_with(seed, rates);
    let first_slots = |result: &RunResult| -> BTreeSet<u64> {
        committed(result)
            .into_iter()
            .filter_map(|k| match k {
                EventKind::AgentCreated {
                    name,
                    first_fire_at_ms: Some(first),
                    ..
                } if name.starts_with("aligned-") => Some(*first),
                _ => None,
            })
            .collect()
    };
    assert!(first_slots(&without).is_empty());
    let slots = first_slots(&with);
    // Registered within moments of each other, yet their first slots spread.
    assert!(
        slots.len() as u32 > agents / 2,
        "{} distinct first slots for {agents} agents",
        slots.len()
    );
    let fired = committed(&with)
        .into_iter()
        .filter(|k| matches!(k, EventKind::TimerFired { .. }))
        .count();
    assert!(fired >= agents as usize, "{fired} timer fires");
}

#[test]
fn a_catch_up_leap_makes_the_whole_fleet_fire_once_for_everything_it_missed() {
    use vigil::engine::event::EventKind;
    let fleet = FaultRate {
        kind: FaultKind::AlignedTimers,
        per_hour: 3_600.0,
        after_ms: MINUTE_MS,
        max_triggers: 1,
    };
    let leap = FaultRate {
        kind: FaultKind::CatchUp,
        per_hour: 3_600.0,
        after_ms: 10 * MINUTE_MS,
        max_triggers: 1,
    };
    let (seed, _) = seed_where(
        &[fleet],
        |f| matches!(f, Fault::AlignedTimers { interval_ms, .. } if *interval_ms <= 5 * MINUTE_MS),
    );
    let (without, with) = (run(seed, vec![fleet]), run(seed, vec![fleet, leap]));
    let missed = |result: &RunResult| -> Vec<u64> {
        committed(result)
            .into_iter()
            .filter_map(|k| match k {
                EventKind::TimerFired { missed_slots, .. } if *missed_slots > 0 => {
                    Some(*missed_slots)
                }
                _ => None,
            })
            .collect()
    };
    assert!(missed(&without).is_empty(), "{:?}", missed(&without));
    let caught_up = missed(&with);
    // Every agent of the fleet skipped the hours of slots the leap jumped over, in one fire.
    assert!(
        caught_up.len() >= ALIGNED_AGENTS_MIN as usize,
        "{caught_up:?}"
    );
    assert!(caught_up.iter().all(|m| *m >= 10), "{caught_up:?}");
}

/// One agent that calls the simulated LLM provider on a 1-minute timer.
fn llm_steps() -> Vec<Step> {
    vec![Step {
        at_ms: 1_000,
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": "thinker",
                "heartbeat": { "interval_ms": MINUTE_MS },
                "adapter": { "type": "llm", "base_url": vigil_world::provider::base_url(),
                             "model": "sim-model-1", "request_timeout_ms": 20_000 },
                "breaker": { "failures_to_open": 100 },
            }),
        },
    }]
}

/// The details of the runs that ended `failed`.
fn failures(result: &RunResult) -> Vec<String> {
    committed(result)
        .into_iter()
        .filter_map(|k| match k {
            vigil::engine::event::EventKind::RunFinished { status, detail, .. }
                if *status == vigil::engine::run::RunStatus::Failed =>
            {
                Some(detail.clone())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn each_llm_fault_fails_the_runs_that_call_the_provider_during_it() {
    use vigil_faults::LlmFault;
    for (fault, words) in [
        (LlmFault::RateLimit, "429 Too Many Requests"),
        (LlmFault::ServerError, "503 Service Unavailable"),
        (
            LlmFault::Timeout,
            "did not answer within adapter.request_timeout_ms = 20000",
        ),
        (LlmFault::Malformed, "not a chat completion"),
    ] {
        let rates = once(FaultKind::Llm(fault));
        let (seed, _) = seed_where(&rates, |f| f.duration_ms() >= 3 * MINUTE_MS);
        let without = run_steps(seed, Vec::new(), 0, llm_steps());
        let with = run_steps(seed, rates, 0, llm_steps());
        let succeeded = |result: &RunResult| {
            committed(result)
                .into_iter()
                .filter(|k| matches!(k, vigil::engine::event::EventKind::RunFinished { status, .. } if *status == vigil::engine::run::RunStatus::Succeeded))
                .count()
        };
        assert!(
            failures(&without).is_empty(),
            "{fault:?}: {:?}",
            failures(&without)
        );
        assert!(succeeded(&without) > 10);
        let failed = failures(&with);
        assert!(
            !failed.is_empty() && failed.iter().all(|d| d.contains(words)),
            "{fault:?}: {failed:?}"
        );
        assert!(succeeded(&with) < succeeded(&without));
    }
}

#[test]
fn a_provider_partition_fails_the_calls_made_while_it_lasts() {
    let rates = once(FaultKind::ProviderPartition);
    let (seed, _) = seed_where(&rates, |f| f.duration_ms() >= 3 * MINUTE_MS);
    let without = run_steps(seed, Vec::new(), 0, llm_steps());
    let with = run_steps(seed, rates, 0, llm_steps());
    assert!(failures(&without).is_empty(), "{:?}", failures(&without));
    let failed = failures(&with);
    assert!(
        !failed.is_empty()
            && failed.iter().all(|d| d.contains("did not answer within")
                || d.contains("could not reach the provider")),
        "{failed:?}"
    );
}

/// One agent whose model calls its one tool (the tool server's always-fine `ok` endpoint, 5 s
/// timeout) once or twice on every 1-minute timer run, in a world with a tool server.
fn tool_world() -> (Vec<Step>, phases::AgentWorld) {
    use vigil_world::provider::{Behaviour, ProviderScript, ID_MARKER_TEMPLATE, SIM_MODEL};
    use vigil_world::tool_server::{tool_url, ToolScript};
    let steps = vec![Step {
        at_ms: 1_000,
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": "caller",
                "heartbeat": { "interval_ms": MINUTE_MS },
                "breaker": { "failures_to_open": 100 },
                "adapter": {
                    "type": "llm", "base_url": vigil_world::provider::base_url(), "model": SIM_MODEL,
                    "request_timeout_ms": 20_000,
                    "prompts": { "system": format!("{ID_MARKER_TEMPLATE} Look it up.") },
                    "tools": [{
                        "name": "lookup", "description": "Looks something up.",
                        "parameters": { "type": "object" },
                        "url": tool_url("ok", true), "timeout_ms": 5_000,
                    }],
                },
            }),
        },
    }];
    let world = phases::AgentWorld {
        provider: ProviderScript {
            default: Behaviour {
                tool_permille: 1_000,
                tool_rounds: (1, 2),
                calls_per_round: (1, 1),
                ..Behaviour::default()
            },
            by_name_prefix: Vec::new(),
        },
        tools: Some(ToolScript::default()),
        processes: None,
        alert_refuse_permille: None,
        state: None,
        snapshots: phases::SnapshotMix::Frequent,
    };
    (steps, world)
}

/// What the tool server did with each call it served, in order.
fn tool_outcomes(result: &RunResult) -> Vec<vigil_world::trace::ToolOutcome> {
    result
        .records
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::ToolCallServed { outcome, .. } => Some(*outcome),
            _ => None,
        })
        .collect()
}

#[test]
fn tool_failure_and_tool_hang_strike_every_tool_call_made_while_they_last() {
    use vigil_world::trace::ToolOutcome;
    for (kind, struck) in [
        (FaultKind::ToolFailure, ToolOutcome::Failed),
        (FaultKind::ToolHang, ToolOutcome::Hung),
    ] {
        let rates = once(kind);
        let (seed, _) = seed_where(&rates, |f| f.duration_ms() >= 3 * MINUTE_MS);
        let (steps, world) = tool_world();
        let without = run_world(seed, Vec::new(), 0, steps.clone(), world.clone());
        let with = run_world(seed, rates, 0, steps, world);
        let calm = tool_outcomes(&without);
        assert!(calm.len() > 10 && calm.iter().all(|o| *o == ToolOutcome::Ok), "{calm:?}");
        let sick = tool_outcomes(&with);
        let hit = sick.iter().filter(|o| **o == struck).count();
        assert!(hit > 0 && sick.iter().all(|o| *o == ToolOutcome::Ok || *o == struck), "{kind:?}: {sick:?}");
        let healed = with.records.iter().any(|r| {
            matches!(&r.event, TraceEvent::Fault { fault: FaultRecord::Healed(f) } if f.kind() == kind.name())
        });
        assert!(healed, "{kind:?}: the window heals");
    }
}

/// One agent pulsing every 2 s (offline after 3 misses) from the first minute on.
fn pulse_steps() -> Vec<Step> {
    let mut steps = vec![Step {
        at_ms: 1_000,
        action: Action::CreateAgent {
            spec: serde_json::json!({
                "name": "pulser",
                "liveness": { "pulse_interval_ms": 2_000, "offline_after_misses": 3 },
            }),
        },
    }];
    let mut at_ms = MINUTE_MS;
    while at_ms < SAFETY_MS {
        steps.push(Step {
            at_ms,
            action: Action::Pulse {
                agent: "pulser".into(),
            },
        });
        at_ms += 2_000;
    }
    steps
}

#[test]
fn pulse_loss_drops_pulses_at_their_source_and_the_agent_goes_offline() {
    use vigil::engine::event::EventKind;
    let rates = once(FaultKind::PulseLoss);
    let (seed, _) = seed_where(
        &rates,
        |f| matches!(f, Fault::PulseLoss { loss_permille, duration_ms } if *loss_permille >= 700 && *duration_ms >= MINUTE_MS),
    );
    let without = run_steps(seed, Vec::new(), 0, pulse_steps());
    let with = run_steps(seed, rates, 0, pulse_steps());
    let answered = |result: &RunResult| {
        result
            .records
            .iter()
            .filter(|r| matches!(r.event, TraceEvent::AckedPulse { .. }))
            .count()
    };
    // Offline marks while the agent still pulses (after the safety phase it stops for good).
    let offline = |result: &RunResult| {
        result
            .records
            .iter()
            .filter(|r| {
                r.t_ms < SAFETY_MS
                    && matches!(&r.event, TraceEvent::Committed { event } if matches!(event.kind, EventKind::AgentOffline { .. }))
            })
            .count()
    };
    assert!(
        answered(&with) < answered(&without),
        "{} vs {}",
        answered(&with),
        answered(&without)
    );
    assert_eq!(offline(&without), 0);
    assert!(
        offline(&with) > 0,
        "the silence the loss made was never judged"
    );
}

#[test]
fn a_clock_skew_window_sets_the_wall_clock_off_and_then_right() {
    let rates = once(FaultKind::ClockSkew);
    let (seed, injection) = seed_where(
        &rates,
        |f| matches!(f, Fault::ClockSkew { skew_ms, duration_ms } if skew_ms.abs() >= 1_000 && *duration_ms >= 11 * MINUTE_MS && *duration_ms < 14 * MINUTE_MS),
    );
    let Fault::ClockSkew {
        skew_ms,
        duration_ms,
    } = injection.fault
    else {
        unreachable!()
    };
    let (without, with) = without_and_with(seed, rates);
    let offsets = wall_offsets(&without, &with);
    let ends_ms = injection.at_ms + duration_ms;
    for (t, offset) in &offsets {
        let expected = if (injection.at_ms..ends_ms).contains(t) {
            skew_ms
        } else {
            0
        };
        assert!(
            (offset - expected).abs() <= 50,
            "seed {seed} at {t} ms: wall clock {offset} ms off, expected {expected} (window {}..{ends_ms})",
            injection.at_ms
        );
    }
    assert!(
        offsets
            .iter()
            .any(|(t, _)| (injection.at_ms..ends_ms).contains(t))
            && offsets.iter().any(|(t, _)| *t >= ends_ms),
        "probes inside and after the window: {offsets:?}"
    );
}

/// The keyed wakeups of [`steps`] and one timer agent (a run a minute); both agents with a
/// 2-minute run timeout and a breaker that opens only after 100 failures in a row.
fn run_fault_steps() -> Vec<Step> {
    let mut steps = steps();
    let Action::CreateAgent { spec } = &mut steps[0].action else {
        unreachable!("the first step creates agent-0")
    };
    spec["limits"] = serde_json::json!({ "run_timeout_ms": 2 * MINUTE_MS });
    spec["breaker"] = serde_json::json!({ "failures_to_open": 100 });
    steps.insert(
        1,
        Step {
            at_ms: 1_000,
            action: Action::CreateAgent {
                spec: serde_json::json!({
                    "name": "ticker",
                    "heartbeat": { "interval_ms": MINUTE_MS },
                    "limits": { "run_timeout_ms": 2 * MINUTE_MS },
                    "breaker": { "failures_to_open": 100 },
                    "adapter": { "type": "scripted", "steps": [
                        { "duration_ms": 500, "outcome": "succeeded" },
                    ]},
                }),
            },
        },
    );
    steps
}

/// (virtual ms, status, detail) of every run that ended.
fn run_ends(result: &RunResult) -> Vec<(u64, vigil::engine::run::RunStatus, String)> {
    result
        .records
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::Committed { event } => match &event.kind {
                vigil::engine::event::EventKind::RunFinished { status, detail, .. } => {
                    Some((r.t_ms, *status, detail.clone()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[test]
fn a_run_failure_fails_the_runs_that_start_during_it() {
    use vigil::engine::run::RunStatus;
    use vigil_world::run_faults::FAILURE_DETAIL;
    let rates = once(FaultKind::RunFailure);
    // Long enough for many runs to start in it, short enough that they stay under 100 failures.
    let (seed, injection) = seed_where(&rates, |f| {
        (3 * MINUTE_MS..6 * MINUTE_MS).contains(&f.duration_ms())
    });
    let (from_ms, until_ms) = (injection.at_ms, injection.at_ms + injection.fault.duration_ms());
    let without = run_steps(seed, Vec::new(), 0, run_fault_steps());
    let with = run_steps(seed, rates, 0, run_fault_steps());
    assert!(failures(&without).is_empty(), "{:?}", failures(&without));
    let failed: Vec<_> = run_ends(&with)
        .into_iter()
        .filter(|(_, status, _)| *status == RunStatus::Failed)
        .collect();
    // Runs start every few seconds: many fail, each inside the window, as a failed tool call.
    assert!(failed.len() > 10, "{failed:?}");
    for (t_ms, _, detail) in &failed {
        assert_eq!(detail, FAILURE_DETAIL);
        assert!((from_ms..until_ms).contains(t_ms), "{t_ms} outside {from_ms}..{until_ms}");
    }
    // Outside the window runs succeed again.
    assert!(run_ends(&with)
        .iter()
        .any(|(t, status, _)| *t > until_ms && *status == RunStatus::Succeeded));
}

#[test]
fn a_run_hang_holds_runs_until_the_run_timeout_or_until_it_heals() {
    use vigil::engine::run::RunStatus;
    use vigil_world::run_faults::HANG_HEALED_DETAIL;
    let rates = once(FaultKind::RunHang);
    // Long enough for hung runs to reach the 2-minute run timeout, and to end one more by
    // healing.
    let (seed, injection) = seed_where(&rates, |f| f.duration_ms() >= 5 * MINUTE_MS);
    let until_ms = injection.at_ms + injection.fault.duration_ms();
    let without = run_steps(seed, Vec::new(), 0, run_fault_steps());
    let with = run_steps(seed, rates, 0, run_fault_steps());
    let not_succeeded = |result: &RunResult| {
        run_ends(result)
            .into_iter()
            .filter(|(_, status, _)| *status != RunStatus::Succeeded)
            .collect::<Vec<_>>()
    };
    assert!(not_succeeded(&without).is_empty());
    let ends = not_succeeded(&with);
    let timed_out = ends
        .iter()
        .filter(|(t, status, _)| *status == RunStatus::TimedOut && *t <= until_ms)
        .count();
    assert!(timed_out >= 2, "the executor's timeout ends hung runs: {ends:?}");
    let healed: Vec<_> = ends
        .iter()
        .filter(|(_, status, detail)| *status == RunStatus::Failed && detail == HANG_HEALED_DETAIL)
        .collect();
    assert!(!healed.is_empty(), "{ends:?}");
    assert!(healed.iter().all(|(t, _, _)| *t == until_ms), "{healed:?}");
    assert!(ends.iter().all(|(t, status, detail)| *status == RunStatus::TimedOut
        || detail == HANG_HEALED_DETAIL && *t == until_ms));
}
