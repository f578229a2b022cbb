//! Sharing the backend's capacity among classes: strictly by tier, and by
//! weight within a tier (weighted max-min fairness, "water-filling").
//!
//! Every quantity is in worker-seconds per second. A class never gets more
//! than it asks for; what one class of a tier does not use goes to the
//! others of the tier, and what the tier does not use goes to the next.
//! (What keeps a lower tier's long jobs from taking every worker a higher
//! tier needs at once is job-level, in [`super::reserve`].)
//!
//! **Chance is not counted against the other classes.** A class's demand is
//! its last second's work, held for a second as it falls. A class of a few
//! long jobs a second reads its mean one second and three times it the
//! next, by chance alone; given first claim on the workers, those bursts
//! left a lower tier nothing while the workers sat mostly idle. So
//! [`allot`] sizes each class's share against the others' *sure* demand
//! (their mean, or a count too high to be chance: [`super::sure`]), while the
//! class's own claim is whole. The shares may then add up to more than the
//! capacity by what chance might bring; when it does, `admit` sorts the
//! jobs at start, where the reserve keeps the higher tiers' workers. (A
//! class whose admissions `admit` already refuses past the waste tolerance
//! keeps less: [`super::share`].)

use super::tier::Tier;
use crate::water_fill::water_fill;

/// What a class asks of the backend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Claim {
    pub tier: Tier,
    pub weight: f64,
    /// Worker-seconds per second it would use if all its jobs were admitted.
    pub demand: f64,
    /// The part of `demand` that chance does not explain (at most
    /// `demand`): what the class counts for when another class's share is
    /// sized ([`super::sure`]).
    pub sure: f64,
}

/// Each class's share of `capacity` when it claims its whole demand and
/// every other class only its sure part, in the claims' order.
pub fn allot(capacity: f64, claims: &[Claim]) -> Vec<f64> {
    (0..claims.len())
        .map(|i| {
            let against: Vec<Claim> = claims
                .iter()
                .enumerate()
                .map(|(j, c)| if j == i { *c } else { Claim { demand: c.sure, ..*c } })
                .collect();
            allocate(capacity, &against)[i]
        })
        .collect()
}

/// Each claim's share of `capacity`, in the claims' order.
pub fn allocate(capacity: f64, claims: &[Claim]) -> Vec<f64> {
    let mut shares = vec![0.0; claims.len()];
    let capacity = capacity.max(0.0);
    let mut tiers: Vec<Tier> = claims.iter().map(|c| c.tier).collect();
    tiers.sort();
    tiers.dedup();
    let weights: Vec<f64> = claims.iter().map(|c| c.weight).collect();
    for tier in tiers {
        let left = (capacity - shares.iter().sum::<f64>()).max(0.0);
        let rooms: Vec<f64> = claims.iter().map(|c| if c.tier == tier { c.demand } else { 0.0 }).collect();
        for (share, poured) in shares.iter_mut().zip(water_fill(left, &rooms, &weights)) {
            *share += poured;
        }
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(tier: Tier, weight: f64, demand: f64) -> Claim {
        Claim { tier, weight, demand, sure: demand }
    }

    fn unsure(tier: Tier, demand: f64, sure: f64) -> Claim {
        Claim { tier, weight: 1.0, demand, sure }
    }

    fn assert_shares(what: &str, shares: &[f64], expected: &[f64]) {
        assert_eq!(shares.len(), expected.len(), "{what}");
        for (got, want) in shares.iter().zip(expected) {
            assert!((got - want).abs() < 1e-9, "{what}: {shares:?} != {expected:?}");
        }
    }

    #[test]
    fn capacity_goes_by_tier_then_by_weight() {
        use Tier::*;
        // (capacity, claims, expected shares)
        let rows: Vec<(&str, f64, Vec<Claim>, Vec<f64>)> = vec![
            ("room for all", 10.0, vec![claim(Critical, 1.0, 2.0), claim(Sheddable, 1.0, 5.0)], vec![2.0, 5.0]),
            (
                "the lower tier gets what is left",
                6.0,
                vec![claim(Sheddable, 1.0, 8.6), claim(Critical, 1.0, 2.0)],
                vec![4.0, 2.0],
            ),
            (
                "the top tier alone overflows",
                1.5,
                vec![claim(Critical, 1.0, 2.0), claim(Standard, 1.0, 1.0)],
                vec![1.5, 0.0],
            ),
            (
                "equal weights split evenly",
                4.0,
                vec![claim(Standard, 1.0, 5.0), claim(Standard, 1.0, 5.0)],
                vec![2.0, 2.0],
            ),
            ("weights 3:1", 4.0, vec![claim(Standard, 3.0, 5.0), claim(Standard, 1.0, 5.0)], vec![3.0, 1.0]),
            (
                "a small claim is met and its share goes to the others",
                6.0,
                vec![claim(Standard, 1.0, 1.0), claim(Standard, 1.0, 9.0), claim(Standard, 1.0, 9.0)],
                vec![1.0, 2.5, 2.5],
            ),
            ("no capacity", 0.0, vec![claim(Critical, 1.0, 1.0)], vec![0.0]),
            ("no demand", 5.0, vec![claim(Critical, 1.0, 0.0)], vec![0.0]),
        ];
        for (what, capacity, claims, expected) in rows {
            let shares = allocate(capacity, &claims);
            assert_shares(what, &shares, &expected);
            let total: f64 = shares.iter().sum();
            assert!(total <= capacity + 1e-9, "{what}: over capacity");
        }
    }

    #[test]
    fn a_share_is_sized_against_the_others_sure_demand_and_claims_its_own_whole() {
        use Tier::*;
        // (what, capacity, claims, expected shares)
        let rows: Vec<(&str, f64, Vec<Claim>, Vec<f64>)> = vec![
            (
                "a higher class's burst of chance leaves the lower tier its room",
                2.0,
                vec![unsure(Critical, 3.6, 0.6), unsure(Standard, 0.6, 0.6)],
                vec![2.0, 0.6],
            ),
            (
                "a sure higher claim still comes first",
                2.0,
                vec![unsure(Critical, 3.6, 3.6), unsure(Standard, 0.6, 0.6)],
                vec![2.0, 0.0],
            ),
            ("one class: as allocate", 4.0, vec![unsure(Standard, 6.0, 1.0)], vec![4.0]),
            (
                "room for all: as allocate",
                10.0,
                vec![unsure(Critical, 2.0, 1.0), unsure(Sheddable, 5.0, 3.0)],
                vec![2.0, 5.0],
            ),
            (
                "within a tier, each against the other's sure part",
                4.0,
                vec![unsure(Standard, 5.0, 1.0), unsure(Standard, 5.0, 5.0)],
                vec![2.0, 3.0],
            ),
        ];
        for (what, capacity, claims, expected) in rows {
            assert_shares(what, &allot(capacity, &claims), &expected);
        }
    }
}
