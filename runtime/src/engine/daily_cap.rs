//! The daily cap: at most `limits.daily_cap` runs (LLM-bearing wakeups) per agent per local day
//! in the agent's time zone, across every source. A run's slot is reserved by its `run_started`
//! event, which is durable before the run executes; a crash never loses a reservation. The day
//! a start counts against never goes back: after a backward clock jump, starts keep counting
//! against the latest day already counted, so a counted day is never re-opened (invariant 2).

use serde::{Deserialize, Serialize};

/// Largest daily cap accepted.
pub const DAILY_CAP_MAX: u32 = 10_000;

/// A local calendar day, as days since 1970-01-01 in the agent's zone (ordered, cheap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(transparent)]
pub struct LocalDay(pub i32);

impl LocalDay {
    /// The day `wall_ms` falls on in `time_zone` (an IANA name validated at agent creation).
    pub fn of(wall_ms: u64, time_zone: &str) -> LocalDay {
        let tz = jiff::tz::TimeZone::get(time_zone).expect("time zones are validated at creation");
        let ms = i64::try_from(wall_ms).expect("wall time fits in i64");
        let timestamp = jiff::Timestamp::from_millisecond(ms).expect("wall time in jiff's range");
        let date = timestamp.to_zoned(tz).date();
        let epoch = jiff::civil::date(1970, 1, 1);
        let days = (date - epoch).get_days();
        LocalDay(days)
    }
}

/// Runs started on the latest counted day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayCount {
    pub day: Option<LocalDay>,
    pub started: u32,
}

impl DayCount {
    /// The day a run starting at `wall_ms` counts against: today, or the latest day already
    /// counted if the clock went back.
    pub fn day_for(&self, wall_ms: u64, time_zone: &str) -> LocalDay {
        let today = LocalDay::of(wall_ms, time_zone);
        self.day.map_or(today, |counted| counted.max(today))
    }

    /// Runs already started on `day`.
    pub fn started_on(&self, day: LocalDay) -> u32 {
        if self.day == Some(day) {
            self.started
        } else {
            0
        }
    }

    /// Counts one start on `day` (which is never earlier than the counted day).
    pub fn count(&mut self, day: LocalDay) {
        match self.day {
            Some(counted) if counted == day => self.started += 1,
            Some(counted) => {
                assert!(
                    day > counted,
                    "a start counted against day {day:?} after {counted:?} (invariant 2)"
                );
                *self = DayCount {
                    day: Some(day),
                    started: 1,
                };
            }
            None => {
                *self = DayCount {
                    day: Some(day),
                    started: 1,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(rfc3339: &str) -> u64 {
        let ts: jiff::Timestamp = rfc3339.parse().unwrap();
        ts.as_millisecond() as u64
    }

    #[test]
    fn midnight_is_local() {
        // 23:30 UTC on 1 March is already 2 March in Tokyo (+9) and still 1 March in New York.
        let t = ms("2026-03-01T23:30:00Z");
        assert_eq!(
            LocalDay::of(t, "Asia/Tokyo").0,
            LocalDay::of(t, "UTC").0 + 1
        );
        assert_eq!(LocalDay::of(t, "America/New_York"), LocalDay::of(t, "UTC"));
        // One millisecond either side of Paris midnight (UTC+1 in winter).
        let before = ms("2026-01-14T22:59:59.999Z");
        let after = ms("2026-01-14T23:00:00Z");
        assert_eq!(
            LocalDay::of(after, "Europe/Paris").0,
            LocalDay::of(before, "Europe/Paris").0 + 1
        );
    }

    #[test]
    fn a_dst_change_day_is_one_day() {
        // Europe/Paris springs forward on 29 March 2026 (23 hours long) and falls back on
        // 25 October 2026 (25 hours long); each is still one local day.
        for (start, end) in [
            ("2026-03-28T23:00:00Z", "2026-03-29T21:59:59Z"),
            ("2026-10-24T22:00:00Z", "2026-10-25T22:59:59Z"),
        ] {
            let first = LocalDay::of(ms(start), "Europe/Paris");
            assert_eq!(LocalDay::of(ms(end), "Europe/Paris"), first);
            assert_eq!(LocalDay::of(ms(end) + 1_000, "Europe/Paris").0, first.0 + 1);
        }
    }

    #[test]
    fn a_backward_jump_never_reopens_a_counted_day() {
        let mut count = DayCount::default();
        let day2 = ms("2026-05-02T10:00:00Z");
        let day1 = ms("2026-05-01T10:00:00Z");
        let d2 = count.day_for(day2, "UTC");
        count.count(d2);
        count.count(d2);
        // The clock goes back a day: starts still count against day 2.
        assert_eq!(count.day_for(day1, "UTC"), d2);
        assert_eq!(count.started_on(count.day_for(day1, "UTC")), 2);
        // The next day starts afresh.
        let d3 = count.day_for(ms("2026-05-03T00:00:00Z"), "UTC");
        assert_eq!(count.started_on(d3), 0);
        count.count(d3);
        assert_eq!(
            count,
            DayCount {
                day: Some(d3),
                started: 1
            }
        );
    }
}
