//! The fail-open watchdog in the real program, through `BPF_PROG_TEST_RUN`.
//!
//! Each test is a sequence of steps on one freshly loaded datapath per hook:
//! the heartbeat the daemon would have written, a frame, the verdict the hook
//! must return and the one counter that must move. Steps run in order, so a
//! sequence can show that SYNs passed while the heartbeat was stale left the
//! bucket as it was.

use shedder_common::{maps::PassReason, reference::Verdict, verdict::Outcome};
use shedder_daemon::{clock::monotonic_ns, config::Config, datapath::Datapath, fastpath::Fastpath};
use shedder_testbed::{
    packets::TcpFrame,
    test_run::{HOOKS, run},
};
use shedder_tests::counters::{Counters, class_moves, counters, moved, pass_moves};

/// `chat` holds two tokens and earns one every 1000 s, so within a test it
/// admits exactly two SYNs; `quiet` is off and `trial` observes.
const CONFIG: &str = r#"
    mode = "enforce"
    default_class = "chat"
    [[class]]
    name = "chat"
    rate = 0.001
    burst = 2
    action = "reject"
    [[class]]
    name = "quiet"
    rate = 0.001
    burst = 1
    action = "drop"
    mode = "off"
    [[class]]
    name = "trial"
    rate = 0.001
    burst = 1
    action = "drop"
    mode = "observe"
    [[rule]]
    class = "quiet"
    dst_port = 8001
    [[rule]]
    class = "trial"
    dst_port = 8002
"#;

/// The watchdog's timeout in these tests: long enough that a loaded machine
/// never turns a fresh heartbeat stale between writing it and the run.
const TIMEOUT_MS: u64 = 10_000;
const TIMEOUT_NS: u64 = TIMEOUT_MS * 1_000_000;

/// The heartbeat written before a step, relative to the fast path's clock.
#[derive(Clone, Copy, Debug)]
enum Beat {
    /// Never written (0): the daemon has not ticked yet.
    Never,
    Fresh,
    /// Twice the timeout old: the daemon is gone.
    Stale,
    /// Twice the timeout ahead of the clock: no live daemon wrote that.
    Ahead,
}

impl Beat {
    fn value(self) -> u64 {
        let now = monotonic_ns();
        match self {
            Beat::Never => 0,
            Beat::Fresh => now,
            Beat::Stale => now.checked_sub(2 * TIMEOUT_NS).expect("the machine has been up for 20 s"),
            Beat::Ahead => now + 2 * TIMEOUT_NS,
        }
    }
}

struct Step {
    beat: Beat,
    frame: TcpFrame,
    verdict: Verdict,
    /// The counters the step must move, and by how much (one counter, by one).
    moves: Counters,
}

fn syn(port: u16) -> TcpFrame {
    TcpFrame::v4_default().dst_port(port)
}

fn step(beat: Beat, frame: TcpFrame, verdict: Verdict, moves: Counters) -> Step {
    Step { beat, frame, verdict, moves }
}

fn chat(outcome: Outcome) -> Counters {
    class_moves("chat", outcome)
}

fn fail_open() -> Counters {
    pass_moves(PassReason::FailOpen)
}

/// Runs `steps` in order through each hook, on a fresh datapath per hook
/// configured by `CONFIG` plus `watchdog`.
fn run_steps(watchdog: &str, steps: &[Step]) {
    let plan = Config::parse(&format!("{CONFIG}\n{watchdog}")).unwrap().compile().unwrap().plan;
    for hook in HOOKS {
        let mut datapath = Datapath::load().expect("loading the fast path (these tests run as root)");
        datapath.apply(&plan).unwrap();
        for (i, s) in steps.iter().enumerate() {
            let what = format!("{hook:?} step {i}: heartbeat {:?}, expecting {:?}", s.beat, s.moves);
            datapath.write_heartbeat(s.beat.value()).unwrap();
            let before = counters(&datapath);
            let (code, _) = run(&datapath, hook, &s.frame.build()).unwrap();
            assert_eq!(code, hook.code(s.verdict), "{what}: verdict");
            assert_eq!(moved(&before, &counters(&datapath)), s.moves, "{what}: counters");
        }
    }
}

#[test]
fn a_stale_heartbeat_passes_syns_uncharged_until_heartbeats_return() {
    use {Beat::*, Outcome::*, Verdict::*};
    run_steps(
        &format!("[watchdog]\nfail_open_after_ms = {TIMEOUT_MS}"),
        &[
            step(Fresh, syn(8000), Pass, chat(Admitted)),
            step(Stale, syn(8000), Pass, fail_open()),
            step(Stale, syn(8000), Pass, fail_open()),
            step(Stale, syn(8000), Pass, fail_open()),
            step(Stale, syn(8000).ack(), Pass, pass_moves(PassReason::NotSyn)),
            // Back: the three fail-open SYNs left the last token in the bucket.
            step(Fresh, syn(8000), Pass, chat(Admitted)),
            step(Fresh, syn(8000), Reply, chat(Rejected)),
            step(Fresh, syn(8000), Reply, chat(Rejected)),
            step(Ahead, syn(8000), Pass, fail_open()),
            step(Fresh, syn(8000), Reply, chat(Rejected)),
        ],
    );
}

#[test]
fn a_disabled_watchdog_never_fails_open() {
    use {Beat::*, Outcome::*, Verdict::*};
    run_steps(
        "[watchdog]\nfail_open_after_ms = 0",
        &[
            step(Stale, syn(8000), Pass, chat(Admitted)),
            step(Stale, syn(8000), Pass, chat(Admitted)),
            step(Stale, syn(8000), Reply, chat(Rejected)),
            step(Ahead, syn(8000), Reply, chat(Rejected)),
        ],
    );
}

#[test]
fn the_watchdog_arms_with_the_first_heartbeat() {
    use {Beat::*, Outcome::*, Verdict::*};
    run_steps(
        &format!("[watchdog]\nfail_open_after_ms = {TIMEOUT_MS}"),
        &[
            step(Never, syn(8000), Pass, chat(Admitted)),
            step(Never, syn(8000), Pass, chat(Admitted)),
            step(Never, syn(8000), Reply, chat(Rejected)),
            step(Stale, syn(8000), Pass, fail_open()),
        ],
    );
}

#[test]
fn an_off_class_is_never_judged_and_an_observed_one_fails_open() {
    use {Beat::*, Outcome::*, Verdict::*};
    run_steps(
        &format!("[watchdog]\nfail_open_after_ms = {TIMEOUT_MS}"),
        &[
            step(Stale, syn(8001), Pass, class_moves("quiet", Admitted)),
            step(Stale, syn(8002), Pass, fail_open()),
            step(Fresh, syn(8002), Pass, class_moves("trial", Admitted)),
            step(Fresh, syn(8002), Pass, class_moves("trial", WouldShed)),
        ],
    );
}
