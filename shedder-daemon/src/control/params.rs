//! What the operator sets: the controller's tunables (`[control]`) and each
//! class's policy (deadline, budget, tier, weight), checked on the way in so
//! that a bad value is refused with its field named and changes nothing.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::gate::GateParams;
use super::tier::Tier;

/// The most jobs a backend is believed to run, or hold queued, at once: far
/// more than any inference server does, and few enough that a count taken
/// as evidence of its workers cannot swamp the capacity model.
pub const MAX_JOBS: u32 = 100_000;
/// The longest deadline, ms: a day.
pub const MAX_DEADLINE_MS: f64 = 86_400_000.0;
/// The longest control tick, ms.
pub const MAX_TICK_MS: u64 = 60_000;

/// The controller's tunables (the `[control]` part of the config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlParams {
    /// The daemon's tick period, ms. The law itself uses the measured time
    /// between ticks.
    #[serde(default = "d_tick_ms")]
    pub tick_ms: u64,
    /// Cut depth per unit of deficit (−slack / deadline).
    #[serde(default = "d_cut_gain")]
    pub cut_gain: f64,
    /// Deepest single cut: the effective capacity is multiplied by at least this.
    #[serde(default = "d_cut_floor")]
    pub cut_floor: f64,
    /// Mildest cut: the effective capacity is multiplied by at most this.
    #[serde(default = "d_cut_ceiling")]
    pub cut_ceiling: f64,
    /// Least time between a cut and a further cut on worsening slack, ms.
    #[serde(default = "d_hold_ms")]
    pub hold_ms: u64,
    /// How much worse than at the last cut (fraction of the deadline) the
    /// slack must be for a further cut within the window.
    #[serde(default = "d_recut_worsening")]
    pub recut_worsening: f64,
    /// The dead band: recovery needs slack of at least this fraction of the deadline.
    #[serde(default = "d_recover_headroom")]
    pub recover_headroom: f64,
    /// Slack (fraction of the deadline) from which recovery runs at full
    /// speed; between `recover_headroom` and this it tapers linearly.
    #[serde(default = "d_recover_full_at")]
    pub recover_full_at: f64,
    /// Full recovery speed of the effective capacity, as a fraction of the
    /// capacity per second.
    #[serde(default = "d_recovery_per_s")]
    pub recovery_per_s: f64,
    /// Smallest budget move published, up or down, as a fraction of the
    /// class's `max_rate` (or 5% of its budget, if more), unless it reaches
    /// a bound.
    #[serde(default = "d_publish_step")]
    pub publish_step: f64,
    /// Oldest queue-depth gauge that may predict the wait, ms.
    #[serde(default = "d_depth_max_age_ms")]
    pub depth_max_age_ms: u64,
    /// A job is worth a worker while it keeps this fraction of the on-time
    /// chance it would have on an idle backend (see [`super::slack`](mod@super::slack)).
    #[serde(default = "d_admit_confidence")]
    pub admit_confidence: f64,
    /// Budgets are set at least this fraction above what a class's
    /// allocation can finish, so arrivals' randomness does not waste
    /// capacity (more for a queue that `admit` trims at start: [`super::feed`]).
    #[serde(default = "d_headroom")]
    pub headroom: f64,
    /// The derived safety margin never exceeds this fraction of the deadline.
    #[serde(default = "d_safety_max_fraction")]
    pub safety_max_fraction: f64,
    /// How far server and daemon clocks may disagree, ms (part of the margin).
    #[serde(default = "d_clock_skew_ms")]
    pub clock_skew_ms: f64,
    /// Retries and hedges may take at most this share of admitted jobs.
    #[serde(default = "d_retry_share_max")]
    pub retry_share_max: f64,
    /// Wasted admissions above this fraction of a class's admitted rate
    /// are named in its decisions (they are counted in the metrics always),
    /// and shrink its share to what `admit` would not refuse (see
    /// `control::share`).
    #[serde(default = "d_waste_tolerance")]
    pub waste_tolerance: f64,
    /// Below this fraction of capacity in use, with a short queue, the
    /// backend counts as idle (the sanity guard).
    #[serde(default = "d_idle_fraction")]
    pub idle_fraction: f64,
    /// A scraped server's live gauges older than this are stale, ms (a few
    /// scrape intervals: scrapes are slower than ticks).
    #[serde(default = "d_stale_after_ms")]
    pub stale_after_ms: u64,
    /// The backend's worker count (`[backend] workers`), the capacity until
    /// one is learnt.
    #[serde(skip)]
    pub workers: Option<f64>,
    #[serde(default)]
    pub gate: GateParams,
}

fn d_admit_confidence() -> f64 {
    0.95
}
fn d_headroom() -> f64 {
    0.25
}
fn d_safety_max_fraction() -> f64 {
    0.1
}
fn d_clock_skew_ms() -> f64 {
    5.0
}
fn d_retry_share_max() -> f64 {
    0.1
}
fn d_waste_tolerance() -> f64 {
    0.05
}
fn d_idle_fraction() -> f64 {
    0.5
}
fn d_stale_after_ms() -> u64 {
    3_000
}

fn d_tick_ms() -> u64 {
    100
}
fn d_cut_gain() -> f64 {
    1.0
}
fn d_cut_floor() -> f64 {
    0.5
}
fn d_cut_ceiling() -> f64 {
    0.95
}
fn d_hold_ms() -> u64 {
    500
}
fn d_recut_worsening() -> f64 {
    0.05
}
fn d_recover_headroom() -> f64 {
    0.1
}
fn d_recover_full_at() -> f64 {
    0.5
}
fn d_recovery_per_s() -> f64 {
    0.05
}
fn d_publish_step() -> f64 {
    0.02
}
fn d_depth_max_age_ms() -> u64 {
    2_000
}

impl Default for ControlParams {
    fn default() -> Self {
        ControlParams {
            tick_ms: d_tick_ms(),
            cut_gain: d_cut_gain(),
            cut_floor: d_cut_floor(),
            cut_ceiling: d_cut_ceiling(),
            hold_ms: d_hold_ms(),
            recut_worsening: d_recut_worsening(),
            recover_headroom: d_recover_headroom(),
            recover_full_at: d_recover_full_at(),
            recovery_per_s: d_recovery_per_s(),
            publish_step: d_publish_step(),
            depth_max_age_ms: d_depth_max_age_ms(),
            admit_confidence: d_admit_confidence(),
            headroom: d_headroom(),
            safety_max_fraction: d_safety_max_fraction(),
            clock_skew_ms: d_clock_skew_ms(),
            retry_share_max: d_retry_share_max(),
            waste_tolerance: d_waste_tolerance(),
            idle_fraction: d_idle_fraction(),
            stale_after_ms: d_stale_after_ms(),
            workers: None,
            gate: GateParams::default(),
        }
    }
}

impl ControlParams {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Result<(), InvalidControl> {
        let err = |m: String| Err(InvalidControl(m));
        if !(1..=MAX_TICK_MS).contains(&self.tick_ms) {
            return err(format!("control.tick_ms: {} is outside 1..={MAX_TICK_MS}", self.tick_ms));
        }
        if !(self.cut_gain.is_finite() && self.cut_gain >= 0.0) {
            return err(format!("control.cut_gain: {} is not a finite, non-negative number", self.cut_gain));
        }
        if !(self.cut_floor > 0.0 && self.cut_floor <= self.cut_ceiling && self.cut_ceiling < 1.0) {
            return err(format!(
                "control.cut_floor/cut_ceiling: need 0 < cut_floor ({}) <= cut_ceiling ({}) < 1",
                self.cut_floor, self.cut_ceiling
            ));
        }
        for (name, v) in [
            ("recut_worsening", self.recut_worsening),
            ("recover_headroom", self.recover_headroom),
            ("publish_step", self.publish_step),
        ] {
            if !(v.is_finite() && (0.0..1.0).contains(&v)) {
                return err(format!("control.{name}: {v} is outside 0..1"));
            }
        }
        if !(self.recover_full_at.is_finite()
            && self.recover_full_at > self.recover_headroom
            && self.recover_full_at <= 1.0)
        {
            return err(format!(
                "control.recover_full_at: {} must be above recover_headroom ({}) and at most 1",
                self.recover_full_at, self.recover_headroom
            ));
        }
        if !(self.recovery_per_s.is_finite() && self.recovery_per_s > 0.0 && self.recovery_per_s <= 10.0) {
            return err(format!("control.recovery_per_s: {} is outside (0, 10]", self.recovery_per_s));
        }
        for (name, v) in [
            ("admit_confidence", self.admit_confidence),
            ("safety_max_fraction", self.safety_max_fraction),
            ("retry_share_max", self.retry_share_max),
            ("waste_tolerance", self.waste_tolerance),
            ("idle_fraction", self.idle_fraction),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return err(format!("control.{name}: {v} is outside (0, 1]"));
            }
        }
        for (name, v) in [("headroom", self.headroom), ("clock_skew_ms", self.clock_skew_ms)] {
            if !(v.is_finite() && v >= 0.0) {
                return err(format!("control.{name}: {v} is not a finite, non-negative number"));
            }
        }
        if let Some(w) = self.workers
            && !(w.is_finite() && w > 0.0)
        {
            return err(format!("backend.workers: {w} is not a positive number"));
        }
        self.gate.validate().map_err(InvalidControl)
    }
}

/// How a class's budget is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Budget {
    /// Set by the law within `[min_rate, max_rate]`; starts at `max_rate`.
    Adaptive {
        #[serde(default)]
        min_rate: f64,
        max_rate: f64,
    },
    /// The operator's rate, never changed by the law.
    Static { rate: f64 },
}

/// One class as the controller sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassPolicy {
    pub deadline_ms: f64,
    /// The margin below the deadline; derived from the class's spread when
    /// left out (see [`super::safety`]).
    #[serde(default)]
    pub safety_ms: Option<f64>,
    pub budget: Budget,
    /// Batch: held at its minimum (static: 0) while the GPU gate is closed.
    #[serde(default)]
    pub opportunistic: bool,
    #[serde(default)]
    pub tier: Tier,
    /// Share of its tier's capacity, relative to the tier's other classes.
    #[serde(default = "d_weight")]
    pub weight: f64,
}

fn d_weight() -> f64 {
    1.0
}

impl ClassPolicy {
    /// The most this class may admit: its capacity in the gate's sense.
    pub fn capacity(&self) -> f64 {
        match self.budget {
            Budget::Adaptive { max_rate, .. } => max_rate,
            Budget::Static { rate } => rate,
        }
    }

    /// The least it is ever held at.
    pub fn floor(&self) -> f64 {
        match self.budget {
            Budget::Adaptive { min_rate, .. } => min_rate,
            Budget::Static { .. } => 0.0,
        }
    }

    pub(super) fn validate(&self, class: &str) -> Result<(), InvalidControl> {
        let err = |m: String| Err(InvalidControl(format!("class {class:?} {m}")));
        if !(self.deadline_ms.is_finite() && self.deadline_ms > 0.0) {
            return err(format!("deadline_ms: {} is not a positive number of ms", self.deadline_ms));
        }
        if self.deadline_ms > MAX_DEADLINE_MS {
            return err(format!("deadline_ms: {:e} ms is more than a day", self.deadline_ms));
        }
        if let Some(safety) = self.safety_ms
            && !(safety.is_finite() && safety >= 0.0 && safety < self.deadline_ms)
        {
            return err(format!("safety_ms: {safety} must be at least 0 and below deadline_ms ({})", self.deadline_ms));
        }
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return err(format!("weight: {} is not a positive number", self.weight));
        }
        match self.budget {
            Budget::Adaptive { min_rate, max_rate } => {
                if !(min_rate.is_finite()
                    && max_rate.is_finite()
                    && 0.0 <= min_rate
                    && min_rate <= max_rate
                    && max_rate > 0.0)
                {
                    return err(format!(
                        "adaptive: need 0 <= min_rate ({min_rate}) <= max_rate ({max_rate}) and max_rate > 0"
                    ));
                }
            }
            Budget::Static { rate } => {
                if !(rate.is_finite() && rate >= 0.0) {
                    return err(format!("rate: {rate} is not a finite, non-negative rate"));
                }
            }
        }
        Ok(())
    }
}

/// A bad control parameter or class policy; the message names the field.
#[derive(Clone, Debug, PartialEq)]
pub struct InvalidControl(pub String);

impl fmt::Display for InvalidControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidControl {}
