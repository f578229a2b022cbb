//! Deadline slack: how much room a class's deadline leaves once the queue
//! and the service tail are paid for.
//!
//! ```text
//! slack     = deadline − queue_term − service_p95 − safety
//! service_p95 = max(service_p95 (window), service_p95 (recent))
//! queue_term = max(queue_age_p95 (recent), predicted_wait)
//! predicted_wait = queue_depth / drain_rate          (Little's law, when both are known)
//! slack_p10 = deadline − queue_age_p90 (recent) − service_p95 − safety
//! ```
//!
//! * **Two horizons.** Service time is a property of the workload: its p95
//!   comes from the whole window (10 s), where the tail has enough samples,
//!   or from the recent horizon when that is higher: a new tail (the drill's
//!   1800 ms jobs) is in the recent p95 a second or two before it is 5% of
//!   a 10 s window, while a passing one stays in the window (fast attack,
//!   slow release).
//!   Queue age is a property of the *queue*, which the budget itself drives:
//!   its p95 comes from the freshest horizon holding enough samples (the last
//!   1–2 s at drill rates, widening to the window when traffic is thin; see
//!   [`ClassEstimate::queue_age_recent`]). A 10 s p95 of queue age would keep
//!   reporting a backlog for ten seconds after it drained, and hold the
//!   budget down for nothing.
//! * `queue_age_p95` is measured when a job *leaves* the queue, so it lags
//!   the queue by the wait itself: a backlog is invisible until its members
//!   start. The queue depth gauge is live; divided by the measured drain rate
//!   it is the wait of a job arriving *now* under FIFO, which leads the
//!   measured p95 by seconds at the onset of overload. It is used only when
//!   the depth is fresh and the drain rate rests on enough completions, and
//!   only ever to make the queue term larger.
//! * `slack_p10` is the seed's per-job `deadline − now − service estimate`
//!   (less the safety margin) at its 10th percentile across jobs: a job's
//!   slack falls as its queue age rises, so the 10th-percentile slack belongs
//!   to the 90th-percentile queue age. It is reported (the drill plots "slack_p10
//!   crosses zero"); the law acts on `slack`, which is the more conservative
//!   (it uses the p95 and the live prediction).

use serde::Serialize;

use super::ClassPolicy;
use crate::estimate::{ClassEstimate, Source};

/// The slack of one class at one tick, with every term that made it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Slack {
    pub slack_ms: f64,
    pub slack_p10_ms: f64,
    pub deadline_ms: f64,
    pub safety_ms: f64,
    /// Over the recent horizon (`queue_age_horizon_ms`).
    pub queue_age_p95_ms: f64,
    pub queue_age_p90_ms: f64,
    pub queue_age_horizon_ms: u64,
    /// Over the whole window, for reference.
    pub queue_age_window_p95_ms: f64,
    /// `queue_depth / drain_rate`, when both were usable.
    pub predicted_wait_ms: Option<f64>,
    pub queue_depth: Option<u64>,
    pub drain_rate_per_s: Option<f64>,
    /// The queue term the slack used: the larger of the p95 and the prediction.
    pub queue_term_ms: f64,
    pub service_p95_ms: f64,
    pub queue_age_samples: u64,
    pub service_samples: u64,
    pub queue_age_source: Source,
    pub service_source: Source,
    pub estimator_version: u64,
}

impl Slack {
    /// Either distribution came from the prior.
    pub fn from_prior(&self) -> bool {
        self.queue_age_source == Source::Prior || self.service_source == Source::Prior
    }

    /// At least one term is measured (the window, or a live queue depth):
    /// the law cuts only on evidence, never on priors alone.
    pub fn has_evidence(&self) -> bool {
        self.queue_age_source == Source::Window
            || self.service_source == Source::Window
            || self.predicted_wait_ms.is_some()
    }

    /// The queue term in words, e.g. `queue_age_p95 2630 ms` or
    /// `predicted wait 2637 ms (depth 24 / drain 9.1/s)`.
    pub fn queue_term_words(&self) -> String {
        match (self.predicted_wait_ms, self.queue_depth, self.drain_rate_per_s) {
            (Some(w), Some(d), Some(r)) if w > self.queue_age_p95_ms => format!(
                "predicted wait {w:.0} ms (depth {d} / drain {r:.1}/s; queue_age_p95 {:.0} ms)",
                self.queue_age_p95_ms
            ),
            _ => format!(
                "queue_age_p95 {:.0} ms{}",
                self.queue_age_p95_ms,
                match self.queue_age_source {
                    Source::Prior => " (prior)".to_string(),
                    Source::Window => format!(" (last {:.1} s)", self.queue_age_horizon_ms as f64 / 1000.0),
                }
            ),
        }
    }

    /// The service term in words, e.g. `service_p95 1800 ms (prior)`.
    pub fn service_term_words(&self) -> String {
        format!("service_p95 {:.0} ms{}", self.service_p95_ms, prior_mark(self.service_source))
    }
}

fn prior_mark(source: Source) -> &'static str {
    if source == Source::Prior { " (prior)" } else { "" }
}

/// The slack of `policy`'s class under `estimate`. A class without an
/// estimate gets zero terms (marked as priors): no evidence, no cut.
/// `depth_max_age_ms` is how old a queue-depth gauge may be and still predict.
pub fn slack(policy: &ClassPolicy, estimate: Option<&ClassEstimate>, depth_max_age_ms: u64) -> Slack {
    let Some(e) = estimate else {
        return Slack {
            slack_ms: policy.deadline_ms - policy.safety_ms,
            slack_p10_ms: policy.deadline_ms - policy.safety_ms,
            deadline_ms: policy.deadline_ms,
            safety_ms: policy.safety_ms,
            queue_age_p95_ms: 0.0,
            queue_age_p90_ms: 0.0,
            queue_age_horizon_ms: 0,
            queue_age_window_p95_ms: 0.0,
            predicted_wait_ms: None,
            queue_depth: None,
            drain_rate_per_s: None,
            queue_term_ms: 0.0,
            service_p95_ms: 0.0,
            queue_age_samples: 0,
            service_samples: 0,
            queue_age_source: Source::Prior,
            service_source: Source::Prior,
            estimator_version: 0,
        };
    };
    let depth = e.queue_depth.filter(|g| g.age_ms <= depth_max_age_ms).map(|g| g.value);
    let drain = e.drain_rate_per_s.filter(|r| *r > 0.0);
    let predicted_wait_ms = match (depth, drain) {
        (Some(d), Some(r)) => Some(d as f64 / r * 1000.0),
        _ => None,
    };
    let qa = e.queue_age_recent.quantiles;
    let service_p95 = service_p95_ms(e);
    let queue_term = qa.p95.max(predicted_wait_ms.unwrap_or(0.0));
    Slack {
        slack_ms: policy.deadline_ms - queue_term - service_p95 - policy.safety_ms,
        slack_p10_ms: policy.deadline_ms - qa.p90 - service_p95 - policy.safety_ms,
        deadline_ms: policy.deadline_ms,
        safety_ms: policy.safety_ms,
        queue_age_p95_ms: qa.p95,
        queue_age_p90_ms: qa.p90,
        queue_age_horizon_ms: e.queue_age_recent_ms,
        queue_age_window_p95_ms: e.queue_age.quantiles.p95,
        predicted_wait_ms,
        queue_depth: depth,
        drain_rate_per_s: drain,
        queue_term_ms: queue_term,
        service_p95_ms: service_p95,
        queue_age_samples: e.queue_age_recent.samples,
        service_samples: e.service.samples,
        queue_age_source: e.queue_age_recent.source,
        service_source: e.service.source,
        estimator_version: e.estimator_version,
    }
}

/// The service-time term of slack: the window's p95, or the recent horizon's
/// when that is higher (a new tail shows there first). The controller and the
/// job-level `admit` op both use it, so that a job is not admitted on the
/// belief that the tail has not arrived after the controller has seen it.
pub fn service_p95_ms(e: &ClassEstimate) -> f64 {
    match e.service_recent.source {
        Source::Window => e.service.quantiles.p95.max(e.service_recent.quantiles.p95),
        Source::Prior => e.service.quantiles.p95,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Budget, ClassPolicy};
    use crate::estimate::{Completions, Distribution, Gauge, Quantiles};

    fn policy() -> ClassPolicy {
        ClassPolicy {
            deadline_ms: 3_000.0,
            safety_ms: 250.0,
            budget: Budget::Adaptive { min_rate: 1.0, max_rate: 40.0 },
            opportunistic: false,
        }
    }

    fn dist(p90: f64, p95: f64, source: Source) -> Distribution {
        Distribution { quantiles: Quantiles { p50: p90 / 2.0, p90, p95, p99: p95 * 1.2 }, samples: 300, source }
    }

    fn estimate(qa: Distribution, service: Distribution) -> ClassEstimate {
        ClassEstimate {
            class: "interactive".into(),
            at_ms: 0,
            estimator_version: 3,
            window_ms: 10_000,
            queue_age: qa,
            queue_age_recent: qa,
            queue_age_recent_ms: 2_000,
            service,
            service_recent: service,
            completions: Completions::default(),
            queue_depth: None,
            kv_cache_usage: None,
            drain_rate_per_s: None,
            live: Default::default(),
        }
    }

    #[test]
    fn slack_is_deadline_minus_the_p95s_and_safety() {
        let e = estimate(dist(2_000.0, 2_630.0, Source::Window), dist(1_500.0, 1_800.0, Source::Window));
        let s = slack(&policy(), Some(&e), 2_000);
        assert_eq!(s.slack_ms, 3_000.0 - 2_630.0 - 1_800.0 - 250.0);
        assert_eq!(s.slack_p10_ms, 3_000.0 - 2_000.0 - 1_800.0 - 250.0);
        assert!(s.slack_p10_ms >= s.slack_ms);
        assert_eq!(s.estimator_version, 3);
        assert!(!s.from_prior() && s.has_evidence());
        assert_eq!(s.queue_term_words(), "queue_age_p95 2630 ms (last 2.0 s)");
    }

    #[test]
    fn a_fresh_queue_depth_predicts_the_wait_and_only_ever_adds() {
        let mut e = estimate(dist(80.0, 100.0, Source::Window), dist(300.0, 400.0, Source::Window));
        e.drain_rate_per_s = Some(10.0);
        e.queue_depth = Some(Gauge { value: 24, age_ms: 300 });
        let s = slack(&policy(), Some(&e), 2_000);
        assert_eq!(s.predicted_wait_ms, Some(2_400.0));
        assert_eq!(s.queue_term_ms, 2_400.0);
        assert_eq!(s.slack_ms, 3_000.0 - 2_400.0 - 400.0 - 250.0);
        assert!(s.queue_term_words().starts_with("predicted wait 2400 ms (depth 24 / drain 10.0/s"));
        // A short queue never lowers the measured p95.
        e.queue_depth = Some(Gauge { value: 0, age_ms: 300 });
        assert_eq!(slack(&policy(), Some(&e), 2_000).queue_term_ms, 100.0);
        // A stale depth is not used.
        e.queue_depth = Some(Gauge { value: 24, age_ms: 2_001 });
        assert_eq!(slack(&policy(), Some(&e), 2_000).predicted_wait_ms, None);
    }

    #[test]
    fn no_estimate_or_priors_only_is_not_evidence() {
        let s = slack(&policy(), None, 2_000);
        assert_eq!(s.slack_ms, 2_750.0);
        assert!(s.from_prior() && !s.has_evidence());
        let e = estimate(dist(0.0, 5_000.0, Source::Prior), dist(0.0, 0.0, Source::Prior));
        let s = slack(&policy(), Some(&e), 2_000);
        assert!(s.slack_ms < 0.0 && !s.has_evidence());
    }
}
