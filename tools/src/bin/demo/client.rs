//! The client side: per lane, new connections at a steady pace, each attempt
//! on its own thread, counted by what came of it.

use std::{
    io::Read as _,
    net::{SocketAddr, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use shedder_testbed::netns::Testbed;

use crate::{
    READ_TIMEOUT,
    lanes::{ClientCounts, Lane},
};

/// Attempts of one class allowed in flight at once; more are counted as skipped.
const MAX_IN_FLIGHT: u64 = 64;

enum Outcome {
    Ok,
    Degraded,
    Refused,
    TimedOut,
    Error(String),
}

fn attempt(addr: SocketAddr, connect_timeout: Duration) -> Outcome {
    use std::io::ErrorKind;
    let stream = match TcpStream::connect_timeout(&addr, connect_timeout) {
        Ok(stream) => stream,
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Outcome::Refused,
        Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => return Outcome::TimedOut,
        Err(e) => return Outcome::Error(format!("connect: {e}")),
    };
    let mut reply = String::new();
    let read =
        stream.set_read_timeout(Some(READ_TIMEOUT)).and_then(|()| (&stream).take(256).read_to_string(&mut reply));
    match read {
        Ok(_) if reply.trim() == "ok" => Outcome::Ok,
        Ok(_) if reply.starts_with("degraded") => Outcome::Degraded,
        Ok(_) => Outcome::Error(format!("unexpected reply {:?}", reply.trim())),
        Err(e) => Outcome::Error(format!("reading the reply: {e}")),
    }
}

impl ClientCounts {
    fn record(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Ok => &self.ok,
            Outcome::Degraded => &self.degraded,
            Outcome::Refused => &self.refused,
            Outcome::TimedOut => &self.timed_out,
            Outcome::Error(message) => {
                *self.last_error.lock().unwrap() = Some(message);
                &self.errors
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Opens `rate` connections a second to `port` until `deadline` (or a stop),
/// each on its own short-lived thread so timeouts do not slow the pace. Runs
/// in the client namespace: threads it starts inherit it. Returns once every
/// attempt has finished.
fn drive(
    lanes: Arc<Vec<Lane>>,
    index: usize,
    rate: u64,
    connect_timeout: Duration,
    deadline: Instant,
    stop: Arc<AtomicBool>,
) {
    let lane = &lanes[index];
    let addr = SocketAddr::from((Testbed::SERVER_V4, lane.port));
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let max_attempts = rate * 120;
    let mut next = Instant::now();
    let mut started = 0;
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline && started < max_attempts {
        let now = Instant::now();
        if next > now {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        // After a stall (a busy 2-core machine), resume the pace rather than burst to catch up.
        next = next.max(now.checked_sub(interval).unwrap_or(now)) + interval;
        started += 1;
        let counts = &lane.client;
        if counts.in_flight.load(Ordering::SeqCst) >= MAX_IN_FLIGHT {
            counts.skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        counts.attempts.fetch_add(1, Ordering::Relaxed);
        counts.in_flight.fetch_add(1, Ordering::SeqCst);
        let lanes = lanes.clone();
        let spawned = std::thread::Builder::new().name("demo-connect".into()).spawn(move || {
            let counts = &lanes[index].client;
            counts.record(attempt(addr, connect_timeout));
            counts.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
        if let Err(e) = spawned {
            counts.record(Outcome::Error(format!("starting a connect thread: {e}")));
            counts.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
    // Every attempt ends within connect_timeout + READ_TIMEOUT.
    let give_up = Instant::now() + connect_timeout + READ_TIMEOUT + Duration::from_secs(2);
    while lane.client.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The per-lane load threads, stopped and joined on drop.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Load {
    /// Drives every lane at `rate` new connections a second for `seconds`,
    /// from inside the client namespace.
    pub fn start(
        testbed: &Testbed,
        lanes: &Arc<Vec<Lane>>,
        rate: u64,
        seconds: u64,
        connect_timeout: Duration,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let threads = (0..lanes.len())
            .map(|i| {
                let (lanes, stop) = (lanes.clone(), stop.clone());
                testbed.client.spawn(move || drive(lanes, i, rate, connect_timeout, deadline, stop))
            })
            .collect();
        Self { stop, threads }
    }

    pub fn finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Stops (if still running) and waits for every attempt to finish.
    pub fn join(mut self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            thread.join().map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        }
        Ok(())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
