//! The backend's frontend cost: real CPU burnt per request, on a bounded
//! pool of threads, before the request queues. An inference server's HTTP
//! frontend (often Python) spends about a millisecond accepting, parsing and
//! answering each request, and a refusal inside the server pays it too; a
//! SYN refused at the NIC never reaches it.

use std::{
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use tokio::sync::oneshot;

/// A pool of `threads` threads, each burning one request's cost at a time.
/// The threads end when the pool is dropped.
pub struct FrontendPool {
    work: Mutex<mpsc::Sender<oneshot::Sender<()>>>,
}

impl FrontendPool {
    pub fn start(cost: Duration, threads: u32) -> anyhow::Result<Arc<Self>> {
        let (work, waiting) = mpsc::channel::<oneshot::Sender<()>>();
        let waiting = Arc::new(Mutex::new(waiting));
        for i in 0..threads {
            let waiting = waiting.clone();
            std::thread::Builder::new().name(format!("frontend-{i}")).spawn(move || {
                loop {
                    let next = waiting.lock().unwrap().recv();
                    let Ok(done) = next else { return };
                    burn(cost);
                    let _ = done.send(());
                }
            })?;
        }
        Ok(Arc::new(Self { work: Mutex::new(work) }))
    }

    /// Waits for a free frontend thread to burn this request's cost.
    pub async fn pay(&self) {
        let (done, burnt) = oneshot::channel();
        if self.work.lock().unwrap().send(done).is_ok() {
            let _ = burnt.await;
        }
    }
}

/// Spins on the CPU for `cost` (not a sleep: the point is the CPU).
fn burn(cost: Duration) {
    let until = Instant::now() + cost;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_queue_for_the_bounded_threads() {
        let cost = Duration::from_millis(20);
        let pool = FrontendPool::start(cost, 1).unwrap();
        let started = Instant::now();
        tokio::join!(pool.pay(), pool.pay(), pool.pay());
        // One thread: three costs in a row, not at once.
        assert!(started.elapsed() >= 3 * cost, "{:?}", started.elapsed());
    }
}
