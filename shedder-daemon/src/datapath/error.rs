//! Why the fast path could not be loaded or attached. Each message is whole,
//! causes included.

use std::path::PathBuf;

use aya::{
    EbpfError,
    programs::{ProgramError, links::LinkError, tc::TcError},
    sys::SyscallError,
    util::KernelVersion,
};

use crate::{error_chain::ErrorChain, fastpath::Attachment, pin::PinError};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("loading the shedder eBPF object{}: {}", in_dir(.dir), ErrorChain(error))]
    Object { dir: Option<PathBuf>, error: Box<EbpfError> },
    #[error("no {0} program in the eBPF object")]
    MissingProgram(&'static str),
    #[error("loading the {program} program (verifier): {}", ErrorChain(error))]
    Program { program: &'static str, error: Box<ProgramError> },
    /// The verifier refused the program on a kernel older than the floor.
    #[error(
        "loading the {program} program (verifier): shedder needs Linux {}.{} or newer (BPF atomic \
         compare-and-exchange); this kernel is {running}: {}",
        floor.0, floor.1, ErrorChain(error)
    )]
    OldKernel { floor: (u8, u8), running: KernelVersion, program: &'static str, error: Box<ProgramError> },
    #[error(transparent)]
    Pin(#[from] PinError),
    /// A pinned link of another kind than the one asked for.
    #[error(
        "{} holds a {pinned} link but --attach {asked} was asked; run `shedder detach --iface {iface}` first",
        path.display()
    )]
    OtherLinkKind { path: PathBuf, pinned: Attachment, asked: &'static str, iface: String },
    #[error("setting up the eBPF log ring: {}", ErrorChain(.0))]
    Logger(Box<aya_log::Error>),
}

fn in_dir(dir: &Option<PathBuf>) -> String {
    dir.as_ref().map_or_else(String::new, |dir| format!(" with maps in {}", dir.display()))
}

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(
        "another XDP program is attached to {iface} (id {id}); detach it first (`ip link set dev {iface} xdp off`, \
         or `shedder detach` if it is a pinned shedder), or use --attach tc"
    )]
    OtherXdpProgram { iface: String, id: u32 },
    #[error("attaching XDP to {iface}: native mode failed ({native}), generic mode too: {}", ErrorChain(generic))]
    Xdp { iface: String, native: Box<ProgramError>, generic: Box<ProgramError> },
    #[error(
        "another shedder program is attached to {iface}'s TC ingress (id {id}); stop its daemon (or `shedder \
         detach --iface {iface}` if it is pinned) first"
    )]
    OtherShedderTc { iface: String, id: u32 },
    #[error("attaching TC to {iface}: {first}; adding clsact: {clsact}")]
    Clsact { iface: String, first: Box<ProgramError>, clsact: Box<TcError> },
    #[error("attaching TC to {iface} (after {first}): {}", ErrorChain(error))]
    Tc { iface: String, first: Box<ProgramError>, error: Box<ProgramError> },
    #[error("{}", ErrorChain(.0))]
    Program(Box<ProgramError>),
    #[error("{}", ErrorChain(.0))]
    Link(Box<LinkError>),
    #[error("attaching XDP_PASS to {iface}: {}", ErrorChain(error))]
    PassProgram { iface: String, error: Box<ProgramError> },
    #[error("pinning the link at {}: {}", path.display(), ErrorChain(error))]
    PinLink { path: PathBuf, error: aya::pin::PinError },
    #[error("taking over the link pinned at {}: {}", path.display(), ErrorChain(error))]
    OpenPinnedLink { path: PathBuf, error: Box<LinkError> },
    #[error("taking over the link pinned at {}: {}", path.display(), ErrorChain(error))]
    TakeOver { path: PathBuf, error: Box<ProgramError> },
    #[error("taking over the link pinned at {}: a clsact attachment has no link to take over", .0.display())]
    NoLinkToTakeOver(PathBuf),
    #[error("unpinning {}: {error}", path.display())]
    Unpin { path: PathBuf, error: std::io::Error },
}

impl From<ProgramError> for AttachError {
    fn from(error: ProgramError) -> Self {
        Self::Program(Box::new(error))
    }
}

impl From<LinkError> for AttachError {
    fn from(error: LinkError) -> Self {
        Self::Link(Box::new(error))
    }
}

impl AttachError {
    /// Whether taking a pinned link over failed because the link's
    /// interface no longer exists.
    pub fn is_defunct_link(&self) -> bool {
        let Self::TakeOver { error, .. } = self else { return false };
        matches!(&**error, ProgramError::SyscallError(SyscallError { io_error, .. })
            if io_error.raw_os_error() == Some(libc::ENOLINK))
    }
}
