//! The capacity model's reading of one tick: what the backend can do and
//! what each adaptive class claims of it (`Reading`), and the plan that
//! decisions and `status` report ([`CapacityPlan`]).

use serde::Serialize;

use super::ahead::QueueAhead;
use super::allocate::Claim;
use super::capacity::CapacitySource;
use super::hold::Hold;
use super::tier::Tier;

/// The capacity model at the last tick, for decisions and `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CapacityPlan {
    /// What the backend can do, worker-seconds per second, and whence.
    pub capacity: f64,
    pub source: Option<CapacitySource>,
    /// What the law leaves for admission after its cuts (≤ `capacity`).
    pub effective: f64,
    /// Workers in use, worker-seconds per second: scraped running counts,
    /// else completions × mean service (see [`super::capacity::busy_workers`]).
    pub busy: f64,
    /// Work offered per second by the controlled classes.
    pub demand: f64,
    pub backlogged: bool,
    /// The class whose slack the law acted on.
    pub pressure_class: Option<String>,
    /// The queue hold: a queue standing past the room while the rates see
    /// no overload is drained.
    pub hold: Hold,
}

impl CapacityPlan {
    /// The capacity, when there is a figure. With none (no controlled class,
    /// nothing configured or measured yet) the model floors it at the
    /// smallest positive number, so that nothing divides by zero; that is
    /// not a figure to show anyone.
    pub fn known_capacity(&self) -> Option<f64> {
        (self.capacity > f64::MIN_POSITIVE).then_some(self.capacity)
    }
}

/// What one tick's measurements say of the backend, before the law acts.
pub(super) struct Reading {
    /// Worker-seconds per second, and whence.
    pub capacity: f64,
    pub source: CapacitySource,
    /// The most jobs seen in service at once, the starting one counted, when
    /// the server asks `admit` as each job starts (it says how many were).
    pub workers_seen: Option<f64>,
    /// Workers in use, worker-seconds per second.
    pub busy: f64,
    /// Some class's queue stands past its backlog mark.
    pub backlogged: bool,
    /// The adaptive classes, in class order, and what each claims of the
    /// backend (in the same order).
    pub adaptive: Vec<String>,
    pub claims: Vec<Claim>,
    /// Work they offer together, worker-seconds per second.
    pub demand: f64,
    /// Those with work offered (or let in) in the last second: the ones
    /// whose running jobs, rooms, waits and reserves count now (a decayed
    /// demand never quite reaches zero).
    pub offering: Vec<String>,
    /// Jobs in service, when every offering class has a fresh running gauge.
    pub running: Option<f64>,
    /// What a job arriving now waits per job ahead of it: one model for
    /// every class; none until the capacity is known.
    pub ahead: Option<QueueAhead>,
}

impl Reading {
    /// Each job is judged on the wait it had, as it starts.
    pub fn judged_at_start(&self) -> bool {
        self.workers_seen.is_some()
    }

    /// The capacity is not read too high: configured, or learnt and seen
    /// filled (as many jobs in service at once as it has workers, to within
    /// one: a learnt figure is never below the workers seen, so what is
    /// left of it is a fraction of one worker).
    pub fn capacity_trusted(&self) -> bool {
        match self.source {
            CapacitySource::Configured => true,
            CapacitySource::Learnt => self.workers_seen.is_some_and(|seen| seen + 1.0 > self.capacity),
            CapacitySource::MaxRates => false,
        }
    }

    /// The capacity comes from the backend (configured, learnt or counted),
    /// not from the classes' own max_rates.
    pub fn known(&self) -> bool {
        self.source != CapacitySource::MaxRates
    }

    /// An adaptive class's tier.
    pub fn tier_of(&self, class: &str) -> Option<Tier> {
        self.adaptive.iter().zip(&self.claims).find(|(n, _)| *n == class).map(|(_, c)| c.tier)
    }

    /// What the classes of the tiers `keep` picks claim, worker-seconds/s.
    pub fn tier_demand(&self, keep: impl Fn(Tier) -> bool) -> f64 {
        self.claims.iter().filter(|c| keep(c.tier)).map(|c| c.demand).sum()
    }
}
