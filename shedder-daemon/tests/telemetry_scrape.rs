//! Scraping vLLM and Triton: fixture files in each exporter's real exposition
//! format (see `fixtures/gen_vllm.py` and `fixtures/README.md`) parsed into
//! exact per-interval observations, including a restart that resets every
//! counter; and the same through HTTP from a server on 127.0.0.1.

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
    Observation::{self, KvCacheUsage, QueueDepth},
    scrape::{Exporter, ScrapeTarget, Scraper, TargetState},
};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
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
/// `gen_vllm.py` recorded, summed over its two engines).
fn vllm_expected() -> [Vec<ClassObservations>; 3] {
    [
        // First scrape: a baseline for the histograms; gauges at once
        // (waiting 0 + 2, KV cache max(0.18, 0.25)).
        vec![class("interactive", vec![QueueDepth(2), KvCacheUsage(0.25)])],
        // Second: the interval's jobs, queue and inference time (RUNNING),
        // each bucket at its upper bound.
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
                .chain([QueueDepth(4), KvCacheUsage(0.61)])
                .collect(),
        )],
        // Third: vLLM restarted; every counter is lower, so the new totals are
        // the interval (not negative deltas, not a fresh baseline).
        vec![class(
            "interactive",
            queue(&[(300.0, 6), (500.0, 1)])
                .chain(service(&[(500.0, 3), (800.0, 4)]))
                .chain([QueueDepth(0), KvCacheUsage(0.05)])
                .collect(),
        )],
    ]
}

#[test]
fn vllm_intervals_from_two_engines_across_a_restart() {
    let mut state = TargetState::new(vllm_target("http://127.0.0.1:8000/metrics")).unwrap();
    let [first, second, third] = vllm_expected();
    assert_eq!(state.ingest(&fixture("vllm_1.prom")).unwrap(), first);
    assert_eq!(state.ingest(&fixture("vllm_2.prom")).unwrap(), second);
    assert_eq!(state.ingest(&fixture("vllm_3_restarted.prom")).unwrap(), third);
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
    state.ingest(&before).unwrap();
    let interval = state.ingest(&after).unwrap();
    let counted = |pick: fn(&Observation) -> Option<u64>| interval[0].observations.iter().filter_map(pick).sum::<u64>();
    let queued = counted(|o| if let Observation::QueueAge { count, .. } = o { Some(*count) } else { None });
    let served = counted(|o| if let Observation::Service { count, .. } = o { Some(*count) } else { None });
    assert_eq!(grown, 27.0);
    assert_eq!((queued, served), (27, 27));
}

#[test]
fn old_vllm_falls_back_to_e2e_latency_and_gpu_cache_usage() {
    // vLLM's v0.4 series: no queue-time or inference-time histogram, the
    // KV-cache gauge under its old name, one request past the last bucket.
    let model = "mistralai/Mistral-7B-Instruct-v0.2";
    let mut state =
        TargetState::new(target("http://127.0.0.1:8000/metrics", Exporter::Vllm, &[(model, "batch")])).unwrap();
    assert_eq!(
        state.ingest(&fixture("vllm_v0_4_a.prom")).unwrap(),
        vec![class("batch", vec![QueueDepth(1), KvCacheUsage(0.3125)])]
    );
    assert_eq!(
        state.ingest(&fixture("vllm_v0_4_b.prom")).unwrap(),
        vec![class(
            "batch",
            // The 75 s request lands in +Inf and is placed at the last
            // finite bound, 60 s.
            service(&[(1000.0, 3), (2500.0, 5), (5000.0, 2), (15000.0, 1), (60000.0, 1)])
                .chain([QueueDepth(7), KvCacheUsage(0.875)])
                .collect(),
        )]
    );
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
        state.ingest(&fixture("triton_1.prom")).unwrap(),
        vec![class("batch", vec![QueueDepth(1)]), class("interactive", vec![QueueDepth(2)])]
    );
    // Second: resnet50 served 400 requests that queued 1.0 s and computed
    // 6.4 s in all: 2.5 ms and 16 ms each. bert_large v1: 100 requests, 3 s
    // and 12 s; v2: 300 requests, 3 s and 36 s.
    assert_eq!(
        state.ingest(&fixture("triton_2.prom")).unwrap(),
        vec![
            class(
                "batch",
                queue(&[(30.0, 100), (10.0, 300)])
                    .chain(service(&[(120.0, 100), (120.0, 300)]))
                    .chain([QueueDepth(7)])
                    .collect(),
            ),
            class("interactive", queue(&[(2.5, 400)]).chain(service(&[(16.0, 400)])).chain([QueueDepth(17)]).collect()),
        ]
    );
    // Third: tritonserver restarted. resnet50 50 requests (150 ms queued,
    // 900 ms computing in all), bert_large v1 20 (400 ms, 2.6 s), v2 none.
    assert_eq!(
        state.ingest(&fixture("triton_3_restarted.prom")).unwrap(),
        vec![
            class("batch", queue(&[(20.0, 20)]).chain(service(&[(130.0, 20)])).chain([QueueDepth(0)]).collect()),
            class("interactive", queue(&[(3.0, 50)]).chain(service(&[(18.0, 50)])).chain([QueueDepth(0)]).collect()),
        ]
    );
}

#[test]
fn a_restart_right_after_the_baseline_still_counts_everything_since() {
    // Scrapes 1 and 3: the counters went back between them.
    let mut state = TargetState::new(triton_target("http://127.0.0.1:8002/metrics")).unwrap();
    state.ingest(&fixture("triton_2.prom")).unwrap();
    let after_restart = state.ingest(&fixture("triton_3_restarted.prom")).unwrap();
    let mut fresh = TargetState::new(triton_target("http://127.0.0.1:8002/metrics")).unwrap();
    fresh.ingest(&fixture("triton_1.prom")).unwrap();
    fresh.ingest(&fixture("triton_2.prom")).unwrap();
    assert_eq!(after_restart, fresh.ingest(&fixture("triton_3_restarted.prom")).unwrap());
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
    let error = format!("{:#}", scraper.scrape().unwrap_err());
    assert!(error.starts_with(&format!("scraping {}", server.url)), "{error}");
    assert!(error.contains("503"), "{error}");
    assert_eq!(scraper.scrape().unwrap(), second);
    assert_eq!(scraper.scrape().unwrap(), third);
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
