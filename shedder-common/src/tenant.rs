//! Two buckets for one SYN: its tenant's, then its class's.
//!
//! A tenant is picked by source CIDR (its own LPM tries, apart from the class
//! rules). A SYN from a tenant's addresses is admitted only if it fits both
//! buckets. The tenant's is charged first, so a tenant over its budget is
//! refused without spending any of the class's bucket, which the other
//! tenants share. When the class's bucket refuses after the tenant's took
//! its tokens, the tenant gets them back ([`crate::bucket::refund`]): a
//! connection that was not admitted costs its tenant nothing. A SYN from no
//! tenant's addresses is charged to its class alone.

use crate::maps::TenantCounters;

/// Where a SYN's charge stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Fit every bucket it was charged to.
    Both,
    /// Its tenant's bucket refused it; the class's was not charged.
    OverTenant,
    /// Its class's bucket refused it (its tenant's, if any, was refunded).
    OverClass,
}

impl Fit {
    /// Whether the connection may start.
    pub const fn fits(self) -> bool {
        matches!(self, Self::Both)
    }
}

/// The buckets one SYN is charged to, as each side (program, model) holds them.
pub trait Buckets {
    /// Charges the tenant's bucket; false when it is empty.
    fn charge_tenant(&mut self) -> bool;
    /// Charges the class's bucket; false when it is empty.
    fn charge_class(&mut self) -> bool;
    /// Gives back what [`Buckets::charge_tenant`] took.
    fn refund_tenant(&mut self);
}

/// Charges the tenant's bucket (when the SYN has a tenant), then the class's,
/// refunding the tenant when the class refuses.
#[inline(always)]
pub fn charge_both<B: Buckets>(buckets: &mut B, has_tenant: bool) -> Fit {
    if has_tenant && !buckets.charge_tenant() {
        return Fit::OverTenant;
    }
    if buckets.charge_class() {
        return Fit::Both;
    }
    if has_tenant {
        buckets.refund_tenant();
    }
    Fit::OverClass
}

impl TenantCounters {
    /// Counts one charged SYN of the tenant.
    #[inline(always)]
    pub fn count(&mut self, fit: Fit) {
        match fit {
            Fit::Both => self.admitted += 1,
            Fit::OverTenant => self.over_tenant += 1,
            Fit::OverClass => self.over_class += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets that hold a given number of connections.
    struct Counted {
        tenant: u32,
        class: u32,
    }

    impl Buckets for Counted {
        fn charge_tenant(&mut self) -> bool {
            self.tenant.checked_sub(1).map(|left| self.tenant = left).is_some()
        }
        fn charge_class(&mut self) -> bool {
            self.class.checked_sub(1).map(|left| self.class = left).is_some()
        }
        fn refund_tenant(&mut self) {
            self.tenant += 1;
        }
    }

    #[test]
    fn a_syn_must_fit_both_and_a_refused_one_costs_its_tenant_nothing() {
        // (tenant tokens, class tokens, has tenant) -> fit, tokens left after
        let table = [
            (1, 1, true, Fit::Both, (0, 0)),
            (0, 1, true, Fit::OverTenant, (0, 1)),
            (1, 0, true, Fit::OverClass, (1, 0)),
            (0, 0, true, Fit::OverTenant, (0, 0)),
            (0, 1, false, Fit::Both, (0, 0)),
            (5, 0, false, Fit::OverClass, (5, 0)),
        ];
        for (tenant, class, has_tenant, want, left) in table {
            let mut b = Counted { tenant, class };
            assert_eq!(charge_both(&mut b, has_tenant), want, "{tenant} {class} {has_tenant}");
            assert_eq!((b.tenant, b.class), left, "{tenant} {class} {has_tenant}");
        }
    }
}
