//! Scenario `edges`: the operator registers agents, changes their specs, wakes, pauses and
//! pulses them with values drawn at and just past every documented limit (docs/api.md): each request has all
//! its fields within their limits, often right at an edge, or exactly one field pushed just past
//! one (a number one past its range, a wrong type, an unknown key, a string a character too long,
//! a body a byte too large). Crashes, power cuts mid-commit and clock jumps strike meanwhile, and
//! the agents' specs are read back now and then and once more in the quiet phase.
//!
//! The oracle judges every answer from its own statement of the limits (check/edges.rs):
//! `limits_as_documented` (33), `spec_shown_as_sent` (34), `pause_length_as_asked` (35),
//! `resume_ends_pauses` (36). Some agents' tokens are replaced, twice each, and every token
//! tried after each rotation: `token_rotation_as_answered` (37). Some agents get command-check
//! heartbeats at and past their limits (33, and 34 for the heartbeat the answer shows), and
//! every agent's timeline is read from the log's start: `timeline_as_logged` (48).

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use vigil_faults::plan::FaultKind;
use vigil_faults::stream;
use vigil_world::check::edges::{
    judge_spec, AdapterRules, Form, IntField, ADAPTERS, KEY_CHARS_MAX, NAME_CHARS_MAX, NOT_ZONES,
    PAUSE_MINUTES_MAX, PAYLOAD_BYTES_MAX, PULSE_METADATA_BYTES_MAX, PULSE_METADATA_KEYS_MAX,
    PULSE_METADATA_LEVELS_MAX, PULSE_STATUSES, REASON_CHARS_MAX, SOURCES, SPEC_INTS, STEPS_MAX,
    STEP_MS_MAX, TRIGGER_DETAIL_BYTES_MAX, ZONES, ZONE_CHARS_MAX,
};
use vigil_world::check::heartbeat_defs::{
    HEARTBEAT_ARGS_MAX, HEARTBEAT_ARG_BYTES_MAX, HEARTBEAT_COMMAND_BYTES_MAX,
    HEARTBEAT_ID_CHARS_MAX, HEARTBEAT_INTERVAL_SEC_MAX, HEARTBEAT_ON_CHANGE,
    HEARTBEAT_RUNTIME_MS_MAX, HEARTBEAT_RUNTIME_MS_MIN,
};
use vigil_world::recorder::Recorder;
use vigil_world::trace::EdgeKind;
use vigil_world::workload::{Action, Step};

use crate::phases::{self, Setup};
use crate::smoke::rate;

const MINUTE_MS: u64 = 60_000;
pub const SAFETY_MS: u64 = 60 * MINUTE_MS;
pub const QUIET_MS: u64 = 20 * MINUTE_MS;
/// Creations sent in the first minutes; about half are pushed past a limit.
const CREATES_MIN: usize = 12;
const CREATES_MAX: usize = 18;
const CREATE_WINDOW_MS: u64 = 5 * MINUTE_MS;
/// Requests about the created agents over the rest of the safety phase.
const REQUESTS_MIN: usize = 50;
const REQUESTS_MAX: usize = 90;
/// Chance in a hundred that a request has one field pushed past its limit.
const INVALID_PERCENT: u32 = 45;
/// Timers and idle chambers shorter than this are drawn only for this many agents: an agent
/// woken every second is a few thousand runs an hour, enough to reach a snapshot.
const FAST_AGENTS_MAX: usize = 2;
const FAST_MS: u64 = 10_000;
/// Chance that an agent has another adapter than `scripted`.
const OTHER_ADAPTER_CHANCE: f64 = 0.4;
/// Chance that an agent's token is rotated during the safety phase.
const ROTATED_CHANCE: f64 = 0.3;

/// Runs the scenario for `seed`, recording into `recorder`.
pub async fn run(seed: u64, recorder: Recorder) {
    let mut rng = stream(seed, "edges");
    let mut steps = Vec::new();
    // Agents by name: scripted ones take every request; the others (llm, process, coding-CLI,
    // webhook adapters, never woken: this world has no provider, processes or receiver) only
    // spec changes that leave their heartbeat alone, and reads.
    let mut agents: Vec<String> = Vec::new();
    let mut others: Vec<(String, &'static AdapterRules)> = Vec::new();
    let mut fast = 0;
    let creates = rng.gen_range(CREATES_MIN..=CREATES_MAX);
    let (mut taken, mut refused) = (0, 0);
    for i in 0..creates {
        let rules = if rng.gen_bool(OTHER_ADAPTER_CHANCE) {
            ADAPTERS[1..].choose(&mut rng).expect("adapters")
        } else {
            &ADAPTERS[0]
        };
        let mut spec = valid_spec(&mut rng, i, &mut fast, rules);
        if rng.gen_range(0..100) < INVALID_PERCENT {
            if rules.kind == "scripted" || rng.gen_bool(0.3) {
                push_spec_past_a_limit(&mut rng, &mut spec);
            } else {
                push_adapter_past_a_limit(&mut rng, &mut spec, rules);
            }
        }
        if judge_spec(&spec).is_empty() {
            let name = spec["name"].as_str().expect("named").to_string();
            match rules.kind {
                "scripted" => agents.push(name),
                _ => others.push((name, rules)),
            }
            taken += 1;
        } else {
            refused += 1;
        }
        steps.push(submit(
            rng.gen_range(0..CREATE_WINDOW_MS),
            EdgeKind::Create,
            None,
            spec,
        ));
    }
    let requests = rng.gen_range(REQUESTS_MIN..=REQUESTS_MAX);
    for _ in 0..requests * others.len() / (agents.len() + 1) {
        let at_ms = rng.gen_range(CREATE_WINDOW_MS..SAFETY_MS);
        let Some((agent, rules)) = others.choose(&mut rng).cloned() else {
            break;
        };
        let step = if rng.gen_bool(0.7) {
            let invalid = rng.gen_range(0..100) < INVALID_PERCENT;
            let mut patch = adapter_patch(&mut rng, rules, invalid);
            if rules.kind == "llm" && !invalid && rng.gen_bool(TEMPLATE_PATCH_CHANCE) {
                patch["adapter"]["system_prompt"] = template_edge(&mut rng);
            }
            submit(at_ms, EdgeKind::Patch, Some(agent), patch)
        } else {
            Step {
                at_ms,
                action: Action::ShowSpec { agent },
            }
        };
        steps.push(step);
    }
    for n in 0..requests {
        let at_ms = rng.gen_range(CREATE_WINDOW_MS..SAFETY_MS);
        let Some(agent) = agents.choose(&mut rng).cloned() else {
            break;
        };
        let invalid = rng.gen_range(0..100) < INVALID_PERCENT;
        let step = match rng.gen_range(0..12) {
            0..=2 => submit(
                at_ms,
                EdgeKind::Patch,
                Some(agent),
                patch(&mut rng, invalid),
            ),
            3..=5 => submit(
                at_ms,
                EdgeKind::Wake,
                Some(agent),
                wakeup(&mut rng, n, invalid),
            ),
            6 => submit(
                at_ms,
                EdgeKind::Pause,
                Some(agent),
                pause(&mut rng, invalid),
            ),
            7 => submit(
                at_ms,
                EdgeKind::PauseHeartbeats,
                Some(agent),
                rest(&mut rng, invalid),
            ),
            8 => submit(at_ms, EdgeKind::Resume, Some(agent), json!({})),
            9 => submit(
                at_ms,
                EdgeKind::Pulse,
                Some(agent),
                pulse(&mut rng, invalid),
            ),
            _ => Step {
                at_ms,
                action: Action::ShowSpec { agent },
            },
        };
        steps.push(step);
    }
    // Command-check heartbeats of some scripted agents, at and past their limits. Not of an
    // agent the operator wakes with source `predicate`: the predicate checks hold every
    // predicate wakeup of an agent a heartbeat watches to one of its transitions.
    let woken_as_predicate: Vec<&String> = steps
        .iter()
        .filter_map(|step| match &step.action {
            Action::Submit {
                kind: EdgeKind::Wake,
                agent: Some(agent),
                body,
            } if body["source"] == "predicate" => Some(agent),
            _ => None,
        })
        .collect();
    let watched: Vec<String> = agents
        .iter()
        .filter(|agent| !woken_as_predicate.contains(agent))
        .cloned()
        .collect();
    let mut defined = 0;
    for agent in &watched {
        if !rng.gen_bool(HEARTBEAT_AGENT_CHANCE) {
            continue;
        }
        for _ in 0..rng.gen_range(1..=HEARTBEATS_PER_AGENT) {
            // The first is within its limits: a seed with heartbeats takes one.
            let invalid = defined > 0 && rng.gen_range(0..100) < INVALID_PERCENT;
            let body = heartbeat(&mut rng, defined, invalid);
            defined += 1;
            let at_ms = rng.gen_range(CREATE_WINDOW_MS..SAFETY_MS);
            steps.push(submit(
                at_ms,
                EdgeKind::Heartbeat,
                Some(agent.clone()),
                body,
            ));
        }
    }
    let agents: Vec<String> = agents
        .into_iter()
        .chain(others.into_iter().map(|(name, _)| name))
        .collect();
    // Timelines: some read while faults strike, every agent's once more in the quiet phase.
    for agent in &agents {
        let mut times = vec![SAFETY_MS + rng.gen_range(MINUTE_MS..5 * MINUTE_MS)];
        if rng.gen_bool(TIMELINE_READ_CHANCE) {
            times.push(rng.gen_range(CREATE_WINDOW_MS..SAFETY_MS));
        }
        for at_ms in times {
            let limit = *TIMELINE_LIMITS.choose(&mut rng).expect("limits");
            steps.push(Step {
                at_ms,
                action: Action::ShowTimeline {
                    agent: agent.clone(),
                    since_ms: 0,
                    limit,
                },
            });
        }
    }
    // Some agents' tokens are replaced (twice, each token tried after: `rotate`), whatever
    // their adapter: a rotation reads no spec.
    for agent in &agents {
        if rng.gen_bool(ROTATED_CHANCE) {
            steps.push(Step {
                at_ms: rng.gen_range(CREATE_WINDOW_MS..SAFETY_MS),
                action: Action::RotateToken {
                    agent: agent.clone(),
                },
            });
        }
    }
    // Every agent's spec once more in the quiet phase, after the last recovery.
    for agent in &agents {
        steps.push(Step {
            at_ms: SAFETY_MS + rng.gen_range(MINUTE_MS..5 * MINUTE_MS),
            action: Action::ShowSpec {
                agent: agent.clone(),
            },
        });
    }
    // Then every agent is terminated: a spec at its edges may hold a run for a day (a day-long
    // step under a day-long timeout, a day's cooldown, a week's pause), and the quiet phase
    // would otherwise end with runs queued behind it (`wakeup_reaches_one_terminal`).
    for agent in &agents {
        steps.push(Step {
            at_ms: SAFETY_MS + 6 * MINUTE_MS,
            action: Action::Terminate {
                agent: agent.clone(),
            },
        });
    }
    steps.sort_by_key(|s| s.at_ms);
    let setup = Setup {
        agents: Default::default(),
        pinned: Vec::new(),
        scenario: "edges",
        seed,
        safety_ms: SAFETY_MS,
        quiet_ms: QUIET_MS,
        rates: vec![
            rate(FaultKind::Crash, 2.0, 6),
            rate(FaultKind::PowerCut, 2.0, 6),
            rate(FaultKind::ClockJump, 1.0, 4),
        ],
        downtime_ms_max: 3 * MINUTE_MS,
        skew_ms_max: 5_000,
        power_cut_wait_ms: 10 * MINUTE_MS,
        steps,
        probe_every_ms: 5 * MINUTE_MS,
        tail_every_ms: 5 * MINUTE_MS,
        sse_readers: 0,
        describe: format!(
            "creations={creates} (within limits {taken}, past one {refused}) requests={requests}"
        ),
    };
    phases::run(setup, recorder).await;
}

/// Chance that a scripted agent gets heartbeat definitions, and how many at most (well under
/// the 16 an agent may have, so that no definition meets that limit).
const HEARTBEAT_AGENT_CHANCE: f64 = 0.6;
const HEARTBEATS_PER_AGENT: usize = 3;
/// Chance that an agent's timeline is also read during the safety phase, and the page sizes
/// drawn: the smallest, the default and the largest.
const TIMELINE_READ_CHANCE: f64 = 0.5;
const TIMELINE_LIMITS: &[usize] = &[1, 100, 1_000];

/// A command-check heartbeat definition (its `agent` is put in when sent): every field within
/// its limits (docs/api.md, `POST /v1/heartbeats`), often at an edge, or one pushed just past.
/// Its id is unique (`n`), so a 409 can only be a retried definition's own. No check it
/// defines changes a state: this world spawns no process, so each tick is an `error`.
fn heartbeat(rng: &mut ChaCha8Rng, n: usize, invalid: bool) -> Value {
    let stem = format!("hb{n}-");
    let id = if rng.gen_bool(0.3) {
        format!("{stem}{}", "x".repeat(HEARTBEAT_ID_CHARS_MAX - stem.len()))
    } else {
        stem
    };
    let command = if rng.gen_bool(0.4) {
        "c".repeat(HEARTBEAT_COMMAND_BYTES_MAX)
    } else {
        "mail-count".to_string()
    };
    let mut check = json!({"kind": "command", "command": command});
    match rng.gen_range(0..3) {
        0 => {}
        1 => check["args"] = json!(vec!["a"; HEARTBEAT_ARGS_MAX]),
        _ => check["args"] = json!(["a".repeat(HEARTBEAT_ARG_BYTES_MAX)]),
    }
    let interval = [1, 4, 5, 60, 3_600, HEARTBEAT_INTERVAL_SEC_MAX];
    let mut body = json!({
        "id": id,
        "interval_sec": interval.choose(rng).expect("intervals"),
        "check": check,
    });
    if rng.gen_bool(0.5) {
        body["on_change"] = json!(HEARTBEAT_ON_CHANGE.choose(rng).expect("on_change"));
    }
    if rng.gen_bool(0.5) {
        let budgets = [HEARTBEAT_RUNTIME_MS_MIN, 250, HEARTBEAT_RUNTIME_MS_MAX];
        body["max_runtime_ms"] = json!(budgets.choose(rng).expect("budgets"));
    }
    if invalid {
        push_heartbeat_past_a_limit(rng, &mut body);
    }
    body
}

/// Pushes one field of a heartbeat definition just past its limit or form.
fn push_heartbeat_past_a_limit(rng: &mut ChaCha8Rng, body: &mut Value) {
    match rng.gen_range(0..11) {
        0 => body["id"] = json!("x".repeat(HEARTBEAT_ID_CHARS_MAX + 1)),
        1 => body["id"] = json!("Upper-case"),
        2 => body["interval_sec"] = json!(0),
        3 => body["interval_sec"] = json!(HEARTBEAT_INTERVAL_SEC_MAX + 1),
        4 => body["check"]["command"] = json!("c".repeat(HEARTBEAT_COMMAND_BYTES_MAX + 1)),
        5 => body["check"]["command"] = json!("   "),
        6 => body["check"]["args"] = json!(vec!["a"; HEARTBEAT_ARGS_MAX + 1]),
        7 => body["check"]["args"] = json!(["a".repeat(HEARTBEAT_ARG_BYTES_MAX + 1)]),
        8 => {
            let past = [HEARTBEAT_RUNTIME_MS_MIN - 1, HEARTBEAT_RUNTIME_MS_MAX + 1];
            body["max_runtime_ms"] = json!(past.choose(rng).expect("budgets"));
        }
        9 => body["on_change"] = json!("sometimes"),
        _ => body["colour"] = json!("red"),
    }
}

/// An adapter of `rules`' type: its required fields, and each other field left out or drawn
/// within its limits, often at an edge.
fn valid_adapter(rng: &mut ChaCha8Rng, rules: &AdapterRules) -> Value {
    let mut adapter = json!({ "type": rules.kind });
    for text in rules.texts {
        let key = text.path.trim_start_matches("adapter.");
        if rules.required.contains(&key) || rng.gen_bool(0.5) {
            adapter[key] = valid_text(rng, text.chars_max, text.form);
        }
    }
    for field in rules.ints {
        if rng.gen_bool(0.5) {
            let key = field.path.trim_start_matches("adapter.");
            adapter[key] = valid_int(rng, field);
        }
    }
    for list in rules.lists {
        if rng.gen_bool(0.5) {
            let key = list.path.trim_start_matches("adapter.");
            // As many items as allowed, or an item as long as allowed: both at once would
            // pass the 64 KiB body limit.
            let (items, chars) = match rng.gen_range(0..3) {
                0 => (list.items_max, 8),
                1 => (rng.gen_range(1..3), list.chars_max),
                _ => (rng.gen_range(0..3), 8),
            };
            adapter[key] = json!(vec!["a".repeat(chars); items]);
        }
    }
    adapter
}

/// A text of the form within `chars_max` characters, often exactly that long.
fn valid_text(rng: &mut ChaCha8Rng, chars_max: usize, form: Form) -> Value {
    let long = rng.gen_bool(0.3);
    json!(match form {
        Form::OneOf(words) => words.choose(rng).expect("words").to_string(),
        Form::Url { .. } => {
            let stem = "https://edge.example/";
            let len = if long { chars_max } else { stem.len() + 4 };
            format!("{stem}{}", "p".repeat(len - stem.len()))
        }
        Form::EnvName => "K".repeat(if long { chars_max } else { 6 }),
        Form::NotBlank | Form::NonEmpty | Form::Any => {
            "é".repeat(if long { chars_max } else { 5 })
        }
        Form::Template => {
            let template = VALID_TEMPLATES.choose(rng).expect("templates");
            let padding = chars_max - template.chars().count();
            format!("{template}{}", "é".repeat(if long { padding } else { 0 }))
        }
    })
}

/// Chance that an otherwise valid change of an `llm` agent sets its system prompt to a
/// template at its edge (one the docs accept, or one they refuse), so that a sweep of a few
/// seeds meets a refused template.
const TEMPLATE_PATCH_CHANCE: f64 = 0.5;
/// The longest system prompt (docs/api.md, `adapter.system_prompt`).
const SYSTEM_PROMPT_CHARS_MAX: usize = 8_192;

/// A system prompt the docs accept or, as often, one they refuse (a syntax error, a variable
/// not in the table, or one character too many).
fn template_edge(rng: &mut ChaCha8Rng) -> Value {
    if rng.gen_bool(0.5) {
        valid_text(rng, SYSTEM_PROMPT_CHARS_MAX, Form::Template)
    } else {
        invalid_text(rng, SYSTEM_PROMPT_CHARS_MAX, Form::Template)
    }
}

/// Prompt templates docs/agents.md accepts: each variable, a filter, a condition.
const VALID_TEMPLATES: &[&str] = &[
    "Wake up, {{ agent.name }} (agent {{ agent.id }}).",
    "Run {{ run.id }} from {{ run.source }}: {{ run.reason }} at {{ now_local }}.",
    "{% if daily_cap_remaining %}{{ daily_cap_remaining }} runs left.{% endif %}",
    "Payload: {{ run.payload | tojson }}; ticket {{ run.payload[\"ticket\"] | default(\"\") }}",
    "No variables at all.",
];

/// Prompt templates docs/agents.md refuses: syntax errors, a typo, a payload field read as a
/// variable, a variable not in the table.
const INVALID_TEMPLATES: &[&str] = &[
    "{% if daily_cap_remaining %}unclosed",
    "Hello {{ agent.name ",
    "{{ agent.nmae }}",
    "{{ run.payload.ticket }}",
    "{{ secrets }}",
];

/// A text just past the field's limits or form.
fn invalid_text(rng: &mut ChaCha8Rng, chars_max: usize, form: Form) -> Value {
    let too_long = "x".repeat(chars_max + 1);
    json!(match form {
        Form::OneOf(_) => "neither".to_string(),
        Form::Url { strict } => {
            let bad = ["ftp://edge.example/", "https://", "edge.example/path"];
            let strict_bad = ["https://user@edge.example/", "https://edge.example/?q=1"];
            match rng.gen_range(0..4) {
                0 => format!("https://edge.example/{too_long}"),
                1 if strict => strict_bad.choose(rng).expect("urls").to_string(),
                _ => bad.choose(rng).expect("urls").to_string(),
            }
        }
        Form::EnvName => ["1ABC", "MY-KEY", "", too_long.as_str()]
            .choose(rng)
            .expect("names")
            .to_string(),
        Form::NotBlank => [" ", "", too_long.as_str()]
            .choose(rng)
            .expect("texts")
            .to_string(),
        Form::NonEmpty => ["", too_long.as_str()]
            .choose(rng)
            .expect("texts")
            .to_string(),
        Form::Any => too_long,
        Form::Template => match rng.gen_range(0..3) {
            0 => too_long,
            _ => INVALID_TEMPLATES.choose(rng).expect("templates").to_string(),
        },
    })
}

/// Pushes exactly one of the adapter's own fields past its limit (or adds a field it lacks).
fn push_adapter_past_a_limit(rng: &mut ChaCha8Rng, spec: &mut Value, rules: &AdapterRules) {
    let adapter = &mut spec["adapter"];
    let choices = rules.ints.len() + rules.texts.len() + rules.lists.len() + 1;
    let pick = rng.gen_range(0..choices);
    if let Some(field) = rules.ints.get(pick) {
        adapter[field.path.trim_start_matches("adapter.")] = invalid_int(rng, field);
    } else if let Some(text) = rules.texts.get(pick - rules.ints.len()) {
        let key = text.path.trim_start_matches("adapter.");
        adapter[key] = invalid_text(rng, text.chars_max, text.form);
    } else if let Some(list) = rules.lists.get(pick - rules.ints.len() - rules.texts.len()) {
        let key = list.path.trim_start_matches("adapter.");
        adapter[key] = if rng.gen_bool(0.5) {
            json!(vec!["a"; list.items_max + 1])
        } else {
            json!(["ok", "a".repeat(list.chars_max + 1)])
        };
    } else {
        // A field of another adapter type (`max_turns` is Claude's alone), or none at all.
        let key = if rules.kind == "codex_local" {
            "max_turns"
        } else {
            "colour"
        };
        adapter[key] = json!(3);
    }
}

/// A change of an adapter's own fields (or of the agent's limits): within limits, or with
/// one field past them. Never its heartbeat: such an agent is never woken.
fn adapter_patch(rng: &mut ChaCha8Rng, rules: &AdapterRules, invalid: bool) -> Value {
    let mut spec = json!({ "adapter": valid_adapter(rng, rules) });
    spec["adapter"]
        .as_object_mut()
        .expect("an object")
        .retain(|key, _| key != "type" && !rules.required.contains(&key.as_str()));
    if rng.gen_bool(0.2) {
        set(
            &mut spec,
            "limits.daily_cap",
            json!(rng.gen_range(1..=10_000)),
        );
    }
    if invalid {
        push_adapter_past_a_limit(rng, &mut spec, rules);
    }
    spec
}

fn submit(at_ms: u64, kind: EdgeKind, agent: Option<String>, body: Value) -> Step {
    Step {
        at_ms,
        action: Action::Submit { kind, agent, body },
    }
}

/// A spec with every field within its limits: each present field drawn at an edge of its range
/// or in the middle, or left out (its default applies).
fn valid_spec(
    rng: &mut ChaCha8Rng,
    i: usize,
    fast: &mut usize,
    rules: &'static AdapterRules,
) -> Value {
    let name = if rng.gen_bool(0.2) {
        // Exactly as long as a name may be.
        let stem = format!("edge-{i}-");
        format!("{stem}{}", "n".repeat(NAME_CHARS_MAX - stem.len()))
    } else {
        format!("edge-{i}")
    };
    let adapter = match rules.kind {
        "scripted" => adapter(rng),
        _ => valid_adapter(rng, rules),
    };
    let mut spec = json!({ "name": name, "adapter": adapter });
    for field in SPEC_INTS {
        // Only a scripted agent is ever woken: the others get no timer or idle chamber.
        let woken = field.path.starts_with("heartbeat.");
        if rng.gen_bool(0.5) || (woken && rules.kind != "scripted") {
            continue;
        }
        let value = valid_int(rng, field);
        let is_fast =
            field.path.starts_with("heartbeat.") && value.as_u64().is_some_and(|ms| ms < FAST_MS);
        if is_fast {
            if *fast >= FAST_AGENTS_MAX {
                continue;
            }
            *fast += 1;
        }
        set(&mut spec, field.path, value);
    }
    // The breaker's longest cooldown may not be below its first one.
    let cooldown = spec["breaker"]["cooldown_ms"].as_u64().unwrap_or(900_000);
    let max = spec["breaker"]["cooldown_ms_max"]
        .as_u64()
        .unwrap_or(7_200_000);
    if max < cooldown {
        set(&mut spec, "breaker.cooldown_ms_max", json!(cooldown));
    }
    if rng.gen_bool(0.4) {
        spec["time_zone"] = json!(ZONES.choose(rng).expect("zones"));
    }
    spec
}

/// A scripted adapter: 1 step, or as many as allowed, lasting up to a day each.
fn adapter(rng: &mut ChaCha8Rng) -> Value {
    let count = if rng.gen_bool(0.1) {
        STEPS_MAX
    } else {
        rng.gen_range(1..=3)
    };
    let steps: Vec<Value> = (0..count)
        .map(|_| {
            let duration_ms = match rng.gen_range(0..10) {
                0 => 0,
                1 => STEP_MS_MAX,
                _ => rng.gen_range(100..30_000),
            };
            let outcome = ["succeeded", "succeeded", "failed", "hang"]
                .choose(rng)
                .expect("outcomes");
            json!({ "duration_ms": duration_ms, "outcome": outcome })
        })
        .collect();
    json!({ "type": "scripted", "steps": steps })
}

/// A value within the field's limits: an edge, one step inside one, or its middle.
fn valid_int(rng: &mut ChaCha8Rng, field: &IntField) -> Value {
    let min = if field.path == "breaker.cooldown_ms_max" {
        // Its real lower bound is the spec's cooldown; the default one keeps clear of it.
        900_000
    } else {
        field.min
    };
    match rng.gen_range(0..6) {
        0 => json!(min),
        1 => json!(min + 1),
        2 => json!(field.max - 1),
        3 => json!(field.max),
        4 if field.nullable => Value::Null,
        _ => json!(rng.gen_range(min..=field.max)),
    }
}

/// A value just past the field's limits, or of the wrong type.
fn invalid_int(rng: &mut ChaCha8Rng, field: &IntField) -> Value {
    match rng.gen_range(0..5) {
        0 if field.min > 0 => json!(field.min - 1),
        0 | 1 => json!(field.max + 1),
        2 => json!(-1),
        3 => json!(field.max.to_string()),
        _ => json!(f64::from(u32::try_from(field.min).unwrap_or(1)) + 0.5),
    }
}

/// Pushes exactly one field of a valid spec past its limit.
fn push_spec_past_a_limit(rng: &mut ChaCha8Rng, spec: &mut Value) {
    match rng.gen_range(0..10) {
        0 => {
            spec["name"] = match rng.gen_range(0..4) {
                0 => json!("x".repeat(NAME_CHARS_MAX + 1)),
                1 => json!(""),
                2 => json!("two words"),
                _ => json!("naïve"),
            }
        }
        1 => {
            spec["time_zone"] = if rng.gen_bool(0.5) {
                json!(NOT_ZONES.choose(rng).expect("not zones"))
            } else {
                json!("Z".repeat(ZONE_CHARS_MAX + 1))
            }
        }
        2 if !spec["adapter"]["steps"].is_array() => {
            // Not a scripted adapter: a field it does not have.
            spec["adapter"]["colour"] = json!(1);
        }
        2 => {
            let steps = &mut spec["adapter"]["steps"];
            match rng.gen_range(0..3) {
                0 => *steps = json!([]),
                1 => {
                    let step = steps[0].clone();
                    *steps = Value::Array(vec![step; STEPS_MAX + 1]);
                }
                _ => steps[0]["duration_ms"] = json!(STEP_MS_MAX + 1),
            }
        }
        3 => {
            let group = ["limits", "heartbeat", "breaker", "liveness"]
                .choose(rng)
                .expect("groups");
            set(spec, &format!("{group}.colour"), json!(1));
        }
        _ => {
            let field = SPEC_INTS.choose(rng).expect("fields");
            set(spec, field.path, invalid_int(rng, field));
        }
    }
}

/// A spec change (JSON merge patch) of one or two fields: within limits, back to a default
/// (`null`), or with one field past its limit.
fn patch(rng: &mut ChaCha8Rng, invalid: bool) -> Value {
    let mut patch = json!({});
    for _ in 0..rng.gen_range(1..=2) {
        let field = SPEC_INTS.choose(rng).expect("fields");
        let value = if rng.gen_bool(0.25) {
            Value::Null
        } else {
            let value = valid_int(rng, field);
            // Keep timers and idle chambers of changed agents at a minute or more.
            match value.as_u64() {
                Some(ms) if field.path.starts_with("heartbeat.") && ms < FAST_MS => json!(60_000),
                _ => value,
            }
        };
        set(&mut patch, field.path, value);
    }
    if invalid {
        if rng.gen_bool(0.2) {
            set(&mut patch, "limits.colour", json!("blue"));
        } else {
            let field = SPEC_INTS.choose(rng).expect("fields");
            set(&mut patch, field.path, invalid_int(rng, field));
        }
    }
    patch
}

/// A wakeup request: each optional field left out or drawn at its edge, and with `invalid` one
/// of them just past it. Idempotency keys are unique per request (`n`).
fn wakeup(rng: &mut ChaCha8Rng, n: usize, invalid: bool) -> Value {
    let mut body = json!({ "source": SOURCES.choose(rng).expect("sources") });
    let reason_char = if rng.gen_bool(0.5) { "r" } else { "é" };
    if rng.gen_bool(0.5) {
        body["reason"] = json!(reason_char.repeat(REASON_CHARS_MAX));
    }
    if rng.gen_bool(0.4) {
        body["payload"] = sized_object(PAYLOAD_BYTES_MAX);
    }
    if rng.gen_bool(0.4) {
        body["task_key"] = json!(padded(&format!("task-{}", n % 3), KEY_CHARS_MAX));
    }
    if rng.gen_bool(0.4) {
        body["idempotency_key"] = json!(padded(&format!("key-{n}-"), KEY_CHARS_MAX));
    }
    if rng.gen_bool(0.4) {
        body["trigger_detail"] = sized_object(TRIGGER_DETAIL_BYTES_MAX);
    }
    if invalid {
        match rng.gen_range(0..8) {
            0 => body["source"] = json!("later"),
            1 => body["reason"] = json!(reason_char.repeat(REASON_CHARS_MAX + 1)),
            2 => body["payload"] = sized_object(PAYLOAD_BYTES_MAX + 1),
            3 => body["task_key"] = json!(padded("task-", KEY_CHARS_MAX + 1)),
            4 => body["idempotency_key"] = json!(""),
            5 => body["trigger_detail"] = sized_object(TRIGGER_DETAIL_BYTES_MAX + 1),
            6 => body["trigger_detail"] = json!(["not", "an", "object"]),
            _ => body["requested_by"] = json!("someone"),
        }
    }
    body
}

/// `/pause`: a timed pause of 1 minute to a week, or minutes past that range.
fn pause(rng: &mut ChaCha8Rng, invalid: bool) -> Value {
    let minutes = if invalid {
        [
            json!(0),
            json!(PAUSE_MINUTES_MAX + 1),
            json!(-1),
            json!("5"),
        ]
        .choose(rng)
        .expect("values")
        .clone()
    } else {
        // A week-long pause only now and then: it silences the agent until a resume.
        match rng.gen_range(0..12) {
            0 => json!(PAUSE_MINUTES_MAX),
            10 => Value::Null,
            11 => return json!({}),
            1..=4 => json!(1),
            _ => json!(rng.gen_range(2..=5)),
        }
    };
    json!({ "minutes": minutes })
}

/// `pause_heartbeats`: minutes left out, at the clamp's edges or far past them (clamped, never
/// refused), or negative or not a number.
fn rest(rng: &mut ChaCha8Rng, invalid: bool) -> Value {
    if invalid {
        let minutes = [json!(-1), json!("ten")]
            .choose(rng)
            .expect("values")
            .clone();
        return json!({ "minutes": minutes });
    }
    match rng.gen_range(0..7) {
        0 => json!({}),
        1 => json!({ "minutes": 0 }),
        2 => json!({ "minutes": 1 }),
        3 => json!({ "minutes": 60 }),
        4 => json!({ "minutes": 61 }),
        5 => json!({ "minutes": 999 }),
        _ => json!({ "minutes": null }),
    }
}

/// A pulse saying what the agent does: bare, a status, or metadata at its byte, key and depth
/// limits; or one field past them (a key or a level too many, a byte too large, a status or
/// a shape the API does not know, an unknown field).
fn pulse(rng: &mut ChaCha8Rng, invalid: bool) -> Value {
    if invalid {
        return match rng.gen_range(0..7) {
            0 => json!({ "metadata": keyed(PULSE_METADATA_KEYS_MAX + 1) }),
            1 => json!({ "metadata": nested(PULSE_METADATA_LEVELS_MAX + 1) }),
            2 => json!({ "metadata": sized_object(PULSE_METADATA_BYTES_MAX + 1) }),
            3 => json!({ "status": "asleep" }),
            4 => json!({ "status": "busy", "metadata": ["queue", 3] }),
            5 => json!({ "status": 1 }),
            _ => json!({ "status": "idle", "load": 0.5 }),
        };
    }
    let status = PULSE_STATUSES.choose(rng).expect("statuses");
    match rng.gen_range(0..7) {
        0 => json!({}),
        1 => json!({ "status": status }),
        2 => json!({ "status": null, "metadata": null }),
        3 => json!({ "status": status, "metadata": keyed(PULSE_METADATA_KEYS_MAX) }),
        4 => json!({ "metadata": nested(PULSE_METADATA_LEVELS_MAX) }),
        5 => json!({ "metadata": sized_object(PULSE_METADATA_BYTES_MAX) }),
        _ => {
            json!({ "status": status, "metadata": { "queue": rng.gen_range(0..100), "task": "triage" } })
        }
    }
}

/// Metadata of exactly `keys` keys: half at the top, the rest in an object under `inner`
/// (which counts as one of them).
fn keyed(keys: usize) -> Value {
    let top = keys / 2;
    let mut inner = serde_json::Map::new();
    for i in 0..keys - top {
        inner.insert(format!("i{i}"), json!(i));
    }
    let mut object: serde_json::Map<String, Value> =
        (0..top - 1).map(|i| (format!("k{i}"), json!(i))).collect();
    object.insert("inner".into(), Value::Object(inner));
    Value::Object(object)
}

/// Metadata `levels` deep, arrays and objects alternating under the top object.
fn nested(levels: usize) -> Value {
    let mut value = json!(1);
    for level in (1..levels).rev() {
        value = if level % 2 == 0 {
            json!([value])
        } else {
            json!({ format!("l{level}"): value })
        };
    }
    json!({ "l0": value })
}

/// `{"d":"xx…"}` of exactly `bytes` bytes as compact JSON.
fn sized_object(bytes: usize) -> Value {
    const AROUND: usize = r#"{"d":""}"#.len();
    json!({ "d": "x".repeat(bytes - AROUND) })
}

/// `stem` padded with `-` to `chars` characters.
fn padded(stem: &str, chars: usize) -> String {
    format!("{stem}{}", "-".repeat(chars - stem.len()))
}

/// Sets the value at a dotted path, creating objects on the way.
fn set(value: &mut Value, path: &str, new: Value) {
    let mut at = value;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        if keys.peek().is_none() {
            at[key] = new;
            return;
        }
        if !at[key].is_object() {
            at[key] = json!({});
        }
        at = &mut at[key];
    }
}
