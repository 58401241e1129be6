//! Changing an agent's spec (`PATCH /v1/agents/{id}`, `vigil fleet apply`) and what the change
//! does to the state the engine keeps beside the spec.
//!
//! A change is decided against the spec held when the writer decides it (never one the caller
//! read earlier), so two changes sent at once both land. The new spec is validated exactly as a
//! create is. What it does (docs/api.md, "Changing an agent"):
//! - a new `heartbeat.interval_ms` re-anchors the timer grid: the next slot is one new interval
//!   (plus the agent's jitter) after the change, none when the timer was removed; an unchanged
//!   interval keeps the grid;
//! - a new `heartbeat.idle_after_ms` restarts the idle chamber from the change;
//! - queued runs stay queued and start with the new spec; a running run ends with the spec it
//!   started with;
//! - a pause, the day's cap count and spend, the breaker's state and a cooldown in progress are
//!   kept; new limits apply from the next decision that reads them.

use std::sync::Arc;

use serde_json::Value;

use super::agent::FieldError;
use super::agent::{Agent, AgentId, AgentSpec};
use super::schedule;

/// Most field paths an `agent_updated` event lists; a change touching more lists the first ones
/// (the event's `spec` is the whole new spec either way).
pub const CHANGED_FIELDS_MAX: usize = 64;

/// How a change gives the new spec.
#[derive(Debug, Clone, PartialEq)]
pub enum SpecChange {
    /// A JSON merge patch (RFC 7396) on the spec as the API shows it: objects merge key by key,
    /// `null` removes a key (its default applies again), anything else replaces.
    Merge(Value),
    /// The whole new spec (a fleet file's declaration).
    Replace(Box<AgentSpec>),
}

// A patch is JSON from a request: never a float NaN, so equality is an equivalence.
impl Eq for SpecChange {}

/// The spec `change` makes of `current`, validated like a create's.
pub fn changed_spec(current: &AgentSpec, change: &SpecChange) -> Result<AgentSpec, FieldError> {
    let spec = match change {
        SpecChange::Replace(spec) => (**spec).clone(),
        SpecChange::Merge(patch) => merged(current, patch)?,
    };
    spec.validate()?;
    Ok(spec)
}

fn merged(current: &AgentSpec, patch: &Value) -> Result<AgentSpec, FieldError> {
    if !patch.is_object() {
        return Err(FieldError::new(
            "body",
            "a change is a JSON object holding the spec fields to change (a JSON merge patch)",
        ));
    }
    let mut value = serde_json::to_value(current).expect("a spec serialises");
    merge_patch(&mut value, patch);
    serde_path_to_error::deserialize(value.clone()).map_err(|error| {
        let path = error.path().to_string();
        let message = error.inner().to_string();
        FieldError::new(refine_adapter_field(field_of(&path, &message), &value), message)
    })
}

/// The field a spec's parse error is about, made precise inside the adapter: adapters are told
/// apart by `type`, which hides the inner path from serde (a wrong type in
/// `adapter.timeout_sec` is reported on `adapter`). `spec` is the spec as sent; the adapter is
/// parsed again as the type it names, for the path.
pub fn refine_adapter_field(field: String, spec: &Value) -> String {
    if field != "adapter" {
        return field;
    }
    let adapter = &spec["adapter"];
    let mut fields = adapter.clone();
    let Some(kind) = fields
        .as_object_mut()
        .and_then(|f| f.remove("type"))
        .and_then(|t| t.as_str().map(str::to_string))
    else {
        return field;
    };
    use super::cli_spec::{CodingCliSpec, ProcessSpec, WebhookSpec};
    let inner = match kind.as_str() {
        "scripted" => inner_field::<super::agent::ScriptedSpec>(fields),
        "llm" => inner_field::<super::llm_spec::LlmSpec>(fields),
        "http" => inner_field::<WebhookSpec>(fields),
        // The child's fields are flattened into these, where serde keeps no path: read them
        // apart when the whole gives none.
        "process" => inner_field::<ProcessSpec>(fields.clone()).or_else(|| child_field(fields)),
        "claude_local" | "codex_local" => {
            inner_field::<CodingCliSpec>(fields.clone()).or_else(|| child_field(fields))
        }
        _ => None,
    };
    inner.map_or(field, |inner| format!("adapter.{inner}"))
}

/// The path of the first error in the child's own fields of an adapter (`ChildSpec`).
fn child_field(mut fields: Value) -> Option<String> {
    const CHILD: [&str; 5] = ["cwd", "env", "secret_env", "timeout_sec", "grace_sec"];
    fields
        .as_object_mut()?
        .retain(|key, _| CHILD.contains(&key.as_str()));
    inner_field::<super::cli_spec::ChildSpec>(fields)
}

/// The path of the first error parsing `fields` as `T`, if it fails.
fn inner_field<T: serde::de::DeserializeOwned>(fields: Value) -> Option<String> {
    let error = serde_path_to_error::deserialize::<_, T>(fields).err()?;
    let path = error.path().to_string();
    Some(field_of(&path, &error.inner().to_string())).filter(|f| f != "body")
}

/// RFC 7396: applies `patch` to `target`.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(changes) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let fields = target.as_object_mut().expect("made an object above");
    for (key, change) in changes {
        if change.is_null() {
            fields.remove(key);
        } else {
            merge_patch(fields.entry(key.clone()).or_insert(Value::Null), change);
        }
    }
}

/// The merge patch that turns `old` into `new` (both specs as JSON): what `vigil fleet apply`
/// sends to replace a spec through `PATCH`. A key `new` lacks, or holds as `null`, is removed
/// (its default applies, which for an optional field is that `null`).
pub fn patch_between(old: &Value, new: &Value) -> Value {
    let (Value::Object(old_fields), Value::Object(new_fields)) = (old, new) else {
        return new.clone();
    };
    let mut patch = serde_json::Map::new();
    for (key, before) in old_fields {
        let removed = new_fields.get(key).is_none_or(Value::is_null);
        if removed && !before.is_null() {
            patch.insert(key.clone(), Value::Null);
        }
    }
    for (key, after) in new_fields.iter().filter(|(_, v)| !v.is_null()) {
        match old_fields.get(key) {
            Some(before) if before == after => {}
            Some(before) if before.is_object() && after.is_object() => {
                patch.insert(key.clone(), patch_between(before, after));
            }
            _ => {
                patch.insert(key.clone(), after.clone());
            }
        }
    }
    Value::Object(patch)
}

/// The field a spec error is about: serde's path, or the name quoted in "unknown field `x`".
fn field_of(path: &str, message: &str) -> String {
    if !path.is_empty() && path != "." && path != "?" {
        return path.to_string();
    }
    message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("missing field `"))
        .and_then(|quoted| quoted.split('`').next())
        .unwrap_or("body")
        .to_string()
}

/// The dotted paths of the values that differ between `old` and `new` (objects compared key by
/// key, anything else whole), in key order, at most `CHANGED_FIELDS_MAX`.
pub fn changed_fields(old: &AgentSpec, new: &AgentSpec) -> Vec<String> {
    let old = serde_json::to_value(old).expect("a spec serialises");
    let new = serde_json::to_value(new).expect("a spec serialises");
    let mut paths = Vec::new();
    diff("", &old, &new, &mut paths);
    paths.truncate(CHANGED_FIELDS_MAX);
    paths
}

fn diff(at: &str, old: &Value, new: &Value, paths: &mut Vec<String>) {
    if old == new || paths.len() >= CHANGED_FIELDS_MAX {
        return;
    }
    let (Value::Object(old_fields), Value::Object(new_fields)) = (old, new) else {
        paths.push(at.to_string());
        return;
    };
    let keys: std::collections::BTreeSet<&String> =
        old_fields.keys().chain(new_fields.keys()).collect();
    for key in keys {
        let path = if at.is_empty() {
            key.clone()
        } else {
            format!("{at}.{key}")
        };
        let absent = Value::Null;
        let before = old_fields.get(key).unwrap_or(&absent);
        let after = new_fields.get(key).unwrap_or(&absent);
        diff(&path, before, after, paths);
    }
}

/// The first slot of a re-anchored timer grid for `agent` changed at `now_ms` to `new`; `None`
/// when the new spec has no timer. The grid is anchored at the change, or at the agent's latest
/// fired slot (`last_due_at_ms`) when the wall clock has gone back before it: a slot never fires
/// at or before one that already fired, across grids too (`timer_not_duplicated`).
pub fn first_fire_at_ms(
    agent: AgentId,
    new: &AgentSpec,
    now_ms: u64,
    last_due_at_ms: Option<u64>,
) -> Option<u64> {
    let anchor_ms = now_ms.max(last_due_at_ms.unwrap_or(0));
    new.heartbeat.interval_ms.map(|interval_ms| {
        anchor_ms
            .saturating_add(interval_ms)
            .saturating_add(schedule::jitter_ms(agent.0, interval_ms))
    })
}

/// Folds an `agent_updated` at `at_ms` into `agent`: the new spec and name, and the timer and
/// idle deadlines its heartbeat implies (see the module's list).
pub fn fold(agent: &mut Agent, spec: &AgentSpec, first_fire_at_ms: Option<u64>, at_ms: u64) {
    if spec.heartbeat.interval_ms != agent.spec.heartbeat.interval_ms {
        agent.next_fire_at_ms = first_fire_at_ms;
    }
    if spec.heartbeat.idle_after_ms != agent.spec.heartbeat.idle_after_ms {
        agent.next_idle_at_ms = spec
            .heartbeat
            .idle_after_ms
            .map(|after| at_ms.saturating_add(after));
    }
    agent.name = spec.name.clone();
    agent.spec = Arc::new(spec.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: Value) -> AgentSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_merge_patch_changes_only_what_it_names_and_null_restores_the_default() {
        let current = spec(
            json!({"name": "a", "heartbeat": {"interval_ms": 60_000}, "limits": {"daily_cap": 5}}),
        );
        let patch = json!({"heartbeat": {"idle_after_ms": 120_000}, "limits": {"daily_cap": null}});
        let new = changed_spec(&current, &SpecChange::Merge(patch)).unwrap();
        assert_eq!(new.heartbeat.interval_ms, Some(60_000));
        assert_eq!(new.heartbeat.idle_after_ms, Some(120_000));
        assert_eq!(new.limits, spec(json!({"name": "a"})).limits);
        assert_eq!(
            changed_fields(&current, &new),
            vec!["heartbeat.idle_after_ms", "limits.daily_cap"]
        );
    }

    #[test]
    fn a_patch_is_validated_like_a_create_and_names_the_field() {
        let current = spec(json!({"name": "a"}));
        let too_short = json!({"heartbeat": {"interval_ms": 1}});
        let error = changed_spec(&current, &SpecChange::Merge(too_short)).unwrap_err();
        assert_eq!(error.field, "heartbeat.interval_ms");
        let unknown = json!({"limits": {"daily_kap": 3}});
        let error = changed_spec(&current, &SpecChange::Merge(unknown)).unwrap_err();
        assert_eq!(error.field, "limits.daily_kap");
        assert!(error.message.contains("daily_kap"), "{}", error.message);
        let wrong_type = json!({"time_zone": 7});
        let error = changed_spec(&current, &SpecChange::Merge(wrong_type)).unwrap_err();
        assert_eq!(error.field, "time_zone");
        let not_an_object = json!(["name"]);
        let error = changed_spec(&current, &SpecChange::Merge(not_an_object)).unwrap_err();
        assert_eq!(error.field, "body");
    }

    #[test]
    fn the_patch_between_two_specs_makes_the_second_of_the_first() {
        let old = spec(json!({
            "name": "a",
            "heartbeat": {"interval_ms": 60_000, "idle_after_ms": 600_000},
            "limits": {"daily_cap": 5, "cooldown_ms": 1_000},
            "adapter": {"type": "scripted", "steps": [{"duration_ms": 10, "outcome": "failed"}]},
        }));
        let new = spec(json!({
            "name": "b",
            "heartbeat": {"interval_ms": 120_000},
            "time_zone": "Europe/Paris",
        }));
        for (from, to) in [(&old, &new), (&new, &old), (&old, &old)] {
            let patch = patch_between(
                &serde_json::to_value(from).unwrap(),
                &serde_json::to_value(to).unwrap(),
            );
            let made = changed_spec(from, &SpecChange::Merge(patch.clone())).unwrap();
            assert_eq!(&made, to, "patch {patch}");
        }
    }

    #[test]
    fn changed_fields_stop_at_their_limit() {
        let mut old = serde_json::Map::new();
        let mut new = serde_json::Map::new();
        for i in 0..CHANGED_FIELDS_MAX + 5 {
            old.insert(format!("k{i:03}"), json!(1));
            new.insert(format!("k{i:03}"), json!(2));
        }
        let mut paths = Vec::new();
        diff("", &Value::Object(old), &Value::Object(new), &mut paths);
        assert_eq!(paths.len(), CHANGED_FIELDS_MAX);
        assert_eq!(paths[0], "k000");
    }
}
