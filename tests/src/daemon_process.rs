//! A real `shedder` process: its log (stdout and stderr, interleaved as
//! written) read line by line on a thread, and the process killed by its PID
//! and reaped when dropped.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc::{Receiver, RecvTimeoutError},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use nix::{sys::signal::Signal, unistd::Pid};

use crate::child::ChildGuard;

pub struct DaemonProcess {
    guard: ChildGuard,
    lines: Receiver<String>,
    /// Every line read so far, for failure messages.
    log: Vec<String>,
}

impl DaemonProcess {
    /// Starts `command`. A command run through `ip netns exec` or `setpriv`
    /// is exec'd, not forked, so the PID is the daemon's own.
    pub fn start(command: &mut Command) -> anyhow::Result<Self> {
        let (reader, writer) = std::io::pipe().context("creating a pipe for the daemon's log")?;
        command.stdin(Stdio::null()).stdout(writer.try_clone()?).stderr(writer);
        let guard = ChildGuard::spawn_owned(command, "shedder")?;
        // Drops the command's copies of the write end, so the reader sees EOF when the daemon exits.
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(Self { guard, lines, log: Vec::new() })
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.guard.id() as i32)
    }

    /// Waits for a log line containing `needle` and returns it; fails with
    /// the log so far if the daemon exits or `within` passes first.
    pub fn wait_for(&mut self, needle: &str, within: Duration) -> anyhow::Result<String> {
        let until = Instant::now() + within;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if line.contains(needle) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => bail!("no {needle:?} in the log within {within:?}:\n{}", self.log()),
                Err(RecvTimeoutError::Disconnected) => bail!("the daemon exited before {needle:?}:\n{}", self.log()),
            }
        }
    }

    /// Waits up to `within` for the daemon to exit by itself: its exit
    /// status and its whole log, or `None` (with the log so far) if it is
    /// still running.
    pub fn exit_within(&mut self, within: Duration) -> (Option<std::process::ExitStatus>, String) {
        let status = self.guard.exit_within(within);
        if status.is_some() {
            // The pipe closes with the daemon: everything it wrote is here.
            while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
                self.log.push(line);
            }
        } else {
            self.log.extend(self.lines.try_iter());
        }
        (status, self.log())
    }

    /// Every line read so far.
    pub fn log(&self) -> String {
        self.log.join("\n")
    }

    /// Sends `signal` and waits up to `grace` for the daemon to exit; returns
    /// whether it did (if not, dropping the guard kills it).
    pub fn stop(self, signal: Signal, grace: Duration) -> bool {
        self.guard.stop(signal, grace)
    }
}

/// The `shedder` binary for a test that is not in the daemon's own crate
/// (where `CARGO_BIN_EXE_shedder` names it): `$SHEDDER_BIN`, or the one cargo
/// built in the test's own `target/<profile>/` (`cargo xtask test` builds it
/// before the tests run).
pub fn daemon_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SHEDDER_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let path = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").join("shedder");
    assert!(
        path.is_file(),
        "no daemon binary at {} (`cargo xtask test` builds it; or `cargo build -p shedder-daemon --bin shedder`, \
         or set SHEDDER_BIN)",
        path.display()
    );
    path
}
