//! The control loop over the in-memory fast path, on simulated time (no
//! root, no waiting): connections and job samples tick after tick, and the budget the
//! fast path then holds for the class. A budget the controller decides on
//! must be the one the fast path enforces.

mod memory_bed;

use std::time::Duration;

use shedder_common::verdict::Outcome;
use shedder_daemon::{
    clock::monotonic_ns,
    fastpath::{Fastpath, memory::MemoryFastpath},
    telemetry::samples::JobSample,
};

const CONFIG: &str = include_str!("../../tests/fixtures/controlled_class.toml");

const TICK: Duration = Duration::from_millis(100);

/// Where the class's budget must end.
#[derive(Debug)]
enum Budget {
    /// At its max_rate.
    Full,
    /// Below this many per second, with a decision that says why.
    CutBelow(f64, &'static str),
}

/// (queue age ms, service ms, late by ms) of the jobs pushed each tick.
type Jobs = (f64, f64, Option<f64>);

const HEALTHY: Jobs = (20.0, 150.0, None);
/// Every job waits 2.5 s and takes 1.8 s of a 3 s deadline.
const LATE: Jobs = (2500.0, 1800.0, Some(1550.0));

struct Row {
    what: &'static str,
    /// Phases of so many ticks each.
    phases: &'static [(Jobs, u32)],
    budget: Budget,
}

const ROWS: &[Row] = &[
    Row { what: "healthy jobs", phases: &[(HEALTHY, 30)], budget: Budget::Full },
    Row {
        what: "healthy, then every job late",
        phases: &[(HEALTHY, 10), (LATE, 20)],
        budget: Budget::CutBelow(60.0, "slack"),
    },
    Row { what: "late, then healthy again", phases: &[(LATE, 20), (HEALTHY, 300)], budget: Budget::Full },
    // A backlog from before the daemon started: nothing healthy to compare with.
    Row { what: "late from the start", phases: &[(LATE, 100)], budget: Budget::CutBelow(60.0, "slack") },
    // A backlog from before the daemon started: nothing healthy to compare with.
    Row { what: "late from the start", phases: &[(LATE, 100)], budget: Budget::CutBelow(60.0, "slack") },
];

/// The rate, per second, the fast path holds for `class`.
fn enforced_rate(fastpath: &MemoryFastpath, class: &str) -> f64 {
    let snapshots = fastpath.class_snapshots().unwrap();
    let snapshot = snapshots.iter().find(|s| s.name == class).expect("the class is in the fast path");
    snapshot.bucket.rate_milli as f64 / 1000.0
}

#[test]
fn the_budget_the_controller_decides_is_the_one_the_fast_path_enforces() {
    for row in ROWS {
        let what = row.what;
        let (mut daemon, fastpath) = memory_bed::daemon(CONFIG);
        let inbox = daemon.control().inbox();
        let jobs = row.phases.iter().flat_map(|(jobs, ticks)| std::iter::repeat_n(*jobs, *ticks as usize));
        let mut decisions = Vec::new();
        for (tick, (queue_age_ms, service_ms, late_by_ms)) in (1..).zip(jobs) {
            let job = JobSample { class: "interactive".into(), queue_age_ms, service_ms, late_by_ms, attempt: 1 };
            // Clients keep asking: 50 connections/s to the class.
            for _ in 0..5 {
                memory_bed::syn(&fastpath, 8000);
            }
            // ... and as many jobs complete.
            inbox.push(vec![job; 5]).unwrap();
            decisions.extend(daemon.control_mut().tick(TICK * tick, monotonic_ns()).unwrap());
        }
        let rate = enforced_rate(&fastpath, "interactive");
        // The fast path holds rates to a thousandth.
        let decided = daemon.control().controller().rate("interactive").expect("a controlled class");
        assert!(
            (rate - decided).abs() <= 0.001,
            "{what}: the controller decided {decided}/s, the fast path holds {rate}/s"
        );
        match row.budget {
            Budget::Full => assert_eq!(rate, 100.0, "{what}: decisions {decisions:?}"),
            Budget::CutBelow(limit, reason) => {
                assert!(rate < limit, "{what}: the budget fell from 100/s to {rate}/s");
                let first = decisions.first().expect("at least one budget decision");
                assert!(first.new_rate < first.old_rate, "{what}: {first:?}");
                assert!(first.reason.contains(reason), "{what}: the reason explains itself: {}", first.reason);
            }
        }
        assert_eq!(enforced_rate(&fastpath, "open"), 10000.0, "{what}: an uncontrolled class keeps its rate");
        assert!(fastpath.heartbeat().unwrap() > 0, "{what}: every tick writes the heartbeat");
        assert_eq!(memory_bed::syn(&fastpath, 9000), Outcome::Admitted, "{what}: the open class admits");
    }
}
