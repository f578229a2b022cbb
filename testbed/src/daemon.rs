//! A real `shedder` process: its log (stdout and stderr, interleaved as
//! written) read line by line on a thread, and the process killed by its PID
//! and reaped when dropped. [`Daemon`] is `shedder run` on a bed's interface
//! with its config and control socket in a scratch directory.

use std::{
    io::{BufRead as _, BufReader},
    os::{fd::AsRawFd as _, unix::fs::PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    sync::mpsc::{Receiver, RecvTimeoutError},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use nix::{
    sys::{
        signal::Signal,
        socket::{self as sock, AddressFamily, SockFlag, SockType, UnixAddr},
    },
    unistd::Pid,
};

use crate::{
    child::ChildGuard,
    netns::{Netns, Testbed},
    scratch::ScratchDir,
};

/// How long a daemon may take to be ready.
const READY_WITHIN: Duration = Duration::from_secs(30);

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

    /// True while the daemon has not exited.
    pub fn is_running(&mut self) -> bool {
        self.guard.is_running()
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
    pub fn exit_within(&mut self, within: Duration) -> (Option<ExitStatus>, String) {
        let status = self.guard.exit_within(within);
        if status.is_some() {
            // The pipe closes with the daemon: everything it wrote is here.
            while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
                self.log.push(line);
            }
        }
        (status, self.log())
    }

    /// Every line the daemon has written so far.
    pub fn log(&mut self) -> String {
        self.log.extend(self.lines.try_iter());
        self.log.join("\n")
    }

    /// Sends `signal` and waits up to `grace` for the daemon to exit: its
    /// exit status (its whole log is then in [`Self::log`]), or `None` if it
    /// is still running (dropping the guard kills it).
    pub fn stop(&mut self, signal: Signal, grace: Duration) -> Option<ExitStatus> {
        self.guard.signal(signal);
        self.exit_within(grace).0
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

/// How a test runs `shedder run`: where, on which interface, with what.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub binary: PathBuf,
    /// The namespace it runs in (`ip netns exec`, which execs: the PID is the daemon's).
    pub netns: String,
    pub iface: String,
    /// `--attach`; the daemon's own default when `None`.
    pub attach: Option<&'static str>,
    /// `--pin-root`; `--no-pin` when `None`, so that nothing outlives the daemon.
    pub pin_root: Option<PathBuf>,
    /// `--socket-group`; the scratch directory is then opened to others, so
    /// that the group's members reach the socket.
    pub socket_group: Option<&'static str>,
    /// Leaves a bound socket that never listens where the control socket
    /// goes, as a daemon that died leaves one: the daemon must replace it.
    pub stale_socket: bool,
    /// Any further arguments.
    pub extra: Vec<String>,
    /// The log line that says the daemon is ready.
    pub ready: &'static str,
}

impl DaemonOptions {
    /// `binary` in `netns` on `iface`, unpinned, ready once its control socket listens.
    pub fn new(binary: impl Into<PathBuf>, netns: &Netns, iface: &str) -> Self {
        Self {
            binary: binary.into(),
            netns: netns.name().to_string(),
            iface: iface.to_string(),
            attach: None,
            pin_root: None,
            socket_group: None,
            stale_socket: false,
            extra: Vec::new(),
            ready: "control socket listening",
        }
    }

    /// [`daemon_binary`] on XDP on a test bed's server end.
    pub fn on_server(bed: &Testbed) -> Self {
        Self { attach: Some("xdp"), ..Self::new(daemon_binary(), &bed.server, &bed.server_if) }
    }

    /// The `shedder run` command, on `dir`'s `shedder.toml` and
    /// `control.sock`: also for a run a test expects to be refused.
    pub fn command(&self, dir: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.netns])
            .arg(&self.binary)
            .args(["run", "--iface", &self.iface, "--report-every", "60", "--config"])
            .arg(dir.join("shedder.toml"))
            .arg("--socket")
            .arg(dir.join("control.sock"));
        if let Some(attach) = self.attach {
            cmd.args(["--attach", attach]);
        }
        match &self.pin_root {
            Some(root) => cmd.arg("--pin-root").arg(root),
            None => cmd.arg("--no-pin"),
        };
        if let Some(group) = self.socket_group {
            cmd.args(["--socket-group", group]);
        }
        cmd.args(&self.extra);
        cmd
    }
}

/// `shedder run` with [`DaemonOptions`], its config and control socket in a
/// scratch directory of its own; killed by its PID and cleaned up on drop.
pub struct Daemon {
    pub process: DaemonProcess,
    options: DaemonOptions,
    scratch: ScratchDir,
}

impl Daemon {
    /// Writes `config`, starts the daemon and waits until it is ready; the
    /// error carries its log.
    pub fn start(options: DaemonOptions, config: &str) -> anyhow::Result<Self> {
        let scratch = ScratchDir::new("shedder-daemon-")?;
        scratch.write("shedder.toml", config)?;
        if options.socket_group.is_some() {
            std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("opening {} to the socket's group", scratch.path().display()))?;
        }
        let process = Self::spawn(&options, &scratch)?;
        let mut daemon = Self { process, options, scratch };
        daemon.wait_ready()?;
        Ok(daemon)
    }

    /// Starts it again, on the same config file and socket, once it has stopped.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.process = Self::spawn(&self.options, &self.scratch)?;
        self.wait_ready()
    }

    fn spawn(options: &DaemonOptions, scratch: &ScratchDir) -> anyhow::Result<DaemonProcess> {
        let socket = scratch.path().join("control.sock");
        if options.stale_socket {
            leave_stale_socket(&socket)?;
        }
        DaemonProcess::start(&mut options.command(scratch.path()))
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        self.process.wait_for(self.options.ready, READY_WITHIN).map(|_| ())
    }

    pub fn socket(&self) -> PathBuf {
        self.scratch.path().join("control.sock")
    }

    pub fn config_file(&self) -> PathBuf {
        self.scratch.path().join("shedder.toml")
    }
}

/// Binds a Unix socket at `path` and never listens on it. Not a listener:
/// one, even dropped at once, could be inherited for a moment by a daemon
/// another test thread forks, and a connect to it would pass for that
/// daemon's socket being up.
fn leave_stale_socket(path: &Path) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(path);
    let stale = sock::socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
        .context("creating a stale socket")?;
    sock::bind(stale.as_raw_fd(), &UnixAddr::new(path)?).with_context(|| format!("binding {}", path.display()))?;
    Ok(())
}
