//! Each tick, what rate each tenant's bucket gets: its share, with what quiet
//! tenants leave unused lent to busy ones by weight.
//!
//! Policy, apart from the mechanism (the buckets in the fast path): a pure
//! function from shares, weights and measured demand to rates, whose rates
//! never add up to more than the shares do.

use crate::water_fill::water_fill;

/// What the config says of a tenant's budget before any lending.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantPolicy {
    pub name: String,
    /// Connections/s.
    pub rate: f64,
    pub weight: f64,
}

/// One tenant, as the tick sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantLoad {
    pub name: String,
    /// The configured rate, connections/s.
    pub configured_rate: f64,
    pub weight: f64,
    /// SYNs the tenant offered per second over the last measurement, or
    /// `None` before there is one.
    pub offered: Option<f64>,
    /// Connections it was admitted per second, likewise.
    pub admitted: Option<f64>,
    /// Connections it was admitted since its counter began (a fleet reports
    /// counts, not rates, so that none is lost or counted twice).
    pub admitted_total: u64,
    /// `offered` is a step up or down told apart from chance at this tick,
    /// not the rate over the whole measurement.
    pub stepped: bool,
}

/// Where each tenant's share comes from: the rate this host is entitled to
/// grant it before lending. Called once per tick with every tenant's load;
/// returns one share per tenant, in order. [`ConfiguredShares`] answers with
/// the configured rates; a fleet-wide source can answer instead with this
/// host's lease of each tenant's global quota (and report the loads it is given).
pub trait TenantShares: Send {
    fn shares(&mut self, tenants: &[TenantLoad]) -> Vec<f64>;

    /// Whether `tenant` may borrow what others leave beyond its share (a
    /// tenant whose share is its part of a fleet-wide quota may not).
    fn may_borrow(&self, _tenant: &str) -> bool {
        true
    }
}

/// Every tenant's share is its configured rate.
pub struct ConfiguredShares;

impl TenantShares for ConfiguredShares {
    fn shares(&mut self, tenants: &[TenantLoad]) -> Vec<f64> {
        tenants.iter().map(|t| t.configured_rate).collect()
    }
}

/// What a tenant keeps of its own share when it asks for less: its demand
/// with this much room to grow before the next tick...
pub const HEADROOM: f64 = 1.25;
/// ...and never less than this fraction of its share, so a tenant that wakes
/// up is not starved while its demand is being measured.
pub const KEPT_FLOOR: f64 = 0.125;

/// The rates to write to the tenants' buckets.
///
/// Each tenant keeps of its share what it uses ([`HEADROOM`] over its demand,
/// at least [`KEPT_FLOOR`] of the share). What the others leave goes to
/// tenants whose demand exceeds what they keep, by weight, each up to its
/// demand (water-filling: what a capped tenant does not take is filled into
/// the others); a tenant whose share is 0 is closed and borrows nothing, and
/// one that may not borrow (`may_borrow`: its share is its part of a
/// fleet-wide quota) never gets more than its share, so what it would have
/// taken goes to the others. What nobody takes goes back to the tenants that
/// left it, in proportion. Without a measurement, every tenant gets its
/// share. The rates add up to the shares' sum.
pub fn lend(shares: &[f64], weights: &[f64], demand: &[Option<f64>], may_borrow: &[bool]) -> Vec<f64> {
    let n = shares.len();
    let Some(demand) = demand.iter().copied().collect::<Option<Vec<f64>>>() else {
        return shares.to_vec();
    };
    let kept: Vec<f64> = (0..n).map(|i| shares[i].min((demand[i] * HEADROOM).max(shares[i] * KEPT_FLOOR))).collect();
    let unused: f64 = shares.iter().zip(&kept).map(|(s, k)| s - k).sum();
    // A tenant with no share of its own is closed: nothing is lent to it.
    let room = |i: usize| match shares[i] > 0.0 && may_borrow[i] {
        true => (demand[i] - kept[i]).max(0.0),
        false => 0.0,
    };
    let lent = water_fill(unused, &(0..n).map(room).collect::<Vec<_>>(), weights);
    let mut rates: Vec<f64> = kept.iter().zip(&lent).map(|(k, l)| k + l).collect();
    let left = unused - lent.iter().sum::<f64>();
    if left > 0.0 && unused > 0.0 {
        for i in 0..n {
            rates[i] += left * (shares[i] - kept[i]) / unused;
        }
    }
    rates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    /// (shares, weights, demand) -> rates
    type Row = (&'static [f64], &'static [f64], &'static [f64], &'static [f64]);

    #[test]
    fn unused_share_is_lent_by_weight_and_never_more_than_the_shares() {
        let table: [Row; 6] = [
            // All busy: everyone keeps its share, nothing to lend.
            (&[100.0, 100.0], &[1.0, 1.0], &[500.0, 500.0], &[100.0, 100.0]),
            // One floods at 10x, one is quiet at 40: the quiet one keeps 50
            // (25% headroom), the flooder gets the other 50.
            (&[100.0, 100.0], &[1.0, 1.0], &[1000.0, 40.0], &[150.0, 50.0]),
            // Two busy tenants split the quiet one's 87.5 by weight 3:1.
            (&[100.0, 100.0, 100.0], &[3.0, 1.0, 1.0], &[1000.0, 1000.0, 0.0], &[165.625, 121.875, 12.5]),
            // A tenant capped at its demand leaves the rest to the other.
            (&[100.0, 100.0, 100.0], &[1.0, 1.0, 1.0], &[1000.0, 120.0, 0.0], &[167.5, 120.0, 12.5]),
            // Nobody wants the spare: it goes back to whoever left it.
            (&[100.0, 100.0], &[1.0, 1.0], &[40.0, 0.0], &[100.0, 100.0]),
            // A closed tenant lends nothing and gets nothing.
            (&[0.0, 100.0], &[1.0, 1.0], &[50.0, 50.0], &[0.0, 100.0]),
        ];
        for (shares, weights, demand, want) in table {
            let demand: Vec<_> = demand.iter().map(|d| Some(*d)).collect();
            let rates = lend(shares, weights, &demand, &vec![true; shares.len()]);
            assert!(close(&rates, want), "{shares:?} {weights:?} {demand:?}: {rates:?}, want {want:?}");
            let (sum, cap): (f64, f64) = (rates.iter().sum(), shares.iter().sum());
            assert!(sum <= cap + 1e-9, "{rates:?} adds up to more than {cap}");
        }
    }

    #[test]
    fn without_a_measurement_every_tenant_gets_its_share() {
        assert_eq!(lend(&[10.0, 20.0], &[1.0, 1.0], &[Some(1.0), None], &[true, true]), [10.0, 20.0]);
    }

    #[test]
    fn a_tenant_that_may_not_borrow_keeps_its_share_and_the_spare_goes_to_the_others() {
        // The first two flood; the first may not borrow (a fleet tenant), so
        // the quiet third's spare (87.5) all goes to the second.
        let demand = [Some(1000.0), Some(1000.0), Some(0.0)];
        let rates = lend(&[100.0, 100.0, 100.0], &[1.0, 1.0, 1.0], &demand, &[false, true, true]);
        assert!(close(&rates, &[100.0, 187.5, 12.5]), "{rates:?}");
    }
}
