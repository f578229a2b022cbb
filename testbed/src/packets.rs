//! Test frames, built with `etherparse` so every length and checksum in them
//! comes from an implementation independent of the one under test.
//!
//! [`TcpFrame`] is one Ethernet frame carrying IPv4 or IPv6 and TCP (or UDP).
//! Its defaults are a bare SYN from a client to a server; each method changes
//! one thing, so a table row reads as "a SYN, but ...":
//!
//! ```
//! use shedder_testbed::packets::TcpFrame;
//! let syn = TcpFrame::v4([10, 0, 0, 2], [10, 0, 0, 1]).dst_port(8000).vlan(7).build();
//! let ack = TcpFrame::v6_default().ack().build();
//! ```
//!
//! The few frames etherparse refuses to write (IHL below 5, ARP in 0.16) or
//! writes wrong (0.16's IPv6 fragment header) are patched or spelled out by
//! hand, and say so.

use etherparse::{
    EtherType, Ethernet2Header, IpAuthHeader, IpFragOffset, IpNumber, Ipv4Dscp, Ipv4Ecn, Ipv4Header, Ipv4Options,
    Ipv6FlowLabel, Ipv6Header, Ipv6RawExtHeader, SingleVlanHeader, TcpHeader, TcpOptions, UdpHeader, VlanId, VlanPcp,
};

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

pub const ETH_LEN: usize = 14;
pub const VLAN_LEN: usize = 4;
pub const IPV4_LEN: usize = 20;
pub const IPV6_LEN: usize = 40;
pub const TCP_LEN: usize = 20;

/// MACs of the two ends: locally administered, so they can never be real.
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// Default addresses (documentation-style private ranges).
pub const CLIENT_V4: [u8; 4] = [10, 0, 0, 2];
pub const SERVER_V4: [u8; 4] = [10, 0, 0, 1];
pub const CLIENT_V6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
pub const SERVER_V6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The network layer: the address family and both addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ip {
    V4 { src: [u8; 4], dst: [u8; 4] },
    V6 { src: [u8; 16], dst: [u8; 16] },
}

impl Ip {
    /// The same family with source and destination exchanged (a reply's view).
    pub fn swapped(self) -> Self {
        match self {
            Ip::V4 { src, dst } => Ip::V4 { src: dst, dst: src },
            Ip::V6 { src, dst } => Ip::V6 { src: dst, dst: src },
        }
    }

    pub fn header_len(self) -> usize {
        match self {
            Ip::V4 { .. } => IPV4_LEN,
            Ip::V6 { .. } => IPV6_LEN,
        }
    }
}

/// An IPv6 extension header between the fixed header and TCP (or UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipv6Ext {
    /// Hop-by-hop options filling `units` 8-byte units beyond the first.
    HopByHop(u8),
    /// Destination options, filled the same way.
    DestinationOptions(u8),
    /// A segment routing header (type 4) listing the destination, with no
    /// segments left: this host is where the packet ends. 24 bytes.
    Routing,
    /// A fragment header: the offset in 8-byte units, and the M flag.
    Fragment { offset: u16, more: bool },
    /// An authentication header with a 12-byte ICV (HMAC-SHA1-96's): 24 bytes.
    Authentication,
    /// ESP's SPI and sequence number; what follows stands for its ciphertext.
    Esp,
}

impl Ipv6Ext {
    /// A first fragment: offset 0, more to come. It holds the TCP header.
    pub const FIRST_FRAGMENT: Ipv6Ext = Ipv6Ext::Fragment { offset: 0, more: true };

    /// Its value in the next-header field of the header before it.
    pub fn ip_number(self) -> IpNumber {
        match self {
            Ipv6Ext::HopByHop(_) => IpNumber::IPV6_HEADER_HOP_BY_HOP,
            Ipv6Ext::DestinationOptions(_) => IpNumber::IPV6_DESTINATION_OPTIONS,
            Ipv6Ext::Routing => IpNumber::IPV6_ROUTE_HEADER,
            Ipv6Ext::Fragment { .. } => IpNumber::IPV6_FRAGMENTATION_HEADER,
            Ipv6Ext::Authentication => IpNumber::AUTHENTICATION_HEADER,
            Ipv6Ext::Esp => IpNumber::ENCAPSULATING_SECURITY_PAYLOAD,
        }
    }

    /// Its bytes, followed by a header of type `next`; `dst` is the packet's destination.
    pub fn to_bytes(self, next: IpNumber, dst: [u8; 16]) -> Vec<u8> {
        match self {
            Ipv6Ext::HopByHop(units) | Ipv6Ext::DestinationOptions(units) => {
                Ipv6RawExtHeader::new_raw(next, &options_filling(6 + 8 * usize::from(units)))
                    .unwrap()
                    .to_bytes()
                    .to_vec()
            }
            Ipv6Ext::Routing => {
                // Type 4, segments left 0, last entry 0, flags, tag; then the one segment.
                let mut body = vec![4, 0, 0, 0, 0, 0];
                body.extend_from_slice(&dst);
                Ipv6RawExtHeader::new_raw(next, &body).unwrap().to_bytes().to_vec()
            }
            // Spelled out: etherparse 0.16 puts the offset's low bits and M in
            // the wrong places (fixed in 0.20). RFC 8200 §4.5: the offset is
            // the upper 13 bits of bytes 2..4, M the lowest; identification last.
            Ipv6Ext::Fragment { offset, more } => {
                assert!(offset < 1 << 13, "offset fits 13 bits");
                let mut header = vec![next.0, 0];
                header.extend_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
                header.extend_from_slice(&0x5eed_u32.to_be_bytes());
                header
            }
            Ipv6Ext::Authentication => IpAuthHeader::new(next, 0x100, 1, &[0xa5; 12]).unwrap().to_bytes().to_vec(),
            // etherparse writes no ESP: SPI 0x100, sequence number 1.
            Ipv6Ext::Esp => vec![0, 0, 1, 0, 0, 0, 0, 1],
        }
    }

    /// Its length in bytes.
    pub fn header_len(self) -> usize {
        match self {
            Ipv6Ext::HopByHop(units) | Ipv6Ext::DestinationOptions(units) => 8 * (usize::from(units) + 1),
            Ipv6Ext::Routing | Ipv6Ext::Authentication => 24,
            Ipv6Ext::Fragment { .. } | Ipv6Ext::Esp => 8,
        }
    }
}

/// `len` bytes of options (RFC 8200 §4.2) as Linux accepts them: options of
/// the experimental type 0x1e, which a receiver skips, then PadN (Linux
/// refuses more than 7 bytes of padding in a row), or Pad1 for a last byte.
fn options_filling(len: usize) -> Vec<u8> {
    const EXPERIMENTAL_SKIP: u8 = 0x1e;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let left = len - out.len();
        let (kind, size) = match left {
            1 => {
                out.push(0);
                continue;
            }
            2..=7 => (1, left),
            // At most 2 + 255 bytes, and never a single byte left behind.
            _ => (EXPERIMENTAL_SKIP, if left == 258 { 256 } else { left.min(257) }),
        };
        out.extend_from_slice(&[kind, (size - 2) as u8]);
        out.resize(out.len() + size - 2, 0);
    }
    out
}

/// One Ethernet frame with IPv4/IPv6 and TCP, described field by field.
///
/// Fields are public so a test can read back what it built (the expected RST
/// answers `seq`, `src_port`, ...); the methods are the readable way to set them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpFrame {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// One 802.1Q tag (VLAN id) between the MACs and the IP header.
    pub vlan: Option<u16>,
    pub ip: Ip,
    /// Differentiated services codepoint (0..=63): IPv4 TOS or IPv6 traffic class, upper six bits.
    pub dscp: u8,
    /// The two ECN bits below the DSCP; marking must keep them.
    pub ecn: u8,
    pub ttl: u8,
    /// IPv4 only; etherparse sets DF by default, as Linux does for TCP.
    pub dont_fragment: bool,
    pub identification: u16,
    /// IPv4 only: options after the fixed header (a multiple of 4 bytes, at most 40).
    pub ipv4_options: Vec<u8>,
    /// IPv4 only: the MF flag and the fragment offset in 8-byte units.
    pub more_fragments: bool,
    pub fragment_offset: u16,
    /// IPv4 only: overrides the IHL nibble after serialising (etherparse cannot write a bad one).
    pub ihl_override: Option<u8>,
    /// Overrides the TCP data offset nibble after serialising (etherparse cannot write one below 5).
    pub data_offset_override: Option<u8>,
    /// IPv6 only: extension headers between the fixed header and TCP, in order.
    pub ipv6_extensions: Vec<Ipv6Ext>,
    pub flow_label: u32,
    /// A UDP datagram on the same ports instead of a TCP segment.
    pub udp: bool,
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    /// TCP flag bits ([`SYN`], [`ACK`], ...).
    pub flags: u8,
    pub window: u16,
    /// TCP options (a multiple of 4 bytes, at most 40); real SYNs carry MSS and friends.
    pub tcp_options: Vec<u8>,
    pub payload: Vec<u8>,
}

impl TcpFrame {
    /// A bare IPv4 SYN from `src` to `dst`, port 40000 to 80.
    pub fn v4(src: [u8; 4], dst: [u8; 4]) -> Self {
        Self::with_ip(Ip::V4 { src, dst })
    }

    /// A bare IPv6 SYN from `src` to `dst`, port 40000 to 80.
    pub fn v6(src: [u8; 16], dst: [u8; 16]) -> Self {
        Self::with_ip(Ip::V6 { src, dst })
    }

    pub fn v4_default() -> Self {
        Self::v4(CLIENT_V4, SERVER_V4)
    }

    pub fn v6_default() -> Self {
        Self::v6(CLIENT_V6, SERVER_V6)
    }

    fn with_ip(ip: Ip) -> Self {
        Self {
            src_mac: CLIENT_MAC,
            dst_mac: SERVER_MAC,
            vlan: None,
            ip,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            dont_fragment: true,
            identification: 0,
            ipv4_options: Vec::new(),
            more_fragments: false,
            fragment_offset: 0,
            ihl_override: None,
            data_offset_override: None,
            ipv6_extensions: Vec::new(),
            flow_label: 0,
            udp: false,
            src_port: 40_000,
            dst_port: 80,
            // Near the wrap on purpose: ack = seq + 1 must wrap correctly in replies.
            seq: 0xffff_fff0,
            ack: 0,
            flags: SYN,
            window: 64_240,
            tcp_options: Vec::new(),
            payload: Vec::new(),
        }
    }

    // --- addressing -------------------------------------------------------

    pub fn ports(mut self, src: u16, dst: u16) -> Self {
        self.src_port = src;
        self.dst_port = dst;
        self
    }

    pub fn dst_port(mut self, port: u16) -> Self {
        self.dst_port = port;
        self
    }

    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Self {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    pub fn vlan(mut self, id: u16) -> Self {
        self.vlan = Some(id);
        self
    }

    // --- IP fields --------------------------------------------------------

    pub fn dscp(mut self, dscp: u8) -> Self {
        self.dscp = dscp;
        self
    }

    pub fn ecn(mut self, ecn: u8) -> Self {
        self.ecn = ecn;
        self
    }

    pub fn ipv4_options(mut self, options: &[u8]) -> Self {
        self.ipv4_options = options.to_vec();
        self
    }

    /// First fragment: offset 0 with MF set. It still holds the TCP header.
    pub fn first_fragment(mut self) -> Self {
        self.dont_fragment = false;
        self.more_fragments = true;
        self.fragment_offset = 0;
        self
    }

    /// A later fragment at `offset` (8-byte units). The bytes after its IP
    /// header are still the TCP header this builder writes: a non-first
    /// fragment that *looks* like a SYN, so only the fragment check can pass it.
    pub fn non_first_fragment(mut self, offset: u16) -> Self {
        self.dont_fragment = false;
        self.fragment_offset = offset;
        self
    }

    /// Sets MF: with a non-zero offset, a middle fragment.
    pub fn more_fragments(mut self) -> Self {
        self.more_fragments = true;
        self
    }

    /// Writes `ihl` (in 32-bit words) into the IPv4 header as is, e.g. an impossible 3.
    pub fn ihl(mut self, ihl: u8) -> Self {
        self.ihl_override = Some(ihl);
        self
    }

    /// An 8-byte hop-by-hop options header, the smallest there is.
    pub fn hop_by_hop(self) -> Self {
        self.ipv6_ext(Ipv6Ext::HopByHop(0))
    }

    /// Appends an extension header to the chain.
    pub fn ipv6_ext(mut self, ext: Ipv6Ext) -> Self {
        self.ipv6_extensions.push(ext);
        self
    }

    pub fn udp(mut self) -> Self {
        self.udp = true;
        self
    }

    // --- TCP fields -------------------------------------------------------

    pub fn seq(mut self, seq: u32) -> Self {
        self.seq = seq;
        self
    }

    pub fn flags(mut self, flags: u8) -> Self {
        self.flags = flags;
        self
    }

    pub fn syn(self) -> Self {
        self.flags(SYN)
    }

    /// The server's answer to a SYN.
    pub fn syn_ack(mut self) -> Self {
        self.ack = 1;
        self.flags(SYN | ACK)
    }

    /// A pure ACK of an established flow.
    pub fn ack(mut self) -> Self {
        self.ack = 1;
        self.flags(ACK)
    }

    /// Data on an established flow (PSH|ACK with a payload).
    pub fn data(mut self, payload: &[u8]) -> Self {
        self.ack = 1;
        self.payload = payload.to_vec();
        self.flags(PSH | ACK)
    }

    pub fn fin(mut self) -> Self {
        self.ack = 1;
        self.flags(FIN | ACK)
    }

    pub fn rst(self) -> Self {
        self.flags(RST)
    }

    /// Writes `words` into the TCP data offset as is, e.g. an impossible 4.
    pub fn tcp_data_offset(mut self, words: u8) -> Self {
        self.data_offset_override = Some(words);
        self
    }

    pub fn tcp_options(mut self, options: &[u8]) -> Self {
        self.tcp_options = options.to_vec();
        self
    }

    /// Bytes after the TCP header (data on a SYN is TCP Fast Open).
    pub fn payload(mut self, payload: &[u8]) -> Self {
        self.payload = payload.to_vec();
        self
    }

    // --- offsets ----------------------------------------------------------

    /// Where the IP header starts.
    pub fn l3_offset(&self) -> usize {
        ETH_LEN + if self.vlan.is_some() { VLAN_LEN } else { 0 }
    }

    /// Where the TCP (or UDP) header starts.
    pub fn l4_offset(&self) -> usize {
        self.l3_offset()
            + match self.ip {
                Ip::V4 { .. } => IPV4_LEN + self.ipv4_options.len(),
                Ip::V6 { .. } => IPV6_LEN + self.ipv6_extensions.iter().map(|e| e.header_len()).sum::<usize>(),
            }
    }

    // --- the reply the shedder must send ----------------------------------

    /// The RST|ACK that answers this SYN (RFC 9293 §3.10.7.1: seq 0,
    /// ack = SEG.SEQ + SEG.LEN, where the SYN counts as one), with the
    /// header values shedder writes into its replies: no IP or TCP options,
    /// TTL 64, DF, id 0, DSCP/ECN 0, window 0. Its checksums are etherparse's.
    pub fn expected_rst(&self) -> TcpFrame {
        let mut rst = TcpFrame::with_ip(self.ip.swapped());
        rst.src_mac = self.dst_mac;
        rst.dst_mac = self.src_mac;
        rst.vlan = self.vlan;
        rst.src_port = self.dst_port;
        rst.dst_port = self.src_port;
        rst.seq = 0;
        rst.ack = self.seq.wrapping_add(1).wrapping_add(self.payload.len() as u32);
        rst.flags = RST | ACK;
        rst.window = 0;
        rst
    }

    // --- serialising ------------------------------------------------------

    /// The frame's bytes, lengths and checksums filled in by etherparse.
    pub fn build(&self) -> Vec<u8> {
        let ether_type = match self.ip {
            Ip::V4 { .. } => EtherType::IPV4,
            Ip::V6 { .. } => EtherType::IPV6,
        };
        let mut out = Vec::with_capacity(128);
        let eth = Ethernet2Header {
            source: self.src_mac,
            destination: self.dst_mac,
            ether_type: if self.vlan.is_some() { EtherType::VLAN_TAGGED_FRAME } else { ether_type },
        };
        out.extend_from_slice(&eth.to_bytes());
        if let Some(id) = self.vlan {
            let tag = SingleVlanHeader {
                pcp: VlanPcp::ZERO,
                drop_eligible_indicator: false,
                vlan_id: VlanId::try_new(id).expect("VLAN id fits 12 bits"),
                ether_type,
            };
            out.extend_from_slice(&tag.to_bytes());
        }
        let l4_proto = if self.udp { IpNumber::UDP } else { IpNumber::TCP };
        match self.ip {
            Ip::V4 { src, dst } => {
                let l4 = self.l4_bytes(
                    |tcp, payload| tcp.calc_checksum_ipv4_raw(src, dst, payload).unwrap(),
                    || {
                        UdpHeader::with_ipv4_checksum(
                            self.src_port,
                            self.dst_port,
                            &Ipv4Header::new(0, 64, IpNumber::UDP, src, dst).unwrap(),
                            &self.payload,
                        )
                        .unwrap()
                    },
                );
                let mut ip = Ipv4Header::new(0, self.ttl, l4_proto, src, dst).unwrap();
                ip.dscp = Ipv4Dscp::try_new(self.dscp).expect("DSCP fits 6 bits");
                ip.ecn = Ipv4Ecn::try_new(self.ecn).expect("ECN fits 2 bits");
                ip.identification = self.identification;
                ip.dont_fragment = self.dont_fragment;
                ip.more_fragments = self.more_fragments;
                ip.fragment_offset = IpFragOffset::try_new(self.fragment_offset).expect("offset fits 13 bits");
                ip.options = Ipv4Options::try_from(&self.ipv4_options[..]).expect("IPv4 options: 4n bytes, <= 40");
                ip.set_payload_len(l4.len()).unwrap();
                ip.header_checksum = ip.calc_header_checksum();
                let l3 = out.len();
                out.extend_from_slice(&ip.to_bytes());
                if let Some(ihl) = self.ihl_override {
                    out[l3] = 0x40 | (ihl & 0x0f);
                }
                out.extend_from_slice(&l4);
            }
            Ip::V6 { src, dst } => {
                let l4 = self.l4_bytes(
                    |tcp, payload| tcp.calc_checksum_ipv6_raw(src, dst, payload).unwrap(),
                    || {
                        let ip = Ipv6Header { source: src, destination: dst, ..Default::default() };
                        UdpHeader::with_ipv6_checksum(self.src_port, self.dst_port, &ip, &self.payload).unwrap()
                    },
                );
                // Each header names the one after it; the last names TCP (or UDP).
                let mut extensions = Vec::new();
                for (i, ext) in self.ipv6_extensions.iter().enumerate() {
                    let next = self.ipv6_extensions.get(i + 1).map_or(l4_proto, |e| e.ip_number());
                    extensions.extend(ext.to_bytes(next, dst));
                }
                let ip = Ipv6Header {
                    traffic_class: (self.dscp << 2) | (self.ecn & 0b11),
                    flow_label: Ipv6FlowLabel::try_new(self.flow_label).expect("flow label fits 20 bits"),
                    payload_length: (extensions.len() + l4.len()) as u16,
                    next_header: self.ipv6_extensions.first().map_or(l4_proto, |e| e.ip_number()),
                    hop_limit: self.ttl,
                    source: src,
                    destination: dst,
                };
                out.extend_from_slice(&ip.to_bytes());
                out.extend_from_slice(&extensions);
                out.extend_from_slice(&l4);
            }
        }
        out
    }

    /// The L4 header and payload; the checksum closures bring the pseudo-header.
    fn l4_bytes(&self, tcp_checksum: impl Fn(&TcpHeader, &[u8]) -> u16, udp_header: impl Fn() -> UdpHeader) -> Vec<u8> {
        let mut out = if self.udp {
            udp_header().to_bytes().to_vec()
        } else {
            let mut tcp = TcpHeader::new(self.src_port, self.dst_port, self.seq, self.window);
            tcp.acknowledgment_number = self.ack;
            tcp.fin = self.flags & FIN != 0;
            tcp.syn = self.flags & SYN != 0;
            tcp.rst = self.flags & RST != 0;
            tcp.psh = self.flags & PSH != 0;
            tcp.ack = self.flags & ACK != 0;
            tcp.options = TcpOptions::try_from_slice(&self.tcp_options).expect("TCP options: 4n bytes, <= 40");
            tcp.checksum = tcp_checksum(&tcp, &self.payload);
            let mut bytes = tcp.to_bytes().to_vec();
            if let Some(words) = self.data_offset_override {
                bytes[12] = (words << 4) | (bytes[12] & 0x0f);
            }
            bytes
        };
        out.extend_from_slice(&self.payload);
        out
    }
}

/// `frame` cut after `len` bytes: what a parser sees when a header runs off
/// the end of the buffer.
pub fn truncated(frame: &[u8], len: usize) -> Vec<u8> {
    frame[..len.min(frame.len())].to_vec()
}

/// `frame` followed by zero bytes, as short frames are padded on the wire
/// (Ethernet's 60-byte minimum). The IP lengths must, not the frame length,
/// say where the segment ends.
pub fn padded(frame: &[u8], len: usize) -> Vec<u8> {
    let mut out = frame.to_vec();
    if out.len() < len {
        out.resize(len, 0);
    }
    out
}

/// An ARP request (who has `target_ip`? tell `sender_ip`), broadcast.
/// etherparse 0.16 has no ARP type, so the 28-byte body is spelled out.
pub fn arp_request(sender_mac: [u8; 6], sender_ip: [u8; 4], target_ip: [u8; 4]) -> Vec<u8> {
    let eth = Ethernet2Header { source: sender_mac, destination: [0xff; 6], ether_type: EtherType::ARP };
    let mut out = eth.to_bytes().to_vec();
    out.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]); // Ethernet, IPv4, hlen 6, plen 4, request
    out.extend_from_slice(&sender_mac);
    out.extend_from_slice(&sender_ip);
    out.extend_from_slice(&[0; 6]);
    out.extend_from_slice(&target_ip);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    #[test]
    fn a_default_syn_parses_back_with_valid_checksums() {
        for frame in [TcpFrame::v4_default(), TcpFrame::v6_default()] {
            let bytes = frame.build();
            assert_eq!(bytes.len(), ETH_LEN + frame.ip.header_len() + TCP_LEN);
            let p = SlicedPacket::from_ethernet(&bytes).unwrap();
            let Some(TransportSlice::Tcp(tcp)) = p.transport else { panic!("no TCP") };
            assert!(tcp.syn() && !tcp.ack());
            let sum = match p.net {
                Some(NetSlice::Ipv4(ip)) => {
                    let h = ip.header().to_header();
                    assert_eq!(h.header_checksum, h.calc_header_checksum());
                    tcp.to_header().calc_checksum_ipv4(&h, tcp.payload()).unwrap()
                }
                Some(NetSlice::Ipv6(ip)) => {
                    tcp.to_header().calc_checksum_ipv6(&ip.header().to_header(), tcp.payload()).unwrap()
                }
                _ => panic!("no IP"),
            };
            assert_eq!(tcp.checksum(), sum);
        }
    }

    #[test]
    fn options_tags_and_extension_headers_land_at_the_offsets_claimed() {
        let f = TcpFrame::v4_default().vlan(5).ipv4_options(&[1, 1, 1, 1]).tcp_options(&[2, 4, 5, 0xb4]);
        let b = f.build();
        assert_eq!(f.l3_offset(), 18);
        assert_eq!(b[f.l3_offset()], 0x46);
        assert_eq!(f.l4_offset(), 42);
        assert_eq!(b[f.l4_offset() + 12] >> 4, 6);
        let f = TcpFrame::v6_default().hop_by_hop();
        let b = f.build();
        assert_eq!(b[f.l3_offset() + 6], 0); // next header: hop-by-hop
        assert_eq!(b[f.l4_offset() - 8], 6); // hop-by-hop's next header: TCP
        assert_eq!(u16::from_be_bytes([b[f.l4_offset()], b[f.l4_offset() + 1]]), 40_000);
    }

    #[test]
    fn extension_headers_parse_back_in_order_and_lead_to_tcp() {
        use Ipv6Ext::*;
        // The order RFC 8200 §4.1 recommends, every header etherparse reads.
        let chain = [HopByHop(3), DestinationOptions(1), Routing, Ipv6Ext::FIRST_FRAGMENT, Authentication];
        for ext in chain {
            let f = TcpFrame::v6_default().ipv6_ext(ext).payload(b"tfo");
            let b = f.build();
            assert_eq!(b.len(), f.l4_offset() + TCP_LEN + 3, "{ext:?}");
            assert_eq!(b[f.l3_offset() + 6], ext.ip_number().0, "{ext:?}: the fixed header names it");
            assert_eq!(u16::from_be_bytes([b[f.l4_offset()], b[f.l4_offset() + 1]]), 40_000, "{ext:?}");
        }
        // An atomic fragment in place of the first one: etherparse reads no TCP in a fragment.
        let atomic = chain.map(|e| if e == Ipv6Ext::FIRST_FRAGMENT { Fragment { offset: 0, more: false } } else { e });
        let f = atomic.iter().fold(TcpFrame::v6_default(), |f, e| f.ipv6_ext(*e)).ipv6_ext(DestinationOptions(0));
        let b = f.build();
        let p = SlicedPacket::from_ethernet(&b).unwrap();
        let Some(NetSlice::Ipv6(ip)) = &p.net else { panic!("no IPv6") };
        assert_eq!(ip.extensions().slice().len(), f.l4_offset() - f.l3_offset() - IPV6_LEN);
        assert_eq!(usize::from(ip.header().payload_length()), b.len() - f.l3_offset() - IPV6_LEN);
        let Some(TransportSlice::Tcp(tcp)) = p.transport else { panic!("no TCP behind the chain") };
        let sum = tcp.to_header().calc_checksum_ipv6(&ip.header().to_header(), tcp.payload()).unwrap();
        assert_eq!(tcp.checksum(), sum);
        assert_eq!(HopByHop(255).to_bytes(IpNumber::TCP, SERVER_V6).len(), 2048);
        let esp = TcpFrame::v6_default().ipv6_ext(Esp).build();
        assert_eq!(esp[ETH_LEN + 6], 50);
        assert_eq!(esp.len(), ETH_LEN + IPV6_LEN + 8 + TCP_LEN);
    }

    #[test]
    fn options_fill_exactly_and_pad_no_more_than_linux_accepts() {
        for units in 0..=255 {
            let len = 6 + 8 * units;
            let options = options_filling(len);
            // Walk the options: Linux refuses more than 7 bytes of Pad1/PadN in a row.
            let (mut at, mut padding) = (0, 0);
            while at < options.len() {
                let size = if options[at] == 0 { 1 } else { 2 + usize::from(options[at + 1]) };
                padding = if options[at] <= 1 { padding + size } else { 0 };
                assert!(padding <= 7, "{units} units: {padding} bytes of padding at {at}");
                at += size;
            }
            assert_eq!(at, len, "{units} units: the options end where the header does");
        }
    }

    #[test]
    fn special_frames_have_the_defect_they_promise() {
        let b = TcpFrame::v4_default().ihl(3).build();
        assert_eq!(b[ETH_LEN], 0x43);
        let b = TcpFrame::v4_default().non_first_fragment(185).build();
        assert_eq!(u16::from_be_bytes([b[ETH_LEN + 6], b[ETH_LEN + 7]]), 185);
        let b = TcpFrame::v4_default().first_fragment().build();
        assert_eq!(u16::from_be_bytes([b[ETH_LEN + 6], b[ETH_LEN + 7]]), 0x2000);
        // RFC 8200 §4.5 by hand: offset in the upper 13 bits, M the lowest bit.
        let fragment = |ext: Ipv6Ext| ext.to_bytes(IpNumber::TCP, SERVER_V6)[2..4].to_vec();
        assert_eq!(fragment(Ipv6Ext::FIRST_FRAGMENT), [0x00, 0x01]);
        assert_eq!(fragment(Ipv6Ext::Fragment { offset: 185, more: false }), [0x05, 0xc8]);
        assert_eq!(fragment(Ipv6Ext::Fragment { offset: 8191, more: true }), [0xff, 0xf9]);
        let b = TcpFrame::v6_default().udp().build();
        assert_eq!(b[ETH_LEN + 6], 17);
        assert_eq!(arp_request(CLIENT_MAC, CLIENT_V4, SERVER_V4).len(), ETH_LEN + 28);
        assert_eq!(truncated(&b, 20).len(), 20);
    }
}
