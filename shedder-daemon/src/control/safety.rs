//! The safety margin kept below a class's deadline.
//!
//! A fixed margin is wrong at both ends: 250 ms is noise for a 30 s batch
//! deadline and eats a 300 ms interactive one whole. The margin covers
//! what the controller cannot see, so it is derived from that:
//!
//! ```text
//! margin = tick + clock_skew + accuracy·service_p95 + (service_p95 − service_p50)/√n
//!          capped at safety_max_fraction · deadline                  [10%]
//! ```
//!
//! * **tick**: the queue can grow for one tick before a budget moves;
//! * **clock_skew**: server and daemon clocks disagree by this much at most;
//! * **accuracy·p95**: the sketch's relative error on the quantiles;
//! * **spread/√n**: the estimator's own uncertainty: a quantile measured
//!   from `n` samples is off by about the distribution's spread over √n.
//!
//! The cap keeps the margin from ever eating the room the deadline leaves.
//! An operator can still set `safety_ms`; one that leaves no room for even
//! a typical job is refused at config load ([`check_configured`]).

use super::params::ControlParams;
use crate::service_curve::ServiceCurve;
use crate::sketch::RELATIVE_ACCURACY;

/// The derived margin, ms.
pub fn derived_ms(p: &ControlParams, deadline_ms: f64, curve: &ServiceCurve, samples: u64) -> f64 {
    let (p50, p95) = (curve.quantile(0.50), curve.quantile(0.95));
    let uncertainty = (p95 - p50).max(0.0) / (samples.max(1) as f64).sqrt();
    let margin = p.tick_ms as f64 + p.clock_skew_ms + RELATIVE_ACCURACY * p95 + uncertainty;
    margin.min(p.safety_max_fraction * deadline_ms)
}

/// Refuses a configured margin that leaves a typical job (the prior's
/// median, `typical_service_ms`) no room within the deadline. The message
/// says why, and what would work.
pub fn check_configured(
    safety_ms: f64,
    deadline_ms: f64,
    typical_service_ms: f64,
    max_fraction: f64,
) -> Result<(), String> {
    let room = deadline_ms - typical_service_ms;
    if safety_ms >= room {
        return Err(format!(
            "safety_ms: {safety_ms} ms leaves no room: deadline {deadline_ms} ms minus a typical job's service \
             ({typical_service_ms} ms, the prior's p50) is {room} ms, and the margin must be below that or every \
             job is refused; leave safety_ms out to derive it from the class's measured spread (at most {:.0} ms \
             here), or set it below {room} ms",
            max_fraction * deadline_ms
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_scales_with_the_class() {
        let p = ControlParams::default();
        // (deadline, service p50, p95, samples) → margin within [lo, hi]
        let rows = [
            // A 300 ms interactive class: capped at 10% of the deadline.
            (300.0, 80.0, 150.0, 1_000, 30.0, 30.0),
            // The reference workload's 3 s deadline: tick + skew + 1% of p95 + spread/√n.
            (3_000.0, 120.0, 400.0, 400, 100.0 + 5.0 + 4.0 + 14.0, 100.0 + 5.0 + 4.0 + 14.0),
            // Few samples: wider, still capped.
            (3_000.0, 120.0, 400.0, 1, 300.0, 300.0),
            // A 30 s batch class barely notices.
            (30_000.0, 2_000.0, 6_000.0, 10_000, 205.0, 205.0),
        ];
        for (deadline, p50, p95, n, lo, hi) in rows {
            let m = derived_ms(&p, deadline, &ServiceCurve::lognormal(Some(p50), p95), n);
            assert!((lo - 1e-3..=hi + 1e-3).contains(&m), "deadline {deadline}: margin {m} not in [{lo}, {hi}]");
            assert!(m <= 0.1 * deadline + 1e-9);
        }
    }

    #[test]
    fn a_configured_margin_must_leave_room_for_a_typical_job() {
        let err = check_configured(250.0, 400.0, 150.0, 0.1).unwrap_err();
        assert!(err.starts_with("safety_ms: 250 ms leaves no room: deadline 400 ms"), "{err}");
        assert!(err.contains("(at most 40 ms here)") && err.contains("below 250 ms"), "{err}");
        assert!(check_configured(100.0, 400.0, 150.0, 0.1).is_ok());
        // Slow jobs past the deadline are the controller's business, not the margin's.
        assert!(check_configured(250.0, 3_000.0, 120.0, 0.1).is_ok());
    }
}
