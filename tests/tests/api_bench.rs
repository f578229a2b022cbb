//! Control-socket round trips (printed): p50/p99 and ops/s of each op at 1,
//! 16 and 128 concurrent clients, each on its own connection, against the
//! daemon's owner loop on one thread (as `shedder run` has it) over a real
//! datapath, on `config/gpu-host.toml`. `set_class` sets a
//! value the class already has (validated, nothing changes); `sample` is left
//! out, as each uid may push only so many samples a second.
//!
//! `cargo test --release -p shedder-tests --test api_bench -- --ignored --nocapture`

use std::{
    io::{BufRead, BufReader, Write},
    os::unix::net::UnixStream,
    path::Path,
    time::{Duration, Instant},
};

use shedder_daemon::{config::Config, daemon::Daemon, datapath::Datapath, fastpath::Fastpath, telemetry::gpu::NoGpu};
use shedder_testbed::owner::OwnerThread;

fn client(socket: &Path, request: &'static str, until: Instant) -> Vec<Duration> {
    let stream = UnixStream::connect(socket).unwrap();
    let mut write = stream.try_clone().unwrap();
    let mut read = BufReader::new(stream);
    let mut answer = String::new();
    let mut times = Vec::new();
    while Instant::now() < until {
        let t = Instant::now();
        write.write_all(request.as_bytes()).unwrap();
        answer.clear();
        read.read_line(&mut answer).unwrap();
        times.push(t.elapsed());
        assert!(answer.starts_with("{\"ok\":true"), "{answer}");
    }
    times
}

/// A GPU host's configuration: a controlled deadline class, a sheddable
/// batch class, a marked one.
const CONFIG: &str = include_str!("../../config/gpu-host.toml");

/// (name, request line) of each op measured.
const OPS: [(&str, &str); 6] = [
    ("version", "{\"op\":\"version\"}\n"),
    ("status", "{\"op\":\"status\"}\n"),
    ("get_config", "{\"op\":\"get_config\"}\n"),
    ("decisions", "{\"op\":\"decisions\"}\n"),
    ("admit", "{\"op\":\"admit\",\"class\":\"chat\",\"deadline_ms\":1e9,\"now_ms\":0,\"queue_age_ms\":10}\n"),
    ("set_class", "{\"op\":\"set_class\",\"class\":\"enrich\",\"rate\":100}\n"),
];

#[test]
#[ignore = "benchmark: run with --ignored --nocapture, in release"]
fn control_socket_round_trips() {
    let config = Config::parse(CONFIG).unwrap();
    let compiled = config.compile().unwrap();
    let mut datapath = Datapath::load().expect("root, to load the program");
    datapath.apply(&compiled.plan).unwrap();
    let daemon = Daemon::new(config, None, compiled, Box::new(datapath), Box::new(NoGpu { reason: "bench".into() }));
    let owner = OwnerThread::start(daemon, "api-bench");
    let socket = owner.socket().to_path_buf();

    println!("{:<10} {:>7} {:>10} {:>10} {:>10}", "op", "clients", "ops/s", "p50 µs", "p99 µs");
    for (name, request) in OPS {
        for clients in [1, 16, 128] {
            let until = Instant::now() + Duration::from_secs(2);
            let started = Instant::now();
            let threads: Vec<_> = (0..clients)
                .map(|_| {
                    let socket = socket.clone();
                    std::thread::spawn(move || client(&socket, request, until))
                })
                .collect();
            let mut times: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
            let elapsed = started.elapsed().as_secs_f64();
            times.sort();
            let q = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
            println!(
                "{name:<10} {clients:>7} {:>10.0} {:>10.0} {:>10.0}",
                times.len() as f64 / elapsed,
                q(0.50),
                q(0.99)
            );
        }
    }
    drop(owner);
}
