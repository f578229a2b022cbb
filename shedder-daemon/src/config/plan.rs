//! The [`Plan`] a config compiles to: exactly what goes into the BPF maps.

use std::collections::BTreeMap;

use shedder_common::{
    bucket::BucketParams,
    classify::RuleTarget,
    maps::{ClassConfig, GlobalConfig},
};

/// Everything the datapath maps should hold, keyed as the maps key it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub global: GlobalConfig,
    /// Slot `i` of the CLASSES map.
    pub classes: Vec<ClassConfig>,
    pub class_names: Vec<String>,
    /// (prefix length, network address) -> target.
    pub src_v4: BTreeMap<(u32, [u8; 4]), RuleTarget>,
    pub src_v6: BTreeMap<(u32, [u8; 16]), RuleTarget>,
    pub dst_ports: BTreeMap<u16, RuleTarget>,
    pub dscp: BTreeMap<u8, RuleTarget>,
    /// Slot `i` of the TENANTS map.
    pub tenants: Vec<BucketParams>,
    pub tenant_names: Vec<String>,
    /// (prefix length, network address) -> tenant target (slot + 1).
    pub tenant_v4: BTreeMap<(u32, [u8; 4]), RuleTarget>,
    pub tenant_v6: BTreeMap<(u32, [u8; 16]), RuleTarget>,
}
