//! The job plan: every job a run will offer, fixed by the workload and a
//! seed. The load generator and the backend compute the same plan, and every
//! mode gets the identical one.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp};

use crate::phase::{Phase, Phases};
use crate::sampler::ServiceSampler;
use crate::workload::{Workload, WorkloadClass};

#[derive(Debug, Clone, PartialEq)]
pub struct PlannedJob {
    /// Position in the plan (0, 1, …), in arrival order.
    pub id: u64,
    /// Index of the class in the workload's `class` list.
    pub class: usize,
    /// Milliseconds since the start of the run, on the workload's clock.
    pub arrival_ms: f64,
    /// How long a worker will spend on it, ms.
    pub service_ms: f64,
    /// Whether the service time is the injected tail.
    pub injected: bool,
}

/// Open-loop Poisson arrivals per class over the run, each with its service
/// time. Each class draws from its own streams (arrivals, service times,
/// injection), seeded from `seed` and the class's name, so adding a class or
/// changing the injection leaves the other draws alone. A plan of
/// `workload.scaled(k)` is the plan of `workload` with its times × k.
pub fn plan_jobs(workload: &Workload, seed: u64) -> Vec<PlannedJob> {
    let phases = Phases::of(workload);
    let mut jobs: Vec<PlannedJob> = workload
        .classes
        .iter()
        .enumerate()
        .flat_map(|(index, class)| class_jobs(index, class, workload.injection.affected_fraction, &phases, seed))
        .collect();
    jobs.sort_by(|a, b| a.arrival_ms.total_cmp(&b.arrival_ms).then(a.class.cmp(&b.class)));
    for (id, job) in jobs.iter_mut().enumerate() {
        job.id = id as u64;
    }
    jobs
}

fn class_jobs(index: usize, class: &WorkloadClass, affected: f64, phases: &Phases, seed: u64) -> Vec<PlannedJob> {
    let mut arrivals = stream(seed, &class.name, "arrivals");
    let mut services = stream(seed, &class.name, "service");
    let mut injections = stream(seed, &class.name, "injection");
    let gap_ms = Exp::new(class.arrival_rate / 1000.0).expect("validated: the arrival rate is positive");
    let sampler = ServiceSampler::for_service(&class.service_time);
    let mut jobs = Vec::new();
    let mut arrival_ms = gap_ms.sample(&mut arrivals);
    while arrival_ms < phases.end_ms {
        // Every job makes every draw, so one job's injection never shifts
        // another's service time.
        let service_ms = sampler.sample(&mut services);
        let affected_draw: f64 = injections.random();
        let tail = class
            .service_time
            .injected_tail_ms
            .filter(|_| phases.phase_at(arrival_ms) == Phase::Injected && affected_draw < affected);
        jobs.push(PlannedJob {
            id: 0,
            class: index,
            arrival_ms,
            service_ms: tail.unwrap_or(service_ms),
            injected: tail.is_some(),
        });
        arrival_ms += gap_ms.sample(&mut arrivals);
    }
    jobs
}

/// An independent random stream for one purpose of one class.
fn stream(seed: u64, class: &str, purpose: &str) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed ^ fnv1a(&[class.as_bytes(), b"/", purpose.as_bytes()]))
}

/// FNV-1a: stable across Rust releases, unlike `std`'s hasher.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(0xcbf2_9ce4_8422_2325, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_workload() -> Workload {
        Workload::from_toml_str(include_str!("../workloads/seed.toml")).unwrap()
    }

    fn two_classes() -> Workload {
        Workload::from_toml_str(include_str!("../workloads/two-classes.toml")).unwrap()
    }

    #[test]
    fn the_same_seed_gives_the_same_plan_and_another_seed_another() {
        let w = seed_workload();
        assert_eq!(plan_jobs(&w, 42), plan_jobs(&w, 42));
        assert_ne!(plan_jobs(&w, 42), plan_jobs(&w, 43));
    }

    #[test]
    fn the_seed_plan_offers_about_30_jobs_per_second_in_arrival_order() {
        let jobs = plan_jobs(&seed_workload(), 1);
        // 5400 expected over 180 s; a Poisson count's sd is ~73.
        assert!((5100..5700).contains(&jobs.len()), "{} jobs", jobs.len());
        assert!(jobs.windows(2).all(|w| w[0].arrival_ms <= w[1].arrival_ms));
        assert!(jobs.iter().enumerate().all(|(i, j)| j.id == i as u64));
        assert!(jobs.iter().all(|j| (0.0..180_000.0).contains(&j.arrival_ms)));
    }

    #[test]
    fn about_35_percent_of_the_injected_phase_takes_the_tail_and_nobody_else() {
        let jobs = plan_jobs(&seed_workload(), 1);
        let in_window = |j: &&PlannedJob| (60_000.0..120_000.0).contains(&j.arrival_ms);
        let window: Vec<_> = jobs.iter().filter(in_window).collect();
        let tail: Vec<_> = window.iter().filter(|j| j.injected).collect();
        let share = tail.len() as f64 / window.len() as f64;
        assert!((share - 0.35).abs() < 0.04, "{share}");
        assert!(tail.iter().all(|j| j.service_ms == 1800.0));
        assert!(jobs.iter().filter(|j| !in_window(j)).all(|j| !j.injected));
    }

    #[test]
    fn a_scaled_workload_plans_the_same_jobs_on_a_faster_clock() {
        let w = seed_workload();
        let full = plan_jobs(&w, 9);
        let fast = plan_jobs(&w.scaled(0.1), 9);
        assert_eq!(full.len(), fast.len());
        for (a, b) in full.iter().zip(&fast) {
            assert_eq!((a.class, a.injected), (b.class, b.injected));
            assert!((b.arrival_ms / a.arrival_ms - 0.1).abs() < 1e-9);
            assert!((b.service_ms / a.service_ms - 0.1).abs() < 1e-9);
        }
    }

    #[test]
    fn the_tail_goes_only_to_the_class_that_declares_it() {
        let w = two_classes();
        let jobs = plan_jobs(&w, 5);
        let batch = w.classes.iter().position(|c| c.name == "batch").unwrap();
        assert!(jobs.iter().any(|j| j.injected));
        assert!(jobs.iter().filter(|j| j.injected).all(|j| j.class == batch));
    }

    #[test]
    fn adding_a_class_leaves_the_other_class_jobs_alone() {
        let both = two_classes();
        let mut alone = both.clone();
        alone.classes.retain(|c| c.name == "interactive");
        let times = |w: &Workload, name: &str| -> Vec<(f64, f64)> {
            let class = w.classes.iter().position(|c| c.name == name).unwrap();
            plan_jobs(w, 3).iter().filter(|j| j.class == class).map(|j| (j.arrival_ms, j.service_ms)).collect()
        };
        assert_eq!(times(&alone, "interactive"), times(&both, "interactive"));
    }

    #[test]
    fn changing_the_injection_leaves_arrivals_and_untouched_service_times_alone() {
        let w = seed_workload();
        let mut none = w.clone();
        none.injection.affected_fraction = 0.0;
        let (with, without) = (plan_jobs(&w, 4), plan_jobs(&none, 4));
        assert_eq!(with.len(), without.len());
        for (a, b) in with.iter().zip(&without) {
            assert_eq!(a.arrival_ms, b.arrival_ms);
            if !a.injected {
                assert_eq!(a.service_ms, b.service_ms);
            }
        }
        assert!(without.iter().all(|j| !j.injected));
    }
}
