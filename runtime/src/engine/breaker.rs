//! The circuit breaker, one per agent (the Heart §6, resilience4j). Two triggers count
//! consecutive failures separately: LLM failures (a failed or timed-out model call) and tool
//! failures. `failures_to_open` in a row of either opens the breaker: wakeups are refused with
//! `breaker_open` and queued runs are cancelled. After the cooldown the breaker is half-open: the
//! first wakeup is admitted as the one probe, every other is refused until the probe ends. A
//! successful probe closes the breaker; a failed one opens it again with the cooldown doubled, up
//! to `cooldown_ms_max`. An operator can reset it. Every transition is an event (invariant 8).

use serde::{Deserialize, Serialize};

use super::agent::FieldError;
use super::run::RunId;

/// Defaults (the Heart paper's figures, docs/api.md "Circuit breaker": three failures, 15 minutes, doubling up to 2 hours).
pub const FAILURES_TO_OPEN_DEFAULT: u32 = 3;
pub const COOLDOWN_MS_DEFAULT: u64 = 15 * 60 * 1_000;
pub const COOLDOWN_MS_MAX_DEFAULT: u64 = 2 * 60 * 60 * 1_000;
/// Bounds of the policy.
pub const FAILURES_TO_OPEN_MAX: u32 = 100;
pub const COOLDOWN_MS_MIN: u64 = 1_000;
pub const COOLDOWN_MS_LIMIT: u64 = 7 * 24 * 60 * 60 * 1_000;

/// What kind of failure ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCause {
    /// The model call failed or timed out.
    Llm,
    /// A tool the agent called failed.
    Tool,
}

/// An agent's breaker settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerPolicy {
    #[serde(default = "failures_default")]
    pub failures_to_open: u32,
    #[serde(default = "cooldown_default")]
    pub cooldown_ms: u64,
    #[serde(default = "cooldown_max_default")]
    pub cooldown_ms_max: u64,
}

fn failures_default() -> u32 {
    FAILURES_TO_OPEN_DEFAULT
}
fn cooldown_default() -> u64 {
    COOLDOWN_MS_DEFAULT
}
fn cooldown_max_default() -> u64 {
    COOLDOWN_MS_MAX_DEFAULT
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            failures_to_open: FAILURES_TO_OPEN_DEFAULT,
            cooldown_ms: COOLDOWN_MS_DEFAULT,
            cooldown_ms_max: COOLDOWN_MS_MAX_DEFAULT,
        }
    }
}

impl BreakerPolicy {
    /// Checks the policy's bounds.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(1..=FAILURES_TO_OPEN_MAX).contains(&self.failures_to_open) {
            return Err(FieldError::new(
                "breaker.failures_to_open",
                format!("breaker.failures_to_open must be between 1 and {FAILURES_TO_OPEN_MAX} (got {})", self.failures_to_open),
            ));
        }
        if !(COOLDOWN_MS_MIN..=COOLDOWN_MS_LIMIT).contains(&self.cooldown_ms) {
            return Err(FieldError::new(
                "breaker.cooldown_ms",
                format!("breaker.cooldown_ms must be between {COOLDOWN_MS_MIN} and {COOLDOWN_MS_LIMIT} (got {})", self.cooldown_ms),
            ));
        }
        if !(self.cooldown_ms..=COOLDOWN_MS_LIMIT).contains(&self.cooldown_ms_max) {
            return Err(FieldError::new(
                "breaker.cooldown_ms_max",
                format!("breaker.cooldown_ms_max must be between breaker.cooldown_ms and {COOLDOWN_MS_LIMIT} (got {})", self.cooldown_ms_max),
            ));
        }
        Ok(())
    }

    /// The cooldown after `previous` failed as a probe: doubled, capped.
    pub fn next_cooldown_ms(&self, previous: u64) -> u64 {
        previous.saturating_mul(2).min(self.cooldown_ms_max)
    }
}

/// Where an agent's breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum BreakerState {
    /// Wakeups pass; consecutive failures are counted per trigger.
    Closed {
        llm_failures: u32,
        tool_failures: u32,
    },
    /// Wakeups are refused until the wall instant `until_ms`.
    Open { until_ms: u64, cooldown_ms: u64 },
    /// The cooldown is over: one probe is admitted (`probe` once it is queued).
    HalfOpen {
        cooldown_ms: u64,
        probe: Option<RunId>,
    },
}

impl Default for BreakerState {
    fn default() -> Self {
        BreakerState::Closed {
            llm_failures: 0,
            tool_failures: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cooldowns_double_up_to_the_cap() {
        let policy = BreakerPolicy::default();
        let mut cooldown = policy.cooldown_ms;
        let mut seen = vec![cooldown];
        for _ in 0..5 {
            cooldown = policy.next_cooldown_ms(cooldown);
            seen.push(cooldown);
        }
        let minutes: Vec<u64> = seen.iter().map(|c| c / 60_000).collect();
        assert_eq!(minutes, [15, 30, 60, 120, 120, 120]);
    }

    #[test]
    fn policy_bounds_name_their_field() {
        let p = BreakerPolicy {
            failures_to_open: 0,
            ..BreakerPolicy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "breaker.failures_to_open");
        let p = BreakerPolicy {
            cooldown_ms: COOLDOWN_MS_MIN - 1,
            ..BreakerPolicy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "breaker.cooldown_ms");
        let p = BreakerPolicy {
            cooldown_ms_max: COOLDOWN_MS_DEFAULT - 1,
            ..BreakerPolicy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "breaker.cooldown_ms_max");
        assert!(BreakerPolicy::default().validate().is_ok());
    }
}
