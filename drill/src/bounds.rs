//! Two bounds on completed-on-time, computed on the job plan, phase by
//! phase, with the phase's W × its length in worker-seconds to spend:
//!
//! * the **service-blind bound**: admission sees a job's class but not its
//!   size. A class's admitted jobs are a random sample of its jobs, so a
//!   worker-second spent on class c finishes `m_c / S_c` jobs on time, where
//!   `m_c` counts its jobs whose service fits their deadline (a job longer
//!   than its deadline never counts) and `S_c` is the service of all its
//!   jobs. Worker-seconds go to the classes with the most on-time jobs per
//!   worker-second first, each up to all of its work. With the critical tier
//!   served first instead, the same greedy gives the critical tier's bound.
//! * the **clairvoyant oracle**: every job's service time is known. At most
//!   as many jobs finish on time as fit, shortest first, into the phase's
//!   worker-seconds, counting only jobs whose service fits their deadline.
//!   This is the exact optimum of a relaxation (work may be split across
//!   workers and moved in time within the phase), so no schedule beats it;
//!   it is not itself a schedule. Tiers are served lexicographically: the
//!   critical tier's shortest jobs first, then the standard tier's with what
//!   remains, then the sheddable tier's; the total is also given without
//!   tiers (the most any policy could finish).
//!
//! Both are bounds on the work a phase's own time can do: a job admitted
//! near a phase's end finishes in the next, so a phase may pass its bound
//! by up to a deadline's worth of work; over the whole run this is at most
//! the last deadline's worth.

use serde::{Deserialize, Serialize};

use crate::phase::{PerPhase, Phase, Phases};
use crate::plan::PlannedJob;
use crate::workload::{TIERS, Tier, Workload};

/// A class as the bounds see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassTerms {
    pub deadline_ms: f64,
    pub tier: Tier,
}

/// One phase's bounds, in jobs; per class in the workload's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseBounds {
    pub worker_seconds: f64,
    pub offered: Vec<u64>,
    /// Jobs whose service fits their deadline.
    pub can_finish: Vec<u64>,
    /// The blind bound's allocation, on-time jobs per class.
    pub blind: Vec<f64>,
    pub blind_total: f64,
    /// The critical tier's blind bound when it is served first.
    pub blind_critical_first: f64,
    /// The oracle, tiers served in order, per class.
    pub oracle: Vec<u64>,
    /// The oracle without tiers: the most on-time jobs in all.
    pub oracle_total: u64,
}

/// Every phase's bounds, and the run's (their sums).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bounds {
    pub phases: PerPhase<PhaseBounds>,
    pub run: PhaseBounds,
}

impl Bounds {
    /// The bounds of `workload`'s plan for `seed`, on the workload's clock.
    pub fn of(workload: &Workload, plan: &[PlannedJob]) -> Self {
        let phases = Phases::of(workload);
        let classes: Vec<ClassTerms> =
            workload.classes.iter().map(|c| ClassTerms { deadline_ms: c.deadline_ms, tier: c.tier }).collect();
        let workers = f64::from(workload.worker_count);
        let per_phase = PerPhase::from_fn(|phase| {
            let jobs: Vec<&PlannedJob> = plan.iter().filter(|j| phases.phase_at(j.arrival_ms) == phase).collect();
            phase_bounds(&classes, &jobs, workers * phases.duration_s(phase))
        });
        let run = sum(&Phase::ALL.map(|p| per_phase.get(p).clone()));
        Bounds { phases: per_phase, run }
    }

    pub fn phase(&self, phase: Phase) -> &PhaseBounds {
        self.phases.get(phase)
    }
}

/// Both bounds for `jobs` with `worker_seconds` to spend.
pub fn phase_bounds(classes: &[ClassTerms], jobs: &[&PlannedJob], worker_seconds: f64) -> PhaseBounds {
    let fits = |j: &PlannedJob| j.service_ms <= classes[j.class].deadline_ms;
    let per_class = |count: &dyn Fn(&PlannedJob) -> bool| -> Vec<u64> {
        (0..classes.len()).map(|c| jobs.iter().filter(|j| j.class == c && count(j)).count() as u64).collect()
    };
    let offered = per_class(&|_| true);
    let can_finish = per_class(&fits);
    let work_s: Vec<f64> =
        (0..classes.len()).map(|c| jobs.iter().filter(|j| j.class == c).map(|j| j.service_ms / 1000.0).sum()).collect();
    let loads: Vec<ClassLoad> =
        (0..classes.len()).map(|c| ClassLoad { on_time_able: can_finish[c] as f64, work_s: work_s[c] }).collect();

    let blind = blind_allocation(&loads, worker_seconds, |_| 0);
    let critical_rank = |c: usize| if classes[c].tier == Tier::Critical { 0 } else { 1 };
    let critical_first = blind_allocation(&loads, worker_seconds, critical_rank);
    let blind_critical_first = (0..classes.len()).filter(|&c| critical_rank(c) == 0).map(|c| critical_first[c]).sum();

    let candidates: Vec<(usize, f64)> = jobs.iter().filter(|j| fits(j)).map(|j| (j.class, j.service_ms)).collect();
    let oracle = shortest_first_by_tier(classes, &candidates, worker_seconds);
    let oracle_total = shortest_first(candidates.iter().map(|&(_, ms)| ms), worker_seconds) as u64;
    PhaseBounds {
        worker_seconds,
        offered,
        can_finish,
        blind_total: blind.iter().sum(),
        blind,
        blind_critical_first,
        oracle,
        oracle_total,
    }
}

/// What the blind bound knows of a class in a phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassLoad {
    /// Jobs whose service fits their deadline.
    pub on_time_able: f64,
    /// Service of all its jobs, seconds.
    pub work_s: f64,
}

/// On-time jobs per class when `worker_seconds` go to the classes in order
/// of `rank` (lower first), then of on-time jobs per worker-second, each
/// class taking up to all of its work.
pub fn blind_allocation(loads: &[ClassLoad], worker_seconds: f64, rank: impl Fn(usize) -> u8) -> Vec<f64> {
    let efficiency = |c: usize| if loads[c].work_s > 0.0 { loads[c].on_time_able / loads[c].work_s } else { 0.0 };
    let mut order: Vec<usize> = (0..loads.len()).collect();
    order.sort_by(|&a, &b| rank(a).cmp(&rank(b)).then(efficiency(b).total_cmp(&efficiency(a))));
    let mut left = worker_seconds;
    let mut on_time = vec![0.0; loads.len()];
    for c in order {
        let spent = loads[c].work_s.min(left);
        on_time[c] = spent * efficiency(c);
        left -= spent;
    }
    on_time
}

/// How many of `services_ms` fit into `worker_seconds`, shortest first: the
/// most jobs any selection can fit.
pub fn shortest_first(services_ms: impl IntoIterator<Item = f64>, worker_seconds: f64) -> usize {
    let mut sorted: Vec<f64> = services_ms.into_iter().collect();
    sorted.sort_by(f64::total_cmp);
    let mut left_ms = worker_seconds * 1000.0;
    sorted
        .into_iter()
        .take_while(|&ms| {
            left_ms -= ms;
            left_ms >= 0.0
        })
        .count()
}

/// Shortest first within each tier, tiers in order; the jobs taken per class.
fn shortest_first_by_tier(classes: &[ClassTerms], candidates: &[(usize, f64)], worker_seconds: f64) -> Vec<u64> {
    let mut left_ms = worker_seconds * 1000.0;
    let mut taken = vec![0u64; classes.len()];
    for tier in TIERS {
        let mut jobs: Vec<&(usize, f64)> = candidates.iter().filter(|(c, _)| classes[*c].tier == tier).collect();
        jobs.sort_by(|a, b| a.1.total_cmp(&b.1));
        for &&(class, ms) in &jobs {
            if ms > left_ms {
                break;
            }
            left_ms -= ms;
            taken[class] += 1;
        }
    }
    taken
}

/// The bounds of several phases together.
fn sum(phases: &[PhaseBounds]) -> PhaseBounds {
    let classes = phases.first().map_or(0, |p| p.offered.len());
    let add_u = |f: fn(&PhaseBounds) -> &Vec<u64>| (0..classes).map(|c| phases.iter().map(|p| f(p)[c]).sum()).collect();
    let add_f = |f: fn(&PhaseBounds) -> &Vec<f64>| (0..classes).map(|c| phases.iter().map(|p| f(p)[c]).sum()).collect();
    PhaseBounds {
        worker_seconds: phases.iter().map(|p| p.worker_seconds).sum(),
        offered: add_u(|p| &p.offered),
        can_finish: add_u(|p| &p.can_finish),
        blind: add_f(|p| &p.blind),
        blind_total: phases.iter().map(|p| p.blind_total).sum(),
        blind_critical_first: phases.iter().map(|p| p.blind_critical_first).sum(),
        oracle: add_u(|p| &p.oracle),
        oracle_total: phases.iter().map(|p| p.oracle_total).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(class: usize, service_ms: f64) -> PlannedJob {
        PlannedJob {
            id: 0,
            class,
            tenant: None,
            arrival_ms: 0.0,
            service_ms,
            injected: false,
            estimated_service_ms: None,
        }
    }

    /// `count` jobs of `service_ms` for each (class, count, service_ms).
    fn jobs_of(groups: &[(usize, usize, f64)]) -> Vec<PlannedJob> {
        groups.iter().flat_map(|&(class, count, ms)| (0..count).map(move |_| job(class, ms))).collect()
    }

    fn bounds(classes: &[ClassTerms], jobs: &[PlannedJob], worker_seconds: f64) -> PhaseBounds {
        let refs: Vec<&PlannedJob> = jobs.iter().collect();
        phase_bounds(classes, &refs, worker_seconds)
    }

    const fn class(deadline_ms: f64, tier: Tier) -> ClassTerms {
        ClassTerms { deadline_ms, tier }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_job_longer_than_its_deadline_never_counts_but_its_work_does() {
        // One class, deadline 1 s: jobs of 0.5, 0.5, 3 s (work 4 s, 2 can finish).
        let classes = [class(1000.0, Tier::Standard)];
        let jobs = jobs_of(&[(0, 2, 500.0), (0, 1, 3000.0)]);
        // Plenty of time: everything that can finish does.
        let b = bounds(&classes, &jobs, 100.0);
        assert_eq!((b.offered.clone(), b.can_finish.clone()), (vec![3], vec![2]));
        assert!(close(b.blind_total, 2.0));
        assert_eq!(b.oracle_total, 2);
        // 2 worker-seconds: blind admits at random, 2 on-time jobs per 4 s of work,
        // so 1 job; the oracle fits both short jobs (1 s).
        let b = bounds(&classes, &jobs, 2.0);
        assert!(close(b.blind_total, 1.0), "{b:?}");
        assert_eq!((b.oracle_total, b.oracle.clone()), (2, vec![2]));
    }

    #[test]
    fn blind_workers_go_to_the_class_with_the_most_on_time_jobs_per_worker_second() {
        // fast: 10 jobs of 100 ms (10 per worker-second, 1 s of work);
        // slow: 4 jobs of 1 s, deadline 5 s (1 per worker-second, 4 s of work).
        let classes = [class(5000.0, Tier::Standard), class(1000.0, Tier::Standard)];
        let jobs = jobs_of(&[(0, 4, 1000.0), (1, 10, 100.0)]);
        // 3 worker-seconds: 1 s to fast (10 jobs), 2 s to slow (2 jobs).
        let b = bounds(&classes, &jobs, 3.0);
        assert!(close(b.blind[1], 10.0) && close(b.blind[0], 2.0), "{b:?}");
        assert!(close(b.blind_total, 12.0));
        // Same totals for the oracle here: shortest first is the same choice.
        assert_eq!((b.oracle_total, b.oracle.clone()), (12, vec![2, 10]));
    }

    #[test]
    fn the_critical_tier_served_first_takes_its_work_before_any_other() {
        // critical: 4 jobs of 1 s (deadline 2 s); sheddable: 10 jobs of 100 ms.
        let classes = [class(2000.0, Tier::Critical), class(1000.0, Tier::Sheddable)];
        let jobs = jobs_of(&[(0, 4, 1000.0), (1, 10, 100.0)]);
        // 3 worker-seconds. By efficiency: sheddable 1 s (10), critical 2 s (2) = 12;
        // critical first: critical 3 s (3), sheddable nothing.
        let b = bounds(&classes, &jobs, 3.0);
        assert!(close(b.blind_total, 12.0));
        assert!(close(b.blind_critical_first, 3.0), "{b:?}");
        // The oracle by tier: 3 critical jobs fill the 3 s; without tiers 10 short + 2 long.
        assert_eq!(b.oracle, vec![3, 0]);
        assert_eq!(b.oracle_total, 12);
    }

    #[test]
    fn the_oracle_beats_the_blind_bound_when_sizes_differ_within_a_class() {
        // One class, deadline 10 s: 5 jobs of 100 ms and 5 of 1900 ms (10 s of work).
        let classes = [class(10_000.0, Tier::Standard)];
        let jobs = jobs_of(&[(0, 5, 100.0), (0, 5, 1900.0)]);
        // 2.5 worker-seconds: blind 2.5 × 10 / 10 = 2.5 jobs; the oracle 5 × 0.1 + 1 × 1.9 = 2.4 s: 6 jobs.
        let b = bounds(&classes, &jobs, 2.5);
        assert!(close(b.blind_total, 2.5));
        assert_eq!(b.oracle_total, 6);
    }

    #[test]
    fn shortest_first_counts_what_fits_exactly() {
        assert_eq!(shortest_first([300.0, 100.0, 200.0], 0.7), 3);
        assert_eq!(shortest_first([300.0, 100.0, 200.0], 0.59), 2);
        assert_eq!(shortest_first([], 1.0), 0);
    }

    #[test]
    fn the_run_is_the_sum_of_its_phases() {
        let w = Workload::from_toml_str(include_str!("../workloads/two-classes.toml")).unwrap();
        let plan = crate::plan::plan_jobs(&w, 3);
        let b = Bounds::of(&w, &plan);
        let total: u64 = Phase::ALL.iter().map(|&p| b.phase(p).oracle_total).sum();
        assert_eq!(b.run.oracle_total, total);
        assert_eq!(b.run.offered.iter().sum::<u64>(), plan.len() as u64);
        assert!(close(b.run.worker_seconds, 8.0 * 180.0));
        // Clairvoyance never does worse than blindness.
        for phase in Phase::ALL {
            let p = b.phase(phase);
            assert!(p.oracle_total as f64 >= p.blind_total - 1.0, "{phase}: {p:?}");
        }
    }
}
