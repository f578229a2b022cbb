//! `shedder-demo`: a newcomer's tour of shedder (run it with `cargo xtask demo`).
//!
//! Two network namespaces joined by a veth pair stand in for a client host and
//! an inference host. The real `shedder` daemon attaches its XDP program to the
//! server's interface with `config/four-classes.toml`. Small TCP servers listen on one
//! port per class, and the client opens new connections to each port faster than
//! the class's budget. Every second the demo prints what the client saw next to
//! what the daemon counted, so each action is visible from both sides:
//!
//! * reject: over budget, the SYN is answered with a RST (XDP_TX); `connect()`
//!   fails at once with ECONNREFUSED.
//! * drop: over budget, the SYN vanishes; the client's connect times out (a real
//!   client retries after 1 s, 2 s, 4 s: a delay tier).
//! * mark: over budget, the SYN's DSCP is rewritten and the connection admitted;
//!   the server reads the mark from the saved SYN and answers "degraded".
//!
//! Everything is torn down on exit, on error and on Ctrl-C/SIGTERM: the daemon
//! is stopped with SIGINT (it detaches), the namespaces are deleted.

mod client;
mod daemon;
mod daemon_log;
mod lanes;
mod servers;
mod signals;
mod summary;
mod table;

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use shedder_daemon::config::Config;
use shedder_testbed::netns::Testbed;

use crate::{
    client::Load,
    daemon::Daemon,
    lanes::lanes,
    servers::Servers,
    signals::{catch_stop_signals, stopping},
    summary::Summary,
    table::Live,
};

/// How long an admitted connection may take to answer.
const READ_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Parser)]
#[command(name = "shedder-demo", about = "A live tour of shedder between two network namespaces (needs root)")]
struct Args {
    /// The `shedder` daemon binary to run (`cargo xtask demo` passes target/release/shedder).
    #[arg(long)]
    daemon: PathBuf,
    /// Seconds to drive connections (1..=120).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=120))]
    seconds: u64,
    /// New connections per second, per class (1..=200).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=200))]
    rate: u64,
    /// Milliseconds a connect() waits for the SYN-ACK before it counts as timed out (50..=5000).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(50..=5000))]
    connect_timeout_ms: u64,
    /// Configuration for the daemon (TOML): one lane per destination-port rule, plus the default class.
    #[arg(long, default_value = DEMO_CONFIG)]
    config: PathBuf,
}

/// The four-class example: the daemon's embedded default only observes, and
/// a tour needs something shed.
const DEMO_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/four-classes.toml");

fn main() {
    let args = Args::parse();
    match demo(&args) {
        Ok(true) if stopping() => std::process::exit(130), // cleaned up, but cut short
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("shedder-demo: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Runs the tour; Ok(false) when it ran but a check failed.
fn demo(args: &Args) -> anyhow::Result<bool> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("the demo must run as root: it creates network namespaces and loads XDP programs");
    }
    if !args.daemon.is_file() {
        bail!("no daemon binary at {} (run `cargo xtask demo`)", args.daemon.display());
    }
    let config = Config::from_file(&args.config)?;
    let lanes = Arc::new(lanes(&config)?);
    catch_stop_signals()?;

    // Declared in this order, dropped in reverse: load, daemon, servers, the
    // client's XDP_PASS, the namespaces. Every early return cleans up.
    let testbed = Testbed::new().context("creating the client and server namespaces")?;
    let ns_paths = [testbed.client.path(), testbed.server.path()];
    println!(
        "shedder demo: client {} (netns {}) --veth--> server {} (netns {}, interface {})",
        Testbed::CLIENT_V4,
        testbed.client.name(),
        Testbed::SERVER_V4,
        testbed.server.name(),
        testbed.server_if
    );

    // veth delivers XDP_TX'd frames (our RSTs) only to a peer that runs XDP itself.
    let pass = testbed.attach_client_pass()?;

    let listeners = lanes
        .iter()
        .map(|l| testbed.listen(SocketAddr::from((Testbed::SERVER_V4, l.port)), true))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let servers = Servers::start(listeners)?;
    println!(
        "servers: {}",
        lanes
            .iter()
            .map(|l| format!("{}:{} ({})", Testbed::SERVER_V4, l.port, l.spec.name))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let mut daemon = Daemon::start(&testbed, &args.daemon, &args.config)?;
    println!(
        "daemon: {} run --iface {} --attach xdp --report-every 1 --no-pin --config {} (pid {})",
        args.daemon.display(),
        testbed.server_if,
        args.config.display(),
        daemon.guard.id()
    );
    let attached = daemon.wait_attached(Duration::from_secs(30))?;
    println!("daemon| {attached}");
    daemon.view.lock().unwrap().notable.clear(); // already shown
    println!(
        "driving {} new connections/s per class for {} s; Ctrl-C stops early. The client counts each attempt as\n  \
         ok (served), degraded (served, but the server saw a DSCP mark on the SYN), refused (ECONNREFUSED:\n  \
         a RST came back) or timed-out (no SYN-ACK within {} ms); the daemon's columns are its last report.\n",
        args.rate, args.seconds, args.connect_timeout_ms
    );

    let started = Instant::now();
    let load = Load::start(&testbed, &lanes, args.rate, args.seconds, Duration::from_millis(args.connect_timeout_ms));
    let mut live = Live::new();
    let mut next_print = started + Duration::from_secs(1);
    while !load.finished() && !stopping() {
        if Instant::now() >= next_print {
            live.print(started.elapsed(), args.seconds, &lanes, &mut daemon.view.lock().unwrap());
            next_print += Duration::from_secs(1);
        }
        if !daemon.guard.is_running() {
            bail!("the daemon exited during the demo; its output:\n{}", daemon.recent_log());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if stopping() {
        println!("\ninterrupted: stopping the load, then the daemon");
    }
    load.join()?;
    let ran = started.elapsed();
    // One more report, so the daemon's counters cover every finished attempt.
    daemon.wait_next_report(lanes.len(), Duration::from_secs(3));

    let final_counts = daemon.view.lock().unwrap().classes.clone();
    let daemon_stopped_cleanly = daemon.stop(Duration::from_secs(5));
    let served = (servers.accepted.load(Ordering::Relaxed), servers.marked.load(Ordering::Relaxed));
    drop(servers);
    drop(pass);
    drop(testbed);
    let leftover = ns_paths.into_iter().filter(|p| p.exists()).collect();

    let summary = Summary {
        lanes: &lanes,
        rate: args.rate,
        connect_timeout_ms: args.connect_timeout_ms,
        ran,
        daemon: final_counts,
        daemon_stopped_cleanly,
        served,
        leftover,
    };
    Ok(summary.print())
}
