//! Where the fast path outlives the daemon: its maps and its link, pinned in
//! the BPF filesystem under `<root>/<iface>/`.
//!
//! While the link is pinned the program stays attached after the daemon
//! exits (the fail-open watchdog passes everything once heartbeats stop), and
//! a restarted daemon takes the maps over, buckets and counters included.
//! `shedder detach` removes the directory, and with it the program.

mod error;
mod link_detach;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use aya::maps::MapInfo;
use nix::sys::statfs::{BPF_FS_MAGIC, statfs};
use shedder_common::maps::names;
use tracing::{info, warn};

pub use self::error::PinError;
use crate::{fastpath::Attachment, lock::ExclusiveLock};

pub const DEFAULT_ROOT: &str = "/sys/fs/bpf/shedder";

/// Where the BPF filesystem is mounted by convention (systemd does it at boot).
const BPFFS_MOUNT: &str = "/sys/fs/bpf";

/// The maps a restart takes over: every one of ours (aya-log's ring is not state).
pub const PINNED_MAPS: [&str; 18] = [
    names::GLOBAL,
    names::CLASSES,
    names::BUCKETS,
    names::CLASS_COUNTERS,
    names::PASS_COUNTERS,
    names::SRC_V4,
    names::SRC_V6,
    names::DST_PORTS,
    names::DSCP_IN,
    names::HEARTBEAT,
    names::CLASS_IDS,
    names::TENANTS,
    names::TENANT_BUCKETS,
    names::TENANT_COUNTERS,
    names::TENANT_V4,
    names::TENANT_V6,
    names::TENANT_IDS,
    names::DROPPED_SYNS,
];

/// The link's file name says how it was attached: the kernel's link info does
/// not tell native from generic XDP. TC through clsact has no link to pin.
fn link_file(attachment: Attachment) -> Option<&'static str> {
    match attachment {
        Attachment::XdpNative => Some("link-xdp-native"),
        Attachment::XdpGeneric => Some("link-xdp-generic"),
        Attachment::Tcx => Some("link-tcx"),
        Attachment::TcClsact => None,
    }
}

const PINNABLE: [Attachment; 3] = [Attachment::XdpNative, Attachment::XdpGeneric, Attachment::Tcx];

/// The pin directory of one interface.
#[derive(Clone, Debug)]
pub struct PinDir {
    dir: PathBuf,
}

impl PinDir {
    /// `<root>/<iface>`.
    pub fn new(root: &Path, iface: &str) -> Result<Self, PinError> {
        if iface.is_empty() || iface == "." || iface == ".." || iface.contains('/') {
            return Err(PinError::NotAnInterface(iface.to_string()));
        }
        Ok(Self { dir: root.join(iface) })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The interface this directory is for.
    pub fn iface(&self) -> String {
        self.dir.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
    }

    pub fn map_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Where a link attached as `attachment` is pinned; `None` when it has no link.
    pub fn link_path(&self, attachment: Attachment) -> Option<PathBuf> {
        link_file(attachment).map(|file| self.dir.join(file))
    }

    /// The pinned link, and how it was attached.
    pub fn pinned_link(&self) -> Option<(Attachment, PathBuf)> {
        PINNABLE.into_iter().find_map(|a| self.link_path(a).filter(|p| p.exists()).map(|p| (a, p)))
    }

    /// Whether a previous run left maps here.
    pub fn holds_maps(&self) -> bool {
        PINNED_MAPS.iter().any(|name| self.map_path(name).exists())
    }

    /// Makes sure the directory would be on a BPF filesystem that outlives
    /// this process. When the root lies under `/sys/fs/bpf` and nothing is
    /// mounted there, mounts it, as systemd would, except in a mount namespace
    /// of the daemon's own (`ip netns exec`, containers), where the mount and
    /// every pin in it would end with the daemon: `Ok(false)` then says to run
    /// unpinned.
    pub fn can_outlive_the_daemon(&self) -> Result<bool, PinError> {
        if on_bpffs(&self.dir)? {
            return Ok(true);
        }
        if !self.dir.starts_with(BPFFS_MOUNT) || is_bpffs(Path::new(BPFFS_MOUNT)) {
            return Err(PinError::NotOnBpffs(self.dir.clone()));
        }
        let namespace = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
        if namespace("self") != namespace("1") {
            warn!(
                "no BPF filesystem at {BPFFS_MOUNT} and this daemon has a mount namespace of its own, where pins \
                 would end with it: running unpinned. To keep state across restarts, mount a BPF filesystem the \
                 host sees and pass --pin-root"
            );
            return Ok(false);
        }
        mount_bpffs()?;
        Ok(true)
    }

    /// Takes the directory for this process alone: two daemons driving the
    /// same maps and link would undo each other's changes. Refused, naming
    /// the holder, while another process holds it.
    pub fn lock(&self) -> Result<ExclusiveLock, PinError> {
        Ok(ExclusiveLock::acquire(
            &self.dir,
            &format!("the pinned fast path of {}", self.iface()),
            "one daemon per interface; stop that one first (a restart keeps the program attached)",
        )?)
    }

    /// Makes the directory; returns whether it is new.
    pub fn prepare(&self) -> Result<bool, PinError> {
        let new = !self.dir.exists();
        std::fs::create_dir_all(&self.dir).map_err(|error| PinError::Create { path: self.dir.clone(), error })?;
        Ok(new)
    }

    /// Refuses pinned maps that differ from the ones `object` defines: a
    /// program must never run against maps laid out for another version.
    pub fn check_layout(&self, object: &[u8]) -> Result<(), PinError> {
        let object = aya_obj::Object::parse(object).map_err(PinError::Object)?;
        for name in PINNED_MAPS {
            let path = self.map_path(name);
            if !path.exists() {
                continue;
            }
            let wanted = object.maps.get(name).ok_or(PinError::MissingMap(name))?;
            let open_error = |error| PinError::OpenMap { path: path.clone(), error };
            let pinned = MapInfo::from_pin(&path).map_err(open_error)?;
            let differences = layout_differences(
                Layout::of_pinned(&pinned).map_err(open_error)?,
                Layout {
                    map_type: wanted.map_type(),
                    key_size: wanted.key_size(),
                    value_size: wanted.value_size(),
                    max_entries: wanted.max_entries(),
                    flags: wanted.map_flags(),
                },
            );
            if !differences.is_empty() {
                return Err(PinError::OtherVersion { path, differences, iface: self.iface() });
            }
        }
        Ok(())
    }

    /// Detaches the program (done when this returns) and unpins the link,
    /// then the maps, then the directory. `Ok(false)` when nothing was pinned here.
    pub fn remove(&self) -> Result<bool, PinError> {
        if !self.dir.exists() {
            return Ok(false);
        }
        // The link first, so the program never runs against half-removed maps.
        if let Some((_, path)) = self.pinned_link() {
            if let Err(e) = link_detach::detach_pinned_link(&path) {
                // Unpinning still detaches it, once the kernel releases the link.
                warn!("{e}; unpinning it instead");
            }
            std::fs::remove_file(&path).map_err(|error| PinError::Unpin { path: path.clone(), error })?;
        }
        std::fs::remove_dir_all(&self.dir).map_err(|error| PinError::Remove { path: self.dir.clone(), error })?;
        Ok(true)
    }
}

/// What must match for a pinned map to be taken over.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Layout {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    flags: u32,
}

impl Layout {
    fn of_pinned(info: &MapInfo) -> Result<Self, aya::maps::MapError> {
        Ok(Self {
            map_type: info.map_type()? as u32,
            key_size: info.key_size(),
            value_size: info.value_size(),
            max_entries: info.max_entries(),
            flags: info.map_flags(),
        })
    }
}

/// "value size 16, this version wants 24", one clause per field that differs.
fn layout_differences(pinned: Layout, wanted: Layout) -> String {
    let fields = [
        ("map type", pinned.map_type, wanted.map_type),
        ("key size", pinned.key_size, wanted.key_size),
        ("value size", pinned.value_size, wanted.value_size),
        ("max entries", pinned.max_entries, wanted.max_entries),
        ("flags", pinned.flags, wanted.flags),
    ];
    let mut text = String::new();
    for (field, pinned, wanted) in fields.into_iter().filter(|(_, p, w)| p != w) {
        if !text.is_empty() {
            text.push_str(", ");
        }
        let _ = write!(text, "{field} {pinned}, this version wants {wanted}");
    }
    text
}

fn is_bpffs(path: &Path) -> bool {
    statfs(path).is_ok_and(|fs| fs.filesystem_type() == BPF_FS_MAGIC)
}

/// Whether `path`, or the closest ancestor that exists, is on a BPF filesystem.
fn on_bpffs(path: &Path) -> Result<bool, PinError> {
    let existing = path.ancestors().find(|p| p.exists()).ok_or_else(|| PinError::NoRoot(path.to_path_buf()))?;
    Ok(is_bpffs(existing))
}

fn mount_bpffs() -> Result<(), PinError> {
    use nix::mount::{MsFlags, mount};
    mount(
        Some("bpf"),
        BPFFS_MOUNT,
        Some("bpf"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(PinError::Mount)?;
    info!(at = BPFFS_MOUNT, "mounted the BPF filesystem");
    Ok(())
}
