//! The static mode's finding: no single static rate is right in both the
//! steady and the injected phase. The right rate is what the phase can
//! finish on time, the class's part of the service-blind bound: all that
//! is offered while steady, far less once the tail is injected.

use serde::{Deserialize, Serialize};

use super::ModeReport;
use crate::bounds::Bounds;
use crate::phase::{PerPhase, Phase, Phases};
use crate::workload::Workload;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaticFinding {
    pub classes: Vec<StaticClassFinding>,
    /// The static mode's on-time rate as a share of the bound, if it ran.
    pub measured_share_of_bound: Option<PerPhase<f64>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaticClassFinding {
    pub class: String,
    /// The static mode's rate: as the run configured it, else the
    /// workload's `static_rate`.
    pub configured_per_s: f64,
    pub right_steady_per_s: f64,
    pub right_injected_per_s: f64,
    /// Share of the steady work that could finish on time which the rate
    /// turns away.
    pub steady_turned_away: f64,
    /// How many times what the injected phase can finish the rate admits.
    pub injected_overadmission: f64,
}

impl StaticFinding {
    pub fn build(workload: &Workload, phases: &Phases, bounds: &Bounds, static_mode: Option<&ModeReport>) -> Self {
        let ran = static_mode.map(|m| &m.static_rates_per_s).filter(|r| r.len() == workload.classes.len());
        let classes = workload
            .classes
            .iter()
            .enumerate()
            .map(|(i, class)| {
                let configured_per_s = ran.map_or(class.static_rate, |rates| rates[i]);
                let right_per_s = |phase: Phase| bounds.phase(phase).blind[i] / phases.duration_s(phase);
                let right_steady_per_s = right_per_s(Phase::Steady);
                let right_injected_per_s = right_per_s(Phase::Injected);
                StaticClassFinding {
                    class: class.name.clone(),
                    configured_per_s,
                    right_steady_per_s,
                    right_injected_per_s,
                    steady_turned_away: (1.0 - configured_per_s / right_steady_per_s).max(0.0),
                    injected_overadmission: configured_per_s / right_injected_per_s,
                }
            })
            .collect();
        let measured_share_of_bound = static_mode.map(|m| PerPhase::from_fn(|p| m.phase(p).share_of_bound));
        Self { classes, measured_share_of_bound }
    }

    /// The finding in words, one line per class, then what the run showed.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .classes
            .iter()
            .map(|c| {
                format!(
                    "static {:.1}/s for {}: turns away {:.0}% of the steady work that could finish on time \
                     (right rate {:.1}/s); admits {:.1}x what the injected phase can finish (right rate {:.1}/s)",
                    c.configured_per_s,
                    c.class,
                    c.steady_turned_away * 100.0,
                    c.right_steady_per_s,
                    c.injected_overadmission,
                    c.right_injected_per_s,
                )
            })
            .collect();
        if let Some(shares) = &self.measured_share_of_bound {
            lines.push(format!(
                "static mode on time: {:.0}% of the bound when steady, {:.0}% injected, {:.0}% recovered",
                shares.get(Phase::Steady) * 100.0,
                shares.get(Phase::Injected) * 100.0,
                shares.get(Phase::Recovered) * 100.0,
            ));
        }
        lines
    }
}
