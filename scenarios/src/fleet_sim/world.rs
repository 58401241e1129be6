//! A user's fleet as a simulation: the fleet file's agents (parsed and validated by the
//! runtime's own `Fleet::load`), made to talk to the simulated world, and the workload the
//! `[simulation]` section describes (user input, operator wakes, hosts' pulses). Each seed's
//! world is drawn from its own named streams, so one seed is one world.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rand::Rng;
use vigil::engine::liveness::LivenessPolicy;
use vigil::fleet::Fleet;
use vigil_faults::{stream, FaultKind, FaultRate, LlmFault};
use vigil_world::provider::{base_url, Behaviour, ProviderScript, ID_MARKER_TEMPLATE, SIM_MODEL};
use vigil_world::tool_server::{tool_url, ToolScript};
use vigil_world::workload::{Action, Step};

use super::config::{
    parse_sections, Expect, FaultProfile, SimSections, Simulation, AGENTS_PER_HOST_DEFAULT, DAY_MS,
};
use crate::phases::{AgentWorld as PhaseWorld, Setup};

const SECOND_MS: u64 = 1_000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
/// The last stretch of the run is quiet (faults healed) so the oracle can judge liveness; it
/// is part of the last simulated day.
pub const QUIET_MS: u64 = 30 * MINUTE_MS;
/// How often the workload reads the node's agent list and tails its event feed (the oracle's
/// probes; a quiet phase holds at least three probes).
const PROBE_EVERY_MS: u64 = 10 * MINUTE_MS;
const TAIL_EVERY_MS: u64 = 60 * MINUTE_MS;
/// Agents are registered within this first stretch of the first day.
const CREATE_SPREAD_MS: u64 = MINUTE_MS;
/// Hosts start pulsing this long after the start (after their agents exist).
const PULSE_START_MS: u64 = 2 * MINUTE_MS;
/// A host's pulses wander this share (thousandths) of the interval either way.
const PULSE_JITTER_PERMILLE: u64 = 50;
/// Longest a crashed node stays down, largest initial clock skew, and the longest the harness
/// waits for a power cut's storage operation.
const DOWNTIME_MS_MAX: u64 = 10 * MINUTE_MS;
const SKEW_MS_MAX: i64 = 2_000;
const POWER_CUT_WAIT_MS: u64 = 10 * MINUTE_MS;
/// The scenario name in traces.
pub const SCENARIO: &str = "fleet";

/// One agent of the fleet as simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedAgent {
    /// The name in the report: `name`, or `tenant/name` outside tenant `default`.
    pub shown: String,
    /// The name on the simulated node (all agents live in tenant `default` there).
    pub name: String,
    pub spec: serde_json::Value,
    pub time_zone: String,
    pub daily_cap: Option<u32>,
    /// The interval its host pulses at, when its host pulses for it.
    pub pulse_interval_ms: Option<u64>,
}

/// Everything a seed needs, from the files and the command line.
#[derive(Debug, Clone)]
pub struct FleetPlan {
    /// The fleet file as given on the command line.
    pub file: String,
    pub agents: Vec<PlannedAgent>,
    pub simulation: Simulation,
    pub expect: Expect,
    pub faults: FaultProfile,
    pub days: u32,
    /// What the simulation does not reproduce of this fleet, for stderr.
    pub warnings: Vec<String>,
}

/// Reads the fleet file with the runtime's own parser and validation (the same messages as
/// `vigil serve --fleet`), then its `[simulation]`/`[expect]` sections, or those of `world`.
pub fn load(
    file: &str,
    world: Option<&str>,
    faults: FaultProfile,
    days: u32,
) -> Result<FleetPlan, String> {
    let fleet = Fleet::load(Path::new(file)).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("could not read fleet file {file}: {e}"))?;
    let mut agents = Vec::new();
    let mut warnings = Vec::new();
    let mut names_seen = std::collections::BTreeSet::new();
    for tenant in &fleet.tenants {
        if !tenant.heartbeats.is_empty() {
            warnings.push(format!(
                "tenant {:?}: its {} predicate heartbeat(s) are not simulated (their checks reach outside services)",
                tenant.name,
                tenant.heartbeats.len()
            ));
        }
        for spec in &tenant.agents {
            let shown = if tenant.name == vigil::engine::tenant::DEFAULT_TENANT {
                spec.name.clone()
            } else {
                format!("{}/{}", tenant.name, spec.name)
            };
            // A set, not a scan: fleets of many thousands of agents are declared this way.
            if !names_seen.insert(spec.name.clone()) {
                return Err(format!(
                    "{file}: agent {:?} is declared in two tenants; the simulator runs one tenant and needs distinct agent names",
                    spec.name
                ));
            }
            let mut value = serde_json::to_value(spec).expect("agent specs serialize");
            // A spec serializes absent options as `null`, which the API refuses for some
            // fields (a list): absent keys take their defaults, as in the file.
            drop_nulls(&mut value);
            let kind = value["adapter"]["type"].as_str().unwrap_or("").to_string();
            if kind != "llm" && kind != "scripted" {
                warnings.push(format!(
                    "agent {shown:?}: its {kind} adapter runs as written; only llm and scripted agents are given a simulated world, so its outside calls fail"
                ));
            }
            agents.push(PlannedAgent {
                shown,
                name: spec.name.clone(),
                spec: value,
                time_zone: spec.time_zone.clone(),
                daily_cap: spec.limits.daily_cap,
                pulse_interval_ms: (spec.liveness != LivenessPolicy::default())
                    .then_some(spec.liveness.pulse_interval_ms),
            });
        }
    }
    let names: Vec<String> = agents.iter().map(|a| a.shown.clone()).collect();
    let mut sections = parse_sections(file, &text, &names)?;
    if let Some(world) = world {
        let text = std::fs::read_to_string(world)
            .map_err(|e| format!("could not read world file {world}: {e}"))?;
        let from_world: SimSections = parse_sections(world, &text, &names)?;
        sections.simulation = from_world.simulation.or(sections.simulation);
        sections.expect = from_world.expect.or(sections.expect);
    }
    let simulation = sections.simulation.unwrap_or_default();
    for agent in &mut agents {
        let world = simulation.agent(&agent.shown);
        agent.pulse_interval_ms = match world.pulses {
            Some(false) => None,
            Some(true) => Some(
                agent
                    .pulse_interval_ms
                    .unwrap_or(LivenessPolicy::default().pulse_interval_ms),
            ),
            None => agent.pulse_interval_ms,
        };
        if let (Some(_), Some(seconds)) = (agent.pulse_interval_ms, simulation.pulse_interval_s) {
            agent.pulse_interval_ms = Some(seconds * SECOND_MS);
        }
        simulated_spec(&mut agent.spec);
    }
    Ok(FleetPlan {
        file: file.to_string(),
        agents,
        simulation,
        expect: sections.expect.unwrap_or_default(),
        faults,
        days,
        warnings,
    })
}

/// Points an `llm` agent at the simulated provider (its model priced by the simulated price
/// table, no API key) and its HTTP tools at the simulated tool server; puts the marker the
/// provider reads the caller from at the start of its system prompt.
fn simulated_spec(spec: &mut serde_json::Value) {
    let adapter = &mut spec["adapter"];
    if adapter["type"] != "llm" {
        return;
    }
    adapter["base_url"] = base_url().into();
    adapter["model"] = SIM_MODEL.into();
    if let Some(object) = adapter.as_object_mut() {
        object.remove("api_key_env");
    }
    let system = match adapter["prompts"]["system"]
        .as_str()
        .or(adapter["system_prompt"].as_str())
    {
        Some(text) => format!("{ID_MARKER_TEMPLATE} {text}"),
        None => ID_MARKER_TEMPLATE.to_string(),
    };
    if let Some(object) = adapter.as_object_mut() {
        object.remove("system_prompt");
    }
    if !adapter["prompts"].is_object() {
        adapter["prompts"] = serde_json::json!({});
    }
    adapter["prompts"]["system"] = system.into();
    if let Some(tools) = adapter.get_mut("tools").and_then(|t| t.as_array_mut()) {
        for tool in tools {
            tool["url"] = tool_url("flaky", false).into();
            if let Some(object) = tool.as_object_mut() {
                object.remove("secret_headers");
                object.remove("headers");
            }
        }
    }
}

impl FleetPlan {
    /// Simulated length of one seed, from the start of day 1 (the lead before it not counted).
    pub fn virtual_ms(&self) -> u64 {
        u64::from(self.days) * DAY_MS
    }

    /// The time zone whose midnights bound the report's days: the first agent's (UTC for an
    /// empty fleet). Daily caps count local days, so a report day must be one too, or a day
    /// would straddle a cap's reset and show twice the cap.
    pub fn reference_time_zone(&self) -> &str {
        self.agents.first().map_or("UTC", |a| a.time_zone.as_str())
    }

    /// How long after the simulation's start (the seed's wall instant `epoch_wall_ms`) day 1
    /// begins: the next midnight in [`FleetPlan::reference_time_zone`], or at once when the
    /// start is one. Nothing happens before it; the node merely runs, empty.
    pub fn lead_ms(&self, epoch_wall_ms: u64) -> u64 {
        next_midnight_ms(epoch_wall_ms, self.reference_time_zone())
            .map_or(0, |midnight| midnight - epoch_wall_ms)
    }

    /// The model's behaviour: each agent's own (the provider matches by name prefix, so every
    /// agent gets an entry and longer names come first: an exact name always wins).
    pub fn provider_script(&self) -> ProviderScript {
        let behaviour = |shown: &str| {
            let world = self.simulation.agent(shown);
            let permille = |share: f64| (share * 1_000.0).round() as u32;
            Behaviour {
                idle_permille: permille(world.idle_rate),
                pause_permille: permille(world.rest_rate),
                pause_minutes: world.rest_minutes,
                tool_permille: permille(world.tool_call_rate),
                tool_rounds: world.tool_rounds,
                calls_per_round: (1, 2),
                answer_tokens: (40, 400),
                latency_ms: world.latency_ms,
                ..Behaviour::default()
            }
        };
        let mut by_name: Vec<(String, Behaviour)> = self
            .agents
            .iter()
            .map(|a| (a.name.clone(), behaviour(&a.shown)))
            .collect();
        by_name.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        ProviderScript {
            default: behaviour(""),
            by_name_prefix: by_name,
        }
    }

    /// The fault plan's rates: the profile's and the world's provider spells.
    pub fn rates(&self) -> Vec<FaultRate> {
        let mut rates = self.faults.rates(self.days);
        let spells = [
            (
                LlmFault::ServerError,
                self.simulation.provider_failure_spells_per_day,
            ),
            (
                LlmFault::RateLimit,
                self.simulation.provider_rate_limit_spells_per_day,
            ),
        ];
        for (fault, per_day) in spells {
            if per_day <= 0.0 {
                continue;
            }
            let kind = FaultKind::Llm(fault);
            match rates.iter_mut().find(|r| r.kind == kind) {
                Some(rate) => {
                    rate.per_hour += per_day / 24.0;
                    rate.max_triggers += (per_day * f64::from(self.days) * 4.0).ceil() as u32;
                }
                None => rates.push(FaultRate {
                    kind,
                    per_hour: per_day / 24.0,
                    after_ms: 0,
                    max_triggers: (per_day * f64::from(self.days) * 4.0).ceil() as u32 + 2,
                }),
            }
        }
        rates
    }

    /// The workload of `seed`: agents registered, users' inputs, operators' wakes, hosts'
    /// pulses, in time order.
    pub fn steps(&self, seed: u64) -> Vec<Step> {
        let end_ms = self.virtual_ms();
        let mut steps = Vec::new();
        let mut create = stream(seed, "fleet/create");
        let mut created_at: Vec<u64> = (0..self.agents.len())
            .map(|_| create.gen_range(0..CREATE_SPREAD_MS))
            .collect();
        created_at.sort_unstable();
        for (agent, at_ms) in self.agents.iter().zip(created_at) {
            steps.push(Step {
                at_ms,
                action: Action::CreateAgent {
                    spec: agent.spec.clone(),
                },
            });
        }
        for agent in &self.agents {
            let world = self.simulation.agent(&agent.shown);
            let mut inputs = stream(seed, &format!("fleet/inputs/{}", agent.name));
            for (n, at_ms) in arrivals(&mut inputs, world.inputs_per_day, self.days)
                .into_iter()
                .enumerate()
            {
                steps.push(Step {
                    at_ms,
                    action: Action::Input {
                        agent: agent.name.clone(),
                        text: format!("user message {n}"),
                    },
                });
            }
            let mut wakes = stream(seed, &format!("fleet/wakes/{}", agent.name));
            for (n, at_ms) in arrivals(&mut wakes, world.operator_wakes_per_day, self.days)
                .into_iter()
                .enumerate()
            {
                steps.push(Step {
                    at_ms,
                    action: Action::Wake {
                        agent: agent.name.clone(),
                        request: serde_json::json!({
                            "source": "on_demand",
                            "reason": format!("operator wake {n}"),
                        }),
                    },
                });
            }
        }
        self.pulse_steps(seed, end_ms, &mut steps);
        steps.sort_by_key(|s| s.at_ms);
        steps
    }

    /// Hosts pulse for their agents in batches: agents of one pulse interval are spread over
    /// the hosts; a pulse lost on the way (`pulse_loss`) leaves its agent out of the batch.
    fn pulse_steps(&self, seed: u64, end_ms: u64, steps: &mut Vec<Step>) {
        let mut by_interval: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for agent in &self.agents {
            if let Some(interval) = agent.pulse_interval_ms {
                by_interval
                    .entry(interval)
                    .or_default()
                    .push(agent.name.clone());
            }
        }
        let pulsing: usize = by_interval.values().map(Vec::len).sum();
        if pulsing == 0 {
            return;
        }
        let hosts = self
            .simulation
            .pulse_hosts
            .map_or_else(|| pulsing.div_ceil(AGENTS_PER_HOST_DEFAULT), |h| h as usize);
        let loss_permille = (self.simulation.pulse_loss * 1_000.0).round() as u32;
        let mut rng = stream(seed, "fleet/pulses");
        for (interval, names) in by_interval {
            let per_host = names.len().div_ceil(hosts).max(1);
            for group in names.chunks(per_host) {
                let jitter = interval * PULSE_JITTER_PERMILLE / 1_000;
                let mut at_ms = PULSE_START_MS + rng.gen_range(0..interval);
                // Without loss every batch of the host names the same agents: one shared list.
                let whole: Arc<[String]> = group.into();
                while at_ms < end_ms {
                    let agents: Arc<[String]> = if loss_permille == 0 {
                        whole.clone()
                    } else {
                        group
                            .iter()
                            .filter(|_| rng.gen_range(0..1_000) >= loss_permille)
                            .cloned()
                            .collect()
                    };
                    if !agents.is_empty() {
                        steps.push(Step {
                            at_ms,
                            action: Action::PulseBatch { agents },
                        });
                    }
                    at_ms += interval - jitter + rng.gen_range(0..=2 * jitter);
                }
            }
        }
    }

    /// The shared runner's setup for `seed`, whose simulation started at wall instant
    /// `epoch_wall_ms`: every step moved by the lead to day 1 (`lead_ms`).
    pub fn setup(&self, seed: u64, lead_ms: u64) -> Setup {
        let mut steps = self.steps(seed);
        for step in &mut steps {
            step.at_ms += lead_ms;
        }
        let llm = self
            .agents
            .iter()
            .any(|a| a.spec["adapter"]["type"] == "llm");
        let tools = self.agents.iter().any(|a| {
            a.spec["adapter"]["tools"]
                .as_array()
                .is_some_and(|t| !t.is_empty())
        });
        Setup {
            agents: PhaseWorld {
                provider: if llm {
                    self.provider_script()
                } else {
                    ProviderScript::default()
                },
                tools: tools.then(|| ToolScript {
                    slow_ms: 2_000,
                    flaky_permille: (self.simulation.tool_failure_rate * 1_000.0).round() as u32,
                }),
                processes: None,
                alert_refuse_permille: None,
                state: None,
                snapshots: crate::phases::SnapshotMix::Rare,
            },
            pinned: Vec::new(),
            scenario: SCENARIO,
            seed,
            safety_ms: lead_ms + self.virtual_ms() - QUIET_MS,
            quiet_ms: QUIET_MS,
            rates: self.rates(),
            downtime_ms_max: DOWNTIME_MS_MAX,
            skew_ms_max: SKEW_MS_MAX,
            power_cut_wait_ms: POWER_CUT_WAIT_MS,
            describe: format!(
                "fleet={} agents={} days={} faults={} day1_at_ms={lead_ms} day_zone={}",
                self.file,
                self.agents.len(),
                self.days,
                self.faults.name,
                self.reference_time_zone()
            ),
            steps,
            probe_every_ms: PROBE_EVERY_MS,
            tail_every_ms: TAIL_EVERY_MS,
            sse_readers: 0,
        }
    }
}

/// The first midnight at or after wall instant `wall_ms` in `time_zone` (Unix ms), if the zone
/// is known (the fleet's own validation already refused an unknown one).
fn next_midnight_ms(wall_ms: u64, time_zone: &str) -> Option<u64> {
    let tz = jiff::tz::TimeZone::get(time_zone).ok()?;
    let now = jiff::Timestamp::from_millisecond(wall_ms as i64).ok()?.to_zoned(tz);
    let today = now.start_of_day().ok()?;
    let midnight = if today.timestamp() == now.timestamp() {
        today
    } else {
        now.tomorrow().ok()?.start_of_day().ok()?
    };
    u64::try_from(midnight.timestamp().as_millisecond()).ok()
}

/// Instants of events arriving `per_day` times a day on average over `days` days: each day
/// has the whole part of `per_day`, plus one more with the chance of its fraction, at uniform
/// instants (after agents exist).
fn arrivals(rng: &mut impl Rng, per_day: f64, days: u32) -> Vec<u64> {
    let mut at = Vec::new();
    if per_day <= 0.0 {
        return at;
    }
    let whole = per_day.floor() as u64;
    let fraction = per_day - per_day.floor();
    for day in 0..u64::from(days) {
        let extra = u64::from(rng.gen_bool(fraction.clamp(0.0, 1.0)));
        for _ in 0..whole + extra {
            let start = (day * DAY_MS).max(PULSE_START_MS);
            at.push(rng.gen_range(start..(day + 1) * DAY_MS));
        }
    }
    at
}

/// Removes every `null` member of every object in `value`.
fn drop_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}
