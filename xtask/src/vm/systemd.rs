//! `cargo xtask vm --systemd`: the Debian package run by a real systemd.
//!
//! Debian 12's kernel (6.1) boots a Debian 12 root filesystem ([`rootfs`])
//! with systemd as PID 1, from the first namespace of an NVMe disk. The
//! second holds the payload: the package `cargo xtask deb` builds (and its
//! next revision, for an upgrade), the
//! guest's checks (`systemd/check.sh`) and the configuration they write over
//! the packaged one (`systemd/shedder.toml`), `shedder-connect-probe` (the
//! backend and the client of the connect loops), the kernel's veth module,
//! and the host's `systemd-analyze security` of the unit. systemd runs the
//! checks once basic.target is reached (systemd-run-generator's
//! `systemd.run=`) and powers off when they end, pass or fail. Each check
//! reports one protocol line on ttyS1: `SHEDDER-VM check NAME pass|fail DETAIL`.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use super::{Checked, Verdict, guest::MARK, initramfs, kernel, packages, qemu, rootfs};
use crate::{cmd, deb};

/// One check the guest runs, in order.
pub struct Check {
    pub name: &'static str,
    pub what: &'static str,
}

pub const CHECKS: [Check; 9] = [
    Check { name: "install", what: "dpkg installs the package: the user, the pin directory (tmpfiles.d)" },
    Check {
        name: "start",
        what: "systemctl start attaches (Type=notify: the XDP program is there when start returns): the journal's \
               `attached` line, ip link's XDP program, shedder ctl status \
               (as root, and as a backend's user in --socket-group), /metrics on --metrics-addr (from SHEDDER_OPTS)",
    },
    Check {
        name: "capabilities",
        what: "/proc/PID/status of the running daemon: no capability left, the unit's bounding set, no_new_privs",
    },
    Check { name: "security", what: "systemd-analyze security scores the unit as the host scores its file" },
    Check {
        name: "restart",
        what: "systemctl restart under a connect loop from a network namespace: 0 refused, 0 timed out; \
               the drained class stays drained (the new daemon took the pinned state over)",
    },
    Check {
        name: "upgrade",
        what: "dpkg --install of the next revision over the running service: the same, across its restart; \
               the edited config kept",
    },
    Check {
        name: "failed_upgrade",
        what: "an upgrade whose restart fails (a config broken by hand): dpkg succeeds and says the service did not \
               start again; mended, the service starts again by itself",
    },
    Check {
        name: "journal",
        what: "journalctl -u shedder: the attach line, and a budget decision (late job samples pushed)",
    },
    Check {
        name: "stop",
        what: "systemctl stop leaves the program attached; the drained class fails open within the watchdog's time",
    },
];

/// The kernel the guest boots: Debian 12's, like its root filesystem.
const KERNEL: &str = "debian-6.1";
const SPEC: &str = "systemd (debian-6.1)";

const CHECK_SCRIPT: &str = include_str!("systemd/check.sh");
const CONFIG: &str = include_str!("systemd/shedder.toml");

/// systemd as PID 1 from the first disk; the checks from the second, then a
/// power-off however they end. No udev runs in the guest, so serial-getty on
/// the console would wait for its device until it times out: masked.
const APPEND: &str = "root=/dev/nvme0n1 rw console=ttyS0 panic=-1 quiet init=/lib/systemd/systemd \
                      systemd.mask=serial-getty@ttyS0.service \
                      systemd.run=\"/bin/sh -c 'mount -o ro /dev/nvme0n2 /mnt && exec /bin/bash /mnt/check.sh /mnt'\" \
                      systemd.run_success_action=poweroff-force systemd.run_failure_action=poweroff-force";

pub fn run(root: &Path, machine: &qemu::Machine) -> Checked {
    println!();
    println!("==== cargo xtask vm: {SPEC}");
    boot_and_judge(root, machine).unwrap_or_else(|e| Checked {
        spec: SPEC.into(),
        verdict: Verdict::Failed(format!("could not run: {e:#}")),
        details: Vec::new(),
    })
}

fn boot_and_judge(root: &Path, machine: &qemu::Machine) -> anyhow::Result<Checked> {
    if !cmd::is_root() {
        bail!("`cargo xtask vm --systemd` must run as root: mmdebstrap builds the root filesystem as root");
    }
    println!("vm: systemd: finding the kernel");
    let kernel = match kernel::resolve(KERNEL, &root.join("kernels"))? {
        kernel::Resolved::Ready(kernel) => kernel,
        kernel::Resolved::Unavailable(why) => {
            return Ok(Checked { spec: SPEC.into(), verdict: Verdict::Skipped(why), details: Vec::new() });
        }
    };
    packages::ensure(&packages::SYSTEMD)?;
    let (package, upgrade) = deb::package_and_upgrade("vm")?;
    let probe =
        initramfs::cargo_executables(&["build", "--package", "shedder-tools", "--bin", "shedder-connect-probe"])?;
    let probe = initramfs::find(&probe, "shedder-connect-probe", false)?;
    let image = rootfs::ensure(&root.join("rootfs"))?;

    let dir = root.join("systemd");
    let payload = write_payload(&dir, [&package, &upgrade], &probe, &kernel)?;
    println!("vm: systemd: the guest runs, in order:");
    for check in &CHECKS {
        println!("    {:<13} {}", check.name, check.what);
    }
    let (protocol, console) = (dir.join("protocol.txt"), dir.join("console.log"));
    let boot = qemu::Boot { kernel: &kernel.image, initrd: None, disks: &[&image, &payload], append: APPEND };
    let outcome = qemu::boot(machine, &boot, &protocol, &console, |line| println!("[systemd] {line}"))?;
    let report = Report::parse(&std::fs::read_to_string(&protocol).unwrap_or_default());
    Ok(judge(&report, &outcome, machine, &console))
}

/// The payload disk's image: its files, then an ext4 image of them.
/// `packages`: the package, and its next revision.
fn write_payload(dir: &Path, packages: [&Path; 2], probe: &Path, kernel: &kernel::Kernel) -> anyhow::Result<PathBuf> {
    let tree = dir.join("payload");
    let _ = std::fs::remove_dir_all(&tree);
    std::fs::create_dir_all(tree.join("modules")).with_context(|| format!("creating {}", tree.display()))?;
    std::fs::write(tree.join("check.sh"), CHECK_SCRIPT)?;
    std::fs::write(tree.join("shedder.toml"), CONFIG)?;
    for (package, name) in packages.into_iter().zip(["shedder.deb", "shedder-upgrade.deb"]) {
        std::fs::copy(package, tree.join(name)).with_context(|| format!("copying {}", package.display()))?;
    }
    std::fs::copy(probe, tree.join("shedder-connect-probe")).with_context(|| format!("copying {}", probe.display()))?;
    let modules = kernel::plan_modules(kernel)?;
    for note in &modules.notes {
        println!("vm: systemd: {note}");
    }
    for (i, (name, path)) in modules.load.iter().enumerate() {
        std::fs::write(tree.join(format!("modules/{:02}-{name}.ko", i + 1)), kernel::module_bytes(path)?)?;
    }
    let unit = cmd::workspace_root().join("dist/shedder.service");
    let security =
        cmd::output(Command::new("systemd-analyze").args(["security", "--offline=yes", "--no-pager"]).arg(&unit))
            .context("scoring the unit here (systemd-analyze security --offline=yes)")?;
    if let Some(score) = security.lines().find(|l| l.contains("Overall exposure level")) {
        println!("vm: systemd: here, {}: {}", unit.display(), score.trim_start_matches(['→', ' ']));
    }
    std::fs::write(tree.join("host-security.txt"), security)?;

    let bytes: u64 = std::fs::read_dir(&tree)?.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
    let image = dir.join("payload.img");
    cmd::run(
        Command::new("mke2fs")
            .args(["-q", "-t", "ext4", "-F", "-d"])
            .arg(&tree)
            .arg(&image)
            // Room for the file system's own structures beside the files.
            .arg(format!("{}M", 32 + 2 * (bytes >> 20))),
    )?;
    Ok(image)
}

/// What the guest reported on its protocol port.
#[derive(Debug, Default, PartialEq, Eq)]
struct Report {
    /// The kernel release and systemd version it reported first.
    began: Option<String>,
    /// (name, passed, detail), in the order they ran.
    checks: Vec<(String, bool, String)>,
    done: bool,
}

impl Report {
    fn parse(text: &str) -> Self {
        let mut report = Self::default();
        for line in text.lines() {
            let Some(rest) = line.trim_end().strip_prefix(MARK).and_then(|r| r.strip_prefix(' ')) else { continue };
            let (word, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            match word {
                "begin" => report.began = Some(rest.to_string()),
                "check" => {
                    let mut words = rest.splitn(3, ' ');
                    let (Some(name), Some(verdict)) = (words.next(), words.next()) else { continue };
                    let detail = words.next().unwrap_or("").to_string();
                    report.checks.push((name.to_string(), verdict == "pass", detail));
                }
                "done" => report.done = true,
                _ => {}
            }
        }
        report
    }
}

fn judge(report: &Report, outcome: &qemu::Outcome, machine: &qemu::Machine, console: &Path) -> Checked {
    let mut details = vec![match &report.began {
        Some(began) => format!("guest: kernel {began}"),
        None => "guest: never reported in".to_string(),
    }];
    let mut failures = Vec::new();
    for check in &CHECKS {
        let line = match report.checks.iter().find(|(name, ..)| name == check.name) {
            Some((_, true, detail)) => format!("{:<13} PASS  {detail}", check.name),
            Some((_, false, detail)) => {
                failures.push(check.name.to_string());
                format!("{:<13} FAIL  {detail}", check.name)
            }
            None => {
                failures.push(format!("{} (never ran)", check.name));
                format!("{:<13} FAIL  never ran", check.name)
            }
        };
        details.push(line);
    }
    let ran = report.checks.len();
    let during = (ran < CHECKS.len()).then(|| format!("check {}", CHECKS[ran].name));
    let verdict = super::verdict(outcome, machine, report.done, during, &failures);
    details.push(format!("boot to power-off: {} s; console log: {}", outcome.elapsed.as_secs(), console.display()));
    Checked { spec: SPEC.into(), verdict, details }
}

#[cfg(test)]
mod tests {
    use std::{os::unix::process::ExitStatusExt as _, process::ExitStatus, time::Duration};

    use super::*;

    fn outcome(timed_out: bool) -> qemu::Outcome {
        let status = ExitStatus::from_raw(if timed_out { 124 << 8 } else { 0 });
        qemu::Outcome { status, timed_out, silent: false, elapsed: Duration::from_secs(80) }
    }

    fn protocol(checks: &[(&str, &str)], done: bool) -> String {
        let mut text = "SHEDDER-VM begin 6.1.0-48-cloud-amd64 systemd 252 (252.39-1~deb12u2) \r\n".to_string();
        for (name, verdict) in checks {
            text.push_str(&format!("SHEDDER-VM check {name} {verdict} some detail with spaces \r\n"));
        }
        if done {
            text.push_str("SHEDDER-VM done\r\n");
        }
        text
    }

    #[test]
    fn each_check_is_judged_from_the_protocol() {
        let machine = qemu::Machine { memory_mib: 2048, cpus: 2, timeout: Duration::from_secs(480) };
        let all_pass: Vec<(&str, &str)> = CHECKS.iter().map(|c| (c.name, "pass")).collect();
        let mut one_fails = all_pass.clone();
        one_fails[4].1 = "fail";
        // (protocol, qemu timed out, the verdict's text: "" for a pass)
        let cases: [(String, bool, &str); 5] = [
            (protocol(&all_pass, true), false, ""),
            (protocol(&one_fails, true), false, "restart"),
            (protocol(&all_pass[..3], true), false, "security (never ran), restart (never ran)"),
            (protocol(&all_pass[..3], false), false, "the guest never finished"),
            (protocol(&all_pass[..3], false), true, "qemu stopped at the 480 s limit, during check security"),
        ];
        for (text, timed_out, want) in cases {
            let report = Report::parse(&text);
            let checked = judge(&report, &outcome(timed_out), &machine, Path::new("console.log"));
            match (&checked.verdict, want) {
                (Verdict::Passed, "") => {}
                (Verdict::Failed(why), want) if !want.is_empty() && why.contains(want) => {}
                (Verdict::Failed(why), _) => panic!("want {want:?}, got the failure {why:?}"),
                _ => panic!("want {want:?}, got another verdict"),
            }
            assert_eq!(checked.details[0], "guest: kernel 6.1.0-48-cloud-amd64 systemd 252 (252.39-1~deb12u2)");
            assert_eq!(checked.details.len(), CHECKS.len() + 2);
        }
        let report = Report::parse(&protocol(&one_fails, true));
        assert_eq!(report.checks[4], ("restart".into(), false, "some detail with spaces".into()));
    }

    /// A check the script does not run would be reported as never run; one
    /// it runs that is not listed would never be judged.
    #[test]
    fn the_script_runs_exactly_the_listed_checks_in_order() {
        let ran: Vec<&str> =
            CHECK_SCRIPT.lines().filter_map(|l| l.strip_prefix("run_check ")?.split_whitespace().next()).collect();
        let listed: Vec<&str> = CHECKS.iter().map(|c| c.name).collect();
        assert_eq!(ran, listed);
        for check in &CHECKS {
            assert!(CHECK_SCRIPT.contains(&format!("run_check {0} check_{0}\n", check.name)), "{}", check.name);
        }
        assert!(CHECK_SCRIPT.contains(&format!("\"{MARK} ")), "check.sh speaks the protocol");
        assert!(CONFIG.lines().any(|l| l.starts_with("fail_open_after_ms = ")), "check.sh reads the watchdog's time");
    }
}
