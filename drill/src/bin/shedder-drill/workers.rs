//! The backend's W worker slots, taking jobs from one FIFO queue.
//!
//! The queue can hold a job back, as a priority queue can: where `admit`
//! answers `hold` (a lower tier's job that would take a worker kept for a
//! higher tier), the job stays queued, aside, and the worker takes the next
//! one. Held jobs are older than anything in the queue, so a worker asks
//! about them first: when it frees, and at the daemon's tick while it idles.
//!
//! When a worker takes a job off the queue, a `queue-timeout` peer answers
//! 503 if it waited too long. Otherwise the worker computes the job's slack
//! (time left to its deadline minus the backend's own recent service p95 for
//! the class) and, with a daemon, asks its `admit` op: in `enforce` any
//! refusal (`reject_deadline`, `reject_tier`, `reject_retry`,
//! `reject_budget`, `reject_stale`) is answered with the status the daemon
//! chose (503 unless it says otherwise), its reason and Retry-After, without
//! doing the work, and counted as the daemon's refusal (`reject_deadline`); in `observe` the answer is only recorded. A served job sleeps its planned service
//! time, and its queue age and service time go to the daemon as a sample,
//! or, when the daemon scrapes, to the backend's exporter
//! ([`crate::exporter`]), which also hears of every start and refusal.

use std::{
    collections::VecDeque,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::{Value, json};
use tokio::{
    sync::{Mutex as AsyncMutex, mpsc, oneshot},
    task::JoinSet,
};

use crate::{
    control::ControlClient,
    daemon_config::TICK_MS,
    exporter::Exporter,
    http::Response,
    peer::{Load, Peer},
    run_context::RunContext,
    samples::SamplePusher,
};

/// A request waiting for a worker.
pub struct QueuedJob {
    pub id: u64,
    pub attempt: u32,
    pub hedge: bool,
    /// When it joined the queue, ms on the run's clock.
    pub enqueued_ms: f64,
    pub reply: oneshot::Sender<Response>,
}

/// What the backend asks of the daemon before starting a job.
#[derive(Clone, Debug)]
pub enum Admission {
    /// No daemon (`off`, `static`): start every job, push no samples.
    None,
    /// Ask `admit`, record the verdict, start the job anyway; push samples.
    Observe(PathBuf),
    /// Ask `admit` and obey it; push samples.
    Enforce(PathBuf),
}

impl Admission {
    fn socket(&self) -> Option<&PathBuf> {
        match self {
            Self::None => None,
            Self::Observe(socket) | Self::Enforce(socket) => Some(socket),
        }
    }
}

/// Starts W workers on `queue` (and, with a daemon that is not scraping
/// `exporter`, the sample pusher) in `tasks`.
pub fn start(
    tasks: &mut JoinSet<()>,
    ctx: Arc<RunContext>,
    queue: mpsc::UnboundedReceiver<QueuedJob>,
    admission: Admission,
    peer: Peer,
    load: Arc<Load>,
    exporter: Option<Arc<Exporter>>,
) {
    let queue = Arc::new(AsyncMutex::new(queue));
    let held = Arc::new(Held::default());
    let recent = Arc::new(RecentService::new(&ctx));
    let pusher = match &exporter {
        Some(_) => None,
        None => admission.socket().map(|socket| SamplePusher::start(tasks, &ctx, socket)),
    };
    for _ in 0..ctx.scaled.worker_count {
        let worker = Worker {
            ctx: ctx.clone(),
            queue: queue.clone(),
            held: held.clone(),
            recent: recent.clone(),
            admit: admission.socket().map(|s| ControlClient::new(s)),
            enforce: matches!(admission, Admission::Enforce(_)),
            pusher: pusher.clone(),
            exporter: exporter.clone(),
            peer,
            load: load.clone(),
        };
        tasks.spawn(worker.run());
    }
}

/// Jobs `admit` held, oldest first.
#[derive(Default)]
struct Held(Mutex<VecDeque<QueuedJob>>);

impl Held {
    fn oldest(&self) -> Option<QueuedJob> {
        self.0.lock().unwrap().pop_front()
    }

    fn put(&self, job: QueuedJob) {
        let mut held = self.0.lock().unwrap();
        let at = held.partition_point(|j| j.enqueued_ms <= job.enqueued_ms);
        held.insert(at, job);
    }

    fn is_empty(&self) -> bool {
        self.0.lock().unwrap().is_empty()
    }
}

/// What a worker did with a job it took.
enum Taken {
    Answered(Response),
    /// `admit` held it: back in the queue.
    Held,
}

struct Worker {
    ctx: Arc<RunContext>,
    queue: Arc<AsyncMutex<mpsc::UnboundedReceiver<QueuedJob>>>,
    held: Arc<Held>,
    recent: Arc<RecentService>,
    admit: Option<ControlClient>,
    enforce: bool,
    pusher: Option<SamplePusher>,
    exporter: Option<Arc<Exporter>>,
    peer: Peer,
    load: Arc<Load>,
}

impl Worker {
    async fn run(mut self) {
        // A worker that just put a held job back looks in the queue before
        // asking about the held ones again.
        let mut ask_held = true;
        loop {
            let job = match ask_held.then(|| self.held.oldest()).flatten() {
                Some(job) => job,
                None => {
                    // With jobs held, idle no longer than a tick: the
                    // daemon's answer may change with it.
                    let recheck = Duration::from_secs_f64(TICK_MS / 1000.0 * self.ctx.time_scale);
                    let next = async { self.queue.lock().await.recv().await };
                    let next = match self.held.is_empty() {
                        true => Some(next.await),
                        false => tokio::time::timeout(recheck, next).await.ok(),
                    };
                    match next {
                        Some(Some(job)) => job,
                        Some(None) => return,
                        None => {
                            ask_held = true;
                            continue;
                        }
                    }
                }
            };
            self.load.taken();
            match self.work(&job).await {
                Taken::Answered(response) => {
                    self.load.done();
                    let _ = job.reply.send(response);
                    ask_held = true;
                }
                Taken::Held => {
                    self.load.put_back();
                    self.held.put(job);
                    ask_held = false;
                }
            }
        }
    }

    async fn work(&mut self, job: &QueuedJob) -> Taken {
        let ctx = self.ctx.clone();
        let planned = &ctx.plan[job.id as usize];
        let class = &ctx.scaled.classes[planned.class];
        let deadline_ms = ctx.deadline_ms(planned);
        let start_ms = ctx.now_ms();
        let queue_age_ms = start_ms - job.enqueued_ms;
        let slack_ms = deadline_ms - start_ms - self.recent.p95(planned.class, start_ms);
        let figures = |response: Response| {
            response
                .header("X-Drill-Queue-Age-Ms", format!("{queue_age_ms:.3}"))
                .header("X-Drill-Slack-Ms", format!("{slack_ms:.3}"))
        };

        let exporter = self.exporter.clone();
        let abort = || {
            if let Some(exporter) = &exporter {
                exporter.aborted(planned.class);
            }
        };
        if let Some(reason) = self.peer.on_dequeue(queue_age_ms, class.deadline_ms) {
            abort();
            return Taken::Answered(figures(Response::new(503)).header("X-Drill-Reason", reason));
        }
        if let Some(verdict) = self.ask_admit(job, &class.name, deadline_ms, start_ms, queue_age_ms).await {
            let verdict_is = |v: &str| verdict["verdict"].as_str() == Some(v);
            if verdict_is("hold") && self.enforce {
                return Taken::Held;
            }
            let rejected = !verdict_is("admit") && !verdict_is("hold");
            if rejected && self.enforce {
                let retry_after_ms = verdict["retry_after_ms"].as_f64().unwrap_or(1000.0 * ctx.time_scale);
                // Retry-After is in the workload's seconds (see `http`).
                let retry_after_s = (retry_after_ms / ctx.time_scale / 1000.0).ceil().max(1.0);
                let status = verdict["status"].as_u64().and_then(|s| u16::try_from(s).ok()).unwrap_or(503);
                let detail = format!(
                    "{}: {}",
                    verdict["verdict"].as_str().unwrap_or("?"),
                    verdict["reason"].as_str().unwrap_or("no capacity")
                );
                abort();
                return Taken::Answered(
                    figures(Response::new(status))
                        .header("X-Drill-Reason", "reject_deadline")
                        .header("X-Drill-Detail", detail)
                        .header("Retry-After", retry_after_s),
                );
            }
        }

        if let Some(exporter) = &exporter {
            exporter.started(planned.class, queue_age_ms / 1000.0);
        }
        tokio::time::sleep(Duration::from_secs_f64(planned.service_ms / 1000.0)).await;
        let done_ms = ctx.now_ms();
        let service_ms = done_ms - start_ms;
        self.recent.record(planned.class, done_ms, service_ms);
        if let Some(exporter) = &exporter {
            exporter.finished(planned.class, queue_age_ms / 1000.0, service_ms / 1000.0);
        }
        if let Some(pusher) = &self.pusher {
            let late_by = done_ms - deadline_ms;
            pusher.push(json!({
                "class": class.name,
                "queue_age_ms": queue_age_ms,
                "service_ms": service_ms,
                "late_by_ms": (late_by > 0.0).then_some(late_by),
                "attempt": job.attempt,
                "estimated_service_ms": planned.estimated_service_ms,
            }));
        }
        Taken::Answered(figures(Response::new(200)).header("X-Drill-Service-Ms", format!("{service_ms:.3}")))
    }

    /// The daemon's verdict, or None without a daemon or when it cannot
    /// answer (then the job starts: the backend fails open).
    async fn ask_admit(
        &mut self,
        job: &QueuedJob,
        class: &str,
        deadline_ms: f64,
        now_ms: f64,
        queue_age_ms: f64,
    ) -> Option<Value> {
        let k = self.ctx.time_scale;
        let estimate = self.ctx.plan[job.id as usize].estimated_service_ms;
        let mut request = json!({
            "op": "admit",
            "class": class,
            "deadline_ms": deadline_ms,
            "now_ms": now_ms,
            "queue_age_ms": queue_age_ms,
            "attempt": job.attempt,
            "hedge": job.hedge,
            // What the server runs besides this job, as a server knows it.
            "running": self.load.busy().saturating_sub(1),
            // Its queue can keep a job aside and start the next.
            "can_hold": true,
            // The daemon's defaults, at the run's time scale; nothing is ever stale.
            "policy": {
                "max_queue_age_ms": 1e9,
                "retry_after_min_ms": (1000.0 * k).round() as u64,
                "retry_after_max_ms": (30_000.0 * k).round() as u64,
            },
        });
        if let Some(estimate) = estimate {
            request["estimated_service_ms"] = json!(estimate);
        }
        self.admit.as_mut()?.call(&request).await.ok()
    }
}

/// The backend's own recent service times per class, over the daemon's
/// estimator window (10 s of the workload), for each job's slack.
struct RecentService {
    window_ms: f64,
    /// The workload's p95 per class, until the class has finished a job.
    fallback_ms: Vec<f64>,
    per_class: Mutex<Vec<VecDeque<(f64, f64)>>>,
}

impl RecentService {
    fn new(ctx: &RunContext) -> Self {
        let classes = &ctx.scaled.classes;
        Self {
            window_ms: 10_000.0 * ctx.time_scale,
            fallback_ms: classes.iter().map(|c| c.service_time.p95_ms).collect(),
            per_class: Mutex::new(vec![VecDeque::new(); classes.len()]),
        }
    }

    fn record(&self, class: usize, now_ms: f64, service_ms: f64) {
        let mut per_class = self.per_class.lock().unwrap();
        per_class[class].push_back((now_ms, service_ms));
    }

    fn p95(&self, class: usize, now_ms: f64) -> f64 {
        let mut per_class = self.per_class.lock().unwrap();
        let recent = &mut per_class[class];
        while recent.front().is_some_and(|(t, _)| *t < now_ms - self.window_ms) {
            recent.pop_front();
        }
        let mut times: Vec<f64> = recent.iter().map(|(_, ms)| *ms).collect();
        if times.is_empty() {
            return self.fallback_ms[class];
        }
        times.sort_by(f64::total_cmp);
        times[((times.len() as f64 * 0.95).ceil() as usize).clamp(1, times.len()) - 1]
    }
}
