//! Turns at redb's one write lock: the log's appends go before background writes.
//!
//! redb lets one write transaction run at a time, and its lock is not fair. A snapshot writes a
//! thousand chunk transactions back to back (and pruning and compaction theirs): released and
//! taken again at once, the lock went back to the snapshot's thread before the writer's, which
//! was waiting for it with a group commit. A snapshot of 100,000 agents thus held every commit
//! for about 1.3 s, and every timer fire decided meanwhile was that late (docs/benchmarks.md,
//! "Timer lateness"). With turns, a background transaction first waits for the append that is
//! waiting or committing when it asks, if any, so an append waits for one background
//! transaction at most. A background writer is never starved either: it waits for the appends
//! that were there when it asked, not for those that come after.

use std::sync::{Condvar, Mutex, MutexGuard};

/// The turns of the store's writers.
#[derive(Debug, Default)]
pub(crate) struct WriteTurns {
    state: Mutex<TurnState>,
    /// Signalled when an append ends.
    append_ended: Condvar,
}

#[derive(Debug, Default)]
struct TurnState {
    /// Appends that asked for the lock and have not committed yet.
    appending: usize,
    /// Appends ended since the store opened.
    appends_ended: u64,
    /// Background writers waiting for their turn (observed by tests).
    background_waiting: usize,
}

/// An append's turn: held from before it asks redb for the write lock until it has committed.
pub(crate) struct AppendTurn<'a> {
    turns: &'a WriteTurns,
}

impl WriteTurns {
    fn state(&self) -> MutexGuard<'_, TurnState> {
        // Why not a poisoned-lock panic: the counters stay consistent whatever a panicking
        // holder was doing (each update is one statement).
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An append's turn, to hold over its transaction.
    pub(crate) fn append(&self) -> AppendTurn<'_> {
        self.state().appending += 1;
        AppendTurn { turns: self }
    }

    /// Waits until the appends waiting or committing now have ended, then returns: a background
    /// writer calls it before each of its transactions. Blocking: call it on a blocking thread.
    pub(crate) fn background(&self) {
        let mut state = self.state();
        if state.appending == 0 {
            return;
        }
        // Every append counted now ends before `appends_ended` passes this: they are the ones
        // to let go first.
        let until = state.appends_ended + state.appending as u64;
        state.background_waiting += 1;
        while state.appends_ended < until {
            state = self
                .append_ended
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        state.background_waiting -= 1;
    }

    #[cfg(test)]
    fn background_waiting(&self) -> usize {
        self.state().background_waiting
    }
}

impl Drop for AppendTurn<'_> {
    fn drop(&mut self) {
        let mut state = self.turns.state();
        state.appending -= 1;
        state.appends_ended += 1;
        drop(state);
        self.turns.append_ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Spins until `turns` has `waiting` background writers waiting (they are on another thread).
    fn until_waiting(turns: &WriteTurns, waiting: usize) {
        while turns.background_waiting() != waiting {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_background_writer_goes_at_once_when_no_append_is_there() {
        let turns = WriteTurns::default();
        turns.background();
        drop(turns.append());
        turns.background();
        assert_eq!(turns.background_waiting(), 0);
    }

    #[test]
    fn a_background_writer_waits_for_the_appends_there_when_it_asked_and_no_others() {
        let turns = Arc::new(WriteTurns::default());
        let first = turns.append();
        let second = turns.append();
        let passed = Arc::new(AtomicBool::new(false));
        // Why a thread: a background writer blocks until its turn, and its turn comes from this
        // one. Test-only, real threads (the store's turns never wait under the simulator, where
        // each transaction runs within one poll); nothing of it reaches behaviour or a trace.
        let background = {
            let (turns, passed) = (turns.clone(), passed.clone());
            std::thread::spawn(move || {
                turns.background();
                passed.store(true, Ordering::SeqCst);
            })
        };
        until_waiting(&turns, 1);
        drop(first);
        // One of the two appends it found has ended: it still waits for the other.
        assert!(!passed.load(Ordering::SeqCst));
        assert_eq!(turns.background_waiting(), 1);
        // An append that came after it asked is not waited for. (A bound on the spin rather than
        // a join: a writer that waited for it would hang the test, not fail it.)
        let later = turns.append();
        drop(second);
        let mut spins = 0_u64;
        while !passed.load(Ordering::SeqCst) {
            spins += 1;
            assert!(
                spins < 10_000_000,
                "the background writer waits for an append that came after it asked"
            );
            std::thread::yield_now();
        }
        background.join().expect("background writer");
        drop(later);
    }
}
