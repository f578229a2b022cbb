//! The fail-open watchdog's arithmetic: is the daemon's heartbeat too old?
//!
//! The daemon writes CLOCK_MONOTONIC nanoseconds into `HEARTBEAT` every tick,
//! and the fast path compares them with the same clock's coarse reading
//! (`bpf_ktime_get_coarse_ns`, at most a scheduler tick behind).
//! Once the heartbeat is older than the configured timeout, the fast path
//! stops shedding: a dead or wedged control plane must never leave the host
//! closed to new connections on budgets nobody maintains any more.

/// Whether the watchdog has anything to judge: it is enabled (a timeout of 0
/// disables it) and the daemon has beaten at least once. The daemon's first
/// tick follows its first write of the maps within milliseconds, so a
/// heartbeat of 0 means "not started", which is also what test beds that
/// drive the maps without a daemon rely on. An unarmed watchdog needs no
/// clock reading.
#[inline(always)]
pub fn is_armed(heartbeat_ns: u64, timeout_ns: u64) -> bool {
    timeout_ns != 0 && heartbeat_ns != 0
}

/// True when an armed watchdog finds the heartbeat more than `timeout_ns`
/// away from `now_ns`.
///
/// Both directions count. A heartbeat slightly ahead of `now` is normal (the
/// coarse clock lags the daemon's reading by up to a tick, and the daemon may
/// read after another CPU's packet did) and is well within the timeout; one
/// ahead by more than the timeout cannot come from this boot's clock, and
/// judging it stale keeps a bogus value from switching the watchdog off for good.
#[inline(always)]
pub fn is_stale(now_ns: u64, heartbeat_ns: u64, timeout_ns: u64) -> bool {
    is_armed(heartbeat_ns, timeout_ns) && now_ns.abs_diff(heartbeat_ns) > timeout_ns
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn fresh_until_the_timeout_has_passed_and_stale_after() {
        let (beat, timeout) = (100 * SEC, 3 * SEC);
        assert!(!is_stale(beat, beat, timeout), "just written");
        assert!(!is_stale(beat + timeout, beat, timeout), "exactly the timeout old");
        assert!(is_stale(beat + timeout + 1, beat, timeout), "one ns past the timeout");
        assert!(is_stale(u64::MAX, beat, timeout), "far in the future");
    }

    #[test]
    fn a_clock_running_behind_the_heartbeat_is_fresh_within_the_timeout() {
        let (beat, timeout) = (100 * SEC, 3 * SEC);
        assert!(!is_stale(beat - 1, beat, timeout), "another CPU read the clock first");
        assert!(!is_stale(beat - timeout, beat, timeout));
        assert!(is_stale(beat - timeout - 1, beat, timeout), "a heartbeat from beyond the timeout is bogus");
        assert!(is_stale(0, u64::MAX, timeout), "no wrap-around at the ends of the clock");
    }

    #[test]
    fn disabled_or_never_beaten_is_never_stale() {
        for now in [0, 1, SEC, u64::MAX] {
            assert!(!is_stale(now, 5 * SEC, 0), "timeout 0 disables the watchdog (now {now})");
            assert!(!is_stale(now, 0, 3 * SEC), "no heartbeat yet: not armed (now {now})");
        }
        assert!(!is_armed(0, 3 * SEC) && !is_armed(5, 0));
        assert!(is_armed(5, 1));
    }

    #[test]
    fn the_largest_timeout_never_fires_and_the_smallest_fires_after_one_ns() {
        assert!(!is_stale(u64::MAX, 1, u64::MAX));
        assert!(is_stale(12, 10, 1));
        assert!(!is_stale(11, 10, 1));
    }
}
