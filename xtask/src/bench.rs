//! `cargo xtask bench`: the benchmarks (`shedder-bench`), always in release.

use crate::{bootstrap, cmd};

pub fn run(args: &[String]) -> anyhow::Result<()> {
    bootstrap::run(bootstrap::Needs::root("bench"))?;
    cmd::run(
        cmd::cargo()
            .args(["run", "--release", "--package", "shedder-tests", "--bin", "shedder-bench", "--"])
            .args(args),
    )
}
