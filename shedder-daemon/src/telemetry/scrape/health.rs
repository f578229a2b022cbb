//! Whether each target answered its latest scrape: kept for the
//! `shedder_scrape_up{target}` metric, and to say a failure in the log once
//! rather than at every scrape.

use std::{collections::BTreeMap, sync::Mutex};

/// Target URL → whether its latest scrape fetched and parsed.
static UP: Mutex<BTreeMap<String, bool>> = Mutex::new(BTreeMap::new());

/// Records how `url`'s scrape went; returns how the one before went (`None`
/// for its first).
pub(super) fn record(url: &str, up: bool) -> Option<bool> {
    let mut all = UP.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    all.insert(url.to_owned(), up)
}

/// Forgets every target but `urls`.
pub(super) fn retain(urls: &[&str]) {
    let mut all = UP.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    all.retain(|url, _| urls.contains(&url.as_str()));
}

/// `(target URL, up)` for every target scraped at least once: what the
/// `shedder_scrape_up` metric reports.
pub fn targets_up() -> Vec<(String, bool)> {
    let all = UP.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    all.iter().map(|(url, up)| (url.clone(), *up)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scrape_replaces_the_last_and_says_how_that_one_went() {
        let url = "http://health-test.invalid/metrics";
        let listed = || targets_up().into_iter().find(|(u, _)| u == url).map(|(_, up)| up);
        assert_eq!(listed(), None);
        assert_eq!(record(url, false), None);
        assert_eq!(listed(), Some(false));
        assert_eq!(record(url, false), Some(false));
        assert_eq!(record(url, true), Some(false));
        assert_eq!(listed(), Some(true));
        retain(&["http://another.invalid/metrics"]);
        assert_eq!(listed(), None, "a target no longer scraped is forgotten");
    }
}
