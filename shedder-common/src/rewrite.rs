//! The two packet rewrites the fast path performs: the RST|ACK that answers a
//! rejected SYN, and the DSCP mark of a degraded one.
//!
//! Both are computed from values the parser already read, so the eBPF program
//! only copies the result into the packet, and the host can test every byte.

use crate::checksum::{finish, pseudo_header_v4, pseudo_header_v6, replace_word, sum_words};

pub const IPPROTO_TCP: u8 = 6;
pub const TCP_FLAG_FIN: u8 = 0x01;
pub const TCP_FLAG_SYN: u8 = 0x02;
pub const TCP_FLAG_RST: u8 = 0x04;
pub const TCP_FLAG_ACK: u8 = 0x10;
/// Hop limit of the replies we originate.
pub const REPLY_TTL: u8 = 64;
pub const IPV4_HEADER_LEN: usize = 20;
pub const IPV6_HEADER_LEN: usize = 40;
pub const TCP_HEADER_LEN: usize = 20;

/// What the RST needs to know about the SYN it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynFacts {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    /// Bytes of data carried by the SYN (TCP Fast Open); usually zero.
    pub payload_len: u16,
}

/// A bare TCP RST|ACK (RFC 9293 §3.10.7.1: a segment without ACK is answered
/// with seq 0 and ack = SEG.SEQ + SEG.LEN, SYN counting as one).
#[inline(always)]
fn rst_tcp_header(syn: &SynFacts, pseudo_sum: u32) -> [u8; TCP_HEADER_LEN] {
    let ack = syn.seq.wrapping_add(1).wrapping_add(syn.payload_len as u32);
    let mut tcp = [0u8; TCP_HEADER_LEN];
    tcp[0..2].copy_from_slice(&syn.dst_port.to_be_bytes());
    tcp[2..4].copy_from_slice(&syn.src_port.to_be_bytes());
    // seq stays 0
    tcp[8..12].copy_from_slice(&ack.to_be_bytes());
    tcp[12] = (TCP_HEADER_LEN as u8 / 4) << 4;
    tcp[13] = TCP_FLAG_RST | TCP_FLAG_ACK;
    // window, checksum and urgent pointer stay 0 until the checksum is known
    let check = finish(pseudo_sum + sum_words(&tcp));
    tcp[16..18].copy_from_slice(&check.to_be_bytes());
    tcp
}

/// IPv4 header + TCP header of the RST answering a SYN from `syn_src` to `syn_dst`.
#[inline(always)]
pub fn rst_ipv4(syn_src: &[u8; 4], syn_dst: &[u8; 4], syn: &SynFacts) -> [u8; IPV4_HEADER_LEN + TCP_HEADER_LEN] {
    let mut out = [0u8; IPV4_HEADER_LEN + TCP_HEADER_LEN];
    out[0] = 0x45;
    out[2..4].copy_from_slice(&((IPV4_HEADER_LEN + TCP_HEADER_LEN) as u16).to_be_bytes());
    out[6] = 0x40; // don't fragment
    out[8] = REPLY_TTL;
    out[9] = IPPROTO_TCP;
    out[12..16].copy_from_slice(syn_dst);
    out[16..20].copy_from_slice(syn_src);
    let check = finish(sum_words(&out[..IPV4_HEADER_LEN]));
    out[10..12].copy_from_slice(&check.to_be_bytes());
    let pseudo = pseudo_header_v4(syn_dst, syn_src, IPPROTO_TCP, TCP_HEADER_LEN as u16);
    out[IPV4_HEADER_LEN..].copy_from_slice(&rst_tcp_header(syn, pseudo));
    out
}

/// IPv6 header + TCP header of the RST answering a SYN from `syn_src` to `syn_dst`.
#[inline(always)]
pub fn rst_ipv6(syn_src: &[u8; 16], syn_dst: &[u8; 16], syn: &SynFacts) -> [u8; IPV6_HEADER_LEN + TCP_HEADER_LEN] {
    let mut out = [0u8; IPV6_HEADER_LEN + TCP_HEADER_LEN];
    out[0] = 0x60;
    out[4..6].copy_from_slice(&(TCP_HEADER_LEN as u16).to_be_bytes());
    out[6] = IPPROTO_TCP;
    out[7] = REPLY_TTL;
    out[8..24].copy_from_slice(syn_dst);
    out[24..40].copy_from_slice(syn_src);
    let pseudo = pseudo_header_v6(syn_dst, syn_src, IPPROTO_TCP, TCP_HEADER_LEN as u16);
    out[IPV6_HEADER_LEN..].copy_from_slice(&rst_tcp_header(syn, pseudo));
    out
}

/// Rewrites the DSCP in an IPv4 header's first word (version/IHL, TOS) and
/// returns the new word with the matching header checksum. ECN bits are kept.
#[inline(always)]
pub fn mark_ipv4(first_word: u16, check: u16, dscp: u8) -> (u16, u16) {
    let new = (first_word & 0xff03) | (((dscp & 0x3f) as u16) << 2);
    (new, replace_word(check, first_word, new))
}

/// Rewrites the DSCP in an IPv6 header's first word (version, traffic class,
/// flow label). IPv6 has no header checksum; ECN bits are kept.
#[inline(always)]
pub fn mark_ipv6(first_word: u32, dscp: u8) -> u32 {
    (first_word & !(0x3f << 22)) | (((dscp & 0x3f) as u32) << 22)
}

/// The DSCP carried by an IPv4 TOS byte or an IPv6 traffic class.
#[inline(always)]
pub const fn dscp_of(traffic_class: u8) -> u8 {
    traffic_class >> 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{IpNumber, Ipv4Header, Ipv6Header, TcpHeader};

    const SYN: SynFacts = SynFacts { src_port: 40_000, dst_port: 8000, seq: 0xfffffffe, payload_len: 0 };

    fn check_tcp_rst(tcp: &TcpHeader, syn: &SynFacts) {
        assert_eq!(tcp.source_port, syn.dst_port);
        assert_eq!(tcp.destination_port, syn.src_port);
        assert!(tcp.rst && tcp.ack && !tcp.syn && !tcp.fin && !tcp.psh);
        assert_eq!(tcp.sequence_number, 0);
        assert_eq!(tcp.acknowledgment_number, syn.seq.wrapping_add(1).wrapping_add(syn.payload_len as u32));
        assert_eq!(tcp.header_len(), 20);
    }

    #[test]
    fn ipv4_rst_is_a_valid_reply_checked_by_an_independent_parser() {
        let (src, dst) = ([10, 7, 0, 2], [10, 7, 0, 1]);
        for syn in [SYN, SynFacts { payload_len: 100, seq: 7, ..SYN }] {
            let bytes = rst_ipv4(&src, &dst, &syn);
            let (ip, rest) = Ipv4Header::from_slice(&bytes).unwrap();
            assert_eq!(ip.source, dst);
            assert_eq!(ip.destination, src);
            assert_eq!(ip.protocol, IpNumber::TCP);
            assert_eq!(ip.total_len, 40);
            assert_eq!(ip.header_checksum, ip.calc_header_checksum());
            let (tcp, tail) = TcpHeader::from_slice(rest).unwrap();
            assert!(tail.is_empty());
            check_tcp_rst(&tcp, &syn);
            assert_eq!(tcp.checksum, tcp.calc_checksum_ipv4(&ip, &[]).unwrap());
        }
    }

    #[test]
    fn ipv6_rst_is_a_valid_reply_checked_by_an_independent_parser() {
        let src = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let dst = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let bytes = rst_ipv6(&src, &dst, &SYN);
        let (ip, rest) = Ipv6Header::from_slice(&bytes).unwrap();
        assert_eq!(ip.source, dst);
        assert_eq!(ip.destination, src);
        assert_eq!(ip.next_header, IpNumber::TCP);
        assert_eq!(ip.payload_length, 20);
        let (tcp, _) = TcpHeader::from_slice(rest).unwrap();
        check_tcp_rst(&tcp, &SYN);
        assert_eq!(tcp.checksum, tcp.calc_checksum_ipv6(&ip, &[]).unwrap());
    }

    #[test]
    fn ipv4_mark_sets_dscp_keeps_ecn_and_fixes_the_checksum() {
        let mut ip = Ipv4Header::new(0, 64, IpNumber::TCP, [10, 0, 0, 1], [10, 0, 0, 2]).unwrap();
        ip.ecn = etherparse::Ipv4Ecn::try_new(0b11).unwrap();
        ip.header_checksum = ip.calc_header_checksum();
        let bytes = ip.to_bytes();
        for dscp in [0u8, 1, 10, 46, 63] {
            let first = u16::from_be_bytes([bytes[0], bytes[1]]);
            let check = u16::from_be_bytes([bytes[10], bytes[11]]);
            let (word, check) = mark_ipv4(first, check, dscp);
            let mut out = bytes.to_vec();
            out[0..2].copy_from_slice(&word.to_be_bytes());
            out[10..12].copy_from_slice(&check.to_be_bytes());
            let (parsed, _) = Ipv4Header::from_slice(&out).unwrap();
            assert_eq!(parsed.dscp.value(), dscp);
            assert_eq!(parsed.ecn.value(), 0b11);
            assert_eq!(parsed.header_checksum, parsed.calc_header_checksum());
            assert_eq!(dscp_of(out[1]), dscp);
        }
    }

    #[test]
    fn ipv6_mark_touches_only_the_dscp_bits() {
        let first = (6u32 << 28) | (0xab << 20) | 0x12345; // version 6, traffic class 0xab, flow 0x12345
        let marked = mark_ipv6(first, 10);
        assert_eq!(marked >> 28, 6);
        assert_eq!(marked & 0xfffff, 0x12345);
        let tc = ((marked >> 20) & 0xff) as u8;
        assert_eq!(dscp_of(tc), 10);
        assert_eq!(tc & 0b11, 0xab & 0b11);
    }
}
