//! The eBPF fast path from user space: load it, attach it, program its maps
//! from a [`Plan`], and read its counters back.

use std::{collections::BTreeMap, fmt};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf, Pod,
    maps::{Array, LpmTrie, Map, PerCpuArray, PerCpuValues, lpm_trie::Key},
    programs::{SchedClassifier, TcAttachType, Xdp, XdpMode, tc},
    util::KernelVersion,
};
use shedder_common::{
    bucket::{self, BucketParams},
    classify::RuleTarget,
    maps::{ClassConfig, ClassCounters, GlobalConfig, MAX_CLASSES, PassReason, names, programs},
};

use crate::{clock::monotonic_ns, config::Plan};

/// The object built from `shedder-ebpf` by this crate's build script.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/shedder"));

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

/// A class's counters and bucket, as read back from the maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassSnapshot {
    pub name: String,
    pub counters: ClassCounters,
    /// Milli-tokens left in the bucket right now.
    pub available_milli: u64,
    pub bucket: BucketParams,
}

/// The loaded programs and their maps. Dropping it detaches everything.
pub struct Datapath {
    ebpf: Ebpf,
    /// What the maps hold now; `None` until the first [`Datapath::apply`].
    applied: Option<Plan>,
}

fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &str) -> anyhow::Result<&'a mut Map> {
    ebpf.map_mut(name).ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
}

fn map<'a>(ebpf: &'a Ebpf, name: &str) -> anyhow::Result<&'a Map> {
    ebpf.map(name).ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
}

impl Datapath {
    /// Loads both programs into the kernel (the verifier checks them now).
    pub fn load() -> anyhow::Result<Self> {
        let mut ebpf = Ebpf::load(OBJECT).context("loading the shedder eBPF object")?;
        let xdp: &mut Xdp = ebpf.program_mut(programs::XDP).context("no XDP program")?.try_into()?;
        xdp.load().map_err(explain_old_kernel).context("loading the XDP program (verifier)")?;
        let tc: &mut SchedClassifier = ebpf.program_mut(programs::TC).context("no TC program")?.try_into()?;
        tc.load().map_err(explain_old_kernel).context("loading the TC program (verifier)")?;
        Ok(Self { ebpf, applied: None })
    }

    /// Starts forwarding the fast path's rare diagnostics to the `log` crate.
    pub fn take_logger(&mut self) -> anyhow::Result<aya_log::EbpfLogger<&'static dyn log::Log>> {
        aya_log::EbpfLogger::init(&mut self.ebpf).context("setting up the eBPF log ring")
    }

    pub fn xdp(&self) -> &Xdp {
        self.ebpf.program(programs::XDP).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    pub fn tc(&self) -> &SchedClassifier {
        self.ebpf.program(programs::TC).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    /// Attaches to `iface`; XDP tries native mode first and falls back to generic.
    pub fn attach(&mut self, iface: &str, kind: AttachKind) -> anyhow::Result<Attachment> {
        match kind {
            AttachKind::Xdp => {
                let xdp: &mut Xdp = self.ebpf.program_mut(programs::XDP).context("no XDP program")?.try_into()?;
                match xdp.attach(iface, XdpMode::Driver) {
                    Ok(_) => Ok(Attachment::XdpNative),
                    Err(native) => {
                        xdp.attach(iface, XdpMode::Skb).with_context(|| {
                            format!("attaching XDP to {iface}: native mode failed ({native}), generic mode too")
                        })?;
                        Ok(Attachment::XdpGeneric)
                    }
                }
            }
            AttachKind::Tc => {
                let prog: &mut SchedClassifier =
                    self.ebpf.program_mut(programs::TC).context("no TC program")?.try_into()?;
                // aya picks TCX on kernels >= 6.6; older ones need a clsact qdisc.
                match prog.attach(iface, TcAttachType::Ingress) {
                    Ok(_) if has_tcx() => Ok(Attachment::Tcx),
                    Ok(_) => Ok(Attachment::TcClsact),
                    Err(first) => {
                        if let Err(e) = tc::qdisc_add_clsact(iface)
                            && !matches!(&e, tc::TcError::AlreadyAttached)
                        {
                            return Err(anyhow!("attaching TC to {iface}: {first}; adding clsact: {e}"));
                        }
                        prog.attach_with_options(
                            iface,
                            TcAttachType::Ingress,
                            tc::TcAttachOptions::Netlink(Default::default()),
                        )
                        .with_context(|| format!("attaching TC to {iface} (after {first})"))?;
                        Ok(Attachment::TcClsact)
                    }
                }
            }
        }
    }

    /// Makes the maps hold `plan`, writing only what differs from the last
    /// plan applied. Bucket state survives: a class whose budget changes keeps
    /// the tokens it has spent, rescaled to the new rate.
    pub fn apply(&mut self, plan: &Plan) -> anyhow::Result<()> {
        let previous = self.applied.take();
        let result = self.write_plan(previous.as_ref(), plan);
        self.applied = if result.is_ok() { Some(plan.clone()) } else { previous };
        result
    }

    fn write_plan(&mut self, previous: Option<&Plan>, plan: &Plan) -> anyhow::Result<()> {
        let first = previous.is_none();
        let empty = Plan::default();
        let previous = previous.unwrap_or(&empty);
        self.write_classes(previous, plan)?;
        let ebpf = &mut self.ebpf;
        sync_lpm(map_mut(ebpf, names::SRC_V4)?, &previous.src_v4, &plan.src_v4)?;
        sync_lpm(map_mut(ebpf, names::SRC_V6)?, &previous.src_v6, &plan.src_v6)?;
        sync_array(map_mut(ebpf, names::DST_PORTS)?, &previous.dst_ports, &plan.dst_ports)?;
        sync_array(map_mut(ebpf, names::DSCP_IN)?, &previous.dscp, &plan.dscp)?;
        // Last, so the rule-presence flags never point at rules not yet written.
        if first || previous.global != plan.global {
            let mut global: Array<_, GlobalConfig> = Array::try_from(map_mut(ebpf, names::GLOBAL)?)?;
            global.set(0, plan.global, 0)?;
        }
        Ok(())
    }

    fn write_classes(&mut self, previous: &Plan, plan: &Plan) -> anyhow::Result<()> {
        // A slot's state belongs to the class that had it: if a reload put a
        // different class there, that class starts afresh (full bucket, zero
        // counters) instead of inheriting another's.
        let changed: Vec<(u32, ClassConfig, Option<&ClassConfig>)> = (0..MAX_CLASSES)
            .filter_map(|slot| {
                let i = slot as usize;
                let new = plan.classes.get(i).copied().unwrap_or_default();
                let same_class =
                    previous.class_names.get(i).is_some() && previous.class_names.get(i) == plan.class_names.get(i);
                let old = previous.classes.get(i).filter(|_| same_class);
                (old != Some(&new)).then_some((slot, new, old))
            })
            .collect();
        // New bucket states first: a class new to its slot starts full (TAT 0);
        // one whose budget changed keeps what it spent, rescaled.
        let now = monotonic_ns();
        let mut tats = Vec::new();
        {
            let buckets: Array<_, u64> = Array::try_from(map(&self.ebpf, names::BUCKETS)?)?;
            for (slot, new, old) in &changed {
                match old {
                    None => tats.push((*slot, 0)),
                    Some(old) if old.bucket != new.bucket => {
                        tats.push((*slot, bucket::rescale(buckets.get(slot, 0)?, now, &old.bucket, &new.bucket)))
                    }
                    Some(_) => {}
                }
            }
        }
        let fresh: Vec<u32> = changed.iter().filter(|(_, _, old)| old.is_none()).map(|(slot, ..)| *slot).collect();
        if !fresh.is_empty() {
            let mut counters: PerCpuArray<_, ClassCounters> =
                PerCpuArray::try_from(map_mut(&mut self.ebpf, names::CLASS_COUNTERS)?)?;
            let cpus = aya::util::nr_cpus().map_err(|(what, e)| anyhow!("{what}: {e}"))?;
            for slot in fresh {
                counters.set(slot, PerCpuValues::try_from(vec![ClassCounters::default(); cpus])?, 0)?;
            }
        }
        let mut buckets: Array<_, u64> = Array::try_from(map_mut(&mut self.ebpf, names::BUCKETS)?)?;
        for (slot, tat) in tats {
            buckets.set(slot, tat, 0)?;
        }
        let mut classes: Array<_, ClassConfig> = Array::try_from(map_mut(&mut self.ebpf, names::CLASSES)?)?;
        for (slot, new, _) in changed {
            classes.set(slot, new, 0)?;
        }
        Ok(())
    }

    /// Counters summed over CPUs, and bucket fill, for every configured class.
    pub fn class_snapshots(&self) -> anyhow::Result<Vec<ClassSnapshot>> {
        let Some(plan) = &self.applied else { return Ok(Vec::new()) };
        let counters: PerCpuArray<_, ClassCounters> = PerCpuArray::try_from(map(&self.ebpf, names::CLASS_COUNTERS)?)?;
        let buckets: Array<_, u64> = Array::try_from(map(&self.ebpf, names::BUCKETS)?)?;
        let now = monotonic_ns();
        plan.class_names
            .iter()
            .zip(&plan.classes)
            .enumerate()
            .map(|(slot, (name, config))| {
                let slot = slot as u32;
                let mut total = ClassCounters::default();
                for cpu in counters.get(&slot, 0)?.iter() {
                    total.add(cpu);
                }
                let tat = buckets.get(&slot, 0)?;
                Ok(ClassSnapshot {
                    name: name.clone(),
                    counters: total,
                    available_milli: bucket::available_milli(tat, now, &config.bucket),
                    bucket: config.bucket,
                })
            })
            .collect()
    }

    /// Packets passed uncharged, by reason, summed over CPUs.
    pub fn pass_counters(&self) -> anyhow::Result<Vec<(PassReason, u64)>> {
        let counters: PerCpuArray<_, u64> = PerCpuArray::try_from(map(&self.ebpf, names::PASS_COUNTERS)?)?;
        PassReason::ALL.iter().map(|reason| Ok((*reason, counters.get(&(*reason as u32), 0)?.iter().sum()))).collect()
    }

    /// Records that the control plane is alive at `now_ns` (CLOCK_MONOTONIC).
    pub fn write_heartbeat(&mut self, now_ns: u64) -> anyhow::Result<()> {
        let mut heartbeat: Array<_, u64> = Array::try_from(map_mut(&mut self.ebpf, names::HEARTBEAT)?)?;
        heartbeat.set(0, now_ns, 0)?;
        Ok(())
    }

    /// The last heartbeat written, CLOCK_MONOTONIC ns (0 before the first).
    pub fn heartbeat(&self) -> anyhow::Result<u64> {
        let heartbeat: Array<_, u64> = Array::try_from(map(&self.ebpf, names::HEARTBEAT)?)?;
        Ok(heartbeat.get(&0, 0)?)
    }

    /// The plan the maps hold, if any was applied.
    pub fn applied(&self) -> Option<&Plan> {
        self.applied.as_ref()
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
    pub fn load() -> anyhow::Result<Self> {
        let mut ebpf = Ebpf::load(OBJECT).context("loading the shedder eBPF object")?;
        let prog: &mut Xdp = ebpf.program_mut(programs::PASS).context("no pass program")?.try_into()?;
        prog.load()?;
        Ok(Self { ebpf })
    }

    pub fn program(&self) -> &Xdp {
        self.ebpf.program(programs::PASS).and_then(|p| p.try_into().ok()).expect("loaded in load()")
    }

    /// Attaches in native mode; detached when `self` drops.
    pub fn attach(&mut self, iface: &str) -> anyhow::Result<()> {
        let prog: &mut Xdp = self.ebpf.program_mut(programs::PASS).context("no pass program")?.try_into()?;
        prog.attach(iface, XdpMode::Driver).with_context(|| format!("attaching XDP_PASS to {iface}"))?;
        Ok(())
    }
}

/// The oldest kernel the program loads on: the bucket's 64-bit BPF
/// compare-and-exchange arrived in 5.12 (older verifiers refuse it with
/// "BPF_STX uses reserved fields").
const OLDEST_KERNEL: (u8, u8) = (5, 12);

/// Puts the kernel floor in front of a verifier refusal on an older kernel.
fn explain_old_kernel(error: aya::programs::ProgramError) -> anyhow::Error {
    let (major, minor) = OLDEST_KERNEL;
    match KernelVersion::current() {
        Ok(running) if running < KernelVersion::new(major, minor, 0) => anyhow::Error::new(error).context(format!(
            "shedder needs Linux {major}.{minor} or newer (BPF atomic compare-and-exchange); this kernel is {running}"
        )),
        _ => error.into(),
    }
}

/// Whether aya attached TC through TCX (kernels >= 6.6) rather than clsact.
fn has_tcx() -> bool {
    KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0))
}

/// Brings an array map indexed by a small key from `old` to `new`.
fn sync_array<K: Copy + Into<u32> + Ord>(
    map: &mut Map,
    old: &BTreeMap<K, RuleTarget>,
    new: &BTreeMap<K, RuleTarget>,
) -> anyhow::Result<()> {
    let mut array: Array<_, RuleTarget> = Array::try_from(map)?;
    for (key, target) in new {
        if old.get(key) != Some(target) {
            array.set((*key).into(), *target, 0)?;
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(k)) {
        array.set((*key).into(), 0, 0)?;
    }
    Ok(())
}

/// Brings an LPM trie from `old` to `new`.
fn sync_lpm<A: Pod + Ord>(
    map: &mut Map,
    old: &BTreeMap<(u32, A), RuleTarget>,
    new: &BTreeMap<(u32, A), RuleTarget>,
) -> anyhow::Result<()> {
    let mut trie: LpmTrie<_, A, RuleTarget> = LpmTrie::try_from(map)?;
    for ((len, addr), target) in new {
        if old.get(&(*len, *addr)) != Some(target) {
            trie.insert(&Key::new(*len, *addr), *target, 0)?;
        }
    }
    for (len, addr) in old.keys().filter(|k| !new.contains_key(k)) {
        trie.remove(&Key::new(*len, *addr))?;
    }
    Ok(())
}
