//! Intervals as operators type them, always with a unit: `250ms`, `30s`, `5m`, `1h`, `1d`. A bare
//! number is refused: `300` could mean seconds or milliseconds, and guessing wrong is 1000x off.

/// Milliseconds in `text`, or a message saying what is accepted.
pub fn parse_interval(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_ms: u64 = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    let number: Option<u64> = number.parse().ok();
    match number {
        Some(n) if unit.is_empty() => Err(format!(
            "{text:?} has no unit; use units, e.g. {}",
            unit_examples(n)
        )),
        Some(n) if unit_ms > 0 => n.checked_mul(unit_ms).ok_or_else(|| format!("{text:?} is too long")),
        _ => Err(format!(
            "{text:?} is not an interval; use a number with a unit: 250ms, 30s, 5m, 1h, 1d"
        )),
    }
}

/// What a bare `n` probably meant, with units: `300s or 5m`, `45s or 45ms`.
fn unit_examples(n: u64) -> String {
    const SECONDS_PER_MINUTE: u64 = 60;
    if n > 0 && n.is_multiple_of(SECONDS_PER_MINUTE) {
        format!("{n}s or {}m", n / SECONDS_PER_MINUTE)
    } else {
        format!("{n}s or {n}ms")
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
    fn units_accepted_and_bare_numbers_refused_with_a_hint() {
        assert_eq!(parse_interval("30s"), Ok(30_000));
        assert_eq!(parse_interval("5m"), Ok(300_000));
        assert_eq!(parse_interval("1h"), Ok(3_600_000));
        assert_eq!(parse_interval("250ms"), Ok(250));
        assert_eq!(parse_interval("1d"), Ok(86_400_000));
        assert_eq!(
            parse_interval("300"),
            Err("\"300\" has no unit; use units, e.g. 300s or 5m".to_string())
        );
        assert!(parse_interval("45").unwrap_err().contains("e.g. 45s or 45ms"));
        assert!(parse_interval("0").is_err());
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
