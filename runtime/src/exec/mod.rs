//! The run executor: starts a task for every run the engine started, ends it when the engine
//! ended it (cancel, pause, terminate), enforces the run timeout, and reports each outcome back
//! through the shell as a `FinishRun` command.

pub mod adapter;
pub mod agent_loop;
pub mod child;
pub(crate) mod child_env;
pub mod host;
pub mod live_groups;
pub mod llm;
pub mod model;
pub mod pricing;
pub mod process;
#[cfg(all(not(madsim), target_os = "linux"))]
mod proc_scan;
#[cfg(not(madsim))]
pub mod process_spawner;
mod unwind;
pub mod run_tokens;
pub mod run_transcript;
pub mod prompt;
pub mod scripted;
pub mod spawn;
pub mod tools;
pub mod coding_cli;
pub mod webhook;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::engine::breaker::FailureCause;
use crate::engine::event::{Event, EventKind};
use crate::engine::run::{ErrorClass, RunEnd, RunId, RunReport, RunStatus};
use crate::engine::{Command, Engine};
use crate::shell::{ExecuteError, Shell};
use crate::engine::agent::{AdapterSpec, AgentId};
use crate::redact::Redactor;
use crate::transcript::{EntryBody, SharedTranscriptStore};
use adapter::{RunContext, SharedAdapterSource};
use host::{RunServices, ShellHost};
use live_groups::LiveGroups;
use run_transcript::RunTranscript;

/// The tasks of the runs in progress on this node.
pub struct Executor {
    tasks: Mutex<BTreeMap<RunId, JoinHandle<()>>>,
    adapters: SharedAdapterSource,
    services: RunServices,
    transcripts: SharedTranscriptStore,
    /// The process groups of this node's runs still alive (a stopping node waits for them).
    live_groups: Arc<LiveGroups>,
}

impl Executor {
    pub fn new(
        adapters: SharedAdapterSource,
        services: RunServices,
        transcripts: SharedTranscriptStore,
    ) -> Self {
        Executor {
            tasks: Mutex::default(),
            adapters,
            services,
            transcripts,
            live_groups: Arc::default(),
        }
    }

    /// The process groups of this node's runs still alive.
    pub fn live_groups(&self) -> Arc<LiveGroups> {
        self.live_groups.clone()
    }

    /// The spawner the node's runs use (recovery kills orphaned groups with it).
    pub fn spawner(&self) -> spawn::SharedSpawner {
        self.services.spawner.clone()
    }

    /// Reacts to a committed batch, in log order: `run_started` spawns the run, `run_finished`
    /// of a run still executing aborts it. Called by the shell's writer once the batch is
    /// durable, under the engine's lock, with the engine already updated.
    pub(crate) fn on_commit(&self, shell: &Arc<Shell>, engine: &Engine, events: &[Event]) {
        let mut tasks = self.tasks.lock().expect("executor lock");
        for event in events {
            match &event.kind {
                EventKind::RunStarted {
                    run,
                    agent,
                    run_number,
                    ..
                } => {
                    let state = engine.agent_state(*agent).expect("run of a known agent");
                    let started = state.run(*run).expect("started run is held");
                    let spec = &state.agent().spec;
                    let daily_cap_remaining = spec.limits.daily_cap.map(|cap| {
                        let counted = state.agent().day_count;
                        cap.saturating_sub(counted.day.map_or(0, |day| counted.started_on(day)))
                    });
                    let context = RunContext {
                        run: *run,
                        agent: *agent,
                        agent_name: state.agent().name.clone(),
                        run_number: *run_number,
                        source: started.source,
                        reason: started.reason.clone(),
                        payload: started.payload.clone(),
                        history: state.history().messages().cloned().collect(),
                        budget_left_micro_usd: engine.budget_left(*run, event.at_ms),
                        daily_cap_remaining,
                        started_at_ms: event.at_ms,
                        time_zone: spec.time_zone.clone(),
                        task_key: started.task_key.clone(),
                        session_id: state
                            .sessions()
                            .get(crate::engine::session::Sessions::key_of(
                                started.task_key.as_deref(),
                            ))
                            .map(|session| session.session_id.clone()),
                        transcript: Arc::new(self.run_transcript(shell, spec, *agent, *run)),
                        // Why per run: the outbound address policy depends on the tenant.
                        host: Arc::new(ShellHost::for_run(
                            shell.clone(),
                            self.services.clone(),
                            &state.agent().tenant,
                        )),
                    };
                    let timeout_ms = state.agent().spec.limits.run_timeout_ms;
                    let adapter = self.adapters.adapter_for(&state.agent().spec.adapter);
                    let task = tokio::spawn(execute(shell.clone(), adapter, context, timeout_ms));
                    tasks.insert(*run, task);
                }
                EventKind::RunFinished { run, .. } => {
                    if let Some(task) = tasks.remove(run) {
                        task.abort();
                    }
                }
                _ => {}
            }
        }
    }

    /// The transcript of `agent`'s run `run`: redacted with the adapter's secrets, and, when
    /// the agent's liveness policy asks for passive pulses, each line a pulse.
    fn run_transcript(
        &self,
        shell: &Arc<Shell>,
        spec: &crate::engine::agent::AgentSpec,
        agent: AgentId,
        run: RunId,
    ) -> RunTranscript {
        let transcript = RunTranscript::new(
            self.transcripts.clone(),
            agent,
            run,
            shell.clock().clone(),
            self.run_redactor(&spec.adapter),
        );
        if !spec.liveness.passive_pulses {
            return transcript;
        }
        // Why weak: the transcript lives in the run's task, which must not keep a stopped
        // node's shell alive.
        let shell = Arc::downgrade(shell);
        transcript.with_activity(move || {
            if let Some(shell) = shell.upgrade() {
                shell.passive_pulse(agent);
            }
        })
    }

    /// The secrets a run of `adapter` must never write: its API key, its child's secret
    /// variables, its webhook's signing key.
    fn run_redactor(&self, adapter: &AdapterSpec) -> Redactor {
        Redactor::new(
            adapter
                .secret_env_names()
                .into_iter()
                .filter_map(|name| (self.services.secrets)(name)),
        )
    }

    /// The run tokens asynchronous webhooks report with (the API's `POST /v1/runs/{id}/result`).
    pub fn run_tokens(&self) -> &run_tokens::SharedRunTokens {
        &self.services.run_tokens
    }

    /// Runs executing now.
    pub fn executing(&self) -> usize {
        self.tasks.lock().expect("executor lock").len()
    }

    /// Aborts every run (the node is stopping; recovery will fail them on the next start).
    pub fn abort_all(&self) {
        for (_, task) in std::mem::take(&mut *self.tasks.lock().expect("executor lock")) {
            task.abort();
        }
    }

    fn forget(&self, run: RunId) {
        self.tasks.lock().expect("executor lock").remove(&run);
    }
}

/// One run: the adapter under the agent's timeout, its transcript closed with the stop, then
/// its end recorded through the engine. (The transcript is finished first, so a run the log
/// says ended has its whole transcript on disk.)
async fn execute(
    shell: Arc<Shell>,
    adapter: Box<dyn adapter::Adapter>,
    context: RunContext,
    timeout_ms: u64,
) {
    let run = context.run;
    let transcript = context.transcript.clone();
    let work = unwind::CatchUnwind::new(adapter.execute(context));
    let end =
        match tokio::time::timeout(Duration::from_millis(timeout_ms), work).await {
            // Why caught: a panicking adapter would otherwise leave its run `running` until a
            // cancel or a restart.
            Ok(Err(panic)) => RunEnd::new(
                RunStatus::Failed,
                format!("the adapter failed: {}", transcript.redactor().redact(&panic)),
            )
            .classed(ErrorClass::AdapterError),
            Ok(Ok(outcome)) => {
                // Why: the end is stored in the event log and served by the API, and its text
                // can carry the run's API key (a failed tool's error body in the detail, a final
                // answer echoing what a tool returned). The transcript's redactor cleans it as it
                // cleans the stop line, before `RunEnd::new` cuts the detail (a cut key is no
                // longer recognised).
                let redactor = transcript.redactor();
                let mut end = RunEnd::new(outcome.status, redactor.redact(&outcome.detail));
                end.cause = outcome.cause;
                end.stop_reason = outcome.stop_reason;
                end.error_class = outcome.error_class;
                end.last_call = outcome.last_call;
                end.report = outcome.report.map(|report| Box::new(redacted(report, redactor)));
                end
            }
            // A run that never answers counts as a failed model call for the breaker.
            Err(_) => RunEnd::new(
                RunStatus::TimedOut,
                format!("still running after limits.run_timeout_ms = {timeout_ms}"),
            )
            .caused_by(FailureCause::Llm),
        };
    transcript
        .write(EntryBody::Stop {
            stop_reason: end.stop_reason().as_str().to_string(),
            detail: Some(transcript.redactor().redact(&end.detail).into_owned()),
        })
        .await;
    transcript.finish().await;
    // From here the run reports itself; a cancel that lands first wins and this report is
    // refused, which is fine.
    shell.executor.forget(run);
    let finished = shell
        .execute(Command::FinishRun { run, end }, crate::writer::WhenFull::Wait)
        .await;
    if let Err(error @ (ExecuteError::Store(_) | ExecuteError::Stopped)) = finished {
        // The failed write stopped the node (ADR 0008), or it is stopping; the next start fails
        // this run with `control_plane_restart` and re-queues its wakeup once.
        tracing::warn!(%run, %error, "could not record the end of a run; the node stops");
    }
}

/// `report` with the run's secrets taken out of its texts.
fn redacted(mut report: RunReport, redactor: &Redactor) -> RunReport {
    if let Some(excerpt) = report.answer_excerpt.as_mut() {
        *excerpt = redactor.redact(excerpt).into_owned();
    }
    for message in &mut report.history_append {
        message.text = redactor.redact(&message.text).into_owned();
    }
    report
}
