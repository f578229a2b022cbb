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
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::cmd;

/// A guest that has printed nothing on its console by then never will: the
/// kernel's first lines come within seconds under TCG. Such a boot is ended
/// then rather than at the machine's whole time limit.
pub const FIRST_LINE_WITHIN: Duration = Duration::from_secs(120);

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
    /// qemu was ended because the console stayed silent for
    /// [`FIRST_LINE_WITHIN`]: the guest never started.
    pub silent: bool,
    pub elapsed: Duration,
}

/// Boots `boot`; every console line goes to `on_line` and to `console_log`,
/// the protocol port to `protocol`.
///
/// A boot that prints no console line in [`FIRST_LINE_WITHIN`] is ended
/// and booted once more: the emulated machine stuck before the guest's
/// first output (seen once in CI, where it held the whole 900 s limit; the
/// same images booted in 72 s right after), so nothing the guest was to
/// check ever ran.
pub fn boot(
    machine: &Machine,
    boot: &Boot,
    protocol: &Path,
    console_log: &Path,
    mut on_line: impl FnMut(&str),
) -> anyhow::Result<Outcome> {
    let outcome = boot_once(machine, boot, protocol, console_log, &mut on_line)?;
    if !outcome.silent {
        return Ok(outcome);
    }
    println!(
        "vm: qemu printed nothing on the console in {} s, so the guest never started; booting it once more",
        outcome.elapsed.as_secs()
    );
    boot_once(machine, boot, protocol, console_log, &mut on_line)
}

/// One boot.
fn boot_once(
    machine: &Machine,
    boot: &Boot,
    protocol: &Path,
    console_log: &Path,
    on_line: &mut impl FnMut(&str),
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
    let mut raw = Vec::new();
    let spoke = AtomicBool::new(false);
    let silenced = AtomicBool::new(false);
    let pid = Pid::from_raw(child.id() as i32);
    thread::scope(|scope| {
        // Ends `timeout` (which ends qemu) if the console stays silent; it
        // is xtask's own child, not yet waited for, so its PID is still ours.
        scope.spawn(|| {
            let deadline = start + FIRST_LINE_WITHIN.min(machine.timeout);
            while !spoke.load(Ordering::Relaxed) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(200));
            }
            if !spoke.load(Ordering::Relaxed) {
                silenced.store(true, Ordering::Relaxed);
                let _ = kill(pid, Signal::SIGTERM);
            }
        });
        loop {
            raw.clear();
            // Ends at EOF, when qemu exits; `timeout` bounds that.
            match stdout.read_until(b'\n', &mut raw) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            spoke.store(true, Ordering::Relaxed);
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\n', '\r']);
            let _ = writeln!(log, "{line}");
            on_line(line);
        }
        // qemu is gone: the watcher has nothing left to end.
        spoke.store(true, Ordering::Relaxed);
    });
    let status = child.wait().with_context(|| format!("waiting for `{what}`"))?;
    let silent = silenced.load(Ordering::Relaxed);
    let timed_out = !silent && matches!(status.code(), Some(124 | 137));
    Ok(Outcome { status, timed_out, silent, elapsed: start.elapsed() })
}
