//! `vigil runs list|show|cancel`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::format::{cell, escape_controls, safe_json_line, span, time_of, Table};
use super::{encode_query, CliError, Printed, Session};

/// What `runs list` asks for.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// An agent id or name.
    pub agent: Option<String>,
    pub status: Option<String>,
    pub limit: Option<u64>,
}

impl Session {
    /// `runs list`: newest first, one line per run.
    pub async fn runs_list(&self, filter: &RunFilter) -> Result<Printed, CliError> {
        let mut query = Vec::new();
        if let Some(agent) = &filter.agent {
            query.push(format!("agent={}", self.agent_id(agent).await?));
        }
        if let Some(status) = &filter.status {
            query.push(format!("status={}", encode_query(status)));
        }
        if let Some(limit) = filter.limit {
            query.push(format!("limit={limit}"));
        }
        let path = if query.is_empty() {
            "/v1/runs".to_string()
        } else {
            format!("/v1/runs?{}", query.join("&"))
        };
        let listing = self.get(&path).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&listing))));
        }
        let names = self.agent_names().await?;
        let mut table = Table::new(&[
            "ID", "AGENT", "STATUS", "SOURCE", "QUEUED", "TOOK", "DETAIL",
        ]);
        for run in listing["runs"].as_array().into_iter().flatten() {
            let agent = run["agent"].as_u64().unwrap_or(0);
            let agent = match names.get(&agent) {
                Some(name) => format!("{agent} {}", escape_controls(name)),
                None => agent.to_string(),
            };
            table.row(vec![
                cell(&run["id"]),
                agent,
                cell(&run["status"]),
                cell(&run["source"]),
                time_of(&run["queued_at_ms"]),
                took(run),
                cell(&run["detail"]),
            ]);
        }
        Ok(Printed::out(table.render()))
    }

    /// `runs show`: one `key: value` per line.
    pub async fn runs_show(&self, run: u64) -> Result<Printed, CliError> {
        let run = self.get(&format!("/v1/runs/{run}")).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&run))));
        }
        Ok(Printed::out(run_details(&run)))
    }

    /// `runs cancel`: the run as it ended.
    pub async fn runs_cancel(&self, run: u64) -> Result<Printed, CliError> {
        let run = self.post(&format!("/v1/runs/{run}/cancel"), None).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&run))));
        }
        Ok(Printed::out(format!(
            "run {} of agent {} is {}\n",
            cell(&run["id"]),
            cell(&run["agent"]),
            cell(&run["status"])
        )))
    }

    pub(super) async fn agent_names(&self) -> Result<BTreeMap<u64, String>, CliError> {
        let listing = self.all_agents().await?;
        Ok(listing["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| Some((a["id"].as_u64()?, a["name"].as_str()?.to_string())))
            .collect())
    }
}

/// How long the run took (or has been going, to its last known instant), `-` if not started.
fn took(run: &Value) -> String {
    match (
        run["started_at_ms"].as_u64(),
        run["finished_at_ms"].as_u64(),
    ) {
        (Some(start), Some(end)) => span(end.saturating_sub(start)),
        (Some(_), None) => "running".to_string(),
        _ => "-".to_string(),
    }
}

fn run_details(run: &Value) -> String {
    let mut table = Table::new(&["FIELD", "VALUE"]);
    for (field, value) in [
        ("id", cell(&run["id"])),
        ("agent", cell(&run["agent"])),
        ("status", cell(&run["status"])),
        ("detail", cell(&run["detail"])),
        ("source", cell(&run["source"])),
        ("priority", cell(&run["priority"])),
        ("reason", cell(&run["reason"])),
        ("task key", cell(&run["task_key"])),
        ("payload", cell(&run["payload"])),
        ("wakeup", cell(&run["wakeup"])),
        ("coalesced", cell(&run["coalesced_count"])),
        ("retry of", cell(&run["retry_of"])),
        ("run number", cell(&run["run_number"])),
        ("queued", time_of(&run["queued_at_ms"])),
        ("started", time_of(&run["started_at_ms"])),
        ("finished", time_of(&run["finished_at_ms"])),
        ("took", took(run)),
    ] {
        table.row(vec![field.to_string(), value]);
    }
    table
        .render()
        .lines()
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect()
}
