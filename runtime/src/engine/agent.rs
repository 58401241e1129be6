//! Agents: what the runtime keeps alive, the policy a caller gives each one, and its validation.

use super::agent_error::{AgentError, ErrorCounts};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::breaker::{BreakerPolicy, BreakerState};
use super::cli_spec::{CodingCliSpec, ProcessSpec, WebhookSpec};
use super::daily_cap::{DayCount, DAILY_CAP_MAX};
pub use super::llm_spec::LlmSpec;
use super::usage::{DaySpend, MicroUsd, Usage, DAILY_BUDGET_USD_MAX, MICRO_USD_PER_USD};
use super::liveness::{Liveness, LivenessPolicy};
use super::pause::{PausedBy, WhilePaused};
use super::tenant::{validate_name, TenantName, TokenHash};
use super::wakeup::WakeupSource;

/// Longest agent name accepted.
pub const AGENT_NAME_CHARS_MAX: usize = 64;
/// Shortest timer interval: below this a fleet would spend its life waking up.
pub const INTERVAL_MS_MIN: u64 = 1_000;
/// Longest timer interval: a week.
pub const INTERVAL_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1_000;
/// Most agents one runtime keeps, counting every tenant and terminated agents; creating one
/// more is refused. An idle agent costs about 2.8 KB resident (docs/benchmarks.md), so a full
/// node holds about 3 GB of agents.
pub const AGENTS_MAX: usize = 1_000_000;
/// Shortest run timeout an agent may ask for.
pub const RUN_TIMEOUT_MS_MIN: u64 = 1_000;
/// Longest run timeout: a day.
pub const RUN_TIMEOUT_MS_MAX: u64 = 24 * 60 * 60 * 1_000;
/// Run timeout when the policy names none.
pub const RUN_TIMEOUT_MS_DEFAULT: u64 = 10 * 60 * 1_000;
/// Longest pause an agent may ask for between the end of one run and the start of the next.
pub const COOLDOWN_MS_MAX: u64 = 24 * 60 * 60 * 1_000;
/// Largest per-agent queue of runs waiting to start.
pub const QUEUED_RUNS_MAX_LIMIT: usize = 1_000;
/// Per-agent queue length when the policy names none.
pub const QUEUED_RUNS_MAX_DEFAULT: usize = 16;
/// Most steps of a scripted adapter.
pub const SCRIPT_STEPS_MAX: usize = 64;
/// Longest a scripted step may take.
pub const SCRIPT_STEP_MS_MAX: u64 = 24 * 60 * 60 * 1_000;
/// Longest time-zone name accepted (the longest IANA name is 32 characters).
pub const TIME_ZONE_CHARS_MAX: usize = 64;

/// Identifies an agent within one runtime. Assigned by the engine, in creation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(transparent)]
pub struct AgentId(pub u64);

impl std::fmt::Display for AgentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a caller asks for when registering an agent. Every field but `name` has a default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Unique within the tenant, human-chosen: 1..=64 of `[A-Za-z0-9._-]`.
    pub name: String,
    /// How a run of this agent is executed.
    #[serde(default)]
    pub adapter: AdapterSpec,
    /// When the agent is woken without being asked.
    #[serde(default)]
    pub heartbeat: HeartbeatPolicy,
    /// IANA time zone of the agent's local day (e.g. `Europe/Paris`).
    #[serde(default = "default_time_zone")]
    pub time_zone: String,
    #[serde(default)]
    pub limits: AgentLimits,
    /// The circuit breaker's settings.
    #[serde(default)]
    pub breaker: BreakerPolicy,
    /// How the agent's pulses are judged.
    #[serde(default)]
    pub liveness: LivenessPolicy,
}

fn default_time_zone() -> String {
    "UTC".into()
}

/// How runs are executed (docs/agents.md has one section per adapter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AdapterSpec {
    /// Built in, offline: each run plays the next step of a script.
    Scripted(ScriptedSpec),
    /// The agent loop against an LLM provider (OpenAI-compatible or Anthropic), with tools.
    /// Shared: each run's adapter holds it (a run start clones no spec under the engine's lock).
    Llm(Arc<LlmSpec>),
    /// Any command, in its own process group.
    Process(ProcessSpec),
    /// The Claude Code CLI in print mode with JSON output; the task's session is resumed.
    ClaudeLocal(CodingCliSpec),
    /// `codex exec --json`; the task's session is resumed.
    CodexLocal(CodingCliSpec),
    /// A signed POST of the wakeup to a webhook.
    Http(WebhookSpec),
}

impl AdapterSpec {
    /// The adapter's wire name (`type`).
    pub fn kind(&self) -> &'static str {
        match self {
            AdapterSpec::Scripted(_) => "scripted",
            AdapterSpec::Llm(_) => "llm",
            AdapterSpec::Process(_) => "process",
            AdapterSpec::ClaudeLocal(_) => "claude_local",
            AdapterSpec::CodexLocal(_) => "codex_local",
            AdapterSpec::Http(_) => "http",
        }
    }

    /// The node environment variables whose values a run of this adapter must never write
    /// anywhere (API keys, child secrets, signing keys).
    pub fn secret_env_names(&self) -> Vec<&str> {
        match self {
            AdapterSpec::Scripted(_) => Vec::new(),
            AdapterSpec::Llm(llm) => llm.api_key_env.as_deref().into_iter().collect(),
            AdapterSpec::Process(process) => {
                process.child.secret_env.values().map(String::as_str).collect()
            }
            AdapterSpec::ClaudeLocal(cli) | AdapterSpec::CodexLocal(cli) => {
                cli.child.secret_env.values().map(String::as_str).collect()
            }
            AdapterSpec::Http(hook) => vec![hook.secret_env.as_str()],
        }
    }
}

impl Default for AdapterSpec {
    fn default() -> Self {
        AdapterSpec::Scripted(ScriptedSpec {
            steps: vec![ScriptStep {
                duration_ms: 1_000,
                outcome: ScriptOutcome::Succeeded,
            }],
        })
    }
}

/// A script of run outcomes: run number `n` plays step `n % steps.len()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedSpec {
    pub steps: Vec<ScriptStep>,
}

/// One scripted run: how long it takes and how it ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptStep {
    pub duration_ms: u64,
    pub outcome: ScriptOutcome,
}

/// How a scripted run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScriptOutcome {
    Succeeded,
    /// The model call fails (an LLM failure for the breaker).
    Failed,
    /// A tool fails (a tool failure for the breaker).
    ToolFailed,
    /// Never ends by itself: only the run timeout or a cancel ends it.
    Hang,
}

/// When the agent is woken without being asked, and which wakeup sources it accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatPolicy {
    /// Timer period in milliseconds; none means no timer wakeups.
    #[serde(default)]
    pub interval_ms: Option<u64>,
    /// The idle chamber: an `idle` wakeup after this long without user input (and again every
    /// `idle_after_ms` while none comes); none means no idle wakeups.
    #[serde(default)]
    pub idle_after_ms: Option<u64>,
    /// Wakeup sources this agent accepts; others are refused with `disabled_source`.
    #[serde(default = "WakeupSource::all")]
    pub sources: Vec<WakeupSource>,
    /// What non-routine wakeups do while a timed pause is in force.
    #[serde(default)]
    pub while_paused: WhilePaused,
}

impl Default for HeartbeatPolicy {
    fn default() -> Self {
        HeartbeatPolicy {
            interval_ms: None,
            idle_after_ms: None,
            sources: WakeupSource::all(),
            while_paused: WhilePaused::default(),
        }
    }
}

/// Per-agent limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentLimits {
    /// A run still going after this long ends `timed_out`.
    #[serde(default = "run_timeout_default")]
    pub run_timeout_ms: u64,
    /// Most runs waiting to start; a wakeup that would queue one more is refused `queue_full`.
    #[serde(default = "queued_runs_default")]
    pub queued_runs_max: usize,
    /// Most runs started per local day (in `time_zone`); none means no cap.
    #[serde(default)]
    pub daily_cap: Option<u32>,
    /// Most dollars the agent's model calls may cost per local day (by the node's price
    /// table); none means no budget. A wakeup once it is spent is refused `budget`; a running
    /// loop stops before its next model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_budget_usd: Option<MicroUsd>,
    /// The next run starts no sooner than this after the previous one ended (0: at once).
    /// Wakeups meanwhile queue or coalesce as usual; the timer grid does not move.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cooldown_ms: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn run_timeout_default() -> u64 {
    RUN_TIMEOUT_MS_DEFAULT
}

fn queued_runs_default() -> usize {
    QUEUED_RUNS_MAX_DEFAULT
}

impl Default for AgentLimits {
    fn default() -> Self {
        AgentLimits {
            run_timeout_ms: RUN_TIMEOUT_MS_DEFAULT,
            queued_runs_max: QUEUED_RUNS_MAX_DEFAULT,
            daily_cap: None,
            daily_budget_usd: None,
            cooldown_ms: 0,
        }
    }
}

/// A caller's mistake, naming the offending field (dotted path, as in the JSON body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The JSON field at fault (built at run time for list items: `adapter.tools[2].url`).
    pub field: std::borrow::Cow<'static, str>,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<std::borrow::Cow<'static, str>>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl AgentSpec {
    /// A spec with every default and a timer of `interval_ms`.
    pub fn with_interval(name: &str, interval_ms: Option<u64>) -> Self {
        AgentSpec {
            name: name.into(),
            adapter: AdapterSpec::default(),
            heartbeat: HeartbeatPolicy {
                interval_ms,
                ..HeartbeatPolicy::default()
            },
            time_zone: default_time_zone(),
            limits: AgentLimits::default(),
            breaker: BreakerPolicy::default(),
            liveness: LivenessPolicy::default(),
        }
    }

    /// Checks every field against its limit; the first problem found is returned.
    /// The adapter's own fields; a scripted adapter's steps.
    fn validate_adapter(&self) -> Result<(), FieldError> {
        let script = match &self.adapter {
            AdapterSpec::Scripted(script) => script,
            AdapterSpec::Llm(llm) => return llm.validate(),
            AdapterSpec::Process(process) => return process.validate(),
            AdapterSpec::ClaudeLocal(cli) => return cli.validate(false),
            AdapterSpec::CodexLocal(cli) => return cli.validate(true),
            AdapterSpec::Http(hook) => return hook.validate(),
        };
        if script.steps.is_empty() || script.steps.len() > SCRIPT_STEPS_MAX {
            return Err(FieldError::new(
                "adapter.steps",
                format!(
                    "a scripted adapter needs 1 to {SCRIPT_STEPS_MAX} steps (got {})",
                    script.steps.len()
                ),
            ));
        }
        if let Some(step) = script
            .steps
            .iter()
            .find(|s| s.duration_ms > SCRIPT_STEP_MS_MAX)
        {
            return Err(FieldError::new(
                "adapter.steps.duration_ms",
                format!(
                    "a step lasts at most {SCRIPT_STEP_MS_MAX} ms (got {})",
                    step.duration_ms
                ),
            ));
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), FieldError> {
        validate_name("name", &self.name, AGENT_NAME_CHARS_MAX)?;
        refuse_id_like_name(&self.name)?;
        self.validate_adapter()?;
        if let Some(interval_ms) = self.heartbeat.interval_ms {
            if !(INTERVAL_MS_MIN..=INTERVAL_MS_MAX).contains(&interval_ms) {
                return Err(FieldError::new(
                    "heartbeat.interval_ms",
                    format!(
                        "heartbeat.interval_ms must be between {INTERVAL_MS_MIN} and {INTERVAL_MS_MAX} (got {interval_ms})"
                    ),
                ));
            }
        }
        if let Some(idle_after_ms) = self.heartbeat.idle_after_ms {
            if !(INTERVAL_MS_MIN..=INTERVAL_MS_MAX).contains(&idle_after_ms) {
                return Err(FieldError::new(
                    "heartbeat.idle_after_ms",
                    format!(
                        "heartbeat.idle_after_ms must be between {INTERVAL_MS_MIN} and {INTERVAL_MS_MAX} (got {idle_after_ms})"
                    ),
                ));
            }
        }
        let mut sources = self.heartbeat.sources.clone();
        sources.sort();
        sources.dedup();
        if sources.len() != self.heartbeat.sources.len() {
            return Err(FieldError::new(
                "heartbeat.sources",
                "heartbeat.sources lists a source twice",
            ));
        }
        validate_time_zone(&self.time_zone)?;
        self.breaker.validate()?;
        self.liveness.validate()?;
        let limits = &self.limits;
        if !(RUN_TIMEOUT_MS_MIN..=RUN_TIMEOUT_MS_MAX).contains(&limits.run_timeout_ms) {
            return Err(FieldError::new(
                "limits.run_timeout_ms",
                format!(
                    "limits.run_timeout_ms must be between {RUN_TIMEOUT_MS_MIN} and {RUN_TIMEOUT_MS_MAX} (got {})",
                    limits.run_timeout_ms
                ),
            ));
        }
        if limits.cooldown_ms > COOLDOWN_MS_MAX {
            return Err(FieldError::new(
                "limits.cooldown_ms",
                format!(
                    "limits.cooldown_ms must be between 0 and {COOLDOWN_MS_MAX} (got {})",
                    limits.cooldown_ms
                ),
            ));
        }
        if !(1..=QUEUED_RUNS_MAX_LIMIT).contains(&limits.queued_runs_max) {
            return Err(FieldError::new(
                "limits.queued_runs_max",
                format!(
                    "limits.queued_runs_max must be between 1 and {QUEUED_RUNS_MAX_LIMIT} (got {})",
                    limits.queued_runs_max
                ),
            ));
        }
        if let Some(cap) = limits.daily_cap {
            if !(1..=DAILY_CAP_MAX).contains(&cap) {
                return Err(FieldError::new(
                    "limits.daily_cap",
                    format!("limits.daily_cap must be between 1 and {DAILY_CAP_MAX} (got {cap})"),
                ));
            }
        }
        if limits
            .daily_budget_usd
            .is_some_and(|b| b.0 > DAILY_BUDGET_USD_MAX * MICRO_USD_PER_USD)
        {
            return Err(FieldError::new(
                "limits.daily_budget_usd",
                format!("limits.daily_budget_usd must be between 0 and {DAILY_BUDGET_USD_MAX} dollars"),
            ));
        }
        Ok(())
    }
}

/// Refuses an all-digit name: `vigil agent show 12` and the API take an id or a name, so ids and
/// names must never collide.
fn refuse_id_like_name(name: &str) -> Result<(), FieldError> {
    if name.chars().all(|c| c.is_ascii_digit()) {
        return Err(FieldError::new(
            "name",
            format!("name must not be all digits (got {name:?}): agent ids are numbers, and ids and names must never collide; add a letter, e.g. \"agent-{name}\""),
        ));
    }
    Ok(())
}

/// Accepts IANA names from the bundled time-zone database (so every machine agrees).
fn validate_time_zone(name: &str) -> Result<(), FieldError> {
    let known =
        name.chars().count() <= TIME_ZONE_CHARS_MAX && jiff::tz::TimeZone::get(name).is_ok();
    if known {
        Ok(())
    } else {
        Err(FieldError::new(
            "time_zone",
            format!("time_zone must be an IANA time zone such as \"UTC\" or \"Europe/Paris\" (got {})", super::spec_error::echo(name)),
        ))
    }
}

/// Whether the agent takes wakeups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    Active,
    /// Refuses wakeups until resumed.
    Paused,
    /// Refuses wakeups for good.
    Terminated,
}

/// An agent as the engine holds it (its runs are kept beside it, in the coordinator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    pub id: AgentId,
    pub tenant: TenantName,
    pub name: String,
    /// Shared: the engine decides on a scratch copy of an agent (ADR 0005), and a spec (its tools,
    /// schemas and prompts) is the largest part of one; it changes only on an update.
    pub spec: Arc<AgentSpec>,
    pub status: AgentStatus,
    /// Hash of the agent's own token; the token itself is shown once, at creation.
    #[serde(skip)]
    pub token_hash: TokenHash,
    pub created_at_ms: u64,
    /// Wall time of the next timer slot, if the agent has a timer and is not terminated.
    pub next_fire_at_ms: Option<u64>,
    /// Timer wakeups fired so far.
    pub timer_fires: u64,
    /// Slot of the latest timer fire, if any.
    pub last_due_at_ms: Option<u64>,
    /// Runs started so far; the next run is number `runs_started`.
    pub runs_started: u64,
    /// While `Some` and ahead of the wall clock, a timed pause is in force.
    pub paused_until_ms: Option<u64>,
    /// Who asked for the current pause, if any.
    pub paused_by: Option<PausedBy>,
    /// Runs started on the latest counted local day (the daily cap's reservations).
    pub day_count: DayCount,
    /// Model usage on the latest local day that saw any (the daily budget's figure).
    #[serde(default)]
    pub day_spend: DaySpend,
    /// Model usage since the agent was created.
    #[serde(default)]
    pub usage_total: Usage,
    /// The circuit breaker.
    pub breaker: BreakerState,
    /// Online, offline or never pulsed.
    pub liveness: Liveness,
    /// Wall time of the last user input (`POST /v1/agents/{id}/input`), if any.
    pub last_input_at_ms: Option<u64>,
    /// Wall time of the next idle wakeup, if the agent has an idle chamber and is not terminated.
    pub next_idle_at_ms: Option<u64>,
    /// The wait after the last run's end (none without `limits.cooldown_ms`, and once a run
    /// has started since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<Cooldown>,
    /// Set while the agent is in the error state: every wakeup refused `agent_error`, no run
    /// started, until an operator resets it (`engine/agent_error.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AgentError>,
    /// The counts that lead to the error state.
    #[serde(default)]
    pub error_counts: ErrorCounts,
}

/// The wait between one run's end and the next start (`limits.cooldown_ms`), on the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cooldown {
    /// The run's end.
    pub from_ms: u64,
    /// The end plus the cooldown.
    pub until_ms: u64,
}

impl Cooldown {
    /// Whether it still holds at `now_ms`. A clock that reads before the run's end went back
    /// since: the engine cannot tell how long ago the run ended, and counts the cooldown as
    /// over rather than lengthening it by the jump (which may be hours).
    pub fn holds(&self, now_ms: u64) -> bool {
        self.from_ms <= now_ms && now_ms < self.until_ms
    }

    /// When `FireDueTimers` should next look at a queued run held by it: at its end, or at
    /// once when the clock went back past the run's end.
    pub fn due_at_ms(&self, now_ms: u64) -> u64 {
        if now_ms < self.from_ms {
            now_ms
        } else {
            self.until_ms
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, interval_ms: u64) -> AgentSpec {
        AgentSpec::with_interval(name, Some(interval_ms))
    }

    #[test]
    fn name_limits() {
        assert!(spec("a", 60_000).validate().is_ok());
        assert!(spec(&"x".repeat(AGENT_NAME_CHARS_MAX), 60_000)
            .validate()
            .is_ok());
        let too_long = spec(&"x".repeat(AGENT_NAME_CHARS_MAX + 1), 60_000).validate();
        assert_eq!(too_long.unwrap_err().field, "name");
        assert_eq!(spec("", 60_000).validate().unwrap_err().field, "name");
        assert_eq!(
            spec("has space", 60_000).validate().unwrap_err().field,
            "name"
        );
    }

    #[test]
    fn all_digit_names_are_refused_so_ids_and_names_never_collide() {
        let refused = spec("12", 60_000).validate().unwrap_err();
        assert_eq!(refused.field, "name");
        assert!(refused.message.contains("never collide"), "{}", refused.message);
        assert!(spec("0", 60_000).validate().is_err());
        for accepted in ["12a", "a12", "1.2", "1-2"] {
            assert!(spec(accepted, 60_000).validate().is_ok(), "{accepted} refused");
        }
    }

    #[test]
    fn interval_limits() {
        assert!(spec("a", INTERVAL_MS_MIN).validate().is_ok());
        assert!(spec("a", INTERVAL_MS_MAX).validate().is_ok());
        assert!(AgentSpec::with_interval("a", None).validate().is_ok());
        for bad in [INTERVAL_MS_MIN - 1, INTERVAL_MS_MAX + 1] {
            assert_eq!(
                spec("a", bad).validate().unwrap_err().field,
                "heartbeat.interval_ms"
            );
        }
    }

    #[test]
    fn idle_after_limits() {
        let mut s = spec("a", 60_000);
        for (ms, ok) in [
            (INTERVAL_MS_MIN - 1, false),
            (INTERVAL_MS_MIN, true),
            (INTERVAL_MS_MAX, true),
            (INTERVAL_MS_MAX + 1, false),
        ] {
            s.heartbeat.idle_after_ms = Some(ms);
            match s.validate() {
                Ok(()) => assert!(ok, "{ms} accepted"),
                Err(e) => {
                    assert!(!ok, "{ms} refused");
                    assert_eq!(e.field, "heartbeat.idle_after_ms");
                }
            }
        }
        s.heartbeat.idle_after_ms = None;
        s.liveness.offline_after_misses = 0;
        assert_eq!(
            s.validate().unwrap_err().field,
            "liveness.offline_after_misses"
        );
    }

    #[test]
    fn policy_limits_name_their_field() {
        let mut s = spec("a", 60_000);
        s.time_zone = "Europe/Paris".into();
        assert!(s.validate().is_ok());
        s.time_zone = "Mars/Olympus".into();
        assert_eq!(s.validate().unwrap_err().field, "time_zone");

        let mut s = spec("a", 60_000);
        s.limits.run_timeout_ms = RUN_TIMEOUT_MS_MIN - 1;
        assert_eq!(s.validate().unwrap_err().field, "limits.run_timeout_ms");
        s.limits.run_timeout_ms = RUN_TIMEOUT_MS_MAX;
        assert!(s.validate().is_ok());

        let mut s = spec("a", 60_000);
        s.limits.cooldown_ms = COOLDOWN_MS_MAX;
        s.validate().expect("the longest cooldown is allowed");
        s.limits.cooldown_ms = COOLDOWN_MS_MAX + 1;
        assert_eq!(s.validate().unwrap_err().field, "limits.cooldown_ms");
        s.limits.cooldown_ms = 0;
        s.limits.queued_runs_max = 0;
        assert_eq!(s.validate().unwrap_err().field, "limits.queued_runs_max");
        s.limits.queued_runs_max = QUEUED_RUNS_MAX_LIMIT + 1;
        assert_eq!(s.validate().unwrap_err().field, "limits.queued_runs_max");

        let mut s = spec("a", 60_000);
        s.limits.daily_cap = Some(0);
        assert_eq!(s.validate().unwrap_err().field, "limits.daily_cap");
        s.limits.daily_cap = Some(DAILY_CAP_MAX + 1);
        assert_eq!(s.validate().unwrap_err().field, "limits.daily_cap");
        s.limits.daily_cap = Some(48);
        assert!(s.validate().is_ok());

        let mut s = spec("a", 60_000);
        s.adapter = AdapterSpec::Scripted(ScriptedSpec { steps: vec![] });
        assert_eq!(s.validate().unwrap_err().field, "adapter.steps");

        let mut s = spec("a", 60_000);
        s.heartbeat.sources = vec![WakeupSource::Timer, WakeupSource::Timer];
        assert_eq!(s.validate().unwrap_err().field, "heartbeat.sources");
    }

    #[test]
    fn specs_parse_with_defaults_and_refuse_unknown_fields() {
        let parsed: AgentSpec = serde_json::from_str(r#"{"name":"a"}"#).unwrap();
        assert_eq!(parsed, AgentSpec::with_interval("a", None));
        let full = r#"{"name":"a","adapter":{"type":"scripted","steps":[{"duration_ms":5,"outcome":"hang"}]},
            "heartbeat":{"interval_ms":60000,"sources":["on_demand"]},"time_zone":"Asia/Tokyo",
            "limits":{"run_timeout_ms":5000,"queued_runs_max":2}}"#;
        let parsed: AgentSpec = serde_json::from_str(full).unwrap();
        assert!(parsed.validate().is_ok());
        assert!(serde_json::from_str::<AgentSpec>(
            r#"{"name":"a","adapter":{"type":"scripted","steps":[],"x":1}}"#
        )
        .is_err());
        assert!(
            serde_json::from_str::<AgentSpec>(r#"{"name":"a","adapter":{"type":"gpt"}}"#).is_err()
        );
    }
}
