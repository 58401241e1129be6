//! The write-ahead file through the production store on real files (ADR 0026): what a killed
//! process leaves (the files as the page cache holds them, copied while the store is still
//! open and never dropped), what a checkpoint and a clean drop leave, and a file that belongs to
//! another database.

use std::path::{Path, PathBuf};

use super::wal::{frames_in, WAL_CHECKPOINT_APPENDS, WAL_GROW_BYTES};
use super::{wal_path, Store, StoreError};
use crate::engine::agent::AgentSpec;
use crate::engine::event::Event;
use crate::engine::tenant::TokenHash;
use crate::engine::{Command, Engine};
use crate::io::storage::StorageLocation;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-wal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tenant's creation, then `agents` agents', one append each.
fn batches(agents: u32) -> Vec<Vec<Event>> {
    let mut engine = Engine::new();
    let mut decided = |command: Command| {
        let events = engine.decide(&command, 0).unwrap().events;
        events.iter().for_each(|event| engine.apply(event));
        events
    };
    let mut batches = vec![decided(Command::EnsureTenant {
        tenant: "t".into(),
        operator_token_hash: TokenHash::of("op"),
    })];
    for i in 0..agents {
        let name = format!("agent-{i}");
        batches.push(decided(Command::CreateAgent {
            tenant: "t".into(),
            spec: AgentSpec::with_interval(&name, Some(60_000)),
            token_hash: TokenHash::of(&name),
        }));
    }
    batches
}

fn open(db: &Path) -> Store {
    Store::open(StorageLocation::File(db.to_path_buf())).unwrap()
}

fn logged(store: &Store) -> Vec<Event> {
    store.events_after(0, super::EVENTS_PAGE_MAX).unwrap()
}

/// The frames the database's write-ahead file holds now, as an open would read them.
fn wal_frames(db: &Path) -> usize {
    frames_in(&std::fs::read(wal_path(db)).unwrap())
        .unwrap()
        .len()
}

/// Copies the database and its write-ahead file into `to`, as they are now.
fn copy_files(db: &Path, to: &Path) -> PathBuf {
    let copy = to.join("vigil.redb");
    std::fs::copy(db, &copy).unwrap();
    std::fs::copy(wal_path(db), wal_path(&copy)).unwrap();
    copy
}

#[test]
fn a_killed_process_leaves_its_appends_in_the_write_ahead_file_and_the_open_replays_them() {
    let dir = temp_dir("killed");
    let db = dir.join("vigil.redb");
    let batches = batches(3);
    let store = open(&db);
    batches
        .iter()
        .for_each(|batch| store.append(batch).unwrap());
    assert_eq!(wal_frames(&db), batches.len());
    let (killed, alone) = (temp_dir("killed-copy"), temp_dir("killed-db-alone"));
    let copy = copy_files(&db, &killed);
    let db_alone = alone.join("vigil.redb");
    std::fs::copy(&db, &db_alone).unwrap();
    // The process dies: no drop, so no checkpoint and no clean close of redb.
    std::mem::forget(store);

    let reopened = open(&copy);
    assert_eq!(logged(&reopened), batches.concat());
    assert_eq!(wal_frames(&copy), 0, "replayed, then started again");
    drop(reopened);
    assert_eq!(
        logged(&open(&copy)),
        batches.concat(),
        "and durable in the database"
    );
    // The database file alone did not hold them: the write-ahead file did.
    assert!(logged(&open(&db_alone)).len() < batches.concat().len());
    for dir in [dir, killed, alone] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn a_checkpoint_every_so_many_appends_and_a_clean_drop_empty_the_write_ahead_file() {
    let dir = temp_dir("checkpoint");
    let db = dir.join("vigil.redb");
    let batches = batches(WAL_CHECKPOINT_APPENDS);
    let store = open(&db);
    let (checkpointed, rest) = batches.split_at(WAL_CHECKPOINT_APPENDS as usize);
    for batch in &checkpointed[..checkpointed.len() - 1] {
        store.append(batch).unwrap();
    }
    assert_eq!(wal_frames(&db), checkpointed.len() - 1);
    store.append(checkpointed.last().unwrap()).unwrap();
    assert_eq!(wal_frames(&db), 0, "the checkpoint's append");
    store.append(&rest[0]).unwrap();
    assert_eq!(wal_frames(&db), 1);
    drop(store);
    assert_eq!(wal_frames(&db), 0, "the drop checkpoints");
    // What an older Vigil, which knows no write-ahead file, reads: the database alone.
    std::fs::remove_file(wal_path(&db)).unwrap();
    assert_eq!(logged(&open(&db)), batches.concat());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_write_ahead_file_of_another_database_is_refused_and_nothing_changes() {
    let dir = temp_dir("foreign");
    let (ours, theirs) = (dir.join("ours.redb"), dir.join("theirs.redb"));
    let batches = batches(4);
    drop({
        let store = open(&ours);
        store.append(&batches[0]).unwrap();
        store
    });
    let store = open(&theirs);
    batches
        .iter()
        .for_each(|batch| store.append(batch).unwrap());
    std::fs::copy(wal_path(&theirs), wal_path(&ours)).unwrap();
    std::mem::forget(store);
    // Their first frame (seq 1) is within our head and would be skipped, their second would
    // continue our log: drop both, so that their file skips past our head.
    let foreign = dir.join("foreign.redb");
    std::fs::copy(&ours, &foreign).unwrap();
    let mut wal = std::fs::read(wal_path(&ours)).unwrap();
    let first_frame = 8 + u32::from_le_bytes(wal[16..20].try_into().unwrap()) as usize;
    wal.drain(16..16 + first_frame);
    let second_frame = 8 + u32::from_le_bytes(wal[16..20].try_into().unwrap()) as usize;
    wal.drain(16..16 + second_frame);
    std::fs::write(wal_path(&foreign), &wal).unwrap();

    let refused = Store::open(StorageLocation::File(foreign.clone())).unwrap_err();
    let head = batches[0].len();
    let next = batches[..2].concat().len() + 1;
    match &refused {
        StoreError::Corrupt { seq, reason } => {
            assert_eq!(*seq, next as u64);
            assert!(reason.contains(&format!("ends at seq {head}")), "{reason}");
            assert!(reason.contains("-wal"), "{reason}");
        }
        other => panic!("refused for {other}"),
    }
    assert!(
        std::fs::read(wal_path(&foreign)).unwrap() == wal,
        "the write-ahead file is unchanged"
    );
    std::fs::remove_file(wal_path(&foreign)).unwrap();
    assert_eq!(
        logged(&open(&foreign)),
        batches[0],
        "the database holds its own log only"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_write_ahead_file_is_allocated_as_it_grows_and_keeps_its_length_through_a_checkpoint() {
    use std::os::unix::fs::MetadataExt;
    let dir = temp_dir("allocated");
    let db = dir.join("vigil.redb");
    let batches = batches(WAL_CHECKPOINT_APPENDS);
    let store = open(&db);
    store.append(&batches[0]).unwrap();
    let grown = std::fs::metadata(wal_path(&db)).unwrap();
    assert!(grown.len() >= WAL_GROW_BYTES, "grown ahead by a step");
    // st_blocks counts 512-byte units: a hole would leave fewer than the length.
    assert!(
        grown.blocks() * 512 >= grown.len(),
        "{} bytes long, {} allocated: the growth left a hole",
        grown.len(),
        grown.blocks() * 512
    );
    for batch in &batches[1..WAL_CHECKPOINT_APPENDS as usize] {
        store.append(batch).unwrap();
    }
    assert_eq!(wal_frames(&db), 0, "checkpointed");
    let after = std::fs::metadata(wal_path(&db)).unwrap();
    assert_eq!(after.len(), grown.len(), "the checkpoint cut nothing back");
    assert!(after.blocks() * 512 >= after.len());
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
}
