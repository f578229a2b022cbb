//! The report on a small synthetic drill whose figures can be checked by
//! hand: 10 jobs/s for 30 s, the tail injected from 10 s to 20 s, four modes
//! scripted second by second, recorded at time scale 0.5.

use super::*;
use crate::record::{Outcome, TimelinePoint};

const K: f64 = 0.5;

/// 4 workers; E[service] = 100 · e^(0.66791²/2) = 124.99 ms, so the steady
/// phase's bound is about what its plan offers and the injected one about
/// 4 / (0.5 · 0.125 + 0.5 · 1) = 7.11/s (the plan's own draws decide).
const WORKLOAD: &str = r#"
duration_seconds = 30
worker_count = 4

[injection]
after_seconds = 10
removed_after_seconds = 20
affected_fraction = 0.5

[[class]]
name = "api"
arrival_rate = 10
deadline_ms = 1000
service_time = { p50_ms = 100, p95_ms = 300, injected_tail_ms = 1000 }
action = "reject"
port = 8000
static_rate = 8
"#;

fn workload() -> Workload {
    Workload::from_toml_str(WORKLOAD).unwrap()
}

/// What happened to job `i` (0..10) of second `s`: outcome, ms from arrival
/// to the outcome, queue age, slack at start; on the workload's clock.
type Script = fn(s: u32, i: u32) -> (Outcome, f64, Option<f64>, Option<f64>);

const ON_TIME: (Outcome, f64, Option<f64>, Option<f64>) = (Outcome::OnTime, 200.0, Some(20.0), Some(600.0));

/// Off (and observe): in the injection 4 jobs a second finish on time and 6
/// late, all after 400 ms in the queue; the backlog lasts until 25 s.
fn unshed(s: u32, i: u32) -> (Outcome, f64, Option<f64>, Option<f64>) {
    match s {
        10..20 if i < 4 => (Outcome::OnTime, 800.0, Some(400.0), Some(100.0)),
        10..20 => (Outcome::Late, 2500.0, Some(400.0), Some(-400.0)),
        20..25 => (Outcome::Late, 1500.0, Some(400.0), Some(-100.0)),
        _ => ON_TIME,
    }
}

/// Enforce: in the injection 7 a second on time, 3 refused: by RST in even
/// seconds, by the backend's deadline admission in odd ones.
fn enforce(s: u32, i: u32) -> (Outcome, f64, Option<f64>, Option<f64>) {
    match s {
        10..20 if i < 7 => (Outcome::OnTime, 300.0, Some(50.0), Some(200.0)),
        10..20 if s.is_multiple_of(2) => (Outcome::Rejected, 1.0, None, None),
        10..20 => (Outcome::RejectedDeadline, 10.0, None, None),
        _ => ON_TIME,
    }
}

/// Static at 8/s: 2 a second refused throughout; of the 8 admitted in the
/// injection, 4 are late.
fn static_rate(s: u32, i: u32) -> (Outcome, f64, Option<f64>, Option<f64>) {
    match (s, i) {
        (_, 8..) => (Outcome::Rejected, 1.0, None, None),
        (10..20, 4..) => (Outcome::Late, 2500.0, Some(400.0), Some(-400.0)),
        (10..20, _) => (Outcome::OnTime, 800.0, Some(400.0), Some(100.0)),
        _ => ON_TIME,
    }
}

/// Jobs at `s` s + `i` · 50 ms, recorded on the scaled clock.
fn run(mode: &str, script: Script) -> RunRecord {
    let jobs = (0..30)
        .flat_map(|s| (0..10).map(move |i| (s, i)))
        .map(|(s, i)| {
            let (outcome, took_ms, queue_age_ms, slack) = script(s, i);
            let arrival_ms = f64::from(s) * 1000.0 + f64::from(i) * 50.0;
            JobRecord {
                class: 0,
                arrival_ms: arrival_ms * K,
                finished_ms: (arrival_ms + took_ms) * K,
                outcome,
                attempts: 1,
                queue_age_ms: queue_age_ms.map(|q| q * K),
                service_ms: None,
                slack_at_start_ms: slack.map(|v| v * K),
                injected: false,
                tenant: None,
                hedged: false,
            }
        })
        .collect();
    RunRecord { mode: mode.into(), jobs, timeline: Vec::new(), static_rates: Vec::new(), telemetry: None }
}

/// A poll at the end of every second: the budget, and counters grown by
/// `admitted`, `rejected` and `would_shed` per second in the injection (10
/// admitted a second otherwise).
fn polls(budget: f64, admitted: u64, rejected: u64, would_shed: u64) -> Vec<TimelinePoint> {
    let mut counters = (0, 0, 0);
    (0u32..30)
        .map(|s| {
            let injected = (10..20).contains(&s);
            let (a, r, w) =
                if injected { (admitted, rejected * u64::from(s.is_multiple_of(2)), would_shed) } else { (10, 0, 0) };
            counters = (counters.0 + a, counters.1 + r, counters.2 + w);
            TimelinePoint {
                t_ms: (f64::from(s) * 1000.0 + 999.0) * K,
                class: 0,
                budget_rate: Some(if injected { budget } else { 10.0 } / K),
                slack_ms: None,
                queue_age_p95_ms: None,
                service_p95_ms: None,
                admitted: counters.0,
                dropped: 0,
                rejected: counters.1,
                marked: 0,
                would_shed: counters.2,
            }
        })
        .collect()
}

fn runs() -> Vec<RunRecord> {
    let mut observe = run("observe", unshed);
    observe.timeline = polls(7.0, 10, 0, 3);
    let mut enforced = run("enforce", enforce);
    enforced.timeline = polls(7.0, 7, 3, 0);
    let mut fixed = run("static", static_rate);
    fixed.static_rates = vec![8.0 / K];
    vec![run("off", unshed), observe, enforced, fixed]
}

fn report() -> DrillReport {
    DrillReport::build(&workload(), 42, K, &runs())
}

fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() < 1e-3
}

/// The blind bound of a phase of the report's plan, jobs/s.
fn blind_per_s(report: &DrillReport, phase: Phase) -> f64 {
    report.bounds.phase(phase).blind_total / report.phases.duration_s(phase)
}

#[test]
fn phase_figures_are_counted_by_arrival_on_the_workload_clock() {
    let report = report();
    let off = report.mode("off").unwrap();
    let steady = off.phase(Phase::Steady);
    assert_eq!(
        (steady.offered, steady.completed_on_time, steady.duration_s, steady.on_time_per_s),
        (100, 100, 10.0, 10.0)
    );
    assert!(close(steady.share_of_bound, 10.0 / blind_per_s(&report, Phase::Steady)));
    assert!(close(steady.share_of_oracle, 100.0 / report.bounds.phase(Phase::Steady).oracle_total as f64));
    assert_eq!(steady.latency, Some(Latency { p50_ms: 200.0, p95_ms: 200.0, p99_ms: 200.0 }));
    assert_eq!(steady.queue_age_p95_ms, Some(20.0));
    let injected = off.phase(Phase::Injected);
    assert_eq!((injected.completed_on_time, injected.late, injected.shed), (40, 60, 0));
    assert_eq!(injected.late_share_of_admitted, Some(0.6));
    // 40 of 100 completions took 800 ms, 60 took 2500 ms.
    assert_eq!(injected.latency.map(|l| (l.p50_ms, l.p95_ms)), Some((2500.0, 2500.0)));
    let bound = blind_per_s(&report, Phase::Injected);
    assert!((6.0..8.5).contains(&bound), "the injected bound {bound}/s is near 7.11/s");
    assert!(close(injected.bound_per_s, bound), "{}", injected.bound_per_s);
    assert!(close(injected.share_of_bound, 4.0 / bound), "{}", injected.share_of_bound);
    let recovered = off.phase(Phase::Recovered);
    assert_eq!((recovered.completed_on_time, recovered.late, recovered.on_time_per_s), (50, 50, 5.0));
    assert_eq!(off.phase(Phase::Injected).fast_path, None);
}

#[test]
fn enforce_refusals_and_fast_path_counters() {
    let report = report();
    let enforce = report.mode("enforce").unwrap();
    let injected = enforce.phase(Phase::Injected);
    assert_eq!((injected.completed_on_time, injected.on_time_per_s, injected.late), (70, 7.0, 0));
    assert_eq!((injected.rejected, injected.rejected_deadline, injected.shed), (15, 15, 30));
    assert_eq!(injected.rejected_deadline_per_s(), 1.5);
    let counted = injected.fast_path.unwrap();
    assert_eq!((counted.admitted, counted.rejected, counted.shed()), (70, 15, 15));
    assert_eq!(enforce.phase(Phase::Steady).fast_path.unwrap().admitted, 100);
    let observe = report.mode("observe").unwrap().phase(Phase::Injected).fast_path.unwrap();
    assert_eq!((observe.shed(), observe.would_shed), (0, 30));
    let api = enforce.class("api").unwrap();
    assert_eq!(api.phases.get(Phase::Injected), injected);
}

#[test]
fn slack_crossing_and_drain_are_read_per_second() {
    let report = report();
    let off = report.mode("off").unwrap();
    assert_eq!(off.slack_p10_negative_after_injection_s, Some(0.0));
    // Twice the steady 20 ms is below the 100 ms p50: the p50 is the bar.
    assert_eq!(off.drain_threshold_ms, 100.0);
    assert_eq!(off.drained_after_removal_s, Some(5.0));
    let enforce = report.mode("enforce").unwrap();
    assert_eq!((enforce.slack_p10_negative_after_injection_s, enforce.drained_after_removal_s), (None, Some(0.0)));
    // Budgets and seconds are unscaled: 30 one-second bins, 7/s in the injection.
    assert_eq!(enforce.timeline.len(), 30);
    assert_eq!(enforce.timeline[15].budget_per_s, Some(7.0));
    assert_eq!(enforce.timeline[5].budget_per_s, Some(10.0));
    assert_eq!((enforce.timeline[15].on_time, enforce.timeline[15].turned_away), (7, 3));
}

#[test]
fn the_static_finding_sets_the_configured_rate_against_each_phase() {
    let report = report();
    let finding = &report.static_finding.classes[0];
    let (steady, injected) = (blind_per_s(&report, Phase::Steady), blind_per_s(&report, Phase::Injected));
    assert_eq!(finding.configured_per_s, 8.0);
    assert!(close(finding.right_steady_per_s, steady) && close(finding.right_injected_per_s, injected));
    assert!(close(finding.steady_turned_away, 1.0 - 8.0 / steady));
    assert!(close(finding.injected_overadmission, 8.0 / injected));
    let measured = report.static_finding.measured_share_of_bound.as_ref().unwrap();
    assert!(close(measured.steady, 8.0 / steady));
    assert!(close(measured.injected, 4.0 / injected));
    let lines = report.static_finding.lines().join("\n");
    let expected = format!("static 8.0/s for api: turns away {:.0}% of the steady work", (1.0 - 8.0 / steady) * 100.0);
    assert!(lines.contains(&expected), "{lines}");
    let expected = format!("what the injected phase can finish (right rate {injected:.1}/s)");
    assert!(lines.contains(&expected), "{lines}");
}

#[test]
fn every_expected_evidence_holds_on_the_scripted_drill() {
    let report = report();
    let verdicts: Vec<_> = report.evidence.iter().map(|e| (e.judged_on.as_deref().unwrap(), e.holds)).collect();
    assert_eq!(
        verdicts,
        [
            ("off", Some(true)),
            ("off", Some(true)),
            ("enforce", Some(true)),
            ("enforce", Some(true)),
            ("enforce", Some(true))
        ]
    );
    let figures: Vec<&str> = report.evidence.iter().map(|e| e.figure.as_str()).collect();
    assert!(figures[0].starts_with("off: 20 ms steady -> 400 ms injected"), "{}", figures[0]);
    assert!(figures[1].contains("off: +0 s") && figures[1].contains("enforce: never"), "{}", figures[1]);
    assert!(figures[2].contains("0.00/s steady -> 1.50/s injected (15 in the injected phase)"), "{}", figures[2]);
    // Off's late jobs from 12.5 s to 17.5 s finish in 15..20 s: 30 late, 20 on time.
    assert!(figures[3].contains("enforce: 0.00 late/s, 0.0%") && figures[3].contains("off: 6.00 late/s, 60.0%"));
    assert!(figures[4].contains("off: 5 s") && figures[4].contains("enforce: 0 s"), "{}", figures[4]);
}

#[test]
fn evidence_that_needs_enforce_is_not_judged_without_it() {
    let runs: Vec<RunRecord> = runs().into_iter().filter(|r| r.mode != "enforce").collect();
    let report = DrillReport::build(&workload(), 42, K, &runs);
    let not_judged: Vec<&str> =
        report.evidence.iter().filter(|e| e.holds.is_none()).map(|e| e.expectation.as_str()).collect();
    assert_eq!(not_judged.len(), 2, "{not_judged:?}");
    assert!(not_judged.iter().all(|e| e.contains("enforce")));
}

#[test]
fn a_report_without_a_static_run_takes_the_workload_rate() {
    let report = DrillReport::build(&workload(), 42, K, &runs()[..1]);
    assert_eq!(report.static_finding.classes[0].configured_per_s, 8.0);
    assert_eq!(report.static_finding.measured_share_of_bound, None);
}

#[test]
fn the_summary_table_has_a_row_per_mode_and_phase_and_the_verdicts() {
    let table = report().summary_table();
    let rows: Vec<&str> =
        table.lines().filter(|l| Phase::ALL.iter().any(|p| l.split_whitespace().nth(1) == Some(p.name()))).collect();
    assert_eq!(rows.len(), 12, "{table}");
    let enforce_injected = rows.iter().find(|r| r.split_whitespace().take(2).eq(["enforce", "injected"])).unwrap();
    let cells: Vec<&str> = enforce_injected.split_whitespace().collect();
    // offered, on-time, on-time/s, % bound, late%, unfinished, rejected, 503-dl.
    let percent = format!("{:.0}", 700.0 / blind_per_s(&report(), Phase::Injected));
    assert_eq!(&cells[2..10], ["100", "70", "7.00", &percent, "0.0", "0", "15", "15"], "{enforce_injected}");
    assert!(
        table.contains("service-blind bound per second: steady ") && table.contains("clairvoyant oracle per second: "),
        "{table}"
    );
    assert_eq!(table.matches("\n  yes  ").count(), 5, "{table}");
    assert!(table.contains("static rates 8.0/s"), "{table}");
}

/// Two classes at time scale 1: interactive always on time, batch (the one
/// with the tail) refused half the time while the tail is injected.
#[test]
fn each_class_is_reported_against_its_share_of_the_bound() {
    let w = Workload::from_toml_str(include_str!("../../workloads/two-classes.toml")).unwrap();
    let job = |class: usize, arrival_ms: f64, outcome: Outcome| JobRecord {
        class,
        arrival_ms,
        finished_ms: arrival_ms + 100.0,
        outcome,
        attempts: 1,
        queue_age_ms: Some(10.0),
        service_ms: Some(90.0),
        slack_at_start_ms: Some(500.0),
        injected: false,
        tenant: None,
        hedged: false,
    };
    let jobs = (0..180 * 25)
        .map(|n| {
            // 25 a second: every fifth is batch.
            let arrival_ms = f64::from(n) * 40.0;
            let (class, injected) = (usize::from(n % 5 == 4), (60_000.0..120_000.0).contains(&arrival_ms));
            let refused = class == 1 && injected && n % 10 == 4;
            job(class, arrival_ms, if refused { Outcome::Rejected } else { Outcome::OnTime })
        })
        .collect();
    let run =
        RunRecord { mode: "enforce".into(), jobs, timeline: Vec::new(), static_rates: Vec::new(), telemetry: None };
    let report = DrillReport::build(&w, 1, 1.0, &[run]);
    let enforce = report.mode("enforce").unwrap();
    let interactive = enforce.class("interactive").unwrap().phases.get(Phase::Injected);
    assert_eq!((interactive.offered, interactive.completed_on_time, interactive.shed), (1200, 1200, 0));
    // Interactive is the class with the most on-time jobs per worker-second:
    // the blind bound gives it all it offers.
    let bounds = report.bounds.phase(Phase::Injected);
    assert!(close(interactive.bound_per_s, bounds.blind[0] / 60.0));
    assert!(close(bounds.blind[0], bounds.can_finish[0] as f64), "{bounds:?}");
    assert!(close(interactive.share_of_bound, 1200.0 / bounds.blind[0]));
    let batch = enforce.class("batch").unwrap().phases.get(Phase::Injected);
    assert_eq!((batch.offered, batch.completed_on_time, batch.rejected), (300, 150, 150));
    assert_eq!(enforce.phase(Phase::Injected).completed_on_time, 1350);
    let table = report.summary_table();
    assert!(table.lines().any(|l| l.starts_with("enforce/batch") && l.contains("injected")), "{table}");
}

/// A file in the temporary directory, unique to this process; its parent
/// is the temporary directory itself, so removing the file leaves nothing.
fn scratch(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("shedder-drill-{}-{name}", std::process::id()))
}

#[test]
fn the_json_reads_back_as_the_same_report() {
    let report = report();
    let path = scratch("report.json");
    report.write_json(&path).unwrap();
    assert_eq!(DrillReport::read_json(&path).unwrap(), report);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(json["modes"][2]["phases"]["injected"]["completed_on_time"], 70);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn the_svg_has_every_panel_phase_and_mode() {
    let path = scratch("report.svg");
    report().write_svg(&path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{}", &svg[..200]);
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count(), "every text element closes");
    for text in ["steady", "injected", "recovered", "off", "observe", "enforce", "static", "blind bound"] {
        assert!(svg.contains(&format!("\n{text}\n</text>")), "no label {text}");
    }
    for text in ["Completed on time", "Completed late", "Queue age p95", "Budget", "Turned away", "jobs/s", "seconds"] {
        assert!(svg.contains(text), "no {text}");
    }
    assert!(svg.matches("<polyline").count() >= 4 * 5, "a line per mode and panel");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn each_tenant_is_counted_on_its_own() {
    let text = WORKLOAD.replace(
        "arrival_rate = 10",
        "tenant = [{ name = \"quiet\", arrival_rate = 2 }, { name = \"noisy\", arrival_rate = 8 }]",
    );
    let w = Workload::from_toml_str(&text).unwrap();
    let job = |tenant: usize, outcome: Outcome| JobRecord {
        class: 0,
        arrival_ms: 0.0,
        finished_ms: 100.0,
        outcome,
        attempts: 1,
        queue_age_ms: None,
        service_ms: None,
        slack_at_start_ms: None,
        injected: false,
        tenant: Some(tenant),
        hedged: false,
    };
    let jobs = vec![
        job(0, Outcome::OnTime),
        job(0, Outcome::OnTime),
        job(1, Outcome::OnTime),
        job(1, Outcome::Rejected),
        job(1, Outcome::Late),
        job(1, Outcome::Unfinished),
    ];
    let run = RunRecord { mode: "off".into(), jobs, timeline: Vec::new(), static_rates: Vec::new(), telemetry: None };
    let report = DrillReport::build(&w, 1, 1.0, &[run]);
    let tenants: Vec<_> = report.modes[0]
        .tenants
        .iter()
        .map(|t| (t.tenant.as_str(), t.offered, t.completed_on_time, t.late, t.shed))
        .collect();
    assert_eq!(tenants, [("quiet", 2, 2, 0, 0), ("noisy", 4, 1, 2, 1)]);
    assert!(report.summary_table().contains("off/api/noisy: 1 on time of 4 offered (25%), 2 late, 1 shed"));
}
