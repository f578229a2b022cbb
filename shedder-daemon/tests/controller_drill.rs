//! The seed's failure drill as a closed loop on a simulated clock: a seeded
//! discrete-event queue (open-loop Poisson arrivals at 30 jobs/s, a token
//! bucket at the controller's budget, 8 FIFO workers, lognormal service with
//! p50 120 ms / p95 400 ms, a 3000 ms deadline) reports its samples to the
//! real estimators, whose estimates drive the real controller, whose budget
//! feeds back into the bucket. Deterministic: one seed, no wall clock.
//!
//! The queue reports what a real server can: a queue-age sample when a job
//! starts, a service sample and an outcome when it completes, and its queue
//! depth every tick. The simulation also knows what no server does, the
//! *true* slack (the wait a job arriving now would really see, worked out
//! from the workers and the queue): the controller is judged against that.
//!
//! `DRILL_TRACE=1 cargo test -p shedder-daemon --test controller_drill -- --nocapture`
//! prints the timeline.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use shedder_daemon::control::{Action, Budget, ClassPolicy, ControlParams, Controller, Decision};
use shedder_daemon::estimate::{ClassPrior, EstimatorParams, Estimators};
use shedder_daemon::telemetry::Observation;

const CLASS: &str = "interactive";
const TICK_MS: u64 = 100;
const DEADLINE_MS: f64 = 3_000.0;
const SAFETY_MS: f64 = 250.0;
const ARRIVALS_PER_S: f64 = 30.0;
const WORKERS: usize = 8;
const TAIL_MS: f64 = 1_800.0;
const TAIL_FRACTION: f64 = 0.35;
const MAX_RATE: f64 = 40.0;
const BURST: f64 = 5.0;

struct Job {
    arrival: f64,
    service: f64,
}

#[derive(Default, Clone, Copy, Debug)]
struct Outcomes {
    arrived: u64,
    rejected: u64,
    on_time: u64,
    late: u64,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    t_ms: u64,
    rate: f64,
    slack_ms: f64,
    true_slack_ms: f64,
    queue_age_p95_ms: f64,
    depth: usize,
}

struct Drill {
    rng: SmallRng,
    /// `(start, end)` of the injected tail, ms.
    tail: Option<(f64, f64)>,
    adaptive: bool,
    next_arrival: f64,
    queue: VecDeque<Job>,
    /// When each worker is free again.
    workers: Vec<f64>,
    /// Completions not yet reported: (time, arrival, service).
    running: BinaryHeap<Reverse<(u64, u64, u64)>>,
    tokens: f64,
    bucket_at: f64,
    rate: f64,
    /// Admission times within the last second, for the admitted rate.
    admitted_at: VecDeque<f64>,
    estimators: Estimators,
    controller: Controller,
    /// Outcomes by the second the job arrived in.
    by_second: Vec<Outcomes>,
    timeline: Vec<Sample>,
    decisions: Vec<Decision>,
    pending: Vec<Observation>,
    /// When the first tail job's completion reached the estimators: the
    /// earliest moment anything outside the simulation can know of the tail.
    first_tail_seen_ms: Option<u64>,
}

fn lognormal(rng: &mut SmallRng, p50: f64, p95: f64) -> f64 {
    let sigma = (p95 / p50).ln() / 1.644_853_6;
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (p50.ln() + sigma * z).exp()
}

impl Drill {
    fn new(seed: u64, tail: Option<(f64, f64)>, adaptive: bool) -> Self {
        let estimators =
            Estimators::new(EstimatorParams::default(), BTreeMap::from([(CLASS.to_string(), ClassPrior::default())]))
                .unwrap();
        let policy = ClassPolicy {
            deadline_ms: DEADLINE_MS,
            safety_ms: SAFETY_MS,
            budget: if adaptive {
                Budget::Adaptive { min_rate: 1.0, max_rate: MAX_RATE }
            } else {
                Budget::Static { rate: MAX_RATE }
            },
            opportunistic: false,
        };
        let controller =
            Controller::new(ControlParams::default(), BTreeMap::from([(CLASS.to_string(), policy)])).unwrap();
        let mut rng = SmallRng::seed_from_u64(seed);
        let first = exp_gap(&mut rng);
        Drill {
            rng,
            tail,
            adaptive,
            next_arrival: first,
            queue: VecDeque::new(),
            workers: vec![0.0; WORKERS],
            running: BinaryHeap::new(),
            tokens: BURST,
            bucket_at: 0.0,
            rate: MAX_RATE,
            admitted_at: VecDeque::new(),
            estimators,
            controller,
            by_second: Vec::new(),
            timeline: Vec::new(),
            decisions: Vec::new(),
            pending: Vec::new(),
            first_tail_seen_ms: None,
        }
    }

    fn tail_on(&self, t: f64) -> bool {
        self.tail.is_some_and(|(a, b)| (a..b).contains(&t))
    }

    fn outcome(&mut self, arrival: f64) -> &mut Outcomes {
        let s = (arrival / 1000.0) as usize;
        if self.by_second.len() <= s {
            self.by_second.resize(s + 1, Outcomes::default());
        }
        &mut self.by_second[s]
    }

    fn start(&mut self, worker: usize, job: Job, at: f64) {
        let done = at + job.service;
        self.workers[worker] = done;
        self.pending.push(Observation::QueueAge { ms: at - job.arrival, count: 1 });
        self.running.push(Reverse((done.ceil() as u64, job.arrival.to_bits(), job.service.to_bits())));
    }

    fn earliest_worker(&self) -> (usize, f64) {
        self.workers.iter().copied().enumerate().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap()
    }

    /// Runs events up to `until` (ms).
    fn run_until(&mut self, until: f64) {
        loop {
            let (w, free) = self.earliest_worker();
            if !self.queue.is_empty() && free <= self.next_arrival.min(until) {
                let job = self.queue.pop_front().unwrap();
                let at = free.max(job.arrival);
                self.start(w, job, at);
            } else if self.next_arrival < until {
                let t = self.next_arrival;
                self.next_arrival += exp_gap(&mut self.rng);
                self.outcome(t).arrived += 1;
                // The token bucket at the current budget.
                self.tokens = (self.tokens + (t - self.bucket_at) / 1000.0 * self.rate).min(BURST);
                self.bucket_at = t;
                if self.tokens < 1.0 {
                    self.outcome(t).rejected += 1;
                    continue;
                }
                self.tokens -= 1.0;
                self.admitted_at.push_back(t);
                let service = if self.tail_on(t) && self.rng.random::<f64>() < TAIL_FRACTION {
                    TAIL_MS
                } else {
                    lognormal(&mut self.rng, 120.0, 400.0)
                };
                let job = Job { arrival: t, service };
                if self.queue.is_empty() && free <= t {
                    self.start(w, job, t);
                } else {
                    self.queue.push_back(job);
                }
            } else {
                break;
            }
        }
        // Completions due by now.
        while let Some(Reverse((done, arrival, service))) = self.running.peek().copied() {
            if done as f64 > until {
                break;
            }
            self.running.pop();
            let (arrival, service) = (f64::from_bits(arrival), f64::from_bits(service));
            let latency = done as f64 - arrival;
            if service == TAIL_MS && self.first_tail_seen_ms.is_none() {
                self.first_tail_seen_ms = Some(until as u64);
            }
            self.pending.push(Observation::Service { ms: service, count: 1 });
            let late_by = (latency > DEADLINE_MS).then_some(latency - DEADLINE_MS);
            self.pending.push(Observation::Completion { late_by_ms: late_by, count: 1 });
            if late_by.is_some() {
                self.outcome(arrival).late += 1;
            } else {
                self.outcome(arrival).on_time += 1;
            }
        }
    }

    /// The wait a job arriving at `now` would really have (FIFO, earliest
    /// free worker): what no server knows, and the yardstick here.
    fn true_wait(&self, now: f64) -> f64 {
        let mut free: BinaryHeap<Reverse<u64>> = self.workers.iter().map(|f| Reverse(f.max(now).to_bits())).collect();
        for job in &self.queue {
            let Reverse(f) = free.pop().unwrap();
            free.push(Reverse((f64::from_bits(f) + job.service).to_bits()));
        }
        f64::from_bits(free.peek().unwrap().0) - now
    }

    fn tick(&mut self, now_ms: u64) {
        let now = now_ms as f64;
        self.run_until(now);
        self.pending.push(Observation::QueueDepth(self.queue.len() as u64));
        let at = Duration::from_millis(now_ms);
        for o in std::mem::take(&mut self.pending) {
            self.estimators.observe_one(at, CLASS, &o).unwrap();
        }
        while self.admitted_at.front().is_some_and(|t| *t < now - 1000.0) {
            self.admitted_at.pop_front();
        }
        let admitted = BTreeMap::from([(CLASS.to_string(), self.admitted_at.len() as f64)]);
        let estimates = self.estimators.estimate_all(at);
        let decisions = self.controller.tick(at, &estimates, &[], &admitted);
        // The bucket keeps its tokens across a rate change.
        self.tokens = (self.tokens + (now - self.bucket_at) / 1000.0 * self.rate).min(BURST);
        self.bucket_at = now;
        self.rate = self.controller.rate(CLASS).unwrap();
        let service_p95 = if self.tail_on(now) { TAIL_MS } else { 400.0 };
        let s = self.controller.last_slacks()[CLASS];
        self.timeline.push(Sample {
            t_ms: now_ms,
            rate: self.rate,
            slack_ms: s.slack_ms,
            true_slack_ms: DEADLINE_MS - self.true_wait(now) - service_p95 - SAFETY_MS,
            queue_age_p95_ms: s.queue_age_p95_ms,
            depth: self.queue.len(),
        });
        if std::env::var_os("DRILL_TRACE").is_some() {
            for d in &decisions {
                println!(
                    "{:>7} {:<7} {:6.2} -> {:6.2}  {}",
                    d.at_ms,
                    d.action.as_str(),
                    d.old_rate,
                    d.new_rate,
                    d.reason
                );
            }
        }
        self.decisions.extend(decisions);
    }

    fn run(seed: u64, tail: Option<(f64, f64)>, adaptive: bool, until_s: u64) -> Self {
        let mut d = Drill::new(seed, tail, adaptive);
        for t in (TICK_MS..=until_s * 1000).step_by(TICK_MS as usize) {
            d.tick(t);
        }
        if std::env::var_os("DRILL_TRACE").is_some() {
            println!("adaptive={} tail={:?}", d.adaptive, d.tail);
            for s in d.timeline.iter().filter(|s| s.t_ms % 1000 == 0) {
                println!(
                    "t={:>4}s rate={:6.2} slack={:7.0} true_slack={:7.0} qa_p95={:6.0} depth={:3}  {:?}",
                    s.t_ms / 1000,
                    s.rate,
                    s.slack_ms,
                    s.true_slack_ms,
                    s.queue_age_p95_ms,
                    s.depth,
                    d.by_second.get((s.t_ms / 1000) as usize - 1)
                );
            }
        }
        d
    }

    fn rates(&self, from_s: u64, to_s: u64) -> Vec<f64> {
        self.timeline.iter().filter(|s| (from_s * 1000..to_s * 1000).contains(&s.t_ms)).map(|s| s.rate).collect()
    }

    fn outcomes(&self, from_s: usize, to_s: usize) -> Outcomes {
        self.by_second[from_s..to_s].iter().fold(Outcomes::default(), |a, o| Outcomes {
            arrived: a.arrived + o.arrived,
            rejected: a.rejected + o.rejected,
            on_time: a.on_time + o.on_time,
            late: a.late + o.late,
        })
    }
}

fn exp_gap(rng: &mut SmallRng) -> f64 {
    -(1.0 - rng.random::<f64>()).ln() / ARRIVALS_PER_S * 1000.0
}

/// The seeds every test runs; `DRILL_SEEDS=1,2,…` overrides them for exploring.
fn seeds() -> Vec<u64> {
    match std::env::var("DRILL_SEEDS") {
        Ok(list) => list.split(',').map(|s| s.trim().parse().expect("DRILL_SEEDS: comma-separated integers")).collect(),
        Err(_) => vec![1, 2, 3],
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn steady_state_budget_stays_within_ten_percent_of_a_stable_value() {
    for seed in seeds() {
        let d = Drill::run(seed, None, true, 120);
        let rates = d.rates(20, 120);
        let stable = median(rates.clone());
        for r in &rates {
            assert!((r - stable).abs() <= 0.1 * stable, "seed {seed}: rate {r} vs stable {stable}");
        }
        // Healthy: nothing late, nothing cut.
        let o = d.outcomes(20, 115);
        assert_eq!(o.late, 0, "seed {seed}: {o:?}");
        assert!(d.decisions.iter().all(|x| x.action != Action::Cut), "seed {seed}: {:?}", d.decisions.first());
        println!("seed {seed}: steady budget {stable:.1}/s, band ±{:.1}%, {o:?}", spread(&rates, stable));
    }
}

fn spread(rates: &[f64], stable: f64) -> f64 {
    rates.iter().map(|r| (r - stable).abs() / stable * 100.0).fold(0.0, f64::max)
}

/// What W workers can complete per second with the injected mix, the
/// issue's capacity bound: W / E[service].
fn capacity_bound() -> f64 {
    let sigma = (400f64 / 120.0).ln() / 1.644_853_6;
    let lognormal_mean = 120.0 * (sigma * sigma / 2.0).exp();
    WORKERS as f64 / ((1.0 - TAIL_FRACTION) * lognormal_mean + TAIL_FRACTION * TAIL_MS) * 1000.0
}

#[test]
fn injected_tail_is_cut_fast_and_recovers_after_removal() {
    // The seed's drill: tail from 60 s, removed at 120 s.
    let onset_ms = 60_000;
    let removed_ms = 120_000;
    let capacity = capacity_bound();
    for seed in seeds() {
        let d = Drill::run(seed, Some((onset_ms as f64, removed_ms as f64)), true, 200);
        let pre = median(d.rates(40, 60));

        // When the slack really turned negative (the simulation's own
        // knowledge, tail included from its first job), when the tail was
        // first observable (its first completion), when the estimate-based
        // slack turned negative, and the cut.
        let after = |f: &dyn Fn(&Sample) -> bool| d.timeline.iter().find(|s| s.t_ms >= onset_ms && f(s)).unwrap().t_ms;
        let truly_negative = after(&|s| s.true_slack_ms < 0.0);
        let observable = d.first_tail_seen_ms.unwrap();
        let seen_negative = after(&|s| s.slack_ms < 0.0);
        let cut = d.decisions.iter().find(|x| x.at_ms >= onset_ms && x.action == Action::Cut).unwrap();
        println!(
            "seed {seed}: slack truly < 0 at +{} ms; tail observable at +{} ms; estimated slack < 0 at +{} ms; \
             first cut at +{} ms ({:.1} -> {:.1}): {}",
            truly_negative - onset_ms,
            observable - onset_ms,
            seen_negative - onset_ms,
            cut.at_ms - onset_ms,
            cut.old_rate,
            cut.new_rate,
            cut.reason
        );
        // The controller answers on the tick the step is seen.
        assert_eq!(cut.at_ms, seen_negative, "seed {seed}");
        // Within 1 s of the tail becoming observable at all (no estimator
        // can know of 1800 ms jobs before one completes, 1.8 s in).
        assert!(cut.at_ms <= observable + 1_000, "seed {seed}: cut at +{} ms", cut.at_ms - onset_ms);
        assert!(cut.at_ms <= onset_ms + TAIL_MS as u64 + 1_000, "seed {seed}");

        // During the tail the budget settles around what the workers can do
        // and never collapses towards min_rate (1/s) from lag.
        let during = d.rates(70, 120);
        let floor = during.iter().copied().fold(f64::MAX, f64::min);
        assert!(floor >= 0.25 * capacity, "seed {seed}: budget fell to {floor:.2}");

        // After removal it recovers to the pre-injection budget.
        let back = d
            .timeline
            .iter()
            .find(|s| s.t_ms > removed_ms && s.rate >= 0.95 * pre)
            .unwrap_or_else(|| panic!("seed {seed}: never recovered to {pre}"));
        println!(
            "seed {seed}: pre-injection budget {pre:.1}/s; tail budget {:.1}..{:.1}/s (median {:.1}, capacity bound \
             {capacity:.1}); back to 95% {:.1} s after removal",
            floor,
            during.iter().copied().fold(0.0, f64::max),
            median(during.clone()),
            (back.t_ms - removed_ms) as f64 / 1000.0
        );
        assert!(back.t_ms - removed_ms <= 40_000, "seed {seed}");
        // Nothing late once recovered.
        let o = d.outcomes((back.t_ms / 1000) as usize + 5, 195);
        assert_eq!(o.late, 0, "seed {seed}: {o:?}");
    }
}

#[test]
fn admission_beats_no_admission_on_time_during_the_tail() {
    let tail = Some((60_000.0, 120_000.0));
    for seed in seeds() {
        let on = Drill::run(seed, tail, true, 130).outcomes(60, 120);
        let off = Drill::run(seed, tail, false, 130).outcomes(60, 120);
        let late_share = on.late as f64 / (on.on_time + on.late) as f64;
        println!(
            "seed {seed}: injected phase on time: adaptive {} ({:.1}/s, {:.1}% of admitted late), static {} ({:.1}/s)",
            on.on_time,
            on.on_time as f64 / 60.0,
            late_share * 100.0,
            off.on_time,
            off.on_time as f64 / 60.0
        );
        assert!(on.on_time >= 2 * off.on_time.max(1), "seed {seed}: {on:?} vs {off:?}");
    }
}

#[test]
fn no_sustained_oscillation() {
    let capacity = capacity_bound();
    for seed in seeds() {
        let d = Drill::run(seed, Some((60_000.0, 180_000.0)), true, 180);
        // Once settled into the tail (30 s in), count the reversals between
        // cutting and recovering, and the band the budget moves in.
        let settled: Vec<&Decision> = d.decisions.iter().filter(|x| (90_000..180_000).contains(&x.at_ms)).collect();
        let reversals =
            settled.windows(2).filter(|w| (w[0].action == Action::Cut) != (w[1].action == Action::Cut)).count();
        let rates = d.rates(90, 180);
        let (lo, hi) = rates.iter().fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        let o = d.outcomes(90, 175);
        println!(
            "seed {seed}: 90 s settled in the tail: {} decisions, {reversals} cut/recover reversals, budget \
             {lo:.1}..{hi:.1}/s (median {:.1}, capacity bound {capacity:.1}); on time {:.1}/s, late {:.1}% of completions",
            settled.len(),
            median(rates.clone()),
            o.on_time as f64 / 85.0,
            o.late as f64 / (o.on_time + o.late) as f64 * 100.0,
        );
        // A bounded AIMD cycle around the capacity, not growth: at most one
        // cut/recover cycle every 5 s, a band within [0.35, 1.6] of the
        // capacity bound, and a second half that moves no more than the first.
        assert!(reversals <= 2 * 18, "seed {seed}: {reversals} reversals");
        assert!(lo >= 0.35 * capacity && hi <= 1.6 * capacity, "seed {seed}: {lo}..{hi}");
        let (a, b) = rates.split_at(rates.len() / 2);
        let amp = |v: &[f64]| v.iter().copied().fold(0f64, f64::max) - v.iter().copied().fold(f64::MAX, f64::min);
        assert!(amp(b) <= amp(a) * 1.5 + 1.0, "seed {seed}: amplitude {} then {}", amp(a), amp(b));
        // Settled, the admitted work mostly finishes on time.
        assert!(o.on_time as f64 >= 0.6 * capacity * 85.0, "seed {seed}: {o:?}");
    }
}
