//! SGLang's families (`model_name` label), single- or multi-process.
//!
//! SGLang's scheduler metrics carry `tp_rank` and `pp_rank` (and `dp_rank`
//! with data parallelism). The ranks of one tensor- or pipeline-parallel
//! group run one scheduler state between them, so when every rank reports
//! (`--enable-metrics-for-all-schedulers`), they repeat the same figures: a
//! data-parallel replica's series is read once, from its lowest ranks, and
//! replicas (`dp_rank`) are summed. The tokenizer's families (end-to-end
//! latency, request counters) carry no ranks. In multi-process mode
//! (`PROMETHEUS_MULTIPROC_DIR`) prometheus_client merges the processes'
//! files: counters and histograms are summed, the scheduler's gauges keep the
//! most recent value, and no `pid` label appears on the families read here.

use std::collections::BTreeMap;

use super::{
    Need,
    delta::Deltas,
    exposition::{Family, LabelSet, ModelSeries, Reading, label},
    interval::{ClassInterval, counter_growth, gauge_sum, histogram_growth, note_kv_gauge},
};

pub(super) const QUEUE: &str = "sglang:queue_time_seconds";
pub(super) const E2E: &str = "sglang:e2e_request_latency_seconds";
pub(super) const WAITING: &str = "sglang:num_queue_reqs";
pub(super) const RUNNING: &str = "sglang:num_running_reqs";
/// KV-cache (token pool) usage, a fraction 0..=1.
pub(super) const TOKEN_USAGE: &str = "sglang:token_usage";
/// Requests aborted (by the client or the server): they left the queue.
pub(super) const ABORTED: &str = "sglang:num_aborted_requests_total";

pub(super) const FAMILIES: &[Family] = &[
    Family::histogram(QUEUE),
    Family::histogram(E2E),
    Family::scalar(WAITING),
    Family::scalar(RUNNING),
    Family::scalar(TOKEN_USAGE),
    Family::scalar(ABORTED),
];

pub(super) const NEEDS: &[Need] = &[
    Need { family: QUEUE, any_of: &[QUEUE], lacking: "no queue-time histogram" },
    Need { family: E2E, any_of: &[E2E], lacking: "no end-to-end latency histogram" },
    Need { family: WAITING, any_of: &[WAITING], lacking: "no waiting-requests gauge" },
    Need { family: RUNNING, any_of: &[RUNNING], lacking: "no running-requests gauge" },
    Need { family: TOKEN_USAGE, any_of: &[TOKEN_USAGE], lacking: "no KV-cache usage gauge" },
];

/// Labels that tell the ranks of one parallel group apart.
const GROUP_RANKS: [&str; 2] = ["tp_rank", "pp_rank"];

/// One series per data-parallel replica: of the series that differ only in
/// their group ranks, the one with the lowest ranks.
fn one_per_replica(series: Option<&ModelSeries>) -> Option<ModelSeries> {
    let mut replicas: BTreeMap<LabelSet, (Vec<i64>, &LabelSet, &Reading)> = BTreeMap::new();
    for (labels, reading) in series? {
        let replica: LabelSet =
            labels.iter().filter(|(key, _)| !GROUP_RANKS.contains(&key.as_str())).cloned().collect();
        let ranks: Vec<i64> =
            GROUP_RANKS.iter().map(|name| label(labels, name).and_then(|v| v.parse().ok()).unwrap_or(0)).collect();
        match replicas.get(&replica) {
            Some((kept, ..)) if *kept <= ranks => {}
            _ => {
                replicas.insert(replica, (ranks, labels, reading));
            }
        }
    }
    Some(replicas.into_values().map(|(_, labels, reading)| (labels.clone(), reading.clone())).collect())
}

/// What one SGLang model contributes to its class for the interval: queue
/// time from `QUEUE`, service time from `E2E` (end to end, so it includes
/// the queue: conservative), finished requests from `E2E`'s count plus
/// `ABORTED`, and the live gauges.
pub(super) fn reduce<'e>(
    series: impl Fn(&str) -> Option<&'e ModelSeries>,
    deltas: &mut Deltas,
    interval: &mut ClassInterval,
    url: &str,
) {
    let (queue, _) = histogram_growth(QUEUE, one_per_replica(series(QUEUE)).as_ref(), deltas);
    let (e2e, recorded) = histogram_growth(E2E, series(E2E), deltas);
    interval.queue.extend(queue);
    interval.service.extend(e2e);
    let aborted = counter_growth(ABORTED, series(ABORTED), deltas);
    if recorded.is_some() || aborted.is_some() {
        interval.add_finished(recorded.unwrap_or(0.0) + aborted.unwrap_or(0.0));
    }
    if let Some(waiting) = gauge_sum(one_per_replica(series(WAITING)).as_ref()) {
        interval.add_waiting(waiting);
    }
    if let Some(running) = gauge_sum(one_per_replica(series(RUNNING)).as_ref()) {
        interval.add_running(running);
    }
    note_kv_gauge(TOKEN_USAGE, series(TOKEN_USAGE), interval, url);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> LabelSet {
        let mut set: LabelSet = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        set.sort();
        set
    }

    #[test]
    fn tensor_parallel_ranks_are_read_once_per_data_parallel_replica() {
        let mut series = ModelSeries::new();
        for (dp, tp, value) in [("0", "0", 5.0), ("0", "1", 5.0), ("1", "1", 3.0), ("1", "0", 3.0)] {
            let set = labels(&[("model_name", "m"), ("dp_rank", dp), ("tp_rank", tp), ("pp_rank", "0")]);
            series.insert(set, Reading::Scalar(value));
        }
        let replicas = one_per_replica(Some(&series)).unwrap();
        assert_eq!(replicas.len(), 2);
        assert!(replicas.keys().all(|set| label(set, "tp_rank") == Some("0")));
        assert_eq!(gauge_sum(Some(&replicas)), Some(8.0));
    }
}
