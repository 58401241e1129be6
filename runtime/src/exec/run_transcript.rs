//! One run's transcript as its executor and adapter write it: numbered lines, redacted with the
//! run's secrets, stamped with the node's wall clock. Shared by the adapter (its loop's lines)
//! and the executor (the stop line, then `finish`), so the numbering never repeats.
//!
//! A transcript is not the event log: a line that cannot be written is logged and dropped,
//! never a reason to fail the run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::engine::agent::AgentId;
use crate::engine::run::RunId;
use crate::io::clock::SharedClock;
use crate::redact::Redactor;
use crate::transcript::{EntryBody, SharedTranscriptStore, TranscriptEntry};

/// The transcript of one run.
pub struct RunTranscript {
    store: SharedTranscriptStore,
    agent: AgentId,
    run: RunId,
    clock: SharedClock,
    redactor: Redactor,
    next_seq: AtomicU64,
    /// Whether `finish` was called; if not when this is dropped, the run was aborted.
    finished: AtomicBool,
    /// Called after every line: the agent's passive pulse, when its policy asks for one.
    on_activity: Option<Box<dyn Fn() + Send + Sync>>,
}

impl RunTranscript {
    pub fn new(
        store: SharedTranscriptStore,
        agent: AgentId,
        run: RunId,
        clock: SharedClock,
        redactor: Redactor,
    ) -> Self {
        RunTranscript {
            store,
            agent,
            run,
            clock,
            redactor,
            next_seq: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            on_activity: None,
        }
    }

    /// Calls `on_activity` after every line written (the run's start, its progress, its end).
    pub fn with_activity(mut self, on_activity: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_activity = Some(Box::new(on_activity));
        self
    }

    /// The secrets this transcript redacts (what error texts must be redacted with too).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// The run's wall clock now (Unix ms): the node's `Clock`, as the lines are stamped.
    pub fn now_ms(&self) -> u64 {
        self.clock.wall_now_ms()
    }

    /// Appends one line.
    pub async fn write(&self, body: EntryBody) {
        let entry = TranscriptEntry {
            run: self.run,
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
            at_ms: self.clock.wall_now_ms(),
            body,
        };
        let appended = self
            .store
            .append(self.agent, self.run, std::slice::from_ref(&entry), &self.redactor)
            .await;
        if let Err(error) = appended {
            tracing::warn!(run = %self.run, %error, "could not write a line of the run's transcript");
        }
        if let Some(on_activity) = &self.on_activity {
            on_activity();
        }
    }

    /// Makes the transcript durable; called before the run's end is reported.
    pub async fn finish(&self) {
        self.finished.store(true, Ordering::Relaxed);
        if let Err(error) = self.store.finish(self.agent, self.run).await {
            tracing::warn!(run = %self.run, %error, "could not make the run's transcript durable");
        }
    }
}

impl Drop for RunTranscript {
    /// A run whose task was aborted (cancelled, or the node stopping) never finishes its
    /// transcript: the store is told, so that it does not keep the run open forever.
    fn drop(&mut self) {
        if !self.finished.load(Ordering::Relaxed) {
            self.store.abandon(self.agent, self.run);
        }
    }
}
