//! Nudges: when a report leaves a host short of its fair share, the report
//! script publishes to the channel of each host whose lease still commits
//! more than that host's own fair share, and those hosts report (and shrink)
//! at once instead of at their next tick; each one's confirmation of its
//! smaller share nudges the short host back to ask again. A rising host then
//! waits for the others' round trips, not their timers.
//!
//! A nudge only brings a report forward: every host still reports each tick,
//! so a lost nudge, or a listener that cannot reach Redis, costs time and
//! nothing else.

use std::time::Duration;

use futures_util::StreamExt as _;
use redis::{Client, RedisError, Value};
use tokio::{
    sync::mpsc,
    time::{sleep, timeout},
};
use tracing::debug;

/// The prefix of every host's nudge channel in the fleet `prefix`.
pub fn channel_prefix(prefix: &str) -> String {
    format!("{prefix}:nudge:")
}

/// `host`'s own nudge channel.
pub fn channel(prefix: &str, host: &str) -> String {
    format!("{}{host}", channel_prefix(prefix))
}

/// Listens on `channel` over a connection of its own until the receiver is
/// dropped; the receiver wakes once for any number of nudges since it last
/// looked. Each step with Redis waits at most `step`; a connection that
/// does not answer a ping within a step, every `check`, is replaced (a
/// half-open one would otherwise never deliver again), a `check` after it
/// failed: the reports go on every tick meanwhile.
pub fn listen(client: Client, channel: String, step: Duration, check: Duration) -> mpsc::Receiver<()> {
    let (nudged, receiver) = mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = nudged.closed() => return,
                ended = relay(&client, &channel, &nudged, step, check) => {
                    debug!(channel, error = %ended.err().map_or_else(|| "closed".into(), |e| e.to_string()), "fleet: nudges paused");
                }
            }
            tokio::select! {
                _ = nudged.closed() => return,
                _ = sleep(check) => {}
            }
        }
    });
    receiver
}

/// Subscribes and passes each message on, until the connection fails.
async fn relay(
    client: &Client,
    channel: &str,
    nudged: &mpsc::Sender<()>,
    step: Duration,
    check: Duration,
) -> Result<(), RedisError> {
    let mut pubsub = timeout(step, client.get_async_pubsub()).await.map_err(timed_out)??;
    timeout(step, pubsub.subscribe(channel)).await.map_err(timed_out)??;
    let (mut sink, mut messages) = pubsub.split();
    let mut checks = tokio::time::interval(check);
    checks.reset();
    loop {
        tokio::select! {
            message = messages.next() => match message {
                // Full means a wake-up is already pending: one report covers both.
                Some(_) => { let _ = nudged.try_send(()); }
                None => return Ok(()),
            },
            _ = checks.tick() => {
                timeout(step, sink.ping::<Value>()).await.map_err(timed_out)??;
            }
        }
    }
}

fn timed_out(_: tokio::time::error::Elapsed) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within a tick"))
}
