//! A power cut at each disk operation of a run of appends, through the production store on the
//! simulated disk: each append's write-ahead frame and its sync, redb's commit that does not
//! sync, and the checkpoint (a durable redb commit, then the file's next generation) after
//! `WAL_CHECKPOINT_APPENDS` appends. Whatever the cut and whatever of the unsynced data lands,
//! the log that reopens holds every append that returned Ok, the one cut short whole or not at
//! all, and nothing else; and the reopened store appends again.

use std::sync::Arc;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use vigil::engine::agent::AgentSpec;
use vigil::engine::event::Event;
use vigil::engine::tenant::TokenHash;
use vigil::engine::{Command, Engine};
use vigil::store::wal::WAL_CHECKPOINT_APPENDS;
use vigil::store::Store;

use crate::disk::SimDisk;

/// Crash seeds per cut point: each draws what of the unsynced data lands.
const SEEDS_PER_CUT: u64 = 2;

/// Appends past one checkpoint, each one command's events (a tenant, then agents).
fn batches() -> Vec<Vec<Event>> {
    let mut engine = Engine::new();
    let mut decided = |command: Command| {
        let events = engine.decide(&command, 0).expect("accepted").events;
        events.iter().for_each(|event| engine.apply(event));
        events
    };
    let mut batches = vec![decided(Command::EnsureTenant {
        tenant: "t".into(),
        operator_token_hash: TokenHash::of("op"),
    })];
    for i in 0..WAL_CHECKPOINT_APPENDS + 4 {
        let name = format!("agent-{i}");
        batches.push(decided(Command::CreateAgent {
            tenant: "t".into(),
            spec: AgentSpec::with_interval(&name, Some(60_000)),
            token_hash: TokenHash::of(&name),
        }));
    }
    batches
}

fn logged(store: &Store) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        let after = events.last().map_or(0, |event: &Event| event.seq);
        let page = store.events_after(after, 1_000).expect("readable");
        if page.is_empty() {
            return events;
        }
        events.extend(page);
    }
}

/// Appends `batches` until one fails; answers how many returned Ok.
fn append_until_cut(store: &Store, batches: &[Vec<Event>]) -> usize {
    batches
        .iter()
        .take_while(|batch| store.append(batch).is_ok())
        .count()
}

#[test]
fn a_power_cut_at_any_operation_of_the_appends_keeps_each_acknowledged_batch_whole() {
    let batches = batches();
    let all: Vec<Event> = batches.concat();
    let mut cuts = 0;
    'cuts: for after_ops in 1.. {
        for seed in 0..SEEDS_PER_CUT {
            let disk = Arc::new(SimDisk::new(false));
            let store = Store::open(disk.storage()).expect("a new disk opens");
            disk.arm_power_cut(after_ops, ChaCha8Rng::seed_from_u64(seed));
            let acked = append_until_cut(&store, &batches);
            drop(store);
            if disk.take_power_cut().is_none() {
                assert_eq!(acked, batches.len(), "no cut, so every append went through");
                break 'cuts;
            }
            cuts += 1;
            let store = Store::open(disk.storage()).expect("the cut disk opens");
            let kept = logged(&store);
            let acked_len: usize = batches[..acked].iter().map(Vec::len).sum();
            // Every append went through when the cut falls in the checkpoint at the drop.
            let cut_len = acked_len + batches.get(acked).map_or(0, Vec::len);
            assert!(
                kept.len() == acked_len || kept.len() == cut_len,
                "cut after {after_ops} operations (seed {seed}): {} events kept, {acked_len} \
                 acknowledged, {cut_len} with the batch the cut fell in",
                kept.len()
            );
            assert_eq!(
                kept[..],
                all[..kept.len()],
                "cut after {after_ops} (seed {seed})"
            );
            let next = batches
                .iter()
                .position(|b| b[0].seq == kept.len() as u64 + 1);
            if let Some(next) = next {
                store
                    .append(&batches[next])
                    .expect("the reopened store appends");
            }
        }
    }
    assert!(
        cuts as u32 > 2 * WAL_CHECKPOINT_APPENDS,
        "every append took operations to write, the checkpoint too: {cuts} cuts"
    );
}

#[test]
fn a_crash_between_checkpoints_loses_no_acknowledged_batch() {
    let batches = batches();
    for seed in 0..8 {
        let disk = Arc::new(SimDisk::new(false));
        let store = Store::open(disk.storage()).expect("a new disk opens");
        let some = 1 + (seed as usize * 17) % (batches.len() - 1);
        assert_eq!(append_until_cut(&store, &batches[..some]), some);
        // The process dies with the store: no drop, so no checkpoint at close.
        std::mem::forget(store);
        let report = disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
        let store = Store::open(disk.storage()).expect("the crashed disk opens");
        assert_eq!(
            logged(&store),
            batches[..some].concat(),
            "seed {seed}: {some} batches acknowledged, crash {report:?}"
        );
    }
}
