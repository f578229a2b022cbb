//! How each class stands beside the others on one tick: the workers it must
//! leave free for higher tiers ([`super::reserve`]), the higher-tier class
//! whose jobs it yields to, and the wait limit a tighter class of its own
//! tier sets ([`super::wait_limit`]).
//!
//! A lower tier yields to a class whose jobs are losing their chance to the
//! wait: always to a critical class, the tier the objective puts first;
//! to a class of a middle tier only while the yield pays as a cut for it
//! must ([`super::attribution::cut_worth`], every lower-tier job turned
//! away): a class whose own service spends most of its deadline reads as
//! losing its chance at waits of a few tens of ms, and yielding to it held
//! up a sheddable tier for next to nothing it won back.

use std::collections::BTreeMap;

use super::params::ClassPolicy;
use super::plan::Reading;
use super::reserve::Reserve;
use super::slack::Slack;
use super::tier::Tier;
use super::wait_limit::{WaitLimit, Waiting, wait_limit};

pub(super) struct Neighbours<'a> {
    reserves: BTreeMap<&'a str, Reserve>,
    /// Offering classes whose jobs are losing their on-time chance to the
    /// wait (`p_on_time` below the threshold) and that the lower tiers yield
    /// to, with their tiers.
    yielded_to: Vec<(Tier, &'a str)>,
    /// Every class as the wait limits see it.
    as_waiting: BTreeMap<&'a str, Waiting<'a>>,
    /// The offering classes among those, which limit their tiers' more
    /// patient classes; none while the capacity is unknown.
    limiting: Vec<Waiting<'a>>,
    /// The wait for two starts: how short a wait limit may be.
    two_starts_ms: f64,
}

impl<'a> Neighbours<'a> {
    /// `yield_pays(tier)`: a yield to a class of `tier` wins back at least
    /// what it costs the tiers below.
    pub fn new(
        policies: &'a BTreeMap<String, ClassPolicy>,
        slacks: &BTreeMap<String, Slack>,
        reading: &'a Reading,
        yield_pays: impl Fn(Tier) -> bool,
    ) -> Self {
        let offering = |n: &String| reading.offering.contains(n);
        let reserves = reading
            .adaptive
            .iter()
            .filter(|_| reading.known())
            .filter_map(|n| {
                let tier = policies[n].tier;
                let higher = reading.adaptive.iter().zip(&reading.claims).filter(|(m, c)| c.tier < tier && offering(m));
                let top = higher.clone().map(|(_, c)| c.tier).min()?;
                let least_slack = higher.clone().map(|(m, _)| slacks[m].slack_ms).fold(f64::INFINITY, f64::min);
                let higher_sure: f64 = higher.clone().map(|(_, c)| c.sure).sum();
                let higher: Vec<(f64, f64)> = higher.map(|(m, c)| (c.demand, slacks[m].mean_service_ms)).collect();
                let reserve = Reserve::for_higher(reading.capacity, &higher, slacks[n].mean_service_ms, top)?;
                // The higher tiers may wait for starts within their slack
                // while their sure demand fits the workers (see `reserve`).
                let reserve = match reading.ahead {
                    Some(q) if higher_sure < reading.capacity => {
                        let per_start_ms = q.mean_service_ms.max(slacks[n].deadline_ms) / q.workers;
                        reserve.less_waited(least_slack, per_start_ms)?
                    }
                    _ => reserve,
                };
                Some((n.as_str(), reserve))
            })
            .collect();
        let pressed: Vec<(Tier, &str)> = reading
            .offering
            .iter()
            .filter(|n| slacks[*n].has_evidence() && slacks[*n].p_on_time < slacks[*n].threshold)
            .map(|n| (policies[n].tier, n.as_str()))
            .collect();
        let yielded_to =
            pressed.iter().copied().filter(|(tier, _)| *tier == Tier::Critical || yield_pays(*tier)).collect();
        let as_waiting: BTreeMap<&str, Waiting> = policies
            .iter()
            .map(|(n, policy)| {
                let s = &slacks[n];
                let waiting = Waiting {
                    name: n.as_str(),
                    tier: policy.tier,
                    room_ms: s.room_ms(),
                    pressed: pressed.iter().any(|(_, m)| *m == n),
                    worth: Waiting::worth(policy.weight, s.best_chance, s.mean_service_ms),
                };
                (n.as_str(), waiting)
            })
            .collect();
        let limiting =
            reading.offering.iter().filter(|_| reading.ahead.is_some()).map(|n| as_waiting[n.as_str()]).collect();
        let two_starts_ms = reading.ahead.map_or(0.0, |q| q.wait_ms(1.0, None));
        Neighbours { reserves, yielded_to, as_waiting, limiting, two_starts_ms }
    }

    /// Workers `class`'s jobs must leave free; none for the highest tier with work.
    pub fn reserve(&self, class: &str) -> Option<Reserve> {
        self.reserves.get(class).copied()
    }

    /// A class of a higher tier than `tier` whose jobs are losing their
    /// chance to the wait, and that this tier yields to.
    pub fn yields_to(&self, tier: Tier) -> Option<String> {
        self.yielded_to.iter().find(|(t, _)| *t < tier).map(|(_, n)| n.to_string())
    }

    /// The wait limit `class`'s tier sets it, `binding`: the allotments bind.
    pub fn wait_limit(&self, class: &str, binding: bool) -> Option<WaitLimit> {
        wait_limit(&self.as_waiting[class], &self.limiting, binding, self.two_starts_ms)
    }
}
