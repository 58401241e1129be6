//! What applying a fleet file would do: the difference between the agents it declares and the
//! agents a node holds. One pure function, used by `vigil serve --fleet` (against the engine),
//! and by `vigil fleet plan|apply` (against the API's listing), so both always agree.
//!
//! The file is declarative for what it names: a declared agent that does not exist is created,
//! one whose spec differs is updated to the file's spec (the whole spec: a field left out of the
//! file takes its default again). An agent the file does not name is kept, and listed; it is
//! deleted only when asked (`--prune`). A declared agent that is terminated cannot be updated:
//! the plan says so (delete it, and the next apply re-creates it).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

mod heartbeats;

pub use heartbeats::{plan_heartbeats, HeartbeatAction, HeldHeartbeat, PlannedHeartbeat};

use crate::engine::agent::{AgentId, AgentSpec};
use crate::engine::agent_update::changed_fields;
use crate::fleet::Fleet;

/// An agent a node holds, as much as a plan needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldAgent {
    pub id: AgentId,
    pub spec: AgentSpec,
    pub terminated: bool,
}

/// What applying does to one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Declared, not held: created with the file's spec.
    Create { spec: Box<AgentSpec> },
    /// Declared and held with another spec: updated to the file's; `changed` its paths.
    Update {
        id: AgentId,
        changed: Vec<String>,
        spec: Box<AgentSpec>,
    },
    /// Declared and held with the same spec.
    Unchanged { id: AgentId },
    /// Declared, held, terminated: left alone (a terminated agent cannot change).
    Terminated { id: AgentId },
    /// Held, not declared, and pruning was asked for: deleted.
    Delete { id: AgentId },
    /// Held, not declared: kept.
    Undeclared { id: AgentId },
}

/// One agent's line of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Planned {
    pub tenant: String,
    pub name: String,
    #[serde(flatten)]
    pub action: Action,
}

/// The whole plan: the declared agents in file order, then the undeclared ones by tenant and
/// name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub agents: Vec<Planned>,
    /// The predicate heartbeats' plan (`plan_heartbeats`), declared then undeclared.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub heartbeats: Vec<PlannedHeartbeat>,
}

/// The plan that turns `held` (agents by tenant) into what `fleet` declares. Tenants the file
/// does not name are not looked at.
pub fn plan(fleet: &Fleet, held: &BTreeMap<String, Vec<HeldAgent>>, prune: bool) -> Plan {
    let mut agents = Vec::new();
    for tenant in &fleet.tenants {
        let none = Vec::new();
        let held_here = held.get(&tenant.name).unwrap_or(&none);
        let by_name: BTreeMap<&str, &HeldAgent> = held_here
            .iter()
            .map(|agent| (agent.spec.name.as_str(), agent))
            .collect();
        let declared: BTreeSet<&str> = tenant.agents.iter().map(|s| s.name.as_str()).collect();
        for spec in &tenant.agents {
            let action = declared_action(spec, by_name.get(spec.name.as_str()).copied());
            agents.push(planned(&tenant.name, &spec.name, action));
        }
        for (name, agent) in by_name.iter().filter(|(n, _)| !declared.contains(*n)) {
            let action = if prune {
                Action::Delete { id: agent.id }
            } else {
                Action::Undeclared { id: agent.id }
            };
            agents.push(planned(&tenant.name, name, action));
        }
    }
    Plan {
        agents,
        heartbeats: Vec::new(),
    }
}

fn planned(tenant: &str, name: &str, action: Action) -> Planned {
    Planned {
        tenant: tenant.to_string(),
        name: name.to_string(),
        action,
    }
}

fn declared_action(spec: &AgentSpec, held: Option<&HeldAgent>) -> Action {
    let Some(held) = held else {
        return Action::Create {
            spec: Box::new(spec.clone()),
        };
    };
    if held.terminated {
        return Action::Terminated { id: held.id };
    }
    if held.spec == *spec {
        return Action::Unchanged { id: held.id };
    }
    Action::Update {
        id: held.id,
        changed: changed_fields(&held.spec, spec),
        spec: Box::new(spec.clone()),
    }
}

impl Plan {
    /// Whether applying would change anything.
    pub fn changes_anything(&self) -> bool {
        let agents = self.agents.iter().any(|p| {
            matches!(
                p.action,
                Action::Create { .. } | Action::Update { .. } | Action::Delete { .. }
            )
        });
        let heartbeats = self.heartbeats.iter().any(|p| {
            matches!(
                p.action,
                HeartbeatAction::Create | HeartbeatAction::Replace { .. } | HeartbeatAction::Delete
            )
        });
        agents || heartbeats
    }

    /// The plan for a person: one line per agent that applying touches or leaves out, a count of
    /// those unchanged, and a closing summary.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut unchanged = 0;
        for planned in &self.agents {
            let who = format!("{} (tenant {})", planned.name, planned.tenant);
            let line = match &planned.action {
                Action::Create { .. } => format!("+ create {who}"),
                Action::Update { id, changed, .. } => {
                    format!("~ update {who}, id {id}: {}", changed.join(", "))
                }
                Action::Delete { id } => format!("- delete {who}, id {id}"),
                Action::Terminated { id } => format!(
                    "! {who}, id {id}, is terminated and cannot change; delete it (vigil agent delete {id}) and apply again to re-create it"
                ),
                Action::Undeclared { id } => format!(
                    "? {who}, id {id}, is not in the file; kept (--prune deletes it)"
                ),
                Action::Unchanged { .. } => {
                    unchanged += 1;
                    continue;
                }
            };
            out.push_str(&crate::cli::escape_controls(&line));
            out.push('\n');
        }
        let count = |f: fn(&Action) -> bool| self.agents.iter().filter(|p| f(&p.action)).count();
        out.push_str(&format!(
            "{} to create, {} to update, {} to delete, {unchanged} unchanged\n",
            count(|a| matches!(a, Action::Create { .. })),
            count(|a| matches!(a, Action::Update { .. })),
            count(|a| matches!(a, Action::Delete { .. })),
        ));
        out.push_str(&heartbeats::render(&self.heartbeats));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[[agents]]
name = "same"
[[agents]]
name = "changed"
heartbeat = { interval_ms = 60000 }
[[agents]]
name = "new"
[[agents]]
name = "dead"
"#;

    fn held(id: u64, name: &str, interval_ms: Option<u64>, terminated: bool) -> HeldAgent {
        HeldAgent {
            id: AgentId(id),
            spec: AgentSpec::with_interval(name, interval_ms),
            terminated,
        }
    }

    fn node() -> BTreeMap<String, Vec<HeldAgent>> {
        let agents = vec![
            held(1, "same", None, false),
            held(2, "changed", Some(30_000), false),
            held(3, "dead", None, true),
            held(4, "extra", None, false),
        ];
        BTreeMap::from([("default".to_string(), agents)])
    }

    fn actions(plan: &Plan) -> Vec<(&str, &'static str)> {
        let kind = |a: &Action| match a {
            Action::Create { .. } => "create",
            Action::Update { .. } => "update",
            Action::Unchanged { .. } => "unchanged",
            Action::Terminated { .. } => "terminated",
            Action::Delete { .. } => "delete",
            Action::Undeclared { .. } => "undeclared",
        };
        plan.agents
            .iter()
            .map(|p| (p.name.as_str(), kind(&p.action)))
            .collect()
    }

    #[test]
    fn a_plan_creates_updates_and_deletes_only_when_asked() {
        let fleet = Fleet::parse("fleet.toml", FILE).unwrap();
        let kept = plan(&fleet, &node(), false);
        assert_eq!(
            actions(&kept),
            [
                ("same", "unchanged"),
                ("changed", "update"),
                ("new", "create"),
                ("dead", "terminated"),
                ("extra", "undeclared"),
            ]
        );
        let Action::Update { changed, .. } = &kept.agents[1].action else {
            unreachable!()
        };
        assert_eq!(changed, &["heartbeat.interval_ms"]);
        let pruned = plan(&fleet, &node(), true);
        assert_eq!(pruned.agents[4].action, Action::Delete { id: AgentId(4) });
        assert!(kept.changes_anything());
        let text = kept.render();
        assert!(
            text.ends_with("1 to create, 1 to update, 0 to delete, 1 unchanged\n"),
            "{text}"
        );
    }

    #[test]
    fn a_node_holding_the_file_has_nothing_to_do() {
        let fleet = Fleet::parse("fleet.toml", "[[agents]]\nname = \"same\"\n").unwrap();
        let node = BTreeMap::from([("default".to_string(), vec![held(1, "same", None, false)])]);
        let plan = plan(&fleet, &node, true);
        assert!(!plan.changes_anything());
        assert_eq!(
            plan.render(),
            "0 to create, 0 to update, 0 to delete, 1 unchanged\n"
        );
    }
}
