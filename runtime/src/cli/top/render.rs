//! The fleet view as text: a pure function of a snapshot and the node's "now", so that every
//! cell is tested here and the live loop only decides when to draw.

use super::{ActiveRun, AgentRow, FleetSnapshot, Liveness, LivenessStatus};
use crate::cli::format::{escape_controls, relative, span_seconds, time, Table};
use crate::engine::agent::AgentStatus;
use crate::engine::daily_cap::LocalDay;
use crate::engine::breaker::{BreakerState, FailureCause};
use crate::engine::pause::PausedBy;

/// Names longer than this are cut (ending in `…`), so one long name cannot push the other
/// columns off the screen. Agent names may have 64 characters.
pub const NAME_CHARS_SHOWN_MAX: usize = 24;

/// Most characters of the PULSE cell (its age, the agent's status, its metadata as JSON).
pub const PULSE_CHARS_SHOWN_MAX: usize = 40;

const COLUMNS: [&str; 13] = [
    "ID", "NAME", "STATUS", "LIVENESS", "PULSE", "TIMER", "IDLE", "PAUSE", "BREAKER", "TODAY",
    "SPEND", "RUNS", "ACTIVE",
];

/// The header line, then the table: one row per agent, in the snapshot's order.
pub fn render_fleet(snapshot: &FleetSnapshot, now_ms: u64) -> Vec<String> {
    let mut table = Table::new(&COLUMNS);
    for agent in &snapshot.agents {
        table.row(vec![
            agent.id.to_string(),
            name_cell(&agent.name),
            status_cell(agent),
            liveness_cell(agent.liveness.as_ref(), now_ms),
            pulse_cell(agent.pulse.as_ref(), now_ms),
            due_cell(agent.next_fire_at_ms, now_ms),
            due_cell(agent.next_idle_at_ms, now_ms),
            pause_cell(agent, now_ms),
            breaker_cell(agent, now_ms),
            cap_cell(agent, now_ms),
            spend_cell(agent, now_ms),
            agent.runs_started.to_string(),
            active_cell(agent.active_run.as_ref(), now_ms),
        ]);
    }
    let mut lines = vec![header_line(snapshot, now_ms)];
    lines.extend(table.render().lines().map(str::to_string));
    lines
}

/// `server …  tenant …  agents N  online N  offline N  last seq N  <time>`; the liveness
/// counts are `-` when the server reports no agent's liveness.
fn header_line(snapshot: &FleetSnapshot, now_ms: u64) -> String {
    let count = |status| {
        snapshot
            .agents
            .iter()
            .filter(|a| a.liveness.is_some_and(|l| l.status == status))
            .count()
    };
    let reported = snapshot.agents.iter().any(|a| a.liveness.is_some());
    let shown = |n: usize| if reported { n.to_string() } else { "-".into() };
    format!(
        "server {}  tenant {}  agents {}  online {}  offline {}  last seq {}  {}",
        escape_controls(&snapshot.server),
        escape_controls(snapshot.tenant.as_deref().unwrap_or("-")),
        snapshot.agents.len(),
        shown(count(LivenessStatus::Online)),
        shown(count(LivenessStatus::Offline)),
        snapshot.last_seq,
        time(now_ms),
    )
}

/// The name as the server sent it, control characters escaped (the server validates names,
/// but the terminal must not depend on that), cut to `NAME_CHARS_SHOWN_MAX`.
fn name_cell(name: &str) -> String {
    let name = escape_controls(name);
    if name.chars().count() <= NAME_CHARS_SHOWN_MAX {
        return name.to_string();
    }
    let kept: String = name.chars().take(NAME_CHARS_SHOWN_MAX - 1).collect();
    format!("{kept}…")
}

/// The agent's status; an agent in the error state shows `error (<reason>)` unless terminated.
fn status_cell(agent: &AgentRow) -> String {
    match (agent.status, agent.error) {
        (AgentStatus::Terminated, _) | (_, None) => status_name(agent.status).to_string(),
        (_, Some(error)) => format!("error ({})", error.reason.as_str()),
    }
}

fn status_name(status: AgentStatus) -> &'static str {
    match status {
        AgentStatus::Active => "active",
        AgentStatus::Paused => "paused",
        AgentStatus::Terminated => "terminated",
    }
}

/// `online 2m ago`: the status and since when; `-` from a server without liveness.
fn liveness_cell(liveness: Option<&Liveness>, now_ms: u64) -> String {
    let Some(liveness) = liveness else {
        return "-".to_string();
    };
    let status = match liveness.status {
        LivenessStatus::Unknown => "unknown",
        LivenessStatus::Online => "online",
        LivenessStatus::Offline => "offline",
    };
    match liveness.since_ms {
        Some(since_ms) => format!("{status} {}", relative(since_ms, now_ms)),
        None => status.to_string(),
    }
}

/// `4s ago busy {"queue":3}`: the latest pulse's age, what the agent said of itself and its
/// metadata, escaped and cut to `PULSE_CHARS_SHOWN_MAX`; `-` before a pulse.
fn pulse_cell(pulse: Option<&super::PulseRow>, now_ms: u64) -> String {
    let Some(pulse) = pulse else {
        return "-".to_string();
    };
    let mut cell = relative(pulse.heartbeat_at_ms, now_ms);
    if let Some(status) = &pulse.status {
        cell.push(' ');
        cell.push_str(status);
    }
    if let Some(metadata) = &pulse.metadata {
        cell.push(' ');
        cell.push_str(&serde_json::Value::Object(metadata.clone()).to_string());
    }
    let cell = escape_controls(&cell).to_string();
    if cell.chars().count() <= PULSE_CHARS_SHOWN_MAX {
        return cell;
    }
    let kept: String = cell.chars().take(PULSE_CHARS_SHOWN_MAX - 1).collect();
    format!("{kept}…")
}

/// A coming instant: `in 4m10s`, `due` once passed, `-` when there is none.
fn due_cell(at_ms: Option<u64>, now_ms: u64) -> String {
    match at_ms {
        None => "-".to_string(),
        Some(at_ms) if at_ms <= now_ms => "due".to_string(),
        Some(at_ms) => relative(at_ms, now_ms),
    }
}

fn by_name(by: Option<PausedBy>) -> &'static str {
    match by {
        Some(PausedBy::Agent) => "agent",
        Some(PausedBy::Operator) | None => "operator",
    }
}

/// `until resumed (operator)`, `4m10s left (agent)`, or `-` with no pause in force.
fn pause_cell(agent: &AgentRow, now_ms: u64) -> String {
    match (agent.status, agent.paused_until_ms) {
        (AgentStatus::Terminated, _) => "-".to_string(),
        (AgentStatus::Paused, _) => format!("until resumed ({})", by_name(agent.paused_by)),
        (AgentStatus::Active, Some(until_ms)) if until_ms > now_ms => format!(
            "{} left ({})",
            span_seconds(until_ms - now_ms),
            by_name(agent.paused_by)
        ),
        (AgentStatus::Active, _) => "-".to_string(),
    }
}

fn trigger_suffix(trigger: Option<FailureCause>) -> &'static str {
    match trigger {
        Some(FailureCause::Llm) => " (llm)",
        Some(FailureCause::Tool) => " (tool)",
        None => "",
    }
}

/// `closed`, `closed, tool 2/3` (failures in a row against `failures_to_open`),
/// `open, 14m50s left (tool)`, `half_open, probe run 7 (llm)`.
fn breaker_cell(agent: &AgentRow, now_ms: u64) -> String {
    let trigger = trigger_suffix(agent.breaker_trigger);
    match agent.breaker {
        BreakerState::Closed {
            llm_failures,
            tool_failures,
        } => {
            let of = agent.spec.breaker.failures_to_open;
            let counts: Vec<String> = [("llm", llm_failures), ("tool", tool_failures)]
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(kind, n)| format!("{kind} {n}/{of}"))
                .collect();
            if counts.is_empty() {
                "closed".to_string()
            } else {
                format!("closed, {}", counts.join(" "))
            }
        }
        BreakerState::Open { until_ms, .. } if until_ms > now_ms => {
            format!("open, {} left{trigger}", span_seconds(until_ms - now_ms))
        }
        BreakerState::Open { .. } => format!("open, cooldown over{trigger}"),
        BreakerState::HalfOpen {
            probe: Some(run), ..
        } => {
            format!("half_open, probe run {run}{trigger}")
        }
        BreakerState::HalfOpen { probe: None, .. } => format!("half_open{trigger}"),
    }
}

/// Runs started today against the daily cap: `12/48`, or `12/-` without a cap. "Today" is the
/// day the cap counts against (`DayCount::day_for`), so yesterday's count reads 0.
fn cap_cell(agent: &AgentRow, now_ms: u64) -> String {
    let time_zone = &agent.spec.time_zone;
    let today = if jiff::tz::TimeZone::get(time_zone).is_ok() {
        let day = agent.day_count.day_for(now_ms, time_zone);
        agent.day_count.started_on(day)
    } else {
        // A zone this build does not know: show the counter as the server keeps it.
        agent.day_count.started
    };
    match agent.spec.limits.daily_cap {
        Some(cap) => format!("{today}/{cap}"),
        None => format!("{today}/-"),
    }
}

/// Today's model spend against the daily budget: `$0.12/$0.50`, `$0.12/-` without a budget,
/// and `-` before the agent's first model call.
fn spend_cell(agent: &AgentRow, now_ms: u64) -> String {
    let Some(counted) = agent.day_spend.day else {
        return "-".to_string();
    };
    let today = jiff::tz::TimeZone::get(&agent.spec.time_zone)
        .ok()
        .map_or(counted, |_| LocalDay::of(now_ms, &agent.spec.time_zone));
    let spent = agent.day_spend.on(agent.day_spend.day_for(today)).cost_micro_usd;
    let dollars = |micro: u64| format!("${:.2}", micro as f64 / 1e6);
    match agent.spec.limits.daily_budget_usd {
        Some(budget) => format!("{}/{}", dollars(spent), dollars(budget.0)),
        None => format!("{}/-", dollars(spent)),
    }
}

/// `run 7 for 12s`, or `-` when the agent runs nothing.
fn active_cell(run: Option<&ActiveRun>, now_ms: u64) -> String {
    match run {
        None => "-".to_string(),
        Some(ActiveRun {
            id,
            started_at_ms: Some(started_at_ms),
        }) => format!(
            "run {id} for {}",
            span_seconds(now_ms.saturating_sub(*started_at_ms))
        ),
        Some(ActiveRun { id, .. }) => format!("run {id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BreakerPolicyView, LimitsView, SpecView};
    use super::*;
    use crate::engine::daily_cap::{DayCount, LocalDay};

    const NOW_MS: u64 = 1_795_356_921_000;

    fn agent(id: u64, name: &str) -> AgentRow {
        AgentRow {
            id,
            tenant: "default".into(),
            name: name.into(),
            status: AgentStatus::Active,
            error: None,
            liveness: None,
            pulse: None,
            next_fire_at_ms: None,
            next_idle_at_ms: None,
            paused_until_ms: None,
            paused_by: None,
            breaker: BreakerState::default(),
            day_count: DayCount::default(),
            day_spend: Default::default(),
            runs_started: 0,
            spec: SpecView {
                time_zone: "UTC".into(),
                limits: LimitsView::default(),
                breaker: BreakerPolicyView {
                    failures_to_open: 3,
                },
            },
            breaker_trigger: None,
            active_run: None,
        }
    }

    fn snapshot(agents: Vec<AgentRow>) -> FleetSnapshot {
        FleetSnapshot {
            server: "http://127.0.0.1:7070".into(),
            tenant: Some("default".into()),
            now_ms: NOW_MS,
            last_seq: 57,
            agents,
        }
    }

    #[test]
    fn columns_line_up_under_the_header() {
        let mut scout = agent(1, "scout");
        scout.next_fire_at_ms = Some(NOW_MS + 250_000);
        scout.runs_started = 12;
        let mut long = agent(12, "triage");
        long.status = AgentStatus::Paused;
        long.paused_by = Some(PausedBy::Operator);
        let lines = render_fleet(&snapshot(vec![scout, long]), NOW_MS);
        assert_eq!(
            lines,
            [
                "server http://127.0.0.1:7070  tenant default  agents 2  online -  offline -  last seq 57  2026-11-22T14:15:21Z",
                "ID  NAME    STATUS  LIVENESS  PULSE  TIMER     IDLE  PAUSE                     BREAKER  TODAY  SPEND  RUNS  ACTIVE",
                "1   scout   active  -         -      in 4m10s  -     -                         closed   0/-    -      12    -",
                "12  triage  paused  -         -      -         -     until resumed (operator)  closed   0/-    -      0     -",
            ]
        );
    }

    #[test]
    fn liveness_counts_and_cells() {
        let mut online = agent(1, "a");
        online.liveness = Some(Liveness {
            status: LivenessStatus::Online,
            since_ms: Some(NOW_MS - 120_000),
        });
        let mut offline = agent(2, "b");
        offline.liveness = Some(Liveness {
            status: LivenessStatus::Offline,
            since_ms: None,
        });
        let lines = render_fleet(&snapshot(vec![online, offline, agent(3, "c")]), NOW_MS);
        assert!(
            lines[0].contains("agents 3  online 1  offline 1  "),
            "{}",
            lines[0]
        );
        assert!(lines[2].contains(" online 2m ago "), "{}", lines[2]);
        assert!(lines[3].contains(" offline "), "{}", lines[3]);
        assert_eq!(lines[4].split_whitespace().nth(3), Some("-"));
    }

    #[test]
    fn long_names_are_cut_at_the_limit() {
        let exact = "x".repeat(NAME_CHARS_SHOWN_MAX);
        assert_eq!(name_cell(&exact), exact);
        let cut = name_cell(&"y".repeat(64));
        assert_eq!(cut.chars().count(), NAME_CHARS_SHOWN_MAX);
        assert!(cut.ends_with("y…"), "{cut}");
        let lines = render_fleet(&snapshot(vec![agent(1, &"z".repeat(64))]), NOW_MS);
        assert_eq!(
            lines[2]
                .split_whitespace()
                .nth(1)
                .map(|n| n.chars().count()),
            Some(NAME_CHARS_SHOWN_MAX)
        );
    }

    #[test]
    fn timers_and_pauses() {
        assert_eq!(due_cell(None, NOW_MS), "-");
        assert_eq!(due_cell(Some(NOW_MS - 5), NOW_MS), "due");
        assert_eq!(due_cell(Some(NOW_MS + 4_000), NOW_MS), "in 4s");
        let mut a = agent(1, "a");
        a.paused_until_ms = Some(NOW_MS + 250_000);
        a.paused_by = Some(PausedBy::Agent);
        assert_eq!(pause_cell(&a, NOW_MS), "4m10s left (agent)");
        // A timed pause that ended is stale, not in force.
        assert_eq!(pause_cell(&a, NOW_MS + 250_000), "-");
        a.status = AgentStatus::Terminated;
        assert_eq!(pause_cell(&a, NOW_MS), "-");
    }

    #[test]
    fn breaker_states_with_their_trigger() {
        let mut a = agent(1, "a");
        assert_eq!(breaker_cell(&a, NOW_MS), "closed");
        a.breaker = BreakerState::Closed {
            llm_failures: 0,
            tool_failures: 2,
        };
        assert_eq!(breaker_cell(&a, NOW_MS), "closed, tool 2/3");
        a.breaker = BreakerState::Open {
            until_ms: NOW_MS + 890_000,
            cooldown_ms: 900_000,
        };
        a.breaker_trigger = Some(FailureCause::Tool);
        assert_eq!(breaker_cell(&a, NOW_MS), "open, 14m50s left (tool)");
        assert_eq!(
            breaker_cell(&a, NOW_MS + 890_000),
            "open, cooldown over (tool)"
        );
        a.breaker = BreakerState::HalfOpen {
            cooldown_ms: 900_000,
            probe: Some(crate::engine::run::RunId(7)),
        };
        a.breaker_trigger = Some(FailureCause::Llm);
        assert_eq!(breaker_cell(&a, NOW_MS), "half_open, probe run 7 (llm)");
        a.breaker_trigger = None;
        a.breaker = BreakerState::HalfOpen {
            cooldown_ms: 900_000,
            probe: None,
        };
        assert_eq!(breaker_cell(&a, NOW_MS), "half_open");
    }

    #[test]
    fn daily_cap_use_counts_only_the_current_day() {
        let mut a = agent(1, "a");
        let today = LocalDay::of(NOW_MS, "UTC");
        a.day_count = DayCount {
            day: Some(today),
            started: 12,
        };
        assert_eq!(cap_cell(&a, NOW_MS), "12/-");
        a.spec.limits.daily_cap = Some(48);
        assert_eq!(cap_cell(&a, NOW_MS), "12/48");
        // Yesterday's count does not use today's cap.
        assert_eq!(cap_cell(&a, NOW_MS + 86_400_000), "0/48");
        a.spec.time_zone = "Nowhere/Atlantis".into();
        assert_eq!(cap_cell(&a, NOW_MS + 86_400_000), "12/48");
    }

    #[test]
    fn active_runs_show_how_long_they_ran() {
        assert_eq!(active_cell(None, NOW_MS), "-");
        let run = ActiveRun {
            id: 7,
            started_at_ms: Some(NOW_MS - 12_400),
        };
        assert_eq!(active_cell(Some(&run), NOW_MS), "run 7 for 12s");
    }

    #[test]
    fn spend_shows_todays_cost_against_the_budget() {
        let mut a = agent(1, "a");
        assert_eq!(spend_cell(&a, 0), "-", "no model call yet");
        a.day_spend = crate::engine::usage::DaySpend {
            day: Some(LocalDay(0)),
            usage: crate::engine::usage::Usage {
                cost_micro_usd: 125_000,
                ..Default::default()
            },
        };
        assert_eq!(spend_cell(&a, 1_000), "$0.12/-");
        a.spec.limits.daily_budget_usd = Some(crate::engine::usage::MicroUsd(500_000));
        assert_eq!(spend_cell(&a, 1_000), "$0.12/$0.50");
        assert_eq!(spend_cell(&a, 86_400_000), "$0.00/$0.50", "a new day starts at zero");
    }

    #[test]
    fn the_pulse_cell_shows_age_status_and_metadata_escaped_and_cut() {
        assert_eq!(pulse_cell(None, NOW_MS), "-");
        let pulse = super::super::PulseRow {
            heartbeat_at_ms: NOW_MS - 4_000,
            status: Some("busy".into()),
            metadata: serde_json::json!({ "queue": 3 }).as_object().cloned(),
        };
        assert_eq!(pulse_cell(Some(&pulse), NOW_MS), r#"4s ago busy {"queue":3}"#);
        let hostile = super::super::PulseRow {
            heartbeat_at_ms: NOW_MS,
            status: Some("\u{1b}]0;owned\u{7}".into()),
            metadata: serde_json::json!({ "note": "x".repeat(100) }).as_object().cloned(),
        };
        let cell = pulse_cell(Some(&hostile), NOW_MS);
        assert!(!cell.contains('\u{1b}') && !cell.contains('\u{7}'), "{cell:?}");
        assert_eq!(cell.chars().count(), PULSE_CHARS_SHOWN_MAX);
        assert!(cell.ends_with('…'));
    }
}
