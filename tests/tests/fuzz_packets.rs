//! Differential fuzzing of the fast path: random, damaged and noise frames
//! (`shedder_tests::frame_fuzz`; IPv6 ones also behind chains of extension
//! headers) through the real XDP and TC programs with
//! `BPF_PROG_TEST_RUN`, each judged also by the host reference
//! (`shedder_common::reference`, which parses independently of the program).
//! Every frame must get the reference's verdict and leave the reference's
//! bytes; every batch must move exactly the counters the reference counted;
//! and no frame that an independent parser (etherparse) does not read as a
//! bare TCP SYN may ever be dropped or answered.
//!
//! Besides its own configs it runs over every packet table's config
//! (`tests/fixtures/packet_table/`), with the values their rules match.
//!
//! `SHEDDER_FUZZ_SCALE` (default 1: 100,000 frames over the three mixed,
//! observe and off tests, and 1,000 per table config) and `SHEDDER_FUZZ_SEED`
//! (printed by each test) reproduce a run.

use std::{path::Path, time::Instant};

use etherparse::{IpNumber, Ipv6ExtensionSlice, LaxIpv6Slice, LaxNetSlice, LaxSlicedPacket, TcpSlice};
use rand::{RngExt, SeedableRng, rngs::SmallRng};
use shedder_common::{maps::PassReason, reference::Verdict};
use shedder_daemon::{
    clock::monotonic_ns,
    config::{Config, Plan},
    datapath::Datapath,
    fastpath::Fastpath,
};
use shedder_testbed::test_run::{Hook, describe_difference, hex, run};
use shedder_tests::{
    counters::{Counters, add_moves, counters, moved, reference_moves},
    frame_fuzz::{Targets, any_frame},
    model::Model,
};

/// Frames at scale 1, over all three tests.
const FRAMES: usize = 100_000;
/// Frames between two counter comparisons.
const BATCH: usize = 500;
/// One frame in this many also goes through TC (the rest through XDP).
const TC_ONE_IN: u32 = 5;
/// One batch in this many runs with a heartbeat from long ago, so the
/// fail-open watchdog (armed by the default config) passes every charged SYN.
const STALE_ONE_IN: usize = 8;
/// Failures reported in full; the rest are counted.
const SHOWN: usize = 12;

/// Every outcome and action, on each kind of rule: closed classes (rate 0,
/// no clock), wide-open ones (never empty), off and observe modes, and two
/// slow-refill buckets that run dry mid-run (the model keeps their state);
/// tenants over the default client's networks (open), the CIDR classes'
/// IPv4 networks (a slow bucket that runs dry) and an IPv6 network (closed).
const MIXED: &str = r#"
mode = "enforce"
default_class = "rest"

[[class]]
name = "rest"
rate = 0
burst = 1
action = "reject"

[[class]]
name = "port_drop"
rate = 0
burst = 1
action = "drop"

[[class]]
name = "port_mark"
rate = 0
burst = 1
action = "mark"
mark_dscp = 46

[[class]]
name = "port_open"
rate = 1e9
burst = 1e9
action = "reject"

[[class]]
name = "port_paced"
rate = 0.001
burst = 40
action = "reject"

[[class]]
name = "port_observe"
rate = 0
burst = 1
action = "drop"
mode = "observe"

[[class]]
name = "port_off"
rate = 0
burst = 1
action = "reject"
mode = "off"

[[class]]
name = "dscp_mark"
rate = 0
burst = 1
action = "mark"
mark_dscp = 0

[[class]]
name = "dscp_open"
rate = 1e9
burst = 1e9
action = "drop"

[[class]]
name = "net4"
rate = 0
burst = 1
action = "drop"

[[class]]
name = "net4_narrow"
rate = 1e9
burst = 1e9
action = "drop"

[[class]]
name = "net4_host"
rate = 0.001
burst = 25
cost = 2
action = "mark"
mark_dscp = 12

[[class]]
name = "net6"
rate = 0
burst = 1
action = "reject"

[[class]]
name = "net6_narrow"
rate = 1e9
burst = 1e9
action = "drop"

[[rule]]
class = "port_drop"
dst_port = 8000

[[rule]]
class = "port_mark"
dst_port = 8001

[[rule]]
class = "port_open"
dst_port = 8002

[[rule]]
class = "port_paced"
dst_port = 8003

[[rule]]
class = "port_observe"
dst_port = 8004

[[rule]]
class = "port_off"
dst_port = 8005

[[rule]]
class = "dscp_mark"
dscp = 10

[[rule]]
class = "dscp_open"
dscp = 46

[[rule]]
class = "net4"
src_cidr = "10.9.0.0/16"

[[rule]]
class = "net4_narrow"
src_cidr = "10.9.9.0/24"

[[rule]]
class = "net4_host"
src_cidr = "10.9.9.9/32"

[[rule]]
class = "net6"
src_cidr = "fd09::/16"

[[rule]]
class = "net6_narrow"
src_cidr = "fd09:9::/32"

[[tenant]]
name = "t_open"
cidrs = ["10.0.0.0/24", "fd00::/64"]
rate = 1e9
burst = 1e9

[[tenant]]
name = "t_paced"
cidrs = ["10.9.0.0/16"]
rate = 0.001
burst = 200

[[tenant]]
name = "t_closed"
cidrs = ["fd01::/16"]
rate = 0
burst = 1
"#;

/// Globally observing, DSCP rules only (no CIDR lookups), one class enforcing on its own.
const OBSERVE: &str = r#"
mode = "observe"
default_class = "closed"

[[class]]
name = "closed"
rate = 0
burst = 1
action = "reject"

[[class]]
name = "strict"
rate = 0
burst = 1
action = "reject"
mode = "enforce"

[[class]]
name = "paced"
rate = 0.001
burst = 30
action = "drop"

[[rule]]
class = "strict"
dscp = 10

[[rule]]
class = "paced"
dscp = 46
"#;

/// Globally off, one port rule to a class that enforces on its own.
const OFF: &str = r#"
mode = "off"
default_class = "closed"

[[class]]
name = "closed"
rate = 0
burst = 1
action = "reject"

[[class]]
name = "strict"
rate = 0
burst = 1
action = "drop"
mode = "enforce"

[[rule]]
class = "strict"
dst_port = 8000
"#;

/// The values the configs' rules match.
fn targets() -> Targets {
    let v6 = |a: u16, b: u16| {
        let mut addr = [0u8; 16];
        addr[..4].copy_from_slice(&[(a >> 8) as u8, a as u8, (b >> 8) as u8, b as u8]);
        addr
    };
    Targets {
        v4_sources: vec![[10, 9, 0, 0], [10, 9, 9, 0], [10, 9, 9, 9], [10, 1, 0, 0]],
        v6_sources: vec![v6(0xfd09, 0), v6(0xfd09, 9), v6(0xfd01, 0)],
        dst_ports: (8000..=8005).collect(),
        dscps: vec![10, 46],
    }
}

/// [`targets`], and the ports, DSCPs and networks `plan`'s rules and tenants
/// match, so that frames reach every rule of a config written for a table.
fn targets_of(plan: &Plan) -> Targets {
    fn add<T: PartialEq + Copy>(to: &mut Vec<T>, values: impl IntoIterator<Item = T>) {
        for value in values {
            if !to.contains(&value) {
                to.push(value);
            }
        }
    }
    // A network's own address, and a host inside it.
    fn inside<const N: usize>(net: [u8; N]) -> [[u8; N]; 2] {
        let mut host = net;
        host[N - 1] |= 2;
        [net, host]
    }
    let mut targets = targets();
    add(&mut targets.dst_ports, plan.dst_ports.keys().copied());
    add(&mut targets.dscps, plan.dscp.keys().copied());
    add(&mut targets.v4_sources, plan.src_v4.keys().chain(plan.tenant_v4.keys()).flat_map(|(_, net)| inside(*net)));
    add(&mut targets.v6_sources, plan.src_v6.keys().chain(plan.tenant_v6.keys()).flat_map(|(_, net)| inside(*net)));
    targets
}

/// `SHEDDER_FUZZ_SCALE` and `SHEDDER_FUZZ_SEED`, read once per test.
struct Knobs {
    scale: usize,
    seed: u64,
}

impl Knobs {
    fn from_env(test: &str, default_seed: u64) -> Self {
        let read = |name: &str| {
            std::env::var(name).ok().map(|v| v.parse::<u64>().unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
        };
        let knobs = Self {
            scale: read("SHEDDER_FUZZ_SCALE").unwrap_or(1).max(1) as usize,
            seed: read("SHEDDER_FUZZ_SEED").unwrap_or(default_seed),
        };
        println!("{test}: SHEDDER_FUZZ_SEED={} SHEDDER_FUZZ_SCALE={}", knobs.seed, knobs.scale);
        knobs
    }
}

/// Whether an independent parser (etherparse, lax about lengths) reads
/// `frame` as a bare TCP SYN (SYN set, ACK clear) the program may judge:
/// IPv4 or IPv6, through any IPv6 extension headers, with the TCP header in
/// this packet (a first fragment holds it).
fn independently_a_bare_syn(frame: &[u8]) -> bool {
    let Ok(packet) = LaxSlicedPacket::from_ethernet(frame) else { return false };
    let payload = match &packet.net {
        Some(LaxNetSlice::Ipv4(ip)) if ip.header().fragments_offset().value() == 0 => ip.payload(),
        Some(LaxNetSlice::Ipv6(ip)) if !ipv6_later_fragment(ip) => ip.payload(),
        _ => return false,
    };
    payload.ip_number == IpNumber::TCP && TcpSlice::from_slice(payload.payload).is_ok_and(|tcp| tcp.syn() && !tcp.ack())
}

/// Whether an IPv6 packet is a fragment other than the first. The offset is
/// read here (RFC 8200 §4.5: the upper 13 bits of bytes 2..4), as etherparse
/// 0.16 decodes it from the wrong bits.
fn ipv6_later_fragment(ip: &LaxIpv6Slice) -> bool {
    ip.extensions().clone().into_iter().any(|ext| match ext {
        Ipv6ExtensionSlice::Fragment(fragment) => {
            let bytes = fragment.slice();
            u16::from_be_bytes([bytes[2], bytes[3]]) >> 3 != 0
        }
        _ => false,
    })
}

/// How one campaign went, for the failure message and the log.
#[derive(Default)]
struct Report {
    frames: usize,
    by_hook: [usize; 2],
    /// Frames the TC test run refused before the program ran (see below).
    tc_refused: usize,
    verdicts: [usize; 3],
    /// The datapath's counters at the end.
    counters: Counters,
    failures: Vec<String>,
}

impl Report {
    fn fail(&mut self, what: String) {
        if self.failures.len() < SHOWN {
            self.failures.push(what);
        } else if self.failures.len() == SHOWN {
            self.failures.push("… (further failures not shown)".into());
        }
    }
}

/// The TC test run refuses (EINVAL) an untagged IPv4 or IPv6 frame whose
/// fixed IP header is cut short; XDP runs those. Anything else it refuses
/// is a failure.
fn tc_may_refuse(frame: &[u8]) -> bool {
    match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => frame.len() < 14 + 20,
        0x86dd => frame.len() < 14 + 40,
        _ => false,
    }
}

/// Runs random frames through a datapath freshly loaded with `config` until
/// the program has judged `frames` of them.
fn campaign(config: &str, frames: usize, seed: u64) -> Report {
    let plan: Plan = Config::parse(config).unwrap().compile().unwrap().plan;
    let mut datapath = Datapath::load().expect("loading the fast path (root)");
    datapath.apply(&plan).unwrap();
    let mut model = Model::fresh(&plan);
    let mut rng = SmallRng::seed_from_u64(seed);
    let targets = targets_of(&plan);
    let mut report = Report::default();
    let (mut generated, mut batch) = (0, 0);
    // Bounded even if the kernel refused every frame.
    while report.frames < frames && generated < 2 * frames {
        let heartbeat = if batch % STALE_ONE_IN == STALE_ONE_IN - 1 { 1 } else { monotonic_ns() };
        datapath.write_heartbeat(heartbeat).unwrap();
        model.live.heartbeat = heartbeat;
        let before = counters(&datapath);
        let mut expected = Counters::new();
        let batch_end = (report.frames + BATCH).min(frames);
        while report.frames < batch_end && generated < 2 * frames {
            let index = generated;
            generated += 1;
            let frame = any_frame(&mut rng, &targets);
            let hook = if rng.random_ratio(1, TC_ONE_IN) { Hook::Tc } else { Hook::Xdp };
            let (code, out) = match run(&datapath, hook, &frame) {
                Ok(result) => result,
                Err(_) if hook == Hook::Tc && tc_may_refuse(&frame) => {
                    report.tc_refused += 1;
                    continue;
                }
                Err(e) => {
                    report.fail(format!("frame {index} [{hook:?}]: test run failed: {e:#}\n      {}", hex(&frame)));
                    continue;
                }
            };
            // Judged after the run, so a refused frame charges no model bucket.
            let want = model.judge(&frame);
            report.frames += 1;
            report.by_hook[hook as usize] += 1;
            report.verdicts[want.verdict as usize] += 1;
            let shed = code != hook.code(Verdict::Pass);
            if shed && !independently_a_bare_syn(&frame) {
                report.fail(format!(
                    "frame {index} [{hook:?}]: returned {code} for a frame that is no bare SYN\n      {}",
                    hex(&frame)
                ));
            }
            if code != hook.code(want.verdict) || out != want.output {
                report.fail(format!(
                    "frame {index} [{hook:?}]: returned {code}, reference says {:?} ({}) counting {:?}\n      in   {}\n      {}",
                    want.verdict,
                    hook.code(want.verdict),
                    want.counted,
                    hex(&frame),
                    describe_difference(&out, &want.output)
                ));
            }
            add_moves(&mut expected, reference_moves(&want, &plan.class_names, &plan.tenant_names));
        }
        let got = moved(&before, &counters(&datapath));
        if got != expected {
            report.fail(format!("batch {batch}: counters moved {got:?}\n      reference counted {expected:?}"));
        }
        batch += 1;
    }
    report.counters = counters(&datapath);
    report
}

/// Runs one test's share of the frames; `must_move` names counters the run
/// must have reached (so a generator that stopped producing some kind of
/// frame cannot pass unnoticed).
fn check(test: &str, config: &str, share: f64, default_seed: u64, must_move: &[&str]) {
    let knobs = Knobs::from_env(test, default_seed);
    let frames = (FRAMES as f64 * share) as usize * knobs.scale;
    let started = Instant::now();
    let report = campaign(config, frames, knobs.seed);
    println!(
        "{test}: {} frames in {:.1?} (XDP {}, TC {}; TC refused {}); reference verdicts pass {}, drop {}, reply {}",
        report.frames,
        started.elapsed(),
        report.by_hook[Hook::Xdp as usize],
        report.by_hook[Hook::Tc as usize],
        report.tc_refused,
        report.verdicts[Verdict::Pass as usize],
        report.verdicts[Verdict::Drop as usize],
        report.verdicts[Verdict::Reply as usize],
    );
    assert!(
        report.failures.is_empty(),
        "{test} (SHEDDER_FUZZ_SEED={}): disagreements with the reference:\n{}",
        knobs.seed,
        report.failures.join("\n")
    );
    let reached: Counters = report.counters.iter().filter(|(_, n)| **n > 0).map(|(k, n)| (k.clone(), *n)).collect();
    println!("{test}: counters reached {reached:?}");
    let idle: Vec<_> = must_move.iter().filter(|name| report.counters.get(**name).is_none_or(|n| *n == 0)).collect();
    assert!(idle.is_empty(), "{test}: the run never reached {idle:?}");
    assert_eq!(report.frames, frames, "frames the program judged");
    assert!(report.by_hook.iter().all(|n| *n > 0), "both hooks ran");
}

#[test]
fn mixed_rules_and_actions_agree_with_the_reference() {
    let mut must_move: Vec<String> = PassReason::ALL
        .iter()
        .filter(|r| **r != PassReason::TruncatedEthernet)
        .map(|r| format!("pass.{}", r.name()))
        .collect();
    must_move.extend(
        [
            "rest.rejected",
            "port_drop.dropped",
            "port_mark.marked",
            "port_open.admitted",
            "port_paced.admitted",
            "port_paced.rejected",
            "port_observe.would_shed",
            "port_off.admitted",
            "dscp_mark.marked",
            "dscp_open.admitted",
            "net4.dropped",
            "net4_narrow.admitted",
            "net4_host.admitted",
            "net4_host.marked",
            "net6.rejected",
            "net6_narrow.admitted",
            "tenant t_open.admitted",
            "tenant t_open.over_class",
            "tenant t_paced.admitted",
            "tenant t_paced.over_tenant",
            "tenant t_paced.over_class",
            "tenant t_closed.over_tenant",
        ]
        .map(String::from),
    );
    check("mixed", MIXED, 0.7, 0x5eed_0001, &must_move.iter().map(String::as_str).collect::<Vec<_>>());
}

#[test]
fn global_observe_agrees_with_the_reference() {
    let must_move = ["closed.would_shed", "strict.rejected", "paced.admitted", "paced.would_shed", "pass.fail_open"];
    check("observe", OBSERVE, 0.15, 0x5eed_0002, &must_move);
}

#[test]
fn global_off_agrees_with_the_reference() {
    check("off", OFF, 0.15, 0x5eed_0003, &["closed.admitted", "strict.dropped", "pass.fail_open"]);
}

/// Every packet table's config, a thousand frames each: the fuzzer holds the
/// program to the reference on the configs the tables were written for too.
#[test]
fn the_packet_tables_configs_agree_with_the_reference() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/packet_table");
    let mut configs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    configs.sort();
    assert!(configs.len() >= 10, "the tables' configs in {}: {configs:?}", dir.display());
    for (i, path) in configs.iter().enumerate() {
        let config = std::fs::read_to_string(path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy();
        check(&format!("table {name}"), &config, 0.01, 0x5eed_0100 + i as u64, &[]);
    }
}
