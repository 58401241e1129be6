//! What a coding CLI's run produced, as its parsers read it from the output: pure data, shared
//! by the Claude Code and Codex parsers (docs/adapters/coding-cli.md).

use crate::engine::session::SESSION_ID_CHARS_MAX;
use crate::engine::usage::MicroUsd;
use crate::exec::model::TokenUsage;

/// Largest cost a CLI may report for one run, in dollars; a larger (or negative, or not a
/// number) figure is ignored and the price table is used instead (a typo guard).
pub const REPORTED_COST_USD_MAX: u64 = 100_000;

/// What one CLI invocation reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliReport {
    /// The session (Claude Code) or thread (Codex) the run worked in.
    pub session_id: Option<String>,
    /// Tokens: every input token (cached ones included), the cached ones, the output.
    pub tokens: TokenUsage,
    /// Model turns the CLI says it took (at least one when it used any tokens).
    pub turns: u64,
    /// The cost the CLI reported, in micro-dollars (Claude Code's `total_cost_usd`).
    pub cost_micro_usd: Option<u64>,
    /// The agent's final message.
    pub final_text: Option<String>,
    /// The CLI said the run failed, and why.
    pub error: Option<String>,
}

/// A session id as a CLI reported it, when Vigil may pass it back as an argument: 1 to
/// `SESSION_ID_CHARS_MAX` characters, no whitespace or control characters, not starting with
/// `-` (the CLI would read it as an option).
pub fn session_id(value: &serde_json::Value) -> Option<String> {
    let id = value.as_str()?;
    let plausible = !id.is_empty()
        && id.chars().count() <= SESSION_ID_CHARS_MAX
        && !id.starts_with('-')
        && !id.chars().any(|c| c.is_whitespace() || c.is_control());
    plausible.then(|| id.to_string())
}

/// A dollar amount as a CLI wrote it, in micro-dollars, when it is a plausible one.
pub fn micro_usd(value: &serde_json::Value) -> Option<u64> {
    let usd = value.as_f64()?;
    MicroUsd::from_usd(usd, REPORTED_COST_USD_MAX).map(|m| m.0)
}

/// A token count: a non-negative integer, anything else counts as zero.
pub fn count(value: &serde_json::Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// Whether any of `texts` carries one of `signals` (lower-case), case-insensitively.
pub fn mentions<'a>(texts: impl IntoIterator<Item = &'a str>, signals: &[&str]) -> bool {
    texts.into_iter().any(|text| {
        let lower = text.to_lowercase();
        signals.iter().any(|signal| lower.contains(signal))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::usage::MICRO_USD_PER_USD;
    use serde_json::json;

    #[test]
    fn reported_costs_become_micro_dollars_within_the_guard() {
        assert_eq!(micro_usd(&json!(0.0123456)), Some(12_346));
        assert_eq!(micro_usd(&json!(0)), Some(0));
        assert_eq!(
            micro_usd(&json!(REPORTED_COST_USD_MAX)),
            Some(REPORTED_COST_USD_MAX * MICRO_USD_PER_USD)
        );
        assert_eq!(micro_usd(&json!(REPORTED_COST_USD_MAX as f64 + 0.01)), None);
        assert_eq!(micro_usd(&json!(-1.0)), None);
        assert_eq!(micro_usd(&json!("1.0")), None);
    }

    #[test]
    fn session_ids_that_could_pass_for_options_or_break_arguments_are_not_kept() {
        assert_eq!(session_id(&json!("0199a213-81c0")).as_deref(), Some("0199a213-81c0"));
        assert_eq!(session_id(&json!("x".repeat(SESSION_ID_CHARS_MAX))).map(|s| s.len()), Some(SESSION_ID_CHARS_MAX));
        for bad in [json!(""), json!("--help"), json!("a b"), json!("a\nb"), json!(7), json!("x".repeat(SESSION_ID_CHARS_MAX + 1))] {
            assert_eq!(session_id(&bad), None, "{bad}");
        }
    }

    #[test]
    fn signals_match_case_insensitively() {
        assert!(mentions(["ERROR: No saved session"], &["no saved session"]));
        assert!(!mentions(["all good"], &["no saved session"]));
    }
}

/// A stdout line as a JSON object, if it is one. Why the cheap check first: most lines of a
/// chatty run are not JSON at all.
pub fn json_line(line: &str) -> Option<serde_json::Value> {
    let line = line.trim();
    if !line.starts_with('{') {
        return None;
    }
    serde_json::from_str(line).ok()
}
