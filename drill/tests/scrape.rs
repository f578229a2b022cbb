//! The failure drill with the daemon scraping the backend's own `/metrics`
//! instead of receiving pushed samples (`--telemetry vllm-scrape` and
//! `sglang-scrape`), short and time-scaled like the CI drill
//! (`workloads/ci-short.toml` at K = 0.2). Needs root. It asserts what
//! survives a loaded machine: in the injected phase `enforce` completes at
//! least twice as many jobs on time as `off`, from scraped telemetry in
//! either format, and the report says which telemetry ran.

mod common;

use std::path::{Path, PathBuf};

use shedder_drill::{phase::Phase, report::DrillReport};

/// Runs `modes` of the CI workload with `telemetry`; returns its report.
fn drill(telemetry: &str, modes: &str, out: &Path) -> DrillReport {
    let workload = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/ci-short.toml");
    let mut args: Vec<std::ffi::OsString> = vec!["--workload".into(), workload.into()];
    let flags = ["--modes", modes, "--telemetry", telemetry, "--time-scale", "0.2", "--seed", "7"];
    args.extend(flags.iter().map(Into::into));
    args.extend(["--out".into(), out.into()]);
    common::run_drill(args);
    DrillReport::read_json(&out.join("report.json")).expect("the drill's report")
}

#[test]
fn enforce_from_scraped_telemetry_finishes_more_on_time_than_off_under_the_tail() {
    let out = |name: &str| -> PathBuf {
        std::env::temp_dir().join(format!("shedder-drill-scrape-{name}-{}", std::process::id()))
    };
    let vllm = drill("vllm-scrape", "off,enforce", &out("vllm"));
    let sglang = drill("sglang-scrape", "enforce", &out("sglang"));

    let mode = |report: &DrillReport, name: &str| report.mode(name).cloned().expect("the mode in the report");
    let off = mode(&vllm, "off");
    assert_eq!(off.telemetry, None, "off runs no daemon");
    for (report, telemetry) in [(&vllm, "vllm-scrape"), (&sglang, "sglang-scrape")] {
        let enforce = mode(report, "enforce");
        assert_eq!(enforce.telemetry.as_deref(), Some(telemetry));
        let (on_time, off_on_time) =
            (enforce.phase(Phase::Injected).completed_on_time, off.phase(Phase::Injected).completed_on_time);
        assert!(
            on_time >= 2 * off_on_time.max(1),
            "under the tail, enforce from {telemetry} finished {on_time} jobs on time, off {off_on_time}: \
             expected at least twice as many"
        );
    }
    for name in ["vllm", "sglang"] {
        let _ = std::fs::remove_dir_all(out(name));
    }
}
