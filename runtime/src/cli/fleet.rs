//! `vigil fleet plan|apply FILE`: a fleet file against a running node, through the API. The plan
//! is `fleet_plan::plan`, the same function `vigil serve --fleet` applies at start.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::format::{cell, escape_controls, safe_json_line};
use super::{CliError, Printed, Session, Token, TokenSource};
use crate::engine::agent::{AgentId, AgentSpec};
use crate::engine::agent_update::patch_between;
use crate::engine::tenant::DEFAULT_TENANT;
use crate::fleet::Fleet;
use crate::fleet_plan::{
    plan, plan_heartbeats, Action, HeartbeatAction, HeldAgent, HeldHeartbeat, Plan, PlannedHeartbeat,
};

/// What `fleet plan|apply` was asked.
#[derive(Debug, Clone)]
pub struct FleetFile {
    pub path: PathBuf,
    /// Delete the agents the file does not declare.
    pub prune: bool,
}

impl Session {
    /// `fleet plan FILE`: what `fleet apply` would do, changing nothing.
    pub async fn fleet_plan(&self, file: &FleetFile) -> Result<Printed, CliError> {
        let (_, _, plan) = self.plan_of(file).await?;
        if self.json() {
            let json = serde_json::to_value(&plan).expect("a plan serialises");
            return Ok(Printed::out(format!("{}\n", safe_json_line(&json))));
        }
        Ok(Printed::out(plan.render()))
    }

    /// `fleet apply FILE`: creates, updates (and with `--prune` deletes) until the node holds
    /// what the file declares; prints each change, and each new agent's token (shown once).
    pub async fn fleet_apply(&self, file: &FleetFile) -> Result<Printed, CliError> {
        let (fleet, sessions, plan) = self.plan_of(file).await?;
        let mut printed = Printed::default();
        let mut answers = Vec::new();
        for planned in &plan.agents {
            let session = &sessions[&planned.tenant];
            let who = format!("{} (tenant {})", planned.name, planned.tenant);
            let (line, answer) = match &planned.action {
                Action::Create { spec } => {
                    let body = serde_json::to_value(spec).expect("a spec serialises");
                    let created = session.post("/v1/agents", Some(&body)).await?;
                    let line = format!(
                        "+ created {who}, id {}; token (shown once): {}",
                        cell(&created["agent"]["id"]),
                        cell(&created["token"])
                    );
                    (line, created)
                }
                Action::Update { id, spec, .. } => {
                    let updated = session.update_to(*id, spec).await?;
                    let changed = super::lifecycle::changed_of(&updated);
                    (
                        format!("~ updated {who}, id {id}: {}", changed.join(", ")),
                        updated,
                    )
                }
                Action::Delete { id } => {
                    let deleted = session.delete(&format!("/v1/agents/{id}")).await?;
                    (format!("- deleted {who}, id {id}"), deleted)
                }
                Action::Terminated { .. } | Action::Undeclared { .. } => {
                    printed.stderr.push_str(&plan_line(planned));
                    continue;
                }
                Action::Unchanged { .. } => continue,
            };
            printed
                .stdout
                .push_str(&format!("{}\n", escape_controls(&line)));
            answers.push(answer);
        }
        for planned in &plan.heartbeats {
            let session = &sessions[&planned.tenant];
            let line = match &planned.action {
                HeartbeatAction::Create => {
                    let created = session.create_heartbeat(&fleet, planned).await?;
                    answers.push(created);
                    format!("+ created heartbeat {} (tenant {})", planned.id, planned.tenant)
                }
                HeartbeatAction::Replace { changed } => {
                    session.delete(&heartbeat_path(&planned.id)).await?;
                    answers.push(session.create_heartbeat(&fleet, planned).await?);
                    format!(
                        "~ replaced heartbeat {} (tenant {}): {}",
                        planned.id,
                        planned.tenant,
                        changed.join(", ")
                    )
                }
                HeartbeatAction::Delete => {
                    answers.push(session.delete(&heartbeat_path(&planned.id)).await?);
                    format!("- deleted heartbeat {} (tenant {})", planned.id, planned.tenant)
                }
                HeartbeatAction::Undeclared => {
                    printed.stderr.push_str(&format!(
                        "{}\n",
                        escape_controls(&format!(
                            "? heartbeat {} (tenant {}) is not in the file; kept (--prune deletes it)",
                            planned.id, planned.tenant
                        ))
                    ));
                    continue;
                }
                HeartbeatAction::Unchanged => continue,
            };
            printed
                .stdout
                .push_str(&format!("{}\n", escape_controls(&line)));
        }
        if self.json() {
            let json = Value::Array(answers);
            printed.stdout = format!("{}\n", safe_json_line(&json));
        } else if !plan.changes_anything() {
            printed
                .stdout
                .push_str("nothing to change: the node holds what the file declares\n");
        }
        Ok(printed)
    }

    /// `PATCH`es agent `id` from the spec it holds now to `spec`.
    async fn update_to(&self, id: AgentId, spec: &AgentSpec) -> Result<Value, CliError> {
        let held = self.get(&format!("/v1/agents/{id}")).await?;
        let patch = patch_between(
            &held["spec"],
            &serde_json::to_value(spec).expect("serialises"),
        );
        self.patch(&format!("/v1/agents/{id}"), &patch).await
    }

    /// The file's plan against the node, with a session per tenant the file names.
    async fn plan_of(
        &self,
        file: &FleetFile,
    ) -> Result<(Fleet, BTreeMap<String, Session>, Plan), CliError> {
        let fleet =
            Fleet::load(&file.path).map_err(|error| CliError::input("file", error.to_string()))?;
        let sessions = self.tenant_sessions(&fleet)?;
        let (mut held, mut heartbeats) = (BTreeMap::new(), BTreeMap::new());
        for (tenant, session) in &sessions {
            held.insert(tenant.clone(), session.held_agents().await?);
            heartbeats.insert(tenant.clone(), session.held_heartbeats().await?);
        }
        let mut plan = plan(&fleet, &held, file.prune);
        plan.heartbeats = plan_heartbeats(&fleet, &held, &heartbeats, file.prune);
        Ok((fleet, sessions, plan))
    }

    /// Every heartbeat of this session's tenant, page after page.
    async fn held_heartbeats(&self) -> Result<Vec<HeldHeartbeat>, CliError> {
        let mut held = Vec::new();
        let mut path = "/v1/heartbeats?limit=1000".to_string();
        loop {
            let page = self.get(&path).await?;
            for heartbeat in page["heartbeats"].as_array().into_iter().flatten() {
                let unreadable = || CliError::UnexpectedAnswer {
                    status: 200,
                    body: "a heartbeat in GET /v1/heartbeats is not readable".into(),
                };
                let spec = serde_json::from_value(json!({
                    "interval_sec": heartbeat["interval_sec"],
                    "check": heartbeat["check"],
                    "on_change": heartbeat["on_change"],
                    "max_runtime_ms": heartbeat["max_runtime_ms"],
                }))
                .map_err(|_| unreadable())?;
                held.push(HeldHeartbeat {
                    id: heartbeat["id"].as_str().ok_or_else(unreadable)?.to_string(),
                    agent: AgentId(heartbeat["agent"].as_u64().ok_or_else(unreadable)?),
                    spec,
                });
            }
            match page["next_after"].as_str() {
                Some(after) => {
                    path = format!("/v1/heartbeats?limit=1000&after={}", super::encode_query(after))
                }
                None => return Ok(held),
            }
        }
    }

    /// `POST /v1/heartbeats` for a planned heartbeat, as the file declares it (its agent by the
    /// id the node gave it).
    async fn create_heartbeat(&self, fleet: &Fleet, planned: &PlannedHeartbeat) -> Result<Value, CliError> {
        let declared = fleet
            .tenants
            .iter()
            .filter(|t| t.name == planned.tenant)
            .flat_map(|t| &t.heartbeats)
            .find(|h| h.id == planned.id)
            .expect("planned from the file");
        let agent = AgentId(self.agent_id(&declared.agent).await?);
        let body = serde_json::to_value(declared.request(agent)).expect("a request serialises");
        self.post("/v1/heartbeats", Some(&body)).await
    }

    /// This session for tenant `default`; for every other tenant the file names, the operator
    /// token in the environment variable the file names for it (as `vigil serve --fleet` reads).
    fn tenant_sessions(&self, fleet: &Fleet) -> Result<BTreeMap<String, Session>, CliError> {
        let mut sessions = BTreeMap::new();
        for tenant in &fleet.tenants {
            let session = match (&tenant.operator_token_env, tenant.name == DEFAULT_TENANT) {
                (_, true) => self.clone(),
                (Some(variable), false) => {
                    let secret = std::env::var(variable)
                        .ok()
                        .filter(|t| !t.trim().is_empty());
                    let secret = secret.ok_or_else(|| {
                        CliError::input(
                            "operator_token_env",
                            format!(
                                "tenant {:?}: the file names {variable} for its operator token, which is not set; export it",
                                tenant.name
                            ),
                        )
                    })?;
                    self.with_token(Token {
                        secret: secret.trim().to_string(),
                        source: TokenSource::Variable(variable.clone()),
                    })
                }
                (None, false) => unreachable!("a fleet file names the token of every other tenant"),
            };
            sessions.insert(tenant.name.clone(), session);
        }
        Ok(sessions)
    }

    /// Every agent of this session's tenant, as a plan reads them.
    async fn held_agents(&self) -> Result<Vec<HeldAgent>, CliError> {
        let listing = self.all_agents().await?;
        let mut held = Vec::new();
        for agent in listing["agents"].as_array().into_iter().flatten() {
            let unreadable = |what: &str| CliError::UnexpectedAnswer {
                status: 200,
                body: format!("an agent in GET /v1/agents has no readable {what}"),
            };
            let id = agent["id"].as_u64().ok_or_else(|| unreadable("id"))?;
            let spec: AgentSpec =
                serde_json::from_value(agent["spec"].clone()).map_err(|_| unreadable("spec"))?;
            held.push(HeldAgent {
                id: AgentId(id),
                spec,
                terminated: agent["status"].as_str() == Some("terminated"),
            });
        }
        Ok(held)
    }
}

fn heartbeat_path(id: &str) -> String {
    format!("/v1/heartbeats/{}", super::encode_query(id))
}

/// The plan's line for an agent `apply` leaves alone.
fn plan_line(planned: &crate::fleet_plan::Planned) -> String {
    let single = Plan {
        agents: vec![planned.clone()],
        heartbeats: Vec::new(),
    };
    let text = single.render();
    text.lines()
        .next()
        .map_or(String::new(), |line| format!("{line}\n"))
}
