//! A reload that moves classes between slots must not hand one class's
//! bucket or counters to another: a class new to its slot starts afresh.

use aya::programs::{TestRun, TestRunOptions};
use shedder_daemon::{config::Config, datapath::Datapath};
use shedder_tests::packets::TcpFrame;

const XDP_PASS: u32 = 2;
const XDP_DROP: u32 = 1;

fn config(classes: &[(&str, u16)]) -> String {
    let mut text = String::from(
        "mode = \"enforce\"\ndefault_class = \"open\"\n[[class]]\nname = \"open\"\nrate = 1000\nburst = 100\naction = \"drop\"\n",
    );
    for (name, port) in classes {
        text += &format!(
            "[[class]]\nname = \"{name}\"\nrate = 0.001\nburst = 2\naction = \"drop\"\n[[rule]]\nclass = \"{name}\"\ndst_port = {port}\n"
        );
    }
    text
}

fn verdicts(datapath: &Datapath, port: u16, n: usize) -> Vec<u32> {
    let frame = TcpFrame::v4_default().dst_port(port).build();
    (0..n)
        .map(|_| {
            let mut out = vec![0u8; frame.len()];
            let opts = TestRunOptions { data_in: Some(&frame), data_out: Some(&mut out), ..Default::default() };
            datapath.xdp().test_run(opts).unwrap().return_value
        })
        .collect()
}

fn counters(datapath: &Datapath, class: &str) -> shedder_common::maps::ClassCounters {
    datapath.class_snapshots().unwrap().into_iter().find(|c| c.name == class).unwrap().counters
}

#[test]
fn a_class_moved_to_another_slot_does_not_inherit_anothers_state() {
    let mut datapath = Datapath::load().unwrap();
    datapath.apply(&Config::parse(&config(&[("a", 8001)])).unwrap().plan().unwrap()).unwrap();
    // Empty a's two-token bucket, and give it counters.
    assert_eq!(verdicts(&datapath, 8001, 3), [XDP_PASS, XDP_PASS, XDP_DROP]);

    // b takes a's slot; a moves one slot on.
    datapath.apply(&Config::parse(&config(&[("b", 8002), ("a", 8001)])).unwrap().plan().unwrap()).unwrap();
    let b = counters(&datapath, "b");
    assert_eq!(b.seen, 0, "b starts with its own counters, not a's: {b:?}");
    assert_eq!(verdicts(&datapath, 8002, 3), [XDP_PASS, XDP_PASS, XDP_DROP], "b starts with a full bucket");

    // Unchanged classes keep their state across a reload.
    let before = counters(&datapath, "b");
    datapath.apply(&Config::parse(&config(&[("b", 8002), ("a", 8001)])).unwrap().plan().unwrap()).unwrap();
    assert_eq!(counters(&datapath, "b"), before);
    assert_eq!(verdicts(&datapath, 8002, 1), [XDP_DROP], "b's bucket is still empty");
}
