//! vLLM's `/metrics` (the v1 engine's `PrometheusStatLogger`): one engine
//! (`engine="0"`), the families shedder reads and their neighbours, with
//! vLLM's names, help strings, labels and request-latency buckets.

use super::{
    ClassMetrics, State,
    text::{Exposition, Histogram},
};

/// vLLM's request-latency buckets, s (queue, inference and end-to-end time).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];

pub fn render(models: &[String], state: &State) -> String {
    let mut e = Exposition::default();
    let per_model = |e: &mut Exposition, name: &str, value: &dyn Fn(usize) -> f64| {
        for (i, model) in models.iter().enumerate() {
            e.sample(name, &[("model_name", model), ("engine", "0")], value(i));
        }
    };
    let c = &state.classes;
    e.family("vllm:num_requests_running", "Number of requests in model execution batches.", "gauge");
    per_model(&mut e, "vllm:num_requests_running", &|i| c[i].running_gauge as f64);
    e.family("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge");
    per_model(&mut e, "vllm:num_requests_waiting", &|i| c[i].waiting_gauge as f64);
    e.family("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge");
    per_model(&mut e, "vllm:kv_cache_usage_perc", &|_| state.kv_usage);
    e.family("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "counter");
    per_model(&mut e, "vllm:prompt_tokens_total", &|i| c[i].prompt_tokens as f64);
    e.family("vllm:generation_tokens_total", "Number of generation tokens processed.", "counter");
    per_model(&mut e, "vllm:generation_tokens_total", &|i| c[i].generation_tokens as f64);
    e.family("vllm:request_success_total", "Count of successfully processed requests.", "counter");
    for (i, model) in models.iter().enumerate() {
        // Aborted requests are not counted: `abort` stays at zero.
        for (reason, count) in [("stop", c[i].finished), ("length", 0), ("abort", 0)] {
            let labels = [("model_name", model.as_str()), ("engine", "0"), ("finished_reason", reason)];
            e.sample("vllm:request_success_total", &labels, count as f64);
        }
    }
    type Pick = fn(&ClassMetrics) -> Option<&Histogram>;
    let histograms: [(&str, &str, Pick); 3] = [
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", |c| Some(&c.e2e)),
        ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", |c| {
            Some(&c.queue)
        }),
        ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", |c| {
            c.inference.as_ref()
        }),
    ];
    for (name, help, pick) in histograms {
        e.family(name, help, "histogram");
        for (model, class) in models.iter().zip(c) {
            if let Some(h) = pick(class) {
                e.histogram(name, &[("model_name", model), ("engine", "0")], h);
            }
        }
    }
    e.into_text()
}
