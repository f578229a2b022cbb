//! `shedder`: the daemon binary. Argument parsing and the run loop only; the
//! mechanisms live in the library.

use std::{io::IsTerminal, path::PathBuf, time::Duration};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use shedder_daemon::{
    config::Config,
    datapath::{AttachKind, Datapath},
    report,
};
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
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
            for (name, class) in plan.class_names.iter().zip(&plan.classes) {
                println!("{name}: {class:?}");
            }
            println!("{:?}", plan.global);
            Ok(())
        }
        Command::Run { iface, attach, config, report_every } => {
            // Validate before touching the kernel: a bad file attaches nothing.
            let config = load_config(config.as_ref())?;
            let plan = config.plan().context("invalid config; nothing was attached")?;
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run(
                &iface,
                attach,
                &plan,
                Duration::from_secs_f64(report_every),
            ))
        }
    }
}

async fn run(
    iface: &str,
    attach: AttachKind,
    plan: &shedder_daemon::config::Plan,
    report_every: Duration,
) -> anyhow::Result<()> {
    let mut datapath = Datapath::load()?;
    forward_ebpf_logs(&mut datapath);
    datapath.apply(plan).context("writing the config into the maps")?;
    let attachment = datapath.attach(iface, attach)?;
    info!(iface, attachment = %attachment, classes = plan.classes.len(), "attached");

    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut ticker = tokio::time::interval(report_every);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = ticker.tick() => log_counters(&datapath),
        }
    }
    // The last word on what the fast path did, before it goes away.
    log_counters(&datapath);
    drop(datapath);
    info!(iface, "detached; exiting");
    Ok(())
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
