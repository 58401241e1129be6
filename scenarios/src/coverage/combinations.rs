//! Rare combinations of mechanisms, counted from the order of one seed's trace: the moments when
//! two mechanisms meet and a check has the most to judge. Each is a precondition of the
//! coverage table (`PRECONDITIONS`); none is a check itself.
//!
//! - `cap_hit_while_coalescing`: a wakeup joins a queued run of an agent that was refused
//!   `daily_cap` since that run was queued (joining costs no start, so the cap must not refuse
//!   it: invariants 2 and 23).
//! - `pause_across_midnight`: a timed pause whose end falls on a later local day, in its agent's
//!   zone, than its start (invariant 3 across the day's roll-over, 2 and 22 on both days).
//! - `rest_across_crash`: the node recovers while a timed pause of one of its agents is in force
//!   (invariant 3 and `pause_ends` across recovery).
//! - `probe_during_catch_up`: a breaker's probe is a timer fire that stands for missed slots
//!   (invariant 8's single probe with the timer's catch-up, `timer_not_duplicated`).
//! - `start_on_a_kept_day`: a run starts on a local day earlier than the latest its agent counted
//!   (the clock went back across its midnight), so the start counts on the kept later day
//!   (invariants 2 and 22).

use std::collections::BTreeMap;

use vigil::engine::daily_cap::LocalDay;
use vigil::engine::event::{Event, EventKind};
use vigil::engine::wakeup::RefusalReason;
use vigil_world::trace::{TraceEvent, TraceRecord};

/// What the combinations need to remember of each agent.
#[derive(Default)]
struct AgentState {
    time_zone: String,
    /// Its queued runs, and whether a `daily_cap` refusal came since each was queued.
    queued: BTreeMap<u64, bool>,
    /// The end of its timed pause in force, if any.
    paused_until_ms: Option<u64>,
    /// The latest event of this agent was a timer fire standing for missed slots.
    catching_up: bool,
}

/// Counts the combinations one seed's trace met, by precondition key.
pub fn count(records: &[TraceRecord]) -> BTreeMap<&'static str, u64> {
    let mut agents: BTreeMap<u64, AgentState> = BTreeMap::new();
    let mut counts = BTreeMap::new();
    let mut last_wall_ms = 0;
    for record in records {
        match &record.event {
            TraceEvent::Committed { event } => {
                last_wall_ms = event.at_ms;
                if let Some(key) = committed(&mut agents, event) {
                    *counts.entry(key).or_default() += 1;
                }
            }
            TraceEvent::Recovered { head_seq, .. } if *head_seq > 0 => {
                let resting = agents
                    .values()
                    .any(|a| a.paused_until_ms.is_some_and(|until| until > last_wall_ms));
                if resting {
                    *counts.entry("rest_across_crash").or_default() += 1;
                }
            }
            _ => {}
        }
    }
    counts
}

fn committed(agents: &mut BTreeMap<u64, AgentState>, event: &Event) -> Option<&'static str> {
    if let EventKind::AgentCreated { agent, spec, .. } = &event.kind {
        let state = AgentState {
            time_zone: spec.time_zone.clone(),
            ..AgentState::default()
        };
        agents.insert(agent.0, state);
        return None;
    }
    let agent = event_agent(&event.kind)?;
    let state = agents.get_mut(&agent)?;
    let catching_up = std::mem::take(&mut state.catching_up);
    match &event.kind {
        EventKind::TimerFired { missed_slots, .. } => {
            state.catching_up = *missed_slots > 0;
            None
        }
        EventKind::BreakerHalfOpened { .. } => catching_up.then_some("probe_during_catch_up"),
        EventKind::WakeupQueued { run, .. } => {
            state.queued.insert(run.0, false);
            None
        }
        EventKind::RunRequeued { run, coalesced, .. } if !coalesced => {
            state.queued.insert(run.0, false);
            None
        }
        EventKind::WakeupRefused { refusal, .. } => {
            if *refusal == RefusalReason::DailyCap {
                state.queued.values_mut().for_each(|capped| *capped = true);
            }
            None
        }
        EventKind::WakeupCoalesced { run, .. } => state
            .queued
            .get(&run.0)
            .is_some_and(|capped| *capped)
            .then_some("cap_hit_while_coalescing"),
        EventKind::RunStarted { run, day, .. } => {
            state.queued.remove(&run.0);
            (LocalDay::of(event.at_ms, &state.time_zone) < *day).then_some("start_on_a_kept_day")
        }
        EventKind::RunFinished { run, .. } => {
            // A queued run cancelled (pause, termination, error) leaves the queue.
            state.queued.remove(&run.0);
            None
        }
        EventKind::AgentPaused { until_ms, .. } => {
            state.paused_until_ms = *until_ms;
            let until_ms = (*until_ms)?;
            let start = LocalDay::of(event.at_ms, &state.time_zone);
            (LocalDay::of(until_ms, &state.time_zone) > start).then_some("pause_across_midnight")
        }
        EventKind::AgentResumed { .. } | EventKind::AgentTerminated { .. } => {
            state.paused_until_ms = None;
            None
        }
        _ => None,
    }
}

/// The agent an event is about, for the kinds the combinations read.
fn event_agent(kind: &EventKind) -> Option<u64> {
    let agent = match kind {
        EventKind::TimerFired { agent, .. }
        | EventKind::BreakerHalfOpened { agent }
        | EventKind::WakeupQueued { agent, .. }
        | EventKind::RunRequeued { agent, .. }
        | EventKind::WakeupRefused { agent, .. }
        | EventKind::WakeupCoalesced { agent, .. }
        | EventKind::RunStarted { agent, .. }
        | EventKind::RunFinished { agent, .. }
        | EventKind::AgentPaused { agent, .. }
        | EventKind::AgentResumed { agent }
        | EventKind::AgentTerminated { agent } => agent,
        _ => return None,
    };
    Some(agent.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::pause::PausedBy;
    use vigil::engine::run::RunId;
    use vigil::engine::tenant::TokenHash;
    use vigil::engine::wakeup::{WakeupId, WakeupSource};

    const AGENT: AgentId = AgentId(1);
    /// 2026-01-01T00:00:00Z: local midnight in UTC.
    const MIDNIGHT_MS: u64 = 1_767_225_600_000;
    const HOUR_MS: u64 = 3_600_000;

    fn committed(at_ms: u64, kind: EventKind) -> TraceRecord {
        let event = Event {
            seq: 1,
            at_ms,
            tenant: "default".into(),
            kind,
        };
        TraceRecord {
            t_ms: 0,
            node: "vigil-1",
            event: TraceEvent::Committed { event },
        }
    }

    fn created(time_zone: &str) -> TraceRecord {
        let mut spec = AgentSpec::with_interval("a", None);
        spec.time_zone = time_zone.into();
        committed(
            0,
            EventKind::AgentCreated {
                agent: AGENT,
                name: "a".into(),
                spec: Box::new(spec),
                token_hash: TokenHash::default(),
                first_fire_at_ms: None,
            },
        )
    }

    fn queued(at_ms: u64, run: u64) -> TraceRecord {
        committed(
            at_ms,
            EventKind::WakeupQueued {
                wakeup: WakeupId(run),
                agent: AGENT,
                source: WakeupSource::OnDemand,
                reason: String::new(),
                payload: serde_json::Value::Null,
                task_key: None,
                idempotency_key: None,
                requested_by: None,
                trigger_detail: None,
                run: RunId(run),
            },
        )
    }

    fn coalesced(at_ms: u64, run: u64) -> TraceRecord {
        committed(
            at_ms,
            EventKind::WakeupCoalesced {
                wakeup: WakeupId(100 + at_ms),
                agent: AGENT,
                source: WakeupSource::OnDemand,
                reason: String::new(),
                payload: serde_json::Value::Null,
                idempotency_key: None,
                requested_by: None,
                trigger_detail: None,
                run: RunId(run),
                coalesced_count: 1,
            },
        )
    }

    fn capped(at_ms: u64) -> TraceRecord {
        committed(
            at_ms,
            EventKind::WakeupRefused {
                wakeup: WakeupId(200 + at_ms),
                agent: AGENT,
                source: WakeupSource::OnDemand,
                reason: String::new(),
                task_key: Some("other".into()),
                idempotency_key: None,
                requested_by: None,
                trigger_detail: None,
                refusal: RefusalReason::DailyCap,
            },
        )
    }

    fn paused(at_ms: u64, until_ms: u64) -> TraceRecord {
        let by = PausedBy::Agent;
        let until_ms = Some(until_ms);
        committed(
            at_ms,
            EventKind::AgentPaused {
                agent: AGENT,
                until_ms,
                by,
            },
        )
    }

    fn started(at_ms: u64, run: u64, day: i32) -> TraceRecord {
        let day = LocalDay(day);
        let kind = EventKind::RunStarted {
            run: RunId(run),
            agent: AGENT,
            run_number: 0,
            day,
        };
        committed(at_ms, kind)
    }

    fn timer(at_ms: u64, missed_slots: u64) -> TraceRecord {
        let kind = EventKind::TimerFired {
            agent: AGENT,
            due_at_ms: at_ms,
            missed_slots,
            next_fire_at_ms: at_ms + HOUR_MS,
        };
        committed(at_ms, kind)
    }

    fn recovered() -> TraceRecord {
        let event = TraceEvent::Recovered {
            head_seq: 5,
            digests: Vec::new(),
            unreported: Vec::new(),
        };
        TraceRecord {
            t_ms: 0,
            node: "vigil-1",
            event,
        }
    }

    fn half_open(at_ms: u64) -> TraceRecord {
        committed(at_ms, EventKind::BreakerHalfOpened { agent: AGENT })
    }

    #[test]
    fn a_join_after_a_cap_refusal_counts_and_one_before_it_does_not() {
        let before = count(&[created("UTC"), queued(1, 1), coalesced(2, 1), capped(3)]);
        assert_eq!(before.get("cap_hit_while_coalescing"), None);
        let after = count(&[created("UTC"), queued(1, 1), capped(2), coalesced(3, 1)]);
        assert_eq!(after.get("cap_hit_while_coalescing"), Some(&1));
        // A run queued after the refusal starts afresh.
        let fresh = count(&[created("UTC"), capped(1), queued(2, 1), coalesced(3, 1)]);
        assert_eq!(fresh.get("cap_hit_while_coalescing"), None);
    }

    #[test]
    fn a_pause_counts_when_it_ends_on_a_later_local_day_in_its_agent_s_zone() {
        let start = MIDNIGHT_MS - 2 * HOUR_MS;
        let utc = count(&[created("UTC"), paused(start, start + HOUR_MS)]);
        assert_eq!(utc.get("pause_across_midnight"), None);
        let utc = count(&[created("UTC"), paused(start, start + 3 * HOUR_MS)]);
        assert_eq!(utc.get("pause_across_midnight"), Some(&1));
        // 22:00 UTC to 01:00 UTC is 17:00 to 20:00 in New York: one local day.
        let new_york = count(&[
            created("America/New_York"),
            paused(start, start + 3 * HOUR_MS),
        ]);
        assert_eq!(new_york.get("pause_across_midnight"), None);
    }

    #[test]
    fn a_recovery_counts_while_a_timed_pause_is_in_force() {
        let resting = count(&[created("UTC"), paused(10, 1_000), recovered()]);
        assert_eq!(resting.get("rest_across_crash"), Some(&1));
        let over = count(&[
            created("UTC"),
            paused(10, 1_000),
            queued(2_000, 1),
            recovered(),
        ]);
        assert_eq!(over.get("rest_across_crash"), None);
    }

    #[test]
    fn a_probe_counts_when_a_catch_up_fire_admits_it() {
        let catch_up = count(&[created("UTC"), timer(10, 3), half_open(10)]);
        assert_eq!(catch_up.get("probe_during_catch_up"), Some(&1));
        let on_time = count(&[created("UTC"), timer(10, 0), half_open(10)]);
        assert_eq!(on_time.get("probe_during_catch_up"), None);
    }

    #[test]
    fn a_start_counts_when_it_keeps_a_later_day_than_its_clock_s() {
        let today = i32::try_from(MIDNIGHT_MS / (24 * HOUR_MS)).unwrap();
        let kept = count(&[
            created("UTC"),
            queued(1, 1),
            started(MIDNIGHT_MS - 1, 1, today),
        ]);
        assert_eq!(kept.get("start_on_a_kept_day"), Some(&1));
        let own = count(&[created("UTC"), queued(1, 1), started(MIDNIGHT_MS, 1, today)]);
        assert_eq!(own.get("start_on_a_kept_day"), None);
    }
}
