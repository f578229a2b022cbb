//! A reload that changes the control tick or the scrape targets takes
//! effect, as the operator who reloads expects: the owner loop ticks at the
//! new period and fetches the new targets, and a removed target leaves
//! `/metrics`. (Both used to be read once, at start: the tick went on at the
//! old period, so a shorter watchdog could fail open between heartbeats.)

mod memory_bed;

use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpListener},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use shedder_daemon::fastpath::{Fastpath as _, memory::MemoryFastpath};
use shedder_testbed::owner::OwnerThread;

/// The config with a tick of `tick_ms`, scraping `scrape` if given.
fn config_text(tick_ms: u64, scrape: Option<&str>) -> String {
    let scrape = scrape.map_or(String::new(), |url| {
        format!("[[scrape]]\nurl = \"{url}\"\nkind = \"vllm\"\nmodels = {{ \"meta-llama/Llama-3.1-8B-Instruct\" = \"chat\" }}\n")
    });
    format!(
        r#"mode = "observe"
default_class = "chat"
scrape_interval_ms = 200

[[class]]
name = "chat"
rate = 100
burst = 10
action = "drop"
deadline_ms = 2000

[control]
tick_ms = {tick_ms}

[watchdog]
fail_open_after_ms = 10000

{scrape}"#
    )
}

/// A vLLM-format `/metrics` on loopback, answering until stopped (at most
/// 500 requests).
struct Exporter {
    url: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Exporter {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let body = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/vllm_1.prom")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut served = 0;
            while served < 500 && !stopping.load(Ordering::Relaxed) {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                stream.set_nonblocking(false).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut reader = BufReader::new(&stream);
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 2 {
                    line.clear();
                }
                let mut stream = &stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                served += 1;
            }
        });
        Self { url, stop, thread: Some(thread) }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits (bounded) until `/metrics` says `want` of `url`'s scrape.
fn wait_for_scrape_up(addr: SocketAddr, url: &str, want: Option<&str>) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let scrape = memory_bed::get_metrics(addr);
        let line = scrape.lines().find(|l| l.starts_with(&format!("shedder_scrape_up{{target=\"{url}\"}}")));
        if line.map(|l| l.rsplit(' ').next().unwrap()) == want {
            return;
        }
        assert!(Instant::now() < until, "want shedder_scrape_up {want:?} for {url}, got {line:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many heartbeats the owner loop wrote over `span`.
fn heartbeats(fastpath: &MemoryFastpath, span: Duration) -> usize {
    let began = Instant::now();
    let mut seen = BTreeSet::new();
    while began.elapsed() < span {
        seen.insert(fastpath.heartbeat().unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
    seen.len()
}

#[test]
fn a_reload_moves_the_tick_and_the_scrapes() {
    let dir = std::env::temp_dir().join(format!("shedder-reload-follows-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("shedder.toml");
    let exporter = Exporter::start();

    std::fs::write(&path, config_text(100, None)).unwrap();
    let (daemon, fastpath) = memory_bed::daemon_reading(&path);
    let (owner, metrics_addr) = OwnerThread::start_with_metrics_and_scrapes(daemon, "reload-follows");
    let fast = heartbeats(&fastpath, Duration::from_secs(2));

    // A tick ten times longer, and a server to scrape.
    std::fs::write(&path, config_text(1000, Some(&exporter.url))).unwrap();
    let answer = memory_bed::call(owner.socket(), r#"{"op": "reload"}"#);
    assert_eq!(answer["ok"], true, "{answer}");
    wait_for_scrape_up(metrics_addr, &exporter.url, Some("1"));
    let slow = heartbeats(&fastpath, Duration::from_secs(2));
    assert!(slow * 3 < fast, "ticks over 2 s: {fast} at 100 ms, {slow} after the reload to 1000 ms");

    // Back: the target leaves /metrics, and the tick is short again.
    std::fs::write(&path, config_text(100, None)).unwrap();
    let answer = memory_bed::call(owner.socket(), r#"{"op": "reload"}"#);
    assert_eq!(answer["ok"], true, "{answer}");
    wait_for_scrape_up(metrics_addr, &exporter.url, None);
    let again = heartbeats(&fastpath, Duration::from_secs(2));
    assert!(slow * 3 < again, "ticks over 2 s: {slow} at 1000 ms, {again} after the reload back to 100 ms");

    assert!(owner.stop(), "the socket file is removed");
    let _ = std::fs::remove_dir_all(&dir);
}
