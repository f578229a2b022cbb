//! The guest's root file system, built from the host's own binaries: busybox
//! (the shell and the small tools), iproute2's `ip`, the `shedder` daemon
//! and the two test binaries, each with the shared libraries `ldd` names,
//! plus the kernel's modules and the scripts from [`super::guest`].

use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::{
    cpio::{Archive, Entry},
    guest,
    kernel::{ModulePlan, module_bytes},
};
use crate::cmd::{self, find_on_path, is_executable};

/// The host binaries that go into every guest, and the libraries they load.
pub struct Payload {
    /// (path in the guest, path on the host).
    binaries: Vec<(String, PathBuf)>,
    libraries: BTreeSet<PathBuf>,
}

/// One `compiler-artifact` that cargo reported with an executable.
pub(super) struct Artifact {
    name: String,
    test: bool,
    executable: PathBuf,
}

/// Runs cargo with `--message-format=json-render-diagnostics` (its diagnostics
/// still reach the terminal) and returns the executables it reported.
pub(super) fn cargo_executables(args: &[&str]) -> anyhow::Result<Vec<Artifact>> {
    let mut command = cmd::cargo();
    command.args(args).arg("--message-format=json-render-diagnostics");
    let what = cmd::describe(&command);
    println!("$ {what}");
    let mut child = command.stdout(Stdio::piped()).spawn().with_context(|| format!("starting `{what}`"))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut artifacts = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.with_context(|| format!("reading `{what}`"))?;
        let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let (Some(name), Some(executable)) = (message["target"]["name"].as_str(), message["executable"].as_str())
        else {
            continue;
        };
        artifacts.push(Artifact {
            name: name.to_string(),
            test: message["profile"]["test"].as_bool().unwrap_or(false),
            executable: PathBuf::from(executable),
        });
    }
    cmd::check(child.wait().with_context(|| format!("waiting for `{what}`"))?, &what)?;
    Ok(artifacts)
}

pub(super) fn find(artifacts: &[Artifact], name: &str, test: bool) -> anyhow::Result<PathBuf> {
    artifacts
        .iter()
        .find(|a| a.name == name && a.test == test)
        .map(|a| a.executable.clone())
        .with_context(|| format!("cargo built no {} named {name}", if test { "test binary" } else { "binary" }))
}

/// The first of `candidates` that is an executable file, else `name` on PATH.
fn host_tool(name: &str, candidates: &[&str]) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| is_executable(p)).or_else(|| find_on_path(name))
}

impl Payload {
    /// Builds the daemon and the test binaries (debug, like `cargo xtask
    /// test`), strips their debug info into `work`, and finds every library.
    pub fn build(work: &Path) -> anyhow::Result<Self> {
        let tests = cargo_executables(&[
            "test",
            "--no-run",
            "--package",
            "shedder-tests",
            "--test",
            "packet_table",
            "--test",
            "netns_e2e",
            "--test",
            "watchdog",
        ])?;
        let daemon = cargo_executables(&["build", "--package", "shedder-daemon", "--bin", "shedder"])?;
        let ours = [
            ("shedder", find(&daemon, "shedder", false)?),
            ("packet_table", find(&tests, "packet_table", true)?),
            ("netns_e2e", find(&tests, "netns_e2e", true)?),
            ("watchdog", find(&tests, "watchdog", true)?),
        ];
        let busybox = host_tool("busybox", &["/bin/busybox", "/usr/bin/busybox"])
            .context("busybox is not installed (apt-get install busybox-static)")?;
        let ip = host_tool("ip", &["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"])
            .context("iproute2's `ip` is not installed (apt-get install iproute2)")?;

        let bin = work.join("bin");
        std::fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
        let strip = find_on_path("strip");
        if strip.is_none() {
            println!("vm: no `strip` (binutils) here; the guest gets the binaries with their debug info");
        }
        let mut binaries = vec![("bin/busybox".to_string(), busybox), ("usr/sbin/ip".to_string(), ip)];
        for (name, built) in ours {
            let slim = match &strip {
                Some(strip) => {
                    let slim = bin.join(name);
                    cmd::output(Command::new(strip).arg("--strip-debug").arg("-o").arg(&slim).arg(&built))?;
                    slim
                }
                None => built,
            };
            binaries.push((format!("{}/{name}", guest::DIR.trim_start_matches('/')), slim));
        }
        let mut libraries = BTreeSet::new();
        for (_, path) in &binaries {
            libraries.extend(shared_libraries(path)?);
        }
        Ok(Self { binaries, libraries })
    }

    /// Writes the initramfs for a kernel whose modules are `modules`; returns its size.
    pub fn write(&self, modules: &ModulePlan, path: &Path) -> anyhow::Result<u64> {
        let mut archive = Archive::default();
        for dir in ["dev", "etc", "proc", "root", "run", "sys", "tmp"] {
            archive.add(dir, Entry::Dir)?;
        }
        // The kernel opens it for init's stdio before anything is mounted.
        archive.add("dev/console", Entry::CharDev { major: 5, minor: 1, mode: 0o600 })?;
        archive.add("var/run", Entry::Symlink { target: "../run".into() })?;
        archive.add("init", Entry::Bytes { data: guest::init_script().into_bytes(), mode: 0o755 })?;
        let dir = guest::DIR.trim_start_matches('/');
        archive.add(
            &format!("{dir}/load-check.sh"),
            Entry::Bytes { data: guest::load_check_script().into_bytes(), mode: 0o755 },
        )?;
        for (guest_path, host_path) in &self.binaries {
            archive.add(guest_path, Entry::File { source: host_path.clone(), mode: 0o755 })?;
        }
        for library in &self.libraries {
            let guest_path = library.to_str().with_context(|| format!("library path {library:?} is not UTF-8"))?;
            archive.add(guest_path, Entry::File { source: library.clone(), mode: 0o755 })?;
        }
        let mut guest_modules = Vec::new();
        for (i, (name, host_path)) in modules.load.iter().enumerate() {
            let guest_path = format!("lib/modules/shedder/{:02}-{name}.ko", i + 1);
            archive.add(&guest_path, Entry::Bytes { data: module_bytes(host_path)?, mode: 0o644 })?;
            guest_modules.push(format!("/{guest_path}"));
        }
        archive.add(
            &format!("{dir}/modules.sh"),
            Entry::Bytes { data: guest::modules_script(&guest_modules, &modules.notes).into_bytes(), mode: 0o755 },
        )?;
        archive.write_to(path)
    }
}

/// The shared libraries (and the dynamic loader) that `binary` loads, per `ldd`.
fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(binary).output().context("running ldd (libc-bin)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // A static binary (busybox-static): nothing to bring along.
        if String::from_utf8_lossy(&out.stderr).contains("not a dynamic executable")
            || text.contains("not a dynamic executable")
            || text.contains("statically linked")
        {
            return Ok(Vec::new());
        }
        bail!("ldd {} failed: {}", binary.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    parse_ldd(&text).with_context(|| format!("ldd {}", binary.display()))
}

fn parse_ldd(text: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for line in text.lines().map(str::trim) {
        let target = match line.split_once("=>") {
            Some((name, target)) => {
                let target = target.trim();
                if target.starts_with("not found") {
                    bail!("{} is not found", name.trim());
                }
                target
            }
            None => line,
        };
        if let Some(path) = target.split_whitespace().next().filter(|p| p.starts_with('/')) {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_libraries_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                    \tlibbpf.so.1 => /lib/x86_64-linux-gnu/libbpf.so.1 (0x00007f64)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f64)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f64)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            ["/lib/x86_64-linux-gnu/libbpf.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"]
                .map(PathBuf::from)
        );
        assert!(parse_ldd("\tlibmissing.so.3 => not found\n").unwrap_err().to_string().contains("libmissing.so.3"));
    }
}
