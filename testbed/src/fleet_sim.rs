//! Hosts of a fleet in one process: each runs the daemon's fleet task
//! against a real Redis, and admits a fluid of connections, per tenant, at
//! min(demand, share), counted into one-second bins. What the fleet hands
//! out is then read as a user would: admitted connections per second.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use shedder_daemon::fleet::{self, FleetSettings, FleetSpec, FleetView, Shares, TenantUsage, Usage};
use tokio::{sync::watch, task::JoinHandle, time::Instant};

/// How often a host's counters and demand are handed to its fleet task.
const FEED_EVERY: Duration = Duration::from_millis(5);

/// Settings for one host of a test fleet.
pub fn settings(
    address: &str,
    host: &str,
    prefix: &str,
    (tick_ms, lease_ms): (u64, u64),
    quotas: &[(&str, f64)],
) -> FleetSettings {
    let quota: String = quotas.iter().map(|(name, q)| format!("{name} = {q}\n")).collect();
    let text = format!(
        "address = \"{address}\"\nhost = \"{host}\"\nprefix = \"{prefix}\"\ntick_ms = {tick_ms}\n\
         lease_ms = {lease_ms}\nlocal_share = 0.25\n[quota]\n{quota}"
    );
    let spec: FleetSpec = toml::from_str(&text).expect("a valid [fleet]");
    spec.settings().expect("valid fleet settings")
}

#[derive(Default)]
struct Flow {
    demand: f64,
    share: f64,
    /// Admitted in the counters' current epoch.
    admitted: f64,
    /// Admitted in each second since the host started.
    bins: Vec<f64>,
}

struct Fluid {
    start: Instant,
    last: Instant,
    epoch: u32,
    /// Demand steps set so far (told to the fleet task as they happen).
    steps: u64,
    /// New shares are refused, as by a map write that fails: the flows
    /// keep the shares last put in force.
    refuse_shares: bool,
    flows: BTreeMap<String, Flow>,
}

impl Fluid {
    /// Admits what flowed since the last call.
    fn advance(&mut self, now: Instant) {
        let (mut from, start) = (self.last, self.start);
        while from < now {
            let second = (from - start).as_secs();
            let edge = start + Duration::from_secs(second + 1);
            let to = edge.min(now);
            let dt = (to - from).as_secs_f64();
            for flow in self.flows.values_mut() {
                let n = flow.demand.min(flow.share) * dt;
                flow.admitted += n;
                if flow.bins.len() <= second as usize {
                    flow.bins.resize(second as usize + 1, 0.0);
                }
                flow.bins[second as usize] += n;
            }
            from = to;
        }
        self.last = now;
    }

    fn usage(&self, host: &str) -> Usage {
        let tenants = self
            .flows
            .iter()
            .map(|(name, f)| (name.clone(), TenantUsage { demand: f.demand, admitted: f.admitted as u64 }))
            .collect();
        Usage { epoch: format!("{host}-{}", self.epoch), tenants, steps: self.steps }
    }
}

pub struct SimHost {
    pub name: String,
    settings: FleetSettings,
    fluid: Arc<Mutex<Fluid>>,
    usage: watch::Sender<Usage>,
    view: watch::Receiver<FleetView>,
    /// Every view the fleet task published, in order.
    history: Arc<Mutex<Vec<(Instant, FleetView)>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimHost {
    /// Starts the host's fleet task and its feeder; `start` is second 0 of the bins.
    pub fn start(settings: FleetSettings, start: Instant) -> Self {
        let flows = settings.tenants.iter().map(|t| (t.name.clone(), Flow::default())).collect();
        let fluid = Arc::new(Mutex::new(Fluid {
            start,
            last: Instant::now(),
            epoch: 0,
            steps: 0,
            refuse_shares: false,
            flows,
        }));
        let (usage, _) = watch::channel(Usage::default());
        let (_, view) = watch::channel(FleetView::starting(&settings));
        let history = Arc::new(Mutex::new(vec![(Instant::now(), view.borrow().clone())]));
        let mut host = Self { name: settings.host.clone(), settings, fluid, usage, view, history, tasks: Vec::new() };
        host.spawn_runner();
        let (fluid, usage, name) = (host.fluid.clone(), host.usage.clone(), host.name.clone());
        host.tasks.push(tokio::spawn(async move {
            loop {
                {
                    let mut fluid = fluid.lock().unwrap();
                    fluid.advance(Instant::now());
                    usage.send_replace(fluid.usage(&name));
                }
                tokio::time::sleep(FEED_EVERY).await;
            }
        }));
        host
    }

    fn spawn_runner(&mut self) {
        let (view_tx, view) = watch::channel(FleetView::starting(&self.settings));
        self.view = view;
        let fluid = self.fluid.clone();
        let apply = move |shares: Shares| {
            let fluid = fluid.clone();
            async move {
                let mut fluid = fluid.lock().unwrap();
                fluid.advance(Instant::now());
                if fluid.refuse_shares {
                    return false;
                }
                for (name, share) in shares {
                    fluid.flows.get_mut(&name).expect("a configured tenant").share = share;
                }
                true
            }
        };
        let usage = self.usage.subscribe();
        let (mut watched, history) = (self.view.clone(), self.history.clone());
        let run = fleet::run(self.settings.clone(), usage, view_tx, apply);
        self.tasks.push(tokio::spawn(async move {
            let record = async move {
                while watched.changed().await.is_ok() {
                    let view = watched.borrow_and_update().clone();
                    history.lock().unwrap().push((Instant::now(), view));
                }
            };
            tokio::join!(run, record);
        }));
    }

    /// The states the fleet task went through, in order (one entry per change).
    pub fn states(&self) -> Vec<fleet::FleetState> {
        let mut states: Vec<fleet::FleetState> = Vec::new();
        for (_, view) in self.history.lock().unwrap().iter() {
            if states.last() != Some(&view.state) {
                states.push(view.state);
            }
        }
        states
    }

    /// Every view published so far, with when it was seen.
    pub fn history(&self) -> Vec<(Instant, FleetView)> {
        self.history.lock().unwrap().clone()
    }

    /// The daemon stops and starts again. With `counters_kept` its counters
    /// go on (pinned maps); without, they restart from zero in a new epoch.
    pub fn restart(&mut self, counters_kept: bool) {
        self.tasks.remove(0).abort();
        if !counters_kept {
            let mut fluid = self.fluid.lock().unwrap();
            fluid.advance(Instant::now());
            fluid.epoch += 1;
            for flow in fluid.flows.values_mut() {
                flow.admitted = 0.0;
            }
        }
        self.spawn_runner();
        // The runner goes first in `tasks`.
        let runner = self.tasks.pop().expect("just spawned");
        self.tasks.insert(0, runner);
    }

    pub fn set_demand(&self, tenant: &str, demand: f64) {
        let mut fluid = self.fluid.lock().unwrap();
        fluid.advance(Instant::now());
        fluid.flows.get_mut(tenant).expect("a configured tenant").demand = demand;
        fluid.steps += 1;
        self.usage.send_replace(fluid.usage(&self.name));
    }

    pub fn view(&self) -> FleetView {
        self.view.borrow().clone()
    }

    /// Waits for the fleet task's next published view.
    pub async fn next_view(&mut self) -> FleetView {
        let _ = self.view.changed().await;
        self.view.borrow_and_update().clone()
    }

    /// From now on new shares fail to be put in force (`true`), or succeed again.
    pub fn refuse_shares(&self, refuse: bool) {
        self.fluid.lock().unwrap().refuse_shares = refuse;
    }

    /// The share `tenant`'s connections are admitted at: the one last put in force.
    pub fn share_in_force(&self, tenant: &str) -> f64 {
        self.fluid.lock().unwrap().flows[tenant].share
    }

    /// Admitted per second so far, for `tenant`.
    pub fn bins(&self, tenant: &str) -> Vec<f64> {
        let mut fluid = self.fluid.lock().unwrap();
        fluid.advance(Instant::now());
        fluid.flows[tenant].bins.clone()
    }

    /// Admitted in the counters' current epoch, in whole connections as the
    /// counters hold them.
    pub fn admitted_in_epoch(&self, tenant: &str) -> u64 {
        let mut fluid = self.fluid.lock().unwrap();
        fluid.advance(Instant::now());
        fluid.flows[tenant].admitted as u64
    }
}

impl Drop for SimHost {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
