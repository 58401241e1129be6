//! Agents: what the runtime keeps alive, and the validation of what a caller may ask for.

use serde::{Deserialize, Serialize};

/// Longest agent name accepted.
pub const AGENT_NAME_CHARS_MAX: usize = 64;
/// Shortest timer interval: below this a fleet would spend its life waking up.
pub const INTERVAL_MS_MIN: u64 = 1_000;
/// Longest timer interval: a week.
pub const INTERVAL_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1_000;
/// Most agents one runtime keeps; creating one more is refused.
pub const AGENTS_MAX: usize = 10_000;

/// Identifies an agent within one runtime. Assigned by the engine, in creation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentId(pub u64);

impl std::fmt::Display for AgentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a caller asks for when registering an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Unique, human-chosen name: 1..=64 of `[A-Za-z0-9._-]`.
    pub name: String,
    /// Timer period in milliseconds.
    pub interval_ms: u64,
}

/// A caller's mistake in an `AgentSpec`, naming the offending field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The JSON field at fault.
    pub field: &'static str,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl AgentSpec {
    /// Checks every field against its limit; the first problem found is returned.
    pub fn validate(&self) -> Result<(), FieldError> {
        let name_ok = !self.name.is_empty()
            && self.name.chars().count() <= AGENT_NAME_CHARS_MAX
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !name_ok {
            return Err(FieldError {
                field: "name",
                message: format!(
                    "name must be 1 to {AGENT_NAME_CHARS_MAX} characters of letters, digits, '.', '_' or '-'"
                ),
            });
        }
        if !(INTERVAL_MS_MIN..=INTERVAL_MS_MAX).contains(&self.interval_ms) {
            return Err(FieldError {
                field: "interval_ms",
                message: format!(
                    "interval_ms must be between {INTERVAL_MS_MIN} and {INTERVAL_MS_MAX} (got {})",
                    self.interval_ms
                ),
            });
        }
        Ok(())
    }
}

/// An agent as the engine holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    pub id: AgentId,
    pub name: String,
    pub interval_ms: u64,
    /// Wall time of the next timer slot (persisted through the event log).
    pub next_fire_at_ms: u64,
    /// Timer wakeups fired so far.
    pub timer_fires: u64,
    /// Slot of the latest timer fire, if any.
    pub last_due_at_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, interval_ms: u64) -> AgentSpec {
        AgentSpec {
            name: name.to_string(),
            interval_ms,
        }
    }

    #[test]
    fn name_limits() {
        assert!(spec("a", 60_000).validate().is_ok());
        assert!(spec(&"x".repeat(AGENT_NAME_CHARS_MAX), 60_000)
            .validate()
            .is_ok());
        let too_long = spec(&"x".repeat(AGENT_NAME_CHARS_MAX + 1), 60_000).validate();
        assert_eq!(too_long.unwrap_err().field, "name");
        assert_eq!(spec("", 60_000).validate().unwrap_err().field, "name");
        assert_eq!(
            spec("has space", 60_000).validate().unwrap_err().field,
            "name"
        );
    }

    #[test]
    fn interval_limits() {
        assert!(spec("a", INTERVAL_MS_MIN).validate().is_ok());
        assert!(spec("a", INTERVAL_MS_MAX).validate().is_ok());
        assert_eq!(
            spec("a", INTERVAL_MS_MIN - 1).validate().unwrap_err().field,
            "interval_ms"
        );
        assert_eq!(
            spec("a", INTERVAL_MS_MAX + 1).validate().unwrap_err().field,
            "interval_ms"
        );
    }
}
