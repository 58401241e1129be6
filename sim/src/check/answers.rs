//! `answer_excerpt_as_documented`: a run of the agent loop that ended its turn on the model's
//! final answer keeps the first 32 KiB of that answer as `report.answer_excerpt` (docs/api.md,
//! runs): the whole answer when it fits; otherwise its start, cut at a character boundary and
//! followed by the mark `[...truncated]`, the two together within the 32 KiB, and
//! `excerpt_truncated` set. Judged against the answer the simulated provider served last in
//! the run, in scenarios whose provider records its final answers (`model_call_served`'s
//! `answer`). The bound and the mark are restated from docs/api.md, not imported.

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::StopReason;

use super::{violation, Violation};

/// What a run keeps of its final answer, in bytes (docs/api.md: "the first 32 KiB").
pub const ANSWER_EXCERPT_BYTES_MAX: usize = 32 * 1_024;
/// What ends an answer's excerpt when the answer was longer (docs/api.md).
pub const EXCERPT_CUT_MARK: &str = "[...truncated]";

/// The excerpt docs/api.md describes for `answer`, and whether it was cut.
pub fn documented_excerpt(answer: &str) -> (String, bool) {
    if answer.len() <= ANSWER_EXCERPT_BYTES_MAX {
        return (answer.to_string(), false);
    }
    let room = ANSWER_EXCERPT_BYTES_MAX - EXCERPT_CUT_MARK.len();
    // The longest start of whole characters that fits the room.
    let kept: String = answer
        .char_indices()
        .take_while(|(at, c)| at + c.len_utf8() <= room)
        .map(|(_, c)| c)
        .collect();
    (format!("{kept}{EXCERPT_CUT_MARK}"), true)
}

/// The final answers served per run, and what was judged.
#[derive(Debug, Default)]
pub struct AnswersOracle {
    /// Per run: the text of the last reply the provider served it, when that reply was a
    /// final answer the trace recorded (`None`: it was something else).
    last: BTreeMap<u64, Option<String>>,
    /// Excerpts judged, and those of them cut.
    judged: (u64, u64),
}

impl AnswersOracle {
    /// The provider served run `run` a reply: `answer` when it was a recorded final answer.
    pub fn served(&mut self, run: u64, answer: Option<&str>) {
        self.last.insert(run, answer.map(str::to_string));
    }

    /// Judges a committed run end against the answer last served to its run.
    pub fn committed(&mut self, event: &Event) -> Result<(), Violation> {
        let EventKind::RunFinished {
            run,
            stop_reason,
            report,
            ..
        } = &event.kind
        else {
            return Ok(());
        };
        let Some(Some(answer)) = self.last.remove(&run.0) else {
            return Ok(());
        };
        if *stop_reason != Some(StopReason::EndTurn) {
            return Ok(());
        }
        let (expected, cut) = documented_excerpt(&answer);
        let kept = report.as_ref().and_then(|r| r.answer_excerpt.as_deref());
        let truncated = report.as_ref().is_some_and(|r| r.excerpt_truncated);
        if kept != Some(expected.as_str()) || truncated != cut {
            return violation(
                "answer_excerpt_as_documented",
                format!(
                    "run {run} ended its turn on an answer of {} bytes; it kept an excerpt of {:?} bytes (truncated: {truncated}), where docs/api.md says {} bytes (truncated: {cut}){}",
                    answer.len(),
                    kept.map(str::len),
                    expected.len(),
                    match kept {
                        Some(kept) if kept.len() == expected.len() => ", with other text",
                        _ => "",
                    }
                ),
            );
        }
        self.judged.0 += 1;
        self.judged.1 += u64::from(cut);
        Ok(())
    }

    /// Excerpts judged so far, and how many of them were cut.
    #[cfg(test)]
    pub fn judged(&self) -> (u64, u64) {
        self.judged
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::AgentId;
    use vigil::engine::run::{RunId, RunReport, RunStatus};

    use super::*;

    fn finished(excerpt: &str, truncated: bool) -> Event {
        Event {
            seq: 9,
            at_ms: 0,
            tenant: "t".into(),
            kind: EventKind::RunFinished {
                run: RunId(4),
                agent: AgentId(1),
                status: RunStatus::Succeeded,
                detail: "the model ended its turn".into(),
                cause: None,
                stop_reason: Some(StopReason::EndTurn),
                report: Some(Box::new(RunReport {
                    answer_excerpt: Some(excerpt.into()),
                    excerpt_truncated: truncated,
                    ..RunReport::default()
                })),
                error_class: None,
            },
        }
    }

    #[test]
    fn the_documented_excerpt_fits_its_bytes_and_cuts_between_characters() {
        let fits = "é".repeat(ANSWER_EXCERPT_BYTES_MAX / 2);
        assert_eq!(documented_excerpt(&fits), (fits.clone(), false));
        let (cut, truncated) = documented_excerpt(&format!("{fits}x"));
        assert!(truncated);
        assert!(cut.len() <= ANSWER_EXCERPT_BYTES_MAX && cut.ends_with(EXCERPT_CUT_MARK));
        // The room is 32,754 bytes: 16,377 two-byte characters fill it exactly.
        assert_eq!(cut.len() - EXCERPT_CUT_MARK.len(), 32_754);
        let three = "→".repeat(20_000);
        let (cut, _) = documented_excerpt(&three);
        assert_eq!(cut.len() - EXCERPT_CUT_MARK.len(), 32_754 / 3 * 3);
    }

    #[test]
    fn an_excerpt_kept_as_documented_passes_and_one_cut_elsewhere_is_reported() {
        let answer = "naïve résumé · ".repeat(3_000);
        let (expected, _) = documented_excerpt(&answer);
        let mut oracle = AnswersOracle::default();
        oracle.served(4, Some(&answer));
        oracle
            .committed(&finished(&expected, true))
            .expect("as documented");
        assert_eq!(oracle.judged(), (1, 1));
        // Cut with the mark's length added instead of taken away: past the 32 KiB.
        let long = format!(
            "{}{EXCERPT_CUT_MARK}",
            &answer[..ANSWER_EXCERPT_BYTES_MAX + 1]
        );
        oracle.served(4, Some(&answer));
        let caught = oracle.committed(&finished(&long, true)).unwrap_err();
        assert_eq!(caught.invariant, "answer_excerpt_as_documented");
        // Whole, but not said to be cut... and a short answer kept whole passes.
        oracle.served(4, Some(&answer));
        assert!(oracle.committed(&finished(&expected, false)).is_err());
        oracle.served(4, Some("done"));
        oracle.committed(&finished("done", false)).expect("whole");
        // A run whose last reply was no recorded answer is not judged.
        oracle.served(4, None);
        oracle
            .committed(&finished("anything", false))
            .expect("not judged");
    }
}
