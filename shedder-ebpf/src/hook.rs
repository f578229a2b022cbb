//! Hook: what XDP and TC do differently before a frame is judged, and before
//! a reply is written into it.
//!
//! XDP sees the whole frame, and an RST written over a SYN only needs its
//! tail trimmed. TC sees an skb, of which only the linear part is readable,
//! and whose checksum offsets limit how short its tail may be cut.

use aya_ebpf::{
    EbpfContext,
    bindings::bpf_adj_room_mode,
    helpers::{bpf_skb_adjust_room, bpf_skb_pull_data},
    programs::{TcContext, XdpContext},
};
use shedder_common::maps::PassReason;

use crate::{
    frame::Frame,
    parse::{self, Syn},
};

pub trait Hook: EbpfContext {
    /// The packet as the program may read it now.
    fn frame(&self) -> Frame;

    /// The frame, and the SYN in it or why there is none.
    fn parse(&self) -> (Frame, Result<Syn, PassReason>);

    /// Readies the frame to take, in place, the RST that answers `syn`;
    /// [`Hook::frame`] must be read afresh after it.
    fn prepare_reply(&self, syn: &Syn);
}

impl Hook for XdpContext {
    #[inline(always)]
    fn frame(&self) -> Frame {
        Frame::new(self.data(), self.data_end())
    }

    #[inline(always)]
    fn parse(&self) -> (Frame, Result<Syn, PassReason>) {
        let frame = self.frame();
        let parsed = parse::parse(&frame);
        (frame, parsed)
    }

    #[inline(always)]
    fn prepare_reply(&self, _syn: &Syn) {}
}

impl Hook for TcContext {
    #[inline(always)]
    fn frame(&self) -> Frame {
        Frame::new(self.data(), self.data_end())
    }

    /// Pulls the headers into the skb's linear part first when they run past
    /// it: a driver may leave long ones (an IPv6 extension chain, say) in
    /// page fragments, and judged without them the SYN would pass as
    /// truncated. Only a parse that ran off the end of a longer skb pulls, so
    /// frames whose headers are whole (established flows) pay nothing.
    #[inline(always)]
    fn parse(&self) -> (Frame, Result<Syn, PassReason>) {
        let frame = self.frame();
        let parsed = parse::parse(&frame);
        let cut_short = matches!(parsed, Err(reason) if reason.is_truncation());
        if !cut_short || self.len() as usize <= frame.len() {
            return (frame, parsed);
        }
        let want = self.len().min(parse::HEADERS_MAX as u32);
        // SAFETY: pulls bytes of the skb this program was handed into its linear part.
        unsafe { bpf_skb_pull_data(self.skb.skb, want) };
        // Read afresh, pulled or not: the helper invalidates every packet
        // pointer. (Written out twice, not as a loop: Linux 6.1's verifier
        // refuses the loop the compiler makes of it.)
        let frame = self.frame();
        let parsed = parse::parse(&frame);
        (frame, parsed)
    }

    /// Removes the IPv4 options or IPv6 extension headers, so the TCP header
    /// stays where the skb's checksum offsets point. A SYN from a local stack
    /// (veth, virtio) arrives CHECKSUM_PARTIAL, and the tail trim refuses to
    /// cut the frame short of the checksum field those offsets name. Where
    /// the kernel will not remove them (an in-band VLAN tag), the tail trim
    /// does it all, as it can for any other skb.
    #[inline(always)]
    fn prepare_reply(&self, syn: &Syn) {
        if syn.ip_extra > 0 {
            // SAFETY: shrinking the skb this program was handed; the caller reads the frame afresh.
            unsafe {
                bpf_skb_adjust_room(self.skb.skb, -(syn.ip_extra as i32), bpf_adj_room_mode::BPF_ADJ_ROOM_NET, 0)
            };
        }
    }
}
