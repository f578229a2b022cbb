//! A child process that is killed (by its PID) and reaped when the guard drops.

use std::{
    os::unix::process::CommandExt as _,
    process::{Child, Command},
    time::{Duration, Instant},
};

use anyhow::Context as _;

pub struct ChildGuard {
    child: Child,
}

impl ChildGuard {
    pub fn spawn(command: &mut Command, what: &str) -> anyhow::Result<Self> {
        let child = command.spawn().with_context(|| format!("starting {what}"))?;
        Ok(Self { child })
    }

    /// Spawns `command` as a helper this process owns: in its own process
    /// group, so a terminal's Ctrl-C reaches only us and we stop it in order;
    /// and sent SIGTERM if we die without cleaning up (SIGKILL).
    pub fn spawn_owned(command: &mut Command, what: &str) -> anyhow::Result<Self> {
        command.process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Self::spawn(command, what)
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `within` for the process to exit by itself; its status.
    pub fn exit_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + within;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
                _ => return None,
            }
        }
    }

    /// Sends `signal` (by its PID) while the process runs: never to a PID it
    /// no longer owns.
    pub fn signal(&mut self, signal: nix::sys::signal::Signal) {
        if self.is_running() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, signal);
        }
    }

    /// Asks the process to stop with `signal`, and waits up to `grace` for it
    /// (dropping the guard kills and reaps one that has not exited).
    /// Returns whether it exited by itself.
    pub fn stop(mut self, signal: nix::sys::signal::Signal, grace: Duration) -> bool {
        self.signal(signal);
        self.exit_within(grace).is_some()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
