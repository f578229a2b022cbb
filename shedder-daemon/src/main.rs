//! `shedder`: the daemon binary. Argument parsing and the run loop only; the
//! mechanisms live in the library.

use std::{io::IsTerminal, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use shedder_daemon::{
    config::{Config, ControlSetup},
    control_loop::ControlLoop,
    daemon::{Daemon, DaemonHandle},
    datapath::{AttachKind, Datapath},
    report,
    telemetry::{ClassObservations, gpu::open_gpu_source, scrape::Scraper},
};
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
    time::MissedTickBehavior,
};
use tracing::{info, warn};

#[derive(Parser)]
#[command(name = "shedder", version, about = "Admission control for new connections at the NIC")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load the fast path, attach it to an interface, and enforce the config.
    Run {
        /// Interface whose inbound connections are admitted.
        #[arg(long)]
        iface: String,
        /// Hook: XDP (native, falling back to generic) or TC ingress.
        #[arg(long, value_enum, default_value_t = AttachKind::Xdp)]
        attach: AttachKind,
        /// Configuration file (TOML); the embedded default when absent.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seconds between counter reports.
        #[arg(long, default_value_t = 5.0)]
        report_every: f64,
    },
    /// Validate a configuration file and print what it compiles to.
    CheckConfig {
        /// Configuration file (TOML); the embedded default when absent.
        config: Option<PathBuf>,
    },
}

fn load_config(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    match path {
        Some(path) => Config::from_file(path),
        None => Ok(Config::embedded_default()),
    }
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        // Colour only for people; logs piped to files or tests stay plain.
        .with_ansi(std::io::stdout().is_terminal())
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    match Cli::parse().command {
        Command::CheckConfig { config } => {
            let config = load_config(config.as_ref())?;
            let plan = config.plan().context("invalid config")?;
            config.control().context("invalid config")?;
            for (name, class) in plan.class_names.iter().zip(&plan.classes) {
                println!("{name}: {class:?}");
            }
            println!("{:?}", plan.global);
            Ok(())
        }
        Command::Run { iface, attach, config, report_every } => {
            // Validate everything before touching the kernel: a bad file attaches nothing.
            let config_path = config;
            let config = load_config(config_path.as_ref())?;
            config.plan().context("invalid config; nothing was attached")?;
            config.control().context("invalid config; nothing was attached")?;
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run(
                &iface,
                attach,
                config,
                config_path,
                Duration::from_secs_f64(report_every),
            ))
        }
    }
}

async fn run(
    iface: &str,
    attach: AttachKind,
    config: Config,
    config_path: Option<PathBuf>,
    report_every: Duration,
) -> anyhow::Result<()> {
    let plan = config.plan().context("invalid config; nothing was attached")?;
    let setup = config.control().context("invalid config; nothing was attached")?;
    // Signal handlers first: from the moment the program is attached, a
    // SIGINT or SIGTERM must detach it, never kill the daemon outright.
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut datapath = Datapath::load()?;
    forward_ebpf_logs(&mut datapath);
    datapath.apply(&plan).context("writing the config into the maps")?;
    let attachment = datapath.attach(iface, attach)?;
    info!(iface, attachment = %attachment, classes = plan.classes.len(), "attached");

    let tick_every = Duration::from_millis(setup.controller.params().tick_ms);
    let (scraped_tx, mut scraped) = tokio::sync::mpsc::channel(16);
    spawn_scrapers(&setup, scraped_tx);
    let control = ControlLoop::new(datapath, plan, setup, open_gpu_source());
    let mut daemon = Daemon::new(control, config, config_path, iface.to_string(), attachment);
    // Other tasks (the control socket, metrics) reach the daemon through this.
    let (_handle, mut jobs) = DaemonHandle::channel(256);

    let mut report = tokio::time::interval(report_every);
    let mut tick = tokio::time::interval(tick_every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    report.tick().await;
    loop {
        tokio::select! {
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = report.tick() => log_counters(daemon.control().datapath()),
            _ = tick.tick() => {
                if let Err(e) = daemon.tick() {
                    warn!("controller tick: {e:#}");
                }
            }
            Some(batches) = scraped.recv() => daemon.observe(&batches),
            Some(job) = jobs.recv() => job(&mut daemon),
        }
    }
    // The last word on what the fast path did, before it goes away.
    log_counters(daemon.control().datapath());
    drop(daemon);
    info!(iface, "detached; exiting");
    Ok(())
}

/// One task per scrape target, each fetching on its own schedule (off the
/// runtime's thread: the HTTP client blocks) and handing observations over.
fn spawn_scrapers(setup: &ControlSetup, tx: tokio::sync::mpsc::Sender<Vec<ClassObservations>>) {
    let every = Duration::from_millis(setup.scrape_interval_ms);
    for target in &setup.scrapes {
        let scraper = match Scraper::new(target.clone(), every.min(Duration::from_secs(5))) {
            Ok(scraper) => Arc::new(std::sync::Mutex::new(scraper)),
            Err(e) => {
                warn!(url = %target.url, "not scraping: {e:#}");
                continue;
            }
        };
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                let scraper = scraper.clone();
                let result = tokio::task::spawn_blocking(move || scraper.lock().expect("scraper lock").scrape()).await;
                match result {
                    Ok(Ok(batches)) if !batches.is_empty() => {
                        if tx.send(batches).await.is_err() {
                            return;
                        }
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => warn!("scrape failed: {e:#}"),
                    Err(e) => warn!("scrape task failed: {e}"),
                }
            }
        });
    }
}

fn log_counters(datapath: &Datapath) {
    match (datapath.class_snapshots(), datapath.pass_counters()) {
        (Ok(classes), Ok(passed)) => report::log_counters(&classes, &passed),
        (Err(e), _) | (_, Err(e)) => warn!("reading counters: {e:#}"),
    }
}

/// Relays the fast path's rare diagnostics (aya-log) into our log.
fn forward_ebpf_logs(datapath: &mut Datapath) {
    let registered = datapath.take_logger().and_then(|logger| {
        // SAFETY: the logger owns its ring-buffer fd and outlives the registration.
        unsafe { AsyncFd::register(logger) }.map_err(|e| e.into_parts().1.into())
    });
    let logger = match registered {
        Ok(logger) => logger,
        Err(e) => {
            warn!("eBPF diagnostics unavailable: {e:#}");
            return;
        }
    };
    tokio::spawn(async move {
        let mut logger = logger;
        while let Ok(mut ready) = logger.readable_mut().await {
            ready.get_inner_mut().flush();
            ready.clear_ready();
        }
    });
}
