//! What model calls cost: token usage per call, its price in micro-dollars, and each agent's
//! spend per local day, the figure its daily budget is judged by.
//!
//! Money is an integer count of micro-dollars (1e-6 USD) everywhere the engine keeps it, so
//! totals add exactly and the same log always replays to the same spend.

use serde::{Deserialize, Serialize};

use super::daily_cap::LocalDay;

/// Micro-dollars in one dollar.
pub const MICRO_USD_PER_USD: u64 = 1_000_000;
/// Largest daily budget accepted, in dollars (a typo guard, not a business rule).
pub const DAILY_BUDGET_USD_MAX: u64 = 1_000_000;

/// An amount of money in micro-dollars. On the wire (specs, API) it is a number of dollars,
/// e.g. `2.5`; inside, an exact integer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct MicroUsd(pub u64);

impl MicroUsd {
    /// From a number of dollars, if it is finite, not negative and at most `max_usd`.
    pub fn from_usd(usd: f64, max_usd: u64) -> Option<MicroUsd> {
        let ok = usd.is_finite() && usd >= 0.0 && usd <= max_usd as f64;
        ok.then(|| MicroUsd((usd * MICRO_USD_PER_USD as f64).round() as u64))
    }

    /// In dollars, for people and JSON.
    pub fn usd(self) -> f64 {
        self.0 as f64 / MICRO_USD_PER_USD as f64
    }
}

impl Serialize for MicroUsd {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.usd())
    }
}

impl<'de> Deserialize<'de> for MicroUsd {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let usd = f64::deserialize(deserializer)?;
        MicroUsd::from_usd(usd, u64::MAX / MICRO_USD_PER_USD).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "an amount in dollars must be a finite number >= 0 (got {usd})"
            ))
        })
    }
}

/// Tokens and money of one or more model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
pub struct Usage {
    /// Model calls made (a ghost run's call counts too).
    #[serde(default)]
    pub llm_calls: u64,
    #[serde(default)]
    pub input_tokens: u64,
    /// Of `input_tokens`, those the provider served from its prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    /// What the calls cost by the node's price table, in micro-dollars.
    #[serde(default)]
    pub cost_micro_usd: u64,
}

impl Usage {
    /// Adds `other` into `self` (saturating: a lying provider cannot wrap a total around).
    pub fn add(&mut self, other: &Usage) {
        self.llm_calls = self.llm_calls.saturating_add(other.llm_calls);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cost_micro_usd = self.cost_micro_usd.saturating_add(other.cost_micro_usd);
    }
}

/// The usage of the latest local day that saw any, for the daily budget. Like the daily cap's
/// count, the day never goes back: after a backward clock jump, spend keeps counting against
/// the latest day already counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaySpend {
    pub day: Option<LocalDay>,
    pub usage: Usage,
}

impl DaySpend {
    /// Usage counted on `day` (nothing if the counted day is another).
    pub fn on(&self, day: LocalDay) -> Usage {
        if self.day == Some(day) {
            self.usage
        } else {
            Usage::default()
        }
    }

    /// Counts `usage` on `day`, or on the counted day if `day` is earlier.
    pub fn count(&mut self, day: LocalDay, usage: &Usage) {
        match self.day {
            Some(counted) if counted >= day => self.usage.add(usage),
            _ => {
                self.day = Some(day);
                self.usage = *usage;
            }
        }
    }

    /// The day spend at `today` counts against (the counted day if the clock went back).
    pub fn day_for(&self, today: LocalDay) -> LocalDay {
        self.day.map_or(today, |counted| counted.max(today))
    }
}

/// Whether `spent` has reached `budget` (a budget of zero refuses everything).
pub fn budget_spent(budget: Option<MicroUsd>, spent_micro_usd: u64) -> bool {
    budget.is_some_and(|b| spent_micro_usd >= b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_round_trip_exactly_to_the_micro_dollar() {
        assert_eq!(MicroUsd::from_usd(2.5, 10), Some(MicroUsd(2_500_000)));
        assert_eq!(MicroUsd::from_usd(0.000_001, 10), Some(MicroUsd(1)));
        assert_eq!(MicroUsd::from_usd(10.0, 10), Some(MicroUsd(10_000_000)));
        assert_eq!(MicroUsd::from_usd(10.000_001, 10), None, "past the max");
        assert_eq!(MicroUsd::from_usd(-0.01, 10), None);
        assert_eq!(MicroUsd::from_usd(f64::NAN, 10), None);
        let json = serde_json::to_string(&MicroUsd(1_250_000)).unwrap();
        assert_eq!(json, "1.25");
        let back: MicroUsd = serde_json::from_str(&json).unwrap();
        assert_eq!(back, MicroUsd(1_250_000));
        assert!(serde_json::from_str::<MicroUsd>("-1").is_err());
    }

    #[test]
    fn a_day_spend_never_reopens_a_counted_day() {
        let mut spend = DaySpend::default();
        let usage = Usage {
            llm_calls: 1,
            cost_micro_usd: 10,
            ..Usage::default()
        };
        spend.count(LocalDay(5), &usage);
        spend.count(LocalDay(4), &usage);
        assert_eq!(spend.on(LocalDay(5)).cost_micro_usd, 20, "an earlier day counts on the later");
        assert_eq!(spend.day_for(LocalDay(4)), LocalDay(5));
        spend.count(LocalDay(6), &usage);
        assert_eq!(spend.on(LocalDay(6)).cost_micro_usd, 10, "a new day starts at zero");
        assert_eq!(spend.on(LocalDay(5)).cost_micro_usd, 0);
    }

    #[test]
    fn a_budget_is_spent_at_its_amount_not_before() {
        assert!(!budget_spent(None, u64::MAX));
        assert!(!budget_spent(Some(MicroUsd(100)), 99));
        assert!(budget_spent(Some(MicroUsd(100)), 100));
        assert!(budget_spent(Some(MicroUsd(0)), 0));
    }
}
