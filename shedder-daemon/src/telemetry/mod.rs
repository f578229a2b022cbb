//! Telemetry: what the control plane learns about the inference servers.
//!
//! Every source turns what it reads into [`Observation`]s for a class (or a
//! [`GpuReading`] for the GPU gate); the estimators consume nothing else, so
//! a pushed sample, a scraped histogram and a test's fake look the same.
//!
//! * [`gpu`]: NVML utilisation and memory, with a "no GPU" path.
//! * [`samples`]: the in-process ingestion API for pushed job samples.
//! * [`scrape`]: vLLM, SGLang and Triton Prometheus endpoints.
//! * [`live_queue`]: the queue age predicted from live gauges and throughput.
//! * [`freshness`]: when a scraped input stops describing the server.

pub mod freshness;
pub mod gpu;
pub mod live_queue;
pub mod samples;
pub mod scrape;
#[cfg(test)]
pub(crate) mod test_logs;

/// One thing learnt about a class. `count` lets a histogram bucket stand for
/// many jobs at once without expanding it.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// Time a job waited before a worker picked it up.
    QueueAge { ms: f64, count: u64 },
    /// Time a worker spent on a job.
    Service { ms: f64, count: u64 },
    /// A completion: on time (`late_by_ms: None`) or late by that much.
    Completion { late_by_ms: Option<f64>, count: u64 },
    /// Jobs that were a retry of an earlier attempt.
    Retry { count: u64 },
    /// A finished job that the server had estimated: how far off the
    /// estimates `admit` is given run.
    EstimateError { estimate_ms: f64, service_ms: f64, count: u64 },
    /// Jobs waiting right now (a gauge, e.g. `vllm:num_requests_waiting`).
    QueueDepth(u64),
    /// Fraction of the KV cache in use, 0..=1 (vLLM's `kv_cache_usage_perc`).
    KvCacheUsage(f64),
    /// Jobs being served right now (a gauge, e.g. `vllm:num_requests_running`).
    Running(u64),
    /// The queue age the jobs waiting now are predicted to reach, ms: the
    /// worse of Little's law on the live gauges and the finished requests'
    /// histogram ([`live_queue`]).
    PredictedQueueAge { ms: f64 },
    /// A scrape read the live gauges; whether they look frozen
    /// ([`freshness`]). Every such scrape says so, so its age is the age of
    /// the newest live reading.
    GaugesFrozen(bool),
}

/// Observations for one class, from one source, over one interval.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassObservations {
    pub class: String,
    pub observations: Vec<Observation>,
}

/// One GPU as NVML reports it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuReading {
    pub index: u32,
    /// Percent of the last sample period a kernel was running (0..=100).
    pub utilization_pct: u32,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
}
