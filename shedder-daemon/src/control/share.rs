//! Which share a class gets of what admission may use: the room it has
//! against the other classes' sure demand ([`super::allocate::allot`]), or
//! less where `admit` would refuse the jobs anyway.
//!
//! A class of which `admit` refuses more than the waste tolerance of what
//! the fast path lets in has more room than its jobs can use in time. The
//! fast path should carry those refusals (an RST costs nanoseconds, a
//! refusal at the server a request), so such a class keeps only the room
//! beyond its plain share (against the others' whole demand) that `admit`
//! would not refuse. It keeps none beyond the plain share while a higher
//! tier is refused past the tolerance too: the workers are then that
//! tier's bottleneck, and the extra room would come out of its jobs.

/// How a class's admissions fared at the server on the last tick.
#[derive(Clone, Copy, Debug, Default)]
pub struct Waste {
    /// `admit` refused more of the class than the waste tolerance.
    pub past_tolerance: bool,
    /// So it did of some class of a higher tier.
    pub higher_tier_past_tolerance: bool,
    /// The work `admit` refused of the class, worker-seconds per second.
    pub refused_work: f64,
}

/// A class's share, worker-seconds per second, from its `plain` share
/// ([`super::allocate::allocate`]), its share `against_sure`, and its
/// `waste`.
pub fn share(plain: f64, against_sure: f64, waste: Waste) -> f64 {
    match waste {
        Waste { past_tolerance: false, .. } => against_sure,
        Waste { higher_tier_past_tolerance: true, .. } => plain,
        Waste { refused_work, .. } => plain.max(against_sure - refused_work),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_wasting_its_room_keeps_only_what_admit_would_not_refuse() {
        let (ok, wasting) = (false, true);
        // (what, plain, against sure, own waste, a higher tier's, refused work, share)
        let rows = [
            ("no waste: the room against the others' sure demand", 0.0, 2.5, ok, ok, 0.0, 2.5),
            ("no waste of its own, a higher tier's: the same", 0.0, 2.5, ok, wasting, 0.0, 2.5),
            ("wasting: the room less the work admit refuses", 0.0, 2.5, wasting, ok, 1.0, 1.5),
            ("refusing more than the extra room: the plain share", 1.0, 2.5, wasting, ok, 3.0, 1.0),
            ("a higher tier wasting too: the plain share", 0.5, 2.5, wasting, wasting, 1.0, 0.5),
        ];
        for (what, plain, against_sure, own, higher, refused_work, want) in rows {
            let waste = Waste { past_tolerance: own, higher_tier_past_tolerance: higher, refused_work };
            let got = share(plain, against_sure, waste);
            assert!((got - want).abs() < 1e-9, "{what}: {got} != {want}");
        }
    }
}
