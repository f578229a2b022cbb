//! The running daemon's state, owned by one task, and the handle other tasks
//! (the control socket, the metrics endpoint) use to reach it.
//!
//! Rather than sharing the state behind locks, a task sends a [`Job`] — a
//! closure — that the owner runs between ticks with `&mut Daemon`. Every
//! change is therefore serialised with the controller's ticks, and a reader
//! never sees half of one.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use tokio::sync::{mpsc, oneshot, watch};

use crate::{
    clock::monotonic_ns,
    config::{Config, ConfigError},
    control::Decision,
    control_loop::ControlLoop,
    datapath::Attachment,
    fleet::FleetView,
    hook_watch::{HookChange, HookWatch},
    telemetry::ClassObservations,
};

pub struct Daemon {
    control: ControlLoop,
    config: Config,
    /// Where `reload` reads from; `None` when running on the embedded default.
    config_path: Option<PathBuf>,
    /// Bumped by every accepted configuration change.
    config_version: u64,
    started: Instant,
    iface: String,
    attachment: Attachment,
    hook: HookWatch,
    /// What the fleet task last published, with `[fleet]`.
    fleet: Option<watch::Receiver<FleetView>>,
}

/// Why a configuration change was not made. Either way nothing changed.
#[derive(Debug)]
pub enum ChangeError {
    /// The new configuration does not validate.
    Invalid(ConfigError),
    /// There is nothing to do it with (e.g. `reload` without a config file).
    Unavailable(String),
    /// Validated, but writing it failed (a map update the kernel refused).
    Apply(anyhow::Error),
}

impl std::fmt::Display for ChangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(e) => write!(f, "invalid config: {e}"),
            Self::Unavailable(why) => f.write_str(why),
            Self::Apply(e) => write!(f, "applying the config: {e:#}"),
        }
    }
}

impl std::error::Error for ChangeError {}

impl Daemon {
    pub fn new(
        control: ControlLoop,
        config: Config,
        config_path: Option<PathBuf>,
        iface: String,
        attachment: Attachment,
    ) -> Self {
        let hook = HookWatch::new(&iface, attachment);
        Self {
            control,
            config,
            config_path,
            config_version: 1,
            started: Instant::now(),
            iface,
            attachment,
            hook,
            fleet: None,
        }
    }

    /// Follows the fleet task's view (state, shares) from now on.
    pub fn follow_fleet(&mut self, view: watch::Receiver<FleetView>) {
        self.fleet = Some(view);
    }

    /// The fleet as this host sees it; `None` without `[fleet]`.
    pub fn fleet(&self) -> Option<FleetView> {
        self.fleet.as_ref().map(|view| view.borrow().clone())
    }

    /// One controller tick, on the daemon's clock.
    pub fn tick(&mut self) -> anyhow::Result<Vec<Decision>> {
        self.control.tick(self.started.elapsed(), monotonic_ns())
    }

    /// The tenants' shares taken again now (the fleet's changed).
    pub fn retake_tenant_shares(&mut self) -> anyhow::Result<()> {
        self.control.retake_tenant_shares(self.started.elapsed())
    }

    /// Observations from a scrape.
    pub fn observe(&mut self, batches: &[ClassObservations]) {
        self.control.observe(self.started.elapsed(), batches);
    }

    pub fn control(&self) -> &ControlLoop {
        &self.control
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn config_version(&self) -> u64 {
        self.config_version
    }

    /// The daemon's clock, as the estimators and the controller see it.
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn iface(&self) -> &str {
        &self.iface
    }

    pub fn attachment(&self) -> Attachment {
        self.attachment
    }

    /// Looks whether the fast path is still on its interface.
    pub fn check_hook(&mut self) -> HookChange {
        self.hook.check(self.control.datapath())
    }

    /// Why the fast path is not enforcing (interface gone, program detached);
    /// `None` while it is attached, as far as the last check saw.
    pub fn hook_problem(&self) -> Option<String> {
        self.hook.state().problem(&self.iface)
    }

    /// Validates `config` whole and switches to it; returns the new config
    /// version. A config that does not validate changes nothing, in the
    /// daemon or in the maps; one equal to the running config changes
    /// nothing either, the version included.
    pub fn replace_config(&mut self, config: Config) -> Result<u64, ChangeError> {
        let plan = config.plan().map_err(ChangeError::Invalid)?;
        let setup = config.control().map_err(ChangeError::Invalid)?;
        config.fleet().map_err(ChangeError::Invalid)?;
        if config == self.config {
            return Ok(self.config_version);
        }
        if config.fleet != self.config.fleet {
            // The fleet task holds its connection and leases from the start.
            return Err(ChangeError::Unavailable("[fleet] changes only with a restart; nothing changed".into()));
        }
        self.control.reconfigure(plan, setup).map_err(ChangeError::Apply)?;
        self.config = config;
        self.config_version += 1;
        Ok(self.config_version)
    }

    /// Re-reads the config file the daemon was started with.
    pub fn reload(&mut self) -> Result<u64, ChangeError> {
        let path = self.config_path.clone().ok_or_else(|| {
            ChangeError::Unavailable("running on the embedded default config: nothing to reload".into())
        })?;
        let config = Config::from_file(&path).map_err(|e| {
            ChangeError::Invalid(ConfigError { field: path.display().to_string(), message: format!("{e:#}") })
        })?;
        self.replace_config(config)
    }
}

/// Work for the owner task: runs with the daemon between ticks.
pub type Job = Box<dyn FnOnce(&mut Daemon) + Send>;

/// The owner task has exited (the daemon is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaemonGone;

impl std::fmt::Display for DaemonGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the daemon is shutting down")
    }
}

impl std::error::Error for DaemonGone {}

/// How other tasks reach the [`Daemon`].
#[derive(Clone)]
pub struct DaemonHandle {
    jobs: mpsc::Sender<Job>,
}

impl DaemonHandle {
    /// A handle and the queue the owner task must serve (`job(&mut daemon)`).
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<Job>) {
        let (jobs, queue) = mpsc::channel(capacity);
        (Self { jobs }, queue)
    }

    /// Runs `f` on the owner task and returns its result.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Daemon) -> T + Send + 'static,
    ) -> Result<T, DaemonGone> {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |daemon| {
            let _ = reply.send(f(daemon));
        });
        self.jobs.send(job).await.map_err(|_| DaemonGone)?;
        answer.await.map_err(|_| DaemonGone)
    }
}
