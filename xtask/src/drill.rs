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
            .args(drill_args(args)),
    )
}

/// What goes on to the drill: `cargo xtask drill --suite -- --seeds 4` gives
/// it `--suite --seeds 4`. The drill takes no positional argument, so a `--`
/// after xtask's first one can only be a separator typed out of habit.
fn drill_args(args: &[String]) -> impl Iterator<Item = &String> {
    args.iter().filter(|arg| *arg != "--")
}

#[cfg(test)]
mod tests {
    use super::drill_args;

    #[test]
    fn a_separator_anywhere_is_left_out() {
        for typed in [&["--suite", "--", "--seeds", "4"][..], &["--suite", "--seeds", "4"]] {
            let typed: Vec<String> = typed.iter().map(|a| a.to_string()).collect();
            assert_eq!(drill_args(&typed).collect::<Vec<_>>(), ["--suite", "--seeds", "4"]);
        }
    }
}
