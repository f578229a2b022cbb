//! Job-level admission: the `admit` op's answer to "may this job start?",
//! from the same model the controller sizes budgets with
//! ([`crate::control::ClassView`]). A server asks as a worker takes a job,
//! and may also ask as the job arrives, with the jobs waiting ahead of it:
//! then the job's wait is predicted ([`crate::control::ahead`]) and a job
//! that could not make its deadline behind them is refused before it waits.
//!
//! ```text
//! left       = deadline − now − safety − expected wait   (0 when asked at start)
//! p          = P(service ≤ left)                 the class's service curve
//! p < θ      → reject_deadline (503)              θ = admit_confidence · best_chance,
//!                                                 times the chance every worker is busy
//!                                                 when no job behind it waits for a worker
//!              unless the backend is idle, as the job's own wait agrees:
//!              admit (the sanity guard)
//! a higher tier's jobs missing their deadlines → reject_tier (503): this tier waits,
//!              unless one more start's wait would take the job's chance
//!              under θ and it would start on a worker no job behind it takes
//! starting it would leave fewer workers free than the higher tiers' reserve
//!            → reject_tier (503)              `running` from the server, else scraped;
//!                                             asked at start only
//! either of those two, from a server that can hold the job → hold (no status)
//! age > max  → reject_stale (503)
//! retry or hedge, capacity short         → reject_retry (503): shed before first attempts
//! retry or hedge, over their share       → reject_budget (429)
//! otherwise  → admit
//! ```
//!
//! **The threshold.** A job costs a worker its service time whether or not
//! it finishes in time. `best_chance` is what a job of the class gets when
//! served at once; a job that has lost more than `1 − admit_confidence` (5%)
//! of it to waiting yields less on-time work per worker-second than a
//! fresher job of the same class would, and under load there is one behind
//! it. Where none is (asked at start with `waiting_behind` no more than
//! the workers left free), the worker would idle until the next job, so the
//! threshold is weighed by the chance that one arrives to find every worker
//! busy ([`crate::control::contention`]): near 1 on a backend at its
//! capacity, small on one with workers to spare. Jobs that can never make
//! it (service past the deadline) lower `best_chance` itself, so a class with a long tail is judged on the jobs
//! that can make it, not refused whole.
//!
//! **Holding instead of refusing.** A tier's refusals protect a higher
//! tier's workers, not the job's own deadline: the job could still make it
//! if it waited. A server whose queue can let a later job start first (a
//! priority queue) says so (`can_hold`), and then gets `hold`: keep the job
//! queued, start the next one, ask again as a worker frees. The job leaves
//! the queue when it may start, or when its own chance is gone
//! (`reject_deadline`). A job held for a higher tier's missed deadlines
//! starts at its last chance (the wait for one more start, `E[S] / c`, would
//! take it under θ) when a worker is free and no job behind it would take
//! that worker: holding it longer would only idle the worker until the
//! job's chance is gone. The workers kept free by a reserve stay kept: a
//! job started in them would take a higher tier's worker.
//!
//! **Two refusals a client can act on.** 503 means the backend has no room
//! in time: `Retry-After` is the predicted drain time (the queue term),
//! jittered and bounded. 429 means the class's retries and hedges are over
//! their share: retry soon, as a first attempt would be let in.
//!
//! Pure: `now` is a parameter, on the same clock as the deadline, and the
//! jitter draws from the caller's RNG.

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

use crate::control::ClassView;

pub mod ledger;

/// How old a job is: either its queue age, or when it was queued.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueAge {
    AgeMs(f64),
    /// ms on the same clock as `now` and the deadline.
    QueuedAtMs(f64),
}

/// One job asking to start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmitRequest {
    /// Absolute deadline, ms on the same clock as `now_ms`.
    pub deadline_ms: f64,
    pub queue_age: QueueAge,
    pub now_ms: f64,
    /// Which try this is (1 = the first).
    pub attempt: u32,
    /// A speculative duplicate of a job already running elsewhere.
    pub hedge: bool,
    /// Jobs the server has in service now, every class, this one not
    /// counted (None when it does not say).
    pub running: Option<f64>,
    /// Asked as the job arrives, before it queues: the jobs already waiting
    /// ahead of it. Its wait is then predicted from them (see
    /// [`crate::control::ahead`]); None when asked as the job starts.
    pub waiting_ahead: Option<f64>,
    /// Asked as the job starts: the jobs still queued behind it, every
    /// class (None when the server does not say). With no more than the
    /// workers left free, a worker this job is refused would idle until the
    /// next arrival.
    pub waiting_behind: Option<f64>,
    /// The server can keep this job queued and start a later one first.
    pub can_hold: bool,
    /// The server's estimate of this job's service time, ms: the job's
    /// chance is then read at its own size, not from the class's curve.
    pub estimated_service_ms: Option<f64>,
}

/// The knobs of the answer (per request, or the defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmitPolicy {
    /// Overrides the class's margin for this request, ms.
    #[serde(default)]
    pub safety_ms: Option<f64>,
    /// Older than this in the queue: reject as stale.
    pub max_queue_age_ms: f64,
    #[serde(default = "d_retry_min")]
    pub retry_after_min_ms: u64,
    #[serde(default = "d_retry_max")]
    pub retry_after_max_ms: u64,
    /// Relative spread of the hint, 0..1 (0.2: ±20%).
    #[serde(default = "d_jitter")]
    pub jitter: f64,
}

fn d_retry_min() -> u64 {
    1_000
}
fn d_retry_max() -> u64 {
    30_000
}
fn d_jitter() -> f64 {
    0.2
}

impl AdmitPolicy {
    /// The defaults with this stale limit.
    pub fn with_max_queue_age(max_queue_age_ms: f64) -> Self {
        AdmitPolicy {
            safety_ms: None,
            max_queue_age_ms,
            retry_after_min_ms: d_retry_min(),
            retry_after_max_ms: d_retry_max(),
            jitter: d_jitter(),
        }
    }

    /// Checks the policy; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(safety) = self.safety_ms
            && !(safety.is_finite() && safety >= 0.0)
        {
            return Err(format!("admit.safety_ms: {safety} is not a finite, non-negative number"));
        }
        if !(self.max_queue_age_ms.is_finite() && self.max_queue_age_ms >= 0.0) {
            return Err(format!(
                "admit.max_queue_age_ms: {} is not a finite, non-negative number",
                self.max_queue_age_ms
            ));
        }
        if self.retry_after_min_ms > self.retry_after_max_ms {
            return Err(format!(
                "admit.retry_after_min_ms: {} is above retry_after_max_ms ({})",
                self.retry_after_min_ms, self.retry_after_max_ms
            ));
        }
        if !(self.jitter.is_finite() && (0.0..1.0).contains(&self.jitter)) {
            return Err(format!("admit.jitter: {} is outside 0..1", self.jitter));
        }
        Ok(())
    }
}

/// The verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Admit,
    /// Too little chance of finishing in time.
    RejectDeadline,
    /// Waited longer than the stale limit.
    RejectStale,
    /// A higher tier needs the workers: its jobs are missing their
    /// deadlines, or this job would take one kept free for it.
    RejectTier,
    /// A retry or hedge while capacity is short.
    RejectRetry,
    /// A retry or hedge over the class's retry share.
    RejectBudget,
    /// Not now, for a higher tier's sake: keep the job queued, start the
    /// next one, and ask again as a worker frees (servers that can hold).
    Hold,
}

impl Verdict {
    /// The verdict as the API and the metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Admit => "admit",
            Verdict::RejectDeadline => "reject_deadline",
            Verdict::RejectStale => "reject_stale",
            Verdict::RejectTier => "reject_tier",
            Verdict::RejectRetry => "reject_retry",
            Verdict::RejectBudget => "reject_budget",
            Verdict::Hold => "hold",
        }
    }

    /// The HTTP status a server should answer with: 429 over a budget
    /// (retry soon), 503 without capacity (retry after the hint); none to
    /// admit or hold.
    pub fn http_status(self) -> Option<u16> {
        match self {
            Verdict::Admit | Verdict::Hold => None,
            Verdict::RejectBudget => Some(429),
            Verdict::RejectDeadline | Verdict::RejectStale | Verdict::RejectTier | Verdict::RejectRetry => Some(503),
        }
    }
}

/// The verdict with its numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdmitDecision {
    pub verdict: Verdict,
    /// `deadline − now − service term`, ms (the margin not taken off).
    pub slack_ms: f64,
    /// The job's chance of finishing in time if it starts now.
    pub p_on_time: f64,
    pub threshold: f64,
    pub queue_age_ms: f64,
    /// Asked at arrival: the wait predicted from the jobs ahead, ms.
    pub expected_wait_ms: Option<f64>,
    /// For refusals: when to retry, ms, within the policy's bounds.
    pub retry_after_ms: Option<u64>,
    /// Admitted only because the backend is idle (the sanity guard).
    pub guarded: bool,
    /// A short reason a person can read.
    pub reason: String,
}

impl AdmitDecision {
    /// The hint as an HTTP `Retry-After` value: whole seconds, rounded up.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_ms.map(|ms| ms.div_ceil(1000))
    }
}

/// Decides whether a job may start. `retry_share` is the class's recent
/// share of admitted jobs that were retries or hedges, `retry_share_max`
/// its cap. A NaN anywhere compares as "not enough chance".
pub fn admit<R: Rng + ?Sized>(
    request: &AdmitRequest,
    view: &ClassView,
    policy: &AdmitPolicy,
    retry_share: f64,
    retry_share_max: f64,
    rng: &mut R,
) -> AdmitDecision {
    let queue_age_ms = match request.queue_age {
        QueueAge::AgeMs(age) => age,
        QueueAge::QueuedAtMs(at) => request.now_ms - at,
    };
    let s = &view.slack;
    let safety = policy.safety_ms.unwrap_or(s.safety_ms);
    let running = request.running.or(view.running);
    // Asked at arrival, the job has yet to wait for the work ahead of it.
    let expected_wait_ms = request.waiting_ahead.map(|ahead| view.ahead.map_or(0.0, |q| q.wait_ms(ahead, running)));
    let left = request.deadline_ms - request.now_ms - safety - expected_wait_ms.unwrap_or(0.0);
    // What the job spends queued: its predicted wait when asked on arrival.
    let waited_ms = expected_wait_ms.unwrap_or(queue_age_ms);
    let waits = match expected_wait_ms {
        Some(wait) => format!(" after a wait of ~{wait:.0} ms"),
        None => String::new(),
    };
    // The job's chance to be done within `ms` of starting: at its own size
    // where the server estimates it and the class knows how far off its
    // estimates run, else from the class's curve.
    let sized = request.estimated_service_ms.zip(view.estimate_error.as_ref());
    let chance_within = |ms: f64| match sized {
        Some((estimate, error)) => error.chance_within(estimate, ms),
        None => view.curve.p_within(ms),
    };
    let size = match (request.estimated_service_ms, sized) {
        (Some(estimate), Some(_)) => format!(" at its estimated {estimate:.0} ms"),
        (Some(_), None) => " (its estimate unused: the class has not learnt how far off estimates run)".into(),
        (None, _) => String::new(),
    };
    let p = chance_within(left);
    // A refusal gives the job's worker to a fresher job only where one is
    // waiting for it: a job behind it beyond the workers left free once it
    // starts. With none, the threshold is weighed by the chance that one
    // arrives to find every worker busy (see `control::contention`).
    let free_after = running.zip(view.ahead).map_or(0.0, |(running, q)| (q.workers - running - 1.0).max(0.0));
    let none_waiting =
        request.waiting_ahead.is_none() && request.waiting_behind.is_some_and(|behind| behind - free_after < 1.0);
    // A job judged at its own size can have a low chance without having
    // waited at all; refusing it helps only where its worker goes to another
    // job. Asked at start by a server that does not say what waits behind
    // it, its threshold is weighed by the same chance.
    let sized_unseen = sized.is_some() && request.waiting_ahead.is_none() && request.waiting_behind.is_none();
    let weigh = none_waiting || sized_unseen;
    let threshold = if weigh { s.threshold * view.contested } else { s.threshold };
    let weighed = if weigh && view.contested < 1.0 {
        let why =
            if none_waiting { "no job behind it waits for a worker" } else { "the server does not say what waits" };
        format!(" ({:.2} weighed by {:.2}, the chance every worker is busy: {why})", s.threshold, view.contested)
    } else {
        String::new()
    };
    let repeat = request.attempt > 1 || request.hedge;
    let (kind, kinds) = if request.hedge { ("hedge", "hedges") } else { ("retry", "retries") };
    let drain = s.queue_term_ms;
    // A tier's refusal, or a hold where the server can keep the job queued
    // (asked at start: on arrival the job is yet to queue).
    let (for_tier, after) = if request.can_hold && request.waiting_ahead.is_none() {
        (Verdict::Hold, "hold it and start the next job".to_string())
    } else {
        (Verdict::RejectTier, format!("queue drains in ~{drain:.0} ms"))
    };
    // A job whose chance would fall under the threshold in the wait for one
    // more start, on a worker that no job behind it would take: holding it
    // for a higher tier only idles that worker until the job's chance is gone.
    let last_chance = view.yields_to.is_some()
        && none_waiting
        && view.ahead.zip(running).is_some_and(|(q, running)| {
            running + 1.0 <= q.workers && chance_within(left - q.wait_ms(0.0, None)) < threshold
        });
    // The tick saw an idle backend, and this job's own wait and the
    // server's count of busy workers do not say otherwise.
    let idle = view.idle.is_some_and(|marks| marks.agree(queue_age_ms, request.waiting_ahead, running));
    let (verdict, over_ms, guarded, reason) = if p.is_nan() || p < threshold {
        if idle && p > 0.0 {
            (
                Verdict::Admit,
                0.0,
                true,
                format!("backend idle: admitted although its on-time chance {p:.2} < {threshold:.2}"),
            )
        } else {
            let why = format!(
                "on-time chance {p:.2}{size} < {threshold:.2}{weighed} with {left:.0} ms left{waits}; queue drains in ~{drain:.0} ms"
            );
            (Verdict::RejectDeadline, drain, false, why)
        }
    } else if let Some((reserve, running)) =
        view.reserve.zip(running).filter(|(r, running)| request.waiting_ahead.is_none() && !r.allows(*running))
    {
        let why = format!(
            "{running:.0} of {:.0} workers busy: {:.0} kept free for {} work; {after}",
            reserve.capacity,
            reserve.workers,
            reserve.for_tier.as_str()
        );
        (for_tier, drain, false, why)
    } else if let Some(higher) = view.yields_to.as_ref().filter(|_| !idle && !last_chance) {
        let why = format!("{higher}, of a higher tier, is missing deadlines: this tier waits; {after}");
        (for_tier, drain, false, why)
    } else if let Some(limit) = view.wait_limit.as_ref().filter(|l| !idle && waited_ms > l.wait_ms) {
        let why = format!(
            "waited {waited_ms:.0} ms, over the {:.0} ms {} of this tier can bear: its deadline is tighter and the queue is shared",
            limit.wait_ms, limit.for_class
        );
        (Verdict::RejectDeadline, drain, false, why)
    } else if queue_age_ms > policy.max_queue_age_ms {
        let why = format!("queued {queue_age_ms:.0} ms > {:.0} ms", policy.max_queue_age_ms);
        (Verdict::RejectStale, queue_age_ms - policy.max_queue_age_ms, false, why)
    } else if repeat && view.pressure {
        (Verdict::RejectRetry, drain, false, format!("capacity short: a {kind} is shed before first attempts"))
    } else if repeat && retry_share >= retry_share_max {
        let why = format!(
            "{kinds} are {:.0}% of admitted jobs, over their {:.0}% share",
            retry_share * 100.0,
            retry_share_max * 100.0
        );
        (Verdict::RejectBudget, 0.0, false, why)
    } else {
        let yielding = match &view.yields_to {
            Some(higher) if last_chance => format!(
                "; its last chance, on a worker no job waits for, though {higher} of a higher tier is missing deadlines"
            ),
            _ => String::new(),
        };
        (Verdict::Admit, 0.0, false, format!("on-time chance {p:.2}{size} >= {threshold:.2}{weighed}{waits}{yielding}"))
    };
    let retry_after_ms = verdict.http_status().is_some().then(|| retry_after(over_ms, policy, rng));
    AdmitDecision {
        verdict,
        slack_ms: request.deadline_ms - request.now_ms - s.service_term_ms,
        p_on_time: p,
        threshold,
        queue_age_ms,
        expected_wait_ms,
        retry_after_ms,
        guarded,
        reason,
    }
}

fn retry_after<R: Rng + ?Sized>(over_ms: f64, policy: &AdmitPolicy, rng: &mut R) -> u64 {
    let (lo, hi) = (policy.retry_after_min_ms as f64, policy.retry_after_max_ms as f64);
    let base = if over_ms.is_finite() { over_ms.clamp(lo, hi) } else { hi };
    let spread = if policy.jitter > 0.0 { rng.random_range(-policy.jitter..=policy.jitter) } else { 0.0 };
    (base * (1.0 + spread)).clamp(lo, hi).round() as u64
}

#[cfg(test)]
mod tests;
