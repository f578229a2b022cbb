//! Attribution: which class the shared law acts for, how far it may cut,
//! and whether a cut that lower tiers would bear is worth making.
//!
//! A configured capacity is exact in worker-seconds: the law then acts only
//! for classes with lower tiers beneath them, and cuts only those lower
//! tiers' work (a shared queue is cut where its filler is, not where it
//! hurts); job-level admission trims the class's own tier. So is a learnt
//! capacity the backend has been seen to fill (as many jobs in service at
//! once as it has workers, to within one, as jobs started): it is never
//! below the workers seen, so it is not read too high. Any other learnt or
//! guessed capacity may itself be wrong, so there the law acts for every
//! class and may cut any tier. How far depends on what else guards the
//! deadlines: where the server asks `admit` as each job starts, each job is
//! judged on the wait it really had, so the law need not cut below what the
//! workers finish: an effective capacity of `capacity / (1 + headroom)`,
//! whose budget, headroom added, lets in what they finish. Below that,
//! workers idle for want of admitted jobs while the fast path sheds ones
//! they could have served. Where jobs are judged only as they arrive (on a predicted wait),
//! the law is the only check on a learnt figure read too high, and may cut
//! to half of it.
//!
//! A cut for a class with lower tiers at work is theirs to bear, and it
//! is made (or an earlier one kept) only while the wait costs the class's
//! tier and those above it at least as many on-time jobs as the cut turns
//! away from the lower tiers ([`cut_worth`]):
//!
//! ```text
//! at stake = Σ higher  jobs/s · (best chance − chance after the wait now)
//! costs    = (lower share at the capacity − lower share at what the cut leaves)
//!            · lower on-time jobs per worker-second
//! share(a) = a − the higher tiers' work, within [0, the lower tiers' work]
//! ```
//!
//! At stake is the most a shorter queue could win back, so the test leans
//! towards the higher tiers. What it spares: under light load a queue's
//! waits come from arrivals bunching, and a class whose service spends
//! most of its deadline loses a little to each; a cut there turned away
//! many of a lower tier's jobs, which the workers had room for, to win
//! back a few. Past the capacity only the work the workers would have
//! finished counts as a cost, so overload is still answered at once.

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
            !reading.capacity_trusted()
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
        CapacitySource::Learnt if reading.judged_at_start() => capacity / (1.0 + headroom),
        CapacitySource::Learnt => 0.5 * capacity,
        _ => 0.01 * capacity,
    }
}

/// One class as a cut's worth is judged: jobs/s it brings, what each costs
/// a worker, and its on-time chance served at once and after the wait now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Chances {
    pub asked: f64,
    pub mean_service_ms: f64,
    pub best: f64,
    pub now: f64,
}

/// What a cut for a class would buy and what it would cost, in on-time
/// jobs per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CutWorth {
    /// What the jobs of the pressed class's tier and those above it lose
    /// to the wait now: the most that a shorter queue could win back.
    pub at_stake: f64,
    /// What the lower tiers' jobs the cut turns away would have finished.
    pub costs: f64,
}

impl CutWorth {
    /// Worth making: the tiers it protects lose at least what it costs.
    pub fn pays(&self) -> bool {
        self.at_stake >= self.costs
    }
}

/// The worth of a cut for a class of `tier` that leaves admission
/// `leaves` worker-seconds/s, where lower tiers are at work (the cut is
/// theirs to bear: the allotments serve the higher tiers' work first);
/// `None` otherwise.
pub(super) fn cut_worth(
    reading: &Reading,
    tier: Tier,
    leaves: f64,
    chances: impl Fn(&str) -> Chances,
) -> Option<CutWorth> {
    if reading.tier_demand(|t| t > tier) <= 0.0 {
        return None;
    }
    let (mut at_stake, mut upper_work, mut lower_work, mut lower_on_time) = (0.0, 0.0, 0.0, 0.0);
    for name in &reading.offering {
        let (Some(t), c) = (reading.tier_of(name), chances(name)) else { continue };
        let work = c.asked * c.mean_service_ms / 1000.0;
        if t <= tier {
            at_stake += c.asked * (c.best - c.now).max(0.0);
            upper_work += work;
        } else {
            lower_work += work;
            lower_on_time += c.asked * c.now;
        }
    }
    // What the lower tiers' share comes to: no more than their work, and no
    // more than the workers finish beside the higher tiers' (work past the
    // capacity is lost with or without the cut).
    let share = |admission: f64| (admission - upper_work).clamp(0.0, lower_work);
    let turned_away = (share(reading.capacity) - share(leaves)).max(0.0);
    let on_time_per_work = if lower_work > 0.0 { lower_on_time / lower_work } else { 0.0 };
    Some(CutWorth { at_stake, costs: turned_away * on_time_per_work })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::allocate::Claim;

    /// 8 workers of capacity from `source`; `workers_seen` in service at
    /// once as jobs started (None: jobs are not judged at start);
    /// `critical` and `batch` offering work, with these demands.
    fn reading(source: CapacitySource, workers_seen: Option<f64>, critical: f64, batch: f64) -> Reading {
        let claim = |tier, demand| Claim { tier, weight: 1.0, demand, sure: demand };
        Reading {
            capacity: 8.0,
            source,
            workers_seen,
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
        // (capacity from, workers seen as jobs started, critical's demand,
        // batch's demand, acts for, floor)
        let rows = [
            // Batch beneath it: the law acts for critical and leaves it its claim.
            (Configured, Some(5.0), 3.0, 9.0, Some("critical"), 3.0),
            (Learnt, None, 3.0, 9.0, Some("critical"), 3.0),
            (Learnt, Some(5.0), 3.0, 9.0, Some("critical"), 3.0),
            (Learnt, Some(8.0), 3.0, 9.0, Some("critical"), 3.0),
            // ... but never more than the capacity.
            (Configured, Some(5.0), 12.0, 9.0, Some("critical"), 8.0),
            // No lower tier at work: a configured capacity is exact, so the
            // law acts for no one (admission trims each tier's own jobs);
            // so is a learnt one the backend was seen to fill, within a worker ...
            (Configured, None, 3.0, 0.0, None, 0.0),
            (Learnt, Some(8.0), 3.0, 0.0, None, 0.0),
            (Learnt, Some(7.5), 3.0, 0.0, None, 0.0),
            // ... while another learnt one may be wrong: where each job is
            // judged as it starts, down to what the workers finish under
            // the budget's headroom (8 / 1.25); where jobs are judged only
            // as they arrive, to half of it; a guessed one (the classes'
            // max_rates) to a sliver.
            (Learnt, Some(7.0), 3.0, 0.0, Some("critical"), 6.4),
            (Learnt, None, 3.0, 0.0, Some("critical"), 4.0),
            (MaxRates, Some(8.0), 3.0, 0.0, Some("critical"), 0.08),
            (MaxRates, None, 3.0, 0.0, Some("critical"), 0.08),
        ];
        for (source, seen, critical, batch, acts_for, floor) in rows {
            let r = reading(source, seen, critical, batch);
            let class = pressure_class(&r, share);
            assert_eq!(class.as_deref(), acts_for, "{source:?}, demands {critical} + {batch}");
            let Some(tier) = class.as_deref().and_then(|c| r.tier_of(c)) else {
                continue;
            };
            let got = cut_floor(&r, tier, 0.25);
            assert!((got - floor).abs() < 1e-9, "{source:?}, demands {critical} + {batch}: floor {got}, want {floor}");
        }
    }

    #[test]
    fn a_cut_is_worth_making_only_where_the_wait_costs_the_tiers_it_protects_more_than_it_turns_away() {
        // 8 workers; critical brings 10 jobs/s of 200 ms (2 worker-s/s) with
        // a best chance of 0.95; batch brings jobs of 1 s, every one on time.
        // (critical's chance now, batch's jobs/s, admission the cut leaves, at stake, costs, pays)
        let rows = [
            // Light load: a wait costing critical 2 points (0.2 jobs/s) is
            // not worth turning away 1 of batch's 4 jobs/s ...
            (0.93, 4.0, 5.0, 0.2, 1.0, false),
            // ... one costing it 30 points (3 jobs/s) is.
            (0.65, 4.0, 5.0, 3.0, 1.0, true),
            // Past the capacity only what the workers would have finished
            // counts: cutting 8 to 7 turns away 1 job/s, not 5.
            (0.93, 10.0, 7.0, 0.2, 1.0, false),
            (0.84, 10.0, 7.0, 1.1, 1.0, true),
            // A cut that leaves batch all its work costs nothing.
            (0.95, 4.0, 6.0, 0.0, 0.0, true),
        ];
        for (now, batch_rate, leaves, at_stake, costs, pays) in rows {
            let r = reading(CapacitySource::Configured, Some(5.0), 2.0, batch_rate);
            let chances = |n: &str| match n {
                "critical" => Chances { asked: 10.0, mean_service_ms: 200.0, best: 0.95, now },
                _ => Chances { asked: batch_rate, mean_service_ms: 1_000.0, best: 1.0, now: 1.0 },
            };
            let worth = cut_worth(&r, Tier::Critical, leaves, chances).expect("batch is at work beneath");
            let case = format!("critical at {now}, batch {batch_rate}/s, cut to {leaves}: {worth:?}");
            assert!((worth.at_stake - at_stake).abs() < 1e-9 && (worth.costs - costs).abs() < 1e-9, "{case}");
            assert_eq!(worth.pays(), pays, "{case}");
        }
        // With no lower tier at work the cut is the tier's own: not judged here.
        let alone = reading(CapacitySource::Configured, Some(5.0), 2.0, 0.0);
        let chances = |_: &str| Chances { asked: 10.0, mean_service_ms: 200.0, best: 0.95, now: 0.5 };
        assert_eq!(cut_worth(&alone, Tier::Critical, 5.0, chances), None);
    }
}
