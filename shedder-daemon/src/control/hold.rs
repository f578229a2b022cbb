//! The queue hold: a standing queue longer than the deadlines can absorb is
//! drained, though the rates see no overload.
//!
//! The capacity model works in rates: admit what the workers finish. A
//! queue that already stands (a backlog from before the daemon started, or
//! one the rates let build) is invisible to it: arrivals equal to
//! completions keep it exactly as long as it is, and every job in it waits
//! that long. So while the rates see no overload (demand within capacity)
//! and a wait exceeds its target, admission is held below capacity by the
//! excess work, spread over [`DRAIN_S`]. (Where the rates do see overload,
//! the allotments already cut, and a second answer to the same queue, on
//! readings that lag, only idles workers.)
//!
//! ```text
//! target    = room           room = deadline − safety − service term, the
//!                            wait a job can take and keep its on-time chance:
//!                            of the class whose jobs waited, or, for a live
//!                            queue depth, of the tightest class with work offered
//! excess    = max over the freshest readings of (wait − target) · capacity
//!                                                worker-seconds queued too many
//! admission = max(available − excess / DRAIN_S, available / 2)
//! ```
//!
//! The freshest readings: the classes wait in one queue, and each reads it
//! over the shortest horizon that holds enough of its own jobs. A class
//! whose jobs are seldom let in reads it seconds back, past waits long
//! gone, and a hold on such a reading idles workers beside a queue its
//! busier neighbours see empty. So only the classes read over the shortest
//! horizon count (a live queue depth is read now).
//!
//! Each wait against its own class's room: the classes share the workers
//! but not the order in which they get them. A lower tier's jobs wait
//! while a higher tier's go first (`admit` holds them), so its wait is
//! longer than the queue a tighter class stands in, and costs nothing
//! while within its own room. Held against the tightest class's room, that
//! wait drained admission, the tighter class's included, for a queue the
//! tighter class never saw. In a queue all classes stand in alike, the
//! tightest class's reading has the most excess; and a live queue depth is
//! the queue every class's next job would stand in, so it is held against
//! the tightest room.
//!
//! The whole room: a queue shorter than that costs no job its chance and
//! keeps every worker fed, so a busy but healthy backend, whose waits come
//! and go, is never held; a longer one makes every job in it a likely miss.
//! (Half the room was tried: with a long service tail the wait readings,
//! taken as jobs leave the queue and lagging by seconds, cross it often
//! enough that the hold flapped and idled workers.)

use serde::Serialize;

/// Over how long the excess is drained, s: a few times the lag of the wait
/// readings (about a second), so that the drain does not overshoot into an
/// empty queue.
pub const DRAIN_S: f64 = 2.0;

/// The least share of the available capacity admission keeps while
/// draining: the wait readings lag the queue by seconds when few jobs leave
/// it, and a hold that shut admission on them would idle the workers after
/// the queue is gone.
pub const MIN_ADMISSION: f64 = 0.5;

/// One class's reading of the queue it shares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WaitReading {
    /// Its queue term, ms.
    pub wait_ms: f64,
    /// The wait its jobs can take, ms.
    pub room_ms: f64,
    /// How far back the wait was read, ms (0 for a live queue depth).
    pub horizon_ms: u64,
}

impl WaitReading {
    /// Read from the live queue depth: the wait a job of any class arriving
    /// now would stand in, not one class's jobs' past waits.
    fn live(&self) -> bool {
        self.horizon_ms == 0
    }
}

/// The hold at one tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Hold {
    /// The queue's wait, ms: of the freshest reading (over the shortest
    /// horizon, of classes with work offered) furthest past its room.
    pub wait_ms: f64,
    /// That reading's target, ms: its class's room, or the tightest
    /// class's for a live queue depth.
    pub target_ms: f64,
    /// Worker-seconds per second taken off admission to drain the excess.
    pub drain: f64,
}

impl Hold {
    /// From each class's [`WaitReading`], for classes with work offered and
    /// measured waits; `capacity` in worker-seconds per second.
    pub fn measure(classes: impl IntoIterator<Item = WaitReading>, capacity: f64) -> Hold {
        let classes: Vec<WaitReading> = classes.into_iter().collect();
        let tightest_ms = classes.iter().map(|r| r.room_ms.max(0.0)).fold(f64::INFINITY, f64::min);
        let target_ms = |r: &WaitReading| if r.live() { tightest_ms } else { r.room_ms.max(0.0) };
        let past_room_ms = |r: &WaitReading| r.wait_ms - target_ms(r);
        let mut worst: Option<WaitReading> = None;
        for r in classes.iter().copied() {
            let replaces = worst.is_none_or(|w| {
                r.horizon_ms < w.horizon_ms || (r.horizon_ms == w.horizon_ms && past_room_ms(&r) > past_room_ms(&w))
            });
            if replaces {
                worst = Some(r);
            }
        }
        let Some(worst) = worst else {
            return Hold::default();
        };
        let excess = past_room_ms(&worst).max(0.0) / 1000.0 * capacity;
        Hold {
            wait_ms: worst.wait_ms,
            target_ms: target_ms(&worst),
            drain: if capacity.is_finite() { excess / DRAIN_S } else { 0.0 },
        }
    }

    /// A standing queue is being drained.
    pub fn draining(&self) -> bool {
        self.drain > 0.0
    }

    /// What admission may use out of `available` worker-seconds per second.
    pub fn admission(&self, available: f64) -> f64 {
        (available - self.drain).max(available * MIN_ADMISSION)
    }

    /// The hold in words, for decisions; empty when it does not bind.
    pub fn words(&self) -> String {
        if !self.draining() {
            return String::new();
        }
        format!(
            "queue wait {:.0} ms over its hold of {:.0} ms: draining {:.2} worker-s/s, no headroom",
            self.wait_ms, self.target_ms, self.drain
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_only_a_queue_past_the_room() {
        let at = |wait_ms, room_ms, horizon_ms| WaitReading { wait_ms, room_ms, horizon_ms };
        let read = |wait_ms, room_ms| at(wait_ms, room_ms, 1_000);
        /// (classes' readings, capacity, drain worker-s/s)
        type Case<'a> = (&'a [WaitReading], f64, f64);
        let cases: &[Case] = &[
            (&[read(300.0, 2_000.0)], 8.0, 0.0),                           // a healthy busy queue
            (&[read(2_000.0, 2_000.0)], 8.0, 0.0),                         // at the target
            (&[read(3_000.0, 1_000.0)], 8.0, 8.0),                         // 2 s over: 16 worker-s over 2 s
            (&[read(400.0, 3_000.0), read(400.0, 300.0)], 8.0, 0.4),       // one queue: the tightest class sets it
            (&[read(1_500.0, 2_000.0), read(40.0, 60.0)], 8.0, 0.0),       // a patient class waits longer, in its room
            (&[read(2_100.0, 2_000.0), read(40.0, 60.0)], 8.0, 0.4),       // ... past its room, its excess counts
            (&[read(100.0, -50.0)], 8.0, 0.4),                             // no room at all: any wait is too much
            (&[at(3_000.0, 9_000.0, 12_000), read(1.0, 100.0)], 8.0, 0.0), // a thin class's old wait
            (&[at(3_000.0, 9_000.0, 12_000), read(200.0, 100.0)], 8.0, 0.4), // ... the fresh one counts
            (&[at(600.0, 9_000.0, 0), read(50.0, 100.0)], 8.0, 2.0),       // a live depth is freshest
            (&[], 8.0, 0.0),                                               // nobody offers work
            (&[read(3_000.0, 1_000.0)], f64::INFINITY, 0.0),               // no capacity known
        ];
        for &(classes, capacity, drain) in cases {
            let hold = Hold::measure(classes.iter().copied(), capacity);
            assert!((hold.drain - drain).abs() < 1e-9, "{classes:?}: {hold:?}");
            assert_eq!(hold.draining(), drain > 0.0);
            assert_eq!(hold.admission(5.0), (5.0 - drain).max(2.5));
        }
        // Never below half of what is available: the readings lag.
        assert_eq!(Hold::measure([read(9_000.0, 1_000.0)], 8.0).admission(5.0), 2.5);
        assert_eq!(Hold::measure([read(300.0, 2_000.0)], 8.0).words(), "");
        assert_eq!(
            Hold::measure([read(3_000.0, 1_000.0)], 8.0).words(),
            "queue wait 3000 ms over its hold of 1000 ms: draining 8.00 worker-s/s, no headroom"
        );
    }
}
