//! How other tasks reach the [`Daemon`].
//!
//! Rather than sharing the state behind locks, a task sends a [`Job`] — a
//! closure — that the owner runs between ticks with `&mut Daemon`. Every
//! change is therefore serialised with the controller's ticks, and a reader
//! never sees half of one.

use tokio::sync::{mpsc, oneshot};

use super::Daemon;

/// Work for the owner task: runs with the daemon between ticks.
pub type Job = Box<dyn FnOnce(&mut Daemon) + Send>;

/// The owner task has exited (the daemon is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the daemon is shutting down")]
pub struct DaemonGone;

/// A way to the [`Daemon`] from another task.
#[derive(Clone)]
pub struct DaemonHandle {
    jobs: mpsc::Sender<Job>,
}

impl DaemonHandle {
    /// A handle and the queue the owner task must serve (`job(&mut daemon)`).
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<Job>) {
        let (jobs, queue) = mpsc::channel(capacity);
        (Self { jobs }, queue)
    }

    /// Runs `f` on the owner task and returns its result.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Daemon) -> T + Send + 'static,
    ) -> Result<T, DaemonGone> {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |daemon| {
            let _ = reply.send(f(daemon));
        });
        self.jobs.send(job).await.map_err(|_| DaemonGone)?;
        answer.await.map_err(|_| DaemonGone)
    }
}
