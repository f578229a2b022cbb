//! Triton's families (`model` and `version` labels), and those its LLM
//! backends add under the same labels.
//!
//! # Triton's own
//!
//! `nv_inference_queue_duration_us` and `nv_inference_compute_infer_duration_us`
//! are cumulative microsecond sums, `nv_inference_request_success` the count
//! of requests they cover. Per series and interval, the mean queue time is
//! Δqueue_us / Δsuccess and the mean compute time Δcompute_us / Δsuccess,
//! one `QueueAge` and one `Service` observation with `count = Δsuccess`.
//! (`nv_inference_exec_count` is not the divisor: Triton adds a batch's
//! compute time once per request in it. Cached responses count in `success`
//! but add no compute time, which lowers the mean a little when the response
//! cache is on.) `nv_inference_pending_request_count` is the waiting count.
//! Versions of Triton that label per-GPU series with `gpu_uuid` also print a
//! series without it that stays at zero: every series is read, and zeros
//! add nothing. With `--metrics-config counter_latencies=false` the two
//! duration counters are absent; with `summary_latencies=true` their
//! summaries (`nv_inference_queue_summary_us`,
//! `nv_inference_compute_infer_summary_us`) carry the same sums in `_sum`, and
//! are read instead (their quantiles, over Triton's own window, are not).
//! With neither, only counts and the pending gauge remain.
//!
//! # LLM backends
//!
//! Triton's scheduler queue is not the engine's: a decoupled LLM backend
//! takes requests at once and queues them inside.
//! * The vLLM backend reports `vllm:*` families (see [`super::vllm`]). When
//!   a model has them, its queue and service times come from them and
//!   Triton's own duration counters are not read for it.
//! * The TensorRT-LLM backend reports `nv_trt_llm_request_metrics` by
//!   `request_type` (`waiting`: queued in the engine; `scheduled`: in this
//!   iteration's batch) and `nv_trt_llm_kv_cache_block_metrics` by
//!   `kv_cache_block_type` (`fraction`, or `used` / `max` where it is absent).
//!
//! The engine's waiting requests add to Triton's pending ones (two stages of
//! one queue).

use super::{
    Need,
    delta::Deltas,
    exposition::{Family, ModelSeries, Reading, label},
    interval::{ClassInterval, gauge_sum, plausible_fraction},
    vllm,
};

pub(super) const SUCCESS: &str = "nv_inference_request_success";
pub(super) const QUEUE_US: &str = "nv_inference_queue_duration_us";
pub(super) const COMPUTE_US: &str = "nv_inference_compute_infer_duration_us";
pub(super) const PENDING: &str = "nv_inference_pending_request_count";
/// With `--metrics-config summary_latencies=true`: the same sums, in summaries.
pub(super) const QUEUE_SUMMARY: &str = "nv_inference_queue_summary_us";
pub(super) const COMPUTE_SUMMARY: &str = "nv_inference_compute_infer_summary_us";
pub(super) const TRT_LLM_REQUESTS: &str = "nv_trt_llm_request_metrics";
pub(super) const TRT_LLM_KV_BLOCKS: &str = "nv_trt_llm_kv_cache_block_metrics";

/// Triton's own families.
pub(super) const FAMILIES: &[Family] = &[
    Family::scalar(SUCCESS),
    Family::scalar(QUEUE_US),
    Family::scalar(COMPUTE_US),
    Family::scalar(PENDING),
    Family::summary(QUEUE_SUMMARY),
    Family::summary(COMPUTE_SUMMARY),
];
/// The TensorRT-LLM backend's.
pub(super) const TRT_LLM_FAMILIES: &[Family] = &[Family::scalar(TRT_LLM_REQUESTS), Family::scalar(TRT_LLM_KV_BLOCKS)];

/// Triton's own families; an LLM backend's are extra, not needed.
pub(super) const NEEDS: &[Need] = &[
    Need { family: SUCCESS, any_of: &[SUCCESS], lacking: "no request counter" },
    Need {
        family: QUEUE_US,
        any_of: &[QUEUE_US, QUEUE_SUMMARY],
        lacking: "no queue duration (latency counters off, --metrics-config counter_latencies=false, and no summaries)",
    },
    Need {
        family: COMPUTE_US,
        any_of: &[COMPUTE_US, COMPUTE_SUMMARY],
        lacking: "no compute duration (latency counters off, --metrics-config counter_latencies=false, and no summaries)",
    },
    Need { family: PENDING, any_of: &[PENDING], lacking: "no pending-requests gauge (older Triton)" },
];

/// What one Triton model contributes to its class for the interval.
pub(super) fn reduce<'e>(
    series: impl Fn(&str) -> Option<&'e ModelSeries> + Copy,
    deltas: &mut Deltas,
    interval: &mut ClassInterval,
    url: &str,
) {
    let engine = vllm::FAMILIES.iter().any(|family| series(family.name).is_some());
    let engine_counted = engine && vllm::reduce(series, deltas, interval, url);
    let engine_times = series(vllm::QUEUE).is_some() || series(vllm::E2E).is_some();
    native(series, deltas, interval, !engine_times, !engine_counted);
    trt_llm(series, interval);
}

/// Triton's own counters and pending gauge. `times`: read the duration
/// counters into queue and service observations; `count`: the successes
/// are the interval's finished requests.
fn native<'e>(
    series: impl Fn(&str) -> Option<&'e ModelSeries>,
    deltas: &mut Deltas,
    interval: &mut ClassInterval,
    times: bool,
    count: bool,
) {
    for (labels, reading) in series(SUCCESS).into_iter().flatten() {
        // A duration's growth, from its counter, else from its summary's sum
        // (both are read every scrape, to keep their baselines).
        let mut duration_us = |counter: &'static str, summary: &'static str| {
            let from_counter = series(counter)
                .and_then(|s| s.get(labels))
                .and_then(|reading| deltas.counter(counter, labels, reading));
            let from_summary = series(summary)
                .and_then(|s| s.get(labels))
                .and_then(|reading| deltas.histogram(summary, labels, reading))
                .and_then(|grown| grown.sum);
            from_counter.or(from_summary)
        };
        let queue_us = duration_us(QUEUE_US, QUEUE_SUMMARY);
        let compute_us = duration_us(COMPUTE_US, COMPUTE_SUMMARY);
        let Some(requests) = deltas.counter(SUCCESS, labels, reading) else { continue };
        if count {
            interval.add_finished(requests);
        }
        let requests_n = requests.round() as u64;
        if requests_n == 0 || !times {
            continue;
        }
        if let Some(queue_us) = queue_us {
            interval.queue.push((queue_us / requests / 1000.0, requests_n));
        }
        if let Some(compute_us) = compute_us {
            interval.service.push((compute_us / requests / 1000.0, requests_n));
        }
    }
    if let Some(pending) = gauge_sum(series(PENDING)) {
        interval.add_waiting(pending);
    }
}

/// TensorRT-LLM's gauges: engine queue, batch, KV blocks.
fn trt_llm<'e>(series: impl Fn(&str) -> Option<&'e ModelSeries>, interval: &mut ClassInterval) {
    // The values of one family's series whose `key` label is `wanted`.
    let of_type = |family: &str, key: &'static str, wanted: &'static str| {
        series(family).into_iter().flatten().filter_map(move |(labels, reading)| match reading {
            Reading::Scalar(value) if label(labels, key) == Some(wanted) => Some(value.max(0.0)),
            _ => None,
        })
    };
    let sum = |values: &mut dyn Iterator<Item = f64>| values.fold(None, |total, v| Some(total.unwrap_or(0.0) + v));
    if let Some(waiting) = sum(&mut of_type(TRT_LLM_REQUESTS, "request_type", "waiting")) {
        interval.add_waiting(waiting);
    }
    if let Some(scheduled) = sum(&mut of_type(TRT_LLM_REQUESTS, "request_type", "scheduled")) {
        interval.add_running(scheduled);
    }
    let blocks = |kind| sum(&mut of_type(TRT_LLM_KV_BLOCKS, "kv_cache_block_type", kind));
    let fractions: Vec<f64> = of_type(TRT_LLM_KV_BLOCKS, "kv_cache_block_type", "fraction").collect();
    let used_of_max = match (blocks("used"), blocks("max")) {
        (Some(used), Some(max)) if max > 0.0 => Some(used / max),
        _ => None,
    };
    let usages = if fractions.is_empty() { used_of_max.into_iter().collect() } else { fractions };
    for usage in usages.into_iter().filter(|usage| plausible_fraction(*usage)) {
        interval.note_kv_cache(usage);
    }
}
