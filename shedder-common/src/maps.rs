//! The values stored in the BPF maps, shared byte-for-byte by both sides.
//!
//! Configuration (`CLASSES`, `GLOBAL`, the rule maps) is written only by the
//! daemon. Bucket state (`BUCKETS`) lives in its own map, so rewriting a class's
//! configuration never resets what its bucket has already spent.

use crate::{bucket::BucketParams, classify::Mode};

/// Number of classes the datapath can hold.
pub const MAX_CLASSES: u32 = 64;
/// Destination-port rules are an array indexed by port.
pub const PORT_SLOTS: u32 = 65_536;
/// Incoming-DSCP rules are an array indexed by codepoint.
pub const DSCP_SLOTS: u32 = 64;
/// Capacity of each source-CIDR trie.
pub const MAX_CIDR_RULES: u32 = 4_096;
/// Number of tenants the datapath can hold.
pub const MAX_TENANTS: u32 = 64;

/// Map names as they appear in the eBPF object.
pub mod names {
    pub const GLOBAL: &str = "GLOBAL";
    pub const CLASSES: &str = "CLASSES";
    pub const BUCKETS: &str = "BUCKETS";
    pub const CLASS_COUNTERS: &str = "CLASS_COUNTERS";
    pub const PASS_COUNTERS: &str = "PASS_COUNTERS";
    pub const SRC_V4: &str = "SRC_V4";
    pub const SRC_V6: &str = "SRC_V6";
    pub const DST_PORTS: &str = "DST_PORTS";
    pub const DSCP_IN: &str = "DSCP_IN";
    pub const HEARTBEAT: &str = "HEARTBEAT";
    pub const CLASS_IDS: &str = "CLASS_IDS";
    pub const TENANTS: &str = "TENANTS";
    pub const TENANT_BUCKETS: &str = "TENANT_BUCKETS";
    pub const TENANT_COUNTERS: &str = "TENANT_COUNTERS";
    pub const TENANT_V4: &str = "TENANT_V4";
    pub const TENANT_V6: &str = "TENANT_V6";
    pub const TENANT_IDS: &str = "TENANT_IDS";
    pub const DROPPED_SYNS: &str = "DROPPED_SYNS";
}

/// Program names in the eBPF object.
pub mod programs {
    pub const XDP: &str = "shedder_xdp";
    pub const TC: &str = "shedder_tc";
    /// Bare XDP_PASS: benchmark baseline and veth-peer helper.
    pub const PASS: &str = "shedder_pass";
}

/// What an over-budget SYN of a class gets.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Action {
    /// Silent drop: the client's SYN retransmits become a delay tier.
    #[default]
    Drop = 0,
    /// TCP RST|ACK sent straight back: `connect()` fails at once.
    Reject = 1,
    /// DSCP rewritten to the class's codepoint, then admitted.
    Mark = 2,
}

impl Action {
    pub const fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Reject,
            2 => Self::Mark,
            _ => Self::Drop,
        }
    }
}

/// Datapath view of one class (slot `i` of `CLASSES`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassConfig {
    pub bucket: BucketParams,
    /// `Mode as u8`, or [`Mode::INHERIT`] to follow the global mode.
    pub mode: u8,
    /// `Action as u8`.
    pub action: u8,
    /// Codepoint written by [`Action::Mark`] (0..=63).
    pub mark_dscp: u8,
    pub _pad: [u8; 5],
}

/// Which rule maps hold entries, so the datapath skips empty lookups
/// (an LPM trie walk is the dearest step on the SYN path).
pub mod rule_flags {
    pub const SRC_V4: u8 = 1 << 0;
    pub const SRC_V6: u8 = 1 << 1;
    pub const DST_PORT: u8 = 1 << 2;
    pub const DSCP: u8 = 1 << 3;
    pub const TENANT_V4: u8 = 1 << 4;
    pub const TENANT_V6: u8 = 1 << 5;
}

/// Slot 0 of `GLOBAL`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalConfig {
    /// `Mode as u8`. Zero (never written) means the program was loaded but
    /// not configured yet, which behaves as [`Mode::Off`].
    pub mode: u8,
    /// Class of a SYN no rule selects.
    pub default_class: u8,
    /// [`rule_flags`] bits.
    pub rules_present: u8,
    pub _pad: [u8; 5],
    /// The fail-open watchdog's timeout: once the daemon's heartbeat is older
    /// than this, no SYN is shed (see [`crate::watchdog`]). 0 disables it,
    /// and is the default, so a program driven without a daemon never fails open.
    pub fail_open_after_ns: u64,
}

impl Default for GlobalConfig {
    fn default() -> Self {
        Self { mode: Mode::Off as u8, default_class: 0, rules_present: 0, _pad: [0; 5], fail_open_after_ns: 0 }
    }
}

/// How much a counter grew from the reading `then` to `now`. The counters
/// only grow while their map lives; one that reads lower was started again
/// (a daemon restarted without its pins, a class given a fresh slot), so it
/// counts from zero. (Host side: the program only adds.)
#[cfg(feature = "user")]
pub fn counted_since(now: u64, then: u64) -> u64 {
    if now >= then { now - then } else { now }
}

/// What happened to the classified SYNs of one class, per CPU.
/// Every SYN lands in exactly one outcome, so the outcomes sum to `seen`;
/// `resent` says how many of them were sent again after a drop.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
pub struct ClassCounters {
    pub seen: u64,
    pub admitted: u64,
    pub dropped: u64,
    pub rejected: u64,
    pub marked: u64,
    /// Over budget in observe mode: counted, then passed.
    pub would_shed: u64,
    /// Of `seen`, SYNs this fast path had dropped before and the client sent
    /// again (see [`crate::resend`]); each landed in an outcome too. (Absent
    /// from an older daemon's answers: read as 0.)
    #[cfg_attr(feature = "user", serde(default))]
    pub resent: u64,
}

impl ClassCounters {
    /// Adds another CPU's (or another snapshot's) counts.
    pub fn add(&mut self, other: &Self) {
        self.seen += other.seen;
        self.admitted += other.admitted;
        self.dropped += other.dropped;
        self.rejected += other.rejected;
        self.marked += other.marked;
        self.would_shed += other.would_shed;
        self.resent += other.resent;
    }

    /// New connections asked for: SYNs seen, less the resends of dropped ones.
    pub fn first_attempts(&self) -> u64 {
        self.seen.saturating_sub(self.resent)
    }
}

/// What happened to the charged SYNs of one tenant, per CPU. Every one lands
/// in exactly one outcome, so the three sum to what the tenant offered.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
pub struct TenantCounters {
    /// Fit both the tenant's bucket and its class's.
    pub admitted: u64,
    /// Refused by the tenant's own bucket (the class's was not charged).
    pub over_tenant: u64,
    /// Fit the tenant's bucket but not the class's; the tenant got its tokens back.
    pub over_class: u64,
    /// Of the three, SYNs this fast path had dropped before and the client
    /// sent again (see [`crate::resend`]).
    #[cfg_attr(feature = "user", serde(default))]
    pub resent: u64,
}

impl TenantCounters {
    /// Adds another CPU's (or another snapshot's) counts.
    pub fn add(&mut self, other: &Self) {
        self.admitted += other.admitted;
        self.over_tenant += other.over_tenant;
        self.over_class += other.over_class;
        self.resent += other.resent;
    }

    /// SYNs the tenant offered.
    pub fn offered(&self) -> u64 {
        self.admitted + self.over_tenant + self.over_class
    }

    /// New connections the tenant asked for: what it offered, less the
    /// resends of dropped SYNs.
    pub fn first_attempts(&self) -> u64 {
        self.offered().saturating_sub(self.resent)
    }
}

/// Why a packet was passed without being charged (index into `PASS_COUNTERS`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassReason {
    NotIp = 0,
    NotTcp,
    /// Any TCP segment other than a bare SYN: established flows land here.
    NotSyn,
    Ipv4Fragment,
    /// An IPv6 extension header that does not lead to this host's TCP: the
    /// mobility, HIP and shim6 headers, the experimental values, or a
    /// hop-by-hop header anywhere but first.
    Ipv6ExtensionHeader,
    BadIpv4Header,
    BadTcpHeader,
    TruncatedEthernet,
    TruncatedVlan,
    TruncatedIpv4,
    TruncatedIpv6,
    TruncatedTcp,
    /// A SYN passed uncharged because the daemon's heartbeat went stale.
    FailOpen,
    /// An IPv6 EtherType over a header whose version is not 6.
    BadIpv6Header,
    /// A non-first IPv6 fragment: its fragment header says where the TCP
    /// header is, and it is in another packet.
    Ipv6Fragment,
    /// An IPv6 payload behind ESP: encrypted, the TCP header cannot be read.
    Ipv6Esp,
    /// More IPv6 extension headers than the parser walks
    /// ([`crate::ipv6_ext::MAX_CHAIN`]).
    Ipv6ChainTooLong,
    /// An IPv6 extension header whose length field cannot be right: it runs
    /// past the payload length, or is an impossible AH length.
    BadIpv6ExtensionHeader,
}

/// Slots of `PASS_COUNTERS`: room for reasons to come, so adding one does not
/// change the map's layout (a changed layout cannot be taken over by a
/// restart, see the daemon's pinning).
pub const PASS_REASON_SLOTS: u32 = 32;
const _: () = assert!(PassReason::COUNT <= PASS_REASON_SLOTS, "every reason needs a slot");

impl PassReason {
    pub const COUNT: u32 = 18;
    pub const ALL: [PassReason; Self::COUNT as usize] = [
        Self::NotIp,
        Self::NotTcp,
        Self::NotSyn,
        Self::Ipv4Fragment,
        Self::Ipv6ExtensionHeader,
        Self::BadIpv4Header,
        Self::BadTcpHeader,
        Self::TruncatedEthernet,
        Self::TruncatedVlan,
        Self::TruncatedIpv4,
        Self::TruncatedIpv6,
        Self::TruncatedTcp,
        Self::FailOpen,
        Self::BadIpv6Header,
        Self::Ipv6Fragment,
        Self::Ipv6Esp,
        Self::Ipv6ChainTooLong,
        Self::BadIpv6ExtensionHeader,
    ];

    /// Whether the frame ended inside a header. Where only part of a packet is
    /// at hand (TC sees an skb's linear part), the rest may hold it.
    pub const fn is_truncation(self) -> bool {
        matches!(
            self,
            Self::TruncatedEthernet
                | Self::TruncatedVlan
                | Self::TruncatedIpv4
                | Self::TruncatedIpv6
                | Self::TruncatedTcp
        )
    }

    /// Stable snake_case name, used in logs and metrics labels.
    pub const fn name(self) -> &'static str {
        match self {
            Self::NotIp => "not_ip",
            Self::NotTcp => "not_tcp",
            Self::NotSyn => "not_syn",
            Self::Ipv4Fragment => "ipv4_fragment",
            Self::Ipv6ExtensionHeader => "ipv6_extension_header",
            Self::BadIpv4Header => "bad_ipv4_header",
            Self::BadTcpHeader => "bad_tcp_header",
            Self::TruncatedEthernet => "truncated_ethernet",
            Self::TruncatedVlan => "truncated_vlan",
            Self::TruncatedIpv4 => "truncated_ipv4",
            Self::TruncatedIpv6 => "truncated_ipv6",
            Self::TruncatedTcp => "truncated_tcp",
            Self::FailOpen => "fail_open",
            Self::BadIpv6Header => "bad_ipv6_header",
            Self::Ipv6Fragment => "ipv6_fragment",
            Self::Ipv6Esp => "ipv6_esp",
            Self::Ipv6ChainTooLong => "ipv6_chain_too_long",
            Self::BadIpv6ExtensionHeader => "bad_ipv6_extension_header",
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] integers with explicit padding; any bit pattern is valid.
    unsafe impl aya::Pod for super::ClassConfig {}
    unsafe impl aya::Pod for super::GlobalConfig {}
    unsafe impl aya::Pod for super::ClassCounters {}
    unsafe impl aya::Pod for super::TenantCounters {}
    unsafe impl aya::Pod for crate::bucket::BucketParams {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_reason_table_is_complete_and_dense() {
        for (i, r) in PassReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{}", r.name());
        }
    }

    #[test]
    #[cfg(feature = "user")]
    fn a_counter_that_went_back_counts_from_zero() {
        // (now, then, counted)
        for (now, then, counted) in [(10, 4, 6), (4, 4, 0), (3, 10, 3), (0, 10, 0), (u64::MAX, 0, u64::MAX)] {
            assert_eq!(counted_since(now, then), counted, "{then} -> {now}");
        }
    }

    #[test]
    fn layouts_have_no_implicit_padding() {
        assert_eq!(core::mem::size_of::<ClassConfig>(), 56);
        assert_eq!(core::mem::size_of::<crate::bucket::BucketParams>(), 48);
        assert_eq!(core::mem::size_of::<TenantCounters>(), 32);
        assert_eq!(core::mem::size_of::<GlobalConfig>(), 16);
        assert_eq!(core::mem::align_of::<GlobalConfig>(), 8);
        assert_eq!(core::mem::size_of::<ClassCounters>(), 56);
    }
}
