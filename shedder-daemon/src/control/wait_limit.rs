//! The wait limit: classes of one tier share one queue, so the most
//! patient must not set its length.
//!
//! Each class's own admission keeps the queue no longer than its own room
//! (the wait a job can take and keep its on-time chance). In a tier whose
//! classes have different deadlines the queue therefore grows to the most
//! patient class's room, and a class with a tighter one loses its jobs to
//! the wait while its share of the workers goes unused: the patient
//! classes' jobs fill the queue ahead of it. So a job of a more patient
//! class starts only if it waited no longer than part of the tighter
//! class's room; the others are refused, which keeps the shared queue short
//! enough for the tighter class.
//!
//! ```text
//! limit = max(WAIT_SHARE · room of the tightest such class, two starts)
//! ```
//!
//! Only for a class worth at least as much per worker-second: its on-time
//! jobs per worker-second (`best_chance / mean service`), times its weight,
//! no less than the patient class's. A tighter room often means cheaper
//! jobs (an autocomplete beside a report), and then the limit gives the
//! workers to the jobs that finish most on time for them. But a class can
//! be tighter because its jobs are long (the same deadline, bigger jobs):
//! shortening the queue for it would refuse several cheap jobs that would
//! have made it for every long one that then does.
//!
//! When: while the allotments bind (overload in evidence), for every
//! tighter class of the tier with work offered. The fast path then lets in
//! more than the workers finish (the headroom), so a refused job's place
//! goes to the next in the queue and costs no worker time; waiting for the
//! tighter class to show misses would cost the seconds its wait readings
//! lag. Without that overload a refusal can idle a worker, so only a
//! tighter class already missing its deadlines (its on-time chance below
//! its threshold) sets a limit.
//!
//! Part of the room, not the whole: the head of an over-fed queue waits
//! about as long as the limit, which at the whole room would leave the
//! tighter class's jobs a coin flip. (In the simulation, shares from 0.3 to
//! 0.7 of the room gave the same on-time totals.) Never below two starts
//! (`2 · mean service / workers`, [`super::QueueAhead`]): a queue shorter
//! than that idles workers between arrivals. A class whose jobs cannot
//! make it even if served at once (no room at all) sets no limit: no queue
//! is short enough to help it.

use serde::Serialize;

use super::tier::Tier;

/// The share of the tighter class's room a patient job may have waited.
pub const WAIT_SHARE: f64 = 0.5;

/// A shorter wait than a class's own room, for a class of its tier.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WaitLimit {
    /// A job that waited longer is refused, ms.
    pub wait_ms: f64,
    /// The class it is kept for.
    pub for_class: String,
}

/// A class as the limit sees it.
#[derive(Clone, Copy, Debug)]
pub struct Waiting<'a> {
    pub name: &'a str,
    pub tier: Tier,
    /// `deadline − safety − service term`, ms.
    pub room_ms: f64,
    /// Its jobs are losing their on-time chance to the wait.
    pub pressed: bool,
    /// On-time jobs per worker-second, times its weight; None while its
    /// service time is unknown.
    pub worth: Option<f64>,
}

impl Waiting<'_> {
    /// What a worker-second given to a class of this `weight`, whose jobs
    /// take `mean_service_ms` and finish in time with `best_chance` when
    /// served at once, yields.
    pub fn worth(weight: f64, best_chance: f64, mean_service_ms: f64) -> Option<f64> {
        (mean_service_ms > 0.0).then(|| weight * best_chance * 1000.0 / mean_service_ms)
    }
}

/// The limit on a job of `class` (its tier, room and worth as a
/// [`Waiting`]), from the classes with work offered, `overloaded` when the
/// allotments bind; `two_starts_ms` is the floor.
pub fn wait_limit(class: &Waiting, offering: &[Waiting], overloaded: bool, two_starts_ms: f64) -> Option<WaitLimit> {
    let worth = class.worth?;
    offering
        .iter()
        .filter(|o| o.name != class.name && o.tier == class.tier && (overloaded || o.pressed))
        .filter(|o| o.room_ms > 0.0 && o.room_ms < class.room_ms && o.worth.is_some_and(|w| w >= worth))
        .min_by(|a, b| a.room_ms.total_cmp(&b.room_ms))
        .map(|o| WaitLimit { wait_ms: (o.room_ms * WAIT_SHARE).max(two_starts_ms), for_class: o.name.to_string() })
        .filter(|limit| limit.wait_ms < class.room_ms)
}

impl WaitLimit {
    /// For a decision's reason.
    pub fn words(&self) -> String {
        format!(
            "jobs that waited over {:.0} ms are refused: {}, of this tier, has a tighter deadline in the same queue",
            self.wait_ms, self.for_class
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patient_class_keeps_the_queue_short_for_a_tighter_one_worth_as_much() {
        use Tier::*;
        // Worth: on-time jobs per worker-second; 10 for 100 ms jobs.
        let w = |name, tier, room_ms, pressed, worth| Waiting { name, tier, room_ms, pressed, worth };
        let chat = |pressed| w("chat", Standard, 320.0, pressed, Some(10.0));
        // (what, the class's room and worth, the classes offering, overloaded, two starts, limit and for whom)
        type Case<'a> = (&'a str, f64, Option<f64>, Vec<Waiting<'a>>, bool, f64, Option<(f64, &'a str)>);
        let cases: Vec<Case> = vec![
            (
                "a tighter class missing deadlines",
                9_000.0,
                Some(2.0),
                vec![chat(true)],
                false,
                50.0,
                Some((160.0, "chat")),
            ),
            ("a tighter class, fine, no overload", 9_000.0, Some(2.0), vec![chat(false)], false, 50.0, None),
            (
                "a tighter class, fine, overload",
                9_000.0,
                Some(2.0),
                vec![chat(false)],
                true,
                50.0,
                Some((160.0, "chat")),
            ),
            ("tighter, but its jobs are dearer", 1_500.0, Some(12.0), vec![chat(true)], true, 50.0, None),
            ("worth the same", 1_500.0, Some(10.0), vec![chat(true)], true, 50.0, Some((160.0, "chat"))),
            ("its own service unknown", 9_000.0, None, vec![chat(true)], true, 50.0, None),
            (
                "the tighter's unknown",
                9_000.0,
                Some(2.0),
                vec![w("chat", Standard, 320.0, true, None)],
                true,
                50.0,
                None,
            ),
            (
                "the tightest of two",
                9_000.0,
                Some(2.0),
                vec![w("docs", Standard, 1_500.0, true, Some(3.0)), chat(true)],
                false,
                50.0,
                Some((160.0, "chat")),
            ),
            (
                "the tightest worth as much",
                9_000.0,
                Some(2.0),
                vec![w("docs", Standard, 1_500.0, true, Some(3.0)), w("video", Standard, 200.0, true, Some(1.0))],
                true,
                50.0,
                Some((750.0, "docs")),
            ),
            (
                "another tier's class",
                9_000.0,
                Some(2.0),
                vec![w("chat", Critical, 320.0, true, Some(10.0))],
                true,
                50.0,
                None,
            ),
            (
                "a more patient class",
                300.0,
                Some(2.0),
                vec![w("batch", Standard, 9_000.0, true, Some(9.0))],
                true,
                50.0,
                None,
            ),
            (
                "never below two starts",
                9_000.0,
                Some(2.0),
                vec![w("chat", Standard, 60.0, true, Some(10.0))],
                true,
                50.0,
                Some((50.0, "chat")),
            ),
            (
                "no room at all: nothing to keep",
                9_000.0,
                Some(2.0),
                vec![w("chat", Standard, -40.0, true, Some(10.0))],
                true,
                50.0,
                None,
            ),
            (
                "two starts reach its own room",
                120.0,
                Some(2.0),
                vec![w("chat", Standard, 100.0, true, Some(10.0))],
                true,
                150.0,
                None,
            ),
            ("itself", 320.0, Some(10.0), vec![w("self", Standard, 320.0, true, Some(10.0))], true, 50.0, None),
        ];
        for (what, room_ms, worth, offering, overloaded, two_starts, expect) in cases {
            let class = w("self", Standard, room_ms, false, worth);
            let got = wait_limit(&class, &offering, overloaded, two_starts);
            let got = got.as_ref().map(|l| (l.wait_ms, l.for_class.as_str()));
            assert_eq!(got, expect, "{what}");
        }
        assert_eq!(Waiting::worth(2.0, 0.9, 300.0), Some(6.0));
        assert_eq!(Waiting::worth(1.0, 1.0, 0.0), None);
    }
}
