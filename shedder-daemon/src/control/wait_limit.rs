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

/// A class with work offered, as the limit sees it.
#[derive(Clone, Copy, Debug)]
pub struct Waiting<'a> {
    pub name: &'a str,
    pub tier: Tier,
    /// `deadline − safety − service term`, ms.
    pub room_ms: f64,
    /// Its jobs are losing their on-time chance to the wait.
    pub pressed: bool,
}

/// The limit on a job of `class` (of `tier`, with `room_ms` of its own),
/// from the classes with work offered, `overloaded` when the allotments
/// bind; `two_starts_ms` is the floor.
pub fn wait_limit(
    class: &str,
    tier: Tier,
    room_ms: f64,
    offering: &[Waiting],
    overloaded: bool,
    two_starts_ms: f64,
) -> Option<WaitLimit> {
    offering
        .iter()
        .filter(|o| o.name != class && o.tier == tier && (overloaded || o.pressed))
        .filter(|o| o.room_ms > 0.0 && o.room_ms < room_ms)
        .min_by(|a, b| a.room_ms.total_cmp(&b.room_ms))
        .map(|o| WaitLimit { wait_ms: (o.room_ms * WAIT_SHARE).max(two_starts_ms), for_class: o.name.to_string() })
        .filter(|limit| limit.wait_ms < room_ms)
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
    fn a_patient_class_keeps_the_queue_short_for_a_tighter_one() {
        use Tier::*;
        let w = |name, tier, room_ms, pressed| Waiting { name, tier, room_ms, pressed };
        let chat = |pressed| w("chat", Standard, 320.0, pressed);
        // (what, the class's room, the classes offering, overloaded, two starts, limit and for whom)
        type Case<'a> = (&'a str, f64, Vec<Waiting<'a>>, bool, f64, Option<(f64, &'a str)>);
        let cases: Vec<Case> = vec![
            ("a tighter class missing deadlines", 9_000.0, vec![chat(true)], false, 50.0, Some((160.0, "chat"))),
            ("a tighter class, fine, no overload", 9_000.0, vec![chat(false)], false, 50.0, None),
            ("a tighter class, fine, overload", 9_000.0, vec![chat(false)], true, 50.0, Some((160.0, "chat"))),
            (
                "the tightest of two",
                9_000.0,
                vec![w("docs", Standard, 1_500.0, true), chat(true)],
                false,
                50.0,
                Some((160.0, "chat")),
            ),
            ("another tier's class", 9_000.0, vec![w("chat", Critical, 320.0, true)], true, 50.0, None),
            ("a more patient class", 300.0, vec![w("batch", Standard, 9_000.0, true)], true, 50.0, None),
            (
                "never below two starts",
                9_000.0,
                vec![w("chat", Standard, 60.0, true)],
                true,
                50.0,
                Some((50.0, "chat")),
            ),
            ("no room at all: nothing to keep", 9_000.0, vec![w("chat", Standard, -40.0, true)], true, 50.0, None),
            ("two starts reach its own room", 120.0, vec![w("chat", Standard, 100.0, true)], true, 150.0, None),
            ("itself", 320.0, vec![w("self", Standard, 320.0, true)], true, 50.0, None),
        ];
        for (what, room, offering, overloaded, two_starts, expect) in cases {
            let got = wait_limit("self", Standard, room, &offering, overloaded, two_starts);
            let got = got.as_ref().map(|l| (l.wait_ms, l.for_class.as_str()));
            assert_eq!(got, expect, "{what}");
        }
    }
}
