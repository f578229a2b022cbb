//! Reloads keep each class in its slot: a class keeps its bucket and
//! counters by name for as long as it is configured, a new class starts
//! afresh, and a reload under traffic sends no connection to a class it
//! belongs to in neither the old config nor the new one.

use shedder_testbed::test_run::{XDP_DROP, XDP_PASS, XDP_TX};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use aya::programs::{TestRun, TestRunOptions};
use shedder_daemon::{
    config::{Config, Plan},
    datapath::Datapath,
    fastpath::Fastpath,
};
use shedder_testbed::{packets::TcpFrame, test_run::XdpRunner};

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
fn a_new_class_starts_afresh_and_a_reordered_one_keeps_its_state() {
    let mut datapath = Datapath::load().unwrap();
    datapath.apply(&Config::parse(&config(&[("a", 8001)])).unwrap().compile().unwrap().plan).unwrap();
    // Empty a's two-token bucket, and give it counters.
    assert_eq!(verdicts(&datapath, 8001, 3), [XDP_PASS, XDP_PASS, XDP_DROP]);

    let a = counters(&datapath, "a");
    // b comes first in the file now; a stays a, wherever the file puts it.
    datapath.apply(&Config::parse(&config(&[("b", 8002), ("a", 8001)])).unwrap().compile().unwrap().plan).unwrap();
    let b = counters(&datapath, "b");
    assert_eq!(b.seen, 0, "b starts with its own counters, not a's: {b:?}");
    assert_eq!(counters(&datapath, "a"), a, "a keeps its counters");
    assert_eq!(verdicts(&datapath, 8001, 1), [XDP_DROP], "a's bucket is still empty");
    assert_eq!(verdicts(&datapath, 8002, 3), [XDP_PASS, XDP_PASS, XDP_DROP], "b starts with a full bucket");

    // Unchanged classes keep their state across a reload.
    let before = counters(&datapath, "b");
    datapath.apply(&Config::parse(&config(&[("b", 8002), ("a", 8001)])).unwrap().compile().unwrap().plan).unwrap();
    assert_eq!(counters(&datapath, "b"), before);
    assert_eq!(verdicts(&datapath, 8002, 1), [XDP_DROP], "b's bucket is still empty");
}

/// The configs a reload loop cycles through: `open` admits everything on
/// [`OPEN_PORT`], `closed` refuses everything on [`CLOSED_PORT`]; their
/// order swaps, and a third class comes and goes.
const ORDERS: [&[&str]; 3] = [&["open", "closed"], &["closed", "open"], &["closed", "extra", "open"]];
const OPEN_PORT: u16 = 9000;
const CLOSED_PORT: u16 = 9001;

/// Rules besides the ones under test, as many as a big host has: port rules
/// above 20000 and source CIDRs in 100.64.0.0/10, all far from the test's frames.
fn many_rules() -> String {
    let ports = (0..10_000).map(|i| format!("[[rule]]\nclass = \"default\"\ndst_port = {}\n", 20_000 + i));
    let cidrs = (0..shedder_common::maps::MAX_CIDR_RULES)
        .map(|i| format!("[[rule]]\nclass = \"default\"\nsrc_cidr = \"100.64.{}.{}/32\"\n", i / 256, i % 256));
    ports.chain(cidrs).collect()
}

fn reordered(order: &[&str], extra: &str) -> Plan {
    let mut text = String::from("mode = \"enforce\"\ndefault_class = \"default\"\n");
    text += "[[class]]\nname = \"default\"\nrate = 1000\nburst = 100\naction = \"drop\"\n";
    for name in order {
        let (rate, port) = match *name {
            "open" => ("1e9\nburst = 1e9", OPEN_PORT),
            "closed" => ("0\nburst = 1", CLOSED_PORT),
            _ => ("1e9\nburst = 1e9", 9002),
        };
        text += &format!(
            "[[class]]\nname = \"{name}\"\nrate = {rate}\naction = \"reject\"\n[[rule]]\nclass = \"{name}\"\ndst_port = {port}\n"
        );
    }
    text += extra;
    Config::parse(&text).unwrap().compile().unwrap().plan
}

/// Cycles through [`ORDERS`] `reloads` times while a thread sends SYNs to
/// the open and the closed class: none may land in the wrong class, and
/// both keep their counters by name.
fn reload_under_traffic(extra: &str, reloads: usize) {
    let plans: Vec<Plan> = ORDERS.iter().map(|order| reordered(order, extra)).collect();
    let mut datapath = Datapath::load().unwrap();
    datapath.apply(&plans[0]).unwrap();
    let runner = XdpRunner::new(&datapath).unwrap();
    let open = TcpFrame::v4_default().dst_port(OPEN_PORT).build();
    let closed = TcpFrame::v4_default().dst_port(CLOSED_PORT).build();

    let stop = AtomicBool::new(false);
    let sent = AtomicU64::new(0);
    let (pairs, misrouted) = std::thread::scope(|scope| {
        let traffic = scope.spawn(|| {
            let mut misrouted = Vec::new();
            let mut pairs = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (frame, want) in [(&open, XDP_PASS), (&closed, XDP_TX)] {
                    let got = runner.run(frame).unwrap();
                    if got != want {
                        misrouted.push((pairs, want, got));
                    }
                }
                pairs += 1;
                sent.store(pairs, Ordering::Relaxed);
            }
            (pairs, misrouted)
        });
        // Reload only once traffic flows, and stop it only after the last one.
        while sent.load(Ordering::Relaxed) < 100 {
            std::thread::yield_now();
        }
        for i in 1..=reloads {
            datapath.apply(&plans[i % plans.len()]).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        traffic.join().unwrap()
    });

    assert!(pairs > reloads as u64, "traffic ran through the reloads: {pairs} pairs of connections");
    assert!(
        misrouted.is_empty(),
        "{} of {pairs} connections went to a class they do not belong to (pair, wanted, got): {:?}",
        misrouted.len(),
        &misrouted[..misrouted.len().min(10)]
    );
    let open_counts = counters(&datapath, "open");
    assert_eq!((open_counts.seen, open_counts.admitted), (pairs, pairs), "open kept its counters by name");
    let closed_counts = counters(&datapath, "closed");
    assert_eq!((closed_counts.seen, closed_counts.rejected), (pairs, pairs), "closed kept its counters");
}

#[test]
fn reloads_that_reorder_classes_under_traffic_misroute_nothing_and_keep_counters() {
    reload_under_traffic("", 600);
}

#[test]
fn reloads_with_ten_thousand_port_rules_and_a_full_cidr_trie_misroute_nothing() {
    reload_under_traffic(&many_rules(), 20);
}

/// An open class, and tenants on the default frame's source (10.0.0.2) and
/// elsewhere, each of two tokens, in the order given.
fn tenants_config(tenants: &[(&str, &str)]) -> String {
    let mut text = config(&[]);
    for (name, cidr) in tenants {
        text += &format!("[[tenant]]\nname = \"{name}\"\ncidrs = [\"{cidr}\"]\nrate = 0.001\nburst = 2\n");
    }
    text
}

fn tenant_counters(datapath: &Datapath, tenant: &str) -> shedder_common::maps::TenantCounters {
    datapath.tenant_snapshots().unwrap().into_iter().find(|t| t.name == tenant).unwrap().counters
}

#[test]
fn tenants_keep_their_bucket_and_counters_by_name_across_reloads() {
    let mut datapath = Datapath::load().unwrap();
    let apply = |datapath: &mut Datapath, tenants: &[(&str, &str)]| {
        datapath.apply(&Config::parse(&tenants_config(tenants)).unwrap().compile().unwrap().plan).unwrap()
    };
    apply(&mut datapath, &[("acme", "10.0.0.0/24")]);
    assert_eq!(verdicts(&datapath, 80, 3), [XDP_PASS, XDP_PASS, XDP_DROP], "acme's two tokens, then empty");
    let acme = tenant_counters(&datapath, "acme");

    // A new tenant comes first in the file; acme keeps its slot, bucket and counters.
    apply(&mut datapath, &[("zeta", "10.9.0.0/16"), ("acme", "10.0.0.0/24")]);
    assert_eq!(tenant_counters(&datapath, "acme"), acme, "acme keeps its counters");
    assert_eq!(tenant_counters(&datapath, "zeta").offered(), 0, "zeta starts with its own counters");
    assert_eq!(verdicts(&datapath, 80, 1), [XDP_DROP], "acme's bucket is still empty");

    // The default source moves to zeta, which has a full bucket of its own.
    apply(&mut datapath, &[("zeta", "10.0.0.0/24"), ("acme", "10.9.0.0/16")]);
    assert_eq!(verdicts(&datapath, 80, 3), [XDP_PASS, XDP_PASS, XDP_DROP], "zeta's own two tokens");
}
