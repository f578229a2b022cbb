//! The progress bar: one per mode, over the run's length, with the outcomes
//! so far as its message.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use indicatif::{ProgressBar, ProgressStyle};
use shedder_drill::record::Outcome;

/// Outcomes counted as jobs finish.
#[derive(Default)]
pub struct Tally {
    on_time: AtomicU64,
    late: AtomicU64,
    shed: AtomicU64,
    failed: AtomicU64,
}

impl Tally {
    pub fn count(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::OnTime => &self.on_time,
            Outcome::Late | Outcome::Unfinished => &self.late,
            Outcome::Rejected
            | Outcome::DeferredTimedOut
            | Outcome::Degraded
            | Outcome::RejectedDeadline
            | Outcome::Overloaded => &self.shed,
            Outcome::Failed => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn line(&self) -> String {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "on time {}  late {}  shed {}  failed {}",
            n(&self.on_time),
            n(&self.late),
            n(&self.shed),
            n(&self.failed)
        )
    }
}

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar for `mode`, `length` long on the run's clock.
    pub fn new(mode: &str, length: Duration) -> Self {
        let bar = ProgressBar::new(length.as_millis() as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:30}] {percent:>3}%  {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(mode.to_string());
        Self { bar }
    }

    pub fn update(&self, elapsed: Duration, tally: &Tally) {
        self.bar.set_position(elapsed.as_millis() as u64);
        self.bar.set_message(tally.line());
    }

    pub fn finish(&self, tally: &Tally) {
        self.bar.set_message(tally.line());
        self.bar.finish();
    }
}
