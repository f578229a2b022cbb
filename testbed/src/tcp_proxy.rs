//! A loopback TCP proxy whose link can be slowed down or cut, to show a
//! client what a slow or unreachable server looks like.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, Shutdown, TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

/// What the link does to the bytes crossing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    Open,
    /// Every chunk is held this long before it is passed on.
    Delay(Duration),
    /// Connections are closed, and new ones closed as soon as accepted.
    Cut,
}

struct Shared {
    link: Mutex<Link>,
    streams: Mutex<Vec<TcpStream>>,
    stop: AtomicBool,
}

pub struct TcpProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:target`.
    pub fn start(target: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            link: Mutex::new(Link::Open),
            streams: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let acceptor = {
            let shared = shared.clone();
            thread::spawn(move || accept(listener, target, &shared))
        };
        Ok(Self { port, shared, acceptor: Some(acceptor) })
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn set(&self, link: Link) {
        *self.shared.link.lock().unwrap() = link;
        if link == Link::Cut {
            close_all(&self.shared);
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        close_all(&self.shared);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn close_all(shared: &Shared) {
    for stream in shared.streams.lock().unwrap().drain(..) {
        let _ = stream.shutdown(Shutdown::Both);
    }
}

fn accept(listener: TcpListener, target: u16, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let Ok((client, _)) = listener.accept() else {
            thread::sleep(Duration::from_millis(5));
            continue;
        };
        if *shared.link.lock().unwrap() == Link::Cut {
            continue;
        }
        let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else { continue };
        let _ = client.set_nonblocking(false);
        for (from, to) in [(&client, &server), (&server, &client)] {
            let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else { continue };
            shared.streams.lock().unwrap().extend(from.try_clone());
            let shared = shared.clone();
            thread::spawn(move || pump(from, to, &shared));
        }
    }
}

/// Copies one direction, holding each chunk for the link's delay (a second
/// thread writes, so that delays do not add up).
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Arc<Shared>) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = thread::spawn(move || {
        for (due, chunk) in rx {
            let wait = due.saturating_duration_since(Instant::now());
            thread::sleep(wait);
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let delay = match *shared.link.lock().unwrap() {
            Link::Open => Duration::ZERO,
            Link::Delay(delay) => delay,
            Link::Cut => break,
        };
        if tx.send((Instant::now() + delay, buffer[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.join();
}
