//! A class's service-time distribution as a curve: the chance that a job
//! finishes within a given time, and the mean work it costs a worker.
//!
//! The controller judges admission on the whole distribution, not one
//! quantile: a class whose p95 is past its deadline still has jobs that make
//! it, and `P(service ≤ time left)` says how many. The curve is a table of
//! quantiles on a fixed grid (from a [`Sketch`], or a lognormal fitted to a
//! prior's p50/p95), read by linear interpolation, plus the mean, which is
//! what an admitted job costs in worker-seconds when its size is unknown.

use serde::{Deserialize, Serialize};

use crate::{lognormal::Lognormal, sketch::Sketch};

/// The table holds a quantile for every whole percent, 1% to 99%: fine
/// enough that a curve with a jump (a quarter of jobs far slower than the
/// rest) is read at the jump, not smeared across a coarse step.
const GRID_STEPS: usize = 99;

fn grid(i: usize) -> f64 {
    (i + 1) as f64 / 100.0
}

/// Standard errors by which a recent mean must differ from the window's to
/// be read as a shift rather than noise.
pub const MEAN_SHIFT_DEVIATIONS: f64 = 3.0;

/// Service time as a curve. All times in ms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceCurve {
    /// `quantiles[i]` is the `GRID[i]` quantile; non-decreasing.
    quantiles: Vec<f64>,
    pub mean_ms: f64,
}

impl ServiceCurve {
    /// The curve of a sketch's samples; `None` when it holds none.
    pub fn of_sketch(sketch: &Sketch) -> Option<Self> {
        let count = sketch.count();
        let grid: [f64; GRID_STEPS] = std::array::from_fn(grid);
        let mut quantiles: Vec<f64> = sketch.quantiles(&grid)?.into_iter().map(|q| q.max(0.0)).collect();
        monotone(&mut quantiles);
        let mean_ms = sketch.sum().map_or(quantiles[49], |s| (s / count as f64).max(0.0));
        Some(ServiceCurve { quantiles, mean_ms })
    }

    /// A lognormal through `p50` and `p95` (a prior). With `p50` unknown or
    /// not below `p95`, every job is taken to need `p95`: a prior is a guess,
    /// and a point mass at its p95 is the cautious one.
    pub fn lognormal(p50: Option<f64>, p95: f64) -> Self {
        let p95 = p95.max(0.0);
        let Some(fit) = p50.and_then(|p50| Lognormal::through(p50, p95)) else {
            return ServiceCurve { quantiles: vec![p95; GRID_STEPS], mean_ms: p95 };
        };
        let quantiles = (0..GRID_STEPS).map(|i| fit.quantile(grid(i))).collect();
        ServiceCurve { quantiles, mean_ms: fit.mean() }
    }

    /// This window's curve read with a recent horizon of `recent_jobs` jobs
    /// within it: the larger of the two at every probability (the cautious
    /// reading of a job's chance when they disagree), and the window's mean
    /// unless the recent one has moved from it by more than its noise.
    ///
    /// A mean turns worker-seconds into jobs per second. The larger of two
    /// noisy means is biased high (a recent horizon of 20 heavy-tailed jobs
    /// reads ±25%), and a mean biased high sets budgets below what the
    /// workers can do. A real shift (a tail arriving or leaving) moves the
    /// recent mean by more than [`MEAN_SHIFT_DEVIATIONS`] of its standard
    /// errors, and is taken at once either way.
    pub fn upper(&self, recent: &ServiceCurve, recent_jobs: u64) -> ServiceCurve {
        let quantiles = self.quantiles.iter().zip(&recent.quantiles).map(|(a, b)| a.max(*b)).collect();
        let deviation = (self.second_moment_ms2() - self.mean_ms * self.mean_ms).max(0.0).sqrt();
        let noise = MEAN_SHIFT_DEVIATIONS * deviation / (recent_jobs.max(1) as f64).sqrt();
        let shifted = (recent.mean_ms - self.mean_ms).abs() > noise;
        ServiceCurve { quantiles, mean_ms: if shifted { recent.mean_ms } else { self.mean_ms } }
    }

    /// A curve measured from `samples` jobs, fewer than `min_samples`, leaned
    /// on `prior` for the rest: the prior stands for the jobs still missing,
    /// so the curve is the mixture of the two populations, the measured one
    /// weighing `samples / min_samples` in every chance (and in the mean).
    ///
    /// A mixture, not a percent-by-percent average of the two tables: the
    /// average moved a measured tail towards the prior's body, so 30% of
    /// jobs measured at 5 s beside a prior of 0.8/2.5 s read as 3 s jobs, and
    /// a job with 4 s left looked safe. The mixture keeps the tail's share.
    ///
    /// A hard switch at `min_samples` made a class's cost jump between its
    /// measured mean and its prior's as the count crossed the line: a class
    /// held to a trickle, with its window's jobs around `min_samples`,
    /// flipped between two budgets from tick to tick, and a cautious prior
    /// (a point mass at its p95) halved the budget exactly when the class
    /// had been cut and needed its completions to show what it costs.
    pub fn lean_on(&self, prior: &ServiceCurve, samples: u64, min_samples: u64) -> ServiceCurve {
        let w = (samples as f64 / min_samples.max(1) as f64).min(1.0);
        match w {
            0.0 => return prior.clone(),
            1.0 => return self.clone(),
            _ => {}
        }
        let chance = |ms: f64| w * self.p_within(ms) + (1.0 - w) * prior.p_within(ms);
        let longest = self.quantiles[GRID_STEPS - 1].max(prior.quantiles[GRID_STEPS - 1]);
        let quantiles = (0..GRID_STEPS).map(|i| first_reaching(chance, grid(i), longest)).collect();
        ServiceCurve { quantiles, mean_ms: w * self.mean_ms + (1.0 - w) * prior.mean_ms }
    }

    /// `E[service²]`, ms², from the table: each percent of jobs at its
    /// quantile (the mean-square of a distribution read at its quantiles).
    pub fn second_moment_ms2(&self) -> f64 {
        let table: f64 = self.quantiles.iter().map(|v| v * v).sum::<f64>() / GRID_STEPS as f64;
        // Never below mean², which would be a negative variance.
        table.max(self.mean_ms * self.mean_ms)
    }

    /// The `q` quantile, ms (`q` clamped to the table's 1%..99%).
    pub fn quantile(&self, q: f64) -> f64 {
        let at = (q.clamp(grid(0), grid(GRID_STEPS - 1)) * 100.0 - 1.0).max(0.0);
        let i = (at.floor() as usize).min(GRID_STEPS - 1);
        let Some(&next) = self.quantiles.get(i + 1) else { return self.quantiles[i] };
        self.quantiles[i] + (next - self.quantiles[i]) * (at - i as f64)
    }

    /// `P(service ≤ ms)`: the chance that a job started now with `ms` left
    /// finishes in time. Below the table's first quantile the chance falls
    /// linearly to 0 at 0 ms; past its last it is taken as 99% (the curve
    /// knows nothing of the extreme tail, and says no more than it knows).
    pub fn p_within(&self, ms: f64) -> f64 {
        if ms.is_nan() || ms <= 0.0 {
            return 0.0;
        }
        let last = GRID_STEPS - 1;
        if ms >= self.quantiles[last] {
            return grid(last);
        }
        // The first quantile above `ms`, and interpolation from the one before.
        let i = self.quantiles.partition_point(|v| *v <= ms);
        if i == 0 {
            return grid(0) * ms / self.quantiles[0];
        }
        let (v0, v1) = (self.quantiles[i - 1], self.quantiles[i]);
        grid(i - 1) + (grid(i) - grid(i - 1)) * (ms - v0) / (v1 - v0)
    }
}

/// The least time in `0..=longest` at which the non-decreasing `chance`
/// reaches `q` (by bisection: a mixture's chance has jumps wherever either
/// curve does, and bisection lands on them).
fn first_reaching(chance: impl Fn(f64) -> f64, q: f64, longest: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, longest);
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if chance(mid) >= q { hi = mid } else { lo = mid }
    }
    hi
}

/// Sketch quantiles are monotone up to rounding; make it exact.
fn monotone(values: &mut [f64]) {
    for i in 1..values.len() {
        values[i] = values[i].max(values[i - 1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-9)
    }

    #[test]
    fn a_lognormal_prior_goes_through_its_p50_and_p95() {
        let c = ServiceCurve::lognormal(Some(120.0), 400.0);
        assert!(close(c.quantile(0.5), 120.0, 1e-6), "{}", c.quantile(0.5));
        assert!(close(c.quantile(0.95), 400.0, 1e-6), "{}", c.quantile(0.95));
        // E[S] of a lognormal is p50·exp(σ²/2): 120·exp(0.5·(ln(400/120)/1.645)²) = 156.9 ms.
        assert!(close(c.mean_ms, 156.86, 1e-3), "{}", c.mean_ms);
        assert!(close(c.p_within(120.0), 0.5, 1e-6));
        assert!(close(c.p_within(400.0), 0.95, 1e-6));
    }

    #[test]
    fn chance_of_finishing_reads_the_curve() {
        let c = ServiceCurve::lognormal(Some(100.0), 1_000.0);
        // A table: time left → P(service ≤ time left).
        let rows = [(-5.0, 0.0), (0.0, 0.0), (f64::NAN, 0.0), (100.0, 0.5), (1_000.0, 0.95), (1e9, 0.99)];
        for (ms, p) in rows {
            assert!(close(c.p_within(ms), p, 1e-6), "p_within({ms}) = {} not {p}", c.p_within(ms));
        }
        // Monotone in the time left.
        let mut last = 0.0;
        for ms in (0..5_000).step_by(7) {
            let p = c.p_within(ms as f64);
            assert!(p >= last, "not monotone at {ms}");
            last = p;
        }
    }

    #[test]
    fn a_prior_without_a_median_is_a_point_mass_at_its_p95() {
        for c in [ServiceCurve::lognormal(None, 300.0), ServiceCurve::lognormal(Some(300.0), 300.0)] {
            assert_eq!((c.quantile(0.01), c.quantile(0.99), c.mean_ms), (300.0, 300.0, 300.0));
            assert_eq!(c.p_within(299.0), 0.01 * 299.0 / 300.0);
            assert_eq!(c.p_within(300.0), 0.99);
        }
        // The all-zero default prior: any time left is enough.
        assert_eq!(ServiceCurve::lognormal(None, 0.0).p_within(1.0), 0.99);
    }

    #[test]
    fn a_sketch_gives_its_quantiles_and_its_mean() {
        let mut sketch = Sketch::new();
        assert!(ServiceCurve::of_sketch(&sketch).is_none());
        // 75% of jobs take 100 ms, 25% take 4000 ms: the tail is past a 3 s deadline.
        sketch.add(100.0, 75);
        sketch.add(4_000.0, 25);
        let c = ServiceCurve::of_sketch(&sketch).unwrap();
        assert!(close(c.mean_ms, 1_075.0, 1e-9), "{}", c.mean_ms);
        assert!(close(c.quantile(0.5), 100.0, 0.02));
        assert!(close(c.quantile(0.95), 4_000.0, 0.02));
        // Three quarters of the jobs finish within 3 s, whatever the p95 says.
        let p = c.p_within(3_000.0);
        assert!((0.70..=0.80).contains(&p), "{p}");
    }

    #[test]
    fn the_second_moment_sees_the_tail() {
        // A point mass: variance 0.
        let point = ServiceCurve::lognormal(None, 300.0);
        assert_eq!(point.second_moment_ms2(), 90_000.0);
        // 75% at 100 ms, 25% at 4 s: E[S²] = 0.75·100² + 0.25·4000² = 4,007,500.
        let mut sketch = Sketch::new();
        sketch.add(100.0, 75);
        sketch.add(4_000.0, 25);
        let m2 = ServiceCurve::of_sketch(&sketch).unwrap().second_moment_ms2();
        assert!(close(m2, 4_007_500.0, 0.05), "{m2}");
    }

    #[test]
    fn the_upper_curve_is_the_cautious_one() {
        let fast = ServiceCurve::lognormal(Some(100.0), 300.0);
        let slow = ServiceCurve::lognormal(Some(150.0), 250.0);
        let u = fast.upper(&slow, 1_000);
        assert_eq!(u.quantile(0.5), 150.0_f64.max(fast.quantile(0.5)));
        assert!(close(u.quantile(0.95), 300.0, 1e-6));
        assert!(u.p_within(200.0) <= fast.p_within(200.0).min(slow.p_within(200.0)) + 1e-12);
    }

    #[test]
    fn a_few_samples_lean_on_the_prior_for_the_jobs_missing() {
        let measured = ServiceCurve::lognormal(Some(100.0), 300.0);
        let prior = ServiceCurve::lognormal(None, 1_000.0);
        // (samples of 20 needed, the measured curve's weight)
        for (samples, weight) in [(0, 0.0), (5, 0.25), (19, 0.95), (20, 1.0), (500, 1.0)] {
            let c = measured.lean_on(&prior, samples, 20);
            let expect = |m: f64, p: f64| weight * m + (1.0 - weight) * p;
            assert!(close(c.mean_ms, expect(measured.mean_ms, 1_000.0), 1e-9), "{samples}: {}", c.mean_ms);
            // Every chance is the two populations' weighted chance.
            for ms in [50.0, 100.0, 300.0, 999.0, 1_000.0, 5_000.0] {
                let p = expect(measured.p_within(ms), prior.p_within(ms));
                assert!((c.p_within(ms) - p).abs() < 0.01, "{samples} jobs, {ms} ms: {} not {p}", c.p_within(ms));
            }
        }
    }

    #[test]
    fn a_measured_tail_keeps_its_share_beside_the_prior() {
        // 9 jobs of 20 measured: 70% near 800 ms, 30% at 5 s. The prior
        // (p50 800, p95 2500) knows no such tail.
        let mut sketch = Sketch::new();
        sketch.add(800.0, 7);
        sketch.add(5_000.0, 3);
        let measured = ServiceCurve::of_sketch(&sketch).unwrap();
        let prior = ServiceCurve::lognormal(Some(800.0), 2_500.0);
        let c = measured.lean_on(&prior, 9, 20);
        // A job with 4 s left: about 0.45 · 0.7 + 0.55 · 0.99 of finishing
        // (a sketch of 10 jobs reads its 7 short ones as up to 78%), under
        // any admission threshold near 0.95, not the prior's near-certainty.
        let p = c.p_within(4_000.0);
        assert!((0.84..=0.90).contains(&p), "{p}");
        // With 5.5 s left every job makes it.
        assert!(c.p_within(5_500.0) >= 0.98, "{}", c.p_within(5_500.0));
    }

    #[test]
    fn a_recent_mean_counts_once_it_has_moved_past_its_noise() {
        // The window: 65% of jobs near 150 ms, 35% at 1800 ms (mean ~740 ms,
        // deviation ~790 ms).
        let mut sketch = Sketch::new();
        sketch.add(150.0, 65);
        sketch.add(1_800.0, 35);
        let window = ServiceCurve::of_sketch(&sketch).unwrap();
        let recent = |mean_ms: f64| ServiceCurve { mean_ms, ..window.clone() };
        // (recent mean, recent jobs, the mean read)
        let rows = [
            (900.0, 20, window.mean_ms), // +160 ms over 20 jobs: noise (3 SE = 530 ms)
            (600.0, 20, window.mean_ms), // and below
            (1_400.0, 20, 1_400.0),      // a tail arriving
            (200.0, 20, 200.0),          // a tail gone
            (900.0, 1_000, 900.0),       // the same 160 ms over 1000 jobs: a shift
            (window.mean_ms, 1, window.mean_ms),
        ];
        for (mean, jobs, read) in rows {
            assert!(close(window.upper(&recent(mean), jobs).mean_ms, read, 1e-9), "recent {mean} over {jobs}");
        }
    }
}
