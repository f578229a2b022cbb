//! `shedder-drill`: the failure drill (run it with `cargo xtask drill`).
//!
//! A declared workload runs once per mode (`off`, `observe`, `enforce`,
//! `static`, and the peers `queue-cap`, `queue-timeout`, `saturation`)
//! through a fresh pair of network namespaces: a staging inference backend
//! in the server namespace, behind the real `shedder` daemon (or nftables,
//! or nothing, or its own peer policy), and an open-loop load generator in
//! the client namespace, both playing the same fixed-seed job plan at time
//! scale K. Each run's records go to `<out>/runs/<mode>.json`; the report
//! built from them to `<out>/report.json` and `<out>/drill.svg`, and its
//! summary table to the terminal. With `--suite`, each workload of the
//! suite goes to `<out>/<name>/`, and the summary over all of them to
//! `<out>/suite.json` and `<out>/suite.svg`.
//!
//! Ctrl-C or SIGTERM stops the run in progress; its namespaces, daemon and
//! nftables table are removed on the way out.

mod backend;
mod control;
mod daemon;
mod daemon_config;
mod exporter;
mod frontend;
mod hedge;
mod http;
mod loadgen;
mod modes;
mod nft;
mod peer;
mod progress;
mod retry;
mod run_context;
mod samples;
mod telemetry;
mod tenants;
mod timeline;
mod workers;

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Parser;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use shedder_drill::{
    report::DrillReport,
    suite::{self, SuiteFile},
    workload::Workload,
};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::watch,
};

use crate::{
    modes::{Interrupted, Mode, Setup, record_path, run_mode},
    retry::RetryMode,
    telemetry::Telemetry,
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
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/workloads/seed.toml"), conflicts_with = "suite")]
    workload: PathBuf,
    /// Runs every workload `drill/workloads/suite.toml` names (or this suite
    /// file), each in every mode, and writes one summary over them.
    #[arg(long, num_args = 0..=1, default_missing_value = concat!(env!("CARGO_MANIFEST_DIR"), "/workloads/suite.toml"))]
    suite: Option<PathBuf>,
    /// Modes to run, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "off,observe,enforce,static,queue-cap,queue-timeout,saturation"
    )]
    modes: Vec<Mode>,
    /// Seed of the job plan: the same seed gives every mode the same jobs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs each workload of the suite with this many job plans (seeds
    /// `seed`, `seed + 1`, ...), each to `<out>/<name>/seed-<S>/`, and sums
    /// the summary's counts and bounds over them.
    #[arg(long, default_value_t = 1, requires = "suite", value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// Scales every duration, service time and deadline by K and every rate by 1/K.
    #[arg(long, default_value_t = 0.25)]
    time_scale: f64,
    /// Where the records and the report go.
    #[arg(long, default_value = "target/drill")]
    out: PathBuf,
    /// How clients retry; the workload's `client.retry` by default.
    #[arg(long, value_enum)]
    retry: Option<RetryMode>,
    /// How the daemon learns about the backend: samples pushed over the
    /// control socket, or a scrape of the backend's vLLM- or SGLang-format
    /// `/metrics`. The backend asks `admit` either way.
    #[arg(long, value_enum, default_value_t = Telemetry::Push)]
    telemetry: Telemetry,
    /// The backend gives `admit` each job's estimated service time, off by
    /// a lognormal factor of this spread (the workload's `estimate_error`,
    /// here for every workload run; 0: exact).
    #[arg(long)]
    estimate_error: Option<f64>,
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
        bail!("--modes: name at least one of {}", Mode::ALL.map(Mode::name).join(", "));
    }
    shedder_drill::workload::check_time_scale(args.time_scale).context("--time-scale")?;
    let mut entries: Vec<(Option<String>, Workload)> = match &args.suite {
        Some(path) => SuiteFile::load(path)?.into_iter().map(|(e, w)| (Some(e.name), w)).collect(),
        None => vec![(None, Workload::load(&args.workload)?)],
    };
    if let Some(spread) = args.estimate_error {
        for (_, workload) in &mut entries {
            workload.estimate_error = Some(spread);
            workload.validate().context("--estimate-error")?;
        }
    }
    // Every job in flight holds a socket on each side.
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;

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

    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    let seeds = args.seed..args.seed + args.seeds;
    for (name, workload) in entries {
        for seed in seeds.clone() {
            let mut out = name.as_ref().map_or(args.out.clone(), |n| args.out.join(n));
            if args.seeds > 1 {
                out = out.join(format!("seed-{seed}"));
            }
            let label = name.clone().unwrap_or_else(|| args.workload.display().to_string());
            let report = run_workload(&rt, &stop, args, &label, workload.clone(), seed, &out)?;
            if let Some(name) = &name {
                rows.extend(suite::rows(name, &report));
            }
        }
    }
    if args.suite.is_some() {
        let rows = suite::summed(&rows);
        let (json, svg) = (args.out.join("suite.json"), args.out.join("suite.svg"));
        suite::write_json(&rows, &json)?;
        suite::write_svg(&rows, &svg)?;
        if args.seeds > 1 {
            println!("\nsummed over seeds {} to {}", seeds.start, seeds.end - 1);
        }
        println!("\n{}", suite::table(&rows));
        println!("suite: {} in {:.0} s\nplot:  {}", json.display(), started.elapsed().as_secs_f64(), svg.display());
    }
    Ok(())
}

/// Every mode of one workload; its records, report and plot go to `out`.
fn run_workload(
    rt: &tokio::runtime::Runtime,
    stop: &watch::Receiver<bool>,
    args: &Args,
    label: &str,
    workload: Workload,
    seed: u64,
    out: &std::path::Path,
) -> anyhow::Result<DrillReport> {
    let retry = match args.retry {
        Some(retry) => retry,
        None => RetryMode::parse(&workload.client.retry)?,
    };
    let runs_dir = out.join("runs");
    std::fs::create_dir_all(&runs_dir).with_context(|| format!("creating {}", runs_dir.display()))?;
    let setup = Setup {
        workload,
        time_scale: args.time_scale,
        seed,
        retry,
        telemetry: args.telemetry,
        daemon: args.daemon.clone(),
        runs_dir,
    };
    println!(
        "shedder drill: {label} at time scale {} (seed {}), modes {}, daemon telemetry {}",
        args.time_scale,
        seed,
        args.modes.iter().map(|m| m.name()).collect::<Vec<_>>().join(","),
        args.telemetry.name()
    );
    let mut records = Vec::new();
    for &mode in &args.modes {
        let record = run_mode(rt, mode, &setup, stop)?;
        let path = record_path(&setup.runs_dir, mode);
        std::fs::write(&path, serde_json::to_vec(&record)?).with_context(|| format!("writing {}", path.display()))?;
        records.push(record);
    }

    let report = DrillReport::build(&setup.workload, seed, args.time_scale, &records);
    let (json, svg) = (out.join("report.json"), out.join("drill.svg"));
    report.write_json(&json)?;
    report.write_svg(&svg)?;
    println!("\n{}", report.summary_table());
    println!("report: {}\nplot:   {}", json.display(), svg.display());
    Ok(report)
}
