//! `/metrics` over HTTP/1.1 (one request per connection, as the daemon's
//! scraper asks), and the engine's step loop.

use std::{net::TcpListener, sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio::{io::AsyncWriteExt as _, task::JoinSet};

use super::{Exporter, STEP_MS};
use crate::http::read_head;

/// Serves `exporter` on `listener` (non-blocking) and steps its engine every [`STEP_MS`]
/// of the workload's clock (`k`: the run's time scale), in `tasks`.
pub fn start(tasks: &mut JoinSet<()>, exporter: Arc<Exporter>, listener: TcpListener, k: f64) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener).context("registering the metrics listener")?;
    let stepping = exporter.clone();
    tasks.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs_f64(STEP_MS * k / 1000.0));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            stepping.step();
        }
    });
    tasks.spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let exporter = exporter.clone();
            tokio::spawn(async move {
                let Ok(Ok(head)) = tokio::time::timeout(Duration::from_secs(5), read_head(&mut stream)).await else {
                    return;
                };
                let answer = if head.starts_with("GET /metrics ") {
                    let body = exporter.render();
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
                };
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(())
}
