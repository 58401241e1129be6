//! The oracle: checks invariants against the trace as it is written (docs/invariants.md).
//!
//! It sees only what a trace record says, never the runtime's memory, so what it checks is what
//! an outside observer could have seen: durable commits, recoveries, API answers.

mod agent_error;
mod agents;
mod answers;
mod alerts;
mod breaker_opening;
mod coding;
mod commits;
mod contracts;
mod cooldown;
mod documented;
pub mod edges;
mod executions;
mod heart;
pub mod heartbeat_defs;
mod jitter;
mod llm_errors;
mod drain;
mod history;
mod liveness;
mod operator;
mod phi;
mod predicate;
mod processes;
mod prompts;
mod queued_runs;
mod tool_arguments;

pub use executions::EXECUTION_AFTER_END_SLACK_MS;
pub use llm_errors::{ANSWERED_PREFIX, QUOTED_CHARS_MAX};
pub use operator::OPERATOR_ANSWER_BOUND_MS;
pub use predicate::{canonical_json, REDETECT_BOUND_MS, STATE_BYTES_MAX};
pub use processes::GROUP_EXIT_SLACK_MS;
mod refusals;
mod runs;
mod spacing;
mod timeline;
#[cfg(test)]
mod test_events;

use std::collections::BTreeMap;

use vigil::engine::event::{Event, EventKind};

use crate::trace::{event_digest, FaultRecord, ModelReply, TraceEvent, TraceRecord};

/// How late a due timer may fire on a steady node: the timer loop's recheck period plus one
/// second for the API answer to reach the workload. A node counts as steady once it has been up
/// and its wall clock has not jumped for this long.
pub const TIMER_LAG_MS_MAX: u64 = documented::WALL_RECHECK_MS + 1_000;

/// How much later than the latest wall time the oracle saw the node read a compaction may cut:
/// the node reads its clock for a snapshot right after a commit the oracle saw, but the
/// snapshot's read itself is not in the trace.
pub const COMPACTION_WALL_SLACK_MS: u64 = 60_000;

/// A broken invariant: its name (as in docs/invariants.md) and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

pub(crate) fn violation(invariant: &'static str, detail: String) -> Result<(), Violation> {
    Err(Violation { invariant, detail })
}

#[derive(Debug, Clone)]
struct AgentSchedule {
    name: String,
    /// (interval, first slot) of an agent with a timer.
    timer: Option<(u64, u64)>,
    last_due_at_ms: Option<u64>,
}

#[derive(Debug, Clone, Default)]
struct NodeState {
    /// Virtual ms at which the node last finished recovery; `None` while down.
    up_since_ms: Option<u64>,
    /// Virtual ms of the node's last clock jump.
    last_jump_ms: Option<u64>,
    /// Largest wall time the node is known to have read (from events and probes).
    wall_seen_ms_max: u64,
    /// The node's last crash was a power cut mid-commit: its recovered log may end with events
    /// never reported committed (their commit was interrupted, yet landed).
    maybe_committed_tail: bool,
    /// Virtual ms at which a storage operation of the running process failed: from then on it
    /// must commit nothing (ADR 0008) until it is restarted.
    write_failed_ms: Option<u64>,
}

/// Invariant state built from the trace so far.
#[derive(Debug, Default)]
pub struct Checker {
    /// Digest of every durable event, by `seq - 1`.
    log: Vec<u64>,
    /// The node's wall time (`at_ms`) of every durable event, by `seq - 1`: what compaction
    /// is judged by.
    log_at_ms: Vec<u64>,
    /// The node's event retention (`snapshots.keep_events_ms`) when it compacts its log; none
    /// while it keeps every event.
    retention_ms: Option<u64>,
    agents: BTreeMap<u64, AgentSchedule>,
    /// Agent creations the API acknowledged: name -> agent id.
    acked: BTreeMap<String, u64>,
    nodes: BTreeMap<&'static str, NodeState>,
    quiet_since_ms: Option<u64>,
    quiet_probes_checked: u32,
    runs: runs::RunsOracle,
    heart: heart::HeartOracle,
    loops: agents::AgentsOracle,
    liveness: liveness::LivenessOracle,
    phi: phi::PhiOracle,
    processes: processes::ProcessesOracle,
    executions: executions::ExecutionsOracle,
    cooldown: cooldown::CooldownOracle,
    opening: breaker_opening::OpeningOracle,
    agent_error: agent_error::AgentErrorOracle,
    spacing: spacing::SpacingOracle,
    refusals: refusals::RefusalOracle,
    contracts: contracts::ContractOracle,
    llm_errors: llm_errors::LlmErrorsOracle,
    answers: answers::AnswersOracle,
    drain: drain::DrainOracle,
    history: history::HistoryOracle,
    commits: commits::CommitsOracle,
    operator: operator::OperatorOracle,
    alerts: alerts::AlertsOracle,
    predicate: predicate::PredicateOracle,
    edges: edges::EdgesOracle,
    timeline: timeline::TimelineOracle,
    prompts: prompts::PromptsOracle,
    coding: coding::CodingOracle,
    jitter: jitter::JitterOracle,
    arguments: tool_arguments::ToolArgumentsOracle,
}

impl Checker {
    /// A checker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks one record; the first broken invariant is returned.
    pub fn observe(&mut self, record: &TraceRecord) -> Result<(), Violation> {
        let t_ms = record.t_ms;
        self.observe_event(record)?;
        self.operator.observe(record)?;
        // In the quiet phase a silent agent must go offline in time: judged at every record.
        let up_since_ms = self.nodes.values().filter_map(|n| n.up_since_ms).max();
        if let (Some(quiet_ms), Some(up_ms)) = (self.quiet_since_ms, up_since_ms) {
            self.liveness.check_silence(t_ms, quiet_ms.max(up_ms))?;
        }
        if up_since_ms.is_some() && self.nodes.values().all(|n| n.up_since_ms.is_some()) {
            self.processes.check(t_ms)?;
        }
        Ok(())
    }

    fn observe_event(&mut self, record: &TraceRecord) -> Result<(), Violation> {
        let t_ms = record.t_ms;
        if let TraceEvent::Fault { fault } = &record.event {
            self.predicate.fault(fault);
        }
        match &record.event {
            TraceEvent::Committed { event } => {
                self.answers.committed(event)?;
                self.drain.committed(event)?;
                self.history.committed(t_ms, event)?;
                self.edges.committed(event);
                self.timeline.committed(event);
                self.prompts.committed(event);
                self.coding.committed(event)?;
                self.committed(t_ms, record.node, event)?;
                self.commits.committed(record.node, event.seq)
            }
            TraceEvent::CommitAttempted {
                first_seq,
                last_seq,
            } => {
                self.predicate.commit_over()?;
                self.commits.attempted(record.node, *first_seq, *last_seq)
            }
            TraceEvent::Crashed { during_write, .. } => {
                self.history.crashed();
                self.commits.crashed(record.node);
                self.phi.restarted();
                self.predicate.crashed()?;
                let state = self.node(record.node);
                state.up_since_ms = None;
                state.maybe_committed_tail = *during_write;
                state.write_failed_ms = None;
                Ok(())
            }
            TraceEvent::Fault {
                fault: FaultRecord::StorageOpFailed { .. },
            } => {
                self.node(record.node).write_failed_ms = Some(t_ms);
                Ok(())
            }
            TraceEvent::Recovered {
                head_seq,
                digests,
                unreported,
            } => {
                self.recovered(t_ms, record.node, *head_seq, digests, unreported)?;
                // A commit a power cut interrupted may have landed: its events are the node's.
                for event in unreported {
                    self.answers.committed(event)?;
                    self.drain.committed(event)?;
                    self.history.committed(t_ms, event)?;
                    self.edges.committed(event);
                    self.timeline.committed(event);
                    self.prompts.committed(event);
                    self.coding.committed(event)?;
                }
                self.processes.recovered(t_ms);
                let state = self.node(record.node);
                state.up_since_ms = Some(t_ms);
                state.maybe_committed_tail = false;
                Ok(())
            }
            TraceEvent::LogRetention { keep_events_ms } => {
                self.retention_ms = Some(*keep_events_ms);
                Ok(())
            }
            // What it announces is judged by the start it precedes: a snapshot that differs
            // from the replay fails that start (`RecoveryFailed`, below).
            TraceEvent::SnapshotOnDisk { .. } => Ok(()),
            TraceEvent::RecoveryFailed { error } => violation(
                "durable_events_survive",
                format!("the node could not recover its disk: {error}"),
            ),
            TraceEvent::Fault {
                fault: FaultRecord::ClockJump { .. },
            } => {
                self.node(record.node).last_jump_ms = Some(t_ms);
                Ok(())
            }
            TraceEvent::AckedCreate { name, agent, seq } => self.acked_create(name, *agent, *seq),
            TraceEvent::AckedWakeup {
                agent,
                wakeup,
                idempotency_key,
                ..
            } => self.runs.acked_wakeup(*agent, *wakeup, idempotency_key),
            TraceEvent::Probe {
                target,
                now_ms,
                agents,
            } => self.probe(target, t_ms, *now_ms, agents),
            TraceEvent::StreamPage { after, events } => self.stream_page(*after, events),
            TraceEvent::AckedPulse { agent, sent_ms } => {
                self.phi.answered_pulse(t_ms, *agent, *sent_ms);
                self.liveness.answered_pulse(t_ms, *agent, *sent_ms)
            }
            TraceEvent::AckedPulses { agents, sent_ms } => agents.iter().try_for_each(|agent| {
                self.phi.answered_pulse(t_ms, *agent, *sent_ms);
                self.liveness.answered_pulse(t_ms, *agent, *sent_ms)
            }),
            TraceEvent::UnansweredPulse { agent, .. } => {
                self.phi.unanswered_pulse(Some(*agent));
                Ok(())
            }
            TraceEvent::UnansweredPulses { .. } => {
                self.phi.unanswered_pulse(None);
                Ok(())
            }
            TraceEvent::QuietPhase => {
                self.quiet_since_ms = Some(t_ms);
                self.predicate.quiet(t_ms);
                Ok(())
            }
            TraceEvent::HistoryShown {
                agent,
                sent_ms,
                messages,
                bytes,
            } => self.history.shown(t_ms, *agent, *sent_ms, messages, *bytes),
            TraceEvent::DrainStarted { after_seq, .. } => {
                self.drain.drain_started(*after_seq);
                Ok(())
            }
            TraceEvent::Drained { left } => self.drain.drained(*left),
            TraceEvent::StoppedGracefully { live_groups } => self.drain.stopped(live_groups),
            TraceEvent::Restarted => {
                // A process that stopped itself (a failed write) is restarted without a crash.
                self.drain.restarted();
                self.phi.restarted();
                self.node(record.node).write_failed_ms = None;
                Ok(())
            }
            TraceEvent::CommitEnd { .. } => self.loops.commit_end(),
            TraceEvent::ModelCallServed {
                agent,
                run,
                round,
                reply,
                wake,
                broken,
                results_seen,
                error_body,
                answer,
                ..
            } => {
                self.prompts.served(*agent, *run, wake.as_ref())?;
                if let Some(run) = run {
                    self.llm_errors.served(*run, error_body.as_deref());
                    self.answers.served(*run, answer.as_deref());
                }
                if let Some(run) = run {
                    self.arguments
                        .served(*run, *round, broken, results_seen)?;
                }
                if let (Some(run), ModelReply::ToolCalls { rest_minutes: Some(minutes), .. }) =
                    (run, reply)
                {
                    self.contracts.rest_asked(*run, Some(*minutes));
                }
                if let Some(run) = run {
                    self.executions
                        .started(t_ms, executions::Service::Model, *agent, *run)?;
                }
                self.loops.model_call_served(*agent, *run)
            }
            TraceEvent::ToolCallServed {
                agent,
                run,
                call_id,
                ..
            } => {
                self.arguments.tool_served(*run, call_id)?;
                self.executions
                    .started(t_ms, executions::Service::Tool, Some(*agent), *run)?;
                self.loops.tool_call_served(*agent, *run)
            }
            TraceEvent::CallEnded { run, .. } => {
                let service = match record.node {
                    "tool-server" => executions::Service::Tool,
                    _ => executions::Service::Model,
                };
                if let Some(run) = run {
                    self.executions.ended(service, *run);
                }
                Ok(())
            }
            TraceEvent::ProcessSpawned {
                run,
                pgid,
                args,
                stdin,
                stdout,
                end,
                cli,
                ..
            } => {
                match cli {
                    Some(cli) => self.coding.invoked(*run, cli)?,
                    None => self.processes.spawned(*run, stdout, *end),
                }
                self.prompts.spawned(*run, args, stdin.as_deref())?;
                self.executions.process_spawned(t_ms, *run, *pgid)
            }
            TraceEvent::ProcessGroupGone { pgid, .. } => {
                self.processes.group_gone(t_ms, *pgid);
                self.executions.group_gone(*pgid);
                Ok(())
            }
            TraceEvent::AlertSinkUp => {
                self.alerts.sink_up();
                Ok(())
            }
            TraceEvent::AlertDelivered { id, seq, kind } => self.alerts.delivered(id, *seq, kind),
            TraceEvent::CheckServed {
                heartbeat,
                request,
                value,
                pad_bytes,
                answer,
            } => {
                // Only an answer the runtime got within its budget has a verdict to judge.
                let observed = answer
                    .in_budget()
                    .then(|| crate::state_server::observed(*value, *pad_bytes));
                self.predicate
                    .check_served(heartbeat, *request, observed.as_ref())
            }
            TraceEvent::CheckEnded { heartbeat, request } => {
                self.predicate.check_ended(heartbeat, *request);
                Ok(())
            }
            TraceEvent::RunStarted { seed, .. } => {
                self.predicate.run_started(*seed);
                Ok(())
            }
            TraceEvent::EdgeAnswered {
                kind,
                agent,
                body,
                status,
                code,
                field,
                attempts,
                seq_before,
                paused_until_ms,
                shown,
            } => {
                self.timeline.follow();
                self.edges.answered(
                    *kind,
                    agent.as_deref(),
                    body,
                    *status,
                    code.as_deref(),
                    field.as_deref(),
                    *attempts,
                    (*seq_before, *paused_until_ms),
                )?;
                match shown {
                    Some(shown) => heartbeat_defs::judge_shown(body, shown),
                    None => Ok(()),
                }
            }
            TraceEvent::TimelineShown {
                agent,
                since_ms,
                limit,
                entries,
                next_after,
                head_seq,
            } => self
                .timeline
                .shown(*agent, (*since_ms, *limit), entries, *next_after, *head_seq),
            TraceEvent::SpecShown { agent, spec } => self.edges.shown(agent, spec),
            TraceEvent::TokenRotated {
                agent,
                seq,
                token_sha256,
            } => self.edges.token_rotated(agent, *seq, token_sha256),
            TraceEvent::TokenUsed {
                agent,
                token_sha256,
                status,
            } => self.edges.token_used(agent, token_sha256, *status),
            TraceEvent::Fault { .. }
            | TraceEvent::Violation { .. }
            | TraceEvent::OperatorAsked { .. }
            | TraceEvent::OperatorAnswered { .. }
            | TraceEvent::Hostile { .. } => Ok(()),
        }
    }

    /// Checks what can only be judged at the end of the run (`end_ms`): liveness in the quiet
    /// phase, alerts delivered, heartbeats' states re-detected.
    pub fn finish(&self, end_ms: u64) -> Result<(), Violation> {
        if self.quiet_since_ms.is_some() && self.quiet_probes_checked == 0 {
            return violation(
                "quiet_phase_liveness",
                "no probe of the quiet phase found the node up and steady: the runtime did not \
                 come back or did not answer"
                    .into(),
            );
        }
        if let Some(quiet_since_ms) = self.quiet_since_ms {
            self.runs.finish(quiet_since_ms)?;
        }
        self.alerts.finish(end_ms)?;
        self.predicate.finish(end_ms)
    }

    /// Edge requests judged (taken, refused) and specs compared (invariants 33-35).
    pub fn edges_judged(&self) -> ((u64, u64), u64) {
        (self.edges.judged(), self.edges.specs_shown())
    }

    /// Heartbeat transitions the predicate checks judged.
    pub fn heartbeat_transitions(&self) -> u64 {
        self.predicate.transitions()
    }

    /// (alerts the log called for, deliveries the receiver accepted): zero without a receiver.
    pub fn alerts(&self) -> (usize, u32) {
        self.alerts.counts()
    }

    /// Runs that ended, by terminal status.
    pub fn ended_runs(&self) -> BTreeMap<&'static str, usize> {
        self.runs.ended()
    }

    /// Runs that stopped as ghosts.
    pub fn ghost_runs(&self) -> u64 {
        self.loops.ghost_runs
    }

    /// Executions (model calls, tool calls, process groups) the execution-side checks saw.
    pub fn executions_checked(&self) -> u64 {
        self.executions.executions()
    }

    /// How often each contract check (invariants 20–22) had something to judge.
    pub fn contracts_judged(&self) -> &BTreeMap<&'static str, u64> {
        self.contracts.judged()
    }

    /// Wakeups judged by invariant 23, by what became of them.
    pub fn refusals_judged(&self) -> &BTreeMap<&'static str, u64> {
        self.refusals.judged()
    }

    /// How often the idle-spacing and offline-threshold checks (invariants 25, 26) judged.
    pub fn spacing_judged(&self) -> &BTreeMap<&'static str, u64> {
        self.spacing.judged()
    }

    /// Times an agent entered the error state, and wakeups refused while it was in it (each
    /// judged by invariant 24).
    pub fn agent_errors(&self) -> (u64, u64) {
        (self.agent_error.entered(), self.agent_error.refused_in_error())
    }

    /// Runs that started after a run of an agent with a cooldown (each checked against it).
    pub fn starts_after_a_cooldown(&self) -> u64 {
        self.cooldown.starts_after_a_cooldown()
    }

    /// Breaker openings judged against the counting contract (27).
    pub fn breaker_openings_judged(&self) -> u64 {
        self.opening.openings()
    }

    /// How many agents were marked offline.
    pub fn offline_marks(&self) -> u64 {
        self.liveness.offline_marks()
    }

    /// Offline marks of phi-accrual agents judged against the restated detector (26), and of
    /// them those phi decided before the fixed threshold.
    pub fn phi_offline_judged(&self) -> (u64, u64) {
        self.phi.judged()
    }

    /// Process groups spawned, and those still alive.
    pub fn process_groups(&self) -> (usize, usize) {
        self.processes.counts()
    }

    /// How many durable events the checker knows of.
    pub fn durable_events(&self) -> u64 {
        self.log.len() as u64
    }

    fn node(&mut self, node: &'static str) -> &mut NodeState {
        self.nodes.entry(node).or_default()
    }

    fn committed(&mut self, t_ms: u64, node: &'static str, event: &Event) -> Result<(), Violation> {
        let expected = self.log.len() as u64 + 1;
        if event.seq != expected {
            return violation(
                "events_gap_free",
                format!(
                    "committed seq {} but the durable log ends at {}",
                    event.seq,
                    expected - 1
                ),
            );
        }
        let state = self.node(node);
        if let Some(failed_ms) = state.write_failed_ms {
            return violation(
                "stops_after_failed_write",
                format!(
                    "seq {} ({}) committed at {t_ms} ms by a process whose storage operation failed at {failed_ms} ms; it must stop and be restarted first (ADR 0008)",
                    event.seq,
                    event.kind.type_name()
                ),
            );
        }
        state.wall_seen_ms_max = state.wall_seen_ms_max.max(event.at_ms);
        match &event.kind {
            EventKind::AgentCreated {
                agent,
                name,
                spec,
                first_fire_at_ms,
                ..
            } => {
                let timer = spec.heartbeat.interval_ms.zip(*first_fire_at_ms);
                if spec.heartbeat.interval_ms.is_some() != first_fire_at_ms.is_some() {
                    return violation(
                        "timer_not_lost",
                        format!("agent {agent} was created with a timer but no first slot, or the reverse"),
                    );
                }
                if let Some((interval_ms, first_ms)) = timer {
                    self.jitter.created(agent.0, event.at_ms, interval_ms, first_ms)?;
                }
                self.agents.insert(
                    agent.0,
                    AgentSchedule {
                        name: name.clone(),
                        timer,
                        last_due_at_ms: None,
                    },
                );
            }
            EventKind::AgentUpdated {
                agent,
                spec,
                first_fire_at_ms,
                ..
            } => {
                // A new interval starts a new grid from the change's first slot; any other
                // change keeps the grid (docs/api.md, `PATCH /v1/agents/{id}`). The latest fired
                // slot is kept: a new grid's slots come after it too.
                if let Some(schedule) = self.agents.get_mut(&agent.0) {
                    schedule.name = spec.name.clone();
                    if schedule.timer.map(|(interval, _)| interval) != spec.heartbeat.interval_ms {
                        schedule.timer = spec.heartbeat.interval_ms.zip(*first_fire_at_ms);
                    }
                }
            }
            EventKind::TimerFired {
                agent,
                due_at_ms,
                next_fire_at_ms,
                ..
            } => {
                let Some(schedule) = self.agents.get_mut(&agent.0) else {
                    return violation(
                        "events_gap_free",
                        format!("timer fired for unknown agent {agent}"),
                    );
                };
                let Some((interval_ms, first_fire_at_ms)) = schedule.timer else {
                    return violation(
                        "timer_not_duplicated",
                        format!("timer fired for agent {agent}, which has no timer"),
                    );
                };
                if schedule
                    .last_due_at_ms
                    .is_some_and(|last| last >= *due_at_ms)
                {
                    return violation(
                        "timer_not_duplicated",
                        format!(
                            "agent {agent} fired slot {due_at_ms} after slot {}",
                            schedule.last_due_at_ms.unwrap_or_default()
                        ),
                    );
                }
                let on_grid = due_at_ms
                    .checked_sub(first_fire_at_ms)
                    .is_some_and(|d| d % interval_ms == 0);
                if !on_grid || *next_fire_at_ms != due_at_ms + interval_ms {
                    return violation(
                        "timer_not_duplicated",
                        format!("agent {agent} fired off its grid: slot {due_at_ms}, next {next_fire_at_ms}"),
                    );
                }
                if event.at_ms < *due_at_ms || event.at_ms >= *next_fire_at_ms {
                    return violation(
                        "timer_not_lost",
                        format!("agent {agent} fire at {} does not stand for its latest slot {due_at_ms}", event.at_ms),
                    );
                }
                schedule.last_due_at_ms = Some(*due_at_ms);
            }
            _ => {}
        }
        self.runs.committed(t_ms, event)?;
        self.heart.committed(event)?;
        self.loops.committed(event)?;
        self.liveness.committed(t_ms, event)?;
        self.phi.committed(t_ms, event)?;
        self.processes.committed(t_ms, event)?;
        self.executions.committed(t_ms, event);
        self.cooldown.committed(event)?;
        self.opening.committed(event)?;
        self.agent_error.committed(event)?;
        self.spacing.committed(event)?;
        self.refusals.committed(event)?;
        self.contracts.committed(event)?;
        if let EventKind::RunFinished {
            run,
            detail,
            stop_reason,
            ..
        } = &event.kind
        {
            let llm_error = *stop_reason == Some(vigil::engine::run::StopReason::LlmError);
            self.llm_errors.finished(run.0, llm_error, detail)?;
        }
        self.alerts.committed(t_ms, event);
        self.predicate.committed(event)?;
        self.log.push(event_digest(event));
        self.log_at_ms.push(event.at_ms);
        Ok(())
    }

    fn recovered(
        &mut self,
        t_ms: u64,
        node: &'static str,
        head_seq: u64,
        digests: &[(u64, u64)],
        unreported: &[Event],
    ) -> Result<(), Violation> {
        // A compacting node keeps its log from some seq on; what it dropped must have been
        // droppable (docs/operations.md, "Snapshots": after each snapshot, the events it holds
        // that are older than the retention window leave the log).
        let first_kept = digests.first().map_or(head_seq + 1, |&(seq, _)| seq);
        self.compacted_through(node, first_kept - 1)?;
        let dropped = (first_kept - 1) as usize;
        for (index, known) in self.log.iter().enumerate().skip(dropped) {
            let seq = index as u64 + 1;
            match digests.get(index - dropped) {
                Some(&(s, digest)) if s == seq && digest == *known => {}
                Some(&(s, digest)) => {
                    return violation(
                        "durable_events_survive",
                        format!("after the crash seq {seq} reads back as seq {s} digest {digest:016x}, was {known:016x}"),
                    )
                }
                None => {
                    return violation(
                        "durable_events_survive",
                        format!(
                            "after the crash the log ends at seq {head_seq}; durable events {seq}..={} are gone",
                            self.log.len()
                        ),
                    )
                }
            }
        }
        let unreported_count = (dropped + digests.len()).saturating_sub(self.log.len());
        if unreported.len() != unreported_count {
            return violation(
                "durable_events_survive",
                format!("recovery reported {} unreported events but the log has {unreported_count} more than known", unreported.len()),
            );
        }
        if unreported_count > 0 && !self.node(node).maybe_committed_tail {
            // Every commit is observed before control returns to the scheduler, so without a
            // power cut an event on disk that was never reported means observer and disk disagree.
            return violation(
                "durable_events_survive",
                format!("after a crash between commits the log holds {unreported_count} events never reported committed"),
            );
        }
        // The interrupted commit landed: its events are durable now and must obey every rule.
        for event in unreported {
            self.committed(t_ms, node, event)?;
        }
        // They were one commit (a power cut interrupts one), which ends here.
        self.loops.commit_end()?;
        self.predicate.commit_over()?;
        // And they must be that whole commit, never a part of it.
        self.commits.recovered(node, unreported)
    }

    /// Judges a recovered log that begins after seq `through`: only a node with a retention
    /// may drop events, only events it committed, and only those older than its retention
    /// window on its own clock (compaction cuts at the wall time of a snapshot, never later
    /// than the latest wall time the oracle knows the node read, plus [`COMPACTION_WALL_SLACK_MS`]).
    fn compacted_through(&mut self, node: &'static str, through: u64) -> Result<(), Violation> {
        if through == 0 {
            return Ok(());
        }
        let Some(retention_ms) = self.retention_ms else {
            return violation(
                "durable_events_survive",
                format!("after the crash the log begins after seq {through}, but this node keeps every event"),
            );
        };
        if through as usize > self.log.len() {
            return violation(
                "durable_events_survive",
                format!("after the crash the log begins after seq {through}, past the durable head {}", self.log.len()),
            );
        }
        let wall_ms = self.node(node).wall_seen_ms_max + COMPACTION_WALL_SLACK_MS;
        let cutoff_ms = wall_ms.saturating_sub(retention_ms);
        let young = self.log_at_ms[..through as usize]
            .iter()
            .enumerate()
            .find(|(_, at_ms)| **at_ms >= cutoff_ms);
        if let Some((index, at_ms)) = young {
            return violation(
                "durable_events_survive",
                format!(
                    "after the crash the log begins after seq {through}, but seq {} (at {at_ms} ms) was inside the retention window of {retention_ms} ms (the node's clock read at most {} ms)",
                    index + 1,
                    wall_ms - COMPACTION_WALL_SLACK_MS
                ),
            );
        }
        Ok(())
    }

    fn acked_create(&mut self, name: &str, agent: u64, seq: u64) -> Result<(), Violation> {
        match self.agents.get(&agent) {
            Some(schedule) if schedule.name == name && seq as usize <= self.log.len() => {
                self.acked.insert(name.to_string(), agent);
                Ok(())
            }
            _ => violation(
                "acked_writes_survive",
                format!("API acknowledged agent {name:?} as {agent} at seq {seq}, which is not in the durable log"),
            ),
        }
    }

    fn probe(
        &mut self,
        node: &'static str,
        t_ms: u64,
        now_ms: u64,
        agents: &[(u64, String, Option<u64>)],
    ) -> Result<(), Violation> {
        // By id: a fleet's list has thousands of agents, each acked agent looked up once.
        let listed: BTreeMap<u64, &str> = agents.iter().map(|(a, n, _)| (*a, n.as_str())).collect();
        for (name, id) in &self.acked {
            if listed.get(id) != Some(&name.as_str()) {
                return violation(
                    "acked_writes_survive",
                    format!("acknowledged agent {name:?} ({id}) is missing from the agent list"),
                );
            }
        }
        let state = self.node(node);
        state.wall_seen_ms_max = state.wall_seen_ms_max.max(now_ms);
        let wall_seen_ms_max = state.wall_seen_ms_max;
        let steady = state
            .up_since_ms
            .is_some_and(|up| up + TIMER_LAG_MS_MAX <= t_ms)
            && state
                .last_jump_ms
                .is_none_or(|jump| jump + TIMER_LAG_MS_MAX <= t_ms);
        for (agent, _, next_fire_at_ms) in agents {
            let Some(schedule) = self.agents.get(agent) else {
                return violation(
                    "acked_writes_survive",
                    format!("agent {agent} listed but never created"),
                );
            };
            let (Some((interval_ms, _)), Some(next_fire_at_ms)) = (schedule.timer, next_fire_at_ms)
            else {
                // No timer: nothing to judge (agents are never terminated in these scenarios).
                continue;
            };
            // The first slot of a grid is offset by the agent's jitter, less than one interval
            // and at most 5 minutes (docs/api.md; restated in `jitter`).
            let jitter_ms_max = jitter::window_ms(interval_ms);
            if *next_fire_at_ms > wall_seen_ms_max + interval_ms + jitter_ms_max + TIMER_LAG_MS_MAX
            {
                return violation(
                    "timer_not_lost",
                    format!(
                        "agent {agent}'s next slot {next_fire_at_ms} is more than one interval ({interval_ms}) past the latest wall time the node has read ({wall_seen_ms_max})"
                    ),
                );
            }
            if steady && next_fire_at_ms + TIMER_LAG_MS_MAX < now_ms {
                return violation(
                    "timer_not_lost",
                    format!("agent {agent}'s slot {next_fire_at_ms} is overdue by {} ms on a steady node (wall {now_ms})", now_ms - next_fire_at_ms),
                );
            }
        }
        if steady && self.quiet_since_ms.is_some() {
            self.quiet_probes_checked += 1;
        }
        Ok(())
    }

    fn stream_page(&self, after: u64, events: &[(u64, u64)]) -> Result<(), Violation> {
        for (offset, &(seq, digest)) in events.iter().enumerate() {
            if seq != after + 1 + offset as u64 {
                return violation(
                    "stream_resume_exact",
                    format!("feed after {after} yielded seq {seq} at position {offset}"),
                );
            }
            match self.log.get(seq as usize - 1) {
                Some(known) if *known == digest => {}
                Some(_) => {
                    return violation(
                        "stream_resume_exact",
                        format!("feed yielded seq {seq} with a different body than was committed"),
                    )
                }
                None => {
                    return violation(
                        "stream_resume_exact",
                        format!("feed yielded seq {seq}, never committed"),
                    )
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::tenant::TokenHash;

    fn record(t_ms: u64, event: TraceEvent) -> TraceRecord {
        TraceRecord {
            t_ms,
            node: "vigil-1",
            event,
        }
    }

    fn created(seq: u64) -> TraceEvent {
        TraceEvent::Committed {
            event: Event {
                seq,
                at_ms: 0,
                tenant: "default".into(),
                kind: EventKind::AgentCreated {
                    agent: AgentId(1),
                    name: "a".into(),
                    spec: Box::new(AgentSpec::with_interval("a", Some(1_000))),
                    token_hash: TokenHash::of("a"),
                    first_fire_at_ms: Some(1_000),
                },
            },
        }
    }

    fn fired(seq: u64, at_ms: u64, due_at_ms: u64) -> TraceEvent {
        TraceEvent::Committed {
            event: Event {
                seq,
                at_ms,
                tenant: "default".into(),
                kind: EventKind::TimerFired {
                    agent: AgentId(1),
                    due_at_ms,
                    missed_slots: 0,
                    next_fire_at_ms: due_at_ms + 1_000,
                },
            },
        }
    }

    #[test]
    fn a_gap_in_commits_is_caught() {
        let mut checker = Checker::new();
        checker.observe(&record(0, created(1))).unwrap();
        let err = checker
            .observe(&record(1, fired(3, 1_000, 1_000)))
            .unwrap_err();
        assert_eq!(err.invariant, "events_gap_free");
    }

    #[test]
    fn a_commit_after_a_failed_storage_operation_is_caught_until_a_restart() {
        let failed = || TraceEvent::Fault {
            fault: FaultRecord::StorageOpFailed { injected_errors: 1 },
        };
        let mut checker = Checker::new();
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(1, failed())).unwrap();
        let err = checker
            .observe(&record(2, fired(2, 1_000, 1_000)))
            .unwrap_err();
        assert_eq!(err.invariant, "stops_after_failed_write");
        // After the process is gone and restarted, commits are fine again.
        let mut checker = Checker::new();
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(1, failed())).unwrap();
        checker.observe(&record(2, TraceEvent::Restarted)).unwrap();
        checker.observe(&record(3, fired(2, 1_000, 1_000))).unwrap();
    }

    #[test]
    fn a_batch_of_answered_pulses_is_judged_agent_by_agent() {
        let online = TraceEvent::Committed {
            event: Event {
                seq: 2,
                at_ms: 0,
                tenant: "default".into(),
                kind: EventKind::AgentOnline {
                    agent: AgentId(1),
                    report: Default::default(),
                },
            },
        };
        let batch = |agents: Vec<u64>| TraceEvent::AckedPulses { agents, sent_ms: 10 };
        let mut checker = Checker::new();
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(5, online)).unwrap();
        checker.observe(&record(20, batch(vec![1]))).unwrap();
        let err = checker.observe(&record(30, batch(vec![1, 9]))).unwrap_err();
        assert_eq!(err.invariant, "answered_pulse_means_online");
        assert!(err.detail.contains("agent 9"), "{}", err.detail);
    }

    #[test]
    fn a_slot_fired_twice_is_caught() {
        let mut checker = Checker::new();
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(1, fired(2, 1_000, 1_000))).unwrap();
        let err = checker
            .observe(&record(2, fired(3, 1_500, 1_000)))
            .unwrap_err();
        assert_eq!(err.invariant, "timer_not_duplicated");
    }

    #[test]
    fn a_lost_durable_event_is_caught_at_recovery() {
        let mut checker = Checker::new();
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(1, fired(2, 1_000, 1_000))).unwrap();
        let TraceEvent::Committed { event } = created(1) else {
            unreachable!()
        };
        let recovered = TraceEvent::Recovered {
            head_seq: 1,
            digests: vec![(1, event_digest(&event))],
            unreported: vec![],
        };
        let err = checker.observe(&record(2, recovered)).unwrap_err();
        assert_eq!(err.invariant, "durable_events_survive");
    }

    #[test]
    fn an_overdue_timer_on_a_steady_node_is_caught_but_not_right_after_a_restart() {
        let mut checker = Checker::new();
        checker.observe(&record(0, created(1))).unwrap();
        let up = TraceEvent::Recovered {
            head_seq: 1,
            digests: checker.log.iter().map(|d| (1, *d)).collect(),
            unreported: vec![],
        };
        checker.observe(&record(10, up)).unwrap();
        let probe = |now_ms| TraceEvent::Probe {
            target: "vigil-1",
            now_ms,
            agents: vec![(1, "a".into(), Some(1_000))],
        };
        checker.observe(&record(100, probe(9_000))).unwrap();
        let err = checker.observe(&record(100_000, probe(9_000))).unwrap_err();
        assert_eq!(err.invariant, "timer_not_lost");
    }

    fn crashed(during_write: bool) -> TraceEvent {
        TraceEvent::Crashed {
            during_write,
            pending_ops: 1,
            kept_ops: 1,
            torn_ops: 0,
            lost_bytes: 0,
        }
    }

    fn recovered_with_unreported(checker: &Checker, unreported: Vec<Event>) -> TraceEvent {
        let mut digests: Vec<(u64, u64)> = checker
            .log
            .iter()
            .enumerate()
            .map(|(i, d)| (i as u64 + 1, *d))
            .collect();
        digests.extend(unreported.iter().map(|e| (e.seq, event_digest(e))));
        TraceEvent::Recovered {
            head_seq: digests.len() as u64,
            digests,
            unreported,
        }
    }

    fn event_of(trace_event: TraceEvent) -> Event {
        let TraceEvent::Committed { event } = trace_event else {
            unreachable!()
        };
        event
    }

    #[test]
    fn an_unreported_commit_is_accepted_only_after_a_power_cut_and_still_checked() {
        let mut checker = Checker::new();
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(1, crashed(false))).unwrap();
        let tail = vec![event_of(fired(2, 1_000, 1_000))];
        let err = checker
            .observe(&record(
                2,
                recovered_with_unreported(&checker, tail.clone()),
            ))
            .unwrap_err();
        assert_eq!(err.invariant, "durable_events_survive");

        let mut checker = Checker::new();
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(1, attempted(2, 2))).unwrap();
        checker.observe(&record(1, crashed(true))).unwrap();
        checker
            .observe(&record(2, recovered_with_unreported(&checker, tail)))
            .unwrap();
        assert_eq!(checker.durable_events(), 2);
        // The landed tail counts: firing its slot again is a duplicate.
        let err = checker
            .observe(&record(3, fired(3, 1_200, 1_000)))
            .unwrap_err();
        assert_eq!(err.invariant, "timer_not_duplicated");
    }

    fn attempted(first_seq: u64, last_seq: u64) -> TraceEvent {
        TraceEvent::CommitAttempted {
            first_seq,
            last_seq,
        }
    }

    /// A checker that knows seq 1, then saw the commit 2..=3 attempted and the process die.
    fn interrupted_in_two_event_commit() -> Checker {
        let mut checker = Checker::new();
        checker.observe(&record(0, attempted(1, 1))).unwrap();
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(1, attempted(2, 3))).unwrap();
        checker.observe(&record(1, crashed(true))).unwrap();
        checker
    }

    #[test]
    fn an_interrupted_commit_found_in_part_after_recovery_is_caught() {
        let mut checker = interrupted_in_two_event_commit();
        let prefix = vec![event_of(fired(2, 1_000, 1_000))];
        let err = checker
            .observe(&record(2, recovered_with_unreported(&checker, prefix)))
            .unwrap_err();
        assert_eq!(err.invariant, "commit_atomic");
        assert!(err.detail.contains("2..=2"), "{}", err.detail);
    }

    #[test]
    fn an_interrupted_commit_found_whole_or_not_at_all_is_accepted() {
        let mut checker = interrupted_in_two_event_commit();
        let whole = vec![
            event_of(fired(2, 1_000, 1_000)),
            event_of(fired(3, 2_000, 2_000)),
        ];
        checker
            .observe(&record(2, recovered_with_unreported(&checker, whole)))
            .unwrap();
        assert_eq!(checker.durable_events(), 3);

        let mut checker = interrupted_in_two_event_commit();
        checker
            .observe(&record(2, recovered_with_unreported(&checker, vec![])))
            .unwrap();
        // Recovery settled the interrupted commit: the next one starts afresh.
        checker.observe(&record(3, attempted(2, 2))).unwrap();
        checker.observe(&record(3, fired(2, 1_000, 1_000))).unwrap();
    }

    #[test]
    fn an_unreported_tail_without_an_interrupted_commit_is_caught() {
        // The last commit was wholly reported before the power cut: nothing may be unreported.
        let mut checker = Checker::new();
        checker.observe(&record(0, attempted(1, 1))).unwrap();
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(1, crashed(true))).unwrap();
        let tail = vec![event_of(fired(2, 1_000, 1_000))];
        let err = checker
            .observe(&record(2, recovered_with_unreported(&checker, tail)))
            .unwrap_err();
        assert_eq!(err.invariant, "commit_atomic");
    }

    #[test]
    fn a_commit_attempted_before_the_previous_one_was_reported_is_caught() {
        let mut checker = Checker::new();
        checker.observe(&record(0, attempted(1, 2))).unwrap();
        checker.observe(&record(0, created(1))).unwrap();
        let err = checker.observe(&record(1, attempted(3, 3))).unwrap_err();
        assert_eq!(err.invariant, "commit_atomic");
    }

    #[test]
    fn quiet_phase_without_a_steady_probe_fails_liveness() {
        let mut checker = Checker::new();
        checker.observe(&record(0, TraceEvent::QuietPhase)).unwrap();
        assert_eq!(
            checker.finish(0).unwrap_err().invariant,
            "quiet_phase_liveness"
        );
    }

    /// A checker that saw a node with `retention_ms` (if any) commit an agent at 0 ms and two
    /// timer fires at 1 s and 10 min (the latest wall time it read).
    fn three_events(retention_ms: Option<u64>) -> Checker {
        let mut checker = Checker::new();
        if let Some(keep_events_ms) = retention_ms {
            let retention = TraceEvent::LogRetention { keep_events_ms };
            checker.observe(&record(0, retention)).unwrap();
        }
        checker.observe(&record(0, created(1))).unwrap();
        checker.observe(&record(1, fired(2, 1_000, 1_000))).unwrap();
        checker.observe(&record(2, fired(3, 600_000, 600_000))).unwrap();
        checker
    }

    /// The recovery of a log that kept `seq..`.
    fn kept_from(checker: &Checker, seq: u64) -> TraceEvent {
        TraceEvent::Recovered {
            head_seq: checker.log.len() as u64,
            digests: (seq..=checker.log.len() as u64)
                .map(|s| (s, checker.log[s as usize - 1]))
                .collect(),
            unreported: vec![],
        }
    }

    #[test]
    fn a_compacted_log_passes_only_from_a_compacting_node_and_only_past_its_retention() {
        // Seq 1 (at 0 ms) is past a 5-minute retention on a clock that read 10 minutes.
        let mut checker = three_events(Some(300_000));
        checker.observe(&record(3, crashed(false))).unwrap();
        let recovered = kept_from(&checker, 2);
        checker.observe(&record(4, recovered)).unwrap();
        // So is seq 2 (at 1 s), but not seq 3 (at 10 minutes).
        let mut checker = three_events(Some(300_000));
        let recovered = kept_from(&checker, 3);
        checker.observe(&record(4, recovered)).unwrap();
        let mut checker = three_events(Some(300_000));
        let recovered = kept_from(&checker, 4);
        let error = checker.observe(&record(4, recovered)).unwrap_err();
        assert!(error.detail.contains("seq 3 (at 600000 ms)"), "{}", error.detail);

        // A node that keeps every event has lost seq 1.
        let mut checker = three_events(None);
        let recovered = kept_from(&checker, 2);
        let error = checker.observe(&record(4, recovered)).unwrap_err();
        assert_eq!(error.invariant, "durable_events_survive");
        assert!(error.detail.contains("keeps every event"), "{}", error.detail);

        // Seq 2 (at 1 s) is inside an 11-minute retention (10 minutes read, plus the slack).
        let mut checker = three_events(Some(11 * 60_000));
        let recovered = kept_from(&checker, 3);
        let error = checker.observe(&record(4, recovered)).unwrap_err();
        assert_eq!(error.invariant, "durable_events_survive");
        assert!(error.detail.contains("seq 1 (at 0 ms)"), "{}", error.detail);

        // A kept log whose events differ from the committed ones is still caught.
        let mut checker = three_events(Some(300_000));
        let mut recovered = kept_from(&checker, 2);
        if let TraceEvent::Recovered { digests, .. } = &mut recovered {
            digests[0].1 ^= 1;
        }
        let error = checker.observe(&record(4, recovered)).unwrap_err();
        assert_eq!(error.invariant, "durable_events_survive");
    }
}
