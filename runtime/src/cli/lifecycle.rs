//! `vigil agent update|delete`, `vigil operator rotate-token` and `vigil backup`.

use serde_json::{Map, Value};

use super::format::{cell, escape_controls, safe_json_line};
use super::{CliError, Printed, Session, TokenSource};

/// What `agent update` was asked: a merge patch, with `--interval` and `--daily-cap` on top.
#[derive(Debug, Clone, Default)]
pub struct AgentUpdate {
    /// JSON object text: an RFC 7396 merge patch on the agent's spec.
    pub patch: Option<String>,
    pub interval_ms: Option<u64>,
    pub daily_cap: Option<u32>,
}

impl AgentUpdate {
    /// The body of `PATCH /v1/agents/{id}`. The server validates it; only what cannot be sent
    /// at all (not JSON, not an object, nothing asked) is refused here.
    pub fn body(&self) -> Result<Value, CliError> {
        let mut patch = match &self.patch {
            None => Map::new(),
            Some(text) => match serde_json::from_str(text) {
                Ok(Value::Object(map)) => map,
                Ok(_) => return Err(CliError::input("patch", "--patch must be a JSON object")),
                Err(error) => {
                    return Err(CliError::input(
                        "patch",
                        format!("--patch is not JSON: {error}"),
                    ))
                }
            },
        };
        if let Some(interval_ms) = self.interval_ms {
            nested(&mut patch, "heartbeat").insert("interval_ms".into(), interval_ms.into());
        }
        if let Some(cap) = self.daily_cap {
            nested(&mut patch, "limits").insert("daily_cap".into(), cap.into());
        }
        if patch.is_empty() {
            return Err(CliError::input(
                "patch",
                "nothing to change: give --patch JSON, --interval or --daily-cap",
            ));
        }
        Ok(Value::Object(patch))
    }
}

/// The `changed` paths of a `PATCH` answer, as table cells.
pub(super) fn changed_of(updated: &Value) -> Vec<String> {
    updated["changed"]
        .as_array()
        .into_iter()
        .flatten()
        .map(cell)
        .collect()
}

/// The object at `key` of `patch`, made one if it is absent or not an object.
fn nested<'a>(patch: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let entry = patch
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut().expect("made an object above")
}

impl Session {
    /// `agent update`: what changed, or that nothing did.
    pub async fn agent_update(
        &self,
        agent: &str,
        update: &AgentUpdate,
    ) -> Result<Printed, CliError> {
        let body = update.body()?;
        let id = self.agent_id(agent).await?;
        let updated = self.patch(&format!("/v1/agents/{id}"), &body).await?;
        let mut stderr = String::new();
        for warning in updated["warnings"].as_array().into_iter().flatten() {
            stderr.push_str(&format!("warning: {}\n", cell(warning)));
        }
        if self.json() {
            let stdout = format!("{}\n", safe_json_line(&updated));
            return Ok(Printed { stdout, stderr });
        }
        let name = cell(&updated["agent"]["name"]);
        let changed = changed_of(&updated);
        let stdout = match changed.is_empty() {
            true => format!("agent {id} {name}: unchanged (the spec already said so)\n"),
            false => format!("updated agent {id} {name}: {}\n", changed.join(", ")),
        };
        Ok(Printed { stdout, stderr })
    }

    /// `agent delete`.
    pub async fn agent_delete(&self, agent: &str) -> Result<Printed, CliError> {
        let id = self.agent_id(agent).await?;
        let deleted = self.delete(&format!("/v1/agents/{id}")).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&deleted))));
        }
        Ok(Printed::out(format!(
            "deleted agent {id} {} (its events stay in the log; its name is free again)\n",
            cell(&deleted["name"])
        )))
    }

    /// `operator rotate-token`: the new token alone on stdout; when the token used came from the
    /// data directory's file, that file is rewritten with the new one.
    pub async fn operator_rotate_token(&self) -> Result<Printed, CliError> {
        let rotated = self.post("/v1/operator/token", None).await?;
        let token = rotated["token"].as_str().unwrap_or_default().to_string();
        let mut stderr = format!(
            "tenant {}: new operator token (shown once); the old one no longer works, and a restart with the same configuration keeps the new one\n",
            cell(&rotated["tenant"])
        );
        if let TokenSource::File(path) = &self.token.source {
            super::write_token_file(path, &token).map_err(|source| CliError::TokenFile {
                path: path.clone(),
                source,
            })?;
            stderr.push_str(&format!(
                "wrote it to {}\n",
                escape_controls(&path.display().to_string())
            ));
        }
        let stdout = match self.json() {
            true => format!("{}\n", safe_json_line(&rotated)),
            false => format!("{}\n", escape_controls(&token)),
        };
        Ok(Printed { stdout, stderr })
    }
}

impl Session {
    /// `backup`: where the copy is, and what it holds.
    pub async fn backup(&self) -> Result<Printed, CliError> {
        let backup = self.post("/v1/backup", None).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&backup))));
        }
        Ok(Printed::out(format!(
            "backup of {} events (up to seq {}, {} bytes) written on the server to {}\n",
            cell(&backup["events"]),
            cell(&backup["head_seq"]),
            cell(&backup["bytes"]),
            cell(&backup["path"]),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_body_merges_the_flags_into_the_patch() {
        let update = AgentUpdate {
            patch: Some(
                r#"{"heartbeat": {"idle_after_ms": 60000}, "time_zone": "Asia/Tokyo"}"#.into(),
            ),
            interval_ms: Some(300_000),
            daily_cap: Some(5),
        };
        assert_eq!(
            update.body().unwrap(),
            serde_json::json!({
                "heartbeat": {"idle_after_ms": 60000, "interval_ms": 300000},
                "time_zone": "Asia/Tokyo",
                "limits": {"daily_cap": 5},
            })
        );
        let nothing = AgentUpdate::default().body().unwrap_err();
        assert!(matches!(nothing, CliError::Input { field, .. } if field == "patch"));
        let list = AgentUpdate {
            patch: Some("[1]".into()),
            ..AgentUpdate::default()
        };
        assert!(list.body().is_err());
    }
}
