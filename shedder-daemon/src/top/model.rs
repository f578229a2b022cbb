//! What `shedder top` shows, built from the daemon's `status` and
//! `decisions` answers: counter rates between two polls, a minute of slack
//! per class, whether the daemon is reachable, and a mode change waiting for
//! its confirmation. No terminal here, so it is tested as plain data.

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use serde_json::Value;
use shedder_common::maps::counted_since;

use crate::api::protocol::{Changed, ClassStatus, ErrorCode, ModeOrInherit, StatusAnswer, TenantStatus, decode};
use crate::config::ModeName;

/// How far back the slack sparkline reaches.
pub const SLACK_HISTORY: Duration = Duration::from_secs(60);

/// Per-second rates of one class's counters between two polls.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    pub offered: f64,
    pub admitted: f64,
    /// Dropped or rejected.
    pub shed: f64,
    /// Counted over budget and let through (observe mode).
    pub would_shed: f64,
}

/// The counters a rate is taken of, as `status` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counters {
    /// New connections asked for (SYNs seen, less resends of dropped ones).
    asked: u64,
    admitted: u64,
    shed: u64,
    would_shed: u64,
}

impl Counters {
    fn of_class(class: &ClassStatus) -> Self {
        let c = &class.counters;
        Self { asked: c.first_attempts(), admitted: c.admitted, shed: c.dropped + c.rejected, would_shed: c.would_shed }
    }

    /// Rates from `earlier` to `self` over `secs`.
    fn rates_since(&self, earlier: &Self, secs: f64) -> Rates {
        Rates {
            offered: per_s(self.asked, earlier.asked, secs),
            admitted: per_s(self.admitted, earlier.admitted, secs),
            shed: per_s(self.shed, earlier.shed, secs),
            would_shed: per_s(self.would_shed, earlier.would_shed, secs),
        }
    }
}

/// Per-second rates of one tenant's counters between two polls.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TenantRates {
    pub admitted: f64,
    /// Refused by the tenant's own bucket.
    pub over_tenant: f64,
    /// Fit the tenant's bucket, refused by the class's (its token refunded).
    pub over_class: f64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TenantCounters {
    admitted: u64,
    over_tenant: u64,
    over_class: u64,
}

impl TenantCounters {
    fn of_tenant(tenant: &TenantStatus) -> Self {
        let c = &tenant.counters;
        Self { admitted: c.admitted, over_tenant: c.over_tenant, over_class: c.over_class }
    }

    fn rates_since(&self, earlier: &Self, secs: f64) -> TenantRates {
        TenantRates {
            admitted: per_s(self.admitted, earlier.admitted, secs),
            over_tenant: per_s(self.over_tenant, earlier.over_tenant, secs),
            over_class: per_s(self.over_class, earlier.over_class, secs),
        }
    }
}

/// A counter's rate over `secs`.
fn per_s(now: u64, then: u64, secs: f64) -> f64 {
    counted_since(now, then) as f64 / secs
}

/// Whether the last poll reached the daemon.
#[derive(Clone, Debug, PartialEq)]
pub enum Link {
    Connecting,
    Up,
    /// Why, in words.
    Unreachable(String),
}

/// The mode `m` proposes for a class set to `own` while the global mode is
/// `global`: the explicit modes in turn (off, observe, enforce, off…),
/// starting after the one the class runs in, and `inherit` once they have
/// come round to the global mode. Each press changes what the class is set
/// to, and every setting is reached: under a global `observe`, inherit →
/// enforce → off → observe → inherit.
fn next_mode(own: ModeOrInherit, global: ModeName) -> ModeOrInherit {
    let after = |mode: ModeName| match mode {
        ModeName::Off => ModeOrInherit::Observe,
        ModeName::Observe => ModeOrInherit::Enforce,
        ModeName::Enforce => ModeOrInherit::Off,
    };
    match own.mode() {
        None => after(global),
        Some(mode) if mode == global => ModeOrInherit::Inherit,
        Some(mode) => after(mode),
    }
}

/// A mode change shown for confirmation before it is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingChange {
    pub class: String,
    pub mode: ModeOrInherit,
}

/// The counters of the previous poll, to take rates against.
struct Poll {
    at: Instant,
    classes: HashMap<String, Counters>,
    tenants: HashMap<String, TenantCounters>,
    fail_open: u64,
}

pub struct Model {
    pub link: Link,
    /// The last `status` answer.
    pub status: Option<StatusAnswer>,
    pub decisions: Vec<Value>,
    pub rates: HashMap<String, Rates>,
    pub tenant_rates: HashMap<String, TenantRates>,
    slack: HashMap<String, VecDeque<(Instant, f64)>>,
    last: Option<Poll>,
    /// SYNs passed by the fail-open watchdog since the previous poll.
    pub failing_open: bool,
    pub selected: usize,
    pub pending: Option<PendingChange>,
    /// The outcome of the last change, or why changes are refused.
    pub message: Option<String>,
    /// Set once the daemon refused a change: this user may only look.
    pub read_only: bool,
}

impl Default for Model {
    fn default() -> Self {
        Self {
            link: Link::Connecting,
            status: None,
            decisions: Vec::new(),
            rates: HashMap::new(),
            tenant_rates: HashMap::new(),
            slack: HashMap::new(),
            last: None,
            failing_open: false,
            selected: 0,
            pending: None,
            message: None,
            read_only: false,
        }
    }
}

impl Model {
    /// Takes in a `status` answer polled at `now`.
    pub fn update_status(&mut self, status: StatusAnswer, now: Instant) {
        let classes = &status.snapshot.classes;
        let counters: HashMap<String, Counters> =
            classes.iter().map(|c| (c.name.clone(), Counters::of_class(c))).collect();
        let tenants: HashMap<String, TenantCounters> =
            status.snapshot.tenants.iter().map(|t| (t.name.clone(), TenantCounters::of_tenant(t))).collect();
        let fail_open = status.snapshot.passed.get("fail_open").copied().unwrap_or(0);
        if let Some(earlier) = &self.last {
            let secs = now.duration_since(earlier.at).as_secs_f64();
            if secs > 0.0 {
                self.rates = counters
                    .iter()
                    .map(|(name, c)| {
                        (name.clone(), c.rates_since(&earlier.classes.get(name).copied().unwrap_or_default(), secs))
                    })
                    .collect();
                self.tenant_rates = tenants
                    .iter()
                    .map(|(name, c)| {
                        (name.clone(), c.rates_since(&earlier.tenants.get(name).copied().unwrap_or_default(), secs))
                    })
                    .collect();
            }
            self.failing_open = fail_open > earlier.fail_open;
        }
        for class in classes {
            if let Some(slack) = class.slack_ms() {
                let history = self.slack.entry(class.name.clone()).or_default();
                history.push_back((now, slack));
                while history.front().is_some_and(|(at, _)| now.duration_since(*at) > SLACK_HISTORY) {
                    history.pop_front();
                }
            }
        }
        self.slack.retain(|n, _| counters.contains_key(n));
        self.selected = self.selected.min(classes.len().saturating_sub(1));
        self.last = Some(Poll { at: now, classes: counters, tenants, fail_open });
        self.status = Some(status);
        self.link = Link::Up;
    }

    /// The daemon could not be reached: keep the last figures, say so, and
    /// take rates afresh once it is back.
    pub fn unreachable(&mut self, why: String) {
        self.link = Link::Unreachable(why);
        self.last = None;
        self.rates.clear();
        self.tenant_rates.clear();
    }

    pub fn class_names(&self) -> Vec<String> {
        self.status.as_ref().map(|s| s.snapshot.classes.iter().map(|c| c.name.clone()).collect()).unwrap_or_default()
    }

    /// The last minute of a class's slack, oldest first.
    pub fn slack_history(&self, class: &str) -> Vec<f64> {
        self.slack.get(class).map(|h| h.iter().map(|(_, s)| *s).collect()).unwrap_or_default()
    }

    pub fn select_next(&mut self, step: isize) {
        let n = self.class_names().len();
        if n > 0 {
            self.selected = (self.selected as isize + step).rem_euclid(n as isize) as usize;
        }
    }

    /// Proposes the selected class's next mode (for confirmation).
    pub fn propose_next_mode(&mut self) {
        if self.read_only {
            self.message = Some("read-only: this user may not change the configuration".into());
            return;
        }
        let Some(status) = &self.status else { return };
        let Some(class) = status.snapshot.classes.get(self.selected) else { return };
        let own = if class.inherits_mode { ModeOrInherit::Inherit } else { class.mode.into() };
        let mode = next_mode(own, status.snapshot.mode);
        self.pending = Some(PendingChange { class: class.name.clone(), mode });
    }

    /// Takes in the daemon's answer to a change.
    pub fn change_answered(&mut self, change: &PendingChange, answer: &Value) {
        self.message = Some(match decode::<Changed>(answer) {
            Ok(Ok(changed)) => format!(
                "class {} set to {} (config version {})",
                change.class,
                change.mode.as_str(),
                changed.config_version
            ),
            Ok(Err(e)) => {
                if e.code == ErrorCode::Refused {
                    self.read_only = true;
                }
                e.to_string()
            }
            Err(e) => format!("the daemon's answer does not read as a change: {e}"),
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::ModeName;

    /// A `status` answer with `fields` over those of an idle daemon.
    fn typed(fields: Value) -> StatusAnswer {
        let mut answer = json!({
            "version": "0.1.0", "mode": "observe", "config_version": 1, "estimator_version": 0, "uptime_s": 1.0,
            "iface": "lo", "attachment": "xdp", "attached": true, "hook_problem": null, "gpu": null,
            "classes": [], "tenants": [], "passed": {}, "maps": null,
            "samples": {"accepted": 0, "rejected_batches": 0, "pending": 0},
        });
        for (key, value) in fields.as_object().unwrap() {
            answer[key] = value.clone();
        }
        serde_json::from_value(answer).unwrap()
    }

    fn status(seen: u64, admitted: u64, dropped: u64, would_shed: u64, slack_ms: f64, fail_open: u64) -> StatusAnswer {
        typed(json!({
            "passed": {"fail_open": fail_open},
            "classes": [{
                "name": "web", "mode": "observe", "action": "drop", "rate": 10.0, "burst": 10.0, "cost": 1.0,
                "tokens": 10.0, "controlled": false,
                "counters": {"seen": seen, "admitted": admitted, "dropped": dropped, "rejected": 0, "marked": 0, "would_shed": would_shed},
                "slack": {"slack_ms": slack_ms}, "queue_age_p95_ms": null, "service_p95_ms": null,
                "estimate_source": null, "on_time_share": null, "wasted_admissions": 0,
            }],
        }))
    }

    #[test]
    fn rates_are_counter_deltas_over_the_poll_interval() {
        let t0 = Instant::now();
        let mut model = Model::default();
        model.update_status(status(100, 90, 10, 0, 50.0, 0), t0);
        assert!(model.rates.is_empty(), "one poll gives no rate");
        model.update_status(status(300, 250, 50, 20, 40.0, 0), t0 + Duration::from_secs(2));
        assert_eq!(model.rates["web"], Rates { offered: 100.0, admitted: 80.0, shed: 20.0, would_shed: 10.0 });
        // A restarted daemon starts its counters again.
        model.update_status(status(10, 10, 0, 0, 40.0, 0), t0 + Duration::from_secs(3));
        assert_eq!(model.rates["web"].offered, 10.0);
    }

    #[test]
    fn tenant_rates_are_counter_deltas_too() {
        let with_tenant = |admitted: u64, over_tenant: u64, over_class: u64| {
            let mut s = status(0, 0, 0, 0, 0.0, 0);
            s.snapshot.tenants = typed(json!({"tenants": [{"name": "acme", "share": 1.0, "weight": 1.0,
                "rate": 1.0, "burst": 1.0, "tokens": 1.0, "counters":
                {"admitted": admitted, "over_tenant": over_tenant, "over_class": over_class}}]}))
            .snapshot
            .tenants;
            s
        };
        let t0 = Instant::now();
        let mut model = Model::default();
        model.update_status(with_tenant(10, 0, 0), t0);
        model.update_status(with_tenant(50, 200, 4), t0 + Duration::from_secs(2));
        assert_eq!(model.tenant_rates["acme"], TenantRates { admitted: 20.0, over_tenant: 100.0, over_class: 2.0 });
        model.unreachable("gone".into());
        assert!(model.tenant_rates.is_empty(), "rates start afresh after a gap");
    }

    #[test]
    fn slack_history_keeps_one_minute() {
        let t0 = Instant::now();
        let mut model = Model::default();
        for s in 0..90 {
            model.update_status(status(0, 0, 0, 0, s as f64, 0), t0 + Duration::from_secs(s));
        }
        let history = model.slack_history("web");
        assert_eq!(history.first(), Some(&29.0));
        assert_eq!(history.last(), Some(&89.0));
    }

    #[test]
    fn fail_open_shows_while_the_watchdog_passes_syns() {
        let t0 = Instant::now();
        let mut model = Model::default();
        // (fail_open counter at each poll, failing open after it)
        for (i, (count, failing)) in [(0, false), (0, false), (5, true), (9, true), (9, false)].into_iter().enumerate()
        {
            model.update_status(status(0, 0, 0, 0, 0.0, count), t0 + Duration::from_secs(i as u64));
            assert_eq!(model.failing_open, failing, "poll {i}");
        }
    }

    #[test]
    fn mode_key_cycles_through_the_class_modes() {
        let mut model = Model::default();
        model.update_status(status(0, 0, 0, 0, 0.0, 0), Instant::now());
        // Under the fixture's global observe: (mode the daemon reports,
        // whether it is the global one, mode proposed next).
        for (current, inherits, next) in [
            (ModeName::Observe, true, ModeOrInherit::Enforce),
            (ModeName::Enforce, false, ModeOrInherit::Off),
            (ModeName::Off, false, ModeOrInherit::Observe),
            (ModeName::Observe, false, ModeOrInherit::Inherit),
        ] {
            let class = &mut model.status.as_mut().unwrap().snapshot.classes[0];
            (class.mode, class.inherits_mode) = (current, inherits);
            model.propose_next_mode();
            assert_eq!(model.pending, Some(PendingChange { class: "web".into(), mode: next }));
        }
    }

    #[test]
    fn the_mode_key_reaches_every_setting_under_any_global_mode() {
        for global in [ModeName::Off, ModeName::Observe, ModeName::Enforce] {
            let mut own = ModeOrInherit::Inherit;
            let mut seen = Vec::new();
            for _ in 0..4 {
                own = next_mode(own, global);
                seen.push(own);
            }
            assert_eq!(own, ModeOrInherit::Inherit, "under {global:?}, round in four presses: {seen:?}");
            for setting in [ModeOrInherit::Off, ModeOrInherit::Observe, ModeOrInherit::Enforce] {
                assert!(seen.contains(&setting), "under {global:?}, {setting:?} is never proposed: {seen:?}");
            }
        }
    }

    #[test]
    fn a_refused_change_makes_the_view_read_only() {
        let mut model = Model::default();
        model.update_status(status(0, 0, 0, 0, 0.0, 0), Instant::now());
        let change = PendingChange { class: "web".into(), mode: ModeOrInherit::Enforce };
        let refused =
            json!({"ok": false, "error": {"code": "refused", "message": "uid 65534 may not change the configuration"}});
        model.change_answered(&change, &refused);
        assert!(model.read_only);
        model.pending = None;
        model.propose_next_mode();
        assert_eq!(model.pending, None, "no change is proposed to a read-only user");
        assert!(model.message.as_deref().unwrap().starts_with("read-only"));
    }
}
