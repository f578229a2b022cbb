//! `cargo xtask bench`: the benchmarks, always in release: the fast path per
//! packet (`shedder-bench`, extra arguments go to it), the control plane's
//! CPU share (`shedder-control-bench`), the control socket's round trips
//! (the `api_bench` test, which `cargo xtask test` leaves out as a benchmark),
//! and the receive-side CPU per SYN of a flood (`shedder-flood-bench`).

use crate::{bootstrap, cmd};

pub fn run(args: &[String]) -> anyhow::Result<()> {
    bootstrap::run(bootstrap::Needs::root_with_nftables("bench"))?;
    let bench = |bin: &str, args: &[String]| {
        cmd::run(cmd::cargo().args(["run", "--release", "--package", "shedder-tools", "--bin", bin, "--"]).args(args))
    };
    bench("shedder-bench", args)?;
    bench("shedder-control-bench", &[])?;
    cmd::run(cmd::cargo().args([
        "test",
        "--release",
        "--package",
        "shedder-tests",
        "--test",
        "api_bench",
        "--",
        "--ignored",
        "--nocapture",
    ]))?;
    bench("shedder-flood-bench", &[])
}
