//! Per-CPU counters: one outcome per classified SYN (and per charged SYN of a
//! tenant), and whether it was a resend; one reason per passed packet.

use shedder_common::{maps::PassReason, tenant::Fit, verdict::Outcome};

use crate::maps::{CLASS_COUNTERS, PASS_COUNTERS, TENANT_COUNTERS};

#[inline(always)]
pub fn count_pass(reason: PassReason) {
    if let Some(n) = PASS_COUNTERS.get_ptr_mut(reason as u32) {
        // SAFETY: per-CPU slot; nothing else on this CPU runs concurrently.
        unsafe { *n += 1 };
    }
}

#[inline(always)]
pub fn count_outcome(class: u32, outcome: Outcome) {
    let Some(c) = CLASS_COUNTERS.get_ptr_mut(class) else {
        return;
    };
    // SAFETY: per-CPU slot; nothing else on this CPU runs concurrently.
    unsafe { (*c).count(outcome) };
}

#[inline(always)]
pub fn count_tenant(tenant: u32, fit: Fit) {
    let Some(c) = TENANT_COUNTERS.get_ptr_mut(tenant) else {
        return;
    };
    // SAFETY: per-CPU slot; nothing else on this CPU runs concurrently.
    unsafe { (*c).count(fit) };
}

/// One SYN, of `class` and maybe of `tenant`, was the resend of one dropped.
#[inline(always)]
pub fn count_resent(class: u32, tenant: Option<u32>) {
    if let Some(c) = CLASS_COUNTERS.get_ptr_mut(class) {
        // SAFETY: per-CPU slot; nothing else on this CPU runs concurrently.
        unsafe { (*c).resent += 1 };
    }
    if let Some(c) = tenant.and_then(|t| TENANT_COUNTERS.get_ptr_mut(t)) {
        // SAFETY: per-CPU slot; nothing else on this CPU runs concurrently.
        unsafe { (*c).resent += 1 };
    }
}
