//! An adaptive class's budget: the jobs/s the fast path lets in, from the
//! class's allotment of the shared capacity, with the headroom that keeps
//! the queue fed, a floor raised while the budget starves free workers, and
//! the sanity guard that never refuses an idle backend's work.
//!
//! Policy only: the allotment itself is [`super::allocate`]'s, the headroom
//! for a trimmed queue [`super::feed`]'s, and whether the backend had free
//! workers [`super::starts`]'.

use std::collections::BTreeMap;

use super::feed;
use super::params::{ClassPolicy, ControlParams};
use super::reserve::Reserve;
use super::slack::Slack;
use super::starts::{Backend, StartLog};

/// A starved budget rises by this factor...
const PROBE_STEP: f64 = 1.25;
/// ...every this many seconds it starves: by time, not by tick, so a longer
/// `tick_ms` does not slow it (9.3× a second) nor a shorter one hurry it.
const PROBE_STEP_S: f64 = 0.1;

/// What the tick found that every class's budget is set from.
pub(super) struct TickFacts<'a> {
    pub params: &'a ControlParams,
    /// Connections/s per class, as [`super::TickInputs`] has them.
    pub offered: &'a BTreeMap<String, f64>,
    pub admitted: &'a BTreeMap<String, f64>,
    pub wasted: &'a BTreeMap<String, f64>,
    pub trimmed: &'a BTreeMap<String, f64>,
    pub starts: &'a StartLog,
    /// Worker-seconds/s: the backend's, the law's, the work offered, and
    /// what admission may use.
    pub capacity: f64,
    pub effective: f64,
    pub demand: f64,
    pub admission: f64,
    pub backlogged: bool,
    /// Demand exceeds what admission may use, with overload in evidence.
    pub binding: bool,
    /// The budgets' headroom over what an allotment finishes.
    pub headroom: f64,
    /// Seconds since the last tick.
    pub dt_s: f64,
}

/// One class as its budget sees it.
pub(super) struct ClassFacts<'a> {
    pub name: &'a str,
    pub policy: &'a ClassPolicy,
    pub slack: &'a Slack,
    /// Its allotment, worker-seconds/s.
    pub share: f64,
    /// Of it, what the other classes' bursts of chance would have taken.
    pub beyond_chance: f64,
    pub reserve: Option<Reserve>,
    /// The sanity guard's test found the backend idle.
    pub idle: bool,
    /// Its demand, worker-seconds/s, and its budget as published, jobs/s.
    pub demand: f64,
    pub published: f64,
}

/// What the budget came to.
pub(super) struct Target {
    /// Jobs/s, not yet clamped to the class's bounds.
    pub rate: f64,
    /// Why, in words, one clause each.
    pub words: Vec<String>,
    /// The sanity guard kept the class open.
    pub guarded: bool,
}

/// A class's rate in a per-class map of rates; 0 where it is left out.
pub(super) fn rate_of(rates: &BTreeMap<String, f64>, name: &str) -> f64 {
    rates.get(name).copied().unwrap_or(0.0)
}

/// The budget of an adaptive class whose most is `max_rate`; updates the
/// class's starved-backend floor, `probe` (jobs/s, 0 for none).
pub(super) fn adaptive(tick: &TickFacts, class: &ClassFacts, probe: &mut f64, max_rate: f64) -> Target {
    let TickFacts { capacity, effective, demand, admission, backlogged, binding, .. } = *tick;
    let (name, policy, s, share) = (class.name, class.policy, class.slack, class.share);
    let mut words = Vec::new();
    let allotted = binding && share < class.demand;
    // A spare worker at every recent start while this class's connections
    // are refused: the budget starves the backend (a mean that lags work
    // grown cheaper).
    let kept = class.reserve.map_or(0.0, |r| r.workers);
    let refusing = rate_of(tick.offered, name) > rate_of(tick.admitted, name);
    *probe = match tick.starts.backend(capacity, kept) {
        // Overload back, or a queue standing with every worker taken.
        _ if !allotted || effective < capacity => 0.0,
        Backend::Full if backlogged => 0.0,
        // Never past the most the class may admit: a probe left to grow
        // for minutes reached infinity in the decisions' words.
        Backend::Starved if refusing => {
            (probe.max(class.published) * PROBE_STEP.powf(tick.dt_s / PROBE_STEP_S)).min(max_rate)
        }
        _ => *probe,
    };
    // The jobs/s the allotment finishes.
    let jobs = share * 1000.0 / s.mean_service_ms.max(1e-9);
    // A queue that `admit` trims at start to the jobs that can still make
    // it needs feeding faster.
    let trimmed = rate_of(tick.trimmed, name) > 0.0;
    let headroom =
        if trimmed && tick.headroom > 0.0 { feed::headroom(tick.headroom, jobs, s.room_ms()) } else { tick.headroom };
    let mut rate = if allotted {
        words.push(format!(
            "demand {demand:.2} > available {admission:.2} worker-s/s: {} class, weight {}, \
             allotted {share:.2} worker-s/s = {jobs:.2} jobs/s at mean service {:.0} ms, +{:.0}% headroom",
            policy.tier.as_str(),
            policy.weight,
            s.mean_service_ms,
            headroom * 100.0
        ));
        if class.beyond_chance > 0.005 {
            words.push(format!(
                "{:.2} of it is room the other classes' bursts of chance would have taken",
                class.beyond_chance
            ));
        }
        let model = jobs * (1.0 + headroom);
        if *probe > model {
            words.push(format!("raised to {:.2} jobs/s: workers were free under it (the mean lags)", *probe));
        }
        model.max(*probe)
    } else if binding {
        words.push(format!(
            "demand {demand:.2} > available {admission:.2} worker-s/s, but the {} tier's \
             allotment covers this class's {share:.2}: no limit",
            policy.tier.as_str()
        ));
        max_rate
    } else if demand > admission {
        words.push(format!(
            "demand {demand:.2} > available {admission:.2} worker-s/s, but no backlog stands \
             and the law has not cut: no limit"
        ));
        max_rate
    } else {
        words.push(format!("demand {demand:.2} <= available {admission:.2} worker-s/s: no limit"));
        max_rate
    };
    // Work the fast path let in only for `admit` to refuse it is named here;
    // the share already left out what `admit` refuses (`share`), and the
    // headroom stays: it keeps the queue fed between bursts, and cutting it
    // idled workers without moving refusals to the NIC (docs/control-log.md).
    let admitted = rate_of(tick.admitted, name);
    let waste = if admitted > 0.0 { (rate_of(tick.wasted, name) / admitted).min(1.0) } else { 0.0 };
    if allotted && waste > tick.params.waste_tolerance {
        words.push(format!(
            "admit refused {:.0}% of what the fast path let in (the queue's variance: the headroom stays)",
            waste * 100.0
        ));
    }
    let guarded = rate < rate_of(tick.offered, name) && class.idle && !binding;
    if guarded {
        // The sanity guard: never refuse an idle backend's work.
        words.push("backend idle (short queue, free workers): sanity guard keeps the class open".into());
        rate = max_rate;
    }
    Target { rate, words, guarded }
}
