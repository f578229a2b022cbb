//! Bucket: charge a shared token bucket with compare-and-swap, and give a
//! charge back the same way.
//!
//! The arithmetic is `shedder_common::bucket` (`charge`, `refund`); this
//! module only makes each update atomic across CPUs, so no interleaving can
//! admit more than the bucket holds, and reads the clock the bucket names.

use aya_ebpf::helpers::{bpf_ktime_get_coarse_ns, bpf_ktime_get_ns};
use core::intrinsics::{AtomicOrdering, atomic_cxchg};
use shedder_common::bucket::{BucketParams, charge, clock, refund};

/// Tries before a contended bucket is treated as empty. Each failed try means
/// another CPU just took tokens, so giving up errs on the side of shedding.
const CAS_TRIES: u32 = 4;

/// Tries before a refund is given up. A charge judged empty costs one SYN,
/// which its client resends; a refund given up is a token lost for good, so
/// it tries far longer. Each failed try is another CPU's update succeeding,
/// so the loop always makes progress.
const REFUND_TRIES: u32 = 32;

/// Outcome of charging a bucket.
pub enum Charge {
    Fits,
    Empty,
    /// Lost the race `CAS_TRIES` times; judged as empty.
    Contended,
}

/// The coarse clock, read once per charged SYN for the watchdog and every
/// bucket that uses it.
#[inline(always)]
pub fn coarse_now() -> u64 {
    // SAFETY: a helper call with no arguments and no preconditions.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// The clock the daemon chose for this bucket (see `shedder_common::bucket::clock`):
/// `coarse`, or a fresh precise reading.
#[inline(always)]
fn now(params: &BucketParams, coarse: u64) -> u64 {
    // SAFETY: a helper call with no arguments and no preconditions.
    if params.clock == clock::COARSE { coarse } else { unsafe { bpf_ktime_get_ns() } }
}

/// Compare-and-swap of a bucket state; the value seen, and whether it was swapped.
#[inline(always)]
fn swap(state: *mut u64, old: u64, new: u64) -> (u64, bool) {
    // SAFETY: `state` points into an array map value that lives as long as the map.
    unsafe { atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(state, old, new) }
}

/// Charges one connection to the bucket whose state is `state`.
#[inline(always)]
pub fn charge_state(state: Option<*mut u64>, params: &BucketParams, coarse: u64) -> Charge {
    // A closed bucket needs no clock reading, the dearest step of a charge.
    if params.is_closed() {
        return Charge::Empty;
    }
    let Some(state) = state else {
        return Charge::Empty;
    };
    let now = now(params, coarse);
    // SAFETY: an aligned 64-bit load cannot tear on BPF; the CAS below validates it.
    let mut tat = unsafe { state.read_volatile() };
    for _ in 0..CAS_TRIES {
        let Some(next) = charge(tat, now, params) else {
            return Charge::Empty;
        };
        let (seen, swapped) = swap(state, tat, next);
        if swapped {
            return Charge::Fits;
        }
        tat = seen;
    }
    Charge::Contended
}

/// Gives one connection's cost back to the bucket whose state is `state`.
/// A refund that loses the race `REFUND_TRIES` times is abandoned: the
/// bucket then holds one token fewer than it might, never more.
#[inline(always)]
pub fn refund_state(state: Option<*mut u64>, params: &BucketParams, coarse: u64) {
    let Some(state) = state else {
        return;
    };
    let now = now(params, coarse);
    // SAFETY: as in `charge_state`.
    let mut tat = unsafe { state.read_volatile() };
    for _ in 0..REFUND_TRIES {
        let Some(back) = refund(tat, now, params) else {
            return;
        };
        let (seen, swapped) = swap(state, tat, back);
        if swapped {
            return;
        }
        tat = seen;
    }
}
