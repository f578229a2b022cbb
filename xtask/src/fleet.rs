//! `cargo xtask fleet`: four real shedder hosts, each in a network namespace
//! of its own, sharing tenants' quotas through one redis-server, live
//! (`shedder-fleet-demo`). Needs root.
//!
//! The dev profile: the hosts' work is in the kernel's fast path and in the
//! daemons' ticks, which a debug build keeps up with.

use crate::{bootstrap, cmd};

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let tools = &[bootstrap::IPROUTE2, bootstrap::REDIS_SERVER];
    bootstrap::run(bootstrap::Needs { task: "fleet", root: true, tools })?;
    cmd::run(cmd::cargo().args(["build", "--package", "shedder-daemon", "--bin", "shedder"]))?;
    let daemon = cmd::target_dir().join("debug").join("shedder");
    cmd::run(
        cmd::cargo()
            .args(["run", "--package", "shedder-tools", "--bin", "shedder-fleet-demo", "--"])
            .args(args)
            .env("SHEDDER_BIN", &daemon),
    )
}
