//! `every_alert_delivered` (docs/operations.md "Alerts", ADR 0018): in a run with an alert
//! receiver, every committed event that calls for an alert has been delivered at least once by
//! the end of the run (after the quiet phase), whatever crashes and refused attempts came
//! between; and the receiver accepted no alert the log does not call for, nor one of another
//! kind. Duplicates are allowed (at least once).
//!
//! The rule is restated here from the documentation, not taken from the runtime: a run that
//! ended `failed` or `timed_out`, a breaker opening, an agent marked offline, and the first
//! wakeup of an agent's local day refused `daily_cap` or `budget`. Runs of this check keep their
//! simulated time below the default catch-up bound (an hour) and have no clock jumps, so no
//! alert may be skipped.

use std::collections::{BTreeMap, BTreeSet};

use vigil::engine::event::{Event, EventKind};
use vigil::engine::run::RunStatus;
use vigil::engine::wakeup::RefusalReason;

use super::documented::agents_local_day;
use super::{violation, Violation};

/// How long an alert may take once the receiver accepts every attempt (the quiet phase), from
/// docs/operations.md: an attempt waits at most 60 s (the longest retry wait) and lasts at most
/// 10 s (its time limit). An event committed closer than this to the run's end need not have
/// been delivered yet: the failing agents of `alerts` fail runs in the quiet phase too, and one
/// committed 3 ms before the end was once reported (seed 6552).
const DELIVERY_BOUND_MS: u64 = 60_000 + 10_000;

#[derive(Debug, Default)]
pub struct AlertsOracle {
    /// The run has an alert receiver: the check is on.
    judged: bool,
    /// Each agent's time zone (for the once-a-day kinds).
    time_zones: BTreeMap<u64, String>,
    /// (kind, agent, local day) already calling for an alert.
    days: BTreeSet<(&'static str, u64, i64)>,
    /// seq -> the kind of alert it calls for, and when (simulated ms) it was committed.
    expected: BTreeMap<u64, (&'static str, u64)>,
    /// seq -> deliveries accepted.
    delivered: BTreeMap<u64, u32>,
}

impl AlertsOracle {
    pub fn sink_up(&mut self) {
        self.judged = true;
    }

    pub fn committed(&mut self, t_ms: u64, event: &Event) {
        if let EventKind::AgentCreated { agent, spec, .. } = &event.kind {
            self.time_zones.insert(agent.0, spec.time_zone.clone());
        }
        if let Some(kind) = self.calls_for(event) {
            self.expected.insert(event.seq, (kind, t_ms));
        }
    }

    fn calls_for(&mut self, event: &Event) -> Option<&'static str> {
        let (kind, agent) = match &event.kind {
            EventKind::RunFinished {
                status: RunStatus::Failed | RunStatus::TimedOut,
                ..
            } => return Some("run_failed"),
            EventKind::BreakerOpened { .. } => return Some("breaker_opened"),
            EventKind::AgentOffline { .. } => return Some("agent_offline"),
            EventKind::WakeupRefused {
                agent,
                refusal: RefusalReason::DailyCap,
                ..
            } => ("daily_cap_reached", agent.0),
            EventKind::WakeupRefused {
                agent,
                refusal: RefusalReason::Budget,
                ..
            } => ("budget_reached", agent.0),
            _ => return None,
        };
        let zone = self.time_zones.get(&agent).map_or("UTC", String::as_str);
        let day = agents_local_day(event.at_ms, zone);
        self.days.insert((kind, agent, day)).then_some(kind)
    }

    /// The receiver accepted alert `id` about `seq`, of `kind`.
    pub fn delivered(&mut self, id: &str, seq: u64, kind: &str) -> Result<(), Violation> {
        match self.expected.get(&seq).map(|(expected, _)| *expected) {
            Some(expected) if expected == kind => {
                *self.delivered.entry(seq).or_default() += 1;
                Ok(())
            }
            other => violation(
                "every_alert_delivered",
                format!("the receiver accepted alert {id} ({kind}) about seq {seq}, but the committed log calls for {other:?} there"),
            ),
        }
    }

    /// At the end (`end_ms`): every alert the log called for was delivered, but for those
    /// committed within [`DELIVERY_BOUND_MS`] of the end, which the run left no time for.
    pub fn finish(&self, end_ms: u64) -> Result<(), Violation> {
        if !self.judged {
            return Ok(());
        }
        let missing: Vec<String> = self
            .expected
            .iter()
            .filter(|(seq, (_, t_ms))| {
                !self.delivered.contains_key(seq) && t_ms + DELIVERY_BOUND_MS <= end_ms
            })
            .map(|(seq, (kind, _))| format!("{kind}@{seq}"))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        violation(
            "every_alert_delivered",
            format!(
                "{} of {} alerts never delivered by the end of the run: {}",
                missing.len(),
                self.expected.len(),
                missing.join(", ")
            ),
        )
    }

    /// (alerts the log called for, deliveries accepted), for the run's figures.
    pub fn counts(&self) -> (usize, u32) {
        (self.expected.len(), self.delivered.values().sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_events::run_finished;

    /// Run 1 failed, committed at simulated `t_ms` (seq 1).
    fn failed_run(oracle: &mut AlertsOracle, t_ms: u64) {
        let mut event = run_finished(t_ms, 1, 1);
        event.seq = 1;
        if let EventKind::RunFinished { status, .. } = &mut event.kind {
            *status = RunStatus::Failed;
        }
        oracle.committed(t_ms, &event);
    }

    #[test]
    fn an_alert_never_delivered_is_reported_unless_the_run_ended_within_its_bound() {
        let end_ms = 1_800_000;
        let mut oracle = AlertsOracle::default();
        oracle.sink_up();
        failed_run(&mut oracle, end_ms - DELIVERY_BOUND_MS);
        let error = oracle.finish(end_ms).expect_err("undelivered");
        assert_eq!(error.invariant, "every_alert_delivered");
        assert_eq!(oracle.delivered("ops:1", 1, "run_failed"), Ok(()));
        assert_eq!(oracle.finish(end_ms), Ok(()));

        let mut late = AlertsOracle::default();
        late.sink_up();
        failed_run(&mut late, end_ms - DELIVERY_BOUND_MS + 1);
        assert_eq!(late.finish(end_ms), Ok(()));
        // Delivered as another kind: reported at once.
        assert!(late.delivered("ops:1", 1, "breaker_opened").is_err());
    }
}
