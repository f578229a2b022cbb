//! `cargo xtask demo`: builds the daemon in release, then runs the tour
//! (`shedder-demo`), which starts that daemon between two network namespaces.

use crate::{bootstrap, build, cmd};

pub fn run(args: &[String]) -> anyhow::Result<()> {
    bootstrap::run(bootstrap::Needs::root("demo"))?;
    let daemon = build::daemon_release()?;
    cmd::run(
        cmd::cargo()
            .args(["run", "--release", "--package", "shedder-tools", "--bin", "shedder-demo", "--", "--daemon"])
            .arg(&daemon)
            .args(args),
    )
}
