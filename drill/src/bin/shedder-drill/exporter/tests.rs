//! The exporter as the daemon reads it: every scrape goes through the
//! daemon's own scrape reduction, so these tests also hold the format to
//! what shedder expects of a real vLLM or SGLang.

use std::time::Duration;

use shedder_daemon::telemetry::{
    ClassObservations, Observation,
    scrape::{Exporter as Kind, ScrapeTarget, TargetState},
};

use super::{Exporter, Format};

const K: f64 = 1.0;

/// An exporter for one class, `interactive`, on 4 workers, and the
/// daemon's view of it after a baseline scrape.
fn scraped(format: Format) -> (Exporter, TargetState) {
    let exporter = Exporter::new(format, vec!["interactive".into()], 4, K);
    let kind = match format {
        Format::Vllm => Kind::Vllm,
        Format::Sglang => Kind::Sglang,
    };
    let target = ScrapeTarget {
        url: "http://127.0.0.1:9000/metrics".into(),
        kind,
        models: [("interactive".to_string(), "interactive".to_string())].into(),
    };
    let mut state = TargetState::new(target).unwrap();
    state.ingest(&exporter.render(), Duration::ZERO).unwrap();
    (exporter, state)
}

fn observations(exporter: &Exporter, state: &mut TargetState, at_s: u64) -> Vec<Observation> {
    let batches: Vec<ClassObservations> = state.ingest(&exporter.render(), Duration::from_secs(at_s)).unwrap();
    batches.into_iter().flat_map(|b| b.observations).collect()
}

fn queue_ages(observations: &[Observation]) -> u64 {
    observations.iter().map(|o| if let Observation::QueueAge { count, .. } = o { *count } else { 0 }).sum()
}

fn services(observations: &[Observation]) -> u64 {
    observations.iter().map(|o| if let Observation::Service { count, .. } = o { *count } else { 0 }).sum()
}

#[test]
fn the_daemon_finds_every_family_it_expects() {
    for format in [Format::Vllm, Format::Sglang] {
        let (_, state) = scraped(format);
        assert_eq!(state.missing_families(), Vec::<&str>::new(), "{format:?}");
    }
}

#[test]
fn times_are_recorded_when_the_server_records_them() {
    // (format, queue times seen once started, once finished)
    let cases = [(Format::Vllm, 0, 1), (Format::Sglang, 1, 0)];
    for (format, at_start, at_finish) in cases {
        let (exporter, mut state) = scraped(format);
        exporter.queued(0);
        exporter.step();
        exporter.started(0, 0.4);
        exporter.step();
        let started = observations(&exporter, &mut state, 1);
        assert_eq!((queue_ages(&started), services(&started)), (at_start, 0), "{format:?} while running");
        exporter.finished(0, 0.4, 1.2);
        exporter.step();
        let finished = observations(&exporter, &mut state, 2);
        assert_eq!((queue_ages(&finished), services(&finished)), (at_finish, 1), "{format:?} once finished");
        // vLLM: the 0.4 s wait, alone in its (0.3, 0.5] bucket, where `_sum` puts it.
        if format == Format::Vllm {
            assert!(finished.contains(&Observation::QueueAge { ms: 400.0, count: 1 }), "{finished:?}");
        }
    }
}

#[test]
fn aborted_requests_are_never_recorded() {
    for format in [Format::Vllm, Format::Sglang] {
        let (exporter, mut state) = scraped(format);
        for _ in 0..5 {
            exporter.queued(0);
        }
        exporter.step();
        for _ in 0..5 {
            exporter.aborted(0);
        }
        let after = observations(&exporter, &mut state, 1);
        assert_eq!((queue_ages(&after), services(&after)), (0, 0), "{format:?}: {after:?}");
        let text = exporter.render();
        match format {
            // Not even as `finished_reason="abort"`.
            Format::Vllm => assert!(text.contains("finished_reason=\"abort\",model_name=\"interactive\"} 0.0")),
            // SGLang counts them, nowhere else.
            Format::Sglang => {
                assert!(text.contains("sglang:num_aborted_requests_total{model_name=\"interactive\"} 5.0"))
            }
        }
    }
}

#[test]
fn gauges_move_on_steps_and_freeze_when_nothing_steps() {
    let (exporter, mut state) = scraped(Format::Vllm);
    let depth = |observations: &[Observation]| {
        observations.iter().find_map(|o| if let Observation::QueueDepth(d) = o { Some(*d) } else { None })
    };
    let frozen = |observations: &[Observation]| observations.contains(&Observation::GaugesFrozen(true));
    for _ in 0..6 {
        exporter.queued(0);
    }
    // Between steps the gauges still show the last step.
    assert_eq!(depth(&observations(&exporter, &mut state, 1)), Some(0));
    assert!(exporter.step());
    let mut at = 2;
    for _ in 0..2 {
        exporter.started(0, 0.1);
    }
    assert!(exporter.step());
    assert_eq!(depth(&observations(&exporter, &mut state, at)), Some(4));
    // Every request is refused or finishes: the finish owes one step, which
    // publishes the empty engine; after that nothing steps.
    exporter.finished(0, 0.1, 0.2);
    exporter.finished(0, 0.1, 0.2);
    assert!(exporter.step());
    for _ in 0..4 {
        exporter.queued(0);
    }
    assert!(exporter.step());
    for _ in 0..8 {
        exporter.aborted(0);
    }
    assert!(!exporter.step(), "an engine with no request does not step");
    // The gauges stay at the last step's 8 waiting. No token moved since
    // the scrape before the finishes: the daemon calls them frozen at the
    // second interval in a row without progress.
    let verdicts: Vec<(Option<u64>, bool)> = (0..3)
        .map(|_| {
            at += 1;
            let o = observations(&exporter, &mut state, at);
            (depth(&o), frozen(&o))
        })
        .collect();
    assert_eq!(verdicts, vec![(Some(8), false), (Some(8), true), (Some(8), true)]);
}
