//! Tenant: the tenant's bucket and the class's, charged for one SYN in the
//! order and with the refund `shedder_common::tenant::charge_both` sets.

use aya_log_ebpf::warn;
use shedder_common::{
    bucket::BucketParams,
    maps::{GlobalConfig, rule_flags},
    tenant::{Buckets, Fit, charge_both},
};

use crate::{
    bucket::{Charge, Clock, charge_state, refund_state},
    hook::Hook,
    lpm::SourceKey,
    maps::{BUCKETS, TENANT_BUCKETS, TENANT_V4, TENANT_V6, TENANTS},
    parse::Addrs,
};

/// The tenant slot whose CIDR covers the SYN's source, if any.
#[inline(always)]
pub fn tenant_of(addrs: &Addrs, global: &GlobalConfig) -> Option<u32> {
    let present = global.rules_present;
    let target = match addrs {
        Addrs::V4 { src, .. } if present & rule_flags::TENANT_V4 != 0 => {
            TENANT_V4.get(SourceKey::slot().exact(src)).copied().unwrap_or(0)
        }
        Addrs::V6 { src, .. } if present & rule_flags::TENANT_V6 != 0 => {
            TENANT_V6.get(SourceKey::slot().exact(src)).copied().unwrap_or(0)
        }
        _ => 0,
    };
    target.checked_sub(1)
}

/// The maps' buckets of one SYN.
struct MapBuckets<'a, 'c, H: Hook> {
    ctx: &'a H,
    class: u32,
    class_params: &'a BucketParams,
    tenant: u32,
    tenant_params: Option<&'a BucketParams>,
    clock: &'c mut Clock,
}

/// Whose bucket a charge was, as the log names it.
#[derive(Clone, Copy)]
enum Owner {
    Tenant,
    Class,
}

/// A contended bucket is judged empty, and said so. The owner is in the
/// message's text, not an argument: the verifier checks a string argument's
/// copy into the log byte by byte on every path that reaches it.
#[inline(always)]
fn fits<H: Hook>(ctx: &H, charged: Charge, owner: Owner, slot: u32) -> bool {
    match charged {
        Charge::Fits => true,
        Charge::Empty => false,
        Charge::Contended => {
            match owner {
                Owner::Tenant => warn!(ctx, "tenant {} bucket contended; judged empty", slot),
                Owner::Class => warn!(ctx, "class {} bucket contended; judged empty", slot),
            }
            false
        }
    }
}

impl<H: Hook> Buckets for MapBuckets<'_, '_, H> {
    #[inline(always)]
    fn charge_tenant(&mut self) -> bool {
        let Some(params) = self.tenant_params else { return false };
        fits(
            self.ctx,
            charge_state(TENANT_BUCKETS.get_ptr_mut(self.tenant), params, self.clock),
            Owner::Tenant,
            self.tenant,
        )
    }

    #[inline(always)]
    fn charge_class(&mut self) -> bool {
        fits(
            self.ctx,
            charge_state(BUCKETS.get_ptr_mut(self.class), self.class_params, self.clock),
            Owner::Class,
            self.class,
        )
    }

    #[inline(always)]
    fn refund_tenant(&mut self) {
        if let Some(params) = self.tenant_params {
            refund_state(TENANT_BUCKETS.get_ptr_mut(self.tenant), params, self.clock);
        }
    }
}

/// Charges the SYN's tenant (when it has one whose slot the map holds) and
/// its class, reading `clock` for both; returns where the charge stopped.
#[inline(always)]
pub fn charge<H: Hook>(
    ctx: &H,
    class: u32,
    class_params: &BucketParams,
    tenant: Option<u32>,
    clock: &mut Clock,
) -> Fit {
    let tenant_params = tenant.and_then(|slot| TENANTS.get(slot));
    let has_tenant = tenant_params.is_some();
    let mut buckets = MapBuckets { ctx, class, class_params, tenant: tenant.unwrap_or(0), tenant_params, clock };
    charge_both(&mut buckets, has_tenant)
}
