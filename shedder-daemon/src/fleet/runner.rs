//! The fleet's own task: every tick it reports this host's usage and takes
//! back its shares, within a deadline, so that nothing else ever waits on
//! Redis. Shares are handed to `apply` (which puts them in force) before a
//! smaller share is confirmed to Redis.

use std::{collections::BTreeMap, future::Future};

use tokio::{
    sync::watch,
    time::{Instant, MissedTickBehavior, sleep_until, timeout_at},
};
use tracing::{info, warn};

use super::{
    exchange::{Exchange, TenantUsage},
    leases::{FleetState, LeaseBook, Shares},
    settings::FleetSettings,
};

/// A host whose share lags its fair share asks again after this fraction of a tick.
const CATCH_UP_DIVISOR: u32 = 4;

/// A host lets go of a lease this fraction of a tick before Redis frees it:
/// room for a late timer, or a daemon busy when the local shares take over.
const LET_GO_EARLY_DIVISOR: u32 = 10;

/// What the host reports, kept current by whoever counts connections.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// Names the admitted counters: it changes exactly when they restart
    /// from zero. No whitespace.
    pub epoch: String,
    pub tenants: BTreeMap<String, TenantUsage>,
}

/// The fleet as this host sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetView {
    pub state: FleetState,
    pub shares: Shares,
    /// Per tenant, connections the whole fleet admitted, as of the last answer.
    pub fleet_admitted: BTreeMap<String, u64>,
    /// Reports answered since the task started.
    pub reports: u64,
}

impl FleetView {
    /// Before the first report: local shares.
    pub fn starting(settings: &FleetSettings) -> Self {
        let shares = settings.tenants.iter().map(|t| (t.name.clone(), t.local)).collect();
        Self { state: FleetState::Local, shares, fleet_admitted: BTreeMap::new(), reports: 0 }
    }
}

/// Runs until `view` has no receiver left.
pub async fn run<F, Fut>(
    settings: FleetSettings,
    usage: watch::Receiver<Usage>,
    view: watch::Sender<FleetView>,
    mut apply: F,
) where
    F: FnMut(Shares) -> Fut,
    Fut: Future<Output = ()>,
{
    let addr = format!("{}:{}", settings.host_addr, settings.port);
    let mut exchange = match Exchange::new(&settings, settings.tick) {
        Ok(exchange) => exchange,
        Err(e) => {
            warn!("fleet: {e}; local shares only");
            return;
        }
    };
    let mut book = LeaseBook::new(settings.tenants.clone(), settings.tick / LET_GO_EARLY_DIVISOR);
    let mut current = FleetView::starting(&settings);
    apply(current.shares.clone()).await;
    info!(host = settings.host, redis = addr, "fleet: local shares until Redis answers");
    let mut interval = tokio::time::interval(settings.tick);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_error = String::new();
    // Whether this outage's cause has been logged (reset by an answer).
    let mut cause_logged = false;
    while !view.is_closed() {
        let expiry = book.next_expiry(Instant::now());
        let lease_over = async {
            match expiry {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let report_due = tokio::select! {
            _ = interval.tick() => true,
            // A lease runs out between ticks: let go of it on time.
            _ = lease_over => false,
        };
        let mut ack_needed = false;
        if report_due {
            let sent = Instant::now();
            let (epoch, rows) = {
                let usage = usage.borrow();
                let rows: Vec<TenantUsage> =
                    settings.tenants.iter().map(|t| usage.tenants.get(&t.name).cloned().unwrap_or_default()).collect();
                (usage.epoch.clone(), rows)
            };
            let held = book.held(sent);
            // No answer past the tick, nor past the first lease's end.
            let deadline = book.next_expiry(sent).map_or(sent + settings.tick, |at| at.min(sent + settings.tick));
            match timeout_at(deadline, exchange.report(&settings, &epoch, &rows, &held)).await {
                Ok(Ok(grants)) => {
                    book.answered(&grants, sent);
                    cause_logged = false;
                    current.reports += 1;
                    ack_needed = grants.ack_needed;
                    if grants.short() {
                        // The rest of its share is freed as the others report
                        // (within a tick): catch it soon after.
                        interval.reset_after(settings.tick / CATCH_UP_DIVISOR);
                    }
                    for (tenant, grant) in settings.tenants.iter().zip(&grants.tenants) {
                        current.fleet_admitted.insert(tenant.name.clone(), grant.fleet_admitted);
                    }
                }
                Ok(Err(e)) => {
                    last_error = e.to_string();
                    fail(&mut book, &mut exchange);
                }
                Err(_) => {
                    last_error = "no answer within a tick".into();
                    fail(&mut book, &mut exchange);
                }
            }
        }
        let now = Instant::now();
        let shares = book.shares(now);
        if shares != current.shares {
            // Published first: `apply` may read them from the view.
            current.shares = shares.clone();
            view.send_replace(current.clone());
            apply(shares).await;
        }
        if ack_needed {
            match timeout_at(now + settings.tick, exchange.ack(&settings)).await {
                Ok(Ok(())) => {}
                // The smaller share stays applied; Redis keeps counting the
                // larger one until its lease ends: never too much handed out.
                Ok(Err(_)) | Err(_) => exchange.disconnect(),
            }
        }
        let state = book.state(now);
        if state != current.state {
            log_change(state, &settings.host, &addr, &last_error);
            cause_logged |= state != FleetState::Synced;
            current.state = state;
        } else if !cause_logged && state == FleetState::Local && !last_error.is_empty() {
            // Local from the start (a wrong address or password): say why, once.
            warn!(host = settings.host, redis = addr, error = last_error, "fleet: Redis does not answer; local shares");
            cause_logged = true;
        }
        view.send_replace(current.clone());
    }
}

fn fail(book: &mut LeaseBook, exchange: &mut Exchange) {
    book.unanswered();
    exchange.disconnect();
}

fn log_change(state: FleetState, host: &str, addr: &str, error: &str) {
    match state {
        FleetState::Synced => info!(host, redis = addr, "fleet: synced; shares from the fleet's quotas"),
        FleetState::Holding => {
            warn!(host, redis = addr, error, "fleet: Redis does not answer; holding the leases until they expire")
        }
        FleetState::Local => {
            warn!(host, redis = addr, error, "fleet: no lease holds; local shares until Redis answers")
        }
    }
}
