//! The real `shedder` daemon in the server namespace, as a child process
//! under a guard: its log goes to a file beside the run's records, its
//! control socket to a path of this run. Unpinned: the drill's interfaces are
//! throwaway, so nothing may outlive it. It is stopped with SIGINT (it
//! detaches), or killed when the guard drops on any other exit path.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use nix::sys::signal::Signal;
use serde_json::json;
use shedder_testbed::{child::ChildGuard, netns::Testbed};

use crate::control::ControlClient;

/// How long the daemon may take to detach and exit after SIGINT.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

pub struct Daemon {
    /// Taken by [`Daemon::stop`]; one still here is stopped on drop.
    guard: Option<ChildGuard>,
    pub socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    /// Starts `binary` on the server's veth end with XDP and `config_text`
    /// (written with its log into `dir`), its control socket at `socket`,
    /// and waits until the socket answers (it serves after attaching).
    pub async fn start(
        testbed: &Testbed,
        binary: &Path,
        config_text: &str,
        dir: &Path,
        socket: PathBuf,
    ) -> anyhow::Result<Self> {
        let config = dir.join("shedder.toml");
        std::fs::write(&config, config_text).with_context(|| format!("writing {}", config.display()))?;
        let log = dir.join("daemon.log");
        let log_file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = testbed.server.command(binary);
        cmd.args([
            "run",
            "--iface",
            &testbed.server_if,
            "--attach",
            "xdp",
            "--report-every",
            "60",
            "--no-pin",
            "--config",
        ])
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file);
        let mut daemon = Self { guard: Some(ChildGuard::spawn_owned(&mut cmd, "the shedder daemon")?), socket, log };
        daemon.wait_serving(Duration::from_secs(30)).await?;
        Ok(daemon)
    }

    async fn wait_serving(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let until = Instant::now() + timeout;
        let mut client = ControlClient::new(&self.socket);
        loop {
            if !self.is_running() {
                bail!("the daemon exited before serving; its log:\n{}", self.log_tail());
            }
            if self.socket.exists() && client.call(&json!({"op": "version"})).await.is_ok() {
                return Ok(());
            }
            if Instant::now() > until {
                bail!("the daemon did not answer within {timeout:?}; its log:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.guard.as_mut().is_some_and(ChildGuard::is_running)
    }

    /// The last lines of its log, for an error message.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].iter().map(|l| format!("  | {l}\n")).collect()
    }

    /// SIGINT (the daemon detaches and exits); SIGKILL after `grace`.
    /// Returns whether it exited by itself.
    pub fn stop(mut self, grace: Duration) -> bool {
        self.guard.take().is_some_and(|guard| guard.stop(Signal::SIGINT, grace))
    }
}

impl Drop for Daemon {
    /// On an error or an interruption: stopped as [`Daemon::stop`] does, and
    /// its socket file removed if it was killed before removing it itself.
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            guard.stop(Signal::SIGINT, STOP_GRACE);
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}
