//! `vigil agent sessions` and `vigil agent session-reset`: the coding-CLI session of each of an
//! agent's tasks, and forgetting one.

use super::format::{cell, safe_json_line, time_of, Table};
use super::{CliError, Printed, Session};

impl Session {
    /// `agent sessions`: one line per task with a session.
    pub async fn agent_sessions(&self, agent: &str) -> Result<Printed, CliError> {
        let id = self.agent_id(agent).await?;
        let listing = self.get(&format!("/v1/agents/{id}/sessions")).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&listing))));
        }
        let sessions = listing["sessions"].as_array().cloned().unwrap_or_default();
        if sessions.is_empty() {
            return Ok(Printed::out(format!("agent {id} has no task sessions\n")));
        }
        let mut table = Table::new(&["TASK KEY", "SESSION", "RUN", "UPDATED"]);
        for session in &sessions {
            table.row(vec![
                cell(&session["task_key"]),
                cell(&session["session_id"]),
                cell(&session["run"]),
                time_of(&session["updated_at_ms"]),
            ]);
        }
        Ok(Printed::out(table.render()))
    }

    /// `agent session-reset`: forgets one task's session (its next run starts fresh).
    pub async fn agent_session_reset(&self, agent: &str, task_key: &str) -> Result<Printed, CliError> {
        let id = self.agent_id(agent).await?;
        let path = format!("/v1/agents/{id}/sessions/{}/reset", path_segment(task_key));
        let answer = self.post(&path, None).await?;
        if self.json() {
            return Ok(Printed::out(format!("{}\n", safe_json_line(&answer))));
        }
        let what = if answer["reset"] == serde_json::Value::Bool(true) {
            "session forgotten; its next run starts a fresh one"
        } else {
            "had no session; nothing to reset"
        };
        Ok(Printed::out(format!(
            "agent {id} task {}: {what}\n",
            cell(&answer["task_key"])
        )))
    }
}

/// `text` as one URL path segment: every byte but the unreserved ones percent-encoded.
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::path_segment;

    #[test]
    fn task_keys_are_encoded_as_one_path_segment() {
        assert_eq!(path_segment("ticket-7.a_b~"), "ticket-7.a_b~");
        assert_eq!(path_segment("a/b c?"), "a%2Fb%20c%3F");
        assert_eq!(path_segment("é"), "%C3%A9");
    }
}
