//! A backend: accepts every connection on its listeners and answers it the
//! one way it was told, on a thread that stops when the guard drops.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    os::fd::AsRawFd as _,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

/// What the backend does with each accepted connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Closes it at once: the connect succeeded, that is all a test needs.
    Close,
    /// Reads a four-byte request, writes "done" and closes, so TIME_WAIT
    /// stays on the server and a client never runs out of ports.
    Done,
}

pub struct Backend {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Backend {
    /// Serves `listeners`, which must be non-blocking (e.g.
    /// [`crate::netns::Testbed::listen`]), until dropped.
    pub fn serve(listeners: Vec<TcpListener>, answer: Answer) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || serve(&listeners, answer, &stop))
        };
        Self { stop, thread: Some(thread) }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(listeners: &[TcpListener], answer: Answer, stop: &AtomicBool) {
    let mut polled: Vec<libc::pollfd> =
        listeners.iter().map(|l| libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: a valid array of pollfds of the stated length; poll only writes their revents.
        if unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 100) } <= 0 {
            continue;
        }
        for listener in listeners {
            while let Ok((stream, _)) = listener.accept() {
                respond(stream, answer);
            }
        }
    }
}

fn respond(mut stream: TcpStream, answer: Answer) {
    if answer == Answer::Done {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut request = [0u8; 4];
        if stream.read_exact(&mut request).is_ok() {
            let _ = stream.write_all(b"done");
        }
    }
}
