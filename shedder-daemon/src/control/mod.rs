//! The controller: from per-class estimates to per-class budgets, every tick.
//!
//! * [`slack`]: `deadline − queue_term − service_p95 − safety` per class.
//! * [`law`](self#the-law): the budget law of an adaptive class.
//! * [`gate`]: the GPU gate over opportunistic (batch) classes.
//! * [`decision`]: one [`Decision`] per budget change, and a ring of recent ones.
//!
//! Nothing here reads a clock: [`Controller::tick`] takes `now`, so tests run
//! the law on a simulated clock, and the daemon passes its own.
//!
//! # The law
//!
//! Each tick (default 100 ms), for each **adaptive** class, with `s` its slack
//! (see [`slack`]), `D` its deadline, `r` its budget (tokens/s) and `a` its
//! measured admitted rate (defaults in brackets):
//!
//! ```text
//! s < 0, with evidence   cut       r ← max(min(r, a)·f, r·floor), kept in [min_rate, max_rate]
//!                                  f = clamp(1 − gain·deficit/D, floor, ceiling)        [1, 0.5, 0.95]
//!                        deficit   −s for the first cut of an episode
//!   a further cut only on new evidence that the last one is not enough:
//!     worse      hold_ms after the last cut [500 ms], s is below the reference
//!                by more than recut_worsening·D [5%], and the queue depth (if
//!                reported) is above the reference:           deficit = the worsening only
//!     persistent a whole estimator window [10 s] after the reference, s is no
//!                better than it was then, and the depth no lower: deficit = −s
//!                (better than then: no cut, the reference moves to now)
//!   every cut sets the reference (time, slack, depth) to now
//! 0 ≤ s < h              hold: the dead band, h = recover_headroom·D                    [10%]
//! s ≥ h                  recover   r ← r + max_rate·recovery_per_s·taper·dt             [5%/s]
//!                                  taper = min(1, (s − h)/(full − h)), full = recover_full_at·D [50%]
//! ```
//!
//! **Multiplicative decrease, additive increase.** Queueing delay rises
//! monotonically with the admitted rate, so slack falls monotonically with it
//! and crosses zero at some rate `r*` (the class's deadline capacity, which
//! the controller never needs to know). Above `r*` every cut removes at least
//! `1 − ceiling` of the excess, geometrically, harder the deeper the deficit;
//! below it the rate climbs linearly. This is the AIMD of Chiu and Jain
//! (1989): decrease proportional to the rate and increase independent of it
//! converge to the capacity point instead of drifting away from it, and
//! several adaptive classes sharing one bottleneck converge towards equal
//! shares of it. Cutting from the *admitted* rate `a` when the budget sits
//! above demand makes the first cut bite at once (cutting an unused budget of
//! 40/s to 32/s changes nothing when 30/s arrive), while `r·floor` bounds
//! what one cut can take.
//!
//! **Rest, or a bounded cycle.** Between `0` and `h` nothing moves, and the
//! taper slows the climb as the slack shrinks: a class whose deadline is
//! mostly spent in service (the drill's tail: 1800 ms of a 3000 ms deadline)
//! probes at about half speed. Because slack is monotone in the rate, the
//! dead band is an interval of rates just below `r*`, and a rate inside it
//! stays there. When the noise of the estimates is wider than the band, what
//! remains is the AIMD cycle: its amplitude is bounded by the overshoot made
//! during one detection delay (the queue must grow by `h`'s worth of wait
//! before the slack sees it, about √(2·depth·climb rate) above `r*`) plus one
//! cut, and it does not grow, because nothing in the law integrates it.
//!
//! **Lag and wind-up.** The estimates lag: a p95 over a window `W` (10 s)
//! rises fast (5% of the window being bad is enough) but falls slowly (the bad
//! samples must leave it), a queue-age sample is only taken when a job leaves
//! the queue, and a new service tail shows only as its jobs complete. An
//! integrating controller would keep cutting while the slack it sees is still
//! the pre-cut slack, and wind down to `min_rate` from lag alone. So a cut is
//! answered at once (the first tick with `s < 0`: within one tick of a step),
//! but a *further* cut needs evidence that the last one is not working:
//! - **worse**: after the hold time the slack is worse by more than the margin
//!   *and* the queue is still growing. A draining backlog shrinks the depth
//!   and makes a windowed p95 plateau; what still worsens then (a p95 catching
//!   up, a noisy drain rate) is lag, not evidence. The cut is sized on the
//!   worsening alone (the velocity form): sizing it on the whole deficit again
//!   would answer the same evidence twice and compound.
//! - **persistent**: a whole window after the reference, the slack is still
//!   negative and no better, so every sample in the window postdates it. If
//!   it is better, the last cut is working: no cut, and the next window is
//!   judged from here.
//!
//! Together: at most one cut per `hold_ms`, each bounded by `floor`, and only
//! while the queue grows; a stale window never cuts.
//!
//! **Leading indicators.** The queue term uses queue age over the freshest
//! horizon with enough samples (queue age follows the budget, so a long
//! window there is pure lag) and, when the class reports its queue depth,
//! `depth / drain rate` (Little's law: under FIFO, the wait of a job arriving
//! now), whichever is larger. The service term takes the larger of the window
//! and recent p95s (fast attack, slow release). See [`slack`].
//!
//! **Evidence.** A slack built from priors alone never cuts: priors are
//! guesses, and a class without data should not lose its budget to a guess.
//! Recovery may run on priors (the default prior is zeros: no data, no
//! shedding).
//!
//! **Recovery time.** After a fault clears, recovery speeds up once the window
//! has forgotten the old service tail (at most `W`), then climbs at
//! `recovery_per_s` of `max_rate` per second. The window is the knob: shorter
//! recovers sooner and is noisier.
//!
//! **Static classes** keep the operator's rate (and cost) untouched; the only
//! thing that may hold a static class is the GPU gate, and only if the
//! operator marked it opportunistic.
//!
//! Budgets are published (and a [`Decision`] made) when they change: every
//! cut, and recovery in steps of at least `publish_step` of `max_rate` (or on
//! reaching `max_rate`), so the maps and the log move at human pace.
//!
//! Measured on the seed's drill (`tests/controller_drill.rs`, seeded
//! discrete-event queue, 20 seeds): no cut in the steady phase; the first cut
//! 1.6–2.4 s after the tail is injected, which is at most 0.5 s after its
//! first 1800 ms job completes (nothing can see it earlier); settled in the
//! tail, a budget cycling within 0.4–1.55× the capacity bound (median about
//! 0.9×), 80–94% of the bound completed on time and 1–9% of completions late;
//! back to the pre-injection budget 16–25 s after the tail is removed.

pub mod decision;
pub mod gate;
mod law;
pub mod slack;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use decision::{Action, Decision, DecisionLog};
pub use gate::{GateParams, GpuSummary};
use law::{CutWhy, Law, Move};
pub use slack::{Slack, slack};

use crate::estimate::ClassEstimate;
use crate::telemetry::GpuReading;

/// The longest step a tick may take, s: after a stall (a suspended daemon),
/// recovery must not jump by the whole gap.
pub const MAX_TICK_DT_S: f64 = 1.0;

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
    /// Deepest single cut: the budget is multiplied by at least this.
    #[serde(default = "d_cut_floor")]
    pub cut_floor: f64,
    /// Mildest cut: the budget is multiplied by at most this.
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
    /// Full recovery speed, as a fraction of `max_rate` per second.
    #[serde(default = "d_recovery_per_s")]
    pub recovery_per_s: f64,
    /// Smallest recovery step published, as a fraction of `max_rate`.
    #[serde(default = "d_publish_step")]
    pub publish_step: f64,
    /// Oldest queue-depth gauge that may predict the wait, ms.
    #[serde(default = "d_depth_max_age_ms")]
    pub depth_max_age_ms: u64,
    #[serde(default)]
    pub gate: GateParams,
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
            gate: GateParams::default(),
        }
    }
}

impl ControlParams {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Result<(), InvalidControl> {
        let err = |m: String| Err(InvalidControl(m));
        if self.tick_ms == 0 {
            return err("control.tick_ms: must be at least 1".into());
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
    #[serde(default = "d_safety_ms")]
    pub safety_ms: f64,
    pub budget: Budget,
    /// Batch: held at its minimum (static: 0) while the GPU gate is closed.
    #[serde(default)]
    pub opportunistic: bool,
}

fn d_safety_ms() -> f64 {
    250.0
}

impl ClassPolicy {
    /// The most this class may admit: its capacity in the gate's sense.
    pub fn capacity(&self) -> f64 {
        match self.budget {
            Budget::Adaptive { max_rate, .. } => max_rate,
            Budget::Static { rate } => rate,
        }
    }

    /// What the GPU gate holds it at.
    pub fn gated_rate(&self) -> f64 {
        match self.budget {
            Budget::Adaptive { min_rate, .. } => min_rate,
            Budget::Static { .. } => 0.0,
        }
    }

    fn validate(&self, class: &str) -> Result<(), InvalidControl> {
        let err = |m: String| Err(InvalidControl(format!("class {class:?} {m}")));
        if !(self.deadline_ms.is_finite() && self.deadline_ms > 0.0) {
            return err(format!("deadline_ms: {} is not a positive number of ms", self.deadline_ms));
        }
        if !(self.safety_ms.is_finite() && self.safety_ms >= 0.0 && self.safety_ms < self.deadline_ms) {
            return err(format!(
                "safety_ms: {} must be at least 0 and below deadline_ms ({})",
                self.safety_ms, self.deadline_ms
            ));
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
                        "budget: need 0 <= min_rate ({min_rate}) <= max_rate ({max_rate}) and max_rate > 0"
                    ));
                }
            }
            Budget::Static { rate } => {
                if !(rate.is_finite() && rate >= 0.0) {
                    return err(format!("budget.rate: {rate} is not a finite, non-negative rate"));
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

#[derive(Clone, Debug)]
enum State {
    Adaptive { law: Law, published: f64, gated: bool },
    Static { published: f64 },
}

/// Budgets for every class, moved once per tick.
pub struct Controller {
    params: ControlParams,
    policies: BTreeMap<String, ClassPolicy>,
    states: BTreeMap<String, State>,
    gate: gate::Gate,
    last_tick_ms: Option<u64>,
    last_slacks: BTreeMap<String, Slack>,
    last_gpu: Option<GpuSummary>,
}

impl Controller {
    /// Adaptive classes start at `max_rate` (no evidence, no shedding);
    /// static classes at their rate.
    pub fn new(params: ControlParams, policies: BTreeMap<String, ClassPolicy>) -> Result<Self, InvalidControl> {
        params.validate()?;
        for (name, policy) in &policies {
            policy.validate(name)?;
        }
        let states = policies.iter().map(|(name, policy)| (name.clone(), initial_state(policy))).collect();
        Ok(Controller {
            params,
            policies,
            states,
            gate: gate::Gate::default(),
            last_tick_ms: None,
            last_slacks: BTreeMap::new(),
            last_gpu: None,
        })
    }

    /// Replaces parameters and policies, all or nothing. Adaptive classes
    /// that stay adaptive keep their budget, clamped to the new bounds;
    /// everything else starts afresh.
    pub fn reconfigure(
        &mut self,
        params: ControlParams,
        policies: BTreeMap<String, ClassPolicy>,
    ) -> Result<(), InvalidControl> {
        params.validate()?;
        for (name, policy) in &policies {
            policy.validate(name)?;
        }
        let mut old = std::mem::take(&mut self.states);
        for (name, policy) in &policies {
            let state = match (old.remove(name), &policy.budget) {
                (Some(State::Adaptive { mut law, published, .. }), Budget::Adaptive { min_rate, max_rate }) => {
                    law.rate = law.rate.clamp(*min_rate, *max_rate);
                    law.reset_episode();
                    State::Adaptive { law, published: published.clamp(*min_rate, *max_rate), gated: false }
                }
                _ => initial_state(policy),
            };
            self.states.insert(name.clone(), state);
        }
        self.params = params;
        self.policies = policies;
        Ok(())
    }

    pub fn params(&self) -> &ControlParams {
        &self.params
    }

    pub fn policies(&self) -> &BTreeMap<String, ClassPolicy> {
        &self.policies
    }

    /// The published budget of a class, tokens/s: what belongs in its map.
    pub fn rate(&self, class: &str) -> Option<f64> {
        self.states.get(class).map(|s| match s {
            State::Adaptive { published, .. } | State::Static { published } => *published,
        })
    }

    /// Every class's published budget.
    pub fn rates(&self) -> BTreeMap<String, f64> {
        self.states.keys().filter_map(|c| Some((c.clone(), self.rate(c)?))).collect()
    }

    /// The slack of every class at the last tick (for metrics and `ctl`).
    pub fn last_slacks(&self) -> &BTreeMap<String, Slack> {
        &self.last_slacks
    }

    /// The gate's view at the last tick.
    pub fn last_gpu(&self) -> Option<&GpuSummary> {
        self.last_gpu.as_ref()
    }

    /// One control step at `now`.
    ///
    /// * `estimates`: per class, from [`crate::estimate::Estimators::estimate_all`].
    /// * `gpu`: the latest NVML readings, empty without NVML.
    /// * `admitted`: per class, the admitted rate (connections/s) measured
    ///   from the datapath counters over roughly the last second; a class
    ///   left out is "not measured".
    ///
    /// Returns the budget changes, in class order; [`Controller::rate`] has
    /// the new budgets.
    pub fn tick(
        &mut self,
        now: Duration,
        estimates: &BTreeMap<String, ClassEstimate>,
        gpu: &[GpuReading],
        admitted: &BTreeMap<String, f64>,
    ) -> Vec<Decision> {
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let dt_s = match self.last_tick_ms {
            Some(last) => (now_ms.saturating_sub(last) as f64 / 1000.0).min(MAX_TICK_DT_S),
            None => 0.0,
        };
        self.last_tick_ms = Some(self.last_tick_ms.map_or(now_ms, |l| l.max(now_ms)));

        // The gate's inputs.
        let kv = estimates.values().filter_map(|e| e.kv_cache_usage.map(|g| g.value)).reduce(f64::max);
        let interactive: Vec<(&String, &ClassPolicy)> =
            self.policies.iter().filter(|(_, p)| !p.opportunistic).collect();
        let capacity: f64 = interactive.iter().map(|(_, p)| p.capacity()).sum();
        let load: Option<f64> = interactive.iter().map(|(name, _)| admitted.get(*name).copied()).sum();
        let gpu_summary = self.gate.update(&self.params.gate, gpu, kv, load, capacity, now_ms);

        let p = &self.params;
        let mut decisions = Vec::new();
        for (name, policy) in &self.policies {
            let estimate = estimates.get(name);
            let s = slack(policy, estimate, p.depth_max_age_ms);
            self.last_slacks.insert(name.clone(), s);
            let window_ms = estimate.map_or(0, |e| e.window_ms);
            let state = self.states.get_mut(name).expect("a state for every policy");
            let mut decide = |action: Action, old: f64, new: f64, reason: String| {
                decisions.push(Decision {
                    at_ms: now_ms,
                    class: name.clone(),
                    action,
                    old_rate: old,
                    new_rate: new,
                    slack: s,
                    from_prior: s.from_prior(),
                    estimator_version: s.estimator_version,
                    gpu: gpu_summary.clone(),
                    reason,
                });
            };
            let gate_words = || format!("{}: opportunistic class held at", gpu_summary.words());

            match (state, &policy.budget) {
                (State::Static { published }, Budget::Static { rate }) => {
                    let target = if policy.opportunistic && gpu_summary.gate_closed { 0.0 } else { *rate };
                    if *published != target {
                        let reason = if target < *rate {
                            format!("{} 0/s", gate_words())
                        } else {
                            format!("{}: static rate {rate}/s restored", gpu_summary.words())
                        };
                        decide(Action::Gate, *published, target, reason);
                        *published = target;
                    }
                }
                (State::Adaptive { law, published, gated }, Budget::Adaptive { min_rate, max_rate }) => {
                    let (min_rate, max_rate) = (*min_rate, *max_rate);
                    if policy.opportunistic && gpu_summary.gate_closed {
                        *gated = true;
                        law.rate = min_rate;
                        law.reset_episode();
                        if *published != min_rate {
                            decide(
                                Action::Gate,
                                *published,
                                min_rate,
                                format!("{} min_rate {min_rate}/s", gate_words()),
                            );
                            *published = min_rate;
                        }
                        continue;
                    }
                    let mv = law.step(p, &s, now_ms, dt_s, admitted.get(name).copied(), window_ms, min_rate, max_rate);
                    let old = *published;
                    let new = law.rate;
                    match mv {
                        Move::Cut { why, factor, deficit_ms, base, admitted } if new != old => {
                            decide(
                                Action::Cut,
                                old,
                                new,
                                cut_reason(p, &s, why, factor, deficit_ms, base, admitted, new, min_rate),
                            );
                            *published = new;
                            *gated = false;
                        }
                        Move::Recover { per_s }
                            if (new - old).abs() >= p.publish_step * max_rate || (new == max_rate && old != new) =>
                        {
                            let headroom = p.recover_headroom * s.deadline_ms;
                            let mut reason = format!(
                                "slack {:.0} ms >= headroom {headroom:.0} ms: recover additively at +{per_s:.2}/s per s \
                                 (full speed {:.2}/s per s)",
                                s.slack_ms,
                                max_rate * p.recovery_per_s
                            );
                            if new == max_rate {
                                reason.push_str("; back at max_rate");
                            }
                            if std::mem::take(gated) {
                                reason.push_str("; GPU gate open again");
                            }
                            decide(Action::Recover, old, new, reason);
                            *published = new;
                        }
                        _ => {}
                    }
                }
                _ => unreachable!("states follow their policies"),
            }
        }
        self.last_gpu = Some(gpu_summary);
        decisions
    }
}

fn initial_state(policy: &ClassPolicy) -> State {
    match policy.budget {
        Budget::Adaptive { max_rate, .. } => {
            State::Adaptive { law: Law::new(max_rate), published: max_rate, gated: false }
        }
        Budget::Static { rate } => State::Static { published: rate },
    }
}

#[allow(clippy::too_many_arguments)]
fn cut_reason(
    p: &ControlParams,
    s: &Slack,
    why: CutWhy,
    factor: f64,
    deficit_ms: f64,
    base: f64,
    admitted: Option<f64>,
    new: f64,
    min_rate: f64,
) -> String {
    let mut r = match why {
        CutWhy::Onset => String::new(),
        CutWhy::Worse { last_cut_ms, slack_at_cut } => format!(
            "still negative and {:.0} ms worse than at the cut at {last_cut_ms} ms (slack then {slack_at_cut:.0} ms, \
             margin {:.0} ms), so that cut was not enough: ",
            slack_at_cut - s.slack_ms,
            p.recut_worsening * s.deadline_ms
        ),
        CutWhy::Persistent { since_ms, slack_then } => format!(
            "still negative and no better than {slack_then:.0} ms a whole window after {since_ms} ms, \
             so every sample postdates that: "
        ),
    };
    r.push_str(&format!(
        "slack {:.0} ms < 0: {} + {} + safety {:.0} ms exceed deadline {:.0} ms; cut x{factor:.2}{}",
        s.slack_ms,
        s.queue_term_words(),
        s.service_term_words(),
        s.safety_ms,
        s.deadline_ms,
        match why {
            CutWhy::Worse { .. } => format!(" for the {deficit_ms:.0} ms worsening"),
            _ => String::new(),
        }
    ));
    match admitted {
        Some(a) if a <= base => r.push_str(&format!(" from admitted {a:.1}/s")),
        _ => r.push_str(&format!(" from budget {base:.1}/s")),
    }
    if new <= min_rate {
        r.push_str(&format!("; held at min_rate {min_rate}/s"));
    } else if base * factor < new - 1e-9 {
        r.push_str(&format!("; limited to x{:.2} of the budget in one cut", p.cut_floor));
    }
    r
}

#[cfg(test)]
mod tests;
