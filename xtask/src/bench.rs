//! `cargo xtask bench`: the benchmarks, always in release: the fast path per
//! packet (`shedder-bench`, extra arguments go to it), then the control
//! plane's CPU share (`shedder-control-bench`).

use crate::{bootstrap, cmd};

pub fn run(args: &[String]) -> anyhow::Result<()> {
    bootstrap::run(bootstrap::Needs::root("bench"))?;
    let bench = |bin: &str, args: &[String]| {
        cmd::run(cmd::cargo().args(["run", "--release", "--package", "shedder-tests", "--bin", bin, "--"]).args(args))
    };
    bench("shedder-bench", args)?;
    bench("shedder-control-bench", &[])
}
