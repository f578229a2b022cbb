//! Everything the shedder fast path and its control plane must agree on.
//!
//! * [`maps`]: the `#[repr(C)]` values stored in the BPF maps, and the map names.
//! * [`bucket`]: token-bucket admission in fixed point (GCRA form, one `u64` of state).
//! * [`classify`]: which rule wins when several select a class, and how modes combine.
//! * [`tenant`]: the tenant's bucket and the class's, charged for one SYN, with the refund.
//! * [`verdict`]: what happens to a classified SYN, given mode, action and bucket.
//! * [`checksum`]: the Internet checksum and its incremental update.
//! * [`ipv6_ext`]: the IPv6 extension headers walked on the way to TCP, and how long each is.
//! * [`rewrite`]: the RST reply and the DSCP mark, byte for byte.
//! * [`resend`]: telling a SYN the client sent again after a drop from a new one.
//! * [`reference`](mod@reference) (host only): a model of the whole fast path, to test the program against.
//! * [`watchdog`]: when the daemon's heartbeat is too old to keep shedding.
//!
//! The eBPF program calls these functions on its hot path and the host tests them
//! exhaustively, so the arithmetic is written exactly once.
#![cfg_attr(not(test), no_std)]

pub mod bucket;
pub mod checksum;
pub mod classify;
pub mod ipv6_ext;
pub mod maps;
#[cfg(any(test, feature = "user"))]
pub mod reference;
pub mod resend;
pub mod rewrite;
pub mod tenant;
pub mod verdict;
pub mod watchdog;
