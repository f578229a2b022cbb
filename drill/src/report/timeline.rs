//! One run as one-second bins on the workload's clock: what the plot draws,
//! and where the slack crossing and the drain are read from.

use serde::{Deserialize, Serialize};

use super::quantile::quantile;
use crate::record::{JobRecord, Outcome, RunRecord};

/// One second of one run. Outcomes count in the second the client learned
/// them; queue age and slack in the second a worker took the job (arrival +
/// queue age); budgets as the last poll up to the end of the second left them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeBin {
    pub start_s: f64,
    pub on_time: u32,
    pub late: u32,
    /// Rejected, answered 503 (deadline or mark), or deferred until the
    /// deadline passed.
    pub turned_away: u32,
    pub queue_age_p95_ms: Option<f64>,
    /// 10th percentile of the jobs' slack when a worker took them.
    pub slack_p10_ms: Option<f64>,
    /// Sum of the classes' fast-path budgets, connections/s.
    pub budget_per_s: Option<f64>,
}

/// `bins` one-second bins from 0 s; later events are left out.
pub fn bin_run(run: &RunRecord, bins: usize) -> Vec<TimeBin> {
    let bin_of = |t_ms: f64| (t_ms >= 0.0).then(|| (t_ms / 1000.0) as usize).filter(|&b| b < bins);
    let mut counts = vec![(0u32, 0u32, 0u32); bins];
    let mut started: Vec<Vec<&JobRecord>> = vec![Vec::new(); bins];
    for job in &run.jobs {
        if let Some(bin) = bin_of(job.finished_ms) {
            let (on_time, late, turned_away) = &mut counts[bin];
            match job.outcome {
                Outcome::OnTime => *on_time += 1,
                Outcome::Late => *late += 1,
                Outcome::Rejected
                | Outcome::RejectedDeadline
                | Outcome::DeferredTimedOut
                | Outcome::Degraded
                | Outcome::Overloaded => *turned_away += 1,
                // Not a completion, and not turned away: it shows as queue age.
                Outcome::Unfinished | Outcome::Failed => {}
            }
        }
        if let Some(bin) = job.queue_age_ms.and_then(|age| bin_of(job.arrival_ms + age)) {
            started[bin].push(job);
        }
    }
    let classes = run.timeline.iter().map(|p| p.class + 1).max().unwrap_or(0);
    (0..bins)
        .map(|bin| {
            let (on_time, late, turned_away) = counts[bin];
            let jobs = &started[bin];
            TimeBin {
                start_s: bin as f64,
                on_time,
                late,
                turned_away,
                queue_age_p95_ms: quantile(jobs.iter().filter_map(|j| j.queue_age_ms), 0.95),
                slack_p10_ms: quantile(jobs.iter().filter_map(|j| j.slack_at_start_ms), 0.10),
                budget_per_s: budget_in(run, bin, classes),
            }
        })
        .collect()
}

/// The classes' budgets at their latest poll up to the end of the bin,
/// summed: a budget holds between polls (which may be further apart than a
/// second on the workload's clock), until the class's last poll. `None` when
/// no class had a budget then.
fn budget_in(run: &RunRecord, bin: usize, classes: usize) -> Option<f64> {
    let (start_ms, end_ms) = (bin as f64 * 1000.0, (bin + 1) as f64 * 1000.0);
    let held_budget = |class: usize| {
        let polls = run.timeline.iter().filter(move |p| p.class == class);
        let still_polled = polls.clone().any(|p| p.t_ms >= start_ms);
        let latest = polls.filter(|p| p.t_ms < end_ms).max_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        latest.filter(|_| still_polled).and_then(|p| p.budget_rate)
    };
    let budgets: Vec<f64> = (0..classes).filter_map(held_budget).collect();
    (!budgets.is_empty()).then(|| budgets.iter().sum())
}

/// Start of the first second whose slack_p10 is below zero: from then on,
/// one job in ten could no longer finish on time when it started.
pub fn first_negative_slack_s(bins: &[TimeBin]) -> Option<f64> {
    bins.iter().find(|b| b.slack_p10_ms.is_some_and(|s| s < 0.0)).map(|b| b.start_s)
}

/// Seconds from `removed_s` to the start of the first second at or after it
/// whose queue_age_p95 is at most `threshold_ms`. Seconds in which no job
/// started say nothing and are skipped.
pub fn drained_after_s(bins: &[TimeBin], removed_s: f64, threshold_ms: f64) -> Option<f64> {
    bins.iter()
        .filter(|b| b.start_s >= removed_s)
        .find(|b| b.queue_age_p95_ms.is_some_and(|age| age <= threshold_ms))
        .map(|b| b.start_s - removed_s)
}

/// Late completions as a share of completions over `[from_s, to_s)`.
pub fn late_share_between(bins: &[TimeBin], from_s: f64, to_s: f64) -> Option<f64> {
    let window = bins.iter().filter(|b| b.start_s >= from_s && b.start_s < to_s);
    let (late, completed) = window.fold((0u64, 0u64), |(late, done), b| {
        (late + u64::from(b.late), done + u64::from(b.late) + u64::from(b.on_time))
    });
    (completed > 0).then(|| late as f64 / completed as f64)
}

/// Late completions per second over `[from_s, to_s)`.
pub fn late_per_s_between(bins: &[TimeBin], from_s: f64, to_s: f64) -> f64 {
    let late: u64 = bins.iter().filter(|b| b.start_s >= from_s && b.start_s < to_s).map(|b| u64::from(b.late)).sum();
    late as f64 / (to_s - from_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::TimelinePoint;

    fn job(
        outcome: Outcome,
        arrival_ms: f64,
        finished_ms: f64,
        queue_age_ms: Option<f64>,
        slack: Option<f64>,
    ) -> JobRecord {
        JobRecord {
            class: 0,
            arrival_ms,
            finished_ms,
            outcome,
            attempts: 1,
            queue_age_ms,
            service_ms: None,
            slack_at_start_ms: slack,
            injected: false,
            tenant: None,
            hedged: false,
        }
    }

    fn budget(class: usize, t_ms: f64, rate: f64) -> TimelinePoint {
        TimelinePoint {
            t_ms,
            class,
            budget_rate: Some(rate),
            slack_ms: None,
            queue_age_p95_ms: None,
            service_p95_ms: None,
            admitted: 0,
            dropped: 0,
            rejected: 0,
            marked: 0,
            would_shed: 0,
        }
    }

    fn run() -> RunRecord {
        RunRecord {
            mode: "enforce".into(),
            jobs: vec![
                job(Outcome::OnTime, 100.0, 500.0, Some(50.0), Some(900.0)),
                job(Outcome::OnTime, 200.0, 1200.0, Some(900.0), Some(-10.0)),
                job(Outcome::Late, 300.0, 2500.0, Some(1500.0), Some(-200.0)),
                job(Outcome::Rejected, 1100.0, 1101.0, None, None),
                job(Outcome::RejectedDeadline, 1200.0, 1210.0, Some(700.0), None),
                job(Outcome::OnTime, 2100.0, 9000.0, Some(10.0), Some(5.0)),
            ],
            timeline: vec![
                budget(0, 500.0, 10.0),
                budget(0, 900.0, 12.0),
                budget(1, 800.0, 3.0),
                budget(0, 2100.0, 8.0),
            ],
            static_rates: vec![],
            telemetry: None,
        }
    }

    #[test]
    fn outcomes_count_when_learned_and_queue_age_when_started() {
        let bins = bin_run(&run(), 3);
        let counts: Vec<_> = bins.iter().map(|b| (b.on_time, b.late, b.turned_away)).collect();
        // The job finishing at 9000 ms is past the third second: left out.
        assert_eq!(counts, [(1, 0, 0), (1, 0, 2), (0, 1, 0)]);
        // Started at 150 ms; at 1100, 1800 and 1900 ms (the 503 too); at 2110 ms.
        let ages: Vec<_> = bins.iter().map(|b| b.queue_age_p95_ms).collect();
        assert_eq!(ages, [Some(50.0), Some(1500.0), Some(10.0)]);
        let slack: Vec<_> = bins.iter().map(|b| b.slack_p10_ms).collect();
        assert_eq!(slack, [Some(900.0), Some(-200.0), Some(5.0)]);
    }

    #[test]
    fn the_budget_is_each_class_latest_poll_summed_and_held_until_its_last() {
        let budgets: Vec<_> = bin_run(&run(), 4).iter().map(|b| b.budget_per_s).collect();
        // Class 1 was last polled at 800 ms; class 0 holds 12 through the
        // second without a poll, and 8 after its last poll, at 2100 ms.
        assert_eq!(budgets, [Some(12.0 + 3.0), Some(12.0), Some(8.0), None]);
    }

    #[test]
    fn slack_crossing_drain_and_late_share_read_the_bins() {
        let bins = bin_run(&run(), 3);
        assert_eq!(first_negative_slack_s(&bins), Some(1.0));
        assert_eq!(drained_after_s(&bins, 1.0, 1500.0), Some(0.0));
        assert_eq!(drained_after_s(&bins, 1.0, 100.0), Some(1.0));
        assert_eq!(drained_after_s(&bins, 1.0, 5.0), None);
        assert_eq!(late_share_between(&bins, 1.0, 3.0), Some(0.5));
        assert_eq!(late_share_between(&bins, 0.0, 1.0), Some(0.0));
        assert_eq!(late_per_s_between(&bins, 1.0, 3.0), 0.5);
        assert_eq!(first_negative_slack_s(&bins[..1]), None);
    }
}
