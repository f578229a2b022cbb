//! Prometheus scraping of the inference servers: vLLM, SGLang and Triton
//! (with its vLLM and TensorRT-LLM backends) `/metrics`, mapped to classes by
//! model label.
//!
//! Each [`ScrapeTarget`] (one `[[scrape]]` table of the config) names an
//! endpoint, its exporter and which model serves which class. A [`Scraper`]
//! fetches it over HTTP (blocking, with a timeout: call it from
//! `spawn_blocking`); the exposition is parsed and reduced by a
//! [`TargetState`] to observations **for the interval since the previous
//! scrape**. Each exporter's families and their reading are documented in
//! its module ([`vllm`], [`sglang`], [`triton`]); the histogram method in
//! [`histogram`].
//!
//! # Intervals, baselines and resets
//!
//! Histograms and counters are cumulative, so each scrape is compared with
//! the previous one, per series (one label set: a vLLM engine, a Triton model
//! version), and the differences are summed per class:
//!
//! * The target's first scrape is the baseline: it yields no queue or
//!   service observations (gauges are instantaneous and are reported at once).
//! * A series that first appears in a later scrape started from zero since
//!   the previous one (prometheus_client creates a labelled counter on its
//!   first increment, as SGLang's aborted-requests counter): its value is
//!   the interval's.
//! * A value lower than before means the exporter restarted: the new value is
//!   everything since the restart, so it *is* the interval's delta. A
//!   histogram counts as reset when its count, its sum or any bucket went down.
//! * A failed fetch or an unparsable body is an error and changes no state;
//!   the next good scrape then covers the whole longer interval.
//! * Series that disappear are forgotten; one that reappears counts from
//!   zero, as a new one.
//!
//! # What a class gets
//!
//! In this order: `QueueAge`s and `Service`s (ascending, equal values
//! merged), `QueueDepth` (waiting, summed), `Running` (summed),
//! `KvCacheUsage` (the fullest), then, whenever the waiting gauge was read,
//! `PredictedQueueAge` (the live estimate of [`crate::telemetry::live_queue`],
//! once throughput or a finished-request histogram is known) and
//! `GaugesFrozen` (the verdict of [`crate::telemetry::freshness`]). Classes
//! come sorted by name; a class with nothing to report is left out.
//!
//! # What is missing
//!
//! Each kind lists the families it should expose. One that no configured
//! model has is logged once (with what its absence costs, e.g. Triton run
//! with `--metrics-config counter_latencies=false`), as is a target that
//! exposes none of them, and reported by [`missing_families`] for the
//! `shedder_scrape_missing{target,family}` metric.
//! A target that does not answer, or answers with what does not parse, is
//! said once in the log and again when it answers, and reported by
//! [`targets_up`] for the `shedder_scrape_up{target}` metric.

mod coverage;
mod delta;
mod exposition;
mod health;
mod histogram;
mod interval;
mod sglang;
mod triton;
mod vllm;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::{
    ClassObservations, Observation,
    freshness::{GaugeReading, GaugeWatch},
    live_queue::{self, LiveInputs, Throughput},
};
use crate::error_chain::ErrorChain;
use coverage::Need;
pub use coverage::missing_families;
use delta::{Deltas, SeriesId};
pub use exposition::ExpositionError;
use exposition::{Exposition, Family, Reading};
pub use health::targets_up;
use histogram::merge_buckets;
pub(crate) use histogram::weighted_quantile;
use interval::ClassInterval;

/// Which inference server's exporter a target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exporter {
    Vllm,
    Triton,
    Sglang,
}

impl Exporter {
    /// The label whose value names the model.
    pub fn model_label(self) -> &'static str {
        match self {
            Exporter::Vllm | Exporter::Sglang => "model_name",
            Exporter::Triton => "model",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Exporter::Vllm => "vllm",
            Exporter::Triton => "triton",
            Exporter::Sglang => "sglang",
        }
    }

    /// The metric families shedder reads from this exporter (Triton: its
    /// own, then its LLM backends').
    fn families(self) -> &'static [&'static [Family]] {
        match self {
            Exporter::Vllm => &[vllm::FAMILIES],
            Exporter::Triton => &[triton::FAMILIES, triton::TRT_LLM_FAMILIES, vllm::FAMILIES],
            Exporter::Sglang => &[sglang::FAMILIES],
        }
    }

    /// The families it should expose; missing ones are reported.
    fn needs(self) -> &'static [Need] {
        match self {
            Exporter::Vllm => vllm::NEEDS,
            Exporter::Triton => triton::NEEDS,
            Exporter::Sglang => sglang::NEEDS,
        }
    }
}

/// One endpoint to scrape: a `[[scrape]]` table in the config.
///
/// ```toml
/// [[scrape]]
/// url = "http://127.0.0.1:8000/metrics"
/// kind = "vllm"            # or "sglang", "triton"
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
    /// the config's business.) Errors name the field.
    pub fn validate(&self) -> Result<(), ScrapeError> {
        let url = || self.url.clone();
        let rest = self.url.strip_prefix("http://").ok_or_else(|| ScrapeError::NotHttp(url()))?;
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if host.is_empty() {
            return Err(ScrapeError::NoHost(url()));
        }
        if rest.contains(char::is_whitespace) {
            return Err(ScrapeError::Whitespace(url()));
        }
        if self.models.is_empty() {
            return Err(ScrapeError::NoModels(self.kind.model_label()));
        }
        for (model, class) in &self.models {
            if model.is_empty() {
                return Err(ScrapeError::EmptyModel);
            }
            if class.trim().is_empty() {
                return Err(ScrapeError::EmptyClass(model.clone()));
            }
        }
        Ok(())
    }
}

/// Why a target is refused or a scrape failed. A failed scrape changes nothing.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("url: {0:?} must start with http:// (shedder scrapes plain HTTP, no TLS)")]
    NotHttp(String),
    #[error("url: {0:?} has no host")]
    NoHost(String),
    #[error("url: {0:?} contains whitespace")]
    Whitespace(String),
    /// Holds the exporter's model label.
    #[error("models: empty; map at least one {0} label value to a class")]
    NoModels(&'static str),
    #[error("models: an empty model name")]
    EmptyModel,
    #[error("models.{0:?}: empty class name")]
    EmptyClass(String),
    /// Connecting, the HTTP status, the timeout or reading the body.
    #[error("scraping {url}: {}", ErrorChain(error.as_ref()))]
    Fetch { url: String, error: Box<ureq::Error> },
    /// The body is not an exposition shedder can use.
    #[error("scraping {url}: {error}")]
    Exposition { url: String, error: ExpositionError },
}

/// Fetches a target over HTTP and turns each scrape into the interval's
/// observations. Blocking: run [`Scraper::scrape`] on a blocking thread.
pub struct Scraper {
    state: TargetState,
    agent: ureq::Agent,
    started: Instant,
}

/// Largest body read from an exporter. vLLM's is some 100 KiB.
const MAX_BODY_BYTES: u64 = 32 << 20;

/// Forgets what scrapes said of every target but `targets` (after a reload
/// removed the others), so that their metrics go too.
pub fn forget_all_but(targets: &[ScrapeTarget]) {
    let kept: Vec<&str> = targets.iter().map(|t| t.url.as_str()).collect();
    coverage::retain(&kept);
    health::retain(&kept);
}

impl Scraper {
    /// A scraper whose every request (connect, send, read) ends within
    /// `timeout`. Fails on an invalid target.
    pub fn new(target: ScrapeTarget, timeout: Duration) -> Result<Self, ScrapeError> {
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
        Ok(Self { state: TargetState::new(target)?, agent, started: Instant::now() })
    }

    /// One scrape: GET the endpoint, then [`TargetState::ingest`] the body.
    /// On error (connect, timeout, HTTP status, parse) nothing changes but
    /// the target's health; a failure is logged when it begins, and the
    /// recovery when it ends.
    pub fn scrape(&mut self) -> Result<Vec<ClassObservations>, ScrapeError> {
        let result = self.fetch_and_ingest();
        let url = &self.state.target().url;
        match (&result, health::record(url, result.is_ok())) {
            (Err(error), None | Some(true)) => warn!("scrape failed: {error}; said again when it answers"),
            (Ok(_), Some(false)) => info!(url, "scrape answers again"),
            _ => {}
        }
        result
    }

    fn fetch_and_ingest(&mut self) -> Result<Vec<ClassObservations>, ScrapeError> {
        let url = self.state.target().url.clone();
        let body = (|| -> Result<String, ureq::Error> {
            self.agent
                .get(&url)
                // The classic text format, not OpenMetrics: prometheus_client
                // (vLLM, SGLang) and Triton's prometheus-cpp all honour it.
                .header("Accept", "text/plain;version=0.0.4")
                .call()?
                .body_mut()
                .with_config()
                .limit(MAX_BODY_BYTES)
                .read_to_string()
        })()
        .map_err(|error| ScrapeError::Fetch { url: url.clone(), error: Box::new(error) })?;
        let observations = self
            .state
            .ingest(&body, self.started.elapsed())
            .map_err(|error| ScrapeError::Exposition { url: url.clone(), error })?;
        coverage::publish(&url, &self.state.missing_families);
        Ok(observations)
    }
}

/// What one target's previous scrapes left: the cumulative values to
/// subtract, and each class's live-queue state.
#[derive(Debug)]
pub struct TargetState {
    target: ScrapeTarget,
    previous: HashMap<SeriesId, Reading>,
    /// Configured models the last scrape did not show (warned about once).
    missing_models: BTreeSet<String>,
    /// Families of the kind's needs the last scrape did not show.
    missing_families: BTreeSet<&'static str>,
    /// When the previous good scrape was ingested.
    previous_at: Option<Duration>,
    live: BTreeMap<String, ClassLive>,
    scrapes: u64,
}

/// A class's live-queue state across scrapes.
#[derive(Debug, Default)]
struct ClassLive {
    throughput: Throughput,
    gauges: GaugeWatch,
}

impl TargetState {
    /// Fails on an invalid target (see [`ScrapeTarget::validate`]).
    pub fn new(target: ScrapeTarget) -> Result<Self, ScrapeError> {
        target.validate()?;
        Ok(Self {
            target,
            previous: HashMap::new(),
            missing_models: BTreeSet::new(),
            missing_families: BTreeSet::new(),
            previous_at: None,
            live: BTreeMap::new(),
            scrapes: 0,
        })
    }

    pub fn target(&self) -> &ScrapeTarget {
        &self.target
    }

    /// Scrapes ingested so far.
    pub fn scrapes(&self) -> u64 {
        self.scrapes
    }

    /// The families the kind should expose that the last scrape lacked.
    pub fn missing_families(&self) -> Vec<&'static str> {
        self.missing_families.iter().copied().collect()
    }

    /// Reduces one exposition (the body of `/metrics`), scraped at `at` (on
    /// any monotonic clock), to the observations for the interval since the
    /// previous call. An error (unparsable text, a family of the wrong type)
    /// leaves the state as it was.
    pub fn ingest(&mut self, text: &str, at: Duration) -> Result<Vec<ClassObservations>, ExpositionError> {
        let kind = self.target.kind;
        let exposition = exposition::parse(text, kind.families(), kind.model_label(), &self.target.models)?;
        let mut deltas = Deltas::new(&self.previous, self.scrapes == 0);
        let mut classes: BTreeMap<String, ClassInterval> = BTreeMap::new();
        let url = self.target.url.as_str();
        for (model, class) in &self.target.models {
            let interval = classes.entry(class.clone()).or_default();
            let series = |family: &str| exposition.get(family).and_then(|models| models.get(model));
            match kind {
                Exporter::Vllm => {
                    vllm::reduce(series, &mut deltas, interval, url);
                }
                Exporter::Sglang => sglang::reduce(series, &mut deltas, interval, url),
                Exporter::Triton => triton::reduce(series, &mut deltas, interval, url),
            }
        }
        let Deltas { current, reset, .. } = deltas;

        self.note_missing(&exposition);
        if reset {
            info!(url = %self.target.url,
                "counters went backwards since the last scrape (exporter restarted?); \
                 this interval counts everything since the restart");
        }
        let seconds = self.previous_at.map(|before| at.saturating_sub(before).as_secs_f64());
        self.previous = current;
        self.previous_at = Some(at);
        self.scrapes += 1;

        Ok(classes
            .into_iter()
            .map(|(class, interval)| {
                let live = self.live.entry(class.clone()).or_default();
                ClassObservations { observations: observations(interval, live, seconds), class }
            })
            .filter(|class| !class.observations.is_empty())
            .collect())
    }

    /// Warns once when a configured model is in none of the families read
    /// (a typo in the config, or the model was unloaded), and notes its
    /// return; and logs a change of the families the target lacks.
    fn note_missing(&mut self, exposition: &Exposition) {
        let url = self.target.url.as_str();
        for model in self.target.models.keys() {
            let seen = exposition.values().any(|models| models.contains_key(model));
            if !seen && self.missing_models.insert(model.clone()) {
                warn!(
                    url,
                    model,
                    label = self.target.kind.model_label(),
                    "configured model not found in the scrape; its class gets no scraped telemetry"
                );
            } else if seen && self.missing_models.remove(model) {
                info!(url, model, "configured model is back in the scrape");
            }
        }
        let needs = self.target.kind.needs();
        let missing = coverage::missing(needs, exposition);
        coverage::log_change(url, self.target.kind.as_str(), needs, &self.missing_families, &missing);
        self.missing_families = missing;
    }
}

/// A class's interval as observations (see the module's documentation for
/// the order), updating its live state. `seconds`: since the previous
/// scrape (`None` on the first).
fn observations(interval: ClassInterval, live: &mut ClassLive, seconds: Option<f64>) -> Vec<Observation> {
    let queue = merge_buckets(interval.queue);
    let service = merge_buckets(interval.service);
    if let (Some(seconds), Some(finished)) = (seconds, interval.finished) {
        live.throughput.record(seconds, finished);
    }
    let mut observations: Vec<Observation> = queue
        .iter()
        .map(|&(ms, count)| Observation::QueueAge { ms, count })
        .chain(service.into_iter().map(|(ms, count)| Observation::Service { ms, count }))
        .collect();
    observations.extend(interval.waiting.map(|waiting| Observation::QueueDepth(waiting.round() as u64)));
    observations.extend(interval.running.map(|running| Observation::Running(running.round() as u64)));
    observations.extend(interval.kv_cache.map(Observation::KvCacheUsage));
    if let Some(waiting) = interval.waiting {
        let (finished, span_s) = live.throughput.window().unwrap_or((0.0, 0.0));
        let finished_p95_ms = weighted_quantile(&queue, 0.95);
        if let Some(estimate) = live_queue::estimate(LiveInputs { waiting, finished, span_s, finished_p95_ms }) {
            observations.push(Observation::PredictedQueueAge { ms: estimate.predicted_ms });
        }
        let frozen = live.gauges.observe(GaugeReading {
            waiting,
            running: interval.running,
            finished: interval.finished,
            progressed: interval.progressed,
        });
        observations.push(Observation::GaugesFrozen(frozen));
    }
    observations
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

    fn at(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
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

            [[scrape]]
            url = "http://10.0.0.8:30000/metrics"
            kind = "sglang"
            models = { "Qwen/Qwen2.5-7B-Instruct" = "interactive" }
            "#,
        )
        .unwrap();
        assert_eq!(config.scrape[0], target(Exporter::Vllm, &[("meta-llama/Llama-3.1-8B-Instruct", "interactive")]));
        assert_eq!(config.scrape[1].kind, Exporter::Triton);
        assert_eq!(config.scrape[1].models["bert_large"], "batch");
        assert_eq!(config.scrape[2].kind, Exporter::Sglang);
        for target in &config.scrape {
            target.validate().unwrap();
        }

        let unknown = toml::from_str::<ScrapeTarget>("url = \"http://a/\"\nkind = \"vllm\"\nmodels = {}\ninterval = 5");
        assert!(unknown.unwrap_err().to_string().contains("unknown field `interval`"));
        let bad_kind = toml::from_str::<ScrapeTarget>("url = \"http://a/\"\nkind = \"tgi\"\nmodels = {}");
        let error = bad_kind.unwrap_err().to_string();
        assert!(error.contains("unknown variant `tgi`") && error.contains("`sglang`"), "{error}");
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
    fn escaped_model_names_match_the_config() {
        let text = "# TYPE vllm:num_requests_waiting gauge\n\
                    vllm:num_requests_waiting{engine=\"0\",model_name=\"org/\\\"quoted\\\" model\"} 5.0\n";
        let mut state = state(Exporter::Vllm, &[("org/\"quoted\" model", "interactive")]);
        assert_eq!(
            state.ingest(text, at(0)).unwrap(),
            vec![ClassObservations {
                class: "interactive".into(),
                observations: vec![Observation::QueueDepth(5), Observation::GaugesFrozen(false)]
            }]
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
        assert_eq!(state.ingest(&scrape(10, 10_000), at(0)).unwrap(), vec![]);
        let error = state.ingest("<html>502 Bad Gateway</html>\n", at(1)).unwrap_err();
        assert!(error.to_string().starts_with("not the Prometheus text format"), "{error:#}");
        let error =
            state.ingest("nv_inference_request_success{model=\"m\",version=\"1\"} twelve\n", at(2)).unwrap_err();
        assert!(error.to_string().starts_with("not the Prometheus text format"), "{error:#}");
        assert_eq!(state.scrapes(), 1);
        // Still relative to the first scrape: 30 requests, 60 ms queued.
        assert_eq!(
            state.ingest(&scrape(40, 70_000), at(3)).unwrap(),
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
        let error = state.ingest(text, at(0)).unwrap_err().to_string();
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
            state.ingest(text, at(0)).unwrap(),
            vec![ClassObservations {
                class: "interactive".into(),
                observations: vec![
                    Observation::QueueDepth(2),
                    Observation::KvCacheUsage(1.0),
                    Observation::GaugesFrozen(false)
                ],
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
        let gauges_only = |more: &[Observation]| {
            let mut observations = vec![Observation::QueueDepth(0)];
            observations.extend_from_slice(more);
            observations.push(Observation::GaugesFrozen(false));
            vec![ClassObservations { class: "batch".into(), observations }]
        };
        assert_eq!(state.ingest(scrape, at(0)).unwrap(), gauges_only(&[]));
        // No new requests: no queue-time observation; nothing waits, so
        // the live estimate is zero.
        assert_eq!(state.ingest(scrape, at(1)).unwrap(), gauges_only(&[Observation::PredictedQueueAge { ms: 0.0 }]));
    }
}
