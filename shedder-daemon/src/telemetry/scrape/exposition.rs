//! The Prometheus text format, reduced to the families an exporter's reducer
//! reads: per family, per configured model, per series (label set).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use prom_text_format_parser::{Metric, ScrapeParseError, Type, ValueType};
use tracing::debug;

/// A metric family shedder reads, and its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Family {
    pub name: &'static str,
    pub kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A counter or a gauge.
    Scalar,
    Histogram,
    /// Read as a histogram whose only bucket is `+Inf` (its `_count`), with
    /// its `_sum`; its quantiles (over the exporter's own window) are not read.
    Summary,
}

impl Family {
    pub const fn scalar(name: &'static str) -> Self {
        Family { name, kind: Kind::Scalar }
    }

    pub const fn histogram(name: &'static str) -> Self {
        Family { name, kind: Kind::Histogram }
    }

    pub const fn summary(name: &'static str) -> Self {
        Family { name, kind: Kind::Summary }
    }
}

/// A series' labels (less `le`): `(name, value)`, sorted, values unescaped.
pub(super) type LabelSet = Vec<(String, String)>;

/// A histogram series as scraped: cumulative `(le, count)` buckets in
/// ascending `le` with `+Inf` last, and `_sum` when the exporter prints it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub sum: Option<f64>,
}

impl Histogram {
    /// Observations recorded: the `+Inf` bucket (or the last one).
    pub fn count(&self) -> f64 {
        self.buckets.last().map_or(0.0, |(_, count)| *count)
    }
}

/// One scrape's reading of a series.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Reading {
    Scalar(f64),
    Histogram(Histogram),
}

/// One model's series of one family, by label set.
pub(super) type ModelSeries = BTreeMap<LabelSet, Reading>;

/// The families read, from one exposition, for configured models:
/// family → model → series labels → reading.
pub(super) type Exposition = HashMap<&'static str, BTreeMap<String, ModelSeries>>;

/// Why an exposition cannot be used; the scrape that brought it changes nothing.
#[derive(Debug, thiserror::Error)]
pub enum ExpositionError {
    #[error("not the Prometheus text format: {0}")]
    Syntax(String),
    /// A family shedder reads, exposed with another metric type.
    #[error("{family}: expected a {expected}, the exporter says {actual}")]
    WrongType { family: &'static str, expected: &'static str, actual: String },
    #[error("{family}: value {raw:?} is not a number")]
    NotANumber { family: String, raw: String },
    #[error("{0}: a bucket sample without an le label")]
    NoBound(String),
    #[error("{family}: bucket bound le={raw:?} is not a number")]
    BadBound { family: String, raw: String },
}

/// Parses an exposition and keeps `families`, for the models in `models`
/// (the value of `model_label`).
pub(super) fn parse(
    text: &str,
    families: &[&[Family]],
    model_label: &str,
    models: &BTreeMap<String, String>,
) -> Result<Exposition, ExpositionError> {
    let (metrics, error) = prom_text_format_parser::parse_scrape(text);
    match error {
        Some(ScrapeParseError::Parse(message)) => return Err(ExpositionError::Syntax(message)),
        // Families that are only HELP/TYPE (a labelled metric nobody has
        // touched yet) and similar grouping remarks: the rest is fine.
        Some(ScrapeParseError::Collect(remarks)) => debug!(?remarks, "exposition remarks"),
        None => {}
    }
    let mut exposition = Exposition::new();
    for metric in &metrics {
        let Some(family) = families.iter().copied().flatten().find(|family| family.name == metric.name) else {
            continue;
        };
        match (family.kind, metric.kind) {
            (Kind::Histogram, Type::Histogram)
            | (Kind::Summary, Type::Summary)
            | (Kind::Scalar, Type::Counter | Type::Gauge | Type::Untyped) => {}
            (kind, actual) => {
                let expected = match kind {
                    Kind::Scalar => "counter or gauge",
                    Kind::Histogram => "histogram",
                    Kind::Summary => "summary",
                };
                return Err(ExpositionError::WrongType { family: family.name, expected, actual: actual.to_string() });
            }
        }
        for (labels, reading) in series_of(metric, family.kind)? {
            let Some(model) = labels.iter().find(|(name, _)| name == model_label).map(|(_, value)| value) else {
                continue;
            };
            if models.contains_key(model) {
                exposition.entry(family.name).or_default().entry(model.clone()).or_default().insert(labels, reading);
            }
        }
    }
    Ok(exposition)
}

/// A family's samples grouped into series. Histogram samples are grouped by
/// their labels less `le`; `_sum` is kept (it bounds the `+Inf` bucket),
/// `_count` is not needed (the `+Inf` bucket is the count). A summary keeps
/// `_count` (as its `+Inf` bucket) and `_sum`, not its quantiles. Series with
/// a value that is not a finite number are left out.
fn series_of(metric: &Metric, kind: Kind) -> Result<Vec<(LabelSet, Reading)>, ExpositionError> {
    let mut series: BTreeMap<LabelSet, Reading> = BTreeMap::new();
    let mut unusable = BTreeSet::new();
    for sample in &metric.samples {
        let part = match (kind, sample.value.value_type) {
            (Kind::Scalar, ValueType::Sample) => Part::Value,
            (Kind::Histogram, ValueType::Sample) => Part::Bucket,
            (Kind::Histogram | Kind::Summary, ValueType::Sum) => Part::Sum,
            (Kind::Summary, ValueType::Count) => Part::Count,
            _ => continue,
        };
        let raw = sample.value.value.as_str();
        let not_a_number = |_| ExpositionError::NotANumber { family: metric.name.clone(), raw: raw.into() };
        let value: f64 = raw.parse().map_err(not_a_number)?;
        let mut le = None;
        let mut labels = Vec::with_capacity(sample.labels.len());
        for label in sample.labels.iter() {
            if part == Part::Bucket && label.key == "le" {
                let bad_bound = |_| ExpositionError::BadBound { family: metric.name.clone(), raw: label.value.clone() };
                le = Some(label.value.parse::<f64>().map_err(bad_bound)?);
            } else {
                labels.push((label.key.clone(), unescape(&label.value)));
            }
        }
        labels.sort();
        if !value.is_finite() {
            unusable.insert(labels);
            continue;
        }
        if part == Part::Value {
            series.insert(labels, Reading::Scalar(value));
            continue;
        }
        let entry =
            series.entry(labels).or_insert_with(|| Reading::Histogram(Histogram { buckets: Vec::new(), sum: None }));
        let Reading::Histogram(h) = entry else { unreachable!("histogram and summary families only hold histograms") };
        match (part, le) {
            (Part::Sum, _) => h.sum = Some(value),
            (Part::Count, _) => h.buckets = vec![(f64::INFINITY, value)],
            (_, Some(le)) => h.buckets.push((le, value)),
            (_, None) => return Err(ExpositionError::NoBound(metric.name.clone())),
        }
    }
    for labels in &unusable {
        series.remove(labels);
    }
    // A `_sum` without buckets (or count) is nothing we can use.
    series.retain(|_, reading| !matches!(reading, Reading::Histogram(h) if h.buckets.is_empty()));
    for reading in series.values_mut() {
        if let Reading::Histogram(h) = reading {
            h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
    }
    Ok(series.into_iter().collect())
}

/// Which part of a family a sample is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Value,
    Bucket,
    Sum,
    Count,
}

/// Undoes the text format's label-value escapes (`\\`, `\"`, `\n`), which
/// the parser keeps as written.
pub(super) fn unescape(value: &str) -> String {
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

/// Label value of `name` in `labels`.
pub(super) fn label<'a>(labels: &'a LabelSet, name: &str) -> Option<&'a str> {
    labels.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_unescaped() {
        assert_eq!(unescape(r#"plain"#), "plain");
        assert_eq!(unescape(r#"a\"b\\c\nd"#), "a\"b\\c\nd");
        assert_eq!(unescape(r#"trailing\"#), "trailing\\");
    }

    #[test]
    fn summaries_are_a_count_and_a_sum() {
        let text = "# TYPE s summary\n\
                    s_count{m=\"a\"} 161\ns_sum{m=\"a\"} 11110\n\
                    s{m=\"a\",quantile=\"0.5\"} 55\ns{m=\"a\",quantile=\"0.99\"} 101\n";
        let models = BTreeMap::from([("a".to_string(), "c".to_string())]);
        let exposition = parse(text, &[&[Family::summary("s")]], "m", &models).unwrap();
        let series = &exposition["s"]["a"];
        assert_eq!(series.len(), 1, "quantiles are not series of their own: {series:?}");
        let reading = &series[&vec![("m".to_string(), "a".to_string())]];
        assert_eq!(
            reading,
            &Reading::Histogram(Histogram { buckets: vec![(f64::INFINITY, 161.0)], sum: Some(11110.0) })
        );
        let error = parse(text, &[&[Family::histogram("s")]], "m", &models).unwrap_err();
        assert_eq!(error.to_string(), "s: expected a histogram, the exporter says summary");
    }

    #[test]
    fn histograms_keep_their_sum() {
        let text = "# TYPE h histogram\n\
                    h_bucket{m=\"a\",le=\"1.0\"} 2\nh_bucket{m=\"a\",le=\"+Inf\"} 3\n\
                    h_sum{m=\"a\"} 9.5\nh_count{m=\"a\"} 3\n";
        let models = BTreeMap::from([("a".to_string(), "c".to_string())]);
        let exposition = parse(text, &[&[Family::histogram("h")]], "m", &models).unwrap();
        let reading = &exposition["h"]["a"][&vec![("m".to_string(), "a".to_string())]];
        assert_eq!(
            reading,
            &Reading::Histogram(Histogram { buckets: vec![(1.0, 2.0), (f64::INFINITY, 3.0)], sum: Some(9.5) })
        );
    }
}
