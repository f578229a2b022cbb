//! Exact quantiles by sorting: a phase holds a few thousand jobs at most.

/// The nearest-rank `q`-quantile (0 < q ≤ 1) of `values`, or `None` when
/// there are none.
pub fn quantile(values: impl IntoIterator<Item = f64>, q: f64) -> Option<f64> {
    quantiles(values, &[q]).map(|v| v[0])
}

/// Several quantiles of the same values, sorting once.
pub fn quantiles(values: impl IntoIterator<Item = f64>, qs: &[f64]) -> Option<Vec<f64>> {
    let mut sorted: Vec<f64> = values.into_iter().collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    Some(qs.iter().map(|q| sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_on_hand_checkable_sets() {
        let hundred = (1..=100).map(f64::from);
        assert_eq!(quantiles(hundred, &[0.1, 0.5, 0.95, 0.99, 1.0]), Some(vec![10.0, 50.0, 95.0, 99.0, 100.0]));
        assert_eq!(quantile([3.0, 1.0, 2.0], 0.5), Some(2.0));
        assert_eq!(quantile([7.0], 0.1), Some(7.0));
        assert_eq!(quantile([-5.0, 10.0, 20.0, 30.0], 0.1), Some(-5.0));
        assert_eq!(quantile([], 0.5), None);
    }
}
