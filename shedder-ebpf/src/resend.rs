//! Resend: whether a charged SYN is one this CPU dropped before, sent again,
//! and remembering the ones it drops (the rules: `shedder_common::resend`).
//!
//! Both calls keep what they carry to a single number, the fingerprint: a
//! flag that outlived [`look`] would split every path the verifier walks
//! through the rest of the program in two.

use shedder_common::resend::{fingerprint, fold, slot};

use crate::{
    counters,
    maps::DROPPED_SYNS,
    parse::{Addrs, Syn},
};

/// Counts `syn` as resent (for `class`, and `tenant` if any) when this CPU
/// dropped it before; returns its fingerprint, for [`remember_drop`].
#[inline(always)]
pub fn look(syn: &Syn, class: u32, tenant: Option<u32>) -> u64 {
    let src = match &syn.addrs {
        Addrs::V4 { src, .. } => *src,
        Addrs::V6 { src, .. } => fold(src),
    };
    let fingerprint = fingerprint(src, syn.facts.src_port, syn.facts.dst_port, syn.facts.seq);
    if DROPPED_SYNS.get(slot(fingerprint)).is_some_and(|last| *last == fingerprint) {
        counters::count_resent(class, tenant);
    }
    fingerprint
}

/// Remembers that this CPU dropped the SYN with this fingerprint: its
/// client will send it again.
#[inline(always)]
pub fn remember_drop(fingerprint: u64) {
    if let Some(last) = DROPPED_SYNS.get_ptr_mut(slot(fingerprint)) {
        // SAFETY: per-CPU slot; nothing else on this CPU runs concurrently.
        unsafe { *last = fingerprint };
    }
}
