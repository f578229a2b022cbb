//! The controller, closed loop, on a family of workloads (see `sim`): the
//! reference tail, tails past the deadline, two tiers sharing the workers, a
//! flash crowd, a load sweep, tight deadlines, a slow class on few workers
//! and a backlog from the start.
//! Each is run with shedder off and enforcing, on the same jobs, and judged
//! against its own service-blind bound: completed on time, never worse than
//! off for any class, and few late completions among what was admitted. Two
//! peers run on the same jobs too (`queue-cap`, `saturation`); their figures
//! are printed for comparison, not asserted. A gateway that can ask `admit`
//! only as jobs arrive is judged on three of the families.

mod sim;

use shedder_daemon::control::Tier;
use shedder_daemon::service_curve::ServiceCurve;
use sim::{Class, Mode, Outcomes, Workload, blind_bound, run, summed};

/// Every family is judged on the sum over these seeds: one seed's figure
/// swings by several points of the bound with any small change (the loop is
/// chaotic: one refusal more or less moves every later decision), so a
/// single seed near a goal passes or fails by chance.
const SEEDS: [u64; 4] = [1, 2, 3, 4];

/// The reference workload: 30 jobs/s, 8 workers, a 3 s deadline, and 35% of
/// jobs taking 1800 ms from 30 s to 60 s.
fn reference() -> Workload {
    let mut c = Class::new("interactive", Tier::Standard, 3_000.0, 120.0, 400.0, 30.0);
    c.tail = Some((0.35, 1_800.0, 30.0, 60.0));
    Workload { classes: vec![c], workers: 8, duration_s: 80.0, workers_known: true }
}

/// 15 jobs/s, then 5x for 20 s from 20 s: 8 workers finish about 50/s.
fn flash_crowd() -> Workload {
    let mut c = Class::new("chat", Tier::Standard, 2_000.0, 120.0, 400.0, 15.0);
    c.rates = vec![(0.0, 15.0), (20.0, 75.0), (40.0, 15.0)];
    c.max_rate = 150.0;
    Workload { classes: vec![c], workers: 8, duration_s: 60.0, workers_known: true }
}

/// `load` times capacity for 40 s, the capacity learnt (no `workers`): 8
/// workers at a mean of 157 ms finish about 51 jobs/s.
fn load_sweep(load: f64) -> Workload {
    let mut c = Class::new("chat", Tier::Standard, 2_000.0, 120.0, 400.0, 51.0 * load);
    c.max_rate = 51.0 * 4.0 * 1.5;
    Workload { classes: vec![c], workers: 8, duration_s: 40.0, workers_known: false }
}

/// What a job of the lognormal through `p50` and `p95` costs a worker on
/// average, ms: for sizing a class's rate to a share of the workers.
fn mean_service_ms(p50: f64, p95: f64) -> f64 {
    ServiceCurve::lognormal(Some(p50), p95).mean_ms
}

fn sum(v: &[f64]) -> f64 {
    v.iter().sum()
}

/// Figures over `[from_s, to_s)`, per class and summed over [`SEEDS`]:
/// enforce's outcomes, off's, the peers', and the blind bound.
struct Judged {
    bound: Vec<f64>,
    enforce: Vec<Outcomes>,
    off: Vec<Outcomes>,
    /// The peers: what the server or its gateway would do on its own.
    peers: Vec<(&'static str, Vec<Outcomes>)>,
    /// Enforce's on-time share of the bound, seed by seed (printed).
    per_seed: Vec<f64>,
}

/// Each class's outcomes in `mode`, summed over [`SEEDS`].
fn outcomes(w: &Workload, mode: Mode, from_s: f64, to_s: f64) -> Vec<Outcomes> {
    summed(w, mode, &SEEDS, from_s, to_s)
}

fn judge(w: &Workload, from_s: f64, to_s: f64) -> Judged {
    let peers = [("queue-cap", Mode::QueueCap), ("saturation", Mode::Saturation)];
    let mut bound = vec![0.0; w.classes.len()];
    let mut per_seed = Vec::new();
    for seed in SEEDS {
        let b = blind_bound(w, seed, from_s, to_s, true);
        let e: u64 = run(w, Mode::Enforce, seed, from_s, to_s).outcomes.iter().map(|o| o.on_time).sum();
        per_seed.push((100.0 * e as f64 / sum(&b).max(1.0)).round());
        bound.iter_mut().zip(b).for_each(|(t, b)| *t += b);
    }
    Judged {
        bound,
        enforce: outcomes(w, Mode::Enforce, from_s, to_s),
        off: outcomes(w, Mode::Off, from_s, to_s),
        peers: peers.into_iter().map(|(name, mode)| (name, outcomes(w, mode, from_s, to_s))).collect(),
        per_seed,
    }
}

impl Judged {
    fn on_time(outcomes: &[Outcomes]) -> Vec<f64> {
        outcomes.iter().map(|o| o.on_time as f64).collect()
    }

    fn report(&self, what: &str) {
        let (e, o) = (Self::on_time(&self.enforce), Self::on_time(&self.off));
        println!(
            "{what}: on time enforce {:.0} / off {:.0} / blind bound {:.0} ({:.0}% of it; by seed {:?}); per class enforce {e:?} off {o:?} bound {:?}",
            sum(&e),
            sum(&o),
            sum(&self.bound),
            100.0 * sum(&e) / sum(&self.bound).max(1.0),
            self.per_seed,
            self.bound.iter().map(|b| b.round()).collect::<Vec<_>>()
        );
        for (i, out) in self.enforce.iter().enumerate() {
            println!("  class {i}: enforce {out:?}; off {:?}", self.off[i]);
        }
        for (name, run) in &self.peers {
            let p = Self::on_time(run);
            println!(
                "  peer {name}: on time {:.0} ({:.0}% of the bound); per class {p:?}",
                sum(&p),
                100.0 * sum(&p) / sum(&self.bound).max(1.0)
            );
        }
    }

    /// At least `fraction` of the bound in total and for `classes`.
    fn reaches(&self, what: &str, fraction: f64, classes: &[usize]) {
        self.total_reaches(what, fraction);
        self.classes_reach(what, fraction, classes);
    }

    fn classes_reach(&self, what: &str, fraction: f64, classes: &[usize]) {
        let e = Self::on_time(&self.enforce);
        for &i in classes {
            assert!(
                e[i] >= fraction * self.bound[i],
                "{what}: class {i} {:.0} < {fraction} x bound {:.0}",
                e[i],
                self.bound[i]
            );
        }
    }

    /// No class completes fewer jobs on time than with shedder off (3% and
    /// 3 jobs a seed of slack for the noise).
    fn never_worse_than_off(&self, what: &str) {
        for (i, (e, o)) in self.enforce.iter().zip(&self.off).enumerate() {
            let floor = o.on_time as f64 * 0.97 - 3.0 * SEEDS.len() as f64;
            assert!(e.on_time as f64 >= floor, "{what}: class {i} on time {} < off {}", e.on_time, o.on_time);
        }
    }

    /// With class 0 the critical tier: it reaches 90% of its bound with
    /// under 1% late, the total 90%, and the lower tier is no worse than
    /// off (its jobs wait, held, for a worker critical can spare rather than
    /// being refused for critical's sake).
    fn meets_the_tiered_goals(&self, what: &str) {
        self.reaches(what, 0.9, &[0]);
        self.never_worse_than_off(what);
        self.late_under(what, 0, 0.01);
    }

    /// At least as many on time in total as every peer (3% counts as a tie).
    fn at_least_the_peers(&self, what: &str) {
        let e = sum(&Self::on_time(&self.enforce));
        for (name, run) in &self.peers {
            let p = sum(&Self::on_time(run));
            assert!(e >= 0.97 * p, "{what}: total {e:.0} < peer {name}'s {p:.0}");
        }
    }

    fn total_reaches(&self, what: &str, fraction: f64) {
        let e = sum(&Self::on_time(&self.enforce));
        assert!(e >= fraction * sum(&self.bound), "{what}: total {e:.0} < {fraction} x bound {:.0}", sum(&self.bound));
    }

    fn late_under(&self, what: &str, class: usize, share: f64) {
        let o = self.enforce[class];
        assert!(
            o.late_share() < share,
            "{what}: class {class} {:.1}% of completions late ({o:?})",
            o.late_share() * 100.0
        );
    }
}

#[test]
fn reference_tail_completes_at_the_bound_with_nothing_late() {
    let w = reference();
    let j = judge(&w, 30.0, 60.0);
    j.report("reference, the tail");
    j.reaches("reference tail", 0.9, &[0]);
    j.never_worse_than_off("reference tail");
    j.late_under("reference tail", 0, 0.01);
    // Before the tail, nothing is turned away.
    let o = outcomes(&w, Mode::Enforce, 5.0, 30.0)[0];
    assert_eq!(o.shed + o.refused, 0, "steady phase: {o:?}");
}

/// A quarter of the jobs take 4 s against a 2 s deadline; 8 workers, 12 jobs/s:
/// E[service] = 0.75 x ~0.19 + 0.25 x 4 = 1.14 s, so 13.7 worker-s/s are asked of 8.
fn past_the_deadline() -> Workload {
    let mut c = Class::new("long-tail", Tier::Standard, 2_000.0, 150.0, 500.0, 12.0);
    c.tail = Some((0.25, 4_000.0, 0.0, 1e9));
    Workload { classes: vec![c], workers: 8, duration_s: 60.0, workers_known: true }
}

#[test]
fn a_tail_past_the_deadline_still_gets_the_jobs_that_can_make_it() {
    let w = past_the_deadline();
    let j = judge(&w, 10.0, 60.0);
    j.report("tail past the deadline");
    j.reaches("tail past the deadline", 0.9, &[0]);
    j.never_worse_than_off("tail past the deadline");
}

#[test]
fn estimates_of_each_jobs_size_finish_more_than_blind_and_no_more_late() {
    // The server estimates every job's service off by a lognormal factor of
    // σ 0.5 (within ×1.65 two times in three) and tells `admit`.
    let estimated = |mut w: Workload| {
        for c in &mut w.classes {
            c.estimate_error = Some(0.5);
        }
        w
    };
    for (what, w, from_s, to_s) in
        [("reference tail", reference(), 30.0, 60.0), ("tail past the deadline", past_the_deadline(), 10.0, 60.0)]
    {
        let blind = outcomes(&w, Mode::Enforce, from_s, to_s)[0];
        let j = judge(&estimated(w), from_s, to_s);
        j.report(&format!("{what}, estimated"));
        let sized = j.enforce[0];
        assert!(
            sized.on_time as f64 >= 1.1 * blind.on_time as f64,
            "{what}: {} on time with estimates against {} blind",
            sized.on_time,
            blind.on_time
        );
        assert!(sized.late_share() <= blind.late_share() + 0.01, "{what}: late {sized:?} against {blind:?}");
        j.never_worse_than_off(what);
    }
    // Tiers keep their order: a critical 300 ms class keeps its goals beside
    // batch, both estimated.
    let j = judge(&estimated(tight_critical_beside_batch()), 5.0, 80.0);
    j.report("tight critical beside batch, estimated");
    j.meets_the_tiered_goals("tight critical beside batch, estimated");
}

#[test]
fn two_tiers_sharing_workers_protect_the_critical_tier() {
    let interactive = Class::new("interactive", Tier::Critical, 1_000.0, 80.0, 250.0, 20.0);
    let mut batch = Class::new("batch", Tier::Sheddable, 10_000.0, 400.0, 1_200.0, 5.0);
    batch.tail = Some((0.35, 4_000.0, 30.0, 70.0));
    let w = Workload { classes: vec![interactive, batch], workers: 8, duration_s: 80.0, workers_known: true };
    let before = outcomes(&w, Mode::Enforce, 5.0, 30.0)[0];
    let j = judge(&w, 30.0, 70.0);
    j.report("two tiers, the tail");
    j.meets_the_tiered_goals("two tiers");
    // Critical keeps its on-time rate from before the tail.
    let rate_before = before.on_time as f64 / 25.0;
    let rate_during = j.enforce[0].on_time as f64 / 40.0;
    assert!(rate_during >= 0.9 * rate_before, "critical {rate_during:.1}/s in the tail vs {rate_before:.1}/s before");
}

/// A time-to-first-token class (300 ms deadline) and a batch class that
/// together need ~7.5 of 8 workers; from 20 s to 60 s, 30% of batch jobs
/// take 3 s.
fn tight_critical_beside_batch() -> Workload {
    let ttft = Class::new("ttft", Tier::Critical, 300.0, 80.0, 150.0, 40.0);
    let mut batch = Class::new("batch", Tier::Standard, 5_000.0, 500.0, 1_500.0, 6.0);
    batch.tail = Some((0.3, 3_000.0, 20.0, 60.0));
    Workload { classes: vec![ttft, batch], workers: 8, duration_s: 80.0, workers_known: true }
}

#[test]
fn a_tight_critical_class_beside_a_batch_class_whose_tail_fills_the_queue() {
    // `off` serves batch by making critical wait; enforce must keep
    // critical and still give batch what off gives it: its jobs wait for a
    // worker critical can spare rather than being refused.
    let w = tight_critical_beside_batch();
    let j = judge(&w, 5.0, 80.0);
    j.report("tight critical beside batch");
    j.meets_the_tiered_goals("tight critical beside batch");
}

#[test]
fn a_flash_crowd_is_cut_within_a_second() {
    let w = flash_crowd();
    for seed in SEEDS {
        let cut = run(&w, Mode::Enforce, seed, 20.0, 40.0).first_cut("chat", 20_000).expect("the crowd was cut");
        assert!(cut <= 21_000, "seed {seed}: first cut at {cut} ms, onset at 20000 ms");
    }
    let j = judge(&w, 20.0, 40.0);
    j.report("flash crowd");
    j.reaches("flash crowd", 0.9, &[0]);
    j.never_worse_than_off("flash crowd");
    // A standard class admitted at 95% of its best on-time chance: with the
    // queue held at that edge by a 5x crowd, 1.2-1.4% of what it admits
    // finishes late (measured over the four seeds); 1% is the critical tier's.
    j.late_under("flash crowd", 0, 0.02);
}

#[test]
fn a_load_sweep_from_half_to_four_times_capacity() {
    for load in [0.5, 1.0, 2.0, 4.0] {
        let w = load_sweep(load);
        let j = judge(&w, 10.0, 40.0);
        j.report(&format!("load {load}x"));
        j.reaches(&format!("load {load}x"), 0.9, &[0]);
        j.never_worse_than_off(&format!("load {load}x"));
        if load <= 0.5 {
            let o = j.enforce[0];
            assert_eq!(o.shed + o.refused, 0, "half load refuses nothing: {o:?}");
        }
    }
}

#[test]
fn tight_and_loose_deadlines_refuse_nothing_at_half_load_and_shed_to_the_bound_at_twice() {
    // (deadline, service p50, p95): service well inside the deadline.
    let rows = [
        (100.0, 20.0, 40.0),
        (300.0, 80.0, 150.0),
        (400.0, 80.0, 150.0),
        (1_000.0, 150.0, 400.0),
        (3_000.0, 120.0, 400.0),
        (30_000.0, 2_000.0, 6_000.0),
    ];
    let only: Option<f64> = std::env::var("SIM_DEADLINE").ok().map(|v| v.parse().unwrap());
    for (deadline, p50, p95) in rows.into_iter().filter(|r| only.is_none_or(|d| d == r.0)) {
        let mean_s = mean_service_ms(p50, p95) / 1000.0;
        let capacity = 8.0 / mean_s;
        for load in [0.5, 2.0] {
            let mut c = Class::new("tight", Tier::Critical, deadline, p50, p95, capacity * load);
            c.max_rate = capacity * 3.0;
            let duration_s = (40.0_f64).max(deadline / 1000.0 * 20.0);
            let w = Workload { classes: vec![c], workers: 8, duration_s, workers_known: true };
            let what = format!("deadline {deadline} ms at {load}x");
            let j = judge(&w, duration_s / 4.0, duration_s);
            j.report(&what);
            if load < 1.0 {
                let o = j.enforce[0];
                assert_eq!(o.shed + o.refused, 0, "{what}: refused {o:?}");
            } else {
                j.reaches(&what, 0.9, &[0]);
            }
            j.never_worse_than_off(&what);
        }
    }
}

#[test]
fn a_slow_class_on_few_workers_is_judged_on_enough_of_its_jobs() {
    // Long generations on 4 workers: a job takes 2.6 s on average (p50 2 s,
    // p95 5 s), a 20 s deadline, 1.5x what the workers finish. Fewer than
    // two jobs a second complete, so a 10 s window never holds min_samples
    // of them; it widens until it does. Measured (seeds 1-4): enforce 99% of
    // the bound; 85%, with 16% of completions late, while the window stayed
    // at 10 s and the class ran on too few samples.
    let c = Class::new("generate", Tier::Standard, 20_000.0, 2_000.0, 5_000.0, 1.5 * 4.0 / 2.6);
    let w = Workload { classes: vec![c], workers: 4, duration_s: 400.0, workers_known: true };
    let j = judge(&w, 60.0, 400.0);
    j.report("a slow class on few workers");
    j.reaches("a slow class on few workers", 0.9, &[0]);
    j.never_worse_than_off("a slow class on few workers");
    j.late_under("a slow class on few workers", 0, 0.05);
}

#[test]
fn long_jobs_on_few_workers_with_the_capacity_learnt_are_not_cut_below_what_the_workers_finish() {
    // No `workers` configured, a server that asks `admit` as each job
    // starts, and jobs long for the workers' number: the learnt capacity
    // comes from few completions a second, and the law acts on it. It used
    // to cut the budget to half of it, idling workers while the fast path
    // shed jobs they could have served; it now stops at what the workers
    // finish. Measured (seeds 1-4): 100% and 98% of the bound, against
    // queue-cap's 102% and 99%; the first was 92% with the old floor (and
    // 87.5% of queue-cap), the second 88% over seeds 1-3.
    // (workload, workers, deadline, p50, p95, jobs/s: 1.6x)
    let shapes = [
        ("generate on 6 workers", 6, 10_000.0, 1_690.0, 3_741.0, 5.1),
        ("summarise on 4 workers", 4, 5_000.0, 763.0, 2_488.0, 6.5),
    ];
    for (what, workers, deadline_ms, p50_ms, p95_ms, rate) in shapes {
        let c = Class::new("c0", Tier::Standard, deadline_ms, p50_ms, p95_ms, rate);
        let w = Workload { classes: vec![c], workers, duration_s: 60.0, workers_known: false };
        let j = judge(&w, 10.0, 60.0);
        j.report(what);
        j.reaches(what, 0.95, &[0]);
        j.at_least_the_peers(what);
        j.late_under(what, 0, 0.05);
    }
}

#[test]
fn a_learnt_capacity_the_backend_was_seen_to_fill_is_trusted_as_if_configured() {
    // No `workers` configured, a server that asks `admit` as each job
    // starts. Once as many jobs as the learnt capacity has workers (to
    // within one) were seen in service at once, the figure is not read too
    // high, and the law stops cutting for every class to check it. Before,
    // it cut on waits that long jobs on few workers make at light load, and
    // under overload below what the workers finish. Measured (seeds 1-4):
    // with the capacity learnt 100% and 99% of the same workload's figure
    // with it configured; 95% and 84% before.
    // (workload, workers, classes as (tier, deadline, p50, p95, jobs/s))
    type Classes = &'static [(Tier, f64, f64, f64, f64)];
    let shapes: [(&str, usize, Classes); 2] = [
        (
            "a slow critical class beside short standard jobs at 0.7x",
            4,
            &[(Tier::Critical, 2_000.0, 700.0, 1_700.0, 2.0), (Tier::Standard, 500.0, 60.0, 150.0, 17.0)],
        ),
        (
            "short standard jobs beside a critical class at 1.5x",
            3,
            &[(Tier::Standard, 349.0, 113.0, 318.0, 8.9), (Tier::Critical, 5_509.0, 470.0, 1_170.0, 5.8)],
        ),
    ];
    for (what, workers, classes) in shapes {
        let on_time = |workers_known: bool| {
            let classes = classes
                .iter()
                .zip(["c0", "c1"])
                .map(|(&(tier, deadline, p50, p95, rate), name)| Class::new(name, tier, deadline, p50, p95, rate))
                .collect();
            let w = Workload { classes, workers, duration_s: 60.0, workers_known };
            let enforced = outcomes(&w, Mode::Enforce, 10.0, 60.0);
            (sum(&Judged::on_time(&enforced)), enforced)
        };
        let ((learnt, by_class), (configured, _)) = (on_time(false), on_time(true));
        println!("{what}: on time {learnt:.0} with the capacity learnt, {configured:.0} configured; {by_class:?}");
        assert!(learnt >= 0.97 * configured, "{what}: {learnt:.0} learnt < 0.97 x {configured:.0} configured");
    }
}

#[test]
fn a_tail_on_two_workers_is_not_let_in_as_if_they_were_idle() {
    // 2 workers, jobs of about 1 s (p50 800 ms, p95 2.5 s), a 6 s deadline,
    // 1.25x what the workers finish, and the class's p95 configured as its
    // prior. From 60 s to 180 s, 30% of jobs take 5 s. A window of this
    // class holds under min_samples jobs, so the tick sees no work rate and
    // the prior's queue. It used to read the backend as idle, and the
    // sanity guard let in jobs that had waited with no chance left.
    // Measured (seeds 1-4): enforce 94% of the bound, 1.9% of completions
    // late; 84% and 12% late with the tick's view of idle alone and a
    // queue read from the prior alone below min_samples.
    let mut c = Class::new("generate", Tier::Standard, 6_000.0, 800.0, 2_500.0, 2.5);
    c.tail = Some((0.3, 5_000.0, 60.0, 180.0));
    c.prior_p95_ms = Some(2_500.0);
    let w = Workload { classes: vec![c], workers: 2, duration_s: 280.0, workers_known: true };
    let j = judge(&w, 40.0, 280.0);
    j.report("a tail on two workers");
    j.reaches("a tail on two workers", 0.9, &[0]);
    j.never_worse_than_off("a tail on two workers");
    j.late_under("a tail on two workers", 0, 0.05);
}

#[test]
fn one_tier_shares_its_queue_by_what_each_class_finishes_in_time() {
    // One tier, one queue, 8 workers at 1.3x; the first class brings 30% of
    // the work. (what, its deadline, p50, p95; the second's.)
    // * 1 s and 10 s: each class's own admission would let the queue grow
    //   to what the 10 s class can wait, and the 1 s class's cheaper jobs
    //   would die in it. Measured (seeds 1-4): 100% of the bound, the 1 s
    //   class 99.9% of its own; without the wait limit 79% (the 1 s class
    //   65%); queue-cap 83%.
    // * One 2 s deadline, jobs of 100 ms and of 700 ms: the long jobs' room
    //   is the tighter, but a worker-second finishes fewer of them, so the
    //   queue is not cut short for them. Measured: 99%, against 73% with
    //   the limit applied by room alone; queue-cap 82%.
    type Shape = (&'static str, (f64, f64, f64), (f64, f64, f64));
    let shapes: [Shape; 2] = [
        ("two deadlines", (1_000.0, 80.0, 250.0), (10_000.0, 400.0, 1_200.0)),
        ("one deadline, two job sizes", (2_000.0, 100.0, 300.0), (2_000.0, 700.0, 1_500.0)),
    ];
    for (what, first, second) in shapes {
        let classes = [("first", first, 0.3), ("second", second, 0.7)]
            .into_iter()
            .map(|(name, (deadline, p50, p95), share)| {
                let rate = 1.3 * 8.0 * share * 1000.0 / mean_service_ms(p50, p95);
                let mut c = Class::new(name, Tier::Standard, deadline, p50, p95, rate);
                c.prior_p95_ms = Some(p95);
                c
            })
            .collect();
        let w = Workload { classes, workers: 8, duration_s: 70.0, workers_known: true };
        let j = judge(&w, 15.0, 70.0);
        let what = format!("one tier, {what}");
        j.report(&what);
        j.reaches(&what, 0.9, &[0]);
        j.at_least_the_peers(&what);
        j.never_worse_than_off(&what);
        j.late_under(&what, 0, 0.01);
    }
}

#[test]
fn a_backlog_from_the_start_is_drained() {
    // 8 workers the daemon is not told of, a 3 s deadline. Two seconds at
    // 200 jobs/s leave about 6 s of work queued before the controller has
    // learnt anything; then 45 jobs/s, 90% of capacity, so the backlog
    // drains by itself only slowly and every job behind it is late.
    // Measured (seeds 1-4): enforce 102% of the bound, off 60%, queue-cap
    // 95%. Here `admit` clears the backlog job by job as workers take it
    // (seeds 1 and 2 read the same with the queue hold disabled); the
    // hold is for backends that do not ask `admit`, where only budgets act
    // (control_table's "late from the start").
    let mut c = Class::new("chat", Tier::Standard, 3_000.0, 120.0, 400.0, 200.0);
    c.rates = vec![(0.0, 200.0), (2.0, 45.0)];
    let w = Workload { classes: vec![c], workers: 8, duration_s: 60.0, workers_known: false };
    let j = judge(&w, 0.0, 50.0);
    j.report("a backlog from the start");
    j.reaches("a backlog from the start", 0.9, &[0]);
    j.never_worse_than_off("a backlog from the start");
    j.late_under("a backlog from the start", 0, 0.05);
}

#[test]
fn a_gateway_that_asks_only_on_arrival_predicts_the_wait() {
    // A gateway in front of the server cannot reach into its queue: it asks
    // `admit` once, as a job arrives. Told the jobs waiting ahead (the
    // server's queue-depth gauge), the daemon predicts the job's wait from
    // them. Measured (seeds 1-4 summed): 94% of the bound on the reference
    // tail (9.3% late), 106% in the flash crowd, 97% at twice capacity;
    // without the queue 15%, 41% and 70%: a job's age at arrival says
    // nothing of its wait.
    // (workload, judged from, to)
    let families = [
        ("reference tail", reference(), 30.0, 60.0),
        ("flash crowd", flash_crowd(), 20.0, 40.0),
        ("load 2x", load_sweep(2.0), 10.0, 40.0),
    ];
    for (what, w, from_s, to_s) in families {
        let bound: f64 = SEEDS.iter().map(|seed| sum(&blind_bound(&w, *seed, from_s, to_s, true))).sum();
        let told = outcomes(&w, Mode::Gateway { knows_queue: true }, from_s, to_s)[0];
        let blind = outcomes(&w, Mode::Gateway { knows_queue: false }, from_s, to_s)[0];
        let off = outcomes(&w, Mode::Off, from_s, to_s)[0];
        println!(
            "{what}: gateway told the queue {} on time ({:.0}% of the bound {bound:.0}, {:.1}% late), \
             not told {} ({:.0}%, {:.1}% late), off {}",
            told.on_time,
            100.0 * told.on_time as f64 / bound,
            100.0 * told.late_share(),
            blind.on_time,
            100.0 * blind.on_time as f64 / bound,
            100.0 * blind.late_share(),
            off.on_time
        );
        assert!(told.on_time as f64 >= 0.85 * bound, "{what}: {told:?} against a bound of {bound:.0}");
        assert!(told.late_share() < 0.1, "{what}: {told:?}");
        assert!(told.on_time >= off.on_time, "{what}: {told:?}, off {off:?}");
    }
}

#[test]
fn a_tight_class_on_workers_to_spare_is_not_refused_for_a_wait_no_job_behind_it_needed() {
    // 14 workers at about half load. A critical class with a 43 ms deadline
    // (p50 32 ms; from 20 s to 45 s, 40% of its jobs take 52 ms and cannot
    // make it), so a wait of 2 ms takes a job below the threshold of its
    // best chance; beside it, long standard jobs and a sheddable class with
    // a tail. Arrivals bunch, and jobs queue for a millisecond or two while
    // workers free. Refusing such a job idles its worker: no job behind it
    // lacks one. Measured (seeds 1-4): the critical class finished 95.2% of
    // what it does with shedder off with the plain threshold (1651 jobs
    // refused at start); 101.6% (404) with it weighed by the chance every
    // worker is busy where the server says no job behind waits for one.
    // (The sheddable class, 89% of off either way, is left to the known
    // weakness: it yields to a critical class whose tail keeps it below
    // its threshold.)
    let critical = {
        let mut c = Class::new("tight", Tier::Critical, 43.0, 32.0, 50.0, 110.9);
        c.tail = Some((0.4, 52.0, 20.0, 45.0));
        c
    };
    let standard = Class::new("long", Tier::Standard, 8_456.0, 880.0, 3_421.0, 2.1);
    let sheddable = {
        let mut c = Class::new("batch", Tier::Sheddable, 2_069.0, 189.0, 668.0, 2.9);
        c.tail = Some((0.35, 1_300.0, 20.0, 45.0));
        c
    };
    let w =
        Workload { classes: vec![critical, standard, sheddable], workers: 14, duration_s: 60.0, workers_known: true };
    let what = "a tight class on workers to spare";
    let j = judge(&w, 10.0, 60.0);
    j.report(what);
    j.reaches(what, 0.9, &[0]);
    let (enforce, off) = (j.enforce[0].on_time as f64, j.off[0].on_time as f64);
    assert!(enforce >= 0.97 * off, "{what}: the critical class on time {enforce} < off {off}");
}
