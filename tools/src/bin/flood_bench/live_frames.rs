//! A SYN flood that reaches the receiver the way a NIC's frames do: as XDP
//! frames in pages, not as skbs.
//!
//! veth hands an skb sent from a socket (AF_PACKET) to the peer's XDP
//! program only after copying it into a page, and the peer's stack gets the
//! sender's skb for free; neither is what a NIC's receive path does. So the
//! bench generates its SYNs with BPF_PROG_TEST_RUN in live-frames mode
//! (Linux 5.18+): the kernel builds each frame in a page of its own page
//! pool and runs a tiny XDP program on it, whose XDP_TX sends the frame out
//! of the client's veth end (ndo_xdp_xmit). The server's end then receives
//! an XDP frame in its NAPI poll: an XDP program there sees it in place, and
//! without one (or after XDP_PASS) veth builds an skb around the page, as a
//! driver does.
//!
//! The program also moves each frame's source port on by one every time its
//! page comes round again (the kernel does not rewrite a recycled page), and
//! the TCP sequence number's low word back by one, so the TCP checksum stays
//! right without recomputing it: an unfiltered receiver keeps meeting new
//! connections, and a listener answers them (with SYN cookies once its
//! queue is full). Frames are identical within a batch: each page starts
//! from the same bytes.

use std::os::fd::{AsRawFd as _, OwnedFd};

use anyhow::{Context as _, ensure};

use shedder_testbed::test_run::{BPF_PROG_TEST_RUN, TestRunAttr};

use crate::raw_bpf::{self, ADD64_K, Insn, JGT_X, LDX_H, LDX_W, MOV64_K, MOV64_X, STX_H, XDP_TX, insn};

const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Frames per batch: the page pool holds this many pages.
const BATCH_SIZE: u32 = 64;
/// Frames per BPF_PROG_TEST_RUN call. Each page is reused about
/// CALL_REPEAT / BATCH_SIZE times per call, far fewer than the 65,535 steps
/// the port and sequence words can take before they wrap (a wrap would
/// break the checksum trick).
pub const CALL_REPEAT: u32 = 1_000_000;

/// Where the TCP source port and the sequence number's low 16 bits sit in
/// an untagged IPv4 frame without options.
const SRC_PORT_OFFSET: i16 = 34;
const SEQ_LOW_OFFSET: i16 = 40;
const MIN_FRAME: i32 = 54;

/// The program, in eBPF instructions. r1 is the `xdp_md`. Adding one to a
/// 16-bit word and taking one from another leaves their ones'-complement
/// sum, and so the checksum, as it was (in either byte order, short of a
/// wrap).
const PROGRAM: [Insn; 12] = [
    insn(LDX_W, 2, 1, 0, 0),               // r2 = ctx->data
    insn(LDX_W, 3, 1, 4, 0),               // r3 = ctx->data_end
    insn(MOV64_X, 4, 2, 0, 0),             // r4 = r2
    insn(ADD64_K, 4, 0, 0, MIN_FRAME),     // r4 += 54
    insn(JGT_X, 4, 3, 6, 0),               // if r4 > r3: skip to the XDP_TX
    insn(LDX_H, 5, 2, SRC_PORT_OFFSET, 0), // r5 = source port word
    insn(ADD64_K, 5, 0, 0, 1),             // r5 += 1
    insn(STX_H, 2, 5, SRC_PORT_OFFSET, 0), // store it back
    insn(LDX_H, 5, 2, SEQ_LOW_OFFSET, 0),  // r5 = sequence number's low word
    insn(ADD64_K, 5, 0, 0, -1),            // r5 -= 1
    insn(STX_H, 2, 5, SEQ_LOW_OFFSET, 0),  // store it back
    insn(MOV64_K, 0, 0, 0, XDP_TX),        // r0 = XDP_TX
];

/// `struct xdp_md` as BPF_PROG_TEST_RUN takes it in.
#[repr(C)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

/// The generator: its program loaded, bound to one interface and frame.
pub struct LiveFrames {
    program: OwnedFd,
    frame: Vec<u8>,
    ifindex: u32,
}

impl LiveFrames {
    /// Loads the program. `iface` must exist in the calling thread's
    /// namespace; so must the thread that calls [`LiveFrames::send`].
    pub fn new(iface: &str, frame: Vec<u8>) -> anyhow::Result<Self> {
        ensure!(frame.len() >= MIN_FRAME as usize, "the flood frame is {} bytes, under {MIN_FRAME}", frame.len());
        let ifindex = raw_bpf::ifindex(iface)?;
        let program = raw_bpf::load_xdp(&PROGRAM, "syn_flood").context("loading the flood's XDP program")?;
        Ok(Self { program, frame, ifindex })
    }

    /// Sends `frames` (at most [`CALL_REPEAT`]) in one call, on this CPU;
    /// the receiver's softirq runs on it too, when the call re-enables
    /// bottom halves after each batch.
    pub fn send(&self, frames: u32) -> anyhow::Result<()> {
        ensure!(frames <= CALL_REPEAT, "{frames} frames in one call; at most {CALL_REPEAT}");
        let ctx = XdpMd {
            data: 0,
            data_end: self.frame.len() as u32,
            data_meta: 0,
            ingress_ifindex: self.ifindex,
            rx_queue_index: 0,
            egress_ifindex: 0,
        };
        let mut attr = TestRunAttr {
            prog_fd: self.program.as_raw_fd() as u32,
            data_size_in: self.frame.len() as u32,
            data_in: self.frame.as_ptr() as u64,
            repeat: frames,
            ctx_size_in: size_of::<XdpMd>() as u32,
            ctx_in: &ctx as *const XdpMd as u64,
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            batch_size: BATCH_SIZE,
            ..Default::default()
        };
        raw_bpf::bpf(BPF_PROG_TEST_RUN, &mut attr).context("BPF_PROG_TEST_RUN in live-frames mode (Linux 5.18+)")?;
        Ok(())
    }
}
