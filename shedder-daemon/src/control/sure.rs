//! How much of a class's demand reading is more than chance.
//!
//! A class's demand is its last second's work. For a class of a few long
//! jobs a second, that count is mostly chance: 0.3 jobs/s of 1.8 s reads 0,
//! 1.8 or 3.6 worker-seconds/s. Its *sure* part is what another class's
//! share is sized against (see [`super::allocate`]): the class's mean over
//! ten seconds, unless the last second's count stands further above it
//! than chance explains, as a flash crowd's does within the second.

/// How long a class's mean demand is averaged over, s.
pub const MEAN_DEMAND_WINDOW_S: f64 = 10.0;

/// How many standard deviations of chance are taken off a second's count
/// before it counts as sure.
pub const CHANCE_DEVIATIONS: f64 = 2.0;

/// The sure part of a class's demand, worker-seconds/s: its `mean` over
/// [`MEAN_DEMAND_WINDOW_S`], or the last second's work `now` less
/// [`CHANCE_DEVIATIONS`] of a Poisson count of `jobs_per_s` jobs of
/// `mean_service_s` when that is more (a flash crowd is sure within the
/// second), at most the `held` demand.
pub fn sure_part(held: f64, mean: f64, now: f64, jobs_per_s: f64, mean_service_s: f64) -> f64 {
    let chance = jobs_per_s.max(0.0).sqrt() * mean_service_s;
    mean.max(now - CHANCE_DEVIATIONS * chance).min(held).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sure_part_of_a_demand_is_its_mean_or_a_count_beyond_chance() {
        // (what, held, mean, now, jobs/s, mean service s, sure)
        let rows = [
            ("two long jobs in a second of a 0.3/s class: the mean", 3.6, 0.54, 3.6, 2.0, 1.8, 0.54),
            ("a flash crowd: 400 jobs where 100 came", 40.0, 10.0, 40.0, 400.0, 0.1, 36.0),
            ("never more than the held demand", 1.0, 2.0, 1.0, 10.0, 0.1, 1.0),
            ("nothing offered", 0.0, 0.0, 0.0, 0.0, 0.5, 0.0),
        ];
        for (what, held, mean, now, jobs, service, sure) in rows {
            let got = sure_part(held, mean, now, jobs, service);
            assert!((got - sure).abs() < 1e-9, "{what}: {got} != {sure}");
        }
    }
}
