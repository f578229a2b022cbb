//! Bucket: charge a class's shared token bucket with compare-and-swap.
//!
//! The arithmetic is `shedder_common::bucket::charge`; this module only makes
//! the update atomic across CPUs, so no interleaving can admit more than the
//! bucket holds.

use aya_ebpf::helpers::bpf_ktime_get_ns;
use core::intrinsics::{AtomicOrdering, atomic_cxchg};
use shedder_common::bucket::{BucketParams, charge};

use crate::maps::BUCKETS;

/// Tries before a contended bucket is treated as empty. Each failed try means
/// another CPU just took tokens, so giving up errs on the side of shedding.
const CAS_TRIES: u32 = 4;

/// Outcome of charging a bucket.
pub enum Charge {
    Fits,
    Empty,
    /// Lost the race `CAS_TRIES` times; judged as empty.
    Contended,
}

#[inline(always)]
pub fn charge_class(class: u32, params: &BucketParams) -> Charge {
    // A closed class needs no clock reading, the dearest step of a charge.
    if params.is_closed() {
        return Charge::Empty;
    }
    let Some(state) = BUCKETS.get_ptr_mut(class) else {
        return Charge::Empty;
    };
    // SAFETY: `state` points into an array map value that lives as long as the map.
    let now = unsafe { bpf_ktime_get_ns() };
    // An aligned 64-bit load cannot tear on BPF; the CAS below validates it.
    let mut tat = unsafe { state.read_volatile() };
    for _ in 0..CAS_TRIES {
        let Some(next) = charge(tat, now, params) else {
            return Charge::Empty;
        };
        let (seen, swapped) =
            unsafe { atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(state, tat, next) };
        if swapped {
            return Charge::Fits;
        }
        tat = seen;
    }
    Charge::Contended
}
