//! What the daemon's two listeners (the control socket and /metrics) share:
//! how they survive running out of file descriptors.
//!
//! A failed `accept` (EMFILE, ENFILE, ENOBUFS) leaves the connection in the
//! backlog, so retrying at once fails again at once: that spins a core and
//! floods the log. [`AcceptErrors`] backs off instead, and logs one line per
//! [`LOG_EVERY`] with the count of the failures it did not log.

use std::time::{Duration, Instant};

use tracing::warn;

/// First pause after a failed accept; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// At most one accept-failure line per listener this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The file descriptors the daemon asks for: enough for every connection
/// both listeners may hold, with room for its maps, programs and scrapes.
pub const WANTED_FILES: u64 = 8192;

/// One listener's accept failures.
pub struct AcceptErrors {
    listener: &'static str,
    backoff: Duration,
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptErrors {
    pub fn new(listener: &'static str) -> Self {
        Self { listener, backoff: MIN_BACKOFF, last_logged: None, unlogged: 0 }
    }

    /// An accept worked: the next failure starts from the shortest pause.
    pub fn succeeded(&mut self) {
        self.backoff = MIN_BACKOFF;
    }

    /// An accept failed: log (rate-limited), then pause before the next.
    pub async fn failed(&mut self, error: &std::io::Error) {
        if let Some(not_logged) = self.log_now(Instant::now()) {
            warn!(
                listener = self.listener,
                not_logged,
                "accept failed: {error}; backing off (further failures are counted, one line per {} s)",
                LOG_EVERY.as_secs()
            );
        }
        tokio::time::sleep(self.next_pause()).await;
    }

    /// Whether a failure at `now` is logged, with how many were not since.
    fn log_now(&mut self, now: Instant) -> Option<u64> {
        if self.last_logged.is_some_and(|at| now.duration_since(at) < LOG_EVERY) {
            self.unlogged += 1;
            return None;
        }
        self.last_logged = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }

    /// The pause before the next accept; the one after is twice as long.
    fn next_pause(&mut self) -> Duration {
        let pause = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        pause
    }
}

/// Raises the soft limit on open files to [`WANTED_FILES`] where the hard
/// limit allows (systemd's default soft limit is 1024); returns the limit
/// now in force.
pub fn raise_file_limit() -> nix::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let wanted = WANTED_FILES.min(hard);
    if soft < wanted {
        setrlimit(Resource::RLIMIT_NOFILE, wanted, hard)?;
        return Ok(wanted);
    }
    Ok(soft)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_to_a_second_and_log_once_per_interval() {
        let mut errors = AcceptErrors::new("test");
        let pauses: Vec<u128> = (0..9).map(|_| errors.next_pause().as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        errors.succeeded();
        assert_eq!(errors.next_pause(), MIN_BACKOFF);

        let start = Instant::now();
        let logged: Vec<Option<u64>> =
            [0, 1, 5, 9_999, 10_000, 10_001].map(|ms| errors.log_now(start + Duration::from_millis(ms))).into();
        assert_eq!(logged, [Some(0), None, None, None, Some(3), None]);
    }
}
