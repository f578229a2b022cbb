//! Freshness: whether a scraped input still describes the server.
//!
//! # The rule
//!
//! An input is **stale** when either
//!
//! * its **gauges look frozen**: vLLM refreshes its waiting and running
//!   gauges on engine steps only, and after a mass abort they can stay high
//!   with nothing behind them. Over one interval, a class's gauges are
//!   suspect when
//!   - the exporter counts engine progress (vLLM's token counters) and the
//!     gauges claim work (waiting or running > 0) while no token was
//!     processed: no step ran, so nothing refreshed them (aborts may still
//!     have been counted). Tokens moving mean fresh gauges, even unchanged
//!     ones (a saturated closed loop holds them steady);
//!   - the exporter has no such counter (SGLang, Triton): the gauges claim a
//!     queue (waiting > 0) and did not change while requests finished.
//!
//!   [`FROZEN_AFTER`] suspect intervals in a row make them frozen; fresh
//!   evidence clears it (tokens moving; without token counters, a change of
//!   the gauges or an empty queue). (A queue of zero that never moves is not
//!   flagged: steady light load looks exactly like that; and without token
//!   counters a saturated closed loop that holds both gauges exactly steady
//!   looks frozen.)
//! * or the **scrape is old**: the newest scrape that read the class's live
//!   gauges is older than the controller allows (`[control]
//!   stale_after_ms`), because scrapes fail or hang.
//!
//! What the controller does with stale inputs is its business; the scrape
//! only says so ([`crate::telemetry::Observation::GaugesFrozen`]), and the
//! estimate carries the verdict to decision lines.

use serde::{Deserialize, Serialize};

/// Suspect intervals in a row before the gauges count as frozen: one can be
/// a coincidence (a request left, another arrived), two rarely are.
pub const FROZEN_AFTER: u32 = 2;

/// An input the controller should not trust as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaleInput {
    /// The waiting and running gauges look frozen.
    FrozenGauges,
    /// No scrape has read the class's live gauges for too long.
    OldScrape,
}

impl StaleInput {
    pub fn as_str(self) -> &'static str {
        match self {
            StaleInput::FrozenGauges => "frozen_gauges",
            StaleInput::OldScrape => "old_scrape",
        }
    }
}

/// What one interval showed of a class's gauges and counters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaugeReading {
    pub waiting: f64,
    pub running: Option<f64>,
    /// Requests finished over the interval (`None`: not counted, or a baseline).
    pub finished: Option<f64>,
    /// Whether token counters moved (`None`: the exporter has none).
    pub progressed: Option<bool>,
}

/// Watches one class's gauges from scrape to scrape.
#[derive(Clone, Debug, Default)]
pub struct GaugeWatch {
    previous: Option<(f64, Option<f64>)>,
    suspect: u32,
}

impl GaugeWatch {
    /// Takes one interval; returns whether the gauges now count as frozen.
    pub fn observe(&mut self, reading: GaugeReading) -> bool {
        let gauges = (reading.waiting, reading.running);
        let unchanged = self.previous == Some(gauges);
        let claims_a_queue = reading.waiting > 0.0;
        let (suspect, fresh) = match reading.progressed {
            // Steps refresh the gauges, and token counters say whether any ran.
            Some(progressed) => {
                let claims_work = claims_a_queue || reading.running.is_some_and(|running| running > 0.0);
                let fresh = !claims_work || progressed;
                (!fresh, fresh)
            }
            None => {
                let finished = reading.finished.is_some_and(|n| n > 0.0);
                (claims_a_queue && unchanged && finished, !claims_a_queue || !unchanged)
            }
        };
        if suspect {
            self.suspect += 1;
        } else if fresh {
            self.suspect = 0;
        }
        self.previous = Some(gauges);
        self.suspect >= FROZEN_AFTER
    }
}

/// The stale inputs of a class: its latest scrape's frozen-gauges verdict,
/// and that scrape's age against `max_age_ms` (`None`: never scraped for
/// live gauges, so nothing to be stale).
pub fn stale_inputs(latest_scrape: Option<(u64, bool)>, max_age_ms: u64) -> Vec<StaleInput> {
    let Some((age_ms, frozen)) = latest_scrape else {
        return Vec::new();
    };
    let mut stale = Vec::new();
    if frozen {
        stale.push(StaleInput::FrozenGauges);
    }
    if age_ms > max_age_ms {
        stale.push(StaleInput::OldScrape);
    }
    stale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(waiting: f64, running: f64, finished: f64, progressed: Option<bool>) -> GaugeReading {
        GaugeReading { waiting, running: Some(running), finished: Some(finished), progressed }
    }

    /// Runs a timeline through a fresh watch; the verdict after each interval.
    fn verdicts(timeline: &[GaugeReading]) -> Vec<bool> {
        let mut watch = GaugeWatch::default();
        timeline.iter().map(|r| watch.observe(*r)).collect()
    }

    #[test]
    fn frozen_gauges_are_flagged_after_two_suspect_intervals() {
        let moving = [reading(30.0, 8.0, 12.0, Some(true)), reading(26.0, 8.0, 11.0, Some(true))];
        let no_counter = |waiting, running, finished| reading(waiting, running, finished, None);
        let cases: [(&str, Vec<GaugeReading>, Vec<bool>); 8] = [
            ("gauges that move with the work are fresh", moving.repeat(3), vec![false; 6]),
            (
                "a saturated closed loop holds them steady, but tokens move: fresh",
                vec![reading(30.0, 8.0, 12.0, Some(true)); 4],
                vec![false; 4],
            ),
            (
                // vLLM after a mass abort: the aborts are counted, then no step runs.
                "high and still after a mass abort, with no engine step",
                vec![
                    reading(200.0, 8.0, 3.0, Some(true)),
                    reading(200.0, 8.0, 190.0, Some(false)),
                    reading(200.0, 8.0, 0.0, Some(false)),
                    reading(200.0, 8.0, 0.0, Some(false)),
                ],
                vec![false, false, true, true],
            ),
            (
                "a batch that claims requests but takes no step",
                vec![reading(0.0, 8.0, 0.0, Some(false)); 3],
                vec![false, true, true],
            ),
            (
                "without token counters: unchanged while requests finish",
                vec![no_counter(200.0, 8.0, 5.0); 4],
                vec![false, false, true, true],
            ),
            (
                "without token counters, a change clears the verdict",
                vec![
                    no_counter(200.0, 8.0, 5.0),
                    no_counter(200.0, 8.0, 5.0),
                    no_counter(200.0, 8.0, 5.0),
                    no_counter(0.0, 0.0, 5.0),
                ],
                vec![false, false, true, false],
            ),
            ("an empty queue that stays empty is not flagged", vec![no_counter(0.0, 3.0, 5.0); 4], vec![false; 4]),
            (
                "no evidence either way keeps the count",
                vec![
                    no_counter(9.0, 2.0, 4.0),
                    no_counter(9.0, 2.0, 4.0),
                    GaugeReading { waiting: 9.0, running: Some(2.0), finished: None, progressed: None },
                    no_counter(9.0, 2.0, 4.0),
                ],
                vec![false, false, false, true],
            ),
        ];
        for (what, timeline, expected) in cases {
            assert_eq!(verdicts(&timeline), expected, "{what}");
        }
    }

    #[test]
    fn stale_inputs_name_frozen_gauges_and_old_scrapes() {
        assert_eq!(stale_inputs(None, 300), vec![]);
        assert_eq!(stale_inputs(Some((100, false)), 300), vec![]);
        assert_eq!(stale_inputs(Some((100, true)), 300), vec![StaleInput::FrozenGauges]);
        assert_eq!(stale_inputs(Some((301, false)), 300), vec![StaleInput::OldScrape]);
        assert_eq!(stale_inputs(Some((900, true)), 300), vec![StaleInput::FrozenGauges, StaleInput::OldScrape]);
        assert_eq!(StaleInput::OldScrape.as_str(), "old_scrape");
    }
}
