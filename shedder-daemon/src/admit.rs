//! Job-level admission: the seed's `admit` function, for servers that want a
//! per-request answer (the control socket's `admit` op).
//!
//! ```text
//! slack = deadline − now − service_p95                (the seed's deadline_slack_ms)
//! slack − safety < 0            → reject_deadline     (it cannot finish in time under the estimate)
//! queue_age > max_queue_age     → reject_stale
//! otherwise                     → admit
//! ```
//!
//! The deadline check comes first, as in the seed: a job that cannot finish
//! in time is reported as such even if it is also stale. `slack` is reported
//! without the safety margin, as the seed's job record does (queued 09:12:00,
//! deadline 09:12:08, service estimate 1800 ms, queue age 2400 ms → slack
//! 3800 ms); the margin applies only to the verdict.
//!
//! **Retry-After.** A rejection carries a hint, because a client told only
//! "no" retries at once and turns an overload into a retry storm. The base is
//! how far over the job is (the deficit for a deadline rejection, the excess
//! age for a stale one), clamped to `[retry_after_min_ms, retry_after_max_ms]`,
//! then spread by ±`jitter` so that clients rejected together do not come
//! back together, and clamped again: the hint never leaves its bounds. The
//! jitter draws from an RNG the caller passes in, so tests are deterministic.
//!
//! Pure: `now` is a parameter, on the same clock as the deadline.

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

/// How old a job is: either its queue age, or when it was queued.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueAge {
    AgeMs(f64),
    /// ms on the same clock as `now` and the deadline.
    QueuedAtMs(f64),
}

/// One job asking to start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmitRequest {
    /// Absolute deadline, ms on the same clock as `now_ms`.
    pub deadline_ms: f64,
    pub queue_age: QueueAge,
    pub now_ms: f64,
    /// The class's service p95 (`ClassEstimate::service.quantiles.p95`).
    pub service_p95_ms: f64,
}

/// The knobs (per class, or global).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmitPolicy {
    #[serde(default = "d_safety_ms")]
    pub safety_ms: f64,
    /// Older than this in the queue: reject as stale.
    pub max_queue_age_ms: f64,
    #[serde(default = "d_retry_min")]
    pub retry_after_min_ms: u64,
    #[serde(default = "d_retry_max")]
    pub retry_after_max_ms: u64,
    /// Relative spread of the hint, 0..1 (0.2: ±20%).
    #[serde(default = "d_jitter")]
    pub jitter: f64,
}

fn d_safety_ms() -> f64 {
    250.0
}
fn d_retry_min() -> u64 {
    1_000
}
fn d_retry_max() -> u64 {
    30_000
}
fn d_jitter() -> f64 {
    0.2
}

impl AdmitPolicy {
    /// A policy with the seed's defaults and this stale limit.
    pub fn with_max_queue_age(max_queue_age_ms: f64) -> Self {
        AdmitPolicy {
            safety_ms: d_safety_ms(),
            max_queue_age_ms,
            retry_after_min_ms: d_retry_min(),
            retry_after_max_ms: d_retry_max(),
            jitter: d_jitter(),
        }
    }

    /// Checks the policy; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.safety_ms.is_finite() && self.safety_ms >= 0.0) {
            return Err(format!("admit.safety_ms: {} is not a finite, non-negative number", self.safety_ms));
        }
        if !(self.max_queue_age_ms.is_finite() && self.max_queue_age_ms >= 0.0) {
            return Err(format!(
                "admit.max_queue_age_ms: {} is not a finite, non-negative number",
                self.max_queue_age_ms
            ));
        }
        if self.retry_after_min_ms > self.retry_after_max_ms {
            return Err(format!(
                "admit.retry_after_min_ms: {} is above retry_after_max_ms ({})",
                self.retry_after_min_ms, self.retry_after_max_ms
            ));
        }
        if !(self.jitter.is_finite() && (0.0..1.0).contains(&self.jitter)) {
            return Err(format!("admit.jitter: {} is outside 0..1", self.jitter));
        }
        Ok(())
    }
}

/// The verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Admit,
    RejectDeadline,
    RejectStale,
}

impl Verdict {
    /// The verdict as the API and the metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Admit => "admit",
            Verdict::RejectDeadline => "reject_deadline",
            Verdict::RejectStale => "reject_stale",
        }
    }
}

/// The verdict with its numbers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AdmitDecision {
    pub verdict: Verdict,
    /// `deadline − now − service_p95`, ms (the safety margin not taken off).
    pub slack_ms: f64,
    pub queue_age_ms: f64,
    /// For rejections: when to retry, ms, within the policy's bounds.
    pub retry_after_ms: Option<u64>,
}

impl AdmitDecision {
    /// The hint as an HTTP `Retry-After` value: whole seconds, rounded up.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_ms.map(|ms| ms.div_ceil(1000))
    }
}

/// Decides whether a job may start. A NaN anywhere in the request compares
/// as "not enough slack": an unknown estimate must not admit.
pub fn admit<R: Rng + ?Sized>(request: &AdmitRequest, policy: &AdmitPolicy, rng: &mut R) -> AdmitDecision {
    let queue_age_ms = match request.queue_age {
        QueueAge::AgeMs(age) => age,
        QueueAge::QueuedAtMs(at) => request.now_ms - at,
    };
    let slack_ms = request.deadline_ms - request.now_ms - request.service_p95_ms;
    let margin = slack_ms - policy.safety_ms;
    let (verdict, over_ms) = if margin.is_nan() || margin < 0.0 {
        (Verdict::RejectDeadline, -margin)
    } else if queue_age_ms > policy.max_queue_age_ms {
        (Verdict::RejectStale, queue_age_ms - policy.max_queue_age_ms)
    } else {
        (Verdict::Admit, 0.0)
    };
    let retry_after_ms = (verdict != Verdict::Admit).then(|| retry_after(over_ms, policy, rng));
    AdmitDecision { verdict, slack_ms, queue_age_ms, retry_after_ms }
}

fn retry_after<R: Rng + ?Sized>(over_ms: f64, policy: &AdmitPolicy, rng: &mut R) -> u64 {
    let (lo, hi) = (policy.retry_after_min_ms as f64, policy.retry_after_max_ms as f64);
    let base = if over_ms.is_finite() { over_ms.clamp(lo, hi) } else { hi };
    let spread = if policy.jitter > 0.0 { rng.random_range(-policy.jitter..=policy.jitter) } else { 0.0 };
    (base * (1.0 + spread)).clamp(lo, hi).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    /// 09:12:00 on an arbitrary ms clock.
    const T0: f64 = 33_120_000.0;

    /// The seed's record: queued 09:12:00, deadline 09:12:08, service
    /// estimate 1800 ms, queue age 2400 ms (so now is 09:12:02.4).
    fn seed_record() -> AdmitRequest {
        AdmitRequest {
            deadline_ms: T0 + 8_000.0,
            queue_age: QueueAge::QueuedAtMs(T0),
            now_ms: T0 + 2_400.0,
            service_p95_ms: 1_800.0,
        }
    }

    fn policy() -> AdmitPolicy {
        AdmitPolicy::with_max_queue_age(10_000.0)
    }

    #[test]
    fn table() {
        let rec = seed_record();
        let cases: &[(&str, AdmitRequest, AdmitPolicy, Verdict, f64)] = &[
            ("the seed's record", rec, policy(), Verdict::Admit, 3_800.0),
            (
                "same, given as a queue age",
                AdmitRequest { queue_age: QueueAge::AgeMs(2_400.0), ..rec },
                policy(),
                Verdict::Admit,
                3_800.0,
            ),
            // Later and later: slack − safety reaches 0, then −1.
            (
                "slack exactly the safety margin",
                AdmitRequest { now_ms: T0 + 5_950.0, ..rec },
                policy(),
                Verdict::Admit,
                250.0,
            ),
            (
                "1 ms inside the margin",
                AdmitRequest { now_ms: T0 + 5_951.0, ..rec },
                policy(),
                Verdict::RejectDeadline,
                249.0,
            ),
            (
                "slack exactly 0, no margin",
                AdmitRequest { now_ms: T0 + 6_200.0, ..rec },
                AdmitPolicy { safety_ms: 0.0, ..policy() },
                Verdict::Admit,
                0.0,
            ),
            (
                "slack −1 ms, no margin",
                AdmitRequest { now_ms: T0 + 6_201.0, ..rec },
                AdmitPolicy { safety_ms: 0.0, ..policy() },
                Verdict::RejectDeadline,
                -1.0,
            ),
            (
                "a slower estimate (p95 5800 ms)",
                AdmitRequest { service_p95_ms: 5_800.0, ..rec },
                policy(),
                Verdict::RejectDeadline,
                -200.0,
            ),
            (
                "past its deadline",
                AdmitRequest { now_ms: T0 + 9_000.0, ..rec },
                policy(),
                Verdict::RejectDeadline,
                -2_800.0,
            ),
            (
                "queue age at the stale limit",
                rec,
                AdmitPolicy { max_queue_age_ms: 2_400.0, ..policy() },
                Verdict::Admit,
                3_800.0,
            ),
            (
                "queue age 1 ms over the limit",
                rec,
                AdmitPolicy { max_queue_age_ms: 2_399.0, ..policy() },
                Verdict::RejectStale,
                3_800.0,
            ),
            (
                "both: the deadline is reported first",
                AdmitRequest { now_ms: T0 + 9_000.0, ..rec },
                AdmitPolicy { max_queue_age_ms: 100.0, ..policy() },
                Verdict::RejectDeadline,
                -2_800.0,
            ),
            (
                "unknown estimate (NaN) does not admit",
                AdmitRequest { service_p95_ms: f64::NAN, ..rec },
                policy(),
                Verdict::RejectDeadline,
                f64::NAN,
            ),
        ];
        let mut rng = SmallRng::seed_from_u64(1);
        for (what, request, policy, verdict, slack) in cases {
            let d = admit(request, policy, &mut rng);
            assert_eq!(d.verdict, *verdict, "{what}: {d:?}");
            assert!(d.slack_ms == *slack || (slack.is_nan() && d.slack_ms.is_nan()), "{what}: slack {}", d.slack_ms);
            assert_eq!(d.retry_after_ms.is_some(), *verdict != Verdict::Admit, "{what}");
        }
        // Queued-at and now give the queue age.
        let d = admit(&AdmitRequest { now_ms: T0 + 6_000.0, ..rec }, &policy(), &mut rng);
        assert_eq!(d.queue_age_ms, 6_000.0);
        assert_eq!(admit(&rec, &policy(), &mut rng).queue_age_ms, 2_400.0);
    }

    #[test]
    fn retry_after_is_bounded_scaled_and_jittered() {
        let p = policy();
        let mut rng = SmallRng::seed_from_u64(42);
        let rec = seed_record();
        // Far over (the p95 is 60 s): the hint sits at the top bound.
        let far = AdmitRequest { service_p95_ms: 60_000.0, ..rec };
        // Barely over: the hint sits at the bottom bound.
        let near = AdmitRequest { now_ms: T0 + 5_951.0, ..rec };
        // 4 s over (5600 ms left − 9350 ms − 250 ms): around 4 s, ±20%.
        let mid = AdmitRequest { service_p95_ms: 9_350.0, ..rec };
        let mid_over = -(admit(&mid, &AdmitPolicy { jitter: 0.0, ..p.clone() }, &mut rng).slack_ms - p.safety_ms);
        assert!((mid_over - 4_000.0).abs() < 1e-9, "{mid_over}");

        let (mut lo_seen, mut hi_seen) = (u64::MAX, 0);
        for _ in 0..10_000 {
            for (req, lo, hi) in [(far, 24_000, 30_000), (near, 1_000, 1_200), (mid, 3_200, 4_800)] {
                let ms = admit(&req, &p, &mut rng).retry_after_ms.unwrap();
                assert!((lo..=hi).contains(&ms), "{ms} not in {lo}..={hi}");
                assert!((p.retry_after_min_ms..=p.retry_after_max_ms).contains(&ms));
            }
            let ms = admit(&mid, &p, &mut rng).retry_after_ms.unwrap();
            lo_seen = lo_seen.min(ms);
            hi_seen = hi_seen.max(ms);
        }
        // The jitter actually spreads (not a constant).
        assert!(lo_seen < 3_300 && hi_seen > 4_700, "{lo_seen}..{hi_seen}");
        // Same seed, same hints.
        let a: Vec<_> =
            (0..5).map(|_| 0).scan(SmallRng::seed_from_u64(9), |r, _| admit(&mid, &p, r).retry_after_ms).collect();
        let b: Vec<_> =
            (0..5).map(|_| 0).scan(SmallRng::seed_from_u64(9), |r, _| admit(&mid, &p, r).retry_after_ms).collect();
        assert_eq!(a, b);
        // Stale: based on the excess age; Retry-After in whole seconds, up.
        let stale = admit(&rec, &AdmitPolicy { max_queue_age_ms: 0.0, jitter: 0.0, ..p.clone() }, &mut rng);
        assert_eq!(
            (stale.verdict, stale.retry_after_ms, stale.retry_after_secs()),
            (Verdict::RejectStale, Some(2_400), Some(3))
        );
    }

    #[test]
    fn policy_validation_and_strict_config() {
        assert!(policy().validate().is_ok());
        assert!(
            AdmitPolicy { retry_after_min_ms: 5, retry_after_max_ms: 4, ..policy() }
                .validate()
                .unwrap_err()
                .contains("retry_after_min_ms")
        );
        assert!(AdmitPolicy { jitter: 1.0, ..policy() }.validate().unwrap_err().contains("jitter"));
        let p: AdmitPolicy = toml::from_str("max_queue_age_ms = 10000").unwrap();
        assert_eq!(p, policy());
        assert!(toml::from_str::<AdmitPolicy>("max_queue_age_ms = 5000\nsafety = 1").is_err());
    }
}
