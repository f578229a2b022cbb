//! The listener. One task per connection, so a slow or idle client holds up
//! nobody else; each request is one short call on the owner task.
//!
//! * Lines are at most [`MAX_LINE`] bytes ([`MAX_ADMIN_LINE`] from an
//!   admin, whose `set_rules` may carry every CIDR rule the maps hold): a
//!   longer one is answered `too_long`, the rest of it is skipped, and the
//!   connection goes on.
//! * A client idle for [`IDLE_TIMEOUT`], or that does not take its answer
//!   within [`WRITE_TIMEOUT`], is disconnected.
//! * Configuration changes need root, the admin uid or the admin gid
//!   (`SO_PEERCRED`); everything else is open to whoever can connect (the
//!   socket's mode and group decide who can).
//! * Trust: whoever can connect may push samples and so move the budgets of
//!   controlled classes. [`MAX_CONNECTIONS`] connections are open to anyone;
//!   [`ADMIN_RESERVED`] more are kept for admins, so that slow clients cannot
//!   lock the operator out; and each uid may push at most
//!   [`SAMPLES_PER_SECOND`] samples a second (bursts of [`SAMPLE_BURST`]).
//! * One daemon per socket: a lock file beside it (`<socket>.lock`) says who
//!   holds it, and a live socket is never replaced.

use std::{
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    net::{UnixListener, UnixStream},
    sync::Semaphore,
};
use tracing::{info, warn};

use crate::lock::LockError;

use super::{
    ops,
    protocol::{Access, Answer, ApiError, Changed, ErrorCode, MAX_LINE, Request},
    status::StatusCache,
};
use crate::{
    daemon::DaemonHandle,
    listen::AcceptErrors,
    lock::{ExclusiveLock, describe_process},
};

/// An idle connection is closed after this long.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A client that does not read its answer for this long is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are told `unavailable` and closed.
pub const MAX_CONNECTIONS: usize = 1024;
/// Connections kept for admins beyond [`MAX_CONNECTIONS`].
pub const ADMIN_RESERVED: usize = 16;
/// Longest request line from an admin: a `set_rules` with 4096 CIDR rules
/// per address family is about 400 KiB.
pub const MAX_ADMIN_LINE: usize = 1024 * 1024;
/// Samples each uid may push per second, sustained.
pub const SAMPLES_PER_SECOND: f64 = 2000.0;
/// Samples each uid may push at once.
pub const SAMPLE_BURST: f64 = 20_000.0;

/// Who may change the configuration (besides root).
#[derive(Clone, Debug, Default)]
pub struct AccessPolicy {
    pub admin_uid: Option<u32>,
    pub admin_gid: Option<u32>,
}

impl AccessPolicy {
    pub fn allows(&self, access: Access, uid: u32, gid: u32) -> bool {
        match access {
            Access::Read | Access::Feed => true,
            Access::Admin => self.is_admin(uid, gid),
        }
    }

    pub fn is_admin(&self, uid: u32, gid: u32) -> bool {
        uid == 0 || self.admin_uid == Some(uid) || self.admin_gid == Some(gid)
    }
}

/// A bound control socket; removes its file when dropped (if it is still ours).
pub struct ControlSocket {
    listener: Option<UnixListener>,
    path: PathBuf,
    /// (device, inode) of the file we created, so we never remove another's.
    identity: (u64, u64),
    /// `<socket>.lock`, held while the socket is ours.
    _lock: ExclusiveLock,
}

/// Why the control socket could not be bound. Nothing is left behind.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another daemon holds the socket's lock.
    #[error(transparent)]
    Locked(#[from] LockError),
    #[error("{} exists and is not a socket; not replacing it", .0.display())]
    NotASocket(PathBuf),
    /// A process without the lock listens on it.
    #[error("{what} is in use by {holder}, which listens on it: {hint}")]
    InUse { what: String, holder: String, hint: &'static str },
    #[error("giving {} to group {gid}: {error}", path.display())]
    Group { path: PathBuf, gid: u32, error: std::io::Error },
    #[error("{step} {}: {error}", path.display())]
    Io { step: &'static str, path: PathBuf, error: std::io::Error },
}

impl ControlSocket {
    /// Binds `path` (creating its directory), mode 0600, or 0660 owned by
    /// `group` when given. A stale socket (its daemon died) is replaced; a
    /// live one, or one whose lock another process holds, is refused, naming
    /// that process.
    pub fn bind(path: &Path, group: Option<u32>) -> Result<Self, SocketError> {
        let io = |step: &'static str, at: &Path| {
            let at = at.to_path_buf();
            move |error| SocketError::Io { step, path: at, error }
        };
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
            && !dir.exists()
        {
            std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .map_err(io("opening to all (0755)", dir))?;
        }
        let what = format!("the control socket {}", path.display());
        let hint = "give each daemon its own --socket (the default is one per interface)";
        let mut lock_path = path.as_os_str().to_owned();
        lock_path.push(".lock");
        let lock = ExclusiveLock::acquire(Path::new(&lock_path), &what, hint)?;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt as _;
            if !meta.file_type().is_socket() {
                return Err(SocketError::NotASocket(path.to_path_buf()));
            }
            // A listener that holds no lock (an older shedder, another program).
            if let Ok(stream) = std::os::unix::net::UnixStream::connect(path) {
                let holder = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
                    .map_or_else(|_| "another process".into(), |cred| describe_process(cred.pid() as u32));
                return Err(SocketError::InUse { what, holder, hint });
            }
            std::fs::remove_file(path).map_err(io("removing stale socket", path))?;
        }
        // Nobody may connect before the mode is right: bind under a tight umask.
        // SAFETY: umask only swaps the process's file-creation mask.
        let old = unsafe { libc::umask(0o177) };
        let bound = std::os::unix::net::UnixListener::bind(path);
        unsafe { libc::umask(old) };
        let listener = bound.map_err(io("binding the control socket", path))?;
        if let Some(gid) = group {
            std::os::unix::fs::chown(path, None, Some(gid)).map_err(|error| SocketError::Group {
                path: path.to_path_buf(),
                gid,
                error,
            })?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
                .map_err(io("opening to the group (0660)", path))?;
        }
        let meta = std::fs::metadata(path).map_err(io("reading back", path))?;
        listener.set_nonblocking(true).map_err(io("making non-blocking", path))?;
        let listener = UnixListener::from_std(listener).map_err(io("registering with the runtime", path))?;
        Ok(Self { listener: Some(listener), path: path.to_path_buf(), identity: (meta.dev(), meta.ino()), _lock: lock })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves connections until the returned task is aborted (or the socket
    /// is dropped).
    pub fn serve(&mut self, handle: DaemonHandle, policy: AccessPolicy) -> tokio::task::JoinHandle<()> {
        let listener = self.listener.take().expect("serve is called once");
        info!(path = %self.path.display(), "control socket listening");
        tokio::spawn(serve(listener, handle, Arc::new(policy)))
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.path)
            && (meta.dev(), meta.ino()) == self.identity
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

async fn serve(listener: UnixListener, handle: DaemonHandle, policy: Arc<AccessPolicy>) {
    let anyone = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let admins = Arc::new(Semaphore::new(ADMIN_RESERVED));
    let samples = Arc::new(SampleLimits::default());
    let status = Arc::new(StatusCache::default());
    let mut errors = AcceptErrors::new("control socket");
    loop {
        let mut stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                errors.failed(&e).await;
                continue;
            }
        };
        errors.succeeded();
        let Ok(cred) = stream.peer_cred() else { continue };
        let admin = policy.is_admin(cred.uid(), cred.gid());
        let permit = match anyone.clone().try_acquire_owned() {
            Ok(permit) => Ok(permit),
            Err(_) if admin => admins.clone().try_acquire_owned(),
            Err(e) => Err(e),
        };
        let Ok(permit) = permit else {
            let busy = ApiError::new(ErrorCode::Unavailable, "too many connections; try again").encode();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&busy)).await;
            });
            continue;
        };
        let shared =
            Shared { handle: handle.clone(), policy: policy.clone(), samples: samples.clone(), status: status.clone() };
        tokio::spawn(async move {
            let _permit = permit;
            let peer = Peer { uid: cred.uid(), gid: cred.gid(), admin };
            if let Err(e) = connection(stream, peer, &shared).await {
                tracing::debug!("control connection ended: {e}");
            }
        });
    }
}

/// What every connection uses.
struct Shared {
    handle: DaemonHandle,
    policy: Arc<AccessPolicy>,
    samples: Arc<SampleLimits>,
    status: Arc<StatusCache>,
}

/// Who is on the other end.
#[derive(Clone, Copy)]
struct Peer {
    uid: u32,
    gid: u32,
    admin: bool,
}

/// A token bucket of pushed samples per uid.
#[derive(Default)]
struct SampleLimits {
    buckets: std::sync::Mutex<std::collections::HashMap<u32, (f64, tokio::time::Instant)>>,
}

impl SampleLimits {
    /// Takes `n` samples from `uid`'s allowance; false (taking nothing) when
    /// they would go over it.
    fn take(&self, uid: u32, n: usize) -> bool {
        let now = tokio::time::Instant::now();
        let mut buckets = self.buckets.lock().expect("sample limits lock");
        let (tokens, at) = buckets.entry(uid).or_insert((SAMPLE_BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * SAMPLES_PER_SECOND).min(SAMPLE_BURST);
        *at = now;
        if (n as f64) > *tokens {
            return false;
        }
        *tokens -= n as f64;
        true
    }
}

/// What reading one line gave.
enum Line {
    Complete(Vec<u8>),
    TooLong,
    Eof,
}

/// Reads up to the next newline, keeping at most `max` bytes; a longer
/// line is consumed to its end and reported as too long.
async fn read_line(reader: &mut BufReader<impl tokio::io::AsyncRead + Unpin>, max: usize) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if too_long || !line.is_empty() {
                if too_long { Line::TooLong } else { Line::Complete(line) }
            } else {
                Line::Eof
            });
        }
        let (chunk, found) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = found.unwrap_or(buf.len());
        reader.consume(used);
        if found.is_some() {
            return Ok(if too_long { Line::TooLong } else { Line::Complete(line) });
        }
    }
}

async fn connection(stream: UnixStream, peer: Peer, shared: &Shared) -> std::io::Result<()> {
    let max = if peer.admin { MAX_ADMIN_LINE } else { MAX_LINE };
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let line = match tokio::time::timeout(IDLE_TIMEOUT, read_line(&mut reader, max)).await {
            Ok(line) => line?,
            Err(_) => return Ok(()),
        };
        let answer = match line {
            Line::Eof => return Ok(()),
            Line::TooLong => {
                ApiError::new(ErrorCode::TooLong, format!("a request line is at most {max} bytes")).encode()
            }
            Line::Complete(line) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Line::Complete(line) => answer(&line, shared, peer).await,
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write.write_all(&answer)).await {
            Ok(result) => result?,
            Err(_) => return Ok(()),
        }
    }
}

async fn answer(line: &[u8], shared: &Shared, peer: Peer) -> Vec<u8> {
    let Peer { uid, gid, .. } = peer;
    let arrived = std::time::Instant::now();
    let request = match Request::parse(line) {
        Ok(request) => request,
        Err(e) => return e.encode(),
    };
    if let Request::Sample(batch) = &request
        && !shared.samples.take(uid, batch.samples.len())
    {
        return ApiError::new(
            ErrorCode::Unavailable,
            format!(
                "uid {uid} is pushing more than {SAMPLES_PER_SECOND} samples a second; this batch of {} was dropped",
                batch.samples.len()
            ),
        )
        .encode();
    }
    if !shared.policy.allows(request.access(), uid, gid) {
        return ApiError::new(
            ErrorCode::Refused,
            format!("uid {uid} (gid {gid}) may not change the configuration: root or the admin uid/gid only"),
        )
        .encode();
    }
    let mutating = request.access() == Access::Admin;
    let status = shared.status.clone();
    let result = shared.handle.call(move |daemon| ops::handle(daemon, request, &status, arrived)).await;
    match result {
        Ok(Ok(answer)) => {
            if mutating && let Answer::Changed(Changed { config_version }) = &answer {
                info!(uid, config_version, "configuration changed through the control socket");
            }
            answer.encode()
        }
        Ok(Err(e)) => {
            // As SIGHUP's refusals are: the log tells who tried what.
            if mutating {
                warn!(uid, "configuration change through the control socket refused, nothing changed: {e}");
            }
            e.encode()
        }
        Err(gone) => ApiError::new(ErrorCode::Unavailable, gone.to_string()).encode(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_uid_has_its_own_sample_allowance() {
        let limits = SampleLimits::default();
        let burst = SAMPLE_BURST as usize;
        assert!(limits.take(1000, burst), "a full burst at once");
        assert!(!limits.take(1000, burst / 2), "then nothing big until it refills");
        assert!(limits.take(1001, burst), "another uid is not held back");
        assert!(!limits.take(1002, burst + 1), "more than a burst is never taken");
    }
}
