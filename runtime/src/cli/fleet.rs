//! `vigil fleet plan|apply FILE`: a fleet file against a running node, through the API. The plan
//! is `fleet_plan::plan`, the same function `vigil serve --fleet` applies at start.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::format::{cell, escape_controls, safe_json_line};
use super::{CliError, Printed, Session, Token, TokenSource};
use crate::engine::agent::{AgentId, AgentSpec};
use crate::engine::agent_update::patch_between;
use crate::engine::tenant::DEFAULT_TENANT;
use crate::fleet::Fleet;
use crate::fleet_plan::{plan, Action, HeldAgent, Plan};

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
        let (_, plan) = self.plan_of(file).await?;
        if self.json() {
            let json = serde_json::to_value(&plan).expect("a plan serialises");
            return Ok(Printed::out(format!("{}\n", safe_json_line(&json))));
        }
        Ok(Printed::out(plan.render()))
    }

    /// `fleet apply FILE`: creates, updates (and with `--prune` deletes) until the node holds
    /// what the file declares; prints each change, and each new agent's token (shown once).
    pub async fn fleet_apply(&self, file: &FleetFile) -> Result<Printed, CliError> {
        let (sessions, plan) = self.plan_of(file).await?;
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
    ) -> Result<(BTreeMap<String, Session>, Plan), CliError> {
        let fleet =
            Fleet::load(&file.path).map_err(|error| CliError::input("file", error.to_string()))?;
        let sessions = self.tenant_sessions(&fleet)?;
        let mut held = BTreeMap::new();
        for (tenant, session) in &sessions {
            held.insert(tenant.clone(), session.held_agents().await?);
        }
        Ok((sessions, plan(&fleet, &held, file.prune)))
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

/// The plan's line for an agent `apply` leaves alone.
fn plan_line(planned: &crate::fleet_plan::Planned) -> String {
    let single = Plan {
        agents: vec![planned.clone()],
    };
    let text = single.render();
    text.lines()
        .next()
        .map_or(String::new(), |line| format!("{line}\n"))
}
