//! Attribution: which class the shared law acts for, and how far it may cut.
//!
//! A configured capacity is exact in worker-seconds: the law then acts only
//! for classes with lower tiers beneath them, and cuts only those lower
//! tiers' work (a shared queue is cut where its filler is, not where it
//! hurts); job-level admission trims the class's own tier. A capacity that
//! is learnt or guessed may itself be wrong, so there the law acts for every
//! class and may cut any tier. How far depends on what else guards the
//! deadlines: where the server asks `admit` as each job starts, each job is
//! judged on the wait it really had, so the law need not cut below what the
//! workers finish: an effective capacity of `capacity / (1 + headroom)`,
//! whose budget, headroom added, lets in what they finish. Below that,
//! workers idle for want of admitted jobs while the fast path sheds ones
//! they could have served. Where jobs are judged only as they arrive (on a predicted wait),
//! the law is the only check on a learnt figure read too high, and may cut
//! to half of it.

use super::capacity::CapacitySource;
use super::plan::Reading;
use super::tier::Tier;

/// The class in the most trouble among those the law may act for: the
/// least slack as a share of its deadline (`slack_share`), among the classes
/// offering work.
pub(super) fn pressure_class(reading: &Reading, slack_share: impl Fn(&str) -> f64) -> Option<String> {
    reading
        .offering
        .iter()
        .filter(|n| {
            reading.source != CapacitySource::Configured
                || reading.tier_of(n).is_some_and(|tier| reading.tier_demand(|t| t > tier) > 0.0)
        })
        .min_by(|a, b| slack_share(a).total_cmp(&slack_share(b)))
        .cloned()
}

/// The least effective capacity a cut for a class of `tier` may leave,
/// worker-seconds/s: with lower tiers at work, what its own tier and those
/// above it claim (their work is not the law's to cut); otherwise, of a
/// learnt capacity, what the workers finish under a budget's `headroom`
/// where jobs are judged as they start, and half of it where they are not;
/// a sliver of one that is configured or guessed.
pub(super) fn cut_floor(reading: &Reading, tier: Tier, headroom: f64) -> f64 {
    let capacity = reading.capacity;
    match reading.source {
        _ if reading.tier_demand(|t| t > tier) > 0.0 => reading.tier_demand(|t| t <= tier).min(capacity),
        CapacitySource::Learnt if reading.judged_at_start => capacity / (1.0 + headroom),
        CapacitySource::Learnt => 0.5 * capacity,
        _ => 0.01 * capacity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::allocate::Claim;

    /// 8 workers of capacity from `source`, jobs `judged_at_start` or not;
    /// `critical` and `batch` offering work, with these demands.
    fn reading(source: CapacitySource, judged_at_start: bool, critical: f64, batch: f64) -> Reading {
        let claim = |tier, demand| Claim { tier, weight: 1.0, demand };
        Reading {
            capacity: 8.0,
            source,
            judged_at_start,
            busy: 0.0,
            backlogged: true,
            adaptive: vec!["batch".into(), "critical".into()],
            claims: vec![claim(Tier::Sheddable, batch), claim(Tier::Critical, critical)],
            demand: critical + batch,
            offering: vec!["batch".into(), "critical".into()],
            running: None,
            ahead: None,
        }
    }

    #[test]
    fn the_law_acts_for_the_most_pressed_class_it_may_and_cuts_no_further_than_its_floor() {
        // Critical is the more pressed by its slack.
        let share = |n: &str| if n == "critical" { -0.2 } else { 0.1 };
        use CapacitySource::*;
        // (capacity from, jobs judged at start, critical's demand, batch's demand, acts for, floor)
        let rows = [
            // Batch beneath it: the law acts for critical and leaves it its claim.
            (Configured, true, 3.0, 9.0, Some("critical"), 3.0),
            (Learnt, false, 3.0, 9.0, Some("critical"), 3.0),
            (Learnt, true, 3.0, 9.0, Some("critical"), 3.0),
            // ... but never more than the capacity.
            (Configured, true, 12.0, 9.0, Some("critical"), 8.0),
            // No lower tier at work: a configured capacity is exact, so the
            // law acts for no one (admission trims each tier's own jobs) ...
            (Configured, false, 3.0, 0.0, None, 0.0),
            // ... while a learnt one may be wrong: where each job is judged
            // as it starts, down to what the workers finish under the
            // budget's headroom (8 / 1.25); where jobs are judged only as
            // they arrive, to half of it; a guessed one (the classes'
            // max_rates) to a sliver.
            (Learnt, true, 3.0, 0.0, Some("critical"), 6.4),
            (Learnt, false, 3.0, 0.0, Some("critical"), 4.0),
            (MaxRates, true, 3.0, 0.0, Some("critical"), 0.08),
            (MaxRates, false, 3.0, 0.0, Some("critical"), 0.08),
        ];
        for (source, at_start, critical, batch, acts_for, floor) in rows {
            let r = reading(source, at_start, critical, batch);
            let class = pressure_class(&r, share);
            assert_eq!(class.as_deref(), acts_for, "{source:?}, demands {critical} + {batch}");
            let Some(tier) = class.as_deref().and_then(|c| r.tier_of(c)) else {
                continue;
            };
            let got = cut_floor(&r, tier, 0.25);
            assert!((got - floor).abs() < 1e-9, "{source:?}, demands {critical} + {batch}: floor {got}, want {floor}");
        }
    }
}
