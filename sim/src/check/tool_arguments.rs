//! `tool_arguments_refused_as_documented` (docs/agents.md, "Tools"): a tool call whose
//! arguments break the tool's parameters schema is never carried out, and the model gets back
//! the documented answer. Judged from what the simulated provider and tool server saw: the
//! calls a model reply broke on purpose (with the number of schema errors it put in each), the
//! results the run's next model call carried for them, and the tool server's executions.
//!
//! The answer, restated from the docs (never from the runtime's constants):
//!
//! ```text
//! the arguments of {tool} do not match its parameters schema; nothing was done:
//! - {error}
//! - … and {M} more
//! ```
//!
//! one line per schema error, at most [`LISTED_MAX`] listed; the last line counts the rest and
//! appears only when there is a rest (so only after a full listing, with M ≥ 1). The errors
//! listed and counted are all the arguments carry: each value of a wrong type is one.

use std::collections::BTreeMap;

use super::{violation, Violation};
use crate::trace::{BrokenCall, ToolResultSeen};

const INVARIANT: &str = "tool_arguments_refused_as_documented";
/// Most schema errors the answer lists (docs/agents.md, "Tools": "at most 8 listed").
pub const LISTED_MAX: u64 = 8;
/// Start of each listed line, and of the line that counts the rest (docs/agents.md, "Tools").
const ITEM: &str = "- ";
const MORE_PREFIX: &str = "- … and ";
const MORE_SUFFIX: &str = " more";

/// The calls a run's latest model reply broke, until the run's next model call.
#[derive(Debug, Default)]
pub struct ToolArgumentsOracle {
    /// Per run: the tool round of the reply, and its broken calls.
    pending: BTreeMap<u64, (u32, Vec<BrokenCall>)>,
}

impl ToolArgumentsOracle {
    /// A model call of `run` at tool round `round` was served: the previous round's broken
    /// calls must each have come back refused as documented; this reply's wait for the next.
    pub fn served(
        &mut self,
        run: u64,
        round: u32,
        broken: &[BrokenCall],
        seen: &[ToolResultSeen],
    ) -> Result<(), Violation> {
        if let Some((asked_round, calls)) = self.pending.remove(&run) {
            // Only the round right after the reply carries its results (a run cut short
            // makes no next call; a run id is never reused).
            if round == asked_round + 1 {
                for call in &calls {
                    answered(run, call, seen)?;
                }
            }
        }
        if !broken.is_empty() {
            self.pending.insert(run, (round, broken.to_vec()));
        }
        Ok(())
    }

    /// The tool server carried out call `call_id` of `run`: never one whose arguments broke
    /// the schema.
    pub fn tool_served(&self, run: u64, call_id: &str) -> Result<(), Violation> {
        let Some((_, calls)) = self.pending.get(&run) else {
            return Ok(());
        };
        match calls.iter().find(|c| c.id == call_id) {
            Some(call) => violation(
                INVARIANT,
                format!(
                    "run {run}: the tool server carried out call {call_id} of {}, whose arguments break its parameters schema ({} errors)",
                    call.tool, call.errors
                ),
            ),
            None => Ok(()),
        }
    }
}

/// `call`'s result among those the next model call carried, in the documented form.
fn answered(run: u64, call: &BrokenCall, seen: &[ToolResultSeen]) -> Result<(), Violation> {
    let Some(result) = seen.iter().find(|r| r.call_id == call.id) else {
        return violation(
            INVARIANT,
            format!(
                "run {run}: the model call after call {} (arguments with {} schema errors) carries no result for it",
                call.id, call.errors
            ),
        );
    };
    match refusal_form(call, &result.text) {
        Ok(()) => Ok(()),
        Err(why) => violation(
            INVARIANT,
            format!(
                "run {run}: call {} of {} (arguments with {} schema errors) came back {:?}: {why}",
                call.id, call.tool, call.errors, result.text
            ),
        ),
    }
}

/// Whether `text` is the documented answer to `call`; why not, if it is not.
fn refusal_form(call: &BrokenCall, text: &str) -> Result<(), String> {
    let head = format!(
        "the arguments of {} do not match its parameters schema; nothing was done:\n",
        call.tool
    );
    let lines = text
        .strip_prefix(&head)
        .ok_or_else(|| format!("it does not start {head:?}"))?;
    let lines: Vec<&str> = lines.split('\n').collect();
    if let Some(line) = lines.iter().find(|l| !l.starts_with(ITEM)) {
        return Err(format!("line {line:?} is not a listed error"));
    }
    let more = lines.last().and_then(|l| more_count(l));
    let listed = (lines.len() - usize::from(more.is_some())) as u64;
    let more = more.unwrap_or(0);
    if listed == 0 || listed > LISTED_MAX {
        return Err(format!("it lists {listed} errors, not 1 to {LISTED_MAX}"));
    }
    if more > 0 && listed < LISTED_MAX {
        return Err(format!(
            "it counts {more} more after listing {listed}, fewer than {LISTED_MAX}"
        ));
    }
    if listed + more != u64::from(call.errors) {
        return Err(format!(
            "it lists {listed} and counts {more} more: not the {} errors the arguments carry",
            call.errors
        ));
    }
    Ok(())
}

/// M of a `- … and M more` line (M ≥ 1); none for any other line.
fn more_count(line: &str) -> Option<u64> {
    let count = line.strip_prefix(MORE_PREFIX)?.strip_suffix(MORE_SUFFIX)?;
    count.parse().ok().filter(|m| *m >= 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(errors: u32) -> BrokenCall {
        BrokenCall {
            id: "call_1_0_0_broken".into(),
            tool: "next_page".into(),
            errors,
        }
    }

    /// The documented answer listing `listed` errors and counting `more` more (none: no line).
    fn answer(listed: u32, more: Option<u32>) -> String {
        let mut text =
            "the arguments of next_page do not match its parameters schema; nothing was done:"
                .to_string();
        for i in 0..listed {
            text.push_str(&format!("\n- /tags/{i}: 7 is not of type \"string\""));
        }
        if let Some(more) = more {
            text.push_str(&format!("\n- … and {more} more"));
        }
        text
    }

    fn seen(text: String) -> Vec<ToolResultSeen> {
        vec![ToolResultSeen {
            call_id: "call_1_0_0_broken".into(),
            text,
        }]
    }

    /// Run 1's reply at round 0 broke `call`; its round-1 call carried `results`.
    fn judge(call: BrokenCall, results: Vec<ToolResultSeen>) -> Result<(), Violation> {
        let mut oracle = ToolArgumentsOracle::default();
        oracle.served(1, 0, &[call], &[])?;
        oracle.served(1, 1, &[], &results)
    }

    #[test]
    fn the_documented_answers_pass() {
        judge(call(3), seen(answer(3, None))).unwrap();
        judge(call(8), seen(answer(8, None))).unwrap();
        judge(call(13), seen(answer(8, Some(5)))).unwrap();
    }

    #[test]
    fn a_tail_after_a_short_listing_is_caught() {
        // What `errors + listed` for the rest would answer: a rest where there is none.
        let err = judge(call(3), seen(answer(3, Some(6)))).unwrap_err();
        assert_eq!(err.invariant, INVARIANT);
        assert!(err.detail.contains("fewer than 8"), "{}", err.detail);
    }

    #[test]
    fn a_listing_past_the_limit_or_a_wrong_count_is_caught() {
        for (call, text) in [
            (call(10), answer(9, Some(1))),
            (call(13), answer(8, Some(4))),
            (call(13), answer(8, None)),
            (call(2), answer(0, None)),
        ] {
            let err = judge(call, seen(text.clone())).unwrap_err();
            assert_eq!(err.invariant, INVARIANT, "{text}");
        }
    }

    #[test]
    fn another_answer_or_none_is_caught() {
        let err = judge(call(2), seen("{\"result\": \"next_page: 3 items\"}".into())).unwrap_err();
        assert!(err.detail.contains("does not start"), "{}", err.detail);
        let err = judge(call(2), Vec::new()).unwrap_err();
        assert!(err.detail.contains("carries no result"), "{}", err.detail);
    }

    #[test]
    fn a_call_carried_out_is_caught_and_a_run_cut_short_is_not_judged() {
        let mut oracle = ToolArgumentsOracle::default();
        oracle.served(1, 0, &[call(2)], &[]).unwrap();
        oracle.tool_served(1, "call_1_0_0_ok").unwrap();
        let err = oracle.tool_served(1, "call_1_0_0_broken").unwrap_err();
        assert_eq!(err.invariant, INVARIANT);
        // A later run of the agent (another run id) is not the broken call's next round.
        oracle.served(2, 0, &[], &[]).unwrap();
    }
}
