//! A power cut at every disk operation of a snapshot loses nothing (ADR 0016): the runtime's
//! own store on the simulated disk, the power cut after the n-th operation of a snapshot's
//! write for every n until one completes, each under every crash profile's seeds. After each
//! cut the reopened store recovers exactly the engine whose events were durable, and the
//! current snapshot is the previous one or the new one, whole.

use std::sync::Arc;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use vigil::engine::agent::{AgentId, AgentSpec};
use vigil::engine::tenant::TokenHash;
use vigil::engine::wakeup::{WakeupRequest, WakeupSource};
use vigil::engine::{Command, Engine};
use vigil::store::Store;

use crate::disk::SimDisk;

/// Agents in the fleet, and per snapshot transaction: four chunks, then the manifest's.
const AGENTS: u64 = 40;
const CHUNK_AGENTS: usize = 10;
/// Crash seeds per cut point: each draws what of the unsynced data lands.
const SEEDS_PER_CUT: u64 = 3;

fn open(disk: &Arc<SimDisk>) -> Store {
    Store::open(disk.storage()).expect("the disk opens")
}

fn run(engine: &mut Engine, store: &Store, command: Command, now_ms: u64) {
    let events = engine.decide(&command, now_ms).expect("accepted").events;
    store.append(&events).expect("appended");
    events.iter().for_each(|event| engine.apply(event));
}

/// A fleet, a first snapshot, then more events: the state a second snapshot will capture.
fn prepared(disk: &Arc<SimDisk>) -> (Engine, u64) {
    let store = open(disk);
    let mut engine = Engine::new();
    let tenant = Command::EnsureTenant {
        tenant: "t".into(),
        operator_token_hash: TokenHash::of("op"),
    };
    run(&mut engine, &store, tenant, 0);
    for i in 0..AGENTS {
        let name = format!("agent-{i}");
        let create = Command::CreateAgent {
            tenant: "t".into(),
            spec: AgentSpec::with_interval(&name, Some(60_000)),
            token_hash: TokenHash::of(&name),
        };
        run(&mut engine, &store, create, 0);
    }
    let first = store
        .write_snapshot(&engine.image())
        .expect("first snapshot");
    for i in 1..=AGENTS {
        let wake = Command::Wake {
            agent: AgentId(i),
            request: WakeupRequest::new(WakeupSource::OnDemand, "hello"),
        };
        run(&mut engine, &store, wake, 1_000);
    }
    (engine, first.seq)
}

#[test]
fn a_power_cut_at_any_operation_of_a_snapshot_loses_nothing() {
    let base = Arc::new(SimDisk::new(false));
    let (engine, first_seq) = prepared(&base);
    let mut completed = false;
    let mut cuts = 0;
    for after_ops in 1.. {
        for seed in 0..SEEDS_PER_CUT {
            let disk = Arc::new(base.duplicate());
            let store = open(&disk);
            disk.arm_power_cut(after_ops, ChaCha8Rng::seed_from_u64(seed));
            let written = store.write_snapshot_in_chunks(&engine.image(), CHUNK_AGENTS);
            drop(store);
            let cut = disk.take_power_cut().is_some();
            if !cut {
                assert!(written.is_ok(), "no cut, so the snapshot is written");
                completed = true;
                break;
            }
            cuts += 1;
            let store = open(&disk);
            let current = store.current_snapshot_seq().expect("readable");
            assert!(
                current == Some(first_seq) || current == Some(engine.last_seq()),
                "cut after {after_ops} operations (seed {seed}): the current snapshot is the \
                 old or the new one, not {current:?}"
            );
            assert_eq!(
                store.recover().expect("recovers"),
                engine,
                "cut after {after_ops} operations (seed {seed}): the snapshot and the log's \
                 tail rebuild the engine whose events were durable"
            );
        }
        if completed {
            break;
        }
    }
    assert!(
        cuts > 10,
        "the snapshot took several operations to write: {cuts} cuts"
    );
}
