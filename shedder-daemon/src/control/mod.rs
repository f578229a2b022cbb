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
//! * **Admission from the distribution** ([`slack`], [`crate::admit`]): a job
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
//!   They do not cut its budget: the headroom keeps the queue fed between a
//!   heavy tail's bursts, and giving it up idled workers without moving
//!   refusals to the NIC, which carries most of them anyway (the budget
//!   follows the capacity model; `admit` trims what the queue's variance
//!   lets through).
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
pub mod reserve;
pub mod safety;
mod share;
pub mod slack;
mod starts;
mod sure;
pub mod tier;
pub mod wait_limit;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

pub use ahead::QueueAhead;
use allocate::{Claim, allocate, allot};
use attribution::CutWorth;
use budget::{ClassFacts, TickFacts, rate_of};
pub use capacity::{CapacityModel, CapacitySource};
use decision::model_words;
pub use decision::{Action, Decision, DecisionLog};
pub use gate::{GateParams, GpuSummary};
pub use hold::Hold;
pub use idle::IdleMarks;
use idle::{backlog_ms, idle_backend};
use law::{Law, Move};
use neighbours::Neighbours;
pub use params::{Budget, ClassPolicy, ControlParams, InvalidControl};
pub use plan::CapacityPlan;
use plan::Reading;
pub use reserve::Reserve;
pub use slack::{Slack, Stale, slack};
use starts::StartLog;
pub use tier::Tier;
pub use wait_limit::WaitLimit;

use crate::estimate::ClassEstimate;
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
    /// keep their budget, clamped to the new bounds; the shared law and the
    /// learnt capacity carry on; everything else starts afresh.
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
        let gate_capacity: f64 = interactive.iter().map(|(_, p)| p.capacity()).sum();
        let load: Option<f64> = interactive.iter().map(|(name, _)| input.admitted.get(*name).copied()).sum();
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

    /// The capacity model and each adaptive class's claim on it.
    fn read_backend(
        &mut self,
        p: &ControlParams,
        input: &TickInputs,
        slacks: &BTreeMap<String, Slack>,
        dt_s: f64,
    ) -> Reading {
        let busy: f64 =
            slacks.values().map(|s| capacity::busy_workers(s.running, s.drain_rate_per_s, s.mean_service_ms)).sum();
        let backlogged = slacks.values().any(|s| s.has_evidence() && s.queue_term_ms > backlog_ms(p, s));
        let limiting = self.plan.demand > self.plan.effective;
        self.capacity.update(busy, backlogged, limiting, dt_s);
        let adaptive: Vec<String> = self
            .policies
            .iter()
            .filter(|(_, pol)| matches!(pol.budget, Budget::Adaptive { .. }))
            .map(|(n, _)| n.clone())
            .collect();
        let max_rates: f64 =
            adaptive.iter().map(|name| self.policies[name].capacity() * slacks[name].mean_service_ms / 1000.0).sum();
        self.starts.record(input.starts);
        let (capacity, source) = self.capacity.capacity(p.workers, max_rates, self.starts.workers_seen());
        let capacity = capacity.max(f64::MIN_POSITIVE);
        // The classes with work offered (or let in) in the last second: the
        // ones whose running jobs, rooms, waits and reserves count now (a
        // decayed demand never quite reaches zero).
        let offering: Vec<String> = adaptive.iter().filter(|n| asked(input, n) > 0.0).cloned().collect();
        let running: Option<f64> = offering
            .iter()
            .map(|n| slacks[n].running.map(|r| r as f64))
            .sum::<Option<f64>>()
            .filter(|_| !offering.is_empty());

        // What each controlled class asks of the backend, worker-seconds/s.
        let decay = (-dt_s / DEMAND_MEMORY_S).exp();
        let claims: Vec<Claim> = adaptive
            .iter()
            .map(|n| {
                let state = self.states.get_mut(n).expect("a state for every policy");
                let now = work(input.offered, slacks, n).max(work(input.admitted, slacks, n));
                state.demand = now.max(state.demand * decay);
                state.demand_mean += (dt_s / sure::MEAN_DEMAND_WINDOW_S).min(1.0) * (now - state.demand_mean);
                let sure = sure::sure_part(
                    state.demand,
                    state.demand_mean,
                    now,
                    asked(input, n),
                    slacks[n].mean_service_ms / 1000.0,
                );
                let policy = &self.policies[n];
                Claim { tier: policy.tier, weight: policy.weight, demand: state.demand, sure }
            })
            .collect();
        let demand = claims.iter().map(|c| c.demand).sum();

        // What a job arriving now waits per job ahead of it: one model for every class.
        let (mut rate_sum, mut mean_sum) = (0.0, 0.0);
        for n in &adaptive {
            let r = asked(input, n);
            rate_sum += r;
            mean_sum += r * slacks[n].mean_service_ms;
        }
        let mix_mean = if rate_sum > 0.0 { mean_sum / rate_sum } else { 0.0 };
        let ahead = QueueAhead::new(capacity, mix_mean).filter(|_| source != CapacitySource::MaxRates);
        Reading {
            capacity,
            source,
            workers_seen: self.starts.workers_seen(),
            busy,
            backlogged,
            adaptive,
            claims,
            demand,
            offering,
            running,
            ahead,
        }
    }

    /// The shared law acts on the slack of the class in the most trouble
    /// among those it may act for ([`attribution`]), and moves the capacity
    /// admission may use (`self.shared.rate`); the allocation then decides
    /// whose work that is.
    fn step_law(
        &mut self,
        p: &ControlParams,
        input: &TickInputs,
        slacks: &BTreeMap<String, Slack>,
        reading: &Reading,
        now_ms: u64,
        dt_s: f64,
    ) -> LawStep {
        let Reading { capacity, source, busy, .. } = *reading;
        let pressure_class = attribution::pressure_class(reading, |n| slacks[n].slack_ms / slacks[n].deadline_ms);
        // Until a backlog shows what the backend can do, the capacity is what
        // the classes' max_rates would bring at their measured service times
        // (no limit of its own), and it moves as those are measured, from
        // nothing at the first tick. Outside a cut the law's rate follows
        // it: climbing towards it as if from a cut would hold admission at
        // a sliver of an unknown capacity for the first seconds of a run.
        if !self.shared.rate.is_finite() || (source == CapacitySource::MaxRates && !self.shared.cutting()) {
            self.shared.rate = capacity;
        }
        let admitted_work: f64 = reading.adaptive.iter().map(|n| work(input.admitted, slacks, n)).sum();
        let mut law_move = Move::Stay;
        let mut guard_class = None;
        match &pressure_class {
            Some(class) => {
                let s = &slacks[class];
                let window_ms = input.estimates.get(class).map_or(0, |e| e.window_ms);
                let floor = attribution::cut_floor(reading, self.policies[class].tier, p.headroom);
                if s.slack_ms < 0.0 && idle_backend(p, s, busy, capacity).is_some() {
                    // The model says "refuse" while the backend has room: the
                    // model is wrong (a margin or prior too tight), not the backend.
                    guard_class = Some(class.clone());
                } else if let Some(spare) = self.idle_under_cut(p, input, reading) {
                    law_move = self.shared.lift(spare, capacity);
                } else if let Some(worth) = self.unpaid_cut(p, input, slacks, reading, class, admitted_work) {
                    law_move = self.shared.spare(worth, capacity);
                } else {
                    let admitted = Some(admitted_work);
                    law_move = self.shared.step(p, s, now_ms, dt_s, admitted, window_ms, floor, capacity);
                }
            }
            // Nothing for the law to act for: back towards the capacity at
            // the law's full recovery speed.
            None => {
                let per_s = p.recovery_per_s * capacity;
                if self.shared.rate < capacity {
                    self.shared.rate = (self.shared.rate + per_s * dt_s).min(capacity);
                    law_move = Move::Recover { per_s };
                }
                self.shared.reset_episode();
            }
        }
        // The capacity itself moved (learnt, reconfigured): stay within it.
        self.shared.rate = self.shared.rate.min(capacity);
        LawStep { pressure_class, law_move, guard_class }
    }

    /// The workers the law's cut leaves free at every recent start, while
    /// `admit` refuses no class past the waste tolerance (see
    /// [`Move::Lifted`]).
    fn idle_under_cut(&self, p: &ControlParams, input: &TickInputs, reading: &Reading) -> Option<f64> {
        let wasting = reading.adaptive.iter().any(|n| past_waste_tolerance(p, input, n));
        (self.shared.rate < reading.capacity && !wasting).then(|| self.starts.spare(reading.capacity)).flatten()
    }

    /// The worth of the cut `class`'s slack calls for, when it would cost
    /// the lower tiers more than it could buy (see
    /// [`attribution::cut_worth`]): with negative slack, a first cut on the
    /// whole deficit, whether the law would cut now or keep an earlier cut;
    /// in the dead band, the cut the law holds.
    fn unpaid_cut(
        &self,
        p: &ControlParams,
        input: &TickInputs,
        slacks: &BTreeMap<String, Slack>,
        reading: &Reading,
        class: &str,
        admitted_work: f64,
    ) -> Option<CutWorth> {
        let s = &slacks[class];
        let leaves = if s.slack_ms < 0.0 {
            let factor = Law::cut_factor(p, -s.slack_ms, s.deadline_ms);
            self.shared.cut_to(p, factor, Some(admitted_work))
        } else if self.shared.rate < reading.capacity && s.slack_ms < Law::dead_band_ms(p, s) {
            self.shared.rate
        } else {
            return None;
        };
        if !s.has_evidence() {
            return None;
        }
        let worth = attribution::cut_worth(reading, self.policies[class].tier, leaves, |n| chances(input, slacks, n))?;
        (!worth.pays()).then_some(worth)
    }

    /// What admission may use after the law and the static classes, shared
    /// out among the adaptive classes; records the tick's [`CapacityPlan`].
    fn share_out(
        &mut self,
        p: &ControlParams,
        input: &TickInputs,
        slacks: &BTreeMap<String, Slack>,
        reading: &Reading,
        pressure_class: Option<String>,
    ) -> Sharing {
        let Reading { capacity, source, demand, .. } = *reading;
        let effective = self.shared.rate;
        let static_work: f64 = self
            .policies
            .iter()
            .filter(|(_, pol)| matches!(pol.budget, Budget::Static { .. }))
            .map(|(n, _)| work(input.admitted, slacks, n))
            .sum();
        let available = (effective - static_work).max(0.0);
        // A queue standing past the room while the rates see no
        // overload is drained out of what admission may use (see `hold`).
        // Where the rates do see it, the allotments already cut, and the
        // hold would answer the same queue twice on lagging readings.
        let hold = match source {
            CapacitySource::MaxRates => Hold::default(),
            _ if demand > available => Hold::default(),
            _ => Hold::measure(
                reading.offering.iter().filter(|n| slacks[*n].has_evidence()).map(|n| slacks[n].wait_reading()),
                capacity,
            ),
        };
        let admission = hold.admission(available);
        // With no queue to buffer them, budgets carry headroom so that
        // arrivals' randomness does not idle workers; a queue being drained
        // is buffer enough.
        let headroom = if hold.draining() { 0.0 } else { p.headroom };
        // The allotments bind only with overload in evidence (a backlog, or
        // a law that has cut): a demand estimate above capacity with no queue
        // behind it is noise, and refusing on it would cost work that fits.
        let binding = demand > admission && (reading.backlogged || effective < capacity);
        // Each class's share against the others' sure demand (see
        // `allocate`), less what `admit` would refuse of it (see `share`).
        let plain = allocate(admission, &reading.claims);
        let against_sure = allot(admission, &reading.claims);
        let top_wasting_tier = reading
            .adaptive
            .iter()
            .zip(&reading.claims)
            .filter(|(n, _)| past_waste_tolerance(p, input, n))
            .map(|(_, c)| c.tier)
            .min();
        let allocation = reading
            .adaptive
            .iter()
            .zip(&reading.claims)
            .zip(plain.into_iter().zip(against_sure))
            .map(|((n, claim), (plain, against_sure))| {
                let waste = share::Waste {
                    past_tolerance: past_waste_tolerance(p, input, n),
                    higher_tier_past_tolerance: top_wasting_tier.is_some_and(|t| t < claim.tier),
                    refused_work: work(input.wasted, slacks, n),
                };
                let share = share::share(plain, against_sure, waste);
                (n.clone(), Allotment { share, beyond_chance: (share - plain).max(0.0) })
            })
            .collect();
        self.plan = CapacityPlan {
            capacity,
            source: Some(source),
            effective,
            busy: reading.busy,
            demand,
            backlogged: reading.backlogged,
            pressure_class,
            hold,
        };
        Sharing { admission, headroom, binding, allocation }
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

/// What the law did on one tick, and for whom.
struct LawStep {
    pressure_class: Option<String>,
    law_move: Move,
    /// The class the sanity guard kept the law from cutting for.
    guard_class: Option<String>,
}

/// What admission may use on one tick, and each adaptive class's share of it.
struct Sharing {
    /// Worker-seconds per second.
    admission: f64,
    /// The budgets' headroom over what an allotment finishes.
    headroom: f64,
    /// Demand exceeds what admission may use, with overload in evidence.
    binding: bool,
    /// Per adaptive class.
    allocation: BTreeMap<String, Allotment>,
}

/// One class's allotment, worker-seconds per second.
#[derive(Clone, Copy, Debug)]
struct Allotment {
    share: f64,
    /// Of the share, what the other classes' bursts of chance would have
    /// taken had their whole demand been counted (see `allocate`).
    beyond_chance: f64,
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
