//! One mode's run: a fresh testbed, what the mode puts in front of the
//! backend (nothing, the daemon, or nftables), the backend, the load, and
//! the daemon's timeline. Everything it set up is removed when it returns,
//! on every path: guards drop in reverse order (timeline and backend tasks,
//! the daemon, the client's XDP_PASS, the namespaces with their nftables
//! table and veth pair).

use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use shedder_drill::{
    record::{RunRecord, TimelinePoint},
    workload::Workload,
};
use shedder_testbed::netns::Testbed;
use tokio::{runtime::Runtime, sync::watch, task::JoinSet};

use crate::{
    backend::Backend,
    daemon::{Daemon, STOP_GRACE},
    daemon_config::{DaemonMode, Scrape, daemon_config},
    exporter::{self, Exporter},
    loadgen::run_load,
    nft,
    peer::Peer,
    progress::{Progress, Tally},
    retry::{RetryMode, RetryPolicy},
    run_context::RunContext,
    telemetry::Telemetry,
    tenants, timeline,
    workers::Admission,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// No program: the backend alone.
    Off,
    /// The daemon counts what it would shed; the backend asks `admit` but ignores it.
    Observe,
    /// The adaptive controller sheds SYNs; the backend obeys `admit`.
    Enforce,
    /// No shedder: an nftables `limit rate … reject` rule per class.
    Static,
    /// No shedder: the backend answers 503 while its queue is full.
    QueueCap,
    /// No shedder: the backend answers 503 to a job that waited too long.
    QueueTimeout,
    /// No shedder: the inference gateway's saturation detector sheds sheddable requests.
    Saturation,
}

impl Mode {
    pub const ALL: [Mode; 7] =
        [Mode::Off, Mode::Observe, Mode::Enforce, Mode::Static, Mode::QueueCap, Mode::QueueTimeout, Mode::Saturation];

    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Observe => "observe",
            Self::Enforce => "enforce",
            Self::Static => "static",
            Self::QueueCap => "queue-cap",
            Self::QueueTimeout => "queue-timeout",
            Self::Saturation => "saturation",
        }
    }

    /// The backend's own policy in this mode.
    fn peer(self, workers: u32) -> Peer {
        match self {
            Self::QueueCap => Peer::QueueCap { max_queued: workers as usize },
            Self::QueueTimeout => Peer::QueueTimeout,
            Self::Saturation => Peer::Saturation,
            Self::Off | Self::Observe | Self::Enforce | Self::Static => Peer::None,
        }
    }
}

/// What every mode's run shares.
pub struct Setup {
    pub workload: Workload,
    pub time_scale: f64,
    pub seed: u64,
    pub retry: RetryMode,
    /// How a daemon learns about the backend.
    pub telemetry: Telemetry,
    pub daemon: PathBuf,
    /// Where the runs' records go, and a daemon mode's config and log (`<mode>/`).
    pub runs_dir: PathBuf,
}

/// Time from the run's setup to its time 0, so both sides start together.
const LEAD: Duration = Duration::from_millis(300);

pub fn run_mode(rt: &Runtime, mode: Mode, setup: &Setup, stop: &watch::Receiver<bool>) -> anyhow::Result<RunRecord> {
    let scaled = setup.workload.scaled(setup.time_scale);

    let testbed = Testbed::new().context("creating the client and server namespaces")?;
    tenants::add_addresses(&testbed, scaled.tenants().count())?;
    let listeners = scaled
        .classes
        .iter()
        .map(|class| testbed.listen(SocketAddr::from((Testbed::SERVER_V4, class.port)), true))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let mut static_rates = Vec::new();
    let (mut _client_pass, mut daemon, mut scraped) = (None, None, None);
    match mode {
        Mode::Off | Mode::QueueCap | Mode::QueueTimeout | Mode::Saturation => {}
        Mode::Static => {
            static_rates = scaled.classes.iter().map(|c| c.static_rate).collect();
            let limits: Vec<(u16, u32)> =
                scaled.classes.iter().map(|c| (c.port, c.static_rate.round().max(1.0) as u32)).collect();
            nft::install(&testbed.server, &limits)?;
        }
        Mode::Observe | Mode::Enforce => {
            // veth delivers XDP_TX'd frames (shedder's RSTs) only to a peer that runs XDP itself.
            _client_pass = Some(testbed.attach_client_pass()?);
            let daemon_mode = if mode == Mode::Enforce { DaemonMode::Enforce } else { DaemonMode::Observe };
            // The exporter listens beside the daemon, on the server's loopback.
            let exporter = match setup.telemetry.exporter() {
                Some(format) => {
                    let listener = testbed.listen(SocketAddr::from(([127, 0, 0, 1], 0)), false)?;
                    let url = format!("http://{}/metrics", listener.local_addr()?);
                    let models = scaled.classes.iter().map(|c| c.name.clone()).collect();
                    let exporter = Exporter::new(format, models, scaled.worker_count, setup.time_scale);
                    scraped = Some((Arc::new(exporter), listener));
                    Some(Scrape { kind: format.scrape_kind(), url })
                }
                None => None,
            };
            let config = daemon_config(&scaled, daemon_mode, setup.time_scale, exporter.as_ref())?;
            let dir = setup.runs_dir.join(mode.name());
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let socket =
                std::env::temp_dir().join(format!("shedder-drill-{}-{}.sock", std::process::id(), mode.name()));
            daemon = Some(rt.block_on(Daemon::start(&testbed, &setup.daemon, &config, &dir, socket))?);
        }
    }
    let admission = match (mode, &daemon) {
        (Mode::Observe, Some(d)) => Admission::Observe(d.socket.clone()),
        (Mode::Enforce, Some(d)) => Admission::Enforce(d.socket.clone()),
        _ => Admission::None,
    };

    let ctx = Arc::new(RunContext::new(&setup.workload, setup.time_scale, setup.seed, LEAD));
    let _runtime = rt.enter();
    let exporter = scraped.as_ref().map(|(exporter, _)| exporter.clone());
    let backend = Backend::start(ctx.clone(), listeners, admission, mode.peer(scaled.worker_count), exporter)?;
    let mut tasks = JoinSet::new();
    if let Some((exporter, listener)) = scraped {
        exporter::start(&mut tasks, exporter, listener, setup.time_scale)?;
    }
    let timeline = match &daemon {
        Some(d) => timeline::start(&mut tasks, ctx.clone(), d.socket.clone()),
        None => Arc::new(Mutex::new(Vec::new())),
    };

    let tally = Arc::new(Tally::default());
    let client = {
        let client = &scaled.client;
        let policy = Arc::new(RetryPolicy::new(
            setup.retry,
            client.max_attempts,
            Duration::from_secs_f64(client.backoff_base_ms / 1000.0),
            client.retry_budget,
            1000.0 * setup.time_scale,
        ));
        let (ctx, tally, stop) = (ctx.clone(), tally.clone(), stop.clone());
        testbed.client.spawn(move || -> anyhow::Result<_> {
            // Its own runtime on this thread, which lives in the client namespace:
            // every socket the load generator opens is the client's.
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            Ok(rt.block_on(run_load(ctx, IpAddr::V4(Testbed::SERVER_V4), policy, tally, stop)))
        })
    };

    let progress = Progress::new(mode.name(), Duration::from_secs_f64(ctx.end_ms() / 1000.0));
    let started = Instant::now();
    while !client.is_finished() {
        progress.update(started.elapsed(), &tally);
        if let Some(d) = daemon.as_mut()
            && !d.is_running()
        {
            bail!("the daemon exited during the {} run; its log:\n{}", mode.name(), d.log_tail());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    progress.finish(&tally);
    let jobs = client.join().map_err(|_| anyhow::anyhow!("the load generator panicked"))???;
    if *stop.borrow() {
        return Err(Interrupted.into());
    }

    drop(tasks);
    drop(backend);
    if let Some(d) = daemon
        && !d.stop(STOP_GRACE)
    {
        eprintln!("shedder-drill: the {} daemon did not exit on SIGINT; it was killed", mode.name());
    }
    let timeline: Vec<TimelinePoint> = std::mem::take(&mut timeline.lock().unwrap());
    let telemetry = matches!(mode, Mode::Observe | Mode::Enforce).then(|| setup.telemetry.name().to_string());
    Ok(RunRecord { mode: mode.name().to_string(), jobs, timeline, static_rates, telemetry })
}

/// A stop signal ended the run; everything it set up has been removed.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted; the run's namespaces and daemon were removed")
    }
}

impl std::error::Error for Interrupted {}

/// Where a run's record goes.
pub fn record_path(runs_dir: &Path, mode: Mode) -> PathBuf {
    runs_dir.join(format!("{}.json", mode.name()))
}
