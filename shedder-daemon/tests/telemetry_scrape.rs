//! Scraping vLLM, SGLang and Triton (with its vLLM and TensorRT-LLM
//! backends): fixture files in each exporter's real exposition format (see
//! `fixtures/README.md` and the generators there) parsed into exact
//! per-interval observations, including a restart that resets every counter,
//! the live queue estimate and what a target lacks; and the same through
//! HTTP from a server on 127.0.0.1.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    net::{TcpListener, TcpStream},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use shedder_daemon::telemetry::{
    ClassObservations,
    Observation::{self, GaugesFrozen, KvCacheUsage, PredictedQueueAge, QueueDepth, Running},
    scrape::{Exporter, ScrapeTarget, Scraper, TargetState, missing_families, targets_up},
};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Scrapes five seconds apart, on the test's own clock.
fn at(scrape: u64) -> Duration {
    Duration::from_secs(5 * scrape)
}

/// Little's law as the estimator states it: `waiting` queued, `finished`
/// over `seconds`, in ms.
fn little_ms(waiting: f64, seconds: f64, finished: f64) -> f64 {
    waiting * seconds / finished * 1000.0
}

fn target(url: &str, kind: Exporter, models: &[(&str, &str)]) -> ScrapeTarget {
    ScrapeTarget {
        url: url.into(),
        kind,
        models: models.iter().map(|(model, class)| (model.to_string(), class.to_string())).collect(),
    }
}

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn vllm_target(url: &str) -> ScrapeTarget {
    target(url, Exporter::Vllm, &[(LLAMA, "interactive")])
}

fn class(name: &str, observations: Vec<Observation>) -> ClassObservations {
    ClassObservations { class: name.into(), observations }
}

fn queue(pairs: &[(f64, u64)]) -> impl Iterator<Item = Observation> + '_ {
    pairs.iter().map(|&(ms, count)| Observation::QueueAge { ms, count })
}

fn service(pairs: &[(f64, u64)]) -> impl Iterator<Item = Observation> + '_ {
    pairs.iter().map(|&(ms, count)| Observation::Service { ms, count })
}

/// What the vLLM fixtures hold, interval by interval (the per-bucket counts
/// `gen_vllm.py` recorded, summed over its two engines), scraped five
/// seconds apart.
fn vllm_expected() -> [Vec<ClassObservations>; 3] {
    [
        // First scrape: a baseline for the histograms and counters; gauges
        // at once (waiting 0 + 2, running 5 + 4, KV cache max(0.18, 0.25)),
        // no throughput yet, so no live estimate.
        vec![class("interactive", vec![QueueDepth(2), Running(9), KvCacheUsage(0.25), GaugesFrozen(false)])],
        // Second: the interval's jobs, queue and inference time (RUNNING),
        // each bucket at its upper bound (`_sum` allows that much, with so
        // many requests). 27 requests finished in 5 s with 4
        // waiting: Little's law says 741 ms, but the finished requests' p95
        // (5 s) is worse, and wins.
        vec![class(
            "interactive",
            queue(&[(300.0, 15), (500.0, 3), (800.0, 3), (1500.0, 1), (2000.0, 1), (5000.0, 3), (10000.0, 1)])
                .chain(service(&[
                    (300.0, 2),
                    (500.0, 7),
                    (800.0, 8),
                    (1000.0, 5),
                    (1500.0, 3),
                    (2000.0, 1),
                    (2500.0, 1),
                ]))
                .chain([
                    QueueDepth(4),
                    Running(14),
                    KvCacheUsage(0.61),
                    PredictedQueueAge { ms: 5000.0 },
                    GaugesFrozen(false),
                ])
                .collect(),
        )],
        // Third: vLLM restarted; every counter is lower, so the new totals are
        // the interval (not negative deltas, not a fresh baseline). Nothing
        // waits: the finished requests' p95 is the estimate. Few requests,
        // so `_sum` leaves some buckets below their bounds, engine by engine:
        // the first bucket's 2 + 4 at 180 and 210 ms, and 2 of the (0.5,
        // 0.8] s inference times at 680 ms.
        vec![class(
            "interactive",
            queue(&[(180.0, 2), (210.0, 4), (500.0, 1)])
                .chain(service(&[(500.0, 3), (680.0, 2), (800.0, 2)]))
                .chain([
                    QueueDepth(0),
                    Running(2),
                    KvCacheUsage(0.05),
                    PredictedQueueAge { ms: 500.0 },
                    GaugesFrozen(false),
                ])
                .collect(),
        )],
    ]
}

#[test]
fn vllm_intervals_from_two_engines_across_a_restart() {
    let mut state = TargetState::new(vllm_target("http://127.0.0.1:8000/metrics")).unwrap();
    let [first, second, third] = vllm_expected();
    assert_eq!(state.ingest(&fixture("vllm_1.prom"), at(0)).unwrap(), first);
    assert_eq!(state.ingest(&fixture("vllm_2.prom"), at(1)).unwrap(), second);
    assert_eq!(state.ingest(&fixture("vllm_3_restarted.prom"), at(2)).unwrap(), third);
    assert_eq!(state.missing_families(), Vec::<&str>::new());
    assert_eq!(state.scrapes(), 3);
}

#[test]
fn vllm_interval_counts_match_the_exporters_own_totals() {
    // Cross-check against a number the exporter prints itself: the queue
    // histograms' `_count` grew by 19 (engine 0) + 8 (engine 1).
    let count = |text: &str, engine: &str| -> f64 {
        let prefix = format!("vllm:request_queue_time_seconds_count{{engine=\"{engine}\",model_name=\"{LLAMA}\"}} ");
        text.lines().find_map(|line| line.strip_prefix(&prefix)).unwrap().parse().unwrap()
    };
    let (before, after) = (fixture("vllm_1.prom"), fixture("vllm_2.prom"));
    let grown = count(&after, "0") - count(&before, "0") + count(&after, "1") - count(&before, "1");
    let mut state = TargetState::new(vllm_target("http://127.0.0.1:8000/metrics")).unwrap();
    state.ingest(&before, at(0)).unwrap();
    let interval = state.ingest(&after, at(1)).unwrap();
    let counted = |pick: fn(&Observation) -> Option<u64>| interval[0].observations.iter().filter_map(pick).sum::<u64>();
    let queued = counted(|o| if let Observation::QueueAge { count, .. } = o { Some(*count) } else { None });
    let served = counted(|o| if let Observation::Service { count, .. } = o { Some(*count) } else { None });
    assert_eq!(grown, 27.0);
    assert_eq!((queued, served), (27, 27));
}

#[test]
fn a_vllm_that_stops_stepping_with_a_queue_shows_frozen_gauges() {
    // After `vllm_2.prom` the server prints the same exposition again and
    // again: 4 waiting, 14 running, but no request finishes and no token is
    // processed, so no engine step ran to refresh those gauges.
    let mut state = TargetState::new(vllm_target("http://127.0.0.1:8000/metrics")).unwrap();
    state.ingest(&fixture("vllm_1.prom"), at(0)).unwrap();
    state.ingest(&fixture("vllm_2.prom"), at(1)).unwrap();
    let live = |observations: &[ClassObservations]| -> Vec<Observation> {
        observations[0]
            .observations
            .iter()
            .filter(|o| matches!(o, PredictedQueueAge { .. } | GaugesFrozen(_)))
            .cloned()
            .collect()
    };
    // One still interval is a suspicion; two make the gauges frozen. With
    // nothing finished over the last 5 s (the throughput's horizon), the
    // drain rate is at most one request per 5 s: 4 waiting is 20 s.
    assert_eq!(
        live(&state.ingest(&fixture("vllm_2.prom"), at(2)).unwrap()),
        vec![PredictedQueueAge { ms: little_ms(4.0, 5.0, 1.0) }, GaugesFrozen(false)]
    );
    assert_eq!(
        live(&state.ingest(&fixture("vllm_2.prom"), at(3)).unwrap()),
        vec![PredictedQueueAge { ms: little_ms(4.0, 5.0, 1.0) }, GaugesFrozen(true)]
    );
    // The server steps again (a restart here): fresh.
    assert_eq!(live(&state.ingest(&fixture("vllm_3_restarted.prom"), at(4)).unwrap())[1], GaugesFrozen(false));
}

#[test]
fn old_vllm_falls_back_to_e2e_latency_and_gpu_cache_usage() {
    // vLLM's v0.4 series: no queue-time or inference-time histogram, the
    // KV-cache gauge under its old name, one request past the last bucket.
    let model = "mistralai/Mistral-7B-Instruct-v0.2";
    let mut state =
        TargetState::new(target("http://127.0.0.1:8000/metrics", Exporter::Vllm, &[(model, "batch")])).unwrap();
    assert_eq!(
        state.ingest(&fixture("vllm_v0_4_a.prom"), at(0)).unwrap(),
        vec![class("batch", vec![QueueDepth(1), Running(9), KvCacheUsage(0.3125), GaugesFrozen(false)])]
    );
    assert_eq!(
        state.ingest(&fixture("vllm_v0_4_b.prom"), at(1)).unwrap(),
        vec![class(
            "batch",
            // The 75 s request lands in +Inf, past the last bound (60 s).
            // `_sum` grew by 107.3 s, of which the finite buckets' jobs took
            // at least 20 s (their lower bounds): the tail job is placed at
            // 87.3 s, never below its true 75 s.
            service(&[(1000.0, 3), (2500.0, 5), (5000.0, 2), (15000.0, 1), (87300.0, 1)])
                .chain([
                    QueueDepth(7),
                    Running(14),
                    KvCacheUsage(0.875),
                    // No queue histogram: Little's law alone, 12 finished in 5 s.
                    PredictedQueueAge { ms: little_ms(7.0, 5.0, 12.0) },
                    GaugesFrozen(false),
                ])
                .collect(),
        )]
    );
    // It says what it lacks: the queue-time histogram.
    assert_eq!(state.missing_families(), vec!["vllm:request_queue_time_seconds"]);
}

fn triton_target(url: &str) -> ScrapeTarget {
    // `preprocess` is served too but not mapped: it must not show up.
    target(url, Exporter::Triton, &[("resnet50_trt", "interactive"), ("bert_large", "batch")])
}

#[test]
fn triton_means_per_model_version_across_a_restart() {
    let mut state = TargetState::new(triton_target("http://127.0.0.1:8002/metrics")).unwrap();
    // First scrape: pending-request gauges only (bert_large v1 0 + v2 1).
    assert_eq!(
        state.ingest(&fixture("triton_1.prom"), at(0)).unwrap(),
        vec![
            class("batch", vec![QueueDepth(1), GaugesFrozen(false)]),
            class("interactive", vec![QueueDepth(2), GaugesFrozen(false)])
        ]
    );
    // Second: resnet50 served 400 requests that queued 1.0 s and computed
    // 6.4 s in all: 2.5 ms and 16 ms each. bert_large v1: 100 requests, 3 s
    // and 12 s; v2: 300 requests, 3 s and 36 s. The live estimate: 400
    // requests in 5 s, 7 and 17 waiting now.
    assert_eq!(
        state.ingest(&fixture("triton_2.prom"), at(1)).unwrap(),
        vec![
            class(
                "batch",
                queue(&[(10.0, 300), (30.0, 100)])
                    .chain(service(&[(120.0, 400)]))
                    .chain([QueueDepth(7), PredictedQueueAge { ms: little_ms(7.0, 5.0, 400.0) }, GaugesFrozen(false)])
                    .collect(),
            ),
            class(
                "interactive",
                queue(&[(2.5, 400)])
                    .chain(service(&[(16.0, 400)]))
                    .chain([QueueDepth(17), PredictedQueueAge { ms: little_ms(17.0, 5.0, 400.0) }, GaugesFrozen(false)])
                    .collect()
            ),
        ]
    );
    // Third: tritonserver restarted. resnet50 50 requests (150 ms queued,
    // 900 ms computing in all), bert_large v1 20 (400 ms, 2.6 s), v2 none.
    // Nothing waits: the estimate is the finished requests' queue time.
    assert_eq!(
        state.ingest(&fixture("triton_3_restarted.prom"), at(2)).unwrap(),
        vec![
            class(
                "batch",
                queue(&[(20.0, 20)])
                    .chain(service(&[(130.0, 20)]))
                    .chain([QueueDepth(0), PredictedQueueAge { ms: 20.0 }, GaugesFrozen(false)])
                    .collect()
            ),
            class(
                "interactive",
                queue(&[(3.0, 50)])
                    .chain(service(&[(18.0, 50)]))
                    .chain([QueueDepth(0), PredictedQueueAge { ms: 3.0 }, GaugesFrozen(false)])
                    .collect()
            ),
        ]
    );
}

#[test]
fn a_restart_right_after_the_baseline_still_counts_everything_since() {
    // Scrapes 1 and 3: the counters went back between them.
    let mut state = TargetState::new(triton_target("http://127.0.0.1:8002/metrics")).unwrap();
    state.ingest(&fixture("triton_2.prom"), at(0)).unwrap();
    let after_restart = state.ingest(&fixture("triton_3_restarted.prom"), at(1)).unwrap();
    let mut fresh = TargetState::new(triton_target("http://127.0.0.1:8002/metrics")).unwrap();
    fresh.ingest(&fixture("triton_1.prom"), at(0)).unwrap();
    fresh.ingest(&fixture("triton_2.prom"), at(1)).unwrap();
    assert_eq!(after_restart, fresh.ingest(&fixture("triton_3_restarted.prom"), at(2)).unwrap());
}

#[test]
fn triton_with_the_vllm_backend_reads_the_engine_and_every_gpu_series() {
    let url = "http://127.0.0.1:8002/metrics";
    let mut state =
        TargetState::new(target(url, Exporter::Triton, &[("vllm_model", "interactive"), ("preprocess", "batch")]))
            .unwrap();
    assert_eq!(
        state.ingest(&fixture("triton_vllm_1.prom"), at(0)).unwrap(),
        vec![
            // preprocess: pending 0 + 1 (one series per GPU) + 0 (no gpu_uuid).
            class("batch", vec![QueueDepth(1), GaugesFrozen(false)]),
            // vllm_model: the engine's gauges, Triton's pending added.
            class("interactive", vec![QueueDepth(1), Running(6), KvCacheUsage(0.22), GaugesFrozen(false)]),
        ]
    );
    assert_eq!(
        state.ingest(&fixture("triton_vllm_2.prom"), at(1)).unwrap(),
        vec![
            // preprocess, per GPU series: 200 requests (2 ms queued, 10 ms
            // computing each) and 600 (1 ms, 5 ms); the all-zero series adds nothing.
            class(
                "batch",
                queue(&[(1.0, 600), (2.0, 200)])
                    .chain(service(&[(5.0, 600), (10.0, 200)]))
                    .chain([QueueDepth(1), PredictedQueueAge { ms: little_ms(1.0, 5.0, 800.0) }, GaugesFrozen(false)])
                    .collect(),
            ),
            // vllm_model: queue and service from the engine's histograms,
            // not Triton's own counters (which miss the engine's queue); 28
            // finished in 5 s with 12 waiting is 2.1 s by Little's law, and
            // the finished requests' p95 (5 s) is worse. The 6 longest
            // inference times, in (2.5, 5] s, at the 4.8 s `_sum` allows.
            class(
                "interactive",
                queue(&[(300.0, 20), (1000.0, 5), (5000.0, 3)])
                    .chain(service(&[(1000.0, 10), (2500.0, 12), (4800.0, 6)]))
                    .chain([
                        QueueDepth(12),
                        Running(16),
                        KvCacheUsage(0.81),
                        PredictedQueueAge { ms: 5000.0 },
                        GaugesFrozen(false),
                    ])
                    .collect(),
            ),
        ]
    );
    assert_eq!(state.missing_families(), Vec::<&str>::new());
}

#[test]
fn triton_with_tensorrt_llm_and_latency_counters_off_says_what_it_lacks() {
    let url = "http://127.0.0.1:8002/metrics";
    let mut state = TargetState::new(target(url, Exporter::Triton, &[("tensorrt_llm", "interactive")])).unwrap();
    assert_eq!(
        state.ingest(&fixture("triton_trtllm_1.prom"), at(0)).unwrap(),
        vec![class("interactive", vec![QueueDepth(0), Running(4), KvCacheUsage(0.3), GaugesFrozen(false)])]
    );
    // 30 requests finished (16 + 14 + 0 over the GPU series); 9 waiting in
    // the engine and 3 pending in Triton. No duration counters: no queue or
    // service observations, the live estimate alone.
    assert_eq!(
        state.ingest(&fixture("triton_trtllm_2.prom"), at(1)).unwrap(),
        vec![class(
            "interactive",
            vec![
                QueueDepth(12),
                Running(64),
                KvCacheUsage(0.93),
                PredictedQueueAge { ms: little_ms(12.0, 5.0, 30.0) },
                GaugesFrozen(false),
            ]
        )]
    );
    assert_eq!(
        state.missing_families(),
        vec!["nv_inference_compute_infer_duration_us", "nv_inference_queue_duration_us"]
    );
}

#[test]
fn triton_with_latency_summaries_instead_of_counters() {
    // counter_latencies=false, summary_latencies=true: the summaries' sums
    // give the same means; nothing is reported missing.
    let mut state =
        TargetState::new(target("http://127.0.0.1:8002/metrics", Exporter::Triton, &[("resnet50_trt", "interactive")]))
            .unwrap();
    state.ingest(&fixture("triton_summaries_1.prom"), at(0)).unwrap();
    assert_eq!(
        state.ingest(&fixture("triton_summaries_2.prom"), at(1)).unwrap(),
        vec![class(
            "interactive",
            queue(&[(2.5, 400)])
                .chain(service(&[(16.0, 400)]))
                .chain([QueueDepth(6), PredictedQueueAge { ms: little_ms(6.0, 5.0, 400.0) }, GaugesFrozen(false)])
                .collect(),
        )]
    );
    assert_eq!(state.missing_families(), Vec::<&str>::new());
}

// --- SGLang ------------------------------------------------------------------

const QWEN: &str = "Qwen/Qwen2.5-7B-Instruct";

#[test]
fn sglang_single_scheduler_in_multi_process_format() {
    let mut state =
        TargetState::new(target("http://127.0.0.1:30000/metrics", Exporter::Sglang, &[(QWEN, "interactive")])).unwrap();
    assert_eq!(
        state.ingest(&fixture("sglang_1.prom"), at(0)).unwrap(),
        vec![class("interactive", vec![QueueDepth(3), Running(12), KvCacheUsage(0.2), GaugesFrozen(false)])]
    );
    // 8 requests finished in 5 s, 5 waiting: Little's law says 3.1 s; one
    // of them had queued in (4, 5] s, and the p95 takes it: at 4.78 s, the
    // most `_sum` leaves it (see `_sum`'s rule in the scrape's histograms).
    assert_eq!(
        state.ingest(&fixture("sglang_2.prom"), at(1)).unwrap(),
        vec![class(
            "interactive",
            queue(&[(0.0, 4), (200.0, 3), (4780.0, 1)])
                .chain(service(&[(1000.0, 4), (2000.0, 3), (8000.0, 1)]))
                .chain([
                    QueueDepth(5),
                    Running(16),
                    KvCacheUsage(0.55),
                    PredictedQueueAge { ms: 4780.0 },
                    GaugesFrozen(false),
                ])
                .collect(),
        )]
    );
    assert_eq!(state.missing_families(), Vec::<&str>::new());
}

#[test]
fn sglang_data_parallel_replicas_sum_and_tensor_parallel_ranks_count_once() {
    let mut state =
        TargetState::new(target("http://127.0.0.1:30000/metrics", Exporter::Sglang, &[(QWEN, "interactive")])).unwrap();
    // Four schedulers report (dp 0 and 1, tp 0 and 1 each); replica dp 0
    // has 6 waiting and 24 running, dp 1 has 2 and 20: 8 and 44, not twice.
    assert_eq!(
        state.ingest(&fixture("sglang_dp_1.prom"), at(0)).unwrap(),
        vec![class("interactive", vec![QueueDepth(8), Running(44), KvCacheUsage(0.41), GaugesFrozen(false)])]
    );
    // The interval: dp 0 recorded 16 queue times, dp 1 7 (each once, though
    // two TP ranks print them); two tokenizer processes saw 23 requests
    // finish and 3 aborted. 26 left the queue in 5 s with 13 waiting: 2.5 s
    // by Little's law, worse than the finished requests' p95 (2 s).
    assert_eq!(
        state.ingest(&fixture("sglang_dp_2.prom"), at(1)).unwrap(),
        vec![class(
            "interactive",
            queue(&[(100.0, 16), (500.0, 4), (1000.0, 1), (2000.0, 2)])
                .chain(service(&[(800.0, 6), (1000.0, 5), (2000.0, 7), (4000.0, 3), (6000.0, 2)]))
                .chain([
                    QueueDepth(13),
                    Running(64),
                    KvCacheUsage(0.77),
                    PredictedQueueAge { ms: little_ms(13.0, 5.0, 26.0) },
                    GaugesFrozen(false),
                ])
                .collect(),
        )]
    );
}

#[test]
fn a_target_of_the_wrong_kind_lacks_every_family() {
    // An SGLang endpoint configured as vLLM: nothing it reads is there.
    let mut state =
        TargetState::new(target("http://127.0.0.1:30000/metrics", Exporter::Vllm, &[(QWEN, "interactive")])).unwrap();
    assert_eq!(state.ingest(&fixture("sglang_1.prom"), at(0)).unwrap(), vec![]);
    assert_eq!(
        state.missing_families(),
        vec![
            "vllm:kv_cache_usage_perc",
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:request_inference_time_seconds",
            "vllm:request_queue_time_seconds",
        ]
    );
}

// --- Over HTTP -------------------------------------------------------------

/// A one-thread HTTP server on 127.0.0.1 (ephemeral port) that answers each
/// connection with the next scripted response and reports each request it
/// read. It serves exactly `responses.len()` connections, then exits.
struct TinyServer {
    url: String,
    requests: mpsc::Receiver<String>,
    thread: thread::JoinHandle<()>,
}

enum Reply {
    Ok(String),
    Status(u16, &'static str),
    /// Accept the connection, then say nothing for this long.
    Silent(Duration),
}

impl TinyServer {
    fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let (tx, requests) = mpsc::channel();
        let thread = thread::spawn(move || {
            for reply in replies {
                let (stream, _) = listener.accept().unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let request = read_request(&stream);
                let _ = tx.send(request);
                let mut stream = stream;
                let response = match reply {
                    Reply::Ok(body) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    Reply::Status(code, reason) => {
                        format!("HTTP/1.1 {code} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    }
                    Reply::Silent(pause) => {
                        thread::sleep(pause);
                        continue;
                    }
                };
                // The client may have given up (timeout test); ignore.
                let _ = stream.write_all(response.as_bytes());
            }
        });
        Self { url, requests, thread }
    }

    fn join(self) {
        self.thread.join().unwrap();
    }
}

fn read_request(stream: &TcpStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut request = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            return request;
        }
        request.push_str(&line);
    }
}

#[test]
fn scraping_a_real_endpoint_over_http() {
    let server = TinyServer::start(vec![
        Reply::Ok(fixture("vllm_1.prom")),
        Reply::Status(503, "Service Unavailable"),
        Reply::Ok(fixture("vllm_2.prom")),
        Reply::Ok(fixture("vllm_3_restarted.prom")),
    ]);
    let mut scraper = Scraper::new(vllm_target(&server.url), Duration::from_secs(5)).unwrap();
    let [first, second, third] = vllm_expected();

    assert_eq!(scraper.scrape().unwrap(), first);
    let request = server.requests.recv().unwrap();
    assert!(request.starts_with("GET /metrics HTTP/1.1\r\n"), "{request}");
    let headers: BTreeMap<String, String> = request
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
        .collect();
    assert_eq!(headers["accept"], "text/plain;version=0.0.4", "asks for the classic text format");
    assert!(headers["user-agent"].starts_with("shedder/"), "{headers:?}");

    // A failed scrape is an error that names the endpoint, and changes
    // nothing: the next one is still relative to the first.
    let up = || targets_up().into_iter().find(|(target, _)| *target == server.url).map(|(_, up)| up);
    assert_eq!(up(), Some(true));
    let error = format!("{:#}", scraper.scrape().unwrap_err());
    assert!(error.starts_with(&format!("scraping {}", server.url)), "{error}");
    assert!(error.contains("503"), "{error}");
    assert_eq!(up(), Some(false), "shedder_scrape_up reads 0 for the target");
    assert_eq!(scraper.scrape().unwrap(), second);
    assert_eq!(up(), Some(true));
    assert_eq!(scraper.scrape().unwrap(), third);
    // A complete vLLM exposition: nothing reported missing for it.
    assert!(missing_families().iter().all(|(target, _)| *target != server.url));
    server.join();
}

#[test]
fn a_silent_endpoint_times_out() {
    let timeout = Duration::from_millis(300);
    let server = TinyServer::start(vec![Reply::Silent(Duration::from_secs(2))]);
    let mut scraper = Scraper::new(triton_target(&server.url), timeout).unwrap();
    let started = Instant::now();
    let error = format!("{:#}", scraper.scrape().unwrap_err());
    let took = started.elapsed();
    assert!(error.starts_with(&format!("scraping {}", server.url)), "{error}");
    assert!(error.to_lowercase().contains("timeout") || error.to_lowercase().contains("timed out"), "{error}");
    // Ends by the timeout, not by the server closing at 2 s. (A bound, not a
    // benchmark: ten times the timeout is still under the server's pause.)
    assert!(took < Duration::from_secs(2), "took {took:?}");
    server.join();
}

#[test]
fn nothing_listening_is_an_error_not_a_hang() {
    // A port that was just free: bind, note it, close.
    let url = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/metrics", listener.local_addr().unwrap())
    };
    let mut scraper = Scraper::new(vllm_target(&url), Duration::from_secs(2)).unwrap();
    let error = format!("{:#}", scraper.scrape().unwrap_err());
    assert!(error.starts_with(&format!("scraping {url}")), "{error}");
}
