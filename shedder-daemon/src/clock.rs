//! The fast path stamps buckets with `bpf_ktime_get_ns`, which is
//! CLOCK_MONOTONIC; user space must read the same clock to reason about them.

/// Nanoseconds on the clock the eBPF buckets use.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) cannot fail");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How far the coarse clock (`bpf_ktime_get_coarse_ns`,
/// CLOCK_MONOTONIC_COARSE) may lag the precise one: its resolution, one
/// scheduler tick (4 ms at HZ=250).
pub fn coarse_tick_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC_COARSE exists since Linux 2.6.32.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    assert_eq!(rc, 0, "clock_getres(CLOCK_MONOTONIC_COARSE) cannot fail");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
