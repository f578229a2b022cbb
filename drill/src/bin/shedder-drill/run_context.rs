//! What both sides of one mode's run share: the scaled workload, the job
//! plan (the backend and the load generator compute nothing else in common),
//! and the run's clock.

use std::time::Duration;

use shedder_drill::{
    plan::{PlannedJob, plan_jobs},
    workload::Workload,
};
use tokio::time::Instant;

pub struct RunContext {
    /// The workload at the run's time scale: every time in it is already × K.
    pub scaled: Workload,
    pub time_scale: f64,
    pub plan: Vec<PlannedJob>,
    /// Time 0 of the run: the plan's arrivals count from here.
    pub t0: Instant,
    /// How many tenants the classes before each class have.
    tenants_before: Vec<usize>,
}

impl RunContext {
    /// Starts the clock `lead` from now, so that both sides are ready at 0.
    pub fn new(workload: &Workload, time_scale: f64, seed: u64, lead: Duration) -> Self {
        let scaled = workload.scaled(time_scale);
        let plan = plan_jobs(&scaled, seed);
        let tenants_before = scaled
            .classes
            .iter()
            .scan(0, |before, class| {
                let this = *before;
                *before += class.tenants.len();
                Some(this)
            })
            .collect();
        Self { scaled, time_scale, plan, t0: Instant::now() + lead, tenants_before }
    }

    /// A tenant's number across all classes (see [`crate::tenants`]).
    pub fn tenant_number(&self, class: usize, tenant: usize) -> usize {
        self.tenants_before[class] + tenant
    }

    /// Milliseconds since time 0 (negative before it).
    pub fn now_ms(&self) -> f64 {
        let now = Instant::now();
        if now >= self.t0 { (now - self.t0).as_secs_f64() * 1000.0 } else { -(self.t0 - now).as_secs_f64() * 1000.0 }
    }

    /// The instant `ms` after time 0.
    pub fn at(&self, ms: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(ms.max(0.0) / 1000.0)
    }

    /// A job's absolute deadline, ms on the run's clock.
    pub fn deadline_ms(&self, job: &PlannedJob) -> f64 {
        job.arrival_ms + self.scaled.classes[job.class].deadline_ms
    }

    /// When the run ends: the last arrival's deadline. A job still unanswered
    /// then is late, and the client stops waiting for it.
    pub fn end_ms(&self) -> f64 {
        let longest = self.scaled.classes.iter().map(|c| c.deadline_ms).fold(0.0, f64::max);
        self.scaled.duration_seconds * 1000.0 + longest
    }

    /// A duration in the workload's seconds (`Retry-After`) on the run's clock.
    pub fn workload_seconds(&self, seconds: f64) -> Duration {
        Duration::from_secs_f64(seconds * self.time_scale)
    }
}
