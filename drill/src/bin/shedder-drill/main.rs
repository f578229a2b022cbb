//! `shedder-drill`: the failure drill (run it with `cargo xtask drill`).
//!
//! A declared workload runs once per mode (`off`, `observe`, `enforce`,
//! `static`) through a fresh pair of network namespaces: a staging inference
//! backend in the server namespace, behind the real `shedder` daemon (or
//! nftables, or nothing), and an open-loop load generator in the client
//! namespace, both playing the same fixed-seed job plan at time scale K.
//! Each run's records go to `<out>/runs/<mode>.json`; the report built from
//! them to `<out>/report.json` and `<out>/drill.svg`, and its summary table to
//! the terminal.
//!
//! Ctrl-C or SIGTERM stops the run in progress; its namespaces, daemon and
//! nftables table are removed on the way out.

mod backend;
mod control;
mod daemon;
mod daemon_config;
mod http;
mod loadgen;
mod modes;
mod nft;
mod progress;
mod retry;
mod run_context;
mod samples;
mod timeline;
mod workers;

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Parser;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use shedder_drill::{report::DrillReport, workload::Workload};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::watch,
};

use crate::{
    modes::{Interrupted, Mode, Setup, record_path, run_mode},
    retry::RetryMode,
};

#[derive(Parser)]
#[command(
    name = "shedder-drill",
    about = "The failure drill: a workload through the real shedder, per mode (needs root)"
)]
struct Args {
    /// The `shedder` daemon binary (`cargo xtask drill` passes target/release/shedder).
    #[arg(long)]
    daemon: PathBuf,
    /// The workload file.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/workloads/seed.toml"))]
    workload: PathBuf,
    /// Modes to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "off,observe,enforce,static")]
    modes: Vec<Mode>,
    /// Seed of the job plan: the same seed gives every mode the same jobs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Scales every duration, service time and deadline by K and every rate by 1/K.
    #[arg(long, default_value_t = 0.25)]
    time_scale: f64,
    /// Where the records and the report go.
    #[arg(long, default_value = "target/drill")]
    out: PathBuf,
    /// How clients retry; the workload's `client.retry` by default.
    #[arg(long, value_enum)]
    retry: Option<RetryMode>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = drill(&args) {
        eprintln!("shedder-drill: error: {e:#}");
        std::process::exit(if e.is::<Interrupted>() { 130 } else { 1 });
    }
}

fn drill(args: &Args) -> anyhow::Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("the drill must run as root: it creates network namespaces and loads XDP programs");
    }
    if !args.daemon.is_file() {
        bail!("no daemon binary at {} (run `cargo xtask drill`)", args.daemon.display());
    }
    if args.modes.is_empty() {
        bail!("--modes: name at least one of off, observe, enforce, static");
    }
    shedder_drill::workload::check_time_scale(args.time_scale).context("--time-scale")?;
    let workload = Workload::load(&args.workload)?;
    let retry = match args.retry {
        Some(retry) => retry,
        None => RetryMode::parse(&workload.client.retry)?,
    };
    // Every job in flight holds a socket on each side.
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;

    let runs_dir = args.out.join("runs");
    std::fs::create_dir_all(&runs_dir).with_context(|| format!("creating {}", runs_dir.display()))?;
    let setup =
        Setup { workload, time_scale: args.time_scale, seed: args.seed, retry, daemon: args.daemon.clone(), runs_dir };

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let (stop_tx, stop) = watch::channel(false);
    rt.spawn(async move {
        let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
        else {
            return;
        };
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        let _ = stop_tx.send(true);
    });

    println!(
        "shedder drill: {} at time scale {} (seed {}), modes {}",
        args.workload.display(),
        args.time_scale,
        args.seed,
        args.modes.iter().map(|m| m.name()).collect::<Vec<_>>().join(",")
    );
    let mut records = Vec::new();
    for &mode in &args.modes {
        let record = run_mode(&rt, mode, &setup, &stop)?;
        let path = record_path(&setup.runs_dir, mode);
        std::fs::write(&path, serde_json::to_vec(&record)?).with_context(|| format!("writing {}", path.display()))?;
        records.push(record);
    }

    let report = DrillReport::build(&setup.workload, args.seed, args.time_scale, &records);
    let (json, svg) = (args.out.join("report.json"), args.out.join("drill.svg"));
    report.write_json(&json)?;
    report.write_svg(&svg)?;
    println!("\n{}", report.summary_table());
    println!("report: {}\nplot:   {}", json.display(), svg.display());
    Ok(())
}
