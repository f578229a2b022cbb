//! The capacity bound: the most on-time completions per second that W
//! workers can deliver when admission picks jobs at random, whatever their
//! service time. It is `W / E[service]` over the mix of classes offered (each
//! weighted by its arrival rate), with the injected tail mixed in while the
//! injection lasts, and never more than what is offered. A controller that
//! admits at random can reach it; one that knew service times in advance
//! could beat it, and nothing here does.
//!
//! It is a rate. A phase's jobs that are admitted near its end finish in
//! the next phase, so a phase's on-time rate may pass its bound by up to
//! about a deadline's worth of work, and a finite run's service times
//! scatter around their mean by a few percent.

use serde::{Deserialize, Serialize};

use crate::phase::Phase;
use crate::sampler::ServiceSampler;
use crate::workload::{Workload, WorkloadClass};

/// Jobs per second on the workload's clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CapacityBound {
    /// Before the injection and after its removal.
    pub steady_per_s: f64,
    /// While the injection lasts.
    pub injected_per_s: f64,
    /// What the classes offer together.
    pub offered_per_s: f64,
    /// `E[service]` over the mix, ms.
    pub mean_service_steady_ms: f64,
    pub mean_service_injected_ms: f64,
}

impl CapacityBound {
    pub fn for_phase(&self, phase: Phase) -> f64 {
        match phase {
            Phase::Steady | Phase::Recovered => self.steady_per_s,
            Phase::Injected => self.injected_per_s,
        }
    }
}

pub fn capacity_bound(workload: &Workload) -> CapacityBound {
    let offered_per_s = workload.total_arrival_rate();
    let mix = |mean_of: &dyn Fn(&WorkloadClass) -> f64| {
        workload.classes.iter().map(|c| c.arrival_rate * mean_of(c)).sum::<f64>() / offered_per_s
    };
    let mean_service_steady_ms = mix(&steady_mean_ms);
    let mean_service_injected_ms = mix(&|c| injected_mean_ms(c, workload.injection.affected_fraction));
    let most = |mean_ms: f64| (f64::from(workload.worker_count) * 1000.0 / mean_ms).min(offered_per_s);
    CapacityBound {
        steady_per_s: most(mean_service_steady_ms),
        injected_per_s: most(mean_service_injected_ms),
        offered_per_s,
        mean_service_steady_ms,
        mean_service_injected_ms,
    }
}

/// A class's part of the bound: random admission keeps the offered mix, so
/// each class gets its share of arrivals.
pub fn class_share(workload: &Workload, class: usize) -> f64 {
    workload.classes[class].arrival_rate / workload.total_arrival_rate()
}

fn steady_mean_ms(class: &WorkloadClass) -> f64 {
    ServiceSampler::for_service(&class.service_time).mean()
}

/// A class with a tail: `(1 - f) · E + f · tail`; one without keeps its mean.
fn injected_mean_ms(class: &WorkloadClass, affected_fraction: f64) -> f64 {
    let steady = steady_mean_ms(class);
    match class.service_time.injected_tail_ms {
        Some(tail) => (1.0 - affected_fraction) * steady + affected_fraction * tail,
        None => steady,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64, tolerance: f64) -> bool {
        (actual - expected).abs() <= tolerance
    }

    #[test]
    fn the_seed_bound_is_the_offered_rate_when_steady_and_about_10_9_per_s_injected() {
        let w = Workload::from_toml_str(include_str!("../workloads/seed.toml")).unwrap();
        let bound = capacity_bound(&w);
        // sigma = ln(400/120)/1.6449 = 0.73196; E = 120 · e^(0.26788) = 156.86 ms.
        assert!(close(bound.mean_service_steady_ms, 156.86, 0.01), "{bound:?}");
        // 0.65 · 156.86 + 0.35 · 1800 = 731.96 ms.
        assert!(close(bound.mean_service_injected_ms, 731.96, 0.01), "{bound:?}");
        // 8 / 0.15686 s = 51.0/s is more than the 30/s offered.
        assert_eq!(bound.steady_per_s, 30.0);
        // 8 / 0.73196 s = 10.93/s.
        assert!(close(bound.injected_per_s, 10.93, 0.005), "{bound:?}");
        assert_eq!(bound.for_phase(Phase::Recovered), bound.steady_per_s);
        assert_eq!(bound.for_phase(Phase::Injected), bound.injected_per_s);
    }

    #[test]
    fn two_classes_mix_the_tail_of_batch_only() {
        let w = Workload::from_toml_str(include_str!("../workloads/two-classes.toml")).unwrap();
        let bound = capacity_bound(&w);
        // interactive: sigma = ln(250/80)/1.6449 = 0.69272, E = 80 · e^0.23993 = 101.69 ms;
        // batch: sigma = ln 3/1.6449 = 0.66791, E = 400 · e^0.22305 = 499.91 ms.
        // steady mix (20 · 101.69 + 5 · 499.91)/25 = 181.34 ms -> 44.1/s, above the 25/s offered.
        assert!(close(bound.mean_service_steady_ms, 181.34, 0.02), "{bound:?}");
        assert_eq!(bound.steady_per_s, 25.0);
        // batch injected: 0.65 · 499.91 + 0.35 · 4000 = 1724.94 ms;
        // mix (20 · 101.69 + 5 · 1724.94)/25 = 426.34 ms -> 8 / 0.42634 = 18.76/s.
        assert!(close(bound.mean_service_injected_ms, 426.34, 0.02), "{bound:?}");
        assert!(close(bound.injected_per_s, 18.76, 0.01), "{bound:?}");
        assert_eq!(class_share(&w, 0), 0.8);
    }

    #[test]
    fn the_bound_is_in_the_clock_of_the_workload_it_is_given() {
        let w = Workload::from_toml_str(include_str!("../workloads/seed.toml")).unwrap();
        let (full, fast) = (capacity_bound(&w), capacity_bound(&w.scaled(0.1)));
        assert!(close(fast.injected_per_s, full.injected_per_s * 10.0, 1e-9));
        assert!(close(fast.steady_per_s, 300.0, 1e-9));
    }

    #[test]
    fn no_tail_means_no_change_and_more_workers_more_capacity() {
        let mut w = Workload::from_toml_str(include_str!("../workloads/seed.toml")).unwrap();
        w.classes[0].service_time.injected_tail_ms = None;
        let bound = capacity_bound(&w);
        assert_eq!(bound.injected_per_s, bound.steady_per_s);
        w.classes[0].arrival_rate = 1000.0;
        w.worker_count = 16;
        // 16 / 0.15686 s = 102.0/s, now below what is offered.
        assert!(close(capacity_bound(&w).steady_per_s, 102.0, 0.05));
    }
}
