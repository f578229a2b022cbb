//! The job plan: every job a run will offer, fixed by the workload and a
//! seed. The load generator and the backend compute the same plan, and every
//! mode gets the identical one.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp, StandardNormal};

use crate::phase::{Phase, Phases};
use crate::sampler::ServiceSampler;
use crate::workload::{Source, Workload, WorkloadClass};

#[derive(Debug, Clone, PartialEq)]
pub struct PlannedJob {
    /// Position in the plan (0, 1, …), in arrival order.
    pub id: u64,
    /// Index of the class in the workload's `class` list.
    pub class: usize,
    /// Index of the tenant in its class's `tenant` list; None for a class
    /// without tenants.
    pub tenant: Option<usize>,
    /// Milliseconds since the start of the run, on the workload's clock.
    pub arrival_ms: f64,
    /// How long a worker will spend on it, ms.
    pub service_ms: f64,
    /// Whether the service time is the injected tail.
    pub injected: bool,
    /// What the backend tells `admit` the job will take, ms (the workload's
    /// `estimate_error`); None where it gives no estimates.
    pub estimated_service_ms: Option<f64>,
}

/// Open-loop Poisson arrivals per source (a class, or each of its tenants)
/// over the run, each with its service time. Each source draws from its own
/// streams (arrivals, service times, tails), seeded from `seed` and its
/// name, so adding a class or a tenant, or changing a tail, leaves the other
/// draws alone. A plan of `workload.scaled(k)` is the plan of `workload`
/// with its times × k.
pub fn plan_jobs(workload: &Workload, seed: u64) -> Vec<PlannedJob> {
    let phases = Phases::of(workload);
    let affected = workload.injection.affected_fraction;
    let mut jobs: Vec<PlannedJob> = workload
        .classes
        .iter()
        .enumerate()
        .flat_map(|(index, class)| {
            class.sources().into_iter().flat_map(move |source| {
                source_jobs(index, class, &source, affected, workload.estimate_error, &phases, seed)
            })
        })
        .collect();
    jobs.sort_by(|a, b| {
        a.arrival_ms.total_cmp(&b.arrival_ms).then(a.class.cmp(&b.class)).then(a.tenant.cmp(&b.tenant))
    });
    for (id, job) in jobs.iter_mut().enumerate() {
        job.id = id as u64;
    }
    jobs
}

fn source_jobs(
    index: usize,
    class: &WorkloadClass,
    source: &Source,
    affected: f64,
    estimate_error: Option<f64>,
    phases: &Phases,
    seed: u64,
) -> Vec<PlannedJob> {
    // A class's own stream keeps the class's name, as before tenants existed.
    let name = match source.tenant {
        None => class.name.clone(),
        Some(_) => format!("{}/{}", class.name, source.name),
    };
    let mut arrivals = stream(seed, &name, "arrivals");
    let mut thinning = stream(seed, &name, "schedule");
    let mut services = stream(seed, &name, "service");
    let mut injections = stream(seed, &name, "injection");
    let mut tails = stream(seed, &name, "tail");
    let mut estimates = stream(seed, &name, "estimate");
    // Candidates at the peak rate, each kept with probability rate(t)/peak
    // (thinning): exact for any schedule, and plain Poisson without one.
    let peak = source.peak_rate();
    let gap_ms = Exp::new(peak / 1000.0).expect("validated: the arrival rate is positive");
    let sampler = ServiceSampler::for_service(&class.service_time);
    let mut jobs = Vec::new();
    let mut arrival_ms = gap_ms.sample(&mut arrivals);
    while arrival_ms < phases.end_ms {
        let kept = source.schedule.is_empty() || thinning.random::<f64>() * peak < source.rate_at(arrival_ms / 1000.0);
        // Every job makes every draw, so one job's tail never shifts another's service time.
        let drawn_ms = sampler.sample(&mut services);
        let affected_draw: f64 = injections.random();
        let tail_draw: f64 = tails.random();
        let estimate_draw: f64 = StandardNormal.sample(&mut estimates);
        if kept {
            let injected = class
                .service_time
                .injected_tail_ms
                .filter(|_| phases.phase_at(arrival_ms) == Phase::Injected && affected_draw < affected);
            let steady_tail = class.service_time.tail.as_ref().filter(|t| tail_draw < t.fraction).map(|t| t.ms);
            let service_ms = injected.or(steady_tail).unwrap_or(drawn_ms);
            jobs.push(PlannedJob {
                id: 0,
                class: index,
                tenant: source.tenant,
                arrival_ms,
                service_ms,
                injected: injected.is_some(),
                estimated_service_ms: estimate_error.map(|spread| service_ms * (spread * estimate_draw).exp()),
            });
        }
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
    fn estimates_are_off_by_their_spread_and_leave_every_other_draw_alone() {
        let blind = seed_workload();
        let plan = |spread| plan_jobs(&Workload { estimate_error: spread, ..blind.clone() }, 3);
        let without = plan(None);
        assert!(without.iter().all(|j| j.estimated_service_ms.is_none()));
        for spread in [0.0, 0.5] {
            let with = plan(Some(spread));
            let unestimated: Vec<PlannedJob> =
                with.iter().map(|j| PlannedJob { estimated_service_ms: None, ..j.clone() }).collect();
            assert_eq!(unestimated, without, "the same jobs at {spread}");
            let logs: Vec<f64> = with.iter().map(|j| (j.estimated_service_ms.unwrap() / j.service_ms).ln()).collect();
            let mean = logs.iter().sum::<f64>() / logs.len() as f64;
            let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
            assert!(mean.abs() < 0.02 && (sd - spread).abs() < 0.02, "spread {spread}: mean {mean}, sd {sd}");
        }
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

    fn shipped(name: &str) -> Workload {
        Workload::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads").join(name)).unwrap()
    }

    fn count(jobs: &[PlannedJob], from_s: f64, to_s: f64, keep: impl Fn(&PlannedJob) -> bool) -> usize {
        jobs.iter().filter(|j| (from_s * 1000.0..to_s * 1000.0).contains(&j.arrival_ms) && keep(j)).count()
    }

    #[test]
    fn a_flash_crowd_steps_up_eightfold_and_ramps_back_down() {
        let jobs = plan_jobs(&shipped("flash-crowd.toml"), 2);
        // 10/s for 12 s: 120 (sd 11); 80/s for 8 s: 640 (sd 25); the ramp 80 -> 10 over 4 s: 180 (sd 13).
        let table = [(0.0, 12.0, 120.0), (12.0, 20.0, 640.0), (20.0, 24.0, 180.0), (24.0, 36.0, 120.0)];
        for (from, to, expected) in table {
            let n = count(&jobs, from, to, |_| true) as f64;
            assert!(
                (n - expected).abs() < 4.0 * expected.sqrt(),
                "{n} jobs from {from} s to {to} s, expected {expected}"
            );
        }
    }

    #[test]
    fn each_tenant_sends_its_own_rate_and_the_noisy_one_ten_times_more() {
        let w = shipped("noisy-tenant.toml");
        let jobs = plan_jobs(&w, 2);
        let noisy = w.classes[0].tenants.iter().position(|t| t.name == "noisy").unwrap();
        let of = |tenant: usize| move |j: &PlannedJob| j.tenant == Some(tenant);
        // 16 s at 30/s: 480 (sd 22); a quiet tenant at 3/s: 48 (sd 7).
        let loud = count(&jobs, 12.0, 28.0, of(noisy)) as f64;
        let quiet = count(&jobs, 12.0, 28.0, of(0)) as f64;
        assert!((loud - 480.0).abs() < 90.0 && (quiet - 48.0).abs() < 28.0, "noisy {loud}, quiet {quiet}");
        assert!(jobs.iter().all(|j| j.tenant.is_some()));
    }

    #[test]
    fn a_steady_tail_takes_its_fraction_of_jobs_all_run_long() {
        let w = shipped("tail-past-deadline.toml");
        let jobs = plan_jobs(&w, 2);
        let tail = jobs.iter().filter(|j| j.service_ms == 4000.0).count() as f64 / jobs.len() as f64;
        assert!((tail - 0.25).abs() < 0.05, "{tail}");
        let first_half = count(&jobs, 0.0, 20.0, |j| j.service_ms == 4000.0);
        assert!(first_half > 0 && jobs.iter().all(|j| !j.injected));
    }
}
