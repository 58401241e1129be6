//! The engine: Vigil's pure state machine. No I/O, no tokio, no clocks: `now` comes in as an
//! argument (the sans-IO shape of quinn-proto).
//!
//! It is split in two steps so that memory can never run ahead of disk (ADR 0002):
//! - [`Engine::decide`] turns a command into the events it implies, changing nothing;
//! - the shell persists those events, and only then calls [`Engine::apply`] for each.
//!
//! Recovery is the same `apply` over the stored log, so a restarted node is exactly the node
//! that wrote the log.

pub mod agent;
pub mod agent_error;
pub mod agent_state;
pub mod agent_update;
pub mod breaker;
pub mod cli_spec;
pub mod coordinator;
pub mod daily_cap;
pub mod dense;
pub mod draft;
pub mod due_index;
pub mod event;
pub mod history;
pub mod liveness;
pub mod pulse_report;
pub mod llm_spec;
pub mod node_bounds;
pub mod pause;
pub mod predicate;
pub mod prompt;
pub mod roster;
pub mod run;
pub mod schedule;
pub mod session;
pub mod snapshot;
pub mod spec_error;
pub mod tenant;
pub mod usage;
pub mod tool_spec;
pub mod wakeup;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use agent::{Agent, AgentId, AgentSpec, AgentStatus, FieldError, AGENTS_MAX};
use agent_state::AgentState;
use draft::Draft;
use due_index::Deadlines;
use event::{Event, EventKind};
use node_bounds::{NodeBounds, NodeLimits};
use pulse_report::PulseReport;
use run::{Run, RunEnd, RunId, RunStatus};
use tenant::{
    validate_name, Principal, Tenant, TenantHandle, TenantName, TokenHash, TENANTS_MAX,
    TENANT_NAME_CHARS_MAX,
};
use wakeup::{WakeupRecord, WakeupRequest, IDEMPOTENCY_KEYS_PER_AGENT_MAX};

/// Something the outside world asks of the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Make sure `tenant` exists and answers to this operator token.
    EnsureTenant {
        tenant: TenantName,
        operator_token_hash: TokenHash,
    },
    /// Register an agent in `tenant`; `token_hash` is the hash of the token issued to it.
    CreateAgent {
        tenant: TenantName,
        spec: AgentSpec,
        token_hash: TokenHash,
    },
    /// The one entry point for every wakeup.
    Wake {
        agent: AgentId,
        request: WakeupRequest,
    },
    /// User input for an agent: the idle chamber counts again, and `request` (an on-demand
    /// wakeup) wakes the agent. A replayed idempotency key records nothing, input included.
    Input {
        agent: AgentId,
        request: WakeupRequest,
    },
    /// Pulses came from these agents, with what each agent's pulses say now; those not online
    /// become online.
    MarkOnline {
        agents: Vec<(AgentId, PulseReport)>,
    },
    /// The stale sweep found these agents silent (with how long, in ms, and what their last
    /// pulses said); those online become offline.
    MarkOffline {
        agents: Vec<(AgentId, u64, PulseReport)>,
    },
    /// An operator pause: until resumed (`minutes` none), or for `minutes`.
    PauseAgent {
        agent: AgentId,
        minutes: Option<u64>,
    },
    /// The agent's own `pause_heartbeats(minutes)`: default 2, clamped to 1..=60.
    PauseHeartbeats {
        agent: AgentId,
        minutes: Option<u64>,
    },
    ResumeAgent {
        agent: AgentId,
    },
    TerminateAgent {
        agent: AgentId,
    },
    /// An operator closes the agent's breaker.
    ResetBreaker {
        agent: AgentId,
    },
    /// An operator takes the agent out of the `error` state.
    ResetAgentError {
        agent: AgentId,
    },
    /// Fire every timer whose slot has come.
    FireDueTimers,
    /// The executor reports that a running run ended.
    FinishRun {
        run: RunId,
        end: RunEnd,
    },
    /// Sets (or removes) a tenant's daily budget.
    SetTenantBudget {
        tenant: TenantName,
        daily_budget_usd: Option<usage::MicroUsd>,
    },
    /// The executor reports one model call of a running run and its usage.
    RecordUsage {
        run: RunId,
        usage: usage::Usage,
    },
    /// The executor spawned the running run's child in process group `pgid`.
    RecordProcessGroup {
        run: RunId,
        pgid: u32,
    },
    /// An operator forgets an agent's CLI session for `task_key` (nothing to forget: no event).
    ResetSession {
        agent: AgentId,
        task_key: String,
    },
    /// An operator cancels a queued or running run.
    CancelRun {
        run: RunId,
    },
    /// On start: runs left `running` by the previous process fail and are re-queued once.
    RecoverRuns,
    /// An operator replaces an agent's token with the one hashed as `token_hash`.
    RotateAgentToken {
        agent: AgentId,
        token_hash: TokenHash,
    },
    /// A tenant's operator replaces their own token with the one hashed as `token_hash`.
    RotateOperatorToken {
        tenant: TenantName,
        token_hash: TokenHash,
    },
    /// An operator changes an agent's spec.
    UpdateAgent {
        agent: AgentId,
        change: agent_update::SpecChange,
    },
    /// An operator deletes an agent: terminated first if it is not, then forgotten.
    DeleteAgent {
        agent: AgentId,
    },
    /// An operator defines a predicate heartbeat in `tenant`.
    CreateHeartbeat {
        tenant: TenantName,
        request: predicate::HeartbeatRequest,
    },
    /// An operator deletes one.
    DeleteHeartbeat {
        tenant: TenantName,
        heartbeat: predicate::HeartbeatId,
    },
    /// An evaluation of the heartbeat observed `state` (a state token,
    /// `predicate::state_token`).
    ObserveHeartbeat {
        tenant: TenantName,
        heartbeat: predicate::HeartbeatId,
        state: String,
    },
}

/// Why the engine refused a command. Nothing was decided, nothing needs undoing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{}", .0.message)]
    InvalidField(FieldError),
    #[error("an agent named {0:?} already exists in this tenant; choose another name")]
    NameTaken(String),
    #[error("this runtime already keeps {AGENTS_MAX} agents, its limit")]
    TooManyAgents,
    #[error("this runtime already keeps {TENANTS_MAX} tenants, its limit")]
    TooManyTenants,
    #[error("no tenant named {0:?}")]
    UnknownTenant(String),
    #[error("no agent with id {0}")]
    UnknownAgent(AgentId),
    #[error("no run with id {0} (finished runs older than the last {kept} of their agent, or than the node's last {node}, are only in the event log)", kept = run::FINISHED_RUNS_KEPT_PER_AGENT, node = node_bounds::FINISHED_RUNS_KEPT_PER_NODE)]
    UnknownRun(RunId),
    #[error("run {0} is not running")]
    RunNotRunning(RunId),
    #[error("run {0} already finished ({status}); nothing to cancel", status = .1.as_str())]
    RunAlreadyFinished(RunId, RunStatus),
    #[error("agent {0} is terminated; it cannot be paused, resumed or changed, only deleted")]
    AgentTerminated(AgentId),
    #[error("agent {0} already holds {IDEMPOTENCY_KEYS_PER_AGENT_MAX} idempotency keys from the last 24 h; retry later or send wakeups without a key")]
    TooManyIdempotencyKeys(AgentId),
    /// The node-wide cap on idempotency keys (`IDEMPOTENCY_KEYS_PER_NODE_MAX`) is reached and
    /// none has expired: a live key is never forgotten early.
    #[error("this node already holds {limit} idempotency keys from the last 24 h across all agents, its node-wide limit; the oldest expires in {retry_after_s} s: retry then, or send wakeups without a key")]
    TooManyIdempotencyKeysOnNode { limit: usize, retry_after_s: u64 },
    #[error("this token is already in use")]
    TokenInUse,
    #[error("no heartbeat with id {0:?} in this tenant")]
    UnknownHeartbeat(String),
    #[error("a heartbeat with id {0:?} already exists in this tenant; choose another id")]
    HeartbeatIdTaken(String),
    #[error("agent {0} already has {max} heartbeats, its limit", max = predicate::HEARTBEATS_PER_AGENT_MAX)]
    TooManyHeartbeats(AgentId),
}

/// What a command decided: the events to persist, and for a wakeup its answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    pub events: Vec<Event>,
    /// For `Wake`: the wakeup's record.
    pub wakeup: Option<WakeupRecord>,
    /// For `Wake`: whether this answer replays an earlier wakeup with the same idempotency key
    /// (then `events` is empty).
    pub replayed: bool,
}

impl Decision {
    fn events(events: Vec<Event>) -> Self {
        Decision {
            events,
            wakeup: None,
            replayed: false,
        }
    }
}

/// The runtime's whole in-memory state, rebuilt from the event log on start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    tenants: BTreeMap<TenantName, Tenant>,
    tokens: BTreeMap<TokenHash, Principal>,
    /// Behind a pointer: an `AgentState` is over a kilobyte, and a B-tree node holds 11 values
    /// inline while sequential ids leave nodes about half full: inline, the map spent about
    /// 2 KB of node space per agent; behind a pointer, a few words. Shared (`Arc`), so that a
    /// snapshot captures the fleet by cloning pointers and is encoded off the writer while
    /// the writer goes on; an agent changed meanwhile is copied first (`Arc::make_mut`), the
    /// others are never copied (ADR 0016).
    agents: BTreeMap<AgentId, Arc<AgentState>>,
    names: BTreeMap<(TenantName, String), AgentId>,
    /// Which agent holds each predicate heartbeat, by tenant and id (derived, as `names`).
    heartbeat_owners: BTreeMap<(TenantName, predicate::HeartbeatId), AgentId>,
    /// Which agent each run held in memory belongs to.
    run_owner: BTreeMap<RunId, AgentId>,
    last_seq: u64,
    /// The next agent id: one past the highest ever created, deleted agents included, so an
    /// id is never reused (the log keeps a deleted agent's events under it).
    next_agent: u64,
    next_wakeup: u64,
    next_run: u64,
    /// Node-wide counts of keys and finished runs, and their eviction orders.
    bounds: NodeBounds,
    /// The agents' deadlines by instant (what `FireDueTimers` looks at, never every agent).
    due: due_index::DueIndex,
    /// What a pulse needs of each agent, dense by id (derived, as `names`).
    roster: roster::Roster,
    /// The node is draining (`Engine::hold_starts`): no run starts. Not state of the log: a
    /// mode of this process, never persisted, false in every recovered engine.
    starts_held: bool,
}

impl Default for Engine {
    fn default() -> Self {
        Engine {
            tenants: BTreeMap::new(),
            tokens: BTreeMap::new(),
            agents: BTreeMap::new(),
            names: BTreeMap::new(),
            heartbeat_owners: BTreeMap::new(),
            run_owner: BTreeMap::new(),
            last_seq: 0,
            next_agent: 1,
            next_wakeup: 1,
            next_run: 1,
            bounds: NodeBounds::default(),
            due: due_index::DueIndex::default(),
            roster: roster::Roster::default(),
            starts_held: false,
        }
    }
}

impl Engine {
    /// An engine with no tenants, no agents and an empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty engine enforcing other node-wide limits than the defaults (tests use small ones).
    pub fn with_limits(limits: NodeLimits) -> Self {
        Engine {
            bounds: NodeBounds::new(limits),
            ..Self::default()
        }
    }

    /// The node-wide memory bounds: limits and what is held against them.
    pub fn bounds(&self) -> &NodeBounds {
        &self.bounds
    }

    /// From now on no run starts: wakeups are decided as usual and queue, and the runs already
    /// running go on (a draining node, ADR 0015). For the rest of this process; a restarted
    /// node starts what is queued.
    pub fn hold_starts(&mut self) {
        self.starts_held = true;
    }

    /// Runs running now (a scan of the agents: for a draining node, not for hot paths).
    pub fn running_runs(&self) -> usize {
        self.agents
            .values()
            .filter(|state| state.active_run().is_some())
            .count()
    }

    /// Sequence number of the last applied event (0 for an empty log).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Every tenant, by name.
    pub fn tenants(&self) -> impl Iterator<Item = &Tenant> {
        self.tenants.values()
    }

    /// Who a token hash belongs to.
    pub fn principal(&self, token_hash: &TokenHash) -> Option<&Principal> {
        self.tokens.get(token_hash)
    }

    /// The shared name of tenant `name`: its operator's, which every tenant has.
    fn tenant_handle(&self, name: &str) -> TenantHandle {
        self.tenants
            .get(name)
            .and_then(|tenant| self.tokens.get(&tenant.operator_token_hash))
            .map_or_else(|| name.into(), |p| p.tenant_handle().clone())
    }

    /// How many agents the engine holds.
    pub fn agent_count(&self) -> usize {
        self.agents.len()
    }

    /// All agents, in id order.
    pub fn agents(&self) -> impl Iterator<Item = &Agent> {
        self.agents.values().map(|s| s.agent())
    }

    /// Agents with an id above `after`, in id order (a page of a list starts here).
    pub fn agents_after(&self, after: AgentId) -> impl Iterator<Item = &Agent> {
        use std::ops::Bound::{Excluded, Unbounded};
        self.agents
            .range((Excluded(after), Unbounded))
            .map(|(_, s)| s.agent())
    }

    /// One agent by id.
    pub fn agent(&self, id: AgentId) -> Option<&Agent> {
        self.agents.get(&id).map(|s| s.agent())
    }

    /// One agent with its coordinator state.
    pub fn agent_state(&self, id: AgentId) -> Option<&AgentState> {
        self.agents.get(&id).map(|s| &**s)
    }

    /// What a pulse needs of `id` (its tenant, status, liveness and floor), if it exists: one
    /// load from a dense table, for the pulse paths (ADR 0027).
    pub fn pulse_card(&self, id: AgentId) -> Option<roster::PulseCard> {
        self.roster.card(id)
    }

    /// The rank `tenant` has on pulse cards, if it exists.
    pub fn tenant_rank(&self, tenant: &str) -> Option<roster::TenantRank> {
        self.roster.rank(tenant)
    }

    /// Every agent with its coordinator state, in id order.
    pub fn agent_states(&self) -> impl Iterator<Item = &AgentState> {
        self.agents.values().map(|s| &**s)
    }

    /// The agent called `name` in `tenant`.
    pub fn agent_named(&self, tenant: &str, name: &str) -> Option<&Agent> {
        let id = self.names.get(&(tenant.to_string(), name.to_string()))?;
        self.agent(*id)
    }

    /// The runs held in memory, newest first: a walk of the run index, never of the agents (a
    /// node of a million agents lists its latest runs without looking at each agent).
    pub fn runs_newest_first(&self) -> impl Iterator<Item = &Run> {
        self.run_owner
            .iter()
            .rev()
            .filter_map(|(run, owner)| self.agents.get(owner)?.run(*run))
    }

    /// One run still held in memory.
    pub fn run(&self, id: RunId) -> Option<&Run> {
        let owner = self.run_owner.get(&id)?;
        self.agents[owner].run(id)
    }

    /// The events `command` implies at wall time `now_ms`, numbered after the last applied event.
    /// Pure: the engine is unchanged until the shell applies what it persisted.
    pub fn decide(&self, command: &Command, now_ms: u64) -> Result<Decision, Refusal> {
        let spent: BTreeSet<TenantName> = self
            .tenants
            .values()
            .filter(|t| t.budget_left(now_ms) == Some(0))
            .map(|t| t.name.clone())
            .collect();
        let mut draft = Draft::new(now_ms, self.last_seq, self.next_wakeup, self.next_run)
            .with_spent_tenants(spent)
            .with_starts_held(self.starts_held);
        match command {
            Command::SetTenantBudget {
                tenant,
                daily_budget_usd,
            } => self.decide_tenant_budget(&mut draft, tenant, *daily_budget_usd)?,
            Command::EnsureTenant {
                tenant,
                operator_token_hash,
            } => self.decide_tenant(&mut draft, tenant, operator_token_hash)?,
            Command::CreateAgent {
                tenant,
                spec,
                token_hash,
            } => self.decide_create(&mut draft, tenant, spec, token_hash)?,
            Command::Wake { agent, request } | Command::Input { agent, request } => {
                let state = self.state(*agent)?;
                if let Some(replay) = self.replay(state, request, now_ms)? {
                    return Ok(replay);
                }
                let mut coordinator = state.coordinator.clone();
                let record = match command {
                    Command::Input { .. } => coordinator.input(&mut draft, request),
                    _ => coordinator.wake(&mut draft, request),
                };
                return Ok(Decision {
                    events: draft.into_events(),
                    wakeup: Some(record),
                    replayed: false,
                });
            }
            Command::MarkOnline { agents } => {
                // All or nothing: a batch naming one unknown or terminated agent changes nothing.
                let agents: BTreeMap<AgentId, &PulseReport> =
                    agents.iter().map(|(agent, report)| (*agent, report)).collect();
                for agent in agents.keys() {
                    if self.state(*agent)?.agent().status == AgentStatus::Terminated {
                        return Err(Refusal::AgentTerminated(*agent));
                    }
                }
                for (agent, report) in agents {
                    let state = &self.agents[&agent];
                    if state.agent().liveness.status != liveness::LivenessStatus::Online {
                        state.coordinator.clone().mark_online(&mut draft, report);
                    }
                }
            }
            Command::MarkOffline { agents } => {
                let agents: BTreeMap<AgentId, (u64, &PulseReport)> = agents
                    .iter()
                    .map(|(agent, silent_ms, report)| (*agent, (*silent_ms, report)))
                    .collect();
                for (agent, (silent_ms, report)) in agents {
                    let state = self.state(agent)?;
                    if state.agent().liveness.status == liveness::LivenessStatus::Online {
                        state
                            .coordinator
                            .clone()
                            .mark_offline(&mut draft, silent_ms, report);
                    }
                }
            }
            Command::PauseAgent { agent, minutes } => {
                let until_ms = match minutes {
                    None => None,
                    Some(m) if (1..=pause::OPERATOR_PAUSE_MINUTES_MAX).contains(m) => {
                        Some(pause::pause_until_ms(now_ms, *m))
                    }
                    Some(m) => {
                        return Err(Refusal::InvalidField(FieldError::new(
                            "minutes",
                            format!(
                                "minutes must be between 1 and {} (got {m}); leave it out to pause until resumed",
                                pause::OPERATOR_PAUSE_MINUTES_MAX
                            ),
                        )))
                    }
                };
                self.coordinator(*agent)?
                    .pause(&mut draft, until_ms, pause::PausedBy::Operator)?
            }
            Command::PauseHeartbeats { agent, minutes } => {
                let minutes = pause::heartbeat_pause_minutes(*minutes);
                let until_ms = Some(pause::pause_until_ms(now_ms, minutes));
                self.coordinator(*agent)?
                    .pause(&mut draft, until_ms, pause::PausedBy::Agent)?
            }
            Command::ResumeAgent { agent } => self.coordinator(*agent)?.resume(&mut draft)?,
            Command::TerminateAgent { agent } => self.coordinator(*agent)?.terminate(&mut draft),
            Command::ResetBreaker { agent } => self.coordinator(*agent)?.reset_breaker(&mut draft),
            Command::ResetAgentError { agent } => self.coordinator(*agent)?.reset_error(&mut draft),
            Command::FireDueTimers => {
                for agent in self.due.due(now_ms) {
                    let state = &self.agents[&agent];
                    let agent = state.agent();
                    let due = |at: Option<u64>| at.is_some_and(|due| due <= now_ms);
                    if due(agent.next_fire_at_ms) || due(agent.next_idle_at_ms) {
                        // One scratch copy for both chambers, so the idle fire sees the
                        // timer's run.
                        let mut coordinator = state.coordinator.clone();
                        coordinator.fire_timer(&mut draft);
                        coordinator.fire_idle(&mut draft);
                    } else if due(state.coordinator.cooldown_deadline_ms(now_ms)) {
                        state.coordinator.clone().start_after_cooldown(&mut draft);
                    }
                }
            }
            Command::FinishRun { run, end } => self
                .owner(*run)?
                .coordinator
                .clone()
                .finish(&mut draft, *run, end)?,
            Command::RecordUsage { run, usage } => self
                .owner(*run)?
                .coordinator
                .clone()
                .record_usage(&mut draft, *run, usage)?,
            Command::RecordProcessGroup { run, pgid } => self
                .owner(*run)?
                .coordinator
                .clone()
                .record_process_group(&mut draft, *run, *pgid)?,
            Command::ResetSession { agent, task_key } => {
                let state = self.state(*agent)?;
                if state.sessions().get(task_key).is_some() {
                    draft.emit_global(
                        state.agent().tenant.clone(),
                        EventKind::SessionReset {
                            agent: *agent,
                            task_key: task_key.clone(),
                        },
                    );
                }
            }
            Command::CancelRun { run } => {
                let owner = self.owner(*run)?;
                let status = owner.run(*run).expect("owned runs are held").status;
                if status.is_terminal() {
                    return Err(Refusal::RunAlreadyFinished(*run, status));
                }
                owner
                    .coordinator
                    .clone()
                    .cancel(&mut draft, *run, "cancelled by an operator")?
            }
            Command::RotateAgentToken { agent, token_hash } => {
                let state = self.state(*agent)?;
                if self.tokens.contains_key(token_hash) {
                    return Err(Refusal::TokenInUse);
                }
                draft.emit_global(
                    state.agent().tenant.clone(),
                    EventKind::AgentTokenRotated {
                        agent: *agent,
                        token_hash: token_hash.clone(),
                    },
                );
            }
            Command::RotateOperatorToken { tenant, token_hash } => {
                self.decide_operator_token(&mut draft, tenant, token_hash)?
            }
            Command::UpdateAgent { agent, change } => {
                self.decide_update(&mut draft, *agent, change)?
            }
            Command::DeleteAgent { agent } => {
                let mut coordinator = self.coordinator(*agent)?;
                coordinator.terminate(&mut draft);
                draft.emit_global(
                    coordinator.agent.tenant.clone(),
                    EventKind::AgentDeleted {
                        agent: *agent,
                        name: coordinator.agent.name.clone(),
                    },
                );
            }
            Command::CreateHeartbeat { tenant, request } => {
                self.decide_create_heartbeat(&mut draft, tenant, request)?
            }
            Command::DeleteHeartbeat { tenant, heartbeat } => {
                self.decide_delete_heartbeat(&mut draft, tenant, heartbeat)?
            }
            Command::ObserveHeartbeat {
                tenant,
                heartbeat,
                state,
            } => self.decide_observe_heartbeat(&mut draft, tenant, heartbeat, state)?,
            Command::RecoverRuns => {
                for state in self.agents.values() {
                    let stuck = state.active_run().is_some();
                    let waiting = state.active_run().is_none()
                        && state.queued_runs().next().is_some()
                        && state.agent().status == AgentStatus::Active;
                    if stuck || waiting {
                        state.coordinator.clone().recover(&mut draft);
                    }
                }
            }
        }
        Ok(Decision::events(draft.into_events()))
    }

    /// For a keyed wakeup: the original answer if the key was seen within its TTL, or a
    /// refusal if the agent, or the node, holds too many keys. Validates the request first.
    fn replay(
        &self,
        state: &AgentState,
        request: &WakeupRequest,
        now_ms: u64,
    ) -> Result<Option<Decision>, Refusal> {
        request.validate().map_err(Refusal::InvalidField)?;
        let Some(key) = &request.idempotency_key else {
            return Ok(None);
        };
        if let Some(original) = state.idempotent_wakeup(key, now_ms) {
            return Ok(Some(Decision {
                events: Vec::new(),
                wakeup: Some(original.clone()),
                replayed: true,
            }));
        }
        if state.live_keys(now_ms) >= IDEMPOTENCY_KEYS_PER_AGENT_MAX {
            return Err(Refusal::TooManyIdempotencyKeys(state.agent().id));
        }
        if let Err(retry_after_s) = self.bounds.key_room(now_ms) {
            return Err(Refusal::TooManyIdempotencyKeysOnNode {
                limit: self.bounds.limits().idempotency_keys,
                retry_after_s,
            });
        }
        Ok(None)
    }

    fn state(&self, agent: AgentId) -> Result<&AgentState, Refusal> {
        self.agents
            .get(&agent)
            .map(|s| &**s)
            .ok_or(Refusal::UnknownAgent(agent))
    }

    /// A scratch copy of an agent's coordinator, for a decision to work on.
    fn coordinator(&self, agent: AgentId) -> Result<coordinator::Coordinator, Refusal> {
        Ok(self.state(agent)?.coordinator.clone())
    }

    /// The agent that owns run `run`, if the engine knows the run.
    pub fn owner_of(&self, run: RunId) -> Option<&AgentState> {
        self.owner(run).ok()
    }

    fn owner(&self, run: RunId) -> Result<&AgentState, Refusal> {
        let agent = self.run_owner.get(&run).ok_or(Refusal::UnknownRun(run))?;
        Ok(&self.agents[agent])
    }

    fn decide_tenant_budget(
        &self,
        draft: &mut Draft,
        tenant: &str,
        daily_budget_usd: Option<usage::MicroUsd>,
    ) -> Result<(), Refusal> {
        let current = self
            .tenants
            .get(tenant)
            .ok_or_else(|| Refusal::UnknownTenant(tenant.to_string()))?;
        let max = usage::DAILY_BUDGET_USD_MAX * usage::MICRO_USD_PER_USD;
        if daily_budget_usd.is_some_and(|b| b.0 > max) {
            return Err(Refusal::InvalidField(FieldError::new(
                "daily_budget_usd",
                format!(
                    "a tenant's daily_budget_usd must be between 0 and {} dollars",
                    usage::DAILY_BUDGET_USD_MAX
                ),
            )));
        }
        if current.daily_budget_usd != daily_budget_usd {
            draft.emit_global(
                tenant.to_string(),
                EventKind::TenantBudgetSet { daily_budget_usd },
            );
        }
        Ok(())
    }

    /// Micro-dollars the owner of `run` may still spend today: the smaller of the agent's
    /// budget left and its tenant's (`None`: neither has a budget).
    pub fn budget_left(&self, run: RunId, now_ms: u64) -> Option<u64> {
        let state = self.owner(run).ok()?;
        let agent = state.budget_left(now_ms);
        let tenant = self
            .tenants
            .get(&state.agent().tenant)
            .and_then(|t| t.budget_left(now_ms));
        match (agent, tenant) {
            (Some(a), Some(t)) => Some(a.min(t)),
            (a, t) => a.or(t),
        }
    }

    fn decide_tenant(
        &self,
        draft: &mut Draft,
        tenant: &str,
        operator_token_hash: &TokenHash,
    ) -> Result<(), Refusal> {
        validate_name("tenant", tenant, TENANT_NAME_CHARS_MAX).map_err(Refusal::InvalidField)?;
        let holder = self.tokens.get(operator_token_hash);
        let wanted = Principal::Operator {
            tenant: tenant.into(),
        };
        if holder.is_some_and(|p| *p != wanted) {
            return Err(Refusal::TokenInUse);
        }
        match self.tenants.get(tenant) {
            // Configured as at the last start: a token rotated since stays in force.
            Some(existing) if existing.configured_token_hash == *operator_token_hash => {}
            Some(_) => draft.emit_global(
                tenant.to_string(),
                EventKind::OperatorTokenSet {
                    operator_token_hash: operator_token_hash.clone(),
                    by: tenant::TokenSetBy::Configuration,
                },
            ),
            None if self.tenants.len() >= TENANTS_MAX => return Err(Refusal::TooManyTenants),
            None => draft.emit_global(
                tenant.to_string(),
                EventKind::TenantCreated {
                    operator_token_hash: operator_token_hash.clone(),
                },
            ),
        }
        Ok(())
    }

    fn decide_operator_token(
        &self,
        draft: &mut Draft,
        tenant: &str,
        token_hash: &TokenHash,
    ) -> Result<(), Refusal> {
        if !self.tenants.contains_key(tenant) {
            return Err(Refusal::UnknownTenant(tenant.to_string()));
        }
        if self.tokens.contains_key(token_hash) {
            return Err(Refusal::TokenInUse);
        }
        draft.emit_global(
            tenant.to_string(),
            EventKind::OperatorTokenSet {
                operator_token_hash: token_hash.clone(),
                by: tenant::TokenSetBy::Operator,
            },
        );
        Ok(())
    }

    /// An `agent_updated` when `change` makes a valid spec that differs from the agent's.
    fn decide_update(
        &self,
        draft: &mut Draft,
        agent: AgentId,
        change: &agent_update::SpecChange,
    ) -> Result<(), Refusal> {
        let current = self.state(agent)?.agent();
        if current.status == AgentStatus::Terminated {
            return Err(Refusal::AgentTerminated(agent));
        }
        let spec =
            agent_update::changed_spec(&current.spec, change).map_err(Refusal::InvalidField)?;
        let holder = self.names.get(&(current.tenant.clone(), spec.name.clone()));
        if holder.is_some_and(|holder| *holder != agent) {
            return Err(Refusal::NameTaken(spec.name));
        }
        let changed = agent_update::changed_fields(&current.spec, &spec);
        if changed.is_empty() {
            return Ok(());
        }
        draft.emit_global(
            current.tenant.clone(),
            EventKind::AgentUpdated {
                agent,
                first_fire_at_ms: agent_update::first_fire_at_ms(
                    agent,
                    &spec,
                    draft.now_ms(),
                    current.last_due_at_ms,
                ),
                spec: Box::new(spec),
                changed,
            },
        );
        Ok(())
    }

    fn decide_create(
        &self,
        draft: &mut Draft,
        tenant: &str,
        spec: &AgentSpec,
        token_hash: &TokenHash,
    ) -> Result<(), Refusal> {
        spec.validate().map_err(Refusal::InvalidField)?;
        if !self.tenants.contains_key(tenant) {
            return Err(Refusal::UnknownTenant(tenant.to_string()));
        }
        if self
            .names
            .contains_key(&(tenant.to_string(), spec.name.clone()))
        {
            return Err(Refusal::NameTaken(spec.name.clone()));
        }
        if self.agents.len() >= self.bounds.limits().agents {
            return Err(Refusal::TooManyAgents);
        }
        if self.tokens.contains_key(token_hash) {
            return Err(Refusal::TokenInUse);
        }
        let id = AgentId(self.next_agent);
        let now_ms = draft.now_ms();
        draft.emit_global(
            tenant.to_string(),
            EventKind::AgentCreated {
                agent: id,
                name: spec.name.clone(),
                spec: Box::new(spec.clone()),
                token_hash: token_hash.clone(),
                // The grid is offset by the agent's jitter, so alike agents do not align.
                first_fire_at_ms: spec.heartbeat.interval_ms.map(|interval_ms| {
                    now_ms
                        .saturating_add(interval_ms)
                        .saturating_add(schedule::jitter_ms(id.0, interval_ms))
                }),
            },
        );
        Ok(())
    }

    /// Folds one persisted event into the state. Events must arrive in log order; anything else
    /// is a bug in the shell or a corrupt log, and stops the node rather than guess.
    pub fn apply(&mut self, event: &Event) {
        assert_eq!(
            event.seq,
            self.last_seq + 1,
            "event log out of order: expected seq {}, got {} (invariant 11)",
            self.last_seq + 1,
            event.seq
        );
        match &event.kind {
            EventKind::TenantCreated {
                operator_token_hash,
            } => {
                let tenant = Tenant {
                    name: event.tenant.clone(),
                    operator_token_hash: operator_token_hash.clone(),
                    configured_token_hash: operator_token_hash.clone(),
                    daily_budget_usd: None,
                    day_spend: usage::DaySpend::default(),
                };
                assert!(
                    self.tenants.insert(event.tenant.clone(), tenant).is_none(),
                    "tenant {} created twice",
                    event.tenant
                );
                self.roster.add_tenant(&event.tenant);
                self.tokens.insert(
                    operator_token_hash.clone(),
                    Principal::Operator {
                        tenant: event.tenant.as_str().into(),
                    },
                );
            }
            EventKind::OperatorTokenSet {
                operator_token_hash,
                by,
            } => {
                let tenant = self
                    .tenants
                    .get_mut(&event.tenant)
                    .expect("token set for a known tenant");
                let handle = self.tokens.remove(&tenant.operator_token_hash).map_or_else(
                    || event.tenant.as_str().into(),
                    |p| p.tenant_handle().clone(),
                );
                tenant.operator_token_hash = operator_token_hash.clone();
                if *by == tenant::TokenSetBy::Configuration {
                    tenant.configured_token_hash = operator_token_hash.clone();
                }
                self.tokens.insert(
                    operator_token_hash.clone(),
                    Principal::Operator { tenant: handle },
                );
            }
            EventKind::TenantBudgetSet { daily_budget_usd } => {
                let tenant = self
                    .tenants
                    .get_mut(&event.tenant)
                    .expect("budget set for a known tenant");
                tenant.daily_budget_usd = *daily_budget_usd;
            }
            EventKind::AgentCreated {
                agent,
                name,
                spec,
                token_hash,
                first_fire_at_ms,
            } => {
                let state = AgentState::new(Agent {
                    id: *agent,
                    tenant: event.tenant.clone(),
                    name: name.clone(),
                    spec: Arc::new((**spec).clone()),
                    status: AgentStatus::Active,
                    token_hash: token_hash.clone(),
                    created_at_ms: event.at_ms,
                    next_fire_at_ms: *first_fire_at_ms,
                    timer_fires: 0,
                    last_due_at_ms: None,
                    runs_started: 0,
                    paused_until_ms: None,
                    paused_by: None,
                    day_count: daily_cap::DayCount::default(),
                    day_spend: usage::DaySpend::default(),
                    usage_total: usage::Usage::default(),
                    breaker: breaker::BreakerState::default(),
                    liveness: liveness::Liveness::default(),
                    last_input_at_ms: None,
                    next_idle_at_ms: spec
                        .heartbeat
                        .idle_after_ms
                        .map(|after| event.at_ms.saturating_add(after)),
                    cooldown: None,
                    error: None,
                    error_counts: Default::default(),
                });
                self.due
                    .refile(*agent, Deadlines::default(), Deadlines::of(&state));
                assert!(
                    agent.0 >= self.next_agent,
                    "agent {agent} created twice, or out of order"
                );
                self.next_agent = agent.0 + 1;
                assert!(
                    self.agents.insert(*agent, Arc::new(state)).is_none(),
                    "agent {agent} created twice"
                );
                self.names
                    .insert((event.tenant.clone(), name.clone()), *agent);
                self.tokens.insert(
                    token_hash.clone(),
                    Principal::Agent {
                        tenant: self.tenant_handle(&event.tenant),
                        agent: *agent,
                    },
                );
            }
            EventKind::AgentTokenRotated { agent, token_hash } => {
                let state = self
                    .agents
                    .get_mut(agent)
                    .map(Arc::make_mut)
                    .unwrap_or_else(|| panic!("agent_token_rotated for unknown agent {agent}"));
                assert_eq!(
                    state.agent().tenant,
                    event.tenant,
                    "event filed under the wrong tenant"
                );
                let old =
                    std::mem::replace(&mut state.coordinator.agent.token_hash, token_hash.clone());
                let handle = self.tokens.remove(&old).map_or_else(
                    || self.tenant_handle(&event.tenant),
                    |p| p.tenant_handle().clone(),
                );
                self.tokens.insert(
                    token_hash.clone(),
                    Principal::Agent {
                        tenant: handle,
                        agent: *agent,
                    },
                );
            }
            EventKind::AgentUpdated {
                agent,
                spec,
                first_fire_at_ms,
                ..
            } => self.apply_update(event, *agent, spec, *first_fire_at_ms),
            EventKind::AgentDeleted { agent, .. } => self.apply_delete(event, *agent),
            kind => {
                let agent = kind.agent().expect("every other event is about an agent");
                let state = self
                    .agents
                    .get_mut(&agent)
                    .map(Arc::make_mut)
                    .unwrap_or_else(|| panic!("{} for unknown agent {agent}", kind.type_name()));
                assert_eq!(
                    state.agent().tenant,
                    event.tenant,
                    "event filed under the wrong tenant"
                );
                let keys_before = state.key_summary();
                let deadlines_before = Deadlines::of(state);
                let evicted = state.apply(event);
                self.due.refile(agent, deadlines_before, Deadlines::of(state));
                self.bounds
                    .keys_changed(agent, keys_before, state.key_summary());
                if let Some(evicted) = evicted {
                    self.run_owner.remove(&evicted.1);
                    self.bounds.run_evicted(evicted);
                }
                match kind {
                    EventKind::HeartbeatCreated { heartbeat, .. } => {
                        self.heartbeat_owners
                            .insert((event.tenant.clone(), heartbeat.clone()), agent);
                    }
                    EventKind::HeartbeatDeleted { heartbeat, .. } => {
                        self.heartbeat_owners
                            .remove(&(event.tenant.clone(), heartbeat.clone()));
                    }
                    EventKind::UsageRecorded { usage, .. } => {
                        let tenant = self
                            .tenants
                            .get_mut(&event.tenant)
                            .expect("usage of a known tenant");
                        let today = daily_cap::LocalDay::of(event.at_ms, tenant::TENANT_BUDGET_TIME_ZONE);
                        let day = tenant.day_spend.day_for(today);
                        tenant.day_spend.count(day, usage);
                    }
                    EventKind::WakeupQueued { wakeup, run, .. } => {
                        self.run_owner.insert(*run, agent);
                        self.next_run = self.next_run.max(run.0 + 1);
                        self.next_wakeup = self.next_wakeup.max(wakeup.0 + 1);
                    }
                    EventKind::WakeupCoalesced { wakeup, .. }
                    | EventKind::WakeupRefused { wakeup, .. } => {
                        self.next_wakeup = self.next_wakeup.max(wakeup.0 + 1);
                    }
                    EventKind::RunRequeued { run, .. } => {
                        self.run_owner.insert(*run, agent);
                        self.next_run = self.next_run.max(run.0 + 1);
                    }
                    EventKind::RunFinished { run, .. } => {
                        let has_excerpt = self.agents[&agent].has_answer_excerpt(*run);
                        self.bounds.run_finished((event.seq, *run), has_excerpt);
                    }
                    _ => {}
                }
                self.enforce_node_bounds();
            }
        }
        if let Some(agent) = event.kind.agent() {
            let state = self.agents.get(&agent).map(|state| &**state);
            self.roster.refresh(agent, state);
        }
        self.last_seq = event.seq;
    }

    /// Folds `agent_updated`: the new spec and name, the deadlines it implies, refiled.
    fn apply_update(
        &mut self,
        event: &Event,
        agent: AgentId,
        spec: &AgentSpec,
        first_fire_at_ms: Option<u64>,
    ) {
        let state = self
            .agents
            .get_mut(&agent)
            .map(Arc::make_mut)
            .unwrap_or_else(|| panic!("agent_updated for unknown agent {agent}"));
        assert_eq!(state.agent().tenant, event.tenant, "event filed under the wrong tenant");
        let before = Deadlines::of(state);
        let old_name = state.agent().name.clone();
        agent_update::fold(&mut state.coordinator.agent, spec, first_fire_at_ms, event.at_ms);
        self.due.refile(agent, before, Deadlines::of(state));
        if old_name != spec.name {
            self.names.remove(&(event.tenant.clone(), old_name));
            self.names.insert((event.tenant.clone(), spec.name.clone()), agent);
        }
    }

    /// Folds `agent_deleted`: the agent, its token, name, deadlines, runs and keys leave every
    /// index and count. Its decision terminated it first, so nothing of it is queued or running.
    fn apply_delete(&mut self, event: &Event, agent: AgentId) {
        let state = self
            .agents
            .remove(&agent)
            .unwrap_or_else(|| panic!("agent_deleted for unknown agent {agent}"));
        assert_eq!(state.agent().tenant, event.tenant, "event filed under the wrong tenant");
        assert!(
            state.agent().status == AgentStatus::Terminated && state.active_run().is_none(),
            "agent {agent} deleted while not terminated"
        );
        self.names
            .remove(&(event.tenant.clone(), state.agent().name.clone()));
        self.tokens.remove(&state.agent().token_hash);
        self.due.refile(agent, Deadlines::of(&state), Deadlines::default());
        let no_keys = node_bounds::KeySummary {
            held: 0,
            oldest_at_ms: None,
        };
        self.bounds.keys_changed(agent, state.key_summary(), no_keys);
        for finished in state.finished_order() {
            self.bounds.run_evicted(*finished);
        }
        for run in state.runs() {
            self.run_owner.remove(&run.id);
        }
        for heartbeat in state.heartbeats().iter() {
            self.heartbeat_owners
                .remove(&(event.tenant.clone(), heartbeat.id.clone()));
        }
    }

    /// Evicts what the node holds beyond its node-wide limits, oldest first. Keys: `decide`
    /// admits a new key at the cap only when the oldest has expired, so only expired keys go
    /// (a log written under a larger cap may evict live ones on replay: memory stays bounded).
    fn enforce_node_bounds(&mut self) {
        while let Some(agent) = self.bounds.key_over_cap() {
            let state = self
                .agents
                .get_mut(&agent)
                .map(Arc::make_mut)
                .expect("keys of a known agent");
            let before = state.key_summary();
            state.evict_oldest_key();
            self.bounds.keys_changed(agent, before, state.key_summary());
        }
        while let Some(oldest) = self.bounds.run_over_cap() {
            let owner = self
                .run_owner
                .remove(&oldest.1)
                .expect("a finished run held has an owner");
            let evicted = self
                .agents
                .get_mut(&owner)
                .map(Arc::make_mut)
                .expect("owners are known agents")
                .evict_oldest_finished();
            assert_eq!(evicted, oldest, "an agent's oldest finished run is the node's");
            self.bounds.run_evicted(oldest);
        }
        while let Some((_, run)) = self.bounds.take_excerpt_over_cap() {
            let owner = self.run_owner[&run];
            self.agents
                .get_mut(&owner)
                .map(Arc::make_mut)
                .expect("owners are known agents")
                .drop_answer_excerpt(run);
        }
    }

    /// The earliest wall time at which `FireDueTimers` would decide something (a timer slot,
    /// an idle fire, a queued run whose cooldown ends), if any, read at wall time `now_ms`.
    pub fn next_deadline_ms(&self, now_ms: u64) -> Option<u64> {
        self.due.next_ms(now_ms)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod lifecycle_tests;
