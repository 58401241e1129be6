//! Task sessions: the coding-CLI session each (agent, task key) works in, so the next run on the
//! task resumes it. Folded from `run_finished` (its report's `session`) and `session_reset`; a
//! session is durable exactly when the run that produced it ended.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::agent_state::RestoreError;
use super::run::{RunId, SessionChange};

/// Task key of runs woken without one.
pub const DEFAULT_TASK_KEY: &str = "default";
/// Most sessions one agent keeps; past it the least recently used is forgotten (its task starts
/// fresh next time, which is always safe).
pub const SESSIONS_PER_AGENT_MAX: usize = 256;
/// Longest session id a CLI may report; a longer one is not kept.
pub const SESSION_ID_CHARS_MAX: usize = 256;

/// One task's session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSession {
    pub task_key: String,
    pub session_id: String,
    /// The run that last worked in it, and when it ended.
    pub run: RunId,
    pub updated_at_ms: u64,
}

/// An agent's sessions, by task key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sessions {
    by_task: BTreeMap<String, TaskSession>,
}

impl Sessions {
    /// The task key a run with `task_key` works under.
    pub fn key_of(task_key: Option<&str>) -> &str {
        task_key.unwrap_or(DEFAULT_TASK_KEY)
    }

    pub fn get(&self, task_key: &str) -> Option<&TaskSession> {
        self.by_task.get(task_key)
    }

    /// Every session, by task key.
    pub fn iter(&self) -> impl Iterator<Item = &TaskSession> {
        self.by_task.values()
    }

    /// An agent's sessions from a snapshot's list; refuses a task key listed twice.
    pub(crate) fn restore(sessions: Vec<TaskSession>) -> Result<Sessions, RestoreError> {
        let mut by_task = BTreeMap::new();
        for session in sessions {
            let key = session.task_key.clone();
            if by_task.insert(key.clone(), session).is_some() {
                return Err(RestoreError::new(
                    "sessions",
                    format!("task key {key:?} has two sessions"),
                ));
            }
        }
        Ok(Sessions { by_task })
    }

    /// Folds a finished run's word on its task's session.
    pub fn apply_change(&mut self, task_key: &str, change: &SessionChange, run: RunId, at_ms: u64) {
        match change {
            SessionChange::Clear => {
                self.by_task.remove(task_key);
            }
            SessionChange::Set { session_id } => {
                if session_id.is_empty() || session_id.chars().count() > SESSION_ID_CHARS_MAX {
                    return;
                }
                self.by_task.insert(
                    task_key.to_string(),
                    TaskSession {
                        task_key: task_key.to_string(),
                        session_id: session_id.clone(),
                        run,
                        updated_at_ms: at_ms,
                    },
                );
                self.evict();
            }
        }
    }

    /// Forgets `task_key`'s session (an operator reset).
    pub fn reset(&mut self, task_key: &str) -> bool {
        self.by_task.remove(task_key).is_some()
    }

    /// Drops the least recently updated sessions past the cap (ties: smallest task key).
    fn evict(&mut self) {
        while self.by_task.len() > SESSIONS_PER_AGENT_MAX {
            let oldest = self
                .by_task
                .values()
                .min_by_key(|s| (s.updated_at_ms, s.run, s.task_key.clone()))
                .map(|s| s.task_key.clone())
                .expect("non-empty");
            self.by_task.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(id: &str) -> SessionChange {
        SessionChange::Set {
            session_id: id.into(),
        }
    }

    #[test]
    fn a_set_session_is_resumed_and_a_clear_forgets_it() {
        let mut sessions = Sessions::default();
        sessions.apply_change("t", &set("s1"), RunId(1), 10);
        assert_eq!(sessions.get("t").unwrap().session_id, "s1");
        sessions.apply_change("t", &set("s2"), RunId(2), 20);
        assert_eq!(sessions.get("t").unwrap().session_id, "s2");
        sessions.apply_change("t", &SessionChange::Clear, RunId(3), 30);
        assert!(sessions.get("t").is_none());
    }

    #[test]
    fn session_ids_past_the_limit_are_not_kept() {
        let mut sessions = Sessions::default();
        sessions.apply_change("t", &set(&"x".repeat(SESSION_ID_CHARS_MAX)), RunId(1), 1);
        assert!(sessions.get("t").is_some());
        sessions.apply_change("u", &set(&"x".repeat(SESSION_ID_CHARS_MAX + 1)), RunId(2), 2);
        assert!(sessions.get("u").is_none());
        sessions.apply_change("v", &set(""), RunId(3), 3);
        assert!(sessions.get("v").is_none());
    }

    #[test]
    fn past_the_cap_the_least_recently_updated_session_goes() {
        let mut sessions = Sessions::default();
        for i in 0..SESSIONS_PER_AGENT_MAX as u64 {
            sessions.apply_change(&format!("task-{i}"), &set("s"), RunId(i), i);
        }
        assert_eq!(sessions.iter().count(), SESSIONS_PER_AGENT_MAX);
        sessions.apply_change("new", &set("s"), RunId(9_999), 9_999);
        assert_eq!(sessions.iter().count(), SESSIONS_PER_AGENT_MAX);
        assert!(sessions.get("task-0").is_none());
        assert!(sessions.get("task-1").is_some());
        assert!(sessions.get("new").is_some());
    }
}
