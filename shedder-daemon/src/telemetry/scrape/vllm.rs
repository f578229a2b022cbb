//! vLLM's families, as vLLM's own `/metrics` serves them (`model_name` and
//! `engine` labels) and as Triton's vLLM backend reports them (`model` and
//! `version`): the reduction is the same, whatever the labels.

use super::{
    Need,
    delta::Deltas,
    exposition::{Family, ModelSeries},
    interval::{ClassInterval, counter_growth, gauge_sum, histogram_growth, note_kv_gauge},
};

pub(super) const QUEUE: &str = "vllm:request_queue_time_seconds";
pub(super) const INFERENCE: &str = "vllm:request_inference_time_seconds";
pub(super) const E2E: &str = "vllm:e2e_request_latency_seconds";
pub(super) const WAITING: &str = "vllm:num_requests_waiting";
pub(super) const RUNNING: &str = "vllm:num_requests_running";
pub(super) const KV_CACHE: &str = "vllm:kv_cache_usage_perc";
/// The name of `KV_CACHE` before vLLM 0.9, and in Triton's vLLM backend.
pub(super) const GPU_CACHE: &str = "vllm:gpu_cache_usage_perc";
/// Finished requests by `finished_reason` (vLLM's server; not Triton's backend).
pub(super) const SUCCESS: &str = "vllm:request_success_total";
/// Tokens processed: they move on every engine step that did work.
pub(super) const GENERATION_TOKENS: &str = "vllm:generation_tokens_total";
pub(super) const PROMPT_TOKENS: &str = "vllm:prompt_tokens_total";

pub(super) const FAMILIES: &[Family] = &[
    Family::histogram(QUEUE),
    Family::histogram(INFERENCE),
    Family::histogram(E2E),
    Family::scalar(WAITING),
    Family::scalar(RUNNING),
    Family::scalar(KV_CACHE),
    Family::scalar(GPU_CACHE),
    Family::scalar(SUCCESS),
    Family::scalar(GENERATION_TOKENS),
    Family::scalar(PROMPT_TOKENS),
];

pub(super) const NEEDS: &[Need] = &[
    Need {
        family: QUEUE,
        any_of: &[QUEUE],
        lacking: "no queue-time histogram (older vLLM): queue age from the live estimate alone",
    },
    Need { family: INFERENCE, any_of: &[INFERENCE, E2E], lacking: "no service-time histogram" },
    Need { family: WAITING, any_of: &[WAITING], lacking: "no waiting-requests gauge" },
    Need { family: RUNNING, any_of: &[RUNNING], lacking: "no running-requests gauge" },
    Need { family: KV_CACHE, any_of: &[KV_CACHE, GPU_CACHE], lacking: "no KV-cache usage gauge" },
];

/// What one vLLM model contributes to its class for the interval.
///
/// * Queue time from `QUEUE`; service time from `INFERENCE` (the RUNNING
///   phase) when the model has it, else from `E2E` (which includes the
///   queue: conservative).
/// * Finished requests from `SUCCESS` (every `finished_reason`), else from
///   the end-to-end histogram's count.
/// * Progress when a token counter moved.
///
/// Returns whether it counted finished requests.
pub(super) fn reduce<'e>(
    series: impl Fn(&str) -> Option<&'e ModelSeries>,
    deltas: &mut Deltas,
    interval: &mut ClassInterval,
    url: &str,
) -> bool {
    // Every family's state is kept, so a switch of service source (an
    // upgrade) has a baseline ready.
    let (queue, _) = histogram_growth(QUEUE, series(QUEUE), deltas);
    let (inference, _) = histogram_growth(INFERENCE, series(INFERENCE), deltas);
    let (e2e, e2e_recorded) = histogram_growth(E2E, series(E2E), deltas);
    interval.queue.extend(queue);
    interval.service.extend(if series(INFERENCE).is_some() { inference } else { e2e });

    let finished =
        if series(SUCCESS).is_some() { counter_growth(SUCCESS, series(SUCCESS), deltas) } else { e2e_recorded };
    if let Some(finished) = finished {
        interval.add_finished(finished);
    }
    let counted = finished.is_some();
    let tokens = [GENERATION_TOKENS, PROMPT_TOKENS].map(|family| counter_growth(family, series(family), deltas));
    if tokens.iter().any(Option::is_some) {
        interval.note_progress(tokens.iter().flatten().any(|grown| *grown > 0.0));
    }

    if let Some(waiting) = gauge_sum(series(WAITING)) {
        interval.add_waiting(waiting);
    }
    if let Some(running) = gauge_sum(series(RUNNING)) {
        interval.add_running(running);
    }
    let kv_family = if series(KV_CACHE).is_some() { KV_CACHE } else { GPU_CACHE };
    note_kv_gauge(kv_family, series(kv_family), interval, url);
    counted
}
