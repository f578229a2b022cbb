//! What a previous daemon left in pinned maps, read back as the maps'
//! contents and the owner of each class and tenant slot, so that the first
//! apply after a restart writes only differences: a class (or tenant) keeps
//! its slot, and with it its bucket and counters.

use std::collections::BTreeMap;

use aya::{
    Ebpf, Pod,
    maps::{Array, LpmTrie},
};
use shedder_common::{
    bucket::BucketParams,
    classify::RuleTarget,
    maps::{ClassConfig, GlobalConfig, MAX_CLASSES, MAX_TENANTS, names},
};

use super::{OnMap as _, map};
use crate::fastpath::slots::{Placement, SlotOwners};
use crate::{config::Plan, fastpath::FastpathError};

/// The owners of a slotted map set, and the configs of the slots up to the
/// last one owned.
fn owned_slots<C: Pod>(
    ebpf: &Ebpf,
    ids_map: &'static str,
    configs_map: &'static str,
    slots: u32,
) -> Result<(SlotOwners, Vec<C>), FastpathError> {
    let ids: Array<_, u64> = Array::try_from(map(ebpf, ids_map)?).on(ids_map)?;
    let configs: Array<_, C> = Array::try_from(map(ebpf, configs_map)?).on(configs_map)?;
    let owners = (0..slots).map(|slot| ids.get(&slot, 0)).collect::<Result<Vec<_>, _>>().on(ids_map)?;
    let used = owners.iter().rposition(|id| *id != 0).map_or(0, |last| last + 1) as u32;
    let configs = (0..used).map(|slot| configs.get(&slot, 0)).collect::<Result<Vec<_>, _>>().on(configs_map)?;
    Ok((SlotOwners::from_ids(owners), configs))
}

/// What the pinned maps hold, slot by slot, and who owns each slot. Names
/// are not in the maps, only their digests, so the plan's names are left
/// empty: slots are matched to classes and tenants by owner.
pub(super) fn pinned_contents(ebpf: &Ebpf) -> Result<Placement, FastpathError> {
    let (owners, classes) = owned_slots::<ClassConfig>(ebpf, names::CLASS_IDS, names::CLASSES, MAX_CLASSES)?;
    let (tenant_owners, tenants) = owned_slots::<BucketParams>(ebpf, names::TENANT_IDS, names::TENANTS, MAX_TENANTS)?;
    let mut plan = Plan {
        class_names: vec![String::new(); classes.len()],
        classes,
        tenant_names: vec![String::new(); tenants.len()],
        tenants,
        ..Plan::default()
    };
    let global: Array<_, GlobalConfig> = Array::try_from(map(ebpf, names::GLOBAL)?).on(names::GLOBAL)?;
    plan.global = global.get(&0, 0).on(names::GLOBAL)?;
    plan.src_v4 = read_lpm(ebpf, names::SRC_V4)?;
    plan.src_v6 = read_lpm(ebpf, names::SRC_V6)?;
    plan.dst_ports = read_array(ebpf, names::DST_PORTS)?;
    plan.dscp = read_array(ebpf, names::DSCP_IN)?;
    plan.tenant_v4 = read_lpm(ebpf, names::TENANT_V4)?;
    plan.tenant_v6 = read_lpm(ebpf, names::TENANT_V6)?;
    Ok(Placement::holding(plan, owners, tenant_owners))
}

/// The rules of an array map indexed by a small key (zero means no rule).
fn read_array<K: TryFrom<u32> + Ord>(
    ebpf: &Ebpf,
    name: &'static str,
) -> Result<BTreeMap<K, RuleTarget>, FastpathError> {
    let array: Array<_, RuleTarget> = Array::try_from(map(ebpf, name)?).on(name)?;
    let mut rules = BTreeMap::new();
    for (index, target) in array.iter().enumerate() {
        let target = target.on(name)?;
        if target != 0 {
            let key = K::try_from(index as u32).map_err(|_| FastpathError::RuleKey { map: name, index })?;
            rules.insert(key, target);
        }
    }
    Ok(rules)
}

fn read_lpm<A: Pod + Ord>(ebpf: &Ebpf, name: &'static str) -> Result<BTreeMap<(u32, A), RuleTarget>, FastpathError> {
    let trie: LpmTrie<_, A, RuleTarget> = LpmTrie::try_from(map(ebpf, name)?).on(name)?;
    trie.iter()
        .map(|entry| entry.map(|(key, target)| ((key.prefix_len(), key.data()), target)))
        .collect::<Result<_, _>>()
        .on(name)
}
