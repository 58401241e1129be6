//! Commit atomicity (invariant 18): a batch of events the node attempted as one store transaction
//! is, after any crash, on disk whole or not at all.
//!
//! From `commit_attempted` records (written by the harness before every store transaction) the
//! oracle knows each batch's range. A batch whose `committed` records all arrived is done; one
//! still open when its process died (a power cut in the write, or a failed write that stopped
//! the node) is the only thing recovery may find on disk unreported, and then only whole.

use std::collections::BTreeMap;

use vigil::engine::event::Event;

use super::{violation, Violation};

/// The events `first..=last` of one store transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Batch {
    first: u64,
    last: u64,
}

/// A batch attempted and not yet wholly reported committed.
#[derive(Debug, Clone, Copy)]
struct OpenBatch {
    batch: Batch,
    /// The next seq the batch's `committed` records must report.
    next: u64,
}

#[derive(Debug, Default)]
struct NodeCommits {
    open: Option<OpenBatch>,
    /// The batch that was open when the node's process last died, until its recovery.
    interrupted: Option<Batch>,
}

#[derive(Debug, Default)]
pub(super) struct CommitsOracle {
    nodes: BTreeMap<&'static str, NodeCommits>,
}

impl CommitsOracle {
    fn node(&mut self, node: &'static str) -> &mut NodeCommits {
        self.nodes.entry(node).or_default()
    }

    /// The node is about to write `first..=last` as one transaction.
    pub(super) fn attempted(
        &mut self,
        node: &'static str,
        first: u64,
        last: u64,
    ) -> Result<(), Violation> {
        let state = self.node(node);
        if let Some(open) = state.open {
            // A write that is never reported durable failed, and a process whose write failed
            // must stop (ADR 0008): a second attempt means it kept going on a broken batch.
            return violation(
                "commit_atomic",
                format!(
                    "commit {first}..={last} attempted while commit {}..={} was never reported committed (seq {} next)",
                    open.batch.first, open.batch.last, open.next
                ),
            );
        }
        if first > last {
            return violation(
                "commit_atomic",
                format!("commit {first}..={last} attempted: an empty or reversed range"),
            );
        }
        state.open = Some(OpenBatch {
            batch: Batch { first, last },
            next: first,
        });
        Ok(())
    }

    /// `seq` was reported committed by the node. Outside any attempted batch it is left to the
    /// other checks (the oracles' unit tests feed commits without attempts).
    pub(super) fn committed(&mut self, node: &'static str, seq: u64) -> Result<(), Violation> {
        let state = self.node(node);
        let Some(open) = &mut state.open else {
            return Ok(());
        };
        if seq != open.next {
            return violation(
                "commit_atomic",
                format!(
                    "seq {seq} reported committed inside commit {}..={}, whose next seq is {}",
                    open.batch.first, open.batch.last, open.next
                ),
            );
        }
        if seq == open.batch.last {
            state.open = None;
        } else {
            open.next += 1;
        }
        Ok(())
    }

    /// The node's process died; the batch it was writing, if any, may have landed whole.
    pub(super) fn crashed(&mut self, node: &'static str) {
        let state = self.node(node);
        // A process that dies again before recovering never attempted anything new: keep the
        // batch the first death interrupted.
        if let Some(open) = state.open.take() {
            state.interrupted = Some(open.batch);
        }
    }

    /// The node recovered its log; `unreported` are the events on disk never reported
    /// committed. They must be exactly the interrupted batch, or nothing.
    pub(super) fn recovered(
        &mut self,
        node: &'static str,
        unreported: &[Event],
    ) -> Result<(), Violation> {
        let state = self.node(node);
        state.open = None;
        let interrupted = state.interrupted.take();
        let (Some(first), Some(last)) = (unreported.first(), unreported.last()) else {
            return Ok(());
        };
        let found = Batch {
            first: first.seq,
            last: last.seq,
        };
        match interrupted {
            Some(batch) if batch == found && unreported.len() as u64 == batch.last - batch.first + 1 => {
                Ok(())
            }
            Some(batch) => violation(
                "commit_atomic",
                format!(
                    "after the crash the log holds seqs {}..={} never reported committed, but the interrupted commit was {}..={}: a commit landed in part",
                    found.first, found.last, batch.first, batch.last
                ),
            ),
            None => violation(
                "commit_atomic",
                format!(
                    "after the crash the log holds seqs {}..={} never reported committed, but no commit was under way",
                    found.first, found.last
                ),
            ),
        }
    }
}
