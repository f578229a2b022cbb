//! The controller against a synthetic trace on a simulated clock: a step
//! test. Jobs report at 30/s; at the onset, 35% of them take 1800 ms
//! (service p95 from ~120 ms to 1800 ms, 3 s deadline) and, as a real queue
//! would, waits start to grow. The budget must be cut within one simulated
//! second of the onset, and recover once the tail is removed.
//!
//! (`controller_drill.rs` runs the same drill as a closed loop, where the
//! tail is only seen as its slow jobs complete; here the trace shows it at once.)

use std::{collections::BTreeMap, time::Duration};

use shedder_daemon::{
    control::{Action, Budget, ClassPolicy, ControlParams, Controller, TickInputs, Tier},
    estimate::{EstimatorParams, Estimators},
    telemetry::{ClassObservations, Observation},
};

const CLASS: &str = "interactive";
const TICK_MS: u64 = 100;
const JOBS_PER_TICK: u64 = 3; // 30 jobs/s
const MAX_RATE: f64 = 40.0;
const ONSET_MS: u64 = 30_000;
const REMOVED_MS: u64 = 60_000;
const END_MS: u64 = 150_000;

/// The trace's jobs for one tick: (queue age, service) in ms.
fn jobs(t_ms: u64, tick: u64) -> Vec<(f64, f64)> {
    let tail = (ONSET_MS..REMOVED_MS).contains(&t_ms);
    (0..JOBS_PER_TICK)
        .map(|j| {
            let n = tick * JOBS_PER_TICK + j;
            // A healthy spread: 60..=125 ms, p95 about 120 ms.
            let healthy = 60.0 + (n * 37 % 66) as f64;
            let service = if tail && n % 20 < 7 { 1800.0 } else { healthy };
            // Waits grow by 1.5 s per second of tail (the backlog), and
            // are back to normal once it is gone.
            let queue_age = if tail { 100.0 + 1.5 * (t_ms - ONSET_MS) as f64 } else { 100.0 };
            (queue_age, service)
        })
        .collect()
}

#[test]
fn an_injected_tail_is_cut_within_a_second_and_recovers_after_removal() {
    let policy = ClassPolicy {
        deadline_ms: 3000.0,
        safety_ms: None,
        budget: Budget::Adaptive { min_rate: 1.0, max_rate: MAX_RATE },
        opportunistic: false,
        tier: Tier::Standard,
        weight: 1.0,
    };
    let mut controller = Controller::new(ControlParams::default(), [(CLASS.to_string(), policy)].into()).unwrap();
    let mut estimators =
        Estimators::new(EstimatorParams::default(), [(CLASS.to_string(), Default::default())].into()).unwrap();

    let (mut first_cut, mut before_onset_max_dev, mut lowest) = (None, 0.0f64, MAX_RATE);
    let mut rate_at = BTreeMap::new();
    for tick in 0..END_MS / TICK_MS {
        let t_ms = tick * TICK_MS;
        let now = Duration::from_millis(t_ms);
        let observations = jobs(t_ms, tick)
            .into_iter()
            .flat_map(|(queue_age, service)| {
                [Observation::QueueAge { ms: queue_age, count: 1 }, Observation::Service { ms: service, count: 1 }]
            })
            .collect();
        estimators.observe(now, &ClassObservations { class: CLASS.into(), observations }).unwrap();
        let rate = controller.rate(CLASS).unwrap();
        // The class admits what arrives, up to its budget.
        let admitted = BTreeMap::from([(CLASS.to_string(), rate.min(30.0))]);
        let offered = BTreeMap::from([(CLASS.to_string(), 30.0)]);
        let inputs = TickInputs {
            estimates: &estimators.estimate_all(now),
            gpu: &[],
            admitted: &admitted,
            offered: &offered,
            wasted: &BTreeMap::new(),
            trimmed: &BTreeMap::new(),
            starts: &[],
        };
        let decisions = controller.tick(now, &inputs);
        if first_cut.is_none()
            && let Some(cut) = decisions.iter().find(|d| d.action == Action::Cut)
        {
            first_cut = Some((t_ms, cut.clone()));
        }
        let rate = controller.rate(CLASS).unwrap();
        if t_ms < ONSET_MS {
            before_onset_max_dev = before_onset_max_dev.max((rate - MAX_RATE).abs() / MAX_RATE);
        }
        lowest = lowest.min(rate);
        rate_at.insert(t_ms, rate);
    }

    assert!(before_onset_max_dev <= 0.10, "steady state moved the budget by {:.0}%", before_onset_max_dev * 100.0);
    let (cut_ms, cut) = first_cut.expect("the tail was cut");
    let delay = cut_ms.saturating_sub(ONSET_MS);
    println!(
        "first cut {delay} ms after the onset: {:.1} -> {:.1}/s ({}); lowest {lowest:.1}/s; at end {:.1}/s",
        cut.old_rate,
        cut.new_rate,
        cut.reason,
        rate_at[&(END_MS - TICK_MS)]
    );
    assert!(cut_ms >= ONSET_MS, "no cut before the tail");
    assert!(delay <= 1000, "cut {delay} ms after the onset");
    // Either the queue already shows it, or the capacity model sees the
    // work offered exceed what the backend can do before the queue does.
    assert!(cut.slack.slack_ms < 0.0 || cut.reason.contains("> available"), "{}", cut.reason);
    assert!(lowest >= 1.0, "the budget respects min_rate");
    let end_rate = rate_at[&(END_MS - TICK_MS)];
    assert!(end_rate >= 0.9 * MAX_RATE, "recovered to {end_rate:.1}/s after the tail was removed");
}
