//! Token-bucket admission in fixed point.
//!
//! The bucket is kept in its GCRA form: the whole state is one `u64`, the
//! *theoretical arrival time* (TAT) in nanoseconds. A connection that costs `c`
//! tokens moves the TAT forward by the time the bucket needs to earn `c` tokens,
//! and is admitted if the TAT then lies no more than one full burst ahead of now.
//! That is exactly a token bucket of depth `burst` refilled at `rate`, but one
//! word of state lets the eBPF program update it with a single compare-and-swap,
//! so concurrent CPUs can never admit more than the bucket holds.
//!
//! Units are integers so both sides compute bit-identical results:
//! rates in milli-tokens per second, bursts and costs in milli-tokens
//! (1000 = one token, the cost of one plain connection).

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Milli-tokens in one token: the fixed point of every rate, burst and cost.
pub const MILLI_PER_TOKEN: u64 = 1_000;

/// A fixed-point amount in tokens (a rate, in tokens per second). Host side:
/// the datapath has no floating point.
#[cfg(feature = "user")]
pub fn tokens(milli: u64) -> f64 {
    milli as f64 / MILLI_PER_TOKEN as f64
}

/// A non-negative amount of tokens in fixed point, to the nearest milli-token
/// (a value past `u64` saturates; the caller checks the range it allows).
#[cfg(feature = "user")]
pub fn milli_tokens(tokens: f64) -> u64 {
    // Rounded by hand: `f64::round` is std's, and this crate is `no_std`.
    (tokens * MILLI_PER_TOKEN as f64 + 0.5) as u64
}

/// One class's bucket parameters: what the operator set, and the two figures
/// the datapath uses, derived from them by [`BucketParams::new`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketParams {
    /// Refill rate, milli-tokens per second. Zero closes the class.
    pub rate_milli: u64,
    /// Bucket depth, milli-tokens.
    pub burst_milli: u64,
    /// Tokens one new connection costs, milli-tokens (per-model costing).
    pub cost_milli: u64,
    /// Nanoseconds of refill one connection consumes: `cost / rate`.
    pub cost_ns: u64,
    /// How far ahead of now the TAT may run: `burst / rate`.
    pub tolerance_ns: u64,
    /// Which clock the datapath reads for this bucket ([`clock`]); the daemon
    /// chooses it with [`BucketParams::with_clock_for_tick`].
    pub clock: u64,
}

/// The clocks a bucket may be read with.
pub mod clock {
    /// `bpf_ktime_get_ns`: exact, and the dearer helper.
    pub const PRECISE: u64 = 0;
    /// `bpf_ktime_get_coarse_ns`: up to one scheduler tick behind the precise
    /// clock, and cheaper. A GCRA bucket read with a clock that lags never
    /// admits more than with the exact one: it sees less refill, never more.
    pub const COARSE: u64 = 1;
}

/// The coarse clock is used where one tick of refill (the most it can lag)
/// is at most this fraction of the burst: `rate x tick <= burst / 16`.
pub const COARSE_LAG_DIVISOR: u64 = 16;

impl BucketParams {
    /// Derives the datapath figures. A rate of zero yields a closed bucket that
    /// admits nothing; results that do not fit in 64 bits saturate.
    pub fn new(rate_milli: u64, burst_milli: u64, cost_milli: u64) -> Self {
        let (cost_ns, tolerance_ns) = if rate_milli == 0 {
            (u64::MAX, 0)
        } else {
            (ns_for_tokens(cost_milli, rate_milli), ns_for_tokens(burst_milli, rate_milli))
        };
        Self { rate_milli, burst_milli, cost_milli, cost_ns, tolerance_ns, clock: clock::PRECISE }
    }

    /// The same bucket, read with the coarse clock when a coarse tick of
    /// `tick_ns` lags it by at most `burst / COARSE_LAG_DIVISOR` of refill,
    /// with the precise clock otherwise.
    pub fn with_clock_for_tick(self, tick_ns: u64) -> Self {
        let lag_milli = tokens_for_ns(tick_ns, self.rate_milli);
        let clock = if lag_milli.saturating_mul(COARSE_LAG_DIVISOR) <= self.burst_milli {
            clock::COARSE
        } else {
            clock::PRECISE
        };
        Self { clock, ..self }
    }

    /// True when the class admits no new connection at all.
    pub fn is_closed(&self) -> bool {
        self.rate_milli == 0
    }
}

fn ns_for_tokens(milli_tokens: u64, rate_milli: u64) -> u64 {
    let ns = milli_tokens as u128 * NANOS_PER_SEC / rate_milli as u128;
    if ns > u64::MAX as u128 { u64::MAX } else { ns as u64 }
}

fn tokens_for_ns(ns: u64, rate_milli: u64) -> u64 {
    let milli = ns as u128 * rate_milli as u128 / NANOS_PER_SEC;
    if milli > u64::MAX as u128 { u64::MAX } else { milli as u64 }
}

/// Charges one connection against a bucket whose state is `tat`.
///
/// Returns the new TAT when the connection fits, `None` when the bucket is
/// empty (the state must then be left as it was). A clock that went backwards
/// (`now < tat` from another CPU's later reading) only makes the bucket look
/// fuller-used, never lets it over-admit.
#[inline(always)]
pub fn charge(tat: u64, now: u64, params: &BucketParams) -> Option<u64> {
    let start = if tat > now { tat } else { now };
    let next = start.saturating_add(params.cost_ns);
    // `next >= now` always holds, so the subtraction cannot wrap.
    if next - now <= params.tolerance_ns { Some(next) } else { None }
}

/// Gives one connection's cost back to a bucket that [`charge`] admitted it
/// to, when a later check refused the connection after all.
///
/// Returns the new TAT, or `None` when there is nothing to give back (the
/// bucket has refilled past its TAT meanwhile). The TAT never moves below
/// `now`: a refund can make the bucket full, never fuller than a fresh one.
#[inline(always)]
pub fn refund(tat: u64, now: u64, params: &BucketParams) -> Option<u64> {
    if tat <= now {
        return None;
    }
    let back = tat.saturating_sub(params.cost_ns);
    Some(if back > now { back } else { now })
}

/// Milli-tokens available right now: what the next connections may spend.
pub fn available_milli(tat: u64, now: u64, params: &BucketParams) -> u64 {
    if params.is_closed() {
        return 0;
    }
    let debt_ns = tat.saturating_sub(now).min(params.tolerance_ns);
    tokens_for_ns(params.tolerance_ns - debt_ns, params.rate_milli)
}

/// Translates a bucket's state when its parameters change, keeping the tokens
/// already spent (not the nanoseconds, which mean something else at a new rate).
/// Leaving a closed bucket starts it empty, so reopening a class ramps up at its
/// rate instead of letting a full burst through at once.
pub fn rescale(tat: u64, now: u64, old: &BucketParams, new: &BucketParams) -> u64 {
    if new.is_closed() {
        return tat;
    }
    let spent_milli =
        if old.is_closed() { new.burst_milli } else { tokens_for_ns(tat.saturating_sub(now), old.rate_milli) };
    now.saturating_add(ns_for_tokens(spent_milli.min(new.burst_milli), new.rate_milli))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "user")]
    #[test]
    fn tokens_and_milli_tokens_agree_to_the_milli_token() {
        for t in [0.0, 0.001, 1.0, 2.5, 123.456, 1e12] {
            assert_eq!(tokens(milli_tokens(t)), t, "{t}");
        }
        // To the nearest: below half a milli-token is none.
        assert_eq!((milli_tokens(0.000_49), milli_tokens(0.000_5)), (0, 1));
    }

    const SEC: u64 = 1_000_000_000;

    /// Admits connections at the given instants and returns how many got in.
    fn admitted(params: &BucketParams, instants: impl IntoIterator<Item = u64>) -> u64 {
        let mut tat = 0;
        let mut count = 0;
        for now in instants {
            if let Some(next) = charge(tat, now, params) {
                tat = next;
                count += 1;
            }
        }
        count
    }

    #[test]
    fn a_full_bucket_admits_exactly_its_burst_at_one_instant() {
        let p = BucketParams::new(10_000, 5_000, 1_000);
        assert_eq!(admitted(&p, core::iter::repeat_n(SEC, 100)), 5);
    }

    #[test]
    fn admissions_never_exceed_burst_plus_rate_times_elapsed() {
        // rate 100/s, burst 20, cost 1; hammered every 100 µs for 3 s.
        let p = BucketParams::new(100_000, 20_000, 1_000);
        let start = 7 * SEC;
        let n = admitted(&p, (0..30_000).map(|i| start + i * 100_000));
        // 3 s of refill (minus the last 100 µs) plus the burst.
        assert!(n <= 20 + 300, "admitted {n}");
        assert!(n >= 20 + 299, "admitted {n}");
    }

    #[test]
    fn per_connection_cost_scales_admissions_down() {
        let cheap = BucketParams::new(50_000, 10_000, 1_000);
        let dear = BucketParams::new(50_000, 10_000, 2_500);
        let times = || (0..10_000).map(|i| SEC + i * 1_000_000);
        let (a, b) = (admitted(&cheap, times()), admitted(&dear, times()));
        // Full burst at once, then one per 20 ms over the 9.999 s that follow.
        assert_eq!(a, 10 + 9_999 / 20);
        assert!(b * 5 / 2 <= a && b * 5 / 2 >= a - 5, "cheap {a}, dear {b}");
    }

    #[test]
    fn rate_zero_admits_nothing_even_when_idle() {
        let p = BucketParams::new(0, 1_000_000, 1_000);
        assert!(p.is_closed());
        assert_eq!(admitted(&p, (0..1000).map(|i| i * SEC)), 0);
        assert_eq!(available_milli(0, SEC, &p), 0);
    }

    #[test]
    fn a_cost_larger_than_the_burst_never_fits() {
        let p = BucketParams::new(1_000_000, 1_000, 2_000);
        assert_eq!(charge(0, SEC, &p), None);
    }

    #[test]
    fn time_going_backwards_never_admits_extra() {
        let p = BucketParams::new(1_000, 2_000, 1_000);
        let tat = charge(0, 10 * SEC, &p).unwrap();
        let tat = charge(tat, 10 * SEC, &p).unwrap();
        // Bucket now empty; a reading from an earlier instant must not refill it.
        assert_eq!(charge(tat, 9 * SEC, &p), None);
        assert_eq!(charge(tat, 0, &p), None);
        // Refill happens only as the clock passes the debt.
        assert!(charge(tat, 11 * SEC, &p).is_some());
    }

    #[test]
    fn huge_values_saturate_instead_of_wrapping() {
        let p = BucketParams::new(1, u64::MAX, u64::MAX);
        assert_eq!(p.cost_ns, u64::MAX);
        assert_eq!(p.tolerance_ns, u64::MAX);
        // Fits once (cost == burst), then the TAT is pinned at the end of time.
        let tat = charge(0, SEC, &p).unwrap();
        assert_eq!(tat, u64::MAX);
        assert_eq!(charge(tat, u64::MAX - 1, &p), Some(u64::MAX));
        let huge_rate = BucketParams::new(u64::MAX, u64::MAX, 1);
        assert_eq!(huge_rate.cost_ns, 0);
        assert_eq!(charge(u64::MAX, u64::MAX, &huge_rate), Some(u64::MAX));
        assert_eq!(available_milli(0, u64::MAX, &huge_rate), u64::MAX);
    }

    #[test]
    fn a_refund_undoes_a_charge_and_never_fills_past_a_fresh_bucket() {
        let p = BucketParams::new(10_000, 5_000, 1_000);
        let once = charge(0, SEC, &p).unwrap();
        let twice = charge(once, SEC, &p).unwrap();
        assert_eq!(refund(twice, SEC, &p), Some(once), "the second charge given back");
        // A refund after the bucket refilled past its TAT gives nothing.
        assert_eq!(refund(twice, twice, &p), None);
        // Partly refilled: back to a full bucket at most, not past it.
        let now = twice - p.cost_ns / 2;
        assert_eq!(refund(twice, now, &p), Some(now));
        assert_eq!(available_milli(now, now, &p), 5_000);
    }

    #[test]
    fn the_coarse_clock_is_chosen_only_where_a_tick_lags_a_sixteenth_of_the_burst() {
        const TICK: u64 = 4_000_000; // HZ = 250
        // (rate/s, burst) -> coarse?
        let table = [
            (10_000, 1_000, true), // 40 per tick, 62.5 allowed
            (10_000, 640, true),   // exactly 1/16
            (10_000, 639, false),  // just over
            (1_000_000, 1_000, false),
            (0, 1, true), // a closed bucket never refills
        ];
        for (rate, burst, coarse) in table {
            let p = BucketParams::new(rate * 1000, burst * 1000, 1000).with_clock_for_tick(TICK);
            let want = if coarse { clock::COARSE } else { clock::PRECISE };
            assert_eq!(p.clock, want, "rate {rate} burst {burst}");
        }
    }

    #[test]
    fn available_tokens_track_spending_and_refill() {
        let p = BucketParams::new(10_000, 5_000, 1_000);
        assert_eq!(available_milli(0, SEC, &p), 5_000);
        let tat = charge(0, SEC, &p).unwrap();
        let tat = charge(tat, SEC, &p).unwrap();
        assert_eq!(available_milli(tat, SEC, &p), 3_000);
        assert_eq!(available_milli(tat, SEC + SEC / 10, &p), 4_000);
        assert_eq!(available_milli(tat, 5 * SEC, &p), 5_000);
    }

    #[test]
    fn rescale_keeps_spent_tokens_across_a_rate_change() {
        let old = BucketParams::new(10_000, 10_000, 1_000);
        let mut tat = 0;
        for _ in 0..4 {
            tat = charge(tat, SEC, &old).unwrap();
        }
        let new = BucketParams::new(1_000_000, 10_000, 1_000);
        let moved = rescale(tat, SEC, &old, &new);
        assert_eq!(available_milli(moved, SEC, &new), 6_000);
    }

    #[test]
    fn reopening_a_closed_class_starts_empty_and_refills() {
        let closed = BucketParams::new(0, 10_000, 1_000);
        let open = BucketParams::new(1_000, 10_000, 1_000);
        let tat = rescale(12345, SEC, &closed, &open);
        assert_eq!(available_milli(tat, SEC, &open), 0);
        assert_eq!(available_milli(tat, 2 * SEC, &open), 1_000);
        // Closing keeps the state for when the class reopens.
        assert_eq!(rescale(tat, SEC, &open, &closed), tat);
    }
}
