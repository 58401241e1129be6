//! The simulator's own sections of a fleet file: `[simulation]` (what the outside world does)
//! and `[expect]` (what must hold), plus `--faults` profiles. `vigil serve --fleet` accepts and
//! ignores both sections (runtime/src/fleet.rs); they are parsed only here, with errors that
//! name the file and the field. docs/fleet-simulation.md documents every key and default.

use std::collections::BTreeMap;

use serde::Deserialize;
use vigil_faults::{FaultKind, FaultRate, LlmFault, StorageFilter, StorageOps};

/// Simulated milliseconds per day and per week.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1_000;
pub const WEEK_DAYS: u32 = 7;
/// Longest simulation `--days` accepts: a year.
pub const DAYS_MAX: u32 = 366;
/// Agents per pulsing host when `pulse_hosts` is not given.
pub const AGENTS_PER_HOST_DEFAULT: usize = 15;
/// Most pulsing hosts.
pub const PULSE_HOSTS_MAX: u32 = 1_000;
/// Shortest pulse interval the world accepts, in seconds.
pub const PULSE_INTERVAL_S_MIN: u64 = 1;
/// Most user inputs or operator wakes per agent per day.
pub const EVENTS_PER_DAY_MAX: f64 = 10_000.0;
/// Slowest model answer the world accepts, in ms (10 minutes).
pub const LATENCY_MS_MAX: u64 = 10 * 60 * 1_000;
/// Most tool rounds a simulated run makes.
pub const TOOL_ROUNDS_MAX: u32 = 100;
/// Most fault arrivals per day a profile may ask for, per kind.
pub const FAULTS_PER_DAY_MAX: f64 = 1_000.0;
/// Minutes in a day.
pub const DAY_MINUTES: u32 = 24 * 60;
/// Agent names an error about an unknown agent lists.
const KNOWN_AGENTS_SHOWN_MAX: usize = 10;

/// One agent's world, resolved (defaults applied).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentWorld {
    /// Model latency per call, ms (uniform between the two).
    pub latency_ms: (u64, u64),
    /// Share of runs whose first model call answers `[IDLE]` (0..=1).
    pub idle_rate: f64,
    /// Share of the other runs that call the agent's HTTP tools.
    pub tool_call_rate: f64,
    /// Rounds of tool calls such a run makes (uniform).
    pub tool_rounds: (u32, u32),
    /// Share of the other runs that end with a `pause_heartbeats` rest.
    pub rest_rate: f64,
    /// Rest length in minutes (uniform).
    pub rest_minutes: (u64, u64),
    /// User inputs (`POST /v1/agents/{id}/input`) per day, on average.
    pub inputs_per_day: f64,
    /// Operator on-demand wakeups per day, on average.
    pub operator_wakes_per_day: f64,
    /// Whether the agent's host pulses for it (default: when its entry declares `liveness`).
    pub pulses: Option<bool>,
}

impl Default for AgentWorld {
    fn default() -> Self {
        AgentWorld {
            latency_ms: (500, 3_000),
            // The Heart paper's ghost rate (section 7.1): 78 % of routine wakeups found nothing.
            idle_rate: 0.78,
            tool_call_rate: 0.3,
            tool_rounds: (1, 2),
            rest_rate: 0.02,
            rest_minutes: (5, 45),
            inputs_per_day: 2.0,
            operator_wakes_per_day: 0.0,
            pulses: None,
        }
    }
}

/// The `[simulation]` section, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    /// Seconds between a host's pulses; `None`: each agent's own `liveness.pulse_interval_ms`.
    pub pulse_interval_s: Option<u64>,
    /// Hosts that pulse for the agents (`None`: one per [`AGENTS_PER_HOST_DEFAULT`] agents).
    pub pulse_hosts: Option<u32>,
    /// Share of pulses lost on the way, always (fault windows add more).
    pub pulse_loss: f64,
    /// Share of tool calls that fail (HTTP 500).
    pub tool_failure_rate: f64,
    /// Spells of the provider answering 503, and rate-limiting, per day (fleet-wide: the
    /// provider is shared), on top of the fault profile's.
    pub provider_failure_spells_per_day: f64,
    pub provider_rate_limit_spells_per_day: f64,
    /// The default world of every agent, and each named agent's.
    pub agent: AgentWorld,
    pub agents: BTreeMap<String, AgentWorld>,
}

impl Default for Simulation {
    fn default() -> Self {
        Simulation {
            pulse_interval_s: None,
            pulse_hosts: None,
            pulse_loss: 0.0,
            tool_failure_rate: 0.05,
            provider_failure_spells_per_day: 0.0,
            provider_rate_limit_spells_per_day: 0.0,
            agent: AgentWorld::default(),
            agents: BTreeMap::new(),
        }
    }
}

impl Simulation {
    /// The world of the agent called `name`.
    pub fn agent(&self, name: &str) -> &AgentWorld {
        self.agents.get(name).unwrap_or(&self.agent)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SimulationShape {
    pulse_interval_s: Option<u64>,
    pulse_hosts: Option<u32>,
    pulse_loss: Option<f64>,
    tool_failure_rate: Option<f64>,
    provider_failure_spells_per_day: Option<f64>,
    provider_rate_limit_spells_per_day: Option<f64>,
    agent: Option<AgentWorldShape>,
    #[serde(default)]
    agents: BTreeMap<String, AgentWorldShape>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentWorldShape {
    latency_ms: Option<[u64; 2]>,
    idle_rate: Option<f64>,
    tool_call_rate: Option<f64>,
    tool_rounds: Option<[u32; 2]>,
    rest_rate: Option<f64>,
    rest_minutes: Option<[u64; 2]>,
    inputs_per_day: Option<f64>,
    operator_wakes_per_day: Option<f64>,
    pulses: Option<bool>,
}

/// One scope's limits of the `[expect]` section.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Model calls (usage recorded) per agent per simulated day.
    pub max_invocations_per_day: Option<u64>,
    /// Cost per agent per simulated day, in dollars.
    pub max_cost_per_day_usd: Option<f64>,
    /// Time offline per agent per simulated day, in minutes.
    pub max_offline_minutes: Option<u64>,
    /// No daily-cap refusal before this local time (`"HH:MM"`, the agent's time zone).
    pub no_cap_hit_before: Option<String>,
    /// Breaker openings per agent per simulated week (a run shorter than a week counts its
    /// whole length as one week).
    pub max_breaker_openings_per_week: Option<u64>,
    /// Wakeups asked for (any source, refused ones included) per agent per simulated day.
    pub max_wakeups_per_day: Option<u64>,
}

/// The `[expect]` section: limits for every agent, and per agent (which replace the fleet's
/// value of the same key).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expect {
    pub fleet: Limits,
    pub agents: BTreeMap<String, Limits>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectShape {
    max_invocations_per_day: Option<u64>,
    max_cost_per_day_usd: Option<f64>,
    max_offline_minutes: Option<u64>,
    no_cap_hit_before: Option<String>,
    max_breaker_openings_per_week: Option<u64>,
    max_wakeups_per_day: Option<u64>,
    #[serde(default)]
    agents: BTreeMap<String, Limits>,
}

/// The two sections; every other key belongs to the fleet parser.
#[derive(Debug, Default, Deserialize)]
struct Sections {
    simulation: Option<SimulationShape>,
    expect: Option<ExpectShape>,
}

/// What a file says of the simulation: each section only if present.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimSections {
    pub simulation: Option<Simulation>,
    pub expect: Option<Expect>,
}

/// Reads `[simulation]` and `[expect]` of `text` (`path` names the file in errors); `agents` are
/// the fleet's agent names, which `simulation.agents.NAME` and `expect.agents.NAME` must name.
pub fn parse_sections(path: &str, text: &str, agents: &[String]) -> Result<SimSections, String> {
    let sections: Sections = toml::from_str(text).map_err(|e| {
        format!(
            "{path}: {}",
            e.to_string().trim_start_matches("TOML parse error ")
        )
    })?;
    let simulation = sections
        .simulation
        .map(|shape| resolve_simulation(path, shape, agents))
        .transpose()?;
    let expect = sections
        .expect
        .map(|shape| resolve_expect(path, shape, agents))
        .transpose()?;
    Ok(SimSections { simulation, expect })
}

fn rate(path: &str, field: &str, value: Option<f64>, default: f64) -> Result<f64, String> {
    let value = value.unwrap_or(default);
    if !(0.0..=1.0).contains(&value) {
        return Err(format!(
            "{path}: {field} = {value}: a share must be between 0 and 1"
        ));
    }
    Ok(value)
}

fn per_day(path: &str, field: &str, value: Option<f64>, default: f64) -> Result<f64, String> {
    let value = value.unwrap_or(default);
    if !(0.0..=EVENTS_PER_DAY_MAX).contains(&value) {
        return Err(format!(
            "{path}: {field} = {value}: must be between 0 and {EVENTS_PER_DAY_MAX} per day"
        ));
    }
    Ok(value)
}

fn range<T: PartialOrd + Copy + std::fmt::Display>(
    path: &str,
    field: &str,
    value: Option<[T; 2]>,
    default: (T, T),
    max: T,
) -> Result<(T, T), String> {
    let (low, high) = value.map_or(default, |[a, b]| (a, b));
    if low > high || high > max {
        return Err(format!(
            "{path}: {field} = [{low}, {high}]: give [low, high] with low <= high <= {max}"
        ));
    }
    Ok((low, high))
}

fn resolve_agent(
    path: &str,
    prefix: &str,
    shape: &AgentWorldShape,
    base: &AgentWorld,
) -> Result<AgentWorld, String> {
    let f = |name: &str| format!("{prefix}.{name}");
    Ok(AgentWorld {
        latency_ms: range(
            path,
            &f("latency_ms"),
            shape.latency_ms,
            base.latency_ms,
            LATENCY_MS_MAX,
        )?,
        idle_rate: rate(path, &f("idle_rate"), shape.idle_rate, base.idle_rate)?,
        tool_call_rate: rate(
            path,
            &f("tool_call_rate"),
            shape.tool_call_rate,
            base.tool_call_rate,
        )?,
        tool_rounds: range(
            path,
            &f("tool_rounds"),
            shape.tool_rounds,
            base.tool_rounds,
            TOOL_ROUNDS_MAX,
        )?,
        rest_rate: rate(path, &f("rest_rate"), shape.rest_rate, base.rest_rate)?,
        rest_minutes: range(
            path,
            &f("rest_minutes"),
            shape.rest_minutes,
            base.rest_minutes,
            u64::from(DAY_MINUTES),
        )?,
        inputs_per_day: per_day(
            path,
            &f("inputs_per_day"),
            shape.inputs_per_day,
            base.inputs_per_day,
        )?,
        operator_wakes_per_day: per_day(
            path,
            &f("operator_wakes_per_day"),
            shape.operator_wakes_per_day,
            base.operator_wakes_per_day,
        )?,
        pulses: shape.pulses.or(base.pulses),
    })
}

fn known_agent(path: &str, section: &str, name: &str, agents: &[String]) -> Result<(), String> {
    if agents.iter().any(|a| a == name) {
        return Ok(());
    }
    let shown: Vec<&str> = agents
        .iter()
        .take(KNOWN_AGENTS_SHOWN_MAX)
        .map(String::as_str)
        .collect();
    let more = agents.len().saturating_sub(KNOWN_AGENTS_SHOWN_MAX);
    Err(format!(
        "{path}: {section}.agents.{name}: no agent named {name:?} in the fleet (known: {}{})",
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}

fn resolve_simulation(
    path: &str,
    shape: SimulationShape,
    agents: &[String],
) -> Result<Simulation, String> {
    let defaults = Simulation::default();
    if let Some(seconds) = shape.pulse_interval_s {
        if seconds < PULSE_INTERVAL_S_MIN {
            return Err(format!(
                "{path}: simulation.pulse_interval_s = {seconds}: at least {PULSE_INTERVAL_S_MIN}"
            ));
        }
    }
    if let Some(hosts) = shape.pulse_hosts {
        if hosts == 0 || hosts > PULSE_HOSTS_MAX {
            return Err(format!(
                "{path}: simulation.pulse_hosts = {hosts}: between 1 and {PULSE_HOSTS_MAX}"
            ));
        }
    }
    let agent = resolve_agent(
        path,
        "simulation.agent",
        &shape.agent.unwrap_or_default(),
        &defaults.agent,
    )?;
    let mut by_name = BTreeMap::new();
    for (name, entry) in &shape.agents {
        known_agent(path, "simulation", name, agents)?;
        let world = resolve_agent(path, &format!("simulation.agents.{name}"), entry, &agent)?;
        by_name.insert(name.clone(), world);
    }
    Ok(Simulation {
        pulse_interval_s: shape.pulse_interval_s,
        pulse_hosts: shape.pulse_hosts,
        pulse_loss: rate(
            path,
            "simulation.pulse_loss",
            shape.pulse_loss,
            defaults.pulse_loss,
        )?,
        tool_failure_rate: rate(
            path,
            "simulation.tool_failure_rate",
            shape.tool_failure_rate,
            defaults.tool_failure_rate,
        )?,
        provider_failure_spells_per_day: per_day(
            path,
            "simulation.provider_failure_spells_per_day",
            shape.provider_failure_spells_per_day,
            0.0,
        )?,
        provider_rate_limit_spells_per_day: per_day(
            path,
            "simulation.provider_rate_limit_spells_per_day",
            shape.provider_rate_limit_spells_per_day,
            0.0,
        )?,
        agent,
        agents: by_name,
    })
}

/// Minute of the day of `"HH:MM"`.
pub fn parse_local_time(text: &str) -> Option<u32> {
    let (hours, minutes) = text.split_once(':')?;
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes): (u32, u32) = (hours.parse().ok()?, minutes.parse().ok()?);
    (hours < 24 && minutes < 60).then_some(hours * 60 + minutes)
}

fn check_limits(path: &str, prefix: &str, limits: &Limits) -> Result<(), String> {
    if let Some(text) = &limits.no_cap_hit_before {
        if parse_local_time(text).is_none() {
            return Err(format!(
                "{path}: {prefix}no_cap_hit_before = {text:?}: write a local time as \"HH:MM\" (00:00 to 23:59)"
            ));
        }
    }
    if let Some(usd) = limits.max_cost_per_day_usd {
        if !(usd >= 0.0 && usd.is_finite()) {
            return Err(format!(
                "{path}: {prefix}max_cost_per_day_usd = {usd}: a dollar amount of 0 or more"
            ));
        }
    }
    Ok(())
}

fn resolve_expect(path: &str, shape: ExpectShape, agents: &[String]) -> Result<Expect, String> {
    let fleet = Limits {
        max_invocations_per_day: shape.max_invocations_per_day,
        max_cost_per_day_usd: shape.max_cost_per_day_usd,
        max_offline_minutes: shape.max_offline_minutes,
        no_cap_hit_before: shape.no_cap_hit_before,
        max_breaker_openings_per_week: shape.max_breaker_openings_per_week,
        max_wakeups_per_day: shape.max_wakeups_per_day,
    };
    check_limits(path, "expect.", &fleet)?;
    for (name, limits) in &shape.agents {
        known_agent(path, "expect", name, agents)?;
        check_limits(path, &format!("expect.agents.{name}."), limits)?;
    }
    Ok(Expect {
        fleet,
        agents: shape.agents,
    })
}

/// A named fault profile or a profile file, as `--faults` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultProfile {
    /// `none`, `typical`, `harsh` or the file's path.
    pub name: String,
    /// (kind, arrivals per day, most arrivals per run or `None` for the default).
    pub kinds: Vec<(FaultKind, f64, Option<u32>)>,
}

/// The kinds a profile may name, by their names in docs/faults.md.
pub fn fault_kind(name: &str) -> Option<FaultKind> {
    let storage = StorageFilter::always(StorageOps::Any);
    Some(match name {
        "crash" => FaultKind::Crash,
        "power_cut" => FaultKind::PowerCut,
        "graceful_stop" => FaultKind::GracefulStop,
        "clock_jump" => FaultKind::ClockJump,
        "clock_skew" => FaultKind::ClockSkew,
        "storage_io_error" => FaultKind::StorageIoError(storage),
        "disk_full" => FaultKind::DiskFull(storage),
        "partition" => FaultKind::Partition,
        "net_delay" => FaultKind::NetDelay,
        "packet_loss" => FaultKind::PacketLoss,
        "llm_rate_limit" => FaultKind::Llm(LlmFault::RateLimit),
        "llm_server_error" => FaultKind::Llm(LlmFault::ServerError),
        "llm_timeout" => FaultKind::Llm(LlmFault::Timeout),
        "llm_malformed" => FaultKind::Llm(LlmFault::Malformed),
        "provider_partition" => FaultKind::ProviderPartition,
        "pulse_loss" => FaultKind::PulseLoss,
        "run_hang" => FaultKind::RunHang,
        "run_failure" => FaultKind::RunFailure,
        "tool_failure" => FaultKind::ToolFailure,
        "tool_hang" => FaultKind::ToolHang,
        "wakeup_burst" => FaultKind::WakeupBurst,
        "catch_up" => FaultKind::CatchUp,
        _ => return None,
    })
}

/// Every kind name [`fault_kind`] knows, for error messages and docs.
pub const FAULT_KIND_NAMES: [&str; 21] = [
    "crash",
    "power_cut",
    "clock_jump",
    "clock_skew",
    "storage_io_error",
    "disk_full",
    "partition",
    "net_delay",
    "packet_loss",
    "llm_rate_limit",
    "llm_server_error",
    "llm_timeout",
    "llm_malformed",
    "provider_partition",
    "pulse_loss",
    "run_hang",
    "run_failure",
    "tool_failure",
    "tool_hang",
    "wakeup_burst",
    "catch_up",
];

/// The built-in profiles: arrivals per simulated day of each kind. A provider spell lasts from a
/// minute to two hours and reaches every agent that calls during it, so `typical` has one of
/// some kind every other day or so (the Heart paper saw 2-5 breaker openings a week fleet-wide).
const TYPICAL: [(&str, f64); 9] = [
    ("crash", 0.2),
    ("power_cut", 0.05),
    ("clock_jump", 0.1),
    ("net_delay", 0.5),
    ("llm_server_error", 0.3),
    ("llm_rate_limit", 0.2),
    ("llm_timeout", 0.1),
    ("pulse_loss", 0.3),
    ("tool_failure", 0.3),
];
const HARSH: [(&str, f64); 15] = [
    ("crash", 1.0),
    ("power_cut", 0.5),
    ("clock_jump", 0.5),
    ("clock_skew", 0.5),
    ("storage_io_error", 0.2),
    ("partition", 0.5),
    ("net_delay", 2.0),
    ("packet_loss", 1.0),
    ("llm_server_error", 3.0),
    ("llm_rate_limit", 2.0),
    ("llm_timeout", 1.0),
    ("provider_partition", 0.5),
    ("pulse_loss", 1.0),
    ("tool_failure", 1.0),
    ("run_hang", 0.5),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileEntry {
    per_day: f64,
    max: Option<u32>,
}

impl FaultProfile {
    /// `none`, `typical`, `harsh`, or a path to a TOML profile: one table per kind,
    /// `[crash]\nper_day = 0.5\nmax = 3`.
    pub fn named(spec: &str) -> Result<FaultProfile, String> {
        let builtin = |list: &[(&str, f64)]| {
            list.iter()
                .map(|(name, per_day)| (fault_kind(name).expect("a known kind"), *per_day, None))
                .collect()
        };
        let kinds = match spec {
            "none" => Vec::new(),
            "typical" => builtin(&TYPICAL),
            "harsh" => builtin(&HARSH),
            path => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!("could not read the fault profile {path}: {e} (or give none, typical or harsh)")
                })?;
                Self::parse(path, &text)?
            }
        };
        Ok(FaultProfile {
            name: spec.to_string(),
            kinds,
        })
    }

    fn parse(path: &str, text: &str) -> Result<Vec<(FaultKind, f64, Option<u32>)>, String> {
        let entries: BTreeMap<String, ProfileEntry> = toml::from_str(text).map_err(|e| {
            format!(
                "{path}: {}",
                e.to_string().trim_start_matches("TOML parse error ")
            )
        })?;
        let mut kinds = Vec::new();
        for (name, entry) in entries {
            let kind = fault_kind(&name).ok_or_else(|| {
                format!(
                    "{path}: [{name}]: unknown fault kind; known: {}",
                    FAULT_KIND_NAMES.join(", ")
                )
            })?;
            if !(0.0..=FAULTS_PER_DAY_MAX).contains(&entry.per_day) {
                return Err(format!(
                    "{path}: {name}.per_day = {}: between 0 and {FAULTS_PER_DAY_MAX}",
                    entry.per_day
                ));
            }
            kinds.push((kind, entry.per_day, entry.max));
        }
        Ok(kinds)
    }

    /// The fault plan's rates for a run of `days` days. Without a `max`, a kind strikes at most
    /// four times its expected count, plus two.
    pub fn rates(&self, days: u32) -> Vec<FaultRate> {
        self.kinds
            .iter()
            .filter(|(_, per_day, _)| *per_day > 0.0)
            .map(|(kind, per_day, max)| FaultRate {
                kind: *kind,
                per_hour: per_day / 24.0,
                after_ms: 0,
                max_triggers: max.unwrap_or((per_day * f64::from(days) * 4.0).ceil() as u32 + 2),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents() -> Vec<String> {
        vec!["scout".into(), "triage".into()]
    }

    #[test]
    fn absent_sections_are_none_and_defaults_fill_a_partial_one() {
        let none = parse_sections("f.toml", "[[agents]]\nname = \"scout\"\n", &agents()).unwrap();
        assert_eq!(none, SimSections::default());
        let text = "[simulation]\npulse_loss = 0.1\n[simulation.agent]\nidle_rate = 0.5\n[simulation.agents.scout]\ninputs_per_day = 7\n";
        let sim = parse_sections("f.toml", text, &agents())
            .unwrap()
            .simulation
            .unwrap();
        assert_eq!(sim.pulse_loss, 0.1);
        assert_eq!(sim.agent.idle_rate, 0.5);
        // A named agent's world starts from the default one, not from the built-in defaults.
        assert_eq!(sim.agent("scout").idle_rate, 0.5);
        assert_eq!(sim.agent("scout").inputs_per_day, 7.0);
        assert_eq!(
            sim.agent("triage").inputs_per_day,
            AgentWorld::default().inputs_per_day
        );
    }

    #[test]
    fn errors_name_the_field() {
        let bad_rate = parse_sections("f.toml", "[simulation.agent]\nidle_rate = 1.5\n", &agents())
            .unwrap_err();
        assert!(
            bad_rate.contains("simulation.agent.idle_rate = 1.5"),
            "{bad_rate}"
        );
        let unknown =
            parse_sections("f.toml", "[simulation]\nidel_rate = 1\n", &agents()).unwrap_err();
        assert!(unknown.contains("idel_rate"), "{unknown}");
        let stranger = parse_sections(
            "f.toml",
            "[expect.agents.nobody]\nmax_wakeups_per_day = 3\n",
            &agents(),
        )
        .unwrap_err();
        assert!(stranger.contains("expect.agents.nobody"), "{stranger}");
        let time = parse_sections(
            "f.toml",
            "[expect]\nno_cap_hit_before = \"6pm\"\n",
            &agents(),
        )
        .unwrap_err();
        assert!(time.contains("expect.no_cap_hit_before"), "{time}");
    }

    #[test]
    fn local_times_and_profiles() {
        assert_eq!(parse_local_time("18:00"), Some(1_080));
        assert_eq!(parse_local_time("24:00"), None);
        assert_eq!(parse_local_time("8:00"), None);
        assert!(FaultProfile::named("none").unwrap().rates(7).is_empty());
        let typical = FaultProfile::named("typical").unwrap().rates(7);
        let crash = typical.iter().find(|r| r.kind == FaultKind::Crash).unwrap();
        assert!((crash.per_hour * 24.0 - 0.2).abs() < 1e-9);
        assert!(typical.iter().all(|r| r.max_triggers >= 2));
        let parsed = FaultProfile::parse("p.toml", "[crash]\nper_day = 2\nmax = 1\n").unwrap();
        assert_eq!(parsed, vec![(FaultKind::Crash, 2.0, Some(1))]);
        let unknown = FaultProfile::parse("p.toml", "[meteor]\nper_day = 1\n").unwrap_err();
        assert!(
            unknown.contains("[meteor]: unknown fault kind"),
            "{unknown}"
        );
    }
}
