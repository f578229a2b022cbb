//! Cumulative series (counters, histograms) against the previous scrape:
//! what grew over the interval, across exporter restarts.

use std::collections::HashMap;

use super::exposition::{Histogram, LabelSet, Reading};

/// A series: a family and its label set.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct SeriesId {
    pub family: &'static str,
    pub labels: LabelSet,
}

/// How a cumulative value moved since the previous scrape.
#[derive(Debug, PartialEq)]
pub(super) enum Delta<T> {
    /// First sight of the series: nothing to compare with.
    Baseline,
    Normal(T),
    /// Went backwards: the exporter restarted, `T` is everything since.
    Reset(T),
}

impl<T> Delta<T> {
    fn value(self) -> Option<T> {
        match self {
            Delta::Baseline => None,
            Delta::Normal(value) | Delta::Reset(value) => Some(value),
        }
    }

    fn map<U>(self, f: impl FnOnce(T) -> U) -> Delta<U> {
        match self {
            Delta::Baseline => Delta::Baseline,
            Delta::Normal(value) => Delta::Normal(f(value)),
            Delta::Reset(value) => Delta::Reset(f(value)),
        }
    }
}

/// This scrape's series against the previous scrape's: hands out each
/// series' delta and collects the values to keep for the next scrape.
pub(super) struct Deltas<'a> {
    previous: &'a HashMap<SeriesId, Reading>,
    /// The target's first scrape: every series is a baseline. Later, a
    /// series never seen before started from zero since the previous scrape
    /// (prometheus_client creates a labelled counter on its first increment).
    first: bool,
    pub current: HashMap<SeriesId, Reading>,
    /// Some series went backwards.
    pub reset: bool,
}

impl<'a> Deltas<'a> {
    pub fn new(previous: &'a HashMap<SeriesId, Reading>, first: bool) -> Self {
        Deltas { previous, first, current: HashMap::new(), reset: false }
    }

    /// The series' change since the previous scrape; `None` on its first.
    pub fn of(&mut self, family: &'static str, labels: &LabelSet, reading: &Reading) -> Option<Reading> {
        let id = SeriesId { family, labels: labels.clone() };
        let delta = match self.previous.get(&id) {
            None if !self.first => Delta::Normal(reading.clone()),
            previous => interval_delta(previous, reading),
        };
        self.reset |= matches!(delta, Delta::Reset(_));
        self.current.insert(id, reading.clone());
        delta.value()
    }

    /// A counter's growth since the previous scrape.
    pub fn counter(&mut self, family: &'static str, labels: &LabelSet, reading: &Reading) -> Option<f64> {
        match self.of(family, labels, reading)? {
            Reading::Scalar(value) => Some(value),
            Reading::Histogram(_) => None,
        }
    }

    /// A histogram's growth since the previous scrape.
    pub fn histogram(&mut self, family: &'static str, labels: &LabelSet, reading: &Reading) -> Option<Histogram> {
        match self.of(family, labels, reading)? {
            Reading::Histogram(h) => Some(h),
            Reading::Scalar(_) => None,
        }
    }
}

/// The delta of one series since `previous`.
pub(super) fn interval_delta(previous: Option<&Reading>, reading: &Reading) -> Delta<Reading> {
    match (previous, reading) {
        (Some(Reading::Scalar(before)), Reading::Scalar(value)) if value >= before => {
            Delta::Normal(Reading::Scalar(value - before))
        }
        (Some(Reading::Scalar(_)), Reading::Scalar(value)) => Delta::Reset(Reading::Scalar(*value)),
        (Some(Reading::Histogram(before)), Reading::Histogram(now)) => {
            histogram_delta(before, now).map(Reading::Histogram)
        }
        _ => Delta::Baseline,
    }
}

/// A histogram counts as reset when its layout changed (reconfigured, so
/// restarted), any bucket went down, or its sum did.
fn histogram_delta(before: &Histogram, now: &Histogram) -> Delta<Histogram> {
    let same_layout = before.buckets.len() == now.buckets.len()
        && before.buckets.iter().zip(&now.buckets).all(|((le_before, _), (le, _))| le_before == le);
    let grew = same_layout
        && before.buckets.iter().zip(&now.buckets).all(|((_, was), (_, is))| is >= was)
        && before.sum.zip(now.sum).is_none_or(|(was, is)| is >= was);
    if !grew {
        return Delta::Reset(now.clone());
    }
    let buckets = now.buckets.iter().zip(&before.buckets).map(|((le, is), (_, was))| (*le, is - was)).collect();
    let sum = now.sum.zip(before.sum).map(|(is, was)| is - was);
    Delta::Normal(Histogram { buckets, sum })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_take_deltas_and_survive_resets() {
        let reading = |v| Reading::Scalar(v);
        assert_eq!(interval_delta(None, &reading(100.0)), Delta::Baseline);
        assert_eq!(interval_delta(Some(&reading(100.0)), &reading(130.0)), Delta::Normal(reading(30.0)));
        assert_eq!(interval_delta(Some(&reading(130.0)), &reading(130.0)), Delta::Normal(reading(0.0)));
        assert_eq!(interval_delta(Some(&reading(130.0)), &reading(7.0)), Delta::Reset(reading(7.0)), "a restart");
        assert_eq!(interval_delta(Some(&reading(7.0)), &reading(9.0)), Delta::Normal(reading(2.0)));
    }

    #[test]
    fn histograms_reset_when_any_bucket_the_sum_or_the_layout_goes_back() {
        let h = |counts: &[(f64, f64)], sum: f64| {
            Reading::Histogram(Histogram { buckets: counts.to_vec(), sum: Some(sum) })
        };
        let inf = f64::INFINITY;
        let before = h(&[(0.5, 10.0), (1.0, 12.0), (inf, 12.0)], 8.0);
        assert_eq!(
            interval_delta(Some(&before), &h(&[(0.5, 11.0), (1.0, 15.0), (inf, 16.0)], 11.5)),
            Delta::Normal(h(&[(0.5, 1.0), (1.0, 3.0), (inf, 4.0)], 3.5))
        );
        // One bucket lower, even with the total higher: a reset.
        let delta = interval_delta(Some(&before), &h(&[(0.5, 2.0), (1.0, 20.0), (inf, 20.0)], 9.0));
        assert!(matches!(delta, Delta::Reset(_)));
        // The sum lower, every bucket equal: a restart that refilled as many.
        let delta = interval_delta(Some(&before), &h(&[(0.5, 10.0), (1.0, 12.0), (inf, 12.0)], 2.0));
        assert!(matches!(delta, Delta::Reset(_)));
        // New bucket bounds: the exporter was reconfigured, so restarted.
        assert!(matches!(interval_delta(Some(&before), &h(&[(0.25, 30.0), (inf, 40.0)], 30.0)), Delta::Reset(_)));
    }
}
