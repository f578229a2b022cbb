//! A `shedder run` process on a test bed's server end, and the one-answer
//! server its end-to-end tests send real connections to.

use std::{
    io::{Read as _, Write as _},
    net::TcpListener,
    os::fd::AsRawFd as _,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use crate::{
    daemon_process::{DaemonProcess, daemon_binary},
    netns::{Netns, Testbed},
    scratch::ScratchDir,
};

/// `shedder run` in the server namespace on XDP, with `config` and the
/// control socket in a scratch directory; killed and cleaned up on drop.
/// `--no-pin`: nothing outlives the daemon.
pub struct BedDaemon {
    pub process: DaemonProcess,
    scratch: ScratchDir,
}

impl BedDaemon {
    /// Starts it and waits until its control socket listens.
    pub fn start(bed: &Testbed, config: &str) -> Self {
        Self::start_in(&bed.server, &bed.server_if, config, &[]).unwrap()
    }

    /// Starts it in `ns` on `iface`, with `more_args` (say `--metrics-addr`),
    /// and waits until its control socket listens.
    pub fn start_in(ns: &Netns, iface: &str, config: &str, more_args: &[&str]) -> anyhow::Result<Self> {
        let scratch = ScratchDir::new("shedder-bed-")?;
        let config = scratch.write("shedder.toml", config)?;
        let mut cmd = ns.command(daemon_binary());
        cmd.args(["run", "--no-pin", "--iface", iface, "--attach", "xdp", "--report-every", "60"])
            .args(more_args)
            .arg("--config")
            .arg(config)
            .arg("--socket")
            .arg(scratch.path().join("control.sock"));
        let mut process = DaemonProcess::start(&mut cmd)?;
        process.wait_for("control socket listening", Duration::from_secs(30))?;
        Ok(Self { process, scratch })
    }

    pub fn socket(&self) -> PathBuf {
        self.scratch.path().join("control.sock")
    }
}

/// Answers every connection on `listener` with "done" once it has read a
/// four-byte request, then closes it (so TIME_WAIT stays on the server and
/// the client never runs out of ports), until `stop`.
pub fn serve(listener: TcpListener, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut pfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: one valid pollfd; poll only writes its revents.
            if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
                continue;
            }
            while let Ok((mut stream, _)) = listener.accept() {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut request = [0u8; 4];
                if stream.read_exact(&mut request).is_ok() {
                    let _ = stream.write_all(b"done");
                }
            }
        }
    })
}
