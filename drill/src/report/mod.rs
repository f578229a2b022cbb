//! The drill's report, computed from the runs' records and the job plan:
//! per mode and per phase figures against the service-blind bound and the
//! clairvoyant oracle ([`crate::bounds`]), the reference workload's expected
//! evidence, the static-rate finding, and a per-second timeline; written as
//! JSON, an SVG plot and a summary table.
//!
//! Runs record times on the drill's scaled clock. Every figure here is on
//! the workload's declared clock (ms / k, rates × k), so a report from a
//! time-scaled run reads like one from a full run.

mod evidence;
mod figures;
mod quantile;
mod static_rate;
mod summary;
mod svg;
mod timeline;

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

pub use evidence::Evidence;
pub use figures::{FastPathCounts, Latency, PhaseBound, PhaseFigures, share};
pub use static_rate::{StaticClassFinding, StaticFinding};
pub use timeline::TimeBin;

use crate::bounds::{Bounds, PhaseBounds};
use crate::phase::{PerPhase, Phase, Phases};
use crate::plan::plan_jobs;
use crate::record::{JobRecord, RunRecord};
use crate::workload::{Workload, check_time_scale};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrillReport {
    pub seed: u64,
    /// The time scale the runs used; figures are unscaled.
    pub time_scale: f64,
    pub workload: Workload,
    pub phases: Phases,
    /// Both bounds on the plan every mode was offered.
    pub bounds: Bounds,
    pub modes: Vec<ModeReport>,
    pub static_finding: StaticFinding,
    pub evidence: Vec<Evidence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModeReport {
    pub mode: String,
    /// All classes together.
    pub phases: PerPhase<PhaseFigures>,
    /// Each class alone (same order as the workload's), against its part of
    /// the bounds.
    pub classes: Vec<ClassReport>,
    /// When slack_p10 first went below zero, seconds after the injection
    /// began (negative: before it).
    pub slack_p10_negative_after_injection_s: Option<f64>,
    /// The queue counts as drained when its per-second queue_age_p95 is back
    /// under this (see [`drain_threshold_ms`]).
    pub drain_threshold_ms: f64,
    /// Seconds after the injection's removal until it drained.
    pub drained_after_removal_s: Option<f64>,
    /// For `static`: the configured rate per class, connections/s.
    pub static_rates_per_s: Vec<f64>,
    /// With a daemon: how it learnt about the backend (`push`,
    /// `vllm-scrape`, `sglang-scrape`).
    #[serde(default)]
    pub telemetry: Option<String>,
    /// Each tenant alone, over the whole run (none without tenants).
    #[serde(default)]
    pub tenants: Vec<TenantReport>,
    pub timeline: Vec<TimeBin>,
}

/// What one tenant's jobs came to over the whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantReport {
    pub class: String,
    pub tenant: String,
    pub offered: u64,
    pub completed_on_time: u64,
    /// Completed late or unfinished.
    pub late: u64,
    /// Turned away on the last attempt (refused, deferred, 503).
    pub shed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassReport {
    pub class: String,
    pub phases: PerPhase<PhaseFigures>,
}

impl ModeReport {
    pub fn phase(&self, phase: Phase) -> &PhaseFigures {
        self.phases.get(phase)
    }

    pub fn class(&self, name: &str) -> Option<&ClassReport> {
        self.classes.iter().find(|c| c.class == name)
    }
}

impl DrillReport {
    /// `workload` is the declared (unscaled) workload; `time_scale` the `k`
    /// the runs were made at; each run's times are on its scaled clock.
    pub fn build(workload: &Workload, seed: u64, time_scale: f64, runs: &[RunRecord]) -> DrillReport {
        check_time_scale(time_scale).expect("a valid time scale");
        let runs: Vec<RunRecord> = runs.iter().map(|r| on_workload_clock(r, time_scale)).collect();
        let phases = Phases::of(workload);
        let bounds = Bounds::of(workload, &plan_jobs(workload, seed));
        // Every mode gets the same seconds, long enough for the last outcome
        // (a backlog can outlast the run) but no longer than twice the run,
        // whatever a stray record says.
        let last_ms = runs.iter().flat_map(|r| &r.jobs).map(|j| j.finished_ms).fold(phases.end_ms, f64::max);
        let bins = (last_ms.min(2.0 * phases.end_ms) / 1000.0).ceil() as usize;
        let modes: Vec<ModeReport> =
            runs.iter().map(|run| ModeReport::build(workload, &phases, &bounds, run, bins)).collect();
        let static_finding =
            StaticFinding::build(workload, &phases, &bounds, modes.iter().find(|m| m.mode == "static"));
        let evidence = evidence::judge(&phases, &modes);
        DrillReport { seed, time_scale, workload: workload.clone(), phases, bounds, modes, static_finding, evidence }
    }

    pub fn mode(&self, name: &str) -> Option<&ModeReport> {
        self.modes.iter().find(|m| m.mode == name)
    }

    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(self).context("serialising the report")?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
    }

    pub fn read_json(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing the report {}", path.display()))
    }

    pub fn write_svg(&self, path: &Path) -> anyhow::Result<()> {
        svg::write(self, path).with_context(|| format!("writing the plot {}", path.display()))
    }

    pub fn summary_table(&self) -> String {
        summary::table(self)
    }
}

impl ModeReport {
    fn build(workload: &Workload, phases: &Phases, bounds: &Bounds, run: &RunRecord, bins: usize) -> Self {
        let all_classes: Vec<usize> = (0..workload.classes.len()).collect();
        let per_phase = |classes: &[usize], bound_of: &dyn Fn(&PhaseBounds) -> PhaseBound| {
            PerPhase::from_fn(|phase| {
                let jobs: Vec<&JobRecord> = run
                    .jobs
                    .iter()
                    .filter(|j| classes.contains(&j.class) && phases.phase_at(j.arrival_ms) == phase)
                    .collect();
                let (start_ms, end_ms) = phases.span_ms(phase);
                // The last phase's counters run to the last poll.
                let end_ms = if phase == Phase::Recovered { f64::INFINITY } else { end_ms };
                let fast_path = figures::fast_path_over(&run.timeline, classes, start_ms, end_ms);
                PhaseFigures::of(&jobs, phases.duration_s(phase), bound_of(bounds.phase(phase)), fast_path)
            })
        };
        let totals = per_phase(&all_classes, &|b| PhaseBound { blind: b.blind_total, oracle: b.oracle_total as f64 });
        let classes = workload
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| ClassReport {
                class: c.name.clone(),
                phases: per_phase(&[i], &|b| PhaseBound { blind: b.blind[i], oracle: b.oracle[i] as f64 }),
            })
            .collect();
        let tenants = tenant_reports(workload, &run.jobs);
        let timeline = timeline::bin_run(run, bins);
        let injected_s = phases.injected_from_ms / 1000.0;
        let removed_s = phases.recovered_from_ms / 1000.0;
        let drain_threshold_ms = drain_threshold_ms(workload, &totals.steady);
        ModeReport {
            mode: run.mode.clone(),
            slack_p10_negative_after_injection_s: timeline::first_negative_slack_s(&timeline).map(|t| t - injected_s),
            drain_threshold_ms,
            drained_after_removal_s: timeline::drained_after_s(&timeline, removed_s, drain_threshold_ms),
            phases: totals,
            classes,
            static_rates_per_s: run.static_rates.clone(),
            telemetry: run.telemetry.clone(),
            tenants,
            timeline,
        }
    }
}

fn tenant_reports(workload: &Workload, jobs: &[JobRecord]) -> Vec<TenantReport> {
    workload
        .classes
        .iter()
        .enumerate()
        .flat_map(|(c, class)| class.tenants.iter().enumerate().map(move |(t, tenant)| (c, class, t, tenant)))
        .map(|(c, class, t, tenant)| {
            let own: Vec<&JobRecord> = jobs.iter().filter(|j| j.class == c && j.tenant == Some(t)).collect();
            let figures = PhaseFigures::of(&own, 1.0, PhaseBound { blind: 0.0, oracle: 0.0 }, None);
            TenantReport {
                class: class.name.clone(),
                tenant: tenant.name.clone(),
                offered: figures.offered,
                completed_on_time: figures.completed_on_time,
                late: figures.late + figures.unfinished,
                shed: figures.shed,
            }
        })
        .collect()
}

/// The queue has drained when a second's queue_age_p95 is back under twice
/// the steady phase's, or under the shortest class p50 service time if that
/// is larger: a wait shorter than one typical job is no backlog, and it
/// keeps a nearly idle steady phase (p95 ≈ 0) from demanding an empty queue.
pub fn drain_threshold_ms(workload: &Workload, steady: &PhaseFigures) -> f64 {
    let shortest_p50 = workload.classes.iter().map(|c| c.service_time.p50_ms).fold(f64::INFINITY, f64::min);
    (2.0 * steady.queue_age_p95_ms.unwrap_or(0.0)).max(shortest_p50)
}

/// The run with every time divided by `k` and every rate multiplied by it.
fn on_workload_clock(run: &RunRecord, k: f64) -> RunRecord {
    let ms = |t: f64| t / k;
    let mut run = run.clone();
    for job in &mut run.jobs {
        job.arrival_ms = ms(job.arrival_ms);
        job.finished_ms = ms(job.finished_ms);
        job.queue_age_ms = job.queue_age_ms.map(ms);
        job.service_ms = job.service_ms.map(ms);
        job.slack_at_start_ms = job.slack_at_start_ms.map(ms);
    }
    for point in &mut run.timeline {
        point.t_ms = ms(point.t_ms);
        point.budget_rate = point.budget_rate.map(|r| r * k);
        point.slack_ms = point.slack_ms.map(ms);
        point.queue_age_p95_ms = point.queue_age_p95_ms.map(ms);
        point.service_p95_ms = point.service_p95_ms.map(ms);
    }
    for rate in &mut run.static_rates {
        *rate *= k;
    }
    run
}

#[cfg(test)]
mod tests;
