//! The leases this host holds, and what it admits from them: a share while
//! its lease lasts, the local share once it has expired.
//!
//! A lease's end is measured from when the report was *sent*: Redis ran the
//! script later, so the host always lets go first, whatever its clock; and
//! a little earlier still (`early`), for a late timer or a busy apply.

use std::{collections::BTreeMap, fmt, time::Duration};

use tokio::time::Instant;

use super::{
    exchange::{Grants, Held},
    settings::TenantQuota,
};

/// Per tenant, the rate (connections/s) this host may admit now.
pub type Shares = BTreeMap<String, f64>;

/// Where the host's shares come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetState {
    /// The last report was answered: shares are current.
    Synced,
    /// Redis did not answer; leases still hold.
    Holding,
    /// No lease holds: local shares.
    Local,
}

impl FleetState {
    pub const ALL: [FleetState; 3] = [FleetState::Synced, FleetState::Holding, FleetState::Local];

    pub fn name(self) -> &'static str {
        match self {
            Self::Synced => "synced",
            Self::Holding => "holding",
            Self::Local => "local",
        }
    }
}

impl fmt::Display for FleetState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug)]
struct Lease {
    share: f64,
    until: Instant,
}

pub struct LeaseBook {
    tenants: Vec<TenantQuota>,
    leases: Vec<Option<Lease>>,
    answered: bool,
    early: Duration,
}

impl LeaseBook {
    /// The host lets go of each lease `early` before it ends.
    pub fn new(tenants: Vec<TenantQuota>, early: Duration) -> Self {
        let leases = vec![None; tenants.len()];
        Self { tenants, leases, answered: false, early }
    }

    fn live(&self, now: Instant) -> impl Iterator<Item = Option<&Lease>> {
        self.leases.iter().map(move |lease| lease.as_ref().filter(|l| now < l.until))
    }

    /// What the host holds now, for its next report.
    pub fn held(&self, now: Instant) -> Vec<Held> {
        self.live(now)
            .map(|lease| lease.map_or_else(Held::default, |l| Held { share: l.share, remaining: l.until - now }))
            .collect()
    }

    /// Takes the answer to a report sent at `sent`.
    pub fn answered(&mut self, grants: &Grants, sent: Instant) {
        for (lease, grant) in self.leases.iter_mut().zip(&grants.tenants) {
            *lease = Some(Lease { share: grant.share, until: sent + grant.lasts.saturating_sub(self.early) });
        }
        self.answered = true;
    }

    /// A report went unanswered: leases hold until they expire.
    pub fn unanswered(&mut self) {
        self.answered = false;
    }

    pub fn state(&self, now: Instant) -> FleetState {
        if !self.live(now).any(|lease| lease.is_some()) {
            FleetState::Local
        } else if self.answered {
            FleetState::Synced
        } else {
            FleetState::Holding
        }
    }

    /// Each tenant's rate: its lease's share while it lasts, else the local share.
    pub fn shares(&self, now: Instant) -> Shares {
        self.tenants
            .iter()
            .zip(self.live(now))
            .map(|(tenant, lease)| (tenant.name.clone(), lease.map_or(tenant.local, |l| l.share)))
            .collect()
    }

    /// When the next lease expires, if one holds.
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        self.live(now).flatten().map(|l| l.until).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::exchange::Grant;

    fn grants(shares: &[(f64, u64)]) -> Grants {
        Grants {
            tenants: shares
                .iter()
                .map(|&(share, ms)| Grant { share, lasts: Duration::from_millis(ms), fleet_admitted: 0, fair: share })
                .collect(),
            ack_needed: false,
            grace: false,
        }
    }

    #[test]
    fn a_lease_holds_until_it_expires_then_the_local_share_takes_over() {
        let tenants = vec![
            TenantQuota { name: "a".into(), quota: 100.0, local: 25.0 },
            TenantQuota { name: "b".into(), quota: 40.0, local: 10.0 },
        ];
        let mut book = LeaseBook::new(tenants, Duration::from_millis(10));
        let t0 = Instant::now();
        assert_eq!(book.state(t0), FleetState::Local);
        assert_eq!(book.shares(t0), Shares::from([("a".into(), 25.0), ("b".into(), 10.0)]));
        book.answered(&grants(&[(60.0, 1010), (30.0, 0)]), t0);
        let ms = |n| t0 + Duration::from_millis(n);
        // (time, answered?, state, a, b): a zero-length lease is no lease.
        let rows = [
            (ms(10), true, FleetState::Synced, 60.0, 10.0),
            (ms(500), false, FleetState::Holding, 60.0, 10.0),
            (ms(999), false, FleetState::Holding, 60.0, 10.0),
            (ms(1000), false, FleetState::Local, 25.0, 10.0),
        ];
        for (now, answered, state, a, b) in rows {
            if !answered {
                book.unanswered();
            }
            assert_eq!(book.state(now), state, "{now:?}");
            assert_eq!(book.shares(now), Shares::from([("a".into(), a), ("b".into(), b)]));
        }
        assert_eq!(book.held(ms(400))[0], Held { share: 60.0, remaining: Duration::from_millis(600) });
        assert_eq!(book.held(ms(400))[1], Held::default());
    }
}
