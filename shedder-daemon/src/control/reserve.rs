//! Workers kept free for higher tiers: a lower tier's job may not take the
//! last few free workers while a higher tier has work coming.
//!
//! Budgets share the backend by rates over a second or so, but a worker is
//! held for a job's whole service time. When a lower tier's jobs turn long
//! (a tail of 4 s jobs behind a 1 s deadline), a burst of them can take
//! every worker at once, and the higher tier's jobs wait for the first to
//! finish, past their deadlines, before any rate has moved. So job-level
//! admission keeps a reserve: a job of a lower tier starts only while, with
//! it, at least `R` workers stay free. The higher tier's own jobs count as
//! busy too, so it always has `R` spare workers beyond what it runs now.
//!
//! `R = max(1, ⌊√m⌋)`, `m` the higher tiers' demand in workers (by Little's
//! law, how many of their jobs are in service on average). The number of a
//! Poisson stream's jobs in service varies by about `√m` around `m`: the
//! reserve covers most of a rise of one standard deviation at once, and the
//! queue the rest (rounded down, so that the noise of a demand estimate
//! does not tip it over: each reserved worker is one the lower tier loses
//! while the backend is full). It costs the lower tier at most `R` workers,
//! and only while the backend is full.

use serde::Serialize;

use super::tier::Tier;

/// The reserve a lower tier's jobs must leave free.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Reserve {
    /// The backend's workers (its capacity in worker-seconds per second).
    pub capacity: f64,
    /// Workers kept free for the higher tiers.
    pub workers: f64,
    /// The highest tier it is kept for.
    pub for_tier: Tier,
}

impl Reserve {
    /// The reserve for a class below tiers that bring `higher_demand`
    /// worker-seconds per second, or None when they bring nothing.
    pub fn for_demand(capacity: f64, higher_demand: f64, for_tier: Tier) -> Option<Reserve> {
        (higher_demand > 0.0 && capacity.is_finite() && capacity > 0.0).then(|| Reserve {
            capacity,
            workers: higher_demand.sqrt().floor().max(1.0),
            for_tier,
        })
    }

    /// May a job start with `running` jobs in service (not counting it)?
    pub fn allows(&self, running: f64) -> bool {
        running + 1.0 <= self.capacity - self.workers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_about_one_deviation_of_the_higher_tier_free() {
        // (higher tiers' demand in workers, capacity, running, may start)
        let cases: &[(f64, f64, f64, bool)] = &[
            (2.1, 8.0, 6.0, true),    // R = 1: the 7th job leaves 1 free
            (2.1, 8.0, 7.0, false),   // the 8th would leave none
            (4.0, 8.0, 5.0, true),    // R = 2: the 6th leaves 2
            (4.0, 8.0, 6.0, false),   // the 7th would leave 1
            (0.2, 8.0, 7.0, false),   // a trickle: R = 1
            (3.9, 8.0, 6.0, true),    // R = 1 up to a demand of 4
            (50.0, 64.0, 56.0, true), // R = 7
            (50.0, 64.0, 57.0, false),
        ];
        for &(demand, capacity, running, starts) in cases {
            let r = Reserve::for_demand(capacity, demand, Tier::Critical).expect("a reserve");
            assert_eq!(r.allows(running), starts, "demand {demand}, capacity {capacity}, running {running}");
        }
        assert_eq!(Reserve::for_demand(8.0, 0.0, Tier::Critical), None, "no higher demand, no reserve");
        assert_eq!(Reserve::for_demand(f64::INFINITY, 2.0, Tier::Critical), None, "no known capacity");
    }
}
