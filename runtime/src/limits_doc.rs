//! docs/api.md's table of limits, checked against the constants it names.
//!
//! Every limit is a named constant, and the table in docs/api.md is what users read. The tests
//! that hold a limit at its boundary use the constant itself, so a wrong constant (a week typed
//! as a day) moves the boundary and its test together; mutation testing found exactly that. This
//! test reads the documented numbers from the table, with their units, and compares each with
//! the constant of the same name: the table and the code are two independent statements of the
//! contract, and either being wrong fails here.

/// The table under test.
const API_DOC: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md"));

/// The constants the table names, each with its value in the unit its name says.
fn constants() -> Vec<(&'static str, f64)> {
    macro_rules! limit {
        ($($segment:ident)::+) => {
            (
                stringify!($($segment)::+).rsplit("::").next().expect("a name").trim(),
                crate::$($segment)::+ as f64,
            )
        };
    }
    vec![
        limit!(api::body::BODY_BYTES_MAX),
        limit!(api::CONNECTIONS_MAX),
        limit!(api::HEADER_READ_TIMEOUT_MS),
        limit!(api::body_deadline::BODY_READ_TIMEOUT_MS),
        limit!(api::body_deadline::BODY_STALL_TIMEOUT_MS),
        limit!(api::rate_limit::REQUEST_BURST_PER_TOKEN),
        limit!(api::rate_limit::REQUESTS_PER_SECOND_PER_TOKEN),
        limit!(api::rate_limit::RATE_LIMITED_TOKENS_MAX),
        limit!(writer::WRITER_QUEUE_CAPACITY),
        limit!(store::STORE_CACHE_BYTES),
        limit!(store::wal::WAL_CHECKPOINT_APPENDS),
        limit!(store::wal::WAL_CHECKPOINT_BYTES),
        limit!(store::wal::WAL_GROW_BYTES),
        limit!(store::wal::WAL_KEEP_BYTES),
        limit!(writer::GROUP_COMMIT_COMMANDS_MAX),
        limit!(api::in_flight::REQUESTS_IN_FLIGHT_MAX),
        limit!(api::in_flight::REQUESTS_IN_FLIGHT_NODE_OPERATOR_RESERVE),
        limit!(api::in_flight::REQUESTS_IN_FLIGHT_PER_TENANT_MAX),
        limit!(api::in_flight::REQUESTS_IN_FLIGHT_TENANT_OPERATOR_RESERVE),
        limit!(api::in_flight::REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX),
        limit!(api::in_flight::REQUESTS_IN_FLIGHT_PER_OPERATOR_TOKEN_MAX),
        limit!(api::streams::SSE_STREAMS_MAX),
        limit!(api::streams::SSE_STREAMS_NODE_OPERATOR_RESERVE),
        limit!(api::streams::SSE_STREAMS_PER_TENANT_MAX),
        limit!(api::streams::SSE_STREAMS_TENANT_OPERATOR_RESERVE),
        limit!(api::streams::SSE_STREAMS_PER_TOKEN_MAX),
        limit!(api::streams::SSE_RETRY_AFTER_S),
        limit!(api::error::RETRY_AFTER_DEFAULT_S),
        limit!(engine::spec_error::ECHOED_VALUE_CHARS_MAX),
        limit!(api::error::ERROR_MESSAGE_CHARS_MAX),
        limit!(api::error::ERROR_FIELD_CHARS_MAX),
        limit!(net::policy::OUTBOUND_ALLOW_ENTRIES_MAX),
        limit!(api::events::SSE_KEEPALIVE_MS),
        limit!(api::events::EVENTS_PAGE_DEFAULT),
        limit!(store::EVENTS_PAGE_MAX),
        limit!(api::events::EVENTS_SCAN_PAGES_MAX),
        limit!(api::AGENTS_PAGE_DEFAULT),
        limit!(api::AGENTS_PAGE_MAX),
        limit!(api::runs::RUNS_PAGE_DEFAULT),
        limit!(api::runs::RUNS_PAGE_MAX),
        limit!(api::runs::RUN_LOG_PAGE_DEFAULT),
        limit!(api::runs::RUN_LOG_PAGE_MAX),
        limit!(transcript::TRANSCRIPT_RUN_BYTES_MAX),
        limit!(transcript::TRANSCRIPT_AGENT_BYTES_MAX),
        limit!(transcript::TRANSCRIPT_RETENTION_DAYS_DEFAULT),
        limit!(transcript::TRANSCRIPT_PRUNE_INTERVAL_MS),
        limit!(transcript::TRANSCRIPT_IO_THREADS_MAX),
        limit!(transcript::TRANSCRIPT_IO_THREADS_PER_CORE),
        limit!(transcript::TRANSCRIPT_IO_THREADS_MIN),
        limit!(transcript::TRANSCRIPT_FIELD_BYTES_MAX),
        limit!(transcript::excerpt::FINAL_ANSWER_EXCERPT_BYTES_MAX),
        limit!(redact::SECRET_CHARS_MIN),
        limit!(engine::run::FINISHED_RUNS_KEPT_PER_AGENT),
        limit!(engine::node_bounds::FINISHED_RUNS_KEPT_PER_NODE),
        limit!(engine::node_bounds::ANSWER_EXCERPTS_KEPT_PER_NODE),
        limit!(engine::run::DETAIL_CHARS_MAX),
        limit!(engine::agent::AGENT_NAME_CHARS_MAX),
        limit!(engine::agent_update::CHANGED_FIELDS_MAX),
        limit!(store::backup::BACKUP_CHUNK_EVENTS),
        limit!(snapshots::SNAPSHOT_EVERY_EVENTS),
        limit!(snapshots::SNAPSHOT_EVERY_MS),
        limit!(store::snapshot::SNAPSHOT_CHUNK_AGENTS),
        limit!(store::snapshot::SNAPSHOT_PRUNE_BATCH),
        limit!(store::snapshot::BACKUP_COPY_CHUNK_RECORDS),
        limit!(store::snapshot::SNAPSHOT_DECODE_BATCH),
        limit!(event_tail::EVENT_TAIL_EVENTS_MAX),
        limit!(event_tail::EVENT_TAIL_BYTES_MAX),
        limit!(snapshots::EVENTS_RETENTION_MS),
        limit!(store::compaction::COMPACT_BATCH_EVENTS),
        limit!(engine::agent::INTERVAL_MS_MIN),
        limit!(engine::agent::INTERVAL_MS_MAX),
        limit!(engine::agent::AGENTS_MAX),
        limit!(engine::agent::RUN_TIMEOUT_MS_MIN),
        limit!(engine::agent::RUN_TIMEOUT_MS_MAX),
        limit!(engine::agent::RUN_TIMEOUT_MS_DEFAULT),
        limit!(engine::agent::QUEUED_RUNS_MAX_LIMIT),
        limit!(engine::agent::QUEUED_RUNS_MAX_DEFAULT),
        limit!(engine::agent::COOLDOWN_MS_MAX),
        limit!(engine::agent::SCRIPT_STEPS_MAX),
        limit!(engine::agent::SCRIPT_STEP_MS_MAX),
        limit!(engine::agent::TIME_ZONE_CHARS_MAX),
        limit!(engine::daily_cap::DAILY_CAP_MAX),
        limit!(engine::breaker::FAILURES_TO_OPEN_DEFAULT),
        limit!(engine::breaker::FAILURES_TO_OPEN_MAX),
        limit!(engine::breaker::COOLDOWN_MS_DEFAULT),
        limit!(engine::breaker::COOLDOWN_MS_MAX_DEFAULT),
        limit!(engine::breaker::COOLDOWN_MS_MIN),
        limit!(engine::breaker::COOLDOWN_MS_LIMIT),
        limit!(engine::pause::OPERATOR_PAUSE_MINUTES_MAX),
        limit!(engine::pause::PAUSE_HEARTBEATS_MINUTES_DEFAULT),
        limit!(engine::pause::PAUSE_HEARTBEATS_MINUTES_MIN),
        limit!(engine::pause::PAUSE_HEARTBEATS_MINUTES_MAX),
        limit!(engine::wakeup::IDEMPOTENCY_TTL_MS),
        limit!(engine::wakeup::IDEMPOTENCY_KEYS_PER_AGENT_MAX),
        limit!(engine::node_bounds::IDEMPOTENCY_KEYS_PER_NODE_MAX),
        limit!(engine::wakeup::REASON_CHARS_MAX),
        limit!(engine::wakeup::KEY_CHARS_MAX),
        limit!(engine::wakeup::PAYLOAD_BYTES_MAX),
        limit!(engine::wakeup::TRIGGER_DETAIL_BYTES_MAX),
        limit!(api::wakeups::WAKEUPS_PAGE_MAX),
        limit!(api::timeline::TIMELINE_PAGE_DEFAULT),
        limit!(api::timeline::TIMELINE_PAGE_MAX),
        limit!(engine::tenant::TENANT_NAME_CHARS_MAX),
        limit!(engine::tenant::TENANTS_MAX),
        limit!(engine::liveness::PULSE_INTERVAL_MS_MIN),
        limit!(engine::liveness::PULSE_INTERVAL_MS_MAX),
        limit!(engine::liveness::PULSE_INTERVAL_MS_DEFAULT),
        limit!(engine::liveness::OFFLINE_AFTER_MISSES_MAX),
        limit!(engine::liveness::OFFLINE_AFTER_MISSES_DEFAULT),
        limit!(engine::liveness::PHI_THRESHOLD_MIN),
        limit!(engine::liveness::PHI_THRESHOLD_MAX),
        limit!(engine::liveness::PHI_THRESHOLD_DEFAULT),
        limit!(engine::liveness::PHI_WINDOW),
        limit!(engine::liveness::PHI_SAMPLES_MIN),
        limit!(engine::liveness::LIVENESS_SWEEP_MS),
        limit!(engine::liveness::PULSE_BATCH_MAX),
        limit!(engine::pulse_report::PULSE_METADATA_BYTES_MAX),
        limit!(engine::pulse_report::PULSE_METADATA_KEYS_MAX),
        limit!(engine::pulse_report::PULSE_METADATA_DEPTH_MAX),
        limit!(engine::schedule::JITTER_MS_MAX),
        limit!(node::WALL_RECHECK_MS),
        limit!(node::DRAIN_GRACE_DEFAULT_S),
        limit!(node::DRAIN_GRACE_MAX_S),
        limit!(node::DRAIN_POLL_MS),
        limit!(node::WORKERS_MAX),
        limit!(io::entropy::TOKEN_BYTES),
        limit!(fleet::OPERATOR_TOKEN_CHARS_MIN),
        limit!(fleet::FLEET_FILE_BYTES_MAX),
        limit!(engine::llm_spec::MAX_ITERATIONS_DEFAULT),
        limit!(engine::llm_spec::MAX_ITERATIONS_MIN),
        limit!(engine::llm_spec::MAX_ITERATIONS_MAX),
        limit!(engine::llm_spec::TOOL_CALLS_MAX_DEFAULT),
        limit!(engine::llm_spec::TOOL_CALLS_MAX_LIMIT),
        limit!(engine::llm_spec::MAX_OUTPUT_TOKENS_DEFAULT),
        limit!(engine::llm_spec::MAX_OUTPUT_TOKENS_MAX),
        limit!(engine::llm_spec::API_KEY_ENV_CHARS_MAX),
        limit!(engine::usage::DAILY_BUDGET_USD_MAX),
        limit!(engine::history::HISTORY_MESSAGES_MAX),
        limit!(engine::history::HISTORY_BYTES_MAX),
        limit!(engine::history::HISTORY_MESSAGE_BYTES_MAX),
        limit!(exec::agent_loop::ANSWER_EXCERPT_BYTES_MAX),
        limit!(exec::model::MODEL_ANSWER_BYTES_MAX),
        limit!(exec::model::ERROR_EXCERPT_CHARS_MAX),
        limit!(exec::pricing::PRICE_USD_PER_MTOK_MAX),
        limit!(node_file::NODE_FILE_BYTES_MAX),
        limit!(alerts::ALERT_SINKS_MAX),
        limit!(alerts::ALERT_SINK_NAME_CHARS_MAX),
        limit!(alerts::ALERT_SINK_TENANTS_MAX),
        limit!(alerts::ALERT_SECRET_ENV_CHARS_MAX),
        limit!(alerts::ALERT_CATCH_UP_DEFAULT_S),
        limit!(alerts::ALERT_CATCH_UP_MIN_S),
        limit!(alerts::ALERT_CATCH_UP_MAX_S),
        limit!(alerts::ALERT_RETRY_FIRST_MS),
        limit!(alerts::ALERT_RETRY_MAX_MS),
        limit!(alerts::ALERT_POST_TIMEOUT_MS),
        limit!(alerts::ALERT_ANSWER_BYTES_MAX),
        limit!(alerts::ALERT_PAGE_EVENTS),
        limit!(alerts::ALERT_CURSOR_SAVE_EVENTS),
        limit!(engine::predicate::HEARTBEAT_MIN_INTERVAL_SEC),
        limit!(engine::predicate::HEARTBEAT_MAX_INTERVAL_SEC),
        limit!(engine::predicate::HEARTBEAT_MAX_RUNTIME_MS),
        limit!(engine::predicate::HEARTBEAT_MIN_RUNTIME_MS),
        limit!(engine::predicate::HEARTBEAT_MAX_STATE_BYTES),
        limit!(engine::predicate::HEARTBEAT_MAX_PENDING_ENQUEUED),
        limit!(engine::predicate::HEARTBEATS_PER_AGENT_MAX),
        limit!(engine::predicate::HEARTBEAT_ID_CHARS_MAX),
        limit!(engine::predicate::HEARTBEAT_URL_BYTES_MAX),
        limit!(engine::predicate::HEARTBEAT_POINTER_BYTES_MAX),
        limit!(engine::predicate::HEARTBEAT_SECRET_HEADERS_MAX),
        limit!(engine::predicate::HEARTBEAT_HEADER_NAME_BYTES_MAX),
        limit!(engine::predicate::HEARTBEAT_COMMAND_BYTES_MAX),
        limit!(engine::predicate::HEARTBEAT_ARGS_MAX),
        limit!(engine::predicate::HEARTBEAT_ARG_BYTES_MAX),
        limit!(heartbeats::HEARTBEAT_EVALUATIONS_KEPT),
        limit!(heartbeats::HEARTBEAT_ANSWER_BYTES_MAX),
        limit!(heartbeats::HEARTBEAT_DETAIL_CHARS_MAX),
        limit!(api::heartbeats::HEARTBEATS_PAGE_DEFAULT),
        limit!(api::heartbeats::HEARTBEATS_PAGE_MAX),
        limit!(api::heartbeats::HEARTBEAT_SEAM_SLOW_MS_MAX),
    ]
}

/// The table's rows as (constant name, documented value), names like `_MAX` after a full name
/// completed from it (`RUN_TIMEOUT_MS_MIN` / `_MAX` names `RUN_TIMEOUT_MS_MAX`).
fn documented(doc: &str) -> Vec<(String, String)> {
    let table = doc
        .split("\n## Limits\n")
        .nth(1)
        .expect("docs/api.md has a `## Limits` section");
    let table = table.split("\n## ").next().unwrap_or(table);
    let mut rows = Vec::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let names = names_of(cells[0]);
        let values = values_of(cells[1]);
        assert_eq!(
            names.len(),
            values.len(),
            "docs/api.md: {} names, {} values in {line:?}",
            names.len(),
            values.len()
        );
        rows.extend(names.into_iter().zip(values));
    }
    rows
}

/// The constant names of a row's first cell (the backticked words before any file name).
fn names_of(cell: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for part in cell.split('`').skip(1).step_by(2) {
        let is_name = part
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !is_name {
            continue;
        }
        match (part.strip_prefix('_'), names.first()) {
            (Some(_), Some(full)) => {
                let words = part.matches('_').count();
                let kept: Vec<&str> = full.split('_').collect();
                let stem = kept[..kept.len() - words].join("_");
                names.push(format!("{stem}{part}"));
            }
            _ => names.push(part.to_string()),
        }
    }
    names
}

/// A value cell's values: parenthetical remarks dropped, then split at ` / `.
fn values_of(cell: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut depth = 0_u32;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    plain.split(" / ").map(|v| v.trim().to_string()).collect()
}

/// Milliseconds in a time unit as the table writes it.
fn unit_ms(word: &str) -> Option<f64> {
    let ms = match word.trim_end_matches(',') {
        "ms" => 1.0,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "day" | "days" => 86_400_000.0,
        "week" | "weeks" => 604_800_000.0,
        _ => return None,
    };
    Some(ms)
}

/// Bytes in a size unit.
fn unit_bytes(word: &str) -> Option<f64> {
    match word {
        "KiB" => Some(1024.0),
        "MiB" => Some(1024.0 * 1024.0),
        _ => None,
    }
}

/// A documented value in the unit the constant's name says: `_MS` milliseconds, a final `_S`
/// seconds, `_DAYS` days, else the number as written (sizes in bytes).
fn value_in_unit_of(name: &str, value: &str) -> Result<f64, String> {
    let mut words = value.split_whitespace();
    let first = words.next().ok_or("an empty value")?;
    let number = match first {
        "a" | "one" => 1.0,
        digits => digits
            .replace(',', "")
            .parse::<f64>()
            .map_err(|_| format!("{value:?} does not start with a number"))?,
    };
    let unit = words.next().unwrap_or("");
    if let Some(bytes) = unit_bytes(unit) {
        return Ok(number * bytes);
    }
    let Some(ms) = unit_ms(unit) else {
        return Ok(number);
    };
    let in_ms = number * ms;
    let words: Vec<&str> = name.split('_').collect();
    if words.contains(&"MS") {
        Ok(in_ms)
    } else if words.last() == Some(&"S") {
        Ok(in_ms / 1_000.0)
    } else if words.contains(&"DAYS") {
        Ok(in_ms / 86_400_000.0)
    } else {
        Err(format!(
            "{name} is documented as a time ({value:?}) but its name has no unit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn every_documented_limit_is_the_constant_it_names() {
        let code: BTreeMap<&str, f64> = constants().into_iter().collect();
        let rows = documented(API_DOC);
        let mut wrong = Vec::new();
        for (name, value) in &rows {
            let Some(actual) = code.get(name.as_str()) else {
                wrong.push(format!("{name}: documented, but not in this test's list"));
                continue;
            };
            match value_in_unit_of(name, value) {
                Ok(documented) if documented == *actual => {}
                Ok(documented) => wrong.push(format!(
                    "{name}: docs say {value:?} = {documented}, code {actual}"
                )),
                Err(why) => wrong.push(format!("{name}: {why}")),
            }
        }
        for name in code.keys() {
            if !rows.iter().any(|(documented, _)| documented == name) {
                wrong.push(format!("{name}: in this test's list, not in docs/api.md"));
            }
        }
        assert!(
            wrong.is_empty(),
            "docs/api.md's limits disagree with the code:\n{}",
            wrong.join("\n")
        );
        assert!(
            rows.len() >= 100,
            "the table shrank to {} rows: is it still parsed?",
            rows.len()
        );
    }

    #[test]
    fn a_wrong_documented_number_is_reported() {
        let doc = "x\n## Limits\n\n| name | value | what |\n|---|---|---|\n\
                   | `INTERVAL_MS_MIN` / `INTERVAL_MS_MAX` | 1,000 ms / 1 day | interval |\n\n## Next\n";
        let rows = documented(doc);
        let code: BTreeMap<&str, f64> = constants().into_iter().collect();
        let (name, value) = &rows[1];
        assert_eq!(name, "INTERVAL_MS_MAX");
        assert_ne!(
            value_in_unit_of(name, value).unwrap(),
            code["INTERVAL_MS_MAX"]
        );
        assert_eq!(
            value_in_unit_of(&rows[0].0, &rows[0].1).unwrap(),
            code["INTERVAL_MS_MIN"]
        );
    }

    #[test]
    fn values_read_with_their_units() {
        assert_eq!(value_in_unit_of("X_MS", "1 s"), Ok(1_000.0));
        assert_eq!(
            value_in_unit_of("X_MS", "604,800,000 ms"),
            Ok(604_800_000.0)
        );
        assert_eq!(value_in_unit_of("X_MS", "one week"), Ok(604_800_000.0));
        assert_eq!(value_in_unit_of("RETRY_S", "5 s"), Ok(5.0));
        assert_eq!(
            value_in_unit_of("KEEP_DAYS_DEFAULT", "7 days, from then"),
            Ok(7.0)
        );
        assert_eq!(value_in_unit_of("X_BYTES_MAX", "64 KiB"), Ok(65_536.0));
        assert_eq!(value_in_unit_of("X_MAX", "1,000 requests"), Ok(1_000.0));
        assert!(value_in_unit_of("X_MAX", "10 min").is_err());
        assert!(value_in_unit_of("X_MAX", "many").is_err());
        assert_eq!(values_of("5 min (and < interval)"), vec!["5 min"]);
        assert_eq!(
            names_of("`PULSE_METADATA_BYTES_MAX` / `_KEYS_MAX` (`engine/pulse_report.rs`)"),
            vec!["PULSE_METADATA_BYTES_MAX", "PULSE_METADATA_KEYS_MAX"]
        );
    }
}
