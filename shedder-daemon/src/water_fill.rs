//! Weighted max-min fairness ("water-filling"): an amount shared among
//! claimants by weight, none given more than it has room for, what one
//! cannot take going to the others. The classes' shares of the backend
//! ([`crate::control::allocate`]) and the tenants' lending
//! ([`crate::tenant::share`]) both pour this way.

/// What each claimant gets of `amount`: `level · weight`, at most its room,
/// with the level raised until the amount or every room runs out. A
/// claimant with no room, or no weight, gets nothing; what nobody can take
/// is `amount` less the sum.
pub fn water_fill(amount: f64, rooms: &[f64], weights: &[f64]) -> Vec<f64> {
    let mut given = vec![0.0; rooms.len()];
    let mut left = amount.max(0.0);
    let mut open: Vec<usize> = (0..rooms.len()).filter(|&i| rooms[i] > 0.0 && weights[i] > 0.0).collect();
    // At most one round per claimant: each round fills at least one room,
    // or spends what is left.
    while !open.is_empty() && left > 0.0 {
        let level = left / open.iter().map(|&i| weights[i]).sum::<f64>();
        let (full, partial): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| rooms[i] - given[i] <= level * weights[i]);
        if full.is_empty() {
            for &i in &partial {
                given[i] += level * weights[i];
            }
            break;
        }
        for &i in &full {
            left -= rooms[i] - given[i];
            given[i] = rooms[i];
        }
        open = partial;
    }
    given
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (amount, rooms, weights, expected)
    type Row = (f64, &'static [f64], &'static [f64], &'static [f64]);

    #[test]
    fn pours_by_weight_and_caps_each_at_its_room() {
        let rows: [Row; 6] = [
            (6.0, &[10.0, 10.0], &[1.0, 2.0], &[2.0, 4.0]),
            // The small room fills; the rest goes to the others by weight.
            (9.0, &[1.0, 10.0, 10.0], &[1.0, 1.0, 2.0], &[1.0, 8.0 / 3.0, 16.0 / 3.0]),
            // More than every room: each gets its room, the rest is left.
            (100.0, &[1.0, 2.0], &[1.0, 1.0], &[1.0, 2.0]),
            (5.0, &[0.0, 10.0], &[1.0, 1.0], &[0.0, 5.0]),
            (5.0, &[10.0, 10.0], &[0.0, 1.0], &[0.0, 5.0]),
            (-1.0, &[10.0], &[1.0], &[0.0]),
        ];
        for (amount, rooms, weights, expected) in rows {
            let given = water_fill(amount, rooms, weights);
            let close = given.iter().zip(expected).all(|(g, e)| (g - e).abs() < 1e-9);
            assert!(close, "{amount} into {rooms:?} by {weights:?}: {given:?}, not {expected:?}");
        }
    }
}
