//! A closed-loop simulation of classes sharing one backend, on a simulated
//! clock: seeded arrivals per class (with steps in rate), a fast-path token
//! bucket per class at the controller's budget, one FIFO queue in front of
//! `workers` workers, and job-level `admit` asked as a worker takes each
//! job (or, for a gateway in front of the server, as each job arrives). What a server would report goes to the real estimators (a
//! queue-age sample when a job starts, a service sample and an outcome when
//! it completes), whose estimates drive the real controller, whose budgets
//! feed back into the buckets. Deterministic: one seed, no wall clock.
//!
//! Every job's service time is drawn up front from the seed, so `off` and
//! `enforce` see the same jobs, and the bound is computed from them.
//!
//! `SIM_TRACE=1 cargo test -p shedder-daemon --test controller_families -- --nocapture`
//! prints each run's timeline, and after it a tally of the answers `admit`
//! gave other than admit, per class and reason.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use shedder_daemon::admit::{AdmitPolicy, AdmitRequest, QueueAge, Verdict, admit};
use shedder_daemon::control::{Action, Budget, ClassPolicy, ControlParams, Controller, Decision, TickInputs, Tier};
use shedder_daemon::estimate::{ClassPrior, EstimatorParams, Estimators};
use shedder_daemon::lognormal::{Lognormal, standard_normal};
use shedder_daemon::telemetry::Observation;

pub const TICK_MS: u64 = 100;

/// One class of a simulated workload.
#[derive(Clone, Debug)]
pub struct Class {
    pub name: &'static str,
    pub tier: Tier,
    pub deadline_ms: f64,
    /// Lognormal through these.
    pub p50_ms: f64,
    pub p95_ms: f64,
    /// `(fraction, ms, from_s, to_s)`: that fraction of jobs arriving in
    /// `[from_s, to_s)` take `ms` instead.
    pub tail: Option<(f64, f64, f64, f64)>,
    /// The spread of the tail's jobs around its `ms`: the σ of a lognormal
    /// with that median (0: every one takes exactly `ms`).
    pub tail_spread: f64,
    /// `(from_s, jobs/s)` steps, the first from 0.
    pub rates: Vec<(f64, f64)>,
    pub max_rate: f64,
    /// The service p95 configured as the class's prior, as the drill
    /// writes one (no p50: a point mass); None configures none.
    pub prior_p95_ms: Option<f64>,
    /// The server estimates each job's service, off by a lognormal factor
    /// of this spread, tells `admit` and reports it with the job's service;
    /// None: no estimates.
    pub estimate_error: Option<f64>,
}

impl Class {
    pub fn new(name: &'static str, tier: Tier, deadline_ms: f64, p50_ms: f64, p95_ms: f64, rate: f64) -> Self {
        Class {
            name,
            tier,
            deadline_ms,
            p50_ms,
            p95_ms,
            tail: None,
            tail_spread: 0.0,
            rates: vec![(0.0, rate)],
            max_rate: rate * 2.0,
            prior_p95_ms: None,
            estimate_error: None,
        }
    }

    fn rate_at(&self, t_s: f64) -> f64 {
        self.rates.iter().rev().find(|(from, _)| *from <= t_s).map_or(0.0, |(_, r)| *r)
    }
}

#[derive(Clone, Debug)]
pub struct Workload {
    pub classes: Vec<Class>,
    pub workers: usize,
    pub duration_s: f64,
    /// Written into `[backend] workers`.
    pub workers_known: bool,
}

impl Workload {
    /// Where a window asked to end at `to_s` ends: no later than one
    /// longest deadline before the run does, so that every job counted had
    /// its whole deadline to finish in. Counted to the run's end, the jobs
    /// still queued then would read as failures, and a policy that keeps a
    /// queue its jobs can wait in would be charged for the run stopping.
    fn judged_until(&self, to_s: f64) -> f64 {
        let longest_s = self.classes.iter().map(|c| c.deadline_ms).fold(0.0, f64::max) / 1000.0;
        to_s.min(self.duration_s - longest_s)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every job is admitted and served in FIFO order.
    Off,
    /// Fast-path budgets from the controller, and `admit` at dequeue, from a
    /// server that can hold a job (`can_hold`): a held job stays queued and
    /// the worker takes the next; held jobs are asked again first.
    Enforce,
    /// Fast-path budgets, and `admit` asked only as each job arrives, with
    /// the jobs queued ahead of it when it `knows_queue` (a queue-depth
    /// gauge it reads): a gateway that cannot reach into the server's queue.
    Gateway { knows_queue: bool },
    /// A peer: the server answers 503 on arrival while its queue holds one
    /// job per worker (vLLM's `--max-num-queued-reqs` = W, as the drill sets it).
    QueueCap,
    /// A peer: the Gateway API Inference Extension's saturation detector
    /// (queue depth / 5 or busy workers / W / 0.8 at least 1) refuses
    /// `sheddable` jobs on arrival; other tiers are never shed.
    Saturation,
}

#[derive(Clone, Copy, Debug)]
struct Job {
    class: usize,
    arrival_ms: f64,
    service_ms: f64,
    /// The server's estimate of `service_ms`, where it makes one.
    estimate_ms: Option<f64>,
}

/// What became of the jobs of one class.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Outcomes {
    pub arrived: u64,
    pub on_time: u64,
    pub late: u64,
    /// Turned away by the fast path's bucket.
    pub shed: u64,
    /// Refused by `admit`.
    pub refused: u64,
    pub unfinished: u64,
}

impl std::ops::AddAssign for Outcomes {
    fn add_assign(&mut self, o: Outcomes) {
        self.arrived += o.arrived;
        self.on_time += o.on_time;
        self.late += o.late;
        self.shed += o.shed;
        self.refused += o.refused;
        self.unfinished += o.unfinished;
    }
}

impl Outcomes {
    pub fn late_share(&self) -> f64 {
        let done = self.on_time + self.late;
        if done == 0 { 0.0 } else { self.late as f64 / done as f64 }
    }
}

pub struct Run {
    /// Per class, for jobs arriving within each phase window asked for.
    pub outcomes: Vec<Outcomes>,
    pub decisions: Vec<Decision>,
}

/// The jobs of a workload, drawn from `seed`.
fn plan(w: &Workload, seed: u64) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (i, c) in w.classes.iter().enumerate() {
        let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(i as u64));
        let service_time = Lognormal::through(c.p50_ms, c.p95_ms).expect("a class's p95 is above its p50");
        // Its own stream: estimates leave every other draw as it was.
        let mut estimates = SmallRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(i as u64) ^ 0xe57);
        let mut t = 0.0;
        loop {
            let rate = c.rate_at(t).max(1e-9);
            t += -(1.0 - rng.random::<f64>()).ln() / rate;
            if t >= w.duration_s {
                break;
            }
            let mut service = service_time.draw(&mut rng);
            if let Some((fraction, ms, from, to)) = c.tail
                && (from..to).contains(&t)
                && rng.random::<f64>() < fraction
            {
                service = if c.tail_spread > 0.0 { ms * (c.tail_spread * standard_normal(&mut rng)).exp() } else { ms };
            }
            let off_by = standard_normal(&mut estimates);
            let estimate_ms = c.estimate_error.map(|spread| service * (spread * off_by).exp());
            jobs.push(Job { class: i, arrival_ms: t * 1000.0, service_ms: service, estimate_ms });
        }
    }
    jobs.sort_by(|a, b| a.arrival_ms.total_cmp(&b.arrival_ms));
    jobs
}

/// The service-blind, class-aware bound on on-time completions of jobs
/// arriving in `[from_s, to_s)` (ending as [`Workload::judged_until`] says),
/// window by window (10 s): a job whose
/// service exceeds its deadline never counts; the window's worker time goes
/// first to the classes with the most on-time jobs per worker-second (or,
/// with `tiers`, tier by tier first). Per class.
pub fn blind_bound(w: &Workload, seed: u64, from_s: f64, to_s: f64, tiers: bool) -> Vec<f64> {
    let to_s = w.judged_until(to_s);
    let jobs = plan(w, seed);
    let mut bound = vec![0.0; w.classes.len()];
    let window = 10.0;
    let mut start = from_s;
    while start < to_s {
        let end = (start + window).min(to_s);
        let mut stats: Vec<(usize, f64, f64, f64)> = Vec::new(); // class, jobs, mean service s, p on time
        for (i, c) in w.classes.iter().enumerate() {
            let mine: Vec<&Job> = jobs
                .iter()
                .filter(|j| j.class == i && (start * 1000.0..end * 1000.0).contains(&j.arrival_ms))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let n = mine.len() as f64;
            let mean = mine.iter().map(|j| j.service_ms).sum::<f64>() / n / 1000.0;
            let ok = mine.iter().filter(|j| j.service_ms <= c.deadline_ms).count() as f64 / n;
            stats.push((i, n, mean, ok));
        }
        stats.sort_by(|a, b| {
            let key =
                |s: &(usize, f64, f64, f64)| (if tiers { w.classes[s.0].tier } else { Tier::Standard }, -(s.3 / s.2));
            let (ka, kb) = (key(a), key(b));
            ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
        });
        let mut left = w.workers as f64 * (end - start);
        for (i, n, mean, ok) in stats {
            let served = (left / mean).min(n);
            left -= served * mean;
            bound[i] += served * ok;
        }
        start = end;
    }
    bound
}

/// Runs a workload; outcomes count jobs arriving in `[from_s, to_s)`, the
/// window ending early enough for each to be judged ([`Workload::judged_until`]).
pub fn run(w: &Workload, mode: Mode, seed: u64, from_s: f64, to_s: f64) -> Run {
    let jobs = plan(w, seed);
    let names: Vec<String> = w.classes.iter().map(|c| c.name.to_string()).collect();
    let policies: BTreeMap<String, ClassPolicy> = w
        .classes
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                ClassPolicy {
                    deadline_ms: c.deadline_ms,
                    safety_ms: None,
                    budget: Budget::Adaptive { min_rate: 0.0, max_rate: c.max_rate },
                    opportunistic: false,
                    tier: c.tier,
                    weight: 1.0,
                },
            )
        })
        .collect();
    let params = ControlParams { workers: w.workers_known.then_some(w.workers as f64), ..ControlParams::default() };
    let mut controller = Controller::new(params.clone(), policies).unwrap();
    let prior = |c: &Class| ClassPrior { service_p95_ms: c.prior_p95_ms.unwrap_or(0.0), ..ClassPrior::default() };
    let priors: BTreeMap<String, ClassPrior> = w.classes.iter().map(|c| (c.name.to_string(), prior(c))).collect();
    let mut estimators = Estimators::new(EstimatorParams::default(), priors).unwrap();
    let policy = AdmitPolicy::with_max_queue_age(60_000.0);
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);

    let n = w.classes.len();
    let mut outcomes = vec![Outcomes::default(); n];
    let to_s = w.judged_until(to_s);
    let counted = |t_ms: f64| (from_s * 1000.0..to_s * 1000.0).contains(&t_ms);
    let mut tokens: Vec<f64> = w.classes.iter().map(|c| c.max_rate).collect();
    let mut budgets: Vec<f64> = w.classes.iter().map(|c| c.max_rate).collect();
    // The operator's burst: a quarter second of the budget, at least 5.
    let burst = |rate: f64| (rate * 0.25).max(5.0);
    let mut queue: VecDeque<Job> = VecDeque::new();
    // Jobs `admit` held, oldest first: older than anything in `queue`.
    let mut held: VecDeque<Job> = VecDeque::new();
    let mut workers: Vec<Option<(f64, Job)>> = vec![None; w.workers];
    // What the server reports, each at the ms it happened: stamped at the
    // tick instead, a tick's completions would count in the slice the tick
    // opens, and a rate read over whole slices would run high.
    let mut pending: Vec<(u64, usize, Observation)> = Vec::new();
    // Jobs in service as each job started since the last tick (`admit`'s `running`).
    let mut starts: Vec<f64> = Vec::new();
    // Per class, the times of the last second's arrivals, admissions and
    // refusals (all of them, and those at start).
    let mut seen: Vec<VecDeque<f64>> = vec![VecDeque::new(); n];
    let mut passed: Vec<VecDeque<f64>> = vec![VecDeque::new(); n];
    let mut wasted: Vec<VecDeque<f64>> = vec![VecDeque::new(); n];
    let mut trimmed: Vec<VecDeque<f64>> = vec![VecDeque::new(); n];
    let mut decisions = Vec::new();
    let tracing = mode == Mode::Enforce && std::env::var_os("SIM_TRACE").is_some();
    let mut answers = Answers::default();
    let mut next = 0;
    let end_ms = (w.duration_s * 1000.0) as u64;
    for tick_ms in (TICK_MS..=end_ms).step_by(TICK_MS as usize) {
        let now = tick_ms as f64;
        // Events within the tick, in time order at 1 ms resolution.
        let mut t = now - TICK_MS as f64;
        while t < now {
            t += 1.0;
            // Completions.
            for slot in workers.iter_mut() {
                if let Some((done, job)) = *slot
                    && done <= t
                {
                    *slot = None;
                    let c = &w.classes[job.class];
                    let late = done - job.arrival_ms > c.deadline_ms;
                    pending.push((t as u64, job.class, Observation::Service { ms: job.service_ms, count: 1 }));
                    if let Some(estimate_ms) = job.estimate_ms {
                        let error = Observation::EstimateError { estimate_ms, service_ms: job.service_ms, count: 1 };
                        pending.push((t as u64, job.class, error));
                    }
                    let late_by = late.then_some(done - job.arrival_ms - c.deadline_ms);
                    pending.push((t as u64, job.class, Observation::Completion { late_by_ms: late_by, count: 1 }));
                    if counted(job.arrival_ms) {
                        if late {
                            outcomes[job.class].late += 1;
                        } else {
                            outcomes[job.class].on_time += 1;
                        }
                    }
                }
            }
            // Arrivals, through the fast path.
            while next < jobs.len() && jobs[next].arrival_ms <= t {
                let job = jobs[next];
                next += 1;
                let i = job.class;
                if counted(job.arrival_ms) {
                    outcomes[i].arrived += 1;
                }
                seen[i].push_back(t);
                let busy = workers.iter().flatten().count() as f64;
                let peer_refuses = match mode {
                    Mode::QueueCap => queue.len() >= w.workers,
                    Mode::Saturation => {
                        w.classes[i].tier == Tier::Sheddable
                            && (queue.len() as f64 / 5.0).max(busy / w.workers as f64 / 0.8) >= 1.0
                    }
                    Mode::Off | Mode::Enforce | Mode::Gateway { .. } => false,
                };
                if peer_refuses {
                    if counted(job.arrival_ms) {
                        outcomes[i].shed += 1;
                    }
                    continue;
                }
                if matches!(mode, Mode::Enforce | Mode::Gateway { .. }) {
                    if tokens[i] < 1.0 {
                        if counted(job.arrival_ms) {
                            outcomes[i].shed += 1;
                        }
                        continue;
                    }
                    tokens[i] -= 1.0;
                }
                passed[i].push_back(t);
                // A gateway asks `admit` as the job arrives, with the queue ahead of it.
                if let Mode::Gateway { knows_queue } = mode
                    && let Some(view) = controller.view(w.classes[i].name)
                {
                    let request = AdmitRequest {
                        deadline_ms: job.arrival_ms + w.classes[i].deadline_ms,
                        queue_age: QueueAge::AgeMs(0.0),
                        now_ms: t,
                        attempt: 1,
                        hedge: false,
                        running: Some(busy),
                        waiting_ahead: knows_queue.then_some(queue.len() as f64),
                        waiting_behind: None,
                        can_hold: false,
                        estimated_service_ms: job.estimate_ms,
                    };
                    if admit(&request, view, &policy, 0.0, params.retry_share_max, &mut rng).verdict != Verdict::Admit {
                        wasted[i].push_back(t);
                        if counted(job.arrival_ms) {
                            outcomes[i].refused += 1;
                        }
                        continue;
                    }
                }
                queue.push_back(job);
            }
            // Free workers take jobs, asking `admit` first: the held jobs,
            // oldest first, then the queue.
            let mut still_held = VecDeque::new();
            while let Some(slot) = workers.iter().position(Option::is_none) {
                let Some(job) = held.pop_front().or_else(|| queue.pop_front()) else { break };
                let c = &w.classes[job.class];
                if mode == Mode::Enforce
                    && let Some(view) = controller.view(c.name)
                {
                    let running = workers.iter().flatten().count() as f64;
                    let request = AdmitRequest {
                        deadline_ms: job.arrival_ms + c.deadline_ms,
                        queue_age: QueueAge::QueuedAtMs(job.arrival_ms),
                        now_ms: t,
                        attempt: 1,
                        hedge: false,
                        running: Some(running),
                        waiting_ahead: None,
                        // Behind it: the held jobs not yet asked this pass, and the
                        // queue. Those held already this pass are older, and a
                        // refusal would not give them its worker.
                        waiting_behind: Some((queue.len() + held.len()) as f64),
                        can_hold: true,
                        estimated_service_ms: job.estimate_ms,
                    };
                    let d = admit(&request, view, &policy, 0.0, params.retry_share_max, &mut rng);
                    if tracing && d.verdict != Verdict::Admit {
                        answers.count(c.name, d.verdict, &d.reason);
                    }
                    if d.verdict == Verdict::Hold {
                        still_held.push_back(job);
                        continue;
                    }
                    starts.push(running);
                    if d.verdict != Verdict::Admit {
                        // As the daemon does: a refused job's wait is a queue-age sample too.
                        pending.push((t as u64, job.class, Observation::QueueAge { ms: t - job.arrival_ms, count: 1 }));
                        wasted[job.class].push_back(t);
                        trimmed[job.class].push_back(t);
                        if counted(job.arrival_ms) {
                            outcomes[job.class].refused += 1;
                        }
                        continue;
                    }
                }
                pending.push((t as u64, job.class, Observation::QueueAge { ms: t - job.arrival_ms, count: 1 }));
                workers[slot] = Some((t + job.service_ms, job));
            }
            still_held.append(&mut held);
            held = still_held;
        }
        // The tick: observations in, rates over the last second, budgets out.
        let at = Duration::from_millis(tick_ms);
        for (when_ms, i, o) in pending.drain(..) {
            estimators.observe_one(Duration::from_millis(when_ms), &names[i], &o).unwrap();
        }
        let rates = |events: &mut Vec<VecDeque<f64>>| -> BTreeMap<String, f64> {
            events
                .iter_mut()
                .enumerate()
                .map(|(i, q)| {
                    while q.front().is_some_and(|x| *x <= now - 1000.0) {
                        q.pop_front();
                    }
                    (names[i].clone(), q.len() as f64)
                })
                .collect()
        };
        let (offered, admitted) = (rates(&mut seen), rates(&mut passed));
        let (refused, refused_at_start) = (rates(&mut wasted), rates(&mut trimmed));
        let estimates = estimators.estimate_all(at);
        let inputs = TickInputs {
            estimates: &estimates,
            gpu: &[],
            admitted: &admitted,
            offered: &offered,
            wasted: &refused,
            trimmed: &refused_at_start,
            starts: &std::mem::take(&mut starts),
        };
        let made = controller.tick(at, &inputs);
        for (i, c) in w.classes.iter().enumerate() {
            let rate = controller.rate(c.name).unwrap();
            tokens[i] = (tokens[i] + rate * TICK_MS as f64 / 1000.0).min(burst(rate));
            budgets[i] = rate;
        }
        if tracing {
            for d in &made {
                println!(
                    "{:>7} {:<10} {:<7} {:7.2} -> {:7.2}  {}",
                    d.at_ms,
                    d.class,
                    d.action.as_str(),
                    d.old_rate,
                    d.new_rate,
                    d.reason
                );
            }
            if tick_ms % 1000 == 0 {
                let plan = controller.capacity_plan();
                println!(
                    "t={:>4}s queue={:>4} busy={:>5.2} cap={:>5.2} eff={:>5.2} demand={:>6.2} budgets={:?}",
                    tick_ms / 1000,
                    queue.len(),
                    plan.busy,
                    plan.capacity,
                    plan.effective,
                    plan.demand,
                    budgets.iter().map(|b| (b * 10.0).round() / 10.0).collect::<Vec<_>>()
                );
            }
        }
        decisions.extend(made);
    }
    for job in queue.iter().chain(workers.iter().flatten().map(|(_, j)| j)) {
        if counted(job.arrival_ms) {
            outcomes[job.class].unfinished += 1;
        }
    }
    if tracing {
        answers.print();
    }
    Run { outcomes, decisions }
}

/// Each class's outcomes over `[from_s, to_s)` in `mode`, summed over `seeds`.
pub fn summed(w: &Workload, mode: Mode, seeds: &[u64], from_s: f64, to_s: f64) -> Vec<Outcomes> {
    let mut total = vec![Outcomes::default(); w.classes.len()];
    for &seed in seeds {
        for (t, o) in total.iter_mut().zip(run(w, mode, seed, from_s, to_s).outcomes) {
            *t += o;
        }
    }
    total
}

impl Run {
    /// The first budget cut of `class` at or after `from_ms`.
    pub fn first_cut(&self, class: &str, from_ms: u64) -> Option<u64> {
        self.decisions
            .iter()
            .find(|d| d.class == class && d.action == Action::Cut && d.at_ms >= from_ms)
            .map(|d| d.at_ms)
    }
}

/// `admit`'s answers other than admit at start over a traced run, counted
/// per class and reason with the reason's figures left out: which rule turns
/// a class's jobs away, at a glance. A held job is asked again at each free
/// worker, so holds count asks, not jobs.
#[derive(Default)]
struct Answers(BTreeMap<(&'static str, String), u64>);

impl Answers {
    fn count(&mut self, class: &'static str, verdict: Verdict, reason: &str) {
        let mut shape = String::new();
        for ch in reason.chars() {
            // A digit after a letter is part of a name (`c0`), not a figure.
            let in_name = shape.ends_with(|c: char| c.is_ascii_alphanumeric() && c != '#');
            let figure = (ch.is_ascii_digit() && !in_name) || (ch == '.' && shape.ends_with('#'));
            if !figure {
                shape.push(ch);
            } else if !shape.ends_with('#') {
                shape.push('#');
            }
        }
        *self.0.entry((class, format!("{verdict:?}: {shape}"))).or_default() += 1;
    }

    fn print(&self) {
        let mut rows: Vec<_> = self.0.iter().collect();
        rows.sort_by(|a, b| a.0.0.cmp(b.0.0).then(b.1.cmp(a.1)));
        for ((class, reason), n) in rows {
            println!("answers {class:<10} {n:>8}  {reason}");
        }
    }
}
