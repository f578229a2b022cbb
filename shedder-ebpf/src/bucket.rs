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

/// The clocks one charged SYN reads: the coarse clock once, for the watchdog
/// and every bucket on it, and the precise clock (the dearer helper by far)
/// at most once, the first time a bucket on it asks, so that a tenant and a
/// class both on the precise clock, and a refund, share one reading.
pub struct Clock {
    coarse: u64,
    precise: Option<u64>,
}

impl Clock {
    /// Reads the coarse clock; the precise one waits until a bucket needs it.
    #[inline(always)]
    pub fn read() -> Self {
        // SAFETY: a helper call with no arguments and no preconditions.
        Clock { coarse: unsafe { bpf_ktime_get_coarse_ns() }, precise: None }
    }

    /// The coarse clock's reading.
    #[inline(always)]
    pub fn coarse(&self) -> u64 {
        self.coarse
    }

    /// The reading of the clock the daemon chose for this bucket (see
    /// `shedder_common::bucket::clock`).
    #[inline(always)]
    fn now(&mut self, params: &BucketParams) -> u64 {
        if params.clock == clock::COARSE {
            return self.coarse;
        }
        match self.precise {
            Some(precise) => precise,
            None => {
                // SAFETY: a helper call with no arguments and no preconditions.
                let precise = unsafe { bpf_ktime_get_ns() };
                self.precise = Some(precise);
                precise
            }
        }
    }
}

/// Compare-and-swap of a bucket state; the value seen, and whether it was swapped.
#[inline(always)]
fn swap(state: *mut u64, old: u64, new: u64) -> (u64, bool) {
    // SAFETY: `state` points into an array map value that lives as long as the map.
    unsafe { atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(state, old, new) }
}

/// Charges one connection to the bucket whose state is `state`.
#[inline(always)]
pub fn charge_state(state: Option<*mut u64>, params: &BucketParams, clock: &mut Clock) -> Charge {
    // A closed bucket needs no clock reading, the dearest step of a charge.
    if params.is_closed() {
        return Charge::Empty;
    }
    let Some(state) = state else {
        return Charge::Empty;
    };
    let now = clock.now(params);
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
pub fn refund_state(state: Option<*mut u64>, params: &BucketParams, clock: &mut Clock) {
    let Some(state) = state else {
        return;
    };
    let now = clock.now(params);
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
