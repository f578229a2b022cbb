//! What job-level admission decided, per class: the refusals (each one a
//! connection the fast path let in for nothing: a *wasted admission*) and
//! the recent share of admitted jobs that were retries or hedges.
//!
//! A refused job also waited: its queue age goes to the estimators like
//! any other (a queue-age p95 of started jobs alone would hide exactly the
//! waits that were too long).
//!
//! The `admit` op writes here (through `&self`: it runs between ticks, one
//! op at a time); the control loop reads the refusal counts each tick to
//! turn them into rates, takes the refused jobs' waits and how many jobs a
//! server had in service as each job started, and decays the retry share.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use super::{AdmitDecision, Verdict};

/// How long the retry share remembers, s (an exponential time constant).
pub const RETRY_SHARE_TIME_CONSTANT_S: f64 = 10.0;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct ClassLedger {
    /// Refusals since the daemon started.
    refused: u64,
    /// Of those, the jobs refused as they started: each one trimmed from
    /// the server's queue rather than kept out of it.
    refused_at_start: u64,
    /// Admissions guarded by the sanity guard since the start.
    guarded: u64,
    /// Decayed counts of admitted first attempts and of retries/hedges.
    first: f64,
    repeat: f64,
}

/// When the server asked about a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// As it arrived, before it queued: a job let in here is asked again
    /// when it starts, so only a refusal counts, and it has not waited.
    OnArrival,
    /// As a worker took it.
    AtStart,
}

/// Refused jobs' waits kept between ticks at most; beyond, the newest go.
const MAX_REFUSED_WAITS: usize = 65_536;

/// Starts kept between ticks at most; beyond, the newest go.
const MAX_STARTS: usize = 65_536;

#[derive(Debug, Default)]
pub struct AdmissionLedger {
    classes: Mutex<BTreeMap<String, ClassLedger>>,
    refused_waits: Mutex<Vec<(String, f64)>>,
    /// Jobs in service as each job started (servers' `running`), since the
    /// last tick took them.
    starts: Mutex<Vec<f64>>,
}

impl AdmissionLedger {
    fn classes(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ClassLedger>> {
        self.classes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One answer of the `admit` op. A hold is neither: the job stays
    /// queued, and is asked about again.
    pub fn record(&self, class: &str, decision: &AdmitDecision, repeat: bool, asked: Asked) {
        let settled = match decision.verdict {
            Verdict::Hold => false,
            Verdict::Admit => asked == Asked::AtStart,
            _ => true,
        };
        if !settled {
            return;
        }
        let mut classes = self.classes();
        let c = classes.entry(class.to_string()).or_default();
        match decision.verdict {
            Verdict::Admit if repeat => c.repeat += 1.0,
            Verdict::Admit => c.first += 1.0,
            _ => {
                c.refused += 1;
                c.refused_at_start += u64::from(asked == Asked::AtStart);
            }
        }
        c.guarded += u64::from(decision.guarded);
        drop(classes);
        let waited = asked == Asked::AtStart && decision.queue_age_ms.is_finite() && decision.queue_age_ms >= 0.0;
        if decision.verdict != Verdict::Admit && waited {
            let mut waits = self.refused_waits.lock().unwrap_or_else(PoisonError::into_inner);
            if waits.len() < MAX_REFUSED_WAITS {
                waits.push((class.to_string(), decision.queue_age_ms));
            }
        }
    }

    /// A job starts with `running` others in service (the `admit` op's
    /// field, asked at start).
    pub fn started_with(&self, running: f64) {
        let mut starts = self.starts.lock().unwrap_or_else(PoisonError::into_inner);
        if starts.len() < MAX_STARTS {
            starts.push(running);
        }
    }

    /// Jobs in service as each job started since the last call, oldest first.
    pub fn take_starts(&self) -> Vec<f64> {
        std::mem::take(&mut *self.starts.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The waits of jobs refused since the last call: (class, ms).
    pub fn take_refused_waits(&self) -> Vec<(String, f64)> {
        std::mem::take(&mut *self.refused_waits.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The share of recently admitted jobs that were retries or hedges.
    pub fn retry_share(&self, class: &str) -> f64 {
        self.classes().get(class).map_or(0.0, |c| {
            let total = c.first + c.repeat;
            if total > 0.0 { c.repeat / total } else { 0.0 }
        })
    }

    /// Ages the retry share by `dt_s`.
    pub fn decay(&self, dt_s: f64) {
        let keep = (-dt_s.max(0.0) / RETRY_SHARE_TIME_CONSTANT_S).exp();
        for c in self.classes().values_mut() {
            c.first *= keep;
            c.repeat *= keep;
        }
    }

    fn counts(&self, count: impl Fn(&ClassLedger) -> u64) -> BTreeMap<String, u64> {
        self.classes().iter().map(|(k, c)| (k.clone(), count(c))).collect()
    }

    /// Refusals per class since the start (for rates and `/metrics`).
    pub fn refused(&self) -> BTreeMap<String, u64> {
        self.counts(|c| c.refused)
    }

    /// Refusals per class since the start of jobs asked about as they started.
    pub fn refused_at_start(&self) -> BTreeMap<String, u64> {
        self.counts(|c| c.refused_at_start)
    }

    /// Sanity-guarded admissions per class since the start.
    pub fn guarded(&self) -> BTreeMap<String, u64> {
        self.counts(|c| c.guarded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(verdict: Verdict, guarded: bool) -> AdmitDecision {
        AdmitDecision {
            verdict,
            slack_ms: 0.0,
            p_on_time: 1.0,
            threshold: 0.95,
            queue_age_ms: 0.0,
            expected_wait_ms: None,
            retry_after_ms: None,
            guarded,
            reason: String::new(),
        }
    }

    #[test]
    fn refusals_count_and_the_retry_share_decays() {
        let l = AdmissionLedger::default();
        for _ in 0..9 {
            l.record("chat", &decision(Verdict::Admit, false), false, Asked::AtStart);
        }
        l.record("chat", &decision(Verdict::Admit, true), true, Asked::AtStart);
        l.record("chat", &decision(Verdict::RejectDeadline, false), false, Asked::AtStart);
        l.record("chat", &decision(Verdict::RejectBudget, false), true, Asked::AtStart);
        assert!((l.retry_share("chat") - 0.1).abs() < 1e-12);
        assert_eq!((l.refused()["chat"], l.refused_at_start()["chat"]), (2, 2));
        assert_eq!(l.guarded()["chat"], 1);
        assert_eq!(l.take_refused_waits(), vec![("chat".to_string(), 0.0), ("chat".to_string(), 0.0)]);
        assert!(l.take_refused_waits().is_empty());
        assert_eq!(l.retry_share("other"), 0.0);
        // How full the backend was at each start, handed over once.
        l.started_with(3.0);
        l.started_with(7.0);
        assert_eq!(l.take_starts(), vec![3.0, 7.0]);
        assert!(l.take_starts().is_empty());
        // Asked at arrival: a job let in is counted when it starts; a refused
        // one counts as a refusal, with no wait behind it.
        l.record("chat", &decision(Verdict::Admit, true), false, Asked::OnArrival);
        l.record("chat", &decision(Verdict::RejectDeadline, false), false, Asked::OnArrival);
        assert!((l.retry_share("chat") - 0.1).abs() < 1e-12);
        assert_eq!((l.refused()["chat"], l.guarded()["chat"]), (3, 1));
        assert_eq!(l.refused_at_start()["chat"], 2, "refused on arrival, not trimmed from a queue");
        assert!(l.take_refused_waits().is_empty());
        // A held job is still queued: neither an admission nor a refusal.
        l.record("chat", &decision(Verdict::Hold, false), false, Asked::AtStart);
        assert!((l.retry_share("chat") - 0.1).abs() < 1e-12);
        assert_eq!(l.refused()["chat"], 3);
        assert!(l.take_refused_waits().is_empty());
        // Decay keeps the share, and later first attempts dilute it.
        l.decay(10.0);
        assert!((l.retry_share("chat") - 0.1).abs() < 1e-12);
        for _ in 0..10 {
            l.record("chat", &decision(Verdict::Admit, false), false, Asked::AtStart);
        }
        let share = l.retry_share("chat");
        assert!(share < 0.05 && share > 0.02, "{share}");
    }
}
