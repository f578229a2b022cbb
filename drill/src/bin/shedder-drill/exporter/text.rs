//! The Prometheus text exposition format (0.0.4) as `prometheus_client`
//! writes it, the library vLLM and SGLang serve `/metrics` with: `# HELP`
//! and `# TYPE` lines per family, label names sorted, `le` among them,
//! cumulative buckets ending in `+Inf`, then `_count` and `_sum`, and every
//! value a float (`5.0`).

use std::fmt::Write as _;

/// A histogram as an exporter keeps it: counts per bucket (not cumulative),
/// the `+Inf` overflow last, the observed total and count.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// Finite upper bounds, ascending.
    pub fn new(bounds: Vec<f64>) -> Self {
        let counts = vec![0; bounds.len() + 1];
        Self { bounds, counts, sum: 0.0 }
    }

    /// One value into the first bucket whose bound is at or above it.
    pub fn observe(&mut self, value: f64) {
        let bucket = self.bounds.iter().position(|le| value <= *le).unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        self.sum += value;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// A float as Python's `repr` writes it (`floatToGoString`): `5.0`, `0.075`, `+Inf`.
pub fn float(value: f64) -> String {
    if value == f64::INFINITY {
        "+Inf".into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

/// One exposition, family by family.
#[derive(Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// `# HELP` and `# TYPE` (`gauge`, `counter` or `histogram`).
    pub fn family(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample; `labels` in any order (they are written sorted).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let mut labels = labels.to_vec();
        labels.sort();
        let set: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
        let _ = writeln!(self.text, "{name}{{{}}} {}", set.join(","), float(value));
    }

    /// A histogram's series: cumulative buckets, `_count`, `_sum`.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], histogram: &Histogram) {
        let mut cumulative = 0;
        let bounds = histogram.bounds.iter().copied().chain([f64::INFINITY]);
        for (le, count) in bounds.zip(&histogram.counts) {
            cumulative += count;
            let le = float(le);
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&format!("{name}_bucket"), &with_le, cumulative as f64);
        }
        self.sample(&format!("{name}_count"), labels, histogram.count() as f64);
        self.sample(&format!("{name}_sum"), labels, histogram.sum);
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_is_written_as_prometheus_client_writes_it() {
        let mut h = Histogram::new(vec![0.3, 0.5]);
        for value in [0.1, 0.3, 0.4, 7.0] {
            h.observe(value);
        }
        let mut e = Exposition::default();
        e.family(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            "histogram",
        );
        e.histogram("vllm:request_queue_time_seconds", &[("model_name", "m"), ("engine", "0")], &h);
        assert_eq!(
            e.into_text(),
            "# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.\n\
             # TYPE vllm:request_queue_time_seconds histogram\n\
             vllm:request_queue_time_seconds_bucket{engine=\"0\",le=\"0.3\",model_name=\"m\"} 2.0\n\
             vllm:request_queue_time_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"m\"} 3.0\n\
             vllm:request_queue_time_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 4.0\n\
             vllm:request_queue_time_seconds_count{engine=\"0\",model_name=\"m\"} 4.0\n\
             vllm:request_queue_time_seconds_sum{engine=\"0\",model_name=\"m\"} 7.8\n"
        );
        assert_eq!((float(0.3 * 0.25), float(2.0), float(1e-3)), ("0.075".into(), "2.0".into(), "0.001".into()));
    }
}
