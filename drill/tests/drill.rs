//! The failure drill, short and time-scaled (`workloads/ci-short.toml` at
//! K = 0.2: 12 s per mode), through the real daemon between two network
//! namespaces. Needs root. It asserts only what survives a loaded machine:
//! in the injected phase `enforce` completes at least twice as many jobs on
//! time as `off`, and `observe` sheds nothing.
//!
//! The daemon binary is the one cargo built beside the tests (`cargo xtask
//! test` builds it first), or `$SHEDDER_BIN`.

mod common;

use std::path::Path;

use shedder_drill::{phase::Phase, report::DrillReport};

#[test]
fn enforce_finishes_more_on_time_than_off_under_the_tail_and_observe_sheds_nothing() {
    let out = std::env::temp_dir().join(format!("shedder-drill-test-{}", std::process::id()));
    let workload = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/ci-short.toml");
    let modes = ["--modes", "off,observe,enforce", "--time-scale", "0.2", "--seed", "7"];
    let mut args: Vec<std::ffi::OsString> = vec!["--workload".into(), workload.into()];
    args.extend(modes.iter().map(Into::into));
    args.extend(["--out".into(), out.clone().into()]);
    common::run_drill(args);

    let report = DrillReport::read_json(&out.join("report.json")).expect("the drill's report");
    let injected =
        |mode: &str| report.mode(mode).unwrap_or_else(|| panic!("no {mode} in the report")).phase(Phase::Injected);
    let (off, enforce) = (injected("off"), injected("enforce"));
    assert!(
        enforce.completed_on_time >= 2 * off.completed_on_time.max(1),
        "under the tail, enforce finished {} jobs on time, off {}: expected at least twice as many",
        enforce.completed_on_time,
        off.completed_on_time
    );

    let observe = report.mode("observe").expect("observe in the report");
    for phase in [Phase::Steady, Phase::Injected, Phase::Recovered] {
        let figures = observe.phase(phase);
        // Not `shed`: a SYN lost to a full accept queue on a loaded machine
        // ends as deferred, and observe has no part in that.
        assert_eq!(
            (figures.rejected, figures.degraded, figures.rejected_deadline),
            (0, 0, 0),
            "observe turned jobs away in the {} phase: {figures:?}",
            phase.name()
        );
        let fast_path = figures.fast_path.expect("observe runs the daemon");
        assert_eq!(
            (fast_path.dropped, fast_path.rejected, fast_path.marked),
            (0, 0, 0),
            "observe's fast path shed SYNs in the {} phase",
            phase.name()
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
