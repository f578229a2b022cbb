//! `cargo xtask fleet`: four fleet hosts, each a real `shedder run` on XDP in
//! a network namespace of its own, share two tenants' quotas through one
//! redis-server (the bed of `fleet_bed`). Real TCP clients send from each
//! tenant's addresses; every second the demo prints, per tenant, what each
//! host admitted (its `/metrics`) against the quota, while one tenant floods
//! one host, the other's demand moves, and then Redis stops and returns.
//!
//! Ctrl-C or SIGTERM ends it after the phase under way; the bed (namespaces,
//! daemons, Redis) goes with it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use shedder_testbed::fleet_bed::{FleetBed, FleetTenant};

const HOSTS: usize = 4;
const TENANTS: [FleetTenant; 2] =
    [FleetTenant { name: "a", quota: 400.0, burst: 20.0 }, FleetTenant { name: "b", quota: 200.0, burst: 20.0 }];

#[derive(Parser)]
#[command(about = "Four real shedder hosts sharing tenants' quotas through one redis-server, live (needs root)")]
struct Args {
    /// Seconds of each of the five phases.
    #[arg(long, default_value = "4")]
    phase: u64,
}

/// What Redis does at a phase's start.
#[derive(Clone, Copy, PartialEq)]
enum Redis {
    Runs,
    Stops,
    Returns,
}

/// One phase: what happens, each tenant's demand per host, and Redis.
struct Phase {
    what: &'static str,
    a: [f64; HOSTS],
    b: [f64; HOSTS],
    redis: Redis,
}

const PHASES: [Phase; 5] = [
    Phase {
        what: "a asks 480/s of its 400, evenly; b 100/s of its 200",
        a: [120.0; HOSTS],
        b: [25.0; HOSTS],
        redis: Redis::Runs,
    },
    Phase { what: "b floods h2 (1000/s)", a: [120.0; HOSTS], b: [25.0, 25.0, 1000.0, 25.0], redis: Redis::Runs },
    Phase {
        what: "a's demand moves to h0 (360/s there)",
        a: [360.0, 40.0, 40.0, 40.0],
        b: [25.0, 25.0, 1000.0, 25.0],
        redis: Redis::Runs,
    },
    Phase {
        what: "redis-server stops: each host holds its leases, then takes its local share (a quarter)",
        a: [360.0, 40.0, 40.0, 40.0],
        b: [25.0, 25.0, 1000.0, 25.0],
        redis: Redis::Stops,
    },
    Phase {
        what: "redis-server is back, empty",
        a: [360.0, 40.0, 40.0, 40.0],
        b: [25.0, 25.0, 1000.0, 25.0],
        redis: Redis::Returns,
    },
];

/// Set on Ctrl-C or SIGTERM: end after the phase under way.
fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut terminate = runtime
        .block_on(async { tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) })
        .context("catching SIGTERM")?;
    let flag = stop.clone();
    std::thread::spawn(move || {
        runtime.block_on(async {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        });
        println!("--- stopping after this phase");
        flag.store(true, Ordering::SeqCst);
    });
    Ok(stop)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let stop = stop_on_signals()?;
    println!("starting {HOSTS} hosts (a namespace, a veth, shedder run and a backend each) and redis-server ...");
    let mut bed = FleetBed::start(HOSTS, &TENANTS)?;
    bed.wait_all("fleet: synced")?;
    println!("redis-server on {}; quotas a = 400/s, b = 200/s; tick 100 ms, lease 1 s", bed.redis.address());
    println!("admitted connections per second, from each host's /metrics\n");
    println!(
        "{:>3}  {:<6} {:>6}  {:>6} {:>6} {:>6} {:>6}  {:>6}  {:>6}",
        "s", "tenant", "quota", "h0", "h1", "h2", "h3", "fleet", "/quota"
    );
    let mut states = Vec::new();
    for (n, phase) in PHASES.iter().enumerate() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        println!("--- {}", phase.what);
        match phase.redis {
            Redis::Runs => {}
            Redis::Stops => bed.redis.kill(),
            Redis::Returns => bed.redis.resume()?,
        }
        // The clients run a little past the phase's last sample.
        let load = bed.offer(&[("a", &phase.a), ("b", &phase.b)], Duration::from_millis(args.phase * 1000 + 500));
        bed.every_second(args.phase, |second, before, now| {
            let second = n as u64 * args.phase + second;
            for tenant in TENANTS {
                let per_host = now.admitted_rates(before, tenant.name);
                let fleet: f64 = per_host.iter().sum();
                let cells: Vec<String> = per_host.iter().map(|r| format!("{r:>6.0}")).collect();
                println!(
                    "{second:>3}  {:<6} {:>6.0}  {}  {fleet:>6.0}  {:>6.3}",
                    tenant.name,
                    tenant.quota,
                    cells.join(" "),
                    fleet / tenant.quota
                );
            }
            let now_states = now.states();
            if now_states != states {
                let named: Vec<String> =
                    bed.hosts.iter().zip(&now_states).map(|(h, s)| format!("{} {s}", h.name)).collect();
                println!("     fleet state: {}", named.join(", "));
                states = now_states;
            }
        })?;
        load.join()?;
    }
    Ok(())
}
