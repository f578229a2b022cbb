//! A short subset of the suite, through the real daemon between two network
//! namespaces: the two-tier workload (48 s at time scale 0.25: about 15 s
//! per mode) in `off`, `enforce` and the `saturation` peer. Needs root.
//!
//! It checks that the figures agree with the raw records, not who wins:
//! every count of the report and of the suite summary is recounted from
//! `runs/<mode>.json`, and the bounds from the job plan.

mod common;

use std::path::{Path, PathBuf};

use shedder_drill::{
    bounds::Bounds,
    phase::{Phase, Phases},
    plan::plan_jobs,
    record::{JobRecord, Outcome, RunRecord},
    report::{DrillReport, PhaseFigures},
    suite::{self, SuiteRow},
    workload::{Tier, Workload},
};

const MODES: [&str; 3] = ["off", "enforce", "saturation"];
const SEED: u64 = 3;
const K: f64 = 0.25;

/// A scratch directory, removed when the test ends however it ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_suite_figures_agree_with_the_raw_records() {
    let scratch = Scratch(std::env::temp_dir().join(format!("shedder-drill-suite-test-{}", std::process::id())));
    let out = scratch.0.join("out");
    std::fs::create_dir_all(&scratch.0).unwrap();
    let workload_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/two-tiers.toml");
    let suite_path = scratch.0.join("suite.toml");
    let suite_text = format!("[[run]]\nname = \"two-tiers\"\nworkload = {:?}\n", workload_path.display().to_string());
    std::fs::write(&suite_path, suite_text).unwrap();

    let stdout = common::run_drill([
        "--suite".as_ref(),
        suite_path.as_os_str(),
        "--modes".as_ref(),
        MODES.join(",").as_ref(),
        "--time-scale".as_ref(),
        K.to_string().as_ref(),
        "--seed".as_ref(),
        SEED.to_string().as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    assert!(stdout.contains("% oracle") && stdout.contains("two-tiers"), "no summary table:\n{stdout}");

    let workload = Workload::load(&workload_path).unwrap();
    let dir = out.join("two-tiers");
    let report = DrillReport::read_json(&dir.join("report.json")).expect("the workload's report");
    assert!(dir.join("drill.svg").is_file() && out.join("suite.svg").is_file());

    // The bounds are the plan's.
    let plan = plan_jobs(&workload, SEED);
    assert_eq!(report.bounds, Bounds::of(&workload, &plan));
    assert_eq!(report.bounds.run.offered.iter().sum::<u64>(), plan.len() as u64);

    let rows = suite::read_json(&out.join("suite.json")).expect("the suite summary");
    assert_eq!(rows.iter().map(|r| r.mode.as_str()).collect::<Vec<_>>(), MODES);
    for mode in MODES {
        let text = std::fs::read_to_string(dir.join("runs").join(format!("{mode}.json"))).unwrap();
        let record: RunRecord = serde_json::from_str(&text).unwrap();
        // Every planned job has exactly one record.
        assert_eq!(record.jobs.len(), plan.len(), "{mode}: a record per planned job");
        let jobs = on_workload_clock(&record.jobs);
        let phases = Phases::of(&workload);
        let figures = report.mode(mode).unwrap_or_else(|| panic!("no {mode} in the report"));
        for phase in Phase::ALL {
            let in_phase = |j: &&JobRecord| phases.phase_at(j.arrival_ms) == phase;
            recount(mode, phase, "all", figures.phase(phase), jobs.iter().filter(in_phase));
            for (c, class) in workload.classes.iter().enumerate() {
                let class_figures = figures.class(&class.name).unwrap().phases.get(phase);
                recount(mode, phase, &class.name, class_figures, jobs.iter().filter(in_phase).filter(|j| j.class == c));
            }
        }
        let row = rows.iter().find(|r| r.mode == mode).unwrap();
        check_row(row, &workload, &report, &jobs);
    }
}

/// The records' times are on the run's clock; the report's on the workload's.
fn on_workload_clock(jobs: &[JobRecord]) -> Vec<JobRecord> {
    jobs.iter()
        .cloned()
        .map(|mut j| {
            j.arrival_ms /= K;
            j.finished_ms /= K;
            j
        })
        .collect()
}

fn count<'a>(jobs: impl IntoIterator<Item = &'a JobRecord>, outcome: Outcome) -> u64 {
    jobs.into_iter().filter(|j| j.outcome == outcome).count() as u64
}

fn recount<'a>(mode: &str, phase: Phase, who: &str, f: &PhaseFigures, jobs: impl Iterator<Item = &'a JobRecord>) {
    let jobs: Vec<&JobRecord> = jobs.collect();
    let c = |o| count(jobs.iter().copied(), o);
    let expected = (
        jobs.len() as u64,
        c(Outcome::OnTime),
        c(Outcome::Late),
        c(Outcome::Unfinished),
        c(Outcome::Rejected),
        c(Outcome::RejectedDeadline),
        c(Outcome::Overloaded),
        c(Outcome::DeferredTimedOut) + c(Outcome::Degraded),
        c(Outcome::Failed),
    );
    let reported = (
        f.offered,
        f.completed_on_time,
        f.late,
        f.unfinished,
        f.rejected,
        f.rejected_deadline,
        f.overloaded,
        f.deferred_timed_out + f.degraded,
        f.failed,
    );
    assert_eq!(reported, expected, "{mode} {who} {}: report vs records", phase.name());
    let shares = f.completed_on_time as f64 / f.bound_per_s / f.duration_s;
    assert!(f.bound_per_s == 0.0 || (shares - f.share_of_bound).abs() < 1e-9, "{mode} {who}: share of the bound");
}

fn check_row(row: &SuiteRow, workload: &Workload, report: &DrillReport, jobs: &[JobRecord]) {
    let on_time = count(jobs, Outcome::OnTime);
    let admitted = on_time + count(jobs, Outcome::Late) + count(jobs, Outcome::Unfinished);
    let late = count(jobs, Outcome::Late) + count(jobs, Outcome::Unfinished);
    let bounds = &report.bounds.run;
    assert_eq!((row.offered, row.on_time, row.oracle), (jobs.len() as u64, on_time, bounds.oracle_total));
    assert_eq!((row.admitted, row.late), (admitted, late), "{row:?}");
    assert!((row.share_of_oracle - on_time as f64 / bounds.oracle_total as f64).abs() < 1e-12, "{row:?}");
    assert!((row.share_of_blind - on_time as f64 / bounds.blind_total).abs() < 1e-12, "{row:?}");
    assert_eq!(row.late_share, (admitted > 0).then(|| late as f64 / admitted as f64), "{row:?}");
    let critical = workload.classes.iter().position(|c| c.tier == Tier::Critical).unwrap();
    let tier = row.critical.expect("two-tiers has a critical class");
    let critical_jobs: Vec<&JobRecord> = jobs.iter().filter(|j| j.class == critical).collect();
    assert_eq!(tier.offered, critical_jobs.len() as u64);
    assert_eq!(tier.on_time, count(critical_jobs.iter().copied(), Outcome::OnTime));
    assert!((tier.share_of_blind - tier.on_time as f64 / bounds.blind_critical_first).abs() < 1e-12, "{tier:?}");
    // No bound is beaten by more than the phases' edges allow: the oracle
    // is never below the blind bound.
    assert!(bounds.oracle_total as f64 >= bounds.blind_total - 1.0);
}
