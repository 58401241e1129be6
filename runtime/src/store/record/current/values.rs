//! The stored small values (formats 1 to 4): the named states and reasons events carry, a run's report, a
//! pulse's report, usage. Each mirrors an engine type field for field and name for name, with
//! conversions both ways; the match in each conversion is exhaustive, so a new engine variant
//! does not compile until someone decides how it is stored (and bumps the format).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::engine::{
    agent, agent_error, breaker, cli_spec, history, liveness, llm_spec, pause, pulse_report, run,
    tenant, usage, wakeup,
};

/// A stored enum of plain snake_case names and its conversions to and from its engine twin.
macro_rules! stored_names {
    ($(#[$meta:meta])* $stored:ident <=> $module:ident :: $engine:ident { $($variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $stored {
            $($variant),+
        }

        impl From<$module::$engine> for $stored {
            fn from(value: $module::$engine) -> Self {
                match value {
                    $($module::$engine::$variant => $stored::$variant),+
                }
            }
        }

        impl From<$stored> for $module::$engine {
            fn from(value: $stored) -> Self {
                match value {
                    $($stored::$variant => $module::$engine::$variant),+
                }
            }
        }
    };
}

stored_names!(ScriptOutcome <=> agent::ScriptOutcome { Succeeded, Failed, ToolFailed, Hang });
stored_names!(WireShape <=> llm_spec::WireShape { Openai, Anthropic });
stored_names!(WebhookMode <=> cli_spec::WebhookMode { Sync, Async });
stored_names!(Detector <=> liveness::Detector { Fixed, PhiAccrual });
stored_names!(WhilePaused <=> pause::WhilePaused { AllowOnDemand, RefuseAll });
stored_names!(PausedBy <=> pause::PausedBy { Operator, Agent });
stored_names!(TokenSetBy <=> tenant::TokenSetBy { Configuration, Operator });
stored_names!(FailureCause <=> breaker::FailureCause { Llm, Tool });
stored_names!(AgentErrorReason <=> agent_error::AgentErrorReason { RestartLoop, BreakerAtCap });
stored_names!(ReportedStatus <=> pulse_report::ReportedStatus {
    Active,
    Busy,
    Idle,
    ShuttingDown,
});
stored_names!(Role <=> history::Role { User, Assistant });
stored_names!(WakeupSource <=> wakeup::WakeupSource {
    Timer,
    Idle,
    Assignment,
    OnDemand,
    Automation,
    Predicate,
});
stored_names!(RequestedBy <=> wakeup::RequestedBy {
    Operator,
    Agent,
    Timer,
    Idle,
    Predicate,
    FleetFile,
});
stored_names!(RefusalReason <=> wakeup::RefusalReason {
    Paused,
    Terminated,
    DisabledSource,
    QueueFull,
    DailyCap,
    BreakerOpen,
    Budget,
    AgentError,
});
// Format 4 (snapshots).
stored_names!(AgentStatus <=> agent::AgentStatus { Active, Paused, Terminated });
stored_names!(LivenessStatus <=> liveness::LivenessStatus { Unknown, Online, Offline });
stored_names!(Priority <=> wakeup::Priority { OnDemand, Assignment, Routine });
stored_names!(RunStatus <=> run::RunStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
});
stored_names!(StopReason <=> run::StopReason {
    EndTurn,
    PauseHeartbeats,
    MaxIterations,
    ToolCap,
    Budget,
    LlmError,
    ToolError,
    Ghost,
    Cancelled,
    TimedOut,
    ControlPlaneRestart,
});
stored_names!(ErrorClass <=> run::ErrorClass {
    AdapterNotInstalled,
    SpawnFailed,
    ExitNonzero,
    TimedOut,
    Cancelled,
    SessionInvalid,
    ParseError,
    Budget,
    ControlPlaneRestart,
    LlmError,
    ToolError,
    WebhookError,
    AdapterError,
});

/// Format 1 keeps an amount of money as a number of dollars (`2.5`); the engine keeps an exact
/// count of micro-dollars. Every amount the engine writes comes back exactly: a micro-dollar
/// count below 2^53 survives the division and the rounded multiplication.
pub fn usd_of(amount: usage::MicroUsd) -> f64 {
    amount.usd()
}

/// The engine's amount for a stored number of dollars, if it is one.
pub fn micro_usd_of(usd: f64) -> Result<usage::MicroUsd, String> {
    usage::MicroUsd::from_usd(usd, u64::MAX / usage::MICRO_USD_PER_USD)
        .ok_or_else(|| format!("an amount in dollars must be a finite number >= 0 (got {usd})"))
}

/// Tokens and money of one or more model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub llm_calls: u64,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cost_micro_usd: u64,
}

impl From<&usage::Usage> for Usage {
    fn from(value: &usage::Usage) -> Self {
        Usage {
            llm_calls: value.llm_calls,
            input_tokens: value.input_tokens,
            cached_input_tokens: value.cached_input_tokens,
            output_tokens: value.output_tokens,
            cost_micro_usd: value.cost_micro_usd,
        }
    }
}

impl From<Usage> for usage::Usage {
    fn from(value: Usage) -> Self {
        usage::Usage {
            llm_calls: value.llm_calls,
            input_tokens: value.input_tokens,
            cached_input_tokens: value.cached_input_tokens,
            output_tokens: value.output_tokens,
            cost_micro_usd: value.cost_micro_usd,
        }
    }
}

/// What an agent's pulses said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PulseReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ReportedStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl PulseReport {
    pub fn is_empty(&self) -> bool {
        self.status.is_none() && self.metadata.is_none()
    }
}

impl From<&pulse_report::PulseReport> for PulseReport {
    fn from(value: &pulse_report::PulseReport) -> Self {
        PulseReport {
            status: value.status.map(Into::into),
            metadata: value.metadata.clone(),
        }
    }
}

impl From<PulseReport> for pulse_report::PulseReport {
    fn from(value: PulseReport) -> Self {
        pulse_report::PulseReport {
            status: value.status.map(Into::into),
            metadata: value.metadata,
        }
    }
}

/// One turn of an agent's conversation history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryMessage {
    pub role: Role,
    pub text: String,
}

/// What a run did to its task's coding-CLI session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SessionChange {
    Set { session_id: String },
    Clear,
}

/// How a run's child process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildExit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// What an ended run reports beyond its status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_minutes: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history_append: Vec<HistoryMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_excerpt: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub excerpt_truncated: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_calls: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ChildExit>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl From<&run::RunReport> for RunReport {
    fn from(value: &run::RunReport) -> Self {
        RunReport {
            pause_minutes: value.pause_minutes,
            history_append: value
                .history_append
                .iter()
                .map(|message| HistoryMessage {
                    role: message.role.into(),
                    text: message.text.clone(),
                })
                .collect(),
            answer_excerpt: value.answer_excerpt.clone(),
            excerpt_truncated: value.excerpt_truncated,
            tool_calls: value.tool_calls,
            session: value.session.as_ref().map(|change| match change {
                run::SessionChange::Set { session_id } => SessionChange::Set {
                    session_id: session_id.clone(),
                },
                run::SessionChange::Clear => SessionChange::Clear,
            }),
            exit: value.exit.map(|exit| ChildExit {
                code: exit.code,
                signal: exit.signal,
            }),
        }
    }
}

impl From<RunReport> for run::RunReport {
    fn from(value: RunReport) -> Self {
        run::RunReport {
            pause_minutes: value.pause_minutes,
            history_append: value
                .history_append
                .into_iter()
                .map(|message| history::HistoryMessage {
                    role: message.role.into(),
                    text: message.text,
                })
                .collect(),
            answer_excerpt: value.answer_excerpt,
            excerpt_truncated: value.excerpt_truncated,
            tool_calls: value.tool_calls,
            session: value.session.map(|change| match change {
                SessionChange::Set { session_id } => run::SessionChange::Set { session_id },
                SessionChange::Clear => run::SessionChange::Clear,
            }),
            exit: value.exit.map(|exit| run::ChildExit {
                code: exit.code,
                signal: exit.signal,
            }),
        }
    }
}
