//! A histogram of durations (or any non-negative figure) in fixed buckets, as Prometheus keeps them:
//! cumulative counts per upper bound, their sum and their count. Cheap to share (`&self` everywhere);
//! whoever measures feeds it, `/metrics` reads a [`HistogramSnapshot`]. It reads no clock: the caller
//! measures and hands in seconds.

use std::sync::{Mutex, PoisonError};

/// Bounds (seconds) for request latencies: Prometheus' default buckets, 5 ms to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Bounds (seconds) for scheduling passes: 1 ms to 30 s (a pass over a large backlog takes seconds).
pub const PASS_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Observations in buckets with fixed upper bounds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Mutex<Counts>,
}

/// Per-bucket (not cumulative) counts, one more than the bounds (the last is `+Inf`'s own), and the sum.
#[derive(Debug, Clone, Default, PartialEq)]
struct Counts {
    buckets: Vec<u64>,
    sum: f64,
}

/// What a histogram holds at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Each upper bound with the number of observations at or below it (cumulative), ascending.
    pub buckets: Vec<(f64, u64)>,
    /// The sum of every observation.
    pub sum: f64,
    /// How many observations there were (the `+Inf` bucket).
    pub count: u64,
}

impl HistogramSnapshot {
    /// An empty snapshot over `bounds`.
    pub fn empty(bounds: &[f64]) -> Self {
        Self { buckets: bounds.iter().map(|b| (*b, 0)).collect(), sum: 0.0, count: 0 }
    }
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending, finite).
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "histogram bounds must ascend");
        Self { bounds, counts: Mutex::new(Counts { buckets: vec![0; bounds.len() + 1], sum: 0.0 }) }
    }

    /// Records one observation. Negative or non-finite figures count as 0 (a clock cannot run back,
    /// and one bad figure must not turn the sum into NaN for good).
    pub fn observe(&self, value: f64) {
        let value = if value.is_finite() && value > 0.0 { value } else { 0.0 };
        let i = self.bounds.partition_point(|b| *b < value);
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.buckets[i] += 1;
        c.sum += value;
    }

    /// The counts now, cumulative per bound.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let c = self.counts.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut running = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(&c.buckets)
            .map(|(b, n)| {
                running += n;
                (*b, running)
            })
            .collect();
        HistogramSnapshot { buckets, sum: c.sum, count: c.buckets.iter().sum() }
    }

    /// The upper bounds.
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_is_not_below_them() {
        static B: &[f64] = &[0.1, 1.0];
        let h = Histogram::new(B);
        assert_eq!(h.snapshot(), HistogramSnapshot::empty(B));
        for v in [0.05, 0.1, 0.5, 1.0, 7.0, -3.0, f64::NAN] {
            h.observe(v);
        }
        let s = h.snapshot();
        // 0.05, 0.1 and the two counted as 0 are <= 0.1; 0.5 and 1.0 add to <= 1; 7 only in +Inf
        assert_eq!(s.buckets, vec![(0.1, 4), (1.0, 6)]);
        assert_eq!(s.count, 7);
        assert!((s.sum - 8.65).abs() < 1e-9, "{}", s.sum);
    }
}
