//! The workload file: the seed's drill fields, with several classes.
//! See `drill/workloads/seed.toml` for the documented default.

use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// What shedder may do to a class's new connections when its budget is empty.
pub const ACTIONS: [&str; 3] = ["drop", "reject", "mark"];
/// How clients retry: jittered exponential backoff, or at once (the herd).
pub const RETRY_POLICIES: [&str; 2] = ["backoff", "immediate"];

/// A declared workload. All durations in the file are at time scale 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Length of each mode's run, seconds.
    pub duration_seconds: f64,
    /// Backend worker slots (W), shared by all classes through one FIFO queue.
    pub worker_count: u32,
    pub injection: Injection,
    #[serde(default)]
    pub client: ClientPolicy,
    #[serde(rename = "class")]
    pub classes: Vec<WorkloadClass>,
}

/// The injected tail: from `after_seconds` until `removed_after_seconds`,
/// `affected_fraction` of the jobs of every class that declares
/// `service_time.injected_tail_ms` take that long instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Injection {
    pub after_seconds: f64,
    pub removed_after_seconds: f64,
    pub affected_fraction: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadClass {
    pub name: String,
    /// Poisson arrivals, jobs per second.
    pub arrival_rate: f64,
    pub deadline_ms: f64,
    pub service_time: ServiceTime,
    /// What shedder does when the class's budget is empty: drop, reject, mark.
    pub action: String,
    /// The backend port the class's jobs connect to (its classification rule).
    pub port: u16,
    /// The nftables `limit rate` of the `static` mode, connections per second.
    pub static_rate: f64,
}

/// Lognormal fitted to `p50_ms`/`p95_ms`; `injected_tail_ms` (optional) is
/// what an affected job takes during the injection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceTime {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub injected_tail_ms: Option<f64>,
}

/// How clients retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientPolicy {
    /// `backoff` (jittered exponential, honours Retry-After) or `immediate`
    /// (the herd).
    pub retry: String,
    /// Attempts per job at most, the first included.
    pub max_attempts: u32,
    /// Retries allowed, as a fraction of first attempts in the last second
    /// (a retry budget, as gRPC's): beyond it, a failed attempt is final.
    pub retry_budget: f64,
    /// First backoff, before jitter, ms.
    pub backoff_base_ms: f64,
}

impl Default for ClientPolicy {
    fn default() -> Self {
        Self { retry: "backoff".into(), max_attempts: 3, retry_budget: 0.2, backoff_base_ms: 100.0 }
    }
}

impl Workload {
    /// Reads and validates a workload file; errors name the file and the field.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading workload {}", path.display()))?;
        Self::from_toml_str(&text).with_context(|| format!("in workload {}", path.display()))
    }

    /// Parses and validates. Unknown fields are refused by name, and syntax
    /// errors carry toml's line and column.
    pub fn from_toml_str(text: &str) -> anyhow::Result<Self> {
        let workload: Self = toml::from_str(text).map_err(|e| anyhow::anyhow!("invalid workload: {e}"))?;
        workload.validate()?;
        Ok(workload)
    }

    /// Checks every field; the error names the first bad one, e.g.
    /// `class[0].service_time.p95_ms: 90 must be greater than p50_ms (120)`.
    pub fn validate(&self) -> anyhow::Result<()> {
        positive("duration_seconds", self.duration_seconds)?;
        if self.worker_count == 0 {
            bail!("worker_count: must be at least 1");
        }
        self.injection.validate(self.duration_seconds)?;
        self.client.validate()?;
        if self.classes.is_empty() {
            bail!("class: at least one [[class]] is required");
        }
        for (i, class) in self.classes.iter().enumerate() {
            class.validate(&format!("class[{i}]"))?;
            let earlier = &self.classes[..i];
            if let Some(j) = earlier.iter().position(|c| c.name == class.name) {
                bail!("class[{i}].name: \"{}\" is already the name of class[{j}]", class.name);
            }
            if let Some(j) = earlier.iter().position(|c| c.port == class.port) {
                bail!("class[{i}].port: {} is already the port of class[{j}]", class.port);
            }
        }
        Ok(())
    }

    /// The same workload at time scale `k`: every duration, service time,
    /// deadline and backoff times `k`, every rate divided by `k`. Fractions,
    /// counts and ports stay. Panics unless `k` is positive and finite (see
    /// [`check_time_scale`]).
    pub fn scaled(&self, k: f64) -> Workload {
        check_time_scale(k).expect("a valid time scale");
        let mut w = self.clone();
        w.duration_seconds *= k;
        w.injection.after_seconds *= k;
        w.injection.removed_after_seconds *= k;
        w.client.backoff_base_ms *= k;
        for class in &mut w.classes {
            class.arrival_rate /= k;
            class.static_rate /= k;
            class.deadline_ms *= k;
            class.service_time.p50_ms *= k;
            class.service_time.p95_ms *= k;
            class.service_time.injected_tail_ms = class.service_time.injected_tail_ms.map(|t| t * k);
        }
        w
    }

    /// Jobs per second offered by all classes together.
    pub fn total_arrival_rate(&self) -> f64 {
        self.classes.iter().map(|c| c.arrival_rate).sum()
    }
}

/// A time scale must be a positive, finite factor.
pub fn check_time_scale(k: f64) -> anyhow::Result<()> {
    positive("time_scale", k)
}

impl Injection {
    fn validate(&self, duration_seconds: f64) -> anyhow::Result<()> {
        // Each phase (steady, injected, recovered) must have some time, or
        // the report has nothing to compare.
        positive("injection.after_seconds", self.after_seconds)?;
        finite("injection.removed_after_seconds", self.removed_after_seconds)?;
        if self.removed_after_seconds <= self.after_seconds {
            bail!(
                "injection.removed_after_seconds: {} must be greater than after_seconds ({})",
                self.removed_after_seconds,
                self.after_seconds
            );
        }
        if self.removed_after_seconds >= duration_seconds {
            bail!(
                "injection.removed_after_seconds: {} must be less than duration_seconds ({duration_seconds}), \
                 so that the run shows the recovery",
                self.removed_after_seconds
            );
        }
        fraction("injection.affected_fraction", self.affected_fraction)
    }
}

impl ClientPolicy {
    fn validate(&self) -> anyhow::Result<()> {
        one_of("client.retry", &self.retry, &RETRY_POLICIES)?;
        if self.max_attempts == 0 {
            bail!("client.max_attempts: must be at least 1 (the first attempt counts)");
        }
        non_negative("client.retry_budget", self.retry_budget)?;
        non_negative("client.backoff_base_ms", self.backoff_base_ms)?;
        if self.retry == "backoff" && self.backoff_base_ms == 0.0 {
            bail!("client.backoff_base_ms: must be positive when retry = \"backoff\"");
        }
        Ok(())
    }
}

impl WorkloadClass {
    fn validate(&self, at: &str) -> anyhow::Result<()> {
        if self.name.trim().is_empty() {
            bail!("{at}.name: must not be empty");
        }
        positive(&format!("{at}.arrival_rate"), self.arrival_rate)?;
        positive(&format!("{at}.deadline_ms"), self.deadline_ms)?;
        self.service_time.validate(&format!("{at}.service_time"))?;
        one_of(&format!("{at}.action"), &self.action, &ACTIONS)?;
        if self.port == 0 {
            bail!("{at}.port: must not be 0");
        }
        positive(&format!("{at}.static_rate"), self.static_rate)
    }
}

impl ServiceTime {
    fn validate(&self, at: &str) -> anyhow::Result<()> {
        positive(&format!("{at}.p50_ms"), self.p50_ms)?;
        finite(&format!("{at}.p95_ms"), self.p95_ms)?;
        // A lognormal needs p95 strictly above p50 (sigma > 0).
        if self.p95_ms <= self.p50_ms {
            bail!("{at}.p95_ms: {} must be greater than p50_ms ({})", self.p95_ms, self.p50_ms);
        }
        if let Some(tail) = self.injected_tail_ms {
            positive(&format!("{at}.injected_tail_ms"), tail)?;
        }
        Ok(())
    }
}

fn finite(field: &str, value: f64) -> anyhow::Result<()> {
    if !value.is_finite() {
        bail!("{field}: {value} is not a finite number");
    }
    Ok(())
}

fn positive(field: &str, value: f64) -> anyhow::Result<()> {
    finite(field, value)?;
    if value <= 0.0 {
        bail!("{field}: {value} must be positive");
    }
    Ok(())
}

fn non_negative(field: &str, value: f64) -> anyhow::Result<()> {
    finite(field, value)?;
    if value < 0.0 {
        bail!("{field}: {value} must not be negative");
    }
    Ok(())
}

fn fraction(field: &str, value: f64) -> anyhow::Result<()> {
    finite(field, value)?;
    if !(0.0..=1.0).contains(&value) {
        bail!("{field}: {value} must be between 0 and 1");
    }
    Ok(())
}

fn one_of(field: &str, value: &str, allowed: &[&str]) -> anyhow::Result<()> {
    if !allowed.contains(&value) {
        bail!("{field}: \"{value}\" is not one of {}", allowed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = include_str!("../workloads/seed.toml");
    const TWO_CLASSES: &str = include_str!("../workloads/two-classes.toml");

    /// A second class appended to the seed, for the checks across classes.
    const BATCH: &str = r#"
[[class]]
name = "batch"
arrival_rate = 5
deadline_ms = 10000
service_time = { p50_ms = 400, p95_ms = 1200 }
action = "drop"
port = 8001
static_rate = 4
"#;

    #[test]
    fn the_seed_parses_as_declared() {
        let w = Workload::from_toml_str(SEED).unwrap();
        assert_eq!((w.duration_seconds, w.worker_count), (180.0, 8));
        assert_eq!(
            w.injection,
            Injection { after_seconds: 60.0, removed_after_seconds: 120.0, affected_fraction: 0.35 }
        );
        assert_eq!(w.client, ClientPolicy::default());
        let class = &w.classes[0];
        assert_eq!((class.name.as_str(), class.action.as_str(), class.port), ("interactive", "reject", 8000));
        assert_eq!((class.arrival_rate, class.deadline_ms, class.static_rate), (30.0, 3000.0, 25.0));
        assert_eq!(class.service_time, ServiceTime { p50_ms: 120.0, p95_ms: 400.0, injected_tail_ms: Some(1800.0) });
    }

    #[test]
    fn two_classes_parse_with_the_tail_in_batch_only() {
        let w = Workload::from_toml_str(TWO_CLASSES).unwrap();
        let summary: Vec<_> = w
            .classes
            .iter()
            .map(|c| (c.name.as_str(), c.action.as_str(), c.port, c.service_time.injected_tail_ms.is_some()))
            .collect();
        assert_eq!(summary, [("interactive", "reject", 8000, false), ("batch", "drop", 8001, true)]);
    }

    #[test]
    fn the_shipped_workload_files_load_from_disk() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        for name in ["seed.toml", "two-classes.toml"] {
            Workload::load(&dir.join(name)).unwrap();
        }
        let missing = Workload::load(&dir.join("missing.toml")).unwrap_err();
        assert!(format!("{missing:#}").contains("missing.toml"), "{missing:#}");
    }

    #[test]
    fn the_client_section_may_be_left_out() {
        let start = SEED.find("[client]").unwrap();
        let end = SEED.find("[[class]]").unwrap();
        let without = format!("{}{}", &SEED[..start], &SEED[end..]);
        assert_eq!(Workload::from_toml_str(&without).unwrap().client, ClientPolicy::default());
    }

    /// Each row: the seed with one edit (text replaced, or appended when
    /// `from` is empty), and what the error must say.
    #[test]
    fn bad_files_are_refused_with_the_field_named() {
        let same_port = BATCH.replace("8001", "8000");
        let same_name = BATCH.replace("batch", "interactive");
        let low_p95 = BATCH.replace("p95_ms = 1200", "p95_ms = 300");
        let table: &[(&str, &str, &str)] = &[
            ("duration_seconds = 180", "duration_seconds = 0", "duration_seconds: 0 must be positive"),
            ("duration_seconds = 180", "duration_seconds = nan", "duration_seconds: NaN is not a finite number"),
            ("worker_count = 8", "worker_count = 0", "worker_count: must be at least 1"),
            ("worker_count = 8", "worker_count = -1", "worker_count"),
            ("after_seconds = 60", "after_seconds = 0", "injection.after_seconds: 0 must be positive"),
            (
                "removed_after_seconds = 120",
                "removed_after_seconds = 50",
                "injection.removed_after_seconds: 50 must be greater than after_seconds (60)",
            ),
            (
                "removed_after_seconds = 120",
                "removed_after_seconds = 180",
                "injection.removed_after_seconds: 180 must be less than duration_seconds (180)",
            ),
            ("affected_fraction = 0.35", "affected_fraction = 1.5", "injection.affected_fraction: 1.5 must be between"),
            ("affected_fraction = 0.35", "affected_fraction = -0.1", "injection.affected_fraction"),
            ("affected_fraction = 0.35", "affected_fraction = 0.35\nspeed = 2", "unknown field `speed`"),
            ("retry = \"backoff\"", "retry = \"sometimes\"", "client.retry: \"sometimes\" is not one of backoff"),
            ("max_attempts = 3", "max_attempts = 0", "client.max_attempts: must be at least 1"),
            ("retry_budget = 0.2", "retry_budget = -1", "client.retry_budget: -1 must not be negative"),
            ("backoff_base_ms = 100", "backoff_base_ms = 0", "client.backoff_base_ms: must be positive"),
            ("backoff_base_ms = 100", "backof_base_ms = 100", "unknown field `backof_base_ms`"),
            ("name = \"interactive\"", "name = \" \"", "class[0].name: must not be empty"),
            ("arrival_rate = 30", "arrival_rate = 0", "class[0].arrival_rate: 0 must be positive"),
            ("arrival_rate = 30", "arrival_rate = \"fast\"", "arrival_rate"),
            ("deadline_ms = 3000", "deadline_ms = -5", "class[0].deadline_ms: -5 must be positive"),
            ("p50_ms = 120", "p50_ms = 0", "class[0].service_time.p50_ms: 0 must be positive"),
            ("p95_ms = 400", "p95_ms = 90", "class[0].service_time.p95_ms: 90 must be greater than p50_ms (120)"),
            ("p95_ms = 400", "p95_ms = 120", "class[0].service_time.p95_ms: 120 must be greater than p50_ms (120)"),
            ("p95_ms = 400", "p95_ms = inf", "class[0].service_time.p95_ms: inf is not a finite number"),
            ("injected_tail_ms = 1800", "injected_tail_ms = 0", "class[0].service_time.injected_tail_ms: 0 must be"),
            ("injected_tail_ms = 1800", "tail_ms = 1800", "unknown field `tail_ms`"),
            (
                "action = \"reject\"",
                "action = \"block\"",
                "class[0].action: \"block\" is not one of drop, reject, mark",
            ),
            ("port = 8000", "port = 0", "class[0].port: must not be 0"),
            ("port = 8000", "port = 70000", "port"),
            ("static_rate = 25", "static_rate = 0", "class[0].static_rate: 0 must be positive"),
            ("static_rate = 25", "", "missing field `static_rate`"),
            ("", "colour = \"red\"", "unknown field `colour`"),
            ("", &same_port, "class[1].port: 8000 is already the port of class[0]"),
            ("", &same_name, "class[1].name: \"interactive\" is already the name of class[0]"),
            ("", &low_p95, "class[1].service_time.p95_ms: 300"),
        ];
        for (from, to, expected) in table {
            let text = if from.is_empty() {
                // Top-level keys must come before the first table.
                if to.contains("[[class]]") { format!("{SEED}{to}") } else { format!("{to}\n{SEED}") }
            } else {
                assert!(SEED.contains(from), "the seed has no {from:?}");
                SEED.replacen(from, to, 1)
            };
            let error = format!("{:#}", Workload::from_toml_str(&text).expect_err(expected));
            assert!(error.contains(expected), "editing {from:?} to {to:?}: expected {expected:?} in {error}");
        }
    }

    #[test]
    fn a_workload_without_classes_is_refused() {
        let without = &SEED[..SEED.find("[[class]]").unwrap()];
        let error = Workload::from_toml_str(without).unwrap_err().to_string();
        assert!(error.contains("class"), "{error}");
    }

    #[test]
    fn scaling_multiplies_times_and_divides_rates() {
        let w = Workload::from_toml_str(SEED).unwrap();
        let fast = w.scaled(0.1);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b.abs().max(1.0);
        assert!(close(fast.duration_seconds, 18.0));
        assert!(close(fast.injection.after_seconds, 6.0) && close(fast.injection.removed_after_seconds, 12.0));
        assert_eq!(fast.injection.affected_fraction, 0.35);
        assert!(close(fast.client.backoff_base_ms, 10.0));
        assert_eq!((fast.client.max_attempts, fast.client.retry_budget), (3, 0.2));
        let class = &fast.classes[0];
        assert!(close(class.arrival_rate, 300.0) && close(class.static_rate, 250.0));
        assert!(close(class.deadline_ms, 300.0));
        assert!(close(class.service_time.p50_ms, 12.0) && close(class.service_time.p95_ms, 40.0));
        assert!(close(class.service_time.injected_tail_ms.unwrap(), 180.0));
        assert_eq!((class.port, class.action.as_str()), (8000, "reject"));
        fast.validate().unwrap();
        assert_eq!(w.scaled(1.0), w);
    }

    #[test]
    fn a_time_scale_must_be_positive_and_finite() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(check_time_scale(bad).unwrap_err().to_string().starts_with("time_scale:"), "{bad}");
        }
        check_time_scale(0.05).unwrap();
    }
}
