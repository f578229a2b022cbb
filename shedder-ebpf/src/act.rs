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

/// Rewrites the SYN's DSCP to `dscp` (IPv4 checksum updated incrementally).
#[inline(always)]
pub fn mark(frame: &Frame, syn: &Syn, dscp: u8) -> bool {
    match syn.addrs {
        Addrs::V4 { .. } => {
            let (Some(first), Some(check)) = (
                frame.read::<[u8; 2]>(syn.l3),
                frame.read::<[u8; 2]>(syn.l3 + IPV4_CHECK_OFFSET),
            ) else {
                return false;
            };
            let (first, check) =
                mark_ipv4(u16::from_be_bytes(first), u16::from_be_bytes(check), dscp);
            frame.write(syn.l3, first.to_be_bytes())
                && frame.write(syn.l3 + IPV4_CHECK_OFFSET, check.to_be_bytes())
        }
        Addrs::V6 { .. } => {
            let Some(first) = frame.read::<[u8; 4]>(syn.l3) else {
                return false;
            };
            frame.write(syn.l3, mark_ipv6(u32::from_be_bytes(first), dscp).to_be_bytes())
        }
    }
}
