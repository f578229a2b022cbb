//! shedder's fast path: admission of new TCP connections, per class, at the NIC.
//!
//! Split like Katran's balancer: [`parse`] finds a bare SYN, [`classify`] maps
//! it to a class, [`bucket`] charges the class's token bucket, [`act`] rewrites
//! the packet for reject and mark; [`watchdog`] stops all shedding while the
//! daemon's heartbeat is stale. The XDP and TC entry points below share all
//! of it and differ only in how they send a reply.
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod act;
mod bucket;
mod classify;
mod counters;
mod frame;
mod maps;
mod parse;
mod watchdog;

use aya_ebpf::{
    EbpfContext,
    bindings::{TC_ACT_OK, TC_ACT_SHOT, bpf_adj_room_mode, xdp_action},
    helpers::{
        bpf_csum_diff, bpf_csum_update, bpf_redirect, bpf_skb_adjust_room, bpf_skb_change_tail, bpf_xdp_adjust_tail,
    },
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};
use aya_log_ebpf::warn;
use shedder_common::{
    classify::effective_mode,
    maps::{Action, PassReason},
    verdict::{Outcome, charges_bucket, decide},
};

use crate::{bucket::Charge, frame::Frame};

/// What the attachment must do with the frame.
enum Verdict {
    Pass,
    /// Pass, after a DSCP mark that rewrote these header bytes.
    PassMarked(Option<act::Rewritten>),
    Drop,
    /// Answer with an RST, which each hook writes and sends back its own way.
    Reject(parse::Syn),
}

#[inline(always)]
fn admit<C: EbpfContext>(ctx: &C, frame: &Frame) -> Verdict {
    let syn = match parse::parse(frame) {
        Ok(syn) => syn,
        Err(reason) => {
            counters::count_pass(reason);
            return Verdict::Pass;
        }
    };
    let Some(global) = maps::GLOBAL.get(0) else {
        return Verdict::Pass;
    };
    let class = classify::class_of(&syn, global);
    let Some(config) = maps::CLASSES.get(class) else {
        return Verdict::Pass;
    };
    let mode = effective_mode(global.mode, config.mode);
    let charged = charges_bucket(mode);
    // Only a SYN that could be shed asks the watchdog: established flows and
    // off-mode classes pay nothing for it.
    if charged && watchdog::fails_open(global) {
        counters::count_pass(PassReason::FailOpen);
        return Verdict::Pass;
    }
    let fits = !charged
        || match bucket::charge_class(class, &config.bucket) {
            Charge::Fits => true,
            Charge::Empty => false,
            Charge::Contended => {
                warn!(ctx, "class {} bucket contended; judged empty", class);
                false
            }
        };
    let action = Action::from_u8(config.action);
    let outcome = decide(mode, action, fits);
    counters::count_outcome(class, outcome);
    match outcome {
        Outcome::Admitted | Outcome::WouldShed => Verdict::Pass,
        Outcome::Dropped => Verdict::Drop,
        Outcome::Marked => Verdict::PassMarked(act::mark(frame, &syn, config.mark_dscp)),
        Outcome::Rejected => Verdict::Reject(syn),
    }
}

#[xdp]
pub fn shedder_xdp(ctx: XdpContext) -> u32 {
    let frame = Frame::new(ctx.data(), ctx.data_end());
    match admit(&ctx, &frame) {
        Verdict::Pass | Verdict::PassMarked(_) => xdp_action::XDP_PASS,
        Verdict::Drop => xdp_action::XDP_DROP,
        Verdict::Reject(syn) => {
            let Some(len) = act::write_rst(&frame, &syn) else {
                return xdp_action::XDP_DROP;
            };
            let delta = len as i32 - frame.len() as i32;
            // SAFETY: shrinking the tail of the frame this program owns.
            if unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta) } != 0 {
                warn!(&ctx, "could not trim RST to {} bytes; dropped", len);
                return xdp_action::XDP_DROP;
            }
            xdp_action::XDP_TX
        }
    }
}

#[classifier]
pub fn shedder_tc(ctx: TcContext) -> i32 {
    let frame = Frame::new(ctx.data(), ctx.data_end());
    match admit(&ctx, &frame) {
        Verdict::Pass | Verdict::PassMarked(None) => TC_ACT_OK,
        Verdict::PassMarked(Some(mut rewritten)) => {
            // SAFETY: both buffers are 4 readable bytes on our stack.
            unsafe {
                let diff = bpf_csum_diff(
                    rewritten.old.as_mut_ptr() as *mut u32,
                    4,
                    rewritten.new.as_mut_ptr() as *mut u32,
                    4,
                    0,
                );
                // Only acts when the skb carries CHECKSUM_COMPLETE.
                bpf_csum_update(ctx.skb.skb, diff as u32);
            }
            TC_ACT_OK
        }
        Verdict::Drop => TC_ACT_SHOT,
        Verdict::Reject(syn) => {
            remove_ip_extra(&ctx, &syn);
            // Read afresh: resizing helpers invalidate every packet pointer.
            let frame = Frame::new(ctx.data(), ctx.data_end());
            let Some(len) = act::write_rst(&frame, &syn) else {
                return TC_ACT_SHOT;
            };
            // SAFETY: resizing and redirecting the skb this program was handed.
            unsafe {
                if bpf_skb_change_tail(ctx.skb.skb, len as u32, 0) != 0 {
                    warn!(&ctx, "could not trim RST to {} bytes; dropped", len);
                    return TC_ACT_SHOT;
                }
                // Out of the interface it came in on: the TC twin of XDP_TX.
                bpf_redirect((*ctx.skb.skb).ifindex, 0) as i32
            }
        }
    }
}

/// Removes the IPv4 options or IPv6 extension headers of a SYN about to be
/// answered, so its TCP header stays where the skb's checksum offsets point.
/// A SYN from a local stack (veth, virtio) arrives CHECKSUM_PARTIAL, and the
/// tail trim refuses to cut the frame short of the checksum field those
/// offsets name. Where the kernel will not (an in-band VLAN tag), the tail
/// trim does it all, as it can for any other skb.
#[inline(always)]
fn remove_ip_extra(ctx: &TcContext, syn: &parse::Syn) {
    if syn.ip_extra > 0 {
        // SAFETY: shrinking the skb this program was handed; the caller re-reads the packet pointers.
        unsafe { bpf_skb_adjust_room(ctx.skb.skb, -(syn.ip_extra as i32), bpf_adj_room_mode::BPF_ADJ_ROOM_NET, 0) };
    }
}

/// A bare XDP_PASS. It is the baseline `cargo xtask bench` measures against,
/// and the program a veth peer needs before it accepts XDP_TX'd frames.
#[xdp]
pub fn shedder_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the verifier rejects any program that could reach a panic.
    unsafe { core::hint::unreachable_unchecked() }
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
