//! A child process that is killed (by its PID) and reaped when the guard drops.

use std::process::{Child, Command};

use anyhow::Context as _;

pub struct ChildGuard {
    child: Child,
    what: String,
}

impl ChildGuard {
    pub fn spawn(command: &mut Command, what: &str) -> anyhow::Result<Self> {
        let child = command.spawn().with_context(|| format!("starting {what}"))?;
        Ok(Self { child, what: what.to_string() })
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Asks the process to stop with `signal` and waits for it.
    pub fn stop(mut self, signal: nix::sys::signal::Signal) -> anyhow::Result<std::process::ExitStatus> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, signal);
        let status = self.child.wait().with_context(|| format!("waiting for {}", self.what))?;
        Ok(status)
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
