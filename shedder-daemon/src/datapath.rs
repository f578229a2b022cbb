//! The eBPF fast path from user space: load it, attach it, program its maps
//! from a [`Plan`], and read its counters back.

mod error;
mod inherit;
mod xdp_query;

use std::{collections::BTreeMap, path::Path};

use aya::{
    Ebpf, EbpfLoader, Pod,
    maps::{Array, LpmTrie, Map, MapData, MapError, PerCpuArray, PerCpuValues, lpm_trie::Key},
    programs::{
        ProgramError, SchedClassifier, TcAttachType, Xdp, XdpMode,
        links::{FdLink, PinnedLink},
        tc::{self, SchedClassifierLink, SchedClassifierLinkId},
        xdp::{XdpLink, XdpLinkId},
    },
    util::KernelVersion,
};
use shedder_common::{
    bucket::{self, BucketParams},
    classify::RuleTarget,
    maps::{ClassConfig, ClassCounters, GlobalConfig, MAX_CIDR_RULES, PassReason, TenantCounters, names, programs},
};

use tracing::{info, warn};

use crate::{
    clock::{coarse_tick_ns, monotonic_ns},
    config::Plan,
    fastpath::{
        AttachKind, Attachment, ClassSnapshot, Fastpath, FastpathError, Snapshot, TenantSnapshot,
        slots::{Placement, SlotOwners, SlotWrite, left_slots, slot_writes},
    },
    lock::ExclusiveLock,
    pin::{PINNED_MAPS, PinDir},
};

pub use self::error::{AttachError, LoadError};

/// The object built from `shedder-ebpf` by this crate's build script.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/shedder"));

/// Per-CPU counters that add up.
trait Counts: Pod + Default {
    fn add(&mut self, other: &Self);
}

impl Counts for ClassCounters {
    fn add(&mut self, other: &Self) {
        ClassCounters::add(self, other)
    }
}

impl Counts for TenantCounters {
    fn add(&mut self, other: &Self) {
        TenantCounters::add(self, other)
    }
}

/// The loaded programs and their maps. Dropping it detaches everything that
/// is not pinned.
pub struct Datapath {
    ebpf: Ebpf,
    /// What the maps hold now; `None` until the first [`Fastpath::apply`].
    applied: Option<Placement>,
    pinning: Option<Pinning>,
    /// How far the coarse clock lags: buckets whose refill over it is small
    /// against their burst are read with it.
    coarse_tick_ns: u64,
}

/// The maps that hold one kind of slot's owners: classes, or tenants.
struct SlotMaps {
    configs: &'static str,
    buckets: &'static str,
    counters: &'static str,
    ids: &'static str,
}

const CLASS_MAPS: SlotMaps = SlotMaps {
    configs: names::CLASSES,
    buckets: names::BUCKETS,
    counters: names::CLASS_COUNTERS,
    ids: names::CLASS_IDS,
};

const TENANT_MAPS: SlotMaps = SlotMaps {
    configs: names::TENANTS,
    buckets: names::TENANT_BUCKETS,
    counters: names::TENANT_COUNTERS,
    ids: names::TENANT_IDS,
};

/// A datapath whose maps (and link, where it has one) are pinned.
struct Pinning {
    dir: PinDir,
    /// Held for the datapath's life: no other daemon drives these maps.
    _lock: ExclusiveLock,
    /// The maps came from a previous run: the first apply starts from what
    /// they hold instead of from nothing.
    taken_over: bool,
    /// This run made the directory; until it has attached, failing removes it.
    created: bool,
    attached: bool,
    /// The program stays attached when this process exits.
    link_pinned: bool,
}

impl Drop for Pinning {
    fn drop(&mut self) {
        if self.created
            && !self.attached
            && let Err(e) = self.dir.remove()
        {
            warn!("removing {} after a failed start: {e}", self.dir.path().display());
        }
    }
}

/// A link [`Datapath::attach`] just made, not yet pinned.
enum NewLink {
    Xdp(XdpLinkId),
    Tc(SchedClassifierLinkId),
}

fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Map, FastpathError> {
    ebpf.map_mut(name).ok_or(FastpathError::MissingMap(name))
}

fn map<'a>(ebpf: &'a Ebpf, name: &'static str) -> Result<&'a Map, FastpathError> {
    ebpf.map(name).ok_or(FastpathError::MissingMap(name))
}

/// Names the map an aya map error came from.
trait OnMap<T> {
    fn on(self, map: &'static str) -> Result<T, FastpathError>;
}

impl<T> OnMap<T> for Result<T, MapError> {
    fn on(self, map: &'static str) -> Result<T, FastpathError> {
        self.map_err(|error| FastpathError::Map { map, error })
    }
}

impl Datapath {
    /// Loads both programs into the kernel (the verifier checks them now),
    /// with maps of their own that go when this does.
    pub fn load() -> Result<Self, LoadError> {
        let ebpf = Ebpf::load(OBJECT).map_err(|error| LoadError::Object { dir: None, error: Box::new(error) })?;
        Self::load_programs(ebpf, None)
    }

    /// Loads both programs against the maps pinned in `dir`, pinning new ones
    /// where there are none, for attaching as `kind`. Maps a previous run left
    /// keep their state; maps laid out for another version, or a link of
    /// another kind, are refused before anything is loaded or written.
    pub fn load_pinned(dir: PinDir, kind: AttachKind) -> Result<Self, LoadError> {
        let created = dir.prepare()?;
        let lock = dir.lock()?;
        if let Some((attachment, path)) = dir.pinned_link()
            && attachment.kind() != kind
        {
            return Err(LoadError::OtherLinkKind { path, pinned: attachment, asked: kind.name(), iface: dir.iface() });
        }
        dir.check_layout(OBJECT)?;
        let taken_over = dir.holds_maps();
        let paths: Vec<_> = PINNED_MAPS.iter().map(|name| (*name, dir.map_path(name))).collect();
        let mut loader = EbpfLoader::new();
        for (name, path) in &paths {
            loader.map_pin_path(name, path.as_path());
        }
        // From here on, dropping `pinning` removes a directory this run made.
        let pinning = Pinning { dir, _lock: lock, taken_over, created, attached: false, link_pinned: false };
        let ebpf = loader.load(OBJECT).map_err(|error| LoadError::Object {
            dir: Some(pinning.dir.path().to_path_buf()),
            error: Box::new(error),
        })?;
        Self::load_programs(ebpf, Some(pinning))
    }

    fn load_programs(mut ebpf: Ebpf, pinning: Option<Pinning>) -> Result<Self, LoadError> {
        let xdp: &mut Xdp = program_mut(&mut ebpf, programs::XDP)?;
        xdp.load().map_err(load_error(programs::XDP))?;
        let tc: &mut SchedClassifier = program_mut(&mut ebpf, programs::TC)?;
        tc.load().map_err(load_error(programs::TC))?;
        Ok(Self { ebpf, applied: None, pinning, coarse_tick_ns: coarse_tick_ns() })
    }

    /// Starts forwarding the fast path's rare diagnostics to the `log` crate.
    pub fn take_logger(&mut self) -> Result<aya_log::EbpfLogger<&'static dyn log::Log>, LoadError> {
        aya_log::EbpfLogger::init(&mut self.ebpf).map_err(|error| LoadError::Logger(Box::new(error)))
    }

    pub fn xdp(&self) -> &Xdp {
        self.ebpf.program(programs::XDP).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    pub fn tc(&self) -> &SchedClassifier {
        self.ebpf.program(programs::TC).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    /// Attaches to `iface`; XDP tries native mode first and falls back to
    /// generic. When pinned, a link a previous run left gets this program
    /// swapped in atomically (the interface is never without one), and a new
    /// link is pinned, where the hook has one.
    pub fn attach(&mut self, iface: &str, kind: AttachKind) -> Result<Attachment, AttachError> {
        // load_pinned made sure a pinned link is of the kind asked.
        if let Some((attachment, path)) = self.pinning.as_ref().and_then(|p| p.dir.pinned_link()) {
            match self.take_over_link(attachment, &path) {
                Ok(()) => {
                    info!(link = %path.display(), "swapped this program into the pinned link");
                    return Ok(self.attached(attachment, true));
                }
                // The interface it was attached to is gone (deleted, or made anew).
                Err(e) if e.is_defunct_link() => {
                    warn!(link = %path.display(), "the pinned link's interface is gone; attaching anew");
                    std::fs::remove_file(&path).map_err(|error| AttachError::Unpin { path: path.clone(), error })?;
                }
                Err(e) => return Err(e),
            }
        }
        let (attachment, link) = self.attach_new(iface, kind)?;
        let Some(pinning) = &self.pinning else { return Ok(attachment) };
        let pinned = match pinning.dir.link_path(attachment) {
            Some(path) => {
                self.pin_link(link, &path)?;
                true
            }
            None => {
                warn!(
                    "{attachment} has no bpf_link to pin (TCX needs Linux 6.6): the program detaches when the \
                     daemon exits and a restart attaches it again; the pinned maps still keep buckets and counters"
                );
                false
            }
        };
        Ok(self.attached(attachment, pinned))
    }

    fn attached(&mut self, attachment: Attachment, link_pinned: bool) -> Attachment {
        if let Some(pinning) = &mut self.pinning {
            pinning.attached = true;
            pinning.link_pinned = link_pinned;
        }
        attachment
    }

    /// The pin directory, when the program stays attached after the daemon exits.
    pub fn pinned_link_dir(&self) -> Option<&Path> {
        self.pinning.as_ref().filter(|p| p.link_pinned).map(|p| p.dir.path())
    }

    fn xdp_mut(&mut self) -> &mut Xdp {
        self.ebpf.program_mut(programs::XDP).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    fn tc_mut(&mut self) -> &mut SchedClassifier {
        self.ebpf.program_mut(programs::TC).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    fn attach_new(&mut self, iface: &str, kind: AttachKind) -> Result<(Attachment, NewLink), AttachError> {
        match kind {
            AttachKind::Xdp => {
                let xdp = self.xdp_mut();
                match xdp.attach(iface, XdpMode::Driver) {
                    Ok(id) => Ok((Attachment::XdpNative, NewLink::Xdp(id))),
                    Err(native) => {
                        let id = xdp.attach(iface, XdpMode::Skb).map_err(|generic| match other_xdp_program(iface) {
                            Some(id) => AttachError::OtherXdpProgram { iface: iface.to_string(), id },
                            None => AttachError::Xdp {
                                iface: iface.to_string(),
                                native: Box::new(native),
                                generic: Box::new(generic),
                            },
                        })?;
                        Ok((Attachment::XdpGeneric, NewLink::Xdp(id)))
                    }
                }
            }
            AttachKind::Tc => {
                // TCX runs several programs on one hook: two shedders there
                // would each charge every SYN (a pinned one is taken over
                // through its link instead, and never gets here).
                if let Some(id) = shedder_on_tcx(iface) {
                    return Err(AttachError::OtherShedderTc { iface: iface.to_string(), id });
                }
                let prog = self.tc_mut();
                // aya picks TCX on kernels >= 6.6; older ones need a clsact qdisc.
                match prog.attach(iface, TcAttachType::Ingress) {
                    Ok(id) if has_tcx() => Ok((Attachment::Tcx, NewLink::Tc(id))),
                    Ok(id) => Ok((Attachment::TcClsact, NewLink::Tc(id))),
                    Err(first) => {
                        if let Err(e) = tc::qdisc_add_clsact(iface)
                            && !matches!(&e, tc::TcError::AlreadyAttached)
                        {
                            return Err(AttachError::Clsact {
                                iface: iface.to_string(),
                                first: Box::new(first),
                                clsact: Box::new(e),
                            });
                        }
                        let id = prog
                            .attach_with_options(
                                iface,
                                TcAttachType::Ingress,
                                tc::TcAttachOptions::Netlink(Default::default()),
                            )
                            .map_err(|error| AttachError::Tc {
                                iface: iface.to_string(),
                                first: Box::new(first),
                                error: Box::new(error),
                            })?;
                        Ok((Attachment::TcClsact, NewLink::Tc(id)))
                    }
                }
            }
        }
    }

    /// Pins a new link. From then on the pin is its only reference: the
    /// program stays attached after this process exits, until `shedder detach`.
    fn pin_link(&mut self, link: NewLink, path: &Path) -> Result<(), AttachError> {
        let link: FdLink = match link {
            NewLink::Xdp(id) => self.xdp_mut().take_link(id)?.try_into()?,
            NewLink::Tc(id) => self.tc_mut().take_link(id)?.try_into()?,
        };
        link.pin(path).map_err(|error| AttachError::PinLink { path: path.to_path_buf(), error })?;
        Ok(())
    }

    /// Swaps this program into a pinned link with one `bpf_link_update`, then
    /// lets go of it: as with [`Self::pin_link`], the pin stays its only
    /// reference, so `shedder detach` works the same whichever run attached.
    fn take_over_link(&mut self, attachment: Attachment, path: &Path) -> Result<(), AttachError> {
        let pinned = PinnedLink::from_pin(path)
            .map_err(|error| AttachError::OpenPinnedLink { path: path.to_path_buf(), error: Box::new(error) })?;
        let link = FdLink::from(pinned);
        let take_over =
            |error: ProgramError| AttachError::TakeOver { path: path.to_path_buf(), error: Box::new(error) };
        match attachment {
            Attachment::XdpNative | Attachment::XdpGeneric => {
                let xdp = self.xdp_mut();
                let id = xdp.attach_to_link(XdpLink::try_from(link)?).map_err(take_over)?;
                drop(xdp.take_link(id)?);
            }
            Attachment::Tcx => {
                let tc = self.tc_mut();
                let id = tc.attach_to_link(SchedClassifierLink::try_from(link)?).map_err(take_over)?;
                drop(tc.take_link(id)?);
            }
            Attachment::TcClsact => return Err(AttachError::NoLinkToTakeOver(path.to_path_buf())),
        }
        Ok(())
    }

    /// After taking pinned maps over, the first apply starts from what they hold.
    fn apply_plan(&mut self, plan: &Plan) -> Result<(), FastpathError> {
        let applied = self.applied.take();
        let first = applied.is_none();
        let previous = match applied {
            Some(applied) => applied,
            None if self.pinning.as_ref().is_some_and(|p| p.taken_over) => {
                inherit::pinned_contents(&self.ebpf).map_err(|e| FastpathError::Inherit(Box::new(e)))?
            }
            None => Placement::empty(),
        };
        let next = previous.next(plan, self.coarse_tick_ns);
        let written = self.write_plan(first, &previous, &next);
        // A failed write keeps what was applied before as the base to diff from.
        self.applied = match (&written, first) {
            (Ok(()), _) => Some(next),
            (Err(_), false) => Some(previous),
            (Err(_), true) => None,
        };
        written
    }

    /// The writes are ordered so that, at every moment between two, each rule
    /// points at a slot that holds the class it names in the old plan or in
    /// the new one: a new class's slot is written before any rule points at
    /// it, and a leaving class's slot is cleared only once no rule does.
    fn write_plan(&mut self, first: bool, previous: &Placement, plan: &Placement) -> Result<(), FastpathError> {
        let (old, new) = (&previous.plan, &plan.plan);
        self.write_slots::<ClassConfig, ClassCounters>(
            &CLASS_MAPS,
            (&old.classes, &previous.owners),
            (&new.classes, &plan.owners),
            |class| &class.bucket,
        )?;
        self.write_slots::<BucketParams, TenantCounters>(
            &TENANT_MAPS,
            (&old.tenants, &previous.tenant_owners),
            (&new.tenants, &plan.tenant_owners),
            |tenant| tenant,
        )?;
        let ebpf = &mut self.ebpf;
        sync_lpm(ebpf, names::SRC_V4, &old.src_v4, &new.src_v4)?;
        sync_lpm(ebpf, names::SRC_V6, &old.src_v6, &new.src_v6)?;
        sync_array(ebpf, names::DST_PORTS, &old.dst_ports, &new.dst_ports)?;
        sync_array(ebpf, names::DSCP_IN, &old.dscp, &new.dscp)?;
        sync_lpm(ebpf, names::TENANT_V4, &old.tenant_v4, &new.tenant_v4)?;
        sync_lpm(ebpf, names::TENANT_V6, &old.tenant_v6, &new.tenant_v6)?;
        // After the rules, so the rule-presence flags never point at rules
        // not yet written, and the default class is already in its slot.
        if first || old.global != new.global {
            let mut global: Array<_, GlobalConfig> =
                Array::try_from(map_mut(ebpf, names::GLOBAL)?).on(names::GLOBAL)?;
            global.set(0, new.global, 0).on(names::GLOBAL)?;
        }
        self.clear_left_slots::<ClassConfig>(&CLASS_MAPS, &previous.owners, &plan.owners)?;
        self.clear_left_slots::<BucketParams>(&TENANT_MAPS, &previous.tenant_owners, &plan.tenant_owners)
    }

    /// Writes the slots (of classes, or of tenants: `maps` says which) that
    /// are new or changed from `previous` to `plan`.
    fn write_slots<C: Pod + PartialEq, K: Pod + Default>(
        &mut self,
        maps: &SlotMaps,
        (previous, old_owners): (&[C], &SlotOwners),
        (plan, owners): (&[C], &SlotOwners),
        bucket_of: fn(&C) -> &BucketParams,
    ) -> Result<(), FastpathError> {
        let changed = slot_writes((previous, old_owners), (plan, owners));
        let now = monotonic_ns();
        let mut tats = Vec::new();
        {
            let buckets: Array<_, u64> = Array::try_from(map(&self.ebpf, maps.buckets)?).on(maps.buckets)?;
            for write in &changed {
                if let Some(tat) = write.new_tat(buckets.get(&write.slot, 0).on(maps.buckets)?, now, bucket_of) {
                    tats.push((write.slot, tat));
                }
            }
        }
        let fresh: Vec<u32> = changed.iter().filter(|write| write.is_fresh()).map(|write| write.slot).collect();
        if !fresh.is_empty() {
            let mut counters: PerCpuArray<_, K> =
                PerCpuArray::try_from(map_mut(&mut self.ebpf, maps.counters)?).on(maps.counters)?;
            let cpus = aya::util::nr_cpus().map_err(|(what, error)| FastpathError::PerCpu { what, error })?;
            for slot in &fresh {
                let zeros = PerCpuValues::try_from(vec![K::default(); cpus])
                    .map_err(|error| FastpathError::PerCpu { what: "zeroed counters", error })?;
                counters.set(*slot, zeros, 0).on(maps.counters)?;
            }
        }
        let mut buckets: Array<_, u64> = Array::try_from(map_mut(&mut self.ebpf, maps.buckets)?).on(maps.buckets)?;
        for (slot, tat) in tats {
            buckets.set(slot, tat, 0).on(maps.buckets)?;
        }
        let mut configs: Array<_, C> = Array::try_from(map_mut(&mut self.ebpf, maps.configs)?).on(maps.configs)?;
        for SlotWrite { slot, new, .. } in &changed {
            configs.set(*slot, *new, 0).on(maps.configs)?;
        }
        let mut ids: Array<_, u64> = Array::try_from(map_mut(&mut self.ebpf, maps.ids)?).on(maps.ids)?;
        for slot in fresh {
            ids.set(slot, owners.get(slot), 0).on(maps.ids)?;
        }
        Ok(())
    }

    /// Empties the slots whose owners left, once no rule points at them.
    fn clear_left_slots<C: Pod + Default>(
        &mut self,
        maps: &SlotMaps,
        old_owners: &SlotOwners,
        owners: &SlotOwners,
    ) -> Result<(), FastpathError> {
        let left = left_slots(old_owners, owners);
        if left.is_empty() {
            return Ok(());
        }
        let mut configs: Array<_, C> = Array::try_from(map_mut(&mut self.ebpf, maps.configs)?).on(maps.configs)?;
        for slot in &left {
            configs.set(*slot, C::default(), 0).on(maps.configs)?;
        }
        let mut ids: Array<_, u64> = Array::try_from(map_mut(&mut self.ebpf, maps.ids)?).on(maps.ids)?;
        for slot in left {
            ids.set(slot, 0, 0).on(maps.ids)?;
        }
        Ok(())
    }

    /// Counters summed over CPUs, and bucket fill, of the slots given, named
    /// and with the buckets as the maps hold them.
    fn snapshots<K: Counts>(
        &self,
        maps: &SlotMaps,
        slots: impl Iterator<Item = (u32, String, BucketParams)>,
    ) -> Result<Vec<Snapshot<K>>, FastpathError> {
        let counters: PerCpuArray<_, K> = PerCpuArray::try_from(map(&self.ebpf, maps.counters)?).on(maps.counters)?;
        let tats: Array<_, u64> = Array::try_from(map(&self.ebpf, maps.buckets)?).on(maps.buckets)?;
        let now = monotonic_ns();
        slots
            .map(|(slot, name, bucket)| {
                let mut total = K::default();
                for cpu in counters.get(&slot, 0).on(maps.counters)?.iter() {
                    total.add(cpu);
                }
                let tat = tats.get(&slot, 0).on(maps.buckets)?;
                Ok(Snapshot {
                    name,
                    counters: total,
                    available_milli: bucket::available_milli(tat, now, &bucket),
                    bucket,
                })
            })
            .collect()
    }
}

impl Fastpath for Datapath {
    /// Writes only what differs from the last plan applied.
    fn apply(&mut self, plan: &Plan) -> Result<(), FastpathError> {
        self.apply_plan(plan)
    }

    fn class_snapshots(&self) -> Result<Vec<ClassSnapshot>, FastpathError> {
        let Some(applied) = &self.applied else { return Ok(Vec::new()) };
        let classes = &applied.plan;
        let slots = applied
            .slot_of
            .iter()
            .map(|&slot| (slot, classes.class_names[slot as usize].clone(), classes.classes[slot as usize].bucket));
        self.snapshots(&CLASS_MAPS, slots)
    }

    fn tenant_snapshots(&self) -> Result<Vec<TenantSnapshot>, FastpathError> {
        let Some(applied) = &self.applied else { return Ok(Vec::new()) };
        let tenants = &applied.plan;
        let slots = applied
            .tenant_slot_of
            .iter()
            .map(|&slot| (slot, tenants.tenant_names[slot as usize].clone(), tenants.tenants[slot as usize]));
        self.snapshots(&TENANT_MAPS, slots)
    }

    /// Summed over CPUs.
    fn pass_counters(&self) -> Result<Vec<(PassReason, u64)>, FastpathError> {
        let name = names::PASS_COUNTERS;
        let counters: PerCpuArray<_, u64> = PerCpuArray::try_from(map(&self.ebpf, name)?).on(name)?;
        PassReason::ALL
            .iter()
            .map(|reason| Ok((*reason, counters.get(&(*reason as u32), 0).on(name)?.iter().sum())))
            .collect()
    }

    fn write_heartbeat(&mut self, now_ns: u64) -> Result<(), FastpathError> {
        let name = names::HEARTBEAT;
        let mut heartbeat: Array<_, u64> = Array::try_from(map_mut(&mut self.ebpf, name)?).on(name)?;
        heartbeat.set(0, now_ns, 0).on(name)
    }

    fn heartbeat(&self) -> Result<u64, FastpathError> {
        let name = names::HEARTBEAT;
        let heartbeat: Array<_, u64> = Array::try_from(map(&self.ebpf, name)?).on(name)?;
        heartbeat.get(&0, 0).on(name)
    }

    fn placed(&self) -> Option<Plan> {
        self.applied.as_ref().map(|applied| applied.plan.clone())
    }

    /// Answered for XDP only: TC cannot be asked once the capabilities to
    /// query it are dropped.
    fn attached_to(&self, iface: &str, attachment: Attachment) -> Option<bool> {
        if attachment.kind() != AttachKind::Xdp {
            return None;
        }
        let ours = self.xdp().info().ok()?.id();
        let ifindex = nix::net::if_::if_nametoindex(iface).ok()?;
        Some(xdp_query::attached_program(ifindex).ok()? == Some(ours))
    }
}

/// The object's bare XDP_PASS program, loaded on its own.
///
/// Two users: `cargo xtask bench` measures the fast path against it, and
/// test beds attach it to the client side of a veth pair, because veth only
/// delivers XDP_TX'd frames (our RSTs) to a peer that runs XDP itself.
pub struct PassProgram {
    ebpf: Ebpf,
}

impl PassProgram {
    pub fn load() -> Result<Self, LoadError> {
        let mut ebpf = Ebpf::load(OBJECT).map_err(|error| LoadError::Object { dir: None, error: Box::new(error) })?;
        let prog: &mut Xdp = program_mut(&mut ebpf, programs::PASS)?;
        prog.load().map_err(load_error(programs::PASS))?;
        Ok(Self { ebpf })
    }

    pub fn program(&self) -> &Xdp {
        self.ebpf.program(programs::PASS).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    /// Attaches in native mode; detached when `self` drops.
    pub fn attach(&mut self, iface: &str) -> Result<(), AttachError> {
        let prog: &mut Xdp =
            self.ebpf.program_mut(programs::PASS).and_then(|p| p.try_into().ok()).expect("loaded in load()");
        prog.attach(iface, XdpMode::Driver)
            .map_err(|error| AttachError::PassProgram { iface: iface.to_string(), error: Box::new(error) })?;
        Ok(())
    }
}

/// The oldest kernel the program loads on: the bucket's 64-bit BPF
/// compare-and-exchange arrived in 5.12 (older verifiers refuse it with
/// "BPF_STX uses reserved fields").
const OLDEST_KERNEL: (u8, u8) = (5, 12);

/// A program of the object, as its type.
fn program_mut<'a, P>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut P, LoadError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    let program = ebpf.program_mut(name).ok_or(LoadError::MissingProgram(name))?;
    program.try_into().map_err(|error| LoadError::Program { program: name, error: Box::new(error) })
}

/// A failed load of `program`, with the kernel floor in front of a verifier
/// refusal on an older kernel.
fn load_error(program: &'static str) -> impl Fn(ProgramError) -> LoadError {
    move |error| {
        let floor = OLDEST_KERNEL;
        match KernelVersion::current() {
            Ok(running) if running < KernelVersion::new(floor.0, floor.1, 0) => {
                LoadError::OldKernel { floor, running, program, error: Box::new(error) }
            }
            _ => LoadError::Program { program, error: Box::new(error) },
        }
    }
}

/// The id of an XDP program already on `iface`, when there is one.
fn other_xdp_program(iface: &str) -> Option<u32> {
    let ifindex = nix::net::if_::if_nametoindex(iface).ok()?;
    xdp_query::attached_program(ifindex).ok().flatten()
}

/// The id of a shedder TC program already on `iface`'s TCX ingress.
fn shedder_on_tcx(iface: &str) -> Option<u32> {
    let (_, programs) = SchedClassifier::query_tcx(iface, TcAttachType::Ingress).ok()?;
    programs.iter().find(|p| p.name_as_str() == Some(programs::TC)).map(|p| p.id())
}

/// Whether aya attached TC through TCX (kernels >= 6.6) rather than clsact.
fn has_tcx() -> bool {
    KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0))
}

/// Brings an array map indexed by a small key from `old` to `new`.
fn sync_array<K: Copy + Into<u32> + Ord>(
    ebpf: &mut Ebpf,
    name: &'static str,
    old: &BTreeMap<K, RuleTarget>,
    new: &BTreeMap<K, RuleTarget>,
) -> Result<(), FastpathError> {
    let mut array: Array<_, RuleTarget> = Array::try_from(map_mut(ebpf, name)?).on(name)?;
    for (key, target) in new {
        if old.get(key) != Some(target) {
            array.set((*key).into(), *target, 0).on(name)?;
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(k)) {
        array.set((*key).into(), 0, 0).on(name)?;
    }
    Ok(())
}

/// Brings an LPM trie from `old` to `new`. Between any two writes, the
/// longest prefix matching an address gives its old class or its new one:
/// entries are written longest prefix first (a shorter new entry never
/// shadows a longer one not yet written), and stale ones removed shortest
/// first, once every new entry is in (a stale entry left never hides a
/// longer stale one already gone).
fn sync_lpm<A: Pod + Ord>(
    ebpf: &mut Ebpf,
    name: &'static str,
    old: &BTreeMap<(u32, A), RuleTarget>,
    new: &BTreeMap<(u32, A), RuleTarget>,
) -> Result<(), FastpathError> {
    let mut trie: LpmTrie<_, A, RuleTarget> = LpmTrie::try_from(map_mut(ebpf, name)?).on(name)?;
    let stale: Vec<_> = old.keys().filter(|k| !new.contains_key(k)).collect();
    let full = old.len() + new.keys().filter(|k| !old.contains_key(k)).count() > MAX_CIDR_RULES as usize;
    if full {
        // Both sets together do not fit; stale entries must go first (inserting
        // first fails with ENOSPC), and for a moment an address they matched
        // may fall through to a lower-precedence rule.
        remove_lpm(&mut trie, &stale).on(name)?;
    }
    // BTreeMap order is shortest prefix first: reversed, longest first.
    for ((len, addr), target) in new.iter().rev() {
        if old.get(&(*len, *addr)) != Some(target) {
            trie.insert(&Key::new(*len, *addr), *target, 0).on(name)?;
        }
    }
    if !full {
        remove_lpm(&mut trie, &stale).on(name)?;
    }
    Ok(())
}

/// Removes `keys`, in the order given.
fn remove_lpm<A: Pod>(trie: &mut LpmTrie<&mut MapData, A, RuleTarget>, keys: &[&(u32, A)]) -> Result<(), MapError> {
    for (len, addr) in keys {
        trie.remove(&Key::new(*len, *addr))?;
    }
    Ok(())
}
