//! How much of the backend a lower tier may use before the wait it causes
//! costs a higher tier its deadlines.
//!
//! Jobs of every class wait in one queue, so a lower tier's work delays a
//! higher tier's jobs even when the higher tier's own demand is small: with
//! heavy-tailed jobs, a backend busy 95% of the time makes everyone wait.
//! The mean wait of a G/G/c queue is, after Sakasegawa (1977),
//!
//! ```text
//! Wq ≈ E[S] · ρ^(√(2(c+1)) − 1) / (c·(1 − ρ)) · (ca² + cs²) / 2
//! ```
//!
//! with `c` workers, utilisation `ρ`, Poisson arrivals (`ca² = 1`) and `cs²`
//! the squared coefficient of variation of the mixed service time. A class
//! can afford a wait of `room = deadline − safety − its service term`; a
//! wait's p95 is about three times its mean (an exponential tail), so the
//! highest utilisation at which the class keeps its room is the `ρ` where
//! `3 · Wq(ρ) = room`. Found by bisection: `Wq` rises monotonically in `ρ`.

/// A wait's p95 over its mean, taken as an exponential's (ln 20 ≈ 3).
pub const P95_OVER_MEAN: f64 = 3.0;

/// Sakasegawa's mean wait, ms, at utilisation `rho` of `workers`.
pub fn mean_wait_ms(rho: f64, workers: f64, mean_ms: f64, cs2: f64) -> f64 {
    if rho >= 1.0 {
        return f64::INFINITY;
    }
    let c = workers.max(1.0);
    mean_ms * rho.powf((2.0 * (c + 1.0)).sqrt() - 1.0) / (c * (1.0 - rho)) * (1.0 + cs2) / 2.0
}

/// The highest utilisation at which the p95 wait stays within `room_ms`.
pub fn max_utilisation(workers: f64, mean_ms: f64, cs2: f64, room_ms: f64) -> f64 {
    if !(room_ms > 0.0 && mean_ms.is_finite() && cs2.is_finite()) {
        return 0.0;
    }
    if mean_ms <= 0.0 {
        return 1.0;
    }
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    for _ in 0..50 {
        let mid = (lo + hi) / 2.0;
        if P95_OVER_MEAN * mean_wait_ms(mid, workers, mean_ms, cs2) <= room_ms {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_with_load_and_variance() {
        // M/M/1 is exact: Wq = ρ/(1−ρ)·E[S].
        assert!((mean_wait_ms(0.5, 1.0, 100.0, 1.0) - 100.0).abs() < 1e-9);
        assert!((mean_wait_ms(0.9, 1.0, 100.0, 1.0) - 900.0).abs() < 1e-6);
        assert!(mean_wait_ms(0.9, 8.0, 100.0, 1.0) < mean_wait_ms(0.9, 1.0, 100.0, 1.0));
        assert!(mean_wait_ms(0.9, 8.0, 100.0, 4.0) > mean_wait_ms(0.9, 8.0, 100.0, 1.0));
        assert_eq!(mean_wait_ms(1.0, 8.0, 100.0, 1.0), f64::INFINITY);
    }

    #[test]
    fn the_utilisation_a_class_can_afford() {
        // (workers, mean, cs², room) → the ρ found keeps 3·Wq within the room, just.
        let rows = [
            (8.0, 1_700.0, 1.0, 650.0),
            (8.0, 160.0, 1.0, 2_500.0),
            (1.0, 100.0, 1.0, 300.0),
            (64.0, 500.0, 3.0, 100.0),
        ];
        for (c, mean, cs2, room) in rows {
            let rho = max_utilisation(c, mean, cs2, room);
            assert!((0.0..1.0).contains(&rho), "{rho}");
            assert!(P95_OVER_MEAN * mean_wait_ms(rho, c, mean, cs2) <= room + 1e-6);
            assert!(P95_OVER_MEAN * mean_wait_ms(rho + 1e-3, c, mean, cs2) > room);
        }
        // M/M/1 with room 300 ms and 100 ms jobs: 3·ρ/(1−ρ)·100 = 300 at ρ = 1/2.
        assert!((max_utilisation(1.0, 100.0, 1.0, 300.0) - 0.5).abs() < 1e-9);
        // More room, more load; no room, none; free jobs, all.
        assert!(max_utilisation(8.0, 1_700.0, 1.0, 2_000.0) > max_utilisation(8.0, 1_700.0, 1.0, 650.0));
        assert_eq!(max_utilisation(8.0, 100.0, 1.0, 0.0), 0.0);
        assert_eq!(max_utilisation(8.0, 0.0, 1.0, 10.0), 1.0);
    }
}
