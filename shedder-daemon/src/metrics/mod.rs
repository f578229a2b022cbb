//! Prometheus metrics: what the fast path counted and what the control plane
//! saw, served on `GET /metrics` (default 127.0.0.1:9464).
//!
//! Labels are bounded by configuration: a class name, a pass reason, an
//! admission verdict. Job ids never become labels; jobs become distributions.
//!
//! * [`distributions::Distributions`] are fed as observations arrive (pushed or scraped) and
//!   as job-level admissions are answered.
//! * Everything else (map counters, budgets, GPU gauges, versions) is read
//!   when scraped, by a job on the daemon's owner task ([`crate::daemon`]),
//!   so a scrape sees one consistent moment.
//!
//! The endpoint holds at most [`MAX_CONNECTIONS`] connections (more are
//! closed at once), gives a client [`HEADER_TIMEOUT`] to send its request
//! and keeps a connection at most [`CONNECTION_LIFETIME`]: idle or slow
//! clients cannot use up the daemon's file descriptors.

use std::collections::BTreeMap;
use std::{net::SocketAddr, sync::Arc, time::Duration};

use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Bytes, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use shedder_common::bucket;
use std::sync::atomic::AtomicU64;
use tokio::sync::Semaphore;
use tracing::debug;

mod counted_histogram;
pub mod distributions;

use distributions::{ClassLabel, OutcomeLabel};

use crate::{
    daemon::{Daemon, DaemonHandle},
    fastpath::FastpathError,
    fleet::{FleetState, FleetView},
    listen::AcceptErrors,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantOutcomeLabel {
    tenant: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabel {
    target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MissingLabel {
    target: String,
    family: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

fn float_gauge() -> Gauge<f64, AtomicU64> {
    Gauge::default()
}

/// The capacity model, wasted admissions and the sanity guard. Their
/// counters are served for every class in `classes` from 0, as the
/// completions are ([`distributions::Distributions::serve_from_zero`]).
fn register_model(registry: &mut Registry, control: &crate::control_loop::ControlLoop, classes: &[String]) {
    let counter_family = |counts: BTreeMap<String, u64>| {
        let family = Family::<ClassLabel, Counter>::default();
        for class in classes {
            family.get_or_create(&ClassLabel { class: class.clone() }).inc_by(0);
        }
        for (class, n) in counts {
            family.get_or_create(&ClassLabel { class }).inc_by(n);
        }
        family
    };
    registry.register(
        "shedder_wasted_admissions",
        "Jobs admitted by the fast path, then refused by the admit op: refusals the NIC could have made",
        counter_family(control.admissions().refused()),
    );
    let mut guard = control.admissions().guarded();
    for (class, n) in control.controller().guard_trips() {
        *guard.entry(class.clone()).or_default() += n;
    }
    registry.register(
        "shedder_sanity_guard",
        "Refusals the sanity guard stopped because the backend was idle (ticks of budgets, admit answers)",
        counter_family(guard),
    );
    let plan = control.controller().capacity_plan();
    let (capacity, effective) = (float_gauge(), float_gauge());
    // Unknown is NaN, as the GPU gauges are without NVML.
    let known = plan.known_capacity();
    capacity.set(known.unwrap_or(f64::NAN));
    effective.set(known.map_or(f64::NAN, |_| plan.effective));
    registry.register("shedder_capacity_worker_seconds", "The backend's capacity, worker-seconds per second", capacity);
    registry.register(
        "shedder_capacity_effective_worker_seconds",
        "Capacity left for admission after the law's cuts, worker-seconds per second",
        effective,
    );
}

/// With `[fleet]`: where this host's tenant shares come from, the shares,
/// and what the whole fleet admitted.
fn register_fleet(registry: &mut Registry, view: &FleetView) {
    let state = Family::<StateLabel, Gauge>::default();
    for s in FleetState::ALL {
        state.get_or_create(&StateLabel { state: s.name() }).set(i64::from(s == view.state));
    }
    registry.register(
        "shedder_fleet_state",
        "1 for the fleet state this host is in: synced (shares from Redis), holding (Redis silent, leases last), \
         local (no lease: local shares)",
        state,
    );
    let share = Family::<TenantLabel, Gauge<f64, AtomicU64>>::default();
    for (tenant, rate) in &view.shares {
        share.get_or_create(&TenantLabel { tenant: tenant.clone() }).set(*rate);
    }
    registry.register("shedder_fleet_share", "This host's share of each tenant's fleet quota, connections/s", share);
    let admitted = Family::<TenantLabel, Gauge>::default();
    for (tenant, n) in &view.fleet_admitted {
        admitted.get_or_create(&TenantLabel { tenant: tenant.clone() }).set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    registry.register(
        "shedder_fleet_admitted_connections",
        "Connections the whole fleet admitted for each tenant, as Redis counted them at the last report",
        admitted,
    );
    let (reports, nudges) = (Counter::<u64>::default(), Counter::<u64>::default());
    reports.inc_by(view.reports);
    nudges.inc_by(view.nudged);
    registry.register("shedder_fleet_reports", "Reports Redis answered", reports);
    registry.register(
        "shedder_fleet_nudges",
        "Nudges from other hosts, each answered with a report at once: one was owed part of this host's share, \
         or gave back part of one this host is owed",
        nudges,
    );
}

/// Why `/metrics` could not be rendered or its endpoint bound.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Reading the fast path's counters (the error names the map).
    #[error(transparent)]
    Fastpath(#[from] FastpathError),
    #[error("encoding metrics: {0}")]
    Encode(#[from] std::fmt::Error),
    #[error("binding the metrics endpoint {addr}: {error}")]
    Bind { addr: SocketAddr, error: std::io::Error },
}

/// The whole exposition, read from the daemon at one moment.
pub fn render(daemon: &Daemon) -> Result<String, MetricsError> {
    let control = daemon.control();
    let snapshots = control.fastpath().class_snapshots()?;
    let classes: Vec<String> = snapshots.iter().map(|s| s.name.clone()).collect();
    let mut registry = Registry::default();
    control.distributions().serve_from_zero(&classes);
    control.distributions().register(&mut registry);

    let outcomes = Family::<OutcomeLabel, Counter>::default();
    let seen = Family::<ClassLabel, Counter>::default();
    let resent = Family::<ClassLabel, Counter>::default();
    let rate = Family::<ClassLabel, Gauge<f64, AtomicU64>>::default();
    let tokens = Family::<ClassLabel, Gauge<f64, AtomicU64>>::default();
    let slack = Family::<ClassLabel, Gauge<f64, AtomicU64>>::default();
    for snapshot in &snapshots {
        let class = ClassLabel { class: snapshot.name.clone() };
        let c = snapshot.counters;
        seen.get_or_create(&class).inc_by(c.seen);
        resent.get_or_create(&class).inc_by(c.resent);
        for (outcome, n) in [
            ("admitted", c.admitted),
            ("dropped", c.dropped),
            ("rejected", c.rejected),
            ("marked", c.marked),
            ("would_shed", c.would_shed),
        ] {
            outcomes.get_or_create(&OutcomeLabel { class: snapshot.name.clone(), outcome }).inc_by(n);
        }
        rate.get_or_create(&class).set(bucket::tokens(snapshot.bucket.rate_milli));
        tokens.get_or_create(&class).set(bucket::tokens(snapshot.available_milli));
        if let Some(s) = control.controller().last_slacks().get(&snapshot.name) {
            slack.get_or_create(&class).set(s.slack_ms / 1000.0);
        }
    }
    registry.register("shedder_syns_seen", "New connections (bare SYNs) classified into each class", seen);
    registry.register(
        "shedder_syns_resent",
        "Of the SYNs seen, those the fast path had dropped before and the client sent again",
        resent,
    );
    registry.register("shedder_syns", "New connections by class and outcome, from the fast path's counters", outcomes);
    registry.register("shedder_budget_rate", "Each class's budget: new connections (tokens) per second", rate);
    registry.register("shedder_budget_tokens", "Tokens left in each class's bucket", tokens);
    registry.register("shedder_slack_seconds", "Deadline slack per controlled class at the last tick", slack);
    register_model(&mut registry, control, &classes);
    register_tenants(&mut registry, control)?;

    let passed = Family::<ReasonLabel, Counter>::default();
    for (reason, n) in control.fastpath().pass_counters()? {
        passed.get_or_create(&ReasonLabel { reason: reason.name() }).inc_by(n);
    }
    registry.register("shedder_packets_uncharged", "Packets passed without being charged, by reason", passed);

    let gpu = control.controller().last_gpu();
    let (util, memory) = (float_gauge(), float_gauge());
    if let Some(g) = gpu {
        util.set(g.max_utilization_pct.map_or(f64::NAN, |u| u as f64 / 100.0));
        memory.set(g.max_memory_fraction.unwrap_or(f64::NAN));
    } else {
        util.set(f64::NAN);
        memory.set(f64::NAN);
    }
    registry.register("shedder_gpu_utilization_ratio", "Busiest GPU's utilisation, 0..1 (NaN without NVML)", util);
    registry.register("shedder_gpu_memory_used_ratio", "Fullest GPU's memory used, 0..1 (NaN without NVML)", memory);

    let up = Family::<TargetLabel, Gauge>::default();
    for (target, answered) in crate::telemetry::scrape::targets_up() {
        up.get_or_create(&TargetLabel { target }).set(i64::from(answered));
    }
    registry.register(
        "shedder_scrape_up",
        "Whether a scraped server's latest scrape was fetched and parsed (1) or not (0)",
        up,
    );

    let missing = Family::<MissingLabel, Gauge>::default();
    for (target, family) in crate::telemetry::scrape::missing_families() {
        missing.get_or_create(&MissingLabel { target, family }).set(1);
    }
    registry.register(
        "shedder_scrape_missing",
        "Metric families a scraped target should expose and lacks (1 per family)",
        missing,
    );

    let (estimator, config) = (Gauge::<i64>::default(), Gauge::<i64>::default());
    estimator.set(control.estimators().version() as i64);
    config.set(daemon.config_version() as i64);
    registry.register("shedder_estimator_version", "Version of the estimators' parameters", estimator);
    registry.register("shedder_config_version", "Version of the configuration in force", config);

    if let Some(view) = daemon.fleet() {
        register_fleet(&mut registry, &view);
    }

    let attached = Gauge::<i64>::default();
    attached.set(i64::from(daemon.hook_problem().is_none()));
    registry.register(
        "shedder_attached",
        "1 while the fast path is on its interface; 0 once the interface is gone or the program detached",
        attached,
    );

    let mut text = String::new();
    encode(&mut text, &registry)?;
    Ok(text)
}

/// Each tenant's counters and bucket.
fn register_tenants(registry: &mut Registry, control: &crate::control_loop::ControlLoop) -> Result<(), MetricsError> {
    let outcomes = Family::<TenantOutcomeLabel, Counter>::default();
    let resent = Family::<TenantLabel, Counter>::default();
    let (rate, burst) = (
        Family::<TenantLabel, Gauge<f64, AtomicU64>>::default(),
        Family::<TenantLabel, Gauge<f64, AtomicU64>>::default(),
    );
    for snapshot in control.fastpath().tenant_snapshots()? {
        let c = snapshot.counters;
        for (outcome, n) in [("admitted", c.admitted), ("over_tenant", c.over_tenant), ("over_class", c.over_class)] {
            outcomes.get_or_create(&TenantOutcomeLabel { tenant: snapshot.name.clone(), outcome }).inc_by(n);
        }
        let tenant = TenantLabel { tenant: snapshot.name.clone() };
        resent.get_or_create(&tenant).inc_by(c.resent);
        rate.get_or_create(&tenant).set(bucket::tokens(snapshot.bucket.rate_milli));
        burst.get_or_create(&tenant).set(bucket::tokens(snapshot.bucket.burst_milli));
    }
    registry.register(
        "shedder_tenant_syns",
        "Charged new connections by tenant and outcome: admitted, refused by the tenant's bucket (over_tenant), \
         or by its class's (over_class)",
        outcomes,
    );
    registry.register(
        "shedder_tenant_syns_resent",
        "Of each tenant's charged new connections, the SYNs the fast path had dropped before, sent again",
        resent,
    );
    registry.register(
        "shedder_tenant_rate",
        "Each tenant's bucket rate now, with lending: connections per second",
        rate,
    );
    registry.register("shedder_tenant_burst", "Each tenant's bucket depth, connections", burst);
    Ok(())
}

/// Connections served at once: a scraper or two, and people with curl.
pub const MAX_CONNECTIONS: usize = 64;
/// A client must have sent its request's headers this soon after it
/// connected, or after its last answer on a kept-alive connection.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed this long after it was accepted, idle or not.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Serves `GET /metrics` on `listener` until the daemon goes away.
pub async fn serve(listener: tokio::net::TcpListener, daemon: DaemonHandle) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut errors = AcceptErrors::new("metrics");
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                errors.failed(&e).await;
                continue;
            }
        };
        errors.succeeded();
        // Full: closing it at once frees its descriptor for the next.
        let Ok(permit) = slots.clone().try_acquire_owned() else { continue };
        let daemon = daemon.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let daemon = daemon.clone();
                async move { Ok::<_, std::convert::Infallible>(respond(&daemon, &request).await) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            // Past its lifetime a connection is just dropped.
            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_LIFETIME, connection).await {
                debug!("metrics: connection: {e}");
            }
        });
    }
}

async fn respond<B>(daemon: &DaemonHandle, request: &Request<B>) -> Response<Full<Bytes>> {
    let reply = |status, content_type, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
    };
    if request.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "text/plain", "try /metrics\n".into());
    }
    if request.method() != hyper::Method::GET {
        let mut response = reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "only GET serves /metrics\n".into());
        response.headers_mut().insert(hyper::header::ALLOW, hyper::header::HeaderValue::from_static("GET"));
        return response;
    }
    match daemon.call(|d| render(d)).await {
        Ok(Ok(text)) => reply(StatusCode::OK, "application/openmetrics-text; version=1.0.0; charset=utf-8", text),
        Ok(Err(e)) => reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("{e}\n")),
        Err(gone) => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("{gone}\n")),
    }
}

/// Binds the metrics endpoint (fails early on a bad or busy address).
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, MetricsError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|error| MetricsError::Bind { addr, error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_state_is_one_labelled_gauge_set_for_the_state_in_force() {
        for state in FleetState::ALL {
            let view = FleetView {
                state,
                shares: [("chat".to_string(), 250.0)].into(),
                fleet_admitted: [("chat".to_string(), 1234)].into(),
                reports: 7,
                nudged: 2,
            };
            let mut registry = Registry::default();
            register_fleet(&mut registry, &view);
            let mut text = String::new();
            encode(&mut text, &registry).unwrap();
            for other in FleetState::ALL {
                let line = format!("shedder_fleet_state{{state=\"{}\"}} {}", other.name(), i64::from(other == state));
                assert!(text.contains(&line), "{line} not in:\n{text}");
            }
            assert!(text.contains("shedder_fleet_share{tenant=\"chat\"} 250.0"), "{text}");
            assert!(text.contains("shedder_fleet_admitted_connections{tenant=\"chat\"} 1234"), "{text}");
            assert!(text.contains("shedder_fleet_reports_total 7"), "{text}");
            assert!(text.contains("shedder_fleet_nudges_total 2"), "{text}");
        }
    }
}
