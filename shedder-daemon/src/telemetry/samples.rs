//! Pushed job samples: what inference servers (or their proxies) report about
//! each finished job, through the control socket.
//!
//! A [`JobSample`] carries one job's class, how long it queued, how long it
//! ran, and whether it met its deadline. [`SampleInbox`] is the in-process
//! ingestion point: the control socket (and the tests) [`push`] validated
//! batches into it from any thread, and the controller [`drain`]s it once per
//! tick into [`ClassObservations`], one per class.
//!
//! A batch is all or nothing: one bad sample (a negative, non-finite or
//! day-long time, an empty or unknown class) rejects the whole batch with an error naming the
//! sample and the field, and leaves the inbox as it was.
//!
//! [`push`]: SampleInbox::push
//! [`drain`]: SampleInbox::drain

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    sync::{Mutex, MutexGuard, PoisonError, RwLock},
};

use serde::{Deserialize, Serialize};

use super::{ClassObservations, Observation};

/// One finished job, as a server reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSample {
    /// The class the job was admitted under.
    pub class: String,
    /// Time from arrival to a worker picking it up, in milliseconds.
    pub queue_age_ms: f64,
    /// Time the worker spent on it, in milliseconds.
    pub service_ms: f64,
    /// `None` when it finished by its deadline, otherwise how late it was.
    #[serde(default)]
    pub late_by_ms: Option<f64>,
    /// Which try this was (1 = first). Retries add load and take slack,
    /// so they are counted.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// The estimate of its service time the server gave `admit`, ms: the
    /// class learns from it how far off its estimates run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_service_ms: Option<f64>,
}

fn first_attempt() -> u32 {
    1
}

impl JobSample {
    /// Checks one sample: a non-empty class, and times that are finite and
    /// not negative. The error names the field.
    pub fn validate(&self) -> Result<(), SampleError> {
        if self.class.trim().is_empty() {
            return Err(SampleError::field(0, "class", "is empty"));
        }
        check_ms(self.queue_age_ms).map_err(|reason| SampleError::field(0, "queue_age_ms", reason))?;
        check_ms(self.service_ms).map_err(|reason| SampleError::field(0, "service_ms", reason))?;
        if let Some(late) = self.late_by_ms {
            check_ms(late).map_err(|reason| SampleError::field(0, "late_by_ms", reason))?;
        }
        if let Some(estimate) = self.estimated_service_ms {
            check_estimate_ms(estimate).map_err(|reason| SampleError::field(0, "estimated_service_ms", reason))?;
        }
        Ok(())
    }
}

/// The longest time a sample may report, ms: a day. No inference job waits
/// or runs that long, and one absurd figure would otherwise sway a class's
/// estimates (and the capacity learnt from them) for a whole window.
pub const MAX_SAMPLE_MS: f64 = 86_400_000.0;

/// A time a server reports: finite, 0 or more, at most a day.
pub fn check_ms(value: f64) -> Result<(), String> {
    if !value.is_finite() {
        Err(format!("{value} is not a finite number of milliseconds"))
    } else if value < 0.0 {
        Err(format!("{value} is negative; times are at least 0 ms"))
    } else if value > MAX_SAMPLE_MS {
        Err(format!("{value:e} ms is more than a day ({MAX_SAMPLE_MS} ms)"))
    } else {
        Ok(())
    }
}

/// An estimate of a job's service time: a time, and more than 0.
pub fn check_estimate_ms(value: f64) -> Result<(), String> {
    check_ms(value)?;
    if value == 0.0 { Err("0 ms: an estimate is more than 0".into()) } else { Ok(()) }
}

/// Why a batch was rejected. Nothing from it was kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SampleError {
    /// A sample's field is invalid. `index` is the sample's position in its
    /// batch, counting from 0.
    Field { index: usize, field: &'static str, reason: String },
    /// The inbox already holds `pending` samples that the controller has not
    /// drained; taking `offered` more would pass `limit`.
    Full { pending: usize, offered: usize, limit: usize },
}

impl SampleError {
    fn field(index: usize, field: &'static str, reason: impl Into<String>) -> Self {
        Self::Field { index, field, reason: reason.into() }
    }

    fn at(self, index: usize) -> Self {
        match self {
            Self::Field { field, reason, .. } => Self::Field { index, field, reason },
            full @ Self::Full { .. } => full,
        }
    }
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Field { index, field, reason } => {
                write!(f, "sample[{index}].{field}: {reason}; the batch was rejected, nothing was recorded")
            }
            Self::Full { pending, offered, limit } => write!(
                f,
                "sample inbox full: {pending} samples pending, {offered} offered, limit {limit}; \
                 the batch was rejected, nothing was recorded"
            ),
        }
    }
}

impl std::error::Error for SampleError {}

/// Samples the inbox holds between two drains, at most, by default: 10 s of
/// 10,000 samples/s. Past it a batch is refused rather than growing memory
/// without bound while the controller is stalled.
pub const DEFAULT_MAX_PENDING: usize = 100_000;

/// A thread-safe inbox of validated samples. Share it with an `Arc`.
#[derive(Debug)]
pub struct SampleInbox {
    state: Mutex<InboxState>,
    /// When set, only these classes are accepted; a config reload replaces them.
    classes: RwLock<Option<BTreeSet<String>>>,
    max_pending: usize,
}

#[derive(Debug, Default)]
struct InboxState {
    pending: Vec<JobSample>,
    stats: InboxStats,
}

/// Running totals since the inbox was made, for the status API and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InboxStats {
    pub accepted_samples: u64,
    pub rejected_batches: u64,
}

impl Default for SampleInbox {
    fn default() -> Self {
        Self::new()
    }
}

impl SampleInbox {
    /// An inbox that accepts any class name.
    pub fn new() -> Self {
        Self { state: Mutex::default(), classes: RwLock::new(None), max_pending: DEFAULT_MAX_PENDING }
    }

    /// An inbox that rejects samples for classes not in `classes`.
    pub fn with_classes<S: Into<String>>(classes: impl IntoIterator<Item = S>) -> Self {
        Self { classes: RwLock::new(Some(classes.into_iter().map(Into::into).collect())), ..Self::new() }
    }

    /// Changes the most samples held between drains.
    pub fn with_max_pending(mut self, max_pending: usize) -> Self {
        self.max_pending = max_pending;
        self
    }

    /// Validates the whole batch, then records it: returns how many samples
    /// were recorded. On error nothing was recorded.
    pub fn push(&self, batch: Vec<JobSample>) -> Result<usize, SampleError> {
        let checked = self.check(&batch);
        let mut state = self.lock();
        let checked = checked.and_then(|()| {
            let (pending, offered) = (state.pending.len(), batch.len());
            match pending.checked_add(offered) {
                Some(total) if total <= self.max_pending => Ok(()),
                _ => Err(SampleError::Full { pending, offered, limit: self.max_pending }),
            }
        });
        if let Err(error) = checked {
            state.stats.rejected_batches += 1;
            return Err(error);
        }
        let accepted = batch.len();
        state.pending.extend(batch);
        state.stats.accepted_samples += accepted as u64;
        Ok(accepted)
    }

    /// Accepts these classes from now on (after a config reload).
    pub fn set_classes<S: Into<String>>(&self, classes: impl IntoIterator<Item = S>) {
        *self.classes.write().unwrap_or_else(|e| e.into_inner()) = Some(classes.into_iter().map(Into::into).collect());
    }

    fn check(&self, batch: &[JobSample]) -> Result<(), SampleError> {
        let classes = self.classes.read().unwrap_or_else(|e| e.into_inner());
        for (index, sample) in batch.iter().enumerate() {
            sample.validate().map_err(|error| error.at(index))?;
            if let Some(classes) = classes.as_ref()
                && !classes.contains(&sample.class)
            {
                let known = classes.iter().map(String::as_str).collect::<Vec<_>>().join(", ");
                return Err(SampleError::field(
                    index,
                    "class",
                    format!("unknown class {:?} (configured: {known})", sample.class),
                ));
            }
        }
        Ok(())
    }

    /// Takes every pending sample, as observations per class (sorted by class
    /// name). The inbox is empty afterwards.
    pub fn drain(&self) -> Vec<ClassObservations> {
        let pending = {
            let mut state = self.lock();
            // Leave room for as many as last time: the steady state allocates nothing.
            let room = state.pending.len();
            std::mem::replace(&mut state.pending, Vec::with_capacity(room))
        };
        to_observations(&pending)
    }

    /// Samples waiting for the next drain.
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    pub fn stats(&self) -> InboxStats {
        self.lock().stats
    }

    fn lock(&self) -> MutexGuard<'_, InboxState> {
        // Nothing panics while holding the lock; if something ever did, the
        // samples are still plain data and fine to keep using.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Samples as observations: one [`ClassObservations`] per class present,
/// sorted by class name. Each sample becomes a `QueueAge`, a `Service` and a
/// `Completion` observation (count 1), in arrival order.
pub fn to_observations(samples: &[JobSample]) -> Vec<ClassObservations> {
    let mut by_class: BTreeMap<&str, Vec<Observation>> = BTreeMap::new();
    for sample in samples {
        by_class.entry(&sample.class).or_default().extend([
            Observation::QueueAge { ms: sample.queue_age_ms, count: 1 },
            Observation::Service { ms: sample.service_ms, count: 1 },
            Observation::Completion { late_by_ms: sample.late_by_ms, count: 1 },
        ]);
        if sample.attempt > 1 {
            by_class.entry(&sample.class).or_default().push(Observation::Retry { count: 1 });
        }
        if let Some(estimate) = sample.estimated_service_ms {
            let error = Observation::EstimateError { estimate_ms: estimate, service_ms: sample.service_ms, count: 1 };
            by_class.entry(&sample.class).or_default().push(error);
        }
    }
    by_class
        .into_iter()
        .map(|(class, observations)| ClassObservations { class: class.to_owned(), observations })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, thread};

    use super::*;

    fn sample(class: &str, queue_age_ms: f64, service_ms: f64, late_by_ms: Option<f64>) -> JobSample {
        JobSample { class: class.into(), queue_age_ms, service_ms, late_by_ms, attempt: 1, estimated_service_ms: None }
    }

    #[test]
    fn drain_groups_by_class_with_all_three_observations() {
        let inbox = SampleInbox::new();
        let batch = vec![
            sample("interactive", 40.0, 120.0, None),
            sample("batch", 2400.0, 1800.0, Some(350.5)),
            sample("interactive", 0.0, 95.25, Some(0.0)),
        ];
        assert_eq!(inbox.push(batch), Ok(3));
        assert_eq!(inbox.pending(), 3);
        assert_eq!(
            inbox.drain(),
            vec![
                ClassObservations {
                    class: "batch".into(),
                    observations: vec![
                        Observation::QueueAge { ms: 2400.0, count: 1 },
                        Observation::Service { ms: 1800.0, count: 1 },
                        Observation::Completion { late_by_ms: Some(350.5), count: 1 },
                    ],
                },
                ClassObservations {
                    class: "interactive".into(),
                    observations: vec![
                        Observation::QueueAge { ms: 40.0, count: 1 },
                        Observation::Service { ms: 120.0, count: 1 },
                        Observation::Completion { late_by_ms: None, count: 1 },
                        Observation::QueueAge { ms: 0.0, count: 1 },
                        Observation::Service { ms: 95.25, count: 1 },
                        Observation::Completion { late_by_ms: Some(0.0), count: 1 },
                    ],
                },
            ]
        );
        assert_eq!(inbox.pending(), 0);
        assert_eq!(inbox.drain(), Vec::new(), "a drain empties the inbox");
        assert_eq!(inbox.stats(), InboxStats { accepted_samples: 3, rejected_batches: 0 });
        // A sample with the server's estimate also says how far off it was.
        let estimated = JobSample { estimated_service_ms: Some(100.0), ..sample("chat", 5.0, 150.0, None) };
        let observations = &to_observations(&[estimated])[0].observations;
        let error = Observation::EstimateError { estimate_ms: 100.0, service_ms: 150.0, count: 1 };
        assert_eq!(observations.last(), Some(&error));
    }

    #[test]
    fn one_bad_sample_rejects_the_whole_batch_and_names_the_field() {
        let estimated = |estimate| JobSample { estimated_service_ms: Some(estimate), ..sample("a", 1.0, 1.0, None) };
        let cases: [(JobSample, &str, &str); 11] = [
            (sample("a", -1.0, 1.0, None), "queue_age_ms", "-1 is negative"),
            (sample("a", f64::NAN, 1.0, None), "queue_age_ms", "NaN is not a finite"),
            (sample("a", 1.0, f64::INFINITY, None), "service_ms", "inf is not a finite"),
            (sample("a", 1.0, -0.5, None), "service_ms", "-0.5 is negative"),
            (sample("a", 1.0, 1e300, None), "service_ms", "1e300 ms is more than a day"),
            (sample("a", 1.0, 1.0, Some(-3.0)), "late_by_ms", "-3 is negative"),
            (sample("a", 1.0, 1.0, Some(f64::NEG_INFINITY)), "late_by_ms", "-inf is not a finite"),
            (sample("", 1.0, 1.0, None), "class", "is empty"),
            (sample("  ", 1.0, 1.0, None), "class", "is empty"),
            (estimated(0.0), "estimated_service_ms", "0 ms: an estimate is more than 0"),
            (estimated(f64::NAN), "estimated_service_ms", "NaN is not a finite"),
        ];
        for (bad, field, reason) in cases {
            let inbox = SampleInbox::new();
            inbox.push(vec![sample("kept", 1.0, 2.0, None)]).unwrap();
            let batch = vec![sample("a", 1.0, 1.0, None), sample("b", 2.0, 2.0, Some(1.0)), bad];
            let error = inbox.push(batch).unwrap_err();
            let SampleError::Field { index, field: got_field, reason: got_reason } = &error else {
                panic!("{error:?}");
            };
            assert_eq!((*index, *got_field), (2, field), "{error}");
            assert!(got_reason.starts_with(reason), "{got_reason:?} should start with {reason:?}");
            let message = error.to_string();
            assert!(message.starts_with(&format!("sample[2].{field}: ")), "{message}");
            assert!(message.ends_with("the batch was rejected, nothing was recorded"), "{message}");
            // Nothing from the rejected batch, the earlier batch intact.
            assert_eq!(inbox.pending(), 1);
            assert_eq!(inbox.drain(), to_observations(&[sample("kept", 1.0, 2.0, None)]));
            assert_eq!(inbox.stats(), InboxStats { accepted_samples: 1, rejected_batches: 1 });
        }
    }

    #[test]
    fn unknown_classes_are_rejected_when_classes_are_configured() {
        let inbox = SampleInbox::with_classes(["batch", "interactive"]);
        assert_eq!(inbox.push(vec![sample("batch", 1.0, 1.0, None)]), Ok(1));
        let error =
            inbox.push(vec![sample("interactive", 1.0, 1.0, None), sample("bulk", 1.0, 1.0, None)]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "sample[1].class: unknown class \"bulk\" (configured: batch, interactive); \
             the batch was rejected, nothing was recorded"
        );
        assert_eq!(inbox.pending(), 1);
    }

    #[test]
    fn a_full_inbox_refuses_batches_until_drained() {
        let inbox = SampleInbox::new().with_max_pending(3);
        assert_eq!(inbox.push(vec![sample("a", 1.0, 1.0, None); 2]), Ok(2));
        let error = inbox.push(vec![sample("a", 1.0, 1.0, None); 2]).unwrap_err();
        assert_eq!(error, SampleError::Full { pending: 2, offered: 2, limit: 3 });
        assert_eq!(inbox.pending(), 2);
        assert_eq!(inbox.push(vec![sample("a", 1.0, 1.0, None)]), Ok(1));
        inbox.drain();
        assert_eq!(inbox.push(vec![sample("a", 1.0, 1.0, None); 3]), Ok(3));
    }

    #[test]
    fn an_empty_batch_is_fine() {
        let inbox = SampleInbox::new();
        assert_eq!(inbox.push(Vec::new()), Ok(0));
        assert_eq!(inbox.drain(), Vec::new());
    }

    #[test]
    fn concurrent_pushes_and_drains_lose_nothing() {
        const THREADS: usize = 4;
        const BATCHES: usize = 200;
        const PER_BATCH: usize = 25;
        let inbox = Arc::new(SampleInbox::new());
        let pushers: Vec<_> = (0..THREADS)
            .map(|t| {
                let inbox = Arc::clone(&inbox);
                thread::spawn(move || {
                    for b in 0..BATCHES {
                        let batch = (0..PER_BATCH)
                            .map(|i| sample(&format!("class{t}"), (b * PER_BATCH + i) as f64, 1.0, None))
                            .collect();
                        inbox.push(batch).unwrap();
                    }
                })
            })
            .collect();
        let mut seen: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut record = |drained: Vec<ClassObservations>| {
            for class in drained {
                let ages = seen.entry(class.class).or_default();
                for observation in class.observations {
                    if let Observation::QueueAge { ms, count } = observation {
                        assert_eq!(count, 1);
                        ages.push(ms);
                    }
                }
            }
        };
        while pushers.iter().any(|p| !p.is_finished()) {
            record(inbox.drain());
            thread::yield_now();
        }
        for pusher in pushers {
            pusher.join().unwrap();
        }
        record(inbox.drain());
        assert_eq!(seen.len(), THREADS);
        for (class, ages) in seen {
            // Every sample exactly once, in each pusher's order.
            let expected: Vec<f64> = (0..BATCHES * PER_BATCH).map(|i| i as f64).collect();
            assert_eq!(ages, expected, "{class}");
        }
    }

    #[test]
    fn samples_deserialize_and_refuse_unknown_fields() {
        let parsed: JobSample =
            toml::from_str("class = \"interactive\"\nqueue_age_ms = 2400\nservice_ms = 1800.5").unwrap();
        assert_eq!(parsed, sample("interactive", 2400.0, 1800.5, None));
        let late: JobSample =
            toml::from_str("class = \"batch\"\nqueue_age_ms = 1\nservice_ms = 2\nlate_by_ms = 350").unwrap();
        assert_eq!(late.late_by_ms, Some(350.0));
        let error =
            toml::from_str::<JobSample>("class = \"a\"\nqueue_age_ms = 1\nservice_ms = 2\nlate = 3").unwrap_err();
        assert!(error.to_string().contains("unknown field `late`"), "{error}");
    }
}
