//! Intervals as operators type them: `30s`, `5m`, `1h`, `250ms`, or a bare number of milliseconds.

/// Milliseconds in `text`, or a message saying what is accepted.
pub fn parse_interval(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_ms: u64 = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    let number: Option<u64> = number.parse().ok();
    match number {
        Some(n) if unit_ms > 0 => n.checked_mul(unit_ms).ok_or_else(|| format!("{text:?} is too long")),
        _ => Err(format!(
            "{text:?} is not an interval; use a number of milliseconds or a number with a unit: 250ms, 30s, 5m, 1h, 1d"
        )),
    }
}

/// `ms` in the largest unit that divides it: `30s`, `5m`, `1h`, `1500ms`.
pub fn format_interval(ms: u64) -> String {
    for (unit, unit_ms) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= unit_ms && ms.is_multiple_of(unit_ms) {
            return format!("{}{unit}", ms / unit_ms);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_milliseconds() {
        assert_eq!(parse_interval("30s"), Ok(30_000));
        assert_eq!(parse_interval("5m"), Ok(300_000));
        assert_eq!(parse_interval("1h"), Ok(3_600_000));
        assert_eq!(parse_interval("250ms"), Ok(250));
        assert_eq!(parse_interval("1500"), Ok(1_500));
        for bad in [
            "",
            "s",
            "soon",
            "5 parsecs",
            "-5s",
            "1.5s",
            "99999999999999999999",
        ] {
            assert!(parse_interval(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for ms in [
            250, 1_500, 30_000, 300_000, 3_600_000, 5_400_000, 86_400_000,
        ] {
            assert_eq!(parse_interval(&format_interval(ms)), Ok(ms));
        }
        assert_eq!(format_interval(90_000), "90s");
        assert_eq!(format_interval(0), "0ms");
    }
}
