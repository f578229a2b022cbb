//! The peers: what an inference server or its gateway does about overload
//! on its own, implemented in the staging backend from each project's
//! documentation (`docs/drill.md` cites them). Parameters are set once, by
//! the documented default or a stated rule of thumb, never per workload.
//!
//! * `queue-cap`: a request is answered 503 while the queue holds N jobs
//!   (vLLM `--max-num-queued-reqs`, SGLang `--max-queued-requests`, Triton
//!   `max_queue_size`). N = W, the worker count: none of the three has a
//!   finite default, and one queued job per worker keeps a full queue's wait
//!   near one service time.
//! * `queue-timeout`: a job that waited longer than T in the queue is
//!   answered 503 when a worker takes it off (Triton's queue policy with
//!   `timeout_action: REJECT`). T = the class's deadline: the client has
//!   given up by then.
//! * `saturation`: the Gateway API Inference Extension's saturation
//!   detector, saturated when queue depth / 5 or KV-cache use / 0.8 reaches
//!   1 (its default thresholds), KV use modelled as busy workers / W. While
//!   saturated, `sheddable` requests get 503; other tiers are never shed.

use std::sync::atomic::{AtomicUsize, Ordering};

use shedder_drill::workload::Tier;

/// The GIE saturation detector's default thresholds.
pub const SATURATION_QUEUE_DEPTH: f64 = 5.0;
pub const SATURATION_KV_USE: f64 = 0.8;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Peer {
    /// No policy of the backend's own.
    None,
    QueueCap {
        max_queued: usize,
    },
    QueueTimeout,
    Saturation,
}

/// What the backend's queue and workers hold now.
#[derive(Default)]
pub struct Load {
    queued: AtomicUsize,
    busy: AtomicUsize,
}

impl Load {
    pub fn enqueued(&self) {
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    /// A worker took a job off the queue.
    pub fn taken(&self) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
        self.busy.fetch_add(1, Ordering::Relaxed);
    }

    pub fn done(&self) {
        self.busy.fetch_sub(1, Ordering::Relaxed);
    }

    /// A worker put a job it took back in the queue (held).
    pub fn put_back(&self) {
        self.busy.fetch_sub(1, Ordering::Relaxed);
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }
}

impl Peer {
    /// The reason to refuse a request on arrival, or None to queue it.
    pub fn on_arrival(self, tier: Tier, load: &Load, workers: u32) -> Option<&'static str> {
        match self {
            Peer::QueueCap { max_queued } if load.queued() >= max_queued => Some("queue_full"),
            Peer::Saturation if tier == Tier::Sheddable && saturation(load.queued(), load.busy(), workers) >= 1.0 => {
                Some("saturated")
            }
            _ => None,
        }
    }

    /// The reason to refuse a job a worker takes off the queue after
    /// `queue_age_ms`, or None to serve it.
    pub fn on_dequeue(self, queue_age_ms: f64, deadline_ms: f64) -> Option<&'static str> {
        (self == Peer::QueueTimeout && queue_age_ms > deadline_ms).then_some("queue_timeout")
    }
}

/// max(queue depth / 5, KV use / 0.8), KV use = busy / W.
pub fn saturation(queued: usize, busy: usize, workers: u32) -> f64 {
    let kv_use = busy as f64 / f64::from(workers);
    (queued as f64 / SATURATION_QUEUE_DEPTH).max(kv_use / SATURATION_KV_USE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(queued: usize, busy: usize) -> Load {
        let load = Load::default();
        load.queued.store(queued, Ordering::Relaxed);
        load.busy.store(busy, Ordering::Relaxed);
        load
    }

    #[test]
    fn each_peer_refuses_what_its_documentation_says() {
        // (peer, tier, queued, busy, refused on arrival) with W = 10.
        let table = [
            (Peer::None, Tier::Sheddable, 100, 10, None),
            (Peer::QueueCap { max_queued: 10 }, Tier::Critical, 9, 10, None),
            (Peer::QueueCap { max_queued: 10 }, Tier::Critical, 10, 10, Some("queue_full")),
            (Peer::Saturation, Tier::Sheddable, 4, 7, None),
            (Peer::Saturation, Tier::Sheddable, 5, 0, Some("saturated")),
            (Peer::Saturation, Tier::Sheddable, 0, 8, Some("saturated")),
            (Peer::Saturation, Tier::Standard, 50, 10, None),
            (Peer::Saturation, Tier::Critical, 50, 10, None),
            (Peer::QueueTimeout, Tier::Sheddable, 100, 10, None),
        ];
        for (peer, tier, queued, busy, expected) in table {
            assert_eq!(peer.on_arrival(tier, &load(queued, busy), 10), expected, "{peer:?} {tier:?} {queued} {busy}");
        }
        assert_eq!(Peer::QueueTimeout.on_dequeue(1001.0, 1000.0), Some("queue_timeout"));
        assert_eq!(Peer::QueueTimeout.on_dequeue(1000.0, 1000.0), None);
        assert_eq!(Peer::QueueCap { max_queued: 1 }.on_dequeue(1e9, 1.0), None);
    }

    #[test]
    fn saturation_is_the_larger_of_the_two_ratios() {
        assert_eq!(saturation(0, 4, 10), 0.5);
        assert_eq!(saturation(10, 4, 10), 2.0);
    }
}
