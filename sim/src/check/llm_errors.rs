//! `llm_error_quotes_the_answer` (docs/agents.md, stop reasons): a run that ends `llm_error`
//! because the provider answered 429 or 5xx says so in its `detail`, `the provider answered
//! {status}…: {quote}`, where the quote is the answer's body cut to its first 200 characters
//! (docs/api.md, `ERROR_EXCERPT_CHARS_MAX`) and ending `…` when it was cut. Judged from the body
//! the simulated provider served the run's last model call and the run's `run_finished`.
//!
//! A run whose node never read that answer (lost on the network, or a timeout first) ends with
//! another detail (`the provider did not answer …`) and is not judged here.

use std::collections::BTreeMap;

use super::{violation, Violation};

const INVARIANT: &str = "llm_error_quotes_the_answer";
/// Characters of the answer the detail quotes (docs/api.md, `ERROR_EXCERPT_CHARS_MAX`).
pub const QUOTED_CHARS_MAX: usize = 200;
/// What ends a quote that was cut (docs/agents.md).
const CUT_MARK: char = '…';
/// How a detail that reports the provider's status begins (docs/agents.md).
pub const ANSWERED_PREFIX: &str = "the provider answered ";

/// The error bodies the provider served, per run, until the run ends.
#[derive(Debug, Default)]
pub struct LlmErrorsOracle {
    /// Per run: the body of the 429 or 5xx its latest model call was answered with (none when
    /// that call was answered otherwise).
    last_error: BTreeMap<u64, Option<String>>,
}

impl LlmErrorsOracle {
    /// The provider served a model call of `run`; `error_body` is the 429 or 5xx body it sent.
    pub fn served(&mut self, run: u64, error_body: Option<&str>) {
        self.last_error.insert(run, error_body.map(str::to_string));
    }

    /// Run `run` finished with `detail`; `llm_error` says whether it stopped for the model.
    pub fn finished(&mut self, run: u64, llm_error: bool, detail: &str) -> Result<(), Violation> {
        let Some(Some(body)) = self.last_error.remove(&run) else {
            return Ok(());
        };
        if !llm_error || !detail.starts_with(ANSWERED_PREFIX) {
            return Ok(());
        }
        let quote = documented_quote(&body);
        if detail.ends_with(&format!(": {quote}")) {
            return Ok(());
        }
        violation(
            INVARIANT,
            format!(
                "run {run} ended llm_error with detail {detail:?}, which does not end with the documented quote of the answer the provider sent ({} characters): {quote:?}",
                body.chars().count()
            ),
        )
    }
}

/// The quote the documents promise: the body's first [`QUOTED_CHARS_MAX`] characters, and the
/// cut mark when there were more.
fn documented_quote(body: &str) -> String {
    let mut quote: String = body.chars().take(QUOTED_CHARS_MAX).collect();
    if body.chars().nth(QUOTED_CHARS_MAX).is_some() {
        quote.push(CUT_MARK);
    }
    quote
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "the provider answered 503 Service Unavailable: ";

    fn judged(body: &str, detail: &str) -> Result<(), Violation> {
        let mut oracle = LlmErrorsOracle::default();
        oracle.served(7, Some(body));
        oracle.finished(7, true, detail)
    }

    #[test]
    fn a_short_answer_is_quoted_whole() {
        judged("Overloaded", &format!("{PREFIX}Overloaded")).unwrap();
        let err = judged("Overloaded", &format!("{PREFIX}Overload")).unwrap_err();
        assert_eq!(err.invariant, INVARIANT);
    }

    #[test]
    fn an_answer_of_exactly_the_limit_is_quoted_whole_without_a_mark() {
        let body = "é".repeat(QUOTED_CHARS_MAX);
        judged(&body, &format!("{PREFIX}{body}")).unwrap();
        let err = judged(&body, &format!("{PREFIX}{body}…")).unwrap_err();
        assert_eq!(err.invariant, INVARIANT);
    }

    #[test]
    fn a_longer_answer_is_cut_at_the_limit_and_marked() {
        let body = format!("{}tail", "x".repeat(QUOTED_CHARS_MAX));
        let cut = "x".repeat(QUOTED_CHARS_MAX);
        judged(&body, &format!("{PREFIX}{cut}…")).unwrap();
        // Unmarked, whole, or cut elsewhere: each reported.
        for wrong in [cut.clone(), body.clone(), format!("{}…", &cut[1..])] {
            let err = judged(&body, &format!("{PREFIX}{wrong}")).unwrap_err();
            assert_eq!(err.invariant, INVARIANT);
        }
    }

    #[test]
    fn runs_whose_node_never_read_the_answer_or_got_none_are_not_judged() {
        let mut oracle = LlmErrorsOracle::default();
        oracle.served(1, Some("Overloaded"));
        oracle
            .finished(
                1,
                true,
                "the provider did not answer within adapter.request_timeout_ms = 30000",
            )
            .unwrap();
        // A later call of the run answered normally: its end is not about an error answer.
        oracle.served(2, Some("Overloaded"));
        oracle.served(2, None);
        oracle
            .finished(2, true, "the provider answered 503 Service Unavailable: x")
            .unwrap();
        // Not an llm_error end (the run was cancelled meanwhile).
        oracle.served(3, Some("Overloaded"));
        oracle
            .finished(3, false, "the provider answered something else")
            .unwrap();
    }
}
