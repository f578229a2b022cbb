//! The decision for one classified SYN.

use crate::{
    classify::Mode,
    maps::{Action, ClassCounters},
};

/// The one outcome each classified SYN gets (and the counter it lands in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Admitted,
    Dropped,
    Rejected,
    Marked,
    WouldShed,
}

/// Whether the bucket must be charged at all: off-mode classes are not.
#[inline(always)]
pub fn charges_bucket(mode: Mode) -> bool {
    mode != Mode::Off
}

/// Combines the mode, the class's action and whether the SYN fit its bucket.
#[inline(always)]
pub fn decide(mode: Mode, action: Action, fits: bool) -> Outcome {
    if fits || mode == Mode::Off {
        return Outcome::Admitted;
    }
    if mode == Mode::Observe {
        return Outcome::WouldShed;
    }
    match action {
        Action::Drop => Outcome::Dropped,
        Action::Reject => Outcome::Rejected,
        Action::Mark => Outcome::Marked,
    }
}

impl ClassCounters {
    /// Counts one classified SYN.
    #[inline(always)]
    pub fn count(&mut self, outcome: Outcome) {
        self.seen += 1;
        match outcome {
            Outcome::Admitted => self.admitted += 1,
            Outcome::Dropped => self.dropped += 1,
            Outcome::Rejected => self.rejected += 1,
            Outcome::Marked => self.marked += 1,
            Outcome::WouldShed => self.would_shed += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_enforce_sheds_and_only_when_over_budget() {
        use {Action::*, Mode::*, Outcome::*};
        let table = [
            (Off, Reject, false, Admitted),
            (Off, Drop, true, Admitted),
            (Observe, Reject, true, Admitted),
            (Observe, Reject, false, WouldShed),
            (Observe, Mark, false, WouldShed),
            (Enforce, Drop, true, Admitted),
            (Enforce, Drop, false, Dropped),
            (Enforce, Reject, false, Rejected),
            (Enforce, Mark, false, Marked),
        ];
        for (mode, action, fits, want) in table {
            assert_eq!(decide(mode, action, fits), want, "{mode:?} {action:?} fits={fits}");
        }
        assert!(!charges_bucket(Off));
        assert!(charges_bucket(Observe) && charges_bucket(Enforce));
    }
}
