//! How contested the workers are: the chance that a job arriving now finds
//! every worker busy.
//!
//! `admit` refuses a job whose on-time chance has fallen below the class's
//! threshold because its worker-seconds would yield more given to a fresher
//! job. Where one is queued behind it, it would. Where none is, the worker
//! would idle until the next arrival, and the refusal gives up a job still
//! likely to make it for what that arrival might lose by waiting. So with
//! none queued behind, `admit` weighs the threshold by the chance that an
//! arrival finds every worker busy: Erlang's C formula for `c` workers
//! offered `a` worker-seconds per second,
//!
//! ```text
//! B(0) = 1,  B(k) = a·B(k−1) / (k + a·B(k−1))          (Erlang B)
//! C    = c·B(c) / (c − a·(1 − B(c)))   for a < c;  1 from a ≥ c
//! ```
//!
//! Its assumptions (Poisson arrivals, exponential service) hold only
//! roughly; what it has that matters here is its shape: near 0 with many
//! workers at half load, near 1 as the load nears them, and 1 past them.
//!
//! The load offered is the classes' demand less the work `admit` refused,
//! and at least the work being done: a job refused at the server never
//! takes a worker. Counting it had a class whose every job was refused
//! read its workers as all contested while they idled, and so refused the
//! next job too.

/// The chance that a job arriving at `workers` workers offered `load`
/// worker-seconds per second finds them all busy (`workers` rounded to whole
/// workers, at least one).
pub fn all_busy_chance(workers: f64, load: f64) -> f64 {
    let c = workers.round().max(1.0);
    if !load.is_finite() || load >= c {
        return 1.0;
    }
    if load <= 0.0 {
        return 0.0;
    }
    let mut blocking = 1.0;
    for k in 1..=c as u64 {
        blocking = load * blocking / (k as f64 + load * blocking);
        // Past the load it falls faster than geometrically; once it is
        // nothing, the workers left cannot all be busy.
        if blocking == 0.0 {
            break;
        }
    }
    (c * blocking / (c - load * (1.0 - blocking))).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_finds_every_worker_busy_more_often_as_the_load_nears_them() {
        // (workers, load, chance): M/M/c's textbook figures.
        let rows = [
            (1.0, 0.5, 0.5), // one worker: the load itself
            (2.0, 1.0, 1.0 / 3.0),
            (2.0, 1.28, 0.4995),
            (14.0, 7.0, 0.0142),
            (14.0, 13.0, 0.7138),
            (4.0, 0.0, 0.0),
            (4.0, 4.0, 1.0), // at the workers, and past them
            (4.0, 9.0, 1.0),
            (0.2, 0.1, 0.1),   // less than a worker reads as one
            (4.0e9, 7.0, 0.0), // a count no backend has: answered at once
        ];
        for (workers, load, chance) in rows {
            let got = all_busy_chance(workers, load);
            assert!((got - chance).abs() < 5e-4, "{workers} workers at {load}: {got}, want {chance}");
        }
        assert_eq!(all_busy_chance(4.0, f64::INFINITY), 1.0);
    }
}
