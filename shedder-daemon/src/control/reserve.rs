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
//! `R = max(1, ⌊√(2m)⌋)`, `m` the higher tiers' demand in workers (by
//! Little's law, how many of their jobs are in service on average). The
//! number of a Poisson stream's jobs in service is itself Poisson, mean `m`.
//! The job about to start keeps its worker for its whole service time, most
//! often many of the higher tier's: by the time it is done, the higher
//! tier's count has moved from what it is now to an independent draw, and
//! the difference of two such draws has a standard deviation of `√(2m)`.
//! The reserve covers a rise of one deviation at once, and the higher tier's
//! queue the rest (rounded down, so that the noise of a demand estimate does
//! not tip it over: each reserved worker is one the lower tier loses while
//! the backend is full). Where the server holds a lower tier's jobs rather
//! than refusing them, one is always waiting to take a freed worker, so the
//! backend runs at this line; `⌊√m⌋`, a deviation of the count alone, cost
//! the critical tier of the drill's two multi-tier workloads 1.5–2% of its
//! jobs there (four job plans each, 2026-12-01), `⌊√(2m)⌋` 0–1.6%. It
//! costs the lower tier at most `R` workers, and only while the backend is
//! full.

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
            workers: (2.0 * higher_demand).sqrt().floor().max(1.0),
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
            (0.4, 8.0, 6.0, true),     // R = 1: the 7th job leaves 1 free
            (0.4, 8.0, 7.0, false),    // the 8th would leave none
            (2.0, 8.0, 5.0, true),     // R = 2: the 6th leaves 2
            (2.0, 8.0, 6.0, false),    // the 7th would leave 1
            (4.5, 8.0, 4.0, true),     // R = 3
            (4.5, 8.0, 5.0, false),    //
            (0.2, 8.0, 7.0, false),    // a trickle: R = 1
            (1.9, 8.0, 6.0, true),     // R = 1 up to a demand of 2
            (50.0, 64.0, 53.0, true),  // R = 10
            (50.0, 64.0, 54.0, false), //
        ];
        for &(demand, capacity, running, starts) in cases {
            let r = Reserve::for_demand(capacity, demand, Tier::Critical).expect("a reserve");
            assert_eq!(r.allows(running), starts, "demand {demand}, capacity {capacity}, running {running}");
        }
        assert_eq!(Reserve::for_demand(8.0, 0.0, Tier::Critical), None, "no higher demand, no reserve");
        assert_eq!(Reserve::for_demand(f64::INFINITY, 2.0, Tier::Critical), None, "no known capacity");
    }
}
