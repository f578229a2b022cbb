//! Decisions: one record per budget change, carrying everything that made it,
//! so that "why was this class cut at 09:13:02?" is answered by the log alone.

use std::collections::VecDeque;

use serde::Serialize;

use super::capacity::CapacitySource;
use super::gate::GpuSummary;
use super::law::Move;
use super::params::ControlParams;
use super::plan::CapacityPlan;
use super::slack::Slack;

/// What kind of change a decision made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The budget went down: less capacity, or a smaller allocation.
    Cut,
    /// The budget went up.
    Recover,
    /// Opportunistic class held at its minimum by the GPU gate.
    Gate,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Cut => "cut",
            Action::Recover => "recover",
            Action::Gate => "gate",
        }
    }
}

/// One budget change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// `now` of the tick, ms on the clock the daemon passes to
    /// [`super::Controller::tick`].
    pub at_ms: u64,
    pub class: String,
    pub action: Action,
    /// Tokens (connections) per second.
    pub old_rate: f64,
    pub new_rate: f64,
    /// Slack and every term of it: p95s, predicted wait, sample counts,
    /// sources (window or prior), estimator version.
    pub slack: Slack,
    pub from_prior: bool,
    pub estimator_version: u64,
    pub gpu: GpuSummary,
    /// The shared backend's capacity model at the tick.
    pub capacity: CapacityPlan,
    /// The class's allocation, worker-seconds/s, when capacity binds.
    pub allocation: Option<f64>,
    /// The reason in words, with the numbers.
    pub reason: String,
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "none".into(), |v| format!("{v:.0}"))
}

fn opt2(v: Option<f64>) -> String {
    v.map_or_else(|| "none".into(), |v| format!("{v:.2}"))
}

impl Decision {
    /// Writes the decision as one structured `tracing` line, target
    /// `shedder::decision`.
    pub fn emit(&self) {
        let s = &self.slack;
        tracing::info!(
            target: "shedder::decision",
            at_ms = self.at_ms,
            class = %self.class,
            action = self.action.as_str(),
            old_rate = %format_args!("{:.3}", self.old_rate),
            new_rate = %format_args!("{:.3}", self.new_rate),
            slack_ms = %format_args!("{:.0}", s.slack_ms),
            slack_p10_ms = %format_args!("{:.0}", s.slack_p10_ms),
            deadline_ms = %format_args!("{:.0}", s.deadline_ms),
            queue_age_p95_ms = %format_args!("{:.0}", s.queue_age_p95_ms),
            predicted_wait_ms = %opt(s.predicted_wait_ms),
            service_p95_ms = %format_args!("{:.0}", s.service_p95_ms),
            service_term_ms = %format_args!("{:.0}", s.service_term_ms),
            safety_ms = %format_args!("{:.0}", s.safety_ms),
            stale_inputs = %s.stale.words(),
            p_on_time = %format_args!("{:.3}", s.p_on_time),
            threshold = %format_args!("{:.3}", s.threshold),
            capacity = %format_args!("{:.2}", self.capacity.capacity),
            effective_capacity = %format_args!("{:.2}", self.capacity.effective),
            allocation = %opt2(self.allocation),
            queue_age_samples = s.queue_age_samples,
            service_samples = s.service_samples,
            from_prior = self.from_prior,
            gpu = %self.gpu.words(),
            estimator_version = self.estimator_version,
            reason = %self.reason,
            "budget {} {:.3} -> {:.3}/s",
            self.class,
            self.old_rate,
            self.new_rate,
        );
    }
}

/// The last `capacity` decisions, oldest first: what the control socket
/// returns for "recent decisions".
#[derive(Clone, Debug)]
pub struct DecisionLog {
    capacity: usize,
    entries: VecDeque<Decision>,
}

impl DecisionLog {
    pub fn new(capacity: usize) -> Self {
        DecisionLog { capacity, entries: VecDeque::with_capacity(capacity.min(4096)) }
    }

    pub fn push(&mut self, decision: Decision) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back(decision);
    }

    pub fn extend(&mut self, decisions: impl IntoIterator<Item = Decision>) {
        for d in decisions {
            self.push(d);
        }
    }

    /// The newest `n` (or fewer), oldest first.
    pub fn last(&self, n: usize) -> impl Iterator<Item = &Decision> {
        self.entries.iter().skip(self.entries.len().saturating_sub(n))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Decision> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The capacity model and the shared law's move, in words.
pub(super) fn model_words(plan: &CapacityPlan, s: &Slack, class: &str, law: &Move, p: &ControlParams) -> String {
    let mut w = format!(
        "capacity {:.2} worker-s/s ({}), effective {:.2}, busy {:.2}{}; {class}: on-time chance of a job arriving now \
         {:.2} (threshold {:.2} = {:.2} x best {:.2}), slack {:.0} ms = deadline {:.0} − {} − {} − {}",
        plan.capacity,
        plan.source.map_or("none", CapacitySource::as_str),
        plan.effective,
        plan.busy,
        if plan.backlogged { ", backlogged" } else { "" },
        s.p_on_time,
        s.threshold,
        p.admit_confidence,
        s.best_chance,
        s.slack_ms,
        s.deadline_ms,
        s.queue_term_words(),
        s.service_term_words(),
        s.safety_words()
    );
    match law {
        Move::Cut { factor, base, why, .. } => w.push_str(&format!(
            "; effective capacity cut x{factor:.2} from {base:.2} worker-s/s on {}'s slack, {}",
            plan.pressure_class.as_deref().unwrap_or("?"),
            why.words()
        )),
        Move::Recover { per_s } => {
            w.push_str(&format!("; effective capacity recovering at +{per_s:.2} worker-s/s per s"))
        }
        Move::Spared { worth } => w.push_str(&format!(
            "; no cut on {}'s slack: it would turn away {:.2} on-time jobs/s of lower tiers, more than the {:.2} the \
             wait costs; effective capacity back to the capacity",
            plan.pressure_class.as_deref().unwrap_or("?"),
            worth.costs,
            worth.at_stake
        )),
        Move::Lifted { spare } => w.push_str(&format!(
            "; effective capacity lifted by {spare:.0} workers: each recent start found them free under the cut, \
             and admit refuses no class past the waste tolerance"
        )),
        Move::Stay => {}
    }
    w
}
