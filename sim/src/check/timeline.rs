//! `timeline_as_logged` (48): a page of `GET /v1/agents/{id}/timeline` is the agent's state
//! changes as the log holds them (docs/api.md). Restated here: which events are entries and the
//! type each gets (pauses and resumes, online and offline, the breaker's four changes, run starts
//! and ends of that agent, nothing else); oldest first, at most `limit` of them; and, the page
//! having read the log up to its `next_after` (at most its `head_seq`), every such event of the
//! agent at or after `since_ms` up to there, none left out. The workload reads from
//! `since_ms` 0, so the documented "may start a little late" after a wall clock that went back
//! does not apply: the page starts at the log's start.
//!
//! The oracle follows the committed events only once the `edges` workload has been answered
//! (other scenarios read no timeline and need not pay for the bookkeeping), and judges the range
//! it followed.

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};

use super::{violation, Violation};
use crate::trace::TimelineSeen;

/// The entry type of `kind` if it is a timeline entry (docs/api.md's table).
fn entry_type(kind: &EventKind) -> Option<&'static str> {
    Some(match kind {
        EventKind::AgentPaused { .. } => "agent_paused",
        EventKind::AgentResumed { .. } => "agent_resumed",
        EventKind::AgentOnline { .. } => "agent_online",
        EventKind::AgentOffline { .. } => "agent_offline",
        EventKind::BreakerOpened { .. } => "breaker_opened",
        EventKind::BreakerHalfOpened { .. } => "breaker_half_opened",
        EventKind::BreakerClosed { .. } => "breaker_closed",
        EventKind::BreakerReset { .. } => "breaker_reset",
        EventKind::RunStarted { .. } => "run_started",
        EventKind::RunFinished { .. } => "run_finished",
        _ => return None,
    })
}

#[derive(Debug, Default)]
pub struct TimelineOracle {
    /// The first seq followed (none: not following yet).
    from_seq: Option<u64>,
    /// The newest seq committed so far, followed or not.
    last_seq: u64,
    /// Each agent's entries by seq: (at_ms, type).
    entries: BTreeMap<u64, BTreeMap<u64, (u64, &'static str)>>,
}

impl TimelineOracle {
    /// Starts following the log from the next commit (an `edges` answer came).
    pub fn follow(&mut self) {
        self.from_seq.get_or_insert(self.last_seq + 1);
    }

    pub fn committed(&mut self, event: &Event) {
        self.last_seq = self.last_seq.max(event.seq);
        let Some(from_seq) = self.from_seq else {
            return;
        };
        let (Some(agent), Some(kind)) = (event.kind.agent(), entry_type(&event.kind)) else {
            return;
        };
        if event.seq >= from_seq {
            let agent = self.entries.entry(agent.0).or_default();
            agent.insert(event.seq, (event.at_ms, kind));
        }
    }

    /// Judges one page of `agent`'s timeline.
    pub fn shown(
        &mut self,
        agent: u64,
        (since_ms, limit): (u64, usize),
        entries: &[TimelineSeen],
        next_after: u64,
        head_seq: u64,
    ) -> Result<(), Violation> {
        let Some(from_seq) = self.from_seq else {
            return Ok(());
        };
        let what = format!("agent {agent}'s timeline since {since_ms} (limit {limit})");
        let last = entries.last().map_or(0, |e| e.seq);
        if entries.len() > limit || next_after > head_seq || last > next_after {
            return violation(
                "timeline_as_logged",
                format!("{what}: {} entries up to seq {last}, next_after {next_after}, head {head_seq}: past its limit or its own bounds", entries.len()),
            );
        }
        if entries.len() == limit && next_after != last {
            return violation(
                "timeline_as_logged",
                format!("{what}: a full page ends at seq {last}, so next_after should be it; it was {next_after}"),
            );
        }
        let expected: Vec<TimelineSeen> = self
            .entries
            .get(&agent)
            .into_iter()
            .flat_map(|e| e.range(from_seq..=next_after))
            .filter(|(_, (at_ms, _))| *at_ms >= since_ms)
            .map(|(seq, (at_ms, kind))| TimelineSeen {
                seq: *seq,
                at_ms: *at_ms,
                kind: kind.to_string(),
            })
            .collect();
        let shown: Vec<&TimelineSeen> = entries.iter().filter(|e| e.seq >= from_seq).collect();
        // The first entry where the page and the log part, if they do.
        let first = shown.iter().zip(&expected).position(|(s, e)| *s != e);
        if first.is_some() || shown.len() != expected.len() {
            let index = first.unwrap_or(shown.len().min(expected.len()));
            return violation(
                "timeline_as_logged",
                format!(
                    "{what}: up to seq {next_after} the log holds {} entries from seq {from_seq}, the page showed {}; the first difference, at entry {index}: logged {:?}, shown {:?}",
                    expected.len(),
                    shown.len(),
                    expected.get(index),
                    shown.get(index)
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use vigil::engine::agent::AgentId;
    use vigil::engine::pause::PausedBy;

    use super::*;

    fn event(seq: u64, at_ms: u64, kind: EventKind) -> Event {
        let mut event = crate::check::test_events::event(at_ms, kind);
        event.seq = seq;
        event
    }

    fn seen(seq: u64, at_ms: u64, kind: &str) -> TimelineSeen {
        TimelineSeen {
            seq,
            at_ms,
            kind: kind.into(),
        }
    }

    fn oracle() -> TimelineOracle {
        let mut oracle = TimelineOracle::default();
        oracle.follow();
        let paused = EventKind::AgentPaused {
            agent: AgentId(1),
            until_ms: None,
            by: PausedBy::Operator,
        };
        oracle.committed(&event(1, 100, paused));
        oracle.committed(&event(
            2,
            200,
            EventKind::AgentResumed { agent: AgentId(2) },
        ));
        oracle.committed(&event(
            3,
            300,
            EventKind::AgentResumed { agent: AgentId(1) },
        ));
        oracle
    }

    #[test]
    fn a_page_as_logged_is_silent() {
        let mut oracle = oracle();
        let page = [seen(1, 100, "agent_paused"), seen(3, 300, "agent_resumed")];
        assert_eq!(oracle.shown(1, (0, 100), &page, 3, 3), Ok(()));
        // A page cut at its limit, and one that stopped reading before the second entry.
        assert_eq!(oracle.shown(1, (0, 1), &page[..1], 1, 3), Ok(()));
        assert_eq!(oracle.shown(1, (0, 100), &page[..1], 2, 3), Ok(()));
    }

    #[test]
    fn a_page_missing_an_entry_or_showing_another_agent_s_is_reported() {
        let mut oracle = oracle();
        let missing = [seen(3, 300, "agent_resumed")];
        let other = [
            seen(1, 100, "agent_paused"),
            seen(2, 200, "agent_resumed"),
            seen(3, 300, "agent_resumed"),
        ];
        let mistyped = [seen(1, 100, "agent_resumed"), seen(3, 300, "agent_resumed")];
        for page in [&missing[..], &other[..], &mistyped[..]] {
            let error = oracle.shown(1, (0, 100), page, 3, 3).expect_err("reported");
            assert_eq!(error.invariant, "timeline_as_logged");
        }
        // A full page whose next_after is not its last entry.
        let full = [seen(1, 100, "agent_paused")];
        assert!(oracle.shown(1, (0, 1), &full, 3, 3).is_err());
    }
}
