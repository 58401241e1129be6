//! The node side of predicate heartbeats (docs/api.md, "Predicate heartbeats"; ADR 0022): one
//! ticking task per heartbeat, the evaluation of its check under its budget, and the bounded
//! in-memory record of every tick (`heartbeat_evaluated`).
//!
//! Per tick: exactly one evaluation, or none with status `skipped` when the previous one is still
//! going (never queued); the check is bounded by the heartbeat's `max_runtime_ms` and dropped
//! past it (`timeout`: its HTTP exchange is dropped with it); the observation becomes a state
//! token (`engine::predicate::state_token`), and only a token other than the recorded state goes
//! to the writer (`Command::ObserveHeartbeat`), where the engine decides the transition and its
//! wakeup together. An unchanged tick writes nothing.
//!
//! Ticks use the monotonic clock (`tokio::time`): a wall-clock jump neither bunches nor skips
//! them. A restarted node starts every heartbeat's ticks again from its start.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;

use crate::engine::event::EventKind;
use crate::engine::predicate::{state_token, Check, HeartbeatId, HEARTBEAT_MAX_STATE_BYTES};
use crate::engine::Command;
use crate::exec::host::PosterSource;
use crate::exec::spawn::SharedSpawner;
use crate::shell::{ExecuteError, Shell};
use crate::writer::WhenFull;

/// Evaluations kept per heartbeat for `GET /v1/heartbeats/{id}` (the newest; older ones are
/// only counted).
pub const HEARTBEAT_EVALUATIONS_KEPT: usize = 32;
pub use check::{HEARTBEAT_ANSWER_BYTES_MAX, HEARTBEAT_CHECK_ENV};

mod check;
/// Longest an evaluation's error detail is kept, in characters.
pub const HEARTBEAT_DETAIL_CHARS_MAX: usize = 300;

/// How one tick went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvaluationStatus {
    Ok,
    Timeout,
    Error,
    Skipped,
}

impl EvaluationStatus {
    /// The wire name (the metric's label too).
    pub fn as_str(self) -> &'static str {
        match self {
            EvaluationStatus::Ok => "ok",
            EvaluationStatus::Timeout => "timeout",
            EvaluationStatus::Error => "error",
            EvaluationStatus::Skipped => "skipped",
        }
    }
}

/// One tick (`heartbeat_evaluated`): kept in memory, never written to the log (ADR 0022).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Evaluation {
    /// The node's wall clock when the tick ended, Unix ms.
    pub at_ms: u64,
    pub status: EvaluationStatus,
    /// A transition was recorded (`heartbeat_state_changed` with a prior state).
    pub changed: bool,
    /// Runs the transition enqueued (0 or 1).
    pub enqueued_runs: u32,
    /// What went wrong, for `error` and `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Ticks of one heartbeat, by status, since the node started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EvaluationCounts {
    pub ok: u64,
    pub timeout: u64,
    pub error: u64,
    pub skipped: u64,
}

/// What a tick observes: the heartbeat's own check, or an observation brought by the test seam
/// (after `slow_ms` of pretended work).
pub enum Observation {
    Check,
    Injected {
        state: serde_json::Value,
        slow_ms: u64,
    },
}

#[derive(Default)]
struct Track {
    in_flight: bool,
    recent: VecDeque<Evaluation>,
    counts: EvaluationCounts,
    /// Its ticking task, and the definition it ticks for.
    ticker: Option<(tokio::task::AbortHandle, Definition)>,
}

type Key = (String, HeartbeatId);

/// What a ticking task was started for: the agent, the definition and when it was made. A
/// heartbeat deleted and defined again (by the API or a fleet file) differs in one of them, and
/// gets a new task at once rather than waiting out the old one's interval.
type Definition = (
    crate::engine::agent::AgentId,
    crate::engine::predicate::HeartbeatSpec,
    u64,
);

/// What checks reach the world through: the runs' poster source (the tenant's address policy
/// applies) and spawner, and the children's working directory.
#[derive(Clone)]
pub struct CheckServices {
    pub poster: Arc<dyn PosterSource>,
    /// Where `secret_headers` values come from (the node's environment).
    pub secrets: crate::exec::host::SecretSource,
    pub spawner: SharedSpawner,
    pub work_dir: Option<std::path::PathBuf>,
}

/// Every heartbeat's ticks on this node.
pub struct HeartbeatRunner {
    shell: Arc<Shell>,
    services: CheckServices,
    tracks: Mutex<BTreeMap<Key, Track>>,
}

/// Clears a heartbeat's in-flight mark when its evaluation ends, however it ends (the seam's
/// request dropped by its client included).
struct InFlight<'a> {
    runner: &'a HeartbeatRunner,
    key: Key,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(track) = self.runner.tracks().get_mut(&self.key) {
            track.in_flight = false;
        }
    }
}

impl HeartbeatRunner {
    pub fn new(shell: Arc<Shell>, services: CheckServices) -> Arc<Self> {
        Arc::new(HeartbeatRunner {
            shell,
            services,
            tracks: Mutex::default(),
        })
    }

    fn tracks(&self) -> MutexGuard<'_, BTreeMap<Key, Track>> {
        self.tracks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts ticking every heartbeat the engine holds (at the node's start).
    pub fn start_all(self: &Arc<Self>) {
        let keys: Vec<Key> = self
            .shell
            .engine()
            .all_heartbeats()
            .map(|(tenant, heartbeat)| (tenant.to_string(), heartbeat.id.clone()))
            .collect();
        for (tenant, id) in keys {
            self.start(&tenant, &id);
        }
    }

    /// Starts ticking one heartbeat, unless a task already ticks for its current definition
    /// (one that ticked for an earlier definition under the same id is stopped first).
    pub fn start(self: &Arc<Self>, tenant: &str, id: &HeartbeatId) {
        let key = (tenant.to_string(), id.clone());
        let definition = match self.shell.engine().heartbeat(tenant, id) {
            Some(h) => (h.agent, h.spec.clone(), h.created_at_ms),
            None => return,
        };
        let mut tracks = self.tracks();
        let track = tracks.entry(key.clone()).or_default();
        if let Some((ticker, ticking_for)) = &track.ticker {
            if *ticking_for == definition && !ticker.is_finished() {
                return;
            }
            ticker.abort();
        }
        let ticker = tokio::spawn(self.clone().tick_forever(key)).abort_handle();
        track.ticker = Some((ticker, definition));
    }

    /// Stops ticking a deleted heartbeat and forgets its evaluations.
    pub fn forget(&self, tenant: &str, id: &HeartbeatId) {
        let removed = self.tracks().remove(&(tenant.to_string(), id.clone()));
        if let Some((ticker, _)) = removed.and_then(|track| track.ticker) {
            ticker.abort();
        }
    }

    /// Stops every ticking task (the node is stopping).
    pub fn stop(&self) {
        for track in self.tracks().values_mut() {
            if let Some((ticker, _)) = track.ticker.take() {
                ticker.abort();
            }
        }
    }

    /// The recent evaluations (oldest first) and the counts of one heartbeat.
    pub fn evaluations(
        &self,
        tenant: &str,
        id: &HeartbeatId,
    ) -> (Vec<Evaluation>, EvaluationCounts) {
        let tracks = self.tracks();
        match tracks.get(&(tenant.to_string(), id.clone())) {
            Some(track) => (track.recent.iter().cloned().collect(), track.counts),
            None => (Vec::new(), EvaluationCounts::default()),
        }
    }

    /// Sleeps an interval, ticks, and again, until the heartbeat is gone.
    async fn tick_forever(self: Arc<Self>, key: Key) {
        loop {
            let interval_sec = {
                let engine = self.shell.engine();
                match engine.heartbeat(&key.0, &key.1) {
                    Some(heartbeat) => heartbeat.spec.interval_sec,
                    None => break,
                }
            };
            tokio::time::sleep(Duration::from_secs(interval_sec)).await;
            self.tick(&key.0, &key.1, Observation::Check).await;
        }
        self.tracks().remove(&key);
    }

    /// One tick of heartbeat `id`: one evaluation, or `skipped`.
    pub async fn tick(
        &self,
        tenant: &str,
        id: &HeartbeatId,
        observation: Observation,
    ) -> Evaluation {
        let key = (tenant.to_string(), id.clone());
        let evaluation = match self.claim(&key) {
            None => self.evaluation(EvaluationStatus::Skipped, None),
            Some(_in_flight) => self.evaluate(&key, observation).await,
        };
        self.shell
            .metrics()
            .heartbeat_evaluated(evaluation.status.as_str());
        let mut tracks = self.tracks();
        let track = tracks.entry(key).or_default();
        match evaluation.status {
            EvaluationStatus::Ok => track.counts.ok += 1,
            EvaluationStatus::Timeout => track.counts.timeout += 1,
            EvaluationStatus::Error => track.counts.error += 1,
            EvaluationStatus::Skipped => track.counts.skipped += 1,
        }
        track.recent.push_back(evaluation.clone());
        if track.recent.len() > HEARTBEAT_EVALUATIONS_KEPT {
            track.recent.pop_front();
        }
        evaluation
    }

    /// Marks the heartbeat's evaluation in flight, unless one already is.
    fn claim(&self, key: &Key) -> Option<InFlight<'_>> {
        let mut tracks = self.tracks();
        let track = tracks.entry(key.clone()).or_default();
        if track.in_flight {
            return None;
        }
        track.in_flight = true;
        Some(InFlight {
            runner: self,
            key: key.clone(),
        })
    }

    fn evaluation(&self, status: EvaluationStatus, detail: Option<String>) -> Evaluation {
        Evaluation {
            at_ms: self.shell.clock().wall_now_ms(),
            status,
            changed: false,
            enqueued_runs: 0,
            detail: detail.map(|d| d.chars().take(HEARTBEAT_DETAIL_CHARS_MAX).collect()),
        }
    }

    async fn evaluate(&self, key: &Key, observation: Observation) -> Evaluation {
        let (tenant, id) = key;
        let found = self
            .shell
            .engine()
            .heartbeat(tenant, id)
            .map(|heartbeat| (heartbeat.spec.clone(), heartbeat.state.clone()));
        let Some((spec, prior)) = found else {
            return self.evaluation(
                EvaluationStatus::Error,
                Some("the heartbeat was deleted".into()),
            );
        };
        let observe = self.observe(tenant, id, &spec.check, observation);
        let observed =
            match tokio::time::timeout(Duration::from_millis(spec.max_runtime_ms), observe).await {
                Err(_) => {
                    let detail = format!("no observation within {} ms", spec.max_runtime_ms);
                    return self.evaluation(EvaluationStatus::Timeout, Some(detail));
                }
                Ok(Err(detail)) => return self.evaluation(EvaluationStatus::Error, Some(detail)),
                Ok(Ok(observed)) => observed,
            };
        let Some(token) = state_token(&observed) else {
            let detail = format!(
                "the observed state is larger than {HEARTBEAT_MAX_STATE_BYTES} bytes; the prior state is kept"
            );
            return self.evaluation(EvaluationStatus::Error, Some(detail));
        };
        if prior.as_deref() == Some(token.as_str()) {
            return self.evaluation(EvaluationStatus::Ok, None);
        }
        self.record(tenant, id, token).await
    }

    /// Sends an observation other than the recorded state to the writer.
    async fn record(&self, tenant: &str, id: &HeartbeatId, state: String) -> Evaluation {
        let command = Command::ObserveHeartbeat {
            tenant: tenant.to_string(),
            heartbeat: id.clone(),
            state,
        };
        let decision = match self.shell.execute(command, WhenFull::Refuse).await {
            Ok(decision) => decision,
            Err(ExecuteError::Refused(refusal)) => {
                return self.evaluation(EvaluationStatus::Error, Some(refusal.to_string()))
            }
            Err(error) => return self.evaluation(EvaluationStatus::Error, Some(error.to_string())),
        };
        let mut evaluation = self.evaluation(EvaluationStatus::Ok, None);
        for event in &decision.events {
            match &event.kind {
                EventKind::HeartbeatStateChanged { from: Some(_), .. } => evaluation.changed = true,
                EventKind::WakeupQueued { .. } => evaluation.enqueued_runs += 1,
                _ => {}
            }
        }
        evaluation
    }

    async fn observe(
        &self,
        tenant: &str,
        id: &HeartbeatId,
        check: &Check,
        observation: Observation,
    ) -> Result<serde_json::Value, String> {
        match (observation, check) {
            (Observation::Injected { state, slow_ms }, _) => {
                if slow_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(slow_ms)).await;
                }
                Ok(state)
            }
            (Observation::Check, Check::Sample) => {
                Err("a sample heartbeat is observed through the test seam only".into())
            }
            (
                Observation::Check,
                Check::Http {
                    url,
                    pointer,
                    secret_headers,
                },
            ) => {
                let poster = self.services.poster.clone().poster_for(tenant);
                let headers = check::secret_headers(&self.services.secrets, secret_headers)?;
                check::http(poster.as_ref(), url, headers, pointer.as_deref()).await
            }
            (Observation::Check, Check::Command { command, args }) => {
                check::command(&self.services, id, command, args).await
            }
        }
    }
}
