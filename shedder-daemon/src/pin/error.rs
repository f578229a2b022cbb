//! Why a pin directory could not be used, made or removed.

use std::path::PathBuf;

use super::BPFFS_MOUNT;
use crate::{error_chain::ErrorChain, lock::LockError};

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("--iface: {0:?} is not an interface name")]
    NotAnInterface(String),
    #[error(
        "{} is not on a BPF filesystem: mount one (mount -t bpf bpf DIR), choose another --pin-root, or run with \
         --no-pin",
        .0.display()
    )]
    NotOnBpffs(PathBuf),
    #[error("{} has no root", .0.display())]
    NoRoot(PathBuf),
    #[error("mounting the BPF filesystem at {BPFFS_MOUNT}: {0}")]
    Mount(nix::Error),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("creating {}: {error}", path.display())]
    Create { path: PathBuf, error: std::io::Error },
    #[error("parsing the eBPF object: {}", ErrorChain(.0))]
    Object(aya_obj::ParseError),
    #[error("map {0} missing from the eBPF object")]
    MissingMap(&'static str),
    #[error("opening pinned map {}: {}", path.display(), ErrorChain(error))]
    OpenMap { path: PathBuf, error: aya::maps::MapError },
    /// Maps laid out for another version.
    #[error(
        "pinned map {} was made by another shedder version ({differences}); this one cannot take it over. Run \
         `shedder detach --iface {iface}` first (this detaches the program and drops its counters and buckets)",
        path.display()
    )]
    OtherVersion { path: PathBuf, differences: String, iface: String },
    #[error("a pin path with a NUL byte: {}", .0.display())]
    NulInPath(PathBuf),
    #[error("opening {}: {error}", path.display())]
    OpenLink { path: PathBuf, error: std::io::Error },
    #[error("detaching the link {}: {error}", path.display())]
    DetachLink { path: PathBuf, error: std::io::Error },
    #[error("unpinning {}: {error}", path.display())]
    Unpin { path: PathBuf, error: std::io::Error },
    #[error("removing {}: {error}", path.display())]
    Remove { path: PathBuf, error: std::io::Error },
}
