//! `cargo xtask build`: the daemon in release. Its build script compiles the
//! eBPF crate (nightly, bpfel-unknown-none, bpf-linker) and embeds the object.

use std::path::PathBuf;

use crate::{bootstrap, cmd};

pub fn run(debug: bool) -> anyhow::Result<()> {
    bootstrap::run(bootstrap::Needs::build("build"))?;
    let daemon = daemon_release()?;
    if debug {
        // The default members only: the eBPF crate builds through the daemon.
        cmd::run(cmd::cargo().arg("build"))?;
    }
    println!("built {}", daemon.display());
    Ok(())
}

/// Builds `target/release/shedder` and returns its path.
pub fn daemon_release() -> anyhow::Result<PathBuf> {
    cmd::run(cmd::cargo().args(["build", "--release", "--package", "shedder-daemon", "--bin", "shedder"]))?;
    let path = cmd::target_dir().join("release").join("shedder");
    anyhow::ensure!(cmd::is_executable(&path), "cargo reported success, but {} is missing", path.display());
    Ok(path)
}
