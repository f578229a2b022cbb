//! The one way the beds run iproute2's `ip`.

use std::process::Command;

use anyhow::{Context as _, bail};

/// Runs `ip ARGS` and returns its stdout; a failure names the command and
/// carries its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip").args(args).output().context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
