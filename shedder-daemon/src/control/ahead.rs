//! The wait a job can expect from the work queued ahead of it: what `admit`
//! judges a job by when the server asks as the job arrives, before it
//! queues.
//!
//! A rate at the NIC cannot keep a queue both short and fed: Poisson
//! arrivals at the capacity's rate leave workers idle one second and a
//! queue past the deadline the next. A server that asks at arrival with
//! the number of jobs already waiting lets the queue itself decide: a job
//! joins while the wait ahead leaves it its chance, and is refused at once
//! (not after the wait) when it does not.
//!
//! With every worker busy a FIFO queue starts one job each time one
//! finishes, on average every `E[S] / c` (`E[S]` the mean service of the
//! mix of work the backend serves, `c` its workers). A job with `ahead`
//! jobs waiting in front of it and `free` idle workers starts after
//! `ahead + 1 − free` such starts:
//!
//! ```text
//! wait ≈ max(0, ahead + 1 − free) · E[S] / c
//! ```
//!
//! A mean, not a bound: a job that waits longer than predicted is judged
//! again, on its real wait, when a worker takes it.

use serde::Serialize;

/// What the predicted wait is made of at the last tick.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct QueueAhead {
    /// The backend's workers (its capacity, worker-seconds per second).
    pub workers: f64,
    /// Mean service time of the mix of work offered now, ms.
    pub mean_service_ms: f64,
}

impl QueueAhead {
    /// The model for a backend of `workers` serving jobs of `mean_service_ms`
    /// on average, or None when either is unknown.
    pub fn new(workers: f64, mean_service_ms: f64) -> Option<QueueAhead> {
        let known = workers.is_finite() && workers > 0.0 && mean_service_ms.is_finite() && mean_service_ms > 0.0;
        known.then_some(QueueAhead { workers, mean_service_ms })
    }

    /// The expected wait, ms, of a job with `ahead` jobs queued in front of
    /// it and `running` in service (unknown: every worker taken).
    pub fn wait_ms(&self, ahead: f64, running: Option<f64>) -> f64 {
        let free = running.map_or(0.0, |r| (self.workers - r).max(0.0));
        (ahead + 1.0 - free).max(0.0) * self.mean_service_ms / self.workers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_waits_for_the_starts_ahead_of_it() {
        // 8 workers, 400 ms mean service: a start every 50 ms while all are busy.
        let q = QueueAhead::new(8.0, 400.0).expect("a model");
        // (ahead, running, expected wait ms)
        let rows: &[(f64, Option<f64>, f64)] = &[
            (0.0, Some(3.0), 0.0),    // a free worker takes it at once
            (4.0, Some(3.0), 0.0),    // five free workers, four jobs ahead
            (5.0, Some(3.0), 50.0),   // the sixth waits for one start
            (0.0, Some(8.0), 50.0),   // all busy: the next finish
            (15.0, Some(8.0), 800.0), // 16 starts at 50 ms
            (15.0, None, 800.0),      // unknown: as if every worker were taken
            (0.0, Some(12.0), 50.0),  // more running than workers: none free
        ];
        for &(ahead, running, wait) in rows {
            assert!((q.wait_ms(ahead, running) - wait).abs() < 1e-9, "{ahead} ahead, {running:?} running");
        }
        assert_eq!(QueueAhead::new(f64::INFINITY, 400.0), None, "no known capacity");
        assert_eq!(QueueAhead::new(8.0, 0.0), None, "no service measured");
    }
}
