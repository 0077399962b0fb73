//! The latency figures every benchmark report gives — p50, p95, p99 and the
//! maximum, in milliseconds — read from an hdrhistogram of microseconds in
//! one place, so the flash sale, the mixed load and the matrix's medians
//! cannot drift apart in what they call a percentile or how they round it.

use hdrhistogram::Histogram;
use serde::Serialize;

/// p50, p95, p99 and max of one latency distribution, in milliseconds.
/// Reports embed it with `#[serde(flatten)]`: the four figures appear as
/// `p50_ms`, `p95_ms`, `p99_ms` and `max_ms` among the report's own keys, as
/// readers of the JSON expect them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    /// The figures of a histogram recorded in microseconds (the unit every
    /// benchmark records in: milliseconds would lose the sub-millisecond
    /// calls of an embedded database).
    pub fn from_micros(h: &Histogram<u64>) -> Self {
        Self {
            p50_ms: ms(h.value_at_quantile(0.50)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

/// Microseconds, as a histogram records them, in the milliseconds reports
/// give (exact to the microsecond the histogram keeps).
pub fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_the_histograms_quantiles_in_milliseconds() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("bounds");
        for us in 1..=1000 {
            h.record(us).expect("in bounds");
        }
        let l = Latency::from_micros(&h);
        assert_eq!(l.p50_ms, h.value_at_quantile(0.5) as f64 / 1000.0);
        assert_eq!(l.p95_ms, h.value_at_quantile(0.95) as f64 / 1000.0);
        assert_eq!(l.p99_ms, h.value_at_quantile(0.99) as f64 / 1000.0);
        assert_eq!(l.max_ms, h.max() as f64 / 1000.0);
        assert!(l.p50_ms <= l.p95_ms && l.p95_ms <= l.p99_ms && l.p99_ms <= l.max_ms);
    }

    #[test]
    fn flattened_keys_keep_their_place() {
        #[derive(Serialize)]
        struct Report {
            before: u32,
            #[serde(flatten)]
            latency: Latency,
            after: u32,
        }
        let r = Report { before: 1, latency: Latency { p50_ms: 0.5, p95_ms: 1.0, p99_ms: 2.0, max_ms: 3.0 }, after: 2 };
        assert_eq!(
            serde_json::to_string(&r).expect("serializes"),
            r#"{"before":1,"p50_ms":0.5,"p95_ms":1.0,"p99_ms":2.0,"max_ms":3.0,"after":2}"#
        );
    }
}
