//! The host tools `cargo xtask vm` runs, installed from apt when missing.

use std::{path::PathBuf, process::Command};

use anyhow::bail;

use crate::cmd::{self, find_on_path, is_executable, is_root};

/// (command, Debian package, why).
pub type Tool = (&'static str, &'static str, &'static str);

const QEMU: Tool = ("qemu-system-x86_64", "qemu-system-x86", "boots the kernels under test");

/// For the kernels booted with an initramfs.
pub const KERNELS: [Tool; 3] = [
    QEMU,
    ("busybox", "busybox-static", "the guest's shell and small tools"),
    ("ip", "iproute2", "veth pairs and network namespaces in the guest"),
];

/// For the systemd guest.
pub const SYSTEMD: [Tool; 4] = [
    QEMU,
    ("mmdebstrap", "mmdebstrap", "builds the guest's root filesystem from Debian packages"),
    ("mke2fs", "e2fsprogs", "writes the guest's disk images"),
    ("systemd-analyze", "systemd", "scores the unit's hardening here, to compare with the guest's score"),
];

fn present(command: &str) -> bool {
    // A non-root PATH often lacks the sbin directories.
    find_on_path(command).is_some()
        || ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().any(|dir| is_executable(&PathBuf::from(dir).join(command)))
}

pub fn ensure(tools: &[Tool]) -> anyhow::Result<()> {
    let missing: Vec<_> = tools.iter().filter(|(command, ..)| !present(command)).collect();
    if missing.is_empty() {
        let names: Vec<&str> = tools.iter().map(|(command, ..)| *command).collect();
        println!("vm: {}: present", names.join(", "));
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().map(|(_, package, _)| *package).collect();
    for (command, package, why) in &missing {
        println!("vm: `{command}` is missing ({why}); it comes with the Debian package {package}");
    }
    if !is_root() || find_on_path("apt-get").is_none() {
        bail!("install {} (as root: apt-get install {})", packages.join(", "), packages.join(" "));
    }
    let install = || {
        let mut command = Command::new("apt-get");
        command
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "--no-install-recommends"])
            .args(&packages);
        cmd::run(&mut command)
    };
    if install().is_err() {
        println!("vm: apt-get install failed; refreshing the package lists and retrying");
        cmd::run(Command::new("apt-get").arg("update"))?;
        install()?;
    }
    if let Some((command, ..)) = tools.iter().find(|(command, ..)| !present(command)) {
        bail!("installed {}, but `{command}` is still missing", packages.join(", "));
    }
    Ok(())
}
