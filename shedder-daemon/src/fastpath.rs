//! The fast path as the control plane sees it: something that holds a
//! [`Plan`], counts what it did, and is kept alive by heartbeats.
//!
//! Two implementations: [`crate::datapath::Datapath`], the eBPF programs in
//! the kernel, and [`memory::MemoryFastpath`], the host reference model of
//! the same programs (`shedder_common::reference`) in memory, which lets the
//! control loop, the ops and the metrics be tested without root.

pub mod memory;
pub(crate) mod slots;

use std::fmt;

use shedder_common::{
    bucket::BucketParams,
    maps::{ClassCounters, PassReason, TenantCounters},
};

use crate::{config::Plan, error_chain::ErrorChain};

/// What the control plane asks of a fast path.
pub trait Fastpath: Send {
    /// Makes the fast path hold `plan`. A class (or tenant) keeps its slot,
    /// bucket and counters for as long as it is configured; a budget change
    /// keeps the tokens it has spent, rescaled to the new rate. A failed
    /// apply leaves the last plan applied as the base for the next.
    fn apply(&mut self, plan: &Plan) -> Result<(), FastpathError>;

    /// Counters and bucket fill of every configured class.
    fn class_snapshots(&self) -> Result<Vec<ClassSnapshot>, FastpathError>;

    /// Counters and bucket fill of every configured tenant.
    fn tenant_snapshots(&self) -> Result<Vec<TenantSnapshot>, FastpathError>;

    /// Packets passed uncharged, by reason.
    fn pass_counters(&self) -> Result<Vec<(PassReason, u64)>, FastpathError>;

    /// Records that the control plane is alive at `now_ns` (CLOCK_MONOTONIC);
    /// without it the fast path fails open.
    fn write_heartbeat(&mut self, now_ns: u64) -> Result<(), FastpathError>;

    /// The last heartbeat written, CLOCK_MONOTONIC ns (0 before the first).
    fn heartbeat(&self) -> Result<u64, FastpathError>;

    /// The plan as the fast path holds it, if any was applied: classes at
    /// their slots (a free slot is empty and unnamed), rules pointing at slots.
    fn placed(&self) -> Option<Plan>;

    /// Whether the program is still attached to `iface` as `attachment`;
    /// `None` where that cannot be asked.
    fn attached_to(&self, iface: &str, attachment: Attachment) -> Option<bool>;
}

/// A fast path's maps could not be read or written. Each message is whole,
/// causes included.
#[derive(Debug, thiserror::Error)]
pub enum FastpathError {
    #[error("map {0} missing from the eBPF object")]
    MissingMap(&'static str),
    #[error("map {map}: {}", ErrorChain(error))]
    Map { map: &'static str, error: aya::maps::MapError },
    #[error("map {map}: rule key {index} out of range")]
    RuleKey { map: &'static str, index: usize },
    #[error("per-CPU values ({what}): {error}")]
    PerCpu { what: &'static str, error: std::io::Error },
    #[error("reading the pinned maps back: {0}")]
    Inherit(Box<FastpathError>),
}

/// A class's (or tenant's) counters and bucket, as read back from the fast path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot<K> {
    pub name: String,
    pub counters: K,
    /// Milli-tokens left in the bucket right now.
    pub available_milli: u64,
    pub bucket: BucketParams,
}

pub type ClassSnapshot = Snapshot<ClassCounters>;
pub type TenantSnapshot = Snapshot<TenantCounters>;

/// Which hook the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttachKind {
    /// XDP, native where the driver supports it, else generic.
    Xdp,
    /// TC ingress (TCX on kernels >= 6.6, else clsact), for drivers without good XDP.
    Tc,
}

/// Which hook the program actually runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attachment {
    XdpNative,
    XdpGeneric,
    Tcx,
    TcClsact,
}

impl Attachment {
    pub fn kind(self) -> AttachKind {
        match self {
            Self::XdpNative | Self::XdpGeneric => AttachKind::Xdp,
            Self::Tcx | Self::TcClsact => AttachKind::Tc,
        }
    }
}

impl AttachKind {
    /// As the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Xdp => "xdp",
            Self::Tc => "tc",
        }
    }
}

impl fmt::Display for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::XdpNative => "xdp (native)",
            Self::XdpGeneric => "xdp (generic)",
            Self::Tcx => "tc ingress (tcx)",
            Self::TcClsact => "tc ingress (clsact)",
        })
    }
}
