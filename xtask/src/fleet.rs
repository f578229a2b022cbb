//! `cargo xtask fleet`: four fleet hosts sharing tenants' quotas through one
//! redis-server, live (`shedder-fleet-demo`, release).

use crate::{bootstrap, cmd};

pub fn run(args: &[String]) -> anyhow::Result<()> {
    bootstrap::run(bootstrap::Needs { task: "fleet", root: false, tools: &[bootstrap::REDIS_SERVER] })?;
    cmd::run(
        cmd::cargo()
            .args(["run", "--release", "--package", "shedder-tests", "--bin", "shedder-fleet-demo", "--"])
            .args(args),
    )
}
