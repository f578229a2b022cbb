//! The daemon's per-tick work, in one place the binary and the tests share:
//! telemetry in, estimates, the controller, budgets out to the maps, and the
//! heartbeat.
//!
//! Nothing here reads a clock either: [`ControlLoop::tick`] takes `now` (for
//! the estimators and the law) and the heartbeat value (CLOCK_MONOTONIC ns,
//! for the fast path), so a test can drive simulated time against a real
//! datapath or the in-memory fast path.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    sync::Arc,
    time::Duration,
};

use shedder_common::{
    bucket::{BucketParams, milli_tokens},
    maps::counted_since,
};
use tracing::warn;

use crate::{
    admit::ledger::AdmissionLedger,
    config::{ControlSetup, Plan},
    control::{Controller, Decision, DecisionLog, InvalidControl, TickInputs},
    estimate::{Estimators, InvalidParams},
    fastpath::{Fastpath, FastpathError},
    metrics::distributions::Distributions,
    telemetry::{ClassObservations, Observation, gpu::GpuSource, samples::SampleInbox},
    tenant::share::{ConfiguredShares, TenantLoad, TenantPolicy, TenantShares, lend},
};

/// How far back the per-class rates are measured.
const RATE_HORIZON: Duration = Duration::from_secs(1);
/// A tenant's demand also reads its rate over the last this many ticks, so
/// that a rise shows (and its share follows, locally and in the fleet)
/// within two ticks instead of after the horizon's second...
const DEMAND_RISE_TICKS: u32 = 2;
/// ...when its count there exceeds what the horizon's rate predicts by more
/// than this many standard deviations (of a Poisson count): less is chance,
/// and taking the larger of two noisy readings would inflate every demand.
const DEMAND_RISE_SIGMAS: f64 = 3.0;
/// A fall is judged apart: the horizon's rate falls with the demand, so a
/// fall is read against the stretch before it, split where it shows most,
/// with at least this many ticks on either side of the split...
const DEMAND_FALL_TICKS: u32 = 2;
/// ...and its count is this many standard deviations below its share of
/// the horizon's (given the horizon's count, a binomial). 100/s falling to
/// 40/s shows after about three 100 ms ticks.
const DEMAND_FALL_SIGMAS: f64 = 3.0;
/// Recent decisions kept for the control socket's `decisions` op.
const DECISIONS_KEPT: usize = 1024;

pub struct ControlLoop {
    fastpath: Box<dyn Fastpath>,
    /// The operator's plan with the controller's current rates written in.
    plan: Plan,
    estimators: Estimators,
    controller: Controller,
    inbox: Arc<SampleInbox>,
    gpu: Box<dyn GpuSource>,
    admitted: CounterRates,
    offered: CounterRates,
    wasted: CounterRates,
    trimmed: CounterRates,
    admissions: AdmissionLedger,
    last_tick: Option<Duration>,
    decisions: DecisionLog,
    distributions: Distributions,
    tenants: Vec<TenantPolicy>,
    shares: Box<dyn TenantShares>,
    tenant_offered: CounterRates,
    tenant_admitted: CounterRates,
}

impl ControlLoop {
    /// Takes over a fast path that already holds `plan`.
    pub fn new(fastpath: Box<dyn Fastpath>, plan: Plan, setup: ControlSetup, gpu: Box<dyn GpuSource>) -> Self {
        let inbox = Arc::new(SampleInbox::with_classes(plan.class_names.iter().cloned()));
        Self {
            fastpath,
            plan,
            estimators: setup.estimators,
            controller: setup.controller,
            inbox,
            gpu,
            admitted: CounterRates::default(),
            offered: CounterRates::default(),
            wasted: CounterRates::default(),
            trimmed: CounterRates::default(),
            admissions: AdmissionLedger::default(),
            last_tick: None,
            decisions: DecisionLog::new(DECISIONS_KEPT),
            distributions: Distributions::default(),
            tenants: setup.tenants,
            shares: Box::new(ConfiguredShares),
            tenant_offered: CounterRates::default(),
            tenant_admitted: CounterRates::default(),
        }
    }

    /// Takes each tenant's share from `shares` instead of its configured rate.
    pub fn set_tenant_shares(&mut self, shares: Box<dyn TenantShares>) {
        self.shares = shares;
    }

    /// Where pushed job samples go (the control socket, tests).
    pub fn inbox(&self) -> Arc<SampleInbox> {
        self.inbox.clone()
    }

    pub fn fastpath(&self) -> &dyn Fastpath {
        self.fastpath.as_ref()
    }

    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    pub fn estimators(&self) -> &Estimators {
        &self.estimators
    }

    /// What job-level admission decided (the `admit` op writes here).
    pub fn admissions(&self) -> &AdmissionLedger {
        &self.admissions
    }

    pub fn decisions(&self) -> &DecisionLog {
        &self.decisions
    }

    /// The metrics' distributions, fed from every observation.
    pub fn distributions(&self) -> &Distributions {
        &self.distributions
    }

    /// Switches to a new configuration, which [`crate::config::Config::compile`]
    /// has validated: the estimators and the controller are reconfigured, so
    /// classes that stay keep what they learnt, and the maps take the new
    /// plan. All or nothing: the new state is built beside the running one
    /// and taken only once the fast path holds the plan, so a map write the
    /// kernel refuses leaves the loop, and the maps, as they were.
    pub fn reconfigure(&mut self, plan: Plan, setup: ControlSetup) -> Result<(), ControlLoopError> {
        let mut controller = self.controller.clone();
        controller.reconfigure(setup.controller.params().clone(), setup.controller.policies().clone())?;
        let mut estimators = self.estimators.clone();
        estimators.reconfigure(setup.estimators.params().clone(), setup.priors)?;
        let mut plan = plan;
        // Rates the controller keeps override the new plan's starting rates.
        write_rates(&controller, &mut plan);
        if let Err(error) = self.fastpath.apply(&plan) {
            // A refused write may have changed some maps before it failed.
            if let Err(restoring) = self.fastpath.apply(&self.plan) {
                warn!("putting the running plan back after a refused reconfiguration: {restoring}");
            }
            return Err(error.into());
        }
        self.controller = controller;
        self.estimators = estimators;
        self.plan = plan;
        self.tenants = setup.tenants;
        self.inbox.set_classes(self.plan.class_names.iter().cloned());
        Ok(())
    }

    /// The plan the maps hold, the controller's rates included.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Feeds observations that arrived outside the inbox (scrapes).
    pub fn observe(&mut self, now: Duration, batches: &[ClassObservations]) {
        for batch in batches {
            self.distributions.observe(batch);
            if let Err(e) = self.estimators.observe(now, batch) {
                warn!("dropping observations: {e}");
            }
        }
    }

    /// One controller tick. Returns the budget changes it made (each already
    /// logged), after writing them to the maps.
    pub fn tick(&mut self, now: Duration, heartbeat_ns: u64) -> Result<Vec<Decision>, ControlLoopError> {
        let pushed = self.inbox.drain();
        self.observe(now, &pushed);
        let refused: Vec<ClassObservations> = self
            .admissions
            .take_refused_waits()
            .into_iter()
            .map(|(class, ms)| ClassObservations { class, observations: vec![Observation::QueueAge { ms, count: 1 }] })
            .collect();
        self.observe(now, &refused);
        let gpu = self.gpu.read().unwrap_or_else(|e| {
            warn!("reading GPU telemetry: {e}");
            Vec::new()
        });
        let snapshots = self.fastpath.class_snapshots()?;
        // Marked connections were admitted too (degraded, but they take a worker).
        let admitted_now = snapshots.iter().map(|s| (s.name.clone(), s.counters.admitted + s.counters.marked));
        let admitted = self.admitted.update(now, admitted_now.collect());
        // Demand is the connections asked for: a dropped SYN sent again is not another.
        let offered =
            self.offered.update(now, snapshots.iter().map(|s| (s.name.clone(), s.counters.first_attempts())).collect());
        let wasted = self.wasted.update(now, self.admissions.refused());
        let trimmed = self.trimmed.update(now, self.admissions.refused_at_start());
        self.admissions.decay(self.last_tick.map_or(0.0, |t| now.saturating_sub(t).as_secs_f64()));
        self.last_tick = Some(now);
        let estimates = self.estimators.estimate_all(now);
        let starts = self.admissions.take_starts();
        let inputs = TickInputs {
            estimates: &estimates,
            gpu: &gpu,
            admitted: &admitted,
            offered: &offered,
            wasted: &wasted,
            trimmed: &trimmed,
            starts: &starts,
        };
        let decisions = self.controller.tick(now, &inputs);
        let lent = self.lend_tenant_rates(now)?;
        if !decisions.is_empty() || lent {
            self.publish_rates()?;
        }
        for decision in &decisions {
            decision.emit();
        }
        self.decisions.extend(decisions.iter().cloned());
        self.fastpath.write_heartbeat(heartbeat_ns)?;
        Ok(decisions)
    }

    /// Sets each tenant's bucket rate in the plan from its share and what the
    /// tenants offered ([`lend`]); true when a rate changed.
    fn lend_tenant_rates(&mut self, now: Duration) -> Result<bool, ControlLoopError> {
        if self.tenants.is_empty() {
            return Ok(false);
        }
        let snapshots = self.fastpath.tenant_snapshots()?;
        let count = |f: fn(&shedder_common::maps::TenantCounters) -> u64| {
            snapshots.iter().map(|s| (s.name.clone(), f(&s.counters))).collect()
        };
        let mut offered = self.tenant_offered.update(now, count(|c| c.first_attempts()));
        // Demand follows a step within a few ticks, either way: a tenant
        // whose clients step up must not wait a second for its share, nor
        // the others for what one that stepped down no longer uses.
        let tick = Duration::from_millis(self.controller.params().tick_ms);
        let risen = self.tenant_offered.risen(&offered, tick * DEMAND_RISE_TICKS, DEMAND_RISE_SIGMAS);
        let fallen = self.tenant_offered.fallen(tick * DEMAND_FALL_TICKS, DEMAND_FALL_SIGMAS);
        let stepped: BTreeSet<String> = risen.keys().chain(fallen.keys()).cloned().collect();
        offered.extend(risen);
        offered.extend(fallen);
        let admitted_totals: BTreeMap<String, u64> = count(|c| c.admitted);
        let admitted = self.tenant_admitted.update(now, admitted_totals.clone());
        let loads: Vec<TenantLoad> = self
            .tenants
            .iter()
            .map(|t| TenantLoad {
                name: t.name.clone(),
                configured_rate: t.rate,
                weight: t.weight,
                offered: offered.get(&t.name).copied(),
                admitted: admitted.get(&t.name).copied(),
                admitted_total: admitted_totals.get(&t.name).copied().unwrap_or(0),
                stepped: stepped.contains(&t.name),
            })
            .collect();
        let shares = self.shares.shares(&loads);
        if shares.len() != loads.len() {
            return Err(ControlLoopError::ShareCount { shares: shares.len(), tenants: loads.len() });
        }
        let weights: Vec<f64> = loads.iter().map(|t| t.weight).collect();
        let demand: Vec<Option<f64>> = loads.iter().map(|t| t.offered).collect();
        let borrows: Vec<bool> = loads.iter().map(|t| self.shares.may_borrow(&t.name)).collect();
        let rates = lend(&shares, &weights, &demand, &borrows);
        let mut changed = false;
        for (slot, rate) in rates.into_iter().enumerate() {
            let old = self.plan.tenants[slot];
            let new = BucketParams::new(milli_tokens(rate), old.burst_milli, old.cost_milli);
            changed |= new != old;
            self.plan.tenants[slot] = new;
        }
        Ok(changed)
    }

    /// Takes the tenants' shares again at once, between ticks (a fleet
    /// whose shares changed must have them in force before it confirms).
    pub fn retake_tenant_shares(&mut self, now: Duration) -> Result<(), ControlLoopError> {
        if self.lend_tenant_rates(now)? {
            self.publish_rates()?;
        }
        Ok(())
    }

    /// Writes the controller's rates into the plan and the maps (which only
    /// change where a rate did).
    fn publish_rates(&mut self) -> Result<(), ControlLoopError> {
        write_rates(&self.controller, &mut self.plan);
        Ok(self.fastpath.apply(&self.plan)?)
    }
}

/// Writes the rates `controller` keeps into `plan`'s buckets; a class it does
/// not control keeps the plan's rate.
fn write_rates(controller: &Controller, plan: &mut Plan) {
    for (slot, name) in plan.class_names.iter().enumerate() {
        let Some(rate) = controller.rate(name) else { continue };
        let class = &mut plan.classes[slot];
        let old = class.bucket;
        class.bucket = BucketParams::new(milli_tokens(rate), old.burst_milli, old.cost_milli);
    }
}

/// Why a tick, or a reconfiguration, of the control loop failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlLoopError {
    #[error(transparent)]
    Fastpath(#[from] FastpathError),
    #[error(transparent)]
    Control(#[from] InvalidControl),
    #[error(transparent)]
    Estimator(#[from] InvalidParams),
    #[error("the tenant share source gave {shares} shares for {tenants} tenants")]
    ShareCount { shares: usize, tenants: usize },
}

/// Per-class rates (per second) of a growing counter, from its snapshots.
#[derive(Default)]
struct CounterRates {
    history: VecDeque<(Duration, BTreeMap<String, u64>)>,
}

impl CounterRates {
    /// Records a snapshot and returns the rates over about the last
    /// [`RATE_HORIZON`]; empty until half of it has been seen.
    fn update(&mut self, now: Duration, counts: BTreeMap<String, u64>) -> BTreeMap<String, f64> {
        self.history.push_back((now, counts));
        while self.history.len() > 2 && now.saturating_sub(self.history[1].0) >= RATE_HORIZON {
            self.history.pop_front();
        }
        let ((then, old), (_, new)) = (&self.history[0], &self.history[self.history.len() - 1]);
        let span = now.saturating_sub(*then).as_secs_f64();
        if span < RATE_HORIZON.as_secs_f64() / 2.0 {
            return BTreeMap::new();
        }
        // A class first counted since `then` started from zero.
        new.iter()
            .map(|(class, n)| (class.clone(), counted_since(*n, old.get(class).copied().unwrap_or(0)) as f64 / span))
            .collect()
    }

    /// Counters whose count over the newest stretch of at least `span`
    /// exceeds what their `horizon` rate predicts by more than `sigmas`
    /// standard deviations of a Poisson count, with their rate over that
    /// stretch; the others are left out.
    fn risen(&self, horizon: &BTreeMap<String, f64>, span: Duration, sigmas: f64) -> BTreeMap<String, f64> {
        let Some((now, new)) = self.history.back() else { return BTreeMap::new() };
        let Some((then, old)) = self.history.iter().rev().find(|(t, _)| now.saturating_sub(*t) >= span) else {
            return BTreeMap::new();
        };
        let secs = now.saturating_sub(*then).as_secs_f64();
        new.iter()
            .filter_map(|(name, n)| {
                let expected = horizon.get(name)? * secs;
                let events = n.saturating_sub(old.get(name).copied().unwrap_or(0)) as f64;
                (events - expected > sigmas * expected.max(1.0).sqrt()).then(|| (name.clone(), events / secs))
            })
            .collect()
    }

    /// Counters whose count since some snapshot at least `span` back (with
    /// at least `span` of history before it) falls short of that stretch's
    /// share of the whole history's count by more than `sigmas` standard
    /// deviations (given the count, equal rates would split it in proportion
    /// to time: a binomial), with their rate over the stretch that shows the
    /// fall most; the others are left out.
    fn fallen(&self, span: Duration, sigmas: f64) -> BTreeMap<String, f64> {
        let (Some((now, new)), Some((start, first))) = (self.history.back(), self.history.front()) else {
            return BTreeMap::new();
        };
        let whole = now.saturating_sub(*start).as_secs_f64();
        let splits: Vec<(f64, &BTreeMap<String, u64>)> = self
            .history
            .iter()
            .filter(|(at, _)| now.saturating_sub(*at) >= span && at.saturating_sub(*start) >= span)
            .map(|(at, snapshot)| (now.saturating_sub(*at).as_secs_f64(), snapshot))
            .collect();
        let count = |snapshot: &BTreeMap<String, u64>, name: &str| snapshot.get(name).copied().unwrap_or(0) as f64;
        new.keys()
            .filter_map(|name| {
                let total = count(new, name) - count(first, name);
                splits
                    .iter()
                    .map(|(secs, snapshot)| {
                        let after = count(new, name) - count(snapshot, name);
                        let share = secs / whole;
                        let z = (after - total * share) / (total * share * (1.0 - share)).max(1.0).sqrt();
                        (z, after / secs)
                    })
                    .filter(|(z, _)| *z < -sigmas)
                    .min_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|(_, rate)| (name.clone(), rate))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: u64) -> BTreeMap<String, u64> {
        [("a".to_string(), n)].into()
    }

    #[test]
    fn admitted_rate_is_measured_over_about_a_second() {
        let mut rates = CounterRates::default();
        assert!(rates.update(Duration::ZERO, counts(0)).is_empty());
        assert!(rates.update(Duration::from_millis(100), counts(10)).is_empty());
        let mut last = BTreeMap::new();
        for tick in 2..=30u64 {
            last = rates.update(Duration::from_millis(tick * 100), counts(tick * 10));
        }
        // 10 per 100 ms is 100/s, whatever the window's exact length.
        assert!((last["a"] - 100.0).abs() < 1e-9, "{last:?}");
        assert!(rates.history.len() <= 12, "history is trimmed to the horizon");
    }

    #[test]
    fn a_rise_shows_in_the_recent_rate_within_the_span() {
        let span = Duration::from_millis(200);
        let mut rates = CounterRates::default();
        // 100/s for two seconds (with 14 instead of 10 in one tick: chance)...
        for tick in 0..=20u64 {
            let horizon =
                rates.update(Duration::from_millis(tick * 100), counts(tick * 10 + 4 * u64::from(tick >= 15)));
            assert!(rates.risen(&horizon, span, 3.0).is_empty(), "tick {tick}: no rise");
        }
        // ...then two ticks at 1000/s: the horizon still reads under 300/s.
        rates.update(Duration::from_millis(2_100), counts(304));
        let horizon = rates.update(Duration::from_millis(2_200), counts(404));
        assert!(horizon["a"] < 300.0, "{horizon:?}");
        let risen = rates.risen(&horizon, span, 3.0);
        assert!((risen["a"] - 1000.0).abs() < 1e-9, "{risen:?}");
        // No stretch that long yet: nothing.
        assert!(CounterRates::default().risen(&horizon, span, 3.0).is_empty());
    }

    #[test]
    fn a_fall_shows_within_a_few_ticks_and_chance_seldom_reads_as_one() {
        use rand::{SeedableRng, rngs::SmallRng};
        use statrs::distribution::{Discrete, Poisson};
        let (tick, span) = (Duration::from_millis(100), Duration::from_millis(200));
        let mut rng = SmallRng::seed_from_u64(7);
        // A Poisson count by inversion of its distribution function.
        let mut draw = |mean: f64| {
            let poisson = Poisson::new(mean).unwrap();
            let u: f64 = rand::RngExt::random(&mut rng);
            let (mut k, mut cdf) = (0u64, poisson.pmf(0));
            while cdf < u {
                k += 1;
                cdf += poisson.pmf(k);
            }
            k
        };
        let (mut steady_ticks, mut false_falls, mut after) = (0, 0, Vec::new());
        for _ in 0..50 {
            // 100/s for 5 s, then 40/s for a second.
            let (mut rates, mut total, mut seen) = (CounterRates::default(), 0, None);
            for t in 0..=60u32 {
                total += draw(if t <= 50 { 10.0 } else { 4.0 });
                rates.update(tick * t, counts(total));
                let fallen = rates.fallen(span, 3.0);
                if (10..=50).contains(&t) {
                    steady_ticks += 1;
                    false_falls += usize::from(!fallen.is_empty());
                } else if t > 50 && seen.is_none() {
                    seen = fallen.get("a").map(|rate| (t - 50, *rate));
                }
            }
            after.push(seen.expect("the fall shows within the horizon"));
        }
        let mut ticks: Vec<u32> = after.iter().map(|(t, _)| *t).collect();
        ticks.sort();
        assert!(ticks[ticks.len() / 2] <= 3, "median ticks to see the fall: {after:?}");
        let mut read: Vec<f64> = after.iter().map(|(_, rate)| *rate).collect();
        read.sort_by(f64::total_cmp);
        assert!((read[read.len() / 2] - 40.0).abs() < 10.0, "the rate read is the new one: {after:?}");
        assert!(false_falls * 100 < steady_ticks, "{false_falls} false falls in {steady_ticks} steady ticks");
    }
}
