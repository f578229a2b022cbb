//! The real fast path, frame by frame, through `BPF_PROG_TEST_RUN`.
//!
//! Table-driven after Katran's test fixtures: each row is a description, an
//! input frame, the verdict the hook must return, what the frame must look
//! like afterwards, and the one counter that must move. Counters are compared
//! as deltas over *all* classes and pass reasons, so a row also proves that
//! nothing else was counted (a SYN landing in the wrong class fails the row
//! even when the return code happens to be right).
//!
//! Every table runs through both hooks, XDP and TC, each on a freshly loaded
//! datapath: bucket state and counters never leak from one table (or hook)
//! into another, and rows within a table run in order, so a table may
//! deliberately drain a bucket.
//!
//! Expected replies and marks are built by `shedder_testbed::packets` with
//! etherparse, checksums included, and parsed back with etherparse: no
//! expectation relies on `shedder_common::checksum` or `shedder_common::rewrite`.
//!
//! Each row is also put to the host reference (`shedder_common::reference`,
//! which `fuzz_packets.rs` holds the program to): the rows are its
//! specification, so a row it judges differently is a bug in the reference.
//!
//! Each feature keeps its tables in a file of its own under `packet_table/`,
//! run by this same binary: [`classify`], [`parser`], [`actions`], [`modes`],
//! [`bucket`], [`ipv6_extension_headers`], [`tenants`], [`resend`]. This file holds the
//! rows and how they run. The tables' configs are fixture files under
//! `tests/fixtures/packet_table/`, which the differential fuzzer runs over too.

#[path = "packet_table/actions.rs"]
mod actions;
#[path = "packet_table/bucket.rs"]
mod bucket;
#[path = "packet_table/classify.rs"]
mod classify;
#[path = "packet_table/ipv6_extension_headers.rs"]
mod ipv6_extension_headers;
#[path = "packet_table/modes.rs"]
mod modes;
#[path = "packet_table/parser.rs"]
mod parser;
#[path = "packet_table/resend.rs"]
mod resend;
#[path = "packet_table/tenants.rs"]
mod tenants;

use std::net::Ipv6Addr;

use etherparse::{LinkHeader, NetHeaders, PacketHeaders, TransportHeader, VlanHeader};
use shedder_common::{maps::PassReason, reference::Verdict, tenant::Fit, verdict::Outcome};
use shedder_daemon::{
    config::{Config, Plan},
    datapath::Datapath,
    fastpath::Fastpath,
};
use shedder_testbed::{
    packets::{
        ACK, CLIENT_MAC, CLIENT_V4, Ip, RST, SERVER_V4, SERVER_V6, SYN, TCP_LEN, TcpFrame, arp_request, padded,
        truncated,
    },
    test_run::{HOOKS, Hook, describe_difference, run},
};
use shedder_tests::{
    counters::{
        Counters, add_moves, class_moves, counters, moved, pass_moves, reference_moves, resent_moves,
        resent_tenant_moves, tenant_moves,
    },
    model::Model,
};

// --- rows ------------------------------------------------------------------

/// What the frame must look like after the program ran.
enum Out {
    /// Exactly the input.
    Same,
    /// The RST|ACK answering this SYN.
    RstFor(TcpFrame),
    /// This SYN with its DSCP rewritten to the codepoint given.
    Marked(TcpFrame, u8),
}

/// The one counter a row must move (by one).
enum Effect {
    Class(&'static str, Outcome),
    /// A SYN of the class, the same as one it dropped before: `resent` moves too.
    Resent(&'static str, Outcome),
    Pass(PassReason),
}

struct Row {
    what: String,
    frame: Vec<u8>,
    verdict: Verdict,
    out: Out,
    effect: Effect,
    /// The tenant counter the row moves too, if the SYN has a tenant.
    tenant: Option<(&'static str, Fit)>,
    /// The hooks the kernel lets this frame be test-run through.
    hooks: &'static [Hook],
}

impl Row {
    fn tenant(mut self, tenant: &'static str, fit: Fit) -> Self {
        self.tenant = Some((tenant, fit));
        self
    }

    /// The SYN is one the fast path dropped before, sent again.
    fn resent(mut self) -> Self {
        if let Effect::Class(class, outcome) = self.effect {
            self.effect = Effect::Resent(class, outcome);
        }
        self
    }

    fn xdp_only(mut self) -> Self {
        self.hooks = &[Hook::Xdp];
        self
    }
}

fn passed(what: impl Into<String>, frame: Vec<u8>, reason: PassReason) -> Row {
    Row {
        what: what.into(),
        frame,
        verdict: Verdict::Pass,
        out: Out::Same,
        effect: Effect::Pass(reason),
        tenant: None,
        hooks: &HOOKS,
    }
}

fn admitted(what: impl Into<String>, syn: &TcpFrame, class: &'static str) -> Row {
    admitted_frame(what, syn.build(), class)
}

fn admitted_frame(what: impl Into<String>, frame: Vec<u8>, class: &'static str) -> Row {
    Row {
        what: what.into(),
        frame,
        verdict: Verdict::Pass,
        out: Out::Same,
        effect: Effect::Class(class, Outcome::Admitted),
        tenant: None,
        hooks: &HOOKS,
    }
}

fn dropped(what: impl Into<String>, syn: &TcpFrame, class: &'static str) -> Row {
    Row {
        what: what.into(),
        frame: syn.build(),
        verdict: Verdict::Drop,
        out: Out::Same,
        effect: Effect::Class(class, Outcome::Dropped),
        tenant: None,
        hooks: &HOOKS,
    }
}

fn would_shed(what: impl Into<String>, syn: &TcpFrame, class: &'static str) -> Row {
    Row {
        what: what.into(),
        frame: syn.build(),
        verdict: Verdict::Pass,
        out: Out::Same,
        effect: Effect::Class(class, Outcome::WouldShed),
        tenant: None,
        hooks: &HOOKS,
    }
}

/// `frame` is the SYN as sent (it may be padded); `syn` describes it.
fn rejected(what: impl Into<String>, frame: Vec<u8>, syn: &TcpFrame, class: &'static str) -> Row {
    Row {
        what: what.into(),
        frame,
        verdict: Verdict::Reply,
        out: Out::RstFor(syn.clone()),
        effect: Effect::Class(class, Outcome::Rejected),
        tenant: None,
        hooks: &HOOKS,
    }
}

fn marked(what: impl Into<String>, syn: &TcpFrame, class: &'static str, dscp: u8) -> Row {
    Row {
        what: what.into(),
        frame: syn.build(),
        verdict: Verdict::Pass,
        out: Out::Marked(syn.clone(), dscp),
        effect: Effect::Class(class, Outcome::Marked),
        tenant: None,
        hooks: &HOOKS,
    }
}

// --- running rows ----------------------------------------------------------

fn plan_of(config: &str) -> Plan {
    Config::parse(config).expect("test config parses").compile().expect("test config is valid").plan
}

fn load(config: &str) -> Datapath {
    let mut datapath = Datapath::load().expect("loading the fast path (these tests run as root)");
    datapath.apply(&plan_of(config)).expect("applying the test config");
    datapath
}

fn expected_moves(row: &Row) -> Counters {
    let mut moves = match &row.effect {
        Effect::Class(class, outcome) => class_moves(class, *outcome),
        Effect::Resent(class, outcome) => resent_moves(class, *outcome),
        Effect::Pass(reason) => pass_moves(*reason),
    };
    if let Some((tenant, fit)) = row.tenant {
        let resent = matches!(row.effect, Effect::Resent(..));
        add_moves(&mut moves, if resent { resent_tenant_moves(tenant, fit) } else { tenant_moves(tenant, fit) });
    }
    moves
}

/// Runs one row; every way it went wrong, or nothing. The host reference
/// (`shedder_common::reference`) judges the row too: a row it disagrees with
/// is a bug in the reference or in the row.
fn check_row(datapath: &Datapath, model: &mut Model, plan: &Plan, hook: Hook, row: &Row) -> Vec<String> {
    let reference = model.judge(&row.frame);
    let before = counters(datapath);
    let (code, out) = match run(datapath, hook, &row.frame) {
        Ok(result) => result,
        Err(e) => return vec![format!("test run failed: {e:#}")],
    };
    let after = counters(datapath);
    let mut errors = Vec::new();
    let want_code = hook.code(row.verdict);
    if code != want_code {
        errors.push(format!("returned {code}, want {want_code} ({:?})", row.verdict));
    }
    let want_out = match &row.out {
        Out::Same => row.frame.clone(),
        Out::RstFor(syn) => {
            errors.extend(check_rst(syn, &out));
            syn.expected_rst().build()
        }
        Out::Marked(syn, dscp) => {
            errors.extend(check_mark(syn, *dscp, &out));
            syn.clone().dscp(*dscp).build()
        }
    };
    if out != want_out {
        errors.push(describe_difference(&out, &want_out));
    }
    let (got_moves, want_moves) = (moved(&before, &after), expected_moves(row));
    if got_moves != want_moves {
        errors.push(format!("counters moved {got_moves:?}, want {want_moves:?}"));
    }
    let reference_moves = reference_moves(&reference, &plan.class_names, &plan.tenant_names);
    if (reference.verdict, &reference_moves) != (row.verdict, &want_moves) {
        errors.push(format!("reference: {:?} moving {reference_moves:?}", reference.verdict));
    }
    if reference.output != want_out {
        errors.push(format!("reference: {}", describe_difference(&reference.output, &want_out)));
    }
    errors
}

/// Runs a table on a fresh datapath per hook and reports every failing row.
fn check_table(config: &str, rows: &[Row]) {
    let plan = plan_of(config);
    let mut failures = Vec::new();
    for hook in HOOKS {
        let datapath = load(config);
        let mut model = Model::fresh(&plan);
        for row in rows.iter().filter(|row| row.hooks.contains(&hook)) {
            for error in check_row(&datapath, &mut model, &plan, hook, row) {
                failures.push(format!("[{hook:?}] {}: {error}", row.what));
            }
        }
    }
    assert!(failures.is_empty(), "{} failure(s) in {} rows:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

// --- independent checks of rewritten frames --------------------------------

/// Parses a reply with etherparse and checks it field by field, checksums
/// recomputed here from the reply's own headers. (The byte comparison that
/// follows catches the rest; this says *what* is wrong.)
fn check_rst(syn: &TcpFrame, out: &[u8]) -> Vec<String> {
    let mut errors = Vec::new();
    let mut expect = |ok: bool, what: String| {
        if !ok {
            errors.push(what);
        }
    };
    let headers = match PacketHeaders::from_ethernet_slice(out) {
        Ok(h) => h,
        Err(e) => return vec![format!("reply does not parse: {e}")],
    };
    let want_len = syn.l3_offset() + syn.ip.header_len() + TCP_LEN;
    expect(out.len() == want_len, format!("reply is {} bytes, want {want_len}", out.len()));
    if let Some(LinkHeader::Ethernet2(eth)) = &headers.link {
        expect(eth.source == syn.dst_mac && eth.destination == syn.src_mac, "MACs not swapped".into());
    }
    let vlan = match &headers.vlan {
        Some(VlanHeader::Single(tag)) => Some(tag.vlan_id.value()),
        _ => None,
    };
    expect(vlan == syn.vlan, format!("VLAN {vlan:?}, want {:?}", syn.vlan));
    let Some(TransportHeader::Tcp(tcp)) = &headers.transport else {
        return vec!["reply carries no TCP header".into()];
    };
    let tcp_check = match (&headers.net, syn.ip) {
        (Some(NetHeaders::Ipv4(ip, _)), Ip::V4 { src, dst }) => {
            expect(ip.source == dst && ip.destination == src, "IPv4 addresses not swapped".into());
            expect(ip.ihl() == 5, format!("IHL {}, want 5 (no options in a reply)", ip.ihl()));
            expect(ip.total_len == 40, format!("IPv4 total length {}, want 40", ip.total_len));
            let check = ip.calc_header_checksum();
            expect(
                ip.header_checksum == check,
                format!("IPv4 header checksum {:#06x}, want {check:#06x}", ip.header_checksum),
            );
            tcp.calc_checksum_ipv4(ip, &[])
        }
        (Some(NetHeaders::Ipv6(ip, _)), Ip::V6 { src, dst }) => {
            expect(ip.source == dst && ip.destination == src, "IPv6 addresses not swapped".into());
            expect(ip.payload_length == 20, format!("IPv6 payload length {}, want 20", ip.payload_length));
            tcp.calc_checksum_ipv6(ip, &[])
        }
        _ => return vec!["reply is not of the SYN's address family".into()],
    };
    expect(tcp.source_port == syn.dst_port && tcp.destination_port == syn.src_port, "ports not swapped".into());
    let flags = (tcp.rst, tcp.ack, tcp.syn, tcp.fin, tcp.psh, tcp.urg);
    expect(
        flags == (true, true, false, false, false, false),
        format!("flags (rst, ack, syn, fin, psh, urg) = {flags:?}"),
    );
    expect(tcp.sequence_number == 0, format!("seq {}, want 0", tcp.sequence_number));
    let ack = syn.seq.wrapping_add(1).wrapping_add(syn.payload.len() as u32);
    expect(tcp.acknowledgment_number == ack, format!("ack {}, want {ack}", tcp.acknowledgment_number));
    expect(tcp.header_len() == TCP_LEN, format!("TCP header {} bytes, want 20", tcp.header_len()));
    let check = tcp_check.expect("a 20-byte segment fits");
    expect(tcp.checksum == check, format!("TCP checksum {:#06x}, want {check:#06x}", tcp.checksum));
    errors
}

/// Parses a marked SYN with etherparse: the new DSCP, the old ECN, and (IPv4)
/// a header checksum that matches the rewritten header.
fn check_mark(syn: &TcpFrame, dscp: u8, out: &[u8]) -> Vec<String> {
    let mut errors = Vec::new();
    match PacketHeaders::from_ethernet_slice(out).map(|h| h.net) {
        Ok(Some(NetHeaders::Ipv4(ip, _))) => {
            if (ip.dscp.value(), ip.ecn.value()) != (dscp, syn.ecn) {
                errors.push(format!("DSCP/ECN {}/{}, want {dscp}/{}", ip.dscp.value(), ip.ecn.value(), syn.ecn));
            }
            let check = ip.calc_header_checksum();
            if ip.header_checksum != check {
                errors.push(format!("IPv4 header checksum {:#06x}, want {check:#06x}", ip.header_checksum));
            }
        }
        Ok(Some(NetHeaders::Ipv6(ip, _))) => {
            let want = (dscp << 2) | syn.ecn;
            if ip.traffic_class != want {
                errors.push(format!("traffic class {:#04x}, want {want:#04x}", ip.traffic_class));
            }
        }
        other => errors.push(format!("marked frame does not parse as IP: {other:?}")),
    }
    errors
}

// --- addresses -------------------------------------------------------------

fn v6(segments: [u16; 8]) -> [u8; 16] {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Addr::new(a, b, c, d, e, f, g, h).octets()
}

/// Where a client sits relative to the CIDR rules of the classification table.
#[derive(Clone, Copy)]
enum Net {
    /// Matched by no rule.
    Outside,
    /// Inside the short prefix only.
    Wide,
    /// Inside both; the longer prefix must win.
    Narrow,
}

fn syn(family: &str, net: Net) -> TcpFrame {
    match (family, net) {
        ("v4", Net::Outside) => TcpFrame::v4([10, 1, 0, 2], SERVER_V4),
        ("v4", Net::Wide) => TcpFrame::v4([10, 9, 1, 2], SERVER_V4),
        ("v4", Net::Narrow) => TcpFrame::v4([10, 9, 9, 2], SERVER_V4),
        ("v6", Net::Outside) => TcpFrame::v6(v6([0xfd01, 0, 0, 0, 0, 0, 0, 2]), SERVER_V6),
        ("v6", Net::Wide) => TcpFrame::v6(v6([0xfd09, 1, 0, 0, 0, 0, 0, 2]), SERVER_V6),
        ("v6", Net::Narrow) => TcpFrame::v6(v6([0xfd09, 9, 0, 0, 0, 0, 0, 2]), SERVER_V6),
        _ => unreachable!("family is v4 or v6"),
    }
}

const FAMILIES: [&str; 2] = ["v4", "v6"];

/// MSS 1460, SACK permitted, two NOPs: the shape of a real SYN's options.
const SYN_OPTIONS: [u8; 8] = [2, 4, 0x05, 0xb4, 4, 2, 1, 1];
/// Four IPv4 NOP options then end-of-list: IHL 7.
const IPV4_OPTIONS: [u8; 8] = [1, 1, 1, 1, 1, 1, 1, 0];

/// The frame as built, with `bytes` written over it at `at` (checksums left stale).
fn patched(frame: &TcpFrame, at: usize, bytes: &[u8]) -> Vec<u8> {
    let mut out = frame.build();
    out[at..at + bytes.len()].copy_from_slice(bytes);
    out
}

// --- configs ------------------------------------------------------------------

/// A table's config, from `tests/fixtures/packet_table/` (`fuzz_packets.rs`
/// runs the differential fuzzer over every one of them too).
macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../fixtures/packet_table/", $name, ".toml"))
    };
}

const CLASSIFY: &str = fixture!("classify");
const CLOSED: &str = fixture!("closed");
const REJECT: &str = fixture!("reject");
const MARK: &str = fixture!("mark");
const OBSERVE: &str = fixture!("observe");
const CLASS_OBSERVE: &str = fixture!("class_observe");
const OFF: &str = fixture!("off");
const CLASS_OFF: &str = fixture!("class_off");
const BURSTS: &str = fixture!("bursts");
const TENANTS: &str = fixture!("tenants");

// --- the same frames, checked a second way ------------------------------------

#[test]
fn test_frames_are_what_they_claim() {
    // The expected RST of a SYN is a bare RST|ACK by etherparse's own reading;
    // guards the expectations above against a mistake in the frame builder.
    let s = TcpFrame::v4_default();
    let rst = s.expected_rst();
    assert_eq!((rst.flags, rst.seq, rst.ack), (RST | ACK, 0, s.seq.wrapping_add(1)));
    assert_eq!(s.flags, SYN);
    let bytes = rst.build();
    assert!(check_rst(&s, &bytes).is_empty(), "{:?}", check_rst(&s, &bytes));
    let marked = s.clone().dscp(46).ecn(1);
    assert!(check_mark(&s.clone().ecn(1), 46, &marked.build()).is_empty());
}
