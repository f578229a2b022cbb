//! Parse: Ethernet (with one 802.1Q tag), IPv4 or IPv6 (through a bounded
//! chain of extension headers, see `shedder_common::ipv6_ext`), TCP.
//!
//! Only a bare SYN (SYN set, ACK clear) comes out as [`Syn`]; everything else
//! is a [`PassReason`], so established flows are never charged or touched.

use network_types::{
    eth::EthHdr,
    ip::{Ipv4Hdr, Ipv6Hdr},
    tcp::TcpHdr,
    vlan::VlanHdr,
};
use shedder_common::{
    ipv6_ext::{self, Next},
    maps::PassReason,
    rewrite::{IPPROTO_TCP, SynFacts, dscp_of},
};

use crate::frame::Frame;

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const IPV4_FRAG_OFFSET: u16 = 0x1fff;

/// The most bytes of a frame the parser reads: a tagged Ethernet header, the
/// fixed IPv6 header, the longest extension chain walked, and a TCP header
/// with 40 bytes of options.
pub const HEADERS_MAX: usize = 18 + 40 + ipv6_ext::MAX_CHAIN * ipv6_ext::LONGEST_HEADER + 60;

/// The SYN's addresses; the source is what CIDR rules key on.
#[derive(Clone, Copy)]
pub enum Addrs {
    V4 { src: [u8; 4], dst: [u8; 4] },
    V6 { src: [u8; 16], dst: [u8; 16] },
}

/// A new connection attempt, with everything classify and act need.
pub struct Syn {
    /// Offset of the IP header.
    pub l3: usize,
    /// Bytes between the fixed IP header and TCP: IPv4 options or IPv6
    /// extension headers. A reply leaves them out.
    pub ip_extra: usize,
    pub addrs: Addrs,
    pub dscp: u8,
    pub facts: SynFacts,
}

#[inline(always)]
fn be16(bytes: [u8; 2]) -> u16 {
    u16::from_be_bytes(bytes)
}

#[inline(always)]
pub fn parse(frame: &Frame) -> Result<Syn, PassReason> {
    let eth: EthHdr = frame.read(0).ok_or(PassReason::TruncatedEthernet)?;
    let mut l3 = EthHdr::LEN;
    let mut ether_type = u16::from_be(eth.ether_type);
    if ether_type == ETH_P_8021Q || ether_type == ETH_P_8021AD {
        let vlan: VlanHdr = frame.read(l3).ok_or(PassReason::TruncatedVlan)?;
        ether_type = u16::from_be(vlan.ether_type);
        l3 += VlanHdr::LEN;
    }
    match ether_type {
        ETH_P_IP => parse_ipv4(frame, l3),
        ETH_P_IPV6 => parse_ipv6(frame, l3),
        _ => Err(PassReason::NotIp),
    }
}

#[inline(always)]
fn parse_ipv4(frame: &Frame, l3: usize) -> Result<Syn, PassReason> {
    let ip: Ipv4Hdr = frame.read(l3).ok_or(PassReason::TruncatedIpv4)?;
    let ihl = (ip.vihl & 0x0f) as usize * 4;
    if ip.vihl >> 4 != 4 || ihl < Ipv4Hdr::LEN {
        return Err(PassReason::BadIpv4Header);
    }
    if l3 + ihl > frame.len() {
        // The fixed header is there but its options run past the frame.
        return Err(PassReason::TruncatedIpv4);
    }
    if ip.proto != IPPROTO_TCP {
        return Err(PassReason::NotTcp);
    }
    let frags = be16(ip.frags);
    if frags & IPV4_FRAG_OFFSET != 0 {
        // Non-first fragment: no TCP header here to judge.
        return Err(PassReason::Ipv4Fragment);
    }
    // A first fragment carries the TCP header and is judged like any SYN.
    let ip_payload = (be16(ip.tot_len) as usize).saturating_sub(ihl);
    let tcp = parse_tcp(frame, l3 + ihl, ip_payload)?;
    let addrs = Addrs::V4 { src: ip.src_addr, dst: ip.dst_addr };
    Ok(Syn { l3, ip_extra: ihl - Ipv4Hdr::LEN, addrs, dscp: dscp_of(ip.tos), facts: tcp })
}

#[inline(always)]
fn parse_ipv6(frame: &Frame, l3: usize) -> Result<Syn, PassReason> {
    let ip: Ipv6Hdr = frame.read(l3).ok_or(PassReason::TruncatedIpv6)?;
    if ip.vcf[0] >> 4 != 6 {
        return Err(PassReason::BadIpv6Header);
    }
    let (l4, segment_len) = walk_extensions(frame, l3 + Ipv6Hdr::LEN, ip.next_hdr, be16(ip.payload_len) as usize)?;
    let tcp = parse_tcp(frame, l4, segment_len)?;
    let traffic_class = (ip.vcf[0] << 4) | (ip.vcf[1] >> 4);
    let addrs = Addrs::V6 { src: ip.src_addr, dst: ip.dst_addr };
    Ok(Syn { l3, ip_extra: l4 - l3 - Ipv6Hdr::LEN, addrs, dscp: dscp_of(traffic_class), facts: tcp })
}

/// Steps over the extension headers from `off` (right after the fixed IPv6
/// header, whose next header is `next_header`) to the TCP header: its offset,
/// and the bytes of the payload length left from there.
#[inline(always)]
fn walk_extensions(
    frame: &Frame,
    mut off: usize,
    mut next_header: u8,
    payload_len: usize,
) -> Result<(usize, usize), PassReason> {
    let end = off + payload_len;
    // One pass more than the headers walked, to judge the one after the last.
    for depth in 0..=ipv6_ext::MAX_CHAIN {
        match ipv6_ext::next(next_header, depth) {
            Next::Tcp => return Ok((off, end - off)),
            Next::Pass(reason) => return Err(reason),
            Next::Extension => {}
        }
        let head = frame.read(off).ok_or(PassReason::TruncatedIpv6)?;
        let step = ipv6_ext::step(next_header, head)?;
        if off + step.len > frame.len() {
            return Err(PassReason::TruncatedIpv6);
        }
        if off + step.len > end {
            return Err(PassReason::BadIpv6ExtensionHeader);
        }
        off += step.len;
        next_header = step.next_header;
    }
    // `next` ends the chain at MAX_CHAIN; the verifier needs a way out all the same.
    Err(PassReason::Ipv6ChainTooLong)
}

#[inline(always)]
fn parse_tcp(frame: &Frame, off: usize, ip_payload: usize) -> Result<SynFacts, PassReason> {
    let tcp: TcpHdr = frame.read(off).ok_or(PassReason::TruncatedTcp)?;
    let doff = tcp.doff() as usize * 4;
    if doff < TcpHdr::LEN {
        return Err(PassReason::BadTcpHeader);
    }
    if tcp.syn() == 0 || tcp.ack() != 0 {
        return Err(PassReason::NotSyn);
    }
    if off + doff > frame.len() || doff > ip_payload {
        // The header runs past the frame, or past the end of the segment its
        // IP header declares (the IP lengths, not the frame, say where it ends).
        return Err(PassReason::TruncatedTcp);
    }
    Ok(SynFacts {
        src_port: be16(tcp.source),
        dst_port: be16(tcp.dest),
        seq: u32::from_be_bytes(tcp.seq),
        payload_len: ip_payload.saturating_sub(doff) as u16,
    })
}
