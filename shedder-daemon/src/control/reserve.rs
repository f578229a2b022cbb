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
//! `R = max(1, ⌊√v⌋)`, `v` the variance of how far the higher tiers' count
//! of jobs in service moves while the job about to start holds its worker.
//! A class with demand `m` workers (by Little's law, how many of its jobs
//! are in service on average) and jobs of mean `S` has a Poisson count,
//! mean `m`. Over a hold of `t` it moves by a difference of variance
//! `2m(1 − ρ(t))`, `ρ` the count's autocorrelation: `2m` once `t` spans
//! many of its jobs (two independent draws), and at most `2m·t/S` before
//! (a job in service ends within `t` with chance at most `t/S`, and as many
//! arrive: `1 − ρ(t)` is the distribution of a job's remaining service, whose
//! density is at most `1/S`). With `t` the starting job's class's mean
//! service `s` (as `1 − ρ` is concave, no less than its average over the
//! job's actual service), `v = Σ 2·m·min(1, s/S)` over the higher classes:
//! a lower tier of long jobs leaves about `√(2m)`, one of jobs much shorter
//! than the higher tier's leaves one, since the count barely moves before
//! the worker is back. The reserve covers a rise of one deviation at once,
//! and the higher tier's queue the rest (rounded down, so that the noise of
//! a demand estimate does not tip it over: each reserved worker is one the
//! lower tier loses while the backend is full). Where the server holds a
//! lower tier's jobs rather than refusing them, one is always waiting to
//! take a freed worker, so the backend runs at this line; `⌊√m⌋`, a
//! deviation of the count alone, cost the critical tier of the drill's two
//! multi-tier workloads 1.5–2% of its jobs there (four job plans each,
//! 2026-12-01), `⌊√(2m)⌋` 0–1.6%. It costs the lower tier at most `R`
//! workers, and only while no more than `R` are free: near full on a large
//! backend, but on two workers with `R = 1` whenever one is busy, which is
//! where a lower tier loses most to it (docs/control-log.md).
//!
//! **A higher tier that can wait needs fewer.** The reserve is for the
//! higher tier's jobs that would otherwise wait for a worker to free. A tier
//! whose slack covers that wait does not need it: a critical class with a
//! 26 s deadline and 2 s jobs loses nothing by waiting a few starts, while
//! a worker kept free for it is one a lower tier's job could use. So the
//! reserve drops by the starts the higher tiers' least slack covers
//! [`SLACK_COVER`] times over, and only while their sure demand fits the
//! workers (a tier that fills them needs every start it gets). A start is
//! paced at `max(S_mix, d) / c` with `c` workers: `S_mix` the offered mix's
//! mean service, `d` the lower class's deadline. Not the lower job's
//! measured service: at a tail's onset the measurements have not yet seen
//! the long jobs, and those are what the reserve is for (paced by the lower
//! class's mean, the drill's two-tier workload lost 22 critical jobs of 914
//! at the onset, in three runs of three). A job worth its worker ends
//! within its deadline. (Why [`SLACK_COVER`] is 3, against once and ten
//! times over: docs/control-log.md.)

use serde::Serialize;

use super::tier::Tier;

/// How many times over the higher tiers' slack must cover a start before
/// the reserve keeps one worker fewer for it.
pub const SLACK_COVER: f64 = 3.0;

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
    /// The reserve for a class whose jobs hold a worker for `job_mean_ms` on
    /// average, below `higher` classes, each (demand in worker-seconds per
    /// second, mean service ms); None when they bring nothing.
    pub fn for_higher(capacity: f64, higher: &[(f64, f64)], job_mean_ms: f64, for_tier: Tier) -> Option<Reserve> {
        let demand: f64 = higher.iter().map(|(d, _)| d).sum();
        // An unknown mean on either side counts as a long hold.
        let moved = |mean_ms: f64| if mean_ms > 0.0 { (job_mean_ms / mean_ms).min(1.0) } else { 1.0 };
        let variance: f64 = higher.iter().map(|&(d, mean_ms)| 2.0 * d * moved(mean_ms)).sum();
        (demand > 0.0 && capacity.is_finite() && capacity > 0.0).then(|| Reserve {
            capacity,
            workers: variance.sqrt().floor().max(1.0),
            for_tier,
        })
    }

    /// The reserve left when the higher tiers can wait `slack_ms` (their
    /// least slack) for starts that come every `per_start_ms`: less the
    /// starts that slack covers [`SLACK_COVER`] times over; None when no
    /// worker is left to keep.
    pub fn less_waited(self, slack_ms: f64, per_start_ms: f64) -> Option<Reserve> {
        let covered = SLACK_COVER * per_start_ms;
        let starts = if covered > 0.0 && slack_ms > 0.0 { (slack_ms / covered).floor() } else { 0.0 };
        let workers = self.workers - starts;
        (workers >= 1.0).then_some(Reserve { workers, ..self })
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
        // Jobs as long as the higher tier's: the count moves fully, √(2m).
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
            let r = Reserve::for_higher(capacity, &[(demand, 500.0)], 500.0, Tier::Critical).expect("a reserve");
            assert_eq!(r.allows(running), starts, "demand {demand}, capacity {capacity}, running {running}");
        }
        assert_eq!(Reserve::for_higher(8.0, &[(0.0, 500.0)], 500.0, Tier::Critical), None, "no higher demand");
        assert_eq!(Reserve::for_higher(f64::INFINITY, &[(2.0, 500.0)], 500.0, Tier::Critical), None, "no capacity");
    }

    #[test]
    fn a_short_job_leaves_fewer_free_since_the_higher_count_barely_moves_before_it_ends() {
        // Higher classes, each (demand, mean service ms).
        type Higher = &'static [(f64, f64)];
        // (higher classes, the job's mean ms, workers kept free)
        let rows: &[(Higher, f64, f64)] = &[
            (&[(12.5, 1_000.0)], 2_000.0, 5.0),            // longer than theirs: √25
            (&[(12.5, 1_000.0)], 1_000.0, 5.0),            // as long
            (&[(12.5, 1_000.0)], 250.0, 2.0),              // a quarter: √6.25
            (&[(12.5, 1_000.0)], 40.0, 1.0),               // brief: still one
            (&[(8.0, 1_000.0), (4.5, 100.0)], 100.0, 3.0), // √(1.6 + 9): per class
            (&[(12.5, 0.0)], 40.0, 5.0),                   // their mean unknown: a full move
            (&[(12.5, 1_000.0)], f64::NAN, 5.0),           // the job's mean unknown
        ];
        for &(higher, job_ms, workers) in rows {
            let r = Reserve::for_higher(64.0, higher, job_ms, Tier::Critical).expect("a reserve");
            assert_eq!(r.workers, workers, "higher {higher:?}, a job of {job_ms} ms");
        }
    }

    #[test]
    fn a_higher_tier_with_slack_for_the_wait_needs_fewer_workers_kept_free() {
        // Three workers kept; a start every 100 ms, so each worker fewer
        // takes 300 ms of slack (three times over).
        // (the higher tiers' least slack ms, ms per start, workers kept)
        let rows: &[(f64, f64, Option<f64>)] = &[
            (0.0, 100.0, Some(3.0)),
            (-500.0, 100.0, Some(3.0)), // losing jobs already: all of it
            (299.0, 100.0, Some(3.0)),  // not yet one start, three times over
            (300.0, 100.0, Some(2.0)),
            (750.0, 100.0, Some(1.0)),
            (900.0, 100.0, None), // every worker covered
            (20_000.0, 1_000.0, None),
            (5_000.0, 0.0, Some(3.0)), // no pace of starts known
            (f64::NAN, 100.0, Some(3.0)),
        ];
        let reserve = Reserve { capacity: 8.0, workers: 3.0, for_tier: Tier::Critical };
        for &(slack, per_start, workers) in rows {
            let got = reserve.less_waited(slack, per_start).map(|r| r.workers);
            assert_eq!(got, workers, "slack {slack} ms, a start every {per_start} ms");
        }
    }
}
