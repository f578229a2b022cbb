//! The control loop over the in-memory fast path, on simulated time (no
//! root, no waiting): connections and job samples tick after tick, and the budget the
//! fast path then holds for the class. A budget the controller decides on
//! must be the one the fast path enforces.

mod memory_bed;

use std::{collections::VecDeque, time::Duration};

use shedder_common::{reference::Verdict, verdict::Outcome};
use shedder_daemon::{
    clock::monotonic_ns,
    fastpath::{Fastpath, Snapshot, memory::MemoryFastpath},
    telemetry::samples::JobSample,
};
use shedder_testbed::packets::{CLIENT_V4, SERVER_V4, TcpFrame};

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

/// The rate, per second, of the bucket named `name` among `snapshots`
/// (a class's or a tenant's, as the fast path holds it).
fn held_rate<K>(snapshots: Vec<Snapshot<K>>, name: &str) -> f64 {
    let snapshot = snapshots.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{name} is in the fast path"));
    snapshot.bucket.rate_milli as f64 / 1000.0
}

/// The rate, per second, the fast path holds for `class`.
fn enforced_rate(fastpath: &MemoryFastpath, class: &str) -> f64 {
    held_rate(fastpath.class_snapshots().unwrap(), class)
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
            let job = JobSample {
                class: "interactive".into(),
                queue_age_ms,
                service_ms,
                late_by_ms,
                attempt: 1,
                estimated_service_ms: None,
            };
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

/// Two tenants of 200/s each behind one open class.
const TENANTS: &str = r#"
mode = "enforce"
default_class = "open"

[[class]]
name = "open"
rate = 1e9
burst = 1e9
action = "drop"

[[tenant]]
name = "rising"
cidrs = ["10.7.1.0/24"]
rate = 200
burst = 1000

[[tenant]]
name = "quiet"
cidrs = ["10.7.2.0/24"]
rate = 200
burst = 1000
"#;

/// The rate, per second, the fast path holds for `tenant`'s bucket.
fn tenant_rate(fastpath: &MemoryFastpath, tenant: &str) -> f64 {
    held_rate(fastpath.tenant_snapshots().unwrap(), tenant)
}

#[test]
fn a_tenants_lent_share_follows_a_step_in_demand_within_a_few_ticks() {
    // (what, SYNs per 100 ms tick from `rising` and from `quiet` for 3 s and
    // after, the most ticks to 95% of the rate `rising` settles at). Either
    // way `rising` ends up with its 200/s and what `quiet` leaves (it keeps
    // 25/s of its 200): 375/s. Read over the last second alone, the rise
    // took 9 ticks and the fall 10.
    let rows = [("rising steps up", (2, 40), (2, 2), 2), ("quiet steps down", (50, 50), (50, 2), 3)];
    for (what, rising, quiet, most_ticks) in rows {
        let (mut daemon, fastpath) = memory_bed::daemon(TENANTS);
        // A new connection each time: a SYN seen before and dropped would be a resend.
        let send = |third_octet: u8, n: u16, tick: u32| {
            for i in 0..n {
                let syn = TcpFrame::v4([10, 7, third_octet, 2], SERVER_V4).ports(40_000 + i, 8000).seq(tick);
                fastpath.receive(&syn.build(), monotonic_ns());
            }
        };
        let mut rates = Vec::new();
        for tick in 1..=60u32 {
            let before = tick <= 30;
            send(1, if before { rising.0 } else { rising.1 }, tick);
            send(2, if before { quiet.0 } else { quiet.1 }, tick);
            daemon.control_mut().tick(TICK * tick, monotonic_ns()).unwrap();
            rates.push(tenant_rate(&fastpath, "rising"));
        }
        // Before, nobody had anything to lend or borrow: each held its own rate.
        assert_eq!(rates[29], 200.0, "{what}: before the step");
        let settled = rates[59];
        assert!((settled - 375.0).abs() < 1.0, "{what}: settled at {settled}/s: {rates:?}");
        let ticks = rates.iter().skip(30).position(|r| *r >= 0.95 * settled).expect("it gets there") + 1;
        assert!(ticks <= most_ticks, "{what}: at 95% of its share after {ticks} ticks: {:?}", &rates[29..42]);
    }
}

/// Every SYN in `batch`, held to at most 20 connections/s, its drops silent.
const HELD_BACK: &str = r#"
mode = "enforce"
default_class = "batch"

[[class]]
name = "batch"
burst = 2
action = "drop"
deadline_ms = 5000
adaptive = { min_rate = 1, max_rate = 20 }
"#;

#[test]
fn a_class_whose_dropped_syns_come_back_shows_the_demand_of_its_clients_not_of_their_retries() {
    // Clients open 100 connections/s to `batch`, which admits 20. Run once
    // with each dropped SYN lost for good, once with the client's TCP sending
    // it again every second (as Linux since 6.5 does, four or five times):
    // the demand the controller works from must be the same, 100 jobs/s of
    // 100 ms each.
    let mut runs = Vec::new();
    for resending in [false, true] {
        let (mut daemon, fastpath) = memory_bed::daemon(HELD_BACK);
        let inbox = daemon.control().inbox();
        // Frames dropped in each of the last ten ticks (one second).
        let mut dropped: VecDeque<Vec<Vec<u8>>> = VecDeque::new();
        for tick in 1..=50u32 {
            let mut now_dropped = Vec::new();
            let mut send = |frame: Vec<u8>| {
                if fastpath.receive(&frame, monotonic_ns()).verdict == Verdict::Drop {
                    now_dropped.push(frame);
                }
            };
            for i in 0..10 {
                send(TcpFrame::v4(CLIENT_V4, SERVER_V4).ports(40_000 + i, 8000).seq(tick).build());
            }
            if dropped.len() == 10 {
                let second_ago = dropped.pop_front().expect("ten ticks held");
                if resending {
                    second_ago.into_iter().for_each(&mut send);
                }
            }
            dropped.push_back(now_dropped);
            let job = JobSample {
                class: "batch".into(),
                queue_age_ms: 10.0,
                service_ms: 100.0,
                late_by_ms: None,
                attempt: 1,
                estimated_service_ms: None,
            };
            inbox.push(vec![job; 2]).unwrap();
            daemon.control_mut().tick(TICK * tick, monotonic_ns()).unwrap();
        }
        let batch = fastpath.class_snapshots().unwrap().into_iter().find(|s| s.name == "batch").unwrap().counters;
        runs.push((daemon.control().controller().capacity_plan().demand, batch));
    }
    let [(demand_lost, lost), (demand_resent, resent)] = runs.try_into().expect("two runs");
    assert_eq!(lost.resent, 0, "nothing sent again: {lost:?}");
    // From the eleventh tick on, what was dropped a second before came back
    // (resends too): every resend told apart but for a slot shared now and then.
    assert_eq!(lost.seen, 500, "{lost:?}");
    let resends = resent.seen - lost.seen;
    assert!(resends > 400 && resent.resent * 100 >= resends * 95, "{resends} resends: {resent:?}");
    assert!((demand_lost - 10.0).abs() < 0.5, "100 jobs/s of 100 ms: {demand_lost} worker-s/s");
    // Counted as new, the resends would double it and more; the few that
    // share a slot with another drop still count.
    assert!(
        (demand_resent - demand_lost).abs() < 0.1 * demand_lost,
        "resends read as demand: {demand_resent} worker-s/s against {demand_lost} without them"
    );
}
