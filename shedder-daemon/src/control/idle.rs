//! The sanity guard's test for an idle backend: a short queue and workers
//! to spare. A refusal then is the model being wrong (a margin or a prior
//! too tight), not overload, so the class stays open and `admit` admits.
//!
//! The tick judges from the estimates, which can be blind: a backend that
//! finishes fewer jobs per window than the estimator needs has no measured
//! work rate, and its queue reads as its prior's. So `admit` also asks the
//! job itself ([`IdleMarks::agree`]): a job that waited behind others, or a
//! server that says its workers are taken, is not on an idle backend.

use serde::Serialize;

use super::params::ControlParams;
use super::slack::Slack;

/// What the tick called idle by, for `admit` to check a job against.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct IdleMarks {
    /// A wait longer than this is a backlog, ms.
    pub backlog_ms: f64,
    /// Jobs in service (the asking one included) below this are a lightly
    /// loaded backend.
    pub light_load: f64,
}

impl IdleMarks {
    /// Whether a job that waited `queue_age_ms`, asked with `waiting_ahead`
    /// jobs queued before it and `running` in service (when the server
    /// says), agrees that the backend is idle.
    pub fn agree(&self, queue_age_ms: f64, waiting_ahead: Option<f64>, running: Option<f64>) -> bool {
        queue_age_ms <= self.backlog_ms
            && waiting_ahead.is_none_or(|ahead| ahead < 1.0)
            && running.is_none_or(|running| running + 1.0 < self.light_load)
    }
}

/// A queue term above this is a backlog: the workers are all busy.
pub fn backlog_ms(p: &ControlParams, s: &Slack) -> f64 {
    (p.tick_ms as f64).min(0.05 * s.deadline_ms)
}

/// The marks, when `s`'s queue is short and under `idle_fraction` of
/// `capacity` is `busy`.
pub fn idle_backend(p: &ControlParams, s: &Slack, busy: f64, capacity: f64) -> Option<IdleMarks> {
    let marks = IdleMarks { backlog_ms: backlog_ms(p, s), light_load: p.idle_fraction * capacity };
    (s.queue_term_ms <= marks.backlog_ms && busy < marks.light_load).then_some(marks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_agrees_the_backend_is_idle_only_if_it_did_not_wait_for_one() {
        // 8 workers, half of them the light-load mark; a 25 ms backlog mark.
        let marks = IdleMarks { backlog_ms: 25.0, light_load: 4.0 };
        // (queue age, jobs ahead, others running, agrees)
        let rows = [
            (0.0, None, None, true),
            (25.0, None, Some(2.0), true),
            (26.0, None, None, false),         // it queued behind others
            (1_300.0, None, Some(0.0), false), // however free the workers are now
            (0.0, Some(0.0), Some(1.0), true),
            (0.0, Some(3.0), None, false), // asked on arrival, with a queue ahead
            (0.0, None, Some(3.0), false), // four busy with it: not lightly loaded
        ];
        for (age, ahead, running, agrees) in rows {
            assert_eq!(marks.agree(age, ahead, running), agrees, "{age} ms, {ahead:?} ahead, {running:?} running");
        }
    }
}
