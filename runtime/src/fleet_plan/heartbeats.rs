//! The heartbeats' part of a fleet plan: the predicate heartbeats a file declares against those a
//! node holds. A heartbeat has no update: one whose definition differs is replaced (deleted and
//! created again, so its recorded state starts over). Undeclared ones are kept unless pruning.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::HeldAgent;
use crate::engine::agent::AgentId;
use crate::engine::predicate::HeartbeatSpec;
use crate::fleet::{Fleet, FleetHeartbeat};

/// A heartbeat a node holds, as much as a plan needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldHeartbeat {
    pub id: String,
    pub agent: AgentId,
    pub spec: HeartbeatSpec,
}

/// What applying does to one heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum HeartbeatAction {
    /// Declared, not held: created.
    Create,
    /// Declared and held with another definition: deleted and created again; `changed` names
    /// what differs (`agent`, `interval_sec`, `check`, `on_change`, `max_runtime_ms`).
    Replace { changed: Vec<&'static str> },
    /// Declared and held as declared.
    Unchanged,
    /// Held, not declared, and pruning was asked for: deleted.
    Delete,
    /// Held, not declared: kept.
    Undeclared,
}

/// One heartbeat's line of a plan. `agent` is the declared agent's name (none for a heartbeat
/// only the node holds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedHeartbeat {
    pub tenant: String,
    pub id: String,
    pub agent: Option<String>,
    #[serde(flatten)]
    pub action: HeartbeatAction,
}

/// The heartbeats' plan: the declared ones in file order, then the undeclared ones by tenant
/// and id. `agents` are the node's agents (to find a declared heartbeat's agent id); an agent
/// the file creates has none yet, and its heartbeats are created.
pub fn plan_heartbeats(
    fleet: &Fleet,
    agents: &BTreeMap<String, Vec<HeldAgent>>,
    held: &BTreeMap<String, Vec<HeldHeartbeat>>,
    prune: bool,
) -> Vec<PlannedHeartbeat> {
    let mut planned = Vec::new();
    for tenant in &fleet.tenants {
        let ids: BTreeMap<&str, AgentId> = agents
            .get(&tenant.name)
            .into_iter()
            .flatten()
            .map(|agent| (agent.spec.name.as_str(), agent.id))
            .collect();
        let by_id: BTreeMap<&str, &HeldHeartbeat> = held
            .get(&tenant.name)
            .into_iter()
            .flatten()
            .map(|heartbeat| (heartbeat.id.as_str(), heartbeat))
            .collect();
        let declared: BTreeSet<&str> = tenant.heartbeats.iter().map(|h| h.id.as_str()).collect();
        for heartbeat in &tenant.heartbeats {
            let held = by_id.get(heartbeat.id.as_str()).copied();
            let agent = ids.get(heartbeat.agent.as_str()).copied();
            planned.push(PlannedHeartbeat {
                tenant: tenant.name.clone(),
                id: heartbeat.id.clone(),
                agent: Some(heartbeat.agent.clone()),
                action: declared_action(heartbeat, agent, held),
            });
        }
        for (id, _) in by_id.iter().filter(|(id, _)| !declared.contains(*id)) {
            planned.push(PlannedHeartbeat {
                tenant: tenant.name.clone(),
                id: id.to_string(),
                agent: None,
                action: match prune {
                    true => HeartbeatAction::Delete,
                    false => HeartbeatAction::Undeclared,
                },
            });
        }
    }
    planned
}

fn declared_action(
    declared: &FleetHeartbeat,
    agent: Option<AgentId>,
    held: Option<&HeldHeartbeat>,
) -> HeartbeatAction {
    let Some(held) = held else {
        return HeartbeatAction::Create;
    };
    // An agent the file is about to create has no id yet: its heartbeat cannot be this one.
    let agent = agent.unwrap_or(AgentId(0));
    let (_, _, spec) = declared
        .request(agent)
        .validate()
        .expect("a fleet file's heartbeats are checked when it loads");
    let mut changed = Vec::new();
    if held.agent != agent {
        changed.push("agent");
    }
    if held.spec.interval_sec != spec.interval_sec {
        changed.push("interval_sec");
    }
    if held.spec.check != spec.check {
        changed.push("check");
    }
    if held.spec.on_change != spec.on_change {
        changed.push("on_change");
    }
    if held.spec.max_runtime_ms != spec.max_runtime_ms {
        changed.push("max_runtime_ms");
    }
    match changed.is_empty() {
        true => HeartbeatAction::Unchanged,
        false => HeartbeatAction::Replace { changed },
    }
}

/// The heartbeats' lines of a rendered plan, and their summary line (nothing when there are
/// none either side).
pub(super) fn render(planned: &[PlannedHeartbeat]) -> String {
    if planned.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let mut unchanged = 0;
    for heartbeat in planned {
        let who = format!("heartbeat {} (tenant {})", heartbeat.id, heartbeat.tenant);
        let of = heartbeat.agent.as_deref().unwrap_or("?");
        let line = match &heartbeat.action {
            HeartbeatAction::Create => format!("+ create {who} of agent {of}"),
            HeartbeatAction::Replace { changed } => format!(
                "~ replace {who} of agent {of}: {} (its recorded state starts over)",
                changed.join(", ")
            ),
            HeartbeatAction::Delete => format!("- delete {who}"),
            HeartbeatAction::Undeclared => {
                format!("? {who} is not in the file; kept (--prune deletes it)")
            }
            HeartbeatAction::Unchanged => {
                unchanged += 1;
                continue;
            }
        };
        out.push_str(&crate::cli::escape_controls(&line));
        out.push('\n');
    }
    let count = |f: fn(&HeartbeatAction) -> bool| planned.iter().filter(|p| f(&p.action)).count();
    out.push_str(&format!(
        "heartbeats: {} to create, {} to replace, {} to delete, {unchanged} unchanged\n",
        count(|a| matches!(a, HeartbeatAction::Create)),
        count(|a| matches!(a, HeartbeatAction::Replace { .. })),
        count(|a| matches!(a, HeartbeatAction::Delete)),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::predicate::{Check, OnChange};

    const FILE: &str = r#"
[[agents]]
name = "a"
[[agents]]
name = "b"

[[heartbeats]]
id = "same"
agent = "a"
interval_sec = 60
check = { kind = "sample" }

[[heartbeats]]
id = "moved"
agent = "b"
interval_sec = 2
check = { kind = "sample" }

[[heartbeats]]
id = "new"
agent = "a"
interval_sec = 60
check = { kind = "sample" }
"#;

    fn held(id: &str, agent: u64, interval_sec: u64) -> HeldHeartbeat {
        HeldHeartbeat {
            id: id.into(),
            agent: AgentId(agent),
            spec: HeartbeatSpec {
                interval_sec,
                check: Check::Sample,
                on_change: OnChange::Wake,
                max_runtime_ms: 5_000,
            },
        }
    }

    #[test]
    fn a_plan_creates_replaces_and_deletes_only_when_asked() {
        let fleet = Fleet::parse("fleet.toml", FILE).unwrap();
        let agents = BTreeMap::from([(
            "default".to_string(),
            vec![
                HeldAgent {
                    id: AgentId(1),
                    spec: crate::engine::agent::AgentSpec::with_interval("a", None),
                    terminated: false,
                },
                HeldAgent {
                    id: AgentId(2),
                    spec: crate::engine::agent::AgentSpec::with_interval("b", None),
                    terminated: false,
                },
            ],
        )]);
        // `moved` is held on agent 1 every 9 s; the file puts it on b every 2 s (raised to 5).
        let node = BTreeMap::from([(
            "default".to_string(),
            vec![
                held("same", 1, 60),
                held("moved", 1, 9),
                held("extra", 2, 60),
            ],
        )]);
        let kept = plan_heartbeats(&fleet, &agents, &node, false);
        let actions: Vec<(&str, &HeartbeatAction)> =
            kept.iter().map(|p| (p.id.as_str(), &p.action)).collect();
        assert_eq!(
            actions,
            [
                ("same", &HeartbeatAction::Unchanged),
                (
                    "moved",
                    &HeartbeatAction::Replace {
                        changed: vec!["agent", "interval_sec"]
                    }
                ),
                ("new", &HeartbeatAction::Create),
                ("extra", &HeartbeatAction::Undeclared),
            ]
        );
        let pruned = plan_heartbeats(&fleet, &agents, &node, true);
        assert_eq!(pruned[3].action, HeartbeatAction::Delete);
        let text = render(&kept);
        assert!(
            text.contains(
                "~ replace heartbeat moved (tenant default) of agent b: agent, interval_sec"
            ),
            "{text}"
        );
        assert!(
            text.ends_with("heartbeats: 1 to create, 1 to replace, 0 to delete, 1 unchanged\n"),
            "{text}"
        );
        assert_eq!(render(&[]), "");
    }
}
