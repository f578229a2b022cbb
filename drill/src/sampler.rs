//! Service times: the lognormal through a class's declared p50 and p95
//! ([`Lognormal`]), drawn by `rand_distr`, whose stream a seed's job plan is.

use rand::Rng;
use rand_distr::{Distribution, LogNormal};
use shedder_daemon::lognormal::Lognormal;

use crate::workload::ServiceTime;

/// Draws service times, in the unit of the quantiles it was fitted to.
#[derive(Debug, Clone, Copy)]
pub struct ServiceSampler {
    fit: Lognormal,
    lognormal: LogNormal<f64>,
}

impl ServiceSampler {
    /// Fits the lognormal; `p95` must exceed `p50 > 0` (the workload's
    /// validation guarantees it), so this panics otherwise.
    pub fn from_quantiles(p50: f64, p95: f64) -> Self {
        let fit = Lognormal::through(p50, p95)
            .unwrap_or_else(|| panic!("a lognormal needs 0 < p50 < p95, got p50 {p50}, p95 {p95}"));
        let lognormal = LogNormal::new(fit.mu(), fit.sigma).expect("sigma is positive and finite");
        Self { fit, lognormal }
    }

    /// The sampler for a class's declared service time (without the tail).
    pub fn for_service(service: &ServiceTime) -> Self {
        Self::from_quantiles(service.p50_ms, service.p95_ms)
    }

    /// The distribution's mean: above the median, because the right tail is long.
    pub fn mean(&self) -> f64 {
        self.fit.mean()
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        self.lognormal.sample(rng)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::Xoshiro256PlusPlus;

    use super::*;

    fn quantile_of_draws(sampler: &ServiceSampler, n: usize, q: f64) -> f64 {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let mut draws: Vec<f64> = (0..n).map(|_| sampler.sample(&mut rng)).collect();
        draws.sort_by(f64::total_cmp);
        draws[(q * n as f64) as usize]
    }

    #[test]
    fn draws_reproduce_the_declared_p50_and_p95_within_five_percent() {
        for (p50, p95) in [(120.0, 400.0), (80.0, 250.0), (400.0, 1200.0), (10.0, 10.5)] {
            let sampler = ServiceSampler::from_quantiles(p50, p95);
            let drawn_p50 = quantile_of_draws(&sampler, 100_000, 0.50);
            let drawn_p95 = quantile_of_draws(&sampler, 100_000, 0.95);
            assert!((drawn_p50 / p50 - 1.0).abs() < 0.05, "p50 {drawn_p50} vs {p50}");
            assert!((drawn_p95 / p95 - 1.0).abs() < 0.05, "p95 {drawn_p95} vs {p95}");
        }
    }

    #[test]
    fn the_seed_service_time_has_a_mean_of_about_157_ms() {
        let sampler = ServiceSampler::from_quantiles(120.0, 400.0);
        // sigma = ln(400/120) / 1.6449 = 0.73196; 120 * exp(0.73196² / 2) = 156.86.
        assert!((sampler.mean() - 156.86).abs() < 0.05, "{}", sampler.mean());
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let drawn: f64 = (0..100_000).map(|_| sampler.sample(&mut rng)).sum::<f64>() / 100_000.0;
        assert!((drawn / sampler.mean() - 1.0).abs() < 0.02, "mean of draws {drawn}");
    }

    #[test]
    #[should_panic(expected = "0 < p50 < p95")]
    fn a_p95_not_above_the_p50_is_refused() {
        ServiceSampler::from_quantiles(120.0, 120.0);
    }
}
