//! What the drill's integration tests share: running `shedder-drill` with
//! the daemon the tests were built beside (or `$SHEDDER_BIN`).

use std::ffi::OsStr;
use std::process::Command;

use shedder_testbed::daemon::daemon_binary;

/// Runs the drill with `args` and returns its standard output; fails the
/// test, with both outputs, if it fails.
pub fn run_drill<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let run = Command::new(env!("CARGO_BIN_EXE_shedder-drill"))
        .arg("--daemon")
        .arg(daemon_binary())
        .args(args)
        .output()
        .expect("running shedder-drill");
    assert!(
        run.status.success(),
        "shedder-drill failed ({}):\n{}{}",
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8_lossy(&run.stdout).into_owned()
}
