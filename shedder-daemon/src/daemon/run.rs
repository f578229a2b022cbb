//! `shedder run`: the fast path loaded and attached to an interface, then
//! the daemon served until shutdown ([`run`]); and the owner loop itself
//! ([`serve`]), which also serves a daemon over the in-memory fast path.

use std::{future::Future, net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context as _;
use tokio::{
    io::unix::AsyncFd,
    net::TcpListener,
    signal::unix::{Signal, SignalKind, signal},
    time::MissedTickBehavior,
};
use tracing::{info, warn};

use super::{Daemon, DaemonHandle, fleet_link::FleetLink, scrapers::Scrapers};
use crate::{
    api::{
        self,
        server::{AccessPolicy, ControlSocket},
    },
    clock,
    config::Config,
    datapath::Datapath,
    fastpath::{AttachKind, Fastpath},
    fleet::FleetSettings,
    hook_watch::HookChange,
    listen, metrics,
    pin::PinDir,
    privilege, ready, report,
    telemetry::gpu::open_gpu_source,
};

/// How often the daemon looks whether its program is still attached.
const HOOK_CHECK_EVERY: Duration = Duration::from_secs(1);

/// What `shedder run` was asked to do.
pub struct RunOptions {
    pub iface: String,
    pub attach: AttachKind,
    pub config: Config,
    /// Where `reload` (and SIGHUP) read the config again; `None` on the embedded default.
    pub config_path: Option<PathBuf>,
    /// Between counter reports in the log.
    pub report_every: Duration,
    /// Where Prometheus scrapes `GET /metrics`.
    pub metrics_addr: SocketAddr,
    pub control: ControlOptions,
    /// Where the maps and link are pinned; `None`: nothing outlives the daemon.
    pub pins: Option<PinDir>,
}

/// Where the control socket goes and who may use it.
pub struct ControlOptions {
    pub socket: PathBuf,
    /// The group that may connect (mode 0660), besides root.
    pub group: Option<u32>,
    pub access: AccessPolicy,
}

/// What a served daemon listens to besides its ticks.
pub struct Services {
    pub socket: ControlSocket,
    pub access: AccessPolicy,
    pub metrics: Option<TcpListener>,
    pub report_every: Duration,
    /// Whether the config's `[[scrape]]` targets are fetched (following
    /// reloads); the test beds' daemons fetch none.
    pub scrape: bool,
    /// With `[fleet]`: the tenants' shares come from the fleet.
    pub fleet: Option<FleetSettings>,
    /// A signal asking to re-read the config file (SIGHUP).
    pub reload: Option<Signal>,
}

impl Services {
    /// The control socket alone: no metrics, scrapes, fleet or reload signal.
    pub fn socket_only(socket: ControlSocket) -> Self {
        Self {
            socket,
            access: AccessPolicy::default(),
            metrics: None,
            report_every: Duration::from_secs(3600),
            scrape: false,
            fleet: None,
            reload: None,
        }
    }
}

/// How a served daemon ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Asked to stop.
    Stopped,
    /// The interface came back after it was gone: attaching to it again
    /// needs the capabilities the daemon dropped, so a restart must do it.
    InterfaceReturned,
}

/// Loads the fast path, attaches it to the interface and serves the daemon
/// until `shutdown` completes. Everything that can be refused (the config,
/// the listeners, the pins) is checked before anything is attached.
pub async fn run(options: RunOptions, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let RunOptions { iface, attach, config, config_path, report_every, metrics_addr, control, pins } = options;
    let mut compiled = config.compile().context("invalid config; nothing was attached")?;
    nix::net::if_::if_nametoindex(iface.as_str())
        .with_context(|| format!("--iface: no interface is named {iface:?} here"))?;
    // By convention SIGHUP asks a daemon to re-read its config.
    let reload = signal(SignalKind::hangup())?;
    check_file_limit()?;
    // Bound before attaching: a busy port fails the start, not a scrape later.
    let metrics_listener = metrics::bind(metrics_addr).await?;
    // The control socket too: a path we cannot bind attaches nothing.
    let socket = ControlSocket::bind(&control.socket, control.group)?;
    let pins = match pins {
        Some(dir) if !dir.can_outlive_the_daemon()? => None,
        pins => pins,
    };
    let mut datapath = match pins {
        Some(dir) => Datapath::load_pinned(dir, attach)?,
        None => Datapath::load()?,
    };
    forward_ebpf_logs(&mut datapath);
    // Arms the fail-open watchdog before the config can enforce anything: a
    // daemon killed before its first tick must not leave budgets enforced.
    datapath.write_heartbeat(clock::monotonic_ns()).context("writing the first heartbeat")?;
    datapath.apply(&compiled.plan).context("writing the config into the maps")?;
    let attachment = datapath.attach(&iface, attach)?;
    info!(iface, attachment = %attachment, classes = compiled.plan.classes.len(), "attached");
    // Everything privileged is done; from here on the daemon works through the fds it holds.
    privilege::drop_unneeded(attachment).context("dropping capabilities")?;
    let pinned = datapath.pinned_link_dir().map(|dir| dir.display().to_string());

    let services = Services {
        socket,
        access: control.access,
        metrics: Some(metrics_listener),
        report_every,
        scrape: true,
        fleet: compiled.fleet.take(),
        reload: Some(reload),
    };
    let daemon =
        Daemon::new(config, config_path, compiled, Box::new(datapath), open_gpu_source()).attached(&iface, attachment);
    info!(addr = %metrics_addr, "serving /metrics");
    ready::notify_ready();
    let ending = serve(daemon, services, shutdown).await?;
    match pinned {
        Some(dir) => info!(iface, pinned = dir, "exiting; the fast path stays attached (`shedder detach` removes it)"),
        None => info!(iface, "detached; exiting"),
    }
    if ending == Ending::InterfaceReturned {
        anyhow::bail!(
            "interface {iface} is back after it was gone: exiting so that a restart attaches to it (the unit \
             restarts on failure; pinned maps keep their state)"
        );
    }
    Ok(())
}

/// The owner loop: ticks the controller, serves the control socket's and
/// the metrics' jobs, takes scraped observations, watches the hook, and
/// logs the counters, until `shutdown` completes. The daemon (and with it
/// the fast path, unless pinned) is dropped before this returns.
pub async fn serve(
    mut daemon: Daemon,
    services: Services,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Ending> {
    let Services { mut socket, access, metrics, report_every, scrape, fleet, mut reload } = services;
    let (scraped_tx, mut scraped) = tokio::sync::mpsc::channel(16);
    let mut scrapers = Scrapers::new(scraped_tx);
    // Other tasks (the control socket, metrics, the fleet) reach the daemon through this.
    let (handle, mut jobs) = DaemonHandle::channel(256);
    if let Some(settings) = fleet {
        FleetLink::new(settings).spawn(&mut daemon, handle.clone());
    }
    let server = socket.serve(handle.clone(), access);
    if let Some(listener) = metrics {
        tokio::spawn(metrics::serve(listener, handle.clone()));
    }
    let mut report = tokio::time::interval(report_every);
    let mut watch = tokio::time::interval(HOOK_CHECK_EVERY);
    let mut tick = ticks(daemon.control().controller().params().tick_ms);
    let mut following = None;
    report.tick().await;
    tokio::pin!(shutdown);
    let ending = loop {
        // At the start, and after a reload: the tick and the scrapes follow the config.
        if following != Some(daemon.config_version()) {
            following = Some(daemon.config_version());
            let tick_ms = daemon.control().controller().params().tick_ms;
            if tick.period() != Duration::from_millis(tick_ms) {
                tick = ticks(tick_ms);
            }
            if scrape {
                let config = daemon.config();
                scrapers.follow(&config.scrapes, Duration::from_millis(config.scrape_interval_ms));
            }
        }
        tokio::select! {
            _ = &mut shutdown => break Ending::Stopped,
            _ = next_signal(&mut reload) => match daemon.reload() {
                Ok(version) => info!(config_version = version, "SIGHUP: configuration reloaded"),
                Err(e) => warn!("SIGHUP: not reloaded, nothing changed: {e}"),
            },
            _ = report.tick() => log_counters(daemon.control().fastpath()),
            _ = watch.tick() => match daemon.check_hook() {
                HookChange::Lost => warn!(
                    iface = daemon.iface().unwrap_or_default(),
                    "not enforcing: {}",
                    daemon.hook_problem().unwrap_or_default()
                ),
                HookChange::Returned => break Ending::InterfaceReturned,
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
    };
    // No more requests; the socket file goes with `socket`.
    server.abort();
    drop(scrapers);
    drop(socket);
    // The last word on what the fast path did, before it goes away.
    log_counters(daemon.control().fastpath());
    drop(daemon);
    Ok(ending)
}

/// The controller's ticks, `tick_ms` apart; one that falls behind is delayed,
/// not made up in a burst.
fn ticks(tick_ms: u64) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval(Duration::from_millis(tick_ms));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks
}

/// The next delivery of `signal`; never, without one.
async fn next_signal(signal: &mut Option<Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
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

fn log_counters(fastpath: &dyn Fastpath) {
    match (fastpath.class_snapshots(), fastpath.pass_counters()) {
        (Ok(classes), Ok(passed)) => report::log_counters(&classes, &passed),
        (Err(e), _) | (_, Err(e)) => warn!("reading counters: {e:#}"),
    }
}

/// Relays the fast path's rare diagnostics (aya-log) into our log.
fn forward_ebpf_logs(datapath: &mut Datapath) {
    let registered = datapath.take_logger().map_err(anyhow::Error::from).and_then(|logger| {
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
