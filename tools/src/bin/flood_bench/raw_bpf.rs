//! The bench's two helper XDP programs are a dozen instructions each, too
//! small to earn a second eBPF crate: they are written here as instructions,
//! loaded with the bpf(2) syscall, and (the bare drop) attached through a
//! BPF link.
//!
//! [`BareDrop`] is the floor under any XDP filter on veth: XDP_DROP and
//! nothing else, so the bench can tell veth's own cost per frame from the
//! program's.

use std::{
    ffi::CString,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use anyhow::{Context as _, ensure};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
/// XDP_FLAGS_DRV_MODE: native (driver) mode, as shedder attaches on veth.
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

pub const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | dst, off, imm }
}

// Opcodes (linux/bpf.h): class | size/op | mode/source.
pub const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
pub const LDX_H: u8 = 0x69; // BPF_LDX | BPF_MEM | BPF_H
pub const STX_H: u8 = 0x6b; // BPF_STX | BPF_MEM | BPF_H
pub const MOV64_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
pub const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
pub const ADD64_K: u8 = 0x07; // BPF_ALU64 | BPF_ADD | BPF_K
pub const JGT_X: u8 = 0x2d; // BPF_JMP | BPF_JGT | BPF_X
const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
pub const XDP_DROP: i32 = 1;
pub const XDP_TX: i32 = 3;

/// `union bpf_attr` for BPF_PROG_LOAD, up to the fields used.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

/// `union bpf_attr` for BPF_LINK_CREATE, up to the fields used.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

pub fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<libc::c_long> {
    // SAFETY: attr is a live, fully initialised bpf_attr prefix of the
    // stated size; the kernel reads it and may write its output fields.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, size_of::<T>() as libc::c_uint) };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(rc) }
}

/// The fd the kernel just returned, owned.
fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: a new fd from bpf(2) that nobody else owns.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// `iface`'s index in the calling thread's namespace.
pub fn ifindex(iface: &str) -> anyhow::Result<u32> {
    let name = CString::new(iface).context("interface name")?;
    // SAFETY: a NUL-terminated name; if_nametoindex only reads it.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    ensure!(index != 0, "no interface {iface} in this namespace");
    Ok(index)
}

/// Loads `body` (an `exit` is appended) as an XDP program; the verifier's
/// log comes with a refusal.
pub fn load_xdp(body: &[Insn], name: &str) -> anyhow::Result<OwnedFd> {
    let mut insns = body.to_vec();
    insns.push(insn(EXIT, 0, 0, 0, 0));
    let mut log = vec![0u8; 4096];
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: c"GPL".as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        ..Default::default()
    };
    let name = &name.as_bytes()[..name.len().min(15)];
    attr.prog_name[..name.len()].copy_from_slice(name);
    let fd = bpf(BPF_PROG_LOAD, &mut attr)
        .with_context(|| format!("verifier: {}", String::from_utf8_lossy(&log).trim_end_matches('\0')))?;
    Ok(owned(fd))
}

/// A bare XDP_DROP on one interface; detached when dropped (closing the
/// link's last fd detaches it).
pub struct BareDrop {
    _link: OwnedFd,
    _program: OwnedFd,
}

impl BareDrop {
    /// Attaches natively to `iface`, in the calling thread's namespace.
    pub fn attach(iface: &str) -> anyhow::Result<Self> {
        let program = load_xdp(&[insn(MOV64_K, 0, 0, 0, XDP_DROP)], "bare_drop")?;
        let mut attr = LinkCreateAttr {
            prog_fd: program.as_raw_fd() as u32,
            target_ifindex: ifindex(iface)?,
            attach_type: BPF_XDP,
            flags: XDP_FLAGS_DRV_MODE,
        };
        let link = bpf(BPF_LINK_CREATE, &mut attr).with_context(|| format!("attaching a bare XDP_DROP to {iface}"))?;
        Ok(Self { _link: owned(link), _program: program })
    }
}
