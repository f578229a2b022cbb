//! A daemon over the in-memory fast path, served by its own owner loop on a
//! control socket in a private directory: no root, no namespace. The test
//! keeps a clone of the fast path and sends frames through it, as clients
//! would through a NIC.
// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpStream,
    os::unix::net::UnixStream,
    path::Path,
};

use serde_json::Value;
use shedder_common::{reference::Counted, verdict::Outcome};
use shedder_daemon::{
    api::server::ControlSocket,
    clock::monotonic_ns,
    config::Config,
    daemon::{self, Daemon, Services},
    fastpath::{Fastpath, memory::MemoryFastpath},
    metrics,
    telemetry::gpu::NoGpu,
};
use shedder_testbed::owner::OwnerThread;
use shedder_testbed::packets::{CLIENT_V4, SERVER_V4, TcpFrame};

/// `config` compiled onto a fresh in-memory fast path, heartbeat written:
/// the daemon, and the fast path's other end.
pub fn daemon(config: &str) -> (Daemon, MemoryFastpath) {
    daemon_of(Config::parse(config).expect("the test config parses"), None)
}

/// The daemon of the config file at `path`, which `reload` reads again.
pub fn daemon_reading(path: &Path) -> (Daemon, MemoryFastpath) {
    daemon_of(Config::from_file(path).expect("the test config parses"), Some(path.to_path_buf()))
}

fn daemon_of(config: Config, path: Option<std::path::PathBuf>) -> (Daemon, MemoryFastpath) {
    let compiled = config.compile().unwrap_or_else(|e| panic!("the test config compiles: {e}"));
    let mut fastpath = MemoryFastpath::new();
    fastpath.write_heartbeat(monotonic_ns()).unwrap();
    fastpath.apply(&compiled.plan).unwrap();
    let gpu = Box::new(NoGpu { reason: "in memory".into() });
    (Daemon::new(config, path, compiled, Box::new(fastpath.clone()), gpu), fastpath)
}

/// The daemon served on a socket, and the fast path's other end.
pub struct Served {
    pub owner: OwnerThread,
    pub fastpath: MemoryFastpath,
}

impl Served {
    pub fn start(config: &str, tag: &str) -> Self {
        let (daemon, fastpath) = daemon(config);
        Self { owner: OwnerThread::start(daemon, tag), fastpath }
    }

    /// Sends one request line; the answer.
    pub fn call(&self, request: &str) -> Value {
        call(self.owner.socket(), request)
    }

    /// What the fast path did with a SYN from the client to `port`, now.
    pub fn syn(&self, port: u16) -> Outcome {
        syn(&self.fastpath, port)
    }
}

/// One request on a fresh connection; the answer.
pub fn call(socket: &Path, request: &str) -> Value {
    let mut stream = UnixStream::connect(socket).expect("the control socket accepts");
    stream.write_all(format!("{request}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{request} -> not JSON ({e}): {line}"))
}

/// What the fast path did with a SYN from the client to `port`, now.
pub fn syn(fastpath: &MemoryFastpath, port: u16) -> Outcome {
    let frame = TcpFrame::v4(CLIENT_V4, SERVER_V4).ports(40_000, port).build();
    let expected = fastpath.receive(&frame, monotonic_ns());
    match expected.counted {
        Counted::Class(_, outcome) => outcome,
        other => panic!("a SYN to {port} was not classified: {other:?} ({:?})", expected.verdict),
    }
}

/// `GET /metrics` once from `addr`: the whole HTTP response.
pub fn get_metrics(addr: std::net::SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// `GET /metrics` once from the daemon's real endpoint (on loopback), with
/// the daemon served by its owner loop; the body.
pub fn scrape_metrics(daemon: Daemon) -> String {
    let dir = std::env::temp_dir().join(format!("shedder-metrics-table-{}-{}", std::process::id(), monotonic_ns()));
    std::fs::create_dir_all(&dir).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let response = runtime.block_on(async {
        let listener = metrics::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let socket = ControlSocket::bind(&dir.join("control.sock"), None).unwrap();
        let services = Services { metrics: Some(listener), ..Services::socket_only(socket) };
        let fetch = tokio::task::spawn_blocking(move || get_metrics(addr));
        let (stop, stopped) = tokio::sync::oneshot::channel::<String>();
        let serving = daemon::serve(daemon, services, async {
            let _ = stop.send(fetch.await.unwrap());
        });
        serving.await.expect("the owner loop ends cleanly");
        stopped.await.unwrap()
    });
    let _ = std::fs::remove_dir_all(&dir);
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}
