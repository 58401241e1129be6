//! The single writer's queue (ADR 0012).
//!
//! Every command that may write goes through one bounded queue to one task, the shell's writer
//! (`Shell::write_loop`). The writer takes every command waiting, up to
//! [`GROUP_COMMIT_COMMANDS_MAX`], decides and applies them one after another under the engine's
//! lock (microseconds), then writes all their events in one redb transaction, one fsync, on a
//! blocking thread with no lock held, and only then answers each of them. So an answer still
//! means durable, one fsync serves a whole batch, and a reader never waits for an fsync.
//!
//! A caller from outside the node (an API request) is refused at once when the queue is full:
//! [`WhenFull::Refuse`], answered `503` with `Retry-After`. The node's own work (timers, a run's
//! end, recovery) waits for room instead ([`WhenFull::Wait`]): it must not be lost, and it is
//! bounded by the node itself (one timer loop, one end per run).

use tokio::sync::{mpsc, oneshot};

use crate::engine::{Decision, Engine, Refusal};
use crate::shell::{ExecuteError, Shell};

/// Commands waiting for the writer, at most. Past it an API request is answered `503 busy`
/// with `Retry-After`: the queue's memory is bounded, never an unbounded backlog.
pub const WRITER_QUEUE_CAPACITY: usize = 4_096;

// Why larger than the requests in flight: requests alone can never fill the queue, so `busy`
// only answers when the node's own work has piled up too.
const _: () = assert!(WRITER_QUEUE_CAPACITY > crate::api::in_flight::REQUESTS_IN_FLIGHT_MAX);

/// Commands one store transaction (one fsync) carries, at most. Why a bound: the engine's lock
/// is held while a batch is decided, and a reader waits for that (never for the fsync).
pub const GROUP_COMMIT_COMMANDS_MAX: usize = 512;

/// How a command is decided, in the writer, against the engine as the commands before it in the
/// same batch left it, at the wall instant given. The shell is there for the pulse book.
pub(crate) type Decide =
    Box<dyn FnOnce(&Shell, &Engine, u64) -> Result<Decision, Refusal> + Send + 'static>;

/// What one command became once its batch was durable.
#[derive(Debug)]
pub struct Committed {
    pub decision: Decision,
    /// The log head right after this command's events (the head it saw, when it wrote none).
    pub seq: u64,
    /// The wall instant the command was decided at.
    pub now_ms: u64,
}

/// One command in the queue, with where its answer goes.
pub(crate) struct Job {
    pub(crate) decide: Decide,
    pub(crate) reply: oneshot::Sender<Result<Committed, ExecuteError>>,
}

/// What a command does when the writer's queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Answer [`ExecuteError::Busy`] at once (requests from outside the node).
    Refuse,
    /// Wait for room (the node's own work, which must not be lost).
    Wait,
}

/// The sending side of the writer's queue.
pub(crate) struct WriterQueue {
    jobs: mpsc::Sender<Job>,
}

impl WriterQueue {
    /// A queue of [`WRITER_QUEUE_CAPACITY`] and its receiving end, for the writer task.
    pub(crate) fn new() -> (WriterQueue, mpsc::Receiver<Job>) {
        let (jobs, receiver) = mpsc::channel(WRITER_QUEUE_CAPACITY);
        (WriterQueue { jobs }, receiver)
    }

    /// Commands queued and not yet taken by the writer.
    pub(crate) fn waiting(&self) -> usize {
        self.jobs.max_capacity() - self.jobs.capacity()
    }

    /// Queues `decide` and waits for its answer, which comes once its batch is durable.
    pub(crate) async fn submit(
        &self,
        decide: Decide,
        when_full: WhenFull,
    ) -> Result<Committed, ExecuteError> {
        self.enqueue(decide, when_full).await?.answer().await
    }

    /// Queues `decide` without waiting for its answer: commands queued one after another this
    /// way are decided in that order and share fsyncs (a fleet file's agents).
    pub(crate) async fn enqueue(
        &self,
        decide: Decide,
        when_full: WhenFull,
    ) -> Result<Pending, ExecuteError> {
        let (reply, answer) = oneshot::channel();
        let job = Job { decide, reply };
        match when_full {
            WhenFull::Refuse => self.jobs.try_send(job).map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => ExecuteError::Busy,
                mpsc::error::TrySendError::Closed(_) => ExecuteError::Stopped,
            })?,
            WhenFull::Wait => self
                .jobs
                .send(job)
                .await
                .map_err(|_| ExecuteError::Stopped)?,
        }
        Ok(Pending { answer })
    }
}

/// A queued command's answer to come.
pub(crate) struct Pending {
    answer: oneshot::Receiver<Result<Committed, ExecuteError>>,
}

impl Pending {
    /// Waits for the command's batch to be durable (or to fail).
    pub(crate) async fn answer(self) -> Result<Committed, ExecuteError> {
        // The writer dropped the job unanswered: the node is stopping.
        self.answer.await.map_err(|_| ExecuteError::Stopped)?
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::engine::agent::AgentSpec;
    use crate::engine::event::{Event, EventKind};
    use crate::io::storage::StorageLocation;
    use crate::shell::{CommitObserver, CommitStage};
    use crate::store::Store;

    /// An in-memory redb backend whose `sync_data` can be held: a write in progress that the
    /// test decides when to finish.
    #[derive(Debug, Default)]
    struct HeldSync {
        disk: redb::backends::InMemoryBackend,
        gate: Arc<Gate>,
    }

    #[derive(Debug, Default)]
    struct Gate {
        /// (held, syncs waiting)
        state: Mutex<(bool, usize)>,
        changed: Condvar,
    }

    impl Gate {
        fn hold(&self) {
            self.state.lock().unwrap().0 = true;
        }
        fn release(&self) {
            self.state.lock().unwrap().0 = false;
            self.changed.notify_all();
        }
        fn waiting(&self) -> usize {
            self.state.lock().unwrap().1
        }
    }

    impl redb::StorageBackend for HeldSync {
        fn len(&self) -> Result<u64, std::io::Error> {
            self.disk.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
            self.disk.read(offset, out)
        }
        fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
            self.disk.set_len(len)
        }
        fn sync_data(&self) -> Result<(), std::io::Error> {
            let mut state = self.gate.state.lock().unwrap();
            state.1 += 1;
            while state.0 {
                state = self.gate.changed.wait(state).unwrap();
            }
            state.1 -= 1;
            drop(state);
            self.disk.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
            self.disk.write(offset, data)
        }
    }

    /// A shell on a held-sync disk, recording the size (in events) of each batch attempted.
    fn shell(gate: Arc<Gate>) -> (Arc<Shell>, Arc<Mutex<Vec<Vec<Event>>>>) {
        // Both files' syncs wait at the gate: an append's is its write-ahead frame's.
        let held = || HeldSync {
            gate: gate.clone(),
            ..HeldSync::default()
        };
        let store = Store::open(StorageLocation::Backend {
            db: Box::new(held()),
            wal: Box::new(held()),
        })
        .unwrap();
        let batches: Arc<Mutex<Vec<Vec<Event>>>> = Arc::default();
        let seen = batches.clone();
        let observer: CommitObserver = Arc::new(move |stage, events: &[Event]| {
            if stage == CommitStage::Attempted {
                seen.lock().unwrap().push(events.to_vec());
            }
        });
        let shell = Shell::new(
            store.recover().unwrap(),
            store,
            crate::io::clock::SystemClock::shared(),
            crate::io::entropy::SeededEntropy::shared(7),
            Some(observer),
            crate::exec::adapter::BuiltinAdapters::shared(),
            crate::exec::host::RunServices::standard(),
            Arc::new(crate::transcript::MemoryTranscripts::new()),
        );
        (shell, batches)
    }

    /// Yields until a sync is held in the gate (the writer is inside its fsync).
    async fn until_syncing(gate: &Gate) {
        while gate.waiting() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Reads the engine from another thread; `None` if that read did not finish (it waited for
    /// the held fsync). Why a thread: a read stuck on the lock must fail the test, not hang it.
    /// Test-only, real tokio (this module's tests never run under the simulator), and its result
    /// is a count compared in the test: nothing of it reaches behaviour or a trace.
    fn read_agents_elsewhere(shell: &Arc<Shell>) -> Option<usize> {
        let (sender, answer) = std::sync::mpsc::channel();
        let shell = shell.clone();
        std::thread::spawn(move || {
            let _ = sender.send(shell.engine().agents().count());
        });
        answer.recv_timeout(Duration::from_secs(30)).ok()
    }

    #[tokio::test]
    async fn a_read_never_waits_for_the_fsync_and_an_answer_always_does() {
        let gate = Arc::new(Gate::default());
        let (shell, _) = shell(gate.clone());
        shell
            .ensure_tenant("t", "t-token-0123456789")
            .await
            .unwrap();
        let head = shell.head_seq();

        gate.hold();
        let creating = tokio::spawn({
            let shell = shell.clone();
            async move {
                let spec = AgentSpec::with_interval("a", None);
                shell.create_agent("t", spec, WhenFull::Refuse).await
            }
        });
        until_syncing(&gate).await;
        // The writer is inside the fsync: a reader gets the engine at once, the batch being
        // written included (ADR 0012), while the durable head and the answer wait.
        assert_eq!(
            read_agents_elsewhere(&shell),
            Some(1),
            "a read waited for the fsync"
        );
        assert_eq!(shell.engine().last_seq(), head + 1);
        assert_eq!(
            shell.head_seq(),
            head,
            "the head moved before the write was durable"
        );
        assert_eq!(shell.events_after(head, 10).unwrap().1, head);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !creating.is_finished(),
            "answered before its write was durable"
        );

        gate.release();
        let created = creating.await.unwrap().unwrap();
        assert_eq!(created.seq, head + 1);
        assert_eq!(shell.head_seq(), head + 1);
    }

    #[tokio::test]
    async fn commands_waiting_together_share_one_transaction() {
        const WAITING: usize = 10;
        let gate = Arc::new(Gate::default());
        let (shell, batches) = shell(gate.clone());
        shell
            .ensure_tenant("t", "t-token-0123456789")
            .await
            .unwrap();
        let create = |name: String| {
            let shell = shell.clone();
            tokio::spawn(async move {
                let spec = AgentSpec::with_interval(&name, None);
                shell.create_agent("t", spec, WhenFull::Refuse).await
            })
        };

        gate.hold();
        let first = create("first".into());
        until_syncing(&gate).await;
        let waiting: Vec<_> = (0..WAITING).map(|i| create(format!("a{i}"))).collect();
        // Every one of them is queued before the first write finishes.
        while shell.commands_waiting() < WAITING {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        gate.release();
        first.await.unwrap().unwrap();
        let mut seqs = Vec::new();
        for created in waiting {
            seqs.push(created.await.unwrap().unwrap().seq);
        }

        let created_per_batch: Vec<usize> = batches
            .lock()
            .unwrap()
            .iter()
            .map(|batch| {
                batch
                    .iter()
                    .filter(|e| matches!(e.kind, EventKind::AgentCreated { .. }))
                    .count()
            })
            .filter(|&n| n > 0)
            .collect();
        assert_eq!(
            created_per_batch,
            vec![1, WAITING],
            "one fsync for the ten that waited"
        );
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), WAITING, "each answer names its own event");
    }

    #[tokio::test]
    async fn a_full_queue_refuses_a_request_and_makes_the_node_work_wait() {
        let (queue, mut jobs) = WriterQueue::new();
        let queue = Arc::new(queue);
        let noop = || -> Decide { Box::new(|_, _, _| Ok(Decision::default())) };
        let mut queued = Vec::new();
        for _ in 0..WRITER_QUEUE_CAPACITY {
            let queue = queue.clone();
            let decide = noop();
            queued.push(tokio::spawn(async move {
                queue.submit(decide, WhenFull::Refuse).await
            }));
        }
        while jobs.len() < WRITER_QUEUE_CAPACITY {
            tokio::task::yield_now().await;
        }
        // The queue holds exactly its capacity: one more request is refused, nothing queued.
        assert!(matches!(
            queue.submit(noop(), WhenFull::Refuse).await,
            Err(ExecuteError::Busy)
        ));
        assert_eq!(jobs.len(), WRITER_QUEUE_CAPACITY);
        // The node's own work waits for room instead, and gets in once one job is taken.
        let waiting = tokio::spawn({
            let queue = queue.clone();
            let decide = noop();
            async move { queue.submit(decide, WhenFull::Wait).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(jobs.recv().await.expect("a job"));
        while jobs.len() < WRITER_QUEUE_CAPACITY {
            tokio::task::yield_now().await;
        }
        // A writer gone (the node stopping) answers every waiting job `Stopped`.
        drop(jobs);
        assert!(matches!(waiting.await.unwrap(), Err(ExecuteError::Stopped)));
        for job in queued {
            assert!(matches!(job.await.unwrap(), Err(ExecuteError::Stopped)));
        }
    }
}
