//! The shared bucket under real concurrency: one CPU per thread, each running
//! the XDP program on the same class's SYNs through BPF_PROG_TEST_RUN at the
//! same time. The compare-and-swap in the program must never let the CPUs
//! together admit more than the bucket holds.

use shedder_tests::test_run::XDP_DROP;
use std::sync::{Arc, Barrier};

use aya::programs::{TestRun, TestRunOptions};
use nix::{sched::CpuSet, unistd::Pid};
use shedder_daemon::{config::Config, datapath::Datapath};
use shedder_tests::packets::TcpFrame;

/// A class that holds `BURST` tokens and refills too slowly to matter
/// (one token per 1000 s): exactly `BURST` SYNs may ever get in.
const BURST: u64 = 5_000;
const CONFIG: &str = r#"
mode = "enforce"
default_class = "scarce"

[[class]]
name = "scarce"
rate = 0.001
burst = 5000
action = "drop"
"#;

#[test]
fn concurrent_cpus_never_admit_more_than_the_bucket_holds() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    assert!(cpus >= 2, "this machine has one CPU: concurrency cannot be exercised");
    let mut datapath = Datapath::load().unwrap();
    datapath.apply(&Config::parse(CONFIG).unwrap().plan().unwrap()).unwrap();
    let datapath = Arc::new(datapath);
    let frame = Arc::new(TcpFrame::v4_default().syn().build());
    let repeats: u32 = 200_000;
    let start = Arc::new(Barrier::new(cpus));

    let workers: Vec<_> = (0..cpus)
        .map(|cpu| {
            let (datapath, frame, start) = (datapath.clone(), frame.clone(), start.clone());
            std::thread::spawn(move || {
                let mut set = CpuSet::new();
                set.set(cpu).unwrap();
                nix::sched::sched_setaffinity(Pid::from_raw(0), &set).unwrap();
                let mut out = vec![0u8; frame.len()];
                start.wait();
                // Admitted and dropped SYNs leave the buffer as it was, so
                // every repeat is the same SYN charging the same bucket.
                let result = datapath
                    .xdp()
                    .test_run(TestRunOptions {
                        data_in: Some(&frame),
                        data_out: Some(&mut out),
                        repeat: repeats,
                        ..Default::default()
                    })
                    .unwrap();
                // The last repeat's verdict: by then the bucket is long empty.
                result.return_value
            })
        })
        .collect();
    let last_verdicts: Vec<u32> = workers.into_iter().map(|w| w.join().unwrap()).collect();

    let snapshot = datapath.class_snapshots().unwrap().remove(0);
    let c = snapshot.counters;
    let sent = repeats as u64 * cpus as u64;
    assert_eq!(c.seen, sent, "every SYN from every CPU is counted once");
    assert_eq!(c.admitted + c.dropped, sent);
    // The refill over a test this short is far below one token, so the
    // bound is the burst itself, with no per-CPU slack at all.
    assert_eq!(c.admitted, BURST, "admitted {} of a {BURST}-token bucket across {cpus} CPUs", c.admitted);
    assert!(last_verdicts.iter().all(|v| *v == XDP_DROP), "{last_verdicts:?}");
}
