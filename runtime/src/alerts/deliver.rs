//! Delivery: one task per sink, started when the node is ready (`Node::ready`), ended with it.
//!
//! The task reads the durable log after the sink's cursor a page at a time, derives the sink's
//! alerts (`AlertRules`), and POSTs each one, signed like the `http` adapter's calls
//! (`exec::webhook::signature`), until the sink answers a 2xx: retries back off exponentially
//! from `ALERT_RETRY_FIRST_MS` to `ALERT_RETRY_MAX_MS`, for as long as the alert is within
//! the sink's catch-up bound. Only then does the cursor move past it, and it is saved at once, so
//! a crash repeats at most the one alert that was being delivered (with the same id).
//!
//! Why the cursor lives in the store's own tables, written on a blocking thread here rather
//! than through the single writer: it is not a fact of the log (an event per delivery would
//! double the log and feed the alerts their own deliveries), redb serialises its write
//! transactions itself (a save waits for the writer's commit on its blocking thread, never on an
//! async worker), and a node without alerts writes nothing more than before.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;

use super::{alert_body, alert_id, AlertRules, AlertSink, Raised};
use crate::engine::agent::AgentId;
use crate::engine::daily_cap::LocalDay;
use crate::engine::event::Event;
use crate::engine::tenant::DEFAULT_TENANT;
use crate::exec::host::{PosterSource, SecretSource};
use crate::exec::model::{Header, PostRequest, Poster};
use crate::net::JsonBody;
use crate::exec::webhook::{signature, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use crate::shell::Shell;
use crate::store::alert_cursors::AlertCursor;
use crate::store::StoreError;

/// Most events read from the log in one page (the sink's memory is bounded by it).
pub const ALERT_PAGE_EVENTS: usize = 256;
/// A cursor with no alert to save is still saved once it is this many events ahead of the
/// saved one, so a restart does not re-read a long stretch of the log without alerts.
pub const ALERT_CURSOR_SAVE_EVENTS: u64 = 10_000;
/// The first retry's wait after a failed delivery; each next one doubles.
pub const ALERT_RETRY_FIRST_MS: u64 = 1_000;
/// The longest wait between two attempts at one alert (a `Retry-After` is honoured up to it).
pub const ALERT_RETRY_MAX_MS: u64 = 60_000;
/// One attempt's whole POST (connect, TLS, answer).
pub const ALERT_POST_TIMEOUT_MS: u64 = 10_000;
/// Most bytes of a sink's answer read (its content is ignored; a larger one is a failure).
pub const ALERT_ANSWER_BYTES_MAX: u64 = 64 * 1024;
/// The header carrying the alert's id (`<sink>:<seq>`, the same on every attempt).
pub const ALERT_ID_HEADER: &str = "x-vigil-alert-id";

/// What a node's alert sinks need beyond the shell.
#[derive(Clone)]
pub struct Alerting {
    pub sinks: Vec<AlertSink>,
    /// The node's outbound network; the sinks are the node owner's own configuration, so they
    /// are reached under tenant `default`'s address policy.
    pub poster: Arc<dyn PosterSource>,
    /// Where `secret_env` is read (the process environment in production).
    pub secrets: SecretSource,
}

/// Starts one delivery task per sink.
pub fn spawn_sinks(shell: &Arc<Shell>, alerting: &Alerting) -> Vec<JoinHandle<()>> {
    alerting
        .sinks
        .iter()
        .map(|sink| {
            let poster = alerting.poster.clone().poster_for(DEFAULT_TENANT);
            let task = SinkTask::start(
                shell.clone(),
                sink.clone(),
                poster,
                alerting.secrets.clone(),
            );
            tokio::spawn(task)
        })
        .collect()
}

/// One sink's delivery state.
struct SinkTask {
    shell: Arc<Shell>,
    sink: AlertSink,
    poster: Arc<dyn Poster>,
    secrets: SecretSource,
    rules: AlertRules,
    /// The last event dealt with, in memory.
    cursor: u64,
    /// The last cursor saved.
    saved: u64,
    /// Once-a-day alerts dealt with since the last save (at most a page's worth).
    unsaved_days: Vec<(super::AlertKind, AgentId, LocalDay)>,
    /// Alerts skipped by the catch-up bound since the last log line about it.
    skipped: u64,
}

/// How one alert ended.
enum Outcome {
    Delivered,
    Skipped,
}

/// Why one attempt failed.
struct AttemptFailed {
    reason: String,
    retry_after_ms: Option<u64>,
}

impl SinkTask {
    /// Loads the sink's saved state, then delivers forever.
    async fn start(
        shell: Arc<Shell>,
        sink: AlertSink,
        poster: Arc<dyn Poster>,
        secrets: SecretSource,
    ) {
        let saved = load(&shell, &sink.name).await;
        tracing::info!(sink = %sink.name, cursor = saved.seq, "alert sink started");
        let mut task = SinkTask {
            rules: AlertRules::new(&sink, saved.days),
            cursor: saved.seq,
            saved: saved.seq,
            shell,
            sink,
            poster,
            secrets,
            unsaved_days: Vec::new(),
            skipped: 0,
        };
        loop {
            task.step().await;
        }
    }

    /// Deals with one page of the log, or waits for the log to grow.
    async fn step(&mut self) {
        let shell = self.shell.clone();
        // Registered before reading, so a commit between the read and the wait still wakes it.
        let grown = shell.head_moved().notified();
        tokio::pin!(grown);
        grown.as_mut().enable();
        let page = match read_page(&shell, self.cursor).await {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(sink = %self.sink.name, %error, "could not read the log for alerts; retrying");
                tokio::time::sleep(Duration::from_millis(ALERT_RETRY_MAX_MS)).await;
                return;
            }
        };
        if page.is_empty() {
            grown.await;
            return;
        }
        for event in &page {
            self.consider(event).await;
        }
        let must_save = self.skipped > 0
            || !self.unsaved_days.is_empty()
            || self.cursor - self.saved >= ALERT_CURSOR_SAVE_EVENTS;
        self.report_skipped();
        if must_save {
            self.save().await;
        }
    }

    /// One event: nothing, or an alert delivered (the cursor saved at once) or skipped.
    async fn consider(&mut self, event: &Event) {
        let shell = &self.shell;
        let Some(raised) = self.rules.raised(event, |agent| time_zone(shell, agent)) else {
            self.cursor = event.seq;
            return;
        };
        let outcome = self.deliver(event, &raised).await;
        self.rules.dealt_with(&raised);
        self.cursor = event.seq;
        if let Some(day) = raised.day {
            self.unsaved_days.push((raised.kind, raised.agent, day));
        }
        match outcome {
            Outcome::Delivered => self.save().await,
            // Why not saved at once: a restart after a long outage may skip thousands; one save
            // per page is enough, the skip is repeated identically if the node dies first.
            Outcome::Skipped => self.skipped += 1,
        }
    }

    /// Attempts until a 2xx, or until the alert is older than the catch-up bound.
    async fn deliver(&self, event: &Event, raised: &Raised) -> Outcome {
        let id = alert_id(&self.sink.name, event.seq);
        let body = alert_body(
            &self.sink.name,
            event,
            raised,
            &agent_name(&self.shell, raised.agent),
        );
        let kind = raised.kind.as_str();
        let mut wait_ms = ALERT_RETRY_FIRST_MS;
        loop {
            let age_ms = self.shell.clock().wall_now_ms().saturating_sub(event.at_ms);
            if age_ms > self.sink.catch_up_ms {
                self.shell.metrics().alert_skipped(&self.sink.name, kind);
                return Outcome::Skipped;
            }
            let Err(failed) = self.attempt(&id, &body).await else {
                self.shell.metrics().alert_delivered(&self.sink.name, kind);
                return Outcome::Delivered;
            };
            self.shell.metrics().alert_attempt_failed(&self.sink.name);
            let pause_ms = failed
                .retry_after_ms
                .unwrap_or(0)
                .max(wait_ms)
                .min(ALERT_RETRY_MAX_MS);
            tracing::warn!(sink = %self.sink.name, alert = %id, reason = %failed.reason, retry_in_ms = pause_ms, "alert not delivered; retrying");
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            wait_ms = (wait_ms * 2).min(ALERT_RETRY_MAX_MS);
        }
    }

    /// One signed POST. The key is read at each attempt, so a variable set late is picked up;
    /// it never leaves this function but as the signature.
    async fn attempt(&self, id: &str, body: &Value) -> Result<(), AttemptFailed> {
        let failed = |reason: String, retry_after_ms| AttemptFailed {
            reason,
            retry_after_ms,
        };
        let key = (self.secrets)(&self.sink.secret_env).ok_or_else(|| {
            failed(
                format!(
                    "the signing key's variable {} (secret_env) is not set",
                    self.sink.secret_env
                ),
                None,
            )
        })?;
        // The poster sends exactly these bytes, so they are the signed ones.
        let bytes = JsonBody::from(body);
        let timestamp_ms = self.shell.clock().wall_now_ms();
        let header = |name: &'static str, value| Header {
            name: name.into(),
            value,
            sensitive: false,
        };
        let request = PostRequest {
            base_url: &self.sink.url,
            path: "",
            headers: vec![
                header(TIMESTAMP_HEADER, timestamp_ms.to_string()),
                header(
                    SIGNATURE_HEADER,
                    signature(key.as_bytes(), timestamp_ms, bytes.bytes()),
                ),
                header(ALERT_ID_HEADER, id.to_string()),
            ],
            body: bytes,
            timeout_ms: ALERT_POST_TIMEOUT_MS,
            response_bytes_max: ALERT_ANSWER_BYTES_MAX,
        };
        match self.poster.post(request).await {
            Ok(answer) if (200..=299).contains(&answer.status) => Ok(()),
            Ok(answer) => Err(failed(
                format!("the sink answered {}", answer.status),
                answer.retry_after_ms,
            )),
            Err(error) => Err(failed(error.to_string(), None)),
        }
    }

    /// Saves the cursor and the days dealt with; a failure is logged and the save retried with
    /// the next one (until then a restart repeats alerts, with their ids: at least once).
    async fn save(&mut self) {
        let (shell, name, seq) = (self.shell.clone(), self.sink.name.clone(), self.cursor);
        let days = std::mem::take(&mut self.unsaved_days);
        let kept = days.clone();
        let saved = blocking(move || shell.store().save_alert_cursor(&name, seq, &days)).await;
        match saved {
            Ok(()) => self.saved = seq,
            Err(error) => {
                tracing::warn!(sink = %self.sink.name, %error, "could not save the alert cursor");
                self.unsaved_days = kept;
            }
        }
    }

    /// One log line for the alerts the catch-up bound skipped in a page, not one per alert.
    fn report_skipped(&mut self) {
        if self.skipped > 0 {
            tracing::warn!(
                sink = %self.sink.name,
                skipped = self.skipped,
                catch_up_ms = self.sink.catch_up_ms,
                "alerts older than the sink's catch-up bound were skipped"
            );
            self.skipped = 0;
        }
    }
}

/// The sink's saved state; retried until the store answers (nothing to deliver before).
async fn load(shell: &Arc<Shell>, sink: &str) -> AlertCursor {
    loop {
        let (shell, name) = (shell.clone(), sink.to_string());
        match blocking(move || shell.store().alert_cursor(&name)).await {
            Ok(cursor) => return cursor,
            Err(error) => {
                tracing::warn!(sink, %error, "could not read the alert cursor; retrying");
                tokio::time::sleep(Duration::from_millis(ALERT_RETRY_MAX_MS)).await;
            }
        }
    }
}

async fn read_page(shell: &Arc<Shell>, after: u64) -> Result<Vec<Event>, String> {
    let shell = shell.clone();
    blocking(move || {
        shell
            .events_after(after, ALERT_PAGE_EVENTS)
            .map(|(page, _)| page)
    })
    .await
}

/// Runs store I/O on the blocking pool, never on an async worker; the error as text (it is
/// only logged).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, String> {
    // Under the simulator madsim deprecates it (it runs as one more task there), as in shell.rs.
    #[allow(deprecated)]
    let done = tokio::task::spawn_blocking(work).await;
    match done {
        Ok(done) => done.map_err(|error| error.to_string()),
        Err(error) => Err(format!("the store task failed: {error}")),
    }
}

fn time_zone(shell: &Shell, agent: AgentId) -> String {
    let engine = shell.engine();
    engine
        .agent(agent)
        .map_or_else(|| "UTC".to_string(), |a| a.spec.time_zone.clone())
}

fn agent_name(shell: &Shell, agent: AgentId) -> String {
    shell
        .engine()
        .agent(agent)
        .map_or_else(String::new, |a| a.name.clone())
}
