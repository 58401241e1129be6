//! `vigil runs log N [--follow]`: a run's transcript, one line per entry (time, kind, a short
//! summary). Everything in a transcript came from a model, a tool or a client, so every line is
//! printed through [`escape_controls`] (and `--json` through [`safe_json_line`]): a tool output
//! holding an escape sequence shows as `\x1b[…`, never acts on the operator's terminal.

use std::time::Duration;

use serde_json::Value;

use super::format::{escape_controls, safe_json_line, span, time_millis};
use super::{CliError, Printed, Session};
use crate::api::RUN_LOG_PAGE_MAX;

/// How long `--follow` waits before asking again when the run has nothing new (1 s): a
/// transcript grows at the pace of model calls, seconds apart.
pub const RUN_LOG_POLL_MS: u64 = 1_000;
/// Most pages one read without `--follow` goes through: a transcript is capped far below this
/// many pages, but a bound.
const RUN_LOG_PAGES_MAX: u64 = 10_000;
/// Most characters of model or tool text shown on one line; the rest is `…`.
pub const RUN_LOG_TEXT_CHARS_MAX: usize = 120;

impl Session {
    /// Prints `run`'s transcript so far; with `follow`, keeps polling every `RUN_LOG_POLL_MS`
    /// until the server says it is complete.
    pub async fn runs_log(
        &self,
        run: u64,
        follow: bool,
        emit: &mut dyn FnMut(Printed),
    ) -> Result<(), CliError> {
        let mut offset = 0;
        let mut pages = 0;
        loop {
            let page = self
                .get(&format!(
                    "/v1/runs/{run}/log?offset={offset}&limit={RUN_LOG_PAGE_MAX}"
                ))
                .await?;
            pages += 1;
            let next = page["next_offset"].as_u64().unwrap_or(offset);
            let complete = page["complete"].as_bool().unwrap_or(true);
            // An empty page while following says nothing (but the first and last are shown,
            // so that `--json` always prints something).
            if next > offset || complete || pages == 1 {
                emit(Printed::out(self.log_text(&page)));
            }
            if complete {
                return Ok(());
            }
            if next > offset {
                offset = next;
                if follow || pages < RUN_LOG_PAGES_MAX {
                    continue;
                }
            }
            if !follow {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(RUN_LOG_POLL_MS)).await;
        }
    }

    /// One page as printed: its entries, or the page's JSON on one line with `--json`.
    fn log_text(&self, page: &Value) -> String {
        if self.json() {
            return format!("{}\n", safe_json_line(page));
        }
        page["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|entry| format!("{}\n", entry_line(entry)))
            .collect()
    }
}

/// One entry on one line: `seq  time  kind  summary`, escaped for a terminal.
pub fn entry_line(entry: &Value) -> String {
    let seq = entry["seq"].as_u64().unwrap_or(0);
    let at = entry["at_ms"]
        .as_u64()
        .map_or_else(|| "-".to_string(), time_millis);
    let kind = entry["kind"].as_str().unwrap_or("?");
    let line = format!("{seq:>4}  {at}  {kind:<14}  {}", summary(entry));
    escape_controls(line.trim_end()).into_owned()
}

/// What an entry says, in a few fields.
fn summary(entry: &Value) -> String {
    let text = |key: &str| entry[key].as_str().unwrap_or("").to_string();
    let number = |key: &str| entry[key].as_u64().unwrap_or(0);
    match entry["kind"].as_str().unwrap_or("") {
        "wakeup" => format!(
            "source={} reason={} payload={}",
            text("source"),
            quoted(entry["reason"].as_str().unwrap_or("")),
            shortened(&entry["payload"].to_string())
        ),
        "model_request" => format!(
            "#{} model={} messages={} bytes={}",
            number("iteration"),
            text("model"),
            number("messages"),
            number("bytes")
        ),
        "model_response" => model_response(entry),
        "tool_call" => format!(
            "{} id={} {}",
            text("name"),
            text("id"),
            shortened(&entry["arguments"].to_string())
        ),
        "tool_result" => format!(
            "{} id={} {} took={} {}",
            text("name"),
            text("id"),
            if entry["is_error"].as_bool() == Some(true) {
                "error"
            } else {
                "ok"
            },
            span(number("latency_ms")),
            quoted(&text("output"))
        ),
        "stop" => match entry["detail"].as_str() {
            Some(detail) => format!("{} {}", text("stop_reason"), quoted(detail)),
            None => text("stop_reason"),
        },
        "note" => shortened(&text("text")),
        "child_output" => format!("{} {}", text("stream"), shortened(&text("text"))),
        _ => shortened(&entry.to_string()),
    }
}

fn model_response(entry: &Value) -> String {
    let usage = &entry["usage"];
    let calls: Vec<&str> = entry["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let calls = match calls.is_empty() {
        true => String::new(),
        false => format!(" calls={}", calls.join(",")),
    };
    format!(
        "#{} in={} cached={} out={} took={}{calls} {}",
        entry["iteration"].as_u64().unwrap_or(0),
        usage["input"].as_u64().unwrap_or(0),
        usage["cached_input"].as_u64().unwrap_or(0),
        usage["output"].as_u64().unwrap_or(0),
        span(entry["latency_ms"].as_u64().unwrap_or(0)),
        quoted(entry["text"].as_str().unwrap_or(""))
    )
}

/// `text` cut to `RUN_LOG_TEXT_CHARS_MAX` characters, `…` when cut.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(RUN_LOG_TEXT_CHARS_MAX) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// `text` shortened, in double quotes.
fn quoted(text: &str) -> String {
    format!("\"{}\"", shortened(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_kind_reads_on_one_line() {
        let at = 1_700_000_000_123u64;
        let lines: Vec<String> = [
            json!({"run": 7, "seq": 0, "at_ms": at, "kind": "wakeup", "source": "on_demand", "reason": "look", "payload": {"ticket": 7}}),
            json!({"run": 7, "seq": 1, "at_ms": at, "kind": "model_request", "iteration": 1, "model": "m", "messages": 2, "bytes": 300}),
            json!({"run": 7, "seq": 2, "at_ms": at, "kind": "model_response", "iteration": 1, "text": "let me look", "tool_calls": [{"id": "c1", "name": "search"}], "usage": {"input": 10, "cached_input": 4, "output": 3}, "latency_ms": 1_250}),
            json!({"run": 7, "seq": 3, "at_ms": at, "kind": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "x"}}),
            json!({"run": 7, "seq": 4, "at_ms": at, "kind": "tool_result", "id": "c1", "name": "search", "output": "found", "is_error": true, "latency_ms": 20}),
            json!({"run": 7, "seq": 5, "at_ms": at, "kind": "stop", "stop_reason": "end_turn", "detail": null}),
            json!({"run": 7, "seq": 6, "at_ms": at, "kind": "note", "text": "hello"}),
            json!({"run": 7, "seq": 7, "at_ms": at, "kind": "child_output", "stream": "stderr", "text": "warning: x"}),
        ]
        .iter()
        .map(entry_line)
        .collect();
        let t = "2023-11-14T22:13:20.123Z";
        assert_eq!(
            lines,
            vec![
                format!("   0  {t}  wakeup          source=on_demand reason=\"look\" payload={{\"ticket\":7}}"),
                format!("   1  {t}  model_request   #1 model=m messages=2 bytes=300"),
                format!("   2  {t}  model_response  #1 in=10 cached=4 out=3 took=1.2s calls=search \"let me look\""),
                format!("   3  {t}  tool_call       search id=c1 {{\"q\":\"x\"}}"),
                format!("   4  {t}  tool_result     search id=c1 error took=20ms \"found\""),
                format!("   5  {t}  stop            end_turn"),
                format!("   6  {t}  note            hello"),
                format!("   7  {t}  child_output    stderr warning: x"),
            ]
        );
    }

    #[test]
    fn escape_and_osc_sequences_are_printed_escaped() {
        let entry = json!({"run": 1, "seq": 0, "at_ms": 0, "kind": "tool_result", "id": "c\u{1b}[31m",
            "name": "sh", "output": "\u{1b}]52;c;cHduZWQ=\u{7}\u{1b}[2J\r\nbye", "is_error": false, "latency_ms": 1});
        let line = entry_line(&entry);
        assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
        assert!(
            line.ends_with(r#""\x1b]52;c;cHduZWQ=\x07\x1b[2J\r\nbye""#),
            "{line}"
        );
        assert!(line.contains(r"id=c\x1b[31m"), "{line}");
    }

    #[test]
    fn long_text_is_shortened_at_the_limit() {
        let exact = "é".repeat(RUN_LOG_TEXT_CHARS_MAX);
        assert_eq!(shortened(&exact), exact);
        let over = "é".repeat(RUN_LOG_TEXT_CHARS_MAX + 1);
        assert_eq!(shortened(&over), format!("{exact}…"));
    }
}
