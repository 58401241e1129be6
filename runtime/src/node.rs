//! A running Vigil node: the production start-up path, used unchanged by `vigil serve`, the
//! integration tests and the simulator (which restarts it on a surviving simulated disk).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::api;
use crate::engine::event::EventKind;
use crate::engine::Command;
use crate::io::clock::SharedClock;
use crate::io::storage::StorageLocation;
use crate::shell::{CommitObserver, Shell};
use crate::store::{Store, StoreError};

/// Longest the timer loop sleeps without looking at the wall clock again: a jump of the wall
/// clock is noticed within this, so a due timer fires at most this late (docs/invariants.md).
pub const WALL_RECHECK_MS: u64 = 1_000;
/// Pause before retrying a timer fire whose write failed.
pub const STORE_RETRY_MS: u64 = 1_000;

/// Everything a node needs from the outside.
pub struct NodeConfig {
    /// Address for the HTTP API; port 0 picks a free port (see [`Node::local_addr`]).
    pub listen_addr: SocketAddr,
    /// Where the database lives.
    pub storage: StorageLocation,
    /// The node's clock.
    pub clock: SharedClock,
    /// Optional observer of committed events (the simulator's trace).
    pub on_commit: Option<CommitObserver>,
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("could not listen on {addr}: {source}; is another vigil already running there?")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A started node. Dropping it does not stop it; call [`Node::stop`].
pub struct Node {
    shell: Arc<Shell>,
    local_addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Node {
    /// Opens the store, recovers the engine from the log, and starts the API and the timers.
    pub async fn start(config: NodeConfig) -> Result<Node, StartError> {
        let store = Store::open(config.storage)?;
        let engine = store.recover()?;
        tracing::info!(
            events = engine.last_seq(),
            agents = engine.agents().count(),
            "recovered state from the event log"
        );
        let shell = Arc::new(Shell::new(engine, store, config.clock, config.on_commit));
        let listener = TcpListener::bind(config.listen_addr)
            .await
            .map_err(|source| StartError::Listen {
                addr: config.listen_addr,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen_addr,
            source,
        })?;
        let timers = tokio::spawn(run_timers(shell.clone()));
        let server = tokio::spawn(api::serve(listener, api::router(shell.clone())));
        Ok(Node {
            shell,
            local_addr,
            tasks: vec![timers, server],
        })
    }

    /// The address the API listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The node's shell, for in-process callers (the CLI's demo fleet, tests, the simulator).
    pub fn shell(&self) -> &Arc<Shell> {
        &self.shell
    }

    /// Stops the timer loop and the listener. Open connections finish their current request.
    pub fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Fires due timers forever. Sleeps until the next slot, but never longer than
/// `WALL_RECHECK_MS`, because the wall clock may jump while it sleeps.
async fn run_timers(shell: Arc<Shell>) {
    loop {
        let now_ms = shell.clock().wall_now_ms();
        let deadline_ms = shell.next_deadline_ms();
        if deadline_ms.is_some_and(|d| d <= now_ms) {
            match shell.execute(Command::FireDueTimers) {
                Ok(events) => {
                    for event in &events {
                        if let EventKind::TimerFired {
                            agent,
                            due_at_ms,
                            missed_slots,
                            ..
                        } = &event.kind
                        {
                            tracing::info!(seq = event.seq, %agent, due_at_ms, missed_slots, "timer fired");
                        }
                    }
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%error, "could not record due timers; retrying");
                    tokio::time::sleep(Duration::from_millis(STORE_RETRY_MS)).await;
                    continue;
                }
            }
        }
        let wait_ms = deadline_ms.map_or(WALL_RECHECK_MS, |d| (d - now_ms).min(WALL_RECHECK_MS));
        tokio::select! {
            biased;
            _ = shell.schedule_changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
        }
    }
}
