//! The server side: one accept loop per lane's listener, answering each
//! connection "ok", or "degraded" when its saved SYN carried a DSCP mark.

use std::{
    io::Write as _,
    net::{TcpListener, TcpStream},
    os::fd::AsRawFd as _,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
};

use anyhow::Context as _;
use shedder_testbed::saved_syn::{dscp_of, saved_syn};

use crate::READ_TIMEOUT;

/// What a connection's first line says, as the client classifies it.
fn reply_for(dscp: Option<u8>) -> String {
    match dscp {
        Some(d) if d != 0 => format!("degraded dscp={d}\n"),
        _ => "ok\n".to_string(),
    }
}

/// The DSCP of the SYN that opened `stream`, from its saved network header.
fn saved_syn_dscp(stream: &TcpStream) -> Option<u8> {
    dscp_of(&saved_syn(stream).ok()?)
}

/// Accept loops for every lane's listener, stopped and joined on drop.
pub struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Connections the servers answered, and how many of them arrived marked.
    pub accepted: Arc<AtomicU64>,
    pub marked: Arc<AtomicU64>,
}

impl Servers {
    /// One accept loop per listener, each on its own thread. The listeners are
    /// non-blocking and save their SYNs ([`shedder_testbed::netns::Testbed::listen`]).
    pub fn start(listeners: Vec<TcpListener>) -> anyhow::Result<Self> {
        let mut servers =
            Self { stop: Arc::default(), threads: Vec::new(), accepted: Arc::default(), marked: Arc::default() };
        for listener in listeners {
            let (stop, accepted, marked) = (servers.stop.clone(), servers.accepted.clone(), servers.marked.clone());
            let thread = std::thread::Builder::new()
                .name("demo-server".into())
                .spawn(move || serve(&listener, &stop, &accepted, &marked))
                .context("starting a server thread")?;
            servers.threads.push(thread);
        }
        Ok(servers)
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn serve(listener: &TcpListener, stop: &AtomicBool, accepted: &AtomicU64, marked: &AtomicU64) {
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
            continue;
        }
        let Ok((stream, _)) = listener.accept() else { continue };
        let dscp = saved_syn_dscp(&stream);
        accepted.fetch_add(1, Ordering::Relaxed);
        if dscp.is_some_and(|d| d != 0) {
            marked.fetch_add(1, Ordering::Relaxed);
        }
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_write_timeout(Some(READ_TIMEOUT));
        let _ = (&stream).write_all(reply_for(dscp).as_bytes());
    }
}
