//! The little HTTP/1.1 both sides speak: one request per connection
//! (`Connection: close`), `GET /job/<id>?attempt=<n>`, and a status line
//! with a few headers back: `X-Drill-Reason` on a 503 (`degraded`,
//! `reject_deadline`), and the backend's figures for the job record
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

pub fn request(job: u64, attempt: u32) -> String {
    format!("GET /job/{job}?attempt={attempt} HTTP/1.1\r\nHost: backend\r\nConnection: close\r\n\r\n")
}

/// The job id and attempt of a request head.
pub fn parse_request(head: &str) -> anyhow::Result<(u64, u32)> {
    let line = head.lines().next().unwrap_or_default();
    let target = line.strip_prefix("GET /job/").and_then(|rest| rest.split(' ').next()).context("not a job request")?;
    let (id, attempt) = target.split_once("?attempt=").context("no attempt")?;
    Ok((id.parse().context("job id")?, attempt.parse().context("attempt")?))
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
        let reason = if self.status == 200 { "OK" } else { "Service Unavailable" };
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
        assert_eq!(parse_request(&request(1234, 2)).unwrap(), (1234, 2));
        assert!(parse_request("GET / HTTP/1.1\r\n\r\n").is_err());
        let response = Response::new(503).header("Retry-After", 2).header("X-Drill-Reason", "degraded");
        let parsed = Response::parse(&response.to_wire()).unwrap();
        assert_eq!(parsed.status, 503);
        assert_eq!(parsed.number("retry-after"), Some(2.0));
        assert_eq!(parsed.headers["x-drill-reason"], "degraded");
    }
}
