//! The load generator, in the client namespace: open-loop arrivals from the
//! plan, each job on a new TCP connection to its class's port (so the fast
//! path sees, and classifies, one SYN per attempt), from its tenant's own
//! address, with its deadline, hedged where its class says so.
//!
//! Bounded in count (the plan, `max_attempts`, one hedge per attempt) and
//! in time: a connect waits at most until the job's deadline, a retry is
//! never scheduled past it, and an answer is awaited at most until the
//! run's end.

use std::{
    io::ErrorKind,
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

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
    hedge::{Answered, HedgePolicy, hedged},
    http::{Request, Response, read_head},
    progress::Tally,
    retry::RetryPolicy,
    run_context::RunContext,
    tenants,
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

impl Answered for Attempt {
    fn outcome(&self) -> Outcome {
        self.outcome
    }
}

/// Where a job's connections go from and to.
struct Route {
    from: Option<IpAddr>,
    to: SocketAddr,
}

/// Runs the whole plan against `server` (one port per class) and returns a
/// record per job, in plan order. `stop` ends it early.
pub async fn run_load(
    ctx: Arc<RunContext>,
    server: IpAddr,
    policy: Arc<RetryPolicy>,
    tally: Arc<Tally>,
    stop: watch::Receiver<bool>,
) -> Vec<JobRecord> {
    let window_ms = 1000.0 * ctx.time_scale;
    let hedges: Arc<Vec<Option<HedgePolicy>>> =
        Arc::new(ctx.scaled.classes.iter().map(|c| c.hedge.as_ref().map(|h| HedgePolicy::new(h, window_ms))).collect());
    let mut jobs = Vec::with_capacity(ctx.plan.len());
    for index in 0..ctx.plan.len() {
        let (ctx, policy, tally, hedges, mut stop) =
            (ctx.clone(), policy.clone(), tally.clone(), hedges.clone(), stop.clone());
        jobs.push(tokio::spawn(async move {
            let job = &ctx.plan[index];
            let route = Route {
                from: job.tenant.map(|t| IpAddr::V4(tenants::address(ctx.tenant_number(job.class, t)))),
                to: SocketAddr::new(server, ctx.scaled.classes[job.class].port),
            };
            let hedge = hedges[job.class].as_ref();
            let record = tokio::select! {
                record = run_job(&ctx, job, &route, &policy, hedge) => record,
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
async fn run_job(
    ctx: &RunContext,
    job: &PlannedJob,
    route: &Route,
    policy: &RetryPolicy,
    hedge: Option<&HedgePolicy>,
) -> Option<JobRecord> {
    sleep_until(ctx.at(job.arrival_ms)).await;
    let deadline_ms = ctx.deadline_ms(job);
    policy.first_attempt(ctx.now_ms());
    if let Some(hedge) = hedge {
        hedge.first_attempt(ctx.now_ms());
    }
    let (mut attempts, mut any_hedge) = (1, false);
    let last = loop {
        let request = |hedge| Request { job: job.id, attempt: attempts, hedge };
        let (attempt, hedged_this) = hedged(
            attempt_once(ctx, request(false), route, deadline_ms, None),
            hedge,
            || ctx.now_ms(),
            || attempt_once(ctx, request(true), route, deadline_ms, hedge.map(|h| h.dscp)),
        )
        .await;
        any_hedge |= hedged_this;
        let retryable = matches!(
            attempt.outcome,
            Outcome::Rejected | Outcome::Degraded | Outcome::RejectedDeadline | Outcome::Overloaded | Outcome::Failed
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
        tenant: job.tenant,
        hedged: any_hedge,
    })
}

/// One connection: `dscp` marks its packets (a hedge's codepoint).
async fn attempt_once(
    ctx: &RunContext,
    request: Request,
    route: &Route,
    deadline_ms: f64,
    dscp: Option<u8>,
) -> Attempt {
    let Ok(socket) = TcpSocket::new_v4() else { return Attempt::bare(Outcome::Failed) };
    if let Some(dscp) = dscp
        && socket.set_tos_v4(u32::from(dscp) << 2).is_err()
    {
        return Attempt::bare(Outcome::Failed);
    }
    if let Some(from) = route.from
        && socket.bind(SocketAddr::new(from, 0)).is_err()
    {
        return Attempt::bare(Outcome::Failed);
    }
    let mut stream = match timeout_at(ctx.at(deadline_ms), socket.connect(route.to)).await {
        Err(_) => return Attempt::bare(Outcome::DeferredTimedOut),
        Ok(Err(e)) if e.kind() == ErrorKind::ConnectionRefused => return Attempt::bare(Outcome::Rejected),
        Ok(Err(_)) => return Attempt::bare(Outcome::Failed),
        Ok(Ok(stream)) => stream,
    };
    if stream.write_all(request.to_wire().as_bytes()).await.is_err() {
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
        (429 | 503, Some("reject_deadline")) => Outcome::RejectedDeadline,
        (503, Some("queue_full" | "queue_timeout" | "saturated")) => Outcome::Overloaded,
        _ => Outcome::Failed,
    };
    Attempt { outcome, response: Some(response) }
}
