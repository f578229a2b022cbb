//! The staging inference backend, the server side of real TCP connections
//! in the server namespace: an HTTP server on each class's port, one FIFO
//! queue for all classes, and W worker slots ([`crate::workers`]).
//!
//! It honours marks, and nothing else of shedder's: a connection whose SYN
//! arrived with a DSCP mark (read back with `TCP_SAVED_SYN`) is answered 503
//! with a jittered `Retry-After` at once, without queueing.

use std::{net::TcpListener, sync::Arc, time::Duration};

use anyhow::Context as _;
use rand::RngExt as _;
use shedder_tests::saved_syn::{dscp_of, saved_syn};
use tokio::{
    io::AsyncWriteExt as _,
    net::TcpStream,
    sync::{mpsc, oneshot},
    task::JoinSet,
};

use crate::{
    http::{Response, parse_request, read_head},
    run_context::RunContext,
    workers::{self, Admission},
};

/// A request waiting for a worker.
pub struct QueuedJob {
    pub id: u64,
    pub attempt: u32,
    /// When it joined the queue, ms on the run's clock.
    pub enqueued_ms: f64,
    pub reply: oneshot::Sender<Response>,
}

/// How long a client may take to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The backend's tasks; aborted when dropped.
pub struct Backend {
    tasks: JoinSet<()>,
}

impl Backend {
    /// Serves `listeners` (one per class, in the workload's order; created in
    /// the server namespace with saved SYNs) on the current tokio runtime.
    pub fn start(ctx: Arc<RunContext>, listeners: Vec<TcpListener>, admission: Admission) -> anyhow::Result<Self> {
        let mut tasks = JoinSet::new();
        let (queue, waiting) = mpsc::unbounded_channel();
        workers::start(&mut tasks, ctx.clone(), waiting, admission);
        for listener in listeners {
            let listener = tokio::net::TcpListener::from_std(listener).context("registering a listener")?;
            let (ctx, queue) = (ctx.clone(), queue.clone());
            tasks.spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(ctx.clone(), stream, queue.clone()));
                }
            });
        }
        Ok(Self { tasks })
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// One connection: one request, one answer.
async fn serve(ctx: Arc<RunContext>, stream: TcpStream, queue: mpsc::UnboundedSender<QueuedJob>) {
    let Ok((marked, mut stream)) = mark_of(stream) else { return };
    let Ok(Ok(head)) = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await else { return };
    let Ok((id, attempt)) = parse_request(&head) else { return };
    if ctx.plan.get(id as usize).is_none_or(|job| job.id != id) {
        return;
    }
    let response = if marked {
        // One to three of the workload's seconds, so marked clients do not come back together.
        Response::new(503).header("X-Drill-Reason", "degraded").header("Retry-After", rand::rng().random_range(1..=3))
    } else {
        let (reply, answer) = oneshot::channel();
        if queue.send(QueuedJob { id, attempt, enqueued_ms: ctx.now_ms(), reply }).is_err() {
            return;
        }
        let Ok(response) = answer.await else { return };
        response
    };
    let _ = stream.write_all(response.to_wire().as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Whether the connection's SYN carried a DSCP mark (shedder's `mark`).
fn mark_of(stream: TcpStream) -> std::io::Result<(bool, TcpStream)> {
    let stream = stream.into_std()?;
    let marked = saved_syn(&stream).ok().and_then(|header| dscp_of(&header)).is_some_and(|dscp| dscp != 0);
    Ok((marked, TcpStream::from_std(stream)?))
}
