//! The maps the daemon writes (configuration, rules) and reads (counters).
//! Layouts and names come from `shedder_common::maps`.

use aya_ebpf::{
    macros::map,
    maps::{Array, LpmTrie, PerCpuArray},
};
use shedder_common::{
    bucket::BucketParams,
    classify::RuleTarget,
    maps::{
        ClassConfig, ClassCounters, DSCP_SLOTS, GlobalConfig, MAX_CIDR_RULES, MAX_CLASSES, MAX_TENANTS,
        PASS_REASON_SLOTS, PORT_SLOTS, TenantCounters,
    },
    resend::RESEND_SLOTS,
};

#[map]
pub static GLOBAL: Array<GlobalConfig> = Array::with_max_entries(1, 0);

#[map]
pub static CLASSES: Array<ClassConfig> = Array::with_max_entries(MAX_CLASSES, 0);

/// One TAT per class (see `shedder_common::bucket`), shared by all CPUs.
#[map]
pub static BUCKETS: Array<u64> = Array::with_max_entries(MAX_CLASSES, 0);

#[map]
pub static CLASS_COUNTERS: PerCpuArray<ClassCounters> = PerCpuArray::with_max_entries(MAX_CLASSES, 0);

#[map]
pub static PASS_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(PASS_REASON_SLOTS, 0);

#[map]
pub static SRC_V4: LpmTrie<[u8; 4], RuleTarget> = LpmTrie::with_max_entries(MAX_CIDR_RULES, 0);

#[map]
pub static SRC_V6: LpmTrie<[u8; 16], RuleTarget> = LpmTrie::with_max_entries(MAX_CIDR_RULES, 0);

#[map]
pub static DST_PORTS: Array<RuleTarget> = Array::with_max_entries(PORT_SLOTS, 0);

#[map]
pub static DSCP_IN: Array<RuleTarget> = Array::with_max_entries(DSCP_SLOTS, 0);

/// The daemon's last controller tick, CLOCK_MONOTONIC ns, written every tick
/// so a fail-open watchdog can tell a live control plane from a dead one.
#[map]
pub static HEARTBEAT: Array<u64> = Array::with_max_entries(1, 0);

/// Which class owns each slot (a digest of its name), written by the daemon
/// and never read here: it lets a restarted daemon that takes over pinned
/// maps tell a class that kept its slot (and so its state) from a new one.
#[map]
pub static CLASS_IDS: Array<u64> = Array::with_max_entries(MAX_CLASSES, 0);

/// Each tenant's bucket (slot `i`), written only by the daemon.
#[map]
pub static TENANTS: Array<BucketParams> = Array::with_max_entries(MAX_TENANTS, 0);

/// One TAT per tenant, shared by all CPUs, apart from the configuration so
/// a rewritten rate never resets what the bucket has spent.
#[map]
pub static TENANT_BUCKETS: Array<u64> = Array::with_max_entries(MAX_TENANTS, 0);

#[map]
pub static TENANT_COUNTERS: PerCpuArray<TenantCounters> = PerCpuArray::with_max_entries(MAX_TENANTS, 0);

/// Source CIDR -> tenant slot + 1, apart from the class rules.
#[map]
pub static TENANT_V4: LpmTrie<[u8; 4], RuleTarget> = LpmTrie::with_max_entries(MAX_CIDR_RULES, 0);

#[map]
pub static TENANT_V6: LpmTrie<[u8; 16], RuleTarget> = LpmTrie::with_max_entries(MAX_CIDR_RULES, 0);

/// Which tenant owns each slot (a digest of its name), as `CLASS_IDS` for classes.
#[map]
pub static TENANT_IDS: Array<u64> = Array::with_max_entries(MAX_TENANTS, 0);

/// A fingerprint of the last SYN dropped per slot, per CPU (see
/// `shedder_common::resend`): how a SYN sent again is told from a new one.
#[map]
pub static DROPPED_SYNS: PerCpuArray<u64> = PerCpuArray::with_max_entries(RESEND_SLOTS, 0);
