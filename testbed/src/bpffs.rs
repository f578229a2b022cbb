//! A BPF filesystem of a test's own, to pin under: tests never see each
//! other's pins or a real install's, and unmounting it on the way out
//! releases whatever a failed test left pinned (a pinned link too, which
//! detaches its program).

use std::{path::Path, process::Command};

use anyhow::{Context as _, bail};

use crate::scratch::ScratchDir;

pub struct PrivateBpffs {
    /// The mount point; removed after the unmount.
    dir: ScratchDir,
}

impl PrivateBpffs {
    pub fn mount(prefix: &str) -> anyhow::Result<Self> {
        let dir = ScratchDir::new(prefix)?;
        let status =
            Command::new("mount").args(["-t", "bpf", "bpf"]).arg(dir.path()).status().context("running mount")?;
        if !status.success() {
            bail!("mounting a BPF filesystem at {}", dir.path().display());
        }
        Ok(Self { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PrivateBpffs {
    fn drop(&mut self) {
        match Command::new("umount").arg(self.dir.path()).status() {
            Ok(status) if status.success() => {}
            other => eprintln!("cleanup: unmounting {}: {other:?}", self.dir.path().display()),
        }
    }
}
