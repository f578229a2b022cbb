//! The shared backend's capacity, in worker-seconds per second.
//!
//! With `[backend] workers = W` configured, the capacity is W: W workers
//! give W worker-seconds each second, whatever the jobs' sizes (the sizes
//! are in each class's mean service time, which turns worker-seconds into
//! jobs). Without it, the capacity is learnt from what the servers report
//! of the workers in use ([`busy_workers`]): the requests a scraped server
//! says it is running now (each holds a worker), or else, from completions,
//! `completions/s × mean service` (each completion cost its service time).
//! While a real backlog stands the workers are all busy, so the workers in
//! use *are* the capacity. The learnt
//! figure averages the backlogged ticks (time constant
//! [`LEARN_TIME_CONSTANT_S`]: one tick's reading of the work done is noisy),
//! without a backlog it never stays below work seen done, and while
//! admission is being limited with no backlog in sight (the figure is too
//! low) it is probed upwards by [`PROBE_PER_S`] a second. It is never below
//! the workers seen busy at once as a job started (a server that asks
//! `admit` at start says how many jobs it has in service): work done is
//! noisy on a few workers (an idle moment reads as a smaller backend), a
//! count of jobs in service is not. Before any backlog it is what the
//! classes' `max_rate`s would bring: no limit of its own.

use serde::Serialize;

/// How fast the learnt capacity follows new backlogged measurements.
pub const LEARN_TIME_CONSTANT_S: f64 = 5.0;
/// How fast a learnt capacity grows while admission is limited without a backlog.
pub const PROBE_PER_S: f64 = 0.05;

/// Where a capacity figure came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacitySource {
    /// Work done while a backlog stood.
    Learnt,
    /// `[backend] workers`.
    Configured,
    /// Neither: what the classes' `max_rate`s would bring.
    MaxRates,
}

impl CapacitySource {
    pub fn as_str(self) -> &'static str {
        match self {
            CapacitySource::Learnt => "learnt",
            CapacitySource::Configured => "configured",
            CapacitySource::MaxRates => "max rates",
        }
    }
}

/// Worker-seconds per second one class uses: the running requests a
/// scrape reports, when it gives them (a gauge, exact and live), else the
/// work its completions did (`drain rate × mean service`, which a
/// histogram's coarse buckets can overstate).
pub fn busy_workers(running: Option<u64>, drain_rate_per_s: Option<f64>, mean_service_ms: f64) -> f64 {
    match running {
        Some(running) => running as f64,
        None => drain_rate_per_s.unwrap_or(0.0) * mean_service_ms / 1000.0,
    }
}

/// The learnt part of the model.
#[derive(Clone, Debug, Default)]
pub struct CapacityModel {
    learnt: Option<f64>,
}

impl CapacityModel {
    /// One tick's measurement: `busy` worker-seconds per second done,
    /// whether a backlog stood, and whether admission was being limited.
    pub fn update(&mut self, busy: f64, backlogged: bool, limiting: bool, dt_s: f64) {
        if !(busy.is_finite() && busy > 0.0) {
            return;
        }
        self.learnt = match (self.learnt, backlogged) {
            (None, true) => Some(busy),
            (Some(c), true) => {
                let alpha = (dt_s / LEARN_TIME_CONSTANT_S).clamp(0.0, 1.0);
                Some(c + alpha * (busy - c))
            }
            // Without a backlog the work done is only a lower bound, and a
            // limit with no backlog behind it is a figure too low.
            (Some(c), false) => {
                let probed = if limiting { c * (1.0 + PROBE_PER_S * dt_s.clamp(0.0, 1.0)) } else { c };
                Some(probed.max(busy))
            }
            (None, false) => None,
        };
    }

    /// The capacity to plan with, and where it came from; `seen`: the most
    /// workers seen in use at once, which a learnt figure is never below.
    pub fn capacity(&self, configured: Option<f64>, max_rates: f64, seen: Option<f64>) -> (f64, CapacitySource) {
        match (configured, self.learnt) {
            (Some(w), _) => (w, CapacitySource::Configured),
            (None, Some(c)) => (c.max(seen.unwrap_or(0.0)), CapacitySource::Learnt),
            (None, None) => (max_rates, CapacitySource::MaxRates),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_configured_or_learnt_under_a_backlog() {
        let mut m = CapacityModel::default();
        assert_eq!(m.capacity(Some(8.0), 20.0, None), (8.0, CapacitySource::Configured));
        assert_eq!(m.capacity(None, 20.0, None), (20.0, CapacitySource::MaxRates));
        // Idle work says nothing about the ceiling.
        m.update(3.0, false, false, 0.1);
        assert_eq!(m.capacity(None, 20.0, None).1, CapacitySource::MaxRates);
        // A backlog: the work done is the capacity; a configured count still wins.
        m.update(7.0, true, false, 0.1);
        assert_eq!(m.capacity(None, 20.0, None), (7.0, CapacitySource::Learnt));
        assert_eq!(m.capacity(Some(8.0), 20.0, None), (8.0, CapacitySource::Configured));
        // It follows further backlogged readings with a 5 s time constant...
        for _ in 0..50 {
            m.update(7.5, true, false, 0.1);
        }
        let (c, _) = m.capacity(None, 0.0, None);
        assert!((c - (7.5 - 0.5 * (1.0 - 0.1_f64 / 5.0).powi(50))).abs() < 1e-9, "{c}");
        // ...never stays below work seen done...
        m.update(9.0, false, false, 0.1);
        assert_eq!(m.capacity(None, 0.0, None).0, 9.0);
        // ...and grows while it limits admission with no backlog.
        m.update(1.0, false, true, 1.0);
        assert!((m.capacity(None, 0.0, None).0 - 9.45).abs() < 1e-9);
        // Nonsense readings change nothing.
        for bad in [f64::NAN, -1.0, 0.0, f64::INFINITY] {
            m.update(bad, true, false, 0.1);
            assert!((m.capacity(None, 0.0, None).0 - 9.45).abs() < 1e-9);
        }
        // Ten workers seen busy at once as a job started: at least ten,
        // whatever the work done reads; fewer seen changes nothing.
        assert_eq!(m.capacity(None, 0.0, Some(10.0)), (10.0, CapacitySource::Learnt));
        assert!((m.capacity(None, 0.0, Some(3.0)).0 - 9.45).abs() < 1e-9);
        assert_eq!(m.capacity(Some(8.0), 20.0, Some(10.0)), (8.0, CapacitySource::Configured));
    }
}
