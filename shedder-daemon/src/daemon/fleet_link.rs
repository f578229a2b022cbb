//! The fleet's task and the channels it shares with the control loop (usage
//! in, shares out) and the daemon (its view).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use tokio::sync::watch;
use tracing::{info, warn};

use super::{Daemon, DaemonHandle};
use crate::{
    clock,
    fleet::{self, FleetSettings, FleetShares},
};

pub(super) struct FleetLink {
    settings: FleetSettings,
    usage: (watch::Sender<fleet::Usage>, watch::Receiver<fleet::Usage>),
    view: (watch::Sender<fleet::FleetView>, watch::Receiver<fleet::FleetView>),
}

impl FleetLink {
    pub fn new(settings: FleetSettings) -> Self {
        // The counts are reported from this run's start: a new epoch each run.
        let epoch = format!("{}-{}", std::process::id(), clock::monotonic_ns());
        let usage = watch::channel(fleet::Usage { epoch, ..fleet::Usage::default() });
        let view = watch::channel(fleet::FleetView::starting(&settings));
        Self { settings, usage, view }
    }

    /// Puts the tenants' shares under the fleet and starts its task; new
    /// shares are put in force at once, through the daemon, before the fleet
    /// confirms a smaller one. A failed write is said once, and once more
    /// when a later try succeeds.
    pub fn spawn(self, daemon: &mut Daemon, handle: DaemonHandle) {
        let shares = FleetShares::new(self.view.1.clone(), self.usage.0.clone());
        daemon.control_mut().set_tenant_shares(Box::new(shares));
        daemon.follow_fleet(self.view.1);
        let retake = handle.clone();
        let failing = Arc::new(AtomicBool::new(false));
        let apply = move |_shares| {
            let (handle, failing) = (handle.clone(), failing.clone());
            async move {
                match handle.call(|d| d.retake_tenant_shares()).await {
                    Ok(Ok(())) => {
                        if failing.swap(false, Ordering::Relaxed) {
                            info!("fleet: the tenants' shares are in force again");
                        }
                        true
                    }
                    Ok(Err(e)) => {
                        if !failing.swap(true, Ordering::Relaxed) {
                            warn!(
                                "fleet: applying the tenants' shares: {e:#}; a smaller share is not confirmed until it is in force"
                            );
                        }
                        false
                    }
                    // The daemon is stopping.
                    Err(_) => false,
                }
            }
        };
        let view = self.view.0.clone();
        let task = tokio::spawn(fleet::run(self.settings.clone(), self.usage.1, self.view.0, apply));
        tokio::spawn(async move {
            if fleet::runner::local_if_it_fails(task, view, &self.settings).await {
                let _ = retake.call(|d| d.retake_tenant_shares()).await;
            }
        });
    }
}
