//! What one scrape contributes to a class, summed over its models and their
//! series, before it becomes observations.

use tracing::warn;

use super::{
    delta::Deltas,
    exposition::{ModelSeries, Reading},
    histogram::bucket_observations,
};

/// Per class, the interval's reading.
#[derive(Default)]
pub(super) struct ClassInterval {
    /// Finished requests' queue times, `(ms, count)`.
    pub queue: Vec<(f64, u64)>,
    /// Finished requests' service times, `(ms, count)`.
    pub service: Vec<(f64, u64)>,
    /// Jobs waiting now (gauges, summed).
    pub waiting: Option<f64>,
    /// Jobs being served now (gauges, summed).
    pub running: Option<f64>,
    /// KV-cache usage 0..=1, the highest reported.
    pub kv_cache: Option<f64>,
    /// Requests that left the engine over the interval, as far as the
    /// exporter counts them (`None`: no counter, or only a baseline so far).
    pub finished: Option<f64>,
    /// Whether the engine's step counters (tokens) moved (`None`: unknown).
    pub progressed: Option<bool>,
}

impl ClassInterval {
    pub fn add_waiting(&mut self, value: f64) {
        self.waiting = Some(self.waiting.unwrap_or(0.0) + value.max(0.0));
    }

    pub fn add_running(&mut self, value: f64) {
        self.running = Some(self.running.unwrap_or(0.0) + value.max(0.0));
    }

    pub fn add_finished(&mut self, value: f64) {
        self.finished = Some(self.finished.unwrap_or(0.0) + value.max(0.0));
    }

    /// A KV-cache usage fraction; the class keeps the fullest (one full
    /// engine is enough to stall its requests).
    pub fn note_kv_cache(&mut self, usage: f64) {
        self.kv_cache = Some(self.kv_cache.unwrap_or(0.0).max(usage.min(1.0)));
    }

    pub fn note_progress(&mut self, moved: bool) {
        self.progressed = Some(self.progressed.unwrap_or(false) || moved);
    }
}

/// Sums a gauge's series.
pub(super) fn gauge_sum(series: Option<&ModelSeries>) -> Option<f64> {
    let values = series?.values().filter_map(|reading| match reading {
        Reading::Scalar(value) => Some(value.max(0.0)),
        Reading::Histogram(_) => None,
    });
    values.fold(None, |total, value| Some(total.unwrap_or(0.0) + value))
}

/// Sums a counter's growth over its series (`None` while every series is
/// at its baseline).
pub(super) fn counter_growth(family: &'static str, series: Option<&ModelSeries>, deltas: &mut Deltas) -> Option<f64> {
    let mut total = None;
    for (labels, reading) in series.into_iter().flatten() {
        if let Some(grown) = deltas.counter(family, labels, reading) {
            total = Some(total.unwrap_or(0.0) + grown);
        }
    }
    total
}

/// A histogram family's interval observations, and how many requests it
/// recorded (`None` while every series is at its baseline).
pub(super) fn histogram_growth(
    family: &'static str,
    series: Option<&ModelSeries>,
    deltas: &mut Deltas,
) -> (Vec<(f64, u64)>, Option<f64>) {
    let mut observations = Vec::new();
    let mut recorded = None;
    for (labels, reading) in series.into_iter().flatten() {
        if let Some(grown) = deltas.histogram(family, labels, reading) {
            observations.extend(bucket_observations(&grown));
            recorded = Some(recorded.unwrap_or(0.0) + grown.count());
        }
    }
    (observations, recorded)
}

/// Whether a KV-cache fraction is plausible (exporters report 0..=1; float
/// noise at 1 is tolerated).
pub(super) fn plausible_fraction(usage: f64) -> bool {
    (0.0..=1.0 + 1e-9).contains(&usage)
}

/// A KV-cache usage gauge's series into the class; values outside 0..=1
/// are warned about and ignored.
pub(super) fn note_kv_gauge(family: &str, series: Option<&ModelSeries>, interval: &mut ClassInterval, url: &str) {
    for (labels, reading) in series.into_iter().flatten() {
        let Reading::Scalar(usage) = *reading else { continue };
        if !plausible_fraction(usage) {
            warn!(url, family, ?labels, usage, "KV-cache usage outside 0..=1, ignored");
            continue;
        }
        interval.note_kv_cache(usage);
    }
}
