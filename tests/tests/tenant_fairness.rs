//! Tenants end to end: a `shedder run` process on the server's veth end,
//! three tenants with equal shares (100 connections/s each, weight 1), and
//! real TCP clients bound to each tenant's own addresses in the client
//! namespace. Each exchange is a new connection. First every tenant is quiet
//! (50/s, half its share); then tenant `noisy` offers ten times its share
//! while the others keep their pace. What a user would notice:
//!
//! * the quiet tenants keep at least 95% of the goodput they had before;
//! * the flooding tenant gets what the quiet ones leave unused, and Jain's
//!   fairness index over every tenant's admitted-to-fair-share ratio is at
//!   least 0.95. The fair shares are the weighted max-min split of the summed
//!   shares over the offered rates, computed here independently of the
//!   daemon's policy.
//!
//! The class is wide open and rejects (an RST, so a refused client learns at
//! once and never retransmits): only the tenants' buckets shed. Every load
//! loop is bounded by a schedule of a fixed count and a deadline.
//!
//! The test needs the `shedder` binary (see `shedder_testbed::daemon::daemon_binary`).

use std::{
    net::{Ipv4Addr, SocketAddr, SocketAddrV4},
    thread::JoinHandle,
    time::Duration,
};

use nix::sys::signal::Signal;
use serde_json::Value;
use shedder_daemon::api::{
    ctl::{self, CtlOp},
    protocol::SetTenant,
};
use shedder_testbed::{
    backend::{Answer, Backend},
    daemon::{self, DaemonOptions},
    netns::Testbed,
    tenant_client::paced,
};

const PORT: u16 = 8000;
const SHARE: f64 = 100.0;
const QUIET_RATE: f64 = 50.0;
const FLOOD_RATE: f64 = 10.0 * SHARE;
/// The flood comes from this many threads, each at its part of the rate.
const FLOOD_THREADS: usize = 2;
const QUIET_PHASE: Duration = Duration::from_secs(4);
/// Lending follows demand measured over about a second: the flood's first
/// seconds are not measured.
const SETTLE: Duration = Duration::from_secs(2);
const FLOOD_PHASE: Duration = Duration::from_secs(4);

/// Each tenant's name, and the client address inside its network.
const TENANTS: [(&str, Ipv4Addr); 3] = [
    ("noisy", Ipv4Addr::new(10, 213, 0, 17)),
    ("calm", Ipv4Addr::new(10, 213, 0, 33)),
    ("steady", Ipv4Addr::new(10, 213, 0, 49)),
];

const CONFIG: &str = r#"
mode = "enforce"
default_class = "api"

[[class]]
name = "api"
rate = 1000000
burst = 100000
action = "reject"

[[tenant]]
name = "noisy"
cidrs = ["10.213.0.16/28"]
rate = 100
burst = 20

[[tenant]]
name = "calm"
cidrs = ["10.213.0.32/28"]
rate = 100
burst = 20

[[tenant]]
name = "steady"
cidrs = ["10.213.0.48/28"]
rate = 100
burst = 20
"#;

/// The daemon under test, with this test's config.
struct Daemon(daemon::Daemon);

impl Daemon {
    fn socket(&self) -> std::path::PathBuf {
        self.0.socket()
    }

    /// Each tenant's admitted count, by name order of [`TENANTS`].
    fn admitted(&self) -> Vec<u64> {
        let status: Value = ctl::call(&self.socket(), &ctl::request(&CtlOp::Status).unwrap()).expect("status answers");
        let tenants = status["tenants"].as_array().expect("status lists tenants");
        TENANTS
            .iter()
            .map(|(name, _)| {
                let t = tenants.iter().find(|t| t["name"].as_str() == Some(*name)).expect("the tenant is in status");
                t["counters"]["admitted"].as_u64().unwrap()
            })
            .collect()
    }
}

/// Runs each tenant's load at the given rates (the first tenant's split over
/// [`FLOOD_THREADS`] when flooding) for `how_long`: (attempted, completed)
/// per tenant.
fn phase(bed: &Testbed, rates: [f64; 3], how_long: Duration) -> Vec<(u64, u64)> {
    let mut handles: Vec<(usize, JoinHandle<_>)> = Vec::new();
    for (i, ((_, from), rate)) in TENANTS.iter().zip(rates).enumerate() {
        let threads = if rate > SHARE { FLOOD_THREADS } else { 1 };
        for _ in 0..threads {
            let to = SocketAddrV4::new(Testbed::SERVER_V4, PORT);
            handles.push((i, paced(&bed.client, *from, to, rate / threads as f64, how_long)));
        }
    }
    let mut totals = vec![(0, 0); TENANTS.len()];
    for (i, handle) in handles {
        let (attempted, completed) = handle.join().expect("client thread").expect("client namespace");
        totals[i].0 += attempted;
        totals[i].1 += completed;
    }
    totals
}

/// The weighted max-min fair split of `capacity` over `demand` (equal weights).
fn fair_shares(capacity: f64, demand: &[f64]) -> Vec<f64> {
    let mut share = vec![0.0; demand.len()];
    let mut open: Vec<usize> = (0..demand.len()).collect();
    let mut left = capacity;
    while !open.is_empty() && left > 1e-9 {
        let level = left / open.len() as f64;
        let capped: Vec<usize> = open.iter().copied().filter(|i| demand[*i] - share[*i] <= level).collect();
        if capped.is_empty() {
            open.iter().for_each(|i| share[*i] += level);
            break;
        }
        for i in &capped {
            left -= demand[*i] - share[*i];
            share[*i] = demand[*i];
        }
        open.retain(|i| !capped.contains(i));
    }
    share
}

fn jain(x: &[f64]) -> f64 {
    let (sum, squares): (f64, f64) = (x.iter().sum(), x.iter().map(|v| v * v).sum());
    sum * sum / (x.len() as f64 * squares)
}

#[test]
fn a_flooding_tenant_takes_only_what_the_others_leave() {
    let bed = Testbed::new().unwrap();
    for (_, from) in TENANTS {
        bed.client.ip(&["addr", "add", &format!("{from}/24"), "dev", &bed.client_if, "nodad"]).unwrap();
    }
    let mut daemon = Daemon(daemon::Daemon::start(DaemonOptions::on_server(&bed), CONFIG).unwrap());
    // XDP_TX'd RSTs reach the client only through an XDP program on its end.
    let _pass = bed.attach_client_pass().unwrap();
    let listener = bed.listen(SocketAddr::new(Testbed::SERVER_V4.into(), PORT), false).unwrap();
    let server = Backend::serve(vec![listener], Answer::Done);

    let before = phase(&bed, [QUIET_RATE; 3], QUIET_PHASE);
    let flooded = [FLOOD_RATE, QUIET_RATE, QUIET_RATE];
    // The flood's first seconds, while lending catches up, in a phase of their own.
    phase(&bed, flooded, SETTLE);
    let counted = daemon.admitted();
    let during = phase(&bed, flooded, FLOOD_PHASE);
    let admitted: Vec<f64> = daemon
        .admitted()
        .iter()
        .zip(&counted)
        .map(|(after, before)| (after - before) as f64 / FLOOD_PHASE.as_secs_f64())
        .collect();
    drop(server);

    let offered: Vec<f64> = during.iter().map(|(attempted, _)| *attempted as f64 / FLOOD_PHASE.as_secs_f64()).collect();
    let fair = fair_shares(SHARE * TENANTS.len() as f64, &offered);
    let ratios: Vec<f64> = admitted.iter().zip(&fair).map(|(a, f)| a / f).collect();
    let index = jain(&ratios);
    println!("before (attempted, completed): {before:?}");
    println!("during: offered/s {offered:.1?}, admitted/s {admitted:.1?}, fair/s {fair:.1?}");
    println!("admitted / fair share {ratios:.3?}: Jain's index {index:.4}");
    assert!(offered[0] >= 9.0 * SHARE, "the flood reached only {:.0}/s: no flood to judge", offered[0]);
    assert!(index >= 0.95, "Jain's index {index:.4} over {ratios:.3?}");
    for (i, (name, _)) in TENANTS.iter().enumerate().skip(1) {
        let (quiet, flood) =
            (before[i].1 as f64 / QUIET_PHASE.as_secs_f64(), during[i].1 as f64 / FLOOD_PHASE.as_secs_f64());
        println!("{name}: goodput {quiet:.1}/s before the flood, {flood:.1}/s during it");
        assert!(flood >= 0.95 * quiet, "{name} kept {flood:.1}/s of {quiet:.1}/s during the flood");
    }
    // A tenant's share is set live; a bad value is refused and changes nothing.
    let set = |op: CtlOp| ctl::exit_code(&ctl::call(&daemon.socket(), &ctl::request(&op).unwrap()).unwrap());
    let tenant = |name: &str, rate: Option<f64>, weight: Option<f64>| {
        CtlOp::SetTenant(SetTenant { tenant: name.into(), cidrs: None, rate, burst: None, weight })
    };
    assert_eq!(set(tenant("calm", None, Some(0.0))), ctl::EXIT_INVALID);
    assert_eq!(set(tenant("noisy", Some(300.0), None)), ctl::EXIT_OK);
    let status = ctl::call(&daemon.socket(), &ctl::request(&CtlOp::Status).unwrap()).unwrap();
    let shares: Vec<(String, f64, f64)> = status["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t["share"].as_f64().unwrap(), t["weight"].as_f64().unwrap()))
        .collect();
    assert_eq!(shares[0], ("noisy".to_string(), 300.0, 1.0));
    assert_eq!(shares[1], ("calm".to_string(), 100.0, 1.0), "the refused change left calm as it was");
    assert!(daemon.0.process.stop(Signal::SIGTERM, Duration::from_secs(10)).is_some(), "the daemon stops on SIGTERM");
}

#[test]
fn fair_shares_fill_the_small_demands_first() {
    assert_eq!(fair_shares(300.0, &[1000.0, 50.0, 50.0]), [200.0, 50.0, 50.0]);
    assert_eq!(fair_shares(300.0, &[1000.0, 1000.0, 50.0]), [125.0, 125.0, 50.0]);
    assert_eq!(fair_shares(300.0, &[10.0, 20.0, 30.0]), [10.0, 20.0, 30.0]);
    assert!((jain(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
}
