//! Latency percentiles from every sample (no histogram buckets: a run keeps at most a few
//! million samples, a few MB).

use std::time::Duration;

/// Samples of one kind of request.
#[derive(Debug, Default, Clone)]
pub struct Latencies {
    micros: Vec<u64>,
}

impl Latencies {
    pub fn record(&mut self, took: Duration) {
        self.micros
            .push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn merge(&mut self, other: Latencies) {
        self.micros.extend(other.micros);
    }

    pub fn count(&self) -> usize {
        self.micros.len()
    }

    /// The `q`-quantile (0..=1) in milliseconds, by the nearest-rank method.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.micros.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.micros.clone();
        sorted.sort_unstable();
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1] as f64 / 1_000.0
    }

    /// "p50 / p99 / max" in milliseconds.
    pub fn summary(&self) -> String {
        format!(
            "{:.2} / {:.2} / {:.2}",
            self.quantile_ms(0.50),
            self.quantile_ms(0.99),
            self.quantile_ms(1.0)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let mut l = Latencies::default();
        for ms in 1..=100 {
            l.record(Duration::from_millis(ms));
        }
        assert_eq!(l.quantile_ms(0.50), 50.0);
        assert_eq!(l.quantile_ms(0.99), 99.0);
        assert_eq!(l.quantile_ms(1.0), 100.0);
        assert!(Latencies::default().quantile_ms(0.5).is_nan());
    }
}
