//! Booting a kernel (with an initramfs, or a root disk) under qemu with
//! software emulation (TCG; KVM is not usable on this project's machines),
//! bounded in time.
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

/// What to boot.
pub struct Boot<'a> {
    pub kernel: &'a Path,
    pub initrd: Option<&'a Path>,
    /// Raw disk images, the namespaces of one NVMe controller in order
    /// (`/dev/nvme0n1`, `/dev/nvme0n2`, …; the Debian kernels have NVMe built
    /// in). The guest's writes go to a temporary overlay, never to the image.
    pub disks: &'a [&'a Path],
    /// The kernel command line.
    pub append: &'a str,
}

pub struct Outcome {
    pub status: ExitStatus,
    /// `timeout` ended qemu: the guest never powered off in time.
    pub timed_out: bool,
    pub elapsed: Duration,
}

/// Boots `boot`; every console line goes to `on_line` and to `console_log`,
/// the protocol port to `protocol`.
///
/// A boot that reaches its time limit without printing a single console
/// line is booted once more: the emulated machine stuck before the guest's
/// first output (seen once in CI; the same images booted in 72 s right
/// after), so nothing the guest was to check ever ran.
pub fn boot(
    machine: &Machine,
    boot: &Boot,
    protocol: &Path,
    console_log: &Path,
    mut on_line: impl FnMut(&str),
) -> anyhow::Result<Outcome> {
    let (outcome, lines) = boot_once(machine, boot, protocol, console_log, &mut on_line)?;
    if !(outcome.timed_out && lines == 0) {
        return Ok(outcome);
    }
    println!(
        "vm: qemu printed nothing on the console in {} s, so the guest never started; booting it once more",
        outcome.elapsed.as_secs()
    );
    Ok(boot_once(machine, boot, protocol, console_log, &mut on_line)?.0)
}

/// One boot: its outcome and how many console lines it printed.
fn boot_once(
    machine: &Machine,
    boot: &Boot,
    protocol: &Path,
    console_log: &Path,
    on_line: &mut impl FnMut(&str),
) -> anyhow::Result<(Outcome, u64)> {
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
        .arg(boot.kernel)
        .args(["-append", boot.append]);
    if let Some(initrd) = boot.initrd {
        command.arg("-initrd").arg(initrd);
    }
    if !boot.disks.is_empty() {
        command.args(["-device", "nvme,id=nvme0,serial=shedder"]);
    }
    for (i, disk) in boot.disks.iter().enumerate() {
        let id = format!("disk{}", i + 1);
        // qemu's option syntax doubles a comma that is part of a value.
        let file = disk.to_str().with_context(|| format!("{} is not UTF-8", disk.display()))?.replace(',', ",,");
        command.args(["-drive", &format!("format=raw,if=none,snapshot=on,id={id},file={file}")]);
        command.args(["-device", &format!("nvme-ns,drive={id},bus=nvme0,nsid={}", i + 1)]);
    }
    command
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
    let (mut raw, mut lines) = (Vec::new(), 0);
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
        lines += 1;
    }
    let status = child.wait().with_context(|| format!("waiting for `{what}`"))?;
    let timed_out = matches!(status.code(), Some(124 | 137));
    Ok((Outcome { status, timed_out, elapsed: start.elapsed() }, lines))
}
