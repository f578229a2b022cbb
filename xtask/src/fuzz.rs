//! `cargo xtask fuzz`: the three fuzz suites at a large scale, in release:
//! the differential packet fuzzer (`fuzz_packets`), the control socket
//! (`fuzz_socket`) and the config property tests (`config_props`).
//! `cargo xtask test` runs the same suites at scale 1, CI-sized.

use crate::{bootstrap, cmd};

#[derive(clap::Args)]
pub struct Args {
    /// Multiplies every suite's size: 100,000 frames, 10,000 socket lines
    /// and 256 configs at scale 1.
    #[arg(long, default_value_t = 20)]
    scale: u64,
    /// Seed for all three suites (each prints the one it used); by default each suite's own.
    #[arg(long)]
    seed: Option<u64>,
}

/// (package, test) of each suite.
const SUITES: [(&str, &str); 3] =
    [("shedder-tests", "fuzz_packets"), ("shedder-daemon", "fuzz_socket"), ("shedder-daemon", "config_props")];

pub fn run(args: Args) -> anyhow::Result<()> {
    bootstrap::run(bootstrap::Needs::root("fuzz"))?;
    for (package, test) in SUITES {
        let mut cargo = cmd::cargo();
        cargo.args(["test", "--release", "--package", package, "--test", test, "--", "--nocapture"]);
        cargo.env("SHEDDER_FUZZ_SCALE", args.scale.to_string());
        if let Some(seed) = args.seed {
            cargo.env("SHEDDER_FUZZ_SEED", seed.to_string());
        }
        cmd::run(&mut cargo)?;
    }
    Ok(())
}
