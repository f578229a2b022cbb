//! The staging backend's scripted exporter: what a vLLM or SGLang server
//! would show on `/metrics` for the same queue and workers, in that server's
//! format ([`vllm`], [`sglang`]), served over HTTP ([`serve`]) for the daemon
//! to scrape instead of pushed samples.
//!
//! What a real server does, and so this one:
//!
//! * **Finish-time recording.** vLLM records a request's queue, inference
//!   and end-to-end times when it *finishes*; SGLang records the queue time
//!   when the request is scheduled (enters a forward batch) and the
//!   end-to-end time when it finishes. Nothing is recorded for a request
//!   while it waits.
//! * **Aborts are never recorded.** A request that leaves the queue without
//!   being served (here: refused by `admit` when a worker takes it) gets no
//!   histogram entry and no finished count; SGLang counts it in its
//!   aborted-requests counter, vLLM nowhere.
//! * **Gauges move on engine steps only.** The engine steps every
//!   [`STEP_MS`] (workload clock) while it holds a request, and once more
//!   after a request finished (the step that finished it); each step
//!   publishes the waiting and running gauges, the KV-cache use (busy
//!   workers / W) and its tokens. An abort is no step: after the last waiting
//!   requests are refused, with nothing running, no step runs and the gauges
//!   freeze at what the last step saw.
//!
//! One engine serves every class; each class is a model (`model_name` = the
//! class's name). Bucket bounds are the servers' own, times the run's time
//! scale: they are durations, and the run plays the workload K times as fast.

mod serve;
mod sglang;
mod text;
mod vllm;

use std::sync::Mutex;

pub use serve::start;
use text::Histogram;

/// The engine's step period on the workload's clock, ms: a decode step of a
/// busy batch.
pub const STEP_MS: f64 = 25.0;
/// Prompt tokens a request brings (counted at the step after it starts).
const PROMPT_TOKENS: u64 = 512;

/// Which server's format the exporter speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Vllm,
    Sglang,
}

/// What the exporter knows of one class.
#[derive(Clone, Debug)]
struct ClassMetrics {
    /// The truth: requests waiting and running now.
    waiting: u64,
    running: u64,
    /// The gauges as the last step published them.
    waiting_gauge: u64,
    running_gauge: u64,
    queue: Histogram,
    /// vLLM's time in RUNNING (SGLang has no such histogram).
    inference: Option<Histogram>,
    e2e: Histogram,
    finished: u64,
    aborted: u64,
    started_since_step: u64,
    prompt_tokens: u64,
    generation_tokens: u64,
}

#[derive(Debug)]
struct State {
    classes: Vec<ClassMetrics>,
    /// A request finished since the last step: the step that finished it
    /// still publishes.
    step_owed: bool,
    kv_usage: f64,
}

/// The exporter of one run's backend.
#[derive(Debug)]
pub struct Exporter {
    format: Format,
    models: Vec<String>,
    workers: u32,
    state: Mutex<State>,
}

impl Exporter {
    /// For classes named `models` (in the workload's order), `workers` slots,
    /// at time scale `k`.
    pub fn new(format: Format, models: Vec<String>, workers: u32, k: f64) -> Self {
        let scaled = |bounds: &[f64]| bounds.iter().map(|b| b * k).collect::<Vec<f64>>();
        let (queue, inference, e2e) = match format {
            Format::Vllm => (vllm::LATENCY_BUCKETS, Some(vllm::LATENCY_BUCKETS), vllm::LATENCY_BUCKETS),
            Format::Sglang => (sglang::QUEUE_BUCKETS, None, sglang::E2E_BUCKETS),
        };
        let class = ClassMetrics {
            waiting: 0,
            running: 0,
            waiting_gauge: 0,
            running_gauge: 0,
            queue: Histogram::new(scaled(queue)),
            inference: inference.map(|bounds| Histogram::new(scaled(bounds))),
            e2e: Histogram::new(scaled(e2e)),
            finished: 0,
            aborted: 0,
            started_since_step: 0,
            prompt_tokens: 0,
            generation_tokens: 0,
        };
        let state = State { classes: vec![class; models.len()], step_owed: false, kv_usage: 0.0 };
        Self { format, models, workers, state: Mutex::new(state) }
    }

    fn with<T>(&self, class: usize, f: impl FnOnce(&mut ClassMetrics) -> T) -> T {
        f(&mut self.state.lock().unwrap().classes[class])
    }

    /// A request joined the queue.
    pub fn queued(&self, class: usize) {
        self.with(class, |c| c.waiting += 1);
    }

    /// A worker started a request that waited `queue_s`.
    pub fn started(&self, class: usize, queue_s: f64) {
        let format = self.format;
        self.with(class, |c| {
            c.waiting = c.waiting.saturating_sub(1);
            c.running += 1;
            c.started_since_step += 1;
            if format == Format::Sglang {
                c.queue.observe(queue_s);
            }
        });
    }

    /// A request left the queue unserved (refused): recorded nowhere but
    /// SGLang's aborted counter.
    pub fn aborted(&self, class: usize) {
        self.with(class, |c| {
            c.waiting = c.waiting.saturating_sub(1);
            c.aborted += 1;
        });
    }

    /// A request finished: its times are recorded now.
    pub fn finished(&self, class: usize, queue_s: f64, service_s: f64) {
        let format = self.format;
        let mut state = self.state.lock().unwrap();
        state.step_owed = true;
        let c = &mut state.classes[class];
        c.running = c.running.saturating_sub(1);
        c.finished += 1;
        c.e2e.observe(queue_s + service_s);
        if let Some(inference) = &mut c.inference {
            inference.observe(service_s);
        }
        if format == Format::Vllm {
            c.queue.observe(queue_s);
        }
    }

    /// One engine step, if the engine holds a request or owes the step that
    /// finished one: the gauges and token counters move. Returns whether it ran.
    pub fn step(&self) -> bool {
        let mut state = self.state.lock().unwrap();
        let owed = std::mem::take(&mut state.step_owed);
        if !owed && state.classes.iter().all(|c| c.waiting + c.running == 0) {
            return false;
        }
        let mut running = 0;
        for c in &mut state.classes {
            c.waiting_gauge = c.waiting;
            c.running_gauge = c.running;
            c.generation_tokens += c.running;
            c.prompt_tokens += std::mem::take(&mut c.started_since_step) * PROMPT_TOKENS;
            running += c.running;
        }
        state.kv_usage = (running as f64 / f64::from(self.workers.max(1))).min(1.0);
        true
    }

    /// The exposition `/metrics` answers with now.
    pub fn render(&self) -> String {
        let state = self.state.lock().unwrap();
        match self.format {
            Format::Vllm => vllm::render(&self.models, &state),
            Format::Sglang => sglang::render(&self.models, &state),
        }
    }
}

#[cfg(test)]
mod tests;
