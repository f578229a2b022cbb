//! The real `shedder` daemon, run in the server namespace with its log piped
//! to a reader thread, and stopped the way a user would stop it (SIGINT).

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::Stdio,
    sync::{Arc, Mutex},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use nix::sys::signal::Signal;
use shedder_testbed::{child::ChildGuard, netns::Testbed};

use crate::{daemon_log::DaemonView, signals::stopping};

/// The daemon, running in the server namespace, and the thread reading its log.
pub struct Daemon {
    pub guard: ChildGuard,
    pub view: Arc<Mutex<DaemonView>>,
    reader: JoinHandle<()>,
}

impl Daemon {
    /// Runs `binary` on the server's veth end with XDP, reporting every
    /// second, with `config`. Unpinned: the demo's interfaces are throwaway,
    /// so nothing may outlive it.
    pub fn start(testbed: &Testbed, binary: &Path, config: &Path) -> anyhow::Result<Self> {
        let (reader, writer) = std::io::pipe().context("creating a pipe for the daemon's log")?;
        let mut cmd = testbed.server.command(binary);
        cmd.args(["run", "--iface", &testbed.server_if, "--attach", "xdp", "--report-every", "1", "--no-pin"]);
        cmd.arg("--config").arg(config);
        cmd.env("RUST_LOG", "info").stdin(Stdio::null()).stdout(writer.try_clone()?).stderr(writer);
        // The demo stops the daemon itself, after reading its final counters.
        let guard = ChildGuard::spawn_owned(&mut cmd, "the shedder daemon")?;
        drop(cmd); // closes our copies of the pipe's write end, so the reader sees EOF when the daemon exits
        let view = Arc::new(Mutex::new(DaemonView::default()));
        let reader = {
            let view = view.clone();
            std::thread::Builder::new().name("daemon-log".into()).spawn(move || {
                for line in BufReader::new(reader).lines() {
                    let Ok(line) = line else { break };
                    view.lock().unwrap().read_line(&line);
                }
            })?
        };
        Ok(Self { guard, view, reader })
    }

    pub fn recent_log(&self) -> String {
        self.view.lock().unwrap().recent.iter().map(|l| format!("  | {l}\n")).collect()
    }

    /// Waits for the daemon's "attached" line.
    pub fn wait_attached(&mut self, timeout: Duration) -> anyhow::Result<String> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(line) = self.view.lock().unwrap().attached.take() {
                return Ok(line);
            }
            if !self.guard.is_running() {
                std::thread::sleep(Duration::from_millis(100)); // let the reader catch the last lines
                bail!("the daemon exited before attaching; its output:\n{}", self.recent_log());
            }
            if stopping() {
                bail!("interrupted while waiting for the daemon to attach");
            }
            if Instant::now() > until {
                bail!("the daemon did not attach within {timeout:?}; its output:\n{}", self.recent_log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (bounded) until the daemon has logged one more full report, so
    /// its counters include every attempt that has finished.
    pub fn wait_next_report(&mut self, classes: usize, timeout: Duration) {
        let start = self.view.lock().unwrap().reports;
        let until = Instant::now() + timeout;
        while self.view.lock().unwrap().reports < start + classes as u64
            && Instant::now() < until
            && self.guard.is_running()
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGINT (the daemon detaches and exits); SIGKILL after `grace`.
    /// Returns whether it exited cleanly.
    pub fn stop(self, grace: Duration) -> bool {
        let Daemon { guard, view, reader } = self;
        let exited = guard.stop(Signal::SIGINT, grace);
        let _ = reader.join(); // the pipe closed with the daemon: the last lines are in
        exited && view.lock().unwrap().detached
    }
}
