//! `cargo xtask fleet`: four hosts of a fleet share two tenants' quotas
//! through one real redis-server, live. Each host runs the daemon's fleet
//! task in this process and admits a fluid of connections at min(demand,
//! share); every second the demo prints, per tenant, what each host admitted
//! against the tenant's quota, while one tenant floods one host and the
//! other tenant's demand moves between hosts.

use std::time::Duration;

use clap::Parser;
use shedder_tests::{
    fleet_sim::{SimHost, settings},
    redis_server::RedisServer,
};
use tokio::time::{Instant, sleep_until};

const HOSTS: usize = 4;
const QUOTAS: [(&str, f64); 2] = [("a", 1000.0), ("b", 400.0)];

#[derive(Parser)]
#[command(about = "Four fleet hosts sharing tenants' quotas through one redis-server, live")]
struct Args {
    /// Seconds of each phase (quiet, b floods host 2, a's demand moves to host 0).
    #[arg(long, default_value = "4")]
    phase: u64,
    /// The fleet's tick, ms (the lease is 10 ticks).
    #[arg(long, default_value = "100")]
    tick_ms: u64,
}

/// (from second, tenant, demand per host, what happens)
fn timeline(phase: u64) -> Vec<(u64, &'static str, [f64; HOSTS], &'static str)> {
    vec![
        (0, "a", [300.0; HOSTS], "a asks 1200/s of its 1000, evenly"),
        (0, "b", [50.0; HOSTS], "b asks 200/s of its 400"),
        (phase, "b", [50.0, 50.0, 5000.0, 50.0], "b floods h2 (5000/s)"),
        (2 * phase, "a", [900.0, 100.0, 100.0, 100.0], "a's demand moves to h0"),
    ]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let redis = RedisServer::start(None)?;
    let timing = (args.tick_ms, args.tick_ms * 10);
    let start = Instant::now();
    let hosts: Vec<SimHost> = (0..HOSTS)
        .map(|i| SimHost::start(settings(&redis.address(), &format!("h{i}"), "demo", timing, &QUOTAS), start))
        .collect();
    println!("redis-server on {}; quotas a = 1000/s, b = 400/s; tick {} ms", redis.address(), args.tick_ms);
    println!("(the first second is a new fleet's grace: local shares, a quarter of each quota per host)\n");
    println!(
        "{:>3}  {:<6} {:>6}  {:>7} {:>7} {:>7} {:>7}  {:>7}  {:>6}",
        "s", "tenant", "quota", "h0", "h1", "h2", "h3", "fleet", "/quota"
    );
    let steps = timeline(args.phase);
    let seconds = 3 * args.phase;
    for second in 0..seconds {
        for (at, tenant, demands, what) in &steps {
            if *at == second {
                println!("--- {what}");
                for (host, demand) in hosts.iter().zip(demands) {
                    host.set_demand(tenant, *demand);
                }
            }
        }
        sleep_until(start + Duration::from_secs(second + 1)).await;
        for (tenant, quota) in QUOTAS {
            let per_host: Vec<f64> =
                hosts.iter().map(|h| h.bins(tenant).get(second as usize).copied().unwrap_or(0.0)).collect();
            let total: f64 = per_host.iter().sum();
            let cells: Vec<String> = per_host.iter().map(|n| format!("{n:>7.0}")).collect();
            println!(
                "{second:>3}  {tenant:<6} {quota:>6.0}  {}  {total:>7.0}  {:>6.3}",
                cells.join(" "),
                total / quota
            );
        }
    }
    let states: Vec<String> = hosts.iter().map(|h| format!("{} {}", h.name, h.view().state)).collect();
    println!("\nstates: {}", states.join(", "));
    Ok(())
}
