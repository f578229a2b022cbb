//! An interval's histogram (bucket counts and `_sum` grown since the last
//! scrape) turned into weighted observations that never under-report a
//! bucket's jobs.
//!
//! # Each bucket at the largest mean `_sum` allows
//!
//! A bucket's jobs took more than its lower bound (`0` for the first, the
//! last finite bound for `+Inf`) and at most its upper bound (`le`). Every
//! job's time beyond its bucket's lower bound adds up to
//!
//! ```text
//! excess = Δsum − Σ_buckets count_i × lower_i
//! ```
//!
//! and all of it could belong to one bucket, so bucket i's jobs average at
//! most `lower_i + excess / count_i`. Each bucket's jobs become one
//! observation at
//!
//! ```text
//! min(upper_i, lower_i + excess / count_i)
//! ```
//!
//! never below their true mean, so their placed total is never below their
//! true total: the work they did is not under-reported, and a long tail in
//! `+Inf` (no upper bound: vLLM v0's buckets end at 60 s, newer vLLM lets
//! users choose buckets) is placed at the largest mean its mass allows,
//! never below the bound it passed. A quantile taken from the observations
//! is at most one bucket width from the true one: above it, or below it by
//! less than the spread of the jobs inside its bucket. Without `_sum`'s help
//! the buckets' upper bounds would stand for every job: with coarse buckets
//! (vLLM's first latency bucket ends at 0.3 s) a queue that never formed
//! would read as 0.3 s, and 120 ms jobs as 300 ms ones. Without a usable
//! `_sum` (absent, or below what the buckets' lower bounds already account
//! for, after a race) each finite bucket is placed at its upper bound and
//! `+Inf` at the last finite bound, the most that can be said.

use super::exposition::Histogram;

/// Interval histogram → one `(ms, count)` per bucket that gained jobs (see
/// the module's documentation); nothing when there is no finite bound.
pub(super) fn bucket_observations(interval: &Histogram) -> Vec<(f64, u64)> {
    let Some(last_finite) = interval.buckets.iter().map(|(le, _)| *le).rfind(|le| le.is_finite()) else {
        return Vec::new();
    };
    // (lower bound, upper bound, jobs) per bucket that gained any.
    let mut buckets = Vec::new();
    let (mut below, mut lower) = (0.0, 0.0);
    for &(le, up_to) in &interval.buckets {
        // Cumulative counts never shrink with `le`; clamp exporter races.
        let in_bucket = (up_to - below).max(0.0);
        below = f64::max(below, up_to);
        if in_bucket.round() >= 1.0 {
            buckets.push((lower, le, in_bucket));
        }
        lower = le;
    }
    let floor: f64 = buckets.iter().map(|(lower, _, n)| lower * n).sum();
    let excess = interval.sum.map(|sum| sum - floor).filter(|excess| excess.is_finite() && *excess >= 0.0);
    buckets
        .into_iter()
        .map(|(lower, upper, n)| {
            let seconds = match excess {
                Some(excess) => upper.min(lower + excess / n),
                None => upper.min(last_finite),
            };
            (seconds_to_ms(seconds), n.round() as u64)
        })
        .collect()
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
    fn the_sum_pulls_a_bucket_down_to_the_largest_mean_it_allows() {
        // (case, cumulative buckets, _sum, placed)
        let cases = [
            // vLLM's 0.3 s first bucket: 30 jobs that hardly queued (2 ms each).
            ("a queue that never formed", vec![(0.3, 30.0), (0.5, 30.0), (INF, 30.0)], 0.06, vec![(2.0, 30)]),
            // 26 jobs of 120 ms and 4 of 400 ms: the 4 took at least 0.3 s
            // each, so the 26 average at most (4.72 − 1.2) / 26 s; the 4 could
            // hold all the excess, so they stay at their bound.
            ("a busy first bucket", vec![(0.3, 26.0), (0.5, 30.0), (INF, 30.0)], 4.72, vec![(135.385, 26), (500.0, 4)]),
            // SGLang's queue buckets start at 0: those jobs did not wait.
            ("a bucket ending at 0", vec![(0.0, 8.0), (0.1, 10.0), (INF, 10.0)], 0.1, vec![(0.0, 8), (50.0, 2)]),
        ];
        for (case, cumulative, sum, placed) in cases {
            let observations = bucket_observations(&h(&cumulative, Some(sum)));
            assert_eq!(observations, placed, "{case}");
            // Never below the true total.
            let total: f64 = observations.iter().map(|(ms, n)| ms / 1000.0 * *n as f64).sum();
            assert!(total >= sum - 1e-6, "{case}: placed {total} s of {sum} s");
        }
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
