//! `cargo xtask deb --check`: the package's life on this machine, a Debian
//! system. Install it; run the packaged daemon on a veth in a network
//! namespace of its own until it attaches and pins, then stop it (the program
//! stays attached, failing open); edit the config as an administrator would;
//! upgrade in place to the next revision, which must keep both the program
//! and the edit; remove, after which no program is attached and nothing is
//! pinned; purge, which takes the config. No systemd runs as PID 1 here, so the
//! unit's start and stop snippets do nothing: the daemon is started by hand.
//! Pins go to a BPF filesystem of the check's own, so removal cannot touch the
//! host's.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use nix::sys::signal::Signal;
use shedder_testbed::{child::ChildGuard, netns::Netns, scratch::ScratchDir};

use crate::cmd;

const PACKAGE: &str = "shedder";
const BINARY: &str = "/usr/bin/shedder";
const CONFIG: &str = "/etc/shedder/shedder.toml";
const UNIT: &str = "/usr/lib/systemd/system/shedder.service";
const MAN_PAGE: &str = "/usr/share/man/man1/shedder.1.gz";
/// Where the packaged unit's daemon pins, and what removal detaches.
const PIN_ROOT: &str = "/sys/fs/bpf/shedder";
const IFACE: &str = "debcheck0";
const PEER: &str = "debcheck1";
const ADMIN_EDIT: &str = "# an administrator's edit, which an upgrade keeps\n";

fn say(message: impl AsRef<str>) {
    println!("deb check: {}", message.as_ref());
}

pub fn run(package: &Path, upgrade: &Path) -> anyhow::Result<()> {
    if let Some(version) = installed_version()? {
        bail!("{PACKAGE} {version} is installed on this machine; the check would replace and then purge it");
    }
    private_bpf_filesystem()?;
    let mut bed = Bed::new()?;

    say(format!("installing {}", package.display()));
    bed.installed = true;
    dpkg(&["--install"], package)?;
    let first = installed_version()?.context("dpkg installed nothing")?;
    for path in [
        BINARY,
        CONFIG,
        UNIT,
        MAN_PAGE,
        "/usr/lib/sysusers.d/shedder.conf",
        "/usr/lib/tmpfiles.d/shedder.conf",
        "/usr/share/doc/shedder/README.md",
        "/usr/share/shedder/prometheus/shedder-alerts.yaml",
        "/usr/share/shedder/grafana/shedder-dashboard.json",
    ] {
        ensure!(Path::new(path).exists(), "the package did not install {path}");
    }
    let conffiles = cmd::output(Command::new("dpkg-query").args(["--show", "--showformat=${Conffiles}", PACKAGE]))?;
    ensure!(conffiles.contains(CONFIG), "{CONFIG} is not a conffile: {conffiles:?}");
    ensure!(
        std::fs::read_to_string(CONFIG)?.lines().any(|l| l.trim() == r#"mode = "observe""#),
        "the installed config does not observe"
    );
    cmd::output(Command::new(BINARY).args(["check-config", CONFIG])).context("the installed config is refused")?;
    cmd::output(Command::new("getent").args(["passwd", "shedder"])).context("the user shedder was not created")?;
    say(format!(
        "installed {first}: binary, unit, sysusers, tmpfiles, man page, docs, alerting rules, dashboard; {CONFIG} observes and is a conffile"
    ));

    bed.start_daemon()?;
    let program = bed.wait_attached(Duration::from_secs(60))?;
    bed.stop_daemon()?;
    ensure!(bed.xdp_program_id()? == Some(program), "the program did not stay attached after the daemon stopped");
    say(format!("the packaged daemon attached program {program} to {IFACE} and left it pinned when stopped"));

    std::fs::OpenOptions::new()
        .append(true)
        .open(CONFIG)
        .and_then(|mut f| std::io::Write::write_all(&mut f, ADMIN_EDIT.as_bytes()))
        .with_context(|| format!("editing {CONFIG}"))?;
    say(format!("upgrading to {}", upgrade.display()));
    dpkg(&["--install"], upgrade)?;
    let second = installed_version()?.context("the upgrade left nothing installed")?;
    ensure!(second != first, "the upgrade did not change the version ({first})");
    ensure!(std::fs::read_to_string(CONFIG)?.ends_with(ADMIN_EDIT), "the upgrade lost the edit of {CONFIG}");
    ensure!(bed.xdp_program_id()? == Some(program), "the upgrade detached the program");
    ensure!(pinned(), "the upgrade removed the pins under {PIN_ROOT}/{IFACE}");
    say(format!("upgraded {first} -> {second}: the config's edit and program {program} are kept"));

    say("removing");
    dpkg(&["--remove"], Path::new(PACKAGE))?;
    ensure!(bed.xdp_program_id()?.is_none(), "removing the package left a program attached to {IFACE}");
    ensure!(!pinned(), "removing the package left {PIN_ROOT}/{IFACE}");
    ensure!(!Path::new(BINARY).exists(), "removing the package left {BINARY}");
    ensure!(Path::new(CONFIG).exists(), "removing (not purging) the package took the config");
    say("removed: nothing attached to the interface, nothing pinned, the config kept");

    dpkg(&["--purge"], Path::new(PACKAGE))?;
    bed.installed = false;
    ensure!(!Path::new(CONFIG).exists(), "purging the package left {CONFIG}");
    ensure!(installed_version()?.is_none(), "{PACKAGE} is still installed after the purge");
    say("purged: the config is gone (the system user shedder stays, as Debian's policy has it)");
    say("PASS");
    Ok(())
}

/// A BPF filesystem of the check's own at /sys/fs/bpf, seen by xtask and its
/// children only (dpkg and the maintainer scripts among them): the packaged
/// daemon pins where the unit's would, and removal can only ever detach what
/// the check pinned, never what the host has.
fn private_bpf_filesystem() -> anyhow::Result<()> {
    use nix::{
        mount::{MsFlags, mount},
        sched::{CloneFlags, unshare},
    };
    unshare(CloneFlags::CLONE_NEWNS).context("creating a mount namespace")?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .context("making the mounts private")?;
    mount(Some("bpf"), "/sys/fs/bpf", Some("bpf"), MsFlags::empty(), None::<&str>)
        .context("mounting a BPF filesystem at /sys/fs/bpf")
}

fn pinned() -> bool {
    Path::new(PIN_ROOT).join(IFACE).exists()
}

/// The version dpkg has installed, if any.
fn installed_version() -> anyhow::Result<Option<String>> {
    let out = Command::new("dpkg-query")
        .args(["--show", "--showformat=${Status}\t${Version}", PACKAGE])
        .stdin(Stdio::null())
        .output()
        .context("running dpkg-query")?;
    let shown = String::from_utf8_lossy(&out.stdout);
    Ok(shown.strip_prefix("install ok installed\t").map(|v| v.trim().to_string()))
}

/// `dpkg ARGS TARGET` with no terminal to answer a question: a conffile prompt fails it.
fn dpkg(args: &[&str], target: &Path) -> anyhow::Result<()> {
    cmd::run(Command::new("dpkg").args(args).arg(target).stdin(Stdio::null()).env("DEBIAN_FRONTEND", "noninteractive"))
}

/// A network namespace with a veth pair, the daemon started in it, and
/// whatever the check installed: all undone when dropped, however the check ends.
struct Bed {
    /// Killed, by its PID, before the package is purged.
    daemon: Option<ChildGuard>,
    installed: bool,
    scratch: ScratchDir,
    netns: Netns,
}

impl Bed {
    fn new() -> anyhow::Result<Self> {
        let netns = Netns::new("shdeb")?;
        netns.add_veth_pair(IFACE, PEER)?;
        Ok(Self { daemon: None, installed: false, scratch: ScratchDir::new("shedder-deb-check-")?, netns })
    }

    fn log_path(&self) -> PathBuf {
        self.scratch.path().join("daemon.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The packaged daemon with the packaged config and the default pin root,
    /// as the unit runs it; its socket and /metrics stay in the scratch
    /// directory and the namespace.
    fn start_daemon(&mut self) -> anyhow::Result<()> {
        let log = File::create(self.log_path())?;
        // nsenter, not `ip netns exec`: that one also remounts /sys, hiding the
        // check's BPF filesystem, where the pins must go. nsenter execs the
        // daemon: the child's PID is the daemon's.
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net={}", self.netns.path().display()))
            .args(["--", BINARY, "run", "--iface", IFACE, "--attach", "xdp"])
            .args(["--config", CONFIG, "--report-every", "60", "--socket"])
            .arg(self.scratch.path().join("control.sock"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        self.daemon = Some(ChildGuard::spawn(&mut command, "the packaged daemon")?);
        Ok(())
    }

    /// Waits until the program is attached to the veth and pinned; returns its id.
    fn wait_attached(&mut self, within: Duration) -> anyhow::Result<u32> {
        let until = Instant::now() + within;
        loop {
            if let Some(id) = self.xdp_program_id()?
                && pinned()
            {
                return Ok(id);
            }
            if let Some(status) = self.daemon.as_mut().and_then(|d| d.exit_within(Duration::ZERO)) {
                bail!("the packaged daemon exited ({status}) before attaching:\n{}", self.log());
            }
            if Instant::now() > until {
                bail!("the packaged daemon did not attach and pin within {within:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, as `systemctl stop` sends, and waits for the exit.
    fn stop_daemon(&mut self) -> anyhow::Result<()> {
        let daemon = self.daemon.take().context("no daemon runs")?;
        if !daemon.stop(Signal::SIGTERM, Duration::from_secs(10)) {
            bail!("the packaged daemon did not exit within 10 s of SIGTERM:\n{}", self.log());
        }
        Ok(())
    }

    fn xdp_program_id(&self) -> anyhow::Result<Option<u32>> {
        self.netns.xdp_program_id(IFACE)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        drop(self.daemon.take());
        if self.installed {
            // Its prerm detaches what the check's daemon pinned.
            let _ = dpkg(&["--purge"], Path::new(PACKAGE));
        }
    }
}
