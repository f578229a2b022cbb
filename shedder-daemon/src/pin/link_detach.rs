//! `BPF_LINK_DETACH`, which aya 0.14 does not wrap. Unpinning a link only
//! drops one reference, and the kernel releases the last one later, from a
//! work queue; this takes the link off its hook before the call returns,
//! however many holders it has left (Linux 5.9 for XDP links, and every
//! kernel with TCX).

use std::{
    ffi::CString,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
};

use super::PinError;

use aya_obj::generated::{bpf_attr, bpf_cmd};

fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a whole bpf_attr, initialised and alive for the call,
    // and the kernel is told its size.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd as libc::c_long, attr as *mut bpf_attr, size_of::<bpf_attr>()) };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(rc) }
}

/// Detaches the link pinned at `path` from its hook, leaving the pin itself.
pub fn detach_pinned_link(path: &Path) -> Result<(), PinError> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| PinError::NulInPath(path.to_path_buf()))?;
    // SAFETY: all zeroes is a valid bpf_attr (plain integers).
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.__bindgen_anon_4.pathname = c_path.as_ptr() as u64;
    let fd =
        bpf(bpf_cmd::BPF_OBJ_GET, &mut attr).map_err(|error| PinError::OpenLink { path: path.to_path_buf(), error })?;
    // SAFETY: BPF_OBJ_GET returned a new file descriptor that nothing else owns.
    let link = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.link_detach.link_fd = link.as_raw_fd() as u32;
    bpf(bpf_cmd::BPF_LINK_DETACH, &mut attr)
        .map_err(|error| PinError::DetachLink { path: path.to_path_buf(), error })?;
    Ok(())
}
