//! What a previous daemon left in pinned maps, read back as the maps'
//! contents and the owner of each class and tenant slot, so that the first
//! apply after a restart writes only differences: a class (or tenant) keeps
//! its slot, and with it its bucket and counters.

use std::collections::BTreeMap;

use aya::{
    Ebpf, Pod,
    maps::{Array, LpmTrie, Map},
};
use shedder_common::{
    bucket::BucketParams,
    classify::RuleTarget,
    maps::{ClassConfig, GlobalConfig, MAX_CLASSES, MAX_TENANTS, names},
};

use super::map;
use crate::config::Plan;
use crate::fastpath::slots::{Placement, SlotOwners};

/// The owners of a slotted map set, and the configs of the slots up to the
/// last one owned.
fn owned_slots<C: Pod>(ebpf: &Ebpf, ids: &str, configs: &str, slots: u32) -> anyhow::Result<(SlotOwners, Vec<C>)> {
    let ids: Array<_, u64> = Array::try_from(map(ebpf, ids)?)?;
    let configs: Array<_, C> = Array::try_from(map(ebpf, configs)?)?;
    let owners = (0..slots).map(|slot| ids.get(&slot, 0)).collect::<Result<Vec<_>, _>>()?;
    let used = owners.iter().rposition(|id| *id != 0).map_or(0, |last| last + 1) as u32;
    let configs = (0..used).map(|slot| configs.get(&slot, 0)).collect::<Result<Vec<_>, _>>()?;
    Ok((SlotOwners::from_ids(owners), configs))
}

/// What the pinned maps hold, slot by slot, and who owns each slot. Names
/// are not in the maps, only their digests, so the plan's names are left
/// empty: slots are matched to classes and tenants by owner.
pub(super) fn pinned_contents(ebpf: &Ebpf) -> anyhow::Result<Placement> {
    let (owners, classes) = owned_slots::<ClassConfig>(ebpf, names::CLASS_IDS, names::CLASSES, MAX_CLASSES)?;
    let (tenant_owners, tenants) = owned_slots::<BucketParams>(ebpf, names::TENANT_IDS, names::TENANTS, MAX_TENANTS)?;
    let mut plan = Plan {
        class_names: vec![String::new(); classes.len()],
        classes,
        tenant_names: vec![String::new(); tenants.len()],
        tenants,
        ..Plan::default()
    };
    let global: Array<_, GlobalConfig> = Array::try_from(map(ebpf, names::GLOBAL)?)?;
    plan.global = global.get(&0, 0)?;
    plan.src_v4 = read_lpm(map(ebpf, names::SRC_V4)?)?;
    plan.src_v6 = read_lpm(map(ebpf, names::SRC_V6)?)?;
    plan.dst_ports = read_array(map(ebpf, names::DST_PORTS)?)?;
    plan.dscp = read_array(map(ebpf, names::DSCP_IN)?)?;
    plan.tenant_v4 = read_lpm(map(ebpf, names::TENANT_V4)?)?;
    plan.tenant_v6 = read_lpm(map(ebpf, names::TENANT_V6)?)?;
    Ok(Placement::holding(plan, owners, tenant_owners))
}

/// The rules of an array map indexed by a small key (zero means no rule).
fn read_array<K: TryFrom<u32> + Ord>(map: &Map) -> anyhow::Result<BTreeMap<K, RuleTarget>> {
    let array: Array<_, RuleTarget> = Array::try_from(map)?;
    let mut rules = BTreeMap::new();
    for (index, target) in array.iter().enumerate() {
        let target = target?;
        if target != 0 {
            let key = K::try_from(index as u32).map_err(|_| anyhow::anyhow!("rule key {index} out of range"))?;
            rules.insert(key, target);
        }
    }
    Ok(rules)
}

fn read_lpm<A: Pod + Ord>(map: &Map) -> anyhow::Result<BTreeMap<(u32, A), RuleTarget>> {
    let trie: LpmTrie<_, A, RuleTarget> = LpmTrie::try_from(map)?;
    trie.iter()
        .map(|entry| entry.map(|(key, target)| ((key.prefix_len(), key.data()), target)))
        .collect::<Result<_, _>>()
        .map_err(Into::into)
}
