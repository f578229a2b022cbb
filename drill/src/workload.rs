//! The workload file: the seed's drill fields, with several classes.
//! See `drill/workloads/seed.toml` for the documented default.

use serde::{Deserialize, Serialize};

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
