//! The little HTTP/1.1 both sides speak: one request per connection
//! (`Connection: close`), `GET /job/<id>?attempt=<n>&hedge=<0|1>`, and a
//! status line with a few headers back: `X-Drill-Reason` on a refusal
//! (`degraded`, `reject_deadline`, or a peer's `queue_full`,
//! `queue_timeout`, `saturated`), and the backend's figures for the job record
//! (`X-Drill-Queue-Age-Ms`, `-Service-Ms`, `-Slack-Ms`, on the run's clock).
//! `Retry-After` is in the workload's seconds, as a real backend would say
//! it; the client plays it at the run's time scale.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncRead, AsyncReadExt as _};

/// Longest request or response head read.
const MAX_HEAD: usize = 8 * 1024;

/// Reads up to the blank line that ends the head.
pub async fn read_head(stream: &mut (impl AsyncRead + Unpin)) -> anyhow::Result<String> {
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            bail!("the peer closed the connection after {} bytes", head.len());
        }
        head.push(byte[0]);
        if head.len() > MAX_HEAD {
            bail!("a head longer than {MAX_HEAD} bytes");
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub job: u64,
    /// 1 for the first attempt; a retry counts up.
    pub attempt: u32,
    /// A hedge: the duplicate of an attempt still in flight.
    pub hedge: bool,
}

impl Request {
    pub fn to_wire(self) -> String {
        format!(
            "GET /job/{}?attempt={}&hedge={} HTTP/1.1\r\nHost: backend\r\nConnection: close\r\n\r\n",
            self.job,
            self.attempt,
            u8::from(self.hedge)
        )
    }

    pub fn parse(head: &str) -> anyhow::Result<Self> {
        let line = head.lines().next().unwrap_or_default();
        let target =
            line.strip_prefix("GET /job/").and_then(|rest| rest.split(' ').next()).context("not a job request")?;
        let (job, query) = target.split_once("?attempt=").context("no attempt")?;
        let (attempt, hedge) = query.split_once("&hedge=").context("no hedge")?;
        Ok(Self {
            job: job.parse().context("job id")?,
            attempt: attempt.parse().context("attempt")?,
            hedge: hedge == "1",
        })
    }
}

/// A response: status, reason, headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Self { status, headers: BTreeMap::new() }
    }

    pub fn header(mut self, name: &str, value: impl ToString) -> Self {
        self.headers.insert(name.to_ascii_lowercase(), value.to_string());
        self
    }

    pub fn to_wire(&self) -> String {
        let reason = match self.status {
            200 => "OK",
            429 => "Too Many Requests",
            _ => "Service Unavailable",
        };
        let mut text = format!("HTTP/1.1 {} {reason}\r\nConnection: close\r\nContent-Length: 0\r\n", self.status);
        for (name, value) in &self.headers {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        text.push_str("\r\n");
        text
    }

    pub fn parse(head: &str) -> anyhow::Result<Self> {
        let mut lines = head.lines();
        let status = lines.next().and_then(|l| l.split(' ').nth(1)).context("no status line")?;
        let mut response = Self::new(status.parse().context("status code")?);
        for line in lines {
            if let Some((name, value)) = line.split_once(':') {
                response = response.header(name.trim(), value.trim());
            }
        }
        Ok(response)
    }

    /// A header as a number.
    pub fn number(&self, name: &str) -> Option<f64> {
        self.headers.get(name)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_and_a_response_survive_the_wire() {
        for request in [Request { job: 1234, attempt: 2, hedge: false }, Request { job: 7, attempt: 1, hedge: true }] {
            assert_eq!(Request::parse(&request.to_wire()).unwrap(), request);
        }
        assert!(Request::parse("GET / HTTP/1.1\r\n\r\n").is_err());
        assert_eq!(Response::parse(&Response::new(429).to_wire()).unwrap().status, 429);
        let response = Response::new(503).header("Retry-After", 2).header("X-Drill-Reason", "degraded");
        let parsed = Response::parse(&response.to_wire()).unwrap();
        assert_eq!(parsed.status, 503);
        assert_eq!(parsed.number("retry-after"), Some(2.0));
        assert_eq!(parsed.headers["x-drill-reason"], "degraded");
    }
}
