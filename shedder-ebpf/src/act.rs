//! Act: the in-place rewrites for reject (RST) and mark (DSCP).
//! The bytes themselves come from `shedder_common::rewrite`.

use network_types::eth::EthHdr;
use shedder_common::rewrite::{mark_ipv4, mark_ipv6, rst_ipv4, rst_ipv6};

use crate::{
    frame::Frame,
    parse::{Addrs, Syn},
};

/// Offset of the header checksum inside an IPv4 header.
const IPV4_CHECK_OFFSET: usize = 10;

/// Turns the SYN into the RST|ACK that answers it, in place: MACs swapped
/// (any VLAN tag kept), fresh IP and TCP headers without options.
/// Returns the reply's length; the caller trims the frame to it and sends it back.
#[inline(always)]
pub fn write_rst(frame: &Frame, syn: &Syn) -> Option<usize> {
    let mut eth: EthHdr = frame.read(0)?;
    core::mem::swap(&mut eth.dst_addr, &mut eth.src_addr);
    match syn.addrs {
        Addrs::V4 { src, dst } => {
            let reply = rst_ipv4(&src, &dst, &syn.facts);
            (frame.write(syn.l3, reply) && frame.write(0, eth)).then_some(syn.l3 + reply.len())
        }
        Addrs::V6 { src, dst } => {
            let reply = rst_ipv6(&src, &dst, &syn.facts);
            (frame.write(syn.l3, reply) && frame.write(0, eth)).then_some(syn.l3 + reply.len())
        }
    }
}

/// Bytes a mark rewrote without a checksum of its own to absorb the change.
/// A receive checksum over the whole packet (TC's CHECKSUM_COMPLETE) must be
/// told about them; XDP runs before any such checksum exists.
pub struct Rewritten {
    pub old: [u8; 4],
    pub new: [u8; 4],
}

/// Rewrites the SYN's DSCP to `dscp`. IPv4's header checksum is updated
/// incrementally, which leaves the packet's ones'-complement sum unchanged;
/// IPv6 has no header checksum, so its rewritten word is returned.
#[inline(always)]
pub fn mark(frame: &Frame, syn: &Syn, dscp: u8) -> Option<Rewritten> {
    match syn.addrs {
        Addrs::V4 { .. } => {
            let first = frame.read::<[u8; 2]>(syn.l3)?;
            let check = frame.read::<[u8; 2]>(syn.l3 + IPV4_CHECK_OFFSET)?;
            let (first, check) = mark_ipv4(u16::from_be_bytes(first), u16::from_be_bytes(check), dscp);
            frame.write(syn.l3, first.to_be_bytes());
            frame.write(syn.l3 + IPV4_CHECK_OFFSET, check.to_be_bytes());
            None
        }
        Addrs::V6 { .. } => {
            let old = frame.read::<[u8; 4]>(syn.l3)?;
            let new = mark_ipv6(u32::from_be_bytes(old), dscp).to_be_bytes();
            frame.write(syn.l3, new).then_some(Rewritten { old, new })
        }
    }
}
