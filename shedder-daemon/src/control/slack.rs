//! Deadline slack: how much room a class's deadline leaves once the queue
//! and the service time are paid for.
//!
//! ```text
//! slack          = deadline − queue_term − service_term − safety
//! service_term   = the service curve's θ quantile,  θ = admit_confidence · best_chance
//! best_chance    = P(service ≤ deadline − safety)      (a job served at once)
//! queue_term     = max(queue_age_p95 (recent), predicted_wait)
//! predicted_wait = max(queue_depth / drain_rate,        (Little's law, when both are known)
//!                      a scraped server's live queue estimate)
//! p_on_time      = P(service ≤ deadline − safety − queue_term)   (a job arriving now)
//! slack_p10      = deadline − queue_age_p90 (recent) − service_term − safety
//! ```
//!
//! * **The distribution, not one quantile.** Slack is zero exactly when a
//!   job arriving now keeps `admit_confidence` (95%) of the on-time chance
//!   it would have on an idle backend: `p_on_time = θ`. For a class whose
//!   jobs all fit the deadline, `best_chance` is about 1 and the service
//!   term is about its p95, the classic rule. For a class with jobs that can
//!   never make it (a p95 past the deadline), `best_chance` is below 1 and
//!   the term is the quantile the jobs that *can* make it need: the class is
//!   not cut for a tail no admission decision can change. Job-level
//!   admission ([`crate::admit`]) applies the same threshold to each job.
//! * **Safety** is the class's own `safety_ms`, or derived from its measured
//!   spread and capped at a fraction of the deadline (see [`super::safety`]).
//!   Stale live inputs (a scraped server's gauges frozen, or its scrapes
//!   late) double it (at most to twice the cap) and drop the live estimate
//!   from the queue term: caution, but never a budget pinned at its floor
//!   on a figure that stopped moving.
//! * **Two horizons.** Service time is a property of the workload: its curve
//!   is the window's, or the recent horizon's where that is slower (a new
//!   tail shows there seconds before it dominates the window). Queue age is a
//!   property of the *queue*, which the budget itself drives: its p95 comes
//!   from the freshest horizon holding enough samples (see
//!   [`ClassEstimate::queue_age_recent`]).
//! * `queue_age_p95` is measured when a job *leaves* the queue, so it lags
//!   the queue by the wait itself. The queue depth gauge is live; divided by
//!   the measured drain rate it is the wait of a job arriving *now* under
//!   FIFO. It is used only when fresh, and only ever to make the term larger.
//! * `slack_p10` is the per-job `deadline − now − service estimate` (less the
//!   margin) at its 10th percentile across jobs, reported for dashboards; the
//!   law acts on `slack`, which is the more conservative.

use serde::Serialize;

use super::hold::WaitReading;
use super::params::{ClassPolicy, ControlParams};
use super::safety;
use crate::estimate::{ClassEstimate, Source};
use crate::service_curve::ServiceCurve;
use crate::telemetry::freshness::StaleInput;

/// The slack of one class at one tick, with every term that made it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Slack {
    pub slack_ms: f64,
    pub slack_p10_ms: f64,
    pub deadline_ms: f64,
    /// The margin in force: configured, or derived.
    pub safety_ms: f64,
    pub safety_derived: bool,
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
    /// Jobs being served now, from a scraped server's running gauge, while
    /// its live inputs can be trusted (not stale, no older than a depth).
    pub running: Option<u64>,
    /// The queue term the slack used: the larger of the p95 and the prediction.
    pub queue_term_ms: f64,
    /// Reported; the slack uses `service_term_ms`.
    pub service_p95_ms: f64,
    /// The service curve's `threshold` quantile.
    pub service_term_ms: f64,
    /// Mean service time: what an admitted job costs a worker, ms.
    pub mean_service_ms: f64,
    /// Which live inputs were stale (and so widened the margin).
    pub stale: Stale,
    /// `P(service ≤ deadline − safety)`: the chance of a job served at once.
    pub best_chance: f64,
    /// The on-time chance a job must keep to be worth a worker.
    pub threshold: f64,
    /// The on-time chance of a job arriving now, after the queue term.
    pub p_on_time: f64,
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

    /// The wait a job can take and keep its on-time chance, ms:
    /// `deadline − safety − service term`.
    pub fn room_ms(&self) -> f64 {
        self.deadline_ms - self.safety_ms - self.service_term_ms
    }

    /// Its reading of the shared queue, for the hold: a live depth's
    /// prediction, when it set the term, is read now.
    pub fn wait_reading(&self) -> WaitReading {
        let live = self.predicted_wait_ms.is_some_and(|w| w >= self.queue_age_p95_ms);
        WaitReading {
            wait_ms: self.queue_term_ms,
            room_ms: self.room_ms(),
            horizon_ms: if live { 0 } else { self.queue_age_horizon_ms },
        }
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
            (Some(w), None, _) if w > self.queue_age_p95_ms => {
                format!("live queue estimate {w:.0} ms (queue_age_p95 {:.0} ms)", self.queue_age_p95_ms)
            }
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

    /// The service term in words, e.g. `service p95 1800 ms (prior)`, or
    /// `(prior, 12 jobs measured)` while a few jobs carry part of the curve.
    pub fn service_term_words(&self) -> String {
        let source = match (self.service_source, self.service_samples) {
            (Source::Window, _) => String::new(),
            (Source::Prior, 0) => " (prior)".into(),
            (Source::Prior, n) => format!(" (prior, {n} jobs measured)"),
        };
        format!("service p{:.0} {:.0} ms{source}", self.threshold * 100.0, self.service_term_ms)
    }

    /// The margin in words, e.g. `safety 104 ms (derived)`, or
    /// `safety 208 ms (derived, doubled: stale frozen_gauges)`.
    pub fn safety_words(&self) -> String {
        let how = match (self.safety_derived, self.stale.any()) {
            (false, false) => String::new(),
            (true, false) => " (derived)".into(),
            (d, true) => format!(" ({}doubled: stale {})", if d { "derived, " } else { "" }, self.stale.words()),
        };
        format!("safety {:.0} ms{how}", self.safety_ms)
    }
}

/// Live inputs not to trust this tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stale {
    pub frozen_gauges: bool,
    pub old_scrape: bool,
}

impl Stale {
    pub fn any(self) -> bool {
        self.frozen_gauges || self.old_scrape
    }

    /// E.g. `frozen_gauges, old_scrape`; empty when none.
    pub fn words(self) -> String {
        let names = [(self.frozen_gauges, "frozen_gauges"), (self.old_scrape, "old_scrape")];
        names.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect::<Vec<_>>().join(", ")
    }
}

/// The slack of `policy`'s class under `estimate`. A class without an
/// estimate gets zero terms (marked as priors): no evidence, no cut.
pub fn slack(policy: &ClassPolicy, estimate: Option<&ClassEstimate>, p: &ControlParams) -> Slack {
    let no_data = ServiceCurve::lognormal(None, 0.0);
    let curve = estimate.map_or(&no_data, |e| &e.service_curve);
    let service_samples = estimate.map_or(0, |e| e.service.samples);
    let deadline = policy.deadline_ms;
    let mut stale = Stale::default();
    for input in estimate.map_or_else(Vec::new, |e| e.live.stale_inputs(p.stale_after_ms)) {
        match input {
            StaleInput::FrozenGauges => stale.frozen_gauges = true,
            StaleInput::OldScrape => stale.old_scrape = true,
        }
    }
    let (mut safety_ms, safety_derived) = match policy.safety_ms {
        Some(ms) => (ms, false),
        None => (safety::derived_ms(p, deadline, curve, service_samples), true),
    };
    if stale.any() {
        safety_ms = (2.0 * safety_ms).min((2.0 * p.safety_max_fraction * deadline).max(safety_ms));
    }
    let best_chance = curve.p_within(deadline - safety_ms);
    let threshold = p.admit_confidence * best_chance;
    let service_term = curve.quantile(threshold);

    let depth = estimate.and_then(|e| e.queue_depth).filter(|g| g.age_ms <= p.depth_max_age_ms).map(|g| g.value);
    let drain = estimate.and_then(|e| e.drain_rate_per_s).filter(|r| *r > 0.0);
    let littles_law = match (depth, drain) {
        (Some(d), Some(r)) => Some(d as f64 / r * 1000.0),
        _ => None,
    };
    // A scraped server's own live figures, while its gauges can be trusted.
    let trusted = |age_ms: u64| !stale.any() && age_ms <= p.depth_max_age_ms;
    let live = estimate.and_then(|e| e.live.predicted_queue_age_ms).filter(|g| trusted(g.age_ms)).map(|g| g.value);
    let running = estimate.and_then(|e| e.live.running).filter(|g| trusted(g.age_ms)).map(|g| g.value);
    let predicted_wait_ms = match (littles_law, live) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let (qa, qa_window_p95, horizon_ms, qa_samples, qa_source) = match estimate {
        Some(e) => (
            e.queue_age_recent.quantiles,
            e.queue_age.quantiles.p95,
            e.queue_age_recent_ms,
            e.queue_age_recent.samples,
            e.queue_age_recent.source,
        ),
        None => (Default::default(), 0.0, 0, 0, Source::Prior),
    };
    let queue_term = qa.p95.max(predicted_wait_ms.unwrap_or(0.0));
    Slack {
        slack_ms: deadline - queue_term - service_term - safety_ms,
        slack_p10_ms: deadline - qa.p90 - service_term - safety_ms,
        deadline_ms: deadline,
        safety_ms,
        safety_derived,
        queue_age_p95_ms: qa.p95,
        queue_age_p90_ms: qa.p90,
        queue_age_horizon_ms: horizon_ms,
        queue_age_window_p95_ms: qa_window_p95,
        predicted_wait_ms,
        queue_depth: depth,
        drain_rate_per_s: drain,
        running,
        queue_term_ms: queue_term,
        service_p95_ms: curve.quantile(0.95),
        service_term_ms: service_term,
        mean_service_ms: curve.mean_ms,
        stale,
        best_chance,
        threshold,
        p_on_time: curve.p_within(deadline - safety_ms - queue_term),
        queue_age_samples: qa_samples,
        service_samples,
        queue_age_source: qa_source,
        service_source: estimate.map_or(Source::Prior, |e| e.service.source),
        estimator_version: estimate.map_or(0, |e| e.estimator_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Budget, ClassPolicy, Tier};
    use crate::estimate::{Completions, Distribution, Gauge, Quantiles};

    fn policy(safety_ms: Option<f64>) -> ClassPolicy {
        ClassPolicy {
            deadline_ms: 3_000.0,
            safety_ms,
            budget: Budget::Adaptive { min_rate: 1.0, max_rate: 40.0 },
            opportunistic: false,
            tier: Tier::Standard,
            weight: 1.0,
        }
    }

    fn dist(p90: f64, p95: f64, source: Source) -> Distribution {
        Distribution { quantiles: Quantiles { p50: p90 / 2.0, p90, p95, p99: p95 * 1.2 }, samples: 300, source }
    }

    /// Queue ages as given; service lognormal through `p50`/`p95`.
    fn estimate(qa: Distribution, p50: f64, p95: f64, source: Source) -> ClassEstimate {
        let service = dist(p95, p95, source);
        ClassEstimate {
            class: "interactive".into(),
            at_ms: 0,
            estimator_version: 3,
            window_ms: 10_000,
            queue_age: qa,
            queue_age_recent: qa,
            queue_age_recent_ms: 2_000,
            service,
            service_curve: ServiceCurve::lognormal(Some(p50), p95),
            estimate_error: None,
            completions: Completions::default(),
            queue_depth: None,
            kv_cache_usage: None,
            drain_rate_per_s: None,
            live: Default::default(),
        }
    }

    #[test]
    fn slack_is_deadline_minus_queue_service_term_and_safety() {
        let e = estimate(dist(2_000.0, 2_630.0, Source::Window), 120.0, 400.0, Source::Window);
        let s = slack(&policy(Some(250.0)), Some(&e), &ControlParams::default());
        // Every job fits the deadline: the threshold is 95% of ~1, and the
        // service term the curve's quantile there, about its p95.
        assert!(s.best_chance > 0.98 && (s.threshold - 0.95 * s.best_chance).abs() < 1e-12);
        assert!((350.0..=400.0).contains(&s.service_term_ms), "{}", s.service_term_ms);
        assert_eq!(s.slack_ms, 3_000.0 - 2_630.0 - s.service_term_ms - 250.0);
        assert_eq!(s.slack_p10_ms, 3_000.0 - 2_000.0 - s.service_term_ms - 250.0);
        assert!(s.slack_p10_ms >= s.slack_ms);
        assert_eq!(s.estimator_version, 3);
        assert!(!s.from_prior() && s.has_evidence() && !s.safety_derived);
        assert_eq!(s.queue_term_words(), "queue_age_p95 2630 ms (last 2.0 s)");
        assert!((s.mean_service_ms - 156.86).abs() < 0.1);
    }

    #[test]
    fn a_tail_past_the_deadline_is_judged_on_the_jobs_that_can_make_it() {
        // p95 of 6 s against a 3 s deadline: the classic rule's slack is
        // negative with an empty queue; this one is not.
        let e = estimate(dist(0.0, 0.0, Source::Window), 800.0, 6_000.0, Source::Window);
        let s = slack(&policy(None), Some(&e), &ControlParams::default());
        assert!(s.best_chance < 0.9 && s.best_chance > 0.7, "{}", s.best_chance);
        assert!(s.service_term_ms < 3_000.0 - s.safety_ms, "{}", s.service_term_ms);
        assert!(s.slack_ms > 0.0, "{s:?}");
        assert!(s.service_p95_ms > 3_000.0);
    }

    #[test]
    fn a_tight_deadline_keeps_its_room() {
        // 400 ms, p50 80 / p95 150: a fixed 250 ms margin would leave nothing.
        let mut p = policy(None);
        p.deadline_ms = 400.0;
        let e = estimate(dist(0.0, 0.0, Source::Window), 80.0, 150.0, Source::Window);
        let s = slack(&p, Some(&e), &ControlParams::default());
        assert!(s.safety_derived && s.safety_ms <= 40.0, "{}", s.safety_ms);
        assert!(s.slack_ms > 150.0, "{s:?}");
        assert!(s.safety_words().ends_with("ms (derived)"));
    }

    #[test]
    fn a_fresh_queue_depth_predicts_the_wait_and_only_ever_adds() {
        let mut e = estimate(dist(80.0, 100.0, Source::Window), 300.0, 400.0, Source::Window);
        e.drain_rate_per_s = Some(10.0);
        e.queue_depth = Some(Gauge { value: 24, age_ms: 300 });
        let p = ControlParams::default();
        let s = slack(&policy(Some(250.0)), Some(&e), &p);
        assert_eq!(s.predicted_wait_ms, Some(2_400.0));
        assert_eq!(s.queue_term_ms, 2_400.0);
        assert_eq!(s.slack_ms, 3_000.0 - 2_400.0 - s.service_term_ms - 250.0);
        assert!(s.queue_term_words().starts_with("predicted wait 2400 ms (depth 24 / drain 10.0/s"));
        // A short queue never lowers the measured p95.
        e.queue_depth = Some(Gauge { value: 0, age_ms: 300 });
        assert_eq!(slack(&policy(Some(250.0)), Some(&e), &p).queue_term_ms, 100.0);
        // A stale depth is not used.
        e.queue_depth = Some(Gauge { value: 24, age_ms: 2_001 });
        assert_eq!(slack(&policy(Some(250.0)), Some(&e), &p).predicted_wait_ms, None);
    }

    #[test]
    fn stale_live_inputs_widen_the_margin_and_a_fresh_live_estimate_predicts_the_wait() {
        use crate::estimate::LiveSignals;
        let p = ControlParams::default();
        let mut e = estimate(dist(80.0, 100.0, Source::Window), 120.0, 400.0, Source::Window);
        e.live = LiveSignals {
            predicted_queue_age_ms: Some(Gauge { value: 1_200.0, age_ms: 500 }),
            gauges_frozen: Some(Gauge { value: false, age_ms: 500 }),
            ..LiveSignals::default()
        };
        let fresh = slack(&policy(None), Some(&e), &p);
        assert_eq!((fresh.queue_term_ms, fresh.stale), (1_200.0, Stale::default()));
        assert!(fresh.queue_term_words().starts_with("live queue estimate 1200 ms"), "{}", fresh.queue_term_words());
        e.live.gauges_frozen = Some(Gauge { value: true, age_ms: 500 });
        let frozen = slack(&policy(None), Some(&e), &p);
        assert!(frozen.stale.frozen_gauges && !frozen.stale.old_scrape);
        // The frozen figure is not used, and the margin doubles.
        assert_eq!(frozen.queue_term_ms, 100.0);
        assert!((frozen.safety_ms - 2.0 * fresh.safety_ms).abs() < 1e-9);
        assert!(frozen.safety_words().contains("doubled: stale frozen_gauges"), "{}", frozen.safety_words());
        e.live.gauges_frozen = Some(Gauge { value: false, age_ms: 60_000 });
        assert!(slack(&policy(None), Some(&e), &p).stale.old_scrape);
    }

    #[test]
    fn no_estimate_or_priors_only_is_not_evidence() {
        let p = ControlParams::default();
        let s = slack(&policy(Some(250.0)), None, &p);
        assert_eq!(s.slack_ms, 2_750.0);
        assert!(s.from_prior() && !s.has_evidence());
        let e = estimate(dist(0.0, 5_000.0, Source::Prior), 100.0, 200.0, Source::Prior);
        let s = slack(&policy(Some(250.0)), Some(&e), &p);
        assert!(s.slack_ms < 0.0 && !s.has_evidence());
    }
}
