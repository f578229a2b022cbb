//! What a target lacks: the families its kind should expose that no
//! configured model has. Said once in the log when it changes, and kept for
//! the `shedder_scrape_missing{target,family}` metric.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Mutex,
};

use tracing::{info, warn};

use super::exposition::Exposition;

/// A family a kind should expose (`family`, or any of `any_of`), and what
/// its absence means, in words.
#[derive(Debug)]
pub(super) struct Need {
    pub family: &'static str,
    pub any_of: &'static [&'static str],
    pub lacking: &'static str,
}

/// The needs no configured model meets in this exposition.
pub(super) fn missing(needs: &'static [Need], exposition: &Exposition) -> BTreeSet<&'static str> {
    needs
        .iter()
        .filter(|need| {
            !need.any_of.iter().any(|family| exposition.get(family).is_some_and(|models| !models.is_empty()))
        })
        .map(|need| need.family)
        .collect()
}

/// Logs a change of what `url` lacks: one line naming each missing family
/// and what that costs, or that nothing the kind exposes is there at all.
pub(super) fn log_change(
    url: &str,
    kind: &str,
    needs: &'static [Need],
    before: &BTreeSet<&'static str>,
    now: &BTreeSet<&'static str>,
) {
    if before == now {
        return;
    }
    if now.is_empty() {
        info!(url, kind, "every expected metric family is now exposed");
    } else if now.len() == needs.len() {
        warn!(url, kind, missing = ?now,
            "the target exposes none of the metric families shedder reads for this kind \
             (wrong kind, metrics disabled, or no configured model served yet)");
    } else {
        let lacking: Vec<&str> =
            needs.iter().filter(|need| now.contains(need.family)).map(|need| need.lacking).collect();
        warn!(url, kind, missing = ?now, "the target lacks some metric families: {}", lacking.join("; "));
    }
}

/// Target URL → families it lacks, as of its latest good scrape.
static MISSING: Mutex<BTreeMap<String, BTreeSet<&'static str>>> = Mutex::new(BTreeMap::new());

/// Records what `url` lacks, for [`missing_families`].
pub(super) fn publish(url: &str, missing: &BTreeSet<&'static str>) {
    let mut all = MISSING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if missing.is_empty() {
        all.remove(url);
    } else {
        all.insert(url.to_owned(), missing.clone());
    }
}

/// Forgets every target but `urls`.
pub(super) fn retain(urls: &[&str]) {
    let mut all = MISSING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    all.retain(|url, _| urls.contains(&url.as_str()));
}

/// `(target URL, family)` for every family a scraped target lacks: what the
/// `shedder_scrape_missing` metric reports.
pub fn missing_families() -> Vec<(String, &'static str)> {
    let all = MISSING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    all.iter().flat_map(|(url, families)| families.iter().map(move |family| (url.clone(), *family))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{scrape::triton, test_logs::captured_logs};

    #[test]
    fn a_change_of_what_is_missing_is_said_once() {
        let url = "http://127.0.0.1:8002/metrics";
        let none = BTreeSet::new();
        let latencies = BTreeSet::from([triton::QUEUE_US, triton::COMPUTE_US]);
        let all: BTreeSet<_> = triton::NEEDS.iter().map(|need| need.family).collect();
        let log = |before: &BTreeSet<&'static str>, now: &BTreeSet<&'static str>| {
            captured_logs(|| log_change(url, "triton", triton::NEEDS, before, now))
        };
        let lines = log(&none, &latencies);
        assert_eq!(lines.lines().count(), 1, "{lines}");
        assert!(lines.contains("WARN") && lines.contains("counter_latencies=false"), "{lines}");
        assert!(lines.contains("nv_inference_queue_duration_us") && lines.contains(url), "{lines}");
        assert_eq!(log(&latencies, &latencies), "", "unchanged: nothing more");
        let lines = log(&latencies, &all);
        assert!(lines.contains("exposes none of the metric families"), "{lines}");
        let lines = log(&all, &none);
        assert!(lines.contains("INFO") && lines.contains("every expected metric family"), "{lines}");
    }

    #[test]
    fn published_gaps_are_listed_until_filled() {
        let url = "http://coverage-test.invalid/metrics";
        publish(url, &BTreeSet::from(["nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us"]));
        let listed: Vec<_> = missing_families().into_iter().filter(|(u, _)| u == url).collect();
        assert_eq!(listed.len(), 2);
        publish(url, &BTreeSet::new());
        assert!(missing_families().iter().all(|(u, _)| u != url));
    }
}
