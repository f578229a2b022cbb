//! The running daemon: its state, owned by one task ([`run`] starts it on an
//! interface and serves it), and the [`DaemonHandle`] other tasks (the
//! control socket, the metrics endpoint) reach it by.

mod fleet_link;
mod handle;
mod run;
mod scrapers;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use tokio::sync::watch;

pub use handle::{DaemonGone, DaemonHandle, Job};
pub use run::{ControlOptions, Ending, RunOptions, Services, run, serve};

use crate::{
    clock::monotonic_ns,
    config::{Compiled, Config, ConfigError, ConfigFileError},
    control::Decision,
    control_loop::{ControlLoop, ControlLoopError},
    fastpath::{Attachment, Fastpath},
    fleet::FleetView,
    hook_watch::{HookChange, HookWatch},
    telemetry::{ClassObservations, gpu::GpuSource},
};

pub struct Daemon {
    control: ControlLoop,
    config: Config,
    /// Where `reload` reads from; `None` when running on the embedded default.
    config_path: Option<PathBuf>,
    /// Bumped by every accepted configuration change.
    config_version: u64,
    started: Instant,
    /// Where the fast path is attached; `None` for one attached nowhere (in memory).
    hook: Option<Hook>,
    /// What the fleet task last published, with `[fleet]`.
    fleet: Option<watch::Receiver<FleetView>>,
}

/// The interface and hook the fast path runs on, and the watch on them.
struct Hook {
    iface: String,
    attachment: Attachment,
    watch: HookWatch,
}

/// Why a configuration change was not made. Either way nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The new configuration does not validate.
    #[error("invalid config: {0}")]
    Invalid(#[from] ConfigError),
    /// The config file cannot be read or parsed; its message names the file.
    #[error(transparent)]
    Unreadable(#[from] ConfigFileError),
    /// There is nothing to do it with (e.g. `reload` without a config file).
    #[error("{0}")]
    Unavailable(String),
    /// Validated, but writing it failed (a map update the kernel refused);
    /// the running plan was written back.
    #[error("applying the config: {0}; the running config stays")]
    Apply(ControlLoopError),
}

impl Daemon {
    /// A daemon on `config`, compiled (`compiled`) into a fast path that
    /// already holds its plan.
    pub fn new(
        config: Config,
        config_path: Option<PathBuf>,
        compiled: Compiled,
        fastpath: Box<dyn Fastpath>,
        gpu: Box<dyn GpuSource>,
    ) -> Self {
        let control = ControlLoop::new(fastpath, compiled.plan, compiled.control, gpu);
        Self { control, config, config_path, config_version: 1, started: Instant::now(), hook: None, fleet: None }
    }

    /// The fast path runs on `iface`, hooked as `attachment`: watched from now on.
    pub fn attached(mut self, iface: &str, attachment: Attachment) -> Self {
        let watch = HookWatch::new(iface, attachment);
        self.hook = Some(Hook { iface: iface.to_string(), attachment, watch });
        self
    }

    /// The control loop, for wiring it up before the daemon runs.
    pub fn control_mut(&mut self) -> &mut ControlLoop {
        &mut self.control
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
    pub fn tick(&mut self) -> Result<Vec<Decision>, ControlLoopError> {
        self.control.tick(self.started.elapsed(), monotonic_ns())
    }

    /// The tenants' shares taken again now (the fleet's changed).
    pub fn retake_tenant_shares(&mut self) -> Result<(), ControlLoopError> {
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

    /// The interface the fast path is attached to; `None` in memory.
    pub fn iface(&self) -> Option<&str> {
        self.hook.as_ref().map(|hook| hook.iface.as_str())
    }

    /// How the fast path is hooked; `None` in memory.
    pub fn attachment(&self) -> Option<Attachment> {
        self.hook.as_ref().map(|hook| hook.attachment)
    }

    /// Looks whether the fast path is still on its interface.
    pub fn check_hook(&mut self) -> HookChange {
        match &mut self.hook {
            Some(hook) => hook.watch.check(self.control.fastpath()),
            None => HookChange::Unchanged,
        }
    }

    /// Why the fast path is not enforcing (interface gone, program detached);
    /// `None` while it is attached, as far as the last check saw.
    pub fn hook_problem(&self) -> Option<String> {
        self.hook.as_ref().and_then(|hook| hook.watch.state().problem(&hook.iface))
    }

    /// Validates `config` whole and switches to it; returns the new config
    /// version. A config that does not validate changes nothing, in the
    /// daemon or in the maps; one equal to the running config changes
    /// nothing either, the version included.
    pub fn replace_config(&mut self, config: Config) -> Result<u64, ChangeError> {
        if config.fleet != self.config.fleet {
            // The fleet task holds its connection and leases from the start.
            config.compile()?;
            return Err(ChangeError::Unavailable("[fleet] changes only with a restart; nothing changed".into()));
        }
        let (plan, control) = config.compile_change()?;
        if config == self.config {
            return Ok(self.config_version);
        }
        self.control.reconfigure(plan, control).map_err(ChangeError::Apply)?;
        self.config = config;
        self.config_version += 1;
        Ok(self.config_version)
    }

    /// Re-reads the config file the daemon was started with.
    pub fn reload(&mut self) -> Result<u64, ChangeError> {
        let path = self.config_path.clone().ok_or_else(|| {
            ChangeError::Unavailable("running on the embedded default config: nothing to reload".into())
        })?;
        self.replace_config(Config::from_file(&path)?)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };

    use shedder_common::maps::PassReason;

    use super::*;
    use crate::{
        config::Plan,
        fastpath::{ClassSnapshot, FastpathError, TenantSnapshot, memory::MemoryFastpath},
        telemetry::gpu::NoGpu,
    };

    /// A fast path whose next apply writes the plan and then reports a map
    /// the kernel refused: the worst a failed write can leave behind.
    struct RefusesOnce {
        maps: MemoryFastpath,
        refuse_next: Arc<AtomicBool>,
    }

    impl Fastpath for RefusesOnce {
        fn apply(&mut self, plan: &Plan) -> Result<(), FastpathError> {
            self.maps.apply(plan)?;
            match self.refuse_next.swap(false, Ordering::SeqCst) {
                true => Err(FastpathError::MissingMap("CLASSES")),
                false => Ok(()),
            }
        }
        fn class_snapshots(&self) -> Result<Vec<ClassSnapshot>, FastpathError> {
            self.maps.class_snapshots()
        }
        fn tenant_snapshots(&self) -> Result<Vec<TenantSnapshot>, FastpathError> {
            self.maps.tenant_snapshots()
        }
        fn pass_counters(&self) -> Result<Vec<(PassReason, u64)>, FastpathError> {
            self.maps.pass_counters()
        }
        fn write_heartbeat(&mut self, now_ns: u64) -> Result<(), FastpathError> {
            self.maps.write_heartbeat(now_ns)
        }
        fn heartbeat(&self) -> Result<u64, FastpathError> {
            self.maps.heartbeat()
        }
        fn placed(&self) -> Option<Plan> {
            self.maps.placed()
        }
        fn attached_to(&self, iface: &str, attachment: Attachment) -> Option<bool> {
            self.maps.attached_to(iface, attachment)
        }
    }

    const TWO_CLASSES: &str = r#"
        mode = "enforce"
        default_class = "default"
        [backend]
        workers = 8
        [[class]]
        name = "default"
        rate = 5000
        burst = 500
        action = "drop"
        [[class]]
        name = "ttft"
        burst = 50
        action = "reject"
        deadline_ms = 300
        tier = "critical"
        adaptive = { min_rate = 10, max_rate = 400 }
        prior = { service_p50_ms = 80, service_p95_ms = 150 }
        [[rule]]
        class = "ttft"
        dst_port = 8000
    "#;

    const A_THIRD_CLASS: &str = r#"
        [[class]]
        name = "batch"
        burst = 10
        action = "drop"
        deadline_ms = 30000
        tier = "sheddable"
        adaptive = { min_rate = 0, max_rate = 50 }
        [[rule]]
        class = "batch"
        dst_port = 8001
    "#;

    fn class_names(plan: &Plan) -> Vec<String> {
        plan.class_names.iter().filter(|name| !name.is_empty()).cloned().collect()
    }

    #[test]
    fn a_config_the_fast_path_refuses_changes_nothing_and_the_next_one_applies() {
        let config = Config::parse(TWO_CLASSES).unwrap();
        let compiled = config.compile().unwrap();
        let maps = MemoryFastpath::new();
        maps.clone().apply(&compiled.plan).unwrap();
        let refuse_next = Arc::new(AtomicBool::new(false));
        let fastpath = Box::new(RefusesOnce { maps: maps.clone(), refuse_next: refuse_next.clone() });
        let gpu = Box::new(NoGpu { reason: "in memory".into() });
        let mut daemon = Daemon::new(config.clone(), None, compiled, fastpath, gpu);
        let before = (daemon.control().plan().clone(), daemon.control().controller().policies().clone());

        // A third class, and a new deadline for the one that stays.
        let wider = TWO_CLASSES.replace("deadline_ms = 300", "deadline_ms = 500") + A_THIRD_CLASS;
        let wider = Config::parse(&wider).unwrap();
        refuse_next.store(true, Ordering::SeqCst);
        let error = daemon.replace_config(wider.clone()).unwrap_err();

        assert!(matches!(error, ChangeError::Apply(_)), "{error:?}");
        assert!(error.to_string().ends_with("the running config stays"), "{error}");
        assert_eq!(daemon.config_version(), 1);
        assert_eq!(daemon.config(), &config);
        assert_eq!((daemon.control().plan(), daemon.control().controller().policies()), (&before.0, &before.1));
        let estimated = daemon.control().estimators().estimate_all(daemon.now());
        assert_eq!(estimated.keys().collect::<Vec<_>>(), ["default", "ttft"]);
        let held = maps.placed().expect("the maps hold a plan");
        assert_eq!(class_names(&held), ["default", "ttft"], "the maps went back to the running plan");

        assert_eq!(daemon.replace_config(wider).unwrap(), 2);
        assert_eq!(class_names(&maps.placed().unwrap()), ["default", "ttft", "batch"]);
        assert!(daemon.control().controller().policies().contains_key("batch"));
    }

    #[test]
    fn a_bad_config_file_is_named_once_and_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("shedder-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shedder.toml");
        std::fs::write(&path, "mode = ").unwrap();
        let config = Config::parse(crate::config::EMBEDDED_DEFAULT).unwrap();
        let compiled = config.compile().unwrap();
        let gpu = Box::new(NoGpu { reason: "in memory".into() });
        let mut daemon = Daemon::new(config, Some(path.clone()), compiled, Box::new(MemoryFastpath::new()), gpu);

        let error = daemon.reload().unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(error, ChangeError::Unreadable(ConfigFileError::Syntax { .. })), "{error:?}");
        let message = error.to_string();
        assert_eq!(message.matches(&path.display().to_string()).count(), 1, "{message}");
        assert_eq!(message.matches("invalid config").count(), 1, "{message}");
        assert_eq!(daemon.config_version(), 1);
    }
    #[test]
    fn a_change_does_not_read_the_fleets_files_again_and_a_fleet_change_is_refused() {
        let dir = std::env::temp_dir().join(format!("shedder-fleet-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("password");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let fleet = format!(
            "[[tenant]]\nname = \"acme\"\ncidrs = [\"10.1.0.0/16\"]\nrate = 50\nburst = 20\n\
             [fleet]\naddress = \"127.0.0.1:6379\"\nhost = \"h1\"\nlocal_share = 0.5\npassword_file = {:?}\n\
             [fleet.quota]\nacme = 100\n",
            secret.display().to_string()
        );
        let config = Config::parse(&format!("{TWO_CLASSES}\n{fleet}")).unwrap();
        let compiled = config.compile().unwrap();
        let gpu = Box::new(NoGpu { reason: "in memory".into() });
        let mut daemon = Daemon::new(config, None, compiled, Box::new(MemoryFastpath::new()), gpu);
        // The secret is being rotated: gone from disk for a moment.
        std::fs::remove_file(&secret).unwrap();

        let changed = TWO_CLASSES.replace("deadline_ms = 300", "deadline_ms = 500");
        let changed = Config::parse(&format!("{changed}\n{fleet}")).unwrap();
        assert_eq!(daemon.replace_config(changed).unwrap(), 2, "the change applies");
        let no_tenant = Config::parse(&format!("{TWO_CLASSES}\n{}", &fleet[fleet.find("[fleet]").unwrap()..])).unwrap();
        let error = daemon.replace_config(no_tenant).unwrap_err();
        assert!(error.to_string().contains("fleet.quota.acme"), "{error}");
        let moved = Config::parse(&format!("{TWO_CLASSES}\n{}", fleet.replace("h1", "h2"))).unwrap();
        let error = daemon.replace_config(moved).unwrap_err();
        assert!(error.to_string().contains("fleet.password_file"), "a new [fleet] is read whole: {error}");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let moved = Config::parse(&format!("{TWO_CLASSES}\n{}", fleet.replace("h1", "h2"))).unwrap();
        let error = daemon.replace_config(moved).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(error.to_string().contains("only with a restart"), "{error}");
        assert_eq!(daemon.config_version(), 2);
    }
}
