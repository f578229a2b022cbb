//! What one drill run records: one [`JobRecord`] per job the load generator
//! offered, and one [`TimelinePoint`] per class per poll of the daemon. The
//! report is computed from these alone.

use serde::{Deserialize, Serialize};

/// How a job ended, from the client's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Completed by its deadline: the only outcome that counts as useful.
    OnTime,
    /// Completed, but after its deadline.
    Late,
    /// Refused at connect (a TCP RST: shedder's `reject`, or nftables' reject)
    /// on the last attempt the client made.
    Rejected,
    /// Never connected: SYNs deferred (dropped) until the deadline passed.
    DeferredTimedOut,
    /// Answered 503 because the connection was marked (shedder's `mark`).
    Degraded,
    /// Refused by the backend's server-side deadline admission (the
    /// daemon's `admit` op said `reject_deadline`), with the status it chose.
    RejectedDeadline,
    /// Answered 503 by the backend's own overload policy: a full queue, a
    /// queue timeout, or saturation (the peer modes).
    Overloaded,
    /// Admitted, but still unanswered when the run ended (in the queue or in
    /// service): it missed its deadline without ever completing.
    Unfinished,
    /// Anything else that went wrong (connection reset mid-request, bad reply).
    Failed,
}

/// One job offered by the load generator. Times are milliseconds since the
/// start of the mode's run, on the drill's own (scaled) clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Index of the class in the workload's `class` list.
    pub class: usize,
    /// When the job arrived (its first attempt).
    pub arrival_ms: f64,
    /// When the client learned the outcome.
    pub finished_ms: f64,
    pub outcome: Outcome,
    /// Connection attempts made (1 = no retry).
    pub attempts: u32,
    /// Time in the backend's queue before a worker took it, if it got that far.
    pub queue_age_ms: Option<f64>,
    /// Time a worker spent on it, if it was served.
    pub service_ms: Option<f64>,
    /// Per-job slack when a worker took it: time left to the deadline minus
    /// the backend's recent service-time p95 for the class (the
    /// `deadline_slack`). Negative: it could not finish on time.
    pub slack_at_start_ms: Option<f64>,
    /// Whether the job drew its service time from the injected tail.
    pub injected: bool,
    /// The tenant it came from (index in its class's `tenant` list).
    #[serde(default)]
    pub tenant: Option<usize>,
    /// Whether the client sent a hedge for it.
    #[serde(default)]
    pub hedged: bool,
}

/// The daemon's view of one class at one moment (its `status` op).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub t_ms: f64,
    pub class: usize,
    /// The class's budget in the fast path, connections per second.
    pub budget_rate: Option<f64>,
    /// The controller's slack (deadline − queue_age_p95 − service_p95 − safety).
    pub slack_ms: Option<f64>,
    pub queue_age_p95_ms: Option<f64>,
    pub service_p95_ms: Option<f64>,
    /// Cumulative SYN counters of the class in the fast path.
    pub admitted: u64,
    pub dropped: u64,
    pub rejected: u64,
    pub marked: u64,
    pub would_shed: u64,
}

/// Everything one mode's run produced.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunRecord {
    /// `off`, `observe`, `enforce`, `static`, or a peer (`queue-cap`,
    /// `queue-timeout`, `saturation`).
    pub mode: String,
    pub jobs: Vec<JobRecord>,
    pub timeline: Vec<TimelinePoint>,
    /// For `static`: the nftables rate per class, connections per second.
    pub static_rates: Vec<f64>,
    /// With a daemon: how it learnt about the backend (`push`,
    /// `vllm-scrape`, `sglang-scrape`).
    #[serde(default)]
    pub telemetry: Option<String>,
}
