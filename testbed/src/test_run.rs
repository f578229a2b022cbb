//! The fast path's two hooks through `BPF_PROG_TEST_RUN`, one frame at a time.

use aya::programs::{TestRun, TestRunOptions};
use shedder_common::reference::Verdict;
use shedder_daemon::datapath::Datapath;

/// Which of the program's entry points runs the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Xdp,
    Tc,
}

pub const HOOKS: [Hook; 2] = [Hook::Xdp, Hook::Tc];

/// The XDP program's return codes, from the shared reference's mapping.
pub const XDP_DROP: u32 = Verdict::Drop.xdp_action();
pub const XDP_PASS: u32 = Verdict::Pass.xdp_action();
pub const XDP_TX: u32 = Verdict::Reply.xdp_action();

impl Hook {
    /// The return code this hook gives for `verdict`.
    pub fn code(self, verdict: Verdict) -> u32 {
        match self {
            Hook::Xdp => verdict.xdp_action(),
            Hook::Tc => verdict.tc_action(),
        }
    }
}

thread_local! {
    static ON_ONE_CPU: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Keeps the calling thread on the CPU it runs on now. The program runs on
/// the caller's CPU, and it remembers the SYNs it dropped per CPU, so a test
/// that sends a dropped SYN again must send it through the same one.
fn stay_on_this_cpu() -> anyhow::Result<()> {
    if ON_ONE_CPU.get() {
        return Ok(());
    }
    // SAFETY: no arguments; returns the CPU number or -1.
    let cpu = unsafe { libc::sched_getcpu() };
    anyhow::ensure!(cpu >= 0, "sched_getcpu: {}", std::io::Error::last_os_error());
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu as usize)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)?;
    ON_ONE_CPU.set(true);
    Ok(())
}

/// Runs `frame` once through `hook`, on one CPU for all of a thread's
/// calls: its return code and the frame it left.
pub fn run(datapath: &Datapath, hook: Hook, frame: &[u8]) -> anyhow::Result<(u32, Vec<u8>)> {
    stay_on_this_cpu()?;
    // Generous, and trimmed to what the kernel reports it wrote: replies are
    // shorter than the SYNs they answer.
    let mut out = vec![0u8; frame.len() + 256];
    let opts = TestRunOptions { data_in: Some(frame), data_out: Some(&mut out), ..Default::default() };
    let result = match hook {
        Hook::Xdp => datapath.xdp().test_run(opts)?,
        Hook::Tc => datapath.tc().test_run(opts)?,
    };
    out.truncate(result.data_size_out as usize);
    Ok((result.return_value, out))
}

/// A frame's bytes as hex, space-separated.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}

/// Where two frames part, with both in full.
pub fn describe_difference(got: &[u8], want: &[u8]) -> String {
    let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    format!(
        "output differs ({} bytes, want {}; first difference at byte {at})\n      got  {}\n      want {}",
        got.len(),
        want.len(),
        hex(got),
        hex(want)
    )
}

/// The XDP program through its own file descriptor, so a thread can run
/// frames while another holds the [`Datapath`] mutably (reloading it).
pub struct XdpRunner {
    program: std::os::fd::OwnedFd,
}

/// The bpf(2) command that runs a program on a frame.
pub const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// `union bpf_attr` for BPF_PROG_TEST_RUN.
#[repr(C)]
#[derive(Default)]
pub struct TestRunAttr {
    pub prog_fd: u32,
    pub retval: u32,
    pub data_size_in: u32,
    pub data_size_out: u32,
    pub data_in: u64,
    pub data_out: u64,
    pub repeat: u32,
    pub duration: u32,
    pub ctx_size_in: u32,
    pub ctx_size_out: u32,
    pub ctx_in: u64,
    pub ctx_out: u64,
    pub flags: u32,
    pub cpu: u32,
    pub batch_size: u32,
    pub _pad: u32,
}

impl XdpRunner {
    pub fn new(datapath: &Datapath) -> anyhow::Result<Self> {
        use std::os::fd::AsFd as _;
        Ok(Self { program: datapath.xdp().fd()?.as_fd().try_clone_to_owned()? })
    }

    /// Runs `frame` once; the program's return code.
    pub fn run(&self, frame: &[u8]) -> anyhow::Result<u32> {
        use std::os::fd::AsRawFd as _;
        let mut out = vec![0u8; frame.len() + 256];
        let mut attr = TestRunAttr {
            prog_fd: self.program.as_raw_fd() as u32,
            data_size_in: frame.len() as u32,
            data_size_out: out.len() as u32,
            data_in: frame.as_ptr() as u64,
            data_out: out.as_mut_ptr() as u64,
            repeat: 1,
            ..Default::default()
        };
        // SAFETY: attr is a fully initialised bpf_attr prefix of the stated
        // size whose buffers outlive the call; the kernel writes only its
        // output fields and at most data_size_out bytes of `out`.
        let rc = unsafe {
            libc::syscall(libc::SYS_bpf, BPF_PROG_TEST_RUN, &mut attr as *mut TestRunAttr, size_of::<TestRunAttr>())
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(attr.retval)
    }
}
