//! A [`Daemon`] served by the daemon's own owner loop ([`daemon::serve`], as
//! `shedder run` serves it) on a thread of its own, with its control socket
//! in a private directory. Stopped, joined and cleaned up on drop.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    thread::JoinHandle,
};

use shedder_daemon::{
    api::server::ControlSocket,
    daemon::{self, Daemon, Services},
    metrics,
};
use tokio::sync::oneshot;

pub struct OwnerThread {
    socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl OwnerThread {
    /// Starts the owner loop; returns once the socket accepts connections.
    pub fn start(daemon: Daemon, tag: &str) -> Self {
        Self::serve(daemon, tag, false).0
    }

    /// Starts the owner loop as `shedder run` serves it: also `/metrics` on
    /// a loopback port (returned), and the config's `[[scrape]]` targets.
    pub fn start_with_metrics_and_scrapes(daemon: Daemon, tag: &str) -> (Self, SocketAddr) {
        let (owner, metrics) = Self::serve(daemon, tag, true);
        (owner, metrics.expect("the metrics listener is bound"))
    }

    fn serve(daemon: Daemon, tag: &str, as_run: bool) -> (Self, Option<SocketAddr>) {
        let dir = std::env::temp_dir().join(format!("shedder-{tag}-{}", std::process::id()));
        let socket = dir.join("control.sock");
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let path = socket.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let mut services = Services::socket_only(ControlSocket::bind(&path, None).unwrap());
                let mut metrics_addr = None;
                if as_run {
                    let listener = metrics::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
                    metrics_addr = Some(listener.local_addr().unwrap());
                    services = Services { metrics: Some(listener), scrape: true, ..services };
                }
                ready_tx.send(metrics_addr).unwrap();
                let stopped = async {
                    let _ = stopped.await;
                };
                daemon::serve(daemon, services, stopped).await.expect("the owner loop ends cleanly");
            });
        });
        let metrics = ready.recv().expect("the owner thread bound its socket");
        (Self { socket, stop: Some(stop), thread: Some(thread) }, metrics)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stops and joins the owner; true if its socket file is gone after it.
    pub fn stop(mut self) -> bool {
        self.halt();
        !self.socket.exists()
    }

    fn halt(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the owner thread ran cleanly");
        }
    }
}

impl Drop for OwnerThread {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.stop.take().map(|s| s.send(()));
        } else {
            self.halt();
        }
        if let Some(dir) = self.socket.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
