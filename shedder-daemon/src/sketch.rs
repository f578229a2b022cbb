//! A quantile sketch of times, ms, whose quantiles can be read in one pass.
//!
//! The bins, ranks and values are those of a
//! [DDSketch](https://arxiv.org/abs/1908.10693) in `sketches-ddsketch`'s
//! mapping (1% relative error at every quantile): the crate maps a time to
//! its bin and a bin back to a time, and every quantile here is the one the
//! crate's own sketch of the same samples answers while they span fewer
//! than 2048 bins (1e-9 ms to past 1e9 ms; a test holds them to it).
//! The store of counts is kept here because the crate's reads one quantile
//! per walk of its bins from the bottom, and a service curve reads 99 of
//! them for every class at every tick: a third of the control plane's CPU.
//! [`Sketch::quantiles`] reads any number in one walk.
//!
//! Weighted adds cost one bin update (a scraped histogram bucket of 10,000
//! jobs is one add), and merges add bins, so slices merge exactly.

use sketches_ddsketch::Config;

/// A quantile is within 1% of a value of the right rank. Fixed, so that
/// every sketch merges with every other.
pub const RELATIVE_ACCURACY: f64 = 0.01;

/// Times at or below this many ms count as zero.
const SMALLEST_MS: f64 = 1e-9;

/// The most bins a sketch spans: at 1%, 1e-9 ms to well past 1e9 ms. Past
/// it the lowest bins fold into the lowest one kept (a tail is never lost).
const MAX_BINS: usize = 2048;

/// Times, binned.
#[derive(Clone, Debug)]
pub struct Sketch {
    mapping: Config,
    /// `bins[i]` counts the times of bin `lowest + i`.
    bins: Vec<u64>,
    lowest: i32,
    zeros: u64,
    count: u64,
    min: f64,
    max: f64,
    sum: f64,
}

/// Sketches of the same samples are equal (every sketch has the same mapping).
impl PartialEq for Sketch {
    fn eq(&self, other: &Self) -> bool {
        (self.lowest, &self.bins, self.zeros, self.count) == (other.lowest, &other.bins, other.zeros, other.count)
            && (self.min, self.max, self.sum) == (other.min, other.max, other.sum)
    }
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch::new()
    }
}

impl Sketch {
    pub fn new() -> Self {
        Sketch {
            mapping: Config::new(RELATIVE_ACCURACY, MAX_BINS as u32, SMALLEST_MS),
            bins: Vec::new(),
            lowest: 0,
            zeros: 0,
            count: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum: 0.0,
        }
    }

    /// Adds `count` samples of `ms` (finite, not negative: the caller's
    /// check) in constant time.
    pub fn add(&mut self, ms: f64, count: u64) {
        if count == 0 {
            return;
        }
        if ms > SMALLEST_MS {
            let bin = self.mapping.key(ms);
            self.cover(bin, bin);
            let at = self.index(bin);
            self.bins[at] += count;
        } else {
            self.zeros += count;
        }
        self.count += count;
        self.min = self.min.min(ms);
        self.max = self.max.max(ms);
        self.sum += ms * count as f64;
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Sketch) {
        if other.count == 0 {
            return;
        }
        if let Some(top) = other.top() {
            self.cover(other.lowest, top);
            // Bins below the lowest kept fold into it; the rest add in place.
            let folded = (self.lowest - other.lowest).clamp(0, other.bins.len() as i32) as usize;
            self.bins[0] += other.bins[..folded].iter().sum::<u64>();
            let at = self.index(other.lowest + folded as i32);
            for (mine, theirs) in self.bins[at..].iter_mut().zip(&other.bins[folded..]) {
                *mine += theirs;
            }
        }
        self.zeros += other.zeros;
        self.count += other.count;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The sum of the samples; None when there are none.
    pub fn sum(&self) -> Option<f64> {
        (self.count > 0).then_some(self.sum)
    }

    /// The `q` quantile (`q` clamped to 0..=1); None when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        self.quantiles(&[q]).map(|v| v[0])
    }

    /// The quantiles at `qs`, in one walk of the bins when `qs` ascend
    /// (clamped to 0..=1); None when empty. 0 is the smallest sample and 1
    /// the largest; between, the value of the bin holding the sample of
    /// rank `⌊q·(count − 1)⌋`.
    pub fn quantiles(&self, qs: &[f64]) -> Option<Vec<f64>> {
        if self.count == 0 {
            return None;
        }
        let mut values = Vec::with_capacity(qs.len());
        // The bin the walk is at, and the samples below it.
        let (mut bin, mut below) = (0, self.zeros);
        for &q in qs {
            let q = q.clamp(0.0, 1.0);
            if q == 0.0 {
                values.push(self.min);
                continue;
            }
            if q == 1.0 {
                values.push(self.max);
                continue;
            }
            let rank = (q * (self.count as f64 - 1.0)) as u64;
            if rank < self.zeros {
                values.push(0.0);
                continue;
            }
            if rank < below {
                // Out of order: walk again from the bottom.
                (bin, below) = (0, self.zeros);
            }
            while bin + 1 < self.bins.len() && below + self.bins[bin] <= rank {
                below += self.bins[bin];
                bin += 1;
            }
            values.push(self.mapping.value(self.lowest + bin as i32));
        }
        Some(values)
    }

    /// The share of the samples at most `x` (each read at its bin's
    /// value), in one walk of the bins; None when empty.
    pub fn share_at_most(&self, x: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        if x < 0.0 {
            return Some(0.0);
        }
        let mut within = self.zeros;
        for (i, &n) in self.bins.iter().enumerate() {
            if self.mapping.value(self.lowest + i as i32) > x {
                break;
            }
            within += n;
        }
        Some(within as f64 / self.count as f64)
    }

    /// The highest bin held, if any.
    fn top(&self) -> Option<i32> {
        (!self.bins.is_empty()).then(|| self.lowest + self.bins.len() as i32 - 1)
    }

    /// Where bin `bin` is counted: its own slot, or the lowest one kept
    /// when it has been folded into it.
    fn index(&self, bin: i32) -> usize {
        (bin.max(self.lowest) - self.lowest) as usize
    }

    /// Makes the store span bins `low..=high`, folding the lowest into the
    /// lowest kept where that would pass [`MAX_BINS`].
    fn cover(&mut self, low: i32, high: i32) {
        let Some(top) = self.top() else {
            let high = high.max(low);
            let low = low.max(high - MAX_BINS as i32 + 1);
            self.lowest = low;
            self.bins = vec![0; (high - low + 1) as usize];
            return;
        };
        let high = high.max(top);
        let low = low.min(self.lowest).max(high - MAX_BINS as i32 + 1);
        if low == self.lowest && high == top {
            return;
        }
        let mut bins = vec![0; (high - low + 1) as usize];
        // Bins below the new lowest fold into it; the rest move as they are.
        let folded = ((low - self.lowest).max(0) as usize).min(self.bins.len());
        let kept = &self.bins[folded..];
        if !kept.is_empty() {
            let at = (self.lowest + folded as i32 - low) as usize;
            bins[at..at + kept.len()].copy_from_slice(kept);
        }
        bins[0] += self.bins[..folded].iter().sum::<u64>();
        self.bins = bins;
        self.lowest = low;
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{RngExt, SeedableRng};
    use sketches_ddsketch::DDSketch;

    use super::*;

    const GRID: [f64; 12] = [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0];

    fn crates_sketch() -> DDSketch {
        DDSketch::new(Config::new(RELATIVE_ACCURACY, MAX_BINS as u32, SMALLEST_MS))
    }

    /// Samples of ms, each with its count.
    type Samples = Vec<(f64, u64)>;

    /// Weighted samples: a lognormal body of ms, some zeros, a far tail.
    fn samples(seed: u64, n: usize) -> Samples {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let ms = match rng.random_range(0..20) {
                    0 => 0.0,
                    1 => 60_000.0 * rng.random::<f64>(),
                    _ => (4.0 + 1.5 * (rng.random::<f64>() - 0.5)).exp(),
                };
                (ms, rng.random_range(1..4))
            })
            .collect()
    }

    #[test]
    fn the_share_at_most_a_value_counts_every_sample_at_or_below_it() {
        let mut sketch = Sketch::new();
        assert_eq!(sketch.share_at_most(1.0), None);
        for ms in 1..=100 {
            sketch.add(f64::from(ms), 1);
        }
        sketch.add(0.0, 100);
        // Half the samples are zeros. A bin's value is within 1% of its
        // samples', so the sample at the edge may read either side (0.005).
        let rows = [(-1.0, 0.0), (0.0, 0.5), (50.0, 0.75), (1e9, 1.0)];
        for (x, want) in rows {
            let got = sketch.share_at_most(x).unwrap();
            assert!((got - want).abs() <= 0.0051, "at most {x}: {got}, want {want}");
        }
    }

    #[test]
    fn every_quantile_is_the_one_the_crates_own_sketch_answers() {
        // (what, slices of samples merged into one sketch)
        let cases: [(&str, Vec<Samples>); 5] = [
            ("one sample", vec![vec![(120.0, 1)]]),
            ("only zeros", vec![vec![(0.0, 3)]]),
            ("a body, zeros and a tail", vec![samples(1, 2_000)]),
            ("ten slices merged", (0..10).map(|s| samples(s, 300)).collect()),
            ("an empty slice among them", vec![samples(2, 50), vec![], samples(3, 50)]),
        ];
        for (what, slices) in cases {
            let (mut ours, mut theirs) = (Sketch::new(), crates_sketch());
            for slice in &slices {
                let (mut a, mut b) = (Sketch::new(), crates_sketch());
                for &(ms, n) in slice {
                    a.add(ms, n);
                    b.add_with_count(ms, n);
                }
                ours.merge(&a);
                theirs.merge(&b).unwrap();
            }
            assert_eq!(ours.count(), theirs.count() as u64, "{what}: count");
            assert_eq!(ours.sum(), theirs.sum(), "{what}: sum");
            let want: Vec<f64> = GRID.iter().map(|&q| theirs.quantile(q).unwrap().unwrap()).collect();
            assert_eq!(ours.quantiles(&GRID).unwrap(), want, "{what}: the grid in one walk");
            for (&q, &want) in GRID.iter().zip(&want).rev() {
                assert_eq!(ours.quantile(q), Some(want), "{what}: q{q} alone");
            }
        }
    }

    #[test]
    fn an_empty_sketch_has_no_quantiles() {
        let empty = Sketch::new();
        assert_eq!((empty.count(), empty.sum(), empty.quantile(0.5)), (0, None, None));
        let mut merged = Sketch::new();
        merged.merge(&empty);
        assert_eq!(merged.count(), 0);
    }

    #[test]
    fn times_spanning_more_than_its_bins_fold_the_lowest_and_keep_every_sample() {
        let mut wide = Sketch::new();
        wide.add(1e-6, 5);
        wide.add(1e300, 3);
        let mut other = Sketch::new();
        other.add(1e-3, 2);
        wide.merge(&other);
        assert_eq!(wide.count(), 10);
        assert!(wide.bins.len() <= MAX_BINS, "{} bins", wide.bins.len());
        let (low, high) = (wide.quantile(0.01).unwrap(), wide.quantile(0.99).unwrap());
        assert!(low < high && high > 1e299, "the tail is kept: {low:e} .. {high:e}");
    }
}
