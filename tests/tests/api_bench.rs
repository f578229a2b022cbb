//! Control-socket round trips (printed): p50/p99 and ops/s at 1, 16 and 128
//! concurrent clients, each on its own connection, against the daemon's
//! owner loop on one thread (as `shedder run` has it) over a real datapath.
//!
//! `cargo test --release -p shedder-tests --test api_bench -- --ignored --nocapture`

use std::{
    io::{BufRead, BufReader, Write},
    os::unix::net::UnixStream,
    path::Path,
    time::{Duration, Instant},
};

use shedder_daemon::{
    api::server::{AccessPolicy, ControlSocket},
    config::Config,
    control_loop::ControlLoop,
    daemon::{Daemon, DaemonHandle},
    datapath::{Attachment, Datapath},
    telemetry::gpu::NoGpu,
};

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

#[test]
#[ignore = "benchmark: run with --ignored --nocapture, in release"]
fn control_socket_round_trips() {
    let config = Config::embedded_default();
    let plan = config.plan().unwrap();
    let mut datapath = Datapath::load().expect("root, to load the program");
    datapath.apply(&plan).unwrap();
    let control =
        ControlLoop::new(datapath, plan, config.control().unwrap(), Box::new(NoGpu { reason: "bench".into() }));
    let mut daemon = Daemon::new(control, config, None, "none".into(), Attachment::XdpGeneric);
    let dir = std::env::temp_dir().join(format!("shedder-api-bench-{}", std::process::id()));
    let socket = dir.join("control.sock");
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (stop_tx, mut stop) = tokio::sync::oneshot::channel::<()>();
    let path = socket.clone();
    let owner = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let mut listener = ControlSocket::bind(&path, None).unwrap();
            let (handle, mut jobs) = DaemonHandle::channel(256);
            let _server = listener.serve(handle, AccessPolicy::default());
            ready_tx.send(()).unwrap();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    _ = &mut stop => break,
                    _ = tick.tick() => { daemon.tick().unwrap(); }
                    Some(job) = jobs.recv() => job(&mut daemon),
                }
            }
        });
    });
    ready.recv().unwrap();

    println!("{:<8} {:>7} {:>10} {:>10} {:>10}", "op", "clients", "ops/s", "p50 µs", "p99 µs");
    for (name, request) in [("version", "{\"op\":\"version\"}\n"), ("status", "{\"op\":\"status\"}\n")] {
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
                "{name:<8} {clients:>7} {:>10.0} {:>10.0} {:>10.0}",
                times.len() as f64 / elapsed,
                q(0.50),
                q(0.99)
            );
        }
    }
    stop_tx.send(()).unwrap();
    owner.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
