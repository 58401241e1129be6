//! `vigil heartbeat create|list|show|delete`: predicate heartbeats over the HTTP API
//! (docs/api.md, "Predicate heartbeats").

use serde_json::{json, Value};

use super::format::{cell, escape_controls, safe_json_line, time_of, Table};
use super::{encode_query, CliError, Printed, Session};

/// What `heartbeat create` asks for (its command-line arguments): exactly one check.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct HeartbeatCreate {
    /// Its id: a-z, 0-9, _ and -, unique in the tenant.
    #[arg(long)]
    pub id: String,
    /// The agent it wakes (id or name).
    #[arg(long)]
    pub agent: String,
    /// Seconds between ticks (under the node's minimum, raised to it).
    #[arg(long)]
    pub interval_sec: u64,
    /// Check: GET this URL; its JSON answer is the state.
    #[arg(long)]
    pub http: Option<String>,
    /// With --http: the JSON pointer into the answer that is the state (e.g. /unread).
    #[arg(long)]
    pub pointer: Option<String>,
    /// With --http: a header whose value is in the node's environment, as NAME=VARIABLE
    /// (e.g. authorization=INBOX_AUTH); repeat for more.
    #[arg(long = "secret-header")]
    pub secret_headers: Vec<String>,
    /// Check: run this program (no shell); its stdout is the state.
    #[arg(long)]
    pub command: Option<String>,
    /// With --command: one argument (repeat for more).
    #[arg(long = "arg")]
    pub args: Vec<String>,
    /// Check: observations come only from the node's test seam.
    #[arg(long)]
    pub sample: bool,
    /// On a change: `wake` the agent (the default) or only record the `event`.
    #[arg(long)]
    pub on_change: Option<String>,
    /// The evaluation budget in ms (default and most: 5000).
    #[arg(long)]
    pub max_runtime_ms: Option<u64>,
}

impl HeartbeatCreate {
    /// The check as the API takes it; a usage error unless exactly one kind was given.
    fn check(&self) -> Result<Value, CliError> {
        let given = [self.http.is_some(), self.command.is_some(), self.sample];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(CliError::input(
                "check",
                "give exactly one check: --http URL [--pointer /path], --command PROGRAM [--arg A]..., or --sample",
            ));
        }
        if self.pointer.is_some() && self.http.is_none() {
            return Err(CliError::input("pointer", "--pointer goes with --http"));
        }
        if !self.args.is_empty() && self.command.is_none() {
            return Err(CliError::input("args", "--arg goes with --command"));
        }
        if !self.secret_headers.is_empty() && self.http.is_none() {
            return Err(CliError::input(
                "secret_headers",
                "--secret-header goes with --http",
            ));
        }
        let mut headers = serde_json::Map::new();
        for pair in &self.secret_headers {
            let Some((name, variable)) = pair.split_once('=') else {
                return Err(CliError::input(
                    "secret_headers",
                    format!("--secret-header takes NAME=VARIABLE (e.g. authorization=INBOX_AUTH), got {pair:?}"),
                ));
            };
            headers.insert(name.to_string(), json!(variable));
        }
        Ok(match (&self.http, &self.command) {
            (Some(url), _) => {
                let mut check = json!({"kind": "http", "url": url});
                if let Some(pointer) = &self.pointer {
                    check["pointer"] = json!(pointer);
                }
                if !headers.is_empty() {
                    check["secret_headers"] = Value::Object(headers);
                }
                check
            }
            (_, Some(command)) => json!({"kind": "command", "command": command, "args": self.args}),
            _ => json!({"kind": "sample"}),
        })
    }
}

impl Session {
    /// `heartbeat create`: defines it; prints its effective interval.
    pub async fn heartbeat_create(&self, create: &HeartbeatCreate) -> Result<Printed, CliError> {
        let mut body = json!({
            "id": create.id,
            "agent": self.agent_id(&create.agent).await?,
            "interval_sec": create.interval_sec,
            "check": create.check()?,
        });
        if let Some(on_change) = &create.on_change {
            body["on_change"] = json!(on_change);
        }
        if let Some(ms) = create.max_runtime_ms {
            body["max_runtime_ms"] = json!(ms);
        }
        let created = self.post("/v1/heartbeats", Some(&body)).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&created))));
        }
        let heartbeat = &created["heartbeat"];
        let mut out = format!(
            "heartbeat {} of agent {}: every {} s, on change: {}\n",
            cell(&heartbeat["id"]),
            cell(&heartbeat["agent"]),
            cell(&heartbeat["interval_sec"]),
            cell(&heartbeat["on_change"]),
        );
        if heartbeat["interval_sec"].as_u64() != Some(create.interval_sec) {
            out.push_str(&format!(
                "note: {} s asked; the node's minimum interval applies\n",
                create.interval_sec
            ));
        }
        Ok(Printed::out(out))
    }

    /// `heartbeat list`: one line per heartbeat (of one agent with `agent`), a page at a time.
    pub async fn heartbeat_list(
        &self,
        agent: Option<&str>,
        after: Option<&str>,
    ) -> Result<Printed, CliError> {
        let mut query = Vec::new();
        if let Some(agent) = agent {
            query.push(format!("agent={}", self.agent_id(agent).await?));
        }
        if let Some(after) = after {
            query.push(format!("after={}", encode_query(after)));
        }
        let path = match query.is_empty() {
            true => "/v1/heartbeats".to_string(),
            false => format!("/v1/heartbeats?{}", query.join("&")),
        };
        let page = self.get(&path).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&page))));
        }
        let mut table = Table::new(&[
            "ID",
            "AGENT",
            "EVERY",
            "CHECK",
            "ON CHANGE",
            "STATE",
            "CHANGES",
            "CHANGED",
        ]);
        for heartbeat in page["heartbeats"].as_array().into_iter().flatten() {
            table.row(vec![
                cell(&heartbeat["id"]),
                cell(&heartbeat["agent"]),
                format!("{} s", cell(&heartbeat["interval_sec"])),
                check_of(&heartbeat["check"]),
                on_change_of(heartbeat),
                state_of(&heartbeat["state"]),
                cell(&heartbeat["transitions"]),
                time_of(&heartbeat["changed_at_ms"]),
            ]);
        }
        let mut out = table.render();
        if let Some(next) = page["next_after"].as_str() {
            out.push_str(&format!("more: --after {}\n", escape_controls(next)));
        }
        Ok(Printed::out(out))
    }

    /// `heartbeat show`: the definition, its state and its recent evaluations.
    pub async fn heartbeat_show(&self, id: &str) -> Result<Printed, CliError> {
        let shown = self
            .get(&format!("/v1/heartbeats/{}", encode_query(id)))
            .await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&shown))));
        }
        let counts = &shown["counts"];
        let mut out = format!(
            "heartbeat {} of agent {}\n  every {} s, budget {} ms, check {}, on change {}\n  state {} ({} changes, last {})\n  ticks since the node started: {} ok, {} timeout, {} error, {} skipped\n",
            cell(&shown["id"]),
            cell(&shown["agent"]),
            cell(&shown["interval_sec"]),
            cell(&shown["max_runtime_ms"]),
            check_of(&shown["check"]),
            on_change_of(&shown),
            state_of(&shown["state"]),
            cell(&shown["transitions"]),
            time_of(&shown["changed_at_ms"]),
            cell(&counts["ok"]),
            cell(&counts["timeout"]),
            cell(&counts["error"]),
            cell(&counts["skipped"]),
        );
        let mut table = Table::new(&["AT", "STATUS", "CHANGED", "RUNS", "DETAIL"]);
        for evaluation in shown["evaluations"].as_array().into_iter().flatten() {
            table.row(vec![
                time_of(&evaluation["at_ms"]),
                cell(&evaluation["status"]),
                cell(&evaluation["changed"]),
                cell(&evaluation["enqueued_runs"]),
                cell(&evaluation["detail"]),
            ]);
        }
        out.push_str(&table.render());
        Ok(Printed::out(out))
    }

    /// `heartbeat delete`.
    pub async fn heartbeat_delete(&self, id: &str) -> Result<Printed, CliError> {
        let deleted = self
            .delete(&format!("/v1/heartbeats/{}", encode_query(id)))
            .await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&deleted))));
        }
        Ok(Printed::out(format!(
            "deleted heartbeat {}\n",
            cell(&deleted["id"])
        )))
    }
}

/// A check in one cell: `http URL [POINTER]`, `command PROGRAM ARGS…` or `sample`.
fn check_of(check: &Value) -> String {
    let text = match check["kind"].as_str() {
        Some("http") => match check["pointer"].as_str() {
            Some(pointer) => format!("http {} {pointer}", check["url"].as_str().unwrap_or("")),
            None => format!("http {}", check["url"].as_str().unwrap_or("")),
        },
        Some("command") => {
            let args: Vec<&str> = check["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            format!(
                "command {} {}",
                check["command"].as_str().unwrap_or(""),
                args.join(" ")
            )
            .trim_end()
            .to_string()
        }
        Some(kind) => kind.to_string(),
        None => "?".to_string(),
    };
    escape_controls(&text).into_owned()
}

/// The recorded state as compact JSON, `-` when nothing was observed yet.
fn state_of(state: &Value) -> String {
    match state {
        Value::Null => "-".to_string(),
        state => escape_controls(&state.to_string()).into_owned(),
    }
}

fn on_change_of(heartbeat: &Value) -> String {
    let paused = heartbeat["emission_paused"] == Value::Bool(true);
    format!(
        "{}{}",
        cell(&heartbeat["on_change"]),
        if paused { " (paused)" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_check_is_taken() {
        let none = HeartbeatCreate::default();
        assert!(matches!(none.check(), Err(CliError::Input { .. })));
        let two = HeartbeatCreate {
            http: Some("https://x/inbox".into()),
            sample: true,
            ..HeartbeatCreate::default()
        };
        assert!(matches!(two.check(), Err(CliError::Input { .. })));
        let stray = HeartbeatCreate {
            sample: true,
            pointer: Some("/a".into()),
            ..HeartbeatCreate::default()
        };
        assert!(matches!(stray.check(), Err(CliError::Input { .. })));
        let http = HeartbeatCreate {
            http: Some("https://x/inbox".into()),
            pointer: Some("/unread".into()),
            ..HeartbeatCreate::default()
        };
        let with_header = HeartbeatCreate {
            secret_headers: vec!["authorization=INBOX_AUTH".into()],
            ..http.clone()
        };
        assert_eq!(
            with_header.check().unwrap()["secret_headers"],
            json!({"authorization": "INBOX_AUTH"})
        );
        let malformed = HeartbeatCreate {
            secret_headers: vec!["authorization".into()],
            ..http.clone()
        };
        assert!(matches!(malformed.check(), Err(CliError::Input { .. })));
        assert_eq!(
            http.check().unwrap(),
            json!({"kind": "http", "url": "https://x/inbox", "pointer": "/unread"})
        );
        let command = HeartbeatCreate {
            command: Some("mail-count".into()),
            args: vec!["--unread".into()],
            ..HeartbeatCreate::default()
        };
        assert_eq!(
            command.check().unwrap(),
            json!({"kind": "command", "command": "mail-count", "args": ["--unread"]})
        );
    }

    #[test]
    fn cells_escape_what_a_check_or_state_holds() {
        assert_eq!(
            check_of(&json!({"kind": "http", "url": "https://x/\u{1b}[2J"})),
            "http https://x/\\x1b[2J"
        );
        assert_eq!(state_of(&Value::Null), "-");
        assert_eq!(state_of(&json!({"unread": 3})), r#"{"unread":3}"#);
    }
}
