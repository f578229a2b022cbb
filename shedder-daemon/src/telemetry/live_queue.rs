//! The live queue estimate: how long the jobs waiting now will have waited,
//! from what an inference server shows at this moment.
//!
//! # Why
//!
//! vLLM records a request's queue time when the request *finishes* (SGLang
//! when it is scheduled): a queue-age quantile taken from those histograms
//! lags by a whole service time (or by the wait itself), and requests
//! aborted by their clients while they wait (exactly the ones that time out
//! under overload) are never recorded at all. The
//! waiting and running gauges and the finished-request counters are live.
//!
//! # The estimate
//!
//! Little's law, `L = λ·W`, applied to the queue: with `waiting` jobs queued
//! and the queue draining at the throughput `λ` (requests that left the
//! engine per second, measured over the last [`HORIZON_S`] seconds of
//! scrapes), a job joining the queue now starts after `waiting / λ`. In a
//! first-come-first-served queue that is the queue age every job waiting now
//! reaches, at most, by the time it starts.
//!
//! Throughput is what finished, so an engine that finished nothing over the
//! whole horizon (a batch of requests longer than the horizon, or an engine
//! that queues requests and runs none: stalled, or its KV cache full) drains
//! at most one request per horizon: then `λ ≤ 1 / horizon` and the estimate
//! is `waiting × horizon`, growing with the stall instead of dividing by
//! zero.
//!
//! The running count enters through the same law on the batch
//! (`running = λ·S`: the service time the throughput implies); it does not
//! move the queue's estimate, and is reported beside it for the capacity
//! model (the workers in use, [`crate::control::capacity::busy_workers`]).
//!
//! Aborted requests leave the queue too. Exporters that count them (vLLM's
//! `finished_reason="abort"`, SGLang's aborted-requests counter) have them in
//! `λ`; those that do not make `λ` lower and the estimate higher:
//! conservative.
//!
//! The estimate is then combined with the finished requests' recorded queue
//! time (the p95 of the interval's histogram, see
//! [`crate::telemetry::scrape`]), **taking whichever is worse**: the
//! histogram catches a queue that drained since, the live estimate a queue
//! that is building now.

use std::collections::VecDeque;

/// Throughput is measured over at least this much recent time (or all of
/// it, at first): long enough to hold several completions of requests that
/// take seconds, short enough to follow a change of regime.
pub const HORIZON_S: f64 = 5.0;

/// Requests that left the engine over the recent scrapes.
#[derive(Clone, Debug, Default)]
pub struct Throughput {
    /// `(interval seconds, requests finished)`, oldest first.
    intervals: VecDeque<(f64, f64)>,
}

impl Throughput {
    /// Adds one scrape interval; drops intervals no longer needed to cover
    /// [`HORIZON_S`].
    pub fn record(&mut self, seconds: f64, finished: f64) {
        if !(seconds.is_finite() && seconds > 0.0 && finished.is_finite() && finished >= 0.0) {
            return;
        }
        self.intervals.push_back((seconds, finished));
        while self.intervals.len() > 1 && self.span_s() - self.intervals[0].0 >= HORIZON_S {
            self.intervals.pop_front();
        }
    }

    fn span_s(&self) -> f64 {
        self.intervals.iter().map(|(seconds, _)| seconds).sum()
    }

    /// `(requests finished, seconds)` over the horizon; `None` before any
    /// interval.
    pub fn window(&self) -> Option<(f64, f64)> {
        let span = self.span_s();
        (span > 0.0).then(|| (self.intervals.iter().map(|(_, finished)| finished).sum(), span))
    }
}

/// What the estimate is made of, for one class at one scrape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiveInputs {
    /// Jobs waiting now.
    pub waiting: f64,
    /// [`Throughput::window`]: requests finished, over that many seconds.
    pub finished: f64,
    pub span_s: f64,
    /// p95 of the queue time recorded for requests finished in the last
    /// interval, ms (`None`: none finished, or no histogram).
    pub finished_p95_ms: Option<f64>,
}

/// The estimate and its two terms, ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiveEstimate {
    /// `waiting / λ` (Little's law), `None` before throughput is measured.
    pub little_ms: Option<f64>,
    /// The finished requests' recorded p95.
    pub finished_ms: Option<f64>,
    /// The worse of the two: the predicted queue age of the jobs waiting now.
    pub predicted_ms: f64,
}

/// Little's law on the queue, combined with the finished requests'
/// histogram by taking the worse (see the module's documentation). `None`
/// when neither term is known.
pub fn estimate(inputs: LiveInputs) -> Option<LiveEstimate> {
    let little_ms = little_ms(inputs);
    let finished_ms = inputs.finished_p95_ms.filter(|ms| ms.is_finite() && *ms >= 0.0);
    let predicted_ms = match (little_ms, finished_ms) {
        (None, None) => return None,
        (a, b) => a.unwrap_or(0.0).max(b.unwrap_or(0.0)),
    };
    Some(LiveEstimate { little_ms, finished_ms, predicted_ms })
}

fn little_ms(inputs: LiveInputs) -> Option<f64> {
    let LiveInputs { waiting, finished, span_s, .. } = inputs;
    if !(waiting.is_finite() && span_s.is_finite() && span_s > 0.0) {
        return None;
    }
    if waiting <= 0.0 {
        return Some(0.0);
    }
    // Nothing finished over the horizon: at most one per horizon.
    let drained = finished.max(1.0);
    Some(waiting * span_s / drained * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(waiting: f64, finished: f64, span_s: f64, finished_p95_ms: Option<f64>) -> LiveInputs {
        LiveInputs { waiting, finished, span_s, finished_p95_ms }
    }

    #[test]
    fn littles_law_and_the_histogram_whichever_is_worse() {
        let cases = [
            // (waiting, finished, span s, finished p95, little, predicted)
            (40.0, 100.0, 5.0, Some(300.0), Some(2_000.0), 2_000.0),
            (0.0, 100.0, 5.0, Some(300.0), Some(0.0), 300.0),
            (4.0, 100.0, 5.0, Some(900.0), Some(200.0), 900.0),
            // Nothing finished over 5 s with 10 queued: at most one per 5 s.
            (10.0, 0.0, 5.0, None, Some(50_000.0), 50_000.0),
            // No throughput yet (first scrape): only the histogram.
            (10.0, 0.0, 0.0, Some(700.0), None, 700.0),
        ];
        for (waiting, finished, span, p95, little, predicted) in cases {
            let e = estimate(inputs(waiting, finished, span, p95)).unwrap();
            assert_eq!(e.little_ms, little, "{waiting} waiting, {finished} in {span} s");
            assert_eq!(e.predicted_ms, predicted, "{waiting} waiting, {finished} in {span} s");
        }
        assert_eq!(estimate(inputs(10.0, 0.0, 0.0, None)), None);
        assert_eq!(estimate(inputs(f64::NAN, 3.0, 1.0, None)), None);
    }

    #[test]
    fn throughput_covers_the_horizon_and_no_more() {
        let mut t = Throughput::default();
        assert_eq!(t.window(), None);
        t.record(1.0, 10.0);
        assert_eq!(t.window(), Some((10.0, 1.0)));
        for finished in [20.0, 30.0, 40.0, 50.0, 60.0, 70.0] {
            t.record(1.0, finished);
        }
        // The newest five seconds: 30..=70.
        assert_eq!(t.window(), Some((250.0, 5.0)));
        // Bad intervals are ignored.
        t.record(0.0, 5.0);
        t.record(1.0, f64::NAN);
        assert_eq!(t.window(), Some((250.0, 5.0)));
    }

    /// A scripted vLLM-like exporter: one FIFO queue, a batch of `slots`
    /// requests each served in `service_s`, arrivals scripted per second,
    /// queue time recorded only when a request finishes, and a burst of
    /// client aborts that the exporter never records. The live estimate
    /// must follow the queue's real age while the finish-time histogram lags
    /// and never sees the aborted.
    #[test]
    fn a_scripted_exporter_timeline_with_an_abort_burst() {
        const STEP_S: f64 = 0.1;
        let (slots, service_s) = (10usize, 1.0);
        let mut queue: VecDeque<f64> = VecDeque::new(); // arrival times
        let mut batch: Vec<(f64, f64)> = Vec::new(); // (arrival, start)
        let mut throughput = Throughput::default();
        let mut finished_since_scrape = 0.0;
        let mut recorded_since_scrape: Vec<(f64, u64)> = Vec::new();
        let mut report = Vec::new();
        let mut arrivals_owed = 0.0;
        for tick in 0..300 {
            let now = tick as f64 * STEP_S;
            // 20 requests/s for 15 s (twice the capacity), then 5/s.
            arrivals_owed += if now < 15.0 { 20.0 } else { 5.0 } * STEP_S;
            while arrivals_owed >= 1.0 {
                queue.push_back(now);
                arrivals_owed -= 1.0;
            }
            // At 15 s the clients of every request waiting over 3 s give up.
            if (now - 15.0).abs() < 1e-9 {
                queue.retain(|arrival| now - arrival <= 3.0);
            }
            batch.retain(|(arrival, start)| {
                let done = now - start >= service_s - 1e-9;
                if done {
                    finished_since_scrape += 1.0;
                    recorded_since_scrape.push((((start - arrival) * 1000.0).round(), 1));
                }
                !done
            });
            while batch.len() < slots
                && let Some(arrival) = queue.pop_front()
            {
                batch.push((arrival, now));
            }
            // A scrape every second.
            if tick % 10 == 9 {
                throughput.record(1.0, finished_since_scrape);
                let (finished, span_s) = throughput.window().unwrap();
                let finished_p95_ms = crate::telemetry::scrape::weighted_quantile(&recorded_since_scrape, 0.95);
                let live =
                    estimate(LiveInputs { waiting: queue.len() as f64, finished, span_s, finished_p95_ms }).unwrap();
                // The truth: the wait of the job at the back of the queue,
                // at 10 requests per second.
                let back_of_queue_ms = queue.len() as f64 / 10.0 * 1000.0;
                report.push((now, live, back_of_queue_ms, finished_p95_ms));
                finished_since_scrape = 0.0;
                recorded_since_scrape.clear();
            }
        }
        for (now, live, truth_ms, _) in &report {
            if *now > 5.0 {
                assert!(live.predicted_ms >= 0.9 * truth_ms, "at {now:.1} s: {live:?} vs a true {truth_ms} ms");
            }
        }
        // While the queue builds, the finish-time histogram lags the live
        // estimate by far.
        let (_, live, _, histogram) = report.iter().find(|(now, ..)| (*now - 12.9).abs() < 1e-6).unwrap();
        assert!(live.little_ms.unwrap() > 2.0 * histogram.unwrap(), "{live:?} vs {histogram:?}");
        // After the abort burst the queue is short again, and so is the
        // estimate: the aborted requests' waits were never recorded, and the
        // live estimate does not need them.
        let at = |t: f64| report.iter().find(|(now, ..)| (*now - t).abs() < 1e-6).unwrap();
        let (_, before, ..) = at(14.9);
        let (_, after, truth_ms, _) = at(15.9);
        assert!(after.little_ms.unwrap() < before.little_ms.unwrap() / 2.0, "{before:?} then {after:?}");
        assert!((after.little_ms.unwrap() - truth_ms).abs() <= 0.1 * truth_ms, "{after:?} vs {truth_ms}");
        assert!(after.predicted_ms >= 0.9 * truth_ms);
    }
}
