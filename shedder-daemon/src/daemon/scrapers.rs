//! One task per scrape target, each fetching on its own schedule (off the
//! runtime's thread: the HTTP client blocks) and handing observations over.
//! The tasks follow the configuration: a reload that changes the targets or
//! the interval replaces them.

use std::{sync::Arc, time::Duration};

use tokio::{sync::mpsc::Sender, task::AbortHandle, time::MissedTickBehavior};
use tracing::{info, warn};

use crate::telemetry::{
    ClassObservations,
    scrape::{self, ScrapeTarget, Scraper},
};

/// The running scrape tasks, and what they were started for.
pub(super) struct Scrapers {
    targets: Vec<ScrapeTarget>,
    every: Duration,
    tasks: Vec<AbortHandle>,
    tx: Sender<Vec<ClassObservations>>,
}

impl Scrapers {
    /// None yet; observations will go to `tx`.
    pub(super) fn new(tx: Sender<Vec<ClassObservations>>) -> Self {
        Self { targets: Vec::new(), every: Duration::ZERO, tasks: Vec::new(), tx }
    }

    /// Scrapes `targets` every `every` (each request timing out after
    /// `every`, or 5 s if that is shorter), replacing the tasks of other
    /// targets or another interval; the same ones keep running.
    pub(super) fn follow(&mut self, targets: &[ScrapeTarget], every: Duration) {
        if self.targets == targets && self.every == every {
            return;
        }
        let replacing = !self.tasks.is_empty();
        self.stop();
        self.targets = targets.to_vec();
        self.every = every;
        // What a removed target lacked, or whether it answered, is no longer news.
        scrape::forget_all_but(targets);
        for target in targets {
            match Scraper::new(target.clone(), every.min(Duration::from_secs(5))) {
                Ok(scraper) => self.tasks.push(spawn(scraper, every, self.tx.clone())),
                Err(e) => warn!(url = %target.url, "not scraping: {e:#}"),
            }
        }
        if replacing || !targets.is_empty() {
            info!(targets = targets.len(), every_ms = every.as_millis() as u64, "scraping");
        }
    }

    fn stop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Scrapers {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn(scraper: Scraper, every: Duration, tx: Sender<Vec<ClassObservations>>) -> AbortHandle {
    let scraper = Arc::new(std::sync::Mutex::new(scraper));
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let scraper = scraper.clone();
            let result = tokio::task::spawn_blocking(move || scraper.lock().expect("scraper lock").scrape()).await;
            match result {
                Ok(Ok(batches)) if !batches.is_empty() => {
                    if tx.send(batches).await.is_err() {
                        return;
                    }
                }
                // A failure is logged by the scraper, once until it answers.
                Ok(_) => {}
                Err(e) => warn!("scrape task failed: {e}"),
            }
        }
    })
    .abort_handle()
}
