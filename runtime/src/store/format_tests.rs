//! The store's refusals: a database of a newer or unknown format is refused at open and left
//! untouched; a record that cannot be replayed stops recovery with a message naming its event;
//! a database from before formats were recorded reads as format 1.

use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, ReadableTable};
use serde_json::Value;

use super::{record, Store, StoreError, EVENTS, FORMAT_KEY, META};
use crate::engine::agent::AgentSpec;
use crate::engine::daily_cap::LocalDay;
use crate::engine::event::Event;
use crate::engine::tenant::TokenHash;
use crate::engine::{Command, Engine};
use crate::io::storage::StorageLocation;

fn fresh_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-format-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("vigil.redb")
}

/// The events of a tenant, an agent in Paris on a timer, and its first fire.
fn some_events() -> Vec<Event> {
    let mut engine = Engine::new();
    let mut all = Vec::new();
    let mut spec = AgentSpec::with_interval("a", Some(60_000));
    spec.time_zone = "Europe/Paris".into();
    let commands = [
        (
            Command::EnsureTenant {
                tenant: "t".into(),
                operator_token_hash: TokenHash::of("op"),
            },
            1_000,
        ),
        (
            Command::CreateAgent {
                tenant: "t".into(),
                spec,
                token_hash: TokenHash::of("a"),
            },
            1_000,
        ),
        (Command::FireDueTimers, 120_000),
    ];
    for (command, now) in commands {
        let events = engine.decide(&command, now).unwrap().events;
        events.iter().for_each(|e| engine.apply(e));
        all.extend(events);
    }
    all
}

/// A database holding [`some_events`], closed.
fn database(name: &str) -> PathBuf {
    let path = fresh_path(name);
    let store = Store::open(StorageLocation::File(path.clone())).unwrap();
    store.append(&some_events()).unwrap();
    path
}

fn set_format(path: &Path, format: u64) {
    let db = redb::Database::open(path).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(META)
        .unwrap()
        .insert(FORMAT_KEY, format)
        .unwrap();
    tx.commit().unwrap();
}

/// Replaces the stored record `seq` with `edit` applied to its JSON (or with raw `bytes`).
fn rewrite(path: &Path, seq: u64, edit: impl FnOnce(&mut Value)) {
    let db = redb::Database::open(path).unwrap();
    let mut json: Value = {
        let tx = db.begin_read().unwrap();
        let table = tx.open_table(EVENTS).unwrap();
        let bytes = table.get(seq).unwrap().unwrap().value().to_vec();
        serde_json::from_slice(&bytes).unwrap()
    };
    edit(&mut json);
    overwrite(db, seq, &serde_json::to_vec(&json).unwrap());
}

fn overwrite(db: redb::Database, seq: u64, bytes: &[u8]) {
    let tx = db.begin_write().unwrap();
    tx.open_table(EVENTS).unwrap().insert(seq, bytes).unwrap();
    tx.commit().unwrap();
}

fn seq_of(type_name: &str) -> u64 {
    some_events()
        .iter()
        .find(|e| e.kind.type_name() == type_name)
        .unwrap()
        .seq
}

fn recovery_error(path: &Path) -> StoreError {
    let store = Store::open(StorageLocation::File(path.to_path_buf())).unwrap();
    store
        .recover()
        .expect_err("recovery must refuse the record")
}

#[test]
fn a_database_of_a_newer_format_is_refused_at_open_and_left_unchanged() {
    let path = database("newer");
    set_format(&path, record::FORMAT_VERSION + 1);
    let before = contents(&path);
    let error = Store::open(StorageLocation::File(path.clone())).unwrap_err();
    assert!(
        matches!(error, StoreError::NewerFormat { found, supported }
            if found == record::FORMAT_VERSION + 1 && supported == record::FORMAT_VERSION),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("newer Vigil"), "{message}");
    assert!(message.contains("was not changed"), "{message}");
    // redb itself marks a file open in its header; what the database holds must not change.
    assert!(
        contents(&path) == before,
        "the refused open changed the database"
    );
}

/// The recorded format and every stored record.
fn contents(path: &Path) -> (Option<u64>, Vec<(u64, Vec<u8>)>) {
    let db = redb::Database::open(path).unwrap();
    let tx = db.begin_read().unwrap();
    let format = tx
        .open_table(META)
        .unwrap()
        .get(FORMAT_KEY)
        .unwrap()
        .map(|v| v.value());
    let records = tx
        .open_table(EVENTS)
        .unwrap()
        .iter()
        .unwrap()
        .map(|entry| {
            let (key, value) = entry.unwrap();
            (key.value(), value.value().to_vec())
        })
        .collect();
    (format, records)
}

#[test]
fn a_database_recording_format_zero_is_refused() {
    let path = database("zero");
    set_format(&path, 0);
    let error = Store::open(StorageLocation::File(path)).unwrap_err();
    assert!(
        matches!(error, StoreError::UnknownFormat { found: 0 }),
        "{error:?}"
    );
}

#[test]
fn a_new_database_records_the_current_format() {
    let path = fresh_path("new");
    let store = Store::open(StorageLocation::File(path.clone())).unwrap();
    assert_eq!(store.format(), record::FORMAT_VERSION);
    drop(store);
    let db = redb::Database::open(&path).unwrap();
    let tx = db.begin_read().unwrap();
    let meta = tx.open_table(META).unwrap();
    assert_eq!(
        meta.get(FORMAT_KEY).unwrap().map(|v| v.value()),
        Some(record::FORMAT_VERSION)
    );
}

#[test]
fn a_database_from_before_formats_were_recorded_reads_as_format_1() {
    // Written the way the log was before the format was recorded: the engine's own JSON, and
    // no meta table.
    let path = fresh_path("unrecorded");
    let events = some_events();
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut table = tx.open_table(EVENTS).unwrap();
            for event in &events {
                let bytes = serde_json::to_vec(event).unwrap();
                table.insert(event.seq, bytes.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let store = Store::open(StorageLocation::File(path.clone())).unwrap();
    assert_eq!(store.found_format(), 1);
    assert_eq!(store.format(), record::FORMAT_VERSION);
    let mut engine = Engine::new();
    events.iter().for_each(|e| engine.apply(e));
    assert_eq!(store.recover().unwrap(), engine);
}

#[test]
fn a_record_that_is_not_json_fails_recovery_naming_its_seq() {
    let path = database("garbage");
    overwrite(
        redb::Database::open(&path).unwrap(),
        2,
        b"\x00\x01 not a record",
    );
    let error = recovery_error(&path);
    assert!(
        matches!(error, StoreError::Corrupt { seq: 2, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("seq 2"), "{error}");
}

#[test]
fn a_record_missing_a_field_fails_recovery_naming_its_event() {
    let path = database("missing");
    let seq = seq_of("timer_fired");
    rewrite(&path, seq, |json| {
        json.as_object_mut().unwrap().remove("due_at_ms");
    });
    let message = recovery_error(&path).to_string();
    assert!(
        message.contains(&format!("event {seq} (timer_fired)")) && message.contains("due_at_ms"),
        "{message}"
    );
}

#[test]
fn an_unknown_time_zone_fails_recovery_naming_its_event() {
    let path = database("tz");
    let seq = seq_of("agent_created");
    rewrite(&path, seq, |json| {
        json["spec"]["time_zone"] = "Mars/Olympus_Mons".into();
    });
    let error = recovery_error(&path);
    assert!(
        matches!(&error, StoreError::BadRecord { seq: s, event_type, reason }
            if *s == seq && event_type == "agent_created"
                && reason.contains("spec.time_zone") && reason.contains("Mars/Olympus_Mons")),
        "{error:?}"
    );
}

#[test]
fn an_instant_past_the_calendars_end_fails_recovery_naming_its_event() {
    let path = database("instant");
    let seq = seq_of("timer_fired");
    rewrite(&path, seq, |json| {
        json["next_fire_at_ms"] = (record::current::INSTANT_MS_MAX + 1).into();
    });
    let message = recovery_error(&path).to_string();
    assert!(
        message.contains(&format!("event {seq} (timer_fired)"))
            && message.contains("next_fire_at_ms"),
        "{message}"
    );
}

#[test]
fn the_latest_instant_a_record_may_hold_has_a_local_day_in_every_time_zone() {
    // The offsets at both ends of the world, and a zone with daylight saving.
    for zone in [
        "UTC",
        "Pacific/Kiritimati",
        "Etc/GMT-14",
        "Etc/GMT+12",
        "America/Los_Angeles",
    ] {
        LocalDay::of(record::current::INSTANT_MS_MAX, zone);
    }
}

#[test]
fn an_instant_at_the_calendars_end_is_read() {
    let path = database("instant-max");
    let seq = seq_of("timer_fired");
    rewrite(&path, seq, |json| {
        json["next_fire_at_ms"] = record::current::INSTANT_MS_MAX.into();
    });
    let store = Store::open(StorageLocation::File(path)).unwrap();
    let engine = store
        .recover()
        .expect("the last representable instant is a valid one");
    let agent = engine.agents().next().unwrap();
    assert_eq!(agent.next_fire_at_ms, Some(record::current::INSTANT_MS_MAX));
}

#[test]
fn an_event_the_engine_cannot_fold_in_fails_recovery_naming_it() {
    // A well-formed record about an agent that does not exist: the engine panics on it, and
    // recovery must turn that into an error naming the event.
    let path = database("unknown-agent");
    let seq = seq_of("timer_fired");
    rewrite(&path, seq, |json| {
        json["agent"] = 999.into();
    });
    let message = recovery_error(&path).to_string();
    assert!(
        message.contains(&format!("event {seq} (timer_fired)")) && message.contains("999"),
        "{message}"
    );
}
