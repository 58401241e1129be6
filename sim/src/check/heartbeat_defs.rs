//! Predicate heartbeat definitions at their edges (`POST /v1/heartbeats`), judged on the `edges`
//! workload's requests: `limits_as_documented` (33) says which fields lie outside their limits,
//! and `spec_shown_as_sent` (34) holds the heartbeat a 2xx answer shows to the definition sent,
//! with the documented clamp and defaults and a fresh state. Every number below is restated
//! from docs/api.md (`POST /v1/heartbeats` and the limits table), never taken from the runtime.

use serde_json::Value;

use super::{violation, Violation};

/// `id`: 1 to 64 characters of `a-z`, `0-9`, `_`, `-`.
pub const HEARTBEAT_ID_CHARS_MAX: usize = 64;
/// `interval_sec`: 1 to a week; under 5 it is raised to 5 and the effective one answered.
pub const HEARTBEAT_INTERVAL_SEC_MAX: u64 = 604_800;
pub const HEARTBEAT_INTERVAL_SEC_RAISED_TO: u64 = 5;
/// A command check's `command` (not blank) and each of its `args`, in bytes, and how many args.
pub const HEARTBEAT_COMMAND_BYTES_MAX: usize = 1_024;
pub const HEARTBEAT_ARG_BYTES_MAX: usize = 4_096;
pub const HEARTBEAT_ARGS_MAX: usize = 32;
/// `max_runtime_ms`: 10 to 5,000, the maximum being the default.
pub const HEARTBEAT_RUNTIME_MS_MIN: u64 = 10;
pub const HEARTBEAT_RUNTIME_MS_MAX: u64 = 5_000;
/// `on_change`: one of these, `wake` by default.
pub const HEARTBEAT_ON_CHANGE: &[&str] = &["wake", "event"];

/// The fields of a command-check heartbeat definition outside their documented limits (the
/// workload sends command checks only: a simulated node of `edges` runs no check it defines
/// within the scenario's hours, or one that fails, which changes no state).
pub fn judge_heartbeat(body: &Value) -> super::edges::Judgement {
    let mut invalid = super::edges::Judgement::new();
    let Some(object) = body.as_object() else {
        invalid.insert("body".into());
        return invalid;
    };
    for required in ["id", "agent", "interval_sec", "check"] {
        if !object.contains_key(required) {
            invalid.insert(required.into());
        }
    }
    for (key, value) in object {
        let ok = match key.as_str() {
            "id" => value.as_str().is_some_and(valid_id),
            "agent" => value.as_u64().is_some(),
            "interval_sec" => value
                .as_u64()
                .is_some_and(|s| (1..=HEARTBEAT_INTERVAL_SEC_MAX).contains(&s)),
            "check" => {
                judge_command_check(value, &mut invalid);
                true
            }
            "on_change" => value
                .as_str()
                .is_some_and(|c| HEARTBEAT_ON_CHANGE.contains(&c)),
            "max_runtime_ms" => {
                value.is_null()
                    || value.as_u64().is_some_and(|ms| {
                        (HEARTBEAT_RUNTIME_MS_MIN..=HEARTBEAT_RUNTIME_MS_MAX).contains(&ms)
                    })
            }
            _ => false,
        };
        if !ok {
            invalid.insert(key.clone());
        }
    }
    invalid
}

fn valid_id(id: &str) -> bool {
    (1..=HEARTBEAT_ID_CHARS_MAX).contains(&id.chars().count())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// A command check's fields outside their limits, named `check.<field>`.
fn judge_command_check(check: &Value, invalid: &mut super::edges::Judgement) {
    let Some(object) = check.as_object() else {
        invalid.insert("check".into());
        return;
    };
    if object.get("kind") != Some(&Value::from("command")) {
        invalid.insert("check".into());
        return;
    }
    let command_ok = object["command"]
        .as_str()
        .is_some_and(|c| !c.trim().is_empty() && c.len() <= HEARTBEAT_COMMAND_BYTES_MAX);
    if !command_ok {
        invalid.insert("check.command".into());
    }
    if let Some(args) = object.get("args") {
        let ok = args.as_array().is_some_and(|args| {
            args.len() <= HEARTBEAT_ARGS_MAX
                && args.iter().all(|arg| {
                    arg.as_str()
                        .is_some_and(|arg| arg.len() <= HEARTBEAT_ARG_BYTES_MAX)
                })
        });
        if !ok {
            invalid.insert("check.args".into());
        }
    }
    if object
        .keys()
        .any(|k| !["kind", "command", "args"].contains(&k.as_str()))
    {
        invalid.insert("check".into());
    }
}

/// Invariant 34 for a heartbeat a 2xx answer showed: the definition `sent` (within its limits),
/// with `interval_sec` raised to 5 when under it, `on_change` `wake` and `max_runtime_ms` 5,000
/// when not given, the check as sent (no `args` shown when none were sent), and a fresh state:
/// nothing observed, no transition, and emission not paused (no transition has found its runs
/// at the cap).
pub fn judge_shown(sent: &Value, shown: &Value) -> Result<(), Violation> {
    let interval = sent["interval_sec"].as_u64().unwrap_or_default();
    let mut check = sent["check"].clone();
    if check["args"].as_array().is_some_and(Vec::is_empty) {
        check.as_object_mut().map(|c| c.remove("args"));
    }
    let expected = [
        ("id", sent["id"].clone()),
        ("agent", sent["agent"].clone()),
        (
            "interval_sec",
            Value::from(interval.max(HEARTBEAT_INTERVAL_SEC_RAISED_TO)),
        ),
        ("check", check),
        (
            "on_change",
            sent.get("on_change").cloned().unwrap_or("wake".into()),
        ),
        (
            "max_runtime_ms",
            match &sent["max_runtime_ms"] {
                Value::Null => Value::from(HEARTBEAT_RUNTIME_MS_MAX),
                given => given.clone(),
            },
        ),
        ("state", Value::Null),
        ("emission_paused", Value::Bool(false)),
        ("transitions", Value::from(0)),
    ];
    for (field, value) in expected {
        if shown[field] != value {
            return violation(
                "spec_shown_as_sent",
                format!(
                    "heartbeat {} was defined as {sent}, so its answer should show {field} {value}; it showed {}",
                    sent["id"], shown[field]
                ),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn definition() -> Value {
        json!({"id": "hb-1", "agent": 3, "interval_sec": 60,
               "check": {"kind": "command", "command": "mail-count", "args": ["--unread"]}})
    }

    fn with(path: &[&str], value: Value) -> Value {
        let mut body = definition();
        let mut at = &mut body;
        for key in &path[..path.len() - 1] {
            at = &mut at[*key];
        }
        at[path[path.len() - 1]] = value;
        body
    }

    #[test]
    fn definitions_are_judged_at_their_edges() {
        assert!(judge_heartbeat(&definition()).is_empty());
        let edge = |path: &[&str], within: Value, past: Value, field: &str| {
            assert!(
                judge_heartbeat(&with(path, within.clone())).is_empty(),
                "{within}"
            );
            let judged = judge_heartbeat(&with(path, past.clone()));
            assert_eq!(judged, [field.to_string()].into(), "{past}");
        };
        edge(&["id"], json!("a".repeat(64)), json!("a".repeat(65)), "id");
        edge(&["id"], json!("a-b_9"), json!("A"), "id");
        edge(&["interval_sec"], json!(1), json!(0), "interval_sec");
        edge(
            &["interval_sec"],
            json!(604_800),
            json!(604_801),
            "interval_sec",
        );
        let command = ["check", "command"];
        edge(
            &command,
            json!("c".repeat(1_024)),
            json!("c".repeat(1_025)),
            "check.command",
        );
        edge(&command, json!("c"), json!("  "), "check.command");
        let args = ["check", "args"];
        edge(
            &args,
            json!(vec!["a"; 32]),
            json!(vec!["a"; 33]),
            "check.args",
        );
        edge(
            &args,
            json!(["a".repeat(4_096)]),
            json!(["a".repeat(4_097)]),
            "check.args",
        );
        edge(&["max_runtime_ms"], json!(10), json!(9), "max_runtime_ms");
        edge(
            &["max_runtime_ms"],
            json!(5_000),
            json!(5_001),
            "max_runtime_ms",
        );
        edge(
            &["on_change"],
            json!("event"),
            json!("sometimes"),
            "on_change",
        );
        let unknown = judge_heartbeat(&with(&["colour"], json!("red")));
        assert_eq!(unknown, ["colour".to_string()].into());
        let mut missing = definition();
        missing.as_object_mut().expect("an object").remove("check");
        assert_eq!(judge_heartbeat(&missing), ["check".to_string()].into());
    }

    #[test]
    fn a_heartbeat_shown_otherwise_than_defined_is_reported() {
        let sent = with(&["interval_sec"], json!(3));
        let shown = json!({"id": "hb-1", "agent": 3, "interval_sec": 5,
            "check": {"kind": "command", "command": "mail-count", "args": ["--unread"]},
            "on_change": "wake", "max_runtime_ms": 5000, "state": null,
            "emission_paused": false, "transitions": 0, "created_at_ms": 1, "changed_at_ms": null});
        assert_eq!(judge_shown(&sent, &shown), Ok(()));
        for (field, wrong) in [
            ("interval_sec", json!(3)),
            ("max_runtime_ms", json!(4_999)),
            ("emission_paused", json!(true)),
            ("on_change", json!("event")),
        ] {
            let mut broken = shown.clone();
            broken[field] = wrong;
            let error = judge_shown(&sent, &broken).expect_err(field);
            assert_eq!(error.invariant, "spec_shown_as_sent");
        }
    }
}
