//! How far off a server's estimates of its jobs' service times run, learnt
//! from finished jobs reported with the estimate `admit` was given.
//!
//! The error is kept by the size of the estimate: service over estimate,
//! one sketch per half-octave of estimates. Pooling every size would be
//! wrong at both ends: an estimate far above the class's usual jobs is
//! mostly an overestimate of a usual job, one far below mostly an
//! underestimate, so a job's chance at a given estimate is read from the
//! jobs estimated about that large. Selecting jobs by their estimate (what
//! `admit` does with it) does not bias this: which jobs start depends on the
//! estimate, not on the service it turns out to be.
//!
//! A size with too few jobs of its own is read with its neighbours, widened
//! a half-octave each way until `min_samples` are in; an estimate of a size
//! never seen is read at the nearest size that was.

use std::collections::BTreeMap;

use crate::sketch::Sketch;

/// Half-octaves: an estimate's size class is `⌊2 · log2(estimate_ms)⌋`.
const SIZES_PER_OCTAVE: f64 = 2.0;

fn size_of(estimate_ms: f64) -> i32 {
    (SIZES_PER_OCTAVE * estimate_ms.log2()).floor() as i32
}

/// Finished jobs' service over estimate, by the estimate's size. Mergeable,
/// so the estimator keeps one per slice of its window.
#[derive(Clone, Debug, Default)]
pub struct ErrorSketches {
    by_size: BTreeMap<i32, Sketch>,
}

impl ErrorSketches {
    /// `count` jobs estimated at `estimate_ms` that took `service_ms`; false
    /// (nothing kept) unless both are finite, the estimate positive and the
    /// service not negative.
    pub fn add(&mut self, estimate_ms: f64, service_ms: f64, count: u64) -> bool {
        let usable = estimate_ms.is_finite() && estimate_ms > 0.0 && service_ms.is_finite() && service_ms >= 0.0;
        if usable {
            self.by_size.entry(size_of(estimate_ms)).or_default().add(service_ms / estimate_ms, count);
        }
        usable
    }

    pub fn merge(&mut self, other: &ErrorSketches) {
        for (size, sketch) in &other.by_size {
            self.by_size.entry(*size).or_default().merge(sketch);
        }
    }

    pub fn count(&self) -> u64 {
        self.by_size.values().map(Sketch::count).sum()
    }
}

/// The learnt error: per size seen, service over estimate over the window.
/// Read on demand, at the size a job's estimate has: a tick builds nothing
/// for the sizes no job asks about.
#[derive(Clone, Debug, PartialEq)]
pub struct EstimateError {
    by_size: BTreeMap<i32, Sketch>,
    min_samples: u64,
}

impl EstimateError {
    /// The error, once `min_samples` jobs in all were reported with an
    /// estimate; `None` before. Takes the window's merged sketches whole:
    /// the estimator builds them each tick for this alone.
    pub fn learn(sketches: ErrorSketches, min_samples: u64) -> Option<Self> {
        let min_samples = min_samples.max(1);
        (sketches.count() >= min_samples).then_some(EstimateError { by_size: sketches.by_size, min_samples })
    }

    /// P(service ≤ `ms`) for a job estimated at `estimate_ms` (positive).
    pub fn chance_within(&self, estimate_ms: f64, ms: f64) -> f64 {
        let size = self.nearest_size(size_of(estimate_ms));
        let (lowest, highest) = (self.by_size.keys().next(), self.by_size.keys().next_back());
        let (Some(&lowest), Some(&highest)) = (lowest, highest) else { return 0.0 };
        // Widened a size either side at a time: only the two new edges merge.
        let mut pooled = Sketch::new();
        for reach in 0.. {
            for (_, sketch) in
                self.by_size.range(size - reach..=size + reach).filter(|(at, _)| (*at - size).abs() == reach)
            {
                pooled.merge(sketch);
            }
            let everything = size - reach <= lowest && size + reach >= highest;
            if pooled.count() >= self.min_samples || everything {
                break;
            }
        }
        pooled.share_at_most(ms / estimate_ms).unwrap_or(0.0)
    }

    /// The size seen nearest `size` (the lower of two as near).
    fn nearest_size(&self, size: i32) -> i32 {
        let below = self.by_size.range(..=size).next_back().map(|(s, _)| *s);
        let above = self.by_size.range(size..).next().map(|(s, _)| *s);
        match (below, above) {
            (Some(b), Some(a)) if a - size < size - b => a,
            (Some(b), _) => b,
            (None, Some(a)) => a,
            (None, None) => size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_judged_by_the_error_of_estimates_its_size() {
        let mut sketches = ErrorSketches::default();
        // Small estimates run a fifth long; large ones are twice the truth.
        for _ in 0..30 {
            assert!(sketches.add(100.0, 120.0, 1));
            assert!(sketches.add(3_000.0, 1_500.0, 1));
        }
        assert!(!sketches.add(0.0, 100.0, 1) && !sketches.add(100.0, f64::NAN, 1), "unusable pairs are not kept");
        let error = EstimateError::learn(sketches, 20).unwrap();
        // (estimate, ms, in time?): read at its own size, or the nearest seen.
        let rows = [
            (100.0, 110.0, false),
            (100.0, 125.0, true),
            (3_000.0, 1_400.0, false),
            (3_000.0, 1_600.0, true),
            (110.0, 140.0, true),
            (10_000.0, 5_100.0, true),
            (10.0, 11.0, false),
        ];
        for (estimate, ms, in_time) in rows {
            let chance = error.chance_within(estimate, ms);
            let read = if in_time { chance == 1.0 } else { chance == 0.0 };
            assert!(read, "{estimate} ms estimated, within {ms} ms: {chance}");
        }
    }

    #[test]
    fn a_size_with_few_jobs_borrows_its_neighbours_and_nothing_is_learnt_from_too_few() {
        let mut sketches = ErrorSketches::default();
        sketches.add(100.0, 100.0, 90);
        sketches.add(150.0, 600.0, 9);
        assert!(EstimateError::learn(sketches.clone(), 100).is_none(), "99 of 100");
        // Ten jobs at a neighbouring size, whose error is unlike the rest:
        // read with the 90 beside them, not alone, and the 90 with them.
        sketches.add(150.0, 600.0, 1);
        let error = EstimateError::learn(sketches, 100).unwrap();
        for estimate in [100.0, 150.0] {
            let chance = error.chance_within(estimate, estimate * 1.1);
            assert!((chance - 0.9).abs() < 1e-9, "{estimate}: {chance}");
        }
    }
}
