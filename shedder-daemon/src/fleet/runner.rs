//! The fleet's own task: every tick it reports this host's usage and takes
//! back its shares, within a deadline, so that nothing else ever waits on
//! Redis. Shares are handed to `apply` (which puts them in force) before a
//! smaller share is confirmed to Redis, and a smaller share `apply` could
//! not put in force is never confirmed: it is tried again every wake.

use std::{collections::BTreeMap, future::Future};

use tokio::{
    sync::watch,
    task::JoinHandle,
    time::{Instant, MissedTickBehavior, sleep_until, timeout_at},
};
use tracing::{error, info, warn};

use super::{
    exchange::{Exchange, TenantUsage},
    leases::{FleetState, LeaseBook, Shares},
    nudge,
    settings::FleetSettings,
};

/// A host whose share lags its fair share asks again after this fraction of a tick.
const CATCH_UP_DIVISOR: u32 = 4;

/// A nudge or a demand step brings a report forward, to no sooner than this
/// fraction of a tick after the last one: soon enough that a host waiting
/// on this one's shrink has it at its next re-ask, and a bound on what a
/// storm of nudges can cost Redis.
const EARLY_DIVISOR: u32 = 10;

/// A host lets go of a lease this fraction of a tick before Redis frees it:
/// room for a late timer, or a daemon busy when the local shares take over
/// (a tenth was not room enough on a loaded 2-core machine: a host cut off
/// from Redis let go after another host had been granted its share).
const LET_GO_EARLY_DIVISOR: u32 = 4;

/// What the host reports, kept current by whoever counts connections.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// Names the admitted counters: it changes exactly when they restart
    /// from zero. No whitespace.
    pub epoch: String,
    pub tenants: BTreeMap<String, TenantUsage>,
    /// Counts the steps in some tenant's demand (a change told apart from
    /// chance): the host reports as soon as it changes, not at its next
    /// tick, so the fleet learns of a fall (and frees its share) at once.
    pub steps: u64,
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
    /// Nudges received: another host was owed part of this host's share,
    /// or gave back part of one this host is owed.
    pub nudged: u64,
}

impl FleetView {
    /// Before the first report: local shares.
    pub fn starting(settings: &FleetSettings) -> Self {
        let shares = settings.tenants.iter().map(|t| (t.name.clone(), t.local)).collect();
        Self { state: FleetState::Local, shares, fleet_admitted: BTreeMap::new(), reports: 0, nudged: 0 }
    }
}

/// Runs until `view` has no receiver left. `apply` answers whether the
/// shares are in force.
pub async fn run<F, Fut>(
    settings: FleetSettings,
    mut usage: watch::Receiver<Usage>,
    view: watch::Sender<FleetView>,
    mut apply: F,
) where
    F: FnMut(Shares) -> Fut,
    Fut: Future<Output = bool>,
{
    let addr = format!("{}:{}", settings.host_addr, settings.port);
    let mut exchange = match Exchange::new(&settings, settings.tick) {
        Ok(exchange) => exchange,
        Err(e) => {
            warn!("fleet: {e}; local shares only");
            return;
        }
    };
    let channel = nudge::channel(&settings.prefix, &settings.host);
    let mut nudges = nudge::listen(exchange.client(), channel, settings.tick, settings.lease);
    let mut book = LeaseBook::new(settings.tenants.clone(), settings.tick / LET_GO_EARLY_DIVISOR);
    let mut current = FleetView::starting(&settings);
    let mut in_force = apply(current.shares.clone()).await;
    info!(host = settings.host, redis = addr, "fleet: local shares until Redis answers");
    let mut interval = tokio::time::interval(settings.tick);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_error = String::new();
    // Whether this outage's cause has been logged (reset by an answer).
    let mut cause_logged = false;
    // When the last report went, the demand steps it told of, and when a
    // nudge or a step asks for the next one.
    let mut last_sent: Option<Instant> = None;
    let mut steps_reported = usage.borrow().steps;
    let mut early_at: Option<Instant> = None;
    // The last answer gave a smaller share, which is confirmed to Redis
    // once it is in force; until then Redis goes on counting the larger one
    // (never too much handed out), and each report asks again.
    let mut ack_needed = false;
    while !view.is_closed() {
        let expiry = book.next_expiry(Instant::now());
        let wake = tokio::select! {
            _ = interval.tick() => Wake::Tick,
            _ = sleep_until_some(early_at) => Wake::Early,
            // A lease runs out between ticks: let go of it on time.
            _ = sleep_until_some(expiry) => Wake::LeaseOver,
            Some(()) = nudges.recv() => {
                early_at = Some(early(early_at, last_sent, settings.tick));
                current.nudged += 1;
                continue;
            }
            Ok(()) = usage.changed() => {
                if usage.borrow_and_update().steps != steps_reported {
                    early_at = Some(early(early_at, last_sent, settings.tick));
                }
                continue;
            }
        };
        if wake != Wake::LeaseOver {
            let sent = Instant::now();
            last_sent = Some(sent);
            early_at = None;
            if wake == Wake::Early {
                // An early report stands for the tick's: the next is a tick later.
                interval.reset();
            }
            let (epoch, rows) = {
                let usage = usage.borrow_and_update();
                steps_reported = usage.steps;
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
        if shares != current.shares || !in_force {
            // Published first: `apply` may read them from the view.
            current.shares = shares.clone();
            view.send_replace(current.clone());
            in_force = apply(shares).await;
        }
        if ack_needed && in_force {
            ack_needed = false;
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

/// Waits for the fleet's task to end. One that failed (panicked) left its
/// last view behind, leases that Redis lets run out and hands to other
/// hosts: the view falls back to the local shares for good, and the answer
/// is true (the caller puts them in force).
pub async fn local_if_it_fails(task: JoinHandle<()>, view: watch::Sender<FleetView>, settings: &FleetSettings) -> bool {
    match task.await {
        Err(e) if e.is_panic() => {
            error!(
                host = settings.host,
                "fleet: the fleet task failed; local shares until the daemon restarts (see the panic above)"
            );
            let local = FleetView::starting(settings);
            view.send_modify(|view| {
                view.state = FleetState::Local;
                view.shares = local.shares;
            });
            true
        }
        _ => false,
    }
}

/// Why the task woke.
#[derive(Clone, Copy, PartialEq)]
enum Wake {
    Tick,
    /// A nudge (another host is owed part of this host's share) or a step
    /// in demand brought the report forward.
    Early,
    LeaseOver,
}

/// When to report after a nudge or a demand step: at once, but at the
/// early pace after the last report, and no later than an early report
/// already due.
fn early(due: Option<Instant>, last_sent: Option<Instant>, tick: std::time::Duration) -> Instant {
    let now = Instant::now();
    let paced = last_sent.map_or(now, |sent| (sent + tick / EARLY_DIVISOR).max(now));
    due.map_or(paced, |at| at.min(paced))
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::FleetSpec;

    #[tokio::test]
    async fn a_failed_task_leaves_local_shares_not_its_last_leases() {
        let spec: FleetSpec =
            toml::from_str("address = \"127.0.0.1:6379\"\nhost = \"web-1\"\nlocal_share = 0.25\n[quota]\nchat = 400\n")
                .unwrap();
        let settings = spec.settings().unwrap();
        let synced = FleetView {
            state: FleetState::Synced,
            shares: [("chat".to_string(), 300.0)].into(),
            fleet_admitted: Default::default(),
            reports: 7,
            nudged: 0,
        };
        // (ended, failed): only a failure changes the view.
        for (ended, failed) in [(tokio::spawn(async {}), false), (tokio::spawn(async { panic!("a bug") }), true)] {
            let (view, watched) = watch::channel(synced.clone());
            assert_eq!(local_if_it_fails(ended, view, &settings).await, failed);
            let seen = watched.borrow().clone();
            if failed {
                assert_eq!(seen.state, FleetState::Local);
                assert_eq!(seen.shares["chat"], 100.0, "the local share, a quarter of the quota");
                assert_eq!(seen.reports, 7, "the counts stay");
            } else {
                assert_eq!(seen, synced);
            }
        }
    }
}
