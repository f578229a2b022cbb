//! A host model of the fast path: what the program must do with a frame,
//! given the maps' contents, the bucket states and the clock.
//!
//! It exists to be compared with the real program (`tests/tests/fuzz_packets.rs`
//! runs random and mutated frames through both). The frame is parsed here
//! independently of `shedder-ebpf/src/parse.rs`: a plain walk over the bytes,
//! field offsets as the RFCs number them, so a bounds or offset mistake in the
//! program shows up as a disagreement. What happens *after* parsing is the
//! shared arithmetic the program itself calls ([`pick_class`], [`charge`],
//! [`decide`], the rewrites), and so are the rules of the IPv6 extension
//! header walk ([`ipv6_ext`]: which headers, how long): the point is to check
//! the parser and the glue, not to derive the arithmetic twice. The fail-open watchdog is modelled
//! too ([`is_stale`]), so a frame judged while the heartbeat is stale still agrees.
//!
//! The order of the checks (which reason a frame that is wrong in two ways
//! is counted under) is the program's documented contract; the packet tables
//! in `tests/tests/packet_table.rs` pin it row by row.

extern crate alloc;

use alloc::{collections::BTreeMap, vec::Vec};

use crate::{
    bucket::{BucketParams, charge, refund},
    classify::{RuleTarget, effective_mode, pick_class},
    ipv6_ext::{self, HEAD_LEN, Next},
    maps::{Action, ClassConfig, GlobalConfig, MAX_CLASSES, MAX_TENANTS, PassReason, rule_flags},
    resend::{fingerprint, fold, slot},
    rewrite::{IPPROTO_TCP, SynFacts, TCP_FLAG_ACK, TCP_FLAG_SYN, dscp_of, mark_ipv4, mark_ipv6, rst_ipv4, rst_ipv6},
    tenant::{Buckets, Fit, charge_both},
    verdict::{Outcome, charges_bucket, decide},
    watchdog::is_stale,
};

/// The maps' contents, keyed as the maps key them (the daemon's `Plan` has
/// the same shape).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    pub global: GlobalConfig,
    /// Slot `i` of `CLASSES`; slots past the end hold a zeroed config, as an
    /// array map slot nobody wrote does.
    pub classes: Vec<ClassConfig>,
    /// (prefix length, network address) -> target.
    pub src_v4: BTreeMap<(u32, [u8; 4]), RuleTarget>,
    pub src_v6: BTreeMap<(u32, [u8; 16]), RuleTarget>,
    pub dst_ports: BTreeMap<u16, RuleTarget>,
    pub dscp: BTreeMap<u8, RuleTarget>,
    /// Slot `i` of `TENANTS`.
    pub tenants: Vec<BucketParams>,
    /// (prefix length, network address) -> tenant target (slot + 1).
    pub tenant_v4: BTreeMap<(u32, [u8; 4]), RuleTarget>,
    pub tenant_v6: BTreeMap<(u32, [u8; 16]), RuleTarget>,
}

/// What the hook does with the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Drop,
    /// The frame became a reply that goes back out where it came in.
    Reply,
}

impl Verdict {
    /// The XDP program's return value.
    pub const fn xdp_action(self) -> u32 {
        match self {
            Self::Pass => 2,  // XDP_PASS
            Self::Drop => 1,  // XDP_DROP
            Self::Reply => 3, // XDP_TX
        }
    }

    /// The TC program's return value.
    pub const fn tc_action(self) -> u32 {
        match self {
            Self::Pass => 0,  // TC_ACT_OK
            Self::Drop => 2,  // TC_ACT_SHOT
            Self::Reply => 7, // TC_ACT_REDIRECT
        }
    }
}

/// The one counter a frame moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// `seen` and this outcome of the class in this slot.
    Class(u32, Outcome),
    Pass(PassReason),
    /// Nothing: the class index points past the `CLASSES` map, which the
    /// daemon never writes but the program must survive.
    Nothing,
}

/// What the program must do with one frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub verdict: Verdict,
    pub counted: Counted,
    /// The frame as the program leaves it: the input, the marked input, or the reply.
    pub output: Vec<u8>,
    /// The tenant counter a charged SYN from a tenant's addresses moves.
    pub tenant: Option<(u32, Fit)>,
    /// A charged SYN dropped before and sent again: the class's `resent`
    /// counter moves too, and its tenant's if it has one.
    pub resent: bool,
}

/// What the program reads besides the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    /// Slot -> bucket state, as in `BUCKETS`; a fresh slot holds 0 (a full bucket).
    pub tats: [u64; MAX_CLASSES as usize],
    /// Slot -> tenant bucket state, as in `TENANT_BUCKETS`.
    pub tenant_tats: [u64; MAX_TENANTS as usize],
    /// The daemon's last heartbeat, as in `HEARTBEAT` (0: never written).
    pub heartbeat: u64,
    /// Slot -> fingerprint of the last SYN dropped there, as in one CPU's
    /// `DROPPED_SYNS` (the program's runs being compared must stay on one CPU).
    pub dropped_syns: BTreeMap<u32, u64>,
}

impl Default for Live {
    fn default() -> Self {
        Self {
            tats: [0; MAX_CLASSES as usize],
            tenant_tats: [0; MAX_TENANTS as usize],
            heartbeat: 0,
            dropped_syns: BTreeMap::new(),
        }
    }
}

/// Charges one bucket state in place; a closed bucket (rate 0) admits nothing.
fn charge_state(tat: &mut u64, now: u64, params: &BucketParams) -> bool {
    match (!params.is_closed()).then(|| charge(*tat, now, params)).flatten() {
        Some(next) => {
            *tat = next;
            true
        }
        None => false,
    }
}

/// The two buckets of one SYN, in the model's bucket states.
struct ModelBuckets<'a> {
    class: (&'a mut u64, &'a BucketParams),
    tenant: Option<(&'a mut u64, &'a BucketParams)>,
    now: u64,
}

impl Buckets for ModelBuckets<'_> {
    fn charge_tenant(&mut self) -> bool {
        self.tenant.as_mut().is_some_and(|(tat, params)| charge_state(tat, self.now, params))
    }

    fn charge_class(&mut self) -> bool {
        charge_state(self.class.0, self.now, self.class.1)
    }

    fn refund_tenant(&mut self) {
        if let Some((tat, params)) = self.tenant.as_mut()
            && let Some(back) = refund(**tat, self.now, params)
        {
            **tat = back;
        }
    }
}

/// Judges `frame` as the program would at time `now` (CLOCK_MONOTONIC ns),
/// charging the buckets in `live` as the program charges `BUCKETS`.
pub fn judge(frame: &[u8], tables: &Tables, live: &mut Live, now: u64) -> Expected {
    let pass =
        |counted| Expected { verdict: Verdict::Pass, counted, output: frame.to_vec(), tenant: None, resent: false };
    let syn = match parse(frame) {
        Ok(syn) => syn,
        Err(reason) => return pass(Counted::Pass(reason)),
    };
    let class = class_of(&syn, tables);
    if class >= MAX_CLASSES {
        return pass(Counted::Nothing);
    }
    let config = tables.classes.get(class as usize).copied().unwrap_or_default();
    let mode = effective_mode(tables.global.mode, config.mode);
    let charged = charges_bucket(mode);
    if charged && is_stale(now, live.heartbeat, tables.global.fail_open_after_ns) {
        return pass(Counted::Pass(PassReason::FailOpen));
    }
    // A tenant slot past the map is no tenant: the program's lookup of its
    // bucket fails the same way.
    let tenant = tenant_of(&syn, tables).filter(|slot| *slot < MAX_TENANTS);
    let mut fit = Fit::Both;
    let sighting = charged.then(|| {
        let src = match syn.addresses {
            Addresses::V4(src, _) => src,
            Addresses::V6(src, _) => fold(&src),
        };
        let fingerprint = fingerprint(src, syn.facts.src_port, syn.facts.dst_port, syn.facts.seq);
        (slot(fingerprint), fingerprint)
    });
    let resent = sighting.is_some_and(|(slot, fingerprint)| live.dropped_syns.get(&slot) == Some(&fingerprint));
    if charged {
        let no_tenant = BucketParams::default();
        let mut buckets = ModelBuckets {
            class: (&mut live.tats[class as usize], &config.bucket),
            tenant: tenant.map(|slot| {
                (&mut live.tenant_tats[slot as usize], tables.tenants.get(slot as usize).unwrap_or(&no_tenant))
            }),
            now,
        };
        fit = charge_both(&mut buckets, tenant.is_some());
    }
    let outcome = decide(mode, Action::from_u8(config.action), fit.fits());
    let counted = Counted::Class(class, outcome);
    let tenant = tenant.filter(|_| charged).map(|slot| (slot, fit));
    let output = match outcome {
        Outcome::Admitted | Outcome::WouldShed | Outcome::Dropped => frame.to_vec(),
        Outcome::Marked => marked(frame, &syn, config.mark_dscp),
        Outcome::Rejected => reset(frame, &syn),
    };
    let verdict = match outcome {
        Outcome::Admitted | Outcome::WouldShed | Outcome::Marked => Verdict::Pass,
        Outcome::Dropped => Verdict::Drop,
        Outcome::Rejected => Verdict::Reply,
    };
    if let (Outcome::Dropped, Some((slot, fingerprint))) = (outcome, sighting) {
        live.dropped_syns.insert(slot, fingerprint);
    }
    Expected { verdict, counted, output, tenant, resent }
}

// --- parsing ------------------------------------------------------------------

/// A bare SYN, as far as the model needs it.
struct Syn {
    /// Where the IP header starts.
    l3: usize,
    addresses: Addresses,
    dscp: u8,
    facts: SynFacts,
}

/// The SYN's (source, destination) addresses.
#[derive(Clone, Copy)]
enum Addresses {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
/// 802.1Q customer tag and 802.1ad service tag: one tag of either is looked through.
const ETHERTYPE_VLAN: [u16; 2] = [0x8100, 0x88a8];

fn be16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    bytes[..N].try_into().expect("caller sliced N bytes")
}

fn parse(frame: &[u8]) -> Result<Syn, PassReason> {
    // Ethernet II: destination (6), source (6), EtherType (2).
    let ethertype = frame.get(12..14).ok_or(PassReason::TruncatedEthernet)?;
    let (ethertype, l3) = if ETHERTYPE_VLAN.contains(&be16(ethertype)) {
        // Tag control (2), then the encapsulated EtherType (2).
        (be16(frame.get(16..18).ok_or(PassReason::TruncatedVlan)?), 18)
    } else {
        (be16(ethertype), 14)
    };
    match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(frame, l3),
        ETHERTYPE_IPV6 => parse_ipv6(frame, l3),
        _ => Err(PassReason::NotIp),
    }
}

/// RFC 791 §3.1.
fn parse_ipv4(frame: &[u8], l3: usize) -> Result<Syn, PassReason> {
    let header = frame.get(l3..l3 + 20).ok_or(PassReason::TruncatedIpv4)?;
    let (version, header_len) = (header[0] >> 4, usize::from(header[0] & 0x0f) * 4);
    if version != 4 || header_len < 20 {
        return Err(PassReason::BadIpv4Header);
    }
    if frame.len() < l3 + header_len {
        return Err(PassReason::TruncatedIpv4);
    }
    if header[9] != IPPROTO_TCP {
        return Err(PassReason::NotTcp);
    }
    let fragment_offset = be16(&header[6..8]) & 0x1fff;
    if fragment_offset != 0 {
        return Err(PassReason::Ipv4Fragment);
    }
    let segment_len = usize::from(be16(&header[2..4])).saturating_sub(header_len);
    let facts = parse_tcp(frame, l3 + header_len, segment_len)?;
    let addresses = Addresses::V4(array(&header[12..16]), array(&header[16..20]));
    Ok(Syn { l3, addresses, dscp: dscp_of(header[1]), facts })
}

/// RFC 8200 §3.
fn parse_ipv6(frame: &[u8], l3: usize) -> Result<Syn, PassReason> {
    let header = frame.get(l3..l3 + 40).ok_or(PassReason::TruncatedIpv6)?;
    if header[0] >> 4 != 6 {
        return Err(PassReason::BadIpv6Header);
    }
    // The payload length covers the extension headers and the TCP segment.
    let end = l3 + 40 + usize::from(be16(&header[4..6]));
    let l4 = extension_headers(frame, l3 + 40, end, header[6])?;
    let traffic_class = (header[0] << 4) | (header[1] >> 4);
    let facts = parse_tcp(frame, l4, end - l4)?;
    let addresses = Addresses::V6(array(&header[8..24]), array(&header[24..40]));
    Ok(Syn { l3, addresses, dscp: dscp_of(traffic_class), facts })
}

/// RFC 8200 §4: the extension headers from `at`, the first of type
/// `next_header`, up to the TCP header; returns where that starts. `end` is
/// where the payload length says the packet ends.
fn extension_headers(frame: &[u8], mut at: usize, end: usize, mut next_header: u8) -> Result<usize, PassReason> {
    // `ipv6_ext::next` ends every chain by `MAX_CHAIN` headers.
    for depth in 0.. {
        match ipv6_ext::next(next_header, depth) {
            Next::Tcp => return Ok(at),
            Next::Pass(reason) => return Err(reason),
            Next::Extension => {}
        }
        let head = frame.get(at..at + HEAD_LEN).ok_or(PassReason::TruncatedIpv6)?;
        let step = ipv6_ext::step(next_header, array(head))?;
        if frame.len() < at + step.len {
            return Err(PassReason::TruncatedIpv6);
        }
        if end < at + step.len {
            return Err(PassReason::BadIpv6ExtensionHeader);
        }
        (at, next_header) = (at + step.len, step.next_header);
    }
    unreachable!("the depth counter never runs out")
}

/// RFC 9293 §3.1. `segment_len` is what the IP header says the segment holds.
fn parse_tcp(frame: &[u8], l4: usize, segment_len: usize) -> Result<SynFacts, PassReason> {
    let header = frame.get(l4..l4 + 20).ok_or(PassReason::TruncatedTcp)?;
    let header_len = usize::from(header[12] >> 4) * 4;
    if header_len < 20 {
        return Err(PassReason::BadTcpHeader);
    }
    let flags = header[13];
    if flags & TCP_FLAG_SYN == 0 || flags & TCP_FLAG_ACK != 0 {
        return Err(PassReason::NotSyn);
    }
    // Cut short by the frame, or by the IP header's own length.
    if frame.len() < l4 + header_len || segment_len < header_len {
        return Err(PassReason::TruncatedTcp);
    }
    Ok(SynFacts {
        src_port: be16(&header[0..2]),
        dst_port: be16(&header[2..4]),
        seq: u32::from_be_bytes(array(&header[4..8])),
        // The IP length's claim, not the frame's: Ethernet padding is not data.
        payload_len: (segment_len - header_len) as u16,
    })
}

// --- classification -----------------------------------------------------------

/// The longest prefix in `rules` that covers `addr`, as an LPM trie answers.
fn longest_prefix<const N: usize>(rules: &BTreeMap<(u32, [u8; N]), RuleTarget>, addr: &[u8; N]) -> RuleTarget {
    let covers = |len: u32, net: &[u8; N]| {
        (0..len as usize).all(|bit| {
            let mask = 0x80u8 >> (bit % 8);
            (net[bit / 8] & mask) == (addr[bit / 8] & mask)
        })
    };
    rules
        .iter()
        .filter(|((len, net), _)| *len as usize <= N * 8 && covers(*len, net))
        .max_by_key(|((len, _), _)| *len)
        .map_or(0, |(_, target)| *target)
}

/// The tenant slot whose CIDR covers the source, longest prefix first.
fn tenant_of(syn: &Syn, tables: &Tables) -> Option<u32> {
    let present = |flag: u8| tables.global.rules_present & flag != 0;
    let target = match syn.addresses {
        Addresses::V4(src, _) if present(rule_flags::TENANT_V4) => longest_prefix(&tables.tenant_v4, &src),
        Addresses::V6(src, _) if present(rule_flags::TENANT_V6) => longest_prefix(&tables.tenant_v6, &src),
        _ => 0,
    };
    target.checked_sub(1)
}

fn class_of(syn: &Syn, tables: &Tables) -> u32 {
    let present = |flag: u8| tables.global.rules_present & flag != 0;
    let src = match syn.addresses {
        Addresses::V4(src, _) if present(rule_flags::SRC_V4) => longest_prefix(&tables.src_v4, &src),
        Addresses::V6(src, _) if present(rule_flags::SRC_V6) => longest_prefix(&tables.src_v6, &src),
        _ => 0,
    };
    let lookup = |on: bool, target: Option<&RuleTarget>| if on { target.copied().unwrap_or(0) } else { 0 };
    let port = lookup(present(rule_flags::DST_PORT), tables.dst_ports.get(&syn.facts.dst_port));
    let dscp = lookup(present(rule_flags::DSCP), tables.dscp.get(&syn.dscp));
    pick_class(src, port, dscp, u32::from(tables.global.default_class))
}

// --- the two rewrites -------------------------------------------------------------

/// The SYN with its DSCP rewritten (IPv4 header checksum fixed), ECN kept.
fn marked(frame: &[u8], syn: &Syn, dscp: u8) -> Vec<u8> {
    let mut out = frame.to_vec();
    let l3 = syn.l3;
    match syn.addresses {
        Addresses::V4(..) => {
            let (word, check) = mark_ipv4(be16(&out[l3..]), be16(&out[l3 + 10..]), dscp);
            out[l3..l3 + 2].copy_from_slice(&word.to_be_bytes());
            out[l3 + 10..l3 + 12].copy_from_slice(&check.to_be_bytes());
        }
        Addresses::V6(..) => {
            let word = mark_ipv6(u32::from_be_bytes(array(&out[l3..])), dscp);
            out[l3..l3 + 4].copy_from_slice(&word.to_be_bytes());
        }
    }
    out
}

/// The RST|ACK answering the SYN: its link header with the MACs swapped (a
/// VLAN tag kept as it was), then fresh IP and TCP headers, nothing after.
fn reset(frame: &[u8], syn: &Syn) -> Vec<u8> {
    let mut out = frame[..syn.l3].to_vec();
    out[0..6].copy_from_slice(&frame[6..12]);
    out[6..12].copy_from_slice(&frame[0..6]);
    match syn.addresses {
        Addresses::V4(src, dst) => out.extend_from_slice(&rst_ipv4(&src, &dst, &syn.facts)),
        Addresses::V6(src, dst) => out.extend_from_slice(&rst_ipv6(&src, &dst, &syn.facts)),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{bucket::BucketParams, classify::target_for};

    /// An untagged IPv4 SYN from 10.9.9.2, port 40000 to 8000, no options.
    fn syn_v4() -> Vec<u8> {
        let mut f = alloc::vec![0u8; 14 + 20 + 20];
        f[0..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[23] = IPPROTO_TCP;
        f[26..30].copy_from_slice(&[10, 9, 9, 2]);
        f[30..34].copy_from_slice(&[10, 0, 0, 1]);
        f[34..36].copy_from_slice(&40_000u16.to_be_bytes());
        f[36..38].copy_from_slice(&8000u16.to_be_bytes());
        f[46] = 5 << 4;
        f[47] = TCP_FLAG_SYN;
        f
    }

    fn tables(action: Action) -> Tables {
        let closed =
            ClassConfig { bucket: BucketParams::new(0, 1000, 1000), action: action as u8, ..Default::default() };
        let open = ClassConfig { bucket: BucketParams::new(1000, 2000, 1000), ..Default::default() };
        Tables {
            global: GlobalConfig {
                mode: crate::classify::Mode::Enforce as u8,
                rules_present: rule_flags::SRC_V4,
                ..Default::default()
            },
            classes: alloc::vec![closed, open],
            src_v4: [((16, [10, 9, 0, 0]), target_for(0)), ((24, [10, 9, 9, 0]), target_for(1))].into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_longest_prefix_wins_and_its_bucket_is_charged_until_empty() {
        let mut live = Live::default();
        let verdicts: Vec<_> = (0..3).map(|_| judge(&syn_v4(), &tables(Action::Drop), &mut live, 1).counted).collect();
        let (admitted, dropped) = (Counted::Class(1, Outcome::Admitted), Counted::Class(1, Outcome::Dropped));
        assert_eq!(verdicts, [admitted, admitted, dropped]);
        let mut wide = syn_v4();
        wide[28] = 1; // 10.9.1.2: only the /16 covers it
        let e = judge(&wide, &tables(Action::Drop), &mut live, 1);
        assert_eq!((e.verdict, e.counted), (Verdict::Drop, Counted::Class(0, Outcome::Dropped)));
    }

    #[test]
    fn a_reject_is_the_link_header_swapped_and_a_fresh_rst() {
        let mut frame = syn_v4();
        frame.extend_from_slice(&[0; 6]); // Ethernet padding: not in the reply
        let mut wide = frame.clone();
        wide[28] = 1;
        let e = judge(&wide, &tables(Action::Reject), &mut Live::default(), 1);
        assert_eq!(e.verdict, Verdict::Reply);
        assert_eq!(e.output.len(), 14 + 40);
        assert_eq!((&e.output[0..6], &e.output[6..12]), (&wide[6..12], &wide[0..6]));
        assert_eq!(&e.output[26..30], &[10, 0, 0, 1]);
        assert_eq!(e.output[47], 0x14, "RST|ACK");
    }

    #[test]
    fn a_syn_behind_an_extension_header_is_judged_and_answered_without_it() {
        // IPv6 from fd09::2, a hop-by-hop header (PadN), then the SYN.
        let mut f = alloc::vec![0u8; 14 + 40 + 8 + 20];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f[14] = 0x60;
        f[18..20].copy_from_slice(&28u16.to_be_bytes());
        f[22..24].copy_from_slice(&[0xfd, 0x09]);
        f[37] = 2;
        f[54..62].copy_from_slice(&[IPPROTO_TCP, 0, 1, 4, 0, 0, 0, 0]);
        f[64..66].copy_from_slice(&8000u16.to_be_bytes());
        f[74] = 5 << 4;
        f[75] = TCP_FLAG_SYN;
        let t = tables(Action::Reject);
        let e = judge(&f, &t, &mut Live::default(), 1);
        assert_eq!((e.verdict, e.counted), (Verdict::Reply, Counted::Class(0, Outcome::Rejected)));
        assert_eq!(e.output.len(), 14 + 40 + 20, "a plain IPv6 + TCP reply");
        assert_eq!(e.output[20], IPPROTO_TCP, "whose next header is TCP");
        assert_eq!(u16::from_be_bytes([e.output[54], e.output[55]]), 8000, "from the port the SYN went to");
        let reason = |at: usize, byte: u8| {
            let mut g = f.clone();
            g[at] = byte;
            judge(&g, &t, &mut Live::default(), 1).counted
        };
        assert_eq!(reason(20, ipv6_ext::ESP), Counted::Pass(PassReason::Ipv6Esp));
        assert_eq!(reason(54, ipv6_ext::HOP_BY_HOP), Counted::Pass(PassReason::Ipv6ExtensionHeader));
        assert_eq!(reason(19, 4), Counted::Pass(PassReason::BadIpv6ExtensionHeader), "payload length 4");
        assert_eq!(reason(55, 5), Counted::Pass(PassReason::TruncatedIpv6), "48 bytes, past the frame");
    }

    #[test]
    fn every_header_cut_short_has_its_reason() {
        let syn = syn_v4();
        let t = tables(Action::Drop);
        let reason = |len: usize| judge(&syn[..len], &t, &mut Live::default(), 1).counted;
        assert_eq!(reason(13), Counted::Pass(PassReason::TruncatedEthernet));
        assert_eq!(reason(33), Counted::Pass(PassReason::TruncatedIpv4));
        assert_eq!(reason(53), Counted::Pass(PassReason::TruncatedTcp));
        let mut tagged = syn[..12].to_vec();
        tagged.extend_from_slice(&[0x88, 0xa8, 0, 5]);
        tagged.extend_from_slice(&syn[12..]);
        let tagged_reason = |len: usize| judge(&tagged[..len], &t, &mut Live::default(), 1).counted;
        assert_eq!(tagged_reason(17), Counted::Pass(PassReason::TruncatedVlan));
        assert_eq!(tagged_reason(57), Counted::Pass(PassReason::TruncatedTcp));
    }
}
