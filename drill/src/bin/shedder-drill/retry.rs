//! How clients retry: jittered exponential backoff that honours
//! `Retry-After`, within a retry budget (retries at most `retry_budget` ×
//! first attempts over the last second, as gRPC's retry throttling); or, to
//! show the herd, at once and without a budget.

use std::{collections::VecDeque, sync::Mutex, time::Duration};

use rand::RngExt as _;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RetryMode {
    Backoff,
    Immediate,
}

impl RetryMode {
    pub fn parse(name: &str) -> anyhow::Result<Self> {
        <Self as clap::ValueEnum>::from_str(name, true)
            .map_err(|_| anyhow::anyhow!("client.retry: {name:?} is not backoff or immediate"))
    }
}

pub struct RetryPolicy {
    pub mode: RetryMode,
    pub max_attempts: u32,
    /// First backoff, before jitter, on the run's clock.
    pub backoff_base: Duration,
    budget: Mutex<Budget>,
}

/// Extra attempts (retries, or hedges) allowed as a share of first attempts
/// over a sliding window.
pub struct Budget {
    ratio: f64,
    window_ms: f64,
    firsts: VecDeque<f64>,
    retries: VecDeque<f64>,
}

impl RetryPolicy {
    /// `window_ms`: one of the workload's seconds on the run's clock.
    pub fn new(mode: RetryMode, max_attempts: u32, backoff_base: Duration, retry_budget: f64, window_ms: f64) -> Self {
        Self { mode, max_attempts, backoff_base, budget: Mutex::new(Budget::new(retry_budget, window_ms)) }
    }

    /// Counts a job's first attempt, which earns the budget its share.
    pub fn first_attempt(&self, now_ms: f64) {
        self.budget.lock().unwrap().first(now_ms);
    }

    /// How long to wait before attempt `attempt + 1`, or None when the job
    /// may not retry (out of attempts, or out of budget).
    pub fn next_delay(&self, attempt: u32, retry_after: Option<Duration>, now_ms: f64) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        match self.mode {
            RetryMode::Immediate => Some(Duration::ZERO),
            RetryMode::Backoff => {
                if !self.budget.lock().unwrap().take(now_ms) {
                    return None;
                }
                let exponential = self.backoff_base.mul_f64(2f64.powi(attempt as i32 - 1));
                // Full spread around the exponential step, so retries do not line up.
                let jittered = exponential.mul_f64(rand::rng().random_range(0.5..1.5));
                Some(jittered.max(retry_after.unwrap_or_default()))
            }
        }
    }
}

impl Budget {
    pub fn new(ratio: f64, window_ms: f64) -> Self {
        Self { ratio, window_ms, firsts: VecDeque::new(), retries: VecDeque::new() }
    }

    /// Counts a first attempt, which earns the budget its share.
    pub fn first(&mut self, now_ms: f64) {
        self.firsts.push_back(now_ms);
    }

    /// Takes one extra attempt if the budget allows it.
    pub fn take(&mut self, now_ms: f64) -> bool {
        let since = now_ms - self.window_ms;
        for times in [&mut self.firsts, &mut self.retries] {
            while times.front().is_some_and(|t| *t < since) {
                times.pop_front();
            }
        }
        let allowed = (self.retries.len() + 1) as f64 <= self.ratio * self.firsts.len() as f64;
        if allowed {
            self.retries.push_back(now_ms);
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_stay_within_the_budget_of_the_last_second() {
        let policy = RetryPolicy::new(RetryMode::Backoff, 3, Duration::from_millis(100), 0.2, 1000.0);
        for i in 0..10 {
            policy.first_attempt(i as f64);
        }
        let granted = (0..5).filter(|_| policy.next_delay(1, None, 10.0).is_some()).count();
        assert_eq!(granted, 2, "0.2 × 10 first attempts");
        // A second later the first attempts have aged out, and so has the budget.
        assert!(policy.next_delay(1, None, 1500.0).is_none());
    }

    #[test]
    fn backoff_grows_honours_retry_after_and_stops_at_max_attempts() {
        let policy = RetryPolicy::new(RetryMode::Backoff, 3, Duration::from_millis(100), 100.0, 1000.0);
        policy.first_attempt(0.0);
        let second = policy.next_delay(2, None, 0.0).unwrap();
        assert!((Duration::from_millis(100)..Duration::from_millis(300)).contains(&second), "{second:?}");
        let told = policy.next_delay(1, Some(Duration::from_secs(2)), 0.0).unwrap();
        assert_eq!(told, Duration::from_secs(2));
        assert!(policy.next_delay(3, None, 0.0).is_none());
        let herd = RetryPolicy::new(RetryMode::Immediate, 3, Duration::from_millis(100), 0.0, 1000.0);
        assert_eq!(herd.next_delay(1, Some(Duration::from_secs(2)), 0.0), Some(Duration::ZERO));
    }
}
