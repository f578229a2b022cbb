//! Booting a kernel and initramfs under qemu with software emulation (TCG;
//! KVM is not usable on this project's machines), bounded in time.
//!
//! qemu runs under coreutils' `timeout`, so it ends by itself even if xtask
//! dies, and `timeout` gets SIGTERM when xtask dies (parent-death signal).
//! The guest's console (ttyS0) is streamed line by line; its protocol port
//! (ttyS1) goes to a file read afterwards.

use std::{
    fs::File,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::cmd;

/// The emulated machine.
pub struct Machine {
    pub memory_mib: u32,
    pub cpus: u32,
    /// The whole boot, from qemu's start to its exit.
    pub timeout: Duration,
}

pub struct Outcome {
    pub status: ExitStatus,
    /// `timeout` ended qemu: the guest never powered off in time.
    pub timed_out: bool,
    pub elapsed: Duration,
}

/// Boots `image` with `initrd`; every console line goes to `on_line` and to
/// `console_log`, the protocol port to `protocol`.
pub fn boot(
    machine: &Machine,
    image: &Path,
    initrd: &Path,
    protocol: &Path,
    console_log: &Path,
    mut on_line: impl FnMut(&str),
) -> anyhow::Result<Outcome> {
    let mut log = File::create(console_log).with_context(|| format!("creating {}", console_log.display()))?;
    let _ = std::fs::remove_file(protocol);
    let mut command = Command::new("timeout");
    command
        // --foreground: qemu stays in xtask's process group, so a Ctrl-C reaches it.
        .args(["--foreground", "--kill-after=10", &machine.timeout.as_secs().max(1).to_string()])
        .arg("qemu-system-x86_64")
        .args(["-accel", "tcg", "-cpu", "max"])
        .args(["-smp", &machine.cpus.to_string(), "-m", &machine.memory_mib.to_string()])
        .args(["-nodefaults", "-no-user-config", "-no-reboot", "-display", "none"])
        .arg("-kernel")
        .arg(image)
        .arg("-initrd")
        .arg(initrd)
        // panic=-1: a panicking guest reboots at once, which -no-reboot turns into qemu exiting.
        .args(["-append", "console=ttyS0 panic=-1 quiet"])
        .args(["-serial", "stdio"])
        .arg("-serial")
        .arg(format!("file:{}", protocol.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).map_err(std::io::Error::from)
        });
    }
    let what = cmd::describe(&command);
    println!("$ {what}");
    let start = Instant::now();
    let mut child = command.spawn().with_context(|| format!("starting `{what}`"))?;
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut raw = Vec::new();
    loop {
        raw.clear();
        // Ends at EOF, when qemu exits; `timeout` bounds that.
        match stdout.read_until(b'\n', &mut raw) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim_end_matches(['\n', '\r']);
        let _ = writeln!(log, "{line}");
        on_line(line);
    }
    let status = child.wait().with_context(|| format!("waiting for `{what}`"))?;
    let timed_out = matches!(status.code(), Some(124 | 137));
    Ok(Outcome { status, timed_out, elapsed: start.elapsed() })
}
