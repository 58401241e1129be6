//! `vigil top`: the tenant's fleet at a glance. It reads the agent list (and the running runs)
//! once, then follows the event feed and re-reads only the agents the events name. A terminal
//! gets a full-screen view, redrawn when events arrive (at most every `REDRAW_INTERVAL_MS_MIN`)
//! and every `TICK_MS` so relative times move; anything else, or `--once`, gets one snapshot.

mod render;

pub use render::render_fleet;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::events::FeedItem;
use super::format::safe_json_line;
use super::{CliError, Printed, Session};
use crate::engine::agent::AgentStatus;
use crate::engine::agent_error::AgentError;
use crate::engine::breaker::{BreakerState, FailureCause};
use crate::engine::daily_cap::DayCount;
use crate::engine::usage::{DaySpend, MicroUsd};
use crate::engine::pause::PausedBy;

/// Shortest time between two redraws (and the re-reads before them) of the live view.
const REDRAW_INTERVAL_MS_MIN: u64 = 250;
/// The live view is redrawn at least this often, so that relative times stay right.
const TICK_MS: u64 = 1_000;
/// The whole list is re-read this often anyway, so that a field that changes without an event
/// never stays stale in the view.
const RELIST_INTERVAL_MS: u64 = 15_000;
/// More agents than this named by events since the last redraw: one list read beats many.
const AGENTS_REFETCH_MAX: usize = 8;
/// How far back in the log the trigger of a breaker already open at start is looked for.
const TRIGGER_LOOKBACK_EVENTS: u64 = 10_000;
/// Running runs asked for in one request (the API's largest page); one agent has at most one.
const RUNNING_RUNS_PAGE: u64 = 1_000;

/// Full-screen mode: alternate screen, cursor hidden, no line wrap (long rows are cut).
const SCREEN_ENTER: &str = "\x1b[?1049h\x1b[?25l\x1b[?7l\x1b[2J";
/// Back to the terminal as it was: wrap on, cursor shown, main screen.
const SCREEN_LEAVE: &str = "\x1b[?7h\x1b[?25h\x1b[?1049l";
/// Home; each line then clears its rest (`\x1b[K`) and the frame clears below it (`\x1b[J`).
const FRAME_START: &str = "\x1b[H";

/// Whether the server says the agent's adapter is alive (a field of newer servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LivenessStatus {
    Unknown,
    Online,
    Offline,
}

/// An agent's liveness and since when it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Liveness {
    pub status: LivenessStatus,
    #[serde(default)]
    pub since_ms: Option<u64>,
}

/// The parts of an agent's spec the view shows (same field paths as the server's).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SpecView {
    #[serde(default)]
    pub time_zone: String,
    #[serde(default)]
    pub limits: LimitsView,
    #[serde(default)]
    pub breaker: BreakerPolicyView,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LimitsView {
    #[serde(default)]
    pub daily_cap: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_budget_usd: Option<MicroUsd>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BreakerPolicyView {
    #[serde(default)]
    pub failures_to_open: u32,
}

/// An agent's latest pulse as the server reports it (since the server started).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PulseRow {
    pub heartbeat_at_ms: u64,
    /// What the agent says it is doing (`busy`, `shutting_down`, ...), as the server sent it.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The run an agent is executing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveRun {
    pub id: u64,
    pub started_at_ms: Option<u64>,
}

/// One agent as the view holds it: the server's agent object, trimmed to what is shown, plus
/// what the view learns elsewhere (the breaker's trigger, the running run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRow {
    pub id: u64,
    pub tenant: String,
    pub name: String,
    pub status: AgentStatus,
    /// Set while the agent is in the error state (`None` from an older server).
    #[serde(default)]
    pub error: Option<AgentError>,
    /// `None` (shown `-`) from a server that does not report liveness.
    #[serde(default)]
    pub liveness: Option<Liveness>,
    /// `None` (shown `-`) before the agent's first pulse since the server started.
    #[serde(default)]
    pub pulse: Option<PulseRow>,
    pub next_fire_at_ms: Option<u64>,
    /// `None` (shown `-`) without an idle wakeup due, or from a server without the field.
    #[serde(default)]
    pub next_idle_at_ms: Option<u64>,
    pub paused_until_ms: Option<u64>,
    pub paused_by: Option<PausedBy>,
    pub breaker: BreakerState,
    pub day_count: DayCount,
    /// Model usage on the agent's latest counted local day (`None` from an older server).
    #[serde(default)]
    pub day_spend: DaySpend,
    pub runs_started: u64,
    pub spec: SpecView,
    /// Not the agent object's: the trigger of the latest `breaker_opened` seen for it.
    #[serde(default)]
    pub breaker_trigger: Option<FailureCause>,
    /// Not the agent object's: its running run, from `GET /v1/runs?status=running`.
    #[serde(default)]
    pub active_run: Option<ActiveRun>,
}

/// The fleet at one instant of the node's clock: what `top` draws and `--json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetSnapshot {
    pub server: String,
    /// The token's tenant (`None` until an agent or an event names it).
    pub tenant: Option<String>,
    /// The node's wall clock when the list was read.
    pub now_ms: u64,
    /// The latest event seq seen: the log's head at start, then the feed's.
    pub last_seq: u64,
    /// In id order.
    pub agents: Vec<AgentRow>,
}

/// What the event feed said since the view last read the agents.
#[derive(Debug, Default)]
struct FeedNews {
    last_seq: u64,
    tenant: Option<String>,
    triggers: BTreeMap<u64, FailureCause>,
    /// Agents the events named (at most every agent of the tenant).
    touched: BTreeSet<u64>,
    /// An agent appeared, or a re-read failed: read the whole list.
    relist: bool,
    /// The latest word about the stream (a drop, a retry), shown under the table until the
    /// next event comes.
    stream_note: Option<String>,
    /// Why the latest re-read failed, shown until one succeeds.
    read_note: Option<String>,
}

impl FeedNews {
    fn absorb(&mut self, event: &Value) {
        if let Some(seq) = event["seq"].as_u64() {
            self.last_seq = self.last_seq.max(seq);
        }
        if self.tenant.is_none() {
            self.tenant = event["tenant"].as_str().map(str::to_string);
        }
        let Some(agent) = event["agent"].as_u64() else {
            return;
        };
        match event["type"].as_str() {
            Some("agent_created") => self.relist = true,
            Some("breaker_opened") => {
                if let Ok(trigger) = serde_json::from_value(event["trigger"].clone()) {
                    self.triggers.insert(agent, trigger);
                }
            }
            _ => {}
        }
        self.touched.insert(agent);
    }

    /// Folds what lasts (seq, tenant, triggers) into the snapshot.
    fn apply(&self, snapshot: &mut FleetSnapshot) {
        snapshot.last_seq = snapshot.last_seq.max(self.last_seq);
        if snapshot.tenant.is_none() {
            snapshot.tenant.clone_from(&self.tenant);
        }
        for agent in &mut snapshot.agents {
            if let Some(trigger) = self.triggers.get(&agent.id) {
                agent.breaker_trigger = Some(*trigger);
            }
        }
    }
}

/// Restores the terminal when the live view ends, however it ends (error or panic included).
struct Screen;

impl Drop for Screen {
    fn drop(&mut self) {
        let mut stdout = std::io::stdout();
        let _ = stdout.write_all(SCREEN_LEAVE.as_bytes());
        let _ = stdout.flush();
    }
}

impl Session {
    /// `top --once` (and `top` when stdout is not a terminal): one snapshot, a table or JSON.
    pub async fn top_once(&self) -> Result<Printed, CliError> {
        let snapshot = self.fleet_snapshot().await?;
        if self.json() {
            let json = serde_json::to_value(&snapshot).expect("a snapshot serializes");
            return Ok(Printed::out(format!("{}\n", safe_json_line(&json))));
        }
        let lines = render_fleet(&snapshot, snapshot.now_ms);
        Ok(Printed::out(
            lines
                .iter()
                .map(|l| format!("{}\n", super::format::escape_controls(l)))
                .collect(),
        ))
    }

    /// `top` on a terminal: the live view, until Ctrl-C (then `Ok`) or a lasting error.
    pub async fn top_live(&self, emit: &mut dyn FnMut(Printed)) -> Result<(), CliError> {
        // Read first: a wrong server or token is reported on the plain terminal.
        let mut snapshot = self.fleet_snapshot().await?;
        let mut read_at = Instant::now();
        let news = RefCell::new(FeedNews {
            last_seq: snapshot.last_seq,
            ..FeedNews::default()
        });
        let arrived = Notify::new();
        let mut on_item = |item: FeedItem| {
            let mut news = news.borrow_mut();
            match item {
                FeedItem::Event(event) => {
                    news.absorb(&event);
                    news.stream_note = None;
                }
                FeedItem::Unparsed(_) => {}
                FeedItem::Note(text) => news.stream_note = Some(text),
            }
            arrived.notify_one();
        };
        let feed = self.event_feed(snapshot.last_seq, &mut on_item);
        tokio::pin!(feed);
        let stop = tokio::signal::ctrl_c();
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        emit(Printed::out(SCREEN_ENTER.to_string()));
        let _screen = Screen;
        let mut stale = false;
        let mut draw_due = true;
        let mut next_draw_at = Instant::now();
        loop {
            if draw_due && Instant::now() >= next_draw_at {
                if stale || read_at.elapsed() >= Duration::from_millis(RELIST_INTERVAL_MS) {
                    let refresh = self.refresh(&mut snapshot, &news, &mut read_at);
                    tokio::select! {
                        result = refresh => result?,
                        _ = &mut stop => return Ok(()),
                    }
                }
                news.borrow().apply(&mut snapshot);
                let elapsed_ms = u64::try_from(read_at.elapsed().as_millis()).unwrap_or(u64::MAX);
                let now_ms = snapshot.now_ms.saturating_add(elapsed_ms);
                let notes: Vec<String> = {
                    let news = news.borrow();
                    news.stream_note
                        .iter()
                        .chain(&news.read_note)
                        .cloned()
                        .collect()
                };
                emit(Printed::out(frame(
                    &render_fleet(&snapshot, now_ms),
                    &notes,
                )));
                draw_due = false;
                stale = false;
                next_draw_at = Instant::now() + Duration::from_millis(REDRAW_INTERVAL_MS_MIN);
            }
            tokio::select! {
                result = &mut feed => return result,
                _ = arrived.notified() => {
                    draw_due = true;
                    stale = true;
                }
                _ = tick.tick() => draw_due = true,
                _ = tokio::time::sleep_until(next_draw_at), if draw_due => {}
                _ = &mut stop => return Ok(()),
            }
        }
    }

    /// Re-reads what the news names: the agents it touched, or the whole list. A failed read
    /// shows as the note and is retried at the next redraw; only a refused token ends the view.
    async fn refresh(
        &self,
        snapshot: &mut FleetSnapshot,
        news: &RefCell<FeedNews>,
        read_at: &mut Instant,
    ) -> Result<(), CliError> {
        let (touched, relist) = {
            let mut news = news.borrow_mut();
            (
                std::mem::take(&mut news.touched),
                std::mem::take(&mut news.relist),
            )
        };
        let relist = relist
            || touched.len() > AGENTS_REFETCH_MAX
            || read_at.elapsed() >= Duration::from_millis(RELIST_INTERVAL_MS);
        let result = if relist {
            self.fleet_read().await.map(|(now_ms, agents)| {
                snapshot.now_ms = now_ms;
                snapshot.agents = agents;
                *read_at = Instant::now();
            })
        } else {
            self.agents_reread(snapshot, &touched).await
        };
        let mut news = news.borrow_mut();
        match result {
            Ok(()) => {
                news.read_note = None;
                Ok(())
            }
            Err(error @ CliError::Unauthenticated { .. }) => Err(error),
            Err(error) => {
                news.read_note = Some(format!("{error}; retrying"));
                news.relist = true;
                Ok(())
            }
        }
    }

    /// The fleet now: agents, running runs, log head, and the triggers of open breakers.
    async fn fleet_snapshot(&self) -> Result<FleetSnapshot, CliError> {
        let (now_ms, agents) = self.fleet_read().await?;
        let health = self.get("/v1/health").await?;
        let last_seq = health["head_seq"].as_u64().unwrap_or(0);
        let mut news = FeedNews {
            last_seq,
            ..FeedNews::default()
        };
        // The trigger is only in the `breaker_opened` event; look for it when it is needed.
        let tripped = agents
            .iter()
            .any(|a| !matches!(a.breaker, BreakerState::Closed { .. }));
        if tripped {
            let after = last_seq.saturating_sub(TRIGGER_LOOKBACK_EVENTS);
            self.event_pages(after, &mut |event| news.absorb(&event))
                .await?;
        }
        let mut snapshot = FleetSnapshot {
            server: self.url.clone(),
            tenant: agents.first().map(|a| a.tenant.clone()),
            now_ms,
            last_seq,
            agents,
        };
        news.apply(&mut snapshot);
        Ok(snapshot)
    }

    /// `GET /v1/agents` and the running runs: the node's `now_ms` and every agent, in id order.
    async fn fleet_read(&self) -> Result<(u64, Vec<AgentRow>), CliError> {
        let listing = self.all_agents().await?;
        let now_ms = listing["now_ms"].as_u64().unwrap_or(0);
        let mut agents = listing["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .map(agent_row)
            .collect::<Result<Vec<_>, _>>()?;
        let running = self.running_runs(None).await?;
        for agent in &mut agents {
            agent.active_run = running.get(&agent.id).copied();
        }
        agents.sort_by_key(|a| a.id);
        Ok((now_ms, agents))
    }

    /// Re-reads each of `ids` with `GET /v1/agents/{id}` and its running run, keeping what the
    /// view learnt from events (the breaker's trigger).
    async fn agents_reread(
        &self,
        snapshot: &mut FleetSnapshot,
        ids: &BTreeSet<u64>,
    ) -> Result<(), CliError> {
        for &id in ids {
            let mut agent = agent_row(&self.get(&format!("/v1/agents/{id}")).await?)?;
            agent.active_run = self.running_runs(Some(id)).await?.get(&id).copied();
            match snapshot.agents.binary_search_by_key(&id, |a| a.id) {
                Ok(at) => {
                    agent.breaker_trigger = snapshot.agents[at].breaker_trigger;
                    snapshot.agents[at] = agent;
                }
                Err(at) => snapshot.agents.insert(at, agent),
            }
        }
        Ok(())
    }

    /// Running runs by agent (of one agent, or of the whole tenant).
    async fn running_runs(&self, agent: Option<u64>) -> Result<BTreeMap<u64, ActiveRun>, CliError> {
        let filter = agent.map_or(String::new(), |id| format!("&agent={id}"));
        let listing = self
            .get(&format!(
                "/v1/runs?status=running&limit={RUNNING_RUNS_PAGE}{filter}"
            ))
            .await?;
        let mut running = BTreeMap::new();
        for run in listing["runs"].as_array().into_iter().flatten() {
            if let (Some(agent), Ok(active)) = (
                run["agent"].as_u64(),
                serde_json::from_value::<ActiveRun>(run.clone()),
            ) {
                running.insert(agent, active);
            }
        }
        Ok(running)
    }
}

/// An agent object from the server as a row.
fn agent_row(agent: &Value) -> Result<AgentRow, CliError> {
    serde_json::from_value(agent.clone()).map_err(|e| CliError::UnexpectedAnswer {
        status: 200,
        body: format!("an agent `vigil top` cannot read ({e}): {agent}"),
    })
}

/// One screenful: home, each line clearing what the previous frame left, notes last.
fn frame(lines: &[String], notes: &[String]) -> String {
    let mut text = String::from(FRAME_START);
    let gap = (!notes.is_empty()).then(String::new);
    for line in lines.iter().chain(&gap).chain(notes) {
        // The frame's own control codes are added here; what it frames never carries any.
        text.push_str(&super::format::escape_controls(line));
        text.push_str("\x1b[K\n");
    }
    text.push_str("\x1b[J");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn server_agent() -> Value {
        json!({"id":5,"tenant":"default","name":"scout",
          "spec":{"name":"scout","adapter":{"type":"scripted","steps":[{"duration_ms":1000,"outcome":"succeeded"}]},
            "heartbeat":{"interval_ms":60000,"sources":["timer"],"while_paused":"allow_on_demand"},
            "time_zone":"UTC","limits":{"run_timeout_ms":600000,"queued_runs_max":16,"daily_cap":48},
            "breaker":{"failures_to_open":3,"cooldown_ms":900000,"cooldown_ms_max":7200000}},
          "status":"active","created_at_ms":1795356921345_u64,"next_fire_at_ms":1795356986472_u64,"timer_fires":0,
          "last_due_at_ms":null,"runs_started":0,"paused_until_ms":null,"paused_by":null,
          "day_count":{"day":null,"started":0},"breaker":{"state":"closed","llm_failures":0,"tool_failures":0}})
    }

    #[test]
    fn agents_read_with_and_without_the_newer_fields() {
        let older = agent_row(&server_agent()).unwrap();
        assert_eq!((older.liveness, older.next_idle_at_ms), (None, None));
        assert_eq!(older.spec.limits.daily_cap, Some(48));
        let mut newer = server_agent();
        newer["liveness"] = json!({"status": "online", "since_ms": 1795356921000_u64});
        newer["next_idle_at_ms"] = json!(1795357000000_u64);
        let newer = agent_row(&newer).unwrap();
        assert_eq!(
            newer.liveness,
            Some(Liveness {
                status: LivenessStatus::Online,
                since_ms: Some(1795356921000)
            })
        );
        assert_eq!(newer.next_idle_at_ms, Some(1795357000000));
        let mut unknown = server_agent();
        unknown["liveness"] = json!({"status": "unknown", "since_ms": null});
        assert_eq!(
            agent_row(&unknown).unwrap().liveness.map(|l| l.status),
            Some(LivenessStatus::Unknown)
        );
        assert!(agent_row(&json!({"id": 1})).is_err());
    }

    #[test]
    fn news_keeps_seq_triggers_and_touched_agents() {
        let mut news = FeedNews::default();
        news.absorb(&json!({"seq": 7, "tenant": "default", "type": "tenant_created"}));
        news.absorb(
            &json!({"seq": 9, "tenant": "default", "type": "breaker_opened",
            "agent": 5, "trigger": "tool", "until_ms": 1, "cooldown_ms": 1}),
        );
        news.absorb(&json!({"seq": 8, "tenant": "default", "type": "run_started", "agent": 6}));
        assert_eq!(news.last_seq, 9);
        assert_eq!(news.tenant.as_deref(), Some("default"));
        assert_eq!(news.triggers.get(&5), Some(&FailureCause::Tool));
        assert_eq!(news.touched, BTreeSet::from([5, 6]));
        assert!(!news.relist);
        news.absorb(&json!({"seq": 10, "type": "agent_created", "agent": 11}));
        assert!(news.relist);

        let mut snapshot = FleetSnapshot {
            server: "http://x:1".into(),
            tenant: None,
            now_ms: 0,
            last_seq: 3,
            agents: vec![agent_row(&server_agent()).unwrap()],
        };
        news.apply(&mut snapshot);
        assert_eq!(snapshot.last_seq, 10);
        assert_eq!(snapshot.tenant.as_deref(), Some("default"));
        assert_eq!(snapshot.agents[0].breaker_trigger, Some(FailureCause::Tool));
    }

    #[test]
    fn frames_redraw_in_place() {
        let text = frame(&["a".into(), "b".into()], &["note: x".into()]);
        assert_eq!(
            text,
            "\x1b[Ha\x1b[K\nb\x1b[K\n\x1b[K\nnote: x\x1b[K\n\x1b[J"
        );
        assert_eq!(frame(&["a".into()], &[]), "\x1b[Ha\x1b[K\n\x1b[J");
    }
}
