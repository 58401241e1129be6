//! `vigil agent create|list|show|wake|pause|resume|terminate|rotate-token`.

use serde_json::{json, Map, Value};

use super::format::{cell, escape_controls, safe_json_line, span, time_of, Table};
use super::interval::format_interval;
use super::{CliError, Printed, Session};

/// Where `agent create --spec` reads a full spec from.
#[derive(Debug, Clone)]
pub struct SpecSource {
    /// A file name, or `-` for stdin; decides the format (`.toml`, `.json`) and names errors.
    pub name: String,
    pub text: String,
}

/// What `agent create` was asked.
#[derive(Debug, Clone, Default)]
pub struct AgentCreate {
    pub name: Option<String>,
    pub interval_ms: Option<u64>,
    pub spec: Option<SpecSource>,
}

/// What `agent wake` was asked.
#[derive(Debug, Clone)]
pub struct Wake {
    pub source: String,
    pub reason: Option<String>,
    pub task_key: Option<String>,
    pub idempotency_key: Option<String>,
    /// JSON text.
    pub payload: Option<String>,
    /// JSON object text: what caused the wakeup, kept in the wakeup history.
    pub trigger_detail: Option<String>,
}

impl AgentCreate {
    /// The JSON body of `POST /v1/agents`: the spec, with `--name` and `--interval` on top.
    /// The server validates it; only what cannot be sent at all is refused here.
    pub fn body(&self) -> Result<Value, CliError> {
        let mut spec = match &self.spec {
            None => Map::new(),
            Some(source) => parse_spec(source)?,
        };
        if let Some(name) = &self.name {
            spec.insert("name".into(), Value::String(name.clone()));
        }
        if !spec.contains_key("name") {
            return Err(CliError::input(
                "name",
                "give the agent a name: --name NAME, or `name` in the spec",
            ));
        }
        if let Some(interval_ms) = self.interval_ms {
            let heartbeat = spec
                .entry("heartbeat")
                .or_insert_with(|| Value::Object(Map::new()));
            let Some(heartbeat) = heartbeat.as_object_mut() else {
                return Err(CliError::input(
                    "heartbeat",
                    "heartbeat in the spec must be a table/object",
                ));
            };
            heartbeat.insert("interval_ms".into(), json!(interval_ms));
        }
        Ok(Value::Object(spec))
    }
}

/// A spec file as a JSON object: TOML for `*.toml`, JSON for `*.json`, else sniffed.
fn parse_spec(source: &SpecSource) -> Result<Map<String, Value>, CliError> {
    let is_json = if source.name.ends_with(".toml") {
        false
    } else if source.name.ends_with(".json") {
        true
    } else {
        source.text.trim_start().starts_with('{')
    };
    let value: Value = if is_json {
        serde_json::from_str(&source.text).map_err(|e| {
            CliError::input(
                "spec",
                format!("{}:{}:{}: {e}", source.name, e.line(), e.column()),
            )
        })?
    } else {
        let table: toml::Table = toml::from_str(&source.text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            let before = &source.text[..offset.min(source.text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            CliError::input(
                "spec",
                format!("{}:{line}:{column}: {}", source.name, e.message().trim()),
            )
        })?;
        serde_json::to_value(table).map_err(|e| CliError::input("spec", e.to_string()))?
    };
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(CliError::input(
            "spec",
            format!("{}: a spec is an object with at least `name`", source.name),
        )),
    }
}

impl Wake {
    fn body(&self) -> Result<Value, CliError> {
        let mut body = json!({ "source": self.source });
        if let Some(reason) = &self.reason {
            body["reason"] = json!(reason);
        }
        if let Some(key) = &self.task_key {
            body["task_key"] = json!(key);
        }
        if let Some(key) = &self.idempotency_key {
            body["idempotency_key"] = json!(key);
        }
        if let Some(payload) = &self.payload {
            body["payload"] = serde_json::from_str(payload)
                .map_err(|e| CliError::input("payload", format!("--payload is not JSON: {e}")))?;
        }
        if let Some(detail) = &self.trigger_detail {
            body["trigger_detail"] = serde_json::from_str(detail).map_err(|e| {
                CliError::input("trigger_detail", format!("--trigger-detail is not JSON: {e}"))
            })?;
        }
        Ok(body)
    }
}

impl Session {
    /// `agent create`: the agent, and its token with the warning that it is shown once.
    pub async fn agent_create(&self, request: &AgentCreate) -> Result<Printed, CliError> {
        let body = request.body()?;
        let created = self.post("/v1/agents", Some(&body)).await?;
        let mut warning = "warning: the agent token is shown only this once; store it now (the agent authenticates with it)\n".to_string();
        for saved_with in created["warnings"].as_array().into_iter().flatten() {
            warning.push_str(&format!("warning: {}\n", cell(saved_with)));
        }
        if self.json() {
            return Ok(Printed {
                stdout: format!("{}\n", safe_json_line(&created)),
                stderr: warning,
            });
        }
        let agent = &created["agent"];
        let stdout = format!(
            "created agent {} {} (tenant {}, timer {})\ntoken: {}\n",
            cell(&agent["id"]),
            cell(&agent["name"]),
            cell(&agent["tenant"]),
            interval_of(agent),
            cell(&created["token"]),
        );
        Ok(Printed {
            stdout,
            stderr: warning,
        })
    }

    /// `agent list`: one line per agent of the token's tenant.
    pub async fn agent_list(&self) -> Result<Printed, CliError> {
        let listing = self.all_agents().await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&listing))));
        }
        let now_ms = listing["now_ms"].as_u64().unwrap_or(0);
        let mut table = Table::new(&["ID", "NAME", "STATUS", "TIMER", "NEXT FIRE", "RUNS"]);
        for agent in listing["agents"].as_array().into_iter().flatten() {
            let next = match agent["next_fire_at_ms"].as_u64() {
                Some(at) if at >= now_ms => format!("in {}", span(at - now_ms)),
                Some(_) => "due".to_string(),
                None => "-".to_string(),
            };
            table.row(vec![
                cell(&agent["id"]),
                cell(&agent["name"]),
                cell(&agent["status"]),
                interval_of(agent),
                next,
                cell(&agent["runs_started"]),
            ]);
        }
        Ok(Printed::out(table.render()))
    }

    /// `agent show`: the agent's policy and counters, one `key: value` per line.
    pub async fn agent_show(&self, agent: &str) -> Result<Printed, CliError> {
        let id = self.agent_id(agent).await?;
        let agent = self.get(&format!("/v1/agents/{id}")).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&agent))));
        }
        Ok(Printed::out(agent_details(&agent)))
    }

    /// `agent pause|resume|terminate` (`action` is the route's last segment).
    pub async fn agent_control(&self, agent: &str, action: &str) -> Result<Printed, CliError> {
        assert!(
            matches!(action, "pause" | "resume" | "terminate"),
            "unknown action {action}"
        );
        let id = self.agent_id(agent).await?;
        let agent = self
            .post(&format!("/v1/agents/{id}/{action}"), None)
            .await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&agent))));
        }
        Ok(Printed::out(format!(
            "agent {} {} is {}\n",
            cell(&agent["id"]),
            cell(&agent["name"]),
            cell(&agent["status"])
        )))
    }

    /// `agent rotate-token`: the new token on stdout (alone, so that a script can keep it), what
    /// happened on stderr.
    pub async fn agent_rotate_token(&self, agent: &str) -> Result<Printed, CliError> {
        let id = self.agent_id(agent).await?;
        let rotated = self.post(&format!("/v1/agents/{id}/token"), None).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&rotated))));
        }
        let token = rotated["token"].as_str().unwrap_or_default();
        Ok(Printed {
            stdout: format!("{}\n", escape_controls(token)),
            stderr: format!(
                "agent {id}: new token above (shown once); the old token no longer works\n"
            ),
        })
    }

    /// `agent pause [--minutes N]`.
    pub async fn agent_pause(
        &self,
        agent: &str,
        minutes: Option<u64>,
    ) -> Result<Printed, CliError> {
        let Some(minutes) = minutes else {
            return self.agent_control(agent, "pause").await;
        };
        let id = self.agent_id(agent).await?;
        let body = serde_json::json!({ "minutes": minutes });
        let agent = self
            .post(&format!("/v1/agents/{id}/pause"), Some(&body))
            .await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&agent))));
        }
        Ok(Printed::out(format!(
            "agent {} {} is paused until {}\n",
            cell(&agent["id"]),
            cell(&agent["name"]),
            cell(&agent["paused_until_ms"])
        )))
    }

    /// `agent wake`: what became of the wakeup (queued, coalesced, or refused and why).
    pub async fn agent_wake(&self, agent: &str, wake: &Wake) -> Result<Printed, CliError> {
        let body = wake.body()?;
        let id = self.agent_id(agent).await?;
        let answer = self
            .post(&format!("/v1/agents/{id}/wakeup"), Some(&body))
            .await?;
        self.wake_answer(id, &answer)
    }

    /// `agent input`: user input for the agent (restarts its idle chamber, wakes it on demand).
    pub async fn agent_input(
        &self,
        agent: &str,
        text: &str,
        task_key: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Result<Printed, CliError> {
        let mut body = json!({ "text": text });
        if let Some(key) = task_key {
            body["task_key"] = json!(key);
        }
        if let Some(key) = idempotency_key {
            body["idempotency_key"] = json!(key);
        }
        let id = self.agent_id(agent).await?;
        let answer = self
            .post(&format!("/v1/agents/{id}/input"), Some(&body))
            .await?;
        self.wake_answer(id, &answer)
    }

    /// `agent pulse`: one pulse per agent named (one agent: its own endpoint; more: one batch).
    pub async fn agent_pulse(&self, agents: &[String]) -> Result<Printed, CliError> {
        let mut ids = Vec::with_capacity(agents.len());
        for agent in agents {
            ids.push(self.agent_id(agent).await?);
        }
        let answer = match ids.as_slice() {
            [id] => self.post(&format!("/v1/agents/{id}/pulse"), None).await?,
            _ => {
                self.post("/v1/pulses", Some(&json!({ "agents": ids })))
                    .await?
            }
        };
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&answer))));
        }
        Ok(Printed::out(match ids.as_slice() {
            [id] => format!("agent {id} is {}\n", cell(&answer["liveness"])),
            _ => format!(
                "{} pulses taken; came online: {}\n",
                cell(&answer["accepted"]),
                answer["came_online"]
            ),
        }))
    }

    /// How a wakeup (or an input's wakeup) came out, for humans or as JSON.
    fn wake_answer(&self, id: u64, answer: &serde_json::Value) -> Result<Printed, CliError> {
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(answer))));
        }
        let what = match answer["outcome"].as_str() {
            Some("queued") => format!("queued run {}", cell(&answer["run"])),
            Some("coalesced") => format!(
                "coalesced onto queued run {} ({} wakeups joined it)",
                cell(&answer["run"]),
                cell(&answer["coalesced_count"])
            ),
            Some("refused") => format!("refused: {}", cell(&answer["refusal"])),
            _ => format!("answered {}", safe_json_line(answer)),
        };
        let replayed = if answer["replayed"] == json!(true) {
            " (replayed: this idempotency key was seen before)"
        } else {
            ""
        };
        Ok(Printed::out(format!(
            "wakeup {} of agent {id}: {what}{replayed}\n",
            cell(&answer["wakeup"])
        )))
    }

    /// Every agent of the tenant, page after page, as one listing `{"now_ms", "agents"}` (the
    /// clock of the first page).
    pub(super) async fn all_agents(&self) -> Result<Value, CliError> {
        let mut listing = self.get("/v1/agents").await?;
        let mut next_after = listing["next_after"].as_u64();
        while let Some(after) = next_after {
            let page = self.get(&format!("/v1/agents?after={after}")).await?;
            let agents = page["agents"].as_array().cloned().unwrap_or_default();
            if agents.is_empty() {
                break;
            }
            if let Some(all) = listing["agents"].as_array_mut() {
                all.extend(agents);
            }
            // Pages move forward by id; a node that answered otherwise would loop forever.
            next_after = page["next_after"].as_u64().filter(|next| *next > after);
        }
        if let Some(object) = listing.as_object_mut() {
            object.remove("next_after");
        }
        Ok(listing)
    }

    /// An agent argument as an id: a number is one; anything else is looked up by name.
    pub(super) async fn agent_id(&self, agent: &str) -> Result<u64, CliError> {
        if let Ok(id) = agent.parse::<u64>() {
            return Ok(id);
        }
        // Names are `[A-Za-z0-9._-]`: one that is not could not be found, and needs no escaping.
        let plain = agent
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        let listing = match plain {
            true => self.get(&format!("/v1/agents?name={agent}")).await?,
            false => Value::Null,
        };
        listing["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["name"].as_str() == Some(agent))
            .and_then(|a| a["id"].as_u64())
            .ok_or_else(|| {
                CliError::input(
                    "agent",
                    format!(
                        "no agent named {agent:?} in this tenant; `vigil agent list` shows them"
                    ),
                )
            })
    }
}

/// An agent's timer period as `30s`, or `-` without a timer.
fn interval_of(agent: &Value) -> String {
    agent["spec"]["heartbeat"]["interval_ms"]
        .as_u64()
        .map_or_else(|| "-".to_string(), format_interval)
}

fn agent_details(agent: &Value) -> String {
    let spec = &agent["spec"];
    let sources: Vec<String> = spec["heartbeat"]["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(cell)
        .collect();
    let steps: Vec<String> = spec["adapter"]["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "{} after {}",
                cell(&s["outcome"]),
                span(s["duration_ms"].as_u64().unwrap_or(0))
            )
        })
        .collect();
    let timeout = spec["limits"]["run_timeout_ms"]
        .as_u64()
        .map_or("-".into(), span);
    let mut table = Table::new(&["FIELD", "VALUE"]);
    for (field, value) in [
        ("id", cell(&agent["id"])),
        ("name", cell(&agent["name"])),
        ("tenant", cell(&agent["tenant"])),
        ("status", cell(&agent["status"])),
        ("created", time_of(&agent["created_at_ms"])),
        ("timer", interval_of(agent)),
        ("next fire", time_of(&agent["next_fire_at_ms"])),
        ("timer fires", cell(&agent["timer_fires"])),
        ("runs started", cell(&agent["runs_started"])),
        ("sources", sources.join(", ")),
        ("time zone", cell(&spec["time_zone"])),
        ("run timeout", timeout),
        ("queued runs max", cell(&spec["limits"]["queued_runs_max"])),
        (
            "adapter",
            format!("{}: {}", cell(&spec["adapter"]["type"]), steps.join(", ")),
        ),
    ] {
        table.row(vec![field.to_string(), value]);
    }
    // The header row is noise for a key/value list.
    table
        .render()
        .lines()
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(name: &str, text: &str) -> Option<SpecSource> {
        Some(SpecSource {
            name: name.into(),
            text: text.into(),
        })
    }

    #[test]
    fn create_bodies_merge_flags_over_the_spec() {
        let plain = AgentCreate {
            name: Some("a".into()),
            interval_ms: Some(30_000),
            spec: None,
        };
        assert_eq!(
            plain.body().unwrap(),
            json!({"name": "a", "heartbeat": {"interval_ms": 30000}})
        );
        let toml = AgentCreate {
            name: None,
            interval_ms: Some(5_000),
            spec: source(
                "s.toml",
                "name = \"b\"\n[heartbeat]\nsources = [\"on_demand\"]\n",
            ),
        };
        assert_eq!(
            toml.body().unwrap(),
            json!({"name": "b", "heartbeat": {"sources": ["on_demand"], "interval_ms": 5000}})
        );
        let json_stdin = AgentCreate {
            name: Some("c".into()),
            interval_ms: None,
            spec: source("-", r#"{"name":"x","time_zone":"Asia/Tokyo"}"#),
        };
        assert_eq!(
            json_stdin.body().unwrap(),
            json!({"name": "c", "time_zone": "Asia/Tokyo"})
        );
    }

    #[test]
    fn create_input_errors_name_the_field() {
        let nameless = AgentCreate::default().body().unwrap_err();
        assert!(matches!(&nameless, CliError::Input { field, .. } if field == "name"));
        let broken = AgentCreate {
            spec: source("s.toml", "name = \n"),
            ..AgentCreate::default()
        };
        let err = broken.body().unwrap_err();
        assert!(err.to_string().starts_with("s.toml:1:"), "{err}");
        assert!(err.to_string().ends_with("(field: spec)"), "{err}");
    }

    #[test]
    fn wake_bodies() {
        let wake = Wake {
            source: "on_demand".into(),
            reason: Some("look".into()),
            task_key: None,
            idempotency_key: Some("k1".into()),
            payload: Some(r#"{"ticket": 7}"#.into()),
            trigger_detail: None,
        };
        assert_eq!(
            wake.body().unwrap(),
            json!({"source": "on_demand", "reason": "look", "idempotency_key": "k1", "payload": {"ticket": 7}})
        );
        let bad = Wake {
            payload: Some("{nope".into()),
            ..wake
        };
        assert!(
            matches!(bad.body().unwrap_err(), CliError::Input { field, .. } if field == "payload")
        );
    }
}
