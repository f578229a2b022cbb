//! The fast path in memory: the host reference model of the eBPF programs
//! (`shedder_common::reference`) over maps held in plain arrays. It places
//! classes and tenants in slots, keeps buckets across changes and counts
//! outcomes exactly as the kernel datapath does, so the control loop, the
//! control socket and the metrics can be tested as tables without root.
//! What only a kernel shows (the verifier, attaching, per-CPU races) stays
//! with the kernel tests.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use shedder_common::{
    bucket::{self, BucketParams},
    maps::{ClassCounters, MAX_CLASSES, MAX_TENANTS, PassReason, TenantCounters},
    reference::{Counted, Expected, Live, Tables, judge},
};

use super::{
    Attachment, ClassSnapshot, Fastpath, FastpathError, Snapshot, TenantSnapshot,
    slots::{Placement, SlotOwners, slot_writes},
};
use crate::{
    clock::{coarse_tick_ns, monotonic_ns},
    config::Plan,
};

/// One fast path in memory. Clones share it: a test keeps one to send
/// frames through while the daemon holds another, as a NIC and its daemon do.
#[derive(Clone, Default)]
pub struct MemoryFastpath {
    state: Arc<Mutex<State>>,
}

/// The maps' contents, bucket states and counters.
struct State {
    applied: Option<Placement>,
    tables: Tables,
    live: Live,
    class_counters: Vec<ClassCounters>,
    tenant_counters: Vec<TenantCounters>,
    /// By reason, indexed as `PASS_COUNTERS` is.
    passed: Vec<u64>,
}

impl Default for State {
    fn default() -> Self {
        Self {
            applied: None,
            tables: Tables::default(),
            live: Live::default(),
            class_counters: vec![ClassCounters::default(); MAX_CLASSES as usize],
            tenant_counters: vec![TenantCounters::default(); MAX_TENANTS as usize],
            passed: vec![0; PassReason::ALL.iter().map(|r| *r as usize + 1).max().unwrap_or(0)],
        }
    }
}

impl MemoryFastpath {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs one frame through the fast path at `now_ns` (CLOCK_MONOTONIC, the
    /// clock the heartbeat is written on): what the program would return and
    /// write, with the counters and buckets moved as it would move them.
    pub fn receive(&self, frame: &[u8], now_ns: u64) -> Expected {
        let state = &mut *self.state();
        let expected = judge(frame, &state.tables, &mut state.live, now_ns);
        match expected.counted {
            Counted::Class(slot, outcome) => {
                let counters = &mut state.class_counters[slot as usize];
                counters.count(outcome);
                counters.resent += u64::from(expected.resent);
            }
            Counted::Pass(reason) => state.passed[reason as usize] += 1,
            Counted::Nothing => {}
        }
        if let Some((slot, fit)) = expected.tenant {
            let counters = &mut state.tenant_counters[slot as usize];
            counters.count(fit);
            counters.resent += u64::from(expected.resent);
        }
        expected
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the state half-written: every
        // update is made under the lock, whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// Brings the bucket states and counters of one kind of slot (classes,
    /// or tenants) from `previous` to `next`, as the kernel datapath does.
    fn carry_slots<C: Copy + PartialEq, K: Default>(
        (tats, counters): (&mut [u64], &mut [K]),
        previous: (&[C], &SlotOwners),
        next: (&[C], &SlotOwners),
        bucket_of: fn(&C) -> &BucketParams,
    ) {
        let now = monotonic_ns();
        for write in slot_writes(previous, next) {
            let slot = write.slot as usize;
            if let Some(tat) = write.new_tat(tats[slot], now, bucket_of) {
                tats[slot] = tat;
            }
            if write.is_fresh() {
                counters[slot] = K::default();
            }
        }
    }

    fn snapshots<K: Copy>(
        &self,
        counters: &[K],
        tats: &[u64],
        slots: impl Iterator<Item = (u32, String, BucketParams)>,
    ) -> Vec<Snapshot<K>> {
        let now = monotonic_ns();
        slots
            .map(|(slot, name, bucket)| Snapshot {
                name,
                counters: counters[slot as usize],
                available_milli: bucket::available_milli(tats[slot as usize], now, &bucket),
                bucket,
            })
            .collect()
    }
}

impl Fastpath for MemoryFastpath {
    fn apply(&mut self, plan: &Plan) -> Result<(), FastpathError> {
        self.state().apply(plan);
        Ok(())
    }

    fn class_snapshots(&self) -> Result<Vec<ClassSnapshot>, FastpathError> {
        Ok(self.state().class_snapshots())
    }

    fn tenant_snapshots(&self) -> Result<Vec<TenantSnapshot>, FastpathError> {
        Ok(self.state().tenant_snapshots())
    }

    fn pass_counters(&self) -> Result<Vec<(PassReason, u64)>, FastpathError> {
        let state = self.state();
        Ok(PassReason::ALL.iter().map(|reason| (*reason, state.passed[*reason as usize])).collect())
    }

    fn write_heartbeat(&mut self, now_ns: u64) -> Result<(), FastpathError> {
        self.state().live.heartbeat = now_ns;
        Ok(())
    }

    fn heartbeat(&self) -> Result<u64, FastpathError> {
        Ok(self.state().live.heartbeat)
    }

    fn placed(&self) -> Option<Plan> {
        self.state().applied.as_ref().map(|applied| applied.plan.clone())
    }

    /// Attached nowhere: there is nothing to ask.
    fn attached_to(&self, _iface: &str, _attachment: Attachment) -> Option<bool> {
        None
    }
}

impl State {
    fn apply(&mut self, plan: &Plan) {
        let previous = self.applied.take().unwrap_or_else(Placement::empty);
        let next = previous.next(plan, coarse_tick_ns());
        Self::carry_slots(
            (&mut self.live.tats, &mut self.class_counters),
            (&previous.plan.classes, &previous.owners),
            (&next.plan.classes, &next.owners),
            |class| &class.bucket,
        );
        Self::carry_slots(
            (&mut self.live.tenant_tats, &mut self.tenant_counters),
            (&previous.plan.tenants, &previous.tenant_owners),
            (&next.plan.tenants, &next.tenant_owners),
            |tenant| tenant,
        );
        // The maps hold the placed plan: owned slots written, the others zero.
        let placed = &next.plan;
        self.tables.classes = placed.classes.clone();
        self.tables.tenants = placed.tenants.clone();
        self.tables.global = placed.global;
        self.tables.src_v4 = placed.src_v4.clone();
        self.tables.src_v6 = placed.src_v6.clone();
        self.tables.dst_ports = placed.dst_ports.clone();
        self.tables.dscp = placed.dscp.clone();
        self.tables.tenant_v4 = placed.tenant_v4.clone();
        self.tables.tenant_v6 = placed.tenant_v6.clone();
        self.applied = Some(next);
    }

    fn class_snapshots(&self) -> Vec<ClassSnapshot> {
        let Some(applied) = &self.applied else { return Vec::new() };
        let placed = &applied.plan;
        let slots = applied
            .slot_of
            .iter()
            .map(|&slot| (slot, placed.class_names[slot as usize].clone(), placed.classes[slot as usize].bucket));
        self.snapshots(&self.class_counters, &self.live.tats, slots)
    }

    fn tenant_snapshots(&self) -> Vec<TenantSnapshot> {
        let Some(applied) = &self.applied else { return Vec::new() };
        let placed = &applied.plan;
        let slots = applied
            .tenant_slot_of
            .iter()
            .map(|&slot| (slot, placed.tenant_names[slot as usize].clone(), placed.tenants[slot as usize]));
        self.snapshots(&self.tenant_counters, &self.live.tenant_tats, slots)
    }
}
