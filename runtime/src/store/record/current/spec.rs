//! The stored agent spec (formats 1 and 2), as `agent_created` stores it.
//!
//! It mirrors the engine's `AgentSpec` in shape (the same JSON for the same spec), but it is not
//! the engine's type: the API's spec refuses unknown fields and fills absent ones with *today's*
//! defaults, while a stored spec must mean forever what it meant when it was written. So an
//! absent field here takes format 1's value, pinned below as a literal (never the engine's
//! constant, which a later version may change), and a field the engine drops later still reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::values::{
    micro_usd_of, usd_of, Detector, ScriptOutcome, WakeupSource, WebhookMode, WhilePaused,
    WireShape,
};
use crate::engine::{agent, breaker, cli_spec, liveness, llm_spec, prompt, tool_spec};

/// What an absent field meant when format 1 was written. Never change these: a database written
/// without the field depends on them. (Today's writer writes every one of these fields; they
/// are absent only in logs from before the field existed.)
mod pinned {
    use super::WakeupSource;

    pub fn time_zone() -> String {
        "UTC".into()
    }
    pub fn sources() -> Vec<WakeupSource> {
        use WakeupSource::*;
        vec![Timer, Idle, Assignment, OnDemand, Automation, Predicate]
    }
    pub fn run_timeout_ms() -> u64 {
        600_000
    }
    pub fn queued_runs_max() -> u64 {
        16
    }
    pub fn llm_request_timeout_ms() -> u64 {
        60_000
    }
    pub fn max_iterations() -> u32 {
        5
    }
    pub fn tool_calls_max() -> u32 {
        5
    }
    pub fn max_output_tokens() -> u32 {
        1_024
    }
    pub fn tool_timeout_ms() -> u64 {
        10_000
    }
    pub fn tool_response_bytes_max() -> u64 {
        64 * 1024
    }
    pub fn child_timeout_sec() -> u64 {
        600
    }
    pub fn child_grace_sec() -> u64 {
        10
    }
    pub fn webhook_timeout_ms() -> u64 {
        30_000
    }
    pub fn webhook_report_wait_sec() -> u64 {
        600
    }
    pub fn pulse_interval_ms() -> u64 {
        10_000
    }
    pub fn offline_after_misses() -> u32 {
        3
    }
    pub fn phi_threshold() -> u32 {
        8
    }
    pub fn failures_to_open() -> u32 {
        3
    }
    pub fn breaker_cooldown_ms() -> u64 {
        15 * 60 * 1_000
    }
    pub fn breaker_cooldown_ms_max() -> u64 {
        2 * 60 * 60 * 1_000
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// A registered agent's spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSpec {
    pub name: String,
    #[serde(default)]
    pub adapter: Option<AdapterSpec>,
    #[serde(default)]
    pub heartbeat: Option<HeartbeatPolicy>,
    #[serde(default = "pinned::time_zone")]
    pub time_zone: String,
    #[serde(default)]
    pub limits: Option<AgentLimits>,
    #[serde(default)]
    pub breaker: Option<BreakerPolicy>,
    #[serde(default)]
    pub liveness: Option<LivenessPolicy>,
}

/// How runs are executed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AdapterSpec {
    Scripted(ScriptedSpec),
    Llm(LlmSpec),
    Process(ProcessSpec),
    ClaudeLocal(CodingCliSpec),
    CodexLocal(CodingCliSpec),
    Http(WebhookSpec),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptedSpec {
    pub steps: Vec<ScriptStep>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptStep {
    pub duration_ms: u64,
    pub outcome: ScriptOutcome,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmSpec {
    #[serde(default)]
    pub api: Option<WireShape>,
    pub base_url: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(default = "pinned::llm_request_timeout_ms")]
    pub request_timeout_ms: u64,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default = "pinned::max_iterations")]
    pub max_iterations: u32,
    #[serde(default = "pinned::tool_calls_max")]
    pub tool_calls_max: u32,
    #[serde(default = "pinned::max_output_tokens")]
    pub max_output_tokens: u32,
    #[serde(default, skip_serializing_if = "PromptSpec::is_empty")]
    pub prompts: PromptSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<HttpToolSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptSpec {
    #[serde(default)]
    pub system: Option<String>,
    #[serde(default)]
    pub wakeup: BTreeMap<String, String>,
}

impl PromptSpec {
    fn is_empty(&self) -> bool {
        self.system.is_none() && self.wakeup.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub url: String,
    #[serde(default = "pinned::tool_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "pinned::tool_response_bytes_max")]
    pub response_bytes_max: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSpec {
    pub command: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(flatten)]
    pub child: ChildSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, String>,
    #[serde(default = "pinned::child_timeout_sec")]
    pub timeout_sec: u64,
    #[serde(default = "pinned::child_grace_sec")]
    pub grace_sec: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodingCliSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(flatten)]
    pub child: ChildSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookSpec {
    pub url: String,
    pub secret_env: String,
    #[serde(default)]
    pub mode: Option<WebhookMode>,
    #[serde(default = "pinned::webhook_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "pinned::webhook_report_wait_sec")]
    pub report_wait_sec: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatPolicy {
    #[serde(default)]
    pub interval_ms: Option<u64>,
    #[serde(default)]
    pub idle_after_ms: Option<u64>,
    #[serde(default = "pinned::sources")]
    pub sources: Vec<WakeupSource>,
    #[serde(default)]
    pub while_paused: Option<WhilePaused>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentLimits {
    #[serde(default = "pinned::run_timeout_ms")]
    pub run_timeout_ms: u64,
    #[serde(default = "pinned::queued_runs_max")]
    pub queued_runs_max: u64,
    #[serde(default)]
    pub daily_cap: Option<u32>,
    /// Dollars, as format 1 writes money.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_budget_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cooldown_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakerPolicy {
    #[serde(default = "pinned::failures_to_open")]
    pub failures_to_open: u32,
    #[serde(default = "pinned::breaker_cooldown_ms")]
    pub cooldown_ms: u64,
    #[serde(default = "pinned::breaker_cooldown_ms_max")]
    pub cooldown_ms_max: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LivenessPolicy {
    #[serde(default = "pinned::pulse_interval_ms")]
    pub pulse_interval_ms: u64,
    #[serde(default = "pinned::offline_after_misses")]
    pub offline_after_misses: u32,
    #[serde(default)]
    pub detector: Option<Detector>,
    #[serde(default = "pinned::phi_threshold")]
    pub phi_threshold: u32,
    #[serde(default, skip_serializing_if = "is_false")]
    pub passive_pulses: bool,
}

// ---- engine -> stored (infallible: every engine spec has a format-1 form) ----

impl From<&agent::AgentSpec> for AgentSpec {
    fn from(spec: &agent::AgentSpec) -> Self {
        AgentSpec {
            name: spec.name.clone(),
            adapter: Some((&spec.adapter).into()),
            heartbeat: Some(HeartbeatPolicy {
                interval_ms: spec.heartbeat.interval_ms,
                idle_after_ms: spec.heartbeat.idle_after_ms,
                sources: spec.heartbeat.sources.iter().map(|s| (*s).into()).collect(),
                while_paused: Some(spec.heartbeat.while_paused.into()),
            }),
            time_zone: spec.time_zone.clone(),
            limits: Some(AgentLimits {
                run_timeout_ms: spec.limits.run_timeout_ms,
                queued_runs_max: spec.limits.queued_runs_max as u64,
                daily_cap: spec.limits.daily_cap,
                daily_budget_usd: spec.limits.daily_budget_usd.map(usd_of),
                cooldown_ms: spec.limits.cooldown_ms,
            }),
            breaker: Some(BreakerPolicy {
                failures_to_open: spec.breaker.failures_to_open,
                cooldown_ms: spec.breaker.cooldown_ms,
                cooldown_ms_max: spec.breaker.cooldown_ms_max,
            }),
            liveness: Some(LivenessPolicy {
                pulse_interval_ms: spec.liveness.pulse_interval_ms,
                offline_after_misses: spec.liveness.offline_after_misses,
                detector: Some(spec.liveness.detector.into()),
                phi_threshold: spec.liveness.phi_threshold,
                passive_pulses: spec.liveness.passive_pulses,
            }),
        }
    }
}

impl From<&agent::AdapterSpec> for AdapterSpec {
    fn from(adapter: &agent::AdapterSpec) -> Self {
        match adapter {
            agent::AdapterSpec::Scripted(scripted) => AdapterSpec::Scripted(ScriptedSpec {
                steps: scripted
                    .steps
                    .iter()
                    .map(|step| ScriptStep {
                        duration_ms: step.duration_ms,
                        outcome: step.outcome.into(),
                    })
                    .collect(),
            }),
            agent::AdapterSpec::Llm(llm) => AdapterSpec::Llm(llm.as_ref().into()),
            agent::AdapterSpec::Process(process) => AdapterSpec::Process(ProcessSpec {
                command: process.command.clone(),
                args: process.args.clone(),
                stdin: process.stdin.clone(),
                child: (&process.child).into(),
            }),
            agent::AdapterSpec::ClaudeLocal(cli) => AdapterSpec::ClaudeLocal(cli.into()),
            agent::AdapterSpec::CodexLocal(cli) => AdapterSpec::CodexLocal(cli.into()),
            agent::AdapterSpec::Http(hook) => AdapterSpec::Http(WebhookSpec {
                url: hook.url.clone(),
                secret_env: hook.secret_env.clone(),
                mode: Some(hook.mode.into()),
                timeout_ms: hook.timeout_ms,
                report_wait_sec: hook.report_wait_sec,
            }),
        }
    }
}

impl From<&llm_spec::LlmSpec> for LlmSpec {
    fn from(llm: &llm_spec::LlmSpec) -> Self {
        LlmSpec {
            api: Some(llm.api.into()),
            base_url: llm.base_url.clone(),
            model: llm.model.clone(),
            api_key_env: llm.api_key_env.clone(),
            request_timeout_ms: llm.request_timeout_ms,
            system_prompt: llm.system_prompt.clone(),
            max_iterations: llm.max_iterations,
            tool_calls_max: llm.tool_calls_max,
            max_output_tokens: llm.max_output_tokens,
            prompts: PromptSpec {
                system: llm.prompts.system.clone(),
                wakeup: llm.prompts.wakeup.clone(),
            },
            tools: llm
                .tools
                .iter()
                .map(|tool| HttpToolSpec {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    parameters: tool.parameters.clone(),
                    url: tool.url.clone(),
                    timeout_ms: tool.timeout_ms,
                    response_bytes_max: tool.response_bytes_max,
                })
                .collect(),
        }
    }
}

impl From<&cli_spec::ChildSpec> for ChildSpec {
    fn from(child: &cli_spec::ChildSpec) -> Self {
        ChildSpec {
            cwd: child.cwd.clone(),
            env: child.env.clone(),
            secret_env: child.secret_env.clone(),
            timeout_sec: child.timeout_sec,
            grace_sec: child.grace_sec,
        }
    }
}

impl From<&cli_spec::CodingCliSpec> for CodingCliSpec {
    fn from(cli: &cli_spec::CodingCliSpec) -> Self {
        CodingCliSpec {
            binary: cli.binary.clone(),
            model: cli.model.clone(),
            max_turns: cli.max_turns,
            extra_args: cli.extra_args.clone(),
            prompt: cli.prompt.clone(),
            child: (&cli.child).into(),
        }
    }
}

// ---- stored -> engine (checked: a stored value the engine cannot hold is refused by name) ----

/// A stored spec the engine cannot take, with the field's path.
pub type SpecProblem = (String, String);

impl AgentSpec {
    /// The engine's spec. Refuses what would make replay panic later: an unknown time zone, an
    /// amount that is not money.
    pub fn into_engine(self) -> Result<agent::AgentSpec, SpecProblem> {
        if jiff::tz::TimeZone::get(&self.time_zone).is_err() {
            return Err((
                "spec.time_zone".into(),
                format!("unknown time zone {:?}", self.time_zone),
            ));
        }
        let limits = match self.limits {
            Some(limits) => agent::AgentLimits {
                run_timeout_ms: limits.run_timeout_ms,
                queued_runs_max: usize::try_from(limits.queued_runs_max).map_err(|_| {
                    (
                        "spec.limits.queued_runs_max".to_string(),
                        format!("{} does not fit this machine", limits.queued_runs_max),
                    )
                })?,
                daily_cap: limits.daily_cap,
                daily_budget_usd: limits
                    .daily_budget_usd
                    .map(micro_usd_of)
                    .transpose()
                    .map_err(|message| ("spec.limits.daily_budget_usd".to_string(), message))?,
                cooldown_ms: limits.cooldown_ms,
            },
            None => agent::AgentLimits {
                run_timeout_ms: pinned::run_timeout_ms(),
                queued_runs_max: pinned::queued_runs_max() as usize,
                daily_cap: None,
                daily_budget_usd: None,
                cooldown_ms: 0,
            },
        };
        Ok(agent::AgentSpec {
            name: self.name,
            adapter: self.adapter.map_or_else(pinned_adapter, Into::into),
            heartbeat: self.heartbeat.map_or_else(pinned_heartbeat, Into::into),
            time_zone: self.time_zone,
            limits,
            breaker: self.breaker.map_or_else(pinned_breaker, Into::into),
            liveness: self.liveness.map_or_else(pinned_liveness, Into::into),
        })
    }
}

/// Format 1's adapter when a spec names none: one scripted step of a second that succeeds.
fn pinned_adapter() -> agent::AdapterSpec {
    agent::AdapterSpec::Scripted(agent::ScriptedSpec {
        steps: vec![agent::ScriptStep {
            duration_ms: 1_000,
            outcome: agent::ScriptOutcome::Succeeded,
        }],
    })
}

fn pinned_heartbeat() -> agent::HeartbeatPolicy {
    HeartbeatPolicy {
        interval_ms: None,
        idle_after_ms: None,
        sources: pinned::sources(),
        while_paused: None,
    }
    .into()
}

fn pinned_breaker() -> breaker::BreakerPolicy {
    breaker::BreakerPolicy {
        failures_to_open: pinned::failures_to_open(),
        cooldown_ms: pinned::breaker_cooldown_ms(),
        cooldown_ms_max: pinned::breaker_cooldown_ms_max(),
    }
}

fn pinned_liveness() -> liveness::LivenessPolicy {
    liveness::LivenessPolicy {
        pulse_interval_ms: pinned::pulse_interval_ms(),
        offline_after_misses: pinned::offline_after_misses(),
        detector: liveness::Detector::Fixed,
        phi_threshold: pinned::phi_threshold(),
        passive_pulses: false,
    }
}

impl From<HeartbeatPolicy> for agent::HeartbeatPolicy {
    fn from(policy: HeartbeatPolicy) -> Self {
        agent::HeartbeatPolicy {
            interval_ms: policy.interval_ms,
            idle_after_ms: policy.idle_after_ms,
            sources: policy.sources.into_iter().map(Into::into).collect(),
            while_paused: policy
                .while_paused
                .unwrap_or(WhilePaused::AllowOnDemand)
                .into(),
        }
    }
}

impl From<BreakerPolicy> for breaker::BreakerPolicy {
    fn from(policy: BreakerPolicy) -> Self {
        breaker::BreakerPolicy {
            failures_to_open: policy.failures_to_open,
            cooldown_ms: policy.cooldown_ms,
            cooldown_ms_max: policy.cooldown_ms_max,
        }
    }
}

impl From<LivenessPolicy> for liveness::LivenessPolicy {
    fn from(policy: LivenessPolicy) -> Self {
        liveness::LivenessPolicy {
            pulse_interval_ms: policy.pulse_interval_ms,
            offline_after_misses: policy.offline_after_misses,
            detector: policy.detector.unwrap_or(Detector::Fixed).into(),
            phi_threshold: policy.phi_threshold,
            passive_pulses: policy.passive_pulses,
        }
    }
}

impl From<AdapterSpec> for agent::AdapterSpec {
    fn from(adapter: AdapterSpec) -> Self {
        match adapter {
            AdapterSpec::Scripted(scripted) => agent::AdapterSpec::Scripted(agent::ScriptedSpec {
                steps: scripted
                    .steps
                    .into_iter()
                    .map(|step| agent::ScriptStep {
                        duration_ms: step.duration_ms,
                        outcome: step.outcome.into(),
                    })
                    .collect(),
            }),
            AdapterSpec::Llm(llm) => agent::AdapterSpec::Llm(std::sync::Arc::new(llm.into())),
            AdapterSpec::Process(process) => agent::AdapterSpec::Process(cli_spec::ProcessSpec {
                command: process.command,
                args: process.args,
                stdin: process.stdin,
                child: process.child.into(),
            }),
            AdapterSpec::ClaudeLocal(cli) => agent::AdapterSpec::ClaudeLocal(cli.into()),
            AdapterSpec::CodexLocal(cli) => agent::AdapterSpec::CodexLocal(cli.into()),
            AdapterSpec::Http(hook) => agent::AdapterSpec::Http(cli_spec::WebhookSpec {
                url: hook.url,
                secret_env: hook.secret_env,
                mode: hook.mode.unwrap_or(WebhookMode::Sync).into(),
                timeout_ms: hook.timeout_ms,
                report_wait_sec: hook.report_wait_sec,
            }),
        }
    }
}

impl From<LlmSpec> for llm_spec::LlmSpec {
    fn from(llm: LlmSpec) -> Self {
        llm_spec::LlmSpec {
            api: llm.api.unwrap_or(WireShape::Openai).into(),
            base_url: llm.base_url,
            model: llm.model,
            api_key_env: llm.api_key_env,
            request_timeout_ms: llm.request_timeout_ms,
            system_prompt: llm.system_prompt,
            max_iterations: llm.max_iterations,
            tool_calls_max: llm.tool_calls_max,
            max_output_tokens: llm.max_output_tokens,
            prompts: prompt::PromptSpec {
                system: llm.prompts.system,
                wakeup: llm.prompts.wakeup,
            },
            tools: llm
                .tools
                .into_iter()
                .map(|tool| tool_spec::HttpToolSpec {
                    name: tool.name,
                    description: tool.description,
                    parameters: tool.parameters,
                    url: tool.url,
                    timeout_ms: tool.timeout_ms,
                    response_bytes_max: tool.response_bytes_max,
                })
                .collect(),
        }
    }
}

impl From<ChildSpec> for cli_spec::ChildSpec {
    fn from(child: ChildSpec) -> Self {
        cli_spec::ChildSpec {
            cwd: child.cwd,
            env: child.env,
            secret_env: child.secret_env,
            timeout_sec: child.timeout_sec,
            grace_sec: child.grace_sec,
        }
    }
}

impl From<CodingCliSpec> for cli_spec::CodingCliSpec {
    fn from(cli: CodingCliSpec) -> Self {
        cli_spec::CodingCliSpec {
            binary: cli.binary,
            model: cli.model,
            max_turns: cli.max_turns,
            extra_args: cli.extra_args,
            prompt: cli.prompt,
            child: cli.child.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Format 1's values, written out here once more: a stored spec written before a field
    /// existed must read the same forever, so a change of a pinned value must fail a test.
    #[test]
    fn absent_fields_read_as_format_1_wrote_them() {
        let spec: AgentSpec = serde_json::from_value(json!({
            "name": "old",
            "heartbeat": {},
            "limits": {},
            "breaker": {},
            "liveness": {},
        }))
        .unwrap();
        assert_eq!(spec.time_zone, "UTC");
        let heartbeat = spec.heartbeat.unwrap();
        assert_eq!(heartbeat.sources.len(), 6, "{:?}", heartbeat.sources);
        let limits = spec.limits.unwrap();
        assert_eq!((limits.run_timeout_ms, limits.queued_runs_max), (600_000, 16));
        let breaker = spec.breaker.unwrap();
        assert_eq!(
            (breaker.failures_to_open, breaker.cooldown_ms, breaker.cooldown_ms_max),
            (3, 900_000, 7_200_000)
        );
        let liveness = spec.liveness.unwrap();
        assert_eq!(
            (liveness.pulse_interval_ms, liveness.offline_after_misses, liveness.phi_threshold),
            (10_000, 3, 8)
        );

        let adapter = |value| serde_json::from_value::<AdapterSpec>(value).unwrap();
        let AdapterSpec::Process(process) = adapter(json!({"type": "process", "command": "x"}))
        else {
            panic!("a process adapter");
        };
        assert_eq!((process.child.timeout_sec, process.child.grace_sec), (600, 10));
        let AdapterSpec::Llm(llm) = adapter(json!({
            "type": "llm", "base_url": "https://p.example/v1", "model": "m",
            "tools": [{"name": "t", "description": "d", "parameters": {}, "url": "https://t.example/"}],
        })) else {
            panic!("an llm adapter");
        };
        assert_eq!(
            (llm.request_timeout_ms, llm.max_iterations, llm.tool_calls_max, llm.max_output_tokens),
            (60_000, 5, 5, 1_024)
        );
        assert_eq!(
            (llm.tools[0].timeout_ms, llm.tools[0].response_bytes_max),
            (10_000, 65_536)
        );
        let AdapterSpec::Http(webhook) =
            adapter(json!({"type": "http", "url": "https://w.example/", "secret_env": "K"}))
        else {
            panic!("a webhook adapter");
        };
        assert_eq!((webhook.timeout_ms, webhook.report_wait_sec), (30_000, 600));
    }
}
