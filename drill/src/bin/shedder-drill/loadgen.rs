//! The load generator, in the client namespace: open-loop arrivals from the
//! plan, each job on a new TCP connection to its class's port (so the fast
//! path sees, and classifies, one SYN per attempt), with its deadline.
//!
//! Bounded in count (the plan, `max_attempts`) and in time: a connect waits
//! at most until the job's deadline, a retry is never scheduled past it, and
//! an answer is awaited at most until the run's end.

use std::{io::ErrorKind, net::SocketAddr, sync::Arc};

use shedder_drill::{
    plan::PlannedJob,
    record::{JobRecord, Outcome},
};
use tokio::{
    io::AsyncWriteExt as _,
    net::TcpSocket,
    sync::watch,
    time::{sleep_until, timeout_at},
};

use crate::{
    http::{Response, read_head, request},
    progress::Tally,
    retry::RetryPolicy,
    run_context::RunContext,
};

/// One attempt's result.
struct Attempt {
    outcome: Outcome,
    /// The server's figures, when it got that far.
    response: Option<Response>,
}

impl Attempt {
    fn bare(outcome: Outcome) -> Self {
        Self { outcome, response: None }
    }
}

/// Runs the whole plan against `server` (one port per class) and returns a
/// record per job, in plan order. `stop` ends it early.
pub async fn run_load(
    ctx: Arc<RunContext>,
    server: std::net::IpAddr,
    policy: Arc<RetryPolicy>,
    tally: Arc<Tally>,
    stop: watch::Receiver<bool>,
) -> Vec<JobRecord> {
    let mut jobs = Vec::with_capacity(ctx.plan.len());
    for index in 0..ctx.plan.len() {
        let (ctx, policy, tally, mut stop) = (ctx.clone(), policy.clone(), tally.clone(), stop.clone());
        jobs.push(tokio::spawn(async move {
            let job = &ctx.plan[index];
            let addr = SocketAddr::new(server, ctx.scaled.classes[job.class].port);
            let record = tokio::select! {
                record = run_job(&ctx, job, addr, &policy) => record,
                _ = stop.wait_for(|stopping| *stopping) => None,
            }?;
            tally.count(record.outcome);
            Some(record)
        }));
    }
    let mut records = Vec::with_capacity(jobs.len());
    for job in jobs {
        if let Ok(Some(record)) = job.await {
            records.push(record);
        }
    }
    records
}

/// One job, from its arrival to its outcome (None if the run ended before it arrived).
async fn run_job(ctx: &RunContext, job: &PlannedJob, addr: SocketAddr, policy: &RetryPolicy) -> Option<JobRecord> {
    sleep_until(ctx.at(job.arrival_ms)).await;
    let deadline_ms = ctx.deadline_ms(job);
    policy.first_attempt(ctx.now_ms());
    let mut attempts = 1;
    let last = loop {
        let attempt = attempt_once(ctx, job, attempts, addr, deadline_ms).await;
        let retryable = matches!(
            attempt.outcome,
            Outcome::Rejected | Outcome::Degraded | Outcome::RejectedDeadline | Outcome::Failed
        );
        let retry_after =
            attempt.response.as_ref().and_then(|r| r.number("retry-after")).map(|s| ctx.workload_seconds(s));
        let now_ms = ctx.now_ms();
        let delay = retryable.then(|| policy.next_delay(attempts, retry_after, now_ms)).flatten();
        match delay {
            Some(delay) if now_ms + delay.as_secs_f64() * 1000.0 < deadline_ms => {
                tokio::time::sleep(delay).await;
                attempts += 1;
            }
            _ => break attempt,
        }
    };
    let figure = |name: &str| last.response.as_ref().and_then(|r| r.number(name));
    Some(JobRecord {
        class: job.class,
        arrival_ms: job.arrival_ms,
        finished_ms: ctx.now_ms(),
        outcome: last.outcome,
        attempts,
        queue_age_ms: figure("x-drill-queue-age-ms"),
        service_ms: figure("x-drill-service-ms"),
        slack_at_start_ms: figure("x-drill-slack-ms"),
        injected: job.injected,
    })
}

async fn attempt_once(ctx: &RunContext, job: &PlannedJob, attempt: u32, addr: SocketAddr, deadline_ms: f64) -> Attempt {
    let Ok(socket) = TcpSocket::new_v4() else { return Attempt::bare(Outcome::Failed) };
    let mut stream = match timeout_at(ctx.at(deadline_ms), socket.connect(addr)).await {
        Err(_) => return Attempt::bare(Outcome::DeferredTimedOut),
        Ok(Err(e)) if e.kind() == ErrorKind::ConnectionRefused => return Attempt::bare(Outcome::Rejected),
        Ok(Err(_)) => return Attempt::bare(Outcome::Failed),
        Ok(Ok(stream)) => stream,
    };
    if stream.write_all(request(job.id, attempt).as_bytes()).await.is_err() {
        return Attempt::bare(Outcome::Failed);
    }
    let head = match timeout_at(ctx.at(ctx.end_ms()), read_head(&mut stream)).await {
        // Still unanswered when the run ends: it missed its deadline, but it
        // is not a completion (its latency is unknown).
        Err(_) => return Attempt::bare(Outcome::Unfinished),
        Ok(Err(_)) => return Attempt::bare(Outcome::Failed),
        Ok(Ok(head)) => head,
    };
    let Ok(response) = Response::parse(&head) else { return Attempt::bare(Outcome::Failed) };
    let outcome = match (response.status, response.headers.get("x-drill-reason").map(String::as_str)) {
        (200, _) if ctx.now_ms() <= deadline_ms => Outcome::OnTime,
        (200, _) => Outcome::Late,
        (503, Some("degraded")) => Outcome::Degraded,
        (503, Some("reject_deadline")) => Outcome::RejectedDeadline,
        _ => Outcome::Failed,
    };
    Attempt { outcome, response: Some(response) }
}
