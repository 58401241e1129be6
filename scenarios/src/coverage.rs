//! Coverage: how often, in a seed and over a sweep, each fault struck and each invariant had
//! something to judge (its *precondition*: a crash to recover from, a resumed stream, a daily
//! cap reached, a probe of a half-open breaker, ...). A sweep that never met an invariant's
//! precondition checked nothing of it, however green; each scenario names the preconditions it
//! is built to reach ([`required`]), and a sweep that meets one of them in no seed fails
//! (`SweepSummary::coverage_gaps`, applied by the simulation tests CI runs).
//!
//! Counted from the trace alone, after the run, so the count is independent of the checks it
//! measures.

use std::collections::{BTreeMap, BTreeSet};

use vigil::engine::event::EventKind;
use vigil::engine::run::StopReason;
use vigil::engine::wakeup::{RefusalReason, WakeupSource};
use vigil_world::check::{ANSWERED_PREFIX, QUOTED_CHARS_MAX, STATE_BYTES_MAX};
use vigil_world::state_server::{served_token, NEAR_LIMIT_BYTES};
use vigil_world::trace::{
    BrokenCall, CheckAnswer, CliOutcome, EdgeKind, FaultRecord, ToolResultSeen, TraceEvent,
    TraceRecord,
};

mod combinations;

/// Most messages a history holds (docs/api.md), for `history_at_bound`.
const HISTORY_MESSAGES_MAX: usize = 40;

/// One precondition: its key, the invariant it lets judge, and what it counts.
#[derive(Debug, Clone, Copy)]
pub struct Precondition {
    pub key: &'static str,
    pub invariant: &'static str,
    pub counts: &'static str,
}

/// Every precondition counted, in the order tables show them.
pub static PRECONDITIONS: &[Precondition] = &[
    Precondition { key: "recovered_after_crash", invariant: "durable_events_survive, acked_writes_survive (4)", counts: "recoveries of a non-empty log" },
    Precondition { key: "recovered_compacted", invariant: "durable_events_survive (4)", counts: "recoveries of a log compacted after a snapshot (the node recovers from the snapshot alone)" },
    Precondition { key: "recovered_from_snapshot", invariant: "durable_events_survive (4)", counts: "recoveries from a snapshot, compared with a replay of the whole log" },
    Precondition { key: "answer_excerpt_cut", invariant: "answer_excerpt_as_documented (47)", counts: "runs that ended their turn on an answer longer than the 32 KiB a run keeps (cut, and judged against the provider's answer)" },
    Precondition { key: "interrupted_commit", invariant: "commit_atomic (18)", counts: "recoveries that found a commit never reported" },
    Precondition { key: "stream_resumed", invariant: "stream_resume_exact (11)", counts: "event pages read after a cursor that returned events" },
    Precondition { key: "sse_resumed", invariant: "stream_resume_exact (11)", counts: "batches read from the live stream (Server-Sent Events) after an event id; the first of each connection is a Last-Event-ID resume" },
    Precondition { key: "timer_fired", invariant: "timer_not_duplicated, timer_not_lost", counts: "timer fires" },
    Precondition { key: "idle_fired", invariant: "idle_fires_once_per_silence, idle_spacing_as_documented (25)", counts: "idle-chamber fires" },
    Precondition { key: "wakeup_coalesced", invariant: "duplicates_coalesce (6)", counts: "wakeups coalesced onto a queued run" },
    Precondition { key: "key_replayed", invariant: "idempotency_honoured (6)", counts: "acknowledged wakeups that replayed a key" },
    Precondition { key: "daily_cap_reached", invariant: "daily_cap_respected (2)", counts: "wakeups refused `daily_cap`" },
    Precondition { key: "source_or_terminated_refused", invariant: "refusal_reason_holds (23)", counts: "wakeups refused `disabled_source` or `terminated`" },
    Precondition { key: "queue_full_refused", invariant: "refusal_reason_holds (23)", counts: "wakeups refused `queue_full`" },
    Precondition { key: "routine_refused_while_paused", invariant: "no_routine_wakeup_while_paused (3)", counts: "wakeups refused `paused`" },
    Precondition { key: "breaker_probe", invariant: "breaker_single_probe (8), breaker_cooldown_as_documented (20)", counts: "breakers half-opened for a probe" },
    Precondition { key: "breaker_reopened", invariant: "breaker_cooldown_as_documented (20)", counts: "breakers opened again after a failed probe" },
    Precondition { key: "agent_offline", invariant: "silent_agent_goes_offline (10), offline_threshold_as_documented (26)", counts: "agents marked offline" },
    Precondition { key: "phi_offline_by_phi", invariant: "phi_offline_as_documented (26)", counts: "phi-accrual agents marked offline before their fixed threshold (phi decided)" },
    Precondition { key: "pulse_answered", invariant: "pulsing_agent_not_offline (10)", counts: "pulses acknowledged" },
    Precondition { key: "ghost_run", invariant: "ghost_leaves_history_untouched (7)", counts: "runs ended `ghost`" },
    Precondition { key: "tool_cap_stop", invariant: "tool_calls_within_cap (12)", counts: "runs ended `tool_cap`" },
    Precondition { key: "rest_from_run", invariant: "rest_durable_with_run_end, rest_as_asked (21)", counts: "runs that ended resting" },
    Precondition { key: "wakeup_prompt_read", invariant: "run_told_as_queued (38)", counts: "model calls whose wakeup message the provider read as the built-in prompt" },
    Precondition { key: "tool_arguments_refused", invariant: "tool_arguments_refused_as_documented", counts: "results of tool calls whose arguments broke the schema with at most 8 errors, read back by the model (the whole listing)" },
    Precondition { key: "tool_arguments_past_listing", invariant: "tool_arguments_refused_as_documented", counts: "results of tool calls whose arguments broke the schema with more than 8 errors, read back by the model (\"… and M more\")" },
    Precondition { key: "llm_error_quoted", invariant: "llm_error_quotes_the_answer", counts: "runs ended `llm_error` by a 429 or 5xx answer the node read (its body quoted in the detail)" },
    Precondition { key: "llm_error_quote_cut", invariant: "llm_error_quotes_the_answer", counts: "of those, answers longer than the 200 characters a detail quotes (cut and marked)" },
    Precondition { key: "child_started", invariant: "run_told_as_queued (38)", counts: "children started for process agents' runs (their arguments and stdin judged)" },
    Precondition { key: "child_exit_reported", invariant: "run_ends_as_child_did (39)", counts: "runs ended with a child's exit in their report" },
    Precondition { key: "cli_invoked", invariant: "cli_run_as_printed (40)", counts: "coding-CLI invocations (each judged against what its simulated CLI printed)" },
    Precondition { key: "cli_session_resumed", invariant: "cli_run_as_printed (40)", counts: "coding-CLI invocations that resumed their task's session" },
    Precondition { key: "cli_session_refused", invariant: "cli_run_as_printed (40)", counts: "coding-CLI invocations that refused the session they were asked to resume (the run retried fresh)" },
    Precondition { key: "execution_served", invariant: "executions (15-17)", counts: "model calls, tool calls and process groups served" },
    Precondition { key: "process_group_gone", invariant: "process_group_ends_with_run (14)", counts: "process groups ended" },
    Precondition { key: "backward_jump", invariant: "daily_cap_respected (2), start_counts_on_its_local_day (22)", counts: "backward wall-clock jumps" },
    Precondition { key: "agent_errored", invariant: "error_state_as_documented (24)", counts: "agents that entered the error state" },
    Precondition { key: "refused_in_error", invariant: "error_state_as_documented (24)", counts: "wakeups refused `agent_error`" },
    Precondition { key: "cap_hit_while_coalescing", invariant: "daily_cap_respected (2), refusal_reason_holds (23)", counts: "wakeups joining a queued run after a `daily_cap` refusal since it was queued" },
    Precondition { key: "pause_across_midnight", invariant: "no_routine_wakeup_while_paused (3), start_counts_on_its_local_day (22)", counts: "timed pauses ending on a later local day than they began" },
    Precondition { key: "rest_across_crash", invariant: "no_routine_wakeup_while_paused (3), pause_ends", counts: "recoveries while a timed pause was in force" },
    Precondition { key: "probe_during_catch_up", invariant: "breaker_single_probe (8), timer_not_duplicated", counts: "breaker probes admitted by a timer fire standing for missed slots" },
    Precondition { key: "start_on_a_kept_day", invariant: "daily_cap_respected (2), start_counts_on_its_local_day (22)", counts: "run starts counted on a later local day than their clock's (the clock went back across midnight)" },
    Precondition { key: "operator_answered", invariant: "operator_answered (19)", counts: "operator requests answered" },
    Precondition { key: "heartbeat_transition", invariant: "transition_enqueued_once (28), transition_chain (29)", counts: "heartbeat transitions committed (the baselines not counted)" },
    Precondition { key: "predicate_wakeup_refused", invariant: "transition_enqueued_once (28)", counts: "predicate wakeups refused (the transition recorded all the same)" },
    Precondition { key: "check_past_budget", invariant: "one_evaluation_at_a_time (30)", counts: "heartbeat checks the state server answered past their budget or never" },
    Precondition { key: "check_hung", invariant: "one_evaluation_at_a_time (30)", counts: "heartbeat checks the state server never answered" },
    Precondition { key: "emission_paused", invariant: "pending_within_cap (31)", counts: "heartbeats whose emission paused at the pending cap" },
    Precondition { key: "transition_lost_to_crash", invariant: "transition_redetected (32)", counts: "crashes and power cuts while a check had shown a heartbeat a state not yet recorded" },
    Precondition { key: "state_near_limit_accepted", invariant: "transition_chain (29)", counts: "heartbeat states recorded within a few bytes of the 4 KiB limit, at it included" },
    Precondition { key: "state_over_limit_refused", invariant: "transition_chain (29)", counts: "checks answered within budget with a state over the 4 KiB limit, the heartbeat checked again before any crash or fault (so its verdict was judged)" },
    Precondition { key: "redetected_after_restart", invariant: "transition_redetected (32)", counts: "transitions recorded after a restart by a heartbeat whose change a crash had cut short" },
    Precondition { key: "edge_taken", invariant: "limits_as_documented (33)", counts: "requests with every field within its documented limits, taken" },
    Precondition { key: "edge_refused", invariant: "limits_as_documented (33)", counts: "requests with a field past its documented limits, refused" },
    Precondition { key: "spec_shown_after_recovery", invariant: "spec_shown_as_sent (34)", counts: "specs read back after a recovery" },
    Precondition { key: "token_rotated", invariant: "token_rotation_as_answered (37)", counts: "agent token rotations answered 2xx" },
    Precondition { key: "replaced_token_tried", invariant: "token_rotation_as_answered (37)", counts: "reads with an agent token a later rotation replaced" },
    Precondition { key: "history_shown", invariant: "history_shown_as_documented (46)", counts: "histories read that held messages" },
    Precondition { key: "history_at_bound", invariant: "history_shown_as_documented (46)", counts: "histories read at their 40-message bound (older messages gone)" },
    Precondition { key: "drain_with_runs_going", invariant: "drain_starts_no_run (43), drained_means_ended (44)", counts: "graceful stops whose drain began with runs going" },
    Precondition { key: "drain_grace_ran_out", invariant: "drain_starts_no_run (43)", counts: "graceful stops whose grace ran out with runs still going (stopped, re-queued at the next start)" },
    Precondition { key: "stopped_with_groups", invariant: "no_child_outlives_a_stop (45)", counts: "graceful stops that began with process groups of runs alive" },
    Precondition { key: "heartbeat_defined_at_edge", invariant: "limits_as_documented (33), spec_shown_as_sent (34)", counts: "command-check heartbeat definitions taken (their fields at their edges or within)" },
    Precondition { key: "timeline_entries_read", invariant: "timeline_as_logged (48)", counts: "timeline pages read that held entries (judged against the log)" },
    Precondition { key: "pulse_metadata_taken", invariant: "limits_as_documented (33)", counts: "pulses carrying metadata (at its byte, key or depth limit, or small), taken" },
    Precondition { key: "pause_taken", invariant: "pause_length_as_asked (35)", counts: "pauses and rests asked at the edges of their minutes, taken" },
];

/// What one seed met: preconditions and faults struck, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    pub preconditions: BTreeMap<&'static str, u64>,
    pub faults: BTreeMap<&'static str, u64>,
}

impl Coverage {
    fn count(&mut self, key: &'static str) {
        self.count_times(key, 1);
    }

    /// Counts `key` `times` times at once (none: nothing recorded, as for no `count`). Why:
    /// a fleet-day's trace answers 640,000 pulses, and counting each one on its own was 2 % of
    /// the seed (callgrind).
    fn count_times(&mut self, key: &'static str, times: u64) {
        debug_assert!(PRECONDITIONS.iter().any(|p| p.key == key), "{key}");
        if times > 0 {
            *self.preconditions.entry(key).or_default() += times;
        }
    }
}

/// Counts what the trace of one seed met.
pub fn of_trace(records: &[TraceRecord]) -> Coverage {
    let mut coverage = Coverage::default();
    let mut recovered = false;
    let mut broken_errors = BTreeMap::new();
    // Per run: the characters of the 429 or 5xx body its latest model call was answered with.
    let mut error_chars: BTreeMap<u64, Option<usize>> = BTreeMap::new();
    for record in records {
        match &record.event {
            TraceEvent::EdgeAnswered {
                kind, status, body, ..
            } => {
                let taken = (200..300).contains(status) || *status == 409;
                coverage.count(if taken { "edge_taken" } else { "edge_refused" });
                let pause = matches!(kind, EdgeKind::Pause | EdgeKind::PauseHeartbeats);
                if taken && pause {
                    coverage.count("pause_taken");
                }
                if taken && *kind == EdgeKind::Pulse && body["metadata"].is_object() {
                    coverage.count("pulse_metadata_taken");
                }
                if taken && *kind == EdgeKind::Heartbeat {
                    coverage.count("heartbeat_defined_at_edge");
                }
            }
            TraceEvent::TokenRotated { .. } => coverage.count("token_rotated"),
            TraceEvent::TimelineShown { entries, .. } if !entries.is_empty() => {
                coverage.count("timeline_entries_read")
            }
            TraceEvent::TokenUsed { status: 401, .. } => coverage.count("replaced_token_tried"),
            TraceEvent::SpecShown { .. } if recovered => {
                coverage.count("spec_shown_after_recovery")
            }
            TraceEvent::Committed { event } => {
                if let EventKind::RunFinished {
                    run,
                    detail,
                    stop_reason: Some(StopReason::LlmError),
                    ..
                } = &event.kind
                {
                    let read = detail.starts_with(ANSWERED_PREFIX);
                    if let (Some(Some(chars)), true) = (error_chars.remove(&run.0), read) {
                        coverage.count("llm_error_quoted");
                        if chars > QUOTED_CHARS_MAX {
                            coverage.count("llm_error_quote_cut");
                        }
                    }
                }
                committed(&mut coverage, &event.kind)
            }
            TraceEvent::Recovered {
                head_seq,
                digests,
                unreported,
            } => {
                if *head_seq > 0 {
                    recovered = true;
                    coverage.count("recovered_after_crash");
                }
                if digests.first().map_or(*head_seq > 0, |&(seq, _)| seq > 1) {
                    coverage.count("recovered_compacted");
                }
                if !unreported.is_empty() {
                    coverage.count("interrupted_commit");
                }
            }
            TraceEvent::SnapshotOnDisk { .. } => coverage.count("recovered_from_snapshot"),
            TraceEvent::StreamPage { after, events } if *after > 0 && !events.is_empty() => {
                coverage.count(if record.node == vigil_world::sse_reader::SSE_READER_NODE {
                    "sse_resumed"
                } else {
                    "stream_resumed"
                })
            }
            TraceEvent::AckedWakeup { replayed: true, .. } => coverage.count("key_replayed"),
            TraceEvent::AckedPulse { .. } => coverage.count("pulse_answered"),
            TraceEvent::AckedPulses { agents, .. } => {
                coverage.count_times("pulse_answered", agents.len() as u64)
            }
            TraceEvent::ModelCallServed {
                run,
                wake,
                broken,
                results_seen,
                error_body,
                ..
            } => {
                coverage.count("execution_served");
                if let Some(run) = run {
                    error_chars.insert(*run, error_body.as_ref().map(|b| b.chars().count()));
                }
                if wake.is_some() {
                    coverage.count("wakeup_prompt_read");
                }
                refusals_read(&mut coverage, &mut broken_errors, broken, results_seen);
            }
            TraceEvent::ToolCallServed { .. } => coverage.count("execution_served"),
            TraceEvent::ProcessSpawned { cli, .. } => {
                coverage.count("execution_served");
                coverage.count("child_started");
                if let Some(cli) = cli {
                    coverage.count("cli_invoked");
                    match (&cli.resume, cli.outcome) {
                        (_, CliOutcome::Refused) => coverage.count("cli_session_refused"),
                        (Some(_), _) => coverage.count("cli_session_resumed"),
                        (None, _) => {}
                    }
                }
            }
            TraceEvent::AlertDelivered { .. } => coverage.count("alert_delivered"),
            TraceEvent::ProcessGroupGone { .. } => coverage.count("process_group_gone"),
            TraceEvent::OperatorAnswered { .. } => coverage.count("operator_answered"),
            TraceEvent::HistoryShown { messages, .. } if !messages.is_empty() => {
                coverage.count("history_shown");
                if messages.len() == HISTORY_MESSAGES_MAX {
                    coverage.count("history_at_bound");
                }
            }
            TraceEvent::DrainStarted { going, groups, .. } => {
                if *going > 0 {
                    coverage.count("drain_with_runs_going");
                }
                if *groups > 0 {
                    coverage.count("stopped_with_groups");
                }
            }
            TraceEvent::Drained { left } if *left > 0 => coverage.count("drain_grace_ran_out"),
            TraceEvent::CheckServed { answer, .. } => {
                if !answer.in_budget() {
                    coverage.count("check_past_budget");
                }
                if *answer == CheckAnswer::Hang {
                    coverage.count("check_hung");
                }
            }
            TraceEvent::Fault { fault } => match fault {
                FaultRecord::Struck(fault) => {
                    *coverage.faults.entry(fault.kind()).or_default() += 1;
                }
                FaultRecord::ClockJump { delta_ms, .. } if *delta_ms < 0 => {
                    coverage.count("backward_jump")
                }
                _ => {}
            },
            _ => {}
        }
    }
    coverage
}

/// Most schema errors a refusal lists (docs/agents.md, "Tools"): past it, the listing is cut.
const ARGUMENT_ERRORS_LISTED: u32 = 8;

/// Counts the refusals of broken tool calls a model call read back, by whether their errors
/// fit the listing; `broken_errors` keeps each broken call's errors until then (by call id).
fn refusals_read(
    coverage: &mut Coverage,
    broken_errors: &mut BTreeMap<String, u32>,
    broken: &[BrokenCall],
    results_seen: &[ToolResultSeen],
) {
    for result in results_seen {
        match broken_errors.remove(&result.call_id) {
            Some(errors) if errors > ARGUMENT_ERRORS_LISTED => {
                coverage.count("tool_arguments_past_listing")
            }
            Some(_) => coverage.count("tool_arguments_refused"),
            None => {}
        }
    }
    for call in broken {
        broken_errors.insert(call.id.clone(), call.errors);
    }
}

fn committed(coverage: &mut Coverage, kind: &EventKind) {
    match kind {
        EventKind::TimerFired { .. } => coverage.count("timer_fired"),
        EventKind::IdleFired { .. } => coverage.count("idle_fired"),
        EventKind::WakeupCoalesced { .. } => coverage.count("wakeup_coalesced"),
        EventKind::WakeupRefused {
            refusal, source, ..
        } => {
            if *source == WakeupSource::Predicate {
                coverage.count("predicate_wakeup_refused");
            }
            match refusal {
                RefusalReason::DailyCap => coverage.count("daily_cap_reached"),
                RefusalReason::Paused => coverage.count("routine_refused_while_paused"),
                RefusalReason::DisabledSource | RefusalReason::Terminated => {
                    coverage.count("source_or_terminated_refused")
                }
                RefusalReason::AgentError => coverage.count("refused_in_error"),
                RefusalReason::QueueFull => coverage.count("queue_full_refused"),
                _ => {}
            }
        }
        EventKind::BreakerHalfOpened { .. } => coverage.count("breaker_probe"),
        EventKind::AgentErrored { .. } => coverage.count("agent_errored"),
        EventKind::AgentOffline { .. } => coverage.count("agent_offline"),
        EventKind::HeartbeatStateChanged { from, to, .. } => {
            if from.is_some() {
                coverage.count("heartbeat_transition");
            }
            if (STATE_BYTES_MAX - NEAR_LIMIT_BYTES..=STATE_BYTES_MAX).contains(&to.len()) {
                coverage.count("state_near_limit_accepted");
            }
        }
        EventKind::HeartbeatEmissionPaused { .. } => coverage.count("emission_paused"),
        EventKind::RunFinished {
            stop_reason,
            report,
            ..
        } => {
            match stop_reason {
                Some(StopReason::Ghost) => coverage.count("ghost_run"),
                Some(StopReason::ToolCap) => coverage.count("tool_cap_stop"),
                _ => {}
            }
            if report.as_ref().is_some_and(|r| r.pause_minutes.is_some()) {
                coverage.count("rest_from_run");
            }
            if report.as_ref().is_some_and(|r| r.exit.is_some()) {
                coverage.count("child_exit_reported");
            }
            let cut = report.as_ref().is_some_and(|r| r.excerpt_truncated);
            if cut && *stop_reason == Some(StopReason::EndTurn) {
                coverage.count("answer_excerpt_cut");
            }
        }
        _ => {}
    }
}

/// A breaker that opens again right after a half-open state had its probe fail: counted from
/// the order of the agent's breaker events.
pub fn reopened_breakers(records: &[TraceRecord]) -> u64 {
    let mut half_open = BTreeMap::new();
    let mut reopened = 0;
    for record in records {
        let TraceEvent::Committed { event } = &record.event else {
            continue;
        };
        match &event.kind {
            EventKind::BreakerHalfOpened { agent } => {
                half_open.insert(agent.0, true);
            }
            EventKind::BreakerOpened { agent, .. } => {
                if half_open.insert(agent.0, false) == Some(true) {
                    reopened += 1;
                }
            }
            EventKind::BreakerClosed { agent } | EventKind::BreakerReset { agent } => {
                half_open.insert(agent.0, false);
            }
            _ => {}
        }
    }
    reopened
}

/// Offline marks of `phi_accrual` agents that came before their fixed threshold
/// (`pulse_interval_ms × offline_after_misses`), so phi decided them: counted from the agents'
/// policies and the marks' `silent_ms`.
pub fn offline_by_phi(records: &[TraceRecord]) -> u64 {
    let mut phi_fixed_ms: BTreeMap<u64, Option<u64>> = BTreeMap::new();
    let mut by_phi = 0;
    for record in records {
        let TraceEvent::Committed { event } = &record.event else {
            continue;
        };
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. }
            | EventKind::AgentUpdated { agent, spec, .. } => {
                let liveness = &spec.liveness;
                let phi = liveness.detector == vigil::engine::liveness::Detector::PhiAccrual;
                let fixed_ms = liveness.pulse_interval_ms * u64::from(liveness.offline_after_misses);
                phi_fixed_ms.insert(agent.0, phi.then_some(fixed_ms));
            }
            EventKind::AgentOffline { agent, silent_ms, .. } => {
                let fixed_ms = phi_fixed_ms.get(&agent.0).copied().flatten();
                by_phi += u64::from(fixed_ms.is_some_and(|fixed_ms| *silent_ms <= fixed_ms));
            }
            _ => {}
        }
    }
    by_phi
}

/// Counts what the trace met, breaker re-openings included.
pub fn of_seed(records: &[TraceRecord]) -> Coverage {
    let mut coverage = of_trace(records);
    let reopened = reopened_breakers(records);
    if reopened > 0 {
        coverage.preconditions.insert("breaker_reopened", reopened);
    }
    let by_phi = offline_by_phi(records);
    if by_phi > 0 {
        coverage.preconditions.insert("phi_offline_by_phi", by_phi);
    }
    coverage.preconditions.extend(combinations::count(records));
    let (lost, redetected) = lost_transitions(records);
    let over_limit = over_limit_judged(records);
    for (key, n) in [
        ("transition_lost_to_crash", lost),
        ("redetected_after_restart", redetected),
        ("state_over_limit_refused", over_limit),
    ] {
        if n > 0 {
            coverage.preconditions.insert(key, n);
        }
    }
    coverage
}

/// Checks answered within budget with a state over the limit whose heartbeat was checked again
/// before any crash or fault: the evaluations whose `error` verdict the oracle judged.
pub fn over_limit_judged(records: &[TraceRecord]) -> u64 {
    let mut over: BTreeSet<&str> = BTreeSet::new();
    let mut judged = 0;
    for record in records {
        match &record.event {
            TraceEvent::CheckServed {
                heartbeat,
                value,
                pad_bytes,
                answer,
                ..
            } => {
                if over.remove(heartbeat.as_str()) {
                    judged += 1;
                }
                if answer.in_budget() && served_token(*value, *pad_bytes).len() > STATE_BYTES_MAX {
                    over.insert(heartbeat);
                }
            }
            TraceEvent::Crashed { .. } => over.clear(),
            TraceEvent::Fault { fault } if !matches!(fault, FaultRecord::ClockJump { .. }) => {
                over.clear()
            }
            _ => {}
        }
    }
    judged
}

/// (crashes that cut a heartbeat's change short, transitions recorded afterwards by such a
/// heartbeat): a check of the state server began showing a heartbeat a state other than its
/// recorded one, within its budget, and the node died before recording it (or before the
/// emission paused).
pub fn lost_transitions(records: &[TraceRecord]) -> (u64, u64) {
    let mut recorded: BTreeMap<&str, &str> = BTreeMap::new();
    let mut changing: BTreeSet<&str> = BTreeSet::new();
    let mut lost: BTreeSet<&str> = BTreeSet::new();
    let (mut losses, mut redetected) = (0, 0);
    for record in records {
        match &record.event {
            TraceEvent::CheckServed {
                heartbeat,
                value,
                pad_bytes,
                answer,
                ..
            } if answer.in_budget() => {
                let Some(state) = recorded.get(heartbeat.as_str()) else {
                    continue;
                };
                let served = served_token(*value, *pad_bytes);
                if served.len() > STATE_BYTES_MAX {
                    // Never recorded: the prior state stays, and so does any change pending.
                    continue;
                }
                if *state == served {
                    changing.remove(heartbeat.as_str());
                } else {
                    changing.insert(heartbeat);
                }
            }
            TraceEvent::Committed { event } => match &event.kind {
                EventKind::HeartbeatStateChanged {
                    heartbeat, from, to, ..
                } => {
                    recorded.insert(&heartbeat.0, to);
                    changing.remove(heartbeat.0.as_str());
                    if from.is_some() && lost.remove(heartbeat.0.as_str()) {
                        redetected += 1;
                    }
                }
                EventKind::HeartbeatEmissionPaused { heartbeat, .. } => {
                    changing.remove(heartbeat.0.as_str());
                }
                _ => {}
            },
            TraceEvent::Crashed { .. } => {
                losses += changing.len() as u64;
                lost.append(&mut changing);
            }
            _ => {}
        }
    }
    (losses, redetected)
}

/// The preconditions scenario `name` is built to reach: a sweep of it that meets one of them in
/// no seed fails. (docs/simulation.md has the measured table.)
pub fn required(name: &str) -> &'static [&'static str] {
    match name {
        "smoke" => &[
            "recovered_after_crash",
            "interrupted_commit",
            "stream_resumed",
            "timer_fired",
            "backward_jump",
        ],
        "coalesce_burst" => &[
            "wakeup_coalesced",
            "recovered_after_crash",
            "source_or_terminated_refused",
            "queue_full_refused",
        ],
        "idempotency" => &["key_replayed", "recovered_after_crash", "recovered_from_snapshot"],
        "midnight" => &[
            "daily_cap_reached",
            "wakeup_coalesced",
            "cap_hit_while_coalescing",
            "pause_across_midnight",
            "start_on_a_kept_day",
            "backward_jump",
            "recovered_after_crash",
            "recovered_compacted",
        ],
        "crash_mid_run" => &["recovered_after_crash", "timer_fired"],
        "pause" => &[
            "routine_refused_while_paused",
            "backward_jump",
            "sse_resumed",
            "rest_across_crash",
        ],
        "breaker" => &[
            "recovered_from_snapshot",
            "breaker_probe",
            "breaker_reopened",
            "agent_errored",
            "refused_in_error",
            "probe_during_catch_up",
        ],
        "liveness" => &["agent_offline", "pulse_answered", "phi_offline_by_phi"],
        "wakeup_storm" => &["daily_cap_reached", "timer_fired", "idle_fired"],
        "heart_fleet" | "heart_fleet_2h" => &[
            "ghost_run",
            "rest_from_run",
            "execution_served",
            "wakeup_prompt_read",
            "pulse_answered",
        ],
        "tool_loop" => &[
            "tool_cap_stop",
            "tool_arguments_refused",
            "tool_arguments_past_listing",
            "llm_error_quoted",
            "llm_error_quote_cut",
            "rest_from_run",
            "execution_served",
            "wakeup_prompt_read",
            "breaker_probe",
            "rest_across_crash",
            "probe_during_catch_up",
            "drain_with_runs_going",
            "drain_grace_ran_out",
            "history_shown",
            "history_at_bound",
            "answer_excerpt_cut",
        ],
        "cli_agents" => &[
            "execution_served",
            "process_group_gone",
            "child_started",
            "child_exit_reported",
            "cli_invoked",
            "cli_session_resumed",
            "cli_session_refused",
            "drain_with_runs_going",
            "stopped_with_groups",
        ],
        "hostile" => &["operator_answered"],
        "edges" => &[
            "edge_taken",
            "edge_refused",
            "spec_shown_after_recovery",
            "pause_taken",
            "token_rotated",
            "replaced_token_tried",
            "recovered_after_crash",
            "recovered_from_snapshot",
            "pulse_metadata_taken",
            "heartbeat_defined_at_edge",
            "timeline_entries_read",
        ],
        "predicate_flap" => &[
            "heartbeat_transition",
            "predicate_wakeup_refused",
            "check_past_budget",
            "check_hung",
            "emission_paused",
            "transition_lost_to_crash",
            "redetected_after_restart",
            "state_near_limit_accepted",
            "state_over_limit_refused",
            "recovered_after_crash",
            "interrupted_commit",
            "backward_jump",
        ],
        _ => &[],
    }
}

/// A sweep's coverage: per key, the seeds that met it and the total count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepCoverage {
    pub preconditions: BTreeMap<&'static str, (u64, u64)>,
    pub faults: BTreeMap<&'static str, (u64, u64)>,
}

impl SweepCoverage {
    /// Adds one seed's coverage.
    pub fn add(&mut self, seed: &Coverage) {
        for (key, n) in &seed.preconditions {
            let entry = self.preconditions.entry(key).or_default();
            *entry = (entry.0 + 1, entry.1 + n);
        }
        for (kind, n) in &seed.faults {
            let entry = self.faults.entry(kind).or_default();
            *entry = (entry.0 + 1, entry.1 + n);
        }
    }

    /// The required preconditions of `scenario` that no seed met.
    pub fn gaps(&self, scenario: &str) -> Vec<&'static str> {
        required(scenario)
            .iter()
            .copied()
            .filter(|key| {
                self.preconditions
                    .get(key)
                    .is_none_or(|(seeds, _)| *seeds == 0)
            })
            .collect()
    }

    /// The table `vigil-sim sweep` prints: every precondition and fault, with the seeds that
    /// met it and how often; required ones marked `*`.
    pub fn table(&self, scenario: &str, seeds: u64) -> String {
        let required = required(scenario);
        let mut lines = vec![format!(
            "coverage over {seeds} seeds (* required by {scenario}):"
        )];
        for p in PRECONDITIONS {
            let (met, total) = self.preconditions.get(p.key).copied().unwrap_or_default();
            let mark = if required.contains(&p.key) { "*" } else { " " };
            lines.push(format!(
                "  {mark} {:<30} seeds {:>6}  total {:>8}  {}",
                p.key, met, total, p.invariant
            ));
        }
        for (kind, (met, total)) in &self.faults {
            lines.push(format!(
                "    fault {:<24} seeds {met:>6}  total {total:>8}",
                kind
            ));
        }
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil::engine::agent::AgentId;
    use vigil::engine::event::Event;

    fn committed(t_ms: u64, kind: EventKind) -> TraceRecord {
        TraceRecord {
            t_ms,
            node: "vigil-1",
            event: TraceEvent::Committed {
                event: Event {
                    seq: 1,
                    at_ms: t_ms,
                    tenant: "default".into(),
                    kind,
                },
            },
        }
    }

    fn breaker(t_ms: u64, kind: &str) -> TraceRecord {
        let agent = AgentId(1);
        let kind = match kind {
            "open" => EventKind::BreakerOpened {
                agent,
                trigger: vigil::engine::breaker::FailureCause::Llm,
                until_ms: t_ms + 1,
                cooldown_ms: 1,
            },
            "half" => EventKind::BreakerHalfOpened { agent },
            _ => EventKind::BreakerClosed { agent },
        };
        committed(t_ms, kind)
    }

    #[test]
    fn a_trace_counts_what_it_met_and_nothing_else() {
        let records = vec![
            breaker(1, "open"),
            breaker(2, "half"),
            breaker(3, "open"),
            breaker(4, "half"),
            breaker(5, "close"),
            breaker(6, "open"),
        ];
        let coverage = of_seed(&records);
        assert_eq!(coverage.preconditions.get("breaker_probe"), Some(&2));
        assert_eq!(coverage.preconditions.get("breaker_reopened"), Some(&1));
        assert_eq!(coverage.preconditions.get("agent_offline"), None);
        assert!(coverage.faults.is_empty());
    }

    #[test]
    fn a_phi_agent_s_offline_counts_as_phi_s_only_before_its_fixed_threshold() {
        let mut spec = vigil::engine::agent::AgentSpec::with_interval("a", None);
        spec.liveness.detector = vigil::engine::liveness::Detector::PhiAccrual;
        let created = EventKind::AgentCreated {
            agent: AgentId(1),
            name: "a".into(),
            spec: Box::new(spec),
            token_hash: vigil::engine::tenant::TokenHash::of("t"),
            first_fire_at_ms: None,
        };
        let offline = |silent_ms| {
            let agent = AgentId(1);
            let report = Default::default();
            committed(2, EventKind::AgentOffline { agent, silent_ms, report })
        };
        // The defaults' fixed threshold is 30 s: a mark past it is the ceiling's, not phi's.
        let records = vec![committed(1, created), offline(26_000), offline(30_001)];
        assert_eq!(offline_by_phi(&records), 1);
    }

    #[test]
    fn a_sweep_that_never_met_a_required_precondition_has_a_gap() {
        let mut sweep = SweepCoverage::default();
        sweep.add(&of_seed(&[breaker(1, "open"), breaker(2, "half")]));
        // Neither seed recovers from a snapshot: that gap stays, first in the required order.
        let unmet = [
            "recovered_from_snapshot",
            "agent_errored",
            "refused_in_error",
            "probe_during_catch_up",
        ];
        let mut expected = vec![unmet[0], "breaker_reopened"];
        expected.extend(&unmet[1..]);
        assert_eq!(sweep.gaps("breaker"), expected);
        sweep.add(&of_seed(&[
            breaker(1, "open"),
            breaker(2, "half"),
            breaker(3, "open"),
        ]));
        assert_eq!(sweep.gaps("breaker"), unmet);
        assert_eq!(sweep.preconditions["breaker_probe"], (2, 2));
        let table = sweep.table("breaker", 2);
        assert!(table.contains("* breaker_reopened"), "{table}");
        // Every scenario's required keys are keys this module counts.
        for name in crate::run::SCENARIOS.iter().map(|s| s.name) {
            for key in required(name) {
                assert!(PRECONDITIONS.iter().any(|p| p.key == *key), "{name}: {key}");
            }
        }
    }
}
