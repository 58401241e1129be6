//! Fleet files: the agents (and tenant tokens) `vigil serve --fleet FILE` makes sure of at start.
//!
//! A fleet file is TOML. Top-level `[[agents]]` belong to tenant `default`; `[[tenants]]` name
//! further tenants, the environment variable holding each one's operator token, and their own
//! `[[tenants.agents]]`. An agent entry has exactly the fields of the JSON `AgentSpec`
//! (`POST /v1/agents`), so one spec reads the same in both places:
//!
//! ```toml
//! [[agents]]
//! name = "triage"
//! heartbeat = { interval_ms = 30000 }
//! adapter = { type = "scripted", steps = [{ duration_ms = 500, outcome = "succeeded" }] }
//!
//! [[tenants]]
//! name = "acme"
//! operator_token_env = "ACME_OPERATOR_TOKEN"
//!
//! [[tenants.agents]]
//! name = "billing"
//! ```
//!
//! Predicate heartbeats (docs/api.md, "Predicate heartbeats") are `[[heartbeats]]` (tenant
//! `default`) or `[[tenants.heartbeats]]`, with the fields of `POST /v1/heartbeats` but `agent`
//! naming an agent of the same tenant:
//!
//! ```toml
//! [[heartbeats]]
//! id = "inbox"
//! agent = "triage"
//! interval_sec = 60
//! check = { kind = "http", url = "https://mail.example.com/api/inbox", pointer = "/unread" }
//! ```
//!
//! Applying makes each declared heartbeat exist as written: a missing one is created, one whose
//! definition differs is replaced (deleted and created again, so its recorded state starts over),
//! an undeclared one is kept.
//!
//! Tokens never live in the file, only the name of the variable that holds them. Applying a fleet
//! creates the agents that do not exist yet (by name, within their tenant) and updates those
//! whose spec differs to the file's spec; it never deletes (`vigil fleet apply --prune` does,
//! when asked). `fleet_plan` says what applying would do.
//!
//! Top-level `[simulation]` and `[expect]` sections belong to `vigil-sim fleet FILE`, which
//! simulates the same file (docs/fleet-simulation.md); they are accepted and ignored here.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use crate::engine::agent::{AgentId, AgentSpec, AgentStatus};
use crate::engine::agent_update::SpecChange;
use crate::engine::predicate::{Check, HeartbeatId, HeartbeatRequest, OnChange};
use crate::engine::tenant::{validate_name, DEFAULT_TENANT, TENANT_NAME_CHARS_MAX};
use crate::engine::usage::MicroUsd;
use crate::engine::Engine;
use crate::fleet_plan::{Action, HeartbeatAction, HeldAgent, HeldHeartbeat};
use crate::node::TenantToken;
use crate::shell::{ExecuteError, Shell};

/// Largest fleet file read. A fleet file is how a large fleet is declared, and a node keeps up
/// to `AGENTS_MAX` (a million) agents at about 160 bytes each in a file; past this it is not
/// configuration any more, and reading it whole would cost the node too much memory.
pub const FLEET_FILE_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Shortest operator token accepted from configuration: shorter ones are guessable.
pub const OPERATOR_TOKEN_CHARS_MIN: usize = 16;

/// A fleet file, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    /// Tenants in file order; tenant `default` first when it has agents or a token.
    pub tenants: Vec<FleetTenant>,
}

/// One tenant of a fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetTenant {
    pub name: String,
    /// Environment variable holding the tenant's operator token. Required except for `default`,
    /// which otherwise keeps (or is given) a generated token.
    pub operator_token_env: Option<String>,
    /// The most the tenant's agents together may spend on model calls per UTC day.
    pub daily_budget_usd: Option<MicroUsd>,
    pub agents: Vec<AgentSpec>,
    pub heartbeats: Vec<FleetHeartbeat>,
}

/// A predicate heartbeat as a fleet file declares it: `POST /v1/heartbeats`' fields, `agent` by
/// name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetHeartbeat {
    pub id: String,
    /// The name of an agent of the same tenant, declared in the file.
    pub agent: String,
    pub interval_sec: u64,
    pub check: Check,
    #[serde(default)]
    pub on_change: OnChange,
    #[serde(default)]
    pub max_runtime_ms: Option<u64>,
}

impl FleetHeartbeat {
    /// The API's request for it, once its agent's id is known.
    pub fn request(&self, agent: AgentId) -> HeartbeatRequest {
        HeartbeatRequest {
            id: self.id.clone(),
            agent: agent.0,
            interval_sec: self.interval_sec,
            check: self.check.clone(),
            on_change: self.on_change,
            max_runtime_ms: self.max_runtime_ms,
        }
    }
}

/// Why a fleet file was refused. Messages name the file, the place and what to change.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("could not read fleet file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("fleet file {path} is {bytes} bytes; the most accepted is {FLEET_FILE_BYTES_MAX}")]
    TooLarge { path: String, bytes: u64 },
    /// TOML syntax, an unknown or missing field, a value of the wrong type.
    #[error("{path}:{line}:{column}: {}{message}", place.as_deref().map_or(String::new(), |p| format!("{p}: ")))]
    Parse {
        path: String,
        line: usize,
        column: usize,
        /// `agent "triage"` when the problem is inside an agent entry.
        place: Option<String>,
        message: String,
    },
    /// A value that parses but breaks a limit or a rule.
    #[error("{path}: {place}: {message} (field: {field})")]
    Invalid {
        path: String,
        place: String,
        field: String,
        message: String,
    },
    #[error("tenant {tenant:?}: operator_token_env names {variable}, which is not set; export it or remove the line")]
    TokenMissing { tenant: String, variable: String },
    #[error("tenant {tenant:?}: the operator token in {variable} has {chars} characters; use at least {OPERATOR_TOKEN_CHARS_MIN}")]
    TokenTooShort {
        tenant: String,
        variable: String,
        chars: usize,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    #[serde(default)]
    tenants: Vec<TenantShape>,
    #[serde(default)]
    agents: Vec<AgentSpec>,
    #[serde(default)]
    heartbeats: Vec<FleetHeartbeat>,
    /// What the outside world does in `vigil-sim fleet FILE` (docs/fleet-simulation.md). Read
    /// only by the simulator, which parses it; accepted and ignored here so that one file both
    /// deploys (`vigil serve --fleet`) and is simulated, while a misspelt top-level key is
    /// still refused.
    #[serde(default, rename = "simulation")]
    _simulation: Option<toml::Value>,
    /// The simulator's expectations (`[expect]`), ignored here for the same reason.
    #[serde(default, rename = "expect")]
    _expect: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantShape {
    name: String,
    #[serde(default)]
    operator_token_env: Option<String>,
    #[serde(default)]
    daily_budget_usd: Option<MicroUsd>,
    #[serde(default)]
    agents: Vec<AgentSpec>,
    #[serde(default)]
    heartbeats: Vec<FleetHeartbeat>,
}

impl Fleet {
    /// Reads and parses the fleet file at `path`.
    pub fn load(path: &Path) -> Result<Fleet, FleetError> {
        let shown = path.display().to_string();
        let read = |source| FleetError::Read {
            path: shown.clone(),
            source,
        };
        Fleet::check_size(path)?;
        let text = std::fs::read_to_string(path).map_err(read)?;
        Fleet::parse(&shown, &text)
    }

    /// The size of the file at `path`, refused past `FLEET_FILE_BYTES_MAX` before it is read.
    fn check_size(path: &Path) -> Result<u64, FleetError> {
        let shown = path.display().to_string();
        let bytes = std::fs::metadata(path)
            .map_err(|source| FleetError::Read {
                path: shown.clone(),
                source,
            })?
            .len();
        if bytes > FLEET_FILE_BYTES_MAX {
            return Err(FleetError::TooLarge { path: shown, bytes });
        }
        Ok(bytes)
    }

    /// Parses fleet file `text`; `path` only names the file in errors.
    pub fn parse(path: &str, text: &str) -> Result<Fleet, FleetError> {
        let parse_error =
            |span: Option<std::ops::Range<usize>>, place: Option<String>, message: String| {
                let (line, column) = line_column(text, span.map_or(0, |s| s.start));
                FleetError::Parse {
                    path: path.to_string(),
                    line,
                    column,
                    place,
                    message,
                }
            };
        // Syntax first, so that the typed pass below can look agent names up in the table.
        let table: toml::Table = toml::from_str(text)
            .map_err(|e| parse_error(e.span(), None, e.message().trim().to_string()))?;
        let deserializer = toml::Deserializer::parse(text)
            .map_err(|e| parse_error(e.span(), None, e.message().trim().to_string()))?;
        let shape: FileShape = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let place = agent_place(&table, e.path());
            let inner = e.inner();
            parse_error(inner.span(), place, inner.message().trim().to_string())
        })?;
        let fleet = Fleet::from_shape(shape);
        fleet.check(path)?;
        Ok(fleet)
    }

    fn from_shape(shape: FileShape) -> Fleet {
        let mut tenants: Vec<FleetTenant> = Vec::new();
        if !shape.agents.is_empty() || !shape.heartbeats.is_empty() {
            tenants.push(FleetTenant {
                name: DEFAULT_TENANT.to_string(),
                operator_token_env: None,
                daily_budget_usd: None,
                agents: shape.agents,
                heartbeats: shape.heartbeats,
            });
        }
        for entry in shape.tenants {
            tenants.push(FleetTenant {
                name: entry.name,
                operator_token_env: entry.operator_token_env,
                daily_budget_usd: entry.daily_budget_usd,
                agents: entry.agents,
                heartbeats: entry.heartbeats,
            });
        }
        // A `[[tenants]] name = "default"` entry and top-level agents describe one tenant.
        let mut merged: Vec<FleetTenant> = Vec::new();
        for tenant in tenants {
            match merged
                .iter_mut()
                .find(|t| t.name == tenant.name && t.name == DEFAULT_TENANT)
            {
                Some(default) => {
                    default.agents.extend(tenant.agents);
                    default.heartbeats.extend(tenant.heartbeats);
                    default.operator_token_env = default
                        .operator_token_env
                        .take()
                        .or(tenant.operator_token_env);
                    default.daily_budget_usd = default.daily_budget_usd.or(tenant.daily_budget_usd);
                }
                None => merged.push(tenant),
            }
        }
        Fleet { tenants: merged }
    }

    /// Rules no single field can check: names, duplicates, tokens for non-default tenants,
    /// and each agent's own limits (the same `validate` the API runs).
    fn check(&self, path: &str) -> Result<(), FleetError> {
        let invalid = |place: String, field: &str, message: String| FleetError::Invalid {
            path: path.to_string(),
            place,
            field: field.to_string(),
            message,
        };
        for (index, tenant) in self.tenants.iter().enumerate() {
            let place = format!("tenant {:?}", tenant.name);
            validate_name("name", &tenant.name, TENANT_NAME_CHARS_MAX)
                .map_err(|e| invalid(place.clone(), "tenants.name", e.message))?;
            if self.tenants[..index].iter().any(|t| t.name == tenant.name) {
                return Err(invalid(
                    place,
                    "tenants.name",
                    "this tenant is declared twice".into(),
                ));
            }
            match &tenant.operator_token_env {
                Some(variable) if variable.trim().is_empty() => {
                    return Err(invalid(place, "operator_token_env", "name an environment variable".into()))
                }
                None if tenant.name != DEFAULT_TENANT => {
                    return Err(invalid(
                        place,
                        "operator_token_env",
                        "only tenant \"default\" can have a generated token; name the environment variable holding this tenant's operator token".into(),
                    ))
                }
                _ => {}
            }
            // A set, not a scan of the agents before each one: a fleet of 100,000 agents
            // spent over a minute comparing names.
            let mut seen = std::collections::BTreeSet::new();
            for agent in &tenant.agents {
                let place = format!("agent {:?} of tenant {:?}", agent.name, tenant.name);
                agent
                    .validate()
                    .map_err(|e| invalid(place.clone(), &e.field, e.message))?;
                if !seen.insert(agent.name.as_str()) {
                    return Err(invalid(
                        place,
                        "name",
                        "this agent is declared twice".into(),
                    ));
                }
            }
            check_heartbeats(tenant, &seen).map_err(|(place, field, message)| invalid(place, &field, message))?;
        }
        Ok(())
    }

    /// The operator tokens the fleet configures, read from the environment through `lookup`.
    pub fn tenant_tokens(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<TenantToken>, FleetError> {
        let mut tokens = Vec::new();
        for tenant in &self.tenants {
            let Some(variable) = &tenant.operator_token_env else {
                continue;
            };
            let token = lookup(variable).ok_or_else(|| FleetError::TokenMissing {
                tenant: tenant.name.clone(),
                variable: variable.clone(),
            })?;
            tokens.push(TenantToken {
                tenant: tenant.name.clone(),
                token: checked_token(&tenant.name, variable, token)?,
            });
        }
        Ok(tokens)
    }

    /// Number of agents declared, over all tenants.
    pub fn agent_count(&self) -> usize {
        self.tenants.iter().map(|t| t.agents.len()).sum()
    }
}

/// A tenant's heartbeats: each valid as the API would find it, its agent declared in the same
/// tenant, no id twice. An error is (place, field, message).
fn check_heartbeats(
    tenant: &FleetTenant,
    agents: &std::collections::BTreeSet<&str>,
) -> Result<(), (String, String, String)> {
    let mut ids = std::collections::BTreeSet::new();
    for heartbeat in &tenant.heartbeats {
        let place = format!("heartbeat {:?} of tenant {:?}", heartbeat.id, tenant.name);
        // The agent's id is not known yet; any id checks the other fields.
        heartbeat
            .request(AgentId(0))
            .validate()
            .map_err(|e| (place.clone(), e.field.to_string(), e.message))?;
        if !agents.contains(heartbeat.agent.as_str()) {
            return Err((
                place,
                "agent".into(),
                format!("no agent named {:?} is declared in this tenant", heartbeat.agent),
            ));
        }
        if !ids.insert(heartbeat.id.as_str()) {
            return Err((place, "id".into(), "this heartbeat is declared twice".into()));
        }
    }
    Ok(())
}

/// Trims `token` and refuses one too short to be secret. `source` names where it came from.
pub fn checked_token(tenant: &str, source: &str, token: String) -> Result<String, FleetError> {
    let token = token.trim().to_string();
    let chars = token.chars().count();
    if chars < OPERATOR_TOKEN_CHARS_MIN {
        return Err(FleetError::TokenTooShort {
            tenant: tenant.to_string(),
            variable: source.to_string(),
            chars,
        });
    }
    Ok(token)
}

/// `agent "name"` (or `agents[3]` when it has no name) for an error inside an agent entry.
fn agent_place(table: &toml::Table, path: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    let (entries, index, shown) = match segments.as_slice() {
        [Segment::Map { key }, Segment::Seq { index }, ..] if key == "agents" => {
            (table.get("agents")?, *index, format!("agents[{index}]"))
        }
        [Segment::Map { key }, Segment::Seq { index: t }, Segment::Map { key: a }, Segment::Seq { index }, ..]
            if key == "tenants" && a == "agents" =>
        {
            let tenant = table.get("tenants")?.as_array()?.get(*t)?;
            (
                tenant.get("agents")?,
                *index,
                format!("tenants[{t}].agents[{index}]"),
            )
        }
        _ => return None,
    };
    let name = entries
        .as_array()?
        .get(index)?
        .get("name")
        .and_then(toml::Value::as_str);
    Some(match name {
        Some(name) => format!("agent {name:?}"),
        None => shown,
    })
}

/// 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// What applying a fleet did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Agents created now: (tenant, name, id).
    pub created: Vec<(String, String, AgentId)>,
    /// Agents updated to the file's spec now: (tenant, name, id, changed paths).
    pub updated: Vec<(String, String, AgentId, Vec<String>)>,
    /// Agents that already existed with the declared spec.
    pub unchanged: usize,
    /// Agents the node holds that the file does not declare (kept: serve never deletes).
    pub undeclared: usize,
    /// Human warnings: a coding CLI not installed, a declared agent that is terminated.
    pub warnings: Vec<String>,
    /// Heartbeats created now (tenant, id), and replaced because their definition differed.
    pub heartbeats_created: Vec<(String, String)>,
    pub heartbeats_replaced: Vec<(String, String)>,
    /// Heartbeats already as declared.
    pub heartbeats_unchanged: usize,
    /// Operator tokens generated for tenants the fleet needed but that did not exist and had
    /// no token configured (only `default` can be in that case): (tenant, token), shown once.
    pub generated_tokens: Vec<(String, String)>,
}

impl Fleet {
    /// Makes the node hold what the file declares: creates the missing agents and updates those
    /// whose spec differs (`fleet_plan`); never deletes.
    pub async fn apply(&self, shell: &Arc<Shell>) -> Result<Applied, ExecuteError> {
        let mut applied = Applied::default();
        for tenant in &self.tenants {
            self.prepare_tenant(shell, tenant, &mut applied).await?;
        }
        let held = held_agents(&shell.engine(), self);
        let plan = crate::fleet_plan::plan(self, &held, false);
        let mut creates: Vec<(String, Vec<AgentSpec>)> = Vec::new();
        let mut updates = Vec::new();
        for planned in plan.agents {
            let (tenant, name) = (planned.tenant, planned.name);
            match planned.action {
                Action::Create { spec } => match creates.last_mut() {
                    Some((last, specs)) if *last == tenant => specs.push(*spec),
                    _ => creates.push((tenant, vec![*spec])),
                },
                Action::Update { id, changed, spec } => {
                    updates.push((id, SpecChange::Replace(spec)));
                    applied.updated.push((tenant, name, id, changed));
                }
                Action::Unchanged { .. } => applied.unchanged += 1,
                Action::Undeclared { .. } | Action::Delete { .. } => applied.undeclared += 1,
                Action::Terminated { id } => applied.warnings.push(format!(
                    "agent {name:?} (id {id}, tenant {tenant:?}) is terminated, so the fleet file cannot change it; delete it (vigil agent delete {id}) and restart to re-create it"
                )),
            }
        }
        shell.update_agents(updates).await?;
        for (tenant, specs) in creates {
            // Why together: queued at once they share fsyncs (ADR 0012).
            let names: Vec<String> = specs.iter().map(|spec| spec.name.clone()).collect();
            let created = shell.create_agents(&tenant, specs).await?;
            for (name, agent) in names.into_iter().zip(created) {
                applied.created.push((tenant.clone(), name, agent.agent));
            }
        }
        apply_heartbeats(self, shell, &mut applied).await?;
        Ok(applied)
    }

    /// Makes sure `tenant` exists (a generated token for `default` when none is configured)
    /// and has the file's budget; warns about coding CLIs its agents need but the node lacks.
    async fn prepare_tenant(
        &self,
        shell: &Arc<Shell>,
        tenant: &FleetTenant,
        applied: &mut Applied,
    ) -> Result<(), ExecuteError> {
        let exists = shell.engine().tenants().any(|t| t.name == tenant.name);
        if !exists && !tenant.agents.is_empty() {
            let token = shell.new_operator_token();
            shell.ensure_tenant(&tenant.name, &token).await?;
            applied.generated_tokens.push((tenant.name.clone(), token));
        }
        let known = shell.engine().tenants().any(|t| t.name == tenant.name);
        if known {
            let budget = crate::engine::Command::SetTenantBudget {
                tenant: tenant.name.clone(),
                daily_budget_usd: tenant.daily_budget_usd,
            };
            shell.execute(budget, crate::writer::WhenFull::Wait).await?;
        }
        let node_path = std::env::var("PATH").ok();
        for spec in &tenant.agents {
            let missing = crate::exec::coding_cli::missing_binary_warning(
                &spec.adapter,
                node_path.as_deref(),
            );
            if let Some(warning) = missing {
                applied.warnings.push(format!(
                    "agent {:?} (tenant {:?}): {warning}",
                    spec.name, tenant.name
                ));
            }
        }
        Ok(())
    }
}

/// Makes the node hold the heartbeats `fleet` declares (`fleet_plan::plan_heartbeats`, as
/// `vigil fleet apply` does): creates the missing ones, replaces those whose definition differs,
/// keeps the others. Their agents exist by now (created above).
async fn apply_heartbeats(
    fleet: &Fleet,
    shell: &Arc<Shell>,
    applied: &mut Applied,
) -> Result<(), ExecuteError> {
    let planned = {
        let engine = shell.engine();
        crate::fleet_plan::plan_heartbeats(
            fleet,
            &held_agents(&engine, fleet),
            &held_heartbeats(&engine, fleet),
            false,
        )
    };
    for planned in planned {
        let key = (planned.tenant.clone(), planned.id.clone());
        match planned.action {
            HeartbeatAction::Unchanged => applied.heartbeats_unchanged += 1,
            HeartbeatAction::Undeclared | HeartbeatAction::Delete => {}
            HeartbeatAction::Create => {
                create_heartbeat(fleet, shell, &planned).await?;
                applied.heartbeats_created.push(key);
            }
            HeartbeatAction::Replace { .. } => {
                let delete = crate::engine::Command::DeleteHeartbeat {
                    tenant: planned.tenant.clone(),
                    heartbeat: HeartbeatId(planned.id.clone()),
                };
                shell.execute(delete, crate::writer::WhenFull::Wait).await?;
                create_heartbeat(fleet, shell, &planned).await?;
                applied.heartbeats_replaced.push(key);
            }
        }
    }
    Ok(())
}

/// Creates a planned heartbeat as the file declares it.
async fn create_heartbeat(
    fleet: &Fleet,
    shell: &Arc<Shell>,
    planned: &crate::fleet_plan::PlannedHeartbeat,
) -> Result<(), ExecuteError> {
    let tenant = fleet
        .tenants
        .iter()
        .find(|t| t.name == planned.tenant)
        .expect("planned from the file");
    let declared = tenant
        .heartbeats
        .iter()
        .find(|h| h.id == planned.id)
        .expect("planned from the file");
    let Some(agent) = shell.engine().agent_named(&tenant.name, &declared.agent).map(|a| a.id) else {
        return Ok(()); // checked at load: only an agent deleted meanwhile gets here
    };
    let create = crate::engine::Command::CreateHeartbeat {
        tenant: tenant.name.clone(),
        request: declared.request(agent),
    };
    shell.execute(create, crate::writer::WhenFull::Wait).await?;
    Ok(())
}

/// The heartbeats of the tenants `fleet` names, as a plan reads them.
fn held_heartbeats(engine: &Engine, fleet: &Fleet) -> BTreeMap<String, Vec<HeldHeartbeat>> {
    fleet
        .tenants
        .iter()
        .map(|tenant| {
            let held = engine
                .tenant_heartbeats(&tenant.name)
                .map(|h| HeldHeartbeat {
                    id: h.id.0.clone(),
                    agent: h.agent,
                    spec: h.spec.clone(),
                })
                .collect();
            (tenant.name.clone(), held)
        })
        .collect()
}

/// The agents of the tenants `fleet` names, as a plan reads them (one pass over the node's
/// agents, at start).
fn held_agents(engine: &Engine, fleet: &Fleet) -> BTreeMap<String, Vec<HeldAgent>> {
    let mut held: BTreeMap<String, Vec<HeldAgent>> = fleet
        .tenants
        .iter()
        .map(|t| (t.name.clone(), Vec::new()))
        .collect();
    for agent in engine.agents() {
        if let Some(agents) = held.get_mut(&agent.tenant) {
            agents.push(HeldAgent {
                id: agent.id,
                spec: (*agent.spec).clone(),
                terminated: agent.status == AgentStatus::Terminated,
            });
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::{Fleet, FleetError, FLEET_FILE_BYTES_MAX};

    /// A file of `FLEET_FILE_BYTES_MAX` bytes passes the size check `Fleet::load` makes first;
    /// one byte more is refused before anything is read. The files are sparse.
    #[test]
    fn fleet_files_are_read_up_to_their_limit_and_refused_past_it() {
        let dir = std::env::temp_dir().join(format!("vigil-fleet-limit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sized = |bytes: u64| {
            let path = dir.join(format!("fleet-{bytes}.toml"));
            std::fs::File::create(&path)
                .unwrap()
                .set_len(bytes)
                .unwrap();
            path
        };
        assert_eq!(
            Fleet::check_size(&sized(FLEET_FILE_BYTES_MAX)).unwrap(),
            FLEET_FILE_BYTES_MAX
        );
        let past = Fleet::load(&sized(FLEET_FILE_BYTES_MAX + 1)).unwrap_err();
        assert!(
            matches!(past, FleetError::TooLarge { bytes, .. } if bytes == FLEET_FILE_BYTES_MAX + 1),
            "{past}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every fleet-file example of docs/agents.md (a TOML block declaring `[[agents]]`) loads
    /// and validates, with the adapter its section is about.
    #[test]
    fn every_fleet_example_in_the_agents_guide_loads() {
        let doc = include_str!("../../docs/agents.md");
        let mut kinds = Vec::new();
        for block in doc.split("```toml\n").skip(1) {
            let text = &block[..block.find("```").expect("closed block")];
            if !text.contains("[[agents]]") {
                continue;
            }
            let fleet = Fleet::parse("agents.md", text).expect("the example loads");
            for tenant in &fleet.tenants {
                for agent in &tenant.agents {
                    agent.validate().expect("the example is valid");
                    kinds.push(agent.adapter.kind());
                }
            }
        }
        for kind in ["llm", "process", "claude_local", "http"] {
            assert!(kinds.contains(&kind), "no {kind} example in {kinds:?}");
        }
    }

    use super::*;
    use crate::engine::agent::{AdapterSpec, ScriptOutcome};

    const GOOD: &str = r#"
[[agents]]
name = "triage"
[agents.heartbeat]
interval_ms = 30000
[agents.adapter]
type = "scripted"
steps = [{ duration_ms = 200, outcome = "succeeded" }, { duration_ms = 100, outcome = "failed" }]

[[agents]]
name = "on-call"
heartbeat = { sources = ["on_demand"] }
limits = { run_timeout_ms = 2000 }

[[tenants]]
name = "acme"
operator_token_env = "ACME_TOKEN"

[[tenants.agents]]
name = "billing"
time_zone = "Europe/Paris"
"#;

    fn parse(text: &str) -> Result<Fleet, FleetError> {
        Fleet::parse("fleet.toml", text)
    }

    /// `vigil-sim fleet` reads `[simulation]` and `[expect]` from the same file: the node loads
    /// such a file as if they were absent, and still refuses any other unknown top-level key.
    #[test]
    fn the_simulators_sections_are_accepted_and_ignored() {
        let with_sections = format!(
            "{GOOD}\n[simulation]\npulse_interval_s = 60\n[simulation.agent]\nidle_rate = 0.78\n\n[expect]\nmax_invocations_per_day = 48\n[expect.agents.triage]\nno_cap_hit_before = \"18:00\"\n"
        );
        assert_eq!(parse(&with_sections).unwrap(), parse(GOOD).unwrap());
        let misspelt = parse(&format!("{GOOD}\n[simulations]\npulse_interval_s = 60\n")).unwrap_err();
        assert!(misspelt.to_string().contains("unknown field `simulations`"), "{misspelt}");
    }

    #[test]
    fn parses_agents_per_tenant_with_the_api_spec() {
        let fleet = parse(GOOD).unwrap();
        assert_eq!(fleet.tenants.len(), 2);
        let default = &fleet.tenants[0];
        assert_eq!(default.name, "default");
        assert_eq!(default.operator_token_env, None);
        assert_eq!(default.agents.len(), 2);
        assert_eq!(default.agents[0].heartbeat.interval_ms, Some(30_000));
        let AdapterSpec::Scripted(script) = &default.agents[0].adapter else {
            panic!("the example uses the scripted adapter");
        };
        assert_eq!(script.steps[1].outcome, ScriptOutcome::Failed);
        assert_eq!(default.agents[1].limits.run_timeout_ms, 2_000);
        // The TOML spec is the JSON spec: the same text through serde_json gives the same value.
        let json: AgentSpec = serde_json::from_str(
            r#"{"name":"on-call","heartbeat":{"sources":["on_demand"]},"limits":{"run_timeout_ms":2000}}"#,
        )
        .unwrap();
        assert_eq!(default.agents[1], json);
        let acme = &fleet.tenants[1];
        assert_eq!(acme.operator_token_env.as_deref(), Some("ACME_TOKEN"));
        assert_eq!(acme.agents[0].time_zone, "Europe/Paris");
        assert_eq!(fleet.agent_count(), 3);
    }

    #[test]
    fn unknown_fields_name_the_agent_the_field_and_the_line() {
        let text = "[[agents]]\nname = \"ok\"\n\n[[agents]]\nname = \"triage\"\n[agents.heartbeat]\nintervall_ms = 5000\n";
        let err = parse(text).unwrap_err();
        let FleetError::Parse {
            line,
            column,
            place,
            message,
            ..
        } = &err
        else {
            panic!("expected a parse error, got {err:?}");
        };
        assert_eq!((*line, *column), (7, 1), "{err}");
        assert_eq!(place.as_deref(), Some("agent \"triage\""));
        assert!(message.contains("intervall_ms"), "{message}");
        assert!(
            err.to_string()
                .starts_with("fleet.toml:7:1: agent \"triage\": "),
            "{err}"
        );

        let err = parse("[[agents]]\nname = \"x\"\ncolour = \"blue\"\n").unwrap_err();
        assert!(
            err.to_string().contains("agent \"x\"") && err.to_string().contains("colour"),
            "{err}"
        );
        let err = parse("[[tenants]]\nname = \"t\"\noperator_token_env = \"T\"\n[[tenants.agents]]\nname = \"y\"\nwat = 1\n").unwrap_err();
        assert!(
            err.to_string().contains("agent \"y\"") && err.to_string().contains("wat"),
            "{err}"
        );
        let err = parse("agent = []\n").unwrap_err();
        assert!(err.to_string().contains("agent"), "{err}");
    }

    #[test]
    fn syntax_errors_show_line_and_column() {
        let err = parse("[[agents]]\nname = \"a\"\nheartbeat = { interval_ms = }\n").unwrap_err();
        let FleetError::Parse { line, .. } = &err else {
            panic!("expected a parse error, got {err:?}");
        };
        assert_eq!(*line, 3, "{err}");
        let err = parse("[[agents]]\nheartbeat = {}\n").unwrap_err();
        assert!(
            err.to_string().contains("agents[0]") && err.to_string().contains("name"),
            "{err}"
        );
    }

    #[test]
    fn limits_and_rules_name_agent_and_field() {
        let err =
            parse("[[agents]]\nname = \"fast\"\nheartbeat = { interval_ms = 10 }\n").unwrap_err();
        let FleetError::Invalid { place, field, .. } = &err else {
            panic!("expected an invalid-value error, got {err:?}");
        };
        assert_eq!(field, "heartbeat.interval_ms");
        assert!(place.contains("\"fast\""), "{place}");
        let err = parse("[[agents]]\nname = \"a\"\n[[agents]]\nname = \"a\"\n").unwrap_err();
        assert!(err.to_string().contains("declared twice"), "{err}");
        let err = parse("[[tenants]]\nname = \"acme\"\n").unwrap_err();
        assert!(err.to_string().contains("operator_token_env"), "{err}");
        let err = parse("[[tenants]]\nname = \"a b\"\noperator_token_env = \"X\"\n").unwrap_err();
        assert!(err.to_string().contains("tenants.name"), "{err}");
    }

    #[test]
    fn default_tenant_entry_merges_with_top_level_agents() {
        let fleet = parse(
            "[[agents]]\nname = \"a\"\n[[tenants]]\nname = \"default\"\noperator_token_env = \"T\"\n[[tenants.agents]]\nname = \"b\"\n",
        )
        .unwrap();
        assert_eq!(fleet.tenants.len(), 1);
        assert_eq!(fleet.tenants[0].operator_token_env.as_deref(), Some("T"));
        assert_eq!(fleet.tenants[0].agents.len(), 2);
        assert!(parse("[[agents]]\nname = \"a\"\n[[tenants]]\nname = \"default\"\n[[tenants.agents]]\nname = \"a\"\n").is_err());
    }

    #[test]
    fn tokens_come_from_the_environment() {
        let fleet = parse(GOOD).unwrap();
        let tokens = fleet
            .tenant_tokens(|v| (v == "ACME_TOKEN").then(|| " acme-token-0123456789 \n".to_string()))
            .unwrap();
        assert_eq!(
            tokens,
            vec![TenantToken {
                tenant: "acme".into(),
                token: "acme-token-0123456789".into()
            }]
        );
        let missing = fleet.tenant_tokens(|_| None).unwrap_err();
        assert!(missing.to_string().contains("ACME_TOKEN"), "{missing}");
        let short = fleet.tenant_tokens(|_| Some("short".into())).unwrap_err();
        assert!(matches!(short, FleetError::TokenTooShort { chars: 5, .. }));
    }

    /// A ready node with tenant acme configured, on a fresh file in `dir`.
    async fn fleet_node(dir: &std::path::Path) -> crate::node::Node {
        use crate::io::{clock::SystemClock, entropy::OsEntropy, storage::StorageLocation};
        use crate::node::{Node, NodeConfig};
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let mut node = Node::start(NodeConfig {
            listen_addr: "127.0.0.1:0".parse().unwrap(),
            storage: StorageLocation::File(dir.join("vigil.redb")),
            clock: SystemClock::shared(),
            entropy: OsEntropy::shared(),
            tenants: vec![TenantToken {
                tenant: "acme".into(),
                token: "acme-token-0123456789".into(),
            }],
            on_commit: None,
            on_replayed: None,
            adapters: crate::exec::adapter::BuiltinAdapters::shared(),
            run_services: crate::exec::host::RunServices::standard(),
            transcripts: std::sync::Arc::new(crate::transcript::MemoryTranscripts::new()),
            alert_sinks: Vec::new(),
            snapshots: Default::default(),
            heartbeat_test_seam: false,
        })
        .await
        .unwrap();
        node.ready().await.unwrap();
        node
    }

    #[tokio::test]
    async fn apply_creates_missing_agents_and_updates_changed_ones() {
        let dir = std::env::temp_dir().join(format!("vigil-fleet-apply-{}", std::process::id()));
        let node = fleet_node(&dir).await;
        let shell = node.shell().clone();

        // Tenant default did not exist (only acme was configured): it is made, with a token.
        let first = parse(GOOD).unwrap().apply(&shell).await.unwrap();
        assert_eq!(first.created.len(), 3);
        assert_eq!(first.generated_tokens.len(), 1);
        assert_eq!(first.generated_tokens[0].0, "default");
        assert!(first.warnings.is_empty(), "{:?}", first.warnings);

        // Applying again changes nothing; a changed spec is applied in place.
        let id = shell.engine().agent_named("default", "triage").unwrap().id;
        let changed = GOOD.replace("interval_ms = 30000", "interval_ms = 60000");
        let second = parse(&changed).unwrap().apply(&shell).await.unwrap();
        assert!(second.created.is_empty() && second.generated_tokens.is_empty());
        assert_eq!(second.unchanged, 2);
        assert!(second.warnings.is_empty(), "{:?}", second.warnings);
        let updated = &second.updated;
        assert_eq!(updated.len(), 1, "{updated:?}");
        assert_eq!((updated[0].1.as_str(), updated[0].2), ("triage", id));
        assert_eq!(updated[0].3, ["heartbeat.interval_ms"]);
        let stored = shell
            .engine()
            .agent_named("default", "triage")
            .unwrap()
            .spec
            .clone();
        assert_eq!(stored.heartbeat.interval_ms, Some(60_000));
        // A terminated agent is reported, not changed; one left out of the file is kept.
        shell
            .execute(
                crate::engine::Command::TerminateAgent { agent: id },
                crate::writer::WhenFull::Wait,
            )
            .await
            .unwrap();
        let without_billing = GOOD.replace("name = \"billing\"", "name = \"billing-2\"");
        let third = parse(&without_billing)
            .unwrap()
            .apply(&shell)
            .await
            .unwrap();
        assert_eq!(third.undeclared, 1);
        assert!(
            shell.engine().agent_named("acme", "billing").is_some(),
            "never deleted"
        );
        assert_eq!(third.warnings.len(), 1, "{:?}", third.warnings);
        assert!(
            third.warnings[0].contains("\"triage\"") && third.warnings[0].contains("terminated")
        );
        node.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }

    const WITH_HEARTBEATS: &str = r#"
[[agents]]
name = "triage"

[[heartbeats]]
id = "inbox"
agent = "triage"
interval_sec = 60
check = { kind = "http", url = "https://mail.example.com/api/inbox", pointer = "/unread" }

[[tenants]]
name = "acme"
operator_token_env = "ACME_TOKEN"

[[tenants.agents]]
name = "billing"

[[tenants.heartbeats]]
id = "invoices"
agent = "billing"
interval_sec = 1
check = { kind = "command", command = "invoice-count", args = ["--open"] }
on_change = "event"
"#;

    #[test]
    fn heartbeats_are_declared_per_tenant_and_checked_like_the_api() {
        let fleet = parse(WITH_HEARTBEATS).unwrap();
        assert_eq!(fleet.tenants[0].heartbeats[0].id, "inbox");
        assert_eq!(fleet.tenants[1].heartbeats[0].on_change, OnChange::Event);
        let invalid = |text: String| match parse(&text).unwrap_err() {
            FleetError::Invalid { field, place, .. } => (field, place),
            other => panic!("{other}"),
        };
        let (field, place) = invalid(WITH_HEARTBEATS.replace("agent = \"triage\"", "agent = \"nobody\""));
        assert_eq!(field, "agent");
        assert!(place.contains("\"inbox\""), "{place}");
        let (field, _) = invalid(WITH_HEARTBEATS.replace("https://mail", "ftp://mail"));
        assert_eq!(field, "check.url");
        let (field, _) = invalid(WITH_HEARTBEATS.replace("id = \"invoices\"", "id = \"Invoices!\""));
        assert_eq!(field, "id");
        let twice = format!("{WITH_HEARTBEATS}\n[[tenants.heartbeats]]\nid = \"invoices\"\nagent = \"billing\"\ninterval_sec = 9\ncheck = {{ kind = \"sample\" }}\n");
        let (field, _) = invalid(twice);
        assert_eq!(field, "id");
        assert!(matches!(
            parse(&WITH_HEARTBEATS.replace("interval_sec = 60", "interval_sec = 60\nevery = 3")).unwrap_err(),
            FleetError::Parse { .. }
        ));
    }

    #[tokio::test]
    async fn apply_creates_declared_heartbeats_keeps_them_and_replaces_changed_ones() {
        let dir = std::env::temp_dir().join(format!("vigil-fleet-heartbeats-{}", std::process::id()));
        let node = fleet_node(&dir).await;
        let shell = node.shell().clone();
        let first = parse(WITH_HEARTBEATS).unwrap().apply(&shell).await.unwrap();
        assert_eq!(first.heartbeats_created.len(), 2, "{first:?}");
        let invoices = shell.engine().heartbeat("acme", &HeartbeatId("invoices".into())).cloned().unwrap();
        assert_eq!(invoices.spec.interval_sec, crate::engine::predicate::HEARTBEAT_MIN_INTERVAL_SEC);
        let billing = shell.engine().agent_named("acme", "billing").unwrap().id;
        assert_eq!(invoices.agent, billing);
        // Again: nothing to do (the raised interval is what was asked for, not a change).
        let second = parse(WITH_HEARTBEATS).unwrap().apply(&shell).await.unwrap();
        assert_eq!(second.heartbeats_unchanged, 2, "{second:?}");
        assert!(second.heartbeats_created.is_empty() && second.heartbeats_replaced.is_empty());
        // A changed definition replaces the heartbeat; one left out of the file is kept.
        let changed = WITH_HEARTBEATS
            .replace("interval_sec = 60", "interval_sec = 120")
            .replace("id = \"invoices\"", "id = \"invoices-2\"");
        let third = parse(&changed).unwrap().apply(&shell).await.unwrap();
        assert_eq!(third.heartbeats_replaced, [("default".to_string(), "inbox".to_string())]);
        assert_eq!(third.heartbeats_created, [("acme".to_string(), "invoices-2".to_string())]);
        let engine = shell.engine();
        assert_eq!(engine.heartbeat("default", &HeartbeatId("inbox".into())).unwrap().spec.interval_sec, 120);
        assert!(engine.heartbeat("acme", &HeartbeatId("invoices".into())).is_some(), "never deleted");
        drop(engine);
        node.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_empty_file_is_an_empty_fleet() {
        assert_eq!(parse("").unwrap(), Fleet { tenants: vec![] });
    }

    /// The example fleet parses, and so does its commented-out `llm` agent once uncommented:
    /// the documentation cannot drift from what the parser accepts.
    #[test]
    fn the_example_fleet_and_its_llm_agent_parse() {
        let text = include_str!("../../examples/fleet.toml");
        let plain = parse(text).unwrap();
        let start = text.find("# [[agents]]").expect("the commented llm agent");
        let uncommented: String = text[start..]
            .lines()
            .map(|line| line.strip_prefix("# ").unwrap_or(line))
            .collect::<Vec<_>>()
            .join("\n");
        let with_llm = parse(&format!("{}\n{uncommented}\n", &text[..start])).unwrap();
        assert_eq!(with_llm.agent_count(), plain.agent_count() + 1);
        assert_eq!(with_llm.tenants[0].heartbeats.len(), 1, "the commented heartbeat too");
    }

    /// The fleet files written for `vigil-sim fleet` (docs/fleet-simulation.md) deploy as they
    /// are: their `[simulation]` and `[expect]` sections are ignored here.
    #[test]
    fn the_simulation_examples_load_as_fleets() {
        for (name, text, agents) in [
            ("travel_rescue.toml", include_str!("../../examples/travel_rescue.toml"), 1),
            ("travel_rescue_fixed.toml", include_str!("../../examples/travel_rescue_fixed.toml"), 1),
            ("heart_fleet.toml", include_str!("../../examples/heart_fleet.toml"), 75),
        ] {
            let fleet = Fleet::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(fleet.agent_count(), agents, "{name}");
            assert!(text.contains("[expect]"), "{name} shows an expectation");
        }
    }

    #[test]
    fn a_tenant_may_carry_a_daily_budget() {
        let fleet = parse("[[tenants]]\nname = \"default\"\ndaily_budget_usd = 2.5\n").unwrap();
        assert_eq!(
            fleet.tenants[0].daily_budget_usd,
            Some(crate::engine::usage::MicroUsd(2_500_000))
        );
        let negative = parse("[[tenants]]\nname = \"default\"\ndaily_budget_usd = -1\n");
        assert!(negative.is_err());
    }
}
