//! The lognormal through a p50 and a p95: the shape a class's declared
//! service time takes, in a prior and in the drill's and the simulations'
//! workloads.
//!
//! A lognormal's median is `exp(mu)` and its p95 is `exp(mu + Z95 · sigma)`,
//! so two quantiles fit it exactly: `mu = ln p50`, `sigma = ln(p95 / p50) / Z95`.

use rand::{Rng, RngExt};
use statrs::distribution::{ContinuousCDF, Normal};

/// The standard normal's 95th percentile.
pub const Z95: f64 = 1.644_853_626_951_472_2;

/// `exp(N(mu, sigma²))`, held as its median `exp(mu)`, which then reads back
/// exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lognormal {
    pub median: f64,
    pub sigma: f64,
}

impl Lognormal {
    /// The lognormal with this median and p95; `None` unless `0 < p50 < p95`
    /// and both are finite.
    pub fn through(p50: f64, p95: f64) -> Option<Self> {
        (p50 > 0.0 && p95 > p50 && p95.is_finite()).then(|| Lognormal { median: p50, sigma: (p95 / p50).ln() / Z95 })
    }

    /// The mean of the underlying normal, `ln median`.
    pub fn mu(&self) -> f64 {
        self.median.ln()
    }

    /// `median · exp(sigma² / 2)`: above the median, because the right tail is long.
    pub fn mean(&self) -> f64 {
        self.median * (self.sigma * self.sigma / 2.0).exp()
    }

    /// The value `z` standard deviations out in log space: the `p` quantile
    /// for `z` the normal's, a draw for `z` a standard normal draw.
    pub fn at(&self, z: f64) -> f64 {
        self.median * (self.sigma * z).exp()
    }

    /// The `p` quantile (`0 < p < 1`).
    pub fn quantile(&self, p: f64) -> f64 {
        self.at(Normal::standard().inverse_cdf(p))
    }

    /// One draw from two uniforms of `rng`.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        self.at(standard_normal(rng))
    }
}

/// A standard normal draw, by Box–Muller from two uniforms of `rng`.
pub fn standard_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    #[test]
    fn z95_is_the_normal_quantile() {
        assert!((Normal::standard().inverse_cdf(0.95) - Z95).abs() < 1e-12);
    }

    #[test]
    fn the_fit_goes_through_its_quantiles_and_draws_follow_it() {
        for (p50, p95) in [(120.0, 400.0), (80.0, 250.0), (10.0, 10.5)] {
            let fit = Lognormal::through(p50, p95).unwrap();
            assert!((fit.quantile(0.5) / p50 - 1.0).abs() < 1e-9 && (fit.quantile(0.95) / p95 - 1.0).abs() < 1e-9);
            let mut rng = SmallRng::seed_from_u64(7);
            let mut draws: Vec<f64> = (0..100_000).map(|_| fit.draw(&mut rng)).collect();
            let mean = draws.iter().sum::<f64>() / draws.len() as f64;
            draws.sort_by(f64::total_cmp);
            assert!((draws[50_000] / p50 - 1.0).abs() < 0.05, "p50 {} vs {p50}", draws[50_000]);
            assert!((draws[95_000] / p95 - 1.0).abs() < 0.05, "p95 {} vs {p95}", draws[95_000]);
            assert!((mean / fit.mean() - 1.0).abs() < 0.05, "mean {mean} vs {}", fit.mean());
        }
        // The reference workload's service time: 120·exp(0.73196² / 2) = 156.86 ms.
        assert!((Lognormal::through(120.0, 400.0).unwrap().mean() - 156.86).abs() < 0.01);
    }

    #[test]
    fn only_a_rising_pair_of_positive_quantiles_fits() {
        for (p50, p95) in [(0.0, 1.0), (-1.0, 1.0), (5.0, 5.0), (5.0, 4.0), (1.0, f64::INFINITY), (f64::NAN, 1.0)] {
            assert_eq!(Lognormal::through(p50, p95), None, "p50 {p50}, p95 {p95}");
        }
    }
}
