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

#[derive(Debug, Default)]
pub struct AlertsOracle {
    /// The run has an alert receiver: the check is on.
    judged: bool,
    /// Each agent's time zone (for the once-a-day kinds).
    time_zones: BTreeMap<u64, String>,
    /// (kind, agent, local day) already calling for an alert.
    days: BTreeSet<(&'static str, u64, i64)>,
    /// seq -> the kind of alert it calls for.
    expected: BTreeMap<u64, &'static str>,
    /// seq -> deliveries accepted.
    delivered: BTreeMap<u64, u32>,
}

impl AlertsOracle {
    pub fn sink_up(&mut self) {
        self.judged = true;
    }

    pub fn committed(&mut self, event: &Event) {
        if let EventKind::AgentCreated { agent, spec, .. } = &event.kind {
            self.time_zones.insert(agent.0, spec.time_zone.clone());
        }
        if let Some(kind) = self.calls_for(event) {
            self.expected.insert(event.seq, kind);
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
        match self.expected.get(&seq) {
            Some(expected) if *expected == kind => {
                *self.delivered.entry(seq).or_default() += 1;
                Ok(())
            }
            other => violation(
                "every_alert_delivered",
                format!("the receiver accepted alert {id} ({kind}) about seq {seq}, but the committed log calls for {other:?} there"),
            ),
        }
    }

    /// At the end: every alert the log called for was delivered.
    pub fn finish(&self) -> Result<(), Violation> {
        if !self.judged {
            return Ok(());
        }
        let missing: Vec<String> = self
            .expected
            .iter()
            .filter(|(seq, _)| !self.delivered.contains_key(seq))
            .map(|(seq, kind)| format!("{kind}@{seq}"))
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
