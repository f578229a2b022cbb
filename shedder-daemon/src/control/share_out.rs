//! A step of the tick, after the law's: what admission may use after the
//! law, the static classes and the queue hold, shared out among the
//! adaptive classes by tier and weight ([`super::allocate`],
//! [`super::share`]).

use std::collections::BTreeMap;

use super::allocate::{allocate, allot};
use super::capacity::CapacitySource;
use super::hold::Hold;
use super::params::{Budget, ControlParams};
use super::plan::{CapacityPlan, Reading};
use super::share;
use super::slack::Slack;
use super::{Controller, TickInputs, past_waste_tolerance, work};

impl Controller {
    /// What admission may use after the law and the static classes, shared
    /// out among the adaptive classes; records the tick's [`CapacityPlan`].
    pub(super) fn share_out(
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
}

/// What admission may use on one tick, and each adaptive class's share of it.
pub(super) struct Sharing {
    /// Worker-seconds per second.
    pub admission: f64,
    /// The budgets' headroom over what an allotment finishes.
    pub headroom: f64,
    /// Demand exceeds what admission may use, with overload in evidence.
    pub binding: bool,
    /// Per adaptive class.
    pub allocation: BTreeMap<String, Allotment>,
}

/// One class's allotment, worker-seconds per second.
#[derive(Clone, Copy, Debug)]
pub(super) struct Allotment {
    pub share: f64,
    /// Of the share, what the other classes' bursts of chance would have
    /// taken had their whole demand been counted (see `allocate`).
    pub beyond_chance: f64,
}
