//! `vigil wakeups list`: the wakeup history, a page at a time.

use serde_json::Value;

use super::format::{cell, escape_controls, safe_json_line, time_of, Table};
use super::{encode_query, CliError, Printed, Session};

/// What `wakeups list` asks for.
#[derive(Debug, Clone, Default)]
pub struct WakeupFilter {
    /// An agent id or name.
    pub agent: Option<String>,
    pub source: Option<String>,
    pub status: Option<String>,
    pub requested_by: Option<String>,
    pub after: Option<u64>,
    pub limit: Option<u64>,
}

impl Session {
    /// `wakeups list`: one line per wakeup in log order, then where the next page starts.
    pub async fn wakeups_list(&self, filter: &WakeupFilter) -> Result<Printed, CliError> {
        let mut query = Vec::new();
        if let Some(agent) = &filter.agent {
            query.push(format!("agent={}", self.agent_id(agent).await?));
        }
        for (key, value) in [
            ("source", &filter.source),
            ("status", &filter.status),
            ("requested_by", &filter.requested_by),
        ] {
            if let Some(value) = value {
                query.push(format!("{key}={}", encode_query(value)));
            }
        }
        for (key, value) in [("after", filter.after), ("limit", filter.limit)] {
            if let Some(value) = value {
                query.push(format!("{key}={value}"));
            }
        }
        let path = if query.is_empty() {
            "/v1/wakeups".to_string()
        } else {
            format!("/v1/wakeups?{}", query.join("&"))
        };
        let page = self.get(&path).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&page))));
        }
        let names = self.agent_names().await?;
        let mut table = Table::new(&[
            "SEQ", "WAKEUP", "AT", "AGENT", "SOURCE", "BY", "STATUS", "RUN", "REASON",
        ]);
        for wakeup in page["wakeups"].as_array().into_iter().flatten() {
            let agent = wakeup["agent"].as_u64().unwrap_or(0);
            let agent = match names.get(&agent) {
                Some(name) => format!("{agent} {}", escape_controls(name)),
                None => agent.to_string(),
            };
            table.row(vec![
                cell(&wakeup["seq"]),
                cell(&wakeup["wakeup"]),
                time_of(&wakeup["at_ms"]),
                agent,
                cell(&wakeup["source"]),
                cell(&wakeup["requested_by"]),
                status_cell(wakeup),
                cell(&wakeup["run"]),
                cell(&wakeup["reason"]),
            ]);
        }
        let mut out = table.render();
        let (next, head) = (page["next_after"].as_u64(), page["head_seq"].as_u64());
        if let (Some(next), Some(head)) = (next, head) {
            if next < head {
                out.push_str(&format!("more: --after {next}\n"));
            }
        }
        Ok(Printed::out(out))
    }
}

/// The status with what qualifies it: `refused (daily_cap)`, `finished (failed)`.
fn status_cell(wakeup: &Value) -> String {
    let status = cell(&wakeup["status"]);
    let why = [&wakeup["refusal"], &wakeup["run_status"]]
        .into_iter()
        .find(|v| !v.is_null());
    match why {
        Some(why) if status != cell(why) => format!("{status} ({})", cell(why)),
        _ => status,
    }
}
