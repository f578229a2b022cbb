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
    clock,
    config::{Config, ControlSetup},
    control_loop::ControlLoop,
    daemon::{Daemon, DaemonHandle},
    datapath::{AttachKind, Datapath},
    fleet::{self, FleetSettings, FleetShares},
    hook_watch::HookChange,
    listen, metrics,
    pin::{self, PinDir},
    privilege, report,
    telemetry::{ClassObservations, gpu::open_gpu_source, scrape::Scraper},
};
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
    sync::watch,
    time::MissedTickBehavior,
};
use tracing::{info, warn};

/// How often the daemon looks whether its program is still attached.
const HOOK_CHECK_EVERY: Duration = Duration::from_secs(1);

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
        #[arg(long, default_value = "5", value_parser = parse_period)]
        report_every: Duration,
        /// Where Prometheus scrapes `GET /metrics`.
        #[arg(long, default_value = "127.0.0.1:9464")]
        metrics_addr: SocketAddr,
        /// The JSON control socket (mode 0600, or 0660 with --socket-group);
        /// by default /run/shedder/IFACE.sock, one per interface.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Group that may connect to the control socket (name or number).
        #[arg(long)]
        socket_group: Option<String>,
        /// A uid besides root that may change the configuration.
        #[arg(long)]
        admin_uid: Option<u32>,
        /// A gid that may change the configuration (the peer's primary group).
        #[arg(long)]
        admin_gid: Option<u32>,
        #[command(flatten)]
        pinning: PinArgs,
    },
    /// Detach the fast path a pinned run left on an interface, and remove its
    /// pinned maps (counters and bucket state go with them).
    Detach {
        /// Interface to detach from.
        #[arg(long)]
        iface: String,
        /// Directory the run pinned under (one subdirectory per interface).
        #[arg(long, default_value = pin::DEFAULT_ROOT)]
        pin_root: PathBuf,
    },
    /// Talk to a running daemon through its control socket.
    Ctl(api::ctl::CtlArgs),
    /// A live view of a running daemon: classes, rates, slack, decisions.
    Top(shedder_daemon::top::TopArgs),
    /// Validate a configuration file and print what it compiles to.
    CheckConfig {
        /// Configuration file (TOML); the embedded default when absent.
        config: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
struct PinArgs {
    /// Directory the maps and the link are pinned under, one subdirectory per
    /// interface. Pinned, the program stays attached when the daemon stops
    /// (failing open once heartbeats stop) and a restart keeps its state.
    #[arg(long, default_value = pin::DEFAULT_ROOT)]
    pin_root: PathBuf,
    /// Pin nothing: the program detaches when the daemon exits, and a restart
    /// starts from full buckets and zero counters.
    #[arg(long, conflicts_with = "pin_root")]
    no_pin: bool,
}

impl PinArgs {
    fn dir(&self, iface: &str) -> anyhow::Result<Option<PinDir>> {
        (!self.no_pin).then(|| PinDir::new(&self.pin_root, iface)).transpose()
    }
}

/// A period in seconds: positive, finite, and at most a day.
fn parse_period(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!("{text} s: must be more than 0 and at most 86400 (a day)"));
    }
    Ok(Duration::from_secs_f64(secs))
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
            config.fleet().context("invalid config")?;
            // The config as the daemon will run it, defaults filled in, in
            // the file's own words.
            let rules = plan.src_v4.len() + plan.src_v6.len() + plan.dst_ports.len() + plan.dscp.len();
            println!("# valid: {} classes, {rules} rules", plan.classes.len());
            print!("{}", toml::to_string_pretty(&config).context("printing the config")?);
            Ok(())
        }
        Command::Ctl(args) => std::process::exit(api::ctl::run(&args)),
        Command::Top(args) => shedder_daemon::top::run(&args),
        Command::Detach { iface, pin_root } => {
            let dir = PinDir::new(&pin_root, &iface)?;
            // Never pull the maps from under a running daemon.
            let _lock = dir.path().exists().then(|| dir.lock()).transpose()?;
            if !dir.remove()? {
                anyhow::bail!("nothing is pinned for {iface} (no {})", dir.path().display());
            }
            println!("detached from {iface}; removed {}", dir.path().display());
            Ok(())
        }
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
            pinning,
        } => {
            // Validate everything before touching the kernel: a bad file or
            // flag attaches nothing (clap has checked the flags' values).
            let config_path = config;
            let config = load_config(config_path.as_ref())?;
            config.plan().context("invalid config; nothing was attached")?;
            config.control().context("invalid config; nothing was attached")?;
            config.fleet().context("invalid config; nothing was attached")?;
            nix::net::if_::if_nametoindex(iface.as_str())
                .with_context(|| format!("--iface: no interface is named {iface:?} here"))?;
            let group = socket_group.as_deref().map(resolve_group).transpose()?;
            let hook = Hook { kind: attach, pins: pinning.dir(&iface)? };
            let socket = socket.unwrap_or_else(|| api::default_socket(&iface));
            let control = ControlOptions { socket, group, access: AccessPolicy { admin_uid, admin_gid } };
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run(
                &iface,
                hook,
                config,
                config_path,
                report_every,
                metrics_addr,
                control,
            ))
        }
    }
}

/// How the fast path is attached, and whether it outlives the daemon.
struct Hook {
    kind: AttachKind,
    /// Where its maps and link are pinned; `None` with --no-pin.
    pins: Option<PinDir>,
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
    hook: Hook,
    config: Config,
    config_path: Option<PathBuf>,
    report_every: Duration,
    metrics_addr: SocketAddr,
    options: ControlOptions,
) -> anyhow::Result<()> {
    let plan = config.plan().context("invalid config; nothing was attached")?;
    let setup = config.control().context("invalid config; nothing was attached")?;
    let fleet = config.fleet().context("invalid config; nothing was attached")?;
    // Signal handlers first: from the moment the program is attached, a
    // SIGINT or SIGTERM must end the daemon cleanly (detaching the program
    // unless it is pinned), never kill it outright.
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    // By convention SIGHUP asks a daemon to re-read its config.
    let mut sighup = signal(SignalKind::hangup())?;
    check_file_limit()?;
    // Bound before attaching: a busy port fails the start, not a scrape later.
    let metrics_listener = metrics::bind(metrics_addr).await?;
    // The control socket too: a path we cannot bind attaches nothing.
    let mut socket = ControlSocket::bind(&options.socket, options.group)?;
    let pins = match hook.pins {
        Some(dir) if !dir.can_outlive_the_daemon()? => None,
        pins => pins,
    };
    let mut datapath = match pins {
        Some(dir) => Datapath::load_pinned(dir, hook.kind)?,
        None => Datapath::load()?,
    };
    forward_ebpf_logs(&mut datapath);
    // Arms the fail-open watchdog before the config can enforce anything: a
    // daemon killed before its first tick must not leave budgets enforced.
    datapath.write_heartbeat(clock::monotonic_ns()).context("writing the first heartbeat")?;
    datapath.apply(&plan).context("writing the config into the maps")?;
    let attachment = datapath.attach(iface, hook.kind)?;
    info!(iface, attachment = %attachment, classes = plan.classes.len(), "attached");
    // Everything privileged is done; from here on the daemon works through the fds it holds.
    privilege::drop_unneeded(attachment).context("dropping capabilities")?;

    let tick_every = Duration::from_millis(setup.controller.params().tick_ms);
    let (scraped_tx, mut scraped) = tokio::sync::mpsc::channel(16);
    spawn_scrapers(&setup, scraped_tx);
    let control = ControlLoop::new(datapath, plan, setup, open_gpu_source());
    // With [fleet], the tenants' shares are this host's leases of their quotas.
    let fleet = fleet.map(FleetLink::new);
    let control = match &fleet {
        Some(link) => control.with_tenant_shares(Box::new(link.shares())),
        None => control,
    };
    let mut daemon = Daemon::new(control, config, config_path, iface.to_string(), attachment);
    // Other tasks (the control socket, metrics) reach the daemon through this.
    let (handle, mut jobs) = DaemonHandle::channel(256);
    if let Some(link) = fleet {
        link.spawn(&mut daemon, handle.clone());
    }
    let server = socket.serve(handle.clone(), options.access);
    tokio::spawn(metrics::serve(metrics_listener, handle.clone()));
    info!(addr = %metrics_addr, "serving /metrics");

    let mut report = tokio::time::interval(report_every);
    let mut watch = tokio::time::interval(HOOK_CHECK_EVERY);
    let mut interface_returned = false;
    let mut tick = tokio::time::interval(tick_every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    report.tick().await;
    loop {
        tokio::select! {
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = sighup.recv() => match daemon.reload() {
                Ok(version) => info!(config_version = version, "SIGHUP: configuration reloaded"),
                Err(e) => warn!("SIGHUP: not reloaded, nothing changed: {e}"),
            },
            _ = report.tick() => log_counters(daemon.control().datapath()),
            _ = watch.tick() => match daemon.check_hook() {
                HookChange::Lost => warn!(iface, "not enforcing: {}", daemon.hook_problem().unwrap_or_default()),
                HookChange::Returned => {
                    interface_returned = true;
                    break;
                }
                HookChange::Unchanged => {}
            },
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
    let pinned = daemon.control().datapath().pinned_link_dir().map(|dir| dir.display().to_string());
    drop(daemon);
    match pinned {
        Some(dir) => info!(iface, pinned = dir, "exiting; the fast path stays attached (`shedder detach` removes it)"),
        None => info!(iface, "detached; exiting"),
    }
    if interface_returned {
        // Attaching takes the capabilities the daemon dropped; a restart has them.
        anyhow::bail!(
            "interface {iface} is back after it was gone: exiting so that a restart attaches to it (the unit \
             restarts on failure; pinned maps keep their state)"
        );
    }
    Ok(())
}

/// Makes room for every connection the listeners may hold, or says why not.
fn check_file_limit() -> anyhow::Result<()> {
    let limit = listen::raise_file_limit().context("raising the open-files limit")?;
    let wanted = (api::server::MAX_CONNECTIONS + api::server::ADMIN_RESERVED + metrics::MAX_CONNECTIONS) as u64 + 256;
    if limit < wanted {
        warn!(
            limit,
            wanted, "the open-files limit is low: connections past it are refused (raise LimitNOFILE or ulimit -n)"
        );
    }
    Ok(())
}

/// The fleet's task and the channels it shares with the control loop (usage
/// in, shares out) and the daemon (its view).
struct FleetLink {
    settings: FleetSettings,
    usage: (watch::Sender<fleet::Usage>, watch::Receiver<fleet::Usage>),
    view: (watch::Sender<fleet::FleetView>, watch::Receiver<fleet::FleetView>),
}

impl FleetLink {
    fn new(settings: FleetSettings) -> Self {
        // The counts are reported from this run's start: a new epoch each run.
        let epoch = format!("{}-{}", std::process::id(), clock::monotonic_ns());
        let usage = watch::channel(fleet::Usage { epoch, ..fleet::Usage::default() });
        let view = watch::channel(fleet::FleetView::starting(&settings));
        Self { settings, usage, view }
    }

    /// The tenants' share source for the control loop.
    fn shares(&self) -> FleetShares {
        FleetShares::new(self.view.1.clone(), self.usage.0.clone())
    }

    /// Starts the task; new shares are put in force at once, through the
    /// daemon, before the fleet confirms a smaller one.
    fn spawn(self, daemon: &mut Daemon, handle: DaemonHandle) {
        daemon.follow_fleet(self.view.1);
        let apply = move |_shares| {
            let handle = handle.clone();
            async move {
                if let Ok(Err(e)) = handle.call(|d| d.retake_tenant_shares()).await {
                    warn!("fleet: applying the tenants' shares: {e:#}");
                }
            }
        };
        tokio::spawn(fleet::run(self.settings, self.usage.1, self.view.0, apply));
    }
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
