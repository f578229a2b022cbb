//! Per-class estimators: sliding-window quantiles of queue age and service
//! time, completion lateness, and the latest gauges.
//!
//! # Why this shape
//!
//! * **Quantiles, not averages.** The slack rule needs the p95 of a heavy-tailed
//!   distribution; an average hides exactly the tail that misses deadlines.
//!   Each distribution is a [`Sketch`] (DDSketch's bins): 1% relative error
//!   at every quantile, constant-time weighted adds (a scraped histogram
//!   bucket of 10,000 jobs costs one add, not 10,000), exact merges, and any
//!   number of quantiles in one walk.
//! * **A sliding window as a ring of slices.** The window (default 10 s) is cut
//!   into `slices` (default 10) sub-window sketches keyed by their slice number
//!   (`now / slice`). A query merges the slices of the last `slices` slice
//!   numbers, current partial one included, so the window spans between
//!   `window − slice` and `window` of history. Writing into a slot whose slice
//!   number is old resets it: that is how stale data ages out, with no timer.
//! * **A window long enough to hold its jobs.** Ten seconds of a class that
//!   finishes a job every second or two (long generations on a few GPUs)
//!   never hold `min_samples` of them. A configured service prior fills in
//!   for the jobs missing (below); without one, the class would run on the
//!   handful it has for good. So, for a class without a service prior, the
//!   window widens past `window_ms`, a slice at a time, until it holds
//!   `min_samples` service samples, up to `max_window_ms` (2 min): a class
//!   busy enough to fill ten seconds keeps ten seconds; a slow one is judged
//!   on its last `min_samples` jobs.
//! * **Recent horizons.** Besides the window, queue age and service time are
//!   also reported over the freshest horizon holding `min_samples`: the newest
//!   `recent_slices` (2) slices, widened a slice at a time up to the window.
//!   The controller needs them because queue age follows its own budget (a
//!   10 s p95 would remember a drained backlog for 10 s) and a new service
//!   tail shows there before it is 5% of the window. Same for the drain rate
//!   (completions per second), which with the queue depth predicts the wait.
//! * **Priors below a minimum sample count.** A p95 of three samples is noise.
//!   Below `min_samples` a distribution leans on the class's configured
//!   prior, which stands for the samples still missing, and says so
//!   ([`Source::Prior`]); the controller never *cuts* on priors alone (see
//!   [`crate::control`]). The default prior is all zeros, which makes the
//!   slack positive: with no evidence, shedder sheds nothing. The service
//!   curve (what a job costs, and its chance) leans the same way, so that it
//!   moves smoothly as a throttled class's count crosses `min_samples`.
//! * **A version.** Every estimate carries the registry's `version`, bumped
//!   whenever the parameters or any prior change, so a decision logged at
//!   09:13:02 can be tied to the estimator configuration that produced it.
//! * **No wall clock.** Every call takes `now` (a [`Duration`] since an
//!   arbitrary epoch); tests run on a simulated clock. Time going backwards is
//!   treated as "still the latest slice", never as a reason to drop data.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::estimate_error::{ErrorSketches, EstimateError};
use crate::service_curve::ServiceCurve;
use crate::sketch::Sketch;
use crate::telemetry::{
    ClassObservations, Observation,
    freshness::{self, StaleInput},
};

/// The estimator's tunables (the `[estimator]` part of the config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EstimatorParams {
    /// Length of the sliding window, ms.
    #[serde(default = "default_window_ms")]
    pub window_ms: u64,
    /// Sub-window sketches the window is made of; more slices age out
    /// more smoothly and cost more per query.
    #[serde(default = "default_slices")]
    pub slices: u32,
    /// Samples a distribution needs before its quantiles replace the prior
    /// (and, without a service prior, the window widens to hold this many,
    /// up to `max_window_ms`).
    #[serde(default = "default_min_samples")]
    pub min_samples: u64,
    /// Slices (the current partial one included) over which the drain rate and
    /// the recent queue age are measured: short, because queue age follows
    /// the budget (the controller's own output) and a long window there is
    /// only lag. The recent queue age widens past it until it has `min_samples`.
    #[serde(default = "default_recent_slices")]
    pub recent_slices: u32,
    /// The most the window of a class without a service prior widens to,
    /// ms, to hold `min_samples` service samples (in whole slices; never
    /// less than `window_ms`, which it equals to never widen). Each class
    /// keeps this much history in memory, a slice's sketches per
    /// `window_ms / slices`.
    #[serde(default = "default_max_window_ms")]
    pub max_window_ms: u64,
}

fn default_window_ms() -> u64 {
    10_000
}
fn default_slices() -> u32 {
    10
}
fn default_min_samples() -> u64 {
    20
}
fn default_recent_slices() -> u32 {
    2
}
fn default_max_window_ms() -> u64 {
    120_000
}

/// The most slices the widest window may span (memory per class is bounded
/// by this many slices' sketches).
const MAX_RING_SLICES: u64 = 4_096;

impl Default for EstimatorParams {
    fn default() -> Self {
        EstimatorParams {
            window_ms: default_window_ms(),
            slices: default_slices(),
            min_samples: default_min_samples(),
            recent_slices: default_recent_slices(),
            max_window_ms: default_max_window_ms(),
        }
    }
}

impl EstimatorParams {
    fn slice_ms(&self) -> u64 {
        self.window_ms / u64::from(self.slices)
    }

    /// Slices in the widest window: the ring's length.
    fn ring_slices(&self) -> u64 {
        self.max_window_ms.max(self.window_ms) / self.slice_ms()
    }

    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Result<(), InvalidParams> {
        if !(1..=1000).contains(&self.slices) {
            return Err(InvalidParams(format!("estimator.slices: {} is outside 1..=1000", self.slices)));
        }
        if self.window_ms < 10 * u64::from(self.slices) {
            return Err(InvalidParams(format!(
                "estimator.window_ms: {} is too short for {} slices (at least 10 ms a slice)",
                self.window_ms, self.slices
            )));
        }
        if !self.window_ms.is_multiple_of(u64::from(self.slices)) {
            return Err(InvalidParams(format!(
                "estimator.window_ms: {} is not a whole number of ms per slice ({} slices)",
                self.window_ms, self.slices
            )));
        }
        if self.min_samples == 0 {
            return Err(InvalidParams("estimator.min_samples: must be at least 1".into()));
        }
        if self.recent_slices == 0 || self.recent_slices > self.slices {
            return Err(InvalidParams(format!(
                "estimator.recent_slices: {} is outside 1..={} (slices)",
                self.recent_slices, self.slices
            )));
        }
        if self.ring_slices() > MAX_RING_SLICES {
            return Err(InvalidParams(format!(
                "estimator.max_window_ms: {} is {} slices of {} ms, more than {MAX_RING_SLICES}",
                self.max_window_ms,
                self.ring_slices(),
                self.slice_ms()
            )));
        }
        Ok(())
    }
}

/// A bad parameter or prior; the message names the field.
#[derive(Clone, Debug, PartialEq)]
pub struct InvalidParams(pub String);

impl fmt::Display for InvalidParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidParams {}

/// Observations were sent for a class the registry does not know. Unknown
/// names are refused rather than created, so a client cannot grow the
/// daemon's memory by inventing class names.
#[derive(Clone, Debug, PartialEq)]
pub struct UnknownClass(pub String);

impl fmt::Display for UnknownClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown class {:?}", self.0)
    }
}

impl std::error::Error for UnknownClass {}

/// What a class is assumed to look like before there are enough samples.
/// A quantile left out takes the p95 (conservative above the median,
/// optimistic above the p95: a prior is a guess, and says so).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassPrior {
    #[serde(default)]
    pub queue_age_p95_ms: f64,
    #[serde(default)]
    pub queue_age_p50_ms: Option<f64>,
    #[serde(default)]
    pub queue_age_p90_ms: Option<f64>,
    #[serde(default)]
    pub queue_age_p99_ms: Option<f64>,
    #[serde(default)]
    pub service_p95_ms: f64,
    #[serde(default)]
    pub service_p50_ms: Option<f64>,
    #[serde(default)]
    pub service_p90_ms: Option<f64>,
    #[serde(default)]
    pub service_p99_ms: Option<f64>,
}

impl ClassPrior {
    /// The prior's queue-age quantiles.
    pub fn queue_age(&self) -> Quantiles {
        Quantiles::from_p95(self.queue_age_p95_ms, self.queue_age_p50_ms, self.queue_age_p90_ms, self.queue_age_p99_ms)
    }

    /// Whether a service time was configured (a p95 of 0 is none).
    pub fn has_service(&self) -> bool {
        self.service_p95_ms > 0.0
    }

    /// The prior's service-time quantiles.
    pub fn service(&self) -> Quantiles {
        Quantiles::from_p95(self.service_p95_ms, self.service_p50_ms, self.service_p90_ms, self.service_p99_ms)
    }

    fn validate(&self, class: &str) -> Result<(), InvalidParams> {
        let fields = [
            ("queue_age_p95_ms", Some(self.queue_age_p95_ms)),
            ("queue_age_p50_ms", self.queue_age_p50_ms),
            ("queue_age_p90_ms", self.queue_age_p90_ms),
            ("queue_age_p99_ms", self.queue_age_p99_ms),
            ("service_p95_ms", Some(self.service_p95_ms)),
            ("service_p50_ms", self.service_p50_ms),
            ("service_p90_ms", self.service_p90_ms),
            ("service_p99_ms", self.service_p99_ms),
        ];
        for (name, value) in fields {
            if let Some(v) = value
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(InvalidParams(format!(
                    "class {class:?} prior.{name}: {v} is not a finite, non-negative number of ms"
                )));
            }
        }
        // Each distribution's quantiles, in the order they must rise: the p95
        // counts when left out, as 0 (for the service, no prior at all).
        for group in [&fields[..4], &fields[4..]] {
            let mut given: Vec<(&str, f64)> = group.iter().filter_map(|(name, v)| v.map(|v| (*name, v))).collect();
            given.sort_by_key(|(name, _)| ["p50", "p90", "p95", "p99"].iter().position(|p| name.contains(p)));
            if let Some(pair) = given.windows(2).find(|pair| pair[0].1 > pair[1].1) {
                let ((low, low_ms), (high, high_ms)) = (pair[0], pair[1]);
                return Err(InvalidParams(format!(
                    "class {class:?} prior.{low}: {low_ms} is above {high} ({high_ms}); a higher percentile is never \
                     shorter{}",
                    if high_ms == 0.0 && high.ends_with("p95_ms") { " (left out, the p95 is 0)" } else { "" }
                )));
            }
        }
        Ok(())
    }
}

/// The quantiles every distribution reports, in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub p50: f64,
    /// Kept because `slack_p10` is `deadline − queue_age_p90 − …`.
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
}

impl Quantiles {
    fn from_p95(p95: f64, p50: Option<f64>, p90: Option<f64>, p99: Option<f64>) -> Self {
        Quantiles { p50: p50.unwrap_or(p95), p90: p90.unwrap_or(p95), p95, p99: p99.unwrap_or(p95) }
    }

    fn of(sketch: &Sketch) -> Option<Self> {
        let [p50, p90, p95, p99] = sketch.quantiles(&[0.50, 0.90, 0.95, 0.99])?[..] else { return None };
        Some(Quantiles { p50, p90, p95, p99 })
    }

    /// The quantiles of the jobs `sketch` holds mixed with `prior`, which
    /// stands for the jobs still missing: the measured ones weigh `w`
    /// (`samples / min_samples`). Each of the prior's quantiles is taken as
    /// a point mass (a prior given as a p95 alone is one), so that a few
    /// measured waits of a second beside a prior of none read as a queue,
    /// not as the prior's nothing; `prior` when the sketch is empty.
    fn leaning(sketch: &Sketch, prior: Quantiles, w: f64) -> Self {
        let measured = |q: f64| sketch.quantile(q.clamp(0.0, 1.0));
        let mix = |q: f64, at: f64| {
            // Below the prior's mass only the measured jobs count; past it,
            // the mass adds the missing jobs' share.
            let below = (q <= w).then(|| measured(q / w)).flatten().filter(|x| *x < at);
            let past = (q - (1.0 - w)) / w;
            let with_mass = if past <= 1e-9 { Some(at) } else { measured(past).map(|x| x.max(at)) };
            below.or(with_mass).unwrap_or(at)
        };
        Quantiles {
            p50: mix(0.50, prior.p50),
            p90: mix(0.90, prior.p90),
            p95: mix(0.95, prior.p95),
            p99: mix(0.99, prior.p99),
        }
    }
}

/// Where a distribution's quantiles came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Measured over the window, from at least `min_samples` samples.
    Window,
    /// Too few samples in the window: the configured prior, standing for
    /// the jobs missing beside those measured.
    Prior,
}

/// One distribution's estimate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    pub quantiles: Quantiles,
    /// Samples in the window (weights summed), whatever the source.
    pub samples: u64,
    pub source: Source,
}

impl Distribution {
    pub fn from_prior(&self) -> bool {
        self.source == Source::Prior
    }
}

/// Completions in the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Completions {
    pub on_time: u64,
    pub late: u64,
}

/// A gauge's latest value and how old it is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gauge<T> {
    pub value: T,
    pub age_ms: u64,
}

/// Everything the estimators know about one class at `at_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassEstimate {
    pub class: String,
    pub at_ms: u64,
    pub estimator_version: u64,
    /// The span the window covers, ms: `window_ms`, or wider for a class
    /// without a service prior whose last `min_samples` jobs took longer.
    pub window_ms: u64,
    pub queue_age: Distribution,
    /// Queue age over the freshest horizon that holds `min_samples`: the
    /// newest `recent_slices` slices, widened a slice at a time up to the
    /// whole window (then it equals `queue_age`). What the controller uses.
    pub queue_age_recent: Distribution,
    /// The span that horizon covers, ms (at most the window).
    pub queue_age_recent_ms: u64,
    pub service: Distribution,
    /// Service time as a curve (`P(service ≤ t)` and the mean): the window's,
    /// or at every probability the recent horizon's (the freshest slices
    /// holding `min_samples`, as for `queue_age_recent`) where that is higher
    /// (fast attack: a regime change shows seconds before it dominates the
    /// window); the prior's lognormal below
    /// `min_samples`. What job-level admission and the capacity model read.
    pub service_curve: ServiceCurve,
    /// How far off the servers' estimates run, by the estimate's size, over
    /// the window's finished jobs that had one. `None` below `min_samples`
    /// of them: an estimate is not used before its error is known. Not in
    /// the answers: `shedder_estimate_error_ratio` shows it.
    #[serde(skip)]
    pub estimate_error: Option<EstimateError>,
    pub completions: Completions,
    /// Jobs waiting, as last reported (`None` if never, or older than the window).
    pub queue_depth: Option<Gauge<u64>>,
    /// KV-cache usage 0..=1, as last reported (same ageing).
    pub kv_cache_usage: Option<Gauge<f64>>,
    /// Service completions per second over the freshest horizon holding
    /// `min_samples` of them (as for `queue_age_recent`; `None` if the whole
    /// window holds fewer). With the queue
    /// depth it predicts the wait of a job arriving now (Little's law).
    pub drain_rate_per_s: Option<f64>,
    /// What a scraped inference server shows live.
    pub live: LiveSignals,
}

/// A scraped server's live signals for a class ([`crate::telemetry::live_queue`],
/// [`crate::telemetry::freshness`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveSignals {
    /// Jobs being served, as last reported (`None` if never, or older than the window).
    pub running: Option<Gauge<u64>>,
    /// Predicted queue age of the jobs waiting now, ms (same ageing).
    pub predicted_queue_age_ms: Option<Gauge<f64>>,
    /// The newest scrape that read the live gauges: whether it found them
    /// frozen, and its age. Never ages out, so an old scrape stays visible.
    pub gauges_frozen: Option<Gauge<bool>>,
}

impl LiveSignals {
    /// The inputs not to trust: frozen gauges, or a newest scrape older
    /// than `max_age_ms` (`[control] stale_after_ms`).
    pub fn stale_inputs(&self, max_age_ms: u64) -> Vec<StaleInput> {
        freshness::stale_inputs(self.gauges_frozen.map(|g| (g.age_ms, g.value)), max_age_ms)
    }
}

#[derive(Clone)]
struct Slice {
    /// `now / slice_ms` when this slot was last reset.
    number: u64,
    queue_age: Sketch,
    service: Sketch,
    /// Finished jobs the server had estimated.
    estimate_error: ErrorSketches,
    on_time: u64,
    late: u64,
}

impl Slice {
    fn new(number: u64) -> Self {
        Slice {
            number,
            queue_age: Sketch::new(),
            service: Sketch::new(),
            estimate_error: ErrorSketches::default(),
            on_time: 0,
            late: 0,
        }
    }
}

#[derive(Clone)]
struct ClassState {
    prior: ClassPrior,
    ring: Vec<Option<Slice>>,
    /// Highest slice number written or queried: time never runs backwards here.
    latest: u64,
    /// When the first observation arrived: the drain rate's horizon cannot
    /// reach back before it.
    first_seen_ms: Option<u64>,
    queue_depth: Option<(u64, u64)>,
    kv_cache: Option<(u64, f64)>,
    running: Option<(u64, u64)>,
    predicted_queue_age: Option<(u64, f64)>,
    gauges_frozen: Option<(u64, bool)>,
}

impl ClassState {
    fn new(prior: ClassPrior, ring_slices: u64) -> Self {
        ClassState {
            prior,
            ring: (0..ring_slices).map(|_| None).collect(),
            latest: 0,
            first_seen_ms: None,
            queue_depth: None,
            kv_cache: None,
            running: None,
            predicted_queue_age: None,
            gauges_frozen: None,
        }
    }

    fn slice_mut(&mut self, number: u64) -> &mut Slice {
        let number = number.max(self.latest);
        self.latest = number;
        let len = self.ring.len() as u64;
        let slot = &mut self.ring[(number % len) as usize];
        if slot.as_ref().is_none_or(|s| s.number != number) {
            *slot = Some(Slice::new(number));
        }
        slot.as_mut().expect("slot was just filled")
    }

    /// Slices whose numbers lie in `(current − n, current]`.
    fn recent(&self, current: u64, n: u64) -> impl Iterator<Item = &Slice> {
        self.ring.iter().flatten().filter(move |s| s.number <= current && s.number + n > current)
    }
}

/// The registry: one estimator per configured class, one version for all.
#[derive(Clone)]
pub struct Estimators {
    params: EstimatorParams,
    classes: BTreeMap<String, ClassState>,
    version: u64,
}

fn ms(now: Duration) -> u64 {
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

impl Estimators {
    /// A registry for these classes and their priors; version 1.
    pub fn new(params: EstimatorParams, priors: BTreeMap<String, ClassPrior>) -> Result<Self, InvalidParams> {
        params.validate()?;
        for (class, prior) in &priors {
            prior.validate(class)?;
        }
        let classes =
            priors.into_iter().map(|(name, prior)| (name, ClassState::new(prior, params.ring_slices()))).collect();
        Ok(Estimators { params, classes, version: 1 })
    }

    pub fn params(&self) -> &EstimatorParams {
        &self.params
    }

    /// Bumped by every [`Estimators::reconfigure`] that changed anything.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Applies new parameters and priors all at once, or nothing if any is
    /// invalid. Returns whether anything changed (and so the version moved).
    /// Classes that stay keep their data, unless the window, the slice
    /// count or the widest window changed: old slices would then mean other
    /// time spans, so every ring restarts (and the priors cover the gap).
    pub fn reconfigure(
        &mut self,
        params: EstimatorParams,
        priors: BTreeMap<String, ClassPrior>,
    ) -> Result<bool, InvalidParams> {
        params.validate()?;
        for (class, prior) in &priors {
            prior.validate(class)?;
        }
        let same_priors = priors.len() == self.classes.len()
            && priors.iter().all(|(name, prior)| self.classes.get(name).is_some_and(|s| &s.prior == prior));
        if params == self.params && same_priors {
            return Ok(false);
        }
        let reslice = params.window_ms != self.params.window_ms
            || params.slices != self.params.slices
            || params.max_window_ms != self.params.max_window_ms;
        let mut old = std::mem::take(&mut self.classes);
        for (name, prior) in priors {
            let state = match old.remove(&name) {
                Some(mut state) if !reslice => {
                    state.prior = prior;
                    state
                }
                _ => ClassState::new(prior, params.ring_slices()),
            };
            self.classes.insert(name, state);
        }
        self.params = params;
        self.version += 1;
        Ok(true)
    }

    /// Feeds one interval's observations for a class. Returns how many were
    /// accepted: a NaN, infinite or negative time is skipped (and counted out),
    /// since one bad sample must not poison a p99.
    pub fn observe(&mut self, now: Duration, batch: &ClassObservations) -> Result<usize, UnknownClass> {
        let mut accepted = 0;
        for observation in &batch.observations {
            if self.observe_one(now, &batch.class, observation)? {
                accepted += 1;
            }
        }
        Ok(accepted)
    }

    /// Feeds one observation; `Ok(false)` if its value was unusable.
    pub fn observe_one(&mut self, now: Duration, class: &str, observation: &Observation) -> Result<bool, UnknownClass> {
        let slice_ms = self.params.slice_ms();
        let state = self.classes.get_mut(class).ok_or_else(|| UnknownClass(class.to_string()))?;
        let now_ms = ms(now);
        let usable = |v: f64| v.is_finite() && v >= 0.0;
        match *observation {
            Observation::QueueAge { ms, count } | Observation::Service { ms, count } if !usable(ms) => {
                let _ = count;
                return Ok(false);
            }
            Observation::EstimateError { estimate_ms, service_ms, count } => {
                if !state.slice_mut(now_ms / slice_ms).estimate_error.add(estimate_ms, service_ms, count) {
                    return Ok(false);
                }
            }
            Observation::QueueAge { ms, count } => {
                state.slice_mut(now_ms / slice_ms).queue_age.add(ms, count);
            }
            Observation::Service { ms, count } => {
                state.slice_mut(now_ms / slice_ms).service.add(ms, count);
            }
            Observation::Completion { late_by_ms: None, count } => {
                state.slice_mut(now_ms / slice_ms).on_time += count;
            }
            Observation::Completion { late_by_ms: Some(late_by), count } => {
                if !usable(late_by) {
                    return Ok(false);
                }
                state.slice_mut(now_ms / slice_ms).late += count;
            }
            // Retries are the metrics' business; the slack does not use them.
            Observation::Retry { .. } => return Ok(true),
            Observation::QueueDepth(depth) => state.queue_depth = Some((now_ms, depth)),
            Observation::KvCacheUsage(usage) => {
                if !(usage.is_finite() && (0.0..=1.0).contains(&usage)) {
                    return Ok(false);
                }
                state.kv_cache = Some((now_ms, usage));
            }
            Observation::Running(running) => state.running = Some((now_ms, running)),
            Observation::PredictedQueueAge { ms } => {
                if !usable(ms) {
                    return Ok(false);
                }
                state.predicted_queue_age = Some((now_ms, ms));
            }
            Observation::GaugesFrozen(frozen) => state.gauges_frozen = Some((now_ms, frozen)),
        }
        state.first_seen_ms.get_or_insert(now_ms);
        Ok(true)
    }

    /// The estimate for one class at `now` (`None` for an unknown class).
    pub fn estimate(&self, class: &str, now: Duration) -> Option<ClassEstimate> {
        let state = self.classes.get(class)?;
        let p = &self.params;
        let now_ms = ms(now);
        let slice_ms = p.slice_ms();
        let current = (now_ms / slice_ms).max(state.latest);
        let n = u64::from(p.slices);

        // Newest first, so the recent horizon and the window can widen one
        // slice at a time.
        let mut slices: Vec<&Slice> = state.recent(current, p.ring_slices()).collect();
        slices.sort_by_key(|s| std::cmp::Reverse(s.number));

        let mut queue_age = Sketch::new();
        let mut service = Sketch::new();
        let mut estimate_error = ErrorSketches::default();
        let mut completions = Completions::default();
        let mut recent: Option<(Sketch, u64)> = None;
        let mut service_recent: Option<Sketch> = None;
        let mut drain: Option<(u64, u64)> = None;
        let recent_slices = u64::from(p.recent_slices);
        // Slices the window spans: `slices`, or, for a class without a
        // service prior to fill in for the jobs missing, more while it holds
        // fewer than `min_samples` service samples.
        let widens = !state.prior.has_service();
        let mut span = n;
        for slice in &slices {
            let age = current - slice.number + 1;
            if age > n {
                if !widens || service.count() >= p.min_samples {
                    break;
                }
                span = age;
            }
            queue_age.merge(&slice.queue_age);
            service.merge(&slice.service);
            estimate_error.merge(&slice.estimate_error);
            completions.on_time += slice.on_time;
            completions.late += slice.late;
            if recent.is_none() && age >= recent_slices && queue_age.count() >= p.min_samples {
                recent = Some((queue_age.clone(), age));
            }
            let drained = service.count();
            if drain.is_none() && age >= recent_slices && drained >= p.min_samples {
                drain = Some((drained, age));
                service_recent = Some(service.clone());
            }
        }

        let distribution = |sketch: &Sketch, prior: Quantiles| {
            let samples = sketch.count();
            match Quantiles::of(sketch) {
                Some(quantiles) if samples >= p.min_samples => {
                    Distribution { quantiles, samples, source: Source::Window }
                }
                _ => {
                    let w = samples as f64 / p.min_samples.max(1) as f64;
                    Distribution { quantiles: Quantiles::leaning(sketch, prior, w), samples, source: Source::Prior }
                }
            }
        };
        let queue_age_window = distribution(&queue_age, state.prior.queue_age());
        let (queue_age_recent, recent_slices_used) = match &recent {
            Some((sketch, k)) => (distribution(sketch, state.prior.queue_age()), *k),
            None => (queue_age_window, span),
        };
        let window_ms = span * slice_ms;
        // The horizon spans its full slices plus the current partial one.
        let queue_age_recent_ms =
            (now_ms.saturating_sub((current + 1).saturating_sub(recent_slices_used) * slice_ms)).min(window_ms);

        // Drain rate over its horizon: full slices plus the current partial
        // one, never reaching back before the first observation.
        let drain_rate_per_s = drain.map(|(drained, age)| {
            let start = (current + 1).saturating_sub(age) * slice_ms;
            let start = start.max(state.first_seen_ms.unwrap_or(start));
            let span_ms = now_ms.saturating_sub(start).max(slice_ms / 2);
            drained as f64 * 1000.0 / span_ms as f64
        });

        let prior_curve = || ServiceCurve::lognormal(state.prior.service_p50_ms, state.prior.service_p95_ms);
        let measured_curve =
            |sketch: &Sketch| (sketch.count() >= p.min_samples).then(|| ServiceCurve::of_sketch(sketch)).flatten();
        let recent_jobs = service_recent.as_ref().map_or(0, |s| s.count());
        let service_curve = match (measured_curve(&service), service_recent.as_ref().and_then(measured_curve)) {
            (Some(window), Some(recent)) => window.upper(&recent, recent_jobs),
            (Some(window), None) => window,
            // Too few samples for quantiles to mean much alone. A configured
            // prior fills in for the jobs still missing; without one, a few
            // real samples still beat "no cost at all" (a class throttled to
            // a trickle must not look free and be let in wholesale).
            (None, _) => match ServiceCurve::of_sketch(&service) {
                Some(few) if state.prior.has_service() => few.lean_on(&prior_curve(), service.count(), p.min_samples),
                Some(few) => few,
                None => prior_curve(),
            },
        };

        let fresh = |at: u64| {
            let age = now_ms.saturating_sub(at);
            (age <= p.window_ms).then_some(age)
        };
        Some(ClassEstimate {
            class: class.to_string(),
            at_ms: now_ms,
            estimator_version: self.version,
            window_ms,
            queue_age: queue_age_window,
            queue_age_recent,
            queue_age_recent_ms,
            service: distribution(&service, state.prior.service()),
            service_curve,
            estimate_error: EstimateError::learn(estimate_error, p.min_samples),
            completions,
            queue_depth: state.queue_depth.and_then(|(at, value)| Some(Gauge { value, age_ms: fresh(at)? })),
            kv_cache_usage: state.kv_cache.and_then(|(at, value)| Some(Gauge { value, age_ms: fresh(at)? })),
            drain_rate_per_s,
            live: LiveSignals {
                running: state.running.and_then(|(at, value)| Some(Gauge { value, age_ms: fresh(at)? })),
                predicted_queue_age_ms: state
                    .predicted_queue_age
                    .and_then(|(at, value)| Some(Gauge { value, age_ms: fresh(at)? })),
                gauges_frozen: state
                    .gauges_frozen
                    .map(|(at, value)| Gauge { value, age_ms: now_ms.saturating_sub(at) }),
            },
        })
    }

    /// Estimates for every class, keyed by name: what [`crate::control::Controller::tick`] takes.
    pub fn estimate_all(&self, now: Duration) -> BTreeMap<String, ClassEstimate> {
        self.classes.keys().filter_map(|name| Some((name.clone(), self.estimate(name, now)?))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lognormal::Lognormal;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn one_class(params: EstimatorParams, prior: ClassPrior) -> Estimators {
        Estimators::new(params, BTreeMap::from([("interactive".to_string(), prior)])).unwrap()
    }

    fn service(ms: f64) -> Observation {
        Observation::Service { ms, count: 1 }
    }

    #[test]
    fn quantiles_of_a_lognormal_are_within_a_few_percent() {
        // The drill's service time: p50 120 ms, p95 400 ms.
        let service_time = Lognormal::through(120.0, 400.0).unwrap();
        let mut est = one_class(EstimatorParams::default(), ClassPrior::default());
        let mut rng = SmallRng::seed_from_u64(7);
        let mut exact = Vec::new();
        for i in 0..50_000u64 {
            let v = service_time.draw(&mut rng);
            exact.push(v);
            // 50,000 samples inside one 10 s window.
            est.observe_one(at(i / 10), "interactive", &service(v)).unwrap();
        }
        exact.sort_by(f64::total_cmp);
        let true_q = |q: f64| exact[(q * (exact.len() - 1) as f64) as usize];
        let e = est.estimate("interactive", at(5_000)).unwrap();
        assert_eq!(e.service.source, Source::Window);
        assert_eq!(e.service.samples, 50_000);
        for (q, got) in
            [(0.5, e.service.quantiles.p50), (0.95, e.service.quantiles.p95), (0.99, e.service.quantiles.p99)]
        {
            let want = true_q(q);
            assert!((got - want).abs() / want < 0.02, "q{q}: sketch {got:.1} vs exact {want:.1}");
        }
        // And the analytic values the workload declares.
        assert!((e.service.quantiles.p50 - 120.0).abs() < 120.0 * 0.03, "{:?}", e.service.quantiles);
        assert!((e.service.quantiles.p95 - 400.0).abs() < 400.0 * 0.03, "{:?}", e.service.quantiles);
    }

    #[test]
    fn the_estimates_error_is_learnt_once_there_are_enough_and_ages_out() {
        let params = EstimatorParams::default();
        let mut est = one_class(params.clone(), ClassPrior::default());
        let error = |service_ms| Observation::EstimateError { estimate_ms: 100.0, service_ms, count: 1 };
        // Jobs estimated at 100 ms that take a quarter longer, and as many a fifth shorter.
        for i in 0..params.min_samples {
            let service = if i % 2 == 0 { 125.0 } else { 80.0 };
            est.observe_one(at(1_000), "interactive", &error(service)).unwrap();
            let learnt = est.estimate("interactive", at(1_000)).unwrap().estimate_error;
            assert_eq!(learnt.is_some(), i + 1 >= params.min_samples, "after {} of them", i + 1);
        }
        let learnt = est.estimate("interactive", at(1_000)).unwrap().estimate_error.unwrap();
        assert!((learnt.chance_within(100.0, 100.0) - 0.5).abs() < 0.05, "{}", learnt.chance_within(100.0, 100.0));
        assert!(learnt.chance_within(100.0, 130.0) >= 0.99);
        // An unusable pair is not counted.
        assert!(!est.observe_one(at(1_000), "interactive", &error(f64::NAN)).unwrap());
        // Past the widest window it is forgotten, as the service times are.
        let later = at(1_000 + params.max_window_ms.max(params.window_ms) * 2);
        assert!(est.estimate("interactive", later).unwrap().estimate_error.is_none());
    }

    #[test]
    fn weighted_counts_are_weights_not_loops() {
        let mut est = one_class(EstimatorParams::default(), ClassPrior::default());
        // A histogram bucket: ten million jobs at 100 ms, and 1% at 2 s.
        let now = at(1_000);
        est.observe_one(now, "interactive", &Observation::Service { ms: 100.0, count: 9_900_000 }).unwrap();
        est.observe_one(now, "interactive", &Observation::Service { ms: 2_000.0, count: 100_000 }).unwrap();
        let e = est.estimate("interactive", now).unwrap();
        assert_eq!(e.service.samples, 10_000_000);
        assert!((e.service.quantiles.p95 - 100.0).abs() <= 1.0, "{:?}", e.service.quantiles);
        assert!((e.service.quantiles.p99 - 100.0).abs() <= 1.0 || (e.service.quantiles.p99 - 2000.0).abs() <= 20.0);
        // Count zero records nothing.
        est.observe_one(now, "interactive", &Observation::QueueAge { ms: 5.0, count: 0 }).unwrap();
        assert_eq!(est.estimate("interactive", now).unwrap().queue_age.samples, 0);
    }

    #[test]
    fn below_min_samples_the_prior_stands_in_for_the_missing_and_is_flagged() {
        let prior = ClassPrior {
            queue_age_p95_ms: 300.0,
            service_p95_ms: 1_800.0,
            service_p50_ms: Some(700.0),
            ..ClassPrior::default()
        };
        let params = EstimatorParams { min_samples: 20, ..EstimatorParams::default() };
        let mut est = one_class(params, prior);
        for i in 0..19 {
            est.observe_one(at(i * 10), "interactive", &service(50.0)).unwrap();
        }
        let e = est.estimate("interactive", at(500)).unwrap();
        assert!(e.service.from_prior());
        assert_eq!(e.service.samples, 19);
        // 19 jobs of 50 ms and the prior's one missing job (a point mass at
        // each of its quantiles): 95% of the mixture is measured.
        let q = e.service.quantiles;
        assert!([q.p50, q.p90, q.p95].iter().all(|v| (v - 50.0).abs() < 1.0) && q.p99 == 1_800.0, "{q:?}");
        // No wait measured: the prior alone.
        assert!(e.queue_age.from_prior());
        assert_eq!(e.queue_age.quantiles.p95, 300.0);

        est.observe_one(at(200), "interactive", &service(50.0)).unwrap();
        let e = est.estimate("interactive", at(500)).unwrap();
        assert_eq!(e.service.source, Source::Window);
        assert!((e.service.quantiles.p95 - 50.0).abs() < 1.0);
    }

    #[test]
    fn a_class_crossing_min_samples_keeps_a_steady_cost() {
        // A class throttled to about `min_samples` jobs a window: its cost
        // (the curve's mean) must not jump between the prior's and its own
        // as one job comes or goes.
        let prior = ClassPrior { service_p95_ms: 1_500.0, ..ClassPrior::default() };
        let params = EstimatorParams { min_samples: 20, ..EstimatorParams::default() };
        let mut est = one_class(params, prior);
        let mut means = vec![est.estimate("interactive", at(0)).unwrap().service_curve.mean_ms];
        for i in 0..25 {
            est.observe_one(at(i * 10), "interactive", &service(200.0)).unwrap();
            means.push(est.estimate("interactive", at(300)).unwrap().service_curve.mean_ms);
        }
        assert!((means[0] - 1_500.0).abs() < 1e-6, "no jobs: the prior");
        assert!((means[25] - 200.0).abs() < 2.0, "enough jobs: their own mean");
        // Each job moves the cost by its share of the gap, never more.
        let largest_step = means.windows(2).map(|w| (w[1] - w[0]).abs()).fold(0.0, f64::max);
        assert!(largest_step <= (1_500.0 - 200.0) / 20.0 + 2.0, "steps up to {largest_step} ms: {means:?}");
    }

    #[test]
    fn samples_age_out_after_the_window() {
        // 10 s window of ten 1 s slices, never widened.
        let mut est = one_class(
            EstimatorParams { min_samples: 1, max_window_ms: 10_000, ..EstimatorParams::default() },
            ClassPrior::default(),
        );
        est.observe_one(at(500), "interactive", &Observation::QueueAge { ms: 2_000.0, count: 50 }).unwrap();
        est.observe_one(at(5_500), "interactive", &Observation::QueueAge { ms: 10.0, count: 50 }).unwrap();
        // At 9.9 s both are in the window: the p95 is the old, high one.
        let e = est.estimate("interactive", at(9_900)).unwrap();
        assert_eq!(e.queue_age.samples, 100);
        assert!(e.queue_age.quantiles.p95 > 1_900.0);
        // At 10.0 s the slice [0, 1 s) has left the window.
        let e = est.estimate("interactive", at(10_000)).unwrap();
        assert_eq!(e.queue_age.samples, 50);
        assert!(e.queue_age.quantiles.p95 < 11.0);
        // At 15.0 s nothing is left: back to the prior.
        let e = est.estimate("interactive", at(15_000)).unwrap();
        assert_eq!(e.queue_age.samples, 0);
        assert!(e.queue_age.from_prior());
        // A slot reused by a later slice starts empty.
        est.observe_one(at(20_100), "interactive", &Observation::QueueAge { ms: 30.0, count: 1 }).unwrap();
        let e = est.estimate("interactive", at(20_200)).unwrap();
        assert_eq!(e.queue_age.samples, 1);
    }

    #[test]
    fn time_going_backwards_keeps_the_data() {
        let mut est =
            one_class(EstimatorParams { min_samples: 1, ..EstimatorParams::default() }, ClassPrior::default());
        est.observe_one(at(50_000), "interactive", &service(100.0)).unwrap();
        est.observe_one(at(1_000), "interactive", &service(200.0)).unwrap();
        let e = est.estimate("interactive", at(900)).unwrap();
        assert_eq!(e.service.samples, 2);
    }

    #[test]
    fn version_bumps_only_when_parameters_or_priors_change() {
        let mut est = one_class(EstimatorParams::default(), ClassPrior::default());
        assert_eq!(est.version(), 1);
        let priors = |p95: f64| {
            BTreeMap::from([("interactive".to_string(), ClassPrior { service_p95_ms: p95, ..ClassPrior::default() })])
        };
        assert!(!est.reconfigure(EstimatorParams::default(), priors(0.0)).unwrap());
        assert_eq!(est.version(), 1);
        est.observe_one(at(100), "interactive", &service(10.0)).unwrap();

        // A prior changes: version moves, data stays.
        assert!(est.reconfigure(EstimatorParams::default(), priors(900.0)).unwrap());
        assert_eq!(est.version(), 2);
        assert_eq!(est.estimate("interactive", at(200)).unwrap().service.samples, 1);
        assert_eq!(est.estimate("interactive", at(200)).unwrap().estimator_version, 2);

        // min_samples changes: version moves, data stays.
        let p = EstimatorParams { min_samples: 5, ..EstimatorParams::default() };
        assert!(est.reconfigure(p.clone(), priors(900.0)).unwrap());
        assert_eq!(est.version(), 3);
        assert_eq!(est.estimate("interactive", at(200)).unwrap().service.samples, 1);

        // The window changes: version moves, rings restart.
        let p = EstimatorParams { window_ms: 5_000, slices: 5, ..p };
        assert!(est.reconfigure(p, priors(900.0)).unwrap());
        assert_eq!(est.version(), 4);
        assert_eq!(est.estimate("interactive", at(200)).unwrap().service.samples, 0);

        // An invalid change is refused whole.
        let bad = EstimatorParams { slices: 0, ..EstimatorParams::default() };
        assert!(est.reconfigure(bad, priors(1.0)).unwrap_err().0.contains("estimator.slices"));
        assert_eq!(est.version(), 4);
        let bad_prior =
            BTreeMap::from([("x".to_string(), ClassPrior { service_p95_ms: f64::NAN, ..ClassPrior::default() })]);
        assert!(est.reconfigure(EstimatorParams::default(), bad_prior).unwrap_err().0.contains("prior.service_p95_ms"));
        assert_eq!(est.version(), 4);
    }

    #[test]
    fn unknown_classes_and_bad_values_are_refused() {
        let mut est = one_class(EstimatorParams::default(), ClassPrior::default());
        let batch = ClassObservations { class: "nope".into(), observations: vec![service(1.0)] };
        assert_eq!(est.observe(at(0), &batch), Err(UnknownClass("nope".into())));
        let batch = ClassObservations {
            class: "interactive".into(),
            observations: vec![
                service(f64::NAN),
                service(-1.0),
                service(f64::INFINITY),
                Observation::KvCacheUsage(1.5),
                Observation::Completion { late_by_ms: Some(f64::NAN), count: 1 },
                service(12.0),
            ],
        };
        assert_eq!(est.observe(at(0), &batch), Ok(1));
        let e = est.estimate("interactive", at(0)).unwrap();
        assert_eq!(e.service.samples, 1);
        assert_eq!(e.kv_cache_usage, None);
        assert_eq!(e.completions, Completions::default());
    }

    #[test]
    fn completions_gauges_and_drain_rate() {
        let mut est =
            one_class(EstimatorParams { max_window_ms: 10_000, ..EstimatorParams::default() }, ClassPrior::default());
        let c = "interactive";
        est.observe_one(at(0), c, &Observation::Completion { late_by_ms: None, count: 90 }).unwrap();
        est.observe_one(at(0), c, &Observation::Completion { late_by_ms: Some(400.0), count: 10 }).unwrap();
        est.observe_one(at(100), c, &Observation::QueueDepth(12)).unwrap();
        est.observe_one(at(100), c, &Observation::KvCacheUsage(0.93)).unwrap();
        // 30 completions a second for 4 s.
        for i in 0..120u64 {
            est.observe_one(at(i * 1000 / 30), c, &service(100.0)).unwrap();
        }
        let e = est.estimate(c, at(4_000)).unwrap();
        assert_eq!((e.completions.on_time, e.completions.late), (90, 10));
        assert_eq!(e.queue_depth, Some(Gauge { value: 12, age_ms: 3_900 }));
        assert_eq!(e.kv_cache_usage.map(|g| g.value), Some(0.93));
        let drain = e.drain_rate_per_s.unwrap();
        assert!((drain - 30.0).abs() < 3.0, "drain {drain}");
        // Gauges age out with the window.
        let e = est.estimate(c, at(10_101)).unwrap();
        assert_eq!(e.queue_depth, None);
        assert_eq!(e.kv_cache_usage, None);
        // The drain horizon widened to find min_samples: 30 completions
        // (slice [3 s, 4 s)) over the 7.1 s since that slice began.
        assert!((e.drain_rate_per_s.unwrap() - 30.0 / 7.101).abs() < 1e-9);
        assert_eq!(est.estimate(c, at(14_000)).unwrap().drain_rate_per_s, None);
    }

    #[test]
    fn live_signals_are_kept_and_say_what_is_stale() {
        let mut est = one_class(EstimatorParams::default(), ClassPrior::default());
        let c = "interactive";
        for observation in
            [Observation::Running(14), Observation::PredictedQueueAge { ms: 2_500.0 }, Observation::GaugesFrozen(true)]
        {
            est.observe_one(at(1_000), c, &observation).unwrap();
        }
        let live = est.estimate(c, at(1_200)).unwrap().live;
        assert_eq!(live.running, Some(Gauge { value: 14, age_ms: 200 }));
        assert_eq!(live.predicted_queue_age_ms, Some(Gauge { value: 2_500.0, age_ms: 200 }));
        assert_eq!(live.stale_inputs(300), vec![StaleInput::FrozenGauges]);
        // The next scrape finds them moving again; then scrapes stop.
        est.observe_one(at(1_300), c, &Observation::GaugesFrozen(false)).unwrap();
        assert_eq!(est.estimate(c, at(1_500)).unwrap().live.stale_inputs(300), vec![]);
        let later = est.estimate(c, at(20_000)).unwrap().live;
        assert_eq!(later.stale_inputs(300), vec![StaleInput::OldScrape], "the scrape's age never ages out");
        assert_eq!((later.running, later.predicted_queue_age_ms), (None, None));
        assert!(!est.observe_one(at(1_300), c, &Observation::PredictedQueueAge { ms: f64::NAN }).unwrap());
    }

    #[test]
    fn recent_horizons_forget_fast_and_widen_when_thin() {
        let mut est = one_class(EstimatorParams::default(), ClassPrior::default());
        let c = "interactive";
        // 0..5 s: 30 jobs/s waiting 2 s and served in 1800 ms; 5..8 s: 30 jobs/s, no wait, 100 ms.
        for i in 0..240u64 {
            let t = i * 1000 / 30;
            let (wait, svc) = if t < 5_000 { (2_000.0, 1_800.0) } else { (0.0, 100.0) };
            est.observe_one(at(t), c, &Observation::QueueAge { ms: wait, count: 1 }).unwrap();
            est.observe_one(at(t), c, &service(svc)).unwrap();
        }
        let e = est.estimate(c, at(8_000)).unwrap();
        // The window still remembers the backlog and the tail...
        assert!(e.queue_age.quantiles.p95 > 1_900.0 && e.service.quantiles.p95 > 1_700.0, "{e:?}");
        // ...the recent horizon (slice 7 and the current, empty one) does not.
        assert_eq!(e.queue_age_recent.source, Source::Window);
        assert_eq!(e.queue_age_recent_ms, 1_000);
        assert_eq!(e.queue_age_recent.samples, 30);
        assert_eq!(e.queue_age_recent.quantiles.p95, 0.0);
        assert!((e.drain_rate_per_s.unwrap() - 30.0).abs() < 1e-9);

        // Thin traffic: 3 jobs/s. Two slices hold 6 samples, so the horizon
        // widens until it holds min_samples (20): seven slices. (The window
        // itself is not widened here.)
        let mut est =
            one_class(EstimatorParams { max_window_ms: 10_000, ..EstimatorParams::default() }, ClassPrior::default());
        for i in 0..30u64 {
            est.observe_one(at(i * 1000 / 3), c, &Observation::QueueAge { ms: i as f64, count: 1 }).unwrap();
        }
        let e = est.estimate(c, at(10_000)).unwrap();
        assert_eq!(e.queue_age_recent.source, Source::Window);
        assert_eq!(e.queue_age_recent.samples, 21);
        assert_eq!(e.queue_age_recent_ms, 7_000);
        // Fewer than min_samples in the whole window: the window's own answer (the prior).
        let e = est.estimate(c, at(13_500)).unwrap();
        assert_eq!(e.queue_age.samples, 18);
        assert_eq!((e.queue_age_recent.source, e.queue_age_recent_ms), (Source::Prior, 9_500));
    }

    #[test]
    fn a_slow_class_widens_its_window_to_hold_min_samples() {
        // (service samples a second, for 300 s; the window's span, s; samples in it)
        let rows = [
            (30.0, 10, 300), // busy: ten seconds hold 300
            (1.0, 20, 20),   // a job a second: 20 s hold min_samples
            (0.5, 40, 20),   // one every 2 s: 40 s
            (0.1, 120, 12),  // slower still: at most two minutes
        ];
        for (rate, span_s, samples) in rows {
            let mut est = one_class(EstimatorParams::default(), ClassPrior::default());
            let jobs = (300.0 * rate) as u64;
            for i in 0..jobs {
                est.observe_one(at((i as f64 * 1000.0 / rate) as u64), "interactive", &service(100.0)).unwrap();
            }
            // At the end of the last sample's slice.
            let e = est.estimate("interactive", at(299_999)).unwrap();
            assert_eq!((e.window_ms, e.service.samples), (span_s * 1_000, samples), "{rate} jobs/s");
            // Short of min_samples even so: the prior, as before.
            let source = if samples >= 20 { Source::Window } else { Source::Prior };
            assert_eq!(e.service.source, source, "{rate} jobs/s");
        }
        // A class with a service prior does not widen: the prior fills in.
        let prior = ClassPrior { service_p95_ms: 400.0, ..ClassPrior::default() };
        let mut est = one_class(EstimatorParams::default(), prior);
        for i in 0..300u64 {
            est.observe_one(at(i * 1_000), "interactive", &service(100.0)).unwrap();
        }
        let e = est.estimate("interactive", at(299_999)).unwrap();
        assert_eq!((e.window_ms, e.service.samples, e.service.source), (10_000, 10, Source::Prior));
        // Only the service samples widen it, and never past max_window_ms.
        let p = EstimatorParams { max_window_ms: 30_000, ..EstimatorParams::default() };
        let mut est = one_class(p, ClassPrior::default());
        for i in 0..300u64 {
            est.observe_one(at(i * 1_000), "interactive", &Observation::QueueAge { ms: 5.0, count: 1 }).unwrap();
        }
        let e = est.estimate("interactive", at(299_999)).unwrap();
        assert_eq!((e.window_ms, e.queue_age.samples), (30_000, 30));
    }

    #[test]
    fn a_few_measured_waits_lean_on_the_prior_for_the_jobs_missing() {
        // Measured waits of 1300 ms; a prior of no wait (a p95 of 0).
        let none = ClassPrior::default().queue_age();
        // (waits measured, of min_samples 20; the p95 and p50 read)
        let rows = [(0, 0.0, 0.0), (1, 0.0, 0.0), (9, 1_300.0, 0.0), (12, 1_300.0, 1_300.0), (19, 1_300.0, 1_300.0)];
        for (n, p95, p50) in rows {
            let mut sketch = Sketch::new();
            sketch.add(1_300.0, n);
            let q = Quantiles::leaning(&sketch, none, n as f64 / 20.0);
            let close = |a: f64, b: f64| (a - b).abs() <= 0.02 * b;
            assert!(close(q.p95, p95) && close(q.p50, p50), "{n} waits: {q:?}");
        }
        // A prior above what was measured keeps its mass: 10 waits of 100 ms
        // beside a prior p95 of 2 s read 100 ms at the median, 2 s at p95.
        let slow = ClassPrior { queue_age_p95_ms: 2_000.0, ..ClassPrior::default() }.queue_age();
        let mut sketch = Sketch::new();
        sketch.add(100.0, 10);
        let q = Quantiles::leaning(&sketch, slow, 0.5);
        assert!((q.p50 - 100.0).abs() <= 2.0 && q.p95 == 2_000.0, "{q:?}");
    }

    #[test]
    fn params_deserialize_strictly_with_defaults() {
        let p: EstimatorParams = toml::from_str("window_ms = 5000\nslices = 5").unwrap();
        assert_eq!(p, EstimatorParams { window_ms: 5_000, slices: 5, ..EstimatorParams::default() });
        assert!(toml::from_str::<EstimatorParams>("windw_ms = 5000").is_err());
        let prior: ClassPrior = toml::from_str("service_p95_ms = 1800\nqueue_age_p95_ms = 200").unwrap();
        assert_eq!(prior.service().p50, 1_800.0);
        assert!(toml::from_str::<ClassPrior>("service_p96_ms = 1").is_err());
        assert!(EstimatorParams { window_ms: 10_001, ..EstimatorParams::default() }.validate().is_err());
        assert!(EstimatorParams { recent_slices: 11, ..EstimatorParams::default() }.validate().is_err());
        // The widest window is counted in slices; a window wider than it
        // is not an error (the window is never narrowed).
        let wide = EstimatorParams { max_window_ms: 10_000_000, ..EstimatorParams::default() };
        assert!(wide.validate().unwrap_err().0.starts_with("estimator.max_window_ms: 10000000 is 10000 slices"));
        let odd = EstimatorParams { window_ms: 7_000, ..EstimatorParams::default() };
        assert_eq!((odd.validate(), odd.ring_slices()), (Ok(()), 171));
        let long = EstimatorParams { window_ms: 300_000, ..EstimatorParams::default() };
        assert_eq!((long.validate(), long.ring_slices()), (Ok(()), 10));
    }
}
