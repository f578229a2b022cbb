//! The reference workload's expected evidence, each judged on a figure of the runs:
//! queue_age_p95 rises, slack_p10 crosses zero, reject_deadline increases,
//! completion_late stops growing, and the queue drains after the injection
//! is removed.
//!
//! The two signals are judged on a mode that sheds nothing (`off`, else
//! `observe`), where the injection shows undisturbed; what admission does
//! about them (refusals, no more late completions, the queue drained after
//! the removal) on `enforce`. Every mode's figure is shown alongside: that
//! `off`'s backlog may outlive the run is part of the comparison.

use serde::{Deserialize, Serialize};

use super::ModeReport;
use super::timeline::{late_per_s_between, late_share_between};
use crate::phase::{Phase, Phases};

/// "Stops growing": in the second half of the injection, fewer than this
/// share of enforce's completions are late (the goal for admitted
/// jobs).
const LATE_SHARE_STOPPED: f64 = 0.01;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub expectation: String,
    /// The mode the verdict is on; `None` when no mode could show it.
    pub judged_on: Option<String>,
    pub figure: String,
    /// `None`: not judged (the mode it needs did not run).
    pub holds: Option<bool>,
}

pub fn judge(phases: &Phases, modes: &[ModeReport]) -> Vec<Evidence> {
    let find = |name: &str| modes.iter().find(|m| m.mode == name);
    let reference = find("off").or_else(|| find("observe")).or(modes.first());
    let enforce = find("enforce");
    vec![
        queue_age_rises(reference, modes),
        slack_crosses_zero(reference, modes),
        reject_deadline_increases(enforce),
        late_stops_growing(phases, enforce, find("off")),
        queue_drains(enforce.or(reference), modes),
    ]
}

fn verdict(
    expectation: &str,
    mode: Option<&ModeReport>,
    figure: String,
    holds: impl Fn(&ModeReport) -> bool,
) -> Evidence {
    Evidence {
        expectation: expectation.into(),
        judged_on: mode.map(|m| m.mode.clone()),
        figure,
        holds: mode.map(holds),
    }
}

/// `off: <value>; observe: <value>; …`
fn every_mode(modes: &[ModeReport], value: impl Fn(&ModeReport) -> String) -> String {
    modes.iter().map(|m| format!("{}: {}", m.mode, value(m))).collect::<Vec<_>>().join("; ")
}

fn ms(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.0} ms"))
}

fn seconds(value: Option<f64>) -> String {
    value.map_or("never".into(), |v| format!("{v:+.0} s"))
}

fn queue_age_rises(reference: Option<&ModeReport>, modes: &[ModeReport]) -> Evidence {
    let figure = every_mode(modes, |m| {
        format!(
            "{} steady -> {} injected",
            ms(m.phase(Phase::Steady).queue_age_p95_ms),
            ms(m.phase(Phase::Injected).queue_age_p95_ms)
        )
    });
    verdict("queue_age_p95 rises (at least doubles) when the tail is injected", reference, figure, |m| {
        let steady = m.phase(Phase::Steady).queue_age_p95_ms.unwrap_or(0.0);
        m.phase(Phase::Injected).queue_age_p95_ms.is_some_and(|injected| injected > 2.0 * steady)
    })
}

fn slack_crosses_zero(reference: Option<&ModeReport>, modes: &[ModeReport]) -> Evidence {
    let figure = format!(
        "first second with slack_p10 < 0, from the injection: {}",
        every_mode(modes, |m| seconds(m.slack_p10_negative_after_injection_s))
    );
    verdict("slack_p10 crosses zero after the injection", reference, figure, |m| {
        m.slack_p10_negative_after_injection_s.is_some_and(|t| t >= 0.0)
    })
}

fn reject_deadline_increases(enforce: Option<&ModeReport>) -> Evidence {
    let figure = enforce.map_or("enforce did not run".into(), |m| {
        let (steady, injected) = (m.phase(Phase::Steady), m.phase(Phase::Injected));
        format!(
            "enforce: {:.2}/s steady -> {:.2}/s injected ({} in the injected phase)",
            steady.rejected_deadline_per_s(),
            injected.rejected_deadline_per_s(),
            injected.rejected_deadline
        )
    });
    verdict("reject_deadline increases under enforce", enforce, figure, |m| {
        m.phase(Phase::Injected).rejected_deadline_per_s() > m.phase(Phase::Steady).rejected_deadline_per_s()
    })
}

fn late_stops_growing(phases: &Phases, enforce: Option<&ModeReport>, off: Option<&ModeReport>) -> Evidence {
    let (start_s, end_s) = (phases.injected_from_ms / 1000.0, phases.recovered_from_ms / 1000.0);
    let second_half = (start_s + end_s) / 2.0;
    let late_share = |m: &ModeReport| late_share_between(&m.timeline, second_half, end_s);
    let describe = |m: &ModeReport| {
        format!(
            "{}: {:.2} late/s, {} of completions late",
            m.mode,
            late_per_s_between(&m.timeline, second_half, end_s),
            late_share(m).map_or("-".into(), |s| format!("{:.1}%", s * 100.0))
        )
    };
    let figure = match (enforce, off) {
        (None, _) => "enforce did not run".into(),
        (Some(e), None) => format!("second half of the injection: {}", describe(e)),
        (Some(e), Some(o)) => format!("second half of the injection: {}; {}", describe(e), describe(o)),
    };
    let expectation = format!(
        "completion_late stops growing under enforce (under {:.0}% late in the injection's second half)",
        LATE_SHARE_STOPPED * 100.0
    );
    verdict(&expectation, enforce, figure, |m| late_share(m).is_some_and(|s| s < LATE_SHARE_STOPPED))
}

fn queue_drains(reference: Option<&ModeReport>, modes: &[ModeReport]) -> Evidence {
    let figure = format!(
        "from the removal until a second's queue_age_p95 is back under max(2x steady, p50 service): {}",
        every_mode(modes, |m| m.drained_after_removal_s.map_or("not drained".into(), |s| format!("{s:.0} s")))
    );
    verdict("the queue drains after the injection is removed", reference, figure, |m| {
        m.drained_after_removal_s.is_some()
    })
}
