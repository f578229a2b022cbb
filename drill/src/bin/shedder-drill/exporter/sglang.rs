//! SGLang's `/metrics`: the scheduler's families (`model_name`,
//! `engine_type`, `tp_rank`, `pp_rank`; one scheduler, rank 0) and the
//! tokenizer's (`model_name`), with SGLang's names, help strings and
//! buckets. The aborted-requests counter appears with the first abort, as
//! `prometheus_client` creates a labelled counter on its first increment.

use super::{State, text::Exposition};

/// SGLang's queue-time buckets, s.
pub const QUEUE_BUCKETS: &[f64] = &[
    0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0,
    200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0,
    3000.0,
];
/// SGLang's end-to-end latency buckets, s.
pub const E2E_BUCKETS: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0, 600.0, 1200.0,
    1800.0, 2400.0,
];

/// One series' value: the state, the class.
type Read = fn(&State, usize) -> f64;

pub fn render(models: &[String], state: &State) -> String {
    let mut e = Exposition::default();
    let c = &state.classes;
    let gauges: [(&str, &str, Read); 3] = [
        ("sglang:num_running_reqs", "The number of running requests.", |s, i| s.classes[i].running_gauge as f64),
        ("sglang:token_usage", "The token usage.", |s, _| s.kv_usage),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", |s, i| {
            s.classes[i].waiting_gauge as f64
        }),
    ];
    for (name, help, value) in gauges {
        e.family(name, help, "gauge");
        for (i, model) in models.iter().enumerate() {
            e.sample(name, &scheduler(model), value(state, i));
        }
    }
    e.family("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", "histogram");
    for (model, class) in models.iter().zip(c) {
        e.histogram("sglang:queue_time_seconds", &scheduler(model), &class.queue);
    }
    let counters: [(&str, &str, Read); 3] = [
        ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", |s, i| s.classes[i].prompt_tokens as f64),
        ("sglang:generation_tokens_total", "Number of generation tokens processed.", |s, i| {
            s.classes[i].generation_tokens as f64
        }),
        ("sglang:num_requests_total", "Number of requests processed.", |s, i| s.classes[i].finished as f64),
    ];
    for (name, help, value) in counters {
        e.family(name, help, "counter");
        for (i, model) in models.iter().enumerate() {
            e.sample(name, &[("model_name", model)], value(state, i));
        }
    }
    e.family("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", "histogram");
    for (model, class) in models.iter().zip(c) {
        e.histogram("sglang:e2e_request_latency_seconds", &[("model_name", model)], &class.e2e);
    }
    if c.iter().any(|class| class.aborted > 0) {
        e.family("sglang:num_aborted_requests_total", "Number of requests aborted.", "counter");
        for (model, class) in models.iter().zip(c).filter(|(_, class)| class.aborted > 0) {
            e.sample("sglang:num_aborted_requests_total", &[("model_name", model)], class.aborted as f64);
        }
    }
    e.into_text()
}

/// A scheduler family's labels: one scheduler, rank 0.
fn scheduler(model: &str) -> [(&str, &str); 4] {
    [("model_name", model), ("engine_type", "unified"), ("tp_rank", "0"), ("pp_rank", "0")]
}
