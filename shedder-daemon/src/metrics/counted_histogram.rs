//! A classic Prometheus histogram whose observations carry a count: a
//! scraped bucket or a pushed sample stands for many jobs at one value, and
//! the client library's histogram takes them one at a time.

use std::sync::{Arc, Mutex};

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{MetricType, TypedMetric},
};

/// Buckets with upper bounds, an implicit `+Inf` last; cloning shares it.
#[derive(Clone, Debug)]
pub struct CountedHistogram {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    sum: f64,
    count: u64,
    /// (upper bound, observations in this bucket alone); the encoder sums them.
    buckets: Vec<(f64, u64)>,
}

impl CountedHistogram {
    /// Finite bounds in rising order; `+Inf` is added.
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let buckets = bounds.into_iter().filter(|b| b.is_finite()).chain([f64::INFINITY]).map(|b| (b, 0)).collect();
        Self { inner: Arc::new(Mutex::new(Inner { sum: 0.0, count: 0, buckets })) }
    }

    /// Records `count` observations of `value`.
    pub fn observe(&self, value: f64, count: u64) {
        if count == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.sum += value * count as f64;
        inner.count = inner.count.saturating_add(count);
        // A NaN falls in no finite bucket: it counts in +Inf, as the client library's does.
        let last = inner.buckets.len() - 1;
        let at = inner.buckets.iter().position(|(bound, _)| value <= *bound).unwrap_or(last);
        inner.buckets[at].1 = inner.buckets[at].1.saturating_add(count);
    }
}

impl TypedMetric for CountedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for CountedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        encoder.encode_histogram::<NoLabelSet>(inner.sum, inner.count, &inner.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::{encoding::text::encode, metrics::histogram::Histogram, registry::Registry};

    use super::*;

    fn text(register: impl FnOnce(&mut Registry)) -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn counted_observations_read_as_the_library_histogram_fed_one_by_one() {
        let bounds = [0.1, 1.0, 10.0];
        // (value, count), a NaN and a value past the last bound included.
        let observations = [(0.05, 3), (0.1, 2), (0.5, 7), (20.0, 1), (f64::NAN, 0), (1.0, 4)];
        let counted = CountedHistogram::new(bounds);
        let one_by_one = Histogram::new(bounds);
        for (value, count) in observations {
            counted.observe(value, count);
            (0..count).for_each(|_| one_by_one.observe(value));
        }
        let ours = text(|r| r.register("jobs", "help", counted));
        let library = text(|r| r.register("jobs", "help", one_by_one));
        assert_eq!(ours, library);
        assert!(ours.contains("jobs_count 17") && ours.contains("jobs_bucket{le=\"+Inf\"} 17"), "{ours}");
    }

    #[test]
    fn a_count_past_any_loop_is_counted_whole() {
        let histogram = CountedHistogram::new([1.0]);
        histogram.observe(0.5, 50_000_000);
        let out = text(|r| r.register("jobs", "help", histogram));
        assert!(out.contains("jobs_count 50000000") && out.contains("jobs_bucket{le=\"1.0\"} 50000000"), "{out}");
    }
}
