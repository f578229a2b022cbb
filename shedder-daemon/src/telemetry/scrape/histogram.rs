//! An interval's histogram (bucket counts and `_sum` grown since the last
//! scrape) turned into weighted observations that never under-report.
//!
//! # Finite buckets
//!
//! Each bucket's count becomes one observation at the bucket's **upper
//! bound** (`le`), in ms: every job in it waited at most that long, so
//! quantiles taken from these observations are never below the true ones,
//! and at most one bucket width above them.
//!
//! # The `+Inf` bucket, bounded by `_sum`
//!
//! Jobs past the last finite bound `b` have no upper bound in the buckets,
//! but `_sum` bounds their mass. Every job in a finite bucket took more than
//! that bucket's lower bound (`0` for the first), so
//!
//! ```text
//! tail_sum ≤ Δsum − Σ_finite count_i × lower_i
//! ```
//!
//! The `+Inf` jobs are placed at `max(b, tail_sum_bound / tail_count)`: the
//! largest mean their mass allows, and never below `b`, which they exceeded.
//! Their total is then at least their true total, so a long tail is never
//! reported as shorter than `_sum` proves it was (vLLM v0's buckets end at
//! 60 s, and newer vLLM lets users choose buckets). A single `+Inf` job is
//! placed at its exact upper bound; of several, one may exceed the mean.
//! Without a usable `_sum` (absent, or inconsistent after a race) the tail is
//! placed at `b`, the most that can be said.

use super::exposition::Histogram;

/// Interval histogram → one `(ms, count)` per bucket that gained jobs (see
/// the module's documentation for `+Inf`); nothing when there is no finite
/// bound.
pub(super) fn bucket_observations(interval: &Histogram) -> Vec<(f64, u64)> {
    let Some(last_finite) = interval.buckets.iter().map(|(le, _)| *le).rfind(|le| le.is_finite()) else {
        return Vec::new();
    };
    let mut below = 0.0;
    let mut lower_bound = 0.0;
    // Σ count × lower bound over the finite buckets: the least their jobs took.
    let mut finite_floor = 0.0;
    let mut observations = Vec::new();
    for &(le, up_to) in &interval.buckets {
        // Cumulative counts never shrink with `le`; clamp exporter races.
        let in_bucket = (up_to - below).max(0.0);
        below = f64::max(below, up_to);
        let count = in_bucket.round() as u64;
        if count == 0 {
            lower_bound = le;
            continue;
        }
        let seconds = if le.is_finite() {
            finite_floor += in_bucket * lower_bound;
            le
        } else {
            tail_bound(interval.sum, finite_floor, in_bucket, last_finite)
        };
        observations.push((seconds_to_ms(seconds), count));
        lower_bound = le;
    }
    observations
}

/// Where `tail_count` jobs past `last_finite` go: the largest mean that
/// `sum` allows once the finite buckets' least mass is taken out.
fn tail_bound(sum: Option<f64>, finite_floor: f64, tail_count: f64, last_finite: f64) -> f64 {
    match sum {
        Some(sum) if sum.is_finite() && tail_count > 0.0 => ((sum - finite_floor) / tail_count).max(last_finite),
        _ => last_finite,
    }
}

/// Seconds to milliseconds, to the microsecond, so `0.3` s is `300.0` ms.
pub(super) fn seconds_to_ms(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e3
}

/// Sums counts at equal values (series of one class share bucket bounds) and
/// sorts ascending.
pub(super) fn merge_buckets(mut observations: Vec<(f64, u64)>) -> Vec<(f64, u64)> {
    observations.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, u64)> = Vec::with_capacity(observations.len());
    for (ms, count) in observations {
        match merged.last_mut() {
            Some((last, total)) if *last == ms => *total += count,
            _ => merged.push((ms, count)),
        }
    }
    merged
}

/// The `q` quantile (0..=1) of weighted observations, by rank: the smallest
/// value with at least `q` of the weight at or below it. `None` when empty.
pub(crate) fn weighted_quantile(observations: &[(f64, u64)], q: f64) -> Option<f64> {
    let mut sorted = observations.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: u64 = sorted.iter().map(|(_, count)| count).sum();
    if total == 0 {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    sorted.into_iter().find_map(|(value, count)| {
        seen += count;
        (seen >= rank).then_some(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    fn h(buckets: &[(f64, f64)], sum: Option<f64>) -> Histogram {
        Histogram { buckets: buckets.to_vec(), sum }
    }

    #[test]
    fn buckets_become_observations_at_their_upper_bounds() {
        // Per-bucket: 3 ≤ 0.3 s, none in (0.3, 0.5], 2 in (0.5, 2.5], 1 past 2.5 s.
        let cumulative = [(0.3, 3.0), (0.5, 3.0), (2.5, 5.0), (INF, 6.0)];
        assert_eq!(bucket_observations(&h(&cumulative, None)), vec![(300.0, 3), (2500.0, 2), (2500.0, 1)]);
        assert_eq!(merge_buckets(bucket_observations(&h(&cumulative, None))), vec![(300.0, 3), (2500.0, 3)]);
        // Only a +Inf bucket: nowhere to place it.
        assert_eq!(bucket_observations(&h(&[(INF, 4.0)], Some(40.0))), vec![]);
        // A racy exposition whose cumulative counts dip is clamped, not negative.
        assert_eq!(
            bucket_observations(&h(&[(1.0, 5.0), (2.0, 4.0), (INF, 6.0)], None)),
            vec![(1000.0, 5), (2000.0, 1)]
        );
        assert_eq!(seconds_to_ms(0.3), 300.0);
        assert_eq!(seconds_to_ms(7680.0), 7_680_000.0);
    }

    #[test]
    fn the_sum_bounds_the_tail() {
        // vLLM v0's buckets end at 60 s. Four jobs: 0.5 s, 2 s, 70 s, 130 s;
        // _sum 202.5. Finite jobs took more than 0 and 1 s: at least 1 s.
        let cumulative = [(1.0, 1.0), (2.5, 2.0), (60.0, 2.0), (INF, 4.0)];
        let cases = [
            // (sum, where the two tail jobs go, s)
            (Some(202.5), 100.75),
            // A sum that could not even cover the finite buckets: at the last bound.
            (Some(50.0), 60.0),
            (None, 60.0),
            (Some(f64::NAN), 60.0),
        ];
        for (sum, tail_s) in cases {
            let observations = bucket_observations(&h(&cumulative, sum));
            assert_eq!(observations, vec![(1000.0, 1), (2500.0, 1), (seconds_to_ms(tail_s), 2)], "sum {sum:?}");
        }
        // The tail's placed mass is never below its true mass (200 s).
        let placed: f64 = bucket_observations(&h(&cumulative, Some(202.5)))
            .iter()
            .filter(|(ms, _)| *ms > 60_000.0)
            .map(|(ms, n)| ms / 1000.0 * *n as f64)
            .sum();
        assert!(placed >= 200.0, "{placed}");
        // One job in +Inf: its exact upper bound.
        assert_eq!(bucket_observations(&h(&[(60.0, 0.0), (INF, 1.0)], Some(75.0))), vec![(75_000.0, 1)]);
    }

    #[test]
    fn weighted_quantiles_go_by_rank() {
        let observations = [(300.0, 90), (2500.0, 9), (60_000.0, 1)];
        assert_eq!(weighted_quantile(&observations, 0.5), Some(300.0));
        assert_eq!(weighted_quantile(&observations, 0.95), Some(2500.0));
        assert_eq!(weighted_quantile(&observations, 0.995), Some(60_000.0));
        assert_eq!(weighted_quantile(&[], 0.95), None);
        assert_eq!(weighted_quantile(&[(5.0, 0)], 0.95), None);
    }
}
