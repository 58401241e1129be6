//! The newest durable events, kept in memory so that readers of the log's tail (`GET
//! /v1/events`, the live stream, the dashboard, the alert sinks catching up) get them without
//! reading redb and decoding each record again.
//!
//! The writer hands each batch over once it is durable, the events it would otherwise drop.
//! Only a contiguous run of the newest events is held, bounded by count and by stored bytes;
//! a read that starts before it goes to the store. When a snapshot is taken the tail is
//! emptied up to the snapshot's position: compaction removes only events a snapshot holds, so
//! the tail never serves an event the store has compacted away.

use std::collections::VecDeque;

use crate::engine::event::Event;

/// Events the tail holds at most. Why this many: a reader polling every few seconds, or a
/// stream that was briefly slow, finds what it missed here on a node committing hundreds of
/// events a second.
pub const EVENT_TAIL_EVENTS_MAX: usize = 2_048;

/// Bytes of stored records (their size in the log) the tail holds at most, so that a run of
/// large events (a whole agent spec, a run's history) cannot make it a memory cost of its own.
pub const EVENT_TAIL_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The newest durable events, contiguous.
#[derive(Debug, Default)]
pub struct EventTail {
    /// Each event with its stored size, in log order, without gaps.
    events: VecDeque<(Event, usize)>,
    bytes: usize,
}

impl EventTail {
    /// Appends a durable batch (`sizes[i]` the stored size of `events[i]`), dropping the oldest
    /// events past the bounds. A batch that does not continue the tail (the tail was emptied,
    /// or the node restarted) starts it anew.
    pub fn push(&mut self, events: Vec<Event>, sizes: &[usize]) {
        debug_assert_eq!(events.len(), sizes.len());
        let continues = match (self.events.back(), events.first()) {
            (Some((last, _)), Some(first)) => first.seq == last.seq + 1,
            _ => true,
        };
        if !continues {
            self.clear();
        }
        for (event, &size) in events.into_iter().zip(sizes) {
            self.bytes += size;
            self.events.push_back((event, size));
        }
        while self.events.len() > EVENT_TAIL_EVENTS_MAX || self.bytes > EVENT_TAIL_BYTES_MAX {
            let Some((_, size)) = self.events.pop_front() else {
                break;
            };
            self.bytes -= size;
        }
    }

    /// Forgets every event at or before `seq` (a snapshot is being taken there).
    pub fn forget_through(&mut self, seq: u64) {
        while self
            .events
            .front()
            .is_some_and(|(event, _)| event.seq <= seq)
        {
            let (_, size) = self.events.pop_front().expect("checked");
            self.bytes -= size;
        }
    }

    /// Up to `limit` events with `seq > after`, in order, if the tail holds every event after
    /// `after` that the log holds (else `None`: read the store). `after` at or past the newest
    /// event held gives an empty page.
    pub fn page(&self, after: u64, limit: usize) -> Option<Vec<Event>> {
        let (first, _) = self.events.front()?;
        let skip = usize::try_from(after.checked_sub(first.seq - 1)?).ok()?;
        Some(
            self.events
                .iter()
                .skip(skip)
                .take(limit)
                .map(|(event, _)| event.clone())
                .collect(),
        )
    }

    fn clear(&mut self) {
        self.events.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::event::EventKind;
    use crate::engine::tenant::TokenHash;

    fn events(seqs: std::ops::RangeInclusive<u64>) -> Vec<Event> {
        seqs.map(|seq| Event {
            seq,
            at_ms: seq * 10,
            tenant: "t".into(),
            kind: EventKind::TenantCreated {
                operator_token_hash: TokenHash::of("token"),
            },
        })
        .collect()
    }

    fn seqs(page: Option<Vec<Event>>) -> Option<Vec<u64>> {
        page.map(|events| events.iter().map(|e| e.seq).collect())
    }

    #[test]
    fn a_page_is_served_only_when_the_tail_holds_everything_after_the_cursor() {
        let mut tail = EventTail::default();
        assert_eq!(seqs(tail.page(0, 10)), None, "empty: the store answers");
        tail.push(events(5..=9), &[1; 5]);
        assert_eq!(seqs(tail.page(3, 10)), None, "event 4 is not held");
        assert_eq!(seqs(tail.page(4, 10)), Some(vec![5, 6, 7, 8, 9]));
        assert_eq!(seqs(tail.page(6, 2)), Some(vec![7, 8]));
        assert_eq!(seqs(tail.page(9, 10)), Some(vec![]));
        assert_eq!(seqs(tail.page(12, 10)), Some(vec![]));
    }

    #[test]
    fn the_bounds_drop_the_oldest_at_their_limits() {
        let mut tail = EventTail::default();
        let max = EVENT_TAIL_EVENTS_MAX as u64;
        tail.push(events(1..=max), &vec![1; EVENT_TAIL_EVENTS_MAX]);
        assert_eq!(
            seqs(tail.page(0, 1)),
            Some(vec![1]),
            "exactly the count is kept"
        );
        tail.push(events(max + 1..=max + 1), &[1]);
        assert_eq!(seqs(tail.page(0, 1)), None, "one past it drops the oldest");
        assert_eq!(seqs(tail.page(1, 1)), Some(vec![2]));

        let mut tail = EventTail::default();
        tail.push(
            events(1..=2),
            &[EVENT_TAIL_BYTES_MAX / 2, EVENT_TAIL_BYTES_MAX / 2],
        );
        assert_eq!(
            seqs(tail.page(0, 5)),
            Some(vec![1, 2]),
            "exactly the bytes are kept"
        );
        tail.push(events(3..=3), &[1]);
        assert_eq!(
            seqs(tail.page(1, 5)),
            Some(vec![2, 3]),
            "one byte past drops the oldest"
        );
        assert_eq!(seqs(tail.page(0, 5)), None);
    }

    #[test]
    fn a_snapshot_empties_it_through_its_position_and_a_gap_restarts_it() {
        let mut tail = EventTail::default();
        tail.push(events(1..=6), &[1; 6]);
        tail.forget_through(4);
        assert_eq!(seqs(tail.page(3, 10)), None);
        assert_eq!(seqs(tail.page(4, 10)), Some(vec![5, 6]));
        tail.forget_through(6);
        assert_eq!(seqs(tail.page(6, 10)), None, "emptied: the store answers");
        tail.push(events(7..=7), &[1]);
        assert_eq!(seqs(tail.page(6, 10)), Some(vec![7]));
        tail.push(events(9..=9), &[1]);
        assert_eq!(seqs(tail.page(6, 10)), None, "a gap restarts the tail");
        assert_eq!(seqs(tail.page(8, 10)), Some(vec![9]));
    }
}
