//! What one phase of one mode came to: outcomes of the jobs that arrived in
//! it, their latency, and the fast path's counters over it.

use serde::{Deserialize, Serialize};

use super::quantile::{quantile, quantiles};
use crate::record::{JobRecord, Outcome, TimelinePoint};

/// Figures of the jobs that arrived in one phase, on the workload's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseFigures {
    pub duration_s: f64,
    /// Jobs that arrived in the phase; each ends in exactly one outcome below.
    pub offered: u64,
    /// The primary figure: jobs completed by their deadline.
    pub completed_on_time: u64,
    pub on_time_per_s: f64,
    pub late: u64,
    /// Refused at connect (RST).
    pub rejected: u64,
    pub deferred_timed_out: u64,
    pub degraded: u64,
    /// Refused by shedder's job admission (any refusal of `admit`, counted as `reject_deadline`).
    pub rejected_deadline: u64,
    /// Answered 503 by the backend's own overload policy (peer modes).
    #[serde(default)]
    pub overloaded: u64,
    /// Admitted but still unanswered when the run ended.
    pub unfinished: u64,
    pub failed: u64,
    /// Jobs turned away: rejected + deferred_timed_out + degraded +
    /// rejected_deadline + overloaded.
    pub shed: u64,
    /// Jobs that missed their deadline after being admitted (completed late,
    /// or unfinished when the run ended) as a share of all admitted jobs
    /// (completed or unfinished).
    pub late_share_of_admitted: Option<f64>,
    /// Of completions (on time or late): finished − arrival.
    pub latency: Option<Latency>,
    pub queue_age_p95_ms: Option<f64>,
    /// The service-blind bound for this phase, jobs/s.
    pub bound_per_s: f64,
    /// on_time_per_s / bound_per_s.
    pub share_of_bound: f64,
    /// The clairvoyant oracle for this phase, jobs/s.
    pub oracle_per_s: f64,
    /// on_time_per_s / oracle_per_s.
    pub share_of_oracle: f64,
    /// What the fast path counted over the phase (by when it counted); none
    /// when no daemon ran (`off`, `static`).
    pub fast_path: Option<FastPathCounts>,
}

/// The bounds that apply to a set of jobs, in jobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseBound {
    pub blind: f64,
    pub oracle: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
}

/// SYNs the fast path counted, summed over the classes it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FastPathCounts {
    pub admitted: u64,
    pub dropped: u64,
    pub rejected: u64,
    pub marked: u64,
    /// What observe mode would have shed.
    pub would_shed: u64,
}

impl FastPathCounts {
    /// SYNs the fast path actually acted on.
    pub fn shed(&self) -> u64 {
        self.dropped + self.rejected + self.marked
    }

    fn of(point: &TimelinePoint) -> Self {
        Self {
            admitted: point.admitted,
            dropped: point.dropped,
            rejected: point.rejected,
            marked: point.marked,
            would_shed: point.would_shed,
        }
    }

    fn add(self, other: Self) -> Self {
        Self {
            admitted: self.admitted + other.admitted,
            dropped: self.dropped + other.dropped,
            rejected: self.rejected + other.rejected,
            marked: self.marked + other.marked,
            would_shed: self.would_shed + other.would_shed,
        }
    }

    /// Counter growth from `self` to `later`; a daemon restart (counters
    /// going backwards) counts as no growth rather than wrapping.
    fn growth_to(self, later: Self) -> Self {
        Self {
            admitted: later.admitted.saturating_sub(self.admitted),
            dropped: later.dropped.saturating_sub(self.dropped),
            rejected: later.rejected.saturating_sub(self.rejected),
            marked: later.marked.saturating_sub(self.marked),
            would_shed: later.would_shed.saturating_sub(self.would_shed),
        }
    }
}

/// Growth of the cumulative counters of `classes` between `start_ms` and
/// `end_ms`, each read from the class's last poll at or before the moment
/// (zero before its first). `None` if those classes were never polled.
pub fn fast_path_over(
    timeline: &[TimelinePoint],
    classes: &[usize],
    start_ms: f64,
    end_ms: f64,
) -> Option<FastPathCounts> {
    let polled = |class: usize| timeline.iter().filter(move |p| p.class == class);
    if classes.iter().all(|&c| polled(c).next().is_none()) {
        return None;
    }
    let at = |class: usize, t_ms: f64| {
        polled(class).filter(|p| p.t_ms <= t_ms).max_by(|a, b| a.t_ms.total_cmp(&b.t_ms)).map(FastPathCounts::of)
    };
    let total = classes.iter().fold(FastPathCounts::default(), |sum, &class| {
        let before = at(class, start_ms).unwrap_or_default();
        sum.add(before.growth_to(at(class, end_ms).unwrap_or_default()))
    });
    Some(total)
}

impl PhaseFigures {
    pub fn of(jobs: &[&JobRecord], duration_s: f64, bound: PhaseBound, fast_path: Option<FastPathCounts>) -> Self {
        let count = |outcome: Outcome| jobs.iter().filter(|j| j.outcome == outcome).count() as u64;
        let completed_on_time = count(Outcome::OnTime);
        let late = count(Outcome::Late);
        let (rejected, deferred_timed_out, degraded, rejected_deadline) = (
            count(Outcome::Rejected),
            count(Outcome::DeferredTimedOut),
            count(Outcome::Degraded),
            count(Outcome::RejectedDeadline),
        );
        let completions = jobs.iter().filter(|j| matches!(j.outcome, Outcome::OnTime | Outcome::Late));
        let latency = quantiles(completions.map(|j| j.finished_ms - j.arrival_ms), &[0.50, 0.95, 0.99])
            .map(|q| Latency { p50_ms: q[0], p95_ms: q[1], p99_ms: q[2] });
        let unfinished = count(Outcome::Unfinished);
        let overloaded = count(Outcome::Overloaded);
        let admitted = completed_on_time + late + unfinished;
        let on_time_per_s = completed_on_time as f64 / duration_s;
        Self {
            duration_s,
            offered: jobs.len() as u64,
            completed_on_time,
            on_time_per_s,
            late,
            rejected,
            deferred_timed_out,
            degraded,
            rejected_deadline,
            overloaded,
            unfinished,
            failed: count(Outcome::Failed),
            shed: rejected + deferred_timed_out + degraded + rejected_deadline + overloaded,
            late_share_of_admitted: (admitted > 0).then(|| (late + unfinished) as f64 / admitted as f64),
            latency,
            queue_age_p95_ms: quantile(jobs.iter().filter_map(|j| j.queue_age_ms), 0.95),
            bound_per_s: bound.blind / duration_s,
            share_of_bound: share(completed_on_time as f64, bound.blind),
            oracle_per_s: bound.oracle / duration_s,
            share_of_oracle: share(completed_on_time as f64, bound.oracle),
            fast_path,
        }
    }

    /// Rate of the backend's deadline refusals, per second.
    pub fn rejected_deadline_per_s(&self) -> f64 {
        self.rejected_deadline as f64 / self.duration_s
    }
}

/// `part / whole`; a bound of no jobs is met by none (0).
pub fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(outcome: Outcome, arrival_ms: f64, finished_ms: f64, queue_age_ms: Option<f64>) -> JobRecord {
        JobRecord {
            class: 0,
            arrival_ms,
            finished_ms,
            outcome,
            attempts: 1,
            queue_age_ms,
            service_ms: queue_age_ms.map(|_| 100.0),
            slack_at_start_ms: None,
            injected: false,
            tenant: None,
            hedged: false,
        }
    }

    fn point(class: usize, t_ms: f64, admitted: u64, rejected: u64) -> TimelinePoint {
        TimelinePoint {
            t_ms,
            class,
            budget_rate: None,
            slack_ms: None,
            queue_age_p95_ms: None,
            service_p95_ms: None,
            admitted,
            dropped: 0,
            rejected,
            marked: 0,
            would_shed: 0,
        }
    }

    #[test]
    fn outcomes_latency_and_shares_of_a_hand_made_phase() {
        let jobs = [
            job(Outcome::OnTime, 0.0, 100.0, Some(0.0)),
            job(Outcome::OnTime, 0.0, 200.0, Some(10.0)),
            job(Outcome::OnTime, 0.0, 300.0, Some(20.0)),
            job(Outcome::Late, 0.0, 4000.0, Some(3000.0)),
            job(Outcome::Rejected, 0.0, 1.0, None),
            job(Outcome::RejectedDeadline, 0.0, 5.0, None),
            job(Outcome::DeferredTimedOut, 0.0, 3000.0, None),
            job(Outcome::Degraded, 0.0, 5.0, None),
            job(Outcome::Failed, 0.0, 5.0, None),
            job(Outcome::Unfinished, 0.0, 9000.0, None),
            job(Outcome::Overloaded, 0.0, 2.0, None),
        ];
        let refs: Vec<_> = jobs.iter().collect();
        let f = PhaseFigures::of(&refs, 2.0, PhaseBound { blind: 6.0, oracle: 10.0 }, None);
        assert_eq!((f.offered, f.completed_on_time, f.late, f.unfinished, f.failed), (11, 3, 1, 1, 1));
        assert_eq!((f.rejected, f.rejected_deadline, f.deferred_timed_out, f.degraded), (1, 1, 1, 1));
        assert_eq!((f.overloaded, f.shed), (1, 5));
        assert_eq!(f.on_time_per_s, 1.5);
        assert_eq!((f.bound_per_s, f.share_of_bound), (3.0, 0.5));
        assert_eq!((f.oracle_per_s, f.share_of_oracle), (5.0, 0.3));
        // Late or unfinished, of on time + late + unfinished.
        assert_eq!(f.late_share_of_admitted, Some(0.4));
        assert_eq!(f.latency, Some(Latency { p50_ms: 200.0, p95_ms: 4000.0, p99_ms: 4000.0 }));
        assert_eq!(f.queue_age_p95_ms, Some(3000.0));
        assert_eq!(f.rejected_deadline_per_s(), 0.5);
    }

    #[test]
    fn a_phase_without_completions_has_no_latency_and_no_late_share() {
        let jobs = [job(Outcome::Rejected, 0.0, 1.0, None)];
        let f = PhaseFigures::of(&[&jobs[0]], 1.0, PhaseBound { blind: 10.0, oracle: 0.0 }, None);
        assert_eq!((f.latency, f.late_share_of_admitted, f.queue_age_p95_ms), (None, None, None));
        assert_eq!((f.share_of_bound, f.share_of_oracle), (0.0, 0.0));
    }

    #[test]
    fn fast_path_counters_grow_between_the_last_polls_before_each_boundary() {
        let timeline = [
            point(0, 0.0, 0, 0),
            point(0, 900.0, 10, 0),
            point(0, 1000.0, 12, 1),
            point(0, 1900.0, 30, 7),
            point(1, 1500.0, 5, 2),
            point(1, 2500.0, 9, 3),
        ];
        let counts = |classes: &[usize], start, end| fast_path_over(&timeline, classes, start, end).unwrap();
        // Class 0 from its poll at 1000 ms (12, 1) to its poll at 1900 ms (30, 7).
        assert_eq!((counts(&[0], 1000.0, 2000.0).admitted, counts(&[0], 1000.0, 2000.0).rejected), (18, 6));
        // Class 1 was first polled after 1000 ms: it counts from zero.
        let both = counts(&[0, 1], 1000.0, f64::INFINITY);
        assert_eq!((both.admitted, both.rejected, both.shed()), (18 + 9, 6 + 3, 9));
        assert_eq!(fast_path_over(&timeline, &[2], 0.0, 1.0), None);
    }

    #[test]
    fn a_counter_that_goes_backwards_counts_as_no_growth() {
        let timeline = [point(0, 0.0, 50, 5), point(0, 1000.0, 3, 0)];
        assert_eq!(fast_path_over(&timeline, &[0], 0.0, 1000.0), Some(FastPathCounts::default()));
    }
}
