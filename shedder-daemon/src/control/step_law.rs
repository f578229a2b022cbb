//! A step of the tick, after the backend is read: the shared law acts for
//! the class in the most trouble among those it may act for, unless the
//! sanity guard, a cut the workers show too deep, or a cut that would not
//! pay says otherwise; it moves the capacity admission may use.

use std::collections::BTreeMap;

use super::attribution::{self, CutWorth};
use super::capacity::CapacitySource;
use super::idle::idle_backend;
use super::law::{Law, Move};
use super::params::ControlParams;
use super::plan::Reading;
use super::slack::Slack;
use super::{Controller, TickInputs, chances, past_waste_tolerance, work};

impl Controller {
    /// The shared law acts on the slack of the class in the most trouble
    /// among those it may act for ([`attribution`]), and moves the capacity
    /// admission may use (`self.shared.rate`); the allocation then decides
    /// whose work that is.
    pub(super) fn step_law(
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
}

/// What the law did on one tick, and for whom.
pub(super) struct LawStep {
    pub pressure_class: Option<String>,
    pub law_move: Move,
    /// The class the sanity guard kept the law from cutting for.
    pub guard_class: Option<String>,
}
