//! Human output: aligned tables, times, durations, and the one-line form of an event.

use std::borrow::Cow;

use serde_json::Value;

/// Columns separated by two spaces, each as wide as its widest cell; the last is not padded.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Self {
        Table {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.header.len(),
            "a row has one cell per column"
        );
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        let mut text = String::new();
        for row in std::iter::once(&header).chain(&self.rows) {
            let last = row.len() - 1;
            let mut line = String::new();
            for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if i == last {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  "));
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }
}

/// Unix milliseconds as `2025-01-31T12:00:05Z`.
pub fn time(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || format!("{ms}ms"),
            |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
}

/// Unix milliseconds as `2025-01-31T12:00:05.250Z`, for lines that often share a second.
pub fn time_millis(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || format!("{ms}ms"),
            |t| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        )
}

/// Whether printing `c` raw could act on a terminal or hide what follows: C0 controls (ESC,
/// BEL, CR, …), DEL, C1 controls (U+0080–U+009F: a terminal may take U+009B for CSI), and the
/// bidirectional overrides and isolates that reorder what a reader sees.
fn is_unsafe_char(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` safe to print on a terminal: every character [`is_unsafe_char`] finds becomes a
/// visible escape (`\n`, `\r`, `\t`, `\x1b`, `\u{9b}`). For anything a model, a tool or a
/// client wrote: an ESC or OSC sequence in a tool's output must not drive the operator's
/// terminal.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            c if (c as u32) <= 0x7f && is_unsafe_char(c) => {
                escaped.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if is_unsafe_char(c) => escaped.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

/// `value` as one line of JSON that is safe on a terminal: serde_json already escapes C0
/// controls; this also escapes DEL, C1 controls and bidi overrides (as `\u00XX`, still JSON:
/// they can only occur inside strings).
pub fn safe_json_line(value: &Value) -> String {
    let json = value.to_string();
    if !json.chars().any(is_unsafe_char) {
        return json;
    }
    json.chars()
        .map(|c| match is_unsafe_char(c) {
            true => format!("\\u{:04x}", c as u32),
            false => c.to_string(),
        })
        .collect()
}

/// A JSON number of Unix milliseconds as a time, `-` when null or absent.
pub fn time_of(value: &Value) -> String {
    value.as_u64().map_or_else(|| "-".to_string(), time)
}

/// A short span: `250ms`, `1.2s`, `5m03s`, `2h15m`.
pub fn span(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1_000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1_000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// A span in whole seconds, zero parts left out: `45s`, `4m10s`, `2m`, `1h05m`, `3d04h`. For
/// views redrawn every second, where the tenths of [`span`] would flicker.
pub fn span_seconds(ms: u64) -> String {
    let seconds = ms / 1_000;
    let (big, small, units) = match seconds {
        0..=59 => return format!("{seconds}s"),
        60..=3_599 => (seconds / 60, seconds % 60, ("m", "s")),
        3_600..=86_399 => (seconds / 3_600, seconds % 3_600 / 60, ("h", "m")),
        _ => (seconds / 86_400, seconds % 86_400 / 3_600, ("d", "h")),
    };
    if small == 0 {
        format!("{big}{}", units.0)
    } else {
        format!("{big}{}{small:02}{}", units.0, units.1)
    }
}

/// `at_ms` seen from `now_ms`: `in 4m10s`, `2m ago`, or `now` within a second either way.
pub fn relative(at_ms: u64, now_ms: u64) -> String {
    if at_ms.abs_diff(now_ms) < 1_000 {
        "now".to_string()
    } else if at_ms > now_ms {
        format!("in {}", span_seconds(at_ms - now_ms))
    } else {
        format!("{} ago", span_seconds(now_ms - at_ms))
    }
}

/// `value` as text for a table cell: strings bare, null as `-`, control characters escaped
/// (cells show what agents and clients wrote: reasons, details, payloads).
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) if s.is_empty() => "-".to_string(),
        Value::String(s) => escape_controls(s).into_owned(),
        other => safe_json_line(other),
    }
}

/// Fields an event line leaves out: placed elsewhere on the line, secret-ish, or bulky.
const EVENT_FIELDS_HIDDEN: &[&str] = &["seq", "at_ms", "tenant", "type", "spec"];

/// One event on one line: `seq  time  type  agent=3 run=7 key=value…`.
pub fn event_line(event: &Value) -> String {
    let seq = event.get("seq").and_then(Value::as_u64).unwrap_or(0);
    let at = time_of(event.get("at_ms").unwrap_or(&Value::Null));
    let kind = escape_controls(event.get("type").and_then(Value::as_str).unwrap_or("?"));
    let mut line = format!("{seq:>6}  {at}  {kind:<17}");
    let Some(fields) = event.as_object() else {
        return line;
    };
    // Agent and run first: they are what a reader scans for.
    let mut keys: Vec<&String> = fields
        .keys()
        .filter(|k| !EVENT_FIELDS_HIDDEN.contains(&k.as_str()) && !k.ends_with("_hash"))
        .collect();
    keys.sort_by_key(|k| {
        (
            !matches!(k.as_str(), "agent" | "run"),
            k.as_str() != "agent",
        )
    });
    for key in keys {
        let value = &fields[key];
        if value.is_null() {
            continue;
        }
        // `first_fire_at_ms=1795353845536` reads better as `first_fire_at=2026-11-22T13:24:05Z`.
        if let (Some(name), Some(ms)) = (key.strip_suffix("_at_ms"), value.as_u64()) {
            line.push_str(&format!(" {name}_at={}", time(ms)));
            continue;
        }
        // Everything but the keys the runtime names came from a client, an agent or a model.
        let shown = match value {
            Value::String(s) if s.is_empty() || s.contains([' ', '"', '=']) => {
                format!("\"{}\"", escape_controls(&s.replace('"', "\\\"")))
            }
            Value::String(s) => escape_controls(s).into_owned(),
            other => safe_json_line(other),
        };
        line.push_str(&format!(" {}={shown}", escape_controls(key)));
    }
    line.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_columns() {
        let mut table = Table::new(&["ID", "NAME", "STATUS"]);
        table.row(vec!["1".into(), "triage".into(), "active".into()]);
        table.row(vec!["12".into(), "x".into(), "paused".into()]);
        assert_eq!(
            table.render(),
            "ID  NAME    STATUS\n1   triage  active\n12  x       paused\n"
        );
    }

    #[test]
    fn times_and_spans() {
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
        assert_eq!(time(1_700_000_000_123), "2023-11-14T22:13:20Z");
        assert_eq!(span(250), "250ms");
        assert_eq!(span(1_250), "1.2s");
        assert_eq!(span(303_000), "5m03s");
        assert_eq!(span(8_100_000), "2h15m");
    }

    #[test]
    fn whole_second_spans_and_relative_times() {
        assert_eq!(span_seconds(999), "0s");
        assert_eq!(span_seconds(45_900), "45s");
        assert_eq!(span_seconds(120_000), "2m");
        assert_eq!(span_seconds(250_000), "4m10s");
        assert_eq!(span_seconds(3_600_000), "1h");
        assert_eq!(span_seconds(3_900_000), "1h05m");
        assert_eq!(span_seconds(273_600_000), "3d04h");
        let now = 1_700_000_000_000;
        assert_eq!(relative(now + 250_000, now), "in 4m10s");
        assert_eq!(relative(now - 120_000, now), "2m ago");
        assert_eq!(relative(now + 999, now), "now");
        assert_eq!(relative(now - 999, now), "now");
        assert_eq!(relative(now + 1_000, now), "in 1s");
    }

    #[test]
    fn control_characters_are_escaped_visibly() {
        assert_eq!(escape_controls("plain text é"), "plain text é");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("\u{1b}]0;pwned\u{7}\u{1b}[2Jx\r\n\t\u{7f}"),
            "\\x1b]0;pwned\\x07\\x1b[2Jx\\r\\n\\t\\x7f"
        );
        assert_eq!(
            escape_controls("\u{9b}31m \u{202e}abc"),
            "\\u{9b}31m \\u{202e}abc"
        );
        // The first and last characters of each range, and their neighbours outside it.
        assert_eq!(escape_controls("\u{0}\u{1f} ~"), "\\x00\\x1f ~");
        assert_eq!(escape_controls("\u{9f}\u{a0}"), "\\u{9f}\u{a0}");
    }

    #[test]
    fn json_lines_escape_what_serde_json_leaves_raw() {
        let value = json!({"t": "a\u{1b}b\u{9b}c\u{7f}"});
        let line = safe_json_line(&value);
        assert_eq!(line, r#"{"t":"a\u001bb\u009bc\u007f"}"#);
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap(), value);
    }

    #[test]
    fn cells_and_event_lines_escape_what_clients_wrote() {
        let hostile = "\u{1b}]0;owned\u{7}\u{1b}[2J\r\u{9b}x";
        let shown = "\\x1b]0;owned\\x07\\x1b[2J\\r\\u{9b}x";
        assert_eq!(cell(&json!(hostile)), shown);
        assert_eq!(cell(&json!({"k": hostile})), r#"{"k":"\u001b]0;owned\u0007\u001b[2J\r\u009bx"}"#);
        let event = json!({"seq": 1, "at_ms": 0, "type": "wakeup_queued", "reason": hostile,
            "payload": {"p": "\u{1b}[31m"}, "note": "say \"hi\"\u{1b}"});
        let line = event_line(&event);
        assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
        assert!(line.contains(&format!("reason={shown}")), "{line}");
        assert!(line.contains(r#"note="say \"hi\"\x1b""#), "{line}");
    }

    #[test]
    fn millisecond_times() {
        assert_eq!(time_millis(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn event_lines_put_agent_and_run_first_and_hide_hashes() {
        let event = json!({"seq": 7, "at_ms": 0, "tenant": "default", "type": "wakeup_queued",
            "wakeup": 3, "run": 4, "agent": 2, "source": "on_demand", "reason": "look now",
            "payload": null, "task_key": null, "token_hash": "abc", "due_at_ms": 1_000});
        assert_eq!(
            event_line(&event),
            "     7  1970-01-01T00:00:00Z  wakeup_queued     agent=2 run=4 due_at=1970-01-01T00:00:01Z reason=\"look now\" source=on_demand wakeup=3"
        );
        let quiet = json!({"seq": 1, "at_ms": 0, "tenant": "default", "type": "tenant_created"});
        assert_eq!(
            event_line(&quiet),
            "     1  1970-01-01T00:00:00Z  tenant_created"
        );
    }
}
