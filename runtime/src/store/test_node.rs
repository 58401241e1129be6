//! A node's engine and store driven by commands, for the store's tests (snapshots, recovery).

use super::snapshot::Written;
use super::Store;
use crate::engine::agent::{AgentId, AgentSpec};
use crate::engine::tenant::TokenHash;
use crate::engine::wakeup::{WakeupRequest, WakeupSource};
use crate::engine::{Command, Engine};
use crate::io::storage::StorageLocation;

/// A fresh directory for test `name` of this process, and the database path in it.
pub fn fresh(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("vigil.redb")
}

/// A node's engine and store, driven by commands.
pub struct Node {
    pub engine: Engine,
    pub store: Store,
}

impl Node {
    pub fn open(path: &std::path::Path) -> Node {
        let store = Store::open(StorageLocation::File(path.to_path_buf())).unwrap();
        Node {
            engine: store.recover().unwrap(),
            store,
        }
    }

    pub fn run(&mut self, command: Command, now_ms: u64) {
        let events = self.engine.decide(&command, now_ms).unwrap().events;
        self.store.append(&events).unwrap();
        events.iter().for_each(|event| self.engine.apply(event));
    }

    /// A tenant and `agents` agents with timers, each woken once.
    pub fn fleet(&mut self, agents: u64) {
        self.run(
            Command::EnsureTenant {
                tenant: "t".into(),
                operator_token_hash: TokenHash::of("op"),
            },
            0,
        );
        for i in 0..agents {
            let name = format!("agent-{i}");
            self.run(
                Command::CreateAgent {
                    tenant: "t".into(),
                    spec: AgentSpec::with_interval(&name, Some(60_000)),
                    token_hash: TokenHash::of(&name),
                },
                i,
            );
        }
        self.wake_all(agents, 1_000);
    }

    pub fn wake_all(&mut self, agents: u64, now_ms: u64) {
        for i in 1..=agents {
            self.run(
                Command::Wake {
                    agent: AgentId(i),
                    request: WakeupRequest::new(WakeupSource::OnDemand, "hello"),
                },
                now_ms,
            );
        }
    }

    pub fn snapshot(&self) -> Written {
        self.store.write_snapshot(&self.engine.image()).unwrap()
    }
}
