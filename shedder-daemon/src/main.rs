//! `shedder`: the daemon binary. Argument parsing and the run loop only; the
//! mechanisms live in the library.

use std::{io::IsTerminal, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use shedder_daemon::{
    api::{
        self,
        server::{AccessPolicy, ControlSocket},
    },
    config::{Config, ControlSetup},
    control_loop::ControlLoop,
    daemon::{Daemon, DaemonHandle},
    datapath::{AttachKind, Datapath},
    metrics, report,
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
        /// Where Prometheus scrapes `GET /metrics`.
        #[arg(long, default_value = "127.0.0.1:9464")]
        metrics_addr: SocketAddr,
        /// The JSON control socket (mode 0600, or 0660 with --socket-group).
        #[arg(long, default_value = api::DEFAULT_SOCKET)]
        socket: PathBuf,
        /// Group that may connect to the control socket (name or number).
        #[arg(long)]
        socket_group: Option<String>,
        /// A uid besides root that may change the configuration.
        #[arg(long)]
        admin_uid: Option<u32>,
        /// A gid that may change the configuration (the peer's primary group).
        #[arg(long)]
        admin_gid: Option<u32>,
    },
    /// Talk to a running daemon through its control socket.
    Ctl(api::ctl::CtlArgs),
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
        Command::Ctl(args) => std::process::exit(api::ctl::run(&args)),
        Command::Run {
            iface,
            attach,
            config,
            report_every,
            metrics_addr,
            socket,
            socket_group,
            admin_uid,
            admin_gid,
        } => {
            // Validate everything before touching the kernel: a bad file attaches nothing.
            let config_path = config;
            let config = load_config(config_path.as_ref())?;
            config.plan().context("invalid config; nothing was attached")?;
            config.control().context("invalid config; nothing was attached")?;
            let group = socket_group.as_deref().map(resolve_group).transpose()?;
            let control = ControlOptions { socket, group, access: AccessPolicy { admin_uid, admin_gid } };
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run(
                &iface,
                attach,
                config,
                config_path,
                Duration::from_secs_f64(report_every),
                metrics_addr,
                control,
            ))
        }
    }
}

/// Where the control socket goes and who may use it.
struct ControlOptions {
    socket: PathBuf,
    group: Option<u32>,
    access: AccessPolicy,
}

/// A group name, or a number.
fn resolve_group(name: &str) -> anyhow::Result<u32> {
    if let Ok(gid) = name.parse() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(name).with_context(|| format!("looking up group {name}"))? {
        Some(group) => Ok(group.gid.as_raw()),
        None => anyhow::bail!("--socket-group: no group is named {name:?}"),
    }
}

async fn run(
    iface: &str,
    attach: AttachKind,
    config: Config,
    config_path: Option<PathBuf>,
    report_every: Duration,
    metrics_addr: SocketAddr,
    options: ControlOptions,
) -> anyhow::Result<()> {
    let plan = config.plan().context("invalid config; nothing was attached")?;
    let setup = config.control().context("invalid config; nothing was attached")?;
    // Signal handlers first: from the moment the program is attached, a
    // SIGINT or SIGTERM must detach it, never kill the daemon outright.
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    // Bound before attaching: a busy port fails the start, not a scrape later.
    let metrics_listener = metrics::bind(metrics_addr).await?;
    // The control socket too: a path we cannot bind attaches nothing.
    let mut socket = ControlSocket::bind(&options.socket, options.group)?;
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
    let (handle, mut jobs) = DaemonHandle::channel(256);
    let server = socket.serve(handle.clone(), options.access);
    tokio::spawn(metrics::serve(metrics_listener, handle.clone()));
    info!(addr = %metrics_addr, "serving /metrics");

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
    // No more requests; the socket file goes with `socket`.
    server.abort();
    drop(socket);
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
