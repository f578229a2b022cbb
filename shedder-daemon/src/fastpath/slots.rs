//! Which slot of the class maps each class holds (and of the tenant maps
//! each tenant: the same rules, with tenants for classes).
//!
//! A class keeps its slot for as long as it is configured, wherever it sits
//! in the file: a reload that reorders, adds or removes classes never moves
//! one, so a rule that points at a slot keeps meaning the same class, and the
//! class keeps its bucket and counters. A new class takes a slot no class of
//! the previous plan held, so no rule still in the maps can point at it
//! before its own rules are written.

use shedder_common::{
    bucket::{self, BucketParams},
    classify::target_for,
    maps::{MAX_CLASSES, MAX_TENANTS},
};
use tracing::warn;

use crate::config::Plan;

/// Which class owns a slot, as stored in `CLASS_IDS`: FNV-1a of its name, a
/// digest that never changes between builds. Zero marks an empty slot.
pub(crate) fn class_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

/// The owner of every slot, as `CLASS_IDS` stores it: the digest of the
/// class's name, or 0 for a free slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotOwners(Vec<u64>);

/// Where a plan's classes go.
pub(crate) struct Layout {
    /// The owners once the plan is in.
    pub owners: SlotOwners,
    /// The slot of each class, in the plan's order.
    pub slot_of: Vec<u32>,
    /// Slots that a class of the previous plan held and another class takes
    /// now, because the never-used ones ran out.
    pub reused: Vec<u32>,
}

impl Default for SlotOwners {
    fn default() -> Self {
        Self::empty(MAX_CLASSES)
    }
}

impl SlotOwners {
    /// `slots` free slots.
    pub fn empty(slots: u32) -> Self {
        Self(vec![0; slots as usize])
    }

    /// The tenant maps' free slots.
    pub fn no_tenants() -> Self {
        Self::empty(MAX_TENANTS)
    }

    /// From the ids read out of `CLASS_IDS` (or `TENANT_IDS`), one per slot.
    pub fn from_ids(ids: Vec<u64>) -> Self {
        Self(ids)
    }

    /// How many slots there are.
    pub fn slots(&self) -> u32 {
        self.0.len() as u32
    }

    /// The owner of `slot` (0: free).
    pub fn get(&self, slot: u32) -> u64 {
        self.0[slot as usize]
    }

    /// Slots for `names`: a class already here keeps its slot; a new one
    /// takes the lowest slot nobody held, or, when none is left, one whose
    /// class is leaving (reported in [`Layout::reused`]).
    pub fn layout(&self, names: &[String]) -> Layout {
        assert!(names.len() <= self.0.len(), "the config holds at most {} of these", self.0.len());
        let ids: Vec<u64> = names.iter().map(|name| class_id(name)).collect();
        let mut owners = Self::default();
        let mut slot_of = vec![None; names.len()];
        for (i, id) in ids.iter().enumerate() {
            if let Some(slot) = self.0.iter().position(|owner| owner == id) {
                owners.0[slot] = *id;
                slot_of[i] = Some(slot as u32);
            }
        }
        let mut reused = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            if slot_of[i].is_some() {
                continue;
            }
            let free = |slot: &usize| owners.0[*slot] == 0;
            let slot = match (0..self.0.len()).find(|slot| free(slot) && self.0[*slot] == 0) {
                Some(slot) => slot,
                None => {
                    let slot = (0..self.0.len()).find(free).expect("at most one name per slot");
                    reused.push(slot as u32);
                    slot
                }
            };
            owners.0[slot] = *id;
            slot_of[i] = Some(slot as u32);
        }
        Layout { owners, slot_of: slot_of.into_iter().map(|slot| slot.expect("every class placed")).collect(), reused }
    }
}

/// `items` (named by `names`) at their slots; free slots empty and unnamed.
fn at_slots<T: Clone + Default>(items: &[T], names: &[String], slot_of: &[u32]) -> (Vec<T>, Vec<String>) {
    let slots = slot_of.iter().max().map_or(0, |last| *last as usize + 1);
    let (mut placed, mut placed_names) = (vec![T::default(); slots], vec![String::new(); slots]);
    for (i, slot) in slot_of.iter().enumerate() {
        placed[*slot as usize] = items[i].clone();
        placed_names[*slot as usize] = names[i].clone();
    }
    (placed, placed_names)
}

/// `plan` as the maps hold it: each class and tenant at its slot (free slots
/// empty and unnamed), every rule and the default class pointing at class
/// slots, every tenant network at a tenant slot, and each bucket read with
/// the clock its rate and burst allow ([`BucketParams::with_clock_for_tick`],
/// for a coarse clock of `coarse_tick_ns`).
///
/// [`BucketParams::with_clock_for_tick`]: shedder_common::bucket::BucketParams::with_clock_for_tick
fn place(plan: &Plan, slot_of: &[u32], tenant_slot_of: &[u32], coarse_tick_ns: u64) -> Plan {
    let (classes, class_names) = at_slots(&plan.classes, &plan.class_names, slot_of);
    let (tenants, tenant_names) = at_slots(&plan.tenants, &plan.tenant_names, tenant_slot_of);
    let mut placed = Plan { global: plan.global, classes, class_names, tenants, tenant_names, ..Plan::default() };
    // Free slots stay as the maps hold them: all zeros.
    for slot in slot_of {
        let class = &mut placed.classes[*slot as usize];
        class.bucket = class.bucket.with_clock_for_tick(coarse_tick_ns);
    }
    for slot in tenant_slot_of {
        let tenant = &mut placed.tenants[*slot as usize];
        *tenant = tenant.with_clock_for_tick(coarse_tick_ns);
    }
    placed.global.default_class = slot_of[plan.global.default_class as usize] as u8;
    // A rule target is `class + 1`; 0 (no rule) never appears in a plan.
    let retarget = |target: &u32| target_for(slot_of[*target as usize - 1]);
    placed.src_v4 = plan.src_v4.iter().map(|(k, t)| (*k, retarget(t))).collect();
    placed.src_v6 = plan.src_v6.iter().map(|(k, t)| (*k, retarget(t))).collect();
    placed.dst_ports = plan.dst_ports.iter().map(|(k, t)| (*k, retarget(t))).collect();
    placed.dscp = plan.dscp.iter().map(|(k, t)| (*k, retarget(t))).collect();
    let to_tenant = |target: &u32| target_for(tenant_slot_of[*target as usize - 1]);
    placed.tenant_v4 = plan.tenant_v4.iter().map(|(k, t)| (*k, to_tenant(t))).collect();
    placed.tenant_v6 = plan.tenant_v6.iter().map(|(k, t)| (*k, to_tenant(t))).collect();
    placed
}

/// A plan as the maps hold it, and where each of its classes and tenants went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Classes and tenants at their slots (free slots empty and unnamed),
    /// rules pointing at slots.
    pub plan: Plan,
    pub owners: SlotOwners,
    pub tenant_owners: SlotOwners,
    /// The slot of each class, in the order of the plan applied.
    pub slot_of: Vec<u32>,
    /// The slot of each tenant, likewise.
    pub tenant_slot_of: Vec<u32>,
}

impl Placement {
    /// Maps nobody has written.
    pub fn empty() -> Self {
        Self::holding(Plan::default(), SlotOwners::default(), SlotOwners::no_tenants())
    }

    /// What maps hold (read back after a restart): slots by owner, the
    /// names unknown.
    pub fn holding(plan: Plan, owners: SlotOwners, tenant_owners: SlotOwners) -> Self {
        Self { plan, owners, tenant_owners, slot_of: Vec::new(), tenant_slot_of: Vec::new() }
    }

    /// Where `plan` goes after this placement: classes and tenants that stay
    /// keep their slots; buckets read with the clock their rate allows for a
    /// coarse clock of `coarse_tick_ns`.
    pub fn next(&self, plan: &Plan, coarse_tick_ns: u64) -> Self {
        let layout = self.owners.layout(&plan.class_names);
        let tenant_layout = self.tenant_owners.layout(&plan.tenant_names);
        if !layout.reused.is_empty() || !tenant_layout.reused.is_empty() {
            warn!(
                slots = ?layout.reused,
                tenant_slots = ?tenant_layout.reused,
                "this change adds and removes more classes (or tenants) than there are free slots: new ones take \
                 the slots of leaving ones, so until the rules are rewritten a connection may be counted in the \
                 wrong one. Remove them in one change and add them in the next to avoid it"
            );
        }
        Self {
            plan: place(plan, &layout.slot_of, &tenant_layout.slot_of, coarse_tick_ns),
            owners: layout.owners,
            tenant_owners: tenant_layout.owners,
            slot_of: layout.slot_of,
            tenant_slot_of: tenant_layout.slot_of,
        }
    }
}

/// A slot a change writes: its new content, and the old one when the same
/// class (or tenant) held it before.
pub(crate) struct SlotWrite<'a, C> {
    pub slot: u32,
    pub new: C,
    pub old: Option<&'a C>,
}

impl<C> SlotWrite<'_, C> {
    /// The bucket state the slot must hold after the change, if it changes:
    /// a new owner starts full (TAT 0); one whose budget changed keeps what it
    /// spent, rescaled to the new budget.
    pub fn new_tat(&self, tat: u64, now: u64, bucket_of: fn(&C) -> &BucketParams) -> Option<u64> {
        match self.old {
            None => Some(0),
            Some(old) if bucket_of(old) != bucket_of(&self.new) => {
                Some(bucket::rescale(tat, now, bucket_of(old), bucket_of(&self.new)))
            }
            Some(_) => None,
        }
    }

    /// A new owner: its counters start from zero.
    pub fn is_fresh(&self) -> bool {
        self.old.is_none()
    }
}

/// The slots (of classes, or of tenants) that are new or changed from
/// `previous` to `next`.
pub(crate) fn slot_writes<'a, C: Copy + PartialEq>(
    (previous, old_owners): (&'a [C], &SlotOwners),
    (next, owners): (&[C], &SlotOwners),
) -> Vec<SlotWrite<'a, C>> {
    (0..owners.slots())
        .filter(|slot| owners.get(*slot) != 0)
        .filter_map(|slot| {
            let new = next[slot as usize];
            let old = previous.get(slot as usize).filter(|_| old_owners.get(slot) == owners.get(slot));
            (old != Some(&new)).then_some(SlotWrite { slot, new, old })
        })
        .collect()
}

/// The slots whose owners leave.
pub(crate) fn left_slots(old_owners: &SlotOwners, owners: &SlotOwners) -> Vec<u32> {
    (0..owners.slots()).filter(|s| old_owners.get(*s) != 0 && owners.get(*s) == 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn owners_of(list: &[&str]) -> SlotOwners {
        SlotOwners::default().layout(&names(list)).owners
    }

    #[test]
    fn class_ids_are_stable_and_tell_names_apart() {
        // FNV-1a test vectors: the digest must not change between builds.
        assert_eq!(class_id(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(class_id("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(class_id("web"), class_id("batch"));
    }

    #[test]
    fn classes_keep_their_slots_whatever_the_order() {
        // (before, after, slots of `after`)
        let table: [(&[&str], &[&str], &[u32]); 5] = [
            (&[], &["a", "b", "c"], &[0, 1, 2]),
            (&["a", "b", "c"], &["a", "c", "b"], &[0, 2, 1]),
            (&["a", "b", "c"], &["c", "b", "a"], &[2, 1, 0]),
            // A new class never takes the slot of one that is leaving.
            (&["a", "b", "c"], &["a", "d", "c"], &[0, 3, 2]),
            (&["a", "b"], &["x", "y", "a"], &[2, 3, 0]),
        ];
        for (before, after, want) in table {
            let layout = owners_of(before).layout(&names(after));
            assert_eq!(layout.slot_of, want, "{before:?} -> {after:?}");
            assert!(layout.reused.is_empty());
        }
    }

    #[test]
    fn when_never_used_slots_run_out_a_leaving_class_s_slot_is_reused_and_reported() {
        let all: Vec<String> = (0..MAX_CLASSES).map(|i| format!("c{i}")).collect();
        let before = SlotOwners::default().layout(&all).owners;
        let mut after = all.clone();
        after[5] = "new".into();
        let layout = before.layout(&after);
        assert_eq!(layout.slot_of[5], 5);
        assert_eq!(layout.reused, [5]);
    }

    #[test]
    fn placing_points_rules_and_the_default_at_slots() {
        let mut plan =
            Plan { class_names: names(&["a", "b"]), classes: vec![Default::default(); 2], ..Plan::default() };
        plan.global.default_class = 1;
        plan.dst_ports.insert(80, target_for(0));
        plan.dscp.insert(8, target_for(1));
        plan.tenant_names = names(&["t"]);
        plan.tenants = vec![Default::default()];
        plan.tenant_v4.insert((8, [10, 0, 0, 0]), target_for(0));
        let placed = place(&plan, &[3, 0], &[2], 4_000_000);
        assert_eq!(placed.tenant_names, ["", "", "t"]);
        assert_eq!(placed.tenant_v4[&(8, [10, 0, 0, 0])], target_for(2));
        assert_eq!(placed.class_names, ["b", "", "", "a"]);
        assert_eq!(placed.global.default_class, 0);
        assert_eq!(placed.dst_ports[&80], target_for(3));
        assert_eq!(placed.dscp[&8], target_for(0));
    }
}
