//! Every fault built after issue 2 takes effect: the same seed, with and without the fault,
//! shows a different observable behaviour (issue 5, "Must show"). A partition makes the
//! workload's requests in its window fail until it heals; a delay makes acknowledgements
//! arrive later; packet loss makes some of them arrive later; a storage I/O error or a full
//! disk makes the node stop itself, restart and recover everything acknowledged; the storage
//! operation filter decides which operation fails.
#![cfg(madsim)]

use std::collections::BTreeMap;
use std::time::Duration;

use vigil_faults::plan::{FaultKind, PERMILLE};
use vigil_faults::{plan, Fault, FaultRate, Injection, StorageFilter, StorageOps};
use vigil_scenarios::phases::{self, Setup};
use vigil_world::harness::{simulate, RunResult};
use vigil_world::trace::TraceEvent;
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
    let setup = Setup {
        scenario: "sim_faults",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates,
        downtime_ms_max: MINUTE_MS,
        skew_ms_max: 0,
        power_cut_wait_ms: MINUTE_MS,
        steps: steps(),
        probe_every_ms: 5 * MINUTE_MS,
        tail_every_ms: 5 * MINUTE_MS,
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

/// The causes of every `node_stopped` record, in order.
fn stops(result: &RunResult) -> Vec<String> {
    result
        .records
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::Fault { description } if description.starts_with("node_stopped") => {
                Some(description.clone())
            }
            _ => None,
        })
        .collect()
}

/// A node stop is followed by a restart and a recovery that holds every event it committed.
fn assert_stopped_and_recovered(result: &RunResult) {
    let at = result
        .records
        .iter()
        .position(|r| matches!(&r.event, TraceEvent::Fault { description } if description.starts_with("node_stopped")))
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
