//! Finished jobs' samples to the daemon (`sample` op), batched once per
//! controller tick, as a busy inference server would push them.

use std::{path::Path, sync::Arc, time::Duration};

use serde_json::{Value, json};
use tokio::{sync::mpsc, task::JoinSet};

use crate::{control::ControlClient, run_context::RunContext};

#[derive(Clone)]
pub struct SamplePusher {
    samples: mpsc::UnboundedSender<Value>,
}

impl SamplePusher {
    pub fn start(tasks: &mut JoinSet<()>, ctx: &Arc<RunContext>, socket: &Path) -> Self {
        let (samples, mut pending) = mpsc::unbounded_channel();
        let mut client = ControlClient::new(socket);
        // The daemon's tick, at the run's time scale.
        let every = Duration::from_secs_f64(0.1 * ctx.time_scale);
        tasks.spawn(async move {
            let mut batch = Vec::new();
            loop {
                tokio::time::sleep(every).await;
                while let Ok(sample) = pending.try_recv() {
                    batch.push(sample);
                }
                if pending.is_closed() && batch.is_empty() {
                    return;
                }
                if !batch.is_empty() {
                    // A refused batch is lost, as a real server would lose it; the run goes on.
                    let _ = client.call(&json!({"op": "sample", "samples": std::mem::take(&mut batch)})).await;
                }
            }
        });
        Self { samples }
    }

    pub fn push(&self, sample: Value) {
        let _ = self.samples.send(sample);
    }
}
