//! The `status` answer, shared by every request that was waiting for it.
//! Taking it (reading every per-CPU counter map, estimating and
//! serialising every class) is the dearest op; done once per request, 16
//! clients polling queue behind 16 of them. A snapshot taken after a request
//! arrived is as fresh as that request can ask for, so every request that
//! arrived before the last snapshot was taken gets that snapshot, and only
//! a request newer than it takes another. Nothing is taken while nobody
//! asks, and no answer is older than its request. The samples' totals,
//! cheap and moved by every `sample`, are read per request.

use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, Ipv6Addr},
    sync::{Arc, Mutex},
    time::Instant,
};

use shedder_common::{bucket::clock, classify::Mode, maps::Action};

use super::protocol::{
    ApiError, BackendStatus, ClassStatus, ErrorCode, EstimateSources, MapClass, MapTenant, MapsStatus, SamplesStatus,
    StatusReply, StatusSnapshot, TenantStatus, finite,
};
use crate::{
    config::{ActionName, Plan},
    daemon::Daemon,
    fastpath::FastpathError,
};

/// The last snapshot taken.
#[derive(Debug, Default)]
pub struct StatusCache {
    last: Mutex<Option<Taken>>,
}

/// A snapshot, serialised (or why it could not be taken), and when it was begun.
#[derive(Debug)]
struct Taken {
    begun: Instant,
    snapshot: Result<Arc<[u8]>, ApiError>,
}

impl StatusCache {
    /// The `status` answer to a request that arrived at `arrived`: the last
    /// snapshot if it was begun after that, else a new one.
    pub fn reply(&self, daemon: &Daemon, arrived: Instant) -> Result<StatusReply, ApiError> {
        let snapshot = self.shared(arrived, || snapshot(daemon))?;
        let inbox = daemon.control().inbox();
        let stats = inbox.stats();
        let samples = SamplesStatus {
            accepted: stats.accepted_samples,
            rejected_batches: stats.rejected_batches,
            pending: inbox.pending(),
        };
        Ok(StatusReply { samples, snapshot })
    }

    /// The last snapshot if it was begun after `arrived`, else one `take`n now.
    fn shared(
        &self,
        arrived: Instant,
        take: impl FnOnce() -> Result<StatusSnapshot, ApiError>,
    ) -> Result<Arc<[u8]>, ApiError> {
        let mut last = self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match &*last {
            Some(taken) if taken.begun >= arrived => taken.snapshot.clone(),
            _ => {
                let begun = Instant::now();
                let snapshot = take().map(|s| Arc::from(serde_json::to_vec(&s).expect("status serialises")));
                *last = Some(Taken { begun, snapshot: snapshot.clone() });
                snapshot
            }
        }
    }
}

fn internal(e: FastpathError) -> ApiError {
    ApiError::new(ErrorCode::Internal, e.to_string())
}

/// Everything `status` reports but the samples' totals.
pub fn snapshot(daemon: &Daemon) -> Result<StatusSnapshot, ApiError> {
    let control = daemon.control();
    let fastpath = control.fastpath();
    let config = daemon.config();
    let now = daemon.now();
    let slacks = control.controller().last_slacks();
    let wasted = control.admissions().refused();
    let milli = shedder_common::bucket::tokens;
    let classes = fastpath
        .class_snapshots()
        .map_err(internal)?
        .into_iter()
        .map(|s| {
            let spec = config.classes.iter().find(|c| c.name == s.name);
            let estimate = control.estimators().estimate(&s.name, now);
            ClassStatus {
                mode: spec.and_then(|c| c.mode).unwrap_or(config.mode),
                inherits_mode: spec.is_none_or(|c| c.mode.is_none()),
                action: spec.map(|c| c.action),
                rate: milli(s.bucket.rate_milli),
                burst: milli(s.bucket.burst_milli),
                cost: milli(s.bucket.cost_milli),
                tokens: milli(s.available_milli),
                controlled: control.controller().rate(&s.name).is_some(),
                counters: s.counters,
                slack: slacks.get(&s.name).map(|slack| serde_json::to_value(slack).expect("slack serialises")),
                queue_age_p95_ms: estimate.as_ref().and_then(|e| finite(e.queue_age.quantiles.p95)),
                service_p95_ms: estimate.as_ref().and_then(|e| finite(e.service.quantiles.p95)),
                estimate_source: estimate
                    .as_ref()
                    .map(|e| EstimateSources { queue_age: e.queue_age.source, service: e.service.source }),
                on_time_share: estimate.as_ref().and_then(|e| {
                    let done = e.completions.on_time + e.completions.late;
                    (done > 0).then(|| e.completions.on_time as f64 / done as f64)
                }),
                wasted_admissions: wasted.get(&s.name).copied().unwrap_or(0),
                name: s.name,
            }
        })
        .collect();
    let tenants = fastpath
        .tenant_snapshots()
        .map_err(internal)?
        .into_iter()
        .map(|s| {
            let spec = config.tenants.iter().find(|t| t.name == s.name);
            TenantStatus {
                share: spec.map(|t| t.rate),
                weight: spec.map(|t| t.weight),
                rate: milli(s.bucket.rate_milli),
                burst: milli(s.bucket.burst_milli),
                tokens: milli(s.available_milli),
                counters: s.counters,
                name: s.name,
            }
        })
        .collect();
    let passed: BTreeMap<String, u64> =
        fastpath.pass_counters().map_err(internal)?.into_iter().map(|(reason, n)| (reason.name().into(), n)).collect();
    Ok(StatusSnapshot {
        version: env!("CARGO_PKG_VERSION").into(),
        mode: config.mode,
        config_version: daemon.config_version(),
        estimator_version: control.estimators().version(),
        uptime_s: now.as_secs_f64(),
        iface: daemon.iface().map(str::to_string),
        attachment: daemon.attachment().map(|a| a.to_string()),
        attached: daemon.hook_problem().is_none(),
        hook_problem: daemon.hook_problem(),
        gpu: control.controller().last_gpu().map(|g| serde_json::to_value(g).expect("the GPU summary serialises")),
        backend: backend_status(control.controller()),
        classes,
        tenants,
        passed,
        maps: fastpath.placed().as_ref().map(maps_status),
    })
}

/// The capacity model, while some class is controlled.
fn backend_status(controller: &crate::control::Controller) -> Option<BackendStatus> {
    if controller.rates().is_empty() {
        return None;
    }
    let plan = controller.capacity_plan();
    let known = plan.known_capacity();
    Some(BackendStatus {
        capacity: known,
        source: plan.source.filter(|_| known.is_some()).map(|s| s.as_str().to_string()),
        effective: known.map(|_| plan.effective),
        busy: at_least_zero(plan.busy),
        demand: at_least_zero(plan.demand),
        backlogged: plan.backlogged,
    })
}

/// A sum over no class is −0.0 in Rust, which prints as `-0.00`.
fn at_least_zero(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}

fn mode_name(mode: u8) -> &'static str {
    match Mode::from_u8(mode) {
        Some(Mode::Off) => "off",
        Some(Mode::Observe) => "observe",
        Some(Mode::Enforce) => "enforce",
        None => "inherit",
    }
}

/// The config's word for a map's action value.
fn action_name(action: u8) -> &'static str {
    [ActionName::Drop, ActionName::Reject, ActionName::Mark]
        .into_iter()
        .find(|name| Action::from(*name) as u8 == action)
        .map_or("?", ActionName::word)
}

/// What the maps were last written with.
pub fn maps_status(plan: &Plan) -> MapsStatus {
    let v4 = |rules: &BTreeMap<(u32, [u8; 4]), u32>| {
        rules.iter().map(|((len, a), t)| (format!("{}/{len}", Ipv4Addr::from(*a)), *t)).collect()
    };
    let v6 = |rules: &BTreeMap<(u32, [u8; 16]), u32>| {
        rules.iter().map(|((len, a), t)| (format!("{}/{len}", Ipv6Addr::from(*a)), *t)).collect()
    };
    MapsStatus {
        mode: mode_name(plan.global.mode).into(),
        default_class: plan.global.default_class,
        rules_present: plan.global.rules_present,
        classes: plan
            .class_names
            .iter()
            .zip(&plan.classes)
            .map(|(name, c)| MapClass {
                name: name.clone(),
                rate_milli: c.bucket.rate_milli,
                burst_milli: c.bucket.burst_milli,
                cost_milli: c.bucket.cost_milli,
                mode: mode_name(c.mode).into(),
                action: action_name(c.action).into(),
                mark_dscp: c.mark_dscp,
            })
            .collect(),
        src_v4: v4(&plan.src_v4),
        src_v6: v6(&plan.src_v6),
        dst_ports: plan.dst_ports.iter().map(|(p, t)| (*p, *t)).collect(),
        dscp: plan.dscp.iter().map(|(d, t)| (*d, *t)).collect(),
        tenants: plan
            .tenant_names
            .iter()
            .zip(&plan.tenants)
            .map(|(name, b)| MapTenant {
                name: name.clone(),
                rate_milli: b.rate_milli,
                burst_milli: b.burst_milli,
                coarse_clock: b.clock == clock::COARSE,
            })
            .collect(),
        tenant_v4: v4(&plan.tenant_v4),
        tenant_v6: v6(&plan.tenant_v6),
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, time::Duration};

    use super::*;

    fn snapshot_at(uptime_s: f64) -> StatusSnapshot {
        serde_json::from_value(serde_json::json!({
            "version": "0.1.0", "mode": "observe", "config_version": 1, "estimator_version": 0, "uptime_s": uptime_s,
            "iface": "lo", "attachment": "xdp", "attached": true, "hook_problem": null, "gpu": null,
            "classes": [], "tenants": [], "passed": {}, "maps": null,
        }))
        .unwrap()
    }

    #[test]
    fn a_snapshot_serves_the_requests_that_arrived_before_it_was_taken_and_no_later_one() {
        let cache = StatusCache::default();
        let taken = Cell::new(0);
        let take = || {
            taken.set(taken.get() + 1);
            Ok(snapshot_at(taken.get() as f64))
        };
        let uptime = |line: Arc<[u8]>| serde_json::from_slice::<StatusSnapshot>(&line).unwrap().uptime_s;
        let waiting = Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(uptime(cache.shared(waiting, take).unwrap()), 1.0, "none yet: one is taken");
        assert_eq!(uptime(cache.shared(waiting, take).unwrap()), 1.0, "arrived before it: shared");
        let newer = Instant::now();
        assert_eq!(uptime(cache.shared(newer, take).unwrap()), 2.0, "arrived after it: a new one");
        assert_eq!(taken.get(), 2);

        let failed = StatusCache::default();
        let broken = || Err(ApiError::new(ErrorCode::Internal, "map read failed"));
        assert_eq!(failed.shared(Instant::now(), broken).unwrap_err().code, ErrorCode::Internal);
    }
}
