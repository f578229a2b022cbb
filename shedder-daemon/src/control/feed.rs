//! The headroom that keeps a trimmed queue fed.
//!
//! While `admit` refuses a class's jobs that waited past their room (the
//! time a job may wait and still make its deadline), the queue can hold
//! only the jobs that arrived within one room. The workers then idle
//! whenever fewer jobs arrive over a room than finish in it, however deep
//! the backlog outside. With `μ` jobs/s finished and a budget of
//! `μ·(1 + h)`, a room of `τ` s sees `μτ(1 + h)` arrivals on average,
//! Poisson, against `μτ` finished: a surplus of `h·μτ`, whose shortfall
//! below zero the budget must make rare. `h = k/√(μτ)` keeps the surplus
//! `k` standard deviations of the arrivals (about `√(μτ)`) above it. A
//! room of many jobs needs little more than the base headroom; a tight
//! deadline (a room of a few jobs) needs much more, and its surplus costs
//! only refusals at the server, which the trimming does anyway.

/// Standard deviations of a room's arrivals the surplus covers.
const SURPLUS_DEVIATIONS: f64 = 2.0;

/// At most this: twice what the allotment finishes.
const MAX_HEADROOM: f64 = 1.0;

/// The headroom for a class whose allotment finishes `jobs_per_s`, with
/// `room_ms` of waiting its jobs can afford: at least `base`.
pub fn headroom(base: f64, jobs_per_s: f64, room_ms: f64) -> f64 {
    let per_room = jobs_per_s * room_ms.max(0.0) / 1000.0;
    if per_room <= 0.0 {
        return base;
    }
    (SURPLUS_DEVIATIONS / per_room.sqrt()).clamp(base, MAX_HEADROOM.max(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headroom_covers_a_rooms_arrivals_and_no_less_than_the_base() {
        // (base, jobs/s finished, room ms, headroom)
        let rows = [
            (0.25, 40.0, 250.0, 2.0 / 10.0_f64.sqrt()), // 10 jobs a room
            (0.25, 100.0, 30_000.0, 0.25),              // 3000 jobs a room: the base
            (0.25, 2.0, 100.0, 1.0),                    // a fifth of a job: at most twice
            (0.25, 40.0, -50.0, 0.25),                  // no room at all: nothing to feed
            (0.25, 0.0, 250.0, 0.25),                   // an allotment of nothing
            (1.5, 40.0, 250.0, 1.5),                    // a configured base above both
        ];
        for (base, jobs, room, expect) in rows {
            let h = headroom(base, jobs, room);
            assert!((h - expect).abs() < 1e-9, "{base} {jobs}/s {room} ms: {h}, not {expect}");
        }
    }
}
