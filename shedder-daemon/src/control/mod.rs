//! The controller: from per-class estimates to per-class budgets, every tick.
//!
//! # The objective
//!
//! Completed-on-time, tier by tier: as many `critical` jobs finished within
//! their deadlines as the backend allows, then `standard`, then `sheddable`;
//! within a tier, by weight. A job finished late is wasted work; a job
//! turned away early costs its client almost nothing, and one turned away at
//! the NIC costs the server nothing at all. And never worse than doing
//! nothing: no class may finish fewer jobs on time than with shedder off
//! (except a class that `off` served at another's expense: a lower tier at
//! a higher tier's, or, beyond its weighted share, a patient class whose
//! jobs filled the queue a tighter class of its tier lost its jobs in).
//!
//! # The model
//!
//! Every controlled class shares one backend (the host's inference server).
//!
//! * **Capacity** ([`capacity`]), in worker-seconds per second: `[backend]
//!   workers`, else learnt from the workers in use (a scraped running
//!   count, or completions × service time) while a backlog stands, else no
//!   limit of its own.
//! * **Demand**, per class: jobs offered per second (new connections seen by
//!   the fast path, less resends of SYNs it dropped) × the class's mean
//!   service time: what it would cost if all were admitted. Jobs cost their
//!   service time whether or not they finish in time, and their size is
//!   unknown at admission.
//! * **Allocation** ([`allocate`]): capacity goes tier by tier, by weight
//!   within a tier, each class's share sized against the others' *sure*
//!   demand, not their bursts of chance ([`sure`]). When demand exceeds what is available and overload is
//!   in evidence (a backlog, or a law that has cut), a class's budget is the
//!   rate its allotment can serve, `allotment / mean service`, plus
//!   `headroom` (25%; more for a queue that `admit` trims at start to a short
//!   room, [`feed`]); a class whose allotment covers its demand is not
//!   limited.
//! * **Admission from the distribution** ([`slack`](mod@slack), [`crate::admit`]): a job
//!   is worth a worker while its chance of finishing in time,
//!   `P(service ≤ time left)` read from the class's service curve, is at
//!   least `admit_confidence` (95%) of the chance a job served at once has.
//!   The budgets' slack and the `admit` op use that same threshold, so a
//!   class whose p95 exceeds its deadline still gets the jobs that can make
//!   it, and a job that has waited too long is refused at the server before
//!   it costs a worker.
//! * **The law** ([`law`]) corrects the model with what the queue shows: it
//!   moves the *effective* capacity (multiplicative cut on negative slack,
//!   additive recovery; the reasoning is in `law.rs`). With a configured
//!   capacity it acts only for classes with lower tiers beneath them, and
//!   cuts only the work of those lower tiers (`attribution.rs`: a shared queue
//!   is cut where its filler is, not where it hurts); the class's own tier is
//!   trimmed job by job by admission. So it does with a learnt capacity the
//!   backend has been seen to fill; with any other learnt or guessed
//!   capacity it may cut any tier, since the capacity itself may be wrong.
//! * **A tier's queue kept for its tightest class** ([`wait_limit`]): classes
//!   of one tier share the queue, so a more patient class's job that waited
//!   past half the room of a tighter class of its tier, one that finishes at
//!   least as many jobs per worker-second, is refused, while the allotments
//!   bind or that class misses its deadlines.
//! * **Workers kept free** ([`reserve`]): a lower tier's job may start
//!   only while, with it, a few workers stay free for higher tiers with work
//!   coming: rates cannot stop a burst of long jobs taking every worker.
//! * **The queue hold** ([`hold`]): a queue standing past the room while the
//!   rates see no overload (a backlog from before the daemon started) is
//!   drained out of what admission may use.
//! * **Wasted admissions**: jobs the fast path let in that `admit` then
//!   refused, counted per class and named in a limited class's decisions.
//!   Past the waste tolerance they shrink the class's share to the room
//!   `admit` would not refuse ([`share`]), but never its headroom: that keeps
//!   the queue fed between a heavy tail's bursts, and giving it up idled
//!   workers without moving refusals to the NIC.
//! * **The sanity guard**: a refusal while the backend is idle (a short
//!   queue, under half its capacity busy) is the model being wrong, not
//!   overload: the budget stays open, the answer is admit (unless the job
//!   itself shows a backlog, see [`idle`]), it is logged once and counted
//!   (`shedder_sanity_guard_total`).
//! * **Safety** ([`safety`]): derived from the class's measured spread and
//!   capped at 10% of the deadline, unless configured.
//!
//! Static classes keep the operator's rate; the GPU gate ([`gate`]) may
//! hold opportunistic classes back. Every budget change is a [`Decision`]
//! naming the capacity, the allotment, the on-time chance and the terms of
//! the slack.
//!
//! Nothing here reads a clock: [`Controller::tick`] takes `now`, so tests run
//! it on a simulated clock (`tests/controller_families.rs` runs a family of
//! workloads closed loop against their own bounds).

pub mod ahead;
mod allocate;
mod attribution;
mod budget;
pub mod capacity;
pub mod contention;
pub mod decision;
mod feed;
pub mod gate;
pub mod hold;
mod idle;
mod law;
mod neighbours;
pub mod params;
pub mod plan;
mod read_backend;
pub mod reserve;
pub mod safety;
mod share;
mod share_out;
pub mod slack;
mod starts;
mod step_law;
mod sure;
pub mod tier;
pub mod wait_limit;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

pub use ahead::QueueAhead;
use budget::{ClassFacts, TickFacts, rate_of};
pub use capacity::{CapacityModel, CapacitySource};
use decision::model_words;
pub use decision::{Action, Decision, DecisionLog};
pub use gate::{GateParams, GpuSummary};
pub use hold::Hold;
pub use idle::IdleMarks;
use idle::idle_backend;
use law::Law;
use neighbours::Neighbours;
pub use params::{Budget, ClassPolicy, ControlParams, InvalidControl, MAX_JOBS};
pub use plan::CapacityPlan;
pub use reserve::Reserve;
pub use slack::{Slack, Stale, slack};
use starts::StartLog;
pub use tier::Tier;
pub use wait_limit::WaitLimit;

use crate::estimate::ClassEstimate;
use crate::estimate_error::EstimateError;
use crate::service_curve::ServiceCurve;
use crate::telemetry::GpuReading;

/// The longest step a tick may take, s: after a stall (a suspended daemon),
/// recovery must not jump by the whole gap.
pub const MAX_TICK_DT_S: f64 = 1.0;

/// Per class, between ticks.
#[derive(Clone, Debug)]
struct State {
    /// The budget in the maps, tokens/s.
    published: f64,
    /// Held by the GPU gate on the last tick.
    gated: bool,
    /// The sanity guard has fired and not yet been logged for this episode.
    guard_logged: bool,
    /// Work offered, worker-seconds/s: rises at once, decays over
    /// [`DEMAND_MEMORY_S`], so that one quiet second of a class being held
    /// back does not read as "no demand" and let it flood back.
    demand: f64,
    /// The last second's work averaged over [`sure::MEAN_DEMAND_WINDOW_S`]:
    /// what the class counts for when another class's share is sized,
    /// unless a count beyond chance says more (see [`allocate`]).
    demand_mean: f64,
    /// The last mean service time measured, ms (0 until one is).
    mean_service_ms: f64,
    /// A budget, jobs/s, that the allotted one is kept at or above: raised
    /// while the backend had free workers at every recent start under a
    /// binding budget (the model's mean lags a regime that got cheaper),
    /// dropped once a queue stands with every worker taken; 0 when none.
    probe: f64,
}

/// How long a class's demand is remembered after it falls, s.
pub const DEMAND_MEMORY_S: f64 = 1.0;

/// The model's view of one class at the last tick: what job-level
/// admission ([`crate::admit`]) judges a job against, so that the `admit`
/// op and the budgets answer from the same numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassView {
    pub tier: Tier,
    pub curve: ServiceCurve,
    /// How far off the servers' estimates of a job's service run (service
    /// over estimate); None until the class has learnt it from samples.
    #[serde(skip)]
    pub estimate_error: Option<EstimateError>,
    /// The class's slack and its terms (safety, threshold, wait…).
    pub slack: Slack,
    /// The backend is short of capacity: demand exceeds what it can do in
    /// time, so retries and hedges are shed before first attempts.
    pub pressure: bool,
    /// The backend is idle or lightly loaded: a refusal now would be the
    /// model being wrong, not overload (the sanity guard). What it was
    /// judged by, for `admit` to check each job's own evidence against.
    pub idle: Option<IdleMarks>,
    /// A class of a higher tier, with work offered, is losing its jobs'
    /// on-time chance to the wait (its `p_on_time` is below its
    /// threshold): a worker this class's job would take is one that class's
    /// jobs need, so `admit` refuses this class's jobs until it recovers.
    pub yields_to: Option<String>,
    /// Worker-seconds per second allotted to the class, when capacity binds.
    pub allocation: Option<f64>,
    /// The published budget, tokens/s.
    pub budget: f64,
    /// Workers this class's jobs must leave free for higher tiers with work
    /// coming (see [`reserve`]); None for the highest tier with demand.
    pub reserve: Option<Reserve>,
    /// Jobs in service on the backend, from scraped running gauges, when
    /// every class with demand has a fresh one: what `admit` checks the
    /// reserve against when the server does not say.
    pub running: Option<f64>,
    /// What a job arriving now waits per job queued ahead of it (see
    /// [`ahead`]); None without a known capacity or work to measure.
    pub ahead: Option<QueueAhead>,
    /// A shorter wait than the class's own room: a class of its tier with a
    /// tighter deadline, worth as much per worker-second, shares the queue
    /// (see [`wait_limit`]).
    pub wait_limit: Option<WaitLimit>,
    /// The chance that a job arriving now finds every worker busy (see
    /// [`contention`]): `admit` weighs its threshold by it for a job that
    /// no job behind it waits on. 1 where the capacity may be read too high.
    pub contested: f64,
}

/// What the control loop measured for one tick.
#[derive(Clone, Copy, Debug)]
pub struct TickInputs<'a> {
    /// Per class, from [`crate::estimate::Estimators::estimate_all`].
    pub estimates: &'a BTreeMap<String, ClassEstimate>,
    /// The latest NVML readings, empty without NVML.
    pub gpu: &'a [GpuReading],
    /// Connections/s the fast path admitted, per class, over about the last
    /// second; a class left out is "not measured".
    pub admitted: &'a BTreeMap<String, f64>,
    /// New connections/s seen (offered), per class.
    pub offered: &'a BTreeMap<String, f64>,
    /// Jobs/s that passed the fast path and were then refused by job-level
    /// admission: work the fast path should have refused for nanoseconds.
    pub wasted: &'a BTreeMap<String, f64>,
    /// Of those, the jobs/s refused as they started (asked at start): taken
    /// out of the server's queue, which then holds only jobs that can still
    /// make their deadline.
    pub trimmed: &'a BTreeMap<String, f64>,
    /// Jobs the server said it had in service as each job started since the
    /// last tick, oldest first (the one starting not counted): `admit`'s
    /// `running`, asked at start. Empty when no start said.
    pub starts: &'a [f64],
}

/// Budgets for every class, moved once per tick.
#[derive(Clone)]
pub struct Controller {
    params: ControlParams,
    policies: BTreeMap<String, ClassPolicy>,
    states: BTreeMap<String, State>,
    /// The law over the shared capacity: its rate is worker-seconds/s.
    shared: Law,
    capacity: CapacityModel,
    gate: gate::Gate,
    last_tick_ms: Option<u64>,
    last_slacks: BTreeMap<String, Slack>,
    last_gpu: Option<GpuSummary>,
    views: BTreeMap<String, ClassView>,
    plan: CapacityPlan,
    /// Times the sanity guard stopped a refusal of an idle backend, per class.
    guard_trips: BTreeMap<String, u64>,
    starts: StartLog,
}

impl Controller {
    /// Adaptive classes start at `max_rate` (no evidence, no shedding);
    /// static classes at their rate.
    pub fn new(params: ControlParams, policies: BTreeMap<String, ClassPolicy>) -> Result<Self, InvalidControl> {
        params.validate()?;
        for (name, policy) in &policies {
            policy.validate(name)?;
        }
        let states = policies.iter().map(|(name, policy)| (name.clone(), initial_state(policy))).collect();
        Ok(Controller {
            params,
            policies,
            states,
            shared: Law::new(f64::INFINITY),
            capacity: CapacityModel::default(),
            gate: gate::Gate::default(),
            last_tick_ms: None,
            last_slacks: BTreeMap::new(),
            last_gpu: None,
            views: BTreeMap::new(),
            plan: CapacityPlan::default(),
            guard_trips: BTreeMap::new(),
            starts: StartLog::default(),
        })
    }

    /// Replaces parameters and policies, all or nothing. Classes that stay
    /// keep their budget (clamped to the new bounds) and what was measured
    /// of them; the shared law, the learnt capacity, the GPU gate and the
    /// recent starts carry on; a new class starts at its maximum.
    pub fn reconfigure(
        &mut self,
        params: ControlParams,
        policies: BTreeMap<String, ClassPolicy>,
    ) -> Result<(), InvalidControl> {
        params.validate()?;
        for (name, policy) in &policies {
            policy.validate(name)?;
        }
        let mut old = std::mem::take(&mut self.states);
        for (name, policy) in &policies {
            let state = match (old.remove(name), &policy.budget) {
                (Some(mut state), Budget::Adaptive { min_rate, max_rate }) => {
                    state.published = state.published.clamp(*min_rate, *max_rate);
                    state.gated = false;
                    state
                }
                _ => initial_state(policy),
            };
            self.states.insert(name.clone(), state);
        }
        self.shared.reset_episode();
        // A new worker count moves the capacity the law's rate is a part of:
        // a cut keeps its depth, and outside one the rate is the new
        // capacity (left alone, more workers read as a cut for the seconds
        // recovery takes, refusing retries meanwhile).
        match (self.params.workers, params.workers) {
            (Some(old), Some(new)) if old != new => self.shared.rate *= new / old,
            (old, new) if old != new => self.shared.rate = f64::NAN,
            _ => {}
        }
        self.views.retain(|name, _| policies.contains_key(name));
        self.params = params;
        self.policies = policies;
        Ok(())
    }

    pub fn params(&self) -> &ControlParams {
        &self.params
    }

    pub fn policies(&self) -> &BTreeMap<String, ClassPolicy> {
        &self.policies
    }

    /// The published budget of a class, tokens/s: what belongs in its map.
    pub fn rate(&self, class: &str) -> Option<f64> {
        self.states.get(class).map(|s| s.published)
    }

    /// Every class's published budget.
    pub fn rates(&self) -> BTreeMap<String, f64> {
        self.states.iter().map(|(c, s)| (c.clone(), s.published)).collect()
    }

    /// The slack of every class at the last tick (for metrics and `ctl`).
    pub fn last_slacks(&self) -> &BTreeMap<String, Slack> {
        &self.last_slacks
    }

    /// The gate's view at the last tick.
    pub fn last_gpu(&self) -> Option<&GpuSummary> {
        self.last_gpu.as_ref()
    }

    /// The model's view of a controlled class at the last tick.
    pub fn view(&self, class: &str) -> Option<&ClassView> {
        self.views.get(class)
    }

    /// The capacity model at the last tick.
    pub fn capacity_plan(&self) -> &CapacityPlan {
        &self.plan
    }

    /// Times the sanity guard kept an idle backend's class open, per class.
    pub fn guard_trips(&self) -> &BTreeMap<String, u64> {
        &self.guard_trips
    }

    /// One control step at `now`. Returns the budget changes, in class
    /// order; [`Controller::rate`] has the new budgets.
    ///
    /// The steps, each in its own file: the backend read ([`read_backend`]),
    /// the law's move ([`step_law`]), admission shared out ([`share_out`]),
    /// each class beside the others ([`neighbours`]), then each class's
    /// budget ([`budget`]) and the view `admit` judges its jobs by.
    pub fn tick(&mut self, now: Duration, input: &TickInputs) -> Vec<Decision> {
        let (now_ms, dt_s) = self.advance_clock(now);
        let p = self.params.clone();
        let gpu = self.update_gate(&p, input, now_ms);
        let slacks = self.measure_slacks(&p, input);
        let reading = self.read_backend(&p, input, &slacks, dt_s);
        let law = self.step_law(&p, input, &slacks, &reading, now_ms, dt_s);
        let sharing = self.share_out(&p, input, &slacks, &reading, law.pressure_class);
        let neighbours = Neighbours::new(&self.policies, &slacks, &reading, |tier| {
            attribution::cut_worth(&reading, tier, 0.0, |n| chances(input, &slacks, n)).is_none_or(|w| w.pays())
        });

        let plan = &self.plan;
        let facts = TickFacts {
            params: &p,
            offered: input.offered,
            admitted: input.admitted,
            wasted: input.wasted,
            trimmed: input.trimmed,
            starts: &self.starts,
            capacity: plan.capacity,
            effective: plan.effective,
            demand: plan.demand,
            admission: sharing.admission,
            backlogged: plan.backlogged,
            binding: sharing.binding,
            headroom: sharing.headroom,
            dt_s,
        };
        let contested = if !reading.capacity_trusted() {
            1.0
        } else {
            // Work `admit` refuses never takes a worker: only the rest contends.
            let refused: f64 = reading.adaptive.iter().map(|n| work(input.wasted, &slacks, n)).sum();
            contention::all_busy_chance(plan.capacity, (plan.demand - refused).max(plan.busy))
        };
        let mut guard_class = law.guard_class;
        let mut decisions = Vec::new();
        for (name, policy) in &self.policies {
            let s = slacks[name];
            let reserve = neighbours.reserve(name);
            let state = self.states.get_mut(name).expect("a state for every policy");
            let idle = idle_backend(&p, &s, plan.busy, plan.capacity);
            let limit = neighbours.wait_limit(name, sharing.binding);
            let was_gated = state.gated;
            let gated = policy.opportunistic && gpu.gate_closed;
            let (target, why) = match policy.budget {
                Budget::Static { .. } if gated => (0.0, format!("{}: opportunistic class held at 0/s", gpu.words())),
                Budget::Static { rate } => (rate, format!("{}: static rate {rate}/s", gpu.words())),
                Budget::Adaptive { min_rate, .. } if gated => {
                    (min_rate, format!("{}: opportunistic class held at min_rate {min_rate}/s", gpu.words()))
                }
                Budget::Adaptive { min_rate, max_rate } => {
                    let mut words = Vec::new();
                    if plan.hold.draining() {
                        words.push(plan.hold.words());
                    }
                    if let Some(limit) = &limit {
                        words.push(limit.words());
                    }
                    let class = ClassFacts {
                        name,
                        policy,
                        slack: &s,
                        share: sharing.allocation[name].share,
                        beyond_chance: sharing.allocation[name].beyond_chance,
                        reserve,
                        idle: idle.is_some(),
                        demand: state.demand,
                        published: state.published,
                    };
                    let target = budget::adaptive(&facts, &class, &mut state.probe, max_rate);
                    words.extend(target.words);
                    if target.guarded {
                        guard_class.get_or_insert_with(|| name.clone());
                    }
                    if was_gated {
                        words.push(format!("{}: GPU gate open again", gpu.words()));
                    }
                    (target.rate.clamp(min_rate, max_rate), words.join("; "))
                }
            };
            state.gated = gated;
            let allocation = sharing.binding.then(|| sharing.allocation.get(name).map(|a| a.share)).flatten();
            if let Some(action) = change(state, policy, target, was_gated, &p) {
                decisions.push(Decision {
                    at_ms: now_ms,
                    class: name.clone(),
                    action,
                    old_rate: state.published,
                    new_rate: target,
                    slack: s,
                    from_prior: s.from_prior(),
                    estimator_version: s.estimator_version,
                    gpu: gpu.clone(),
                    capacity: plan.clone(),
                    allocation,
                    reason: format!("{why}; {}", model_words(plan, &s, name, &law.law_move, &p)),
                });
                state.published = target;
            }
            self.views.insert(
                name.clone(),
                ClassView {
                    tier: policy.tier,
                    curve: input
                        .estimates
                        .get(name)
                        .map_or_else(|| ServiceCurve::lognormal(None, 0.0), |e| e.service_curve.clone()),
                    estimate_error: input.estimates.get(name).and_then(|e| e.estimate_error.clone()),
                    slack: s,
                    pressure: sharing.binding || plan.effective < plan.capacity,
                    idle,
                    yields_to: neighbours.yields_to(policy.tier),
                    allocation,
                    budget: state.published,
                    reserve,
                    running: reading.running,
                    ahead: reading.ahead,
                    wait_limit: limit,
                    contested,
                },
            );
        }
        self.note_guard(guard_class, &slacks);
        self.last_slacks = slacks;
        self.last_gpu = Some(gpu);
        decisions
    }

    /// The tick's time, ms, and the step since the last one, s (0 at the first).
    fn advance_clock(&mut self, now: Duration) -> (u64, f64) {
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let dt_s = match self.last_tick_ms {
            Some(last) => (now_ms.saturating_sub(last) as f64 / 1000.0).min(MAX_TICK_DT_S),
            None => 0.0,
        };
        self.last_tick_ms = Some(self.last_tick_ms.map_or(now_ms, |l| l.max(now_ms)));
        (now_ms, dt_s)
    }

    /// The GPU gate, from NVML, the KV cache and the interactive classes' load.
    fn update_gate(&mut self, p: &ControlParams, input: &TickInputs, now_ms: u64) -> GpuSummary {
        let kv = input.estimates.values().filter_map(|e| e.kv_cache_usage.map(|g| g.value)).reduce(f64::max);
        let interactive: Vec<(&String, &ClassPolicy)> =
            self.policies.iter().filter(|(_, p)| !p.opportunistic).collect();
        // Folded from +0.0: `sum` over no class gives −0.0, which status printed.
        let gate_capacity = interactive.iter().fold(0.0, |sum, (_, p)| sum + p.capacity());
        let load = interactive.iter().try_fold(0.0, |sum, (name, _)| Some(sum + input.admitted.get(*name)?));
        self.gate.update(&p.gate, input.gpu, kv, load, gate_capacity, now_ms)
    }

    /// Every class's slack and service curve. A window with no completions
    /// in it (and no configured prior) knows no service time: the class's
    /// jobs did not become free, so its work is costed at the last mean that
    /// was measured.
    fn measure_slacks(&mut self, p: &ControlParams, input: &TickInputs) -> BTreeMap<String, Slack> {
        self.policies
            .iter()
            .map(|(name, policy)| {
                let mut s = slack(policy, input.estimates.get(name), p);
                let state = self.states.get_mut(name).expect("a state for every policy");
                if s.mean_service_ms > 0.0 {
                    state.mean_service_ms = s.mean_service_ms;
                } else {
                    s.mean_service_ms = state.mean_service_ms;
                }
                (name.clone(), s)
            })
            .collect()
    }

    /// Counts a tick on which the sanity guard kept `class` open, and logs
    /// the first of each episode; no class: the episode is over.
    fn note_guard(&mut self, class: Option<String>, slacks: &BTreeMap<String, Slack>) {
        let Some(class) = class else {
            self.states.values_mut().for_each(|s| s.guard_logged = false);
            return;
        };
        *self.guard_trips.entry(class.clone()).or_default() += 1;
        let state = self.states.get_mut(&class).expect("a state for every policy");
        if std::mem::replace(&mut state.guard_logged, true) {
            return;
        }
        let (s, busy, capacity) = (&slacks[&class], self.plan.busy, self.plan.capacity);
        tracing::warn!(
            class = %class,
            "sanity guard: the model would refuse {class}'s work while the backend is idle \
             (busy {busy:.2} of {capacity:.2} worker-s/s, {}); slack {:.0} ms = deadline {:.0} − {} − {} − {}; \
             admitting instead. A safety margin or prior too tight for this class is the usual cause",
            s.queue_term_words(),
            s.slack_ms,
            s.deadline_ms,
            s.queue_term_words(),
            s.service_term_words(),
            s.safety_words()
        );
    }
}

/// Worker-seconds per second that `class`'s jobs at `rates` would take.
fn work(rates: &BTreeMap<String, f64>, slacks: &BTreeMap<String, Slack>, class: &str) -> f64 {
    rate_of(rates, class) * slacks[class].mean_service_ms / 1000.0
}

/// Whether `admit` refused more of `class` than the waste tolerance of what
/// the fast path let in.
fn past_waste_tolerance(p: &ControlParams, input: &TickInputs, class: &str) -> bool {
    rate_of(input.wasted, class) > p.waste_tolerance * rate_of(input.admitted, class)
}

/// A class as [`attribution::cut_worth`] judges it.
fn chances(input: &TickInputs, slacks: &BTreeMap<String, Slack>, class: &str) -> attribution::Chances {
    let s = &slacks[class];
    attribution::Chances {
        asked: asked(input, class),
        mean_service_ms: s.mean_service_ms,
        best: s.best_chance,
        now: s.p_on_time,
    }
}

/// Jobs/s a class brings: what it offered, or what got in if more.
fn asked(input: &TickInputs, class: &str) -> f64 {
    rate_of(input.offered, class).max(rate_of(input.admitted, class))
}

/// The decision a budget moving from its published value to `target` is
/// worth, if any: a move smaller than the publish step (and than 5%) is not,
/// unless it reaches one of the class's bounds.
fn change(state: &State, policy: &ClassPolicy, target: f64, was_gated: bool, p: &ControlParams) -> Option<Action> {
    let old = state.published;
    let step = p.publish_step * policy.capacity();
    let moved = (target - old).abs() >= step.max(0.05 * old)
        || (target != old && (target == policy.capacity() || target == policy.floor()));
    if !moved {
        None
    } else if state.gated || was_gated {
        Some(Action::Gate)
    } else if target < old {
        Some(Action::Cut)
    } else {
        Some(Action::Recover)
    }
}

fn initial_state(policy: &ClassPolicy) -> State {
    State {
        published: policy.capacity(),
        gated: false,
        guard_logged: false,
        demand: 0.0,
        demand_mean: 0.0,
        mean_service_ms: 0.0,
        probe: 0.0,
    }
}

#[cfg(test)]
mod tests;
