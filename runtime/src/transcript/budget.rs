//! The arithmetic both stores share: a run's byte budget (entries past it become one
//! truncation note) and the retention plan (which runs a prune removes). Pure functions of
//! their inputs, tested at the named constants' boundaries.

use std::collections::BTreeMap;

use super::{encode, Retention, TranscriptEntry, TranscriptError};
use crate::engine::agent::AgentId;
use crate::engine::run::RunId;

/// Bytes of a run's budget held back for its truncation note, so that the note always fits
/// and a transcript never exceeds [`super::TRANSCRIPT_RUN_BYTES_MAX`].
pub const TRUNCATION_NOTE_RESERVE_BYTES: u64 = 1_024;

/// How much of its budget a run's transcript has used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct RunBudget {
    /// Bytes written, notes included.
    pub bytes: u64,
    /// Whether the truncation note has been written (everything after it is dropped).
    pub truncated: bool,
}

/// The lines one append writes, and what it dropped.
#[derive(Debug, Default)]
pub(super) struct Admitted {
    /// Entries to keep, each with its NDJSON line.
    pub kept: Vec<(TranscriptEntry, String)>,
    pub dropped: usize,
}

impl RunBudget {
    /// Takes `entries` (already prepared) against the budget of `run_bytes_max`: each entry
    /// whose line still fits below the reserve is kept; the first that does not is replaced by
    /// a truncation note, and it and every later entry of the run are dropped.
    pub fn admit(
        &mut self,
        entries: Vec<TranscriptEntry>,
        run_bytes_max: u64,
    ) -> Result<Admitted, TranscriptError> {
        let room = run_bytes_max.saturating_sub(TRUNCATION_NOTE_RESERVE_BYTES);
        let mut admitted = Admitted::default();
        for entry in entries {
            if self.truncated {
                admitted.dropped += 1;
                continue;
            }
            let line = encode(&entry)?;
            if self.bytes + line.len() as u64 <= room {
                self.bytes += line.len() as u64;
                admitted.kept.push((entry, line));
                continue;
            }
            let note = truncation_note(&entry, run_bytes_max);
            let note_line = encode(&note)?;
            self.bytes += note_line.len() as u64;
            self.truncated = true;
            admitted.kept.push((note, note_line));
            admitted.dropped += 1;
        }
        Ok(admitted)
    }
}

/// The note that stands for `first_dropped` and everything after it.
fn truncation_note(first_dropped: &TranscriptEntry, run_bytes_max: u64) -> TranscriptEntry {
    TranscriptEntry::note(
        first_dropped.run,
        first_dropped.seq,
        first_dropped.at_ms,
        format!(
            "truncated: this run's transcript reached its cap of {run_bytes_max} bytes; later \
             entries are dropped"
        ),
    )
}

/// What retention needs to know of one stored transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunMeta {
    pub agent: AgentId,
    pub run: RunId,
    /// `at_ms` of its first entry (0 when unreadable: such a transcript is the first to go).
    pub started_at_ms: u64,
    pub bytes: u64,
    /// Whether a writer may still append to it (a run of this process, not finished). Open
    /// runs count towards their agent's bytes but are only removed by age.
    pub open: bool,
}

/// The runs a prune at `now_ms` removes: every transcript started more than
/// `retention.age_ms` ago, then, per agent, the oldest finished ones (by start, then id) until
/// the agent's remaining bytes are at most `retention.agent_bytes_max`.
pub fn plan_prune(runs: &[RunMeta], now_ms: u64, retention: &Retention) -> Vec<RunId> {
    let mut doomed = Vec::new();
    let mut by_agent: BTreeMap<AgentId, Vec<&RunMeta>> = BTreeMap::new();
    for meta in runs {
        if now_ms.saturating_sub(meta.started_at_ms) > retention.age_ms {
            doomed.push(meta.run);
        } else {
            by_agent.entry(meta.agent).or_default().push(meta);
        }
    }
    for kept in by_agent.values_mut() {
        let mut bytes: u64 = kept.iter().map(|m| m.bytes).sum();
        kept.sort_by_key(|m| (m.started_at_ms, m.run));
        for meta in kept.iter().filter(|m| !m.open) {
            if bytes <= retention.agent_bytes_max {
                break;
            }
            bytes -= meta.bytes;
            doomed.push(meta.run);
        }
    }
    doomed.sort();
    doomed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{
        EntryBody, TRANSCRIPT_AGENT_BYTES_MAX, TRANSCRIPT_RETENTION_DAYS_DEFAULT,
        TRANSCRIPT_RUN_BYTES_MAX,
    };

    fn note(seq: u64, text: &str) -> TranscriptEntry {
        TranscriptEntry::note(RunId(1), seq, 5, text)
    }

    fn line_len(entry: &TranscriptEntry) -> u64 {
        encode(entry).unwrap().len() as u64
    }

    #[test]
    fn an_entry_filling_the_room_exactly_is_kept_one_byte_more_truncates() {
        let room = TRANSCRIPT_RUN_BYTES_MAX - TRUNCATION_NOTE_RESERVE_BYTES;
        let probe = note(1, "");
        // A budget already used up to the room minus this entry's line: it fits exactly.
        let mut budget = RunBudget {
            bytes: room - line_len(&probe),
            truncated: false,
        };
        let admitted = budget
            .admit(vec![probe.clone()], TRANSCRIPT_RUN_BYTES_MAX)
            .unwrap();
        assert_eq!((admitted.kept.len(), admitted.dropped), (1, 0));
        assert_eq!(budget.bytes, room);
        assert!(!budget.truncated);

        let mut budget = RunBudget {
            bytes: room - line_len(&probe) + 1,
            truncated: false,
        };
        let admitted = budget
            .admit(
                vec![probe.clone(), note(2, "later")],
                TRANSCRIPT_RUN_BYTES_MAX,
            )
            .unwrap();
        assert_eq!((admitted.kept.len(), admitted.dropped), (1, 2));
        let (kept, line) = &admitted.kept[0];
        assert!(matches!(&kept.body, EntryBody::Note { text } if text.starts_with("truncated")));
        assert_eq!(
            kept.seq, 1,
            "the note takes the first dropped entry's place"
        );
        assert!(line.len() as u64 <= TRUNCATION_NOTE_RESERVE_BYTES);
        assert!(budget.truncated);
        assert!(budget.bytes <= TRANSCRIPT_RUN_BYTES_MAX);
        // Later appends are dropped whole.
        let admitted = budget
            .admit(vec![note(3, "x")], TRANSCRIPT_RUN_BYTES_MAX)
            .unwrap();
        assert_eq!((admitted.kept.len(), admitted.dropped), (0, 1));
    }

    fn meta(agent: u64, run: u64, started_at_ms: u64, bytes: u64, open: bool) -> RunMeta {
        RunMeta {
            agent: AgentId(agent),
            run: RunId(run),
            started_at_ms,
            bytes,
            open,
        }
    }

    #[test]
    fn age_retention_keeps_exactly_the_limit_and_removes_one_ms_more() {
        let retention = Retention::default();
        let age = TRANSCRIPT_RETENTION_DAYS_DEFAULT * 24 * 60 * 60 * 1_000;
        assert_eq!(retention.age_ms, age);
        let now = 100 * age;
        let runs = [
            meta(1, 1, now - age - 1, 10, false),
            meta(1, 2, now - age, 10, false),
            // Open runs go by age too: no run lives for days.
            meta(2, 3, now - age - 1, 10, true),
        ];
        assert_eq!(plan_prune(&runs, now, &retention), vec![RunId(1), RunId(3)]);
    }

    #[test]
    fn byte_retention_removes_oldest_finished_runs_until_at_the_limit() {
        let retention = Retention::default();
        let max = TRANSCRIPT_AGENT_BYTES_MAX;
        let now = 1_000_000;
        // Exactly at the limit: nothing goes.
        let at_limit = [
            meta(1, 1, 10, max / 2, false),
            meta(1, 2, 20, max / 2, false),
        ];
        assert!(plan_prune(&at_limit, now, &retention).is_empty());
        // One byte over: the oldest goes (started first, whatever its id).
        let over = [
            meta(1, 5, 10, max / 2, false),
            meta(1, 4, 20, max / 2 + 1, false),
            meta(2, 6, 5, max, false),
        ];
        assert_eq!(plan_prune(&over, now, &retention), vec![RunId(5)]);
        // Open runs are skipped; the next oldest finished one goes in their place.
        let open = [
            meta(1, 1, 10, max - 1, true),
            meta(1, 2, 20, 1, false),
            meta(1, 3, 30, 1, false),
        ];
        assert_eq!(plan_prune(&open, now, &retention), vec![RunId(2)]);
    }
}
