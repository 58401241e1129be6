//! `history_shown_as_documented` (46; docs/api.md, `GET /v1/agents/{id}/history`): the history
//! an agent's next run will send, as the node shows it, is what the log says it is.
//!
//! - Its `bytes` is the sum of its messages' lengths, and it holds at most 40 messages and
//!   64 KiB (docs/api.md, `HISTORY_MESSAGES_MAX` / `HISTORY_BYTES_MAX`).
//! - Its messages are the agent's history folded from the log: each durable `run_finished`
//!   appends its report's `history_append`, and the oldest messages go while either bound is
//!   passed. The node answers from its engine at some instant between the request's sending
//!   and its answer's arrival, and its engine may hold one run's end not yet durable: a read
//!   must show a history the log held at some instant of that span, or the one the agent's
//!   next durable append makes (judged at that append). A crash before that append forgets
//!   the read (what it showed may never have become durable).

use std::collections::{BTreeMap, VecDeque};

use vigil::engine::event::{Event, EventKind};
use vigil::engine::history::Role;

use super::{violation, Violation};
use crate::trace::text_digest;

const INVARIANT: &str = "history_shown_as_documented";
/// Most messages a history holds (docs/api.md).
const MESSAGES_MAX: usize = 40;
/// Most bytes of text a history holds (docs/api.md: 64 KiB).
const BYTES_MAX: usize = 64 * 1024;
/// Earlier histories of an agent kept to judge reads against: a read's span covers at most a
/// few of an agent's run ends.
const EARLIER_KEPT: usize = 8;

/// One message as the trace carries it: role, text digest, length in bytes.
type Message = (Role, u64, usize);

/// One agent's history by the log, the ones before it, and reads that matched none of them.
#[derive(Debug, Default)]
struct AgentHistory {
    messages: VecDeque<Message>,
    bytes: usize,
    /// When the current history became durable (0: it always was, the empty history).
    since_ms: u64,
    /// Earlier histories, oldest first: (durable from, until, messages).
    earlier: VecDeque<(u64, u64, Vec<Message>)>,
    /// Reads that showed none of the histories of their span, to judge against the next
    /// durable append.
    pending: Vec<Vec<Message>>,
}

impl AgentHistory {
    fn append(&mut self, t_ms: u64, appended: &[Message]) {
        let before: Vec<Message> = self.messages.iter().copied().collect();
        self.earlier.push_back((self.since_ms, t_ms, before));
        if self.earlier.len() > EARLIER_KEPT {
            self.earlier.pop_front();
        }
        self.since_ms = t_ms;
        for message in appended {
            self.bytes += message.2;
            self.messages.push_back(*message);
        }
        while self.messages.len() > MESSAGES_MAX || self.bytes > BYTES_MAX {
            let Some(oldest) = self.messages.pop_front() else {
                break;
            };
            self.bytes -= oldest.2;
        }
    }

    fn shows(&self, messages: &[Message]) -> bool {
        self.messages.iter().eq(messages.iter())
    }

    /// Whether `messages` is a history the log held at some instant from `sent_ms` on.
    fn held_since(&self, sent_ms: u64, messages: &[Message]) -> bool {
        self.shows(messages)
            || self
                .earlier
                .iter()
                .any(|(_, until_ms, earlier)| *until_ms >= sent_ms && earlier == messages)
    }
}

/// Every agent's history by the log.
#[derive(Debug, Default)]
pub struct HistoryOracle {
    agents: BTreeMap<u64, AgentHistory>,
}

impl HistoryOracle {
    /// An event became durable at `t_ms` (or was found on disk at recovery).
    pub fn committed(&mut self, t_ms: u64, event: &Event) -> Result<(), Violation> {
        let EventKind::RunFinished {
            agent,
            run,
            report: Some(report),
            ..
        } = &event.kind
        else {
            return Ok(());
        };
        if report.history_append.is_empty() {
            return Ok(());
        }
        let appended: Vec<Message> = report
            .history_append
            .iter()
            .map(|m| (m.role, text_digest(&m.text), m.text.len()))
            .collect();
        let history = self.agents.entry(agent.0).or_default();
        history.append(t_ms, &appended);
        let Some(read) = std::mem::take(&mut history.pending)
            .into_iter()
            .find(|read| !history.shows(read))
        else {
            return Ok(());
        };
        violation(
            INVARIANT,
            format!(
                "agent {agent}'s history was shown with {} messages that are none of its histories by the log while the read was served, nor the one after run {run}'s end (seq {}, now {} messages)",
                read.len(),
                event.seq,
                history.messages.len()
            ),
        )
    }

    /// The node's process died: what a pending read showed may never become durable.
    pub fn crashed(&mut self) {
        for history in self.agents.values_mut() {
            history.pending.clear();
        }
    }

    /// At `t_ms` the workload was shown `messages` and `bytes` as agent `agent`'s history, for a
    /// request sent at `sent_ms`.
    pub fn shown(
        &mut self,
        t_ms: u64,
        agent: u64,
        sent_ms: u64,
        messages: &[Message],
        bytes: usize,
    ) -> Result<(), Violation> {
        let sum: usize = messages.iter().map(|m| m.2).sum();
        if bytes != sum || messages.len() > MESSAGES_MAX || sum > BYTES_MAX {
            return violation(
                INVARIANT,
                format!(
                    "agent {agent}'s history was shown at {t_ms} ms with {} messages of {sum} bytes in all, answering bytes = {bytes} (the bytes are the messages' sum, at most {MESSAGES_MAX} messages and {BYTES_MAX} bytes)",
                    messages.len()
                ),
            );
        }
        let history = self.agents.entry(agent).or_default();
        if !history.held_since(sent_ms, messages) {
            history.pending.push(messages.to_vec());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_events::run_finished;
    use vigil::engine::history::HistoryMessage;
    use vigil::engine::run::RunReport;

    fn ended(run: u64, texts: &[&str]) -> Event {
        let mut event = run_finished(run * 1_000, run, 1);
        if let EventKind::RunFinished { report, .. } = &mut event.kind {
            *report = Some(Box::new(RunReport {
                history_append: texts
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
                        HistoryMessage::new(role, t)
                    })
                    .collect(),
                ..RunReport::default()
            }));
        }
        event
    }

    fn shown(texts: &[&str]) -> (Vec<Message>, usize) {
        let messages: Vec<Message> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
                (role, text_digest(t), t.len())
            })
            .collect();
        let bytes = messages.iter().map(|m| m.2).sum();
        (messages, bytes)
    }

    #[test]
    fn bytes_other_than_the_messages_sum_are_reported() {
        let mut oracle = HistoryOracle::default();
        oracle.committed(0, &ended(1, &["wake", "done"])).unwrap();
        let (messages, bytes) = shown(&["wake", "done"]);
        oracle.shown(0, 1, 0, &messages, bytes).unwrap();
        let err = oracle.shown(0, 1, 0, &messages, 0).unwrap_err();
        assert_eq!(err.invariant, INVARIANT);
        assert!(err.detail.contains("bytes = 0"), "{}", err.detail);
    }

    #[test]
    fn a_read_shows_a_history_of_its_span_or_the_next_one() {
        let mut oracle = HistoryOracle::default();
        oracle.committed(100, &ended(1, &["a", "b"])).unwrap();
        // Sent at 150, answered at 260: run 2's end became durable at 200, in between; the
        // node may have answered before it (one run behind the log at the answer).
        oracle.committed(200, &ended(2, &["c", "d"])).unwrap();
        let (behind, behind_bytes) = shown(&["a", "b"]);
        oracle.shown(260, 1, 150, &behind, behind_bytes).unwrap();
        // Ahead of the log: run 3's end shown before it is durable, judged when it is.
        let (ahead, bytes) = shown(&["a", "b", "c", "d", "e", "f"]);
        oracle.shown(300, 1, 290, &ahead, bytes).unwrap();
        oracle.committed(310, &ended(3, &["e", "f"])).unwrap();
        // A history older than the request: reported at the next durable end.
        oracle.shown(400, 1, 350, &behind, behind_bytes).unwrap();
        let err = oracle.committed(500, &ended(4, &["g", "h"])).unwrap_err();
        assert_eq!(err.invariant, INVARIANT);
        assert!(err.detail.contains("run 4"), "{}", err.detail);
        // A history that never was, unless a crash came first.
        let (wrong, bytes) = shown(&["a", "x"]);
        oracle.shown(600, 1, 550, &wrong, bytes).unwrap();
        oracle.crashed();
        oracle.committed(700, &ended(5, &["i", "j"])).unwrap();
    }

    #[test]
    fn the_oldest_messages_go_past_either_bound() {
        let mut oracle = HistoryOracle::default();
        for run in 1..=25 {
            oracle.committed(0, &ended(run, &["wake", "done"])).unwrap();
        }
        let (messages, _) = shown(&["wake", "done"].repeat(MESSAGES_MAX / 2));
        assert!(oracle.agents[&1].shows(&messages), "40 messages kept, the oldest gone");
        // Four messages of 16 KiB are exactly 64 KiB and stay; two more push the oldest out.
        let long = "x".repeat(16 * 1024);
        let mut oracle = HistoryOracle::default();
        oracle.committed(0, &ended(1, &[&long, &long, &long, &long])).unwrap();
        let (messages, _) = shown(&[&long, &long, &long, &long]);
        assert!(oracle.agents[&1].shows(&messages), "exactly at the byte bound");
        oracle.committed(0, &ended(2, &[&long, "y"])).unwrap();
        let (messages, _) = shown(&[&long, &long, &long, "y"]);
        assert!(oracle.agents[&1].shows(&messages), "past it, the two oldest go");
    }
}
