//! The staging inference backend, the server side of real TCP connections
//! in the server namespace: an HTTP server on each class's port, one FIFO
//! queue for all classes, and W worker slots ([`crate::workers`]).
//!
//! It honours marks, and nothing else of shedder's: a connection whose SYN
//! arrived with shedder's mark ([`MARK_DSCP`], read back with
//! `TCP_SAVED_SYN`) is answered 503 with a jittered `Retry-After` at once,
//! without queueing; a hedge's codepoint is no mark. Every request that reaches it pays the
//! frontend's cost first ([`crate::frontend`]), and a peer mode may refuse
//! it on arrival ([`crate::peer`]).

use std::{net::TcpListener, sync::Arc, time::Duration};

use anyhow::Context as _;
use rand::RngExt as _;
use shedder_drill::workload::MARK_DSCP;
use shedder_testbed::saved_syn::{dscp_of, saved_syn};
use tokio::{
    io::AsyncWriteExt as _,
    net::TcpStream,
    sync::{mpsc, oneshot},
    task::JoinSet,
};

use crate::{
    exporter::Exporter,
    frontend::FrontendPool,
    http::{Request, Response, read_head},
    peer::{Load, Peer},
    run_context::RunContext,
    workers::{self, Admission, QueuedJob},
};

/// How long a client may take to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The backend's tasks; aborted when dropped.
pub struct Backend {
    tasks: JoinSet<()>,
}

/// What every connection's task shares.
struct Server {
    ctx: Arc<RunContext>,
    queue: mpsc::UnboundedSender<QueuedJob>,
    load: Arc<Load>,
    peer: Peer,
    frontend: Option<Arc<FrontendPool>>,
    exporter: Option<Arc<Exporter>>,
}

impl Backend {
    /// Serves `listeners` (one per class, in the workload's order; created in
    /// the server namespace with saved SYNs) on the current tokio runtime;
    /// with an `exporter`, tells it of every job queued and served instead
    /// of pushing samples.
    pub fn start(
        ctx: Arc<RunContext>,
        listeners: Vec<TcpListener>,
        admission: Admission,
        peer: Peer,
        exporter: Option<Arc<Exporter>>,
    ) -> anyhow::Result<Self> {
        let mut tasks = JoinSet::new();
        let (queue, waiting) = mpsc::unbounded_channel();
        let load = Arc::new(Load::default());
        workers::start(&mut tasks, ctx.clone(), waiting, admission, peer, load.clone(), exporter.clone());
        let frontend = match &ctx.scaled.frontend {
            Some(f) => Some(FrontendPool::start(Duration::from_secs_f64(f.cost_ms / 1000.0), f.threads)?),
            None => None,
        };
        let server = Arc::new(Server { ctx, queue, load, peer, frontend, exporter });
        for listener in listeners {
            let listener = tokio::net::TcpListener::from_std(listener).context("registering a listener")?;
            let server = server.clone();
            tasks.spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(server.clone().serve(stream));
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

impl Server {
    /// One connection: one request, one answer.
    async fn serve(self: Arc<Self>, stream: TcpStream) {
        let ctx = &self.ctx;
        let Ok((dscp, mut stream)) = dscp_of_syn(stream) else { return };
        let Ok(Ok(head)) = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await else { return };
        let Ok(request) = Request::parse(&head) else { return };
        let Some(job) = ctx.plan.get(request.job as usize).filter(|job| job.id == request.job) else { return };
        let class = &ctx.scaled.classes[job.class];
        if let Some(frontend) = &self.frontend {
            frontend.pay().await;
        }
        let response = if dscp == MARK_DSCP {
            // One to three of the workload's seconds, so marked clients do not come back together.
            Response::new(503)
                .header("X-Drill-Reason", "degraded")
                .header("Retry-After", rand::rng().random_range(1..=3))
        } else if let Some(reason) = self.peer.on_arrival(class.tier, &self.load, ctx.scaled.worker_count) {
            // The peers' servers say no more than this: no Retry-After.
            Response::new(503).header("X-Drill-Reason", reason)
        } else {
            let (reply, answer) = oneshot::channel();
            self.load.enqueued();
            if let Some(exporter) = &self.exporter {
                exporter.queued(job.class);
            }
            let queued = QueuedJob {
                id: request.job,
                attempt: request.attempt,
                hedge: request.hedge,
                enqueued_ms: ctx.now_ms(),
                reply,
            };
            if self.queue.send(queued).is_err() {
                return;
            }
            let Ok(response) = answer.await else { return };
            response
        };
        let _ = stream.write_all(response.to_wire().as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

/// The DSCP the connection's SYN arrived with (0 when unknown).
fn dscp_of_syn(stream: TcpStream) -> std::io::Result<(u8, TcpStream)> {
    let stream = stream.into_std()?;
    let dscp = saved_syn(&stream).ok().and_then(|header| dscp_of(&header)).unwrap_or(0);
    Ok((dscp, TcpStream::from_std(stream)?))
}
