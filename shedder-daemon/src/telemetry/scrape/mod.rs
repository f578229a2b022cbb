//! Prometheus scraping of the inference servers: vLLM and Triton `/metrics`,
//! mapped to classes by model label.
//!
//! Each [`ScrapeTarget`] (one `[[scrape]]` table of the config) names an
//! endpoint, its exporter and which model serves which class. A [`Scraper`]
//! fetches it over HTTP (blocking, with a timeout: call it from
//! `spawn_blocking`); the exposition is parsed by `prom_text_format_parser`
//! and reduced by a [`TargetState`] to observations **for the interval since
//! the previous scrape**.
//!
//! # Intervals, baselines and resets
//!
//! Histograms and counters are cumulative, so each scrape is compared with
//! the previous one, per series (one label set: a vLLM engine, a Triton model
//! version), and the differences are summed per class:
//!
//! * The first scrape of a series is its baseline: it yields no queue or
//!   service observations (gauges are instantaneous and are reported at once).
//! * A value lower than before means the exporter restarted: the new value is
//!   everything since the restart, so it *is* the interval's delta. A
//!   histogram counts as reset when its count or any bucket went down.
//! * A failed fetch or an unparsable body is an error and changes no state;
//!   the next good scrape then covers the whole longer interval.
//! * Series that disappear are forgotten; one that reappears is a new
//!   baseline.
//!
//! # vLLM (`model_name` label)
//!
//! * `vllm:request_queue_time_seconds` (histogram) → `QueueAge`. Each bucket's
//!   count for the interval becomes one observation at the bucket's **upper
//!   bound** (`le`), in ms. That is conservative: every job in the bucket
//!   waited at most that long, so quantiles taken from these observations are
//!   never below the true ones, and at most one bucket width above them. The
//!   `+Inf` bucket is placed at the last finite bound (vLLM's is 7680 s, or
//!   60 s on the v0.4 series).
//! * Service time, the same way, from `vllm:request_inference_time_seconds`
//!   (time in the RUNNING phase: prefill and decode) when the exporter has it
//!   for the model, else from `vllm:e2e_request_latency_seconds`. End-to-end
//!   latency *includes* queue time, so on old vLLM versions (before the
//!   inference-time histogram) slack double-counts the queue: conservative.
//! * `vllm:num_requests_waiting` (gauge) → `QueueDepth`, summed over engines.
//! * `vllm:kv_cache_usage_perc` (gauge, a fraction 0..=1 despite the name;
//!   `vllm:gpu_cache_usage_perc` on versions before 0.9) → `KvCacheUsage`, the
//!   highest over engines: one full engine is enough to stall its requests.
//!
//! # Triton (`model` and `version` labels)
//!
//! `nv_inference_queue_duration_us` and `nv_inference_compute_infer_duration_us`
//! are cumulative microsecond sums, `nv_inference_request_success` the count of
//! requests they cover. Per model version and interval, the mean queue time is
//! Δqueue_us / Δsuccess and the mean compute time Δcompute_us / Δsuccess,
//! emitted as one `QueueAge` and one `Service` observation with
//! `count = Δsuccess`. (`nv_inference_exec_count` is not the divisor: Triton
//! adds a batch's compute time once per request in it, so per-request time is
//! the sum over requests. Cached responses count in `success` but add no
//! compute time, which lowers the mean a little when the response cache is on.)
//! `nv_inference_pending_request_count` (gauge) → `QueueDepth`, summed.
//!
//! Observations for a class come in this order: `QueueAge`s (ascending for
//! vLLM, per series for Triton), `Service`s, then `QueueDepth`, then
//! `KvCacheUsage`. Classes come sorted by name; a class with nothing to report
//! is left out.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use prom_text_format_parser::{Metric, ScrapeParseError, Type, ValueType};
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use super::{ClassObservations, Observation};

/// Which inference server's exporter a target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exporter {
    Vllm,
    Triton,
}

impl Exporter {
    /// The label whose value names the model.
    pub fn model_label(self) -> &'static str {
        match self {
            Exporter::Vllm => "model_name",
            Exporter::Triton => "model",
        }
    }

    /// The metric families shedder reads from this exporter.
    fn families(self) -> &'static [&'static str] {
        match self {
            Exporter::Vllm => {
                &[vllm::QUEUE, vllm::INFERENCE, vllm::E2E, vllm::WAITING, vllm::KV_CACHE, vllm::GPU_CACHE]
            }
            Exporter::Triton => &[triton::SUCCESS, triton::QUEUE_US, triton::COMPUTE_US, triton::PENDING],
        }
    }
}

mod vllm {
    pub const QUEUE: &str = "vllm:request_queue_time_seconds";
    pub const INFERENCE: &str = "vllm:request_inference_time_seconds";
    pub const E2E: &str = "vllm:e2e_request_latency_seconds";
    pub const WAITING: &str = "vllm:num_requests_waiting";
    pub const KV_CACHE: &str = "vllm:kv_cache_usage_perc";
    /// The name of `KV_CACHE` before vLLM 0.9.
    pub const GPU_CACHE: &str = "vllm:gpu_cache_usage_perc";
}

mod triton {
    pub const SUCCESS: &str = "nv_inference_request_success";
    pub const QUEUE_US: &str = "nv_inference_queue_duration_us";
    pub const COMPUTE_US: &str = "nv_inference_compute_infer_duration_us";
    pub const PENDING: &str = "nv_inference_pending_request_count";
}

/// One endpoint to scrape: a `[[scrape]]` table in the config.
///
/// ```toml
/// [[scrape]]
/// url = "http://127.0.0.1:8000/metrics"
/// kind = "vllm"
/// models = { "meta-llama/Llama-3.1-8B-Instruct" = "interactive" }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeTarget {
    /// The metrics endpoint, `http://host[:port]/path`.
    pub url: String,
    /// Which exporter serves it.
    pub kind: Exporter,
    /// Model label value → class name. Models not listed are ignored.
    pub models: BTreeMap<String, String>,
}

impl ScrapeTarget {
    /// Checks what can be checked without the network: the URL's form and a
    /// non-empty model map without empty names. (Whether the classes exist is
    /// the config's business.)
    pub fn validate(&self) -> anyhow::Result<()> {
        let rest = self.url.strip_prefix("http://").with_context(|| {
            format!("url {:?}: must start with http:// (shedder scrapes plain HTTP, no TLS)", self.url)
        })?;
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        ensure!(!host.is_empty(), "url {:?}: has no host", self.url);
        ensure!(!rest.contains(char::is_whitespace), "url {:?}: contains whitespace", self.url);
        ensure!(!self.models.is_empty(), "models: empty; map at least one model label value to a class");
        for (model, class) in &self.models {
            ensure!(!model.is_empty(), "models: an empty model name");
            ensure!(!class.trim().is_empty(), "models.{model:?}: empty class name");
        }
        Ok(())
    }
}

/// Fetches a target over HTTP and turns each scrape into the interval's
/// observations. Blocking: run [`Scraper::scrape`] on a blocking thread.
pub struct Scraper {
    state: TargetState,
    agent: ureq::Agent,
}

/// Largest body read from an exporter. vLLM's is some 100 KiB.
const MAX_BODY_BYTES: u64 = 32 << 20;

impl Scraper {
    /// A scraper whose every request (connect, send, read) ends within
    /// `timeout`. Fails on an invalid target.
    pub fn new(target: ScrapeTarget, timeout: Duration) -> anyhow::Result<Self> {
        target.validate()?;
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            // Inference servers sit next to the daemon; an HTTP_PROXY meant
            // for other traffic must not reroute the scrape.
            .proxy(None)
            .max_redirects(0)
            .user_agent(concat!("shedder/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Self { state: TargetState::new(target)?, agent })
    }

    pub fn target(&self) -> &ScrapeTarget {
        self.state.target()
    }

    /// One scrape: GET the endpoint, then [`TargetState::ingest`] the body.
    /// On error (connect, timeout, HTTP status, parse) nothing changes.
    pub fn scrape(&mut self) -> anyhow::Result<Vec<ClassObservations>> {
        let url = self.state.target().url.clone();
        let body = (|| -> Result<String, ureq::Error> {
            self.agent
                .get(&url)
                // The classic text format, not OpenMetrics: both vLLM's
                // prometheus_client and Triton's prometheus-cpp honour it.
                .header("Accept", "text/plain;version=0.0.4")
                .call()?
                .body_mut()
                .with_config()
                .limit(MAX_BODY_BYTES)
                .read_to_string()
        })()
        .with_context(|| format!("scraping {url}"))?;
        self.state.ingest(&body).with_context(|| format!("scraping {url}"))
    }
}

/// What one target's previous scrape left: the cumulative values to subtract.
#[derive(Debug)]
pub struct TargetState {
    target: ScrapeTarget,
    previous: HashMap<SeriesId, Cumulative>,
    /// Configured models the last scrape did not show (warned about once).
    missing: BTreeSet<String>,
    scrapes: u64,
}

/// A series' labels (less `le`): `(name, value)`, sorted, values unescaped.
type LabelSet = Vec<(String, String)>;

/// A series: a family and its label set.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct SeriesId {
    family: &'static str,
    labels: LabelSet,
}

#[derive(Clone, Debug, PartialEq)]
enum Cumulative {
    Counter(f64),
    /// `(le, cumulative count)`, ascending `le`, `+Inf` last.
    Histogram(Vec<(f64, f64)>),
}

/// One scrape's reading of a series.
#[derive(Clone, Debug, PartialEq)]
enum Reading {
    Scalar(f64),
    Histogram(Vec<(f64, f64)>),
}

/// The families shedder reads, from one exposition, for configured models:
/// family → model → series labels → reading.
type Exposition = HashMap<&'static str, BTreeMap<String, BTreeMap<LabelSet, Reading>>>;

/// How a cumulative value moved since the previous scrape.
enum Delta<T> {
    /// First sight of the series: nothing to compare with.
    Baseline,
    Normal(T),
    /// Went backwards: the exporter restarted, `T` is everything since.
    Reset(T),
}

impl<T> Delta<T> {
    fn value(self) -> Option<T> {
        match self {
            Delta::Baseline => None,
            Delta::Normal(value) | Delta::Reset(value) => Some(value),
        }
    }
}

/// Per class, what one scrape contributes, before it becomes observations.
#[derive(Default)]
struct ClassInterval {
    queue: Vec<(f64, u64)>,
    service: Vec<(f64, u64)>,
    depth: Option<f64>,
    kv_cache: Option<f64>,
}

impl TargetState {
    /// Fails on an invalid target (see [`ScrapeTarget::validate`]).
    pub fn new(target: ScrapeTarget) -> anyhow::Result<Self> {
        target.validate()?;
        Ok(Self { target, previous: HashMap::new(), missing: BTreeSet::new(), scrapes: 0 })
    }

    pub fn target(&self) -> &ScrapeTarget {
        &self.target
    }

    /// Scrapes ingested so far.
    pub fn scrapes(&self) -> u64 {
        self.scrapes
    }

    /// Reduces one exposition (the body of `/metrics`) to the observations
    /// for the interval since the previous call. An error (unparsable text, a
    /// family of the wrong type) leaves the state as it was.
    pub fn ingest(&mut self, text: &str) -> anyhow::Result<Vec<ClassObservations>> {
        let exposition = parse(text, self.target.kind, &self.target.models)?;
        let mut deltas = Deltas { previous: &self.previous, current: HashMap::new(), reset: false };
        let mut classes: BTreeMap<String, ClassInterval> = BTreeMap::new();
        for (model, class) in &self.target.models {
            let interval = classes.entry(class.clone()).or_default();
            let series = |family: &str| exposition.get(family).and_then(|models| models.get(model));
            match self.target.kind {
                Exporter::Vllm => vllm_interval(series, &mut deltas, interval, &self.target.url),
                Exporter::Triton => triton_interval(series, &mut deltas, interval),
            }
        }
        let Deltas { current, reset, .. } = deltas;

        self.note_missing_models(&exposition);
        if reset {
            info!(url = %self.target.url,
                "counters went backwards since the last scrape (exporter restarted?); \
                 this interval counts everything since the restart");
        }
        self.previous = current;
        self.scrapes += 1;

        let vllm = self.target.kind == Exporter::Vllm;
        Ok(classes
            .into_iter()
            .map(|(class, interval)| {
                let (queue, service) = if vllm {
                    (merge_buckets(interval.queue), merge_buckets(interval.service))
                } else {
                    (interval.queue, interval.service)
                };
                let mut observations: Vec<Observation> = queue
                    .into_iter()
                    .map(|(ms, count)| Observation::QueueAge { ms, count })
                    .chain(service.into_iter().map(|(ms, count)| Observation::Service { ms, count }))
                    .collect();
                observations.extend(interval.depth.map(|depth| Observation::QueueDepth(depth.round() as u64)));
                observations.extend(interval.kv_cache.map(Observation::KvCacheUsage));
                ClassObservations { class, observations }
            })
            .filter(|class| !class.observations.is_empty())
            .collect())
    }

    /// Warns once when a configured model is in none of the families read
    /// (a typo in the config, or the model was unloaded), and notes its return.
    fn note_missing_models(&mut self, exposition: &Exposition) {
        for model in self.target.models.keys() {
            let seen = exposition.values().any(|models| models.contains_key(model));
            if !seen && self.missing.insert(model.clone()) {
                warn!(url = %self.target.url, model, label = self.target.kind.model_label(),
                    "configured model not found in the scrape; its class gets no scraped telemetry");
            } else if seen && self.missing.remove(model) {
                info!(url = %self.target.url, model, "configured model is back in the scrape");
            }
        }
    }
}

/// This scrape's series against the previous scrape's: hands out each
/// series' delta and collects the values to keep for the next scrape.
struct Deltas<'a> {
    previous: &'a HashMap<SeriesId, Cumulative>,
    current: HashMap<SeriesId, Cumulative>,
    /// Some series went backwards.
    reset: bool,
}

impl Deltas<'_> {
    /// The series' change since the previous scrape; `None` on its first.
    fn of(&mut self, family: &'static str, labels: &LabelSet, reading: &Reading) -> Option<Reading> {
        let id = SeriesId { family, labels: labels.clone() };
        let (delta, cumulative) = interval_delta(self.previous.get(&id), reading);
        self.reset |= matches!(delta, Delta::Reset(_));
        self.current.insert(id, cumulative);
        delta.value()
    }
}

/// One model's series of one family, by label set.
type ModelSeries = BTreeMap<LabelSet, Reading>;

/// What one vLLM model contributes to its class for the interval.
fn vllm_interval<'e>(
    series: impl Fn(&str) -> Option<&'e ModelSeries>,
    deltas: &mut Deltas,
    interval: &mut ClassInterval,
    url: &str,
) {
    let service_family = if series(vllm::INFERENCE).is_some() { vllm::INFERENCE } else { vllm::E2E };
    for family in [vllm::QUEUE, vllm::INFERENCE, vllm::E2E] {
        for (labels, reading) in series(family).into_iter().flatten() {
            // Every family's state is kept, so a switch of service source
            // (an upgrade) has a baseline ready.
            let Some(Reading::Histogram(buckets)) = deltas.of(family, labels, reading) else { continue };
            let observations = bucket_observations(&buckets);
            if family == vllm::QUEUE {
                interval.queue.extend(observations);
            } else if family == service_family {
                interval.service.extend(observations);
            }
        }
    }
    for reading in series(vllm::WAITING).into_iter().flat_map(BTreeMap::values) {
        if let Reading::Scalar(waiting) = reading {
            interval.depth = Some(interval.depth.unwrap_or(0.0) + waiting.max(0.0));
        }
    }
    let kv_family = if series(vllm::KV_CACHE).is_some() { vllm::KV_CACHE } else { vllm::GPU_CACHE };
    for (labels, reading) in series(kv_family).into_iter().flatten() {
        let Reading::Scalar(usage) = *reading else { continue };
        // vLLM reports a fraction; tolerate float noise at 1.
        if !(0.0..=1.0 + 1e-9).contains(&usage) {
            warn!(url, family = kv_family, ?labels, usage, "KV-cache usage outside 0..=1, ignored");
            continue;
        }
        interval.kv_cache = Some(interval.kv_cache.unwrap_or(0.0).max(usage.min(1.0)));
    }
}

/// What one Triton model contributes to its class for the interval: per
/// model version, the mean queue and compute time of its requests.
fn triton_interval<'e>(
    series: impl Fn(&str) -> Option<&'e ModelSeries>,
    deltas: &mut Deltas,
    interval: &mut ClassInterval,
) {
    for (labels, reading) in series(triton::SUCCESS).into_iter().flatten() {
        let mut counter = |family: &'static str| match deltas.of(family, labels, series(family)?.get(labels)?)? {
            Reading::Scalar(value) => Some(value),
            Reading::Histogram(_) => None,
        };
        let queue_us = counter(triton::QUEUE_US);
        let compute_us = counter(triton::COMPUTE_US);
        let Some(Reading::Scalar(requests)) = deltas.of(triton::SUCCESS, labels, reading) else { continue };
        let count = requests.round() as u64;
        if count == 0 {
            continue;
        }
        if let Some(queue_us) = queue_us {
            interval.queue.push((queue_us / requests / 1000.0, count));
        }
        if let Some(compute_us) = compute_us {
            interval.service.push((compute_us / requests / 1000.0, count));
        }
    }
    for reading in series(triton::PENDING).into_iter().flat_map(BTreeMap::values) {
        if let Reading::Scalar(pending) = reading {
            interval.depth = Some(interval.depth.unwrap_or(0.0) + pending.max(0.0));
        }
    }
}

/// The delta of one series since `previous`, and its value to keep.
fn interval_delta(previous: Option<&Cumulative>, reading: &Reading) -> (Delta<Reading>, Cumulative) {
    match reading {
        Reading::Scalar(value) => {
            let delta = match previous {
                Some(Cumulative::Counter(before)) if value >= before => Delta::Normal(value - before),
                Some(Cumulative::Counter(_)) => Delta::Reset(*value),
                _ => Delta::Baseline,
            };
            (map_delta(delta, Reading::Scalar), Cumulative::Counter(*value))
        }
        Reading::Histogram(buckets) => {
            let delta = match previous {
                Some(Cumulative::Histogram(before)) => {
                    let same_layout = before.len() == buckets.len()
                        && before.iter().zip(buckets).all(|((le_before, _), (le, _))| le_before == le);
                    let grew = same_layout && before.iter().zip(buckets).all(|((_, was), (_, is))| is >= was);
                    if grew {
                        let deltas = buckets.iter().zip(before).map(|((le, is), (_, was))| (*le, is - was)).collect();
                        Delta::Normal(deltas)
                    } else {
                        Delta::Reset(buckets.clone())
                    }
                }
                _ => Delta::Baseline,
            };
            (map_delta(delta, Reading::Histogram), Cumulative::Histogram(buckets.clone()))
        }
    }
}

fn map_delta<T, U>(delta: Delta<T>, f: impl FnOnce(T) -> U) -> Delta<U> {
    match delta {
        Delta::Baseline => Delta::Baseline,
        Delta::Normal(value) => Delta::Normal(f(value)),
        Delta::Reset(value) => Delta::Reset(f(value)),
    }
}

/// Cumulative bucket counts for an interval → one `(ms, count)` per bucket
/// that gained jobs, at the bucket's upper bound (`+Inf` at the last finite
/// bound; dropped when there is none).
fn bucket_observations(cumulative: &[(f64, f64)]) -> Vec<(f64, u64)> {
    let last_finite = cumulative.iter().map(|(le, _)| *le).rfind(|le| le.is_finite());
    let mut below = 0.0;
    let mut observations = Vec::new();
    for &(le, up_to) in cumulative {
        // Cumulative counts never shrink with `le`; clamp exporter races.
        let in_bucket = (up_to - below).max(0.0);
        below = below.max(up_to);
        let count = in_bucket.round() as u64;
        let bound = if le.is_finite() { Some(le) } else { last_finite };
        if let (true, Some(seconds)) = (count > 0, bound) {
            observations.push((seconds_to_ms(seconds), count));
        }
    }
    observations
}

/// Seconds to milliseconds, to the microsecond, so `0.3` s is `300.0` ms.
fn seconds_to_ms(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e3
}

/// Sums counts at equal values (series of one class share bucket bounds) and
/// sorts ascending.
fn merge_buckets(mut observations: Vec<(f64, u64)>) -> Vec<(f64, u64)> {
    observations.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, u64)> = Vec::with_capacity(observations.len());
    for (ms, count) in observations {
        match merged.last_mut() {
            Some((last, total)) if *last == ms => *total += count,
            _ => merged.push((ms, count)),
        }
    }
    merged
}

/// Parses an exposition and keeps the families `kind` reads, for the models
/// in `models`.
fn parse(text: &str, kind: Exporter, models: &BTreeMap<String, String>) -> anyhow::Result<Exposition> {
    let (metrics, error) = prom_text_format_parser::parse_scrape(text);
    match error {
        Some(ScrapeParseError::Parse(message)) => bail!("not the Prometheus text format: {message}"),
        // Families that are only HELP/TYPE (a labelled metric nobody has
        // touched yet) and similar grouping remarks: the rest is fine.
        Some(ScrapeParseError::Collect(remarks)) => debug!(?remarks, "exposition remarks"),
        None => {}
    }
    let model_label = kind.model_label();
    let mut exposition = Exposition::new();
    for metric in &metrics {
        let Some(&family) = kind.families().iter().find(|family| **family == metric.name) else {
            continue;
        };
        let expect_histogram = matches!(family, vllm::QUEUE | vllm::INFERENCE | vllm::E2E);
        let expected = if expect_histogram { "histogram" } else { "counter or gauge" };
        match (expect_histogram, metric.kind) {
            (true, Type::Histogram) | (false, Type::Counter | Type::Gauge | Type::Untyped) => {}
            (_, actual) => bail!("{family}: expected a {expected}, the exporter says {actual}"),
        }
        for (labels, reading) in series_of(metric, expect_histogram)? {
            let Some(model) = labels.iter().find(|(name, _)| name == model_label).map(|(_, value)| value) else {
                continue;
            };
            if models.contains_key(model) {
                exposition.entry(family).or_default().entry(model.clone()).or_default().insert(labels, reading);
            }
        }
    }
    Ok(exposition)
}

/// A family's samples grouped into series. Histogram samples are grouped by
/// their labels less `le`; `_sum` and `_count` are not needed (the `+Inf`
/// bucket is the count). Series with a value that is not a finite number are
/// left out.
fn series_of(metric: &Metric, histogram: bool) -> anyhow::Result<Vec<(LabelSet, Reading)>> {
    let mut series: BTreeMap<LabelSet, Reading> = BTreeMap::new();
    let mut unusable = BTreeSet::new();
    for sample in &metric.samples {
        if sample.value.value_type != ValueType::Sample {
            continue;
        }
        let raw = sample.value.value.as_str();
        let value: f64 = raw.parse().with_context(|| format!("{}: value {raw:?} is not a number", metric.name))?;
        let mut le = None;
        let mut labels = Vec::with_capacity(sample.labels.len());
        for label in sample.labels.iter() {
            if histogram && label.key == "le" {
                let bound = label.value.parse::<f64>();
                le = Some(bound.with_context(|| format!("{}: bucket bound le={:?}", metric.name, label.value))?);
            } else {
                labels.push((label.key.clone(), unescape(&label.value)));
            }
        }
        labels.sort();
        if !value.is_finite() {
            unusable.insert(labels);
            continue;
        }
        match (histogram, le) {
            (false, _) => {
                series.insert(labels, Reading::Scalar(value));
            }
            (true, Some(le)) => {
                if let Reading::Histogram(buckets) =
                    series.entry(labels).or_insert_with(|| Reading::Histogram(Vec::new()))
                {
                    buckets.push((le, value));
                }
            }
            (true, None) => bail!("{}: a bucket sample without an le label", metric.name),
        }
    }
    for labels in &unusable {
        series.remove(labels);
    }
    for reading in series.values_mut() {
        if let Reading::Histogram(buckets) = reading {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
    }
    Ok(series.into_iter().collect())
}

/// Undoes the text format's label-value escapes (`\\`, `\"`, `\n`), which
/// the parser keeps as written.
fn unescape(value: &str) -> String {
    if !value.contains('\\') {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('n')) => {
                out.push('\n');
                chars.next();
            }
            ('\\', Some(escaped @ ('\\' | '"'))) => {
                out.push(escaped);
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(kind: Exporter, models: &[(&str, &str)]) -> ScrapeTarget {
        ScrapeTarget {
            url: "http://127.0.0.1:8000/metrics".into(),
            kind,
            models: models.iter().map(|(m, c)| (m.to_string(), c.to_string())).collect(),
        }
    }

    fn state(kind: Exporter, models: &[(&str, &str)]) -> TargetState {
        TargetState::new(target(kind, models)).unwrap()
    }

    #[test]
    fn scrapers_can_move_to_a_blocking_thread() {
        fn send<T: Send + 'static>() {}
        send::<Scraper>();
        send::<TargetState>();
    }

    #[test]
    fn targets_deserialize_from_toml_and_refuse_unknown_fields() {
        #[derive(Deserialize)]
        struct Config {
            scrape: Vec<ScrapeTarget>,
        }
        let config: Config = toml::from_str(
            r#"
            [[scrape]]
            url = "http://127.0.0.1:8000/metrics"
            kind = "vllm"
            models = { "meta-llama/Llama-3.1-8B-Instruct" = "interactive" }

            [[scrape]]
            url = "http://10.0.0.7:8002/metrics"
            kind = "triton"
            [scrape.models]
            resnet50_trt = "interactive"
            bert_large = "batch"
            "#,
        )
        .unwrap();
        assert_eq!(config.scrape[0], target(Exporter::Vllm, &[("meta-llama/Llama-3.1-8B-Instruct", "interactive")]));
        assert_eq!(config.scrape[1].kind, Exporter::Triton);
        assert_eq!(config.scrape[1].models["bert_large"], "batch");
        for target in &config.scrape {
            target.validate().unwrap();
        }

        let unknown = toml::from_str::<ScrapeTarget>("url = \"http://a/\"\nkind = \"vllm\"\nmodels = {}\ninterval = 5");
        assert!(unknown.unwrap_err().to_string().contains("unknown field `interval`"));
        let bad_kind = toml::from_str::<ScrapeTarget>("url = \"http://a/\"\nkind = \"tgi\"\nmodels = {}");
        assert!(bad_kind.unwrap_err().to_string().contains("unknown variant `tgi`"));
    }

    #[test]
    fn validate_names_what_is_wrong() {
        let cases = [
            ("https://gpu-host/metrics", &[("m", "c")][..], "must start with http://"),
            ("gpu-host:8000/metrics", &[("m", "c")][..], "must start with http://"),
            ("http:///metrics", &[("m", "c")][..], "has no host"),
            ("http://a b/metrics", &[("m", "c")][..], "contains whitespace"),
            ("http://gpu-host/metrics", &[][..], "models: empty"),
            ("http://gpu-host/metrics", &[("m", " ")][..], "models.\"m\": empty class name"),
        ];
        for (url, models, expected) in cases {
            let target = ScrapeTarget { url: url.into(), ..target(Exporter::Vllm, models) };
            let error = target.validate().unwrap_err().to_string();
            assert!(error.contains(expected), "{url}: {error:?} should contain {expected:?}");
            assert!(TargetState::new(target.clone()).is_err());
            assert!(Scraper::new(target, Duration::from_secs(1)).is_err());
        }
    }

    #[test]
    fn counters_take_deltas_and_survive_resets() {
        let reading = |v| Reading::Scalar(v);
        let (delta, kept) = interval_delta(None, &reading(100.0));
        assert!(matches!(delta, Delta::Baseline));
        let (delta, kept) = interval_delta(Some(&kept), &reading(130.0));
        assert!(matches!(delta, Delta::Normal(Reading::Scalar(d)) if d == 30.0));
        let (delta, kept) = interval_delta(Some(&kept), &reading(130.0));
        assert!(matches!(delta, Delta::Normal(Reading::Scalar(d)) if d == 0.0));
        let (delta, kept) = interval_delta(Some(&kept), &reading(7.0));
        assert!(matches!(delta, Delta::Reset(Reading::Scalar(d)) if d == 7.0), "lower value: a restart");
        let (delta, _) = interval_delta(Some(&kept), &reading(9.0));
        assert!(matches!(delta, Delta::Normal(Reading::Scalar(d)) if d == 2.0));
    }

    #[test]
    fn histograms_reset_when_any_bucket_or_the_layout_goes_back() {
        let h = |counts: &[(f64, f64)]| Reading::Histogram(counts.to_vec());
        let inf = f64::INFINITY;
        let before = Cumulative::Histogram(vec![(0.5, 10.0), (1.0, 12.0), (inf, 12.0)]);
        let (delta, _) = interval_delta(Some(&before), &h(&[(0.5, 11.0), (1.0, 15.0), (inf, 16.0)]));
        assert!(matches!(delta, Delta::Normal(Reading::Histogram(d)) if d == [(0.5, 1.0), (1.0, 3.0), (inf, 4.0)]));
        // One bucket lower, even with the total higher: a reset.
        let (delta, _) = interval_delta(Some(&before), &h(&[(0.5, 2.0), (1.0, 20.0), (inf, 20.0)]));
        assert!(matches!(delta, Delta::Reset(Reading::Histogram(d)) if d[0] == (0.5, 2.0)));
        // New bucket bounds: the exporter was reconfigured, so restarted.
        let (delta, _) = interval_delta(Some(&before), &h(&[(0.25, 30.0), (inf, 40.0)]));
        assert!(matches!(delta, Delta::Reset(_)));
    }

    #[test]
    fn buckets_become_observations_at_their_upper_bounds() {
        let inf = f64::INFINITY;
        // Per-bucket: 3 ≤ 0.3 s, none in (0.3, 0.5], 2 in (0.5, 2.5], 1 past 2.5 s.
        let cumulative = [(0.3, 3.0), (0.5, 3.0), (2.5, 5.0), (inf, 6.0)];
        assert_eq!(bucket_observations(&cumulative), vec![(300.0, 3), (2500.0, 2), (2500.0, 1)]);
        assert_eq!(merge_buckets(bucket_observations(&cumulative)), vec![(300.0, 3), (2500.0, 3)]);
        // Only a +Inf bucket: nowhere to place it.
        assert_eq!(bucket_observations(&[(inf, 4.0)]), vec![]);
        // A racy exposition whose cumulative counts dip is clamped, not negative.
        assert_eq!(bucket_observations(&[(1.0, 5.0), (2.0, 4.0), (inf, 6.0)]), vec![(1000.0, 5), (2000.0, 1)]);
        assert_eq!(seconds_to_ms(0.3), 300.0);
        assert_eq!(seconds_to_ms(7680.0), 7_680_000.0);
    }

    #[test]
    fn label_values_are_unescaped() {
        assert_eq!(unescape(r#"plain"#), "plain");
        assert_eq!(unescape(r#"a\"b\\c\nd"#), "a\"b\\c\nd");
        assert_eq!(unescape(r#"trailing\"#), "trailing\\");
        let text = "# TYPE vllm:num_requests_waiting gauge\n\
                    vllm:num_requests_waiting{engine=\"0\",model_name=\"org/\\\"quoted\\\" model\"} 5.0\n";
        let mut state = state(Exporter::Vllm, &[("org/\"quoted\" model", "interactive")]);
        assert_eq!(
            state.ingest(text).unwrap(),
            vec![ClassObservations { class: "interactive".into(), observations: vec![Observation::QueueDepth(5)] }]
        );
    }

    #[test]
    fn an_unparsable_body_is_an_error_and_changes_nothing() {
        let mut state = state(Exporter::Triton, &[("m", "interactive")]);
        let scrape = |success: u32, queue_us: u32| {
            format!(
                "# TYPE nv_inference_request_success counter\nnv_inference_request_success{{model=\"m\",version=\"1\"}} {success}\n\
                 # TYPE nv_inference_queue_duration_us counter\nnv_inference_queue_duration_us{{model=\"m\",version=\"1\"}} {queue_us}\n"
            )
        };
        assert_eq!(state.ingest(&scrape(10, 10_000)).unwrap(), vec![]);
        let error = state.ingest("<html>502 Bad Gateway</html>\n").unwrap_err();
        assert!(error.to_string().starts_with("not the Prometheus text format"), "{error:#}");
        let error = state.ingest("nv_inference_request_success{model=\"m\",version=\"1\"} twelve\n").unwrap_err();
        assert!(error.to_string().starts_with("not the Prometheus text format"), "{error:#}");
        assert_eq!(state.scrapes(), 1);
        // Still relative to the first scrape: 30 requests, 60 ms queued.
        assert_eq!(
            state.ingest(&scrape(40, 70_000)).unwrap(),
            vec![ClassObservations {
                class: "interactive".into(),
                observations: vec![Observation::QueueAge { ms: 2.0, count: 30 }],
            }]
        );
    }

    #[test]
    fn a_family_of_the_wrong_type_is_an_error() {
        let mut state = state(Exporter::Vllm, &[("m", "interactive")]);
        let text =
            "# TYPE vllm:request_queue_time_seconds gauge\nvllm:request_queue_time_seconds{model_name=\"m\"} 1.0\n";
        let error = state.ingest(text).unwrap_err().to_string();
        assert_eq!(error, "vllm:request_queue_time_seconds: expected a histogram, the exporter says gauge");
        assert_eq!(state.scrapes(), 0);
    }

    #[test]
    fn empty_families_non_finite_values_and_unmapped_models_are_skipped() {
        let mut state = state(Exporter::Vllm, &[("m", "interactive")]);
        let text = "\
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2.0
vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} NaN
vllm:num_requests_waiting{engine=\"0\",model_name=\"other\"} 40.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 1.0000000000000002
vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 37.5
";
        assert_eq!(
            state.ingest(text).unwrap(),
            vec![ClassObservations {
                class: "interactive".into(),
                observations: vec![Observation::QueueDepth(2), Observation::KvCacheUsage(1.0)],
            }]
        );
    }

    #[test]
    fn triton_intervals_without_requests_report_only_gauges() {
        let mut state = state(Exporter::Triton, &[("m", "batch")]);
        let scrape = "# TYPE nv_inference_request_success counter\n\
                      nv_inference_request_success{model=\"m\",version=\"1\"} 5\n\
                      # TYPE nv_inference_queue_duration_us counter\n\
                      nv_inference_queue_duration_us{model=\"m\",version=\"1\"} 500\n\
                      # TYPE nv_inference_pending_request_count gauge\n\
                      nv_inference_pending_request_count{model=\"m\",version=\"1\"} 0\n";
        let depth_only =
            vec![ClassObservations { class: "batch".into(), observations: vec![Observation::QueueDepth(0)] }];
        assert_eq!(state.ingest(scrape).unwrap(), depth_only);
        assert_eq!(state.ingest(scrape).unwrap(), depth_only, "no new requests: no queue-time observation");
    }
}
