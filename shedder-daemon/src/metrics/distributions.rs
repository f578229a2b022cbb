//! The per-class distributions of what servers report (queue ages, service
//! times, lateness, completions, retries) and of job-level admissions, fed
//! as observations arrive and registered with each scrape.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::exponential_buckets},
    registry::Registry,
};

use super::counted_histogram::CountedHistogram;
use crate::telemetry::{ClassObservations, Observation};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ClassLabel {
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    class: String,
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabel {
    pub class: String,
    pub outcome: &'static str,
}

type Histograms = Family<ClassLabel, CountedHistogram, fn() -> CountedHistogram>;

/// Seconds from 5 ms to about 80 s, doubling: queue ages, service times and
/// lateness of inference jobs all fall in there.
fn seconds_histogram() -> CountedHistogram {
    CountedHistogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Slack spans negative values too: symmetric buckets around zero, seconds.
fn slack_histogram() -> CountedHistogram {
    let positive: Vec<f64> = exponential_buckets(0.01, 2.0, 13).collect();
    let mut buckets: Vec<f64> = positive.iter().rev().map(|b| -b).collect();
    buckets.push(0.0);
    buckets.extend(positive);
    CountedHistogram::new(buckets)
}

/// Service over the server's estimate, from 1/16 to 16, doubling: 1 is an
/// exact estimate.
fn ratio_histogram() -> CountedHistogram {
    CountedHistogram::new(exponential_buckets(1.0 / 16.0, 2.0, 9))
}

/// Distributions fed as they happen. Cloning shares the underlying metrics.
#[derive(Clone)]
pub struct Distributions {
    queue_age: Histograms,
    service: Histograms,
    lateness: Histograms,
    estimate_error: Histograms,
    completions: Family<OutcomeLabel, Counter>,
    retries: Family<ClassLabel, Counter>,
    slack_at_admission: Histograms,
    admissions: Family<VerdictLabel, Counter>,
}

impl Default for Distributions {
    fn default() -> Self {
        Self {
            queue_age: Family::new_with_constructor(seconds_histogram),
            service: Family::new_with_constructor(seconds_histogram),
            lateness: Family::new_with_constructor(seconds_histogram),
            estimate_error: Family::new_with_constructor(ratio_histogram),
            completions: Family::default(),
            retries: Family::default(),
            slack_at_admission: Family::new_with_constructor(slack_histogram),
            admissions: Family::default(),
        }
    }
}

impl Distributions {
    /// Records one batch of observations into the per-class distributions.
    pub fn observe(&self, batch: &ClassObservations) {
        let class = ClassLabel { class: batch.class.clone() };
        for observation in &batch.observations {
            match observation {
                Observation::QueueAge { ms, count } => observe_n(&self.queue_age, &class, *ms, *count),
                Observation::Service { ms, count } => observe_n(&self.service, &class, *ms, *count),
                Observation::Completion { late_by_ms, count } => {
                    let outcome = if late_by_ms.is_some() { "late" } else { "on_time" };
                    self.completions
                        .get_or_create(&OutcomeLabel { class: batch.class.clone(), outcome })
                        .inc_by(*count);
                    if let Some(late) = late_by_ms {
                        observe_n(&self.lateness, &class, *late, *count);
                    }
                }
                Observation::Retry { count } => {
                    self.retries.get_or_create(&class).inc_by(*count);
                }
                Observation::EstimateError { estimate_ms, service_ms, count } => {
                    self.estimate_error.get_or_create(&class).observe(service_ms / estimate_ms, *count);
                }
                Observation::QueueDepth(_)
                | Observation::KvCacheUsage(_)
                | Observation::Running(_)
                | Observation::PredictedQueueAge { .. }
                | Observation::GaugesFrozen(_) => {}
            }
        }
    }

    /// Serves each class's completions (both outcomes) and retries from 0,
    /// before any job is reported: a counter whose series appears at its
    /// first count looks to Prometheus as if it always held it, so that
    /// count would never show as an increase.
    pub fn serve_from_zero(&self, classes: &[String]) {
        for class in classes {
            for outcome in ["on_time", "late"] {
                self.completions.get_or_create(&OutcomeLabel { class: class.clone(), outcome }).inc_by(0);
            }
            self.retries.get_or_create(&ClassLabel { class: class.clone() }).inc_by(0);
        }
    }

    /// Records a job-level admission answer (`admit`): its slack and verdict.
    pub fn observe_admission(&self, class: &str, slack_ms: f64, verdict: &str) {
        self.slack_at_admission.get_or_create(&ClassLabel { class: class.into() }).observe(slack_ms / 1000.0, 1);
        self.admissions.get_or_create(&VerdictLabel { class: class.into(), verdict: verdict.into() }).inc();
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "shedder_queue_age_seconds",
            "Time jobs waited before a worker took them",
            self.queue_age.clone(),
        );
        registry.register("shedder_service_seconds", "Time workers spent on jobs", self.service.clone());
        registry.register("shedder_completion_lateness_seconds", "How late late jobs completed", self.lateness.clone());
        registry.register(
            "shedder_estimate_error_ratio",
            "Service time over the server's estimate of it, for jobs reported with one",
            self.estimate_error.clone(),
        );
        registry.register("shedder_completions", "Jobs completed, on time or late", self.completions.clone());
        registry.register("shedder_retries", "Jobs that were a retry of an earlier attempt", self.retries.clone());
        registry.register(
            "shedder_slack_at_admission_seconds",
            "Deadline slack of job-level admission requests",
            self.slack_at_admission.clone(),
        );
        registry.register(
            "shedder_job_admissions",
            "Job-level admission answers by verdict (admit, hold, reject_deadline, reject_tier, ...)",
            self.admissions.clone(),
        );
    }
}

/// A histogram bucket from a scrape stands for `count` jobs at one value.
fn observe_n(family: &Histograms, class: &ClassLabel, ms: f64, count: u64) {
    family.get_or_create(class).observe(ms / 1000.0, count);
}
