//! Starts: how full the backend was as each of its recent jobs started
//! (`admit`'s `running`, asked at start), to tell a budget that starves the
//! backend from one that keeps it busy, and how many workers it has at least.
//!
//! Under a budget the workers can keep up with, a job starts as another
//! finishes: the backend is full at nearly every start. Under one set too
//! low (a mean service time that lags work grown cheaper, after a tail has
//! gone), jobs start on idle workers. One start says little (a gap between
//! arrivals leaves a worker free for a moment); as many starts as there are
//! workers, all with workers to spare, say the budget is the limit.

use std::collections::VecDeque;

/// Starts remembered; more than any backend's worker count needs.
const KEPT: usize = 1024;

/// How full the backend was as its recent jobs started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Every one of as many starts as there are workers had a worker to
    /// spare (beyond any kept for higher tiers).
    Starved,
    /// One of them found every worker taken.
    Full,
    /// Neither, or too few starts (none since the last tick) to say.
    Unclear,
}

#[derive(Clone, Debug, Default)]
pub struct StartLog {
    /// Jobs in service as each start happened (the starting one not counted), oldest first.
    running: VecDeque<f64>,
    /// Whether the last tick brought starts.
    fresh: bool,
}

impl StartLog {
    /// Takes in the starts since the last tick.
    pub fn record(&mut self, starts: &[f64]) {
        self.fresh = !starts.is_empty();
        for &running in starts.iter().filter(|r| r.is_finite() && **r >= 0.0) {
            if self.running.len() == KEPT {
                self.running.pop_front();
            }
            self.running.push_back(running);
        }
    }

    /// The most workers seen in use at once: one more than the most jobs
    /// the server had in service as one of the recent jobs started (the
    /// starting job takes a worker too). The backend has at least that many.
    pub fn workers_seen(&self) -> Option<f64> {
        self.running.iter().copied().reduce(f64::max).map(|r| r + 1.0)
    }

    /// What the recent starts say of a backend of `capacity` workers, with
    /// `kept` of them held for higher tiers.
    pub fn backend(&self, capacity: f64, kept: f64) -> Backend {
        match self.free_at_busiest(capacity) {
            Some(free) if free >= 1.0 + kept => Backend::Starved,
            Some(free) if free < 1.0 => Backend::Full,
            _ => Backend::Unclear,
        }
    }

    /// The workers free beyond the starting job at the busiest of the last
    /// `capacity` starts, when that is at least one (the backend reads
    /// [`Backend::Starved`] with none kept).
    pub fn spare(&self, capacity: f64) -> Option<f64> {
        self.free_at_busiest(capacity).filter(|free| *free >= 1.0)
    }

    /// Workers free beyond the starting job at the busiest of the last
    /// `capacity` starts (rounded up), when the last tick brought starts and
    /// that many have been seen.
    fn free_at_busiest(&self, capacity: f64) -> Option<f64> {
        let n = capacity.ceil().max(1.0) as usize;
        if !self.fresh || self.running.len() < n {
            return None;
        }
        let busiest = self.running.iter().rev().take(n).copied().fold(0.0, f64::max);
        Some(capacity - busiest - 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_workers_count_only_when_every_recent_start_had_them() {
        // (starts, oldest first; capacity; free at the busiest of the last `capacity`)
        let rows: [(&[f64], f64, Option<f64>); 6] = [
            (&[], 4.0, None),
            (&[1.0, 0.0, 2.0], 4.0, None),                // fewer starts than workers
            (&[3.0, 1.0, 0.0, 2.0, 1.0], 4.0, Some(1.0)), // the last four: busiest 2, so 1 more free
            (&[1.0, 0.0, 3.0, 0.0, 1.0], 4.0, Some(0.0)), // one of them found the backend full
            (&[0.0; 8], 8.0, Some(7.0)),
            (&[2.0, 2.0, 2.0], 2.5, Some(-0.5)), // capacity rounds up to 3 starts
        ];
        for (starts, capacity, free) in rows {
            let mut log = StartLog::default();
            log.record(starts);
            assert_eq!(log.free_at_busiest(capacity), free, "{starts:?} at {capacity}");
        }
        // Read as a whole: a spare worker beyond those kept, none, or neither.
        let mut log = StartLog::default();
        log.record(&[3.0, 1.0, 0.0, 2.0, 1.0]);
        assert_eq!(log.backend(4.0, 0.0), Backend::Starved);
        assert_eq!(log.backend(4.0, 1.0), Backend::Unclear);
        assert_eq!(log.spare(4.0), Some(1.0));
        log.record(&[3.0]);
        assert_eq!(log.backend(4.0, 0.0), Backend::Full);
        assert_eq!(log.spare(4.0), None);
        // A tick with no starts says nothing new.
        let mut log = StartLog::default();
        log.record(&[0.0; 4]);
        log.record(&[]);
        assert_eq!(log.free_at_busiest(4.0), None);
    }

    #[test]
    fn the_busiest_start_shows_how_many_workers_there_are_at_least() {
        let mut log = StartLog::default();
        assert_eq!(log.workers_seen(), None);
        log.record(&[0.0, 3.0, 1.0]);
        assert_eq!(log.workers_seen(), Some(4.0));
        // Remembered across quiet ticks, for as many starts as are kept.
        log.record(&[]);
        log.record(&[2.0]);
        assert_eq!(log.workers_seen(), Some(4.0));
        log.record(&[1.0; KEPT]);
        assert_eq!(log.workers_seen(), Some(2.0));
    }
}
