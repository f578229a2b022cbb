//! One task per scrape target, each fetching on its own schedule (off the
//! runtime's thread: the HTTP client blocks) and handing observations over.

use std::{sync::Arc, time::Duration};

use tokio::{sync::mpsc::Sender, time::MissedTickBehavior};
use tracing::warn;

use crate::telemetry::{
    ClassObservations,
    scrape::{ScrapeTarget, Scraper},
};

/// Starts a task per target, fetching every `every` (timing out after
/// `every`, or 5 s if that is shorter).
pub(super) fn spawn(targets: &[ScrapeTarget], every: Duration, tx: Sender<Vec<ClassObservations>>) {
    for target in targets {
        let scraper = match Scraper::new(target.clone(), every.min(Duration::from_secs(5))) {
            Ok(scraper) => Arc::new(std::sync::Mutex::new(scraper)),
            Err(e) => {
                warn!(url = %target.url, "not scraping: {e:#}");
                continue;
            }
        };
        let tx = tx.clone();
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
        });
    }
}
