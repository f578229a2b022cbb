//! The tenants' shares from the fleet: each tick the control loop hands over
//! the tenants' loads, which become the fleet's report, and takes back this
//! host's lease of each tenant's quota. A tenant without a fleet quota keeps
//! its configured rate.

use tokio::sync::watch;

use super::{FleetView, TenantUsage, Usage};
use crate::tenant::share::{TenantLoad, TenantShares};

pub struct FleetShares {
    view: watch::Receiver<FleetView>,
    usage: watch::Sender<Usage>,
    /// Each tenant's admitted counter when first seen: the usage's epoch
    /// names this run, whose counts start there (counters pinned across a
    /// restart are not counted twice; what they gained while no daemon ran
    /// is not counted).
    baseline: std::collections::BTreeMap<String, u64>,
}

impl FleetShares {
    pub fn new(view: watch::Receiver<FleetView>, usage: watch::Sender<Usage>) -> Self {
        Self { view, usage, baseline: Default::default() }
    }
}

impl TenantShares for FleetShares {
    fn shares(&mut self, tenants: &[TenantLoad]) -> Vec<f64> {
        let baseline = &mut self.baseline;
        self.usage.send_modify(|usage| {
            if tenants.iter().any(|t| t.stepped) {
                usage.steps += 1;
            }
            for t in tenants {
                let demand = t.offered.unwrap_or(0.0);
                let from = *baseline.entry(t.name.clone()).or_insert(t.admitted_total);
                usage
                    .tenants
                    .insert(t.name.clone(), TenantUsage { demand, admitted: t.admitted_total.saturating_sub(from) });
            }
        });
        let view = self.view.borrow();
        tenants.iter().map(|t| view.shares.get(&t.name).copied().unwrap_or(t.configured_rate)).collect()
    }

    /// A fleet tenant borrowing on this host would take more than its quota.
    fn may_borrow(&self, tenant: &str) -> bool {
        !self.view.borrow().shares.contains_key(tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::FleetState;

    #[test]
    fn fleet_tenants_take_their_lease_and_report_their_load_others_keep_their_rate() {
        let view = FleetView {
            state: FleetState::Synced,
            shares: [("a".to_string(), 120.0)].into(),
            fleet_admitted: Default::default(),
            reports: 1,
            nudged: 0,
        };
        let (_view_tx, view_rx) = watch::channel(view);
        let (usage_tx, usage_rx) = watch::channel(Usage::default());
        let mut shares = FleetShares::new(view_rx, usage_tx);
        let load = |name: &str, offered, admitted_total| TenantLoad {
            name: name.into(),
            configured_rate: 50.0,
            weight: 1.0,
            offered,
            admitted: None,
            admitted_total,
            stepped: false,
        };
        // Counters found at 7 (pinned from an earlier run): this run counts from there.
        assert_eq!(shares.shares(&[load("a", Some(300.0), 7), load("b", None, 7)]), [120.0, 50.0]);
        shares.shares(&[load("a", Some(300.0), 19), load("b", None, 7)]);
        let usage = usage_rx.borrow();
        assert_eq!(usage.tenants["a"], TenantUsage { demand: 300.0, admitted: 12 });
        assert_eq!(usage.tenants["b"], TenantUsage { demand: 0.0, admitted: 0 });
        assert!(!shares.may_borrow("a") && shares.may_borrow("b"), "only tenants outside the fleet borrow");
    }
}
