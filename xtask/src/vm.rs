//! `cargo xtask vm`: the program built once on the host, then loaded and
//! tested on other kernels, each booted under qemu (software emulation) with
//! a minimal initramfs made of the host's own binaries.
//!
//! In each guest: the daemon loads both programs (the verifier runs) and
//! attaches with XDP and with TC to a veth; the BPF_PROG_TEST_RUN packet
//! tables; a few veth end-to-end cases. A pass or fail per kernel, and a
//! non-zero exit if any kernel failed. Everything is cached under
//! `target/vm/`: the Debian kernels, and per kernel the initramfs, the
//! console log and the protocol lines the guest reported.
//!
//! `--systemd` runs the Debian package under a real systemd instead (or as
//! well): see [`systemd`].
//!
//! One module per mechanism: [`packages`] (host tools), [`kernel`] (which
//! kernel, its modules), [`initramfs`] and [`cpio`] (the guest's files),
//! [`guest`] (what runs inside, and its report), [`qemu`] (the boot),
//! [`rootfs`] and [`systemd`] (the systemd guest).

mod cpio;
mod guest;
mod initramfs;
mod kernel;
mod packages;
mod qemu;
mod rootfs;
mod systemd;

use std::{path::Path, time::Duration};

use anyhow::Context as _;

use crate::{bootstrap, cmd};

#[derive(clap::Args)]
pub struct Args {
    /// A kernel to check: debian-6.1, debian-6.12, host, or the path of a
    /// kernel image (bzImage; modules are taken from `../lib/modules/<release>`
    /// beside it, else `/lib/modules/<release>`). Repeat for several.
    /// Default: debian-6.1 and host, unless --systemd is given alone.
    #[arg(long = "kernel", value_name = "debian-6.1|debian-6.12|host|PATH")]
    kernels: Vec<String>,
    /// Run the Debian package under a real systemd: Debian 12's kernel boots a
    /// Debian 12 root filesystem built by mmdebstrap (cached under
    /// target/vm/rootfs/), with systemd as PID 1, and checks start, dropped
    /// capabilities, a hitless restart, failing open on stop, the journal and
    /// `systemd-analyze security`. Needs root.
    #[arg(long)]
    systemd: bool,
    /// Seconds one boot may take, all stages included, before qemu is stopped.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 2048)]
    memory: u32,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
}

/// panic=-1: a panicking guest reboots at once, which qemu's -no-reboot turns into qemu exiting.
const INITRAMFS_APPEND: &str = "console=ttyS0 panic=-1 quiet";

/// How one kernel fared.
struct Checked {
    spec: String,
    verdict: Verdict,
    /// Lines under the verdict: the kernel, each stage, where the logs are.
    details: Vec<String>,
}

enum Verdict {
    Passed,
    Failed(String),
    Skipped(String),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let specs =
        if args.kernels.is_empty() && !args.systemd { vec!["debian-6.1".into(), "host".into()] } else { args.kernels };
    let root = cmd::target_dir().join("vm");
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    // The kernels first: one that is not there is skipped before anything is built.
    let kernels: Vec<_> = specs
        .iter()
        .map(|spec| {
            println!("vm: {spec}: finding the kernel");
            let resolved = kernel::resolve(spec, &root.join("kernels"));
            if let Ok(kernel::Resolved::Unavailable(why)) = &resolved {
                println!("vm: {spec}: skipped: {why}");
            }
            (spec, resolved)
        })
        .collect();
    let payload = if kernels.iter().any(|(_, r)| matches!(r, Ok(kernel::Resolved::Ready(_)))) {
        bootstrap::run(bootstrap::Needs::build("vm"))?;
        packages::ensure(&packages::KERNELS)?;
        Some(initramfs::Payload::build(&root)?)
    } else {
        None
    };
    let machine = qemu::Machine {
        memory_mib: args.memory,
        cpus: args.cpus.max(1),
        timeout: Duration::from_secs(args.timeout.max(1)),
    };
    let mut results: Vec<Checked> = kernels
        .into_iter()
        .map(|(spec, resolved)| {
            let (verdict, details) = match (resolved, &payload) {
                (Ok(kernel::Resolved::Ready(kernel)), Some(payload)) => {
                    return check(spec, &kernel, payload, &root, &machine);
                }
                (Ok(kernel::Resolved::Ready(_)), None) => unreachable!("a payload is built when a kernel is ready"),
                (Ok(kernel::Resolved::Unavailable(why)), _) => (Verdict::Skipped(why), Vec::new()),
                (Err(e), _) => (Verdict::Failed(format!("could not get the kernel: {e:#}")), Vec::new()),
            };
            Checked { spec: spec.clone(), verdict, details }
        })
        .collect();
    if args.systemd {
        results.push(systemd::run(&root, &machine));
    }

    println!();
    println!("cargo xtask vm: results");
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for checked in &results {
        let verdict = match &checked.verdict {
            Verdict::Passed => {
                passed += 1;
                "PASS".to_string()
            }
            Verdict::Failed(why) => {
                failed += 1;
                format!("FAIL: {why}")
            }
            Verdict::Skipped(why) => {
                skipped += 1;
                format!("SKIPPED: {why}")
            }
        };
        println!("{}: {verdict}", checked.spec);
        for line in &checked.details {
            println!("    {line}");
        }
    }
    println!("vm: {passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        return Err(cmd::own_failure(format!("{failed} of {} guests failed", results.len())));
    }
    Ok(())
}

/// A directory name for a kernel spec.
fn dir_name(spec: &str) -> String {
    let name = if kernel::named_specs().contains(&spec) {
        spec.to_string()
    } else {
        format!("path-{}", Path::new(spec).file_name().map_or(spec.into(), |n| n.to_string_lossy()))
    };
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect()
}

fn check(
    spec: &str,
    kernel: &kernel::Kernel,
    payload: &initramfs::Payload,
    root: &Path,
    machine: &qemu::Machine,
) -> Checked {
    println!();
    println!("==== cargo xtask vm: {spec}");
    match boot_and_judge(spec, kernel, payload, root, machine) {
        Ok(checked) => checked,
        Err(e) => Checked {
            spec: spec.into(),
            verdict: Verdict::Failed(format!("could not run: {e:#}")),
            details: Vec::new(),
        },
    }
}

fn boot_and_judge(
    spec: &str,
    kernel: &kernel::Kernel,
    payload: &initramfs::Payload,
    root: &Path,
    machine: &qemu::Machine,
) -> anyhow::Result<Checked> {
    println!("vm: {spec}: {} ({})", kernel.image.display(), kernel.detail);
    let modules = kernel::plan_modules(kernel)?;
    for note in &modules.notes {
        println!("vm: {spec}: {note}");
    }
    let names: Vec<&str> = modules.load.iter().map(|(name, _)| name.as_str()).collect();
    println!("vm: {spec}: modules to load: {}", if names.is_empty() { "none".into() } else { names.join(", ") });

    let dir = root.join(dir_name(spec));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let initrd = dir.join("initramfs.cpio");
    let size = payload.write(&modules, &initrd)?;
    println!("vm: {spec}: initramfs {} ({} MiB)", initrd.display(), size >> 20);

    println!("vm: {spec}: the guest runs, each stage under its own time limit:");
    for stage in &guest::STAGES {
        println!("    {:<13} {:>4} s  {}", stage.name, stage.limit_s, stage.what);
    }
    let (protocol, console) = (dir.join("protocol.txt"), dir.join("console.log"));
    let mut tests = guest::TestCounts::default();
    let boot = qemu::Boot { kernel: &kernel.image, initrd: Some(&initrd), disks: &[], append: INITRAMFS_APPEND };
    let outcome = qemu::boot(machine, &boot, &protocol, &console, |line| {
        println!("[{spec}] {line}");
        tests.add_line(line);
    })?;
    let report = guest::Report::parse(&std::fs::read_to_string(&protocol).unwrap_or_default());
    Ok(judge(spec, kernel, &report, &tests, &outcome, machine, &console))
}

fn judge(
    spec: &str,
    kernel: &kernel::Kernel,
    report: &guest::Report,
    tests: &guest::TestCounts,
    outcome: &qemu::Outcome,
    machine: &qemu::Machine,
    console: &Path,
) -> Checked {
    let mut details = Vec::new();
    match &report.kernel {
        Some((release, version)) => details.push(format!("kernel {release} ({version}); {}", kernel.detail)),
        None => details.push(format!("kernel {} ({}): never reported in", kernel.image.display(), kernel.detail)),
    }
    let mut failures = Vec::new();
    for (stage, verdict) in report.verdicts(tests) {
        let mut line = match &verdict {
            Ok(seconds) => format!("{stage:<13} PASS {seconds:>4} s"),
            Err(why) => {
                failures.push(format!("{stage} ({why})"));
                format!("{stage:<13} FAIL: {why}")
            }
        };
        let hook = stage.strip_prefix("load-");
        if let Some((_, attachment)) = report.attachments.iter().find(|(h, _)| Some(h.as_str()) == hook) {
            line.push_str(&format!("  attached: {attachment}"));
        }
        if let Some((_, verifier)) = report.refusals.iter().find(|(h, _)| Some(h.as_str()) == hook) {
            line.push_str(&format!("  refused by the verifier: {verifier}"));
        }
        let (passed, failed) = (tests.passed(stage), tests.failed(stage));
        if passed + failed > 0 {
            line.push_str(&format!("  tests: {passed} passed, {failed} failed"));
        }
        details.push(line);
        for (_, test) in tests.failures.iter().filter(|(s, _)| s == stage) {
            details.push(format!("    FAILED {test}"));
        }
    }
    let during = report.unfinished().map(|s| format!("stage {s}"));
    let verdict = verdict(outcome, machine, report.done, during, &failures);
    details.push(format!("boot to power-off: {} s; console log: {}", outcome.elapsed.as_secs(), console.display()));
    Checked { spec: spec.into(), verdict, details }
}

/// A guest's verdict: what stopped it early, else its failures, else how qemu ended.
/// `during` names what was under way when it stopped.
fn verdict(
    outcome: &qemu::Outcome,
    machine: &qemu::Machine,
    done: bool,
    during: Option<String>,
    failures: &[String],
) -> Verdict {
    if outcome.silent {
        Verdict::Failed(format!(
            "qemu printed nothing on the console in {} s, twice: the guest never started",
            qemu::FIRST_LINE_WITHIN.as_secs()
        ))
    } else if outcome.timed_out {
        let during = during.map_or(String::new(), |what| format!(", during {what}"));
        Verdict::Failed(format!("qemu stopped at the {} s limit{during}", machine.timeout.as_secs()))
    } else if !done {
        Verdict::Failed(format!(
            "the guest never finished (qemu {}; a kernel panic or a dead init: see the console log)",
            outcome.status
        ))
    } else if !failures.is_empty() {
        Verdict::Failed(failures.join(", "))
    } else if !outcome.status.success() {
        Verdict::Failed(format!("qemu exited with {}", outcome.status))
    } else {
        Verdict::Passed
    }
}

#[cfg(test)]
mod tests {
    use super::dir_name;

    #[test]
    fn kernel_specs_make_safe_directory_names() {
        assert_eq!(dir_name("debian-6.1"), "debian-6.1");
        assert_eq!(dir_name("host"), "host");
        assert_eq!(dir_name("/boot/vmlinuz-6.8.0-45-generic"), "path-vmlinuz-6.8.0-45-generic");
        assert_eq!(dir_name("my kernel:1"), "path-my_kernel_1");
    }
}
