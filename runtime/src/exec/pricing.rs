//! The node's price table: what a model's tokens cost, per model name. A model the table does
//! not list costs nothing (its tokens are still counted), and the run's transcript says so.
//!
//! Prices are written in dollars per million tokens, as providers publish them, and kept as
//! integer nano-dollars per token, so cost arithmetic is exact and the same usage always costs
//! the same.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::usage::Usage;
use crate::exec::model::TokenUsage;

/// Nano-dollars per token for one dollar per million tokens.
const NANO_USD_PER_TOKEN_PER_USD_PER_MTOK: f64 = 1_000.0;
/// Largest price accepted, in dollars per million tokens (a typo guard).
pub const PRICE_USD_PER_MTOK_MAX: f64 = 10_000.0;

/// A model's prices, in dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input_usd_per_mtok: f64,
    /// Input tokens served from the provider's cache; defaults to the input price.
    #[serde(default)]
    pub cached_input_usd_per_mtok: Option<f64>,
    pub output_usd_per_mtok: f64,
}

/// Prices by model name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    pub models: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// Checks every price is a finite number in range, naming the first that is not.
    pub fn validate(&self) -> Result<(), String> {
        for (model, price) in &self.models {
            let prices = [
                ("input_usd_per_mtok", Some(price.input_usd_per_mtok)),
                ("cached_input_usd_per_mtok", price.cached_input_usd_per_mtok),
                ("output_usd_per_mtok", Some(price.output_usd_per_mtok)),
            ];
            for (field, value) in prices {
                if let Some(v) = value {
                    if !(v.is_finite() && (0.0..=PRICE_USD_PER_MTOK_MAX).contains(&v)) {
                        return Err(format!(
                            "prices.{model:?}.{field} must be between 0 and {PRICE_USD_PER_MTOK_MAX} dollars per million tokens (got {v})"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the table prices `model`.
    pub fn knows(&self, model: &str) -> bool {
        self.models.contains_key(model)
    }

    /// The usage of one call of `model`, its cost included (zero for an unknown model).
    pub fn usage_of(&self, model: &str, tokens: &TokenUsage) -> Usage {
        let cached = tokens.cached_input_tokens.min(tokens.input_tokens);
        let cost_nano = self.models.get(model).map_or(0, |price| {
            let nano = |usd_per_mtok: f64| (usd_per_mtok * NANO_USD_PER_TOKEN_PER_USD_PER_MTOK).round() as u64;
            let cached_price = price.cached_input_usd_per_mtok.unwrap_or(price.input_usd_per_mtok);
            (tokens.input_tokens - cached)
                .saturating_mul(nano(price.input_usd_per_mtok))
                .saturating_add(cached.saturating_mul(nano(cached_price)))
                .saturating_add(tokens.output_tokens.saturating_mul(nano(price.output_usd_per_mtok)))
        });
        Usage {
            llm_calls: 1,
            input_tokens: tokens.input_tokens,
            cached_input_tokens: cached,
            output_tokens: tokens.output_tokens,
            // Round up: a call never costs less than the table says.
            cost_micro_usd: cost_nano.div_ceil(1_000),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> PriceTable {
        let mut models = BTreeMap::new();
        models.insert(
            "m".to_string(),
            ModelPrice {
                input_usd_per_mtok: 3.0,
                cached_input_usd_per_mtok: Some(0.3),
                output_usd_per_mtok: 15.0,
            },
        );
        PriceTable { models }
    }

    #[test]
    fn cost_follows_the_table_exactly() {
        let tokens = TokenUsage {
            input_tokens: 1_000_000,
            cached_input_tokens: 500_000,
            output_tokens: 100_000,
        };
        let usage = table().usage_of("m", &tokens);
        // 0.5M * $3 + 0.5M * $0.3 + 0.1M * $15 = 1.5 + 0.15 + 1.5 = $3.15
        assert_eq!(usage.cost_micro_usd, 3_150_000);
        assert_eq!(usage.llm_calls, 1);
        assert_eq!(table().usage_of("unknown", &tokens).cost_micro_usd, 0);
    }

    #[test]
    fn a_fraction_of_a_micro_dollar_rounds_up() {
        let one = TokenUsage {
            input_tokens: 1,
            cached_input_tokens: 0,
            output_tokens: 0,
        };
        assert_eq!(table().usage_of("m", &one).cost_micro_usd, 3);
        let cached = TokenUsage {
            input_tokens: 1,
            cached_input_tokens: 1,
            output_tokens: 0,
        };
        assert_eq!(table().usage_of("m", &cached).cost_micro_usd, 1, "0.3 µ$ rounds up");
    }

    #[test]
    fn bad_prices_are_named() {
        let mut t = table();
        t.models.get_mut("m").unwrap().output_usd_per_mtok = -1.0;
        assert!(t.validate().unwrap_err().contains("output_usd_per_mtok"));
        t.models.get_mut("m").unwrap().output_usd_per_mtok = PRICE_USD_PER_MTOK_MAX;
        assert!(t.validate().is_ok());
    }
}
