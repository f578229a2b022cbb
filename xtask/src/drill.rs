//! `cargo xtask drill`: builds the daemon in release, then runs the failure
//! drill (`shedder-drill`), which starts that daemon between two network
//! namespaces once per mode. Arguments go to the drill (try `-- --help`);
//! its defaults are the reference workload, all seven modes (shedder's four and
//! the three peers), time scale 0.25 and `target/drill/` for the records and
//! the report (cargo runs it in the workspace root). `cargo xtask drill
//! --suite` runs every workload of `drill/workloads/suite.toml` in every
//! mode and prints one summary (see docs/drill.md).

use crate::{bootstrap, build, cmd};

pub fn run(args: &[String]) -> anyhow::Result<()> {
    bootstrap::run(bootstrap::Needs::root_with_nftables("drill"))?;
    let daemon = build::daemon_release()?;
    cmd::run(
        cmd::cargo()
            .args(["run", "--release", "--package", "shedder-drill", "--bin", "shedder-drill", "--", "--daemon"])
            .arg(&daemon)
            .args(args),
    )
}
