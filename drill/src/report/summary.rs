//! The summary table printed at the end of a drill: one row per mode and
//! phase, then each mode's timings, the static finding and the evidence.

use std::fmt::Write;

use super::{DrillReport, ModeReport, PhaseFigures};
use crate::phase::Phase;

pub fn table(report: &DrillReport) -> String {
    let mut out = String::new();
    let classes: Vec<&str> = report.workload.classes.iter().map(|c| c.name.as_str()).collect();
    // Wide enough for the longest row name: a mode, or mode/class.
    let several_classes = classes.len() > 1;
    let longest_class = if several_classes { classes.iter().map(|c| c.len() + 1).max().unwrap_or(0) } else { 0 };
    let width = report.modes.iter().map(|m| m.mode.len() + longest_class).max().unwrap_or(0).max("mode".len());
    let _ = writeln!(
        out,
        "shedder drill: {} (seed {}, time scale {}); figures on the workload's clock",
        classes.join(" + "),
        report.seed,
        report.time_scale
    );
    let with_daemon: Vec<String> =
        report.modes.iter().filter_map(|m| m.telemetry.as_ref().map(|t| format!("{} ({t})", m.mode))).collect();
    if !with_daemon.is_empty() {
        let _ = writeln!(out, "the daemon's telemetry: {}", with_daemon.join(", "));
    }
    let per_s = |phase: Phase, jobs: f64| jobs / report.phases.duration_s(phase);
    let bounds = |name: &str, of: &dyn Fn(Phase) -> f64| {
        let rates: Vec<String> = Phase::ALL.iter().map(|&p| format!("{} {:.1}", p.name(), per_s(p, of(p)))).collect();
        format!("{name} per second: {}", rates.join(", "))
    };
    let offered = |p: Phase| report.bounds.phase(p).offered.iter().sum::<u64>() as f64;
    let _ = writeln!(out, "{}", bounds("offered", &offered));
    let _ = writeln!(out, "{}", bounds("service-blind bound", &|p| report.bounds.phase(p).blind_total));
    let _ = writeln!(out, "{}\n", bounds("clairvoyant oracle", &|p| report.bounds.phase(p).oracle_total as f64));
    let _ = writeln!(
        out,
        "{:<width$} {:<9} {:>7} {:>7} {:>9} {:>7} {:>6} {:>6} {:>8} {:>6} {:>8} {:>8} {:>8} {:>10} {:>10}",
        "mode",
        "phase",
        "offered",
        "on-time",
        "on-time/s",
        "% bound",
        "late%",
        "unfin",
        "rejected",
        "503-dl",
        "503-peer",
        "deferred",
        "degraded",
        "p95 lat ms",
        "qage p95ms"
    );
    for mode in &report.modes {
        for phase in Phase::ALL {
            let _ = writeln!(out, "{}", row(&mode.mode, width, phase, mode.phase(phase)));
        }
    }
    // With several classes, each alone too: one class's tail must not cost
    // the others their on-time work.
    if several_classes {
        out.push('\n');
        for mode in &report.modes {
            for class in &mode.classes {
                for phase in Phase::ALL {
                    let name = format!("{}/{}", mode.mode, class.class);
                    let _ = writeln!(out, "{}", row(&name, width, phase, class.phases.get(phase)));
                }
            }
        }
    }
    let tenants: Vec<String> = report
        .modes
        .iter()
        .flat_map(|mode| mode.tenants.iter().map(move |t| (mode, t)))
        .map(|(mode, t)| {
            format!(
                "{}/{}/{}: {} on time of {} offered ({:.0}%), {} late, {} shed",
                mode.mode,
                t.class,
                t.tenant,
                t.completed_on_time,
                t.offered,
                super::share(t.completed_on_time as f64, t.offered as f64) * 100.0,
                t.late,
                t.shed
            )
        })
        .collect();
    if !tenants.is_empty() {
        out.push_str("\ntenants, over the whole run:\n");
        for line in tenants {
            let _ = writeln!(out, "  {line}");
        }
    }
    out.push('\n');
    for mode in &report.modes {
        let _ = writeln!(out, "{}", timings(mode, width));
    }
    out.push('\n');
    for line in report.static_finding.lines() {
        let _ = writeln!(out, "{line}");
    }
    out.push_str("\nthe reference workload's expected evidence:\n");
    for e in &report.evidence {
        let verdict = match e.holds {
            Some(true) => "yes",
            Some(false) => "NO ",
            None => "n/a",
        };
        let on = e.judged_on.as_deref().map_or(String::new(), |m| format!(" [{m}]"));
        let _ = writeln!(out, "  {verdict}  {}{on}: {}", e.expectation, e.figure);
    }
    out
}

fn row(mode: &str, width: usize, phase: Phase, f: &PhaseFigures) -> String {
    let percent = |share: Option<f64>| share.map_or("-".into(), |s| format!("{:.1}", s * 100.0));
    let optional_ms = |value: Option<f64>| value.map_or("-".into(), |v| format!("{v:.0}"));
    format!(
        "{:<width$} {:<9} {:>7} {:>7} {:>9.2} {:>7.0} {:>6} {:>6} {:>8} {:>6} {:>8} {:>8} {:>8} {:>10} {:>10}",
        mode,
        phase.name(),
        f.offered,
        f.completed_on_time,
        f.on_time_per_s,
        f.share_of_bound * 100.0,
        percent(f.late_share_of_admitted),
        f.unfinished,
        f.rejected,
        f.rejected_deadline,
        f.overloaded,
        f.deferred_timed_out,
        f.degraded,
        optional_ms(f.latency.map(|l| l.p95_ms)),
        optional_ms(f.queue_age_p95_ms),
    )
}

fn timings(mode: &ModeReport, width: usize) -> String {
    let slack = mode
        .slack_p10_negative_after_injection_s
        .map_or("never below zero".into(), |t| format!("below zero {t:+.0} s from the injection"));
    let drain = mode.drained_after_removal_s.map_or("not drained by the end".into(), |s| format!("drained {s:.0} s"));
    let fast_path = mode.phase(Phase::Injected).fast_path.map_or(String::new(), |c| {
        format!("; fast path in the injected phase: {} SYNs shed, {} would have been", c.shed(), c.would_shed)
    });
    let rates = if mode.static_rates_per_s.is_empty() {
        String::new()
    } else {
        let rates: Vec<String> = mode.static_rates_per_s.iter().map(|r| format!("{r:.1}/s")).collect();
        format!("; static rates {}", rates.join(", "))
    };
    format!(
        "{:<width$} slack_p10 {slack}; queue {drain} after the removal (threshold {:.0} ms){fast_path}{rates}",
        mode.mode, mode.drain_threshold_ms
    )
}
