//! A [`Daemon`] run the way `shedder run` runs it — one owner thread that
//! ticks the controller and serves jobs — with its control socket in a
//! private directory. Stopped, joined and cleaned up on drop.

use std::{
    path::{Path, PathBuf},
    thread::JoinHandle,
    time::Duration,
};

use shedder_daemon::{
    api::server::{AccessPolicy, ControlSocket},
    daemon::{Daemon, DaemonHandle},
};
use tokio::sync::oneshot;

pub struct OwnerThread {
    socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl OwnerThread {
    /// Starts the owner loop; returns once the socket accepts connections.
    pub fn start(mut daemon: Daemon, tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("shedder-{tag}-{}", std::process::id()));
        let socket = dir.join("control.sock");
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let path = socket.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let mut listener = ControlSocket::bind(&path, None).unwrap();
                let (handle, mut jobs) = DaemonHandle::channel(256);
                let _server = listener.serve(handle, AccessPolicy::default());
                ready_tx.send(()).unwrap();
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        _ = tick.tick() => { daemon.tick().unwrap(); }
                        Some(job) = jobs.recv() => job(&mut daemon),
                    }
                }
            });
        });
        ready.recv().expect("the owner thread bound its socket");
        Self { socket, stop: Some(stop), thread: Some(thread) }
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
