//! shedder's fast path: admission of new TCP connections, per class, at the NIC.
//!
//! Split like Katran's balancer: [`parse`] finds a bare SYN, [`classify`] maps
//! it to a class, [`tenant`] finds its tenant and charges the tenant's and the
//! class's token buckets ([`bucket`]), [`act`] rewrites
//! the packet for reject and mark; [`resend`] tells a SYN sent again after a
//! drop from a new one; [`watchdog`] stops all shedding while the
//! daemon's heartbeat is stale. The XDP and TC entry points below share all
//! of it and differ only in how they reach the packet ([`hook`]) and send a reply.
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod act;
mod bucket;
mod classify;
mod counters;
mod frame;
mod hook;
mod lpm;
mod maps;
mod parse;
mod resend;
mod tenant;
mod watchdog;

use aya_ebpf::{
    bindings::{TC_ACT_OK, TC_ACT_SHOT, xdp_action},
    helpers::{bpf_csum_diff, bpf_csum_update, bpf_redirect, bpf_skb_change_tail, bpf_xdp_adjust_tail},
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};
use aya_log_ebpf::warn;
use shedder_common::{
    classify::effective_mode,
    maps::{Action, PassReason},
    verdict::{Outcome, charges_bucket, decide},
};

use crate::{frame::Frame, hook::Hook};

/// What the attachment must do with the frame.
enum Verdict {
    Pass,
    /// Pass, after a DSCP mark that rewrote these header bytes.
    PassMarked(Option<act::Rewritten>),
    Drop,
    /// The frame now holds a reply of this many bytes, to send back out.
    Reply(usize),
}

/// Judges the SYN `parsed` found in `frame`.
#[inline(always)]
fn admit<H: Hook>(ctx: &H, frame: &Frame, parsed: Result<parse::Syn, PassReason>) -> Verdict {
    let syn = match parsed {
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
    let mut fits = true;
    // The SYN's fingerprint, read only if it is dropped (so only if charged).
    let mut fingerprint = 0;
    // Only a SYN that could be shed reads a clock, asks the watchdog and
    // looks for an earlier drop of itself: established flows and off-mode
    // classes pay for none of them.
    if charged {
        let mut clock = bucket::Clock::read();
        if watchdog::fails_open(global, clock.coarse()) {
            counters::count_pass(PassReason::FailOpen);
            return Verdict::Pass;
        }
        let tenant = tenant::tenant_of(&syn.addrs, global);
        fingerprint = resend::look(&syn, class, tenant);
        let fit = tenant::charge(ctx, class, &config.bucket, tenant, &mut clock);
        if let Some(tenant) = tenant {
            counters::count_tenant(tenant, fit);
        }
        fits = fit.fits();
    }
    let action = Action::from_u8(config.action);
    let outcome = decide(mode, action, fits);
    counters::count_outcome(class, outcome);
    match outcome {
        Outcome::Admitted | Outcome::WouldShed => Verdict::Pass,
        Outcome::Dropped => {
            // Its client will send it again; one refused with an RST it will not.
            resend::remember_drop(fingerprint);
            Verdict::Drop
        }
        Outcome::Marked => Verdict::PassMarked(act::mark(frame, &syn, config.mark_dscp)),
        Outcome::Rejected => {
            ctx.prepare_reply(&syn);
            match act::write_rst(&ctx.frame(), &syn) {
                Some(len) => Verdict::Reply(len),
                None => Verdict::Drop,
            }
        }
    }
}

#[xdp]
pub fn shedder_xdp(ctx: XdpContext) -> u32 {
    let (frame, parsed) = ctx.parse();
    match admit(&ctx, &frame, parsed) {
        Verdict::Pass | Verdict::PassMarked(_) => xdp_action::XDP_PASS,
        Verdict::Drop => xdp_action::XDP_DROP,
        Verdict::Reply(len) => {
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
    let (frame, parsed) = ctx.parse();
    match admit(&ctx, &frame, parsed) {
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
        Verdict::Reply(len) => {
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
